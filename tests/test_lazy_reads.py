"""The common-path reads of the entry points answer from the store's derived state: LangGraph's
``search`` and ``list_namespaces``, and MCP ``search`` without a prefix, on a replica opened on
the derived state never load the history (`Replica.loaded` stays False) and answer exactly what
a replica that loaded and verified the whole store answers (``load="verify"``).

MCP is driven through the real MCP SDK client (in-memory transport, as tests/test_mcp.py).
Under ``CI=true`` nothing here may skip.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI installs both extras: never skip
    import mcp  # noqa: F401
else:
    pytest.importorskip("langgraph")
    pytest.importorskip("mcp", reason='the MCP SDK is not installed: pip install "statefuse[mcp]"')

import anyio
import anyio.from_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from statefuse.entry.langgraph import StateFuseStore, claim_namespace
from statefuse.entry.mcp import build_server
from statefuse.reading.context import Context, ContextError, ContextTotals, SectionName
from statefuse.reading.lens import Lens
from statefuse.storage.storeindex import StoreIndex
from statefuse.sync.replica import Replica

SPACE = "team"
NOW = 1_800_000_000_000
#: Seconds an in-process MCP call may take before the test fails: a hang guard, not a budget.
TIMEOUT = 120.0
NAMESPACES: list[tuple[str, ...]] = [
    ("a",),
    ("a", "b"),
    ("a", "b", "c"),
    ("a-x",),
    ("a", "bb"),
    ("z", "b"),
]
KEYS = ["k0", "k1", "k2"]
WORDS = ["alpha", "beta", "gamma", "delta", "the"]


def _clock() -> int:
    return NOW


@contextlib.contextmanager
def _mcp(replica: Replica) -> Iterator[Any]:
    """A client of the MCP server over ``replica``, called synchronously."""
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(build_server(replica), mode="legacy", read_timeout_seconds=TIMEOUT)
        with portal.wrap_async_context_manager(client) as entered:

            def search(**arguments: Any) -> dict[str, Any]:
                result = portal.call(entered.call_tool, "search", arguments)
                assert not result.is_error, result.content
                assert result.structured_content is not None
                text = result.content[0].text
                return {"text": text, **result.structured_content}

            yield search


def _opened(path: Path) -> tuple[Replica, Replica]:
    """(a replica opened on the derived state, one that loaded and verified the store)."""
    lazy = Replica.open(path, readonly=True)
    full = Replica.open(path, readonly=True, load="verify")
    assert not lazy.loaded and full.loaded
    return lazy, full


def _items(found: Sequence[Any]) -> list[dict[str, Any]]:
    return [{**item.dict(), "score": getattr(item, "score", None)} for item in found]


def _written(path: Path) -> None:
    """Items at several depths, updated, deleted, a conflict from a merged fork (one decided),
    an item in a task scope the default lens does not see."""
    with StateFuseStore.open(path, create=True, space=SPACE, clock=_clock) as store:
        rep = store.replica
        store.put(("a",), "k0", {"v": 1, "t": "alpha beta"})
        store.put(("a", "b"), "k0", {"v": 2, "t": "alpha"})
        store.put(("a", "b"), "k1", {"v": 3, "t": "gamma alpha alpha"})
        store.put(("a", "b"), "k1", {"v": 4, "t": "gamma"})  # an update
        store.put(("a", "b", "c"), "k2", {"v": 5, "t": "beta"})
        store.put(("a-x",), "k0", {"v": 6, "t": "delta"})
        store.put(("z", "b"), "k0", {"v": 7, "t": "alpha delta"})
        store.delete(("z", "b"), "k0")
        store.put(("z", "b"), "k1", {"v": 8})
        rep.add_claim(claim_namespace(("hidden",)), "k0", "value", {"v": 9}, scope="task:t1")
        rep.add_claim("vendor", "acme", "price", 120, provenance="quote")
        rep.add_claim("vendor", "acme", "city", "Lyon alpha")
        fork = rep.fork(name="bob")
        other = StateFuseStore(fork)
        other.put(("a", "b"), "k0", {"v": 20, "t": "alpha rival"})
        other.put(("a",), "k0", {"v": 21, "t": "beta rival"})
        rep.merge(fork)
        fork.close()
        page = rep.conflicts()
        first = page.conflicts[0]
        rep.decide(first, first.candidates[0], reason="first")


def test_langgraph_search_and_namespaces_read_the_derived_state(tmp_path: Path) -> None:
    path = tmp_path / "lg.db"
    _written(path)
    lazy, full = _opened(path)
    lazy_store, full_store = StateFuseStore(lazy), StateFuseStore(full)
    for prefix in [(), ("a",), ("a", "b"), ("z",), ("hidden",), ("nope",)]:
        for query in [None, "alpha", "gamma beta", "rival"]:
            for kw in [{}, {"filter": {"v": {"$gte": 3}}}, {"limit": 2, "offset": 1}]:
                got = lazy_store.search(prefix, query=query, **kw)
                want = full_store.search(prefix, query=query, **kw)
                assert _items(got) == _items(want), (prefix, query, kw)
    # the conflict left undecided shows as one; the decided one holds the selected value
    (item,) = lazy_store.search(("a", "b"), filter={"v": 20})
    assert item.key == "k0" and "__conflict__" in item.value
    (item,) = lazy_store.search(("a",), filter={"v": {"$gte": 0}}, limit=1)
    assert item.key == "k0" and "__conflict__" not in item.value
    for kw in [
        {},
        {"max_depth": 1},
        {"max_depth": 2, "limit": 2, "offset": 1},
        {"prefix": ("a",)},
        {"prefix": ("a", "*")},
        {"suffix": ("b",)},
        {"prefix": ("hidden",)},
    ]:
        assert lazy_store.list_namespaces(**kw) == full_store.list_namespaces(**kw), kw
    assert ("hidden",) not in lazy_store.list_namespaces()  # only a task's claim holds it
    assert lazy_store.get(("a", "b"), "k1") == full_store.get(("a", "b"), "k1")
    assert not lazy.loaded  # none of it needed the history
    lazy.close()
    full.close()


def test_a_langgraph_delete_reads_only_the_keys_it_deletes(tmp_path: Path) -> None:
    path = tmp_path / "lg.db"
    _written(path)
    with StateFuseStore.open(path, clock=_clock) as store:
        assert not store.replica.loaded
        store.delete(("a", "b"), "k0")  # a conflict: both authors' claims are retracted
        store.delete(("hidden",), "k0")  # only a task's claim, which the lens does not see
        store.delete(("nope",), "k9")
        assert not store.replica.loaded
    lazy, full = _opened(path)
    a, b = StateFuseStore(lazy), StateFuseStore(full)
    assert a.get(("a", "b"), "k0") is None and b.get(("a", "b"), "k0") is None
    assert _items(a.search(())) == _items(b.search(()))
    name = claim_namespace(("hidden",))
    hidden = [c for c in full.state().active_claims() if c.namespace == name]
    assert [c.scope for c in hidden] == ["task:t1"]  # left as it was
    assert full.forks() == [] and not lazy.loaded
    lazy.close()
    full.close()


def test_an_embedding_query_search_still_loads_and_agrees(tmp_path: Path) -> None:
    """Vectors live in the process by claim id: a query search with an embedding index meets
    every item under its prefix there, so it loads (documented), and answers alike."""
    path = tmp_path / "lg.db"
    _written(path)
    lazy, full = _opened(path)

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [[float(t.count(w)) for w in WORDS[:4]] for t in texts]

    index: Any = {"embed": embed, "dims": 4, "fields": ["t"]}
    a, b = StateFuseStore(lazy, index=index), StateFuseStore(full, index=index)
    assert _items(a.search(("a",))) == _items(b.search(("a",)))
    assert not lazy.loaded  # without a query no vector is needed
    assert _items(a.search(("a",), query="alpha")) == _items(b.search(("a",), query="alpha"))
    assert lazy.loaded
    lazy.close()
    full.close()


def test_mcp_search_without_a_prefix_reads_the_text_index(tmp_path: Path) -> None:
    path = tmp_path / "lg.db"
    _written(path)
    lazy, full = _opened(path)
    with _mcp(lazy) as lazy_search, _mcp(full) as full_search:
        for arguments in [
            {"query": "alpha"},
            {"query": "alpha beta gamma", "limit": 2},
            {"query": "rival", "scope": "global"},
            {"query": "alpha", "scope": "task:t1"},
            {"query": "the"},  # a stop word: nothing to look for
            {"query": "lyon price"},
            {},
            {"limit": 3},
            {"scope": "task:t1"},
            {"prefix": "vendor", "query": "lyon"},
        ]:
            assert lazy_search(**arguments) == full_search(**arguments), arguments
        found = lazy_search(query="alpha", limit=2)
        assert found["total"] == 4 and len(found["claims"]) == 2
        assert found["text"].startswith("4 matching claims, 2 shown")
    assert not lazy.loaded
    # a replica without a store index (in memory) ranks with the same index made in memory
    memory = Replica.memory(space=SPACE)
    memory.merge(full)
    with _mcp(memory) as memory_search, _mcp(lazy) as lazy_search:
        for query in ["alpha", "alpha beta gamma", "rival delta"]:
            assert memory_search(query=query) == lazy_search(query=query), query
    assert not lazy.loaded
    memory.close()
    lazy.close()
    full.close()


# --- the property ---------------------------------------------------------------------------------

_steps = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "delete", "fork", "decide", "scoped"]),
        st.integers(0, len(NAMESPACES) - 1),
        st.integers(0, len(KEYS) - 1),
        st.integers(0, 9),
        st.lists(st.sampled_from(WORDS), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=_steps)
def test_lazy_reads_equal_loaded_reads_on_random_memories(
    tmp_path_factory: pytest.TempPathFactory,
    program: list[tuple[str, int, int, int, list[str]]],
) -> None:
    """Random memories (puts, updates, deletes, conflicts from merged forks, decisions,
    scoped claims the lens does not see, namespaces of several depths): LangGraph search and
    list_namespaces and MCP search answer alike on a replica opened on the derived state and
    on one that loaded the history, and the first never loads."""
    path = tmp_path_factory.mktemp("lazyreads") / "m.db"
    with StateFuseStore.open(path, create=True, space=SPACE, clock=_clock) as store:
        rep = store.replica
        fork: Replica | None = None
        for kind, n, k, v, ws in program:
            ns, key, value = NAMESPACES[n], KEYS[k], {"v": v, "t": " ".join(ws)}
            if kind == "put":
                store.put(ns, key, value)
            elif kind == "delete":
                store.delete(ns, key)
            elif kind == "fork":
                if fork is None:
                    fork = rep.fork()
                StateFuseStore(fork).put(ns, key, {"v": v + 10, "t": "rival " + " ".join(ws)})
                rep.merge(fork)
            elif kind == "decide":
                page = rep.conflicts(limit=1)
                if page.conflicts:
                    c = page.conflicts[0]
                    rep.decide(c, c.candidates[v % len(c.candidates)])
            else:
                rep.add_claim(claim_namespace(ns), key, "value", value, scope="task:t1")
        if fork is not None:
            fork.close()
    lazy, full = _opened(path)
    a, b = StateFuseStore(lazy), StateFuseStore(full)
    for prefix in [(), ("a",), ("a", "b"), ("z",)]:
        for query in [None, "alpha", "beta rival"]:
            for kw in [{}, {"filter": {"v": {"$lt": 5}}, "limit": 3}, {"offset": 1, "limit": 2}]:
                got = a.search(prefix, query=query, **kw)
                assert _items(got) == _items(b.search(prefix, query=query, **kw))
    for kw in [{}, {"max_depth": 1}, {"prefix": ("a", "*")}, {"suffix": ("b",)}, {"limit": 1}]:
        assert a.list_namespaces(**kw) == b.list_namespaces(**kw)
    with _mcp(lazy) as lazy_search, _mcp(full) as full_search:
        for arguments in [
            {"query": "alpha"},
            {"query": "beta rival gamma", "limit": 3},
            {"query": "delta", "scope": "task:t1"},
            {},
            {"limit": 2, "scope": "task:t1"},
        ]:
            assert lazy_search(**arguments) == full_search(**arguments)
    # the same ranking from an index made in memory, on a replica without a store
    memory = Replica.memory(space=SPACE)
    memory.merge(full)
    with _mcp(lazy) as lazy_search, _mcp(memory) as memory_search:
        for arguments in [{"query": "alpha gamma"}, {"query": "rival", "scope": "global"}]:
            assert lazy_search(**arguments) == memory_search(**arguments)
    assert not lazy.loaded
    memory.close()
    lazy.close()
    full.close()


# --- a context from a slice counts what the whole memory leaves out -----------------------------

_COUNTED = re.compile(r"… ([\d,]+) more (?:fact|unresolved conflict)s?( in \S+)? not shown")


def _counted(ctx: Context, name: SectionName) -> tuple[int, list[str]]:
    """The number a section's counted line gives, and what the line says after the number."""
    section = ctx.section(name)
    found = [m for line in (section.lines if section else ()) if (m := _COUNTED.search(line))]
    return sum(int(m[1].replace(",", "")) for m in found), [m[2] or "" for m in found]


