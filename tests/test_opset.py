"""SEMANTICS §3: the op-set is a grow-only set of verified ops; merge is set union."""

from __future__ import annotations

import blake3
import pytest
from hypothesis import given
from hypothesis import strategies as st

import statefuse.registry.value as value_module
from statefuse import (
    ClaimAdded,
    OpIdMismatch,
    OpRuleError,
    OpSet,
    StateFuseError,
    Writer,
)


def _pool() -> list:
    """Ops of every kind by three writers; drawing lists from one pool makes lists overlap."""
    pool = []
    for author in ("w0", "w1", b"\x01w2"):
        writer = Writer(author, clock=lambda: 0)
        evidence = writer.evidence("doc", {"page": 1})
        claims = [writer.claim("ns", "s", p, v) for p, v in [("p", 1), ("p", 1.0), ("q", [True])]]
        pool += [evidence, *claims]
        pool.append(writer.retract(claim_id=claims[0].claim_id, claim_ref=claims[1].claim_ref))
        pool.append(
            writer.decide(
                locus=claims[0].claim_ref,
                conflict_id=evidence.op_id,
                selected_claim_id=claims[2].claim_id,
            )
        )
    return pool


POOL = _pool()
op_lists = st.lists(st.sampled_from(POOL), max_size=6)


def _ids(ops_) -> set[bytes]:
    return {op.op_id for op in ops_}


def _claims(n: int, author: str = "w") -> list[ClaimAdded]:
    writer = Writer(author, clock=lambda: 0)
    return [writer.claim("ns", "s", "p", i) for i in range(n)]


# --- basic behaviour ------------------------------------------------------------------------------


def test_add_reports_whether_the_op_was_new_and_contains_finds_it_by_op_or_id():
    a, b = _claims(2)
    s = OpSet()
    assert s.add(a) is True
    assert s.add(a) is False
    assert len(s) == 1
    assert a in s and a.op_id in s
    assert b not in s and b.op_id not in s
    assert "not an op" not in s and 1 not in s
    assert s.get(a.op_id) is a and s.get(b.op_id) is None


@given(op_lists, st.data())
def test_iteration_and_ids_are_sorted_by_op_id_whatever_the_insertion_order(ops_, data):
    s = OpSet()
    for op in data.draw(st.permutations(ops_)):
        s.add(op)
    expected = sorted(_ids(ops_))
    assert [op.op_id for op in s] == expected
    assert s.ids() == expected
    assert len(s) == len(expected)


def test_iteration_order_is_refreshed_after_an_add():
    a, b, c = sorted(_claims(3), key=lambda op: op.op_id)
    s = OpSet([b])
    assert list(s) == [b]
    s.add(c)
    s.add(a)
    assert list(s) == [a, b, c]
    assert s.ids() == [a.op_id, b.op_id, c.op_id]


@given(op_lists, st.data())
def test_update_returns_the_new_ops_once_each_in_input_order(ops_, data):
    existing = data.draw(st.lists(st.sampled_from(ops_), max_size=3)) if ops_ else []
    batch = data.draw(st.permutations(ops_ + ops_[:2]))
    s = OpSet(existing)
    new = s.update(batch)
    expected: list = []
    for op in batch:
        if op.op_id not in _ids(existing) and op.op_id not in _ids(expected):
            expected.append(op)
    assert [op.op_id for op in new] == [op.op_id for op in expected]
    assert set(s.ids()) == _ids(ops_) | _ids(existing)


# --- union laws -----------------------------------------------------------------------------------


@given(op_lists, op_lists)
def test_union_is_commutative_and_leaves_both_operands_unchanged(a, b):
    sa, sb = OpSet(a), OpSet(b)
    before_a, before_b = sa.ids(), sb.ids()
    assert sa | sb == sb | sa
    assert sa.merge(sb) == sb.merge(sa)
    assert set((sa | sb).ids()) == _ids(a) | _ids(b)
    assert (sa.ids(), sb.ids()) == (before_a, before_b)


@given(op_lists, op_lists, op_lists)
def test_union_is_associative(a, b, c):
    sa, sb, sc = OpSet(a), OpSet(b), OpSet(c)
    assert (sa | sb) | sc == sa | (sb | sc)
    assert sa.merge(sb).merge(sc) == sa.merge(sb.merge(sc))


@given(op_lists, op_lists)
def test_union_is_idempotent(a, b):
    sa = OpSet(a)
    assert sa | sa == sa
    union = sa | OpSet(b)
    assert union | OpSet(b) == union
    assert union.merge(sa) == union


@given(op_lists, op_lists)
def test_in_place_union_equals_union(a, b):
    sa, sb = OpSet(a), OpSet(b)
    expected = sa | sb
    sa |= sb
    assert sa == expected
    assert list(sa) == list(expected)


@given(st.lists(op_lists, max_size=4), st.data())
def test_merging_replicas_in_any_order_gives_the_same_set(replicas, data):
    sets = [OpSet(r) for r in replicas]
    merged = OpSet()
    for s in data.draw(st.permutations(sets)):
        merged = merged | s
    assert merged == OpSet(op for r in replicas for op in r)


