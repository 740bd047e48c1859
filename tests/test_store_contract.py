"""The store contract: what every `Store` must do, written once and run on every backend.

The ``store_factory`` fixture is the one hook (tests/storecontract.py): it runs each test on
every factory of `storecontract.FACTORIES` (memory, and SQLite on a real file; a later backend
adds one factory). Where a backend legitimately does less (memory does not outlive the process,
has no transactions to roll back, and is never shared), its `Capabilities` say so and the test
checks the stronger behaviour where it is claimed and the weaker one where it is not.

The changes written are real signed changes (`storecontract.feeds`), and each test checks exact
positions, orders and whole states, so that a store that reorders, reuses a position, keeps a
failed batch in part or drops a row fails it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from storecontract import (
    FACTORIES,
    INFO,
    Change,
    StoreFactory,
    feeds,
    forged,
    refused,
)

from statefuse.storage.store import (
    EvictedRow,
    EvictionTally,
    PendingRow,
    QuarantineRecord,
    RepairPlan,
    Store,
    StoreError,
    StoreInfo,
    StoreWrite,
    merge_quarantine,
)

TARGETS = ("SF_contract", "SF_other")


@pytest.fixture(params=FACTORIES, ids=lambda factory: factory.name)
def store_factory(request, tmp_path):
    factory = request.param(tmp_path)
    yield factory
    factory.close_all()


def A(n: int) -> Change:  # the n-th change of alice's feed, as in a diagram
    return feeds().alice[n - 1]


def B(n: int) -> Change:
    return feeds().bob[n - 1]


def everything(store: Store) -> dict[str, Any]:
    """Every read of the contract, for comparing whole states."""
    return {
        "info": store.info(),
        "store_id": None if store.info() is None else store.info().store_id,
        "accepted": list(store.accepted()),
        "accepted_ids": list(store.accepted_ids()),
        "last_position": store.last_position(),
        "count": store.count(),
        "pending": store.pending(),
        "pending_rows": store.pending_rows(),
        "pending_index": store.pending_index(),
        "pending_unindexed": store.pending_unindexed(),
        "quarantine": store.quarantine(),
        "evictions": store.evictions(),
        "snapshot": store.load_snapshot(),
        "snapshot_position": store.snapshot_position(),
        "published": {t: store.published(t) for t in TARGETS},
    }


def filled(store_factory: StoreFactory) -> Store:
    """A store holding some of everything: accepted A1..A5 (positions 1..5), B2 parked with its
    index and B3 without, one quarantined forgery, a pending eviction, publish marks, a
    snapshot, an author and a creator."""
    store = store_factory()
    store.bind(A(1).author)
    store.pin_creator(A(1).author)
    store.write(StoreWrite(accepted=tuple(A(i).pair for i in range(1, 6))))
    store.write(StoreWrite(parked=(B(2).parked(),), pending=(B(3).pair,)))
    store.write(StoreWrite(quarantined=(refused(forged(A(1)), seen=10),)))
    store.write(StoreWrite(evicted=(EvictedRow(B(4).change_id, B(4).author, 600, 20),)))
    store.mark_published(TARGETS[0], [A(1).change_id, A(2).change_id])
    store.save_snapshot(5, b"snapshot of 1..5")
    return store


# --- info ---------------------------------------------------------------------------------------


def test_a_fresh_store_holds_its_info_and_nothing_else(store_factory):
    store = store_factory()
    info = store.info()
    assert info == INFO and len(info.store_id) == 16
    assert (info.author, info.creator, info.creator_unknown) == (None, None, False)
    assert not store.readonly
    empty = everything(store)
    del empty["info"], empty["store_id"]
    assert empty == {
        "accepted": [],
        "accepted_ids": [],
        "last_position": 0,
        "count": 0,
        "pending": [],
        "pending_rows": [],
        "pending_index": [],
        "pending_unindexed": [],
        "quarantine": [],
        "evictions": [],
        "snapshot": None,
        "snapshot_position": None,
        "published": {t: set() for t in TARGETS},
    }
    assert store.integrity_problems() == [] and store.integrity_problems(full=True) == []


def test_a_store_never_initialized_has_no_info_and_cannot_be_bound_or_pinned(store_factory):
    store = store_factory(info=None)
    assert store.info() is None
    for call in (lambda: store.bind(A(1).author), lambda: store.pin_creator(A(1).author)):
        with pytest.raises(StoreError) as err:
            call()
        assert err.value.rule == "initialized"
    assert store.info() is None
    store.initialize(INFO)
    assert store.info() == INFO


def test_a_store_is_initialized_once_and_keeps_its_id(store_factory):
    store = store_factory()
    before = store.info()
    with pytest.raises(StoreError) as err:
        store.initialize(StoreInfo(space="another"))
    assert err.value.rule == "initialized-once"
    after = store.info()
    assert after == before and after.store_id == before.store_id and after.space == "contract"


def test_initialize_keeps_a_store_id_and_an_author_it_is_given(store_factory):
    given = replace(INFO, store_id=b"\x07" * 16, author=A(1).author)
    info = store_factory(info=given).info()
    assert (info.store_id, info.author) == (b"\x07" * 16, A(1).author)


def test_every_new_store_gets_an_id_of_its_own(store_factory):
    ids = {store_factory().info().store_id for _ in range(3)}
    assert len(ids) == 3


def test_bind_records_the_first_author_and_never_changes_it(store_factory):
    store = store_factory()
    assert store.bind(A(1).author).author == A(1).author
    assert store.bind(B(1).author).author == A(1).author
    assert store.info().author == A(1).author
    for bad in (b"", "author", None):
        with pytest.raises(StoreError) as err:
            store.bind(bad)  # type: ignore[arg-type]
        assert err.value.rule == "author-bytes"
    assert store.info().author == A(1).author


def test_pin_creator_records_a_creator_or_none_and_ends_creator_unknown(store_factory):
    store = store_factory(info=replace(INFO, creator_unknown=True))
    pinned = store.pin_creator(B(1).author)
    assert (pinned.creator, pinned.creator_unknown) == (B(1).author, False)
    assert store.info().creator == B(1).author
    cleared = store.pin_creator(None)
    assert (cleared.creator, cleared.creator_unknown) == (None, False)
    assert store.info() == INFO  # creator is left out of ==, space and the rest unchanged


# --- accepted changes -----------------------------------------------------------------------------


def test_accepted_changes_take_positions_one_up_in_append_order(store_factory):
    store = store_factory()
    assert store.write(StoreWrite(accepted=(A(3).pair, A(1).pair))) == 0
    assert store.write(StoreWrite(accepted=(A(2).pair,))) == 0
    assert list(store.accepted()) == [(1, A(3).data), (2, A(1).data), (3, A(2).data)]
    assert list(store.accepted_ids()) == [
        (1, A(3).change_id),
        (2, A(1).change_id),
        (3, A(2).change_id),
    ]
    assert list(store.accepted(after=1)) == [(2, A(1).data), (3, A(2).data)]
    assert list(store.accepted_ids(after=2)) == [(3, A(2).change_id)]
    assert list(store.accepted(after=3)) == [] and list(store.accepted_ids(after=9)) == []
    assert (store.last_position(), store.count()) == (3, 3)


def test_re_appending_an_accepted_change_changes_nothing(store_factory):
    store = store_factory()
    store.write(StoreWrite(accepted=(A(1).pair,)))
    before = everything(store)
    assert store.write(StoreWrite(accepted=(A(1).pair,))) == 0
    assert everything(store) == before
    store.write(StoreWrite(accepted=(A(1).pair, A(2).pair)))
    (first, one), (second, two) = store.accepted_ids()
    assert (first, one, two) == (1, A(1).change_id, A(2).change_id)
    # the new one goes after every position used (SQLite spends one on each ignored copy:
    # positions only grow, they need not be dense)
    assert second > first and store.last_position() == second and store.count() == 2


def test_an_empty_write_changes_nothing_and_evicts_nothing(store_factory):
    store = filled(store_factory)
    before = everything(store)
    assert not StoreWrite()
    assert store.write(StoreWrite()) == 0
    assert everything(store) == before


# --- the pending area ---------------------------------------------------------------------------


def _by_id(*changes: Change) -> list[Change]:
    return sorted(changes, key=lambda c: c.change_id)


def test_pending_changes_come_back_sorted_by_id_and_one_by_one(store_factory):
    store = store_factory()
    store.write(StoreWrite(pending=(A(3).pair, A(2).pair, B(2).pair)))
    ordered = _by_id(A(3), A(2), B(2))
    assert store.pending() == [c.data for c in ordered]
    assert store.pending_rows() == [c.pair for c in ordered]
    assert store.pending_unindexed() == [
        PendingRow(c.change_id, c.data, size=len(c.data)) for c in ordered
    ]
    assert store.pending_index() == []
    assert store.pending_data(A(3).change_id) == A(3).data
    assert store.pending_data(A(4).change_id) is None
    assert store.count() == 0 and store.last_position() == 0


def test_parked_changes_keep_their_index_oldest_first_without_their_bytes(store_factory):
    store = store_factory()
    store.write(StoreWrite(parked=(A(3).parked(), B(2).parked())))
    store.write(StoreWrite(parked=(A(2).parked(),)))
    assert store.pending_index() == [
        PendingRow(c.change_id, None, c.author, c.seq, c.prev, len(c.data))
        for c in (A(3), B(2), A(2))
    ]
    assert store.pending_unindexed() == []
    assert store.pending_rows() == [c.pair for c in _by_id(A(3), B(2), A(2))]
    assert store.pending_data(B(2).change_id) == B(2).data


def test_a_pending_row_parked_again_gets_the_index_it_lacked(store_factory):
    store = store_factory()
    store.write(StoreWrite(pending=(A(2).pair, A(3).pair)))
    store.write(StoreWrite(parked=(A(2).parked(),)))
    assert store.pending_rows() == [c.pair for c in _by_id(A(2), A(3))]
    assert [r.change_id for r in store.pending_index()] == [A(2).change_id]
    assert [r.change_id for r in store.pending_unindexed()] == [A(3).change_id]


def test_a_change_accepted_leaves_the_pending_area_in_the_same_write(store_factory):
    store = store_factory()
    store.write(StoreWrite(pending=(A(3).pair,), parked=(A(2).parked(),)))
    store.write(StoreWrite(accepted=(A(1).pair, A(2).pair)))
    assert store.pending_rows() == [A(3).pair]
    assert store.pending_index() == [] and store.pending_data(A(2).change_id) is None
    assert list(store.accepted_ids()) == [(1, A(1).change_id), (2, A(2).change_id)]
    # an accepted change is never parked again, with or without an index
    store.write(StoreWrite(pending=(A(2).pair,), parked=(A(1).parked(),)))
    assert store.pending_rows() == [A(3).pair] and store.pending_index() == []


def test_evicted_pending_changes_leave_and_are_tallied_per_author(store_factory):
    store = store_factory()
    store.write(StoreWrite(parked=(A(2).parked(), A(3).parked(), B(2).parked())))
    store.write(
        StoreWrite(
            evicted=(
                EvictedRow(A(2).change_id, A(2).author, 593, 100),
                EvictedRow(B(2).change_id, B(2).author, 500, 50),
            )
        )
    )
    assert store.pending_rows() == [A(3).pair]
    # one evicted before it ever had a row (parked by the same batch) counts all the same
    store.write(StoreWrite(evicted=(EvictedRow(A(4).change_id, A(4).author, 7, 200),)))
    tallies = [
        EvictionTally("pending", A(2).author, 2, 600, 100, 200),
        EvictionTally("pending", B(2).author, 1, 500, 50, 50),
    ]
    assert store.evictions() == sorted(tallies, key=lambda t: (t.area, t.author))
    assert store.pending_rows() == [A(3).pair]


# --- the quarantine -----------------------------------------------------------------------------


def test_quarantine_keeps_the_first_verdict_and_counts_each_sighting(store_factory):
    store = store_factory()
    first = refused(forged(A(1)), seen=10)
    again = replace(refused(forged(A(1)), seen=30), reason="malformed", message="later")
    other = refused(forged(B(1)), seen=20)
    store.write(StoreWrite(quarantined=(first,)))
    store.write(StoreWrite(quarantined=(again, other)))
    merged = QuarantineRecord(first.key, first.data, "bad-signature", first.message, 10, 30, 2)
    assert merged == merge_quarantine(first, again)
    assert store.quarantine() == [merged, other]  # by first sight, then key
    assert store.count() == 0 and store.pending_rows() == []


def test_quarantine_bounds_evict_the_oldest_entries_and_tally_them(store_factory):
    store = store_factory()
    records = [refused(forged(A(i)), seen=10 * i) for i in (1, 2, 3)]
    for r in records:
        store.write(StoreWrite(quarantined=(r,)))
    newest = refused(forged(B(1)), seen=40)
    assert store.write(StoreWrite(quarantined=(newest,), quarantine_bounds=(2, None))) == 2
    assert store.quarantine() == [records[2], newest]
    evicted = len(records[0].data) + len(records[1].data)
    assert store.evictions() == [EvictionTally("quarantine", b"", 2, evicted, 40, 40)]
    # a byte bound: only the newest entry fits
    last = refused(forged(B(2)), seen=50)
    assert (
        store.write(StoreWrite(quarantined=(last,), quarantine_bounds=(None, len(last.data)))) == 2
    )
    assert store.quarantine() == [last]
    evicted += len(records[2].data) + len(newest.data)
    assert store.evictions() == [EvictionTally("quarantine", b"", 4, evicted, 40, 50)]


# --- publish marks and snapshots ----------------------------------------------------------------


def test_publish_marks_are_kept_per_target_and_idempotent(store_factory):
    store = store_factory()
    store.mark_published(TARGETS[0], [A(1).change_id, A(2).change_id])
    store.mark_published(TARGETS[0], [A(2).change_id, A(3).change_id])
    store.mark_published(TARGETS[1], iter([B(1).change_id]))
    marks = store.published(TARGETS[0])
    assert marks == {A(1).change_id, A(2).change_id, A(3).change_id}
    marks.clear()  # a copy: the store keeps its own
    assert len(store.published(TARGETS[0])) == 3
    assert store.published(TARGETS[1]) == {B(1).change_id}
    assert store.published("SF_never") == set()


def test_a_snapshot_replaces_the_one_kept_and_names_its_position(store_factory):
    store = store_factory()
    store.save_snapshot(3, b"one")
    store.save_snapshot(5, b"two")
    assert (store.load_snapshot(), store.snapshot_position()) == ((5, b"two"), 5)
    store.save_snapshot(2, b"older")  # the last one saved is kept, whatever it covers
    assert (store.load_snapshot(), store.snapshot_position()) == ((2, b"older"), 2)


# --- transactions ---------------------------------------------------------------------------------


def test_a_write_transaction_shows_its_writes_inside_keeps_them_and_nests(store_factory):
    store = store_factory()
    with store.write_transaction():
        store.write(StoreWrite(accepted=(A(1).pair,)))
        with store.write_transaction():  # joins the outer one
            store.write(StoreWrite(accepted=(A(2).pair,), pending=(B(2).pair,)))
            store.save_snapshot(2, b"snap")
        assert list(store.accepted_ids()) == [(1, A(1).change_id), (2, A(2).change_id)]
        assert store.pending_rows() == [B(2).pair]
    assert list(store.accepted_ids()) == [(1, A(1).change_id), (2, A(2).change_id)]
    assert (store.last_position(), store.load_snapshot()) == (2, (2, b"snap"))


def test_a_write_transaction_that_raises_keeps_none_of_its_writes(store_factory):
    store = filled(store_factory)
    before = everything(store)
    with pytest.raises(RuntimeError, match="the block fails"), store.write_transaction():
        store.write(StoreWrite(accepted=(A(6).pair,), parked=(A(7).parked(),)))
        store.mark_published(TARGETS[1], [A(6).change_id])
        raise RuntimeError("the block fails")
    if store_factory.capabilities.transactions:
        assert everything(store) == before
        next_position = 6
    else:  # each write inside was whole and stays; its owner reloads (what memory promises)
        assert list(store.accepted_ids())[-1] == (6, A(6).change_id)
        next_position = 7
    # either way the store goes on: the next change takes the next position
    store.write(StoreWrite(accepted=(A(8).pair,)))
    assert list(store.accepted_ids())[-1] == (next_position, A(8).change_id)


def test_a_batch_that_fails_partway_keeps_nothing_of_itself(store_factory):
    store = filled(store_factory)
    before = everything(store)
    # the accepted rows come first; the broken quarantine record is reached after them
    broken = StoreWrite(accepted=(A(6).pair,), quarantined=(refused(forged(A(6)), seen=5), None))  # type: ignore[arg-type]
    with pytest.raises((AttributeError, TypeError, StoreError)):
        store.write(broken)
    if store_factory.capabilities.transactions:
        assert everything(store) == before
    else:  # memory applies a batch item by item: what it kept is whole, and it still works
        kept = everything(store)
        assert kept["accepted"][:5] == before["accepted"]
        assert kept["pending_rows"] == before["pending_rows"]
    store.write(StoreWrite(accepted=(A(7).pair,)))
    assert list(store.accepted_ids())[-1][1] == A(7).change_id


def test_reads_in_a_read_transaction_see_one_state_and_it_nests(store_factory):
    store = filled(store_factory)
    before = everything(store)
    with store.read_transaction():
        with store.read_transaction():
            assert everything(store) == before
        assert store.count() == 5
    store.write(StoreWrite(accepted=(A(6).pair,)))  # writable again afterwards
    assert store.count() == 6
    if not store_factory.capabilities.shared:
        return
    other = store_factory.another(store)
    with other.read_transaction():
        seen = everything(other)
        store.write(StoreWrite(accepted=(A(7).pair,), pending=(B(1).pair,)))
        assert everything(other) == seen  # the other's commit is not seen mid-transaction
    assert other.count() == 7 and other.pending_data(B(1).change_id) == B(1).data


def test_data_version_moves_for_another_writers_commit_and_never_for_its_own(store_factory):
    store = store_factory()
    own = store.data_version()
    store.write(StoreWrite(accepted=(A(1).pair,)))
    store.save_snapshot(1, b"s")
    assert store.data_version() == own
    if not store_factory.capabilities.shared:
        return
    other = store_factory.another(store)
    seen = other.data_version()
    assert other.data_version() == seen  # nothing committed since
    store.write(StoreWrite(accepted=(A(2).pair,)))
    assert other.data_version() != seen
    assert [i for _, i in other.accepted_ids()] == [A(1).change_id, A(2).change_id]
    mine = store.data_version()
    other.write(StoreWrite(pending=(B(2).pair,)))
    assert store.data_version() != mine and store.pending_rows() == [B(2).pair]


# --- read-only opens ------------------------------------------------------------------------------


def test_a_read_only_store_reads_everything_and_refuses_every_write(store_factory):
    store = filled(store_factory)
    before = everything(store)
    if not store_factory.capabilities.readonly_opens:
        assert store.readonly is False
        return
    reader = store_factory.another(store, readonly=True)
    assert reader.readonly and everything(reader) == before
    writes = {
        "write": lambda: reader.write(StoreWrite(accepted=(A(6).pair,))),
        "empty write": lambda: reader.write(StoreWrite()),
        "initialize": lambda: reader.initialize(INFO),
        "bind": lambda: reader.bind(B(1).author),
        "pin_creator": lambda: reader.pin_creator(None),
        "mark_published": lambda: reader.mark_published(TARGETS[1], [A(1).change_id]),
        "save_snapshot": lambda: reader.save_snapshot(1, b"x"),
        "apply_repair": lambda: reader.apply_repair(RepairPlan()),
        "write_transaction": lambda: reader.write_transaction().__enter__(),
    }
    for name, call in writes.items():
        with pytest.raises(StoreError) as err:
            call()
        assert err.value.rule == "readonly", name
    assert everything(store) == before and everything(reader) == before


# --- repair ---------------------------------------------------------------------------------------


def test_apply_repair_moves_rows_where_the_plan_says_and_drops_the_snapshot(store_factory):
    store = filled(store_factory)
    before = everything(store)
    damaged = refused(A(5).data, seen=70)
    plan = RepairPlan(
        quarantine_accepted=((5, damaged),),
        park=((4, A(4).change_id),),
        quarantine_pending=((B(3).change_id, refused(B(3).data, seen=80)),),
    )
    store.apply_repair(plan)
    assert list(store.accepted()) == [(1, A(1).data), (2, A(2).data), (3, A(3).data)]
    assert (store.count(), store.last_position()) == (3, 3)
    assert store.pending_rows() == [c.pair for c in _by_id(A(4), B(2))]
    assert store.quarantine() == [*before["quarantine"], damaged, refused(B(3).data, seen=80)]
    assert (store.load_snapshot(), store.snapshot_position()) == (None, None)
    assert store.evictions() == before["evictions"]
    assert store.published(TARGETS[0]) == before["published"][TARGETS[0]]
    # positions are never handed out twice: the next change goes past the highest ever used
    store.write(StoreWrite(accepted=(A(6).pair,)))
    assert list(store.accepted())[-1] == (6, A(6).data)


@pytest.mark.parametrize(
    "bad",
    ["missing-position", "position-twice", "missing-pending", "record-not-the-row-bytes"],
)
def test_a_repair_plan_that_does_not_match_the_store_writes_nothing(store_factory, bad):
    store = filled(store_factory)
    before = everything(store)
    good = (1, refused(A(1).data, seen=60))  # a valid first step, undone with the rest
    plans = {
        "missing-position": RepairPlan(quarantine_accepted=(good,), park=((9, A(8).change_id),)),
        "position-twice": RepairPlan(quarantine_accepted=(good,), park=((1, A(1).change_id),)),
        "missing-pending": RepairPlan(
            quarantine_accepted=(good,),
            quarantine_pending=((A(7).change_id, refused(A(7).data, seen=60)),),
        ),
        "record-not-the-row-bytes": RepairPlan(
            quarantine_accepted=(good, (2, refused(A(3).data, seen=60)))
        ),
    }
    with pytest.raises(StoreError) as err:
        store.apply_repair(plans[bad])
    assert err.value.rule == "repair-plan"
    assert everything(store) == before


def test_a_sound_store_full_of_rows_has_no_integrity_problems(store_factory):
    store = filled(store_factory)
    assert store.integrity_problems() == []
    assert store.integrity_problems(limit=1, full=True) == []


# --- lifetime -------------------------------------------------------------------------------------


def test_a_reopened_store_holds_exactly_what_was_written_before_close(store_factory):
    store = filled(store_factory)
    before = everything(store)
    if not store_factory.capabilities.durable:
        # memory lives as long as its object: after close nothing is reachable, nothing written
        store.close()
        with pytest.raises(StoreError):
            list(store.accepted())
        return
    store = store_factory.reopen(store)
    assert everything(store) == before
    info = store.info()
    assert (info.store_id, info.author, info.creator) == (
        before["store_id"],
        A(1).author,
        A(1).author,
    )
    store.write(StoreWrite(accepted=(A(6).pair,)))  # and it goes on where it stopped
    assert list(store.accepted())[-1] == (6, A(6).data)


def test_a_closed_store_refuses_reads_and_writes_and_closes_twice(store_factory):
    store = filled(store_factory)
    store.close()
    calls = {
        "write": lambda: store.write(StoreWrite(accepted=(A(6).pair,))),
        "accepted": lambda: list(store.accepted()),
        "accepted_ids": lambda: list(store.accepted_ids()),
        "pending_rows": store.pending_rows,
        "pending_index": store.pending_index,
        "pending_unindexed": store.pending_unindexed,
        "pending_data": lambda: store.pending_data(B(2).change_id),
        "quarantine": store.quarantine,
        "evictions": store.evictions,
        "published": lambda: store.published(TARGETS[0]),
        "mark_published": lambda: store.mark_published(TARGETS[0], []),
        "save_snapshot": lambda: store.save_snapshot(1, b""),
        "apply_repair": lambda: store.apply_repair(RepairPlan()),
        "read_transaction": lambda: store.read_transaction().__enter__(),
        "write_transaction": lambda: store.write_transaction().__enter__(),
    }
    for name, call in calls.items():
        with pytest.raises(StoreError) as err:
            call()
        assert err.value.rule == "open", name
    store.close()
