"""Signed changes, verification, the pending area, quarantine and equivocation (SEMANTICS §8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry import DEFAULT_REGISTRY, encode_value
from statefuse import Writer
from sync.change import (
    UnverifiedChange,
    change_body,
    change_id_of,
    sign_change,
    signed_message,
    wire,
)
from sync.changelog import ChangeLog, Status
from sync.key import SigningKey
from sync.verify import QuarantineReason, VerificationError, verify_change

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


def test_equivocation_is_kept_as_proof_and_the_authors_ops_from_that_seq_are_ignored():
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
    (proof,) = log.equivocations()
    assert proof.seq == 2 and set(proof.change_ids) == {fork_a.change_id, fork_b.change_id}
    assert {op.op_id for op in log.ops()} == {op.op_id for op in first.ops}


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
