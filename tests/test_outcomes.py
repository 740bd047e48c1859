"""Decision outcomes (SEMANTICS §6): select, preserve, merge and defer; their encoding, their
staleness, how each shows in the View and the context, and what a peer of the previous release
does with them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import EncodingError, OpRuleError, Writer, decode_op, materialize
from statefuse.core.op import DecisionAdded, Outcome, decode_ops
from statefuse.core.state import StaleReason
from statefuse.reading.context import context_for
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.view import How
from statefuse.sync.replica import Replica

KEY = ("shop", "acme", "hours")
L, C, S = bytes(range(32)), bytes(range(1, 33)), bytes(range(2, 34))
G1, G2 = bytes([7] * 32), bytes([9] * 32)


def w(name: str) -> Writer:
    return Writer(name, clock=lambda: 0)


def two_perspectives():
    """The issue's example: two agents, both right from where they stand."""
    a, b = w("london-agent"), w("paris-agent")
    ops = [a.claim(*KEY, "9-17"), b.claim(*KEY, "10-18")]
    return ops, materialize(ops)


# --- encoding ------------------------------------------------------------------------------------


def test_select_decisions_keep_their_bytes_and_ids():
    # ids computed by the release before outcomes existed
    v1 = DecisionAdded("planner", 5, 1000, locus=L, conflict_id=C, selected_claim_id=S, reason="r")
    v2 = DecisionAdded(
        "planner", 5, 1000, locus=L, conflict_id=C, selected_claim_id=S, reason="r",
        groups=(G1, G2), selected_group=G2,
    )  # fmt: skip
    assert v1.op_id.hex() == "2738cf354a67d820449abda35a45d580744f256e94c88319b18b464a6f193e64"
    assert v2.op_id.hex() == "841e1d1543f8e4d16a37c1c6c5c014a15854662ebd70bd4e023c0a66d3a335bb"
    assert b"outcome" not in v2.encode() and b"made_at" not in v2.encode()
    ops, state = two_perspectives()
    d = w("p").decide_on(state.conflicts[0], ops[0].claim_id, state=state)
    assert d.to_value()["v"] == 2 and d.outcome is Outcome.SELECT


@pytest.mark.parametrize("outcome", ["preserve", "defer", "merge", "select+version"])
def test_each_new_outcome_is_version_3_and_decodes_to_the_same_op(outcome):
    ops, state = two_perspectives()
    p = w("p")
    if outcome == "merge":
        m = p.claim(*KEY, "9-18", depends_on=[c.claim_id for c in ops])
        state = materialize([*ops, m])
        d = p.decide_on(state.conflicts[0], m.claim_id, outcome="merge", state=state)
    elif outcome == "select+version":
        head = (bytes([3] * 32), 4, bytes([5] * 32))
        d = p.decide_on(state.conflicts[0], ops[0].claim_id, state=state, made_at=[head])
        assert d.made_at == (head,)
    else:
        d = p.decide_on(state.conflicts[0], outcome=outcome, state=state, reason="why")
    assert d.to_value()["v"] == 3
    assert decode_op(d.encode()).op_id == d.op_id
    batch = [d.encode()] * 4  # the batch decoder takes the same layout
    assert [o.op_id for o in decode_ops(batch)] == [d.op_id] * 4
    assert decode_ops(batch)[0].outcome is d.outcome and decode_ops(batch)[0].made_at == d.made_at


def test_a_version_3_decision_labelled_as_an_earlier_version_is_refused():
    _, state = two_perspectives()
    d = w("p").decide_on(state.conflicts[0], outcome="preserve", state=state)
    raw = d.to_value()
    raw["v"] = 2
    from statefuse.registry.value import encode_value

    with pytest.raises(EncodingError) as e:
        decode_op(encode_value(raw))
    assert e.value.rule in {"op-version", "op-fields"}


@pytest.mark.parametrize(
    ("kwargs", "field", "rule"),
    [
        ({"outcome": "preserve", "groups": (G1, G2), "selected_group": G1}, "selected_group",
         "outcome-selects-nothing"),
        ({"outcome": "defer", "groups": (G1, G2)}, "reason", "defer-reason"),
        ({"outcome": "preserve"}, "groups", "decision-groups"),
        ({"outcome": "choose", "groups": (G1, G2)}, "outcome", "outcome"),
        ({"made_at": [(b"x", 1, S)], "groups": (G1, G2), "selected_group": G1}, "made_at[]",
         "id-length"),
        ({"made_at": [(S, 0, S)], "groups": (G1, G2), "selected_group": G1}, "made_at[]",
         "made-at-head"),
    ],
)  # fmt: skip
def test_a_decision_that_breaks_an_outcome_rule_is_refused_naming_the_field(kwargs, field, rule):
    with pytest.raises(OpRuleError) as e:
        DecisionAdded("p", 1, 0, locus=L, conflict_id=C, selected_claim_id=S, **kwargs)
    assert (e.value.field, e.value.rule) == (field, rule)


