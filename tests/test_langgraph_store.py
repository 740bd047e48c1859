"""`statefuse.entry.langgraph.StateFuseStore`: LangGraph's BaseStore contract, the claim mapping,
conflicts through get and search, filters, embeddings, and LangGraph graphs on two replicas.

`StoreContract` is the BaseStore contract as LangGraph's own stores keep it: it runs against
LangGraph's ``InMemoryStore`` too, so a test there that only StateFuse passes is not a contract
test. Under ``CI=true`` a missing ``langgraph`` fails the run instead of skipping it.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypedDict

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI must test the store: a missing langgraph fails loudly
else:
    pytest.importorskip("langgraph")

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from statefuse import Lens, LexicalRanker, ValueTypeError
from statefuse.entry.langgraph import (
    CONFLICT_FIELD,
    LangGraphStoreError,
    NamespaceError,
    StateFuseStore,
    _catalog,
    _catalog_full,
    claim_key,
    claim_namespace,
    item_namespace,
)
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica


def _key(name: str) -> SigningKey:
    return SigningKey.from_seed(hashlib.sha256(b"langgraph-store/" + name.encode()).digest())


class _Clock:
    """Milliseconds, one more per call: timestamps a test can predict."""

    def __init__(self, start: int = 1_700_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 1
        return self.now


def _store(name: str = "a", **kw: Any) -> StateFuseStore:
    return StateFuseStore(Replica.memory(space="team", key=_key(name), clock=_Clock()), **kw)


def _sync(*stores: StateFuseStore) -> None:
    for x in stores:
        for y in stores:
            if x is not y:
                x.replica.merge(y.replica)


# --- the BaseStore contract ---------------------------------------------------------------------


class StoreContract:
    """What any LangGraph store does; `create_store` is the one hook a backend fills in."""

    def create_store(self, tmp_path: Path) -> BaseStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[BaseStore]:
        s = self.create_store(tmp_path)
        yield s
        close = getattr(s, "close", None)
        if close is not None:
            close()

    def test_put_then_get_returns_the_value_with_its_key_namespace_and_times(self, store):
        store.put(("users", "u1"), "prefs", {"theme": "dark", "n": 3, "tags": ["a", "b"]})
        item = store.get(("users", "u1"), "prefs")
        assert isinstance(item, Item)
        assert item.value == {"theme": "dark", "n": 3, "tags": ["a", "b"]}
        assert (item.namespace, item.key) == (("users", "u1"), "prefs")
        assert item.created_at.tzinfo is not None and item.created_at <= item.updated_at

    def test_get_of_a_missing_item_is_none(self, store):
        assert store.get(("users",), "nobody") is None

    def test_a_second_put_replaces_the_value(self, store):
        store.put(("docs",), "d", {"v": 1})
        first = store.get(("docs",), "d")
        store.put(("docs",), "d", {"v": 2})
        second = store.get(("docs",), "d")
        assert second.value == {"v": 2}
        assert second.updated_at >= first.updated_at

    def test_delete_removes_the_item_from_get_and_search(self, store):
        # (InMemoryStore still lists a namespace emptied by deletes; StateFuseStore does not,
        # see the model test below)
        store.put(("docs", "x"), "d", {"v": 1})
        store.put(("docs", "y"), "e", {"v": 2})
        store.delete(("docs", "x"), "d")
        assert store.get(("docs", "x"), "d") is None
        assert [i.key for i in store.search(("docs",))] == ["e"]
        store.delete(("docs", "x"), "never-there")  # deleting nothing is no error

    def test_search_finds_items_under_a_prefix_of_whole_labels_only(self, store):
        store.put(("a", "b"), "k1", {"v": 1})
        store.put(("a", "bc"), "k2", {"v": 2})
        store.put(("a",), "k3", {"v": 3})
        store.put(("z",), "k4", {"v": 4})
        assert {(i.namespace, i.key) for i in store.search(("a", "b"))} == {(("a", "b"), "k1")}
        assert {i.key for i in store.search(("a",))} == {"k1", "k2", "k3"}
        assert {i.key for i in store.search(())} == {"k1", "k2", "k3", "k4"}
        assert all(i.score is None for i in store.search(("a",)))

    def test_search_pages_with_limit_and_offset(self, store):
        for i in range(7):
            store.put(("p",), f"k{i}", {"i": i})
        everything = store.search(("p",), limit=100)
        assert len(everything) == 7
        pages = [store.search(("p",), limit=3, offset=o) for o in (0, 3, 6)]
        assert [len(p) for p in pages] == [3, 3, 1]
        assert [i.key for p in pages for i in p] == [i.key for i in everything]
        assert store.search(("p",), limit=0) == []
        assert store.search(("p",), offset=10) == []

    def test_search_filters_by_equality_and_number_comparisons(self, store):
        store.put(("f",), "a", {"color": "red", "score": 4.5, "meta": {"lang": "en"}})
        store.put(("f",), "b", {"color": "blue", "score": 3})
        store.put(("f",), "c", {"color": "red", "score": 5})

        def keys(**kw: Any) -> list[str]:
            return sorted(i.key for i in store.search(("f",), **kw))

        assert keys(filter={"color": "red"}) == ["a", "c"]
        assert keys(filter={"color": {"$eq": "red"}, "score": {"$gt": 4.6}}) == ["c"]
        assert keys(filter={"score": {"$gte": 4.5}}) == ["a", "c"]
        assert keys(filter={"score": {"$lt": 4.5}}) == ["b"]
        assert keys(filter={"score": {"$lte": 4.5}}) == ["a", "b"]
        assert keys(filter={"color": {"$ne": "red"}}) == ["b"]
        assert keys(filter={"meta": {"lang": "en"}}) == ["a"]
        assert keys(filter={"color": "green"}) == []

    def test_list_namespaces_with_prefix_suffix_wildcards_depth_and_pages(self, store):
        for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("b",), ("b", "c")]:
            store.put(ns, "k", {"v": 1})
        assert store.list_namespaces() == sorted(
            [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("b",), ("b", "c")]
        )
        assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
        ends_in_c = [("a", "b", "c"), ("a", "x", "c"), ("b", "c")]
        assert store.list_namespaces(suffix=("c",)) == ends_in_c
        assert store.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c"), ("a", "x", "c")]
        assert store.list_namespaces(prefix=("a",), suffix=("*", "d")) == [("a", "b", "d")]
        assert store.list_namespaces(max_depth=2) == [("a", "b"), ("a", "x"), ("b",), ("b", "c")]
        assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "x", "c")]

    def test_a_batch_answers_in_op_order_and_its_reads_see_the_store_before_its_writes(self, store):
        store.put(("m",), "old", {"v": 0})
        results = store.batch(
            [
                PutOp(("m",), "new", {"v": 1}),
                GetOp(("m",), "new"),
                GetOp(("m",), "old"),
                SearchOp(("m",)),
                ListNamespacesOp(),
                PutOp(("m",), "old", None),
            ]
        )
        assert results[0] is None and results[1] is None and results[5] is None
        assert results[2].value == {"v": 0}
        assert [i.key for i in results[3]] == ["old"]
        assert results[4] == [("m",)]
        assert store.get(("m",), "new").value == {"v": 1}
        assert store.get(("m",), "old") is None

    def test_the_last_write_to_a_key_in_a_batch_wins(self, store):
        store.batch([PutOp(("w",), "k", {"v": 1}), PutOp(("w",), "k", {"v": 2})])
        assert store.get(("w",), "k").value == {"v": 2}
        store.batch([PutOp(("w",), "k", {"v": 3}), PutOp(("w",), "k", None)])
        assert store.get(("w",), "k") is None

    @pytest.mark.parametrize(
        "namespace",
        [(), ("",), ("a.b",), ("ok", ""), ("langgraph", "x"), ("a\x00b",), ("ok", 3)],
        ids=["empty", "empty-label", "dot", "empty-inner", "reserved-root", "nul", "not-str"],
    )
    def test_put_refuses_a_namespace_langgraph_forbids(self, store, namespace):
        with pytest.raises(InvalidNamespaceError):
            store.put(namespace, "k", {"v": 1})

    def test_reads_refuse_labels_langgraph_forbids(self, store):
        with pytest.raises(InvalidNamespaceError):
            store.get(("a.b",), "k")
        with pytest.raises(InvalidNamespaceError):
            store.search(("",))
        with pytest.raises(InvalidNamespaceError):
            store.list_namespaces(prefix=("a.b",))

    def test_the_async_methods_do_what_the_sync_ones_do(self, store):
        async def run() -> None:
            await store.aput(("as",), "k", {"v": 1})
            await store.aput(("as", "sub"), "j", {"v": 2})
            assert (await store.aget(("as",), "k")).value == {"v": 1}
            assert [i.key for i in await store.asearch(("as",), filter={"v": 2})] == ["j"]
            assert await store.alist_namespaces(prefix=("as",)) == [("as",), ("as", "sub")]
            await store.adelete(("as",), "k")
            assert await store.aget(("as",), "k") is None
            got = await store.abatch([GetOp(("as", "sub"), "j"), PutOp(("as",), "z", {"v": 3})])
            assert got[0].value == {"v": 2} and got[1] is None

        asyncio.run(run())

    def test_langgraphs_large_concurrent_workload_answers_every_call(self, store):
        # The workload of LangGraph's own ``test_large_batches_async``: 10 rounds of 1,000 keys,
        # each a put, a get, a list_namespaces, a search, a put again and a delete, all
        # 60,000 calls gathered at once on one event loop.
        async def run() -> list[object]:
            calls = []
            for m in range(10):
                ns = ("test", "foo", "bar", "baz", str(m % 2))
                for i in range(1_000):
                    calls += [
                        store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                        store.aget(ns, f"key{i}"),
                        store.alist_namespaces(prefix=None, max_depth=m + 1),
                        store.asearch(("test",)),
                        store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                        store.adelete(ns, f"key{i}"),
                    ]
            return await asyncio.gather(*calls)

        results = asyncio.run(run())
        assert len(results) == 60_000
        assert all(r is None for r in results[0::6])  # puts answer None
        assert all(isinstance(r, list) for k in (2, 3) for r in results[k::6])
        assert store.search(("test",), limit=10) == []  # every key's last call deleted it


class TestLangGraphInMemoryStoreKeepsTheContract(StoreContract):
    """The reference: the contract is LangGraph's, not ours."""

    def create_store(self, tmp_path: Path) -> BaseStore:
        return InMemoryStore()


