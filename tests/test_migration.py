"""Stores of an earlier release open with the current code: migrated on their first writable open,
never changed by a read-only one, and never damaged by an open that fails.

The fixture (tests/fixtures/release-schema5.*) was written by the schema-5 release with
tests/fixtures/make_release_store.py; its JSON says what that script wrote (the claims, which it
retracted and how, the conflicts and the decision, the pending and the quarantined change).
tests/fixtures/release-schema6.* was written by the same script with the schema-6 release, whose
derived state had an earlier layout: its first writable open drops it and builds it again. Every
test works on a copy in ``tmp_path``, through the API and through the ``statefuse`` CLI run as a
real process; the ones that need a read-only or a full file system make one (tests/mounts.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mounts import ReadOnly, namespaces, need, on_tmpfs, remove, shared_dir

from statefuse.storage.store import SCHEMA_VERSION, StoreError
from statefuse.sync.replica import Replica

FIXTURES = Path(__file__).parent / "fixtures"
RELEASE = FIXTURES / "release-schema5"
WRITTEN: dict[str, Any] = json.loads(RELEASE.with_suffix(".json").read_text())
#: The store the schema-6 release wrote (its derived state built, in the layout of schema 6).
RELEASE_6 = FIXTURES / "release-schema6"
WRITTEN_6: dict[str, Any] = json.loads(RELEASE_6.with_suffix(".json").read_text())
ROOT = Path(__file__).resolve().parents[1]


def _copy(directory: Path, name: str = "release.sqlite", release: Path = RELEASE) -> Path:
    path = directory / name
    shutil.copyfile(f"{release}.sqlite", path)
    shutil.copyfile(f"{release}.sqlite.key", f"{path}.key")
    Path(f"{path}.key").chmod(0o600)
    return path


def _schema(path: Path, *, immutable: bool = False) -> int:
    """The schema version a reader sees (the -wal included), read without changing the file;
    ``immutable``: read the file alone, making no -wal or -shm beside it (the fixture itself)."""
    db = sqlite3.connect(f"file:{path}?mode=ro" + ("&immutable=1" if immutable else ""), uri=True)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        cwd=store.parent,
        timeout=300,
        check=False,
    )


def _cli_json(store: Path, *argv: str) -> Any:
    done = _cli(store, "--json", *argv)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _key_of(parts: list[str] | tuple[str, ...]) -> str:
    return "/".join(parts)


def _conflicts_written(written: dict[str, Any] = WRITTEN) -> set[tuple[str, str, tuple[str, ...]]]:
    return {(c["key"], c["scope"], tuple(sorted(c["values"]))) for c in written["conflicts"]}


# --- what the release wrote, checked on an open replica -----------------------------------------


def _check_replica_holds_what_was_written(
    rep: Replica, *, new: int = 0, written: dict[str, Any] = WRITTEN
) -> None:
    """``rep`` holds what the fixture's JSON says was written (and at most ``new`` changes more,
    which added no conflict)."""
    state = rep.state()
    for c in written["claims"]:
        cid = bytes.fromhex(c["id"])
        claim = state.claims[cid]
        assert (_key_of(claim.key), claim.scope, claim.value) == (c["key"], c["scope"], c["value"])
        assert claim.author.hex() == written["authors"][c["author"]]["id"]
        assert state.is_active(cid) is (c["status"] == "active"), c
    active = sum(c["status"] == "active" for c in written["claims"])
    assert active <= len(state.active_claims()) <= active + new
    values = {cid: c.value for cid, c in state.claims.items()}
    conflicts = {
        (_key_of(c.key), c.scope, tuple(sorted(str(values[i]) for i in c.candidates)))
        for c in state.conflicts
    }
    assert conflicts == _conflicts_written(written)
    (decided,) = written["decisions"]
    decision = next(d for d in state.decisions if d.op_id.hex() == decided["id"])
    conflict = next(c for c in state.conflicts if _key_of(c.key) == decided["key"])
    assert state.decision_for(conflict) == decision
    chosen = next(
        c["id"]
        for c in written["claims"]
        if c["key"] == decided["key"] and c["value"] == decided["value"]
    )
    assert state.decision_selects(decision, bytes.fromhex(chosen))
    assert [c.change_id.hex() for c in rep.pending()] == written["pending"]
    assert [r.key.hex() for r in rep.quarantine()] == [q["key"] for q in written["quarantine"]]
    for who in ("alice", "bob"):
        author = written["authors"][who]
        assert rep.author_name(bytes.fromhex(author["id"])) == author["name"]
    assert written["accepted_changes"] <= len(rep) <= written["accepted_changes"] + new


def test_the_json_describes_a_store_with_every_kind_of_row_a_release_writes():
    """The fixture's own bookkeeping, so that the tests below check something: a few dozen
    claims over several keys and scopes, each way of retracting, two conflicts, a decision, a
    multi-valued predicate, two named authors, one pending and one quarantined change."""
    claims = WRITTEN["claims"]
    assert len(claims) >= 30 and WRITTEN["schema"] == 5
    assert {c["retracted_by"] for c in claims if c["status"] == "retracted"} == {
        "update",
        "id",
        "ref",
    }
    assert len({c["scope"] for c in claims}) >= 3 and len({c["key"] for c in claims}) >= 20
    tags = [c for c in claims if c["key"] == "project/alpha/tag" and c["status"] == "active"]
    assert len(tags) >= 3 and WRITTEN["registry"] == {"many": ["tag"]}
    assert {c["author"] for c in claims} == {"alice", "bob"}
    assert len(WRITTEN["pending"]) == len(WRITTEN["quarantine"]) == 1
    assert Path(f"{RELEASE}.sqlite").stat().st_size < 200_000
    assert _schema(Path(f"{RELEASE}.sqlite"), immutable=True) == 5


def test_a_release_store_opened_writable_keeps_every_claim_and_takes_new_writes(tmp_path):
    path = _copy(tmp_path)
    pristine = _copy(tmp_path, "pristine.sqlite")
    reader = Replica.open(pristine, readonly=True)
    digest = reader.state().digest()
    reader.close()

    rep = Replica.open(path)
    assert _schema(path) == SCHEMA_VERSION  # migrated by the first writable open
    assert not rep.readonly and rep.damage is None
    assert rep.state().digest() == digest  # the same memory, whatever the layout
    _check_replica_holds_what_was_written(rep)
    new = rep.add_claim("project/omega/status", "started")
    rep.update("project/alpha/status", "shipped")
    rep.close()

    again = Replica.open(path)
    try:
        state = again.state()
        assert state.is_active(new.claim_id)
        status = [c.value for c in state.active_at("project", "alpha", "status", "global")]
        assert status == ["shipped"]
        assert len(again) == WRITTEN["accepted_changes"] + 2
        assert [c.change_id.hex() for c in again.pending()] == WRITTEN["pending"]
        assert len(again.quarantine()) == 1
    finally:
        again.close()
    assert _schema(path) == SCHEMA_VERSION


def test_a_release_store_opened_read_only_is_read_in_full_and_left_byte_for_byte(tmp_path):
    path = _copy(tmp_path)
    before = _digest(path)
    rep = Replica.open(path, readonly=True)
    try:
        assert rep.readonly
        _check_replica_holds_what_was_written(rep)
        with pytest.raises(StoreError) as err:
            rep.store.write_transaction().__enter__()
        assert err.value.rule == "readonly"
    finally:
        rep.close()
    assert _digest(path) == before and _schema(path) == 5


def _ix_locus_table(path: Path) -> str:
    """How the file declares the derived state's table of loci (its layout tells the schemas
    apart), read without changing the file."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'ix_locus'").fetchone()
        return str(sql)
    finally:
        db.close()


