"""Everything a context shows is ranked by the question (issue 26, item 1).

Conflicts, needs-review lines, working-set items and known unknowns compete for the budget by
relevance to the query, with the facts' ranker: what a cut leaves out is what the query matches
least. The working set stays oldest first on screen, a section that fits keeps its own order,
and with no query every section keeps today's order.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, Writer, materialize, project
from statefuse.reading.context import (
    ContextCache,
    ContextPolicy,
    SectionName,
    assemble_context,
    context_for,
)
from statefuse.reading.ranker import LexicalRanker
from statefuse.reading.resolver import Conservative
from statefuse.reading.tokenizer import BpeTokenizer, CachedTokenizer
from statefuse.storage.testing import full_key_lines
from statefuse.sync.replica import Replica

TOK = CachedTokenizer(BpeTokenizer())
NOW = 1_000_000
LENS = Lens(session="s1", now=NOW)
SUBJECTS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka")
PREDICATES = ("price", "owner", "deadline", "city", "vendor", "budget")
VALUES = ("paris", "london", "rome", "oslo", "lima", "cairo", "quito", "seoul")
fewer = settings(max_examples=min(settings.default.max_examples, 120), deadline=None)


def w(name: str) -> Writer:
    return Writer(name, clock=lambda: 0)


def conflict_ops(keys: list[tuple[str, str]], values: list[tuple[str, str]]) -> list:
    """A conflict at each (subject, predicate): writers a and b claim two different values."""
    ops = []
    for (sub, pred), (v1, v2) in zip(keys, values, strict=True):
        ops.append(w("a").claim("org", sub, pred, v1))
        ops.append(w("b").claim("org", sub, pred, v2))
    return ops


def conflict_scores(view, query: str) -> dict:
    """Each conflict's relevance by the ranker's scores: whether every value of it scores
    above zero (its key's words matched, or each value's), then its best candidate's score."""
    listed = [
        sc for sc in view.surfaced_conflicts if any(c.kind != "question" for c in sc.candidates)
    ]
    pool = [c for sc in listed for c in sc.candidates]
    scores = LexicalRanker().scores(query, pool)
    return {
        sc.key: (
            all(any(scores.get(c.op_id, 0.0) > 0 for c in g) for g in sc.groups),
            max(scores.get(c.op_id, 0.0) for c in sc.candidates),
        )
        for sc in listed
    }


def conflicts_shown(view, ctx) -> set:
    section = ctx.section(SectionName.CONFLICTS)
    if section is None:
        return set()
    ids = set(section.claim_ids)
    return {sc.key for sc in view.surfaced_conflicts if any(c.op_id in ids for c in sc.candidates)}


keysets = st.lists(
    st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES)),
    min_size=2,
    max_size=14,
    unique=True,
)
pairs = st.tuples(st.sampled_from(VALUES), st.sampled_from(VALUES)).filter(lambda p: p[0] != p[1])
query_words = st.lists(st.sampled_from((*SUBJECTS, *PREDICATES, *VALUES, "what", "is")), max_size=4)


@fewer
@given(
    keys=keysets,
    data=st.data(),
    words=query_words,
    budget=st.integers(60, 400),
    cached=st.booleans(),
)
def test_a_relevant_conflict_is_never_cut_while_a_less_relevant_one_is_shown(
    keys, data, words, budget, cached
):
    values = data.draw(st.lists(pairs, min_size=len(keys), max_size=len(keys)))
    view = project(materialize(conflict_ops(keys, values)), LENS, resolver=Conservative())
    query = " ".join(words)
    cache = ContextCache(tokenizer=TOK) if cached else None
    if cache is not None:  # a warm cache ranks as a cold call does
        assemble_context(view, query="owner price", budget=budget, tokenizer=TOK, cache=cache)
    ctx = assemble_context(view, query=query, budget=budget, tokenizer=TOK, cache=cache)
    score = conflict_scores(view, query)
    shown = conflicts_shown(view, ctx)
    cut = set(score) - shown
    if shown and cut:
        assert max(score[k] for k in cut) <= min(score[k] for k in shown), (shown, cut)
    # what is cut is exactly what the handle expands to
    handles = [h for h in ctx.omitted if h.startswith("X")]
    left = {c.key for h in handles for c in ctx.expand(h)}
    assert left == cut