class TestStateFuseStoreOnAMemoryReplica(StoreContract):
    def create_store(self, tmp_path: Path) -> BaseStore:
        return _store()


class TestStateFuseStoreOnASQLiteReplica(StoreContract):
    def create_store(self, tmp_path: Path) -> BaseStore:
        return StateFuseStore.open(tmp_path / "store.db", create=True, space="team")

    def test_items_survive_closing_and_reopening(self, store, tmp_path):
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
        store.close()
        with StateFuseStore.open(tmp_path / "store.db") as again:
            assert again.get(("users", "u1"), "prefs").value == {"theme": "dark"}


# --- how items are claims -----------------------------------------------------------------------

_label = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters=".\x00"), min_size=1
)


@given(st.lists(_label, min_size=1, max_size=5).map(tuple))
def test_a_namespace_reads_back_from_its_claim_namespace(namespace):
    name = claim_namespace(namespace)
    assert name.startswith("lg:")
    assert item_namespace(name) == namespace


@pytest.mark.parametrize("name", ["users", "lg:", "lg:a..b", "lg:.a", "lg:a."])
def test_a_claim_namespace_that_reads_back_as_no_langgraph_namespace_is_not_an_item(name):
    assert item_namespace(name) is None


def test_a_put_is_one_claim_at_the_mapped_key_and_a_delete_is_a_retraction():
    store = _store(provenance="agent-a")
    store.put(("users", "u1"), "prefs", {"theme": "dark"})
    assert claim_key(("users", "u1"), "prefs") == ("lg:users.u1", "prefs", "value")
    state = store.replica.state()
    (claim,) = state.active_at("lg:users.u1", "prefs", "value")
    assert claim.value == {"theme": "dark"} and claim.provenance == "agent-a"
    item = store.get(("users", "u1"), "prefs")
    assert item.created_at.timestamp() * 1000 == claim.wall_ms == item.updated_at.timestamp() * 1000
    store.put(("users", "u1"), "prefs", {"theme": "light"})
    state = store.replica.state()
    (newer,) = state.active_at("lg:users.u1", "prefs", "value")
    assert state.retractions[state.retracted[claim.claim_id][0].op_id].superseded_by == (
        newer.claim_id
    )
    store.delete(("users", "u1"), "prefs")
    state = store.replica.state()
    assert state.active_at("lg:users.u1", "prefs", "value") == []
    assert state.claims[newer.claim_id] == newer  # retracted, never removed