def test_a_schema_6_store_has_its_derived_state_built_again_in_the_current_layout(tmp_path):
    """The schema-6 release kept its derived state in an earlier layout (a locus row keyed by
    its hash): a read-only open leaves the file byte for byte and reads the history in full,
    not the old tables; the first writable open drops them, builds them again from the ops
    (watermark at the last position) and every later open reads the memory from them."""
    assert WRITTEN_6["schema"] == 6
    assert _schema(Path(f"{RELEASE_6}.sqlite"), immutable=True) == 6
    path = _copy(tmp_path, release=RELEASE_6)
    assert "locus BLOB PRIMARY KEY" in _ix_locus_table(path)
    before = _digest(path)
    with Replica.open(path, readonly=True) as rep:
        assert rep.loaded and rep.index is None
        _check_replica_holds_what_was_written(rep, written=WRITTEN_6)
        digest = rep.state().digest()
    assert _digest(path) == before and _schema(path) == 6

    with Replica.open(path) as rep:
        index = rep.index
        assert index is not None and index.upto == rep.store.last_position()
        assert rep.state().digest() == digest
        _check_replica_holds_what_was_written(rep, written=WRITTEN_6)
    assert _schema(path) == SCHEMA_VERSION

    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded  # opened on the derived state built above
        assert rep.state().digest() == digest
        _check_replica_holds_what_was_written(rep, written=WRITTEN_6)
    with Replica.open(path) as rep:
        new = rep.add_claim("project/omega/status", "started")
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded and rep.state().is_active(new.claim_id)
    assert "UNIQUE (namespace, subject, predicate, scope)" in _ix_locus_table(path)