def test_the_conflict_a_question_names_is_shown_among_many_and_the_rest_are_counted():
    keys = [(s, p) for s in SUBJECTS for p in PREDICATES]  # 48 conflicts
    values = [(VALUES[i % 8], VALUES[(i + 3) % 8]) for i in range(len(keys))]
    view = project(materialize(conflict_ops(keys, values)), LENS, resolver=Conservative())
    for cache in (None, ContextCache(tokenizer=TOK)):
        ctx = assemble_context(
            view, query="What is the deadline of Wonka?", budget=300, tokenizer=TOK, cache=cache
        )
        conflicts = ctx.section(SectionName.CONFLICTS)
        assert conflicts is not None
        lines = full_key_lines(conflicts.lines)
        assert "org/wonka/deadline: UNRESOLVED — 2 candidate values:" in lines
        # shown in key order, whatever their rank
        keyed = [ln.split(":")[0] for ln in lines if "UNRESOLVED" in ln]
        assert len(keyed) > 1 and keyed == sorted(keyed)
        note = conflicts.lines[-1]
        m = re.fullmatch(
            r"… (\d+) less relevant unresolved conflicts not shown \(expand: (X\d+), or a"
            r" narrower query\)",
            note,
        )
        assert m is not None, note
        assert int(m.group(1)) == 48 - len(keyed)
        assert len({c.key for c in ctx.expand(m.group(2))}) == int(m.group(1))


def test_a_candidate_value_named_by_the_query_counts_for_its_conflict():
    keys = [("acme", p) for p in PREDICATES]
    values = [("paris", "london"), ("rome", "oslo"), ("lima", "cairo")] * 2
    view = project(materialize(conflict_ops(keys, values)), LENS, resolver=Conservative())
    ctx = assemble_context(view, query="is it cairo", budget=90, tokenizer=TOK)
    shown = conflicts_shown(view, ctx)
    assert shown and all(key[2] in ("deadline", "budget") for key in shown)


def test_with_no_query_the_conflicts_keep_their_key_order_and_the_counted_line_of_today():
    keys = [(s, p) for s in SUBJECTS for p in PREDICATES]
    values = [(VALUES[i % 8], VALUES[(i + 3) % 8]) for i in range(len(keys))]
    view = project(materialize(conflict_ops(keys, values)), LENS, resolver=Conservative())
    ctx = assemble_context(view, query="", budget=300, tokenizer=TOK)
    shown = sorted(conflicts_shown(view, ctx))
    assert shown == sorted(view.unresolved)[: len(shown)]
    assert (
        ctx.section(SectionName.CONFLICTS)
        .lines[-1]
        .startswith(f"… {48 - len(shown)} more unresolved conflicts not shown (expand: X1)")
    )


def turns_ctx(query: str, **kw):
    a = w("a")
    texts = [f"note {i}: the weather is fine today" for i in range(12)]
    texts[2] = "note 2: the invoice from globex is overdue"
    turns = [a.add_turn("user" if i % 2 else "agent", t, session="s1") for i, t in enumerate(texts)]
    state = materialize(turns)
    return turns, context_for(state, LENS, query=query, tokenizer=TOK, **kw)


def test_a_turn_the_question_names_outlives_newer_ones_and_the_working_set_stays_oldest_first():
    turns, ctx = turns_ctx("overdue invoice from globex?", policy=ContextPolicy(working_limit=4))
    lines = ctx.section(SectionName.WORKING).lines
    assert lines[0] == (
        "… 8 less relevant working-set items not shown (expand: W1, or a narrower query)"
    )
    body = [ln for ln in lines[1:] if ln.startswith(("user: ", "agent: ", "note "))]
    assert any("globex is overdue" in ln for ln in body)
    # on screen oldest first: note 2 first, then the newest three
    numbers = [int(m.group(1)) for ln in body if (m := re.search(r"note (\d+)", ln))]
    assert numbers == sorted(numbers) == [2, 9, 10, 11]
    assert {c.claim_id for c in ctx.expand("W1")} == {
        t.claim_id for i, t in enumerate(turns) if i not in (2, 9, 10, 11)
    }


def test_with_no_query_the_working_set_keeps_the_newest_items():
    _, ctx = turns_ctx("", policy=ContextPolicy(working_limit=4))
    lines = ctx.section(SectionName.WORKING).lines
    assert lines[0] == "… 8 earlier working-set items not shown (expand: W1)"
    numbers = [int(m.group(1)) for ln in lines[1:] if (m := re.search(r"note (\d+)", ln))]
    assert numbers == [8, 9, 10, 11]


def test_an_open_question_the_query_names_is_kept_when_unknowns_are_cut():
    a = w("a")
    ops = [
        a.question("org", s, p, f"What is the {p} of {s}?") for s in SUBJECTS for p in PREDICATES
    ]
    ctx = context_for(materialize(ops), LENS, query="stark deadline", budget=120, tokenizer=TOK)
    unknowns = ctx.section(SectionName.UNKNOWNS)
    assert unknowns is not None
    assert any(ln.startswith("org/stark/deadline:") for ln in full_key_lines(unknowns.lines))
    assert unknowns.lines[-1].endswith("(expand: Q1, or a narrower query)")


