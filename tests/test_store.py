"""The store contract, run against every store: one factory hook per implementation.

A factory returns ``(open, reopen)``: ``open()`` gives a fresh store, ``reopen(store)`` closes it
and opens the same storage again (for the in-memory store, "reopen" keeps the object: memory has
no life beyond the process, so only the durable store is tested across a real reopen).
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse.sqlitestore import SQLiteStore
from statefuse.store import MemoryStore, QuarantineRecord, StoreError, StoreInfo, StoreWrite


@pytest.fixture(params=["memory", "sqlite"])
def factory(request, tmp_path_factory):
    if request.param == "memory":

        def make():
            return MemoryStore(), lambda s: s

        return make

    def make_sqlite():
        path = tmp_path_factory.mktemp("store") / "s.db"

        def reopen(store):
            store.close()
            return SQLiteStore(path)

        return lambda: SQLiteStore(path), reopen

    def both():
        opener, reopen = make_sqlite()
        return opener(), reopen

    return both


INFO = StoreInfo(space="team", mode="open", root=None, registry=b"\x01" * 32)


def _cid(i: int) -> bytes:
    return i.to_bytes(32, "big")


def _rec(i: int, seen: int = 5) -> QuarantineRecord:
    return QuarantineRecord(_cid(i), b"bad%d" % i, "malformed", "garbage", seen, seen)


def test_a_new_store_has_no_info_until_initialized(factory):
    store, _ = factory()
    assert store.info() is None
    store.initialize(INFO)
    assert store.info() == INFO


def test_a_store_is_initialized_only_once(factory):
    store, _ = factory()
    store.initialize(INFO)
    with pytest.raises(StoreError) as err:
        store.initialize(StoreInfo(space="other"))
    assert err.value.rule == "initialized-once"
    assert store.info() == INFO


def test_accepted_changes_come_back_in_append_order_across_reopen(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(3), b"c3"), (_cid(1), b"c1"))))
    store.write(StoreWrite(accepted=((_cid(2), b"c2"),)))
    store = reopen(store)
    assert [d for _, d in store.accepted()] == [b"c3", b"c1", b"c2"]
    positions = [p for p, _ in store.accepted()]
    assert [d for _, d in store.accepted(after=positions[0])] == [b"c1", b"c2"]
    assert store.info() == INFO
    assert store.count() == 3


def test_re_appending_a_change_changes_nothing(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    store = reopen(store)
    assert [d for _, d in store.accepted()] == [b"c1"]


def test_a_pending_change_that_is_accepted_leaves_the_pending_area(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(pending=((_cid(2), b"c2"), (_cid(1), b"c1"))))
    assert store.pending() == [b"c1", b"c2"]
    store.write(StoreWrite(accepted=((_cid(2), b"c2"),)))
    store = reopen(store)
    assert store.pending() == [b"c1"]
    assert [d for _, d in store.accepted()] == [b"c2"]
    # parking an already accepted change does not resurrect it as pending
    store.write(StoreWrite(pending=((_cid(2), b"c2"),)))
    assert store.pending() == [b"c1"]


def test_quarantine_keeps_the_first_verdict_and_counts_sightings(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(quarantined=(_rec(1, seen=10),)))
    store.write(StoreWrite(quarantined=(_rec(1, seen=30), _rec(2, seen=20))))
    store = reopen(store)
    entries = store.quarantine()
    assert [e.key for e in entries] == [_cid(1), _cid(2)]
    first = entries[0]
    assert (first.first_seen_ms, first.last_seen_ms, first.count) == (10, 30, 2)
    assert first.data == b"bad1" and first.reason == "malformed"


def test_snapshots_replace_each_other(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.load_snapshot() is None
    store.save_snapshot(3, b"one")
    store.save_snapshot(5, b"two")
    store = reopen(store)
    assert store.load_snapshot() == (5, b"two")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["accept", "park", "refuse"]), st.integers(0, 6), st.integers(0, 3)
        ),
        max_size=25,
    )
)
def test_memory_and_sqlite_stores_agree_on_any_sequence_of_writes(tmp_path_factory, steps):
    memory = MemoryStore()
    path = tmp_path_factory.mktemp("agree") / "s.db"
    durable = SQLiteStore(path)
    try:
        for store in (memory, durable):
            store.initialize(INFO)
        for what, i, seen in steps:
            pair = ((_cid(i), b"c%d" % i),)
            batch = {
                "accept": StoreWrite(accepted=pair),
                "park": StoreWrite(pending=pair),
                "refuse": StoreWrite(quarantined=(_rec(i, seen),)),
            }[what]
            memory.write(batch)
            durable.write(batch)
        durable.close()
        durable = SQLiteStore(path)
        assert [d for _, d in memory.accepted()] == [d for _, d in durable.accepted()]
        assert memory.pending() == durable.pending()
        assert memory.quarantine() == durable.quarantine()
    finally:
        durable.close()


# --- the durable store only ---------------------------------------------------------------------


def test_a_write_that_fails_midway_leaves_nothing_behind(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    # the accepted rows are inserted before the broken quarantine record is reached
    broken = StoreWrite(accepted=((_cid(2), b"c2"),), quarantined=(_rec(5), None))  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        store.write(broken)
    assert [d for _, d in store.accepted()] == [b"c1"]
    assert store.quarantine() == []
    store.close()
    reopened = SQLiteStore(tmp_path / "s.db")
    assert [d for _, d in reopened.accepted()] == [b"c1"]
    reopened.close()


def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path):
    import os

    first = SQLiteStore(tmp_path / "s.db")
    try:
        with pytest.raises(StoreError) as err:
            SQLiteStore(tmp_path / "s.db")
        assert err.value.rule == "single-writer"
        assert str(os.getpid()) in str(err.value)
    finally:
        first.close()
    SQLiteStore(tmp_path / "s.db").close()  # free again once the first one closed


def test_a_file_that_is_not_a_store_is_refused_clearly(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are not the bytes of a database" * 100)
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "sqlite-store"
    assert path.read_bytes().startswith(b"these are not")


def test_a_store_from_a_newer_release_is_refused(tmp_path):
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "schema-version"
