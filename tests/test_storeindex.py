"""The derived state kept in the store (`statefuse.storage.storeindex`) is `materialize` of the
counted
ops: built in one go, or applied in any batches, orders and with duplicates, on a real SQLite
store file, across close and reopen."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import StoreIndex, Writer, materialize
from statefuse.core.op import ClaimAdded, EvidenceAdded, Layer
from statefuse.core.state import locus_of
from statefuse.reading.ranker import value_text, words
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.storage.sqlitestore import _MIGRATIONS, SQLiteStore
from statefuse.storage.store import StoreError, StoreInfo
from statefuse.storage.storeindex import OpMemo, _match_expression
from statefuse.storage.testing import SCOPES, TEST_REGISTRY, op_lists, state_summary

REG = TEST_REGISTRY
INFO = StoreInfo(space="team", mode="open", root=b"", registry=b"\x01" * 32)


@st.composite
def memories(draw, max_steps=30):
    """Op-sets of a random program (retractions by id and by ref, re-assertions, decisions,
    dependency chains, functional and multi-valued predicates, two scopes), plus identity and
    constraint claims, claims citing evidence, and retractions of those."""
    ops = list(draw(op_lists(max_steps)))
    w = Writer("w9", registry=REG, clock=lambda: 0)
    w.observe(ops)
    evidence = [op.op_id for op in ops if isinstance(op, EvidenceAdded)]
    extra: list[ClaimAdded] = []
    for i in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(("identity", "constraint", "cites", "kind")))
        value = draw(st.sampled_from(("alpha", "bravo charlie", "delta", 7)))
        scope = draw(st.sampled_from(SCOPES))
        if kind == "identity":
            c = w.claim("agent", "me", "role", value, layer=Layer.IDENTITY, scope=scope)
        elif kind == "constraint":
            c = w.claim("policy", "budget", "max", value, constraint="budget", scope=scope)
        elif kind == "kind":
            c = w.claim("policy", "rule", f"r{i}", value, kind="constraint", scope=scope)
        else:
            cited = evidence[: draw(st.integers(0, 2))]
            c = w.claim("docs", f"d{i}", "summary", value, evidence=cited, scope=scope)
        extra.append(c)
    out: list = ops + extra
    if draw(st.booleans()):  # depending on a claim the op-set lacks, whose retraction it holds
        gone = Writer("w8", registry=REG, clock=lambda: 0).claim("proj", "ghost", "note", 1)
        by_ref = draw(st.booleans())
        dep = gone.claim_ref if by_ref else gone.claim_id
        out.append(
            w.retract(
                claim_id=None if by_ref else gone.claim_id,
                claim_ref=gone.claim_ref if by_ref else None,
            )
        )
        out.append(w.claim("proj", "plan", "note", 2, depends_on=[dep]))
    for c in extra:
        if draw(st.integers(0, 3)) == 0:
            by_ref = draw(st.booleans())
            out.append(
                w.retract(
                    claim_id=None if by_ref else c.claim_id,
                    claim_ref=c.claim_ref if by_ref else None,
                    reason="t",
                )
            )
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SQLiteStore(tmp_path_factory.mktemp("ix") / "s.db")
    s.initialize(INFO)
    yield s
    s.close()


# --- what the tables must say, from materialize ---------------------------------------------------


def _key_order(c):
    return (c.namespace, c.subject, c.predicate, c.scope)


def _locus(c):
    return locus_of(c.namespace, c.subject, c.predicate, c.scope)


def _expected_loci(claims):
    seen = {}
    for c in sorted(claims, key=_key_order):
        seen.setdefault(_locus(c), None)
    return list(seen)


def _cited_only(ops):
    """``ops`` without the evidence no claim cites (a slice of loci carries only cited
    evidence; the whole-state digest counts every evidence op)."""
    cited = {e for op in ops if isinstance(op, ClaimAdded) for e in op.evidence}
    return [op for op in ops if not isinstance(op, EvidenceAdded) or op.op_id in cited]


def _active_by_locus_in_tables(ix: StoreIndex) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for locus, cid in ix._db.execute("SELECT locus, claim_id FROM ix_claim WHERE active = 1"):
        out.setdefault(locus, []).append(cid)
    return {k: sorted(v) for k, v in out.items()}


def _check_equal_to_materialize(ix: StoreIndex, ops, data) -> None:
    full = materialize(ops, registry=REG)
    active = full.active_claims()
    # the tables themselves
    want_active: dict[bytes, list[bytes]] = {}
    for c in active:
        want_active.setdefault(_locus(c), []).append(c.claim_id)
    assert _active_by_locus_in_tables(ix) == {k: sorted(v) for k, v in want_active.items()}
    assert ix.loci() == _expected_loci(active)
    assert ix.loci(active=False) == _expected_loci(full.all_claims())
    conflicts = sorted(full.conflicts, key=lambda k: (k.key, k.scope))
    assert ix.conflict_loci() == [k.locus for k in conflicts]
    assert ix.conflict_count() == len(conflicts)
    assert ix.active_count() == len(active)
    assert ix.lamport() == max((op.lamport for op in ops), default=0)
    # every locus: the whole state (the evidence no claim cites aside)
    every = ix.state_of(ix.loci(active=False), registry=REG)
    a, b = state_summary(every), state_summary(full)
    b["evidence"] = state_summary(materialize(_cited_only(ops), registry=REG))["evidence"]
    assert a == b
    assert every.digest() == materialize(_cited_only(ops), registry=REG).digest()
    # some loci: what the whole state says there
    loci = ix.loci(active=False)
    some = data.draw(st.lists(st.sampled_from(loci), max_size=4, unique=True)) if loci else []
    # ... with their retracted history, or without it (retracted=False)
    for part in (
        ix.state_of(some, registry=REG),
        ix.state_of(some, registry=REG, retracted=False),
    ):
        for c in full.all_claims():
            if _locus(c) not in some:
                continue
            key = _key_order(c)
            assert [x.claim_id for x in part.active_at(*key)] == [
                x.claim_id for x in full.active_at(*key)
            ]
            assert part.is_active(c.claim_id) == full.is_active(c.claim_id)
            assert part.conflict_of(*key) == full.conflict_of(*key)
            assert part.stale.get(c.claim_id) == full.stale.get(c.claim_id)
        for d in full.decisions:
            if d.locus in some:
                assert part.why_stale(d) == full.why_stale(d)
    slim = ix.state_of(loci, registry=REG, retracted=False)
    assert [c.claim_id for c in slim.active_claims()] == [c.claim_id for c in active]
    assert state_summary(slim)["stale"] == state_summary(full)["stale"]
    # search: an active claim is found by a word of its value; a locus without an active
    # claim is never returned
    live = {_locus(c) for c in active}
    for c in active:
        ws = words(value_text(c.value))
        if ws:
            assert _locus(c) in ix.search(ws[0], limit=len(loci))
    for c in full.all_claims():
        for w in words(value_text(c.value)):
            assert set(ix.search(w, limit=len(loci))) <= live
    # a context draws on every identity and constraint locus, whatever the query and budget
    pinned = {
        _locus(c)
        for c in active
        if c.layer is Layer.IDENTITY or c.kind == "constraint" or c.constraint
    }
    query = data.draw(st.sampled_from(("", "price", "dana alpha", 'AND "( NOT *')))
    got = ix.context_loci(query, budget=data.draw(st.integers(0, 400)))
    assert pinned <= set(got) and len(got) == len(set(got)) and set(got) <= live


@given(memories(), st.data())
def test_a_rebuild_of_all_ops_equals_materialize(store, ops, data):
    ix = store.index()
    with store.write_transaction():
        ix.rebuild(ops, upto=7, registry=REG)
    assert ix.upto == 7 and ix.registry_fingerprint() == REG.fingerprint
    _check_equal_to_materialize(ix, ops, data)
    # under another registry (exact everywhere) the same ops group, and conflict, otherwise
    with store.write_transaction():
        ix.rebuild(ops, upto=8, registry=DEFAULT_REGISTRY)
    exact = materialize(ops, registry=DEFAULT_REGISTRY)
    conflicts = sorted(exact.conflicts, key=lambda k: (k.key, k.scope))
    assert ix.conflict_loci() == [k.locus for k in conflicts]
    every = ix.state_of(ix.loci(active=False), registry=DEFAULT_REGISTRY)
    assert state_summary(every)["conflicts"] == state_summary(exact)["conflicts"]


@given(memories(), st.data())
def test_applying_ops_in_any_batches_orders_and_with_duplicates_equals_materialize(
    store, ops, data
):
    order = data.draw(st.permutations(ops))
    doubles = data.draw(st.lists(st.sampled_from(ops), max_size=5)) if ops else []
    stream = order + doubles
    head = data.draw(st.integers(0, len(stream)))  # built from a prefix, the rest applied
    ix = store.index()
    with store.write_transaction():
        ix.rebuild(stream[:head], upto=head, registry=REG)
    at = head
    with store.write_transaction():  # one commit per example (the batches need none apart)
        while at < len(stream):
            size = data.draw(st.integers(1, 8))
            ix.apply(stream[at : at + size] + stream[at : at + 1], upto=at + size, registry=REG)
            at += size
    assert ix.upto == max(at, head)
    _check_equal_to_materialize(ix, ops, data)
    # rows written in another order rank alike: equal scores are cut by claim id
    queries = ("price owner", "1000 dana", "a b c", "alpha", "1")
    answers = [ix.search(q, limit=n) for q in queries for n in (1, 2, 3)]
    contexts = [ix.context_loci(q, budget=b) for q in queries for b in (8, 16, 40)]
    with store.write_transaction():
        ix.rebuild(reversed(stream), upto=0, registry=REG)
    assert [ix.search(q, limit=n) for q in queries for n in (1, 2, 3)] == answers
    assert [ix.context_loci(q, budget=b) for q in queries for b in (8, 16, 40)] == contexts


@given(st.text(max_size=40))
def test_search_reads_no_character_of_a_query_as_syntax(store, query):
    ix = store.index()
    assert isinstance(ix.search(query, limit=5), list)
    assert isinstance(ix.context_loci(query, budget=100), list)


# --- the file store ------------------------------------------------------------------------------


def _some_ops():
    w = Writer("w1", registry=REG, clock=lambda: 0)
    a = w.claim("proj", "launch", "price", 1000)
    b = w.claim("proj", "launch", "price", 999)  # a conflict
    me = w.claim("agent", "me", "role", "planner", layer=Layer.IDENTITY)
    cap = w.claim("policy", "budget", "max", 5000, constraint="budget")
    dep = w.claim("proj", "launch", "margin", "thin", depends_on=[a.claim_id])
    old = w.claim("proj", "vendor", "owner", "Dana")
    gone = w.retract(claim_ref=old.claim_ref, reason="left")
    new = w.claim("proj", "vendor", "owner", "Lee")
    return [a, b, me, cap, dep, old, gone, new]


def _answers(ix: StoreIndex):
    loci = ix.loci(active=False)
    return (
        ix.upto,
        ix.registry_fingerprint(),
        ix.lamport(),
        ix.active_count(),
        loci,
        ix.loci(),
        ix.loci(prefix=("proj", "launch")),
        ix.loci(scope="global", limit=2),
        ix.conflict_loci(),
        ix.search("dana lee thin", limit=10),
        ix.context_loci("price", budget=200),
        ix.state_of(loci, registry=REG).digest(),
    )


def test_a_store_file_keeps_the_derived_state_across_close_and_reopen(tmp_path):
    path = tmp_path / "s.db"
    ops = _some_ops()
    store = SQLiteStore(path)
    store.initialize(INFO)
    ix = store.index()
    assert ix.upto is None  # a new store: never built
    with store.write_transaction():
        ix.rebuild(ops[:3], upto=1, registry=REG)
    with store.write_transaction():
        ix.apply(ops[3:], upto=2, registry=REG)
    before = _answers(ix)
    full = materialize(ops, registry=REG)
    assert before[-1] == full.digest()
    assert ix.conflict_count() == 1 and ix.active_count() == len(full.active_claims())
    assert ix.search("dana", limit=5) == []  # retracted by ref: never found
    assert ix.ref_retractions(ops[5].claim_ref) == (ops[6].op_id,)
    store.close()
    for readonly in (False, True):
        again = SQLiteStore(path, readonly=readonly)
        assert _answers(again.index()) == before
        again.close()


def test_maintenance_is_refused_on_an_index_never_built_or_built_under_another_registry(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    ix = store.index()
    ops = _some_ops()
    with store.write_transaction():
        with pytest.raises(StoreError) as err:
            ix.apply(ops, upto=1, registry=REG)
        assert err.value.rule == "index-not-built"
        ix.rebuild(ops[:2], upto=3, registry=REG)
        with pytest.raises(StoreError) as err:
            ix.apply(ops, upto=4, registry=DEFAULT_REGISTRY)
        assert err.value.rule == "index-registry"
        with pytest.raises(StoreError) as err:
            ix.apply(ops, upto=2, registry=REG)
        assert err.value.rule == "index-upto"
        assert ix.active_count() == 2 and ix.upto == 3  # nothing of the refused calls
        ix.drop()
    assert ix.upto is None and ix.loci(active=False) == [] and ix.active_count() == 0
    store.close()


def test_a_rollback_takes_the_derived_state_back_with_it(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    ix = store.index()
    ops = _some_ops()
    with store.write_transaction():
        ix.rebuild(ops[:2], upto=1, registry=REG)
    with pytest.raises(RuntimeError), store.write_transaction():
        ix.apply(ops[2:], upto=2, registry=REG)
        raise RuntimeError("the change failed")
    assert ix.upto == 1 and ix.active_count() == 2 and ix.search("planner", limit=3) == []
    store.close()


def _schema_5_store(path: Path) -> None:
    """A store as schema 5 left it (before the derived state), made by the steps of that
    time."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("BEGIN IMMEDIATE")
    for version in range(5):
        _MIGRATIONS[version](db)
    db.execute("PRAGMA user_version = 5")
    db.execute("COMMIT")
    db.close()


