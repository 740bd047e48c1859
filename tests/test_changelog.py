"""Signed changes, verification, the pending area, quarantine and equivocation (SEMANTICS §8)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import statefuse.sync.changelog as changelog_module
from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY, StateFuseError, encode_value
from statefuse.sync.change import (
    ChangeInputError,
    UnverifiedChange,
    change_body,
    change_id_of,
    sign_change,
    signed_message,
    wire,
)
from statefuse.sync.changelog import (
    Area,
    AreaFullError,
    Bounds,
    BoundsConfigError,
    ChangeLog,
    Status,
)
from statefuse.sync.key import SigningKey
from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change

SPACE = "team-memory"
FP = DEFAULT_REGISTRY.fingerprint


class Author:
    """A key, a writer using it as author id, and its feed position."""

    def __init__(self) -> None:
        self.key = SigningKey.generate()
        self.writer = Writer(self.key.author, clock=lambda: 0)
        self.seq = 0
        self.prev: bytes | None = None

    def change(self, n: int = 1, **kw):
        ops = [self.writer.claim("p", f"s{self.seq}-{i}", "v", i) for i in range(n)]
        self.seq += 1
        c = sign_change(
            self.key,
            space=kw.get("space", SPACE),
            seq=self.seq,
            prev=self.prev,
            registry=FP,
            ops=ops,
        )
        self.prev = c.change_id
        return c


def test_a_signed_change_verifies_and_keeps_its_ops_and_id():
    a = Author()
    c = a.change(3)
    again = verify_change(UnverifiedChange(c.data), space=SPACE)
    assert again == c and again.change_id == c.change_id and len(again.ops) == 3
    assert again.author == a.key.author and again.seq == 1 and again.prev is None


def test_a_change_for_another_space_is_refused():
    c = Author().change()
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(c.data), space="other-memory")
    assert err.value.reason is QuarantineReason.WRONG_SPACE


def _resign(key: SigningKey, body: bytes) -> bytes:
    return wire(body, key.sign(signed_message(change_id_of(body))))


def test_an_op_by_another_author_inside_a_change_is_refused():
    a, b = Author(), Author()
    foreign = b.writer.claim("p", "x", "v", 1)
    body = change_body(
        space=SPACE, author=a.key.author, seq=1, prev=None, registry=FP, ops=[foreign]
    )
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(_resign(a.key, body)), space=SPACE)
    assert err.value.reason is QuarantineReason.OP_AUTHOR_MISMATCH


def test_a_forged_signature_is_refused():
    a, mallory = Author(), Author()
    body = change_body(
        space=SPACE,
        author=a.key.author,
        seq=1,
        prev=None,
        registry=FP,
        ops=[a.writer.claim("p", "x", "v", 1)],
    )
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(_resign(mallory.key, body)), space=SPACE)
    assert err.value.reason is QuarantineReason.BAD_SIGNATURE


def test_a_wrong_claimed_op_id_is_refused():
    a = Author()
    op = a.writer.claim("p", "x", "v", 1)
    body = encode_value(
        {
            "author": a.key.author,
            "ops": [[b"\x00" * 32, op.encode()]],
            "prev": None,
            "registry": FP,
            "seq": 1,
            "space": SPACE,
            "v": 1,
        }
    )
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(_resign(a.key, body)), space=SPACE)
    assert err.value.reason is QuarantineReason.OP_ID_MISMATCH


@given(st.data())
def test_any_corruption_of_a_change_is_quarantined_or_is_byte_identical(data):
    c = Author().change(2)
    raw = bytearray(c.data)
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    log = ChangeLog(SPACE)
    receipt = log.receive(bytes(raw), seen_ms=0)
    assert receipt.status is Status.QUARANTINED
    assert len(log) == 0 and bytes(raw) in log.quarantine


def test_a_change_waits_for_its_predecessor_and_is_admitted_when_it_arrives():
    a = Author()
    first, second, third = a.change(), a.change(), a.change()
    log = ChangeLog(SPACE)
    assert log.receive(third.data, seen_ms=1).status is Status.PENDING
    assert log.receive(second.data, seen_ms=2).status is Status.PENDING
    receipt = log.receive(first.data, seen_ms=3)
    assert receipt.status is Status.ACCEPTED
    assert [c.seq for c in receipt.admitted] == [1, 2, 3]
    assert log.pending() == [] and len(log) == 3


@given(st.permutations(range(4)))
def test_accepted_changes_and_state_do_not_depend_on_arrival_order(order):
    a, b = Author(), Author()
    changes = [a.change(), a.change(2), b.change(), b.change()]
    logs = []
    for perm in (range(4), order):
        log = ChangeLog(SPACE)
        for i in perm:
            log.receive(changes[i].data, seen_ms=0)
        logs.append(log)
    assert logs[0].change_ids() == logs[1].change_ids()
    assert logs[0].materialize().digest() == logs[1].materialize().digest()


def test_a_forged_copy_seen_first_does_not_block_the_genuine_change():
    a = Author()
    genuine = a.change()
    forged = bytearray(genuine.data)
    forged[genuine.data.rindex(genuine.signature)] ^= 1  # flips a signature bit
    log = ChangeLog(SPACE)
    receipt = log.receive(bytes(forged), seen_ms=1)
    assert receipt.reason is QuarantineReason.BAD_SIGNATURE
    assert log.receive(genuine.data, seen_ms=2).status is Status.ACCEPTED
    assert len(log.quarantine) == 1


def test_a_replayed_change_is_a_duplicate_and_changes_nothing():
    c = Author().change()
    log = ChangeLog(SPACE)
    log.receive(c.data, seen_ms=1)
    digest = log.materialize().digest()
    assert log.receive(c.data, seen_ms=2).status is Status.DUPLICATE
    assert log.materialize().digest() == digest and len(log.quarantine) == 0


def test_a_fork_is_kept_as_proof_and_every_branch_counts():
    a = Author()
    first = a.change()
    fork_a = a.change()
    a.seq, a.prev = 1, first.change_id
    fork_b = a.change()
    later = a.change()
    assert fork_a.seq == fork_b.seq == 2 and fork_a.change_id != fork_b.change_id
    log = ChangeLog(SPACE)
    for c in (later, fork_b, fork_a, first):
        log.receive(c.data, seen_ms=0)
    (proof,) = log.forks()
    assert proof.seq == 2 and set(proof.change_ids) == {fork_a.change_id, fork_b.change_id}
    assert log.verdicts() == {}
    every = (first, fork_a, fork_b, later)
    assert {op.op_id for op in log.ops()} == {op.op_id for c in every for op in c.ops}
    assert [c.change_id for c in log.heads(a.key.author)] == sorted(
        [later.change_id, fork_a.change_id], key=lambda cid: (log.get(cid).seq, cid), reverse=True
    )


def test_a_prev_that_names_a_change_with_the_wrong_seq_is_a_broken_chain():
    a = Author()
    first = a.change()
    body = change_body(
        space=SPACE,
        author=a.key.author,
        seq=3,
        prev=first.change_id,
        registry=FP,
        ops=[a.writer.claim("p", "x", "v", 9)],
    )
    log = ChangeLog(SPACE)
    log.receive(first.data, seen_ms=0)
    receipt = log.receive(_resign(a.key, body), seen_ms=0)
    assert receipt.reason is QuarantineReason.BROKEN_CHAIN
    assert len(log) == 1


def test_seq_one_with_a_prev_is_refused():
    a = Author()
    body = change_body(
        space=SPACE,
        author=a.key.author,
        seq=1,
        prev=b"\x01" * 32,
        registry=FP,
        ops=[a.writer.claim("p", "x", "v", 9)],
    )
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(_resign(a.key, body)), space=SPACE)
    assert err.value.reason is QuarantineReason.BAD_SEQUENCE


# --- receiving many at once -------------------------------------------------------------------


def _log_state(log: ChangeLog) -> tuple[object, ...]:
    return (
        log.change_ids(),
        [c.change_id for c in log.pending()],
        log.quarantine.verdicts(),
        [(e.count, e.first_seen_ms, e.last_seen_ms) for e in log.quarantine],
        log.equivocations(),
    )


def _receipt(r) -> tuple[object, ...]:
    return (r.status, r.change_id, [c.change_id for c in r.admitted], r.reason, r.message)


def _mixed_feed() -> list[bytes]:
    """Two authors' feeds with a fork, a forged copy, a replay and a change for another space."""
    a, b = Author(), Author()
    first = a.change(3)
    second = a.change()
    a.seq, a.prev = 1, first.change_id
    fork = a.change(2)
    forged = bytearray(second.data)
    forged[-70] ^= 1
    return [
        first.data,
        second.data,
        fork.data,
        bytes(forged),
        b.change(5).data,
        b.change(1).data,
        b.change(4).data,
        Author().change(2, space="elsewhere").data,
        first.data,
        b"\x81\xa1v\x01",
    ]


