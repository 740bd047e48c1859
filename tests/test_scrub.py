"""Scrubbing retracted values out of the working set (`statefuse.reading.scrub`,
`Transcript.CLEAN`).

Examples pin the rule (whole words, the minimum length, held values, the markers, the verbatim
switch); properties check it over random memories whose turns embed old and current values:
no value of a retracted claim the lens may see that no shown claim holds appears anywhere in
the context's text or JSON, a held value is never scrubbed, and the laws still hold.
"""

from __future__ import annotations

import json
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, Writer, materialize, project
from statefuse.core.op import ClaimAdded, Layer
from statefuse.reading.context import (
    REPEATED,
    ContextPolicy,
    Transcript,
    assemble_context,
    render_key,
)
from statefuse.reading.scrub import find, findable, fold, folded, retracted_index, value_text
from statefuse.reading.tokenizer import BpeTokenizer, CachedTokenizer

TOK = CachedTokenizer(BpeTokenizer())
LENS = Lens(roles=("ops",), session="s1", now=1_000)
fewer = settings(max_examples=min(settings.default.max_examples, 200), deadline=None)


def context(ops: list, *, budget: int = 4000, policy: ContextPolicy | None = None, lens=LENS):
    view = project(materialize(ops), lens)
    return assemble_context(
        view, query="", budget=budget, tokenizer=TOK, policy=policy or ContextPolicy()
    )


def turn_lines(ctx) -> list[str]:
    working = [s for s in ctx.sections if s.name.value == "working"]
    return list(working[0].lines) if working else []


# --- the rule, by example ---------------------------------------------------------------------


def test_fold_lowers_case_and_collapses_whitespace_and_maps_back_to_the_text():
    f, where = fold("  Budget\tIS \n $40K ")
    assert f == "budget is $40k"
    assert where is not None and "  Budget\tIS \n $40K "[where[10] :].startswith("$40K")
    assert fold("plain ascii") == ("plain ascii", None)


def test_short_values_are_not_looked_for_unless_they_hold_a_digit():
    assert not findable("yes") and not findable("5") and not findable("no")
    assert findable("2pm") and findable("$5k") and findable("blue")
    assert not findable("15")


def test_values_are_found_as_whole_words_only():
    anchors = [{"$40": ("$40k",), "roo": ("room a",)}]
    assert [m.value for m in find("from $40k to $50k", anchors)] == ["$40k"]
    assert find("from $140k", [{"40k": ("40k",)}]) == []
    assert find("Room AB is free", anchors) == []
    assert [(m.start, m.end) for m in find("in  ROOM\nA now", anchors)] == [(4, 10)]


def test_a_superseded_value_in_a_turn_is_replaced_by_a_marker_naming_its_replacement():
    w = Writer("a", clock=lambda: 0)
    old = w.claim("fact", "budget", "value", "$40k")
    turn = w.add_turn("user", "the budget moved from $40K to $50k", session="s1")
    new = w.claim("fact", "budget", "value", "$50k")
    ctx = context([old, turn, new, w.retract(claim_id=old.op_id, superseded_by=new.op_id)])
    line = turn_lines(ctx)[0]
    assert "40" not in line
    # the fact is the one key shown with subject/predicate budget/value: named without its ns
    assert line == 'user: "the budget moved from " [corrected: now budget/value] " to $50k"'
    assert ctx.scrubbed == {turn.op_id: (old.op_id,)}
    assert json.loads(ctx.to_json())["scrubbed"] == {turn.op_id.hex(): [old.op_id.hex()]}


def test_a_retracted_value_another_shown_claim_still_holds_is_kept():
    w = Writer("a", clock=lambda: 0)
    old = w.claim("fact", "budget", "value", "$40k")
    cap = w.claim("fact", "cap", "value", "at most $40k per order")
    turn = w.add_turn("user", "we said $40k", session="s1")
    ctx = context([old, cap, turn, w.retract(claim_id=old.op_id)])
    assert turn_lines(ctx) == ["user: we said $40k"]
    assert ctx.scrubbed == {}