def test_the_writer_checks_what_each_outcome_needs():
    ops, state = two_perspectives()
    conflict = state.conflicts[0]
    p = w("p")
    cases = [
        (lambda: p.decide_on(conflict, outcome="select", state=state), "claim_id", "outcome-claim"),
        (
            lambda: p.decide_on(conflict, ops[0].claim_id, outcome="preserve", state=state),
            "claim_id",
            "outcome-claim",
        ),
        (
            lambda: p.decide_on(conflict, ops[0].claim_id, outcome="merge", state=state),
            "claim_id",
            "merge-author",
        ),
    ]
    # a merged claim that names only one of the candidates it combines
    half = p.claim(*KEY, "9-18", depends_on=[ops[0].claim_id])
    s2 = materialize([*ops, half])
    cases.append(
        (
            lambda: p.decide_on(s2.conflicts[0], half.claim_id, outcome="merge", state=s2),
            "depends_on",
            "merge-depends-on",
        )
    )
    for call, field, rule in cases:
        with pytest.raises(OpRuleError) as e:
            call()
        assert (e.value.field, e.value.rule) == (field, rule)


# --- staleness: one rule for the four outcomes (model-based) ------------------------------------

VALUES = ("A", "B", "C", "D")

events = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(VALUES), st.sampled_from(("x", "y"))),
        st.tuples(st.just("retract"), st.integers(0, 20)),
    ),
    max_size=6,
)


@settings(max_examples=120, deadline=None)
@given(
    first=st.lists(st.sampled_from(VALUES), min_size=2, max_size=4).filter(
        lambda v: len(set(v)) > 1
    ),
    outcome=st.sampled_from(list(Outcome)),
    pick=st.integers(0, 3),
    later=events,
)
def test_a_decision_of_each_outcome_goes_stale_exactly_as_the_semantics_say(
    first, outcome, pick, later
):
    writers = [w(f"a{i}") for i in range(len(first))]
    ops: list = [wr.claim(*KEY, v) for wr, v in zip(writers, first, strict=True)]
    p = w("planner")
    chosen: str | None = None
    if outcome is Outcome.MERGE:
        merged = p.claim(*KEY, "M", depends_on=[c.claim_id for c in ops])
        ops.append(merged)
        state = materialize(ops)
        d = p.decide_on(state.conflicts[0], merged.claim_id, outcome=outcome, state=state)
        chosen = "M"
    elif outcome is Outcome.SELECT:
        state = materialize(ops)
        target = ops[pick % len(ops)]
        d = p.decide_on(state.conflicts[0], target.claim_id, state=state)
        chosen = target.value
    else:
        state = materialize(ops)
        d = p.decide_on(state.conflicts[0], outcome=outcome, state=state, reason="later")
    recorded = {c.value for c in ops}
    claims = [c for c in ops]
    for e in later:
        if e[0] == "add":
            c = w(e[2]).claim(*KEY, e[1])
            ops.append(c)
            claims.append(c)
        else:
            ops.append(w("r").retract(claim_id=claims[e[1] % len(claims)].claim_id))
    state = materialize([*ops, d])
    retracted = set(state.retracted)
    held = {c.value for c in claims if c.claim_id not in retracted}
    kept = {chosen} if chosen is not None else recorded
    if not kept <= held:
        lost = StaleReason.CHOSEN_VALUE_LOST if outcome.selects else StaleReason.KEPT_VALUE_LOST
        expected: StaleReason | None = lost
    elif not held <= recorded:
        expected = StaleReason.NEW_VALUE
    else:
        expected = None
    assert state.why_stale(d) is expected


# --- the View and the context --------------------------------------------------------------------


def test_a_preserve_decision_settles_the_conflict_with_every_value_accepted():
    ops, state = two_perspectives()
    d = w("planner").decide_on(
        state.conflicts[0], outcome="preserve", state=state, reason="London and Paris differ"
    )
    after = materialize([*ops, d])
    view = project(after, Lens())
    assert view.unresolved == () and view.surfaced_conflicts == ()
    sel = view.selected[KEY]
    assert sel.how is How.PRESERVED and {c.value for c in sel.claims} == {"9-17", "10-18"}
    kept = view.preserved[KEY]
    assert kept.author == "planner" and kept.reason == "London and Paris differ"
    assert {g[0].value for g in kept.groups} == {"9-17", "10-18"}
    assert KEY not in view.contested
    doc = json.loads(view.to_json())
    assert doc["preserved"]["shop/acme/hours"]["outcome"] == "preserve"
    text = context_for(after, Lens()).text
    assert "UNRESOLVED" not in text
    assert text.count("accepted alternative, preserved by decision") == 2
    assert "9-17" in text and "10-18" in text