def test_the_cli_reads_a_release_store_without_changing_it_then_migrates_it_on_a_write(tmp_path):
    path = _copy(tmp_path)
    before = _digest(path)
    active = {c["id"] for c in WRITTEN["claims"] if c["status"] == "active"}
    names = {a["id"]: a["name"] for a in WRITTEN["authors"].values()}

    def check_reads(extra: set[str]) -> None:
        shown = _cli_json(path, "show")["claims"]
        assert {c["claim_id"] for c in shown} == active | extra
        assert all(c["author_name"] == names[c["author"]] for c in shown)
        conflicts = _cli_json(path, "conflicts")["conflicts"]
        values = {c["claim_id"]: c["value"] for c in shown}
        seen = {
            (
                _key_of(c["key"]),
                c["scope"],
                tuple(sorted(values[i] for g in c["groups"] for i in g)),
            )
            for c in conflicts
        }
        assert seen == _conflicts_written()
        decided = [c["decision"]["op_id"] for c in conflicts if c["decision"] is not None]
        assert decided == [d["id"] for d in WRITTEN["decisions"]]
        quarantine = _cli_json(path, "quarantine")["quarantine"]
        assert [q["id"] for q in quarantine] == [q["key"] for q in WRITTEN["quarantine"]]
        verified = _cli_json(path, "verify")
        assert verified["ok"] and verified["problems"] == [] and verified["forks"] == []
        assert verified["changes"]["pending"] == 1 and verified["changes"]["quarantined"] == 1

    check_reads(set())
    assert _digest(path) == before and _schema(path) == 5  # reads change nothing

    done = _cli(path, "--json", "claim", "project/omega/status", "started")
    assert done.returncode == 0, done.stderr
    assert _schema(path) == SCHEMA_VERSION
    check_reads({json.loads(done.stdout)["claim_id"]})
    status = _cli_json(path, "status")
    assert status["changes"]["accepted"] == WRITTEN["accepted_changes"] + 1


# --- a first writable open that fails -----------------------------------------------------------


def _one_clear_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr
    return errors[0]


_OPEN_WRITABLE = """
import sys
import time
from statefuse.storage.store import StoreError
from statefuse.sync.replica import Replica
try:
    Replica.open(sys.argv[1]).close()
except StoreError as exc:
    print(exc.rule)
else:
    print("opened")
"""