#: Each example signs and receives ten changes: CI runs 400 (1,000 took over 7 s).
@settings(max_examples=min(settings.default.max_examples, 400))
@given(st.permutations(range(10)), st.sampled_from([1, 3, 256]))
def test_receive_all_gives_the_receipts_and_log_of_receiving_one_by_one(order, batch):
    feed = _mixed_feed()
    changes = [feed[i] for i in order]
    one_by_one = ChangeLog(SPACE)
    expected = [_receipt(one_by_one.receive(c, seen_ms=5)) for c in changes]
    together = ChangeLog(SPACE)
    saved, changelog_module._RECEIVE_BATCH = changelog_module._RECEIVE_BATCH, batch
    try:
        got = [_receipt(r) for r in together.receive_all(changes, seen_ms=5)]
    finally:
        changelog_module._RECEIVE_BATCH = saved
    assert got == expected
    assert _log_state(together) == _log_state(one_by_one)


def test_receive_all_takes_in_the_changes_before_an_item_that_is_not_bytes():
    a = Author()
    first, second = a.change(), a.change()
    log = ChangeLog(SPACE)
    with pytest.raises(ChangeInputError):
        log.receive_all([first.data, second.data, "not bytes", a.change().data], seen_ms=0)
    assert log.change_ids() == sorted([first.change_id, second.change_id])


