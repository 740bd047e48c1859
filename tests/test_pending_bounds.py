"""The pending area is bounded on every path, evicts what can never count first, reports every
eviction, and is never verified again when a store opens (issue 24, finding 5).

The flood tests drive a real ``statefuse serve`` subprocess on 127.0.0.1 and push raw changes to
it anonymously, as a stranger would: changes by fresh keys with seq 2 and a random ``prev``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.flood import flood_changes, push, served
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.storage.store import MemoryStore, StoreWrite
from statefuse.storage.writer import Writer
from statefuse.sync import (
    DEFAULT_BOUNDS,
    Bounds,
    Overflow,
    SigningKey,
    Status,
    sign_change,
)
from statefuse.sync.bundle import write_bundle
from statefuse.sync.changelog import ChangeLog
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
SPACE = "team"


def _cli(path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(path), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _feed(key: SigningKey, n: int, *, space: str = SPACE) -> list[bytes]:
    """``n`` changes of ``key``'s feed, seq 1 to n."""
    writer = Writer(key.author, clock=lambda: 1)
    out, prev = [], None
    for seq in range(1, n + 1):
        change = sign_change(
            key,
            space=space,
            seq=seq,
            prev=prev,
            registry=DEFAULT_REGISTRY.fingerprint,
            ops=[writer.claim("honest", f"s{seq}", "v", seq)],
        )
        prev = change.change_id
        out.append(change.data)
    return out


def _stranger(seq: int, *, space: str = SPACE, key: SigningKey | None = None) -> bytes:
    key = key or SigningKey.generate()
    op = Writer(key.author, clock=lambda: 1).claim("stranger", key.author.hex()[:8], "v", seq)
    return sign_change(
        key,
        space=space,
        seq=seq,
        prev=os.urandom(32),
        registry=DEFAULT_REGISTRY.fingerprint,
        ops=[op],
    ).data