def test_merge_refuses_something_that_is_not_an_op_set():
    with pytest.raises(OpRuleError) as info:
        OpSet().merge(_claims(1))
    assert (info.value.field, info.value.rule) == ("other", "opset-type")
    with pytest.raises(TypeError):
        OpSet() | _claims(1)
    s = OpSet()
    with pytest.raises(TypeError):
        s |= _claims(1)


# --- equality -------------------------------------------------------------------------------------


@given(op_lists, st.data())
def test_op_sets_are_equal_iff_they_hold_the_same_ids(ops_, data):
    assert OpSet(ops_) == OpSet(data.draw(st.permutations(ops_)))
    if ops_:
        fewer = OpSet(ops_[1:])
        assert (fewer == OpSet(ops_)) == (ops_[0].op_id in _ids(ops_[1:]))


def test_op_sets_compare_with_op_sets_only_and_are_not_hashable():
    ops_ = _claims(2)
    assert OpSet(ops_) != ops_
    assert OpSet() != set()
    with pytest.raises(TypeError):
        hash(OpSet())


# --- refusals -------------------------------------------------------------------------------------


def _tampered_value(op: ClaimAdded) -> ClaimAdded:
    object.__setattr__(op, "value", "forged")
    return op


def _mutated_in_place(op: ClaimAdded) -> ClaimAdded:
    # Values are immutable (SEMANTICS §1); the one change in place left is going around that:
    # the entries of the map inside the value, swapped by the value module's own setter (the
    # slot has no name on the class). The op, its value and the map stay the objects they
    # were, so only re-encoding the content can notice.
    inner = op.value[2]  # type: ignore[index]
    value_module._set_entries(inner, {"k": "smuggled"})
    return op


def _tampered_lamport(op: ClaimAdded) -> ClaimAdded:
    object.__setattr__(op, "lamport", op.lamport + 1)
    return op


def _tampered_id(op: ClaimAdded) -> ClaimAdded:
    object.__setattr__(op, "op_id", blake3.blake3(b"other").digest())
    return op


TAMPERINGS = [_tampered_value, _mutated_in_place, _tampered_lamport, _tampered_id]


def _fresh_claim() -> ClaimAdded:
    return Writer("w", clock=lambda: 0).claim("ns", "s", "p", ["a", 1, {"k": "v"}])


@pytest.mark.parametrize("tamper", TAMPERINGS, ids=lambda f: f.__name__[1:])
def test_an_op_tampered_after_construction_is_refused_with_a_message_naming_both_ids(tamper):
    op = tamper(_fresh_claim())
    claimed, actual = op.op_id, op.recompute_id()
    assert claimed != actual
    s = OpSet()
    with pytest.raises(OpIdMismatch) as info:
        s.add(op)
    assert isinstance(info.value, StateFuseError) and isinstance(info.value, ValueError)
    assert (info.value.claimed, info.value.actual) == (claimed, actual)
    assert claimed.hex() in str(info.value) and actual.hex() in str(info.value)
    assert len(s) == 0
    with pytest.raises(OpIdMismatch):
        OpSet([op])


@pytest.mark.parametrize(
    "forged", [1 << 64, {1, 2}, object()], ids=["int-overflow", "set", "object"]
)
def test_an_op_tampered_into_something_unencodable_is_refused_with_a_statefuse_error(forged):
    op = _fresh_claim()
    object.__setattr__(op, "value", forged)
    s = OpSet()
    with pytest.raises(StateFuseError):
        s.add(op)
    assert len(s) == 0


@pytest.mark.parametrize("item", [None, "op", b"\x00" * 32, {"op": "ClaimAdded"}], ids=repr)
def test_a_non_op_is_refused_with_an_op_rule_error_naming_its_position(item):
    with pytest.raises(OpRuleError) as info:
        OpSet().add(item)
    assert (info.value.field, info.value.rule) == ("op", "op-type")
    with pytest.raises(OpRuleError) as info:
        OpSet([*_claims(2), item])
    assert (info.value.field, info.value.rule) == ("ops[2]", "op-type")


@given(op_lists, op_lists, st.data())
def test_update_is_all_or_nothing_when_one_op_is_bad(before, batch, data):
    s = OpSet(before)
    snapshot = s.ids()
    bad = data.draw(
        st.one_of(
            st.sampled_from(["not an op", None, 7]),
            st.sampled_from(TAMPERINGS).map(lambda tamper: tamper(_fresh_claim())),
        )
    )
    at = data.draw(st.integers(0, len(batch)))
    with pytest.raises((OpRuleError, OpIdMismatch)) as info:
        s.update([*batch[:at], bad, *batch[at:]])
    if isinstance(info.value, OpRuleError):
        assert info.value.field == f"ops[{at}]"
    assert s.ids() == snapshot
    assert [op.op_id for op in s] == snapshot


# --- of_sealed: the door for ops that were just hashed --------------------------------------------


@given(op_lists)
def test_of_sealed_holds_exactly_what_the_checking_constructor_holds(ops_):
    sealed = OpSet.of_sealed(ops_)
    assert sealed == OpSet(ops_)
    assert len(sealed) == len(_ids(ops_))
    assert sealed.ids() == sorted(_ids(ops_))
