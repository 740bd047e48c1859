"""Property tests of SEMANTICS §3–§6 on random programs of several writers."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from model import model

from statefuse import ClaimAdded, Materializer, OpSet, Writer, materialize
from statefuse.storage.testing import TEST_REGISTRY, assert_same_state, op_lists, run_program


def _mat(ops):
    return materialize(ops, registry=TEST_REGISTRY)


@given(op_lists(), st.data())
def test_materialized_state_is_invariant_to_delivery_order_and_duplicates(ops, data):
    order = data.draw(st.permutations(ops))
    dupes = data.draw(st.lists(st.sampled_from(ops), max_size=5)) if ops else []
    assert_same_state(_mat(ops), _mat(order + dupes))


@given(op_lists(), st.data())
def test_partition_then_merge_in_any_order_gives_the_same_state(ops, data):
    parts = data.draw(st.lists(st.integers(0, 3), min_size=len(ops), max_size=len(ops)))
    replicas = [OpSet([op for op, p in zip(ops, parts, strict=False) if p == r]) for r in range(4)]
    order = data.draw(st.permutations(replicas))
    merged = OpSet()
    for r in order:
        merged = merged | r
    assert_same_state(_mat(ops), _mat(merged))


#: Each example materializes seven op-sets: CI runs 500 (1,000 took 9 s).
@settings(max_examples=min(settings.default.max_examples, 500))
@given(op_lists(), op_lists(), op_lists())
def test_merge_is_commutative_associative_and_idempotent_on_states(a, b, c):
    A, B, C = OpSet(a), OpSet(b), OpSet(c)
    assert_same_state(_mat(A | B), _mat(B | A))
    assert_same_state(_mat((A | B) | C), _mat(A | (B | C)))
    assert_same_state(_mat(A | A), _mat(A))


@given(op_lists(), st.data())
def test_incremental_materializer_equals_full_after_any_sequence(ops, data):
    order = data.draw(st.permutations(ops))
    snapshot_points = data.draw(st.sets(st.integers(0, max(len(order), 1))))
    m = Materializer(registry=TEST_REGISTRY)
    snapshots = []
    for i, op in enumerate(order):
        if i in snapshot_points:
            snapshots.append((i, m.state(), m.state().digest()))
        m.apply(op)
    assert_same_state(m.state(), _mat(ops))
    for i, snap, digest in snapshots:
        assert snap.digest() == digest, "a snapshot changed after later applies"
        assert_same_state(snap, _mat(order[:i]))


@st.composite
def with_group_decisions(draw):
    """A program with decisions that record value groups made part-way through it, so that
    later steps corroborate, retract or add values after them."""
    ops = list(draw(op_lists()))
    planner = Writer("planner", registry=TEST_REGISTRY, clock=lambda: 0)
    out: list = []
    cuts = draw(st.sets(st.integers(0, len(ops)), max_size=4))
    for i in range(len(ops) + 1):
        if i in cuts:
            conflicts = _mat(out).conflicts
            if conflicts:
                c = draw(st.sampled_from(conflicts))
                planner.observe(out)
                out.append(planner.decide_on(c, draw(st.sampled_from(c.candidates))))
        if i < len(ops):
            out.append(ops[i])
    return out


def _verdicts(state):
    return [(s.decision.op_id, s.reason) for s in state.stale_decision_reasons]


@given(with_group_decisions(), st.data())
def test_decisions_by_value_group_are_judged_alike_incrementally_and_in_full(ops, data):
    order = data.draw(st.permutations(ops))
    full = _mat(ops)
    m = Materializer(registry=TEST_REGISTRY)
    for op in order:
        m.apply(op)
    assert_same_state(m.state(), full)
    assert _verdicts(m.state()) == _verdicts(full) == _verdicts(_mat(order))
    for d in full.decisions:
        assert m.state().why_stale(d) is full.why_stale(d)


@given(op_lists(), st.data())
def test_incremental_batches_on_a_materialized_state_equal_full(ops, data):
    cut = data.draw(st.integers(0, len(ops)))
    base = _mat(ops[:cut])
    m = Materializer.from_state(base)
    m.apply_all(ops[cut:])
    assert_same_state(m.state(), _mat(ops))
    assert_same_state(base, _mat(ops[:cut]))


@given(op_lists())
def test_activity_matches_the_reference_model(ops):
    state, ref = _mat(ops), model(ops, TEST_REGISTRY)
    assert {c.claim_id for c in state.active_claims()} == ref.active
    assert {c: {r.op_id for r in rs} for c, rs in state.retracted.items()} == ref.retracted_by


@given(op_lists())
def test_exactly_one_conflict_set_per_functional_key_and_scope_with_several_normal_forms(ops):
    state, ref = _mat(ops), model(ops, TEST_REGISTRY)
    got = {((*c.key, c.scope)): c for c in state.conflicts}
    assert len(got) == len(state.conflicts)
    assert set(got) == set(ref.conflicts)
    for lk, conflict in got.items():
        assert sorted(map(sorted, (set(g.claim_ids) for g in conflict.groups))) == sorted(
            map(sorted, ref.conflicts[lk])
        )
        active_here = {c.claim_id for c in state.active_at(lk[0], lk[1], lk[2], lk[3])}
        assert set(conflict.candidates) == active_here
        assert list(conflict.candidates) == sorted(conflict.candidates)
        assert all(state.is_active(c) for c in conflict.candidates)


@given(op_lists())
def test_stale_claims_match_the_reference_fixed_point(ops):
    state, ref = _mat(ops), model(ops, TEST_REGISTRY)
    assert set(state.stale) == ref.stale
    for cid, causes in state.stale.items():
        assert causes, "a stale claim must say why"
        deps = set(state.claims[cid].depends_on)
        assert {c.dependency for c in causes} <= deps


@given(op_lists())
def test_decisions_never_change_which_claims_are_active(ops):
    without = [op for op in ops if type(op).__name__ != "DecisionAdded"]
    a, b = _mat(ops), _mat(without)
    assert [c.claim_id for c in a.active_claims()] == [c.claim_id for c in b.active_claims()]
    assert [c.conflict_id for c in a.conflicts] == [c.conflict_id for c in b.conflicts]


@given(op_lists(), st.data())
def test_a_ref_retraction_suppresses_claims_that_arrive_later(ops, data):
    claims = [op for op in ops if isinstance(op, ClaimAdded)]
    if not claims:
        return
    target = data.draw(st.sampled_from(claims))
    from statefuse import Writer

    fixer = Writer("fixer", registry=TEST_REGISTRY)
    t = fixer.retract(claim_ref=target.claim_ref, reason="wrong")
    m = Materializer([t], registry=TEST_REGISTRY)
    m.apply_all(ops)
    for c in claims:
        if c.claim_ref == target.claim_ref:
            assert not m.state().is_active(c.claim_id)


@given(st.permutations(range(3)))
def test_a_knowing_reassertion_is_active_and_an_unknowing_one_is_not(order):
    from statefuse import Writer

    a, b, stale = (Writer(n, registry=TEST_REGISTRY) for n in ("a", "b", "stale"))
    first = a.claim("proj", "launch", "price", "1,000")
    t = a.retract(claim_ref=first.claim_ref, reason="wrong")
    b.observe([first, t])
    knowing = b.claim("proj", "launch", "price", 1000)
    unknowing = stale.claim("proj", "launch", "price", 1000.0)
    assert knowing.claim_ref == unknowing.claim_ref == first.claim_ref
    assert t.op_id in knowing.reasserts and not unknowing.reasserts
    ops = [first, t, knowing, unknowing]
    later = [ops[0], *(ops[1:][i] for i in order)]
    state = _mat(later)
    assert state.is_active(knowing.claim_id)
    assert not state.is_active(unknowing.claim_id)
    assert not state.is_active(first.claim_id)


_DIGEST_SCRIPT = """
import sys
from statefuse import decode_op, materialize
from statefuse.storage.testing import TEST_REGISTRY
ops = [decode_op(bytes.fromhex(h)) for h in sys.stdin.read().split()]
print(materialize(ops, registry=TEST_REGISTRY).digest().hex())
"""


def _digest_in_subprocess(ops, seed: str) -> str:
    env = {"PYTHONHASHSEED": seed, "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-c", _DIGEST_SCRIPT],
        input=" ".join(op.encode().hex() for op in ops),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return out.stdout.strip()


@settings(max_examples=3)
@given(op_lists(max_steps=40))
def test_digest_is_equal_in_processes_with_different_hash_seeds(ops):
    here = _mat(ops).digest().hex()
    assert _digest_in_subprocess(ops, "1") == here
    assert _digest_in_subprocess(list(reversed(ops)), "4242") == here


def test_digest_of_a_long_program_is_equal_across_hash_seeds():
    program = [("claim", i % 3, i % 5, i % 7, i % 3, [(i // 2, i % 2 == 0)]) for i in range(60)]
    program += [("sync", i % 3, (i + 1) % 3) for i in range(3)]
    program += [
        ("retract", i % 3, i * 7, ("id", "ref", "both")[i % 3], i % 2 == 0) for i in range(12)
    ]
    ops = run_program(program)
    assert len(ops) > 60
    digests = {_digest_in_subprocess(ops, seed) for seed in ("0", "1", "2", "random")}
    assert digests == {_mat(ops).digest().hex()}, json.dumps(sorted(digests))


def _reaches(predicate) -> None:
    from hypothesis import Phase, find

    quick = settings(max_examples=5000, database=None, phases=[Phase.generate], derandomize=True)
    find(op_lists(), lambda ops: predicate(_mat(ops), ops), settings=quick)


def test_the_program_strategy_reaches_every_interesting_state():
    _reaches(lambda s, ops: any(len(g.claim_ids) > 1 for c in s.conflicts for g in c.groups))
    _reaches(lambda s, ops: any(c.via for causes in s.stale.values() for c in causes))
    _reaches(lambda s, ops: any(getattr(o, "reasserts", ()) and s.is_active(o.op_id) for o in ops))
    _reaches(lambda s, ops: any(s.decision_applies(d) for d in s.decisions))
    _reaches(lambda s, ops: bool(s.stale_decisions))


@settings(max_examples=150)
@given(op_lists(), st.data())
def test_a_state_or_anything_it_handed_out_keeps_its_snapshot_whatever_is_written_after(ops, data):
    """The materializer writes its index in place only when nobody holds the last State or any
    container of its index (`Index.exclusive`): whatever a reader kept — the State, its claims,
    retractions or evidence, an iterator half-way — still shows the ops of its moment, and the
    incremental state equals a full one throughout."""
    m = Materializer(registry=TEST_REGISTRY)
    kept: list[tuple[str, object, object]] = []
    for i, op in enumerate(ops):
        m.apply(op)
        how = data.draw(st.sampled_from(["drop", "state", "claims", "retractions", "iterator"]))
        state = m.state()
        if how == "state":
            kept.append((how, state, (sorted(state.claims), sorted(state.retractions))))
        elif how == "claims":
            kept.append((how, state.claims, sorted(state.claims)))
        elif how == "retractions":
            kept.append((how, state.retractions, sorted(state.retractions)))
        elif how == "iterator":
            kept.append((how, iter(state.evidence), sorted(state.evidence)))
        del state
        assert_same_state(m.state(), materialize(ops[: i + 1], registry=TEST_REGISTRY))
    for how, held, then in kept:
        now = (
            (sorted(held.claims), sorted(held.retractions))  # type: ignore[attr-defined]
            if how == "state"
            else sorted(held)  # type: ignore[call-overload]
        )
        assert now == then, how