def test_a_pending_change_received_again_is_a_duplicate_until_and_after_it_is_admitted():
    a = Author()
    first, second = a.change(), a.change()
    log = ChangeLog(SPACE)
    assert log.receive(second.data, seen_ms=0).status is Status.PENDING
    assert log.receive(second.data, seen_ms=0).status is Status.DUPLICATE
    assert log.receive(first.data, seen_ms=0).status is Status.ACCEPTED
    assert log.receive(second.data, seen_ms=0).status is Status.DUPLICATE
    assert log.pending() == [] and len(log) == 2


# --- bounds on what is kept outside the accepted changes ----------------------------------------


def test_a_change_that_would_overfill_the_pending_area_is_refused_and_nothing_changes():
    a = Author()
    feed = [a.change() for _ in range(4)]
    log = ChangeLog(SPACE, bounds=Bounds(pending_changes=2))
    for c in feed[1:3]:
        assert log.receive(c.data, seen_ms=0).status is Status.PENDING
    before = _log_state(log)
    with pytest.raises(AreaFullError) as err:
        log.receive(feed[3].data, seen_ms=0)
    assert (err.value.area, err.value.bound, err.value.limit) == (
        Area.PENDING,
        "pending_changes",
        2,
    )
    assert _log_state(log) == before
    # Once the predecessor arrives the area drains, and the refused change is welcome.
    assert log.receive(feed[0].data, seen_ms=0).status is Status.ACCEPTED
    assert log.receive(feed[3].data, seen_ms=0).status is Status.ACCEPTED
    assert len(log) == 4 and log.pending() == []


def test_the_pending_area_is_bounded_in_bytes_too():
    a = Author()
    feed = [a.change(), a.change(), a.change(20)]
    log = ChangeLog(SPACE, bounds=Bounds(pending_bytes=len(feed[1].data) + 100))
    assert log.receive(feed[1].data, seen_ms=0).status is Status.PENDING
    with pytest.raises(AreaFullError) as err:
        log.receive(feed[2].data, seen_ms=0)
    assert (err.value.area, err.value.bound) == (Area.PENDING, "pending_bytes")
    assert [c.change_id for c in log.pending()] == [feed[1].change_id]