def test_a_schema_5_store_reads_as_not_built_read_only_and_migrates_to_empty_tables(tmp_path):
    path = tmp_path / "s.db"
    _schema_5_store(path)
    before = path.read_bytes()
    reader = SQLiteStore(path, readonly=True)
    ix = reader.index()
    assert ix.upto is None and ix.registry_fingerprint() is None
    with pytest.raises(StoreError) as err:
        ix.state_of([], registry=REG)
    assert err.value.rule == "index-not-built"
    reader.close()
    assert path.read_bytes() == before  # not migrated by a reader
    store = SQLiteStore(path)
    ix = store.index()
    assert ix.upto is None and ix.loci(active=False) == [] and ix.conflict_count() == 0
    with store.write_transaction():
        ix.rebuild(_some_ops(), upto=0, registry=REG)
    assert ix.upto == 0 and ix.conflict_count() == 1
    store.close()


def test_rebuild_reports_progress_and_ends_with_every_op(tmp_path):
    from statefuse import storeindex

    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    n = storeindex.REBUILD_CHUNK * 2 + 3
    ops = [w.claim("proj", f"s{i}", "note", i) for i in range(n)]
    seen = []
    with store.write_transaction():
        store.index().rebuild(
            iter(ops), upto=9, registry=REG, progress=lambda d, t: seen.append((d, t)), total=n
        )
    chunk = storeindex.REBUILD_CHUNK
    assert seen[:3] == [(chunk, n), (2 * chunk, n), (n, n)] and seen[-1] == (n, n)
    assert store.index().active_count() == n
    store.close()


