"""The command line on the reliability paths: forks reported as one line, damaged stores that
refuse to write and `repair`, foreign files, read-only commands beside `serve`, and no
traceback for damaged files, hostile arguments or Ctrl-C while closing.

The loss stories of the reliability issue run here end to end through the CLI (a restored
backup, a key in two stores, a damaged store then sync): every claim an honest write
acknowledged is active on every store afterwards, and the fork is reported.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import NamedTuple

import pytest

from statefuse.entry.cli import main
from statefuse.sync.replica import key_path
from tests.serving import served

ROOT = Path(__file__).resolve().parents[1]


class Run(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    def run(*argv: str) -> Run:
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return Run(code, out, err)

    return run


def _values(cli, path: Path) -> set[str]:
    shown = cli("--store", str(path), "--json", "show", "--all")
    assert shown.code == 0, shown.err
    return {json.dumps(c["value"]) for c in json.loads(shown.out)["claims"]}


def _init(cli, path: Path, *claims: str) -> None:
    assert cli("--store", str(path), "init", "--space", "team").code == 0
    for i, value in enumerate(claims):
        assert cli("--store", str(path), "claim", f"p/s{value}/v{i}", value).code == 0


def test_a_restored_backup_that_writes_then_syncs_keeps_everything_and_reports_the_fork(
    tmp_path, cli
):
    ours, peer, saved = tmp_path / "ours.db", tmp_path / "peer.db", tmp_path / "saved"
    saved.mkdir()
    _init(cli, ours, "1", "2")
    _init(cli, peer)
    for f in (ours, key_path(ours)):
        shutil.copy2(f, saved / f.name)
    assert cli("--store", str(ours), "claim", "p/late/v", "3").code == 0
    bundle = tmp_path / "b.bundle"
    assert cli("--store", str(ours), "export", str(bundle)).code == 0
    assert cli("--store", str(peer), "import", str(bundle)).code == 0
    for f in (ours, key_path(ours)):
        shutil.copy2(saved / f.name, f)
    assert cli("--store", str(ours), "claim", "p/after/v", "4").code == 0  # seq 3 again
    assert cli("--store", str(ours), "export", str(bundle)).code == 0
    imported = cli("--store", str(peer), "import", str(bundle))
    assert imported.code == 0
    assert re.search(
        r"^fork in author [0-9a-f]{12}… at seq 3: both branches kept$", imported.out, re.M
    )
    assert _values(cli, peer) == {"1", "2", "3", "4"}
    keys = cli("--store", str(peer), "keys")
    assert "forked at seq 3 (all branches kept)" in keys.out
    verified = cli("--store", str(peer), "verify")
    assert verified.code == 0 and "Warning: fork in author" in verified.err


def test_a_key_file_copied_to_a_second_store_is_refused_unless_adopted(tmp_path, cli):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _init(cli, a, "1")
    shutil.copy2(key_path(a), key_path(b))
    refused = cli("--store", str(b), "init", "--space", "team")
    assert refused.code == 1 and "belongs to another store" in refused.err
    assert "--adopt-key" in refused.err and "adopt_key" not in refused.err
    assert cli("--store", str(b), "--adopt-key", "init", "--space", "team").code == 0


def _flip(path: Path, pos: int) -> None:
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM changes WHERE pos = ?", (pos,)).fetchone()
    db.execute(
        "UPDATE changes SET data = ? WHERE pos = ?",
        (data[:50] + bytes([data[50] ^ 1]) + data[51:], pos),
    )
    db.commit()
    db.close()


def test_a_damaged_store_refuses_to_write_and_repair_from_a_peer_brings_everything_back(
    tmp_path, cli
):
    ours, peer = tmp_path / "ours.db", tmp_path / "peer.db"
    values = [str(i) for i in range(8)]
    _init(cli, ours, *values)
    _init(cli, peer, "100")
    bundle = tmp_path / "b.bundle"
    assert cli("--store", str(ours), "export", str(bundle)).code == 0
    assert cli("--store", str(peer), "import", str(bundle)).code == 0
    _flip(ours, 4)

    shown = cli("--store", str(ours), "show")
    assert shown.code == 0 and shown.err.startswith("Warning: the store is damaged: ")
    refused = cli("--store", str(ours), "claim", "p/x/v", "9")
    assert refused.code == 1 and refused.err.startswith("Error: the store is damaged: ")
    assert "statefuse repair" in refused.err
    # the healthy peer takes what the damaged store can still export and loses nothing
    assert cli("--store", str(ours), "export", str(bundle)).code == 0
    assert cli("--store", str(peer), "import", str(bundle)).code == 0
    assert _values(cli, peer) == {*values, "100"}

    with served(peer) as url:
        repaired = cli("--store", str(ours), "repair", "--from", url)
    assert repaired.code == 0, repaired.err
    assert "1 damaged change moved to quarantine, 4 changes waiting" in repaired.out
    assert _values(cli, ours) == {*values, "100"}
    assert cli("--store", str(ours), "claim", "p/x/v", "9").code == 0
    assert cli("--store", str(ours), "verify").code == 0
    assert "damaged in the store" in cli("--store", str(ours), "quarantine").out


def test_read_only_commands_and_writers_work_beside_a_running_serve(tmp_path, cli):
    path = tmp_path / "a.db"
    _init(cli, path, "1", "2")
    with served(path):
        assert _values(cli, path) == {"1", "2"}
        for command in (
            ["conflicts"],
            ["keys"],
            ["quarantine"],
            ["verify"],
            ["history", "p/s1/v0"],
        ):
            run = cli("--store", str(path), *command)
            assert run.code == 0, (command, run.err)
        ctx = cli("--store", str(path), "context", "--query", "s1")
        assert ctx.code == 0
        writer = cli("--store", str(path), "claim", "p/x/v", "3")  # writes beside the server
        assert writer.code == 0, writer.err
        assert _values(cli, path) == {"1", "2", "3"}


def test_foreign_files_are_refused_untouched(tmp_path, cli):
    foreign = tmp_path / "their.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE orders (id INTEGER)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    for argv in (["show"], ["claim", "a/b/c", "1"], ["init", "--space", "team"], ["verify"]):
        run = cli("--store", str(foreign), *argv)
        assert run.code == 1 and "not a StateFuse store" in run.err, (argv, run.err)
    assert foreign.read_bytes() == before and not key_path(foreign).exists()


def test_a_corrupt_page_is_one_error_line_never_a_traceback(tmp_path, cli):
    path = tmp_path / "a.db"
    _init(cli, path, *[str(i) for i in range(40)])
    size = path.stat().st_size
    with path.open("r+b") as f:  # clobber every page after the first
        f.seek(4096)
        f.write(bytes(range(256)) * ((size - 4096) // 256))
    for argv in (["show"], ["verify"], ["claim", "a/b/c", "1"], ["keys"], ["repair"]):
        run = cli("--store", str(path), *argv)
        assert run.code in (0, 1), (argv, run)
        assert run.err.startswith(("Error: ", "Warning: ")), (argv, run.err)


def test_a_value_nested_two_thousand_deep_is_a_user_error(tmp_path, cli):
    path = tmp_path / "a.db"
    _init(cli, path)
    deep = "[" * 2000 + "]" * 2000
    run = cli("--store", str(path), "claim", "a/b/c", deep)
    assert run.code == 1 and run.err.startswith("Error: ")


def test_ctrl_c_while_close_saves_its_snapshot_exits_130_and_keeps_the_write(
    tmp_path, cli, monkeypatch
):
    path = tmp_path / "a.db"
    _init(cli, path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("statefuse.sync.replica.encode_snapshot", interrupted)
    # no clean mark: the claim loads the history (a lean write saves no snapshot at close)
    Path(f"{path}.clean").unlink()
    run = cli("--store", str(path), "claim", "a/b/c", "kept")
    assert run.code == 130 and run.out.startswith("Added claim") and run.err == "Interrupted\n"
    monkeypatch.undo()
    assert _values(cli, path) == {'"kept"'}
    assert cli("--store", str(path), "verify").code == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["claim", "a/b/c", "x" * 2_000_000],
        ["claim", "a/b/c", "\udcff"],
        ["claim", "a" * 100_000 + "/b/c", "1"],
        ["claim", "a/b/c", "1", "--confidence", "nan"],
        ["claim", "a/b/c", "1", "--expires", "-5"],
        ["claim", "a/b/c", '{"a":' * 3000],
        ["context", "--query", "q", "--budget", "-1"],
        ["history", "a/b/c", "--scope", "\ud800"],
        ["decide", "ffffffff"],
    ],
    ids=lambda argv: f"{argv[0]}-{len(''.join(argv))}",
)
def test_hostile_arguments_are_one_error_line_and_change_nothing(tmp_path, cli, argv):
    path = tmp_path / "a.db"
    _init(cli, path, "1")
    before = _values(cli, path)
    run = cli("--store", str(path), *argv)
    assert run.code in (0, 1)
    if run.code:
        assert run.err.startswith("Error: ") and run.err.count("\n") == 1, run.err
    assert _values(cli, path) == before


def test_own_changes_from_another_store_are_one_warning_line_and_writing_follows_them(
    tmp_path, cli
):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _init(cli, a, "1", "2")
    shutil.copy2(key_path(a), key_path(b))
    assert cli("--store", str(b), "--adopt-key", "init", "--space", "team").code == 0
    bundle = tmp_path / "a.bundle"
    assert cli("--store", str(a), "export", str(bundle)).code == 0
    run = cli("--store", str(b), "--adopt-key", "import", str(bundle))
    assert run.code == 0
    assert run.err == (
        "Warning: 2 changes of this replica's own author arrived that this store did not write"
        " (a restored backup, a copied store, or its key used by another store); writing"
        " continues after seq 2\n"
    )
    assert cli("--store", str(b), "--adopt-key", "claim", "p/x/v", "3").code == 0
    assert cli("--store", str(b), "export", str(bundle)).code == 0
    run = cli("--store", str(a), "import", str(bundle))
    assert "fork" not in run.out  # b wrote seq 3 after a's seq 2: one feed, no fork


def test_a_refused_init_leaves_no_file_behind(tmp_path, cli):
    path = tmp_path / "a.db"
    run = cli("--store", str(path), "init", "--space", "x" * 300)  # longer than a space may be
    assert run.code == 1 and run.err.startswith("Error: ")
    assert list(tmp_path.iterdir()) == []