def _pending_rows(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM pending").fetchone()[0])
    finally:
        db.close()


def _evicted(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(
            db.execute("SELECT total(changes) FROM evictions WHERE area = 'pending'").fetchone()[0]
        )
    finally:
        db.close()


def test_a_served_store_flooded_by_strangers_stays_bounded_reports_it_and_admits_an_honest_change(
    tmp_path, monkeypatch
):
    path = tmp_path / "served.db"
    assert _cli(path, "init", "--space", SPACE).returncode == 0
    honest = _feed(SigningKey.generate(), 3)
    late = tmp_path / "late.db"  # an honest peer whose pending change the flood evicts
    assert _cli(late, "init", "--space", SPACE).returncode == 0
    for value in ("a", "b"):
        assert _cli(late, "claim", f"late/{value}/v", value).returncode == 0
    with Replica.open(late, readonly=True) as r:
        late_feed = [c.data for c in sorted(r.log.changes(), key=lambda c: c.seq)]
    floods = [flood_changes(SPACE, 400) for _ in range(4)]
    bound = 300
    with served(path, "--max-pending", str(bound)) as (url, _):
        assert push(url, SPACE, [honest[0], honest[2]])["pending"] == 1  # seq 2 is late
        assert push(url, SPACE, [late_feed[1]])["pending"] == 1  # its seq 1 never came
        reports = [push(url, SPACE, f) for f in floods]
        assert _pending_rows(path) <= bound
        evicted = sum(r["evicted"] for r in reports)
        assert evicted == 2 + 1600 - bound  # (everything parked) - (what the bound keeps)
        # the honest change whose predecessor was late is still there, and counts now
        report = push(url, SPACE, [honest[1]])
        assert (report["accepted"], report["evicted"]) == (2, 0)
        # the late peer's evicted change comes back on its next sync: nothing acknowledged lost
        synced = _cli(late, "sync", url)
        assert synced.returncode == 0, synced.stderr
        assert "pushed 2" in synced.stdout
    assert _pending_rows(path) <= bound
    assert _evicted(path) == evicted
    shown = json.loads(_cli(path, "--json", "show").stdout)
    values = {c["value"] for c in shown["claims"]}
    assert {1, 2, 3, "a", "b"} <= values and not any(isinstance(v, int) and v > 3 for v in values)
    verified = _cli(path, "verify")
    assert verified.returncode == 0, verified.stdout
    assert f"pending {evicted}" in verified.stdout  # the evicted line names the count

    # Opening the store verifies none of the pending changes again: count what is verified.
    import statefuse.sync.changelog as changelog

    seen: list[bytes] = []
    verify_one, verify_many = changelog.verify_change, changelog.verify_changes

    def one(change, **kw):
        seen.append(change.data)
        return verify_one(change, **kw)

    def many(changes, **kw):
        seen.extend(c.data for c in changes)
        return verify_many(changes, **kw)

    monkeypatch.setattr(changelog, "verify_change", one)
    monkeypatch.setattr(changelog, "verify_changes", many)
    flood = {data for f in floods for data in f}
    with Replica.open(path, load="verify") as r:
        assert len(seen) == len(r.log) == 5  # only the accepted changes
        assert r.pending_count() == _pending_rows(path) > 0  # restored by index
        r.receive([_stranger(2)])  # the area in use: still not verified again
        assert not flood & set(seen)
        assert len(seen) == 6


def test_a_served_store_bounds_each_author_by_default(tmp_path):
    path = tmp_path / "served.db"
    assert _cli(path, "init", "--space", SPACE).returncode == 0
    key = SigningKey.generate()
    one_author = [_stranger(seq, key=key) for seq in range(2, 2 + 1200)]
    with served(path) as (url, _):
        reports = [push(url, SPACE, one_author[:600]), push(url, SPACE, one_author[600:])]
    assert DEFAULT_BOUNDS.pending_per_author == 1000
    assert _pending_rows(path) == 1000
    assert sum(r["evicted"] for r in reports) == 200 == _evicted(path)
    # the highest seqs went first: the lowest ones connect first when the gap closes
    with Replica.open(path, readonly=True) as r:
        seqs = sorted(c.seq for c in r.pending())
    assert seqs == list(range(2, 1002))


def test_in_a_closed_space_an_unknown_authors_pending_changes_are_evicted_before_a_members(
    tmp_path,
):
    path = tmp_path / "closed.db"
    with Replica.open(path, create=True, space=SPACE, mode="closed") as root:
        member = SigningKey.generate()
        root.admit(member.author)
    member_feed = _feed(member, 2)
    strangers = [SigningKey.generate() for _ in range(5)]
    exporter = SigningKey.generate()
    first, second, third = (tmp_path / f"{n}.bundle" for n in ("first", "second", "third"))
    # the member's seq 2 arrives first (it waits longest), then strangers' chains that have a
    # seq 1 (kept, never counted) and a seq 3 waiting: those can never count here
    write_bundle(first, exporter, SPACE, [member_feed[1]])
    write_bundle(
        second,
        exporter,
        SPACE,
        [_feed(s, 1)[0] for s in strangers] + [_stranger(3, key=s) for s in strangers],
    )
    write_bundle(third, exporter, SPACE, [member_feed[0]])
    assert _cli(path, "--max-pending", "3", "import", str(first)).returncode == 0
    imported = _cli(path, "--max-pending", "3", "import", str(second))
    assert imported.returncode == 0, imported.stderr
    assert "evicted here: 3" in imported.stdout
    with Replica.open(path, readonly=True) as r:
        waiting = {c.author for c in r.pending()}
    assert member.author in waiting and len(waiting) == 3
    done = _cli(path, "--max-pending", "3", "--json", "import", str(third))
    assert json.loads(done.stdout)["accepted"] == 2  # the member's seq 1 lets its seq 2 in


def test_a_log_evicts_by_standing_then_age_and_never_past_its_bounds():
    log = ChangeLog(SPACE, bounds=Bounds(pending_changes=3, overflow=Overflow.EVICT))
    known = _feed(SigningKey.generate(), 3)
    assert log.receive(known[0], seen_ms=0).status is Status.ACCEPTED
    assert log.receive(known[2], seen_ms=0).status is Status.PENDING  # oldest, but known
    flood = [_stranger(2) for _ in range(5)]
    receipts = [log.receive(data, seen_ms=1) for data in flood]
    assert log.pending_count() == 3
    assert sum(len(r.evicted) for r in receipts) == 3
    assert log.receive(known[1], seen_ms=2).status is Status.ACCEPTED
    assert len(log) == 3 and log.pending_count() == 2
    evictions = log.take_evicted()
    assert [e.standing.value for e in evictions] == ["unconnected"] * 3  # type: ignore[union-attr]


def test_a_receive_that_evicts_and_then_fails_leaves_the_pending_area_and_the_store_as_before():
    class Failing(MemoryStore):
        fail = False

        def write(self, batch: StoreWrite) -> int:
            if self.fail:
                raise OSError("disk full")
            return super().write(batch)

    r = Replica.memory(space=SPACE, bounds=Bounds(pending_changes=2, overflow=Overflow.EVICT))
    store = Failing()
    store.initialize(r.store.info())  # type: ignore[arg-type]
    r = Replica(store, r.key, bounds=r.bounds)
    r.receive([_stranger(2), _stranger(2)])
    before = (r.log.pending_ids(), store.pending_rows(), store.evictions())
    store.fail = True
    with pytest.raises(OSError):
        r.receive([_stranger(2), _stranger(2)])
    assert (r.log.pending_ids(), store.pending_rows(), store.evictions()) == before
    store.fail = False
    report = r.receive([_stranger(2)])
    assert report.evicted == 1 and r.log.pending_count() == 2
    assert [t.changes for t in store.evictions()] == [1]


def test_a_bound_option_that_is_not_a_positive_integer_is_one_error_line(tmp_path):
    path = tmp_path / "s.db"
    assert _cli(path, "init", "--space", SPACE).returncode == 0
    bad = _cli(path, "--max-pending", "0", "claim", "a/b/c", "1")
    assert bad.returncode == 1 and bad.stderr.strip() == "Error: --max-pending is an integer >= 1"


def test_the_quarantine_keeps_its_newest_entries_within_its_bound_and_counts_the_rest(tmp_path):
    bounds = Bounds(quarantine_entries=5, overflow=Overflow.EVICT)
    with Replica.open(tmp_path / "q.db", create=True, space=SPACE, bounds=bounds) as r:
        garbage = [f"not a change {i}".encode() for i in range(20)]
        reports = [r.receive(garbage[:12]), r.receive(garbage[12:])]
        assert {q.data for q in r.quarantine()} == set(garbage[-5:])
        assert sum(rep.evicted for rep in reports) == 15
        (tally,) = r.store.evictions()
        assert (tally.area, tally.author, tally.changes) == ("quarantine", b"", 15)
        assert len(r.log.quarantine) <= 5


def test_pending_rows_of_an_earlier_release_are_verified_once_then_restored_by_their_index(
    tmp_path, monkeypatch
):
    path = tmp_path / "old.db"
    with Replica.open(path, create=True, space=SPACE) as r:
        r.receive([_stranger(2) for _ in range(3)])
    db = sqlite3.connect(path)
    with db:  # as a release before the index stored them
        db.execute("UPDATE pending SET author = NULL, seq = NULL, prev = NULL")
    db.close()
    import statefuse.sync.changelog as changelog

    counted: list[int] = []
    verify_one = changelog.verify_change

    def one(change, **kw):
        counted.append(1)
        return verify_one(change, **kw)

    monkeypatch.setattr(changelog, "verify_change", one)
    with Replica.open(path, load="verify") as r:
        assert r.pending_count() == 3 and len(counted) == 3  # verified once, index stored
    counted.clear()
    with Replica.open(path, load="verify") as r:
        assert r.pending_count() == 3 and counted == []


def test_a_damaged_pending_row_fails_verify_and_repair_quarantines_it(tmp_path):
    path = tmp_path / "s.db"
    assert _cli(path, "init", "--space", SPACE).returncode == 0
    with Replica.open(path) as r:
        r.receive([_stranger(2), _stranger(2)])
    db = sqlite3.connect(path)
    with db:
        (cid, data) = db.execute("SELECT change_id, data FROM pending LIMIT 1").fetchone()
        flipped = bytearray(data)
        flipped[-5] ^= 0x01  # inside the signature
        db.execute("UPDATE pending SET data = ? WHERE change_id = ?", (bytes(flipped), cid))
    db.close()
    checked = _cli(path, "verify")
    assert checked.returncode == 1 and "a pending change fails verification" in checked.stdout
    repaired = _cli(path, "repair")
    assert repaired.returncode == 0 and "1 damaged change moved to quarantine" in repaired.stdout
    assert _cli(path, "verify").returncode == 0
    with Replica.open(path, readonly=True) as r:
        assert r.pending_count() == 1 and len(r.quarantine()) == 1


_HONEST = _feed(SigningKey.from_seed(b"\x07" * 32), 6)
_FLOOD = [_stranger(2, key=SigningKey.from_seed(bytes([0x20 + i]) * 32)) for i in range(8)]


@settings(max_examples=min(settings.default.max_examples, 200), deadline=None)
@given(st.permutations(range(len(_HONEST) - 1 + len(_FLOOD))), st.integers(1, 4))
def test_a_flood_never_passes_the_bound_and_a_resending_peer_loses_nothing(order, bound):
    log = ChangeLog(SPACE, bounds=Bounds(pending_changes=bound, overflow=Overflow.EVICT))
    log.receive(_HONEST[0], seen_ms=0)  # the honest author is known
    arrivals = _HONEST[1:] + _FLOOD
    for i in order:
        log.receive(arrivals[i], seen_ms=i)
        assert log.pending_count() <= bound
    for data in _HONEST:  # the peer's next sync sends what is missing, predecessors first
        log.receive(data, seen_ms=99)
    honest_ids = {ChangeLog(SPACE).receive(d, seen_ms=0).change_id for d in _HONEST}
    assert honest_ids <= set(log.change_ids())
    assert set(log.change_ids()) == honest_ids  # no stranger's change was ever accepted