def test_a_release_store_on_a_read_only_file_system_is_refused_for_writing_and_left_as_it_was():
    outer = shared_dir()
    try:
        home = outer / "ro"
        home.mkdir()
        home.chmod(0o755)
        path = _copy(home)
        before = _digest(path)
        fs = ReadOnly(home)
        try:
            line = _one_clear_error(fs.statefuse("--store", str(path), "claim", "k/s/p", "v"))
            assert "read-only" in line.lower(), line
            api = subprocess.run(
                fs.argv(sys.executable, "-c", _OPEN_WRITABLE, str(path)),
                capture_output=True,
                text=True,
                cwd=home,
                timeout=300,
                check=False,
                **fs.options(),
            )
            assert api.stdout.strip() == "readonly", api.stderr
            shown = fs.statefuse("--store", str(path), "--json", "show")  # reads still work
            assert shown.returncode == 0, shown.stderr
            assert len(json.loads(shown.stdout)["claims"]) == len(
                [c for c in WRITTEN["claims"] if c["status"] == "active"]
            )
        finally:
            fs.restore()
        assert _digest(path) == before and _schema(path) == 5
    finally:
        remove(outer)


_ON_A_FULL_DISK = """
import hashlib, json, shutil, subprocess, sys
fixture, home = sys.argv[1], sys.argv[2]
path = home + "/release.sqlite"
shutil.copyfile(fixture + ".sqlite", path)
shutil.copyfile(fixture + ".sqlite.key", path + ".key")
before = hashlib.sha256(open(path, "rb").read()).hexdigest()
def cli(*argv):
    return subprocess.run([sys.executable, "-m", "statefuse", "--store", path, *argv],
                          capture_output=True, text=True, cwd=home, timeout=300)
claim = cli("claim", "project/omega/status", "started")
verify = cli("--json", "verify")
print(json.dumps({
    "claim": [claim.returncode, claim.stderr],
    "verify": [verify.returncode, verify.stdout, verify.stderr],
    "same_bytes": hashlib.sha256(open(path, "rb").read()).hexdigest() == before,
}))
"""


def test_a_first_writable_open_on_a_full_disk_fails_clearly_and_loses_nothing(tmp_path):
    """The copy fills a tiny file system but for a few pages: whatever the first writable open
    writes (a migration, an index, the claim) runs out of room partway and is rolled back."""
    need("a tmpfs of its own", namespaces())
    pages = math.ceil(Path(f"{RELEASE}.sqlite").stat().st_size / 4096) + 1  # + the key file
    size = f"{(pages + 8) * 4}k"  # 32 KiB to spare
    home = tmp_path / "full"
    home.mkdir()
    done = subprocess.run(
        on_tmpfs(home, size, [sys.executable, "-c", _ON_A_FULL_DISK, str(RELEASE), str(home)]),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    returncode, stderr = result["claim"]
    line = _one_clear_error(subprocess.CompletedProcess([], returncode, "", stderr))
    assert "full" in line or "disk" in line, line
    verify_rc, verify_out, verify_err = result["verify"]
    assert verify_rc == 0, verify_err
    verified = json.loads(verify_out)
    assert verified["ok"] and verified["changes"]["accepted"] == WRITTEN["accepted_changes"]
    assert verified["claims"]["active"] == sum(c["status"] == "active" for c in WRITTEN["claims"])
    assert result["same_bytes"]


def test_a_first_writable_open_killed_at_any_moment_leaves_a_sound_store_that_lost_nothing(
    tmp_path,
):
    """``statefuse claim`` on a copy of the release store (its first writable open: whatever a
    migration does, then the claim) is killed with SIGKILL at eight moments spread over the time
    one such run takes here; every time the store verifies, holds what the release wrote, and
    the next writable open takes it to the current schema."""
    timing = _copy(tmp_path, "timing.sqlite")
    start = time.monotonic()
    done = _cli(timing, "claim", "project/omega/status", "started")
    assert done.returncode == 0, done.stderr
    took = time.monotonic() - start
    for trial in range(8):
        path = _copy(tmp_path, f"killed-{trial}.sqlite")
        proc = subprocess.Popen(
            [sys.executable, "-m", "statefuse", "--store", str(path), "claim", "k/s/p", "v"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=took * (trial + 1) / 8)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=300)
        with Replica.open(path, readonly=True, load="verify") as rep:
            assert rep.damage is None, trial
            _check_replica_holds_what_was_written(rep, new=1)
        with Replica.open(path) as rep:
            assert rep.damage is None and not rep.readonly, trial
        assert _schema(path) == SCHEMA_VERSION, trial
