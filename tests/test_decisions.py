"""Decisions survive agreement (SEMANTICS §6): a decision records the value groups it chose
among and the one it chose, and applies while that group is held and no new value appeared."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import (
    DecisionAdded,
    EncodingError,
    Materializer,
    OpRuleError,
    PredicateContract,
    Registry,
    StaleDecision,
    StaleReason,
    Writer,
    decode_op,
    materialize,
)
from statefuse.core.op import decode_ops
from statefuse.core.state import group_id_of
from statefuse.reading.context import assemble_context, context_for
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.view import How
from statefuse.sync.replica import Replica

REG = Registry([PredicateContract("price", normalizer="number")])
KEY = ("p", "launch", "deadline")


def w(name: str) -> Writer:
    return Writer(name, registry=REG, clock=lambda: 0)


def state_of(ops):
    return materialize(ops, registry=REG)


def view_of(ops, lens=None):
    return project(state_of(ops), lens or Lens())


def claim(writer: Writer, value, **kw):
    return writer.claim(*KEY, value, **kw)


def decided(*values: str, pick: int = 0):
    """Writers a, b, c... assert ``values``; a planner decides for the claim of ``values[pick]``."""
    claims = [claim(w(f"agent{i}"), v) for i, v in enumerate(values)]
    (conflict,) = state_of(claims).conflicts
    planner = w("planner")
    planner.observe(claims)
    d = planner.decide_on(conflict, claims[pick].claim_id, reason="vendor confirmed")
    return claims, d


def reason_of(state, d):
    return {s.decision: s.reason for s in state.stale_decision_reasons}.get(d)


# --- the rule ------------------------------------------------------------------------------------


def test_a_decision_records_the_value_groups_of_the_conflict_and_the_chosen_one():
    (a, b), d = decided("2026-04-08", "2026-04-10")
    (conflict,) = state_of([a, b]).conflicts
    assert d.groups == tuple(sorted(g.group_id for g in conflict.groups))
    assert d.selected_group == group_id_of(state_of([a, b])._ix.gkey(a.claim_id))
    assert d.selected_claim_id == a.claim_id and d.conflict_id == conflict.conflict_id


@pytest.mark.parametrize("agreeing_with", ["2026-04-08", "2026-04-10"])
def test_a_third_agent_agreeing_with_either_value_keeps_the_decision(agreeing_with):
    (a, b), d = decided("2026-04-08", "2026-04-10")
    third = claim(w("third"), agreeing_with)
    state = state_of([a, b, d, third])
    assert state.decision_applies(d) and d not in state.stale_decisions
    assert reason_of(state, d) is None
    sel = project(state, Lens()).selected[KEY]
    assert sel.how is How.DECISION and sel.claim == a and sel.reason == "vendor confirmed"


def test_a_new_distinct_value_makes_the_decision_stale_for_a_new_value():
    (a, b), d = decided("2026-04-08", "2026-04-10")
    state = state_of([a, b, d, claim(w("third"), "2026-04-12")])
    assert not state.decision_applies(d) and state.stale_decisions == (d,)
    assert state.stale_decision_reasons == (StaleDecision(d, StaleReason.NEW_VALUE),)
    assert project(state, Lens()).unresolved == (KEY,)


def test_losing_every_claim_of_the_chosen_value_makes_the_decision_stale():
    (a, b, c), d = decided("2026-04-08", "2026-04-10", "2026-04-12")
    corroboration = claim(w("fourth"), "2026-04-08")
    ops = [a, b, c, d, corroboration, w("x").retract(claim_id=a.claim_id)]
    assert state_of(ops).decision_applies(d)  # the value is still held by the corroboration
    ops.append(w("y").retract(claim_id=corroboration.claim_id))
    state = state_of(ops)
    assert reason_of(state, d) is StaleReason.CHOSEN_VALUE_LOST
    assert project(state, Lens()).unresolved == (KEY,)
    # the conflict may also end with the other value left alone: still stale, same reason
    ops.append(w("z").retract(claim_id=c.claim_id))
    assert reason_of(state_of(ops), d) is StaleReason.CHOSEN_VALUE_LOST


def test_retracting_the_other_candidates_keeps_the_decision_even_when_its_value_returns():
    (a, b, c), d = decided("2026-04-08", "2026-04-10", "2026-04-12")
    ops = [a, b, c, d, w("x").retract(claim_id=c.claim_id)]
    assert state_of(ops).decision_applies(d)
    assert view_of(ops).selected[KEY].how is How.DECISION
    ops.append(w("x").retract(claim_id=b.claim_id))  # no conflict left: nothing to resolve
    state = state_of(ops)
    assert state.conflicts == () and state.decision_applies(d) and not state.stale_decisions
    ops.append(claim(w("later"), "2026-04-10"))  # a value it chose among comes back
    assert view_of(ops).selected[KEY].how is How.DECISION


def test_a_retracted_decided_claim_gives_way_to_the_lowest_claim_of_its_value():
    (a, b), d = decided("2026-04-08", "2026-04-10")
    more = [claim(w(f"c{i}"), "2026-04-08") for i in range(3)]
    ops = [a, b, d, *more, w("x").retract(claim_id=a.claim_id)]
    v = view_of(ops)
    sel = v.selected[KEY]
    assert sel.how is How.DECISION and sel.claim.claim_id == min(c.claim_id for c in more)
    assert "decided claim was retracted" in v.explanations[KEY]


def test_the_latest_applicable_decision_wins_and_a_stale_later_one_does_not():
    (a, b), first = decided("2026-04-08", "2026-04-10")
    p2 = w("p2")
    p2.observe([first])
    second = p2.decide_on(state_of([a, b]).conflicts[0], b.claim_id, reason="second thoughts")
    assert view_of([a, b, first, second]).selected[KEY].claim == b
    state = state_of([a, b, first, second, w("x").retract(claim_id=b.claim_id)])
    # b's value is lost: the later decision is stale; the earlier applies but has no conflict
    assert reason_of(state, second) is StaleReason.CHOSEN_VALUE_LOST
    assert state.decision_applies(first)


# --- old-format decisions -------------------------------------------------------------------------

#: A decision encoded by the first release (no value groups): its bytes and id must never change.
OLD_HEX = (
    "8ba6617574686f72a7706c616e6e6572ab636f6e666c6963745f6964c42002020202020202020202020202020202"
    "02020202020202020202020202020202a76c616d706f727407a56c6f637573c42001010101010101010101010101"
    "01010101010101010101010101010101010101a26f70ad4465636973696f6e4164646564a77061796c6f616481a1"
    "6b9101a6726561736f6ea36f6c64a573636f7065a6676c6f62616cb173656c65637465645f636c61696d5f6964c4"
    "200303030303030303030303030303030303030303030303030303030303030303a17601a777616c6c5f6d73cd03e8"
)
OLD_ID = "764df09a2a18e06a61e1050da289b82a102625dcdbfbb5ebc290571a2268dc2e"


def test_an_old_format_decision_keeps_its_bytes_and_id():
    old = DecisionAdded(
        "planner",
        7,
        1000,
        locus=b"\x01" * 32,
        conflict_id=b"\x02" * 32,
        selected_claim_id=b"\x03" * 32,
        reason="old",
        payload={"k": [1]},
    )
    assert old.encode().hex() == OLD_HEX and old.op_id.hex() == OLD_ID
    decoded = decode_op(bytes.fromhex(OLD_HEX))
    assert decoded.groups == () and decoded.selected_group is None
    assert decoded.op_id.hex() == OLD_ID
    assert decode_ops([bytes.fromhex(OLD_HEX)] * 3)[0].op_id.hex() == OLD_ID


def test_an_old_format_decision_applies_by_its_conflict_id_and_goes_stale_as_before():
    a, b, planner = claim(w("a"), "2026-04-08"), claim(w("b"), "2026-04-10"), w("planner")
    (conflict,) = state_of([a, b]).conflicts
    old = planner.decide(
        locus=conflict.locus, conflict_id=conflict.conflict_id, selected_claim_id=a.claim_id
    )
    assert old.groups == () and b"groups" not in old.encode()
    assert view_of([a, b, old]).selected[KEY].how is How.DECISION
    state = state_of([a, b, old, claim(w("c"), "2026-04-08")])  # corroboration: stale, as before
    assert reason_of(state, old) is StaleReason.CANDIDATES_CHANGED
    assert project(state, Lens()).unresolved == (KEY,)


# --- the op ---------------------------------------------------------------------------------------


def test_a_group_decision_round_trips_through_both_decoders():
    _, d = decided("2026-04-08", "2026-04-10")
    assert decode_op(d.encode()) == d and decode_op(d.encode()).groups == d.groups
    assert [x.groups for x in decode_ops([d.encode()] * 4)] == [d.groups] * 4


@pytest.mark.parametrize(
    ("groups", "selected", "rule"),
    [
        ((), b"\x05" * 32, "decision-groups"),
        ((b"\x05" * 32, b"\x06" * 32), None, "decision-groups"),
        ((b"\x05" * 32,), b"\x05" * 32, "decision-groups"),
        ((b"\x05" * 32, b"\x06" * 32), b"\x07" * 32, "decision-groups"),
        ((b"\x05" * 31, b"\x06" * 32), b"\x06" * 32, "id-length"),
    ],
)
def test_a_group_decision_with_malformed_groups_is_refused(groups, selected, rule):
    with pytest.raises(OpRuleError) as err:
        w("p").decide(
            locus=b"\x01" * 32,
            conflict_id=b"\x02" * 32,
            selected_claim_id=b"\x03" * 32,
            groups=groups,
            selected_group=selected,
        )
    assert err.value.rule == rule


def test_an_old_version_tag_on_a_group_decision_is_refused():
    _, d = decided("2026-04-08", "2026-04-10")
    raw = d.to_value()
    assert raw["v"] == 2
    from statefuse.registry.value import encode_value

    with pytest.raises(EncodingError):
        decode_op(encode_value({**raw, "v": 1}))
    without = {k: v for k, v in raw.items() if k not in ("groups", "selected_group")}
    with pytest.raises(EncodingError):
        decode_op(encode_value(without))  # a v2 tag needs the group fields


# --- deciding from what a viewer was shown -------------------------------------------------------


def test_a_viewer_that_does_not_see_every_candidate_records_the_full_conflict_groups():
    a, b = claim(w("a"), "2026-04-08"), claim(w("b"), "2026-04-10")
    secret = claim(w("c"), "2026-05-01", visibility=["admin"])
    state = state_of([a, b, secret])
    (surfaced,) = project(state, Lens()).surfaced_conflicts
    planner = w("planner")
    with pytest.raises(OpRuleError) as err:
        planner.decide_on(surfaced, a.claim_id)  # a hidden value it cannot name
    assert (err.value.field, err.value.rule) == ("state", "full-conflict")
    d = planner.decide_on(surfaced, a.claim_id, state=state)
    assert d.groups == tuple(sorted(g.group_id for g in state.conflicts[0].groups))
    later = state_of([a, b, secret, d, claim(w("e"), "2026-04-10")])
    assert later.decision_applies(d)
    assert project(later, Lens()).selected[KEY].claim == a
    assert project(later, Lens(roles={"admin"})).selected[KEY].claim == a


def test_a_viewer_shown_every_candidate_needs_no_state():
    a, b = claim(w("a"), "2026-04-08"), claim(w("b"), "2026-04-10")
    (surfaced,) = view_of([a, b]).surfaced_conflicts
    d = w("planner").decide_on(surfaced, b.claim_id)
    (conflict,) = state_of([a, b]).conflicts
    assert d.groups == tuple(sorted(g.group_id for g in conflict.groups))


def test_a_surfaced_snapshot_that_moved_on_records_only_the_values_it_showed():
    a, b = claim(w("a"), "2026-04-08"), claim(w("b"), "2026-04-10")
    (surfaced,) = view_of([a, b]).surfaced_conflicts
    newer = claim(w("c"), "2026-04-12")  # arrives between the view and the decision
    state = state_of([a, b, newer])
    d = w("planner").decide_on(surfaced, a.claim_id, state=state)
    assert len(d.groups) == 2
    assert reason_of(state_of([a, b, newer, d]), d) is StaleReason.NEW_VALUE


# --- determinism and the model -------------------------------------------------------------------


def _story_ops():
    (a, b), d = decided("2026-04-08", "2026-04-10")
    more = [claim(w(f"c{i}"), v) for i, v in enumerate(["2026-04-08", "2026-04-10", "2026-04-08"])]
    return [a, b, d, *more, w("x").retract(claim_id=a.claim_id)]


@given(st.permutations(_story_ops()), st.integers(1, 4))
def test_the_same_ops_in_any_order_give_the_same_view_and_selection(order, chunk):
    reference = view_of(_story_ops())
    m = Materializer(registry=REG)
    for i in range(0, len(order), chunk):
        m.apply_all(order[i : i + chunk])
    assert m.state().digest() == state_of(_story_ops()).digest()
    assert project(m.state(), Lens()).to_json() == reference.to_json()
    assert view_of(order).to_json() == reference.to_json()


#: Values of a number predicate: 1000 and "1,000" agree, as do 999 and "999.00".
VALUES = (1000, "1,000", 999, "999.00", 5, 7)
NORMAL = {1000: 1000, "1,000": 1000, 999: 999, "999.00": 999, 5: 5, 7: 7}
PKEY = ("p", "item", "price")
steps = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(0, len(VALUES) - 1)),
        st.tuples(st.just("retract"), st.integers(0, 30)),
        st.tuples(st.just("decide"), st.integers(0, 30)),
    ),
    max_size=25,
)


@given(steps)
def test_decisions_follow_a_simple_model_of_the_rule(program):
    """Random assertions, retractions and decisions against a model that knows only values:
    a decision applies iff its value is held and no value outside those it saw is."""
    ops, claims, decisions = [], [], []  # decisions: (op, values seen, value chosen)
    writers = [w(n) for n in ("ana", "bo", "cy")]
    for i, step in enumerate(program):
        writer = writers[i % 3]
        writer.observe(ops)
        if step[0] == "claim":
            c = writer.claim(*PKEY, VALUES[step[1]])
            ops.append(c)
            claims.append(c)
        elif step[0] == "retract" and claims:
            ops.append(writer.retract(claim_id=claims[step[1] % len(claims)].claim_id))
        elif step[0] == "decide":
            state = state_of(ops)
            if state.conflicts:
                (conflict,) = state.conflicts
                pick = conflict.candidates[step[1] % len(conflict.candidates)]
                d = writer.decide_on(conflict, pick)
                seen = {NORMAL[state.claims[c].value] for c in conflict.candidates}
                ops.append(d)
                decisions.append((d, seen, NORMAL[state.claims[pick].value]))
    state = state_of(ops)
    active = {c.claim_id: NORMAL[c.value] for c in state.active_claims()}
    held = set(active.values())
    applicable = []
    for d, seen, chosen in decisions:
        expected = (
            StaleReason.CHOSEN_VALUE_LOST
            if chosen not in held
            else StaleReason.NEW_VALUE
            if not held <= seen
            else None
        )
        assert reason_of(state, d) is expected
        assert state.decision_applies(d) is (expected is None)
        if expected is None:
            applicable.append((d, chosen))
    view = project(state, Lens())
    if len(held) > 1:
        if applicable:
            d, chosen = max(applicable, key=lambda x: (x[0].lamport, x[0].op_id))
            sel = view.selected[PKEY]
            assert sel.how is How.DECISION and NORMAL[sel.claim.value] == chosen
            expected_claim = (
                d.selected_claim_id
                if d.selected_claim_id in active
                else min(c for c, v in active.items() if v == chosen)
            )
            assert sel.claim.claim_id == expected_claim
        else:
            assert view.unresolved == (PKEY,)


# --- the story of the issue ----------------------------------------------------------------------


def test_a_third_agent_agreeing_with_the_decided_date_does_not_reopen_the_conflict():
    planner, alice, bob, carol = (Replica.memory(space="team") for _ in range(4))
    alice.add_claim(*KEY, "2026-04-08")
    bob.add_claim(*KEY, "2026-04-10")
    planner.merge(alice)
    planner.merge(bob)

    def context() -> str:
        return context_for(planner.state(), Lens(), budget=2000).text

    assert "UNRESOLVED" in context() or "unresolved" in context().lower()
    (surfaced,) = project(planner.state(), Lens()).surfaced_conflicts
    pick = next(c for c in surfaced.candidates if c.value == "2026-04-08")
    planner.decide(surfaced, pick.claim_id, reason="vendor confirmed")
    assert "2026-04-08" in context() and "UNRESOLVED" not in context()
    carol.add_claim(*KEY, "2026-04-08")  # chatty worker corroborates the decided date
    planner.merge(carol)
    text = context()
    assert "UNRESOLVED" not in text and "2026-04-08" in text
    sel = project(planner.state(), Lens()).selected[KEY]
    assert sel.how is How.DECISION and sel.claim.value == "2026-04-08"
    assert planner.state().stale_decisions == ()


# --- a decision for a hidden claim hints at nothing (SEMANTICS §7: hidden claims only counted) --


def hidden_decided(pick_hidden: bool = True):
    """SA by a, SB by b, SA again by hr, visible to ``hr`` only; a decision for SA naming hr's
    claim (or a's)."""
    ca, cb = claim(w("a"), "SA"), claim(w("b"), "SB")
    ch = claim(w("hr"), "SA", visibility=["hr"])
    (conflict,) = state_of([ca, cb, ch]).conflicts
    planner = w("planner")
    planner.observe([ca, cb, ch])
    named = ch if pick_hidden else ca
    return [ca, cb, ch, planner.decide_on(conflict, named.claim_id, reason="hr confirmed")], ca


def test_a_decision_naming_a_hidden_claim_gives_a_lens_without_its_roles_the_reason_alone():
    ops, ca = hidden_decided()
    v = view_of(ops)
    sel = v.selected[KEY]
    assert sel.how is How.DECISION and sel.claim.claim_id == ca.claim_id
    assert sel.reason == "hr confirmed"
    assert v.explanations[KEY] == (
        "p/launch/deadline [global]: 'SA' (decision: hr confirmed; 2 candidate values)"
    )
    assert "not shown" not in v.to_json() and "decided claim" not in v.to_json()
    assert v.excluded["hidden"] == 1
    # the View is the one a decision naming the visible claim of that value gives
    assert v.to_json() == view_of(hidden_decided(pick_hidden=False)[0]).to_json()
    # a lens with the roles sees the decided claim itself
    assert view_of(ops, Lens(roles=("hr",))).selected[KEY].reason == "hr confirmed"


_CLAIM = st.tuples(st.sampled_from(("SA", "SB", "SC")), st.booleans())


@given(st.lists(_CLAIM, min_size=2, max_size=6), st.integers(0, 10))
def test_a_view_cannot_tell_a_decision_named_a_hidden_claim(specs, at):
    """Deciding for a hidden claim of a value gives a lens without its roles the very View (and
    context) deciding for the lowest visible claim of that value gives: no field hints at it."""
    claims = [
        claim(w(f"w{i}"), v, visibility=["hr"] if hidden else [])
        for i, (v, hidden) in enumerate(specs)
    ]
    conflicts = state_of(claims).conflicts
    if not conflicts:
        return
    both = [
        v
        for v in {c.value for c in claims}
        if any(c.visibility for c in claims if c.value == v)
        and any(not c.visibility for c in claims if c.value == v)
    ]
    if not both:
        return
    value = sorted(both)[at % len(both)]
    hidden = [c for c in claims if c.value == value and c.visibility]
    shown = min(
        (c for c in claims if c.value == value and not c.visibility), key=lambda c: c.claim_id
    )
    out = []
    for named in (hidden[at % len(hidden)], shown):
        planner = w("planner")
        planner.observe(claims)
        d = planner.decide_on(conflicts[0], named.claim_id, reason="why")
        v = view_of([*claims, d])
        ctx = assemble_context(v, query="deadline", budget=2000)
        out.append((v.to_json(), ctx.to_json()))
        for c in claims:
            if c.visibility:
                assert c.claim_id.hex() not in out[-1][0] + out[-1][1]
        assert "decided claim" not in out[-1][0] + out[-1][1]
    assert out[0] == out[1]