def test_equal_scores_are_cut_by_claim_id_whatever_the_order_rows_were_written_in(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    # every claim scores alike for "same": one word of it, documents of one length
    ops = [w.claim("proj", f"s{i:03}", "note", "same word") for i in range(150)]
    by_id = [_locus(c) for c in sorted(ops, key=lambda c: c.claim_id)]
    ix = store.index()
    for order in (ops, ops[::-1]):
        with store.write_transaction():
            ix.rebuild([], upto=0, registry=REG)
            for i in range(0, len(order), 7):
                ix.apply(order[i : i + 7], upto=i, registry=REG)
        for limit in (1, 5, 40, 149, 150, 151):
            assert ix.search("same", limit=limit) == by_id[:limit]
    store.close()


def test_a_context_finds_the_claim_holding_every_word_however_common_the_words_are(
    tmp_path, monkeypatch
):
    """A word held by many claims would make BM25 score them all: `context_loci` reads the
    claims holding every word first, then the rarest words up to `MATCH_BUDGET` matches, so the
    claim a query is about is found at a cost that does not grow with the common words."""
    from statefuse import storeindex

    monkeypatch.setattr(storeindex, "MATCH_BUDGET", 50)
    monkeypatch.setattr(storeindex, "COMMON_FROM", 10)
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    # 400 claims say "status", 300 "order"; one claim holds both and "zeta"
    ops = [w.claim("orders", f"o{i}", "status", f"status of batch {i}") for i in range(400)]
    ops += [w.claim("orders", f"p{i}", "note", f"order note {i}") for i in range(300)]
    target = w.claim("orders", "zeta", "status", "order status zeta")
    ops.append(target)
    with store.write_transaction():
        store.index().rebuild(ops, upto=1, registry=REG)
    ix = store.index()
    budget = 16 * 4  # four loci per list
    loci = ix.context_loci("order status for zeta", budget=budget)
    assert _locus(target) in loci
    # every word common (past half of the claims): a search of them reads none of it
    assert ix.search("status", limit=5) == []
    assert ix.search("zeta", limit=5) == [_locus(target)]
    # the two common words together: the claims holding both come first
    assert ix.context_loci("order status", budget=budget)[0] == _locus(target)
    store.close()


@given(memories(), st.data())
def test_a_memo_of_decoded_ops_never_changes_a_slice(store, ops, data):
    """`OpMemo` keeps ops decoded by earlier reads (an agent step reads about the same slice
    after each write): a slice read through it, however full, small or stale its content,
    is the slice read without it."""
    ix = store.index()
    with store.write_transaction():
        ix.rebuild(ops, upto=1, registry=REG)
    memo = OpMemo(max_ops=data.draw(st.sampled_from((0, 1, 5, 40, 10_000))))
    loci = ix.loci(active=False)
    for _ in range(3):
        some = data.draw(st.lists(st.sampled_from(loci), max_size=6)) if loci else []
        retracted = data.draw(st.booleans())
        got = ix.state_of(some, registry=REG, retracted=retracted, memo=memo)
        want = ix.state_of(some, registry=REG, retracted=retracted)
        assert state_summary(got) == state_summary(want)
        assert got.digest() == want.digest()
        assert len(memo) <= memo.max_ops


@given(memories(), st.sampled_from(("price owner", "1000 dana", "a b c", "alpha", "1", "zz")))
def test_ranking_few_matches_in_one_statement_answers_as_the_window_does(store, ops, query):
    """`StoreIndex._ranked` joins every match to its claim when few can match (``most``):
    the same loci in the same order as FTS5's window of the best, cut by claim id."""
    ix = store.index()
    with store.write_transaction():
        ix.rebuild(ops, upto=1, registry=REG)
    expr = _match_expression(query)
    assert expr is not None
    for limit in (1, 2, 3, 10, 1000):
        assert ix._ranked(expr, limit, most=0) == ix._ranked(expr, limit)


def test_ranking_in_one_statement_cuts_equal_scores_by_claim_id(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    ops = [w.claim("proj", f"s{i:03}", "note", "same word") for i in range(150)]
    by_id = [_locus(c) for c in sorted(ops, key=lambda c: c.claim_id)]
    ix = store.index()
    with store.write_transaction():
        ix.rebuild(ops[::-1], upto=0, registry=REG)
    for limit in (1, 5, 40, 149, 150, 151):
        assert ix._ranked('"same"', limit, most=len(ops)) == by_id[:limit]
    store.close()


@given(
    memories(),
    st.sampled_from(("price owner", "1000 dana", "a b c", "alpha 1 2", "1", "owner w1 3 é")),
    st.integers(1, 6),
    st.integers(1, 40),
)
def test_a_context_counts_common_words_no_further_than_it_needs(store, ops, query, budget, limit):
    """`StoreIndex._bounded` counts a word's claims only up to past `MATCH_BUDGET` (a common
    word's exact count reads all its postings): it, and the conflicts a context draws on,
    pick the loci the exact counts pick."""
    from statefuse import storeindex

    ix = store.index()
    with store.write_transaction():
        ix.rebuild(ops, upto=1, registry=REG)
    exact = StoreIndex._frequencies
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storeindex, "MATCH_BUDGET", budget)
        got = ix._bounded(query, limit)
        loci = ix.context_loci(query, budget=16 * limit)
        mp.setattr(StoreIndex, "_frequencies", lambda self, q, cap=None: exact(self, q))
        assert got == ix._bounded(query, limit)
        assert loci == ix.context_loci(query, budget=16 * limit)


def test_two_common_words_are_counted_exactly_to_order_them(tmp_path, monkeypatch):
    """Past `MATCH_BUDGET` a word's count is cut short, unless two words are: then which of
    them a context drops first from its query follows their exact counts, not their names."""
    from statefuse import storeindex

    monkeypatch.setattr(storeindex, "MATCH_BUDGET", 5)
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    both = w.claim("notes", "n1", "text", "zzz aaa bbb")
    with_b = w.claim("notes", "n2", "text", "zzz bbb")
    with_a = w.claim("notes", "n3", "text", "zzz aaa")
    ops = [both, with_b, with_a]
    ops += [w.claim("notes", f"a{i}", "text", f"aaa {i}") for i in range(30)]  # aaa: 32
    ops += [w.claim("notes", f"b{i}", "text", f"bbb {i}") for i in range(20)]  # bbb: 22
    with store.write_transaction():
        store.index().rebuild(ops, upto=1, registry=REG)
    ix = store.index()
    # every word, then all but the commonest (aaa): the claims holding zzz and bbb come next
    assert ix._bounded("zzz aaa bbb", 10) == [_locus(both), _locus(with_b), _locus(with_a)]
    store.close()


@pytest.mark.parametrize("most", [16_384, 6])
def test_a_word_counted_in_full_orders_with_one_counted_short(tmp_path, monkeypatch, most):
    """A word FTS5 counts from its vocabulary (not a plain lower-case ASCII word) as common
    as the one counted short: both are counted in full, so the rarer one comes first; and
    past `COUNT_MOST` words are counted in full from the start."""
    from statefuse import storeindex

    monkeypatch.setattr(storeindex, "MATCH_BUDGET", 5)
    monkeypatch.setattr(storeindex, "COUNT_MOST", most)
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    w = Writer("w1", registry=REG, clock=lambda: 0)
    both = w.claim("notes", "n1", "text", "zzz aaa ééé")
    with_e = w.claim("notes", "n2", "text", "zzz ééé")
    with_a = w.claim("notes", "n3", "text", "zzz aaa")
    ops = [both, with_e, with_a]
    ops += [w.claim("notes", f"a{i}", "text", f"aaa {i}") for i in range(30)]  # aaa: 32
    ops += [w.claim("notes", f"e{i}", "text", f"ééé {i}") for i in range(23)]  # ééé: 25
    with store.write_transaction():
        store.index().rebuild(ops, upto=1, registry=REG)
    ix = store.index()
    assert ix._bounded("zzz aaa ééé", 10) == [_locus(both), _locus(with_e), _locus(with_a)]
    store.close()
