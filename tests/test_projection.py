"""Projection (SEMANTICS §7): one unit test per rule, and the laws as properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import (
    Cardinality,
    LatestWins,
    Policy,
    PredicateContract,
    Registry,
    Select,
    Writer,
    materialize,
)
from statefuse.lens import Include, Lens, LensError
from statefuse.projection import ProjectionError, project
from statefuse.testing import TEST_REGISTRY, op_lists
from statefuse.view import How

REG = Registry(
    [
        PredicateContract("price", normalizer="number"),
        PredicateContract("tags", cardinality=Cardinality.MANY),
        PredicateContract("eta", policy=Policy.LATEST),
        PredicateContract("owner", policy=Policy.AUTHORITY),
    ]
)


def w(name: str) -> Writer:
    return Writer(name, registry=REG, clock=lambda: 0)


def view_of(ops, lens=None, **kw):
    return project(materialize(ops, registry=REG), lens or Lens(), **kw)


KEY = ("p", "x", "color")


def test_a_claim_visible_only_to_a_role_is_hidden_from_other_lenses_and_only_counted():
    secret = w("a").claim("p", "x", "color", "ultraviolet", visibility=["admin"])
    public = w("b").claim("p", "x", "size", 3)
    v = view_of([secret, public])
    assert KEY not in v.selected and v.excluded["hidden"] == 1
    assert "ultraviolet" not in v.to_json() and secret.claim_id.hex() not in v.to_json()
    admin = view_of([secret, public], Lens(roles={"admin"}))
    assert admin.selected[KEY].claim == secret


def test_a_hidden_candidate_never_reaches_the_resolver_or_the_conflict_listing():
    seen: list[int] = []

    class Spy:
        def resolve(self, inp):
            seen.append(len(inp.candidates))
            return LatestWins().resolve(inp)

    a, b, c = w("a"), w("b"), w("c")
    ops = [
        a.claim("p", "x", "color", "red"),
        b.claim("p", "x", "color", "blue"),
        c.claim("p", "x", "color", "secret-green", visibility=["admin"]),
    ]
    v = view_of(ops, resolver=Spy())
    assert seen == [2] and "secret-green" not in v.to_json()


def test_a_conflict_whose_other_side_is_hidden_does_not_reach_the_view():
    a, b = w("a"), w("b")
    ops = [a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue", visibility=["x"])]
    v = view_of(ops)
    assert v.unresolved == () and v.selected[KEY].how is How.SOLE


def test_task_and_session_claims_are_seen_only_in_their_task_and_session():
    a = w("a")
    ops = [a.claim("p", "x", "color", "red", scope="task:t1")]
    assert KEY not in view_of(ops).selected
    assert view_of(ops).excluded_ids["out-of-scope"] == (ops[0].claim_id,)
    assert view_of(ops, Lens(task="t1")).selected[KEY].claim == ops[0]
    assert KEY not in view_of(ops, Lens(task="t2")).selected


def test_a_session_claim_shadows_a_task_claim_which_shadows_a_global_one():
    a = w("a")
    g = a.claim("p", "x", "color", "red")
    t = a.claim("p", "x", "color", "blue", scope="task:t")
    s = a.claim("p", "x", "color", "green", scope="session:s")
    v = view_of([g, t, s], Lens(task="t", session="s"))
    assert v.selected[KEY].claim == s and v.unresolved == ()
    assert set(v.excluded_ids["shadowed"]) == {g.claim_id, t.claim_id}
    assert "shadows 2" in v.explanations[KEY]
    assert view_of([g, t, s], Lens(task="t")).selected[KEY].claim == t


def test_hypothetical_and_draft_claims_are_seen_only_when_asked_for():
    a = w("a")
    fact = a.claim("p", "x", "color", "red")
    idea = a.claim("p", "x", "color", "blue", scope="hypothetical")
    assert view_of([fact, idea]).selected[KEY].claim == fact
    asked = view_of([fact, idea], Lens(include={Include.HYPOTHETICAL}))
    assert asked.selected[KEY].claim == idea


def test_expired_claims_are_excluded_with_their_reason():
    a = w("a")
    signal = a.claim("env", "cpu", "load", 0.9, expires=1_000)
    assert view_of([signal], Lens(now=999)).selected[("env", "cpu", "load")].claim == signal
    late = view_of([signal], Lens(now=1_001))
    assert late.excluded_ids["expired"] == (signal.claim_id,) and not late.selected


def test_agreeing_candidates_are_selected_as_agreement():
    ops = [w("a").claim("p", "x", "price", "1,000"), w("b").claim("p", "x", "price", 1000)]
    sel = view_of(ops).selected[("p", "x", "price")]
    assert sel.how is How.AGREEMENT and len(sel.claims) == 2


def test_a_multi_valued_predicate_selects_every_value():
    ops = [w("a").claim("p", "x", "tags", "a"), w("b").claim("p", "x", "tags", "b")]
    sel = view_of(ops).selected[("p", "x", "tags")]
    assert sel.how is How.MULTI and {c.value for c in sel.claims} == {"a", "b"}


def test_an_unresolved_conflict_is_surfaced_with_all_its_visible_candidates():
    ops = [w("a").claim("p", "x", "color", "red"), w("b").claim("p", "x", "color", "blue")]
    v = view_of(ops)
    assert v.unresolved == (KEY,) and KEY not in v.selected
    (c,) = v.surfaced_conflicts
    assert {x.value for x in c.candidates} == {"red", "blue"}
    assert "UNRESOLVED" in v.explanations[KEY]


def test_a_current_decision_selects_and_a_stale_one_does_not():
    a, b, c, planner = w("a"), w("b"), w("c"), w("planner")
    red, blue = a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")
    (conflict,) = materialize([red, blue], registry=REG).conflicts
    d = planner.decide(
        locus=conflict.locus,
        conflict_id=conflict.conflict_id,
        selected_claim_id=blue.claim_id,
        reason="customer said blue",
    )
    sel = view_of([red, blue, d]).selected[KEY]
    assert sel.claim == blue and sel.how is How.DECISION
    v = view_of([red, blue, d, c.claim("p", "x", "color", "green")])
    assert KEY in v.unresolved


def test_a_decision_scoped_to_a_task_applies_only_in_that_task():
    a, b, planner = w("a"), w("b"), w("planner")
    red, blue = a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")
    (conflict,) = materialize([red, blue], registry=REG).conflicts
    d = planner.decide(
        locus=conflict.locus,
        conflict_id=conflict.conflict_id,
        selected_claim_id=red.claim_id,
        scope="task:t",
    )
    assert KEY in view_of([red, blue, d]).unresolved
    assert view_of([red, blue, d], Lens(task="t")).selected[KEY].claim == red


def test_the_registry_policies_latest_and_authority_are_honoured():
    a, b = w("a"), w("b")
    b.observe([a.claim("p", "x", "noise", 0)])
    early, late = a.claim("p", "x", "eta", "monday"), b.claim("p", "x", "eta", "friday")
    sel = view_of([early, late]).selected[("p", "x", "eta")]
    assert sel.claim == late and sel.how is How.POLICY
    user = a.claim("p", "x", "owner", "dana", authority="user")
    agent = b.claim("p", "x", "owner", "lee", authority="agent")
    assert view_of([user, agent]).selected[("p", "x", "owner")].claim == user


def test_a_given_resolver_decides_surface_policy_conflicts():
    ops = [w("a").claim("p", "x", "color", "red"), w("b").claim("p", "x", "color", "blue")]
    sel = view_of(ops, resolver=LatestWins()).selected[KEY]
    assert sel.how is How.RESOLVER


def test_a_stale_claim_carries_a_repair_note_naming_only_visible_claims():
    a = w("a")
    dep = a.claim("p", "x", "deadline", "march")
    plan = a.claim("p", "x", "plan", "ship", depends_on=[dep.claim_id])
    fix = a.claim("p", "x", "deadline", "april", visibility=["admin"])
    t = a.retract(claim_id=dep.claim_id, superseded_by=fix.claim_id)
    v = view_of([dep, plan, fix, t])
    (note,) = v.stale[plan.claim_id]
    assert note.dependency == dep.claim_id and note.replacements == ()
    (admin_note,) = view_of([dep, plan, fix, t], Lens(roles={"admin"})).stale[plan.claim_id]
    assert admin_note.replacements == (fix.claim_id,)


def test_project_names_the_bad_argument():
    with pytest.raises(ProjectionError) as err:
        project("state", Lens())  # type: ignore[arg-type]
    assert err.value.field == "state"
    with pytest.raises(LensError) as lerr:
        Lens(include={"everything"})  # type: ignore[arg-type]
    assert lerr.value.field == "include"


lenses = st.builds(
    Lens,
    roles=st.sets(st.sampled_from(["admin", "ops"]), max_size=2),
    task=st.sampled_from([None, "t1"]),
    include=st.sets(st.sampled_from(list(Include))),
)


@given(op_lists(), lenses)
def test_projection_never_changes_the_state_and_is_replayable(ops, lens):
    state = materialize(ops, registry=TEST_REGISTRY)
    before = state.digest()
    first = project(state, lens, resolver=LatestWins())
    again = project(
        materialize(list(reversed(ops)), registry=TEST_REGISTRY), lens, resolver=LatestWins()
    )
    assert state.digest() == before
    assert first.to_json() == again.to_json()


@given(op_lists(), lenses)
def test_every_visible_conflict_is_either_selected_or_surfaced(ops, lens):
    state = materialize(ops, registry=TEST_REGISTRY)
    v = project(state, lens)
    for key in v.unresolved:
        assert key not in v.selected
    surfaced = {c.key for c in v.surfaced_conflicts}
    assert surfaced == set(v.unresolved)
    for c in state.conflicts:
        shown = [x for x in c.candidates if lens.sees_roles(state.claims[x].visibility)]
        if len(shown) > 1 and lens.sees_scope(c.scope):
            assert c.key in v.selected or c.key in surfaced


class Hostile:
    def __init__(self, answer):
        self.answer = answer

    def resolve(self, inp):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@given(op_lists(), st.sampled_from([Select(b"\x00" * 32, "x"), None, 42, RuntimeError("boom")]))
def test_a_hostile_resolver_never_selects_anything_it_was_not_shown(ops, answer):
    state = materialize(ops, registry=TEST_REGISTRY)
    v = project(state, Lens(), resolver=Hostile(answer))
    assert all(s.how is not How.RESOLVER for s in v.selected.values())
    assert all(c.error for c in v.surfaced_conflicts)


@given(op_lists(), st.data())
def test_hidden_claims_never_appear_anywhere_in_a_view_or_its_json(ops, data):
    from statefuse import ClaimAdded

    secret_role = "admin"
    hidden = [op for op in ops if isinstance(op, ClaimAdded)]
    hidden = data.draw(st.lists(st.sampled_from(hidden), unique=True)) if hidden else []
    writer = Writer("secret-keeper")  # default registry: any value is accepted
    secrets = [
        writer.claim(
            c.namespace,
            c.subject,
            c.predicate,
            "SECRET-VALUE",
            scope=c.scope,
            visibility=[secret_role],
        )
        for c in hidden
    ]
    state = materialize([*ops, *secrets], registry=TEST_REGISTRY)
    v = project(state, Lens(roles={"ops"}), resolver=LatestWins())
    text = v.to_json()
    assert "SECRET-VALUE" not in text
    for s in secrets:
        assert s.claim_id.hex() not in text
    assert v.excluded["hidden"] == sum(state.is_active(s.claim_id) for s in secrets)


def test_a_planner_decides_a_surfaced_conflict_and_the_next_view_selects_it():
    a, b, planner = w("a"), w("b"), w("planner")
    ops = [a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")]
    (conflict,) = view_of(ops).surfaced_conflicts
    choice = conflict.candidates[0]
    d = planner.decide_on(conflict, choice.claim_id, reason="checked the invoice")
    sel = view_of([*ops, d]).selected[KEY]
    assert sel.claim == choice and sel.how is How.DECISION
    assert sel.reason == "checked the invoice"


def test_deciding_for_a_claim_that_is_not_a_candidate_is_refused():
    from statefuse import OpRuleError

    a, b = w("a"), w("b")
    ops = [a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")]
    (conflict,) = materialize(ops, registry=REG).conflicts
    with pytest.raises(OpRuleError) as err:
        w("planner").decide_on(conflict, b"\x01" * 32)
    assert (err.value.field, err.value.rule) == ("claim_id", "candidate")