def test_a_defer_decision_leaves_the_conflict_open_saying_who_and_why():
    ops, state = two_perspectives()
    d = w("planner").decide_on(
        state.conflicts[0], outcome="defer", state=state, reason="ask the owner"
    )
    view = project(materialize([*ops, d]), Lens())
    assert view.unresolved == (KEY,)
    [sc] = view.surfaced_conflicts
    assert sc.deferred is not None
    assert (sc.deferred.author, sc.deferred.reason) == ("planner", "ask the owner")
    assert json.loads(view.to_json())["surfaced_conflicts"][0]["deferred"]["reason"] == (
        "ask the owner"
    )
    text = context_for(materialize([*ops, d]), Lens()).text
    assert "UNRESOLVED — 2 candidate values (deferred by planner: ask the owner):" in text


def test_a_merge_decision_selects_the_merged_claim_and_names_what_it_combines():
    ops, _ = two_perspectives()
    p = w("planner")
    merged = p.claim(*KEY, "9-18", depends_on=[c.claim_id for c in ops])
    state = materialize([*ops, merged])
    d = p.decide_on(state.conflicts[0], merged.claim_id, outcome="merge", state=state)
    after = materialize([*ops, merged, d])
    view = project(after, Lens())
    assert view.selected[KEY].claim.claim_id == merged.claim_id
    assert view.selected[KEY].how is How.DECISION
    assert view.contested[KEY].outcome == "merge"
    text = context_for(after, Lens()).text
    assert "shop/acme/hours: 9-18 (chosen by decision; merged from 2 other values:" in text


def test_the_latest_applicable_decision_wins_whatever_its_outcome():
    ops, state = two_perspectives()
    p = w("planner")
    chose = p.decide_on(state.conflicts[0], ops[0].claim_id, state=state)
    deferred = p.decide_on(state.conflicts[0], outcome="defer", state=state, reason="re-check")
    view = project(materialize([*ops, chose, deferred]), Lens())
    assert view.unresolved == (KEY,)  # the later defer reopened it, as acknowledged
    preserved = p.decide_on(state.conflicts[0], outcome="preserve", state=state)
    view = project(materialize([*ops, chose, deferred, preserved]), Lens())
    assert view.selected[KEY].how is How.PRESERVED


def test_a_stale_preserve_decision_reopens_the_conflict_and_says_why():
    ops, state = two_perspectives()
    p = w("planner")
    d = p.decide_on(state.conflicts[0], outcome="preserve", state=state)
    third = w("tokyo-agent").claim(*KEY, "8-16")
    after = materialize([*ops, d, third])
    assert after.why_stale(d) is StaleReason.NEW_VALUE
    assert project(after, Lens()).unresolved == (KEY,)


# --- peers of the previous release ---------------------------------------------------------------


def test_a_peer_of_the_previous_release_quarantines_a_new_decision_with_the_reason(monkeypatch):
    a = Replica.memory(space="team")
    a.add_claim(*KEY, "9-17")
    with a.batch():
        pass
    b_writer = Replica.memory(space="team")
    b_writer.add_claim(*KEY, "10-18")
    a.merge(b_writer)
    [conflict] = a.state().conflicts
    a.decide(conflict, outcome="preserve", reason="both hold")
    old = Replica.memory(space="team")
    old.merge(b_writer)
    earlier = [cid for cid in a.change_ids()]
    datas = a.change_bytes(earlier)
    # The previous release knows op versions 1 and 2 only, and has no batch layout for 3.
    import statefuse.core.op as op_module

    monkeypatch.setattr(op_module, "_KNOWN_VERSIONS", frozenset({1, 2}))
    monkeypatch.setattr(
        op_module,
        "_FAST_TYPES",
        {k: v for k, v in op_module._FAST_TYPES.items() if v.version != 3},
    )
    before = old.state().digest()
    report = old.receive(datas)
    assert report.quarantined >= 1
    [entry] = [e for e in old.quarantine() if e.reason == "bad-op"]
    assert "op-version" in entry.message and "version 3" in entry.message, entry.message
    # the claims before the decision still count; the decision is not half-read
    assert old.state().digest() != before and old.state().decisions == ()


def test_get_reads_a_preserved_key_as_every_value_and_a_deferred_one_as_a_conflict():
    r, other = Replica.memory(space="team"), Replica.memory(space="team")
    r.add_claim(*KEY, "9-17")
    other.add_claim(*KEY, "10-18")
    r.merge(other)
    [conflict] = r.state().conflicts
    before = r.version()
    kept = r.decide(conflict, outcome="preserve")
    got = r.get("/".join(KEY))
    assert got.many and sorted(got.value) == ["10-18", "9-17"] and got.decision == kept
    r.decide(conflict, outcome="defer", reason="ask the owner")
    assert type(r.get("/".join(KEY))).__name__ == "KeyConflict"
    lines = r.diff(before).lines()
    assert sorted(line.rsplit(" ", 1)[1] for line in lines) == ["defers", "preserves"]