def test_a_batch_of_writes_is_one_signed_change():
    store = _store()
    before = len(store.replica)
    store.batch([PutOp(("b",), f"k{i}", {"i": i}) for i in range(5)] + [PutOp(("b",), "k0", None)])
    assert len(store.replica) == before + 1
    assert [i.key for i in store.search(("b",))] == ["k1", "k2", "k3", "k4"]


def test_async_calls_made_concurrently_are_one_batch_and_one_signed_change():
    store = _store()
    store.put(("c",), "old", {"v": 0})
    before = len(store.replica)

    async def run() -> list[Any]:
        puts = [store.aput(("c",), f"k{i}", {"v": i}) for i in range(300)]
        return await asyncio.gather(*puts, store.aget(("c",), "k1"), store.aget(("c",), "old"))

    *puts, new, old = asyncio.run(run())
    assert len(store.replica) == before + 1  # 300 puts, one signed change
    assert puts == [None] * 300
    # the reads of the batch see the store as it was before its writes
    assert new is None and old.value == {"v": 0}
    assert [store.get(("c",), f"k{i}").value for i in (0, 299)] == [{"v": 0}, {"v": 299}]


def test_async_calls_awaited_in_turn_each_read_the_writes_before_them():
    store = _store()

    async def run() -> None:
        for i in range(5):
            await store.aput(("t",), "k", {"v": i})
            assert (await store.aget(("t",), "k")).value == {"v": i}

    asyncio.run(run())
    assert len(store.replica) == 5


def test_a_bad_op_fails_its_own_concurrent_call_and_the_others_are_written():
    store = _store()

    async def run() -> list[Any]:
        return await asyncio.gather(
            store.aput(("g",), "a", {"v": 1}),
            store.aput(("g",), "b", {CONFLICT_FIELD: 1}),
            store.aput(("g",), "c", {"v": 3}),
            return_exceptions=True,
        )

    a, bad, c = asyncio.run(run())
    assert a is None and c is None
    assert isinstance(bad, LangGraphStoreError) and bad.rule == "reserved-field"
    assert [i.key for i in store.search(("g",))] == ["a", "c"]


def test_a_concurrent_call_cancelled_while_it_waits_writes_nothing():
    store = _store()

    async def run() -> None:
        kept = asyncio.ensure_future(store.aput(("x",), "kept", {"v": 1}))
        gone = asyncio.ensure_future(store.aput(("x",), "gone", {"v": 2}))
        await asyncio.sleep(0)  # both are waiting for the loop's next batch
        gone.cancel()
        await kept
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(run())
    assert [i.key for i in store.search(("x",))] == ["kept"]


