"""Projection (SEMANTICS §7): one unit test per rule, and the laws as properties."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import (
    AbstainAll,
    AuthorityRank,
    Cardinality,
    Chain,
    ClaimAdded,
    Conservative,
    LatestWins,
    OpRuleError,
    Policy,
    PredicateContract,
    Registry,
    ResolverConfigError,
    ResolverInput,
    Select,
    Selection,
    StaleNote,
    SurfacedConflict,
    View,
    Writer,
    locus_of,
    materialize,
    run_resolver,
)
from statefuse.reading.lens import Include, Lens, LensError, scope_rank
from statefuse.reading.projection import ProjectionError, project
from statefuse.reading.view import Contest, How
from statefuse.storage.testing import TEST_REGISTRY, op_lists

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
    early = a.claim("p", "x", "eta", "monday")
    b.observe([early])  # b writes after it saw early: a higher lamport, not a tie on claim ids
    late = b.claim("p", "x", "eta", "friday")
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


def test_a_viewer_decides_a_conflict_with_hidden_candidates_from_what_it_was_shown():
    a, b, c, planner = w("a"), w("b"), w("c"), w("planner")
    red, blue = a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")
    secret = c.claim("p", "x", "color", "secret-green", visibility=["admin"])
    ops = [red, blue, secret]
    (surfaced,) = view_of(ops).surfaced_conflicts
    assert [x.claim_id for x in surfaced.candidates] == sorted([red.claim_id, blue.claim_id])
    assert surfaced.conflict_id == materialize(ops, registry=REG).conflicts[0].conflict_id
    assert surfaced.not_shown == 1
    state = materialize(ops, registry=REG)
    d = planner.decide_on(surfaced, red.claim_id, state=state, reason="checked the invoice")
    assert len(d.groups) == 3  # the hidden value is recorded too, so it never looks new
    sel = view_of([*ops, d]).selected[KEY]
    assert sel.claim == red and sel.how is How.DECISION
    with pytest.raises(OpRuleError):
        planner.decide_on(surfaced, secret.claim_id, state=state)  # not shown to the viewer


def test_deciding_for_a_claim_that_is_not_a_candidate_is_refused():
    a, b = w("a"), w("b")
    ops = [a.claim("p", "x", "color", "red"), b.claim("p", "x", "color", "blue")]
    (conflict,) = materialize(ops, registry=REG).conflicts
    with pytest.raises(OpRuleError) as err:
        w("planner").decide_on(conflict, b"\x01" * 32)
    assert (err.value.field, err.value.rule) == ("claim_id", "candidate")


# --- the fast projection against a straightforward reference ------------------------------------


def reference_project(state, lens, *, resolver=None, authority_order=None):
    """Rules 1-4 of SEMANTICS §7 claim by claim and key by key, with nothing precomputed,
    memoized or made lazily: what `project` must give, however it gets there."""
    resolver = resolver or AbstainAll()
    authority = AuthorityRank(authority_order or state.registry.authority_order)
    hidden, ids = 0, {"out-of-scope": [], "expired": [], "shadowed": []}
    visible = {}
    for c in state.active_claims():
        if not lens.sees_roles(c.visibility):
            hidden += 1
        elif not lens.sees_scope(c.scope):
            ids["out-of-scope"].append(c.claim_id)
        elif lens.now is not None and c.expires is not None and c.expires < lens.now:
            ids["expired"].append(c.claim_id)
        else:
            visible[c.claim_id] = c
    by_key = {}
    for c in visible.values():
        by_key.setdefault(c.key, []).append(c)

    def rep(claims):
        return max(claims, key=lambda c: (c.confidence, c.lamport, c.claim_id))

    selected, unresolved, surfaced, explanations, contested = {}, [], [], {}, {}
    for key in sorted(by_key):
        claims = by_key[key]
        top = max(scope_rank(c.scope) for c in claims)
        here = sorted((c for c in claims if scope_rank(c.scope) == top), key=lambda c: c.claim_id)
        shadowed = sorted(c.claim_id for c in claims if scope_rank(c.scope) < top)
        ids["shadowed"].extend(shadowed)
        scope, name = here[0].scope, "/".join(key)
        note = f" (shadows {len(shadowed)} claim(s) of wider scope)" if shadowed else ""
        contract = state.registry.contract_for(key[0], key[2])
        if not contract.functional:
            selected[key] = Selection(
                key, scope, rep(here), tuple(here), How.MULTI, "all values hold"
            )
            values = ", ".join(repr(c.value) for c in here)
            explanations[key] = f"{name} [{scope}]: {values} (multi-valued){note}"
            continue
        conflict = state.conflict_at(locus_of(*key, scope))
        shown = {c.claim_id: c for c in here}
        groups = [tuple(here)]
        if conflict is not None:
            groups = [tuple(shown[i] for i in g.claim_ids if i in shown) for g in conflict.groups]
            groups = [g for g in groups if g]
        if len(groups) == 1:
            (group,) = groups
            how = How.SOLE if len(group) == 1 else How.AGREEMENT
            why = "only candidate" if how is How.SOLE else f"{len(group)} claims agree"
            selected[key] = Selection(key, scope, rep(group), group, how, why)
            explanations[key] = f"{name} [{scope}]: {rep(group).value!r} ({why}){note}"
            continue
        inp = ResolverInput(conflict, tuple(here), lens)
        held = {g.group_id for g in conflict.groups}

        def value_of(cid):
            return state.group_id(cid)

        def choice(d, conflict=conflict, here=here, held=held):
            """The shown claim decision ``d`` selects, if it applies (SEMANTICS §6)."""
            here_ids = {c.claim_id for c in here}
            if not d.groups:  # first release: the exact candidate set must be current
                ok = d.conflict_id == conflict.conflict_id and d.selected_claim_id in here_ids
                return d.selected_claim_id if ok else None
            if d.selected_group not in held or not held <= set(d.groups):
                return None
            if d.selected_claim_id in here_ids:
                return d.selected_claim_id
            same = [c.claim_id for c in here if value_of(c.claim_id) == d.selected_group]
            return min(same, default=None)

        decisions = [
            (d, choice(d))
            for d in state.decisions
            if d.locus == conflict.locus and lens.sees_scope(d.scope) and choice(d) is not None
        ]
        answer, how = None, How.RESOLVER
        if decisions:
            d, pick = max(decisions, key=lambda x: (x[0].lamport, x[0].op_id))
            why = d.reason or "decided"
            if pick != d.selected_claim_id:
                decided = state.claims.get(d.selected_claim_id)
                if decided is not None and lens.sees_roles(decided.visibility):
                    if not state.is_active(decided.claim_id):
                        why += " (the decided claim was retracted; another claim of its value"
                    else:
                        why += " (the decided claim is not shown; another claim of its value"
                    why += " is selected)"
            answer, how = Select(pick, why), How.DECISION
        elif contract.policy is not Policy.SURFACE:
            by_policy = LatestWins() if contract.policy is Policy.LATEST else authority
            answer = run_resolver(by_policy, inp)
            how = How.POLICY
        if not isinstance(answer, Select):
            answer, how = run_resolver(resolver, inp), How.RESOLVER
        if isinstance(answer, Select):
            pick = visible[answer.claim_id]
            group = next(g for g in groups if pick in g)
            selected[key] = Selection(key, scope, pick, group, how, answer.reason)
            by = {How.DECISION: "decision", How.POLICY: contract.policy.value}
            contested[key] = Contest(
                key,
                scope,
                conflict.locus,
                conflict.conflict_id,
                how,
                by.get(how, type(resolver).__name__),
                tuple(g for g in inp.groups if g != group),
            )
            explanations[key] = (
                f"{name} [{scope}]: {pick.value!r} ({how.value}: {answer.reason};"
                f" {len(groups)} candidate values){note}"
            )
        else:
            unresolved.append(key)
            surfaced.append(
                SurfacedConflict(
                    key,
                    scope,
                    conflict.locus,
                    conflict.conflict_id,
                    inp.candidates,
                    inp.groups,
                    answer.reason,
                    answer.error,
                    len(conflict.candidates) - len(here),
                )
            )
            values = " | ".join(repr(g[0].value) for g in groups)
            explanations[key] = (
                f"{name} [{scope}]: UNRESOLVED between {values} ({answer.reason}){note}"
            )

    def seen(cid):
        c = state.claims.get(cid)
        return c is not None and lens.sees_roles(c.visibility) and lens.sees_scope(c.scope)

    stale = {}
    for cid, causes in state.stale.items():
        if cid not in visible:
            continue
        notes = []
        for cause in causes:
            dep, named = cause.dependency, [c for c in cause.retracted if c in state.claims]
            if dep in state.claims:
                dep_shown = dep if seen(dep) else None
            elif named:
                dep_shown = dep if all(seen(c) for c in named) else None
            else:
                dep_shown = dep
            repl = {r for r in (*cause.superseded_by, *cause.current) if seen(r)}
            via = tuple(v for v in cause.via if seen(v))
            notes.append(StaleNote(dep_shown, tuple(sorted(repl)), via))
        stale[cid] = tuple(notes)
    return View(
        selected=selected,
        unresolved=tuple(unresolved),
        surfaced_conflicts=tuple(surfaced),
        stale=stale,
        excluded={"hidden": hidden, **{r: len(v) for r, v in ids.items()}},
        excluded_ids={r: tuple(sorted(v)) for r, v in ids.items()},
        explanations=explanations,
        contested=dict(sorted(contested.items())),
    )


RICH_VALUES_BY = {
    "color": ("red", "blue", "green", "red"),
    "price": (1000, "1,000", 999, "999.00"),
    "tags": ("a", "b", "c", "a"),
    "eta": ("mon", "fri", "mon", "sun"),
    "owner": ("dana", "lee", "dana", "kim"),
}
RICH = Registry(
    [
        PredicateContract("price", normalizer="number"),
        PredicateContract("tags", cardinality=Cardinality.MANY),
        PredicateContract("eta", policy=Policy.LATEST),
        PredicateContract("owner", policy=Policy.AUTHORITY),
        PredicateContract("owner", namespace="hr", policy=Policy.SURFACE),
    ],
    authority_order=("lead", "user", "bot"),
)
#: A small universe, so that claims collide: conflicts, agreement, shadowing and hiding are common.
RICH_KEYS = [("p", "x", p) for p in RICH_VALUES_BY] + [("hr", "x", "owner")]
RICH_SCOPES = ("global",) * 5 + ("task:t1", "task:t2", "session:s1", "hypothetical", "draft")
RICH_VISIBILITY = ((),) * 4 + (("admin",), ("ops",), ("admin", "ops"))
RICH_EXPIRES = (None, None, None, 500, 1500)
RICH_AUTHORITY = ("", "lead", "user", "bot")
RICH_CONFIDENCE = (0.9, 0.6, 0.3)

_i = st.integers
claim_steps = st.tuples(
    st.just("claim"),
    _i(0, 3),  # writer
    _i(0, len(RICH_KEYS) - 1),
    _i(0, 3),  # value
    _i(0, len(RICH_SCOPES) - 1),
    _i(0, len(RICH_VISIBILITY) - 1),
    _i(0, len(RICH_EXPIRES) - 1),
    _i(0, len(RICH_AUTHORITY) - 1),
    _i(0, len(RICH_CONFIDENCE) - 1),
    st.none() | _i(0, 20),  # depends on an earlier claim
)
_other_steps = {
    # two writers disagree about one key in the global scope: conflicts in short programs
    "clash": st.tuples(
        st.just("clash"),
        _i(0, len(RICH_KEYS) - 1),
        _i(0, 3),
        _i(0, 3),
        _i(0, len(RICH_AUTHORITY) - 1),
        _i(0, len(RICH_CONFIDENCE) - 1),
    ),
    "retract": st.tuples(st.just("retract"), _i(0, 20), st.booleans()),
    "decide": st.tuples(st.just("decide"), _i(0, 20), _i(0, 3), _i(0, 2)),
    "sync": st.tuples(st.just("sync"), _i(0, 3)),
}
#: Mostly claims, so that short programs already reach conflicts; shrinks towards "claim".
rich_steps = st.sampled_from(("claim",) * 5 + ("clash",) + tuple(_other_steps)).flatmap(
    lambda kind: claim_steps if kind == "claim" else _other_steps[kind]
)


def rich_ops(steps):
    """Play claim / retract / decide / sync steps by four writers who see what they sync."""
    ws = [Writer(n, registry=RICH, clock=lambda: 0) for n in ("ana", "bo", "cy", "di")]
    ops, claims = [], []
    for step in steps:
        if step[0] == "claim":
            _, who, k, v, s, vis, exp, auth, conf, dep = step
            key = RICH_KEYS[k]
            deps = [claims[dep % len(claims)].claim_id] if dep is not None and claims else []
            c = ws[who].claim(
                *key,
                RICH_VALUES_BY[key[2]][v],
                scope=RICH_SCOPES[s],
                visibility=RICH_VISIBILITY[vis],
                expires=RICH_EXPIRES[exp],
                authority=RICH_AUTHORITY[auth],
                confidence=RICH_CONFIDENCE[conf],
                depends_on=deps,
            )
            ops.append(c)
            claims.append(c)
        elif step[0] == "clash":
            _, k, v1, v2, auth, conf = step
            key = RICH_KEYS[k]
            for who, v in ((1, v1), (2, v2)):
                c = ws[who].claim(
                    *key,
                    RICH_VALUES_BY[key[2]][v],
                    authority=RICH_AUTHORITY[(auth + who) % len(RICH_AUTHORITY)],
                    confidence=RICH_CONFIDENCE[(conf * who) % len(RICH_CONFIDENCE)],
                )
                ops.append(c)
                claims.append(c)
        elif step[0] == "retract" and claims:
            target = claims[step[1] % len(claims)]
            ops.append(
                ws[0].retract(
                    claim_id=target.claim_id, superseded_by=claims[-1].claim_id if step[2] else None
                )
            )
        elif step[0] == "decide":
            conflicts = materialize(ops, registry=RICH).conflicts
            if conflicts:
                c = conflicts[step[1] % len(conflicts)]
                pick = c.candidates[step[2] % len(c.candidates)]
                scope = ("global", "task:t1", "session:s1")[step[3]]
                if step[1] % 3 == 2:  # a first-release decision, by its candidate set
                    ops.append(
                        ws[3].decide(
                            locus=c.locus,
                            conflict_id=c.conflict_id,
                            selected_claim_id=pick,
                            scope=scope,
                            reason=f"d{len(ops)}",
                        )
                    )
                else:
                    ops.append(ws[3].decide_on(c, pick, scope=scope, reason=f"d{len(ops)}"))
        elif step[0] == "sync":
            ws[step[1]].observe(ops)
    return ops


rich_states = st.lists(rich_steps, min_size=4, max_size=40).map(
    lambda steps: materialize(rich_ops(steps), registry=RICH)
)
rich_lenses = st.builds(
    Lens,
    roles=st.sets(st.sampled_from(["admin", "ops"]), max_size=2),
    task=st.sampled_from([None, "t1", "t2"]),
    session=st.sampled_from([None, "s1"]),
    include=st.sets(st.sampled_from(list(Include))),
    now=st.sampled_from([None, 1000]),
)
deterministic_resolvers = st.sampled_from(
    [
        AbstainAll(),
        LatestWins(),
        Conservative(),
        Conservative(
            corroboration_margin=0,
            confidence_margin=0,
            authority_margin=0,
            authority_order=["lead", "user"],
        ),
        AuthorityRank(["user", "lead"]),
        Chain(AuthorityRank(["bot"]), Conservative(confidence_margin=0.3)),
    ]
)


@given(
    rich_states,
    rich_lenses,
    deterministic_resolvers,
    st.none() | st.sampled_from([("bot", "user"), ("user",)]),
)
def test_the_fast_projection_gives_the_view_of_a_straightforward_reference(
    state, lens, resolver, order
):
    expected = reference_project(state, lens, resolver=resolver, authority_order=order)
    for _ in range(2):  # the second call reads the per-state plan the first one kept
        got = project(state, lens, resolver=resolver, authority_order=order)
        assert got == expected
        assert list(got.selected.items()) == list(expected.selected.items())
        assert list(got.explanations.items()) == list(expected.explanations.items())
        assert got.to_json() == expected.to_json()


@given(rich_states, rich_lenses)
def test_reading_a_view_in_any_way_gives_the_same_entries(state, lens):
    view = project(state, lens)
    items = list(view.selected.items())
    assert [k for k, _ in items] == sorted(view.selected) == list(view.selected)
    assert len(view.selected) == len(items)
    for key, selection in items:
        assert key in view.selected and view.selected.get(key) is selection
        assert view.selected[key] is selection
    assert list(view.selected.values()) == [s for _, s in items]
    assert ("no", "such", "key") not in view.selected
    assert view.selected.get(("no", "such", "key")) is None
    with pytest.raises(KeyError):
        view.selected[("no", "such", "key")]
    assert dict(view.explanations) == {k: view.explanations[k] for k in view.explanations}
    assert set(view.explanations) == set(view.selected) | set(view.unresolved)
    assert repr(view.selected) == repr(dict(items))


@given(rich_states)
def test_the_state_helpers_agree_with_the_plain_answers(state):
    by_key = state.active_by_key()
    assert list(by_key) == sorted(by_key)
    flat = [c for claims in by_key.values() for c in claims]
    assert sorted(c.claim_id for c in flat) == [c.claim_id for c in state.active_claims()]
    for key, claims in by_key.items():
        assert all(c.key == key for c in claims)
        assert [c.claim_id for c in claims] == sorted(c.claim_id for c in claims)
    for c in state.conflicts:
        assert state.conflict_of(*c.key, c.scope) is c
        assert state.conflict_at(locus_of(*c.key, c.scope)) is c
        assert state.decisions_at(c.locus) == tuple(
            d for d in state.decisions if d.locus == c.locus
        )
    assert state.conflict_of("no", "such", "key") is None


@settings(max_examples=200)  # a cache's bookkeeping; the state itself is checked above
@given(st.lists(rich_steps, min_size=4, max_size=40))
def test_asking_one_key_for_its_conflict_first_gives_what_every_conflict_holds(steps):
    ops = rich_ops(steps)
    asked, whole = materialize(ops, registry=RICH), materialize(ops, registry=RICH)
    loci = sorted({(c.namespace, c.subject, c.predicate, c.scope) for c in asked.active_claims()})
    first = {lk: asked.conflict_of(*lk) for lk in loci}  # before `conflicts` was ever read
    expected = {(*c.key, c.scope): c for c in whole.conflicts}
    assert {lk: c for lk, c in first.items() if c is not None} == expected
    for c in asked.conflicts:  # the same objects, whichever was asked first
        assert first[(*c.key, c.scope)] is c is asked.conflict_of(*c.key, c.scope)


@given(rich_states, rich_lenses)
def test_a_view_holds_no_reference_to_a_hidden_claim(state, lens):
    view = project(state, lens)
    hidden = {id(c) for c in state.active_claims() if not lens.sees_roles(c.visibility)}
    reachable, todo, seen = [], [view], set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type(None), type)):
            continue  # (types lead to modules, and from there to everything)
        seen.add(id(obj))
        reachable.append(obj)
        if isinstance(obj, ClaimAdded):
            continue
        todo.extend(gc.get_referents(obj))
    assert not hidden & {id(o) for o in reachable if isinstance(o, ClaimAdded)}


@given(rich_states, rich_lenses)
def test_a_view_survives_pickling_and_deep_copying(state, lens):
    view = project(state, lens, resolver=Conservative())
    for copied in (pickle.loads(pickle.dumps(view)), copy.deepcopy(view)):
        assert copied.to_json() == view.to_json()
        assert list(copied.explanations.items()) == list(view.explanations.items())


# --- authority order from the registry ------------------------------------------------------------


def test_the_authority_policy_ranks_by_the_registrys_order_unless_project_is_given_one():
    def owners(registry):
        a, b = (Writer(n, registry=registry, clock=lambda: 0) for n in ("a", "b"))
        ops = [
            a.claim("p", "x", "owner", "dana", authority="user"),
            b.claim("p", "x", "owner", "lee", authority="agent"),
        ]
        return materialize(ops, registry=registry)

    key = ("p", "x", "owner")
    default = owners(REG)
    assert project(default, Lens()).selected[key].claim.value == "dana"
    agents_first = Registry(REG.contracts, authority_order=["agent", "user"])
    flipped = owners(agents_first)
    assert project(flipped, Lens()).selected[key].claim.value == "lee"
    assert project(flipped, Lens()).selected[key].how is How.POLICY
    overridden = project(flipped, Lens(), authority_order=["user", "agent"])
    assert overridden.selected[key].claim.value == "dana"


@pytest.mark.parametrize(
    ("order", "field"),
    [("user", "authority_order"), ((), "authority_order"), (("a", "a"), "authority_order[1]")],
)
def test_project_refuses_a_bad_authority_order_naming_it(order, field):
    state = materialize([w("a").claim("p", "x", "owner", "dana")], registry=REG)
    with pytest.raises(ResolverConfigError) as err:
        project(state, Lens(), authority_order=order)
    assert err.value.field == field
