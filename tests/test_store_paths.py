"""Two paths to one store are one store: the write lock, the author key and a rebuild follow
the file itself (the path resolved: symlinks, ``..``, relative parts), not the path as typed
(`statefuse.storage.sqlitestore.lock_path`, `statefuse.sync.replica.key_path`).

Driven with real processes: a `statefuse serve` serves the store at its real path while CLI
writers write through other paths beside it; an API writer holds the write lock through one
path while a writer through another waits for it and, past its bound, is refused with the
usual ``busy`` error, nothing written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from statefuse.storage.sqlitestore import SQLiteStore, lock_path
from statefuse.sync.replica import Replica, key_path
from tests.serving import served_process

ROOT = Path(__file__).resolve().parents[1]


def _statefuse(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.fixture
def linked(tmp_path: Path) -> tuple[Path, Path]:
    """``real/a.db``, a store with one claim, and ``link/a.db``, a symlink to it."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    real = tmp_path / "real" / "a.db"
    made = _statefuse("--store", str(real), "init", "--space", "team")
    assert made.returncode == 0, made.stderr
    assert _statefuse("--store", str(real), "claim", "p/s/first", "1").returncode == 0
    link = tmp_path / "link" / "a.db"
    link.symlink_to(Path("..") / "real" / "a.db")
    return real, link


@contextmanager
def _serving(path: Path) -> Iterator[subprocess.Popen[str]]:
    """`statefuse serve` on ``path``: a CLI process that holds the store open (its first line
    is printed once the store is open)."""
    with served_process(path, "--port", "0") as (_, proc):
        yield proc


def _values(path: Path) -> list[str]:
    """The values of the store's active claims, read without a lock."""
    shown = _statefuse("--store", str(path), "--json", "show")
    assert shown.returncode == 0, shown.stderr
    return sorted(json.dumps(c["value"]) for c in json.loads(shown.stdout)["claims"])


def test_writers_through_a_symlink_write_beside_a_served_store_into_the_one_file(linked):
    real, link = linked
    with _serving(real):
        written = _statefuse("--store", str(link), "claim", "p/s/second", "2")
        assert written.returncode == 0, written.stderr
        # `..` and a relative path name the same file, and the same lock
        dotted = real.parent / ".." / "link" / ".." / "real" / "a.db"
        again = _statefuse("--store", str(dotted), "claim", "p/s/third", "3")
        assert again.returncode == 0, again.stderr
        relative = _statefuse("--store", "a.db", "claim", "p/s/fourth", "4", cwd=link.parent)
        assert relative.returncode == 0, relative.stderr
        assert _values(real) == ["1", "2", "3", "4"]
    verified = _statefuse("--store", str(link), "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


_API_WRITER = textwrap.dedent(
    """
    import sys
    from statefuse.sync.replica import Replica
    rep = Replica.open(sys.argv[1])
    with rep.batch():  # holds the store's write lock until the block ends
        rep.add_claim("p/s/api", "3")
        print("holding", flush=True)
        sys.stdin.readline()
    rep.add_claim("p/s/api2", "4")
    rep.close()
    """
)


def test_an_api_writer_through_a_symlink_holds_off_a_cli_writer_at_the_real_path(linked):
    real, link = linked
    proc = subprocess.Popen(
        [sys.executable, "-c", _API_WRITER, str(link)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline() == "holding\n", proc.stderr.read() if proc.stderr else ""
        refused = _statefuse("--store", str(real), "--wait", "0.2", "claim", "p/s/cli", "5")
        assert refused.returncode == 1
        assert refused.stderr == (
            f"Error: {real} is busy: process {proc.pid} held its write lock past the 0.2 s"
            " wait (pass --wait SECONDS to wait longer)\n"
        )
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # one feed, no fork: the writer's seqs follow each other at the real path
    with Replica.open(real, readonly=True) as rep:
        mine = sorted(c.seq for c in rep.log.changes() if c.author == rep.author)
        assert mine == list(range(1, len(mine) + 1))
        assert rep.forks() == []
    assert sorted(os.listdir(link.parent)) == ["a.db"]  # no lock or key file beside the link


def test_the_lock_and_the_key_of_a_symlinked_store_are_those_of_the_file(linked):
    real, link = linked
    assert lock_path(link) == lock_path(real) == Path(f"{real.resolve()}.lock")
    assert key_path(link) == Path(f"{real.resolve()}.key")
    assert key_path(real) == Path(f"{real}.key")  # a path without links stays as given
    with Replica.open(link) as rep:  # the key beside the file is found: it may write
        assert not rep.readonly
        rep.add_claim("p/s/linked", "6")


def test_a_key_kept_beside_a_symlink_is_still_found(linked):
    real, link = linked
    os.replace(f"{real}.key", f"{link}.key")
    assert key_path(link) == Path(f"{link}.key")
    with Replica.open(link) as rep:
        assert not rep.readonly


def test_a_rebuild_through_a_symlink_replaces_the_file_and_keeps_the_link(linked):
    real, link = linked
    store = SQLiteStore(link)
    try:
        aside = store.rebuild()
    finally:
        store.close()
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert aside.parent == real.resolve().parent and re.match(r"a\.db\.damaged-", aside.name)
    with Replica.open(link, readonly=True) as rep:
        assert [c.value for c in rep.state().active_claims()] == [1]


def test_a_writer_of_a_hard_linked_store_is_warned_in_one_line(linked):
    """A hard link cannot be joined to the lock (SQLite gives each name its own -wal): the
    writer says so, once, and still writes."""
    real, _ = linked
    second = real.with_name("b.db")
    os.link(real, second)
    written = _statefuse("--store", str(real), "claim", "p/s/third", "3")
    assert written.returncode == 0, written.stderr
    assert written.stderr == (
        f"Warning: {real} has 2 names (hard links): SQLite keeps a -wal per name and the lock"
        " holds only this one, so a writer through another name forks the store; remove the"
        " other names (copy a store, never link it) (hard-link)\n"
    )
    second.unlink()
    again = _statefuse("--store", str(real), "claim", "p/s/fourth", "4")
    assert again.returncode == 0 and again.stderr == ""