def test_a_batch_with_one_bad_op_writes_nothing():
    store = _store()
    store.put(("b",), "kept", {"v": 0})
    before = len(store.replica)
    with pytest.raises(ValueTypeError):
        store.batch([PutOp(("b",), "ok", {"v": 1}), PutOp(("b",), "bad", {"v": {1, 2}})])
    with pytest.raises(NamespaceError):
        store.batch([PutOp(("b",), "ok", {"v": 1}), PutOp(("b.c",), "k", {"v": 1})])
    assert len(store.replica) == before and store.get(("b",), "ok") is None


def test_ops_handed_to_batch_directly_are_checked_like_the_methods_check_them():
    store = _store()
    with pytest.raises(NamespaceError) as err:
        store.batch([PutOp(("a.b",), "k", {"v": 1})])
    assert isinstance(err.value, InvalidNamespaceError) and isinstance(err.value, ValueError)
    assert err.value.field == "namespace" and err.value.rule == "label-chars"
    # the reserved root label is put's rule, not an op's (LangGraph's validate_op_namespace):
    # its own stores write a PutOp under it, and its store tests check that they do
    store.batch([PutOp(("langgraph",), "k", {"v": 1})])
    assert store.get(("langgraph",), "k").value == {"v": 1}
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"v": 1})
    with pytest.raises(NamespaceError):
        store.batch([SearchOp(("",))])
    with pytest.raises(NamespaceError):
        store.batch([ListNamespacesOp((MatchCondition("prefix", ("a.b",)),))])
    with pytest.raises(LangGraphStoreError) as err:
        store.batch(["not an op"])  # type: ignore[list-item]
    assert err.value.rule == "op-type"


