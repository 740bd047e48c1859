"""Stored vectors (`statefuse.retrieval.vectorstore`): kept in the store file by claim id, embedder
name
and dimension; two embedders never mix; reopening a store never embeds a claim again."""

from __future__ import annotations

import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search import ConceptEmbedder, load  # noqa: E402
from statefuse.retrieval.embedder import EmbedderError, float32  # noqa: E402
from statefuse.retrieval.fusion import HybridRanker, claim_text  # noqa: E402
from statefuse.retrieval.vectorstore import MemoryVectors, nearest, pack, unpack  # noqa: E402
from statefuse.storage.sqlitestore import SQLiteStore  # noqa: E402
from statefuse.sync.replica import Replica  # noqa: E402


@dataclass
class Recording:
    """An embedder whose vectors say who made them: every number is ``tag``, and the text's
    length sits in the first place."""

    name: str
    dimension: int
    tag: float
    texts: list[str] = field(default_factory=list)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += texts
        return [[float(len(t)), *([self.tag] * (self.dimension - 1))] for t in texts]

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed(texts)


KEYS = [f"notes/n{i}/text" for i in range(6)]


@settings(max_examples=25)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 5)), min_size=1, max_size=8))
def test_the_vectors_of_two_embedders_never_mix(steps: list[tuple[int, int]]) -> None:
    """Embedders differing by name, or by dimension under one name, ranking in any order over
    one store file: each reads back only the vectors it made itself."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.db"
        with Replica.open(path, create=True, space="team") as replica:
            for i, k in enumerate(KEYS):
                replica.add_claim(k, f"value {'x' * i}")
            made = [
                Recording("alpha", 4, 1.0),
                Recording("alpha", 6, 2.0),
                Recording("beta", 4, 3.0),
            ]
            for which, n in steps:
                replica.search("value", embedder=made[which], limit=n)
            claims = {c.claim_id: c for c in replica.state().active_claims()}
        store = SQLiteStore(path, readonly=True)
        try:
            rows = store.vectors().embedders()
            for e in made:
                got = store.vectors().get(e.name, e.dimension, list(claims))
                for cid, v in got.items():
                    text = claim_text(claims[cid])
                    assert v == float32([len(text), *([e.tag] * (e.dimension - 1))])
        finally:
            store.close()
        used = {(made[w].name, made[w].dimension) for w, _ in steps}
        assert {(name, dim) for name, dim, _ in rows} == used
        assert all(n == len(KEYS) for _, _, n in rows)


def test_reopening_a_store_embeds_only_what_was_never_embedded(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    question = "Is the espresso maker working?"
    first = ConceptEmbedder()
    with Replica.open(path, create=True, space="team") as replica:
        load(replica)
        before = replica.context(question, embedder=first).text
    assert first.texts == 200 + 1  # every claim, and the question

    again = ConceptEmbedder()
    with Replica.open(path) as replica:
        assert replica.context(question, embedder=again).text == before
        assert replica.search(question, embedder=again)[0].claim.subject == "coffee_machine"
        assert again.texts == 1  # the question alone (then remembered)
        replica.add_claim("kitchen/kettle/status", "fixed")
        replica.context(question, embedder=again)
        assert again.texts == 2  # and the one new claim

    other = ConceptEmbedder(name="concepts-v2")  # another model: its own vectors
    with Replica.open(path) as replica:
        replica.context(question, embedder=other)
    assert other.texts == 201 + 1


def test_a_read_only_open_reads_stored_vectors_and_writes_none(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team") as replica:
        load(replica)
        replica.search("coffee", embedder=ConceptEmbedder())
    reader = ConceptEmbedder()
    with Replica.open(path, readonly=True) as replica:
        replica.search("coffee", embedder=reader)
        assert reader.texts == 1
        replica.search("tea", embedder=ConceptEmbedder(name="other"))
    with sqlite3.connect(path) as db:
        names = {r[0] for r in db.execute("SELECT DISTINCT embedder FROM vec_embedding")}
    assert names == {"concepts-v1"}


def test_vectors_live_in_their_own_table_of_the_store_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team") as replica:
        claim = replica.add_claim("notes/a/text", "hello")
        replica.search("hello", embedder=Recording("alpha", 3, 0.5))
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT embedder, dim, claim_id, vector FROM vec_embedding").fetchall()
    assert rows == [("alpha", 3, claim.claim_id, pack(float32([len(claim_text(claim)), 0.5, 0.5])))]


def test_a_vector_of_the_wrong_size_stores_nothing(tmp_path: Path) -> None:
    class Broken(Recording):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            out = super().embed(texts)
            return [v if len(texts) == 1 else v[:-1] for v in out]  # claims: one short

    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team") as replica:
        replica.add_claim("notes/a/text", "hello")
        replica.add_claim("notes/b/text", "world")
        with pytest.raises(EmbedderError) as info:
            replica.search("hello", embedder=Broken("alpha", 3, 0.5))
        assert (info.value.field, info.value.rule) == ("vectors", "dimension")
        assert replica.vectors().count("alpha", 3) == 0


def test_a_damaged_row_is_read_as_no_vector_and_embedded_again(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team") as replica:
        replica.add_claim("notes/a/text", "hello")
        replica.search("hello", embedder=Recording("alpha", 3, 0.5))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE vec_embedding SET vector = x'00'")
    again = Recording("alpha", 3, 0.5)
    with Replica.open(path) as replica:
        replica.search("hello", embedder=again)
    assert len(again.texts) == 2  # the query and the claim


def test_memory_vectors_keep_embedders_apart() -> None:
    store = MemoryVectors()
    assert store.put("a", 2, {b"x": (1.0, 0.0)}) == 1
    assert store.put("a", 2, {b"x": (0.0, 1.0)}) == 0  # a claim's vector never changes
    assert store.put("a", 3, {b"x": (1.0, 2.0, 3.0)}) == 1
    assert store.get("a", 2, [b"x"]) == {b"x": (1.0, 0.0)}
    assert store.get("b", 2, [b"x"]) == {}
    assert store.embedders() == [("a", 2, 1), ("a", 3, 1)]


def test_nearest_is_cosine_best_first_ties_by_id() -> None:
    vectors = {b"b": (1.0, 0.0), b"a": (2.0, 0.0), b"c": (0.0, 1.0), b"d": (-1.0, 0.0)}
    assert nearest((1.0, 0.0), vectors, 5) == [(b"a", 1.0), (b"b", 1.0)]
    assert nearest((0.0, 0.0), vectors, 5) == []
    assert unpack(pack((1.5, -2.0)), 2) == (1.5, -2.0)
    assert unpack(b"\x00", 2) is None


def test_a_hybrid_ranker_without_a_store_keeps_vectors_in_memory() -> None:
    e = Recording("alpha", 3, 0.5)
    with Replica.memory(space="team") as replica:
        claims = tuple(load(replica).values())
    ranker = HybridRanker(e)
    ranker.scores("coffee", claims)
    ranker.scores("tea", claims)
    assert len(e.texts) == len(claims) + 2


def test_vectors_survive_a_rebuilt_file_by_being_made_again(tmp_path: Path) -> None:
    """`SQLiteStore.rebuild` copies the op-set, not this cache: the same replica goes on
    ranking, embedding what the new file lacks."""
    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team") as replica:
        replica.add_claim("notes/a/text", "hello")
        replica.search("hello", embedder=Recording("alpha", 3, 0.5))
        replica.store.rebuild()
        replica.add_claim("notes/b/text", "world")
        again = Recording("alpha", 3, 0.5)
        assert replica.search("world", embedder=again)
        assert replica.vectors().count("alpha", 3) == 1  # the new claim's
        assert "notes b text: world" in again.texts


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_hybrid_ranker_awaits_an_async_embedder(kind: str) -> None:
    import asyncio

    from statefuse.retrieval.embedder import as_embedder

    base = ConceptEmbedder()

    async def embed_async(texts: list[str]) -> list[list[float]]:
        return base.embed(texts)

    e = as_embedder(embed_async if kind == "async" else base.embed, name="c", dimension=256)
    with Replica.memory(space="team") as replica:
        claims = tuple(load(replica).values())
    ranker = HybridRanker(e)
    got = asyncio.run(ranker.ascores("Is the espresso maker working?", claims))
    assert got == HybridRanker(e).scores("Is the espresso maker working?", claims)
    best = max(got, key=lambda cid: (got[cid], cid))
    assert next(c for c in claims if c.claim_id == best).subject == "coffee_machine"
