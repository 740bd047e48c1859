"""Context assembly laws, as properties over random memories.

A world is a random program of the shared strategies (conflicts, corrections, dependencies,
decisions) plus random layer extras — identity, constraints, turns, signals, questions, facts
with words, stale chains — and claims that must never be shown, each carrying a unique marker
value: restricted to a role the lens lacks, of another task or session, hypothetical, draft,
expired, or retracted. Worlds are plain data, so a subprocess can rebuild one exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from statefuse import ClaimAdded, Lens, Op, Writer, materialize, project
from statefuse.reading.context import (
    ContextPolicy,
    PreviousValues,
    SectionName,
    context_for,
    render_key,
    render_value,
)
from statefuse.reading.ranker import LexicalRanker
from statefuse.reading.tokenizer import BpeTokenizer, ByteEstimate, CachedTokenizer
from statefuse.storage.testing import TEST_REGISTRY, full_key_lines, programs, run_program

NOW = 1_000_000
LENS_ARGS = {"roles": {"ops"}, "task": "t1", "session": "s1", "now": NOW}
WORDS = ("launch", "deadline", "vendor", "price", "budget", "owner", "risk", "plan", "team")
TOK = CachedTokenizer(BpeTokenizer())
#: Each example materializes, projects and assembles several times: the CI profile's 1,000
#: examples per property would take minutes, so these laws run at most 250.
fewer = settings(max_examples=min(settings.default.max_examples, 250))

EXTRA_KINDS = ("identity", "constraint", "turn", "signal", "question", "fact", "stale", "answer")
HIDDEN_KINDS = (
    "restricted",
    "restricted-constraint",
    "restricted-correction",
    "other-task",
    "other-session",
    "hypothetical",
    "draft",
    "expired",
    "retracted",
    "retracted-dependency",
)
#: Hidden kinds whose markers an opted-in previous-values policy may legitimately show.
RETRACTED_KINDS = ("retracted", "retracted-dependency")

_i = st.integers(0, 8)
extras = st.lists(st.tuples(st.sampled_from(EXTRA_KINDS), _i, _i), max_size=14)
hidden = st.lists(st.tuples(st.sampled_from(HIDDEN_KINDS), _i), max_size=8)
queries = st.lists(st.sampled_from((*WORDS, "vendor_a", "item3", "what", "is")), max_size=4).map(
    " ".join
)
budgets = st.one_of(st.integers(0, 80), st.integers(80, 700), st.integers(700, 6000))
worlds = st.fixed_dictionaries(
    {"program": programs(20), "extras": extras, "hidden": hidden, "query": queries}
)


def build(world: dict) -> tuple[list[Op], dict[str, str]]:
    """The ops of ``world`` and its hidden markers (marker -> hidden kind)."""
    ops: list[Op] = list(run_program([tuple(s) for s in world["program"]]))
    a = Writer("layers", clock=lambda: 0)
    facts: list[ClaimAdded] = []

    def add(op: Op) -> Op:
        ops.append(op)
        return op

    for kind, i, j in world["extras"]:
        word, other = WORDS[i % len(WORDS)], WORDS[j % len(WORDS)]
        if kind == "identity":
            add(a.identity(f"user{i % 3}", other, f"{word} lead", authority="manager"))
        elif kind == "constraint":
            add(a.constraint("proj", f"rule{i}", word, f"at most {j} {other}", constraint=other))
        elif kind == "turn":
            add(a.add_turn(f"speaker{i % 2}", f"about the {word} and {other}", session="s1"))
        elif kind == "signal":
            add(a.signal("market", word, j, expires=NOW + i))
        elif kind == "question":
            add(a.question("proj", f"item{i}", word, f"what is the {word} of item{i}?"))
        elif kind == "answer":
            add(a.claim("proj", f"item{i}", word, f"{other} answer"))
        elif kind == "fact":
            facts.append(add(a.claim("proj", f"item{i}", word, f"{word} {other} {j}")))
        elif kind == "stale":
            base = add(a.claim("calc", f"base{i}", word, j))
            dep = add(a.claim("calc", f"derived{i}", other, j * 2, depends_on=[base.claim_id]))
            if j % 3:
                fix = add(a.claim("calc", f"base{i}", word, j + 100))
                add(a.retract(claim_id=base.claim_id, superseded_by=fix.claim_id))
            else:
                add(a.retract(claim_id=base.claim_id))
            if i % 2:
                add(a.claim("calc", f"derived2x{i}", word, 1, depends_on=[dep.claim_id]))

    markers: dict[str, str] = {}
    for n, (kind, i) in enumerate(world["hidden"]):
        marker = f"HIDDEN{n}X{kind.upper()}"
        markers[marker] = kind
        word = WORDS[i % len(WORDS)]
        subject = f"item{i}"
        if kind == "restricted":
            add(a.claim("proj", subject, word, marker, visibility=["admin"]))
        elif kind == "restricted-constraint":
            add(a.constraint("proj", subject, word, marker, visibility=["admin"]))
        elif kind == "restricted-correction":
            old = add(a.claim("proj", subject, word, marker, visibility=["admin"]))
            new = add(a.claim("proj", subject, word, f"public {word}"))
            add(a.retract(claim_id=old.claim_id, superseded_by=new.claim_id))
        elif kind == "other-task":
            add(a.claim("proj", subject, word, marker, scope="task:t2"))
        elif kind == "other-session":
            add(a.add_turn("speaker0", marker, session="s2"))
        elif kind in ("hypothetical", "draft"):
            add(a.claim("proj", subject, word, marker, scope=kind))
        elif kind == "expired":
            add(a.signal("market", word, marker, expires=NOW - 1 - i))
        elif kind == "retracted":
            old = add(a.claim("proj", subject, word, marker))
            new = add(a.claim("proj", subject, word, f"corrected {word}"))
            add(a.retract(claim_id=old.claim_id, superseded_by=new.claim_id))
        elif kind == "retracted-dependency":
            old = add(a.claim("calc", f"hidden-base{n}", word, marker))
            add(a.claim("calc", f"hidden-derived{n}", word, i, depends_on=[old.claim_id]))
            add(a.retract(claim_id=old.claim_id))
    return ops, markers


def context_of(world, ops, budget, *, tokenizer=TOK, policy=None):
    state = materialize(ops, registry=TEST_REGISTRY)
    return context_for(
        state,
        Lens(**LENS_ARGS),
        query=world["query"],
        budget=budget,
        tokenizer=tokenizer,
        policy=policy or ContextPolicy(),
    )


@fewer
@given(worlds, budgets)
def test_no_hidden_value_ever_appears_in_the_text_or_the_json(world, budget):
    ops, markers = build(world)
    ctx = context_of(world, ops, budget)
    shown = ctx.to_json() + ctx.text
    for marker in markers:
        assert marker not in shown, marker
    opted_in = context_of(world, ops, budget, policy=ContextPolicy(previous=PreviousValues.SHOW))
    shown = opted_in.to_json()
    for marker, kind in markers.items():
        if kind not in RETRACTED_KINDS:
            assert marker not in shown, marker


@fewer
@given(worlds, budgets)
def test_the_final_text_is_never_over_budget_counted_whole(world, budget):
    ops, _ = build(world)
    ctx = context_of(world, ops, budget)
    assert ctx.token_count == BpeTokenizer().count(ctx.text) <= budget
    bound = context_of(world, ops, budget, tokenizer=ByteEstimate())
    assert bound.token_count == len(bound.text.encode()) <= budget


@fewer
@given(worlds, budgets)
def test_constraints_are_all_present_whenever_they_fit(world, budget):
    ops, _ = build(world)
    everything = context_of(world, ops, 10**7)
    rules = everything.section(SectionName.CONSTRAINTS)
    if rules is None:
        return
    head = [s.text for s in everything.sections if s.name.value in ("identity", "constraints")]
    lines = sum(len(s.lines) + 1 for s in everything.sections[:2])
    # Lines are costed one by one; joined text can merge a token at each line break.
    if TOK.count("\n\n".join(head)) + 2 * lines + 2 > budget:
        return
    ctx = context_of(world, ops, budget)
    got = ctx.section(SectionName.CONSTRAINTS)
    assert got is not None and got.lines == rules.lines


@fewer
@given(worlds, budgets)
@example(  # two values of a multi-valued key that read alike: the last copy is the one shown
    world={
        "program": [
            ("claim", 1, 3, 0, 0, []),
            ("reassert", 1, 0),
            ("claim", 0, 0, 0, 0, []),
            ("claim", 0, 0, 0, 0, []),
        ],
        "extras": [],
        "hidden": [],
        "query": "",
    },
    budget=58,
)
def test_the_highest_ranked_included_fact_is_the_last_fact_line(world, budget):
    ops, _ = build(world)
    state = materialize(ops, registry=TEST_REGISTRY)
    view = project(state, Lens(**LENS_ARGS))
    ctx = context_of(world, ops, budget)
    facts = ctx.section(SectionName.FACTS)
    if facts is None:
        return
    shown = {c for c in facts.claim_ids if c not in view.stale}
    if not shown:
        return
    fact_ids = shown | {c.claim_id for h in ctx.omitted if h.startswith("F") for c in ctx.expand(h)}
    pool = [state.claims[c] for c in sorted(fact_ids) if c not in view.stale]
    scores = LexicalRanker().scores(world["query"], pool)
    best = min(
        (state.claims[c] for c in shown), key=lambda c: (-scores.get(c.claim_id, 0.0), c.claim_id)
    )
    lines = full_key_lines(facts.lines)
    last = [ln for ln in lines if not ln.startswith(("… ", " ", "⚠"))][-1]
    key, value = render_key(best.key), render_value(best.value)
    assert last.startswith((f"{key}: {value}", f"{key} = {value}")), (last, key, value)


def displayable(view) -> set[bytes]:
    """Every claim a context may show: the selected claims and every conflict candidate."""
    out = set()
    for sel in view.selected.values():
        out.update(
            c.claim_id for c in (sel.claims if sel.how.value == "multi-valued" else [sel.claim])
        )
    for sc in view.surfaced_conflicts:
        out.update(c.claim_id for c in sc.candidates)
    return out


@fewer
@given(worlds, budgets)
def test_expand_returns_exactly_the_claims_left_out(world, budget):
    ops, _ = build(world)
    state = materialize(ops, registry=TEST_REGISTRY)
    ctx = context_of(world, ops, budget)
    included = set(ctx.included)
    assert len(included) == len(ctx.included)
    left_out: set[bytes] = set()
    for handle, ids in ctx.omitted.items():
        expanded = ctx.expand(handle)
        assert tuple(c.claim_id for c in expanded) == ids
        assert not left_out & set(ids) and not included & set(ids)
        left_out |= set(ids)
    everything = displayable(project(state, Lens(**LENS_ARGS)))
    assert included | left_out <= everything
    unaccounted = everything - included - left_out
    assert all(state.claims[c].kind == "question" for c in unaccounted)
    assert len(unaccounted) == ctx.excluded["answered-question"]


@fewer
@given(worlds, budgets, st.data())
def test_the_context_does_not_depend_on_the_order_ops_arrive_in(world, budget, data):
    ops, _ = build(world)
    shuffled = data.draw(st.permutations(ops))
    assert context_of(world, ops, budget).to_json() == context_of(world, shuffled, budget).to_json()


SCRIPT = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
from test_context_laws import build, context_of
for world, budget in json.load(sys.stdin):
    ops, _ = build(world)
    print(hashlib.sha256(context_of(world, ops, budget).to_json().encode()).hexdigest())
"""


@settings(max_examples=3)
@given(st.lists(st.tuples(worlds, budgets), min_size=1, max_size=6))
def test_the_context_is_identical_under_any_hash_seed(cases):
    payload = json.dumps(cases)
    here = str(Path(__file__).resolve().parent)
    root = str(Path(__file__).resolve().parent.parent)
    outputs = []
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": root}
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, here],
            input=payload,
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=300,
        )
        outputs.append(done.stdout)
    local = "".join(
        hashlib.sha256(context_of(w, build(w)[0], b).to_json().encode()).hexdigest() + "\n"
        for w, b in cases
    )
    assert outputs == [local] * 3