def test_a_retraction_by_ref_scrubs_every_copy_and_no_pointer_when_nothing_replaces_it():
    w = Writer("a", clock=lambda: 0)
    one = w.claim("fact", "room", "value", "Room 7b")
    turn = w.add_turn("user", "meet in room 7B", session="s1")
    ctx = context([one, turn, w.retract(claim_ref=one.claim_ref)])
    assert turn_lines(ctx) == ['user: "meet in " [corrected]']


def test_hidden_retracted_claims_are_not_looked_for():
    w = Writer("a", clock=lambda: 0)
    secret = w.claim("fact", "code", "value", "zebra-42", visibility=("auditor",))
    turn = w.add_turn("user", "the code was zebra-42", session="s1")
    ctx = context([secret, turn, w.retract(claim_id=secret.op_id)])
    assert turn_lines(ctx) == ["user: the code was zebra-42"]


def test_verbatim_keeps_turns_as_written():
    w = Writer("a", clock=lambda: 0)
    old = w.claim("fact", "budget", "value", "$40k")
    turn = w.add_turn("user", "budget is $40k", session="s1")
    ops = [old, turn, w.retract(claim_id=old.op_id)]
    ctx = context(ops, policy=ContextPolicy(transcript=Transcript.VERBATIM))
    assert turn_lines(ctx) == ["user: budget is $40k"]
    assert ctx.to_dict()["policy"]["transcript"] == "verbatim"


def test_a_fact_a_turn_repeats_word_for_word_is_shown_once_as_the_fact():
    w = Writer("a", clock=lambda: 0)
    text = "Ship the feature by Friday and scope it down if needed"
    fact = w.claim("fact", "plan", "value", text)
    turn = w.add_turn("user", f"[VP]: {text}", session="s1")
    ctx = context([fact, turn])
    assert ctx.text.count("Ship the feature") == 1
    assert turn_lines(ctx) == ['user: "[VP]: " ' + REPEATED.format(key="plan/value")]
    assert ctx.repeated == {turn.op_id: (fact.op_id,)}


def test_a_marker_names_the_whole_key_when_another_shown_key_shares_subject_and_predicate():
    w = Writer("a", clock=lambda: 0)
    text = "Ship the feature by Friday and scope it down if needed"
    fact = w.claim("fact", "plan", "value", text)
    other = w.claim("draft", "plan", "value", "a different plan altogether")
    turn = w.add_turn("user", f"[VP]: {text}", session="s1")
    ctx = context([fact, other, turn])
    # plan/value alone would name two shown keys: the marker keeps the namespace
    assert turn_lines(ctx) == ['user: "[VP]: " ' + REPEATED.format(key="fact/plan/value")]


def test_identical_lines_are_shown_once():
    w = Writer("a", clock=lambda: 0)
    ops = [w.add_turn("user", "ok", session="s1") for _ in range(3)]
    ctx = context(ops)
    assert turn_lines(ctx) == ["user: ok"]
    assert len(ctx.included) == 3


def test_a_retraction_arriving_later_scrubs_turns_of_a_cached_preparation():
    from statefuse import ContextCache, Materializer

    w = Writer("a", clock=lambda: 0)
    m = Materializer()
    cache = ContextCache(tokenizer=TOK)
    old = w.claim("fact", "budget", "value", "$40k")
    for op in (old, w.add_turn("user", "budget is $40k", session="s1")):
        m.apply(op)
    first = assemble_context(project(m.state(), LENS), query="", budget=500, cache=cache)
    assert "$40k" in turn_lines(first)[0]
    m.apply(w.retract(claim_id=old.op_id))
    second = assemble_context(project(m.state(), LENS), query="", budget=500, cache=cache)
    assert turn_lines(second) == ['user: "budget is " [corrected]']


# --- properties --------------------------------------------------------------------------------

VALUES = (
    *("$40k", "$50k", "room b7", "zeta 9", "q3 plan", "2pm", "Delta Force", "$5k"),
    "ship it by Friday with a reduced scope for the q3 plan",
)
FILLER = ("the", "budget", "moved", "to", "from", "now", "said", "ok", "we")
KEYS = ("budget", "room", "time", "owner")