def test_a_sliced_context_counts_the_whole_memorys_facts_and_conflicts(tmp_path: Path) -> None:
    """A context read from the derived state lays out a slice of the keys; its counted lines
    say how many facts and unresolved conflicts the whole memory leaves out: with what it
    shows, they add up to the memory's, as in `context_for(state())`."""
    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space=SPACE, clock=_clock) as a:
        a.add_constraint("project/launch/budget", 50_000, constraint="budget")
        with a.batch():
            for i in range(300):
                a.add_claim("vendor", f"v{i}", "price", i * 3, provenance="quote")
        b = a.fork(name="bob")
        for i in range(0, 40, 2):
            b.add_claim("vendor", f"v{i}", "price", i * 3 + 1)
        a.merge(b)
        b.close()
        first = a.state().conflicts[0]
        a.decide(first, first.candidates[0], reason="first")
    lazy, full = _opened(path)
    claims = full.state().claims
    lens = Lens(now=NOW)
    facts, conflicts = 300 - 20 + 1, 19  # one claim of the decided conflict is a fact
    announced: set[tuple[str, str]] = set()
    for query in ["price of v7", "", "v123 price quote"]:
        for budget in [400, 600, 900, 1200]:
            for how, ctx in (
                ("lazy", lazy.context(query, lens=lens, budget=budget)),
                ("full", full.context(query, lens=lens, budget=budget)),
            ):
                # a counted line is written when it fits: then it completes what is shown
                fact_section = ctx.section(SectionName.FACTS)
                shown = len(fact_section.claim_ids) if fact_section else 0
                left, where = _counted(ctx, SectionName.FACTS)
                if where:
                    assert (shown + left, where) == (facts, [" in vendor"])
                    announced.add((how, "facts"))
                conflict_section = ctx.section(SectionName.CONFLICTS)
                ids = conflict_section.claim_ids if conflict_section else ()
                keys = {(claims[c].key, claims[c].scope) for c in ids}
                left, where = _counted(ctx, SectionName.CONFLICTS)
                if where:
                    assert len(keys) + left == conflicts
                    announced.add((how, "conflicts"))
    # both replicas announced both counts somewhere (whether a counted line fits a budget
    # depends on the lines shown, whose lengths follow claim ids that differ from run to run)
    assert announced == {(h, k) for h in ("lazy", "full") for k in ("facts", "conflicts")}
    assert not lazy.loaded
    lazy.close()
    full.close()


