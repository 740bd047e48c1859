"""Damaged stores are read-only until repaired; foreign files are refused; readers run beside a
writer (SEMANTICS §8, the reliability issue).

Damage is made the way disks and people make it: bytes of a stored change flipped in place, a
file truncated, a key file lost. A damaged replica never signs a change and never spreads what
it lost; `repair` keeps every change that verifies and quarantines (never deletes) the rest.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

import pytest

from statefuse.core.error import InputError
from statefuse.storage.store import StoreError
from statefuse.sync.replica import ReadOnlyError, Replica, StoreDamagedError, key_path

SPACE = "team"


def _store(path, claims: int = 30) -> Replica:
    r = Replica.open(path, create=True, space=SPACE)
    for i in range(claims):
        r.add_claim("p", f"s{i}", "v", i)
    return r


def _flip_row(path, pos: int) -> None:
    """Damage the stored bytes of accepted change ``pos`` in place (same length)."""
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM changes WHERE pos = ?", (pos,)).fetchone()
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    db.execute("UPDATE changes SET data = ? WHERE pos = ?", (bytes(bad), pos))
    db.commit()
    db.close()


def _values(r: Replica) -> set[object]:
    return {c.value for c in r.state().active_claims()}


def test_a_damaged_store_opens_read_only_and_never_signs(tmp_path):
    path = tmp_path / "a.db"
    peer = Replica.memory(space=SPACE)
    r = _store(path)
    peer.merge(r)
    r.close()
    _flip_row(path, 10)

    damaged = Replica.open(path)
    assert damaged.damage is not None and damaged.readonly
    assert damaged.damage.failed == 1 and damaged.damage.orphaned == 20
    assert "statefuse repair" in damaged.damage.describe()
    assert _values(damaged) == set(range(9))  # what verifies is readable
    with pytest.raises(StoreDamagedError) as err:
        damaged.add_claim("p", "new", "v", 1)
    assert (err.value.field, err.value.rule) == ("store", "store-damaged")
    assert isinstance(err.value, InputError)
    with pytest.raises(StoreDamagedError):
        damaged.receive(peer.all_change_bytes())
    with pytest.raises(StoreDamagedError):
        damaged.merge(peer)
    count = sqlite3.connect(path).execute("SELECT count(*) FROM changes").fetchone()[0]
    assert count == 30  # nothing written, nothing removed
    # a healthy peer that takes what the damaged one offers loses nothing
    before = _values(peer)
    peer.merge(damaged)
    assert _values(peer) == before == set(range(30))
    damaged.close()


def test_repair_quarantines_the_damage_parks_the_rest_and_a_peer_brings_it_all_back(tmp_path):
    path = tmp_path / "a.db"
    peer = Replica.memory(space=SPACE)
    r = _store(path)
    author = r.author
    peer.merge(r)
    r.close()
    _flip_row(path, 10)

    with Replica.open(path) as damaged:
        report = damaged.repair()
        assert (report.quarantined, report.parked, report.own_waiting) == (1, 20, 20)
        assert damaged.damage is None and not damaged.readonly
        (record,) = damaged.quarantine()
        assert "damaged in the store" in record.message
        assert len(damaged.pending()) == 20
        damaged.merge(peer)  # what `statefuse repair --from URL` does
        assert _values(damaged) == set(range(30)) and damaged.pending() == []
        damaged.add_claim("p", "after", "v", "repaired")
        assert damaged.last_change(author)[0] == 31  # after its real head: no fork
        assert damaged.forks() == []
    with Replica.open(path) as again:  # the repair is durable and the store verifies
        assert again.damage is None and "repaired" in _values(again)
        assert len(again.quarantine()) == 1


def test_a_snapshot_never_hides_damage(tmp_path):
    path = tmp_path / "a.db"
    r = _store(path, claims=80)
    r.snapshot()
    r.close()
    _flip_row(path, 3)
    with Replica.open(path) as damaged:
        assert damaged.damage is not None and damaged.restored == 0
        with pytest.raises(StoreDamagedError):
            damaged.add_claim("p", "x", "v", 1)


def test_a_store_without_its_key_file_opens_read_only_and_says_why(tmp_path):
    path = tmp_path / "a.db"
    r = _store(path, claims=3)
    digest = r.state().digest()
    r.close()
    key_path(path).unlink()
    with Replica.open(path) as keyless:
        assert keyless.readonly and keyless.damage is None
        assert keyless.state().digest() == digest
        with pytest.raises(ReadOnlyError) as err:
            keyless.add_claim("p", "x", "v", 1)
        assert err.value.rule == "no-key" and "key" in err.value.message


def test_foreign_files_are_refused_and_left_untouched(tmp_path):
    foreign = tmp_path / "their.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("INSERT INTO users VALUES ('ada')")
    db.commit()
    db.close()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    for path in (foreign, empty, text, tmp_path):
        before = path.read_bytes() if path.is_file() else None
        for create in (False, True):
            with pytest.raises(StoreError) as err:
                Replica.open(path, space=SPACE, create=create)
            assert err.value.rule == "not-a-store", path
        if before is not None:
            assert path.read_bytes() == before
        assert not key_path(path).exists()


def test_opening_a_missing_path_without_create_names_it_and_creates_nothing(tmp_path):
    path = tmp_path / "typo.db"
    with pytest.raises(StoreError) as err:
        Replica.open(path, space=SPACE)
    assert err.value.rule == "no-such-store" and str(path) in err.value.message
    assert list(tmp_path.iterdir()) == []


_WRITER = textwrap.dedent(
    """
    import sys
    from statefuse.sync.replica import Replica
    r = Replica.open(sys.argv[1])
    print("ready", flush=True)
    for i in range(int(sys.argv[2])):
        with r.batch():
            for j in range(20):
                r.add_claim("p", f"w{i}", f"v{j}", j)
    r.close()
    print("done", flush=True)
    """
)


def test_read_only_opens_see_committed_state_beside_a_live_writer_process(tmp_path):
    path = tmp_path / "a.db"
    _store(path, claims=1).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), "150"], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
    seen = []
    try:
        while writer.poll() is None:
            with Replica.open(path, readonly=True) as reader:
                assert reader.damage is None
                seen.append(len(reader.state().active_claims()))
                with pytest.raises(ReadOnlyError):
                    reader.add_claim("p", "x", "v", 1)
    finally:
        assert writer.wait(timeout=120) == 0
    assert seen == sorted(seen) and len(seen) >= 2
    with Replica.open(path, readonly=True) as reader:
        assert len(reader.state().active_claims()) == 1 + 150 * 20
