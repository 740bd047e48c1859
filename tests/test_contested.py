"""A contested selection stays visible (`View.contested`, the context's mark, MCP, LangGraph).

When a decision, the registry's policy or a resolver selects one value of a conflict the lens
sees, the View keeps a `Contest` beside the selection: how it was settled and the other values
with their authors. Laws: a mark appears iff the selected key had a conflict among claims the
lens sees; a candidate the lens may not see is never counted nor named; a selection that no
visible conflict preceded carries no mark.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, Writer, materialize, project
from statefuse.reading.context import SectionName, assemble_context
from statefuse.reading.lens import scope_rank
from statefuse.reading.resolver import LatestWins
from statefuse.reading.tokenizer import BpeTokenizer, CachedTokenizer
from statefuse.reading.view import How
from statefuse.registry.contract import Policy, PredicateContract
from statefuse.registry.registry import Registry
from tests.test_projection import deterministic_resolvers, rich_lenses, rich_states

KEY = ("p", "launch", "deadline")
SETTLED = (How.DECISION, How.POLICY, How.RESOLVER)
TOK = CachedTokenizer(BpeTokenizer())


def w(name: str) -> Writer:
    return Writer(name, clock=lambda: 0)


def test_a_resolver_choice_keeps_the_other_values_and_their_authors_in_the_view():
    a, b = w("a"), w("b")
    old, new = a.claim(*KEY, "2026-04-08"), b.claim(*KEY, "2026-04-10")
    view = project(materialize([old, new]), Lens(), resolver=LatestWins())
    sel = view.selected[KEY]
    assert sel.how is How.RESOLVER
    contest = view.contested[KEY]
    assert contest.how is How.RESOLVER and contest.by == "LatestWins"
    assert contest.conflict_id == materialize([old, new]).conflicts[0].conflict_id
    other = old if sel.claim == new else new
    assert contest.others == ((other,),)
    assert contest.values == (other.value,) and contest.authors == ((other.author,),)
    doc = json.loads(view.to_json())["contested"]["p/launch/deadline"]
    assert doc["by"] == "LatestWins" and doc["how"] == "resolver"
    assert doc["others"] == [
        {
            "value": other.value,
            "claims": [other.claim_id.hex()],
            "authors": [other.author.hex() if isinstance(other.author, bytes) else other.author],
        }
    ]
    # no resolver: the conflict is surfaced, not contested
    assert KEY not in project(materialize([old, new]), Lens()).contested


def test_decisions_and_policies_mark_their_choice_and_agreement_does_not():
    a, b, c, planner = w("a"), w("b"), w("c"), w("planner")
    claims = [a.claim(*KEY, "mon"), b.claim(*KEY, "fri"), c.claim(*KEY, "fri")]
    (conflict,) = materialize(claims).conflicts
    planner.observe(claims)
    d = planner.decide_on(conflict, claims[0].claim_id, reason="vendor confirmed")
    view = project(materialize([*claims, d]), Lens())
    contest = view.contested[KEY]
    assert (contest.how, contest.by) == (How.DECISION, "decision")
    assert contest.others == (tuple(sorted(claims[1:], key=lambda x: x.claim_id)),)
    assert len(contest.authors[0]) == 2
    latest = Registry([PredicateContract("deadline", policy=Policy.LATEST)])
    view = project(materialize(claims, registry=latest), Lens())
    assert (view.contested[KEY].how, view.contested[KEY].by) == (How.POLICY, "latest")
    # agreeing claims, a sole candidate: no conflict preceded, no mark
    view = project(materialize(claims[1:]), Lens(), resolver=LatestWins())
    assert view.selected[KEY].how is How.AGREEMENT and view.contested == {}


def test_a_hidden_candidate_is_neither_counted_nor_named():
    a, b, hr = w("a"), w("b"), w("hr")
    mon, fri = a.claim(*KEY, "mon"), b.claim(*KEY, "fri")
    secret = hr.claim(*KEY, "SECRET-sun", visibility=["hr"])
    # only the hidden claim disagrees: the lens sees no conflict, so no mark
    view = project(materialize([mon, secret]), Lens(), resolver=LatestWins())
    assert view.selected[KEY].how is How.SOLE and view.contested == {}
    assert "SECRET" not in view.to_json()
    # a visible conflict besides it: the hidden value is not among the others
    view = project(materialize([mon, fri, secret]), Lens(), resolver=LatestWins())
    (contest,) = view.contested.values()
    assert len(contest.others) == 1 and secret not in contest.others[0]
    assert "SECRET" not in view.to_json() and secret.claim_id.hex() not in view.to_json()
    # the lens with the role sees three values
    view = project(materialize([mon, fri, secret]), Lens(roles=("hr",)), resolver=LatestWins())
    assert len(view.contested[KEY].others) == 2


def _visible_groups(state, lens, key):
    """The value groups among the claims at ``key`` the lens sees in the narrowest scope it
    sees there (rules 1-3 of SEMANTICS §7, worked out claim by claim)."""
    shown = [
        c
        for c in state.active_claims()
        if c.key == key
        and lens.sees_roles(c.visibility)
        and lens.sees_scope(c.scope)
        and not (lens.now is not None and c.expires is not None and c.expires < lens.now)
    ]
    if not shown:
        return {}
    top = max(scope_rank(c.scope) for c in shown)
    groups: dict[bytes, set[bytes]] = {}
    for c in shown:
        if scope_rank(c.scope) == top:
            groups.setdefault(state.group_id(c.claim_id), set()).add(c.claim_id)
    return groups


@settings(deadline=None)
@given(rich_states, rich_lenses, deterministic_resolvers)
def test_a_mark_appears_iff_the_selected_key_had_a_conflict_the_lens_sees(state, lens, resolver):
    view = project(state, lens, resolver=resolver)
    assert list(view.contested) == sorted(view.contested)
    for key, sel in view.selected.items():
        contract = state.registry.contract_for(key[0], key[2])
        groups = _visible_groups(state, lens, key)
        conflicted = contract.functional and len(groups) > 1
        assert (key in view.contested) == conflicted == (sel.how in SETTLED), key
        if not conflicted:
            continue
        contest = view.contested[key]
        assert contest.key == key and contest.how is sel.how
        # the others are exactly the visible groups but the selected one, hidden never counted
        other_ids = {frozenset(c.claim_id for c in g) for g in contest.others}
        chosen = frozenset(c.claim_id for c in sel.claims)
        assert other_ids | {chosen} == {frozenset(g) for g in groups.values()}
        assert len(contest.others) == len(groups) - 1
        for g in contest.others:
            assert all(lens.sees_roles(c.visibility) for c in g)
    assert set(view.contested) <= set(view.selected)
    # nothing of a claim the lens may not see is in the View's JSON
    text = view.to_json()
    for c in state.claims.values():
        if not lens.sees_roles(c.visibility):
            assert c.claim_id.hex() not in text


# --- the context marks a contested fact line ----------------------------------------------------


def test_the_context_lists_the_other_values_when_they_fit_and_a_handle_otherwise():
    a, b, c = w("a"), w("b"), w("c")
    ops = [a.claim(*KEY, "2026-04-08"), b.claim(*KEY, "2026-04-10"), c.claim(*KEY, "2026-04-12")]
    ops.append(a.claim("p", "launch", "owner", "dana"))
    view = project(materialize(ops), Lens(), resolver=LatestWins())
    sel = view.selected[KEY]
    roomy = assemble_context(view, query="deadline", budget=2000, tokenizer=TOK)
    (line,) = [ln for ln in roomy.text.splitlines() if "deadline" in ln]
    others = [x for x in ops[:3] if x is not sel.claim]
    assert "(chosen by resolver; contested: 2 other values: " in line
    for x in others:
        assert f"{x.value} by {x.author}" in line
    (entry,) = roomy.to_dict()["contested"].values()
    assert entry["handle"] is None and entry["by"] == "LatestWins"
    assert [o["value"] for o in entry["others"]] == [g[0].value for g in view.contested[KEY].others]
    assert roomy.contested == {sel.claim.claim_id: (view.contested[KEY], None)}
    # a tight budget: the line counts the other values under a handle that lists them
    tight = assemble_context(view, query="deadline", budget=45, tokenizer=TOK)
    (line,) = [ln for ln in tight.text.splitlines() if "deadline" in ln]
    assert "contested: 2 other values, expand: F" in line
    ((contest, handle),) = tight.contested.values()
    assert contest is view.contested[KEY]
    assert handle is not None and f"expand: {handle})" in line
    assert {x.claim_id for x in tight.expand(handle)} == {x.claim_id for x in others}
    # the owner line, never contested, carries no mark
    assert all("contested" not in ln for ln in roomy.text.splitlines() if "owner" in ln)


budgets = st.sampled_from((40, 80, 160, 400, 2000))


@settings(deadline=None)
@given(rich_states, rich_lenses, deterministic_resolvers, budgets)
def test_a_context_marks_exactly_the_contested_lines_and_names_no_hidden_claim(
    state, lens, resolver, budget
):
    view = project(state, lens, resolver=resolver)
    ctx = assemble_context(view, query="x eta owner", budget=budget, tokenizer=TOK)
    assert ctx.token_count <= budget
    facts = ctx.section(SectionName.FACTS)
    shown = set(facts.claim_ids) if facts is not None else set()
    for cid, (contest, handle) in ctx.contested.items():
        assert cid in shown
        assert view.contested[contest.key] is contest
        assert view.selected[contest.key].claim.claim_id == cid
        if handle is not None:
            others = sorted(x.claim_id for g in contest.others for x in g)
            assert [x.claim_id for x in ctx.expand(handle)] == others
            assert f"expand: {handle}" in ctx.text
    # every line of a selected claim shown in the facts section is marked iff it is contested
    marked = set(ctx.contested)
    for key, sel in view.selected.items():
        if sel.claim.claim_id in shown and sel.how is not How.MULTI:
            assert (sel.claim.claim_id in marked) == (key in view.contested)
    assert ("contested: " in (facts.text if facts else "")) == bool(marked)
    doc = ctx.to_json()
    for c in state.claims.values():
        if not lens.sees_roles(c.visibility):
            assert c.claim_id.hex() not in doc