@pytest.mark.parametrize(
    ("op", "field", "rule"),
    [
        (PutOp(("n",), "", {"v": 1}), "key", "name-length"),
        (PutOp(("n",), "k" * 1025, {"v": 1}), "key", "name-length"),
        (PutOp(("n",), "k", ["not", "a", "map"]), "value", "map"),  # type: ignore[arg-type]
        (PutOp(("n",), "k", {CONFLICT_FIELD: 1}), "value", "reserved-field"),
        (PutOp(("n" * 1030,), "k", {"v": 1}), "namespace", "length"),
        (SearchOp(("n",), limit=-1), "limit", "non-negative-int"),
        (SearchOp(("n",), filter={"v": {"$regex": "x"}}), "filter.v", "filter-operator"),
        (SearchOp(("n",), filter={"v": {"$gt": [1]}}), "filter.v", "filter-comparable"),
        (SearchOp(("n",), filter={"$eq": 1}), "filter", "fields"),
        (ListNamespacesOp(max_depth=0), "max_depth", "positive-int"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_input_is_a_typed_error_naming_the_field_and_the_rule(op, field, rule):
    store = _store()
    with pytest.raises(LangGraphStoreError) as err:
        store.batch([op])
    assert (err.value.field, err.value.rule) == (field, rule)
    assert len(store.replica) == 0


def test_a_ttl_is_refused_since_the_store_does_not_expire_items():
    store = _store()
    with pytest.raises(NotImplementedError):
        store.put(("t",), "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(("t",), "k", {"v": 1}, ttl=5)])


def test_a_read_value_is_a_plain_copy_the_caller_may_edit():
    store = _store()
    store.put(("c",), "k", {"list": [1, 2], "map": {"a": 1}})
    item = store.get(("c",), "k")
    assert type(item.value["list"]) is list and type(item.value["map"]) is dict
    item.value["list"].append(3)
    assert store.get(("c",), "k").value == {"list": [1, 2], "map": {"a": 1}}


# --- filters ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filtered() -> StateFuseStore:
    store = _store()
    store.batch(
        [
            PutOp(("f",), "int", {"n": 10, "flag": True, "when": "2026-03-01"}),
            PutOp(("f",), "float", {"n": 10.0, "flag": False, "when": "2026-04-01"}),
            PutOp(("f",), "text", {"n": "10", "flag": 1}),
            PutOp(("f",), "bool", {"n": True}),
            PutOp(("f",), "none", {"n": None, "deep": {"a": {"b": [1, 2]}}}),
            PutOp(("f",), "missing", {"other": 1}),
        ]
    )
    return store


@pytest.mark.parametrize(
    ("cond", "keys"),
    [
        ({"n": 10}, ["float", "int"]),  # 10 == 10.0; "10" and True are not numbers
        ({"n": {"$eq": 10.0}}, ["float", "int"]),
        ({"n": "10"}, ["text"]),
        ({"n": True}, ["bool"]),  # True is not 1
        ({"flag": 1}, ["text"]),
        ({"n": {"$gt": 5}}, ["float", "int"]),  # the string "10" is not compared to 5
        ({"n": {"$gte": 10, "$lt": 11}}, ["float", "int"]),
        ({"n": {"$lt": "2"}}, ["text"]),  # strings compare with strings, by code point
        ({"when": {"$gte": "2026-03-15"}}, ["float"]),
        ({"n": None}, ["none"]),  # $eq None matches a null, not a missing field
        ({"n": {"$ne": 10}}, ["bool", "missing", "none", "text"]),  # missing != anything
        ({"absent": {"$gt": 0}}, []),  # a missing field never raises
        ({"absent": {"$ne": 0}}, ["bool", "float", "int", "missing", "none", "text"]),
        ({"deep": {"a": {"b": [1, 2]}}}, ["none"]),
        ({"deep": {"a": {"b": [1, 2.0]}}}, ["none"]),
        ({"deep": {"a": {"b": [1]}}}, []),
        ({"deep": {"a": {"$ne": None}}}, ["none"]),
    ],
)
def test_filters_compare_numbers_as_numbers_and_never_raise_on_a_missing_field(
    filtered, cond, keys
):
    assert sorted(i.key for i in filtered.search(("f",), filter=cond, limit=100)) == keys


# --- conflicts ----------------------------------------------------------------------------------


def _conflicted() -> tuple[StateFuseStore, StateFuseStore]:
    a, b = _store("a"), _store("b")
    a.put(("users", "u1"), "prefs", {"theme": "dark", "size": 12})
    _sync(a, b)
    b.put(("users", "u1"), "prefs", {"theme": "light", "size": 12})  # b saw a's: still its own
    a.put(("users", "u1"), "other", {"theme": "plain"})
    _sync(a, b)
    return a, b


def test_a_key_two_agents_disagree_on_comes_back_as_its_conflict_with_every_candidate():
    a, b = _conflicted()
    item = a.get(("users", "u1"), "prefs")
    assert list(item.value) == [CONFLICT_FIELD]
    marked = item.value[CONFLICT_FIELD]
    conflict = a.replica.state().conflict_of(*claim_key(("users", "u1"), "prefs"))
    assert (marked["namespace"], marked["key"]) == (["users", "u1"], "prefs")
    assert marked["conflict_id"] == conflict.conflict_id.hex()[:12]
    assert marked["not_shown"] == 0
    assert [c["claim_id"] for c in marked["candidates"]] == [
        c.hex()[:12] for c in conflict.candidates
    ]
    by_author = {c["author"]: c["value"] for c in marked["candidates"]}
    assert by_author == {
        a.replica.author.hex()[:8]: {"theme": "dark", "size": 12},
        b.replica.author.hex()[:8]: {"theme": "light", "size": 12},
    }
    assert all(c["provenance"] == "langgraph" for c in marked["candidates"])
    assert item.created_at < item.updated_at  # the earliest and the latest candidate
    assert b.get(("users", "u1"), "prefs") == item  # both replicas show the same


def test_the_text_a_model_reads_of_a_conflict_names_the_graphs_key_and_authors_not_ids():
    """What a graph puts in its prompt (the item as JSON) shows the namespace and key as the
    graph wrote them and who said what, not the claim key they are stored under nor any
    64-digit id."""
    a, b = _conflicted()
    b.replica.declare_name("bee")
    _sync(a, b)
    from statefuse import LatestWins

    texts = [
        json.dumps(store.get(("users", "u1"), "prefs").dict())
        for store in (a, StateFuseStore(a.replica, resolver=LatestWins()))
    ]
    for text in texts:
        assert "lg:" not in text and "users.u1" not in text
        assert re.search(r"[0-9a-f]{32}", text) is None, text
    assert '"author": "bee"' in texts[0]  # the conflict: every side, named
    assert a.replica.author.hex()[:8] in texts[1]  # the value chosen over a's, and a named


def test_conflict_candidates_carry_the_names_their_authors_declared_once_they_arrive():
    a, b = _conflicted()
    before = a.get(("users", "u1"), "prefs").value[CONFLICT_FIELD]["candidates"]
    assert [c["author_name"] for c in before] == [None, None]
    b.replica.declare_name("bee")
    _sync(a, b)  # only the name moves: the memory (and the View) stay as they were
    after = a.get(("users", "u1"), "prefs").value[CONFLICT_FIELD]["candidates"]
    named = {c["author"]: c["author_name"] for c in after}
    assert named == {a.replica.author.hex()[:8]: None, "bee": "bee"}
    (hit, _) = a.search(("users",), query="light")
    assert {c["author_name"] for c in hit.value[CONFLICT_FIELD]["candidates"]} == {None, "bee"}


def test_search_surfaces_a_conflicted_item_when_any_candidate_matches():
    a, _ = _conflicted()

    def keys(**kw: Any) -> list[str]:
        return [i.key for i in a.search(("users",), **kw)]

    assert keys() == ["other", "prefs"]
    assert keys(filter={"theme": "light"}) == ["prefs"]
    assert keys(filter={"theme": "dark"}) == ["prefs"]
    assert keys(filter={"size": 12}) == ["prefs"]
    assert keys(filter={"theme": "blue"}) == []
    (hit, _) = a.search(("users",), query="light")
    assert hit.key == "prefs" and hit.score > 0 and CONFLICT_FIELD in hit.value


def test_a_decision_resolves_the_conflict_and_get_returns_the_chosen_value():
    a, b = _conflicted()
    state = a.replica.state()
    conflict = state.conflict_of(*claim_key(("users", "u1"), "prefs"))
    light = next(c for c in conflict.candidates if state.claims[c].author == b.replica.author)
    a.replica.decide(conflict, light, reason="the user said so")
    assert a.get(("users", "u1"), "prefs").value == {"theme": "light", "size": 12}
    _sync(a, b)
    assert b.get(("users", "u1"), "prefs").value == {"theme": "light", "size": 12}


def test_agreeing_agents_are_no_conflict():
    a, b = _store("a"), _store("b")
    a.put(("t",), "k", {"v": 1})
    b.put(("t",), "k", {"v": 1})
    _sync(a, b)
    assert a.get(("t",), "k").value == {"v": 1}


def test_a_delete_retracts_the_values_of_every_author_the_lens_sees():
    a, b = _conflicted()
    a.delete(("users", "u1"), "prefs")
    assert a.get(("users", "u1"), "prefs") is None
    _sync(a, b)
    assert b.get(("users", "u1"), "prefs") is None
    assert [i.key for i in b.search(("users",))] == ["other"]


def test_a_resolver_given_to_the_store_selects_for_its_reads():
    from statefuse import LatestWins

    a, _ = _conflicted()
    latest = StateFuseStore(a.replica, resolver=LatestWins())
    assert latest.get(("users", "u1"), "prefs").value == {"theme": "light", "size": 12}


def test_what_the_lens_may_not_see_appears_nowhere():
    store = _store()
    store.put(("users", "u1"), "prefs", {"theme": "dark"})
    store.replica.add_claim("lg:users.vip", "secret", "value", {"x": 1}, visibility=["admin"])
    store.replica.add_claim("lg:users.u1", "plan", "value", {"x": 2}, scope="task:t1")
    assert store.get(("users", "vip"), "secret") is None
    assert store.get(("users", "u1"), "plan") is None
    assert [i.key for i in store.search(("users",))] == ["prefs"]
    assert store.list_namespaces() == [("users", "u1")]
    admin = StateFuseStore(store.replica, lens=Lens(roles=frozenset({"admin"}), task="t1"))
    assert admin.get(("users", "vip"), "secret").value == {"x": 1}
    assert admin.get(("users", "u1"), "plan").value == {"x": 2}
    assert admin.list_namespaces() == [("users", "u1"), ("users", "vip")]
    admin.delete(("users", "u1"), "plan")
    assert admin.get(("users", "u1"), "plan") is None


def test_claims_of_other_predicates_or_namespaces_are_not_items():
    store = _store()
    store.replica.add_claim("lg:users.u1", "prefs", "note", "not the value predicate")
    store.replica.add_claim("users", "u1", "value", {"x": 1})
    store.replica.add_claim("lg:bad..ns", "k", "value", {"x": 1})
    assert store.search(()) == [] and store.list_namespaces() == []


# --- ranking ------------------------------------------------------------------------------------


def test_a_query_without_embeddings_ranks_by_the_lexical_ranker_of_the_project():
    store = _store()
    store.put(("docs",), "py", {"text": "python tutorial for beginners"})
    store.put(("docs",), "ts", {"text": "typescript guide"})
    store.put(("docs",), "pyadv", {"text": "advanced python python internals"})
    hits = store.search(("docs",), query="python internals")
    assert [h.key for h in hits] == ["pyadv", "py", "ts"]
    claims = [
        c
        for k in ("pyadv", "py", "ts")
        for c in store.replica.state().active_at(*claim_key(("docs",), k))
    ]
    expected = LexicalRanker().scores("python internals", claims)
    assert [h.score for h in hits] == [expected.get(c.claim_id, 0.0) for c in claims]
    assert [h.key for h in store.search(("docs",), query="python internals", offset=1)] == [
        "py",
        "ts",
    ]


DIMS = 32


def _vector(text: str) -> list[float]:
    """A deterministic bag-of-words embedding: each word adds 1 to one of DIMS buckets."""
    v = [0.0] * DIMS
    for w in re.findall(r"[a-z]+", text.lower()):
        v[int(hashlib.sha256(w.encode()).hexdigest(), 16) % DIMS] += 1.0
    return v


class _Embed:
    """A fake embedding function that counts the texts it embeds (no network, no model)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return [_vector(t) for t in texts]


DOCS = {
    "cats": {"text": "cats purr and sleep", "kind": "pet"},
    "dogs": {"text": "dogs bark and fetch", "kind": "pet"},
    "tax": {"text": "tax forms are due in april", "kind": "admin"},
}


def _fill(store: BaseStore) -> None:
    for k, v in DOCS.items():
        store.put(("docs",), k, v)


def test_embedding_search_ranks_by_cosine_like_langgraphs_in_memory_store():
    embed = _Embed()
    index = {"embed": embed, "dims": DIMS, "fields": ["text"]}
    store, reference = _store(index=index), InMemoryStore(index=index)
    _fill(store)
    _fill(reference)
    assert embed.texts == [d["text"] for d in DOCS.values()] * 2  # embedded at put time
    for query in ("dogs that bark", "april tax", "sleep"):
        ours = store.search(("docs",), query=query)
        theirs = reference.search(("docs",), query=query)
        assert [h.key for h in ours] == [h.key for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs])
    hits = store.search(("docs",), query="april tax", filter={"kind": "pet"}, limit=1)
    assert [h.key for h in hits] == ["cats"] or [h.key for h in hits] == ["dogs"]


def test_items_put_with_index_false_have_no_vector_and_come_after_the_ranked_ones():
    embed = _Embed()
    store = _store(index={"embed": embed, "dims": DIMS, "fields": ["text"]})
    _fill(store)
    store.put(("docs",), "hidden", {"text": "dogs dogs dogs"}, index=False)
    store.put(("docs",), "title", {"text": "x", "title": "dogs"}, index=["title"])
    hits = store.search(("docs",), query="dogs", limit=10)
    assert [h.key for h in hits][:2] == ["title", "dogs"]
    assert (hits[-1].key, hits[-1].score) == ("hidden", None)
    assert "dogs dogs dogs" not in embed.texts


def test_claims_without_vectors_are_embedded_by_the_first_search_that_meets_them(tmp_path):
    embed = _Embed()
    index = {"embed": embed, "dims": DIMS, "fields": ["text"]}
    writer = _store("w", index=index)
    _fill(writer)
    path = tmp_path / "reader.db"
    with StateFuseStore.open(path, create=True, space="team", index=index) as reader:
        reader.replica.merge(writer.replica)  # received: no vectors yet
        embed.texts.clear()
        assert reader.search(("docs",), query="bark")[0].key == "dogs"
        assert sorted(embed.texts) == sorted([d["text"] for d in DOCS.values()] + ["bark"])
        embed.texts.clear()
        reader.search(("docs",), query="purr")
        assert embed.texts == ["purr"]  # kept: only the query is embedded again
    with StateFuseStore.open(path, index=index) as reopened:  # vectors live in memory
        assert reopened.search(("docs",), query="purr")[0].key == "cats"


def test_vectors_of_replaced_values_are_dropped_by_a_later_query_search():
    store = _store(index={"embed": _Embed(), "dims": DIMS, "fields": ["text"]})
    store._prune_at = 4  # (PRUNE_MARGIN vectors in real use)
    _fill(store)
    _fill(store)  # each put replaces the value: the first three vectors are stale
    assert len(store._vectors) == 6
    assert store.search(("docs",), query="dogs")[0].key == "dogs"
    active = {c.claim_id for c in store.replica.state().active_claims()}
    assert set(store._vectors) == active and len(active) == 3


def test_an_embedding_of_the_wrong_size_is_refused_and_writes_nothing():
    store = _store(index={"embed": lambda texts: [[1.0, 0.0]] * len(texts), "dims": DIMS})
    with pytest.raises(LangGraphStoreError) as err:
        store.put(("docs",), "k", {"text": "x"})
    assert err.value.rule == "dims" and len(store.replica) == 0


def test_an_async_embedding_function_serves_the_async_methods():
    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        return [_vector(t) for t in texts]

    store = _store(index={"embed": aembed, "dims": DIMS, "fields": ["text"]})

    async def run() -> list[str]:
        for k, v in DOCS.items():
            await store.aput(("docs",), k, v)
        return [h.key for h in await store.asearch(("docs",), query="tax april")]

    assert asyncio.run(run())[0] == "tax"


def test_an_index_config_without_embed_is_refused():
    with pytest.raises(LangGraphStoreError):
        _store(index={"dims": 4})  # type: ignore[typeddict-item]


# --- the store beside a model -------------------------------------------------------------------

NAMESPACES = [("a",), ("a", "b"), ("a", "bc"), ("c",)]
KEYS = ["k1", "k2", "k3"]
_value = st.dictionaries(
    st.sampled_from(["x", "y"]), st.one_of(st.integers(-2, 2), st.booleans(), st.just("s"))
)
_op = st.tuples(st.sampled_from(range(len(NAMESPACES))), st.sampled_from(KEYS)).flatmap(
    lambda at: st.one_of(st.none(), _value).map(lambda v: PutOp(NAMESPACES[at[0]], at[1], v))
)


@settings(max_examples=min(settings.default.max_examples, 60), deadline=None)
@given(st.lists(st.lists(_op, min_size=1, max_size=3), max_size=12))
def test_any_sequence_of_puts_and_deletes_reads_back_like_a_dict(batches):
    store = _store()
    model: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
    for ops in batches:
        store.batch(ops)
        for op in ops:
            if op.value is None:
                model.pop((op.namespace, op.key), None)
            else:
                model[(op.namespace, op.key)] = dict(op.value)
        state = store.replica.state()
        assert state.derived(_catalog) == _catalog_full(state)  # carried equals from scratch
        for ns in NAMESPACES:
            for key in KEYS:
                item = store.get(ns, key)
                assert (item.value if item else None) == model.get((ns, key))
            found = [(i.namespace, i.key, i.value) for i in store.search(ns, limit=100)]
            assert found == sorted((n, k, v) for (n, k), v in model.items() if n[: len(ns)] == ns)
        assert store.list_namespaces() == sorted({n for n, _ in model})


def test_the_carried_catalog_equals_one_made_from_scratch_after_large_batches_and_receives():
    a, b = _store("a"), _store("b")
    checked = 0
    # many keys of one place change at once (one sort), and few of them (list inserts)
    for store, ops in [
        (a, [PutOp(("n", str(i % 3)), f"k{i:03}", {"i": i}) for i in range(300)]),
        (a, [PutOp(("n", str(i % 3)), f"k{i:03}", None) for i in range(0, 300, 2)]),
        (b, [PutOp(("n", "0"), f"k{i:03}", {"b": i}) for i in range(0, 30, 3)]),
        (a, [PutOp(("n", "1"), f"k{i:03}", None) for i in range(300)]),
    ]:
        store.batch(ops)
        for s in (a, b):
            s.search(())  # derive the catalog of each State, so the next one carries it
        _sync(a, b)
        for s in (a, b):
            state = s.replica.state()
            assert state.derived(_catalog) == _catalog_full(state)
            checked += 1
    assert checked == 8 and a.list_namespaces() == [("n", "0"), ("n", "2")]


# --- LangGraph graphs on two replicas -----------------------------------------------------------


class Turn(TypedDict, total=False):
    user: str
    messages: list[BaseMessage]
    memory: dict[str, Any] | None
    related: list[str]


def _agent(model: GenericFakeChatModel, store: StateFuseStore) -> Any:
    """A graph whose first node asks the model what to remember and writes it, and whose second
    node reads it back (get) and looks for related memories (search)."""

    def remember(state: Turn, *, store: BaseStore) -> Turn:
        reply = model.invoke(state["messages"])
        store.put(("users", state["user"]), "prefs", json.loads(str(reply.content)))
        return {"messages": [*state["messages"], reply]}

    def recall(state: Turn, *, store: BaseStore) -> Turn:
        item = store.get(("users", state["user"]), "prefs")
        hits = store.search(("users",), query="theme", filter={"theme": {"$ne": "none"}})
        return {"memory": item.value if item else None, "related": [h.key for h in hits]}

    graph = StateGraph(Turn).add_node("remember", remember).add_node("recall", recall)
    graph.add_edge(START, "remember").add_edge("remember", "recall").add_edge("recall", END)
    return graph.compile(store=store)


def test_two_langgraph_agents_on_synced_replicas_see_their_disagreement_not_one_side():
    planner = _store("planner")
    scout = _store("scout")
    ask = [HumanMessage(content="I like a dark editor")]
    first = _agent(
        GenericFakeChatModel(messages=iter([AIMessage(content='{"theme": "dark"}')])), planner
    ).invoke({"user": "u1", "messages": ask})
    assert first["memory"] == {"theme": "dark"} and first["related"] == ["prefs"]

    second = _agent(
        GenericFakeChatModel(messages=iter([AIMessage(content='{"theme": "light"}')])), scout
    ).invoke({"user": "u1", "messages": ask})
    assert second["memory"] == {"theme": "light"}  # before sync, each sees its own

    _sync(planner, scout)
    recall_only = StateGraph(Turn)
    recall_only.add_node(
        "recall",
        lambda state, *, store: {
            "memory": store.get(("users", state["user"]), "prefs").value,
            "related": [h.key for h in store.search(("users", state["user"]))],
        },
    )
    recall_only.add_edge(START, "recall").add_edge("recall", END)
    for store in (planner, scout):
        out = recall_only.compile(store=store).invoke({"user": "u1"})
        candidates = out["memory"][CONFLICT_FIELD]["candidates"]
        assert sorted(c["value"]["theme"] for c in candidates) == ["dark", "light"]
        assert out["related"] == ["prefs"]
    assert planner.get(("users", "u1"), "prefs") == scout.get(("users", "u1"), "prefs")


def test_a_compiled_graph_reads_a_chosen_value_with_its_contested_mark():
    """A resolver's (or a decision's) choice is the item's value, and the item says it was
    contested: the other value with its author, in `ContestedItem.contested`; a candidate the
    lens may not see is neither counted nor named; an item no conflict preceded has no mark."""
    from statefuse import LatestWins

    a, _ = _conflicted()
    a.replica.add_claim(  # a third value, for the admin role only
        "lg:users.u1", "prefs", "value", {"theme": "SECRET"}, visibility=["admin"]
    )
    latest = StateFuseStore(a.replica, resolver=LatestWins())

    def recall(state: Turn, *, store: BaseStore) -> dict[str, Any]:
        item = store.get(("users", state["user"]), "prefs")
        hits = store.search(("users", state["user"]))
        return {
            "memory": {"value": item.value, "contested": getattr(item, "contested", None)},
            "related": [(h.key, getattr(h, "contested", None)) for h in hits],
        }

    graph = StateGraph(Turn).add_node("recall", recall)
    graph.add_edge(START, "recall").add_edge("recall", END)
    out = graph.compile(store=latest).invoke({"user": "u1"})
    assert out["memory"]["value"] == {"theme": "light", "size": 12}
    mark = out["memory"]["contested"]
    assert (mark["how"], mark["by"]) == ("resolver", "LatestWins")
    (other,) = mark["others"]
    assert other["value"] == {"theme": "dark", "size": 12}
    assert other["authors"] == [a.replica.author.hex()[:8]]
    assert (mark["namespace"], mark["key"]) == (["users", "u1"], "prefs")
    assert "SECRET" not in json.dumps(out)
    related = dict(out["related"])
    assert related["prefs"] == mark and related["other"] is None
    assert latest.get(("users", "u1"), "prefs").dict()["contested"] == mark
    # the admin sees three values: two others
    admin = StateFuseStore(a.replica, resolver=LatestWins(), lens=Lens(roles=frozenset({"admin"})))
    assert len(admin.get(("users", "u1"), "prefs").contested["others"]) == 2
    # without a resolver nothing was chosen: the conflict itself is the value, no mark
    plain = a.get(("users", "u1"), "prefs")
    assert CONFLICT_FIELD in plain.value and not hasattr(plain, "contested")
