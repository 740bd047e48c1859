"""The LangGraph store's embeddings: ``index_config`` and ``embeddings`` as LangGraph's own
stores expose them, and vectors kept in the replica's store file, so a store reopened with the
same model embeds nothing it embedded before, and another model never reads them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

try:
    import langgraph  # noqa: F401 - CI must test the store: a missing langgraph fails loudly
except ImportError:  # pragma: no cover
    if os.environ.get("CI"):
        raise
    pytest.importorskip("langgraph")

from langchain_core.embeddings import Embeddings
from langgraph.store.memory import InMemoryStore

from statefuse.entry.langgraph import LangGraphStoreError, StateFuseStore, embedder_name
from statefuse.sync.replica import Replica

WORDS = ("coffee", "tea", "kettle", "budget", "venue", "hotel")


class Counting:
    """An embed function (LangGraph's ``index["embed"]``): one position per known word;
    ``texts`` lists every text it was asked for."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.__qualname__ = "Counting"

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.texts += texts
        return [[1.0 if w in t.lower() else 0.0 for w in WORDS] for t in texts]


def test_index_config_and_embeddings_are_exposed_as_on_langgraphs_own_stores() -> None:
    embed = Counting()
    index = {"dims": len(WORDS), "embed": embed, "fields": ["text"]}
    theirs = InMemoryStore(index=index)  # type: ignore[arg-type]
    with Replica.memory(space="team") as replica:
        ours = StateFuseStore(replica, index=index)  # type: ignore[arg-type]
        assert ours.index_config is not None and theirs.index_config is not None
        for field in ("dims", "embed", "fields"):
            assert ours.index_config[field] == theirs.index_config[field]  # type: ignore[literal-required]
        assert isinstance(ours.embeddings, Embeddings)
        assert ours.embeddings.embed_query("tea") == theirs.embeddings.embed_query("tea")  # type: ignore[union-attr]
        plain = StateFuseStore(replica)
        assert plain.index_config is None and plain.embeddings is None


def test_a_reopened_store_embeds_only_the_query(tmp_path: Path) -> None:
    path = tmp_path / "lg.db"
    first = Counting()
    index = {"dims": len(WORDS), "embed": first}
    store = StateFuseStore.open(path, create=True, space="team", index=index)  # type: ignore[arg-type]
    try:
        store.put(("kitchen",), "machine", {"text": "the coffee maker is broken"})
        store.put(("kitchen",), "kettle", {"text": "kettle fixed"})
        store.put(("finance",), "q3", {"text": "budget 250k"}, index=False)
        before = [(i.key, i.score) for i in store.search(("kitchen",), query="coffee")]
    finally:
        store.close()
    assert len(first.texts) == 3  # two puts' texts and the query

    again = Counting()
    store = StateFuseStore.open(path, index={"dims": len(WORDS), "embed": again})  # type: ignore[arg-type]
    try:
        after = [(i.key, i.score) for i in store.search(("kitchen",), query="coffee")]
        store.search((), query="budget")  # the index=False item stays without vectors
    finally:
        store.close()
    assert after == before
    assert again.texts == ["coffee", "budget"]


def test_another_model_never_reads_the_vectors_of_one(tmp_path: Path) -> None:
    path = tmp_path / "lg.db"
    store = StateFuseStore.open(
        path,
        create=True,
        space="team",
        index={"dims": len(WORDS), "embed": Counting()},  # type: ignore[arg-type]
    )
    try:
        store.put(("kitchen",), "machine", {"text": "coffee"})
    finally:
        store.close()

    def other(texts: list[str]) -> list[list[float]]:
        seen.extend(texts)
        return [[0.5] * len(WORDS) for _ in texts]

    seen: list[str] = []
    store = StateFuseStore.open(path, index={"dims": len(WORDS), "embed": other})  # type: ignore[arg-type]
    try:
        store.search(("kitchen",), query="coffee")
    finally:
        store.close()
    assert len(seen) == 2 and "coffee" in seen  # the query, and the item afresh
    with Replica.open(path, readonly=True) as replica:
        names = sorted(name for name, _, _ in replica.vectors().embedders())
    assert names == [
        f"langgraph:{__name__}:Counting:$",
        f"langgraph:{__name__}:test_another_model_never_reads_the_vectors_of_one.<locals>.other:$",
    ]


def test_a_vector_with_nan_is_refused_and_nothing_is_written() -> None:
    with Replica.memory(space="team") as replica:
        store = StateFuseStore(
            replica,
            index={"dims": 2, "embed": lambda texts: [[float("nan"), 1.0] for _ in texts]},  # type: ignore[arg-type]
        )
        with pytest.raises(LangGraphStoreError) as info:
            store.put(("a",), "b", {"text": "x"})
        assert (info.value.field, info.value.rule) == ("embed", "finite")
        assert store.search(("a",)) == []


def test_embedder_names_name_the_model() -> None:
    assert embedder_name("openai:text-embedding-3-small") == "openai:text-embedding-3-small"
    assert embedder_name(Counting()) == f"{__name__}:Counting"

    class Model(Embeddings):
        model = "m-1"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [[1.0] for _ in texts]

        def embed_query(self, text: str) -> list[float]:
            return [1.0]

    assert embedder_name(Model()).endswith("Model:m-1")