def _word_re(value: str) -> re.Pattern[str]:
    start = r"(?<!\w)" if re.match(r"\w", value[0]) else ""
    end = r"(?!\w)" if re.match(r"\w", value[-1]) else ""
    return re.compile(start + re.escape(value) + end)


turn = st.tuples(
    st.just("turn"),
    st.lists(st.sampled_from(VALUES + FILLER), min_size=1, max_size=8),
    st.sampled_from(("s1", "s1", "s2")),
)
step = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(KEYS), st.sampled_from(VALUES), st.booleans()),
    st.tuples(st.just("retract"), st.integers(0, 20), st.booleans()),
    st.tuples(st.just("supersede"), st.integers(0, 20), st.sampled_from(VALUES)),
    turn,
    turn,
)


def _build(program: list[tuple]) -> list:
    w = Writer("a", clock=lambda: 0)
    ops: list = []
    claims: list[ClaimAdded] = []
    for s in program:
        if s[0] == "claim":
            hidden = ("auditor",) if s[3] and s[1] == "owner" else ()
            c = w.claim("fact", s[1], "value", s[2], visibility=hidden)
            claims.append(c)
            ops.append(c)
        elif s[0] == "retract" and claims:
            c = claims[s[1] % len(claims)]
            if s[2]:
                ops.append(w.retract(claim_ref=c.claim_ref))
            else:
                ops.append(w.retract(claim_id=c.op_id))
        elif s[0] == "supersede" and claims:
            c = claims[s[1] % len(claims)]
            new = w.claim("fact", c.subject, "value", s[2])
            claims.append(new)
            ops += [new, w.retract(claim_id=c.op_id, superseded_by=new.op_id)]
        elif s[0] == "turn":  # numbered, so no two turn lines are identical (and merged)
            ops.append(w.add_turn("user", " ".join((*s[1], f"#{len(ops)}")), session=s[2]))
    return ops


def _held_and_gone(ops: list) -> tuple[set[str], set[str]]:
    """Folded values held by claims the View shows outside the working set, and folded values
    of retracted claims the lens may see that none of them holds."""
    state = materialize(ops)
    view = project(state, LENS)
    shown = [c for sel in view.selected.values() for c in sel.claims if c.kind != "turn"]
    shown += [c for sc in view.surfaced_conflicts for c in sc.candidates]
    held_texts = [folded(value_text(c.value)) for c in shown]
    gone = set()
    for cid in state.retracted:
        c = state.claims[cid]
        f = folded(value_text(c.value))
        seen = LENS.sees_roles(c.visibility) and findable(f)
        if seen and not any(_word_re(f).search(h) for h in held_texts):
            gone.add(f)
    return {h for h in held_texts if findable(h)}, gone


@fewer
@given(st.lists(step, max_size=25), st.sampled_from((60, 200, 4000)))
def test_no_unheld_retracted_value_appears_anywhere_in_the_context(program, budget):
    ops = _build(program)
    _, gone = _held_and_gone(ops)
    ctx = context(ops, budget=budget)
    doc = ctx.to_dict()
    texts = [folded(ctx.text), *(folded(ln) for s in doc["sections"] for ln in s["lines"])]
    for value in gone:
        pattern = _word_re(value)
        assert not any(pattern.search(t) for t in texts), value
    # the laws still hold: the budget, and the same text from the same input
    assert ctx.token_count <= budget
    assert context(ops, budget=budget).to_json() == ctx.to_json()


@fewer
@given(st.lists(step, max_size=25))
def test_scrubbing_never_removes_a_value_a_shown_claim_holds(program):
    ops = _build(program)
    held, gone = _held_and_gone(ops)
    turns = {o.op_id: o for o in ops if isinstance(o, ClaimAdded) and o.kind == "turn"}
    ctx = context(ops, budget=100_000)
    working = next((s for s in ctx.sections if s.name.value == "working"), None)
    if working is None:
        return
    by_id = {o.op_id: o for o in ops if isinstance(o, ClaimAdded)}
    # a speaker run's ``speaker:`` line shows no claim; every other line shows one turn
    body = [ln for ln in working.lines if not (ln.endswith(":") and ": " not in ln)]
    lines = dict(zip(working.claim_ids, body, strict=True))
    for cid, line in lines.items():
        raw = folded(turns[cid].value)
        refs = {folded(value_text(by_id[r].value)) for r in ctx.repeated.get(cid, ())}
        cut = [m.span() for v in gone | refs for m in _word_re(v).finditer(raw)]
        for h in held:
            for m in _word_re(h).finditer(raw):
                if all(m.end() <= a or m.start() >= b for a, b in cut):
                    assert _word_re(h).search(folded(line)), (h, line)