def test_bad_bytes_that_would_overfill_the_quarantine_are_refused_but_known_ones_are_counted():
    log = ChangeLog(SPACE, bounds=Bounds(quarantine_entries=2))
    bad = [b"\xc0", b"\xc1", b"\xc2"]
    for data in bad[:2]:
        assert log.receive(data, seen_ms=1).status is Status.QUARANTINED
    with pytest.raises(AreaFullError) as err:
        log.receive(bad[2], seen_ms=2)
    assert (err.value.area, err.value.bound, err.value.limit) == (
        Area.QUARANTINE,
        "quarantine_entries",
        2,
    )
    assert bad[2] not in log.quarantine and len(log.quarantine) == 2
    assert log.receive(bad[0], seen_ms=3).status is Status.QUARANTINED  # seen before: no growth
    assert [e.count for e in log.quarantine if e.data == bad[0]] == [2]


def test_the_quarantine_is_bounded_in_bytes_and_keeps_count_of_them():
    log = ChangeLog(SPACE, bounds=Bounds(quarantine_bytes=10))
    log.receive(b"\xc1" * 6, seen_ms=0)
    assert log.quarantine.nbytes == 6
    with pytest.raises(AreaFullError) as err:
        log.receive(b"\xc1" * 5, seen_ms=0)
    assert err.value.bound == "quarantine_bytes" and log.quarantine.nbytes == 6
    log.receive(b"\xc1" * 4, seen_ms=0)
    assert log.quarantine.nbytes == 10


def test_a_parked_change_whose_link_breaks_is_quarantined_even_past_the_bound():
    a = Author()
    first = a.change()
    body = change_body(
        space=SPACE,
        author=a.key.author,
        seq=3,
        prev=first.change_id,
        registry=FP,
        ops=[a.writer.claim("p", "x", "v", 9)],
    )
    broken = _resign(a.key, body)
    log = ChangeLog(SPACE, bounds=Bounds(quarantine_entries=1))
    log.receive(b"\xc1", seen_ms=0)
    assert log.receive(broken, seen_ms=0).status is Status.PENDING
    assert log.receive(first.data, seen_ms=0).status is Status.ACCEPTED
    assert broken in log.quarantine and len(log.quarantine) == 2  # moved, never dropped
    assert log.pending() == []


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3"])
def test_a_bound_that_is_not_a_positive_int_is_refused_by_name(value):
    with pytest.raises(BoundsConfigError) as err:
        Bounds(quarantine_bytes=value)
    assert err.value.field == "quarantine_bytes"


def test_a_change_log_needs_bounds_as_a_bounds_value():
    with pytest.raises(BoundsConfigError) as err:
        ChangeLog(SPACE, bounds=5)  # type: ignore[arg-type]
    assert err.value.field == "bounds"


#: Each example fills bounded and unbounded logs: CI runs 400 (1,000 took 8 s).
@settings(max_examples=min(settings.default.max_examples, 400))
@given(
    st.permutations(range(10)),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_a_bounded_log_refuses_without_changing_and_never_holds_what_an_unbounded_one_would_not(
    order, pending_changes, quarantine_entries
):
    feed = _mixed_feed()
    bounded = ChangeLog(
        SPACE,
        bounds=Bounds(pending_changes=pending_changes, quarantine_entries=quarantine_entries),
    )
    unbounded = ChangeLog(SPACE)
    for i in order:
        unbounded.receive(feed[i], seen_ms=0)
        before = _log_state(bounded)
        try:
            bounded.receive(feed[i], seen_ms=0)
        except AreaFullError:
            assert _log_state(bounded) == before
        assert len(bounded.pending()) <= pending_changes
    assert set(bounded.change_ids()) <= set(unbounded.change_ids())
    assert set(bounded.quarantine.verdicts().items()) <= set(
        unbounded.quarantine.verdicts().items()
    )


def test_a_change_body_from_given_encodings_is_the_body_from_the_ops():
    a = Author()
    ops = [a.writer.claim("p", "x", "v", i) for i in range(3)]
    fields = {"space": SPACE, "author": a.key.author, "seq": 1, "prev": None, "registry": FP}
    plain = change_body(ops=ops, **fields)
    assert change_body(ops=ops, datas=[op.encode() for op in ops], **fields) == plain
    with pytest.raises(ChangeInputError) as err:
        change_body(ops=ops, datas=[op.encode() for op in ops[:2]], **fields)
    assert (err.value.field, err.value.rule) == ("datas", "one-per-op")
    with pytest.raises(StateFuseError):
        change_body(ops=ops, **{**fields, "space": "lone \ud800"})