def test_a_claim_needing_review_the_query_names_is_kept_when_the_list_is_cut():
    a = w("a")
    ops = []
    for s in SUBJECTS:
        basis = a.claim("org", s, "basis", f"{s} basis")
        ops += [
            basis,
            a.claim("org", s, "estimate", f"estimate for {s}", depends_on=[basis.claim_id]),
        ]
        ops.append(a.retract(claim_id=basis.claim_id))
    ctx = context_for(materialize(ops), LENS, query="umbrella estimate", budget=110, tokenizer=TOK)
    review = ctx.section(SectionName.NEEDS_REVIEW)
    assert review is not None
    assert any(ln.startswith("org/umbrella/estimate:") for ln in full_key_lines(review.lines))
    assert "less relevant claims needing review" in review.lines[-1]


@fewer
@given(
    texts=st.lists(
        st.lists(st.sampled_from((*SUBJECTS, *VALUES)), min_size=1, max_size=4),
        min_size=1,
        max_size=12,
    ),
    words=query_words,
    limit=st.integers(0, 6),
)
def test_the_working_set_is_cut_by_relevance_and_shown_oldest_first(texts, words, limit):
    a = w("a")
    turns = [a.add_turn("user", " ".join(t), session="s1") for t in texts]
    query = " ".join(words)
    ctx = context_for(
        materialize(turns),
        LENS,
        query=query,
        tokenizer=TOK,
        policy=ContextPolicy(working_limit=limit),
    )
    section = ctx.section(SectionName.WORKING)
    shown = [] if section is None else list(section.claim_ids)
    lamport = {t.claim_id: t.lamport for t in turns}
    assert [lamport[c] for c in shown] == sorted(lamport[c] for c in shown)  # oldest first
    scores = LexicalRanker().scores(query, turns)
    cut = [t.claim_id for t in turns if t.claim_id not in shown]
    if shown and cut:
        assert max(scores.get(c, 0.0) for c in cut) <= min(scores.get(c, 0.0) for c in shown)
        if not any(scores.get(c) for c in (*shown, *cut)):  # the query names none: newest kept
            assert min(lamport[c] for c in shown) > max(lamport[c] for c in cut)


def test_a_store_opened_on_its_derived_state_shows_the_conflict_a_question_names(tmp_path):
    """However many facts share the question's words, a lazily opened SQLite replica reads
    the conflict the question names, as a loaded replica shows it."""
    path = tmp_path / "memory.db"
    rep = Replica.open(path, space="s", create=True, clock=lambda: NOW)
    with rep.batch():  # the conflict first, so it is not among the most recent claims
        rep.add_claim("org", "wonka", "deadline", "first of may")
        rep.add_claim("org", "wonka", "deadline", "end of june")
        for i in range(80):  # short facts that match "wonka" better than the conflict's claims
            rep.add_claim("org", "wonka", f"p{i}", f"v{i}")
    rep.close()
    query = "wonka"
    lazy = Replica.open(path, clock=lambda: NOW)
    try:
        assert not lazy.loaded
        ctx = lazy.context(query, budget=300)
        assert "org/wonka/deadline: UNRESOLVED" in "\n".join(full_key_lines(ctx.text.splitlines()))
        locus = next(iter(lazy.index.conflict_loci()))
        assert lazy.index.conflict_matches(query, limit=4) == [locus]
        assert lazy.index.conflict_matches("", limit=4) == []
        assert lazy.index.conflict_matches(query, limit=0) == []
    finally:
        lazy.close()
    full = Replica.open(path, clock=lambda: NOW, load="snapshot")
    try:
        ctx = full.context(query, budget=300)
        assert "org/wonka/deadline: UNRESOLVED" in "\n".join(full_key_lines(ctx.text.splitlines()))
    finally:
        full.close()


def test_a_conflict_the_question_is_about_outranks_conflicts_where_a_value_names_its_subject():
    """'Apple Inc.' is the subject asked about and also a value of many other conflicts (who
    developed what): the conflict whose key the question names comes first."""
    ops = [
        w("a").claim("fact", "Apple Inc.", "ceo", "Tim Cook"),
        w("b").claim("fact", "Apple Inc.", "ceo", "Vijay Mallya"),
    ]
    for product in ("iPod", "QuickTime", "GarageBand", "Safari", "Xcode", "Keynote"):
        ops.append(w("a").claim("fact", product, "developer", "Google"))
        ops.append(w("b").claim("fact", product, "developer", "Apple Inc."))
    view = project(materialize(ops), LENS, resolver=Conservative())
    query = "Who is the chief executive officer of Apple Inc.?"
    score = conflict_scores(view, query)
    # a shorter claim naming Apple Inc. as a value scores higher than the ceo claims
    assert (
        max(s for k, (_, s) in score.items() if k[2] == "developer")
        > score[("fact", "Apple Inc.", "ceo")][1]
    )
    for cache in (None, ContextCache(tokenizer=TOK)):
        ctx = assemble_context(view, query=query, budget=70, tokenizer=TOK, cache=cache)
        assert conflicts_shown(view, ctx) == {("fact", "Apple Inc.", "ceo")}