#: What a program does between two ops: nothing, derive the index and drop the State (the
#: next write goes in place), keep the State and its View (the next write copies the index), or
#: keep only the View (the State is dropped: the index is written in place under it).
READS = st.lists(st.sampled_from(("none", "read", "hold", "view")), min_size=1, max_size=6)


def _context_json(view) -> str:
    return assemble_context(view, query="", budget=4000, tokenizer=TOK).to_json()


#: Besides `step`: a claim in the lens's session (it shadows the key's global claims, so a View
#: may not show a value a later retraction makes findable), and a copy of an earlier claim sent
#: again (a copy of a claim retracted by ref is retracted on arrival).
more = st.one_of(
    step,
    st.tuples(st.just("narrow"), st.sampled_from(KEYS), st.sampled_from(VALUES)),
    st.tuples(st.just("again"), st.integers(0, 20)),
)


def _build_more(program: list[tuple]) -> list:
    ops = _build([s for s in program if s[0] not in ("narrow", "again")])
    w = Writer("b", clock=lambda: 0)
    at = 0
    out: list = []
    for s in program:
        if s[0] == "narrow":
            out.append(w.claim("fact", s[1], "value", s[2], scope="session:s1"))
        elif s[0] == "again":
            claims = [o for o in out if isinstance(o, ClaimAdded) and o.kind != "turn"]
            if claims:
                c = claims[s[1] % len(claims)]
                out.append(w.claim("fact", c.subject, "value", c.value))
        elif at < len(ops):
            out.append(ops[at])
            at += 1
    return out + ops[at:]


@fewer
@given(st.lists(more, max_size=30), READS)
def test_the_retracted_index_kept_by_the_index_equals_one_built_from_scratch(program, reads):
    from statefuse import Materializer
    from statefuse.reading.scrub import RetractedIndex

    ops = _build_more(program)
    m = Materializer()
    kept: list[tuple[int, object, object]] = []  # (ops applied, State or None, View)
    for i, op in enumerate(ops):
        m.apply(op)
        action = reads[i % len(reads)]
        if action == "read":
            m.state().derived(retracted_index)
        elif action in ("hold", "view"):
            state = m.state()
            kept.append((i + 1, state if action == "hold" else None, project(state, LENS)))
            del state
    final = m.state()
    kept.append((len(ops), final, project(final, LENS)))
    for n, state, view in kept:
        fresh = materialize(ops[:n])
        ix = fresh._ix
        scratch = RetractedIndex.of(ix.claims, ix.killed, ix.retractions)
        if state is not None:
            index = state.derived(retracted_index)
            assert index.entries() == scratch.entries()
            assert index.lengths == {
                a: tuple(sorted({len(f) for f in scratch.values if f[:3] == a}, reverse=True))
                for a in {f[:3] for f in scratch.values}
            }
            assert set(index.labels) == set(scratch.labels)
        # a View keeps what it saw, whatever the index took in after it
        assert _context_json(view) == _context_json(project(fresh, LENS))
        if view.retracted is not None:
            r = view.retracted
            assert r.index.entries(r.upto) == scratch.entries()


