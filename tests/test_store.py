"""The store contract, run against every store: one factory hook per implementation.

A factory returns ``(open, reopen)``: ``open()`` gives a fresh store, ``reopen(store)`` closes it
and opens the same storage again (for the in-memory store, "reopen" keeps the object: memory has
no life beyond the process, so only the durable store is tested across a real reopen).
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import MemoryStore, QuarantineRecord, StoreError, StoreInfo, StoreWrite


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


def test_publish_marks_are_kept_per_target_idempotently_across_reopen(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.published("SF_team") == set()
    store.mark_published("SF_team", [_cid(1), _cid(2)])
    store.mark_published("SF_team", [_cid(2), _cid(3)])
    store.mark_published("SF_other", [_cid(9)])
    store = reopen(store)
    assert store.published("SF_team") == {_cid(1), _cid(2), _cid(3)}
    assert store.published("SF_other") == {_cid(9)}
    store.close()


def test_snapshots_replace_each_other(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.load_snapshot() is None
    store.save_snapshot(3, b"one")
    store.save_snapshot(5, b"two")
    store = reopen(store)
    assert store.load_snapshot() == (5, b"two")


#: Each example opens SQLite stores: CI runs 400 (1,000 took over 7 s).
@settings(max_examples=min(settings.default.max_examples, 400))
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


def test_a_second_writer_waits_its_bound_for_the_write_lock_then_names_the_holder(tmp_path):
    import os

    first = SQLiteStore(tmp_path / "s.db")
    second = SQLiteStore(tmp_path / "s.db", wait=0.1)  # opening takes no lock for long
    try:
        with first.write_transaction():
            first.write(StoreWrite(accepted=((b"1" * 32, b"c1"),)))
            with pytest.raises(StoreError) as err:
                second.write(StoreWrite(accepted=((b"2" * 32, b"c2"),)))
            assert err.value.rule == "busy"
            assert str(os.getpid()) in str(err.value)
        second.write(StoreWrite(accepted=((b"2" * 32, b"c2"),)))  # free again
        assert [d for _, d in first.accepted()] == [b"c1", b"c2"]
    finally:
        first.close()
        second.close()


def test_a_file_that_is_not_a_store_is_refused_clearly(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are not the bytes of a database" * 100)
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "not-a-store"
    assert path.read_bytes().startswith(b"these are not")


def test_a_store_from_a_newer_release_is_refused(tmp_path):
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "schema-version"


# --- identity, binding and reads ----------------------------------------------------------------


def test_a_store_gets_a_random_id_at_initialize_and_keeps_it_across_reopen(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store_id = store.info().store_id
    assert len(store_id) == 16
    store = reopen(store)
    assert store.info().store_id == store_id
    other, _ = factory()
    other.initialize(INFO)
    assert other.info().store_id != store_id  # two stores, two ids
    assert other.info() == store.info()  # == compares what a store is for, not which one it is


def test_initialize_keeps_a_store_id_and_an_author_it_is_given(factory):
    store, reopen = factory()
    store.initialize(StoreInfo(space="team", store_id=b"\x07" * 16, author=b"\x0a" * 32))
    store = reopen(store)
    info = store.info()
    assert (info.store_id, info.author) == (b"\x07" * 16, b"\x0a" * 32)


def test_bind_records_an_author_once_and_never_changes_it(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.info().author is None
    first = store.bind(b"\x01" * 32)
    assert first.author == b"\x01" * 32 and first.store_id == store.info().store_id
    second = store.bind(b"\x02" * 32)  # another key: fine, but the record stays
    assert second.author == b"\x01" * 32
    store = reopen(store)
    assert store.info().author == b"\x01" * 32


def test_bind_needs_an_initialized_store_and_an_author(factory):
    store, _ = factory()
    with pytest.raises(StoreError) as err:
        store.bind(b"\x01" * 32)
    assert err.value.rule == "initialized"
    store.initialize(INFO)
    with pytest.raises(StoreError) as err:
        store.bind("not bytes")  # type: ignore[arg-type]
    assert err.value.field == "author"
    assert store.info().author is None


def test_pending_rows_pair_each_parked_change_with_its_id_in_id_order(factory):
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(pending=((_cid(5), b"c5"), (_cid(2), b"c2"))))
    store = reopen(store)
    assert store.pending_rows() == [(_cid(2), b"c2"), (_cid(5), b"c5")]
    assert store.pending() == [d for _, d in store.pending_rows()]


def test_reads_inside_a_read_transaction_see_the_store_and_it_nests(factory):
    store, _ = factory()
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    with store.read_transaction():
        with store.read_transaction():
            assert store.count() == 1
        assert [d for _, d in store.accepted()] == [b"c1"]
    store.write(StoreWrite(accepted=((_cid(2), b"c2"),)))  # writable again afterwards
    assert store.count() == 2 and not store.readonly


def test_a_write_transaction_keeps_its_writes_together_or_none_and_nests(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.last_position() == 0
    with store.write_transaction():
        store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
        with store.write_transaction():  # joins the outer one
            store.write(StoreWrite(accepted=((_cid(2), b"c2"),)))
        assert [d for _, d in store.accepted()] == [b"c1", b"c2"]  # seen inside
    last = store.last_position()
    assert last == max(p for p, _ in store.accepted())
    if isinstance(store, SQLiteStore):  # memory has no transactions to roll back
        with pytest.raises(RuntimeError), store.write_transaction():
            store.write(StoreWrite(accepted=((_cid(3), b"c3"),)))
            raise RuntimeError("the block fails")
    store = reopen(store)
    assert [d for _, d in store.accepted()] == [b"c1", b"c2"]
    assert store.last_position() == last


def test_data_version_moves_for_another_writers_commit_and_not_for_its_own(tmp_path):
    path = tmp_path / "s.db"
    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        first.initialize(INFO)
        seen = second.data_version()
        own = first.data_version()
        first.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
        assert first.data_version() == own  # its own write: nothing new to take in
        assert second.data_version() != seen  # another's commit: look again
        assert [d for _, d in second.accepted()] == [b"c1"]
        seen = second.data_version()
        assert second.data_version() == seen  # nothing committed since
    finally:
        first.close()
        second.close()
    assert MemoryStore().data_version() == MemoryStore().data_version()


def test_snapshot_position_names_what_the_snapshot_covers_without_loading_it(factory):
    store, reopen = factory()
    store.initialize(INFO)
    assert store.snapshot_position() is None
    store.save_snapshot(7, b"blob")
    store = reopen(store)
    assert store.snapshot_position() == 7


def test_a_sound_store_has_no_integrity_problems(factory):
    store, _ = factory()
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),), quarantined=(_rec(2),)))
    assert store.integrity_problems() == []


# --- repair ---------------------------------------------------------------------------------------


def _filled(factory):
    """A store with accepted changes 1..6, pending 7 and 8, quarantine 9 and a snapshot."""
    store, reopen = factory()
    store.initialize(INFO)
    store.write(StoreWrite(accepted=tuple((_cid(i), b"c%d" % i) for i in range(1, 7))))
    store.write(StoreWrite(pending=((_cid(7), b"c7"), (_cid(8), b"c8")), quarantined=(_rec(9),)))
    store.save_snapshot(6, b"snap")
    return store, reopen


def _everything(store):
    return (
        list(store.accepted()),
        list(store.accepted_ids()),
        store.pending_rows(),
        store.quarantine(),
        store.load_snapshot(),
        store.count(),
    )


def _damaged_rec(key: int, data: bytes, seen: int = 50) -> QuarantineRecord:
    return QuarantineRecord(_cid(key), data, "bad-signature", "damaged in the store", seen, seen)


def test_apply_repair_moves_rows_where_the_plan_says_and_drops_the_snapshot(factory):
    from statefuse.storage.store import RepairPlan

    store, reopen = _filled(factory)
    positions = {cid: pos for pos, cid in store.accepted_ids()}
    # change 3's bytes were refused once before: the repair's record merges into that one
    store.write(
        StoreWrite(quarantined=(QuarantineRecord(_cid(103), b"c3", "malformed", "", 5, 5),))
    )
    plan = RepairPlan(
        quarantine_accepted=((positions[_cid(3)], _damaged_rec(103, b"c3", seen=70)),),
        park=((positions[_cid(4)], _cid(4)), (positions[_cid(5)], _cid(5))),
        quarantine_pending=((_cid(8), _damaged_rec(108, b"c8")),),
    )
    store.apply_repair(plan)
    store = reopen(store)
    assert list(store.accepted()) == [(positions[_cid(i)], b"c%d" % i) for i in (1, 2, 6)]
    assert store.pending_rows() == [(_cid(4), b"c4"), (_cid(5), b"c5"), (_cid(7), b"c7")]
    by_key = {r.key: r for r in store.quarantine()}
    assert set(by_key) == {_cid(9), _cid(103), _cid(108)}
    merged = by_key[_cid(103)]  # first verdict kept, sightings counted
    assert (merged.data, merged.reason, merged.count) == (b"c3", "malformed", 2)
    assert (merged.first_seen_ms, merged.last_seen_ms) == (5, 70)
    assert by_key[_cid(108)].data == b"c8" and by_key[_cid(108)].reason == "bad-signature"
    assert store.load_snapshot() is None
    assert store.count() == 3
    # positions are never handed out twice: a new change goes after the highest ever used
    store.write(StoreWrite(accepted=((_cid(20), b"c20"),)))
    assert list(store.accepted())[-1][0] > max(positions.values())


@pytest.mark.parametrize(
    "bad",
    [
        "missing-position",
        "position-twice",
        "missing-pending",
        "record-without-the-row-bytes",
    ],
)
def test_a_repair_plan_that_does_not_match_the_store_writes_nothing(factory, bad):
    from statefuse.storage.store import RepairPlan

    store, reopen = _filled(factory)
    before = _everything(store)
    positions = [p for p, _ in store.accepted_ids()]
    good_first = ((positions[0], _damaged_rec(101, b"c1")),)  # valid, and applied first
    plan = {
        "missing-position": RepairPlan(good_first, park=((999, _cid(999)),)),
        "position-twice": RepairPlan(good_first, park=((positions[0], _cid(1)),)),
        "missing-pending": RepairPlan(
            good_first, quarantine_pending=((_cid(42), _damaged_rec(42, b"x")),)
        ),
        "record-without-the-row-bytes": RepairPlan(
            (*good_first, (positions[1], _damaged_rec(102, b"not c2")))
        ),
    }[bad]
    with pytest.raises(StoreError) as err:
        store.apply_repair(plan)
    assert (err.value.field, err.value.rule) == ("plan", "repair-plan")
    assert _everything(store) == before
    store = reopen(store)
    assert _everything(store) == before


def _content(store):
    """What two stores must agree on (positions are each store's own)."""
    return (
        [d for _, d in store.accepted()],
        [c for _, c in store.accepted_ids()],
        store.pending_rows(),
        store.quarantine(),
        store.load_snapshot(),
    )


def _plan_for(store, quarantine_ids, park_ids, drop_pending_ids):
    from statefuse.storage.store import RepairPlan

    pos = {cid: p for p, cid in store.accepted_ids()}
    data = dict(store.accepted())
    # a change parked by this plan can be quarantined from the pending area by it too
    pending = {c: data[p] for c, p in pos.items()} | dict(store.pending_rows())
    return RepairPlan(
        quarantine_accepted=tuple(
            (pos[c], _damaged_rec(int.from_bytes(c, "big") + 100, data[pos[c]]))
            for c in quarantine_ids
        ),
        park=tuple((pos[c], c) for c in park_ids),
        quarantine_pending=tuple(
            (c, _damaged_rec(int.from_bytes(c, "big") + 200, pending[c])) for c in drop_pending_ids
        ),
    )


#: Each example repairs SQLite stores: CI runs 400 (1,000 took over 7 s).
@settings(max_examples=min(settings.default.max_examples, 400))
@given(
    writes=st.lists(
        st.tuples(st.sampled_from(["accept", "park", "refuse"]), st.integers(0, 8)), max_size=20
    ),
    where=st.lists(st.sampled_from(["quarantine", "park", "keep"]), min_size=9, max_size=9),
    drop_pending=st.sets(st.integers(0, 8)),
)
def test_memory_and_sqlite_stores_agree_after_any_repair(
    tmp_path_factory, writes, where, drop_pending
):
    memory = MemoryStore()
    durable = SQLiteStore(tmp_path_factory.mktemp("repair") / "s.db")
    try:
        for store in (memory, durable):
            store.initialize(INFO)
            for what, i in writes:
                pair = ((_cid(i), b"c%d" % i),)
                store.write(
                    {
                        "accept": StoreWrite(accepted=pair),
                        "park": StoreWrite(pending=pair),
                        "refuse": StoreWrite(quarantined=(_rec(i),)),
                    }[what]
                )
            store.save_snapshot(1, b"snap")
        accepted = [c for _, c in memory.accepted_ids()]
        pending = {c for c, _ in memory.pending_rows()}
        move_q = [c for c in accepted if where[int.from_bytes(c, "big")] == "quarantine"]
        move_p = [c for c in accepted if where[int.from_bytes(c, "big")] == "park"]
        drop = [_cid(i) for i in sorted(drop_pending) if _cid(i) in pending or _cid(i) in move_p]
        for store in (memory, durable):
            store.apply_repair(_plan_for(store, move_q, move_p, drop))
        assert _content(memory) == _content(durable)
        assert [c for _, c in memory.accepted_ids()] == [
            c for c in accepted if c not in move_q + move_p
        ]
        assert memory.load_snapshot() is None
    finally:
        durable.close()