@pytest.mark.parametrize(
    ("totals", "field"),
    [
        ({"facts": -1}, "facts"),
        ({"conflicts": 1.5}, "conflicts"),
        ({"fact_namespace": 3}, "fact_namespace"),
    ],
)
def test_context_totals_refuse_a_bad_count(totals: dict[str, Any], field: str) -> None:
    with pytest.raises(ContextError) as raised:
        ContextTotals(**totals)
    assert raised.value.field == field


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.lists(st.sampled_from(WORDS[:3]), max_size=3), min_size=1, max_size=60),
    query=st.lists(st.sampled_from(WORDS[:3]), min_size=1, max_size=2),
    limit=st.integers(1, 6),
)
def test_text_matches_sort_by_score_then_claim_id_past_the_window(
    values: list[list[str]], query: list[str], limit: int
) -> None:
    """Many claims with equal scores: the page FTS5 sorts in a window, with the ties at its
    edge fetched by claim id, is the page of the plain (score, claim id) order."""
    rep = Replica.memory(space=SPACE)
    with rep.batch():
        for i, ws in enumerate(values):
            rep.add_claim("notes", f"n{i % 7}", "text", " ".join(ws) or "x")
    ix = StoreIndex.text_only(rep.state().active_claims())
    text = " ".join(query)
    got, total = ix.text_matches(text, limit=limit)
    expr = " OR ".join(f'"{w}"' for w in sorted(set(query)))
    want = ix._db.execute(  # the definition, joined and sorted by SQLite in one statement
        "SELECT c.claim_id, c.locus FROM ix_text JOIN ix_claim c ON c.n = ix_text.rowid"
        " WHERE ix_text MATCH ? ORDER BY bm25(ix_text), c.claim_id",
        (expr,),
    ).fetchall()
    assert got == [tuple(r) for r in want[:limit]] and total == len(want)
    rep.close()