def test_a_view_keeps_scrubbing_what_was_retracted_when_it_was_made_after_later_writes():
    from statefuse import Materializer

    w = Writer("a", clock=lambda: 0)
    m = Materializer()
    first = w.claim("fact", "room", "value", "room b7")
    old = w.claim("fact", "budget", "value", "$40k")
    narrower = w.claim("fact", "budget", "value", "$45k", scope="session:s1")  # shadows $40k
    for op in (first, w.retract(claim_id=first.op_id), old, narrower):
        m.apply(op)
    m.apply(w.add_turn("user", "budget is $40k in room b7", session="s1"))
    before = project(m.state(), LENS)  # the State is dropped: the next write goes in place
    m.apply(w.retract(claim_id=old.op_id))
    after = project(m.state(), LENS)
    assert turn_lines(assemble_context(before, query="", budget=500)) == [
        'user: "budget is $40k in " [corrected]'
    ]
    assert turn_lines(assemble_context(after, query="", budget=500)) == [
        'user: "budget is " [corrected] " in " [corrected]'
    ]


def test_a_copy_arriving_after_its_retraction_by_ref_is_scrubbed_once_the_index_is_kept():
    from statefuse import Materializer

    w = Writer("a", clock=lambda: 0)
    m = Materializer()
    one = w.claim("fact", "room", "value", "Room 7b")
    m.apply(w.retract(claim_ref=one.claim_ref))
    m.apply(w.add_turn("user", "meet in room 7B", session="s1"))
    m.state().derived(retracted_index)  # kept by the index from here on
    m.apply(one)
    ctx = assemble_context(project(m.state(), LENS), query="", budget=500)
    assert turn_lines(ctx) == ['user: "meet in " [corrected]']


def test_render_key_is_what_markers_name():
    assert render_key(("fact", "budget", "value")) == "fact/budget/value"


# --- an active claim's whole value is never scrubbed (issue: an active turn shown corrected) ----


def test_a_turn_asserted_again_after_its_copy_was_retracted_is_shown_as_written():
    w = Writer("a", clock=lambda: 0)
    a1 = w.add_turn("user", "ship on friday please", session="s1")
    a2 = w.add_turn("user", "ship on friday please", session="s1")
    ctx = context([a1, a2, w.retract(claim_id=a1.claim_id)])
    assert turn_lines(ctx) == ["user: ship on friday please"]
    assert ctx.scrubbed == {}
    # a retracted value that no active claim holds whole is still scrubbed out of the turn
    short = w.add_turn("user", "friday", session="s1")
    ctx = context([a1, a2, short, w.retract(claim_id=a1.claim_id), w.retract(claim_id=short.op_id)])
    assert turn_lines(ctx) == ['user: "ship on " [corrected] " please"']
    assert ctx.scrubbed == {a2.op_id: (short.op_id,)}


PHRASES = ("ship on friday please", "friday", "room b7 at 2pm", "room b7", "2pm")
whole_step = st.one_of(
    st.tuples(st.just("turn"), st.sampled_from(PHRASES)),
    st.tuples(st.just("item"), st.sampled_from(PHRASES)),
    st.tuples(st.just("fact"), st.sampled_from(("when", "where")), st.sampled_from(PHRASES)),
    st.tuples(st.just("retract"), st.integers(0, 20), st.booleans()),
)


@fewer
@given(st.lists(whole_step, max_size=16), st.sampled_from((80, 100_000)))
def test_a_scrub_never_removes_a_value_an_active_visible_claim_holds_whole(program, budget):
    w = Writer("a", clock=lambda: 0)
    ops: list = []
    claims: list[ClaimAdded] = []
    for s in program:
        if s[0] == "turn":
            c = w.add_turn("user", s[1], session="s1")
        elif s[0] == "item":
            c = w.claim("scratch", f"item{len(ops)}", "note", s[1], layer=Layer.WORKING)
        elif s[0] == "fact":
            c = w.claim("fact", s[1], "value", s[2])
        else:
            if claims:
                c = claims[s[1] % len(claims)]
                ops.append(
                    w.retract(claim_ref=c.claim_ref) if s[2] else w.retract(claim_id=c.op_id)
                )
            continue
        claims.append(c)
        ops.append(c)
    state = materialize(ops)
    whole = {
        folded(value_text(c.value))
        for c in state.claims.values()
        if state.is_active(c.op_id) and LENS.sees_roles(c.visibility)
    }
    ctx = context(ops, budget=budget)
    for gone in ctx.scrubbed.values():
        for cid in gone:
            assert folded(value_text(state.claims[cid].value)) not in whole
