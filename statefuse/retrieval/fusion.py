"""Hybrid ranking: lexical and vector rankings combined by reciprocal rank fusion
(`HybridRanker`, a `Ranker`), and the rule itself (`rrf`).

The rule (Cormack, Clarke and Büttcher, SIGIR 2009): each ranking lists claims best first;
a claim's fused score is the sum, over the rankings that list it, of ``1 / (k + rank)`` with
``rank`` counted from 1 and ``k = 60`` (`RRF_K`). Why ranks and not scores: BM25 scores are
unbounded and cosines live in [-1, 1], so no fixed weight makes them comparable across queries
and corpora; ranks are. Laws the tests check: the fused scores do not depend on the order the
rankings are given in; a claim first in every ranking is first; a claim listed by a ranking
outscores one that is not, all else equal.

The two rankings of `HybridRanker`: the lexical one (by default `LexicalRanker`, BM25, every
claim with a positive score) and the vector one (the `VECTOR_DEPTH` claims nearest the query by
cosine, those with a positive cosine). Each ranking breaks ties by claim id, so fused scores are
a deterministic function of the query, the claims and the embedder. Claims in neither ranking
score 0 (the context lays them out after the ranked ones, as it does for lexical ranking).

Lexical ranking alone (`LexicalRanker`) stays the default everywhere and needs nothing;
`HybridRanker` is used where an embedder is given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from statefuse.core.op import ClaimAdded
from statefuse.reading.ranker import LexicalRanker, Ranker, value_text
from statefuse.retrieval.embedder import (
    Embedder,
    EmbedderError,
    Vector,
    as_embedder,
    checked_vectors,
)
from statefuse.retrieval.vectorstore import MemoryVectors, VectorStore, nearest

__all__ = [
    "EMBED_BATCH",
    "RRF_K",
    "VECTOR_DEPTH",
    "HybridRanker",
    "claim_text",
    "ranking",
    "rrf",
]

#: The constant of reciprocal rank fusion: damps the weight of the very first ranks.
RRF_K = 60
#: How many claims nearest the query by cosine enter the fusion.
VECTOR_DEPTH = 100
#: Most texts handed to the embedder in one call.
EMBED_BATCH = 64
#: Query vectors remembered (an agent loop asks the same question after each write).
_QUERY_MEMO = 64


def rrf(rankings: Sequence[Sequence[bytes]], *, k: int = RRF_K) -> dict[bytes, float]:
    """Reciprocal rank fusion of ``rankings`` (each: claim ids, best first): per claim, the sum
    of ``1 / (k + rank)`` over the rankings that list it (rank from 1; a claim listed twice in
    one ranking counts at its first place). Raises `EmbedderError` for ``k`` < 1."""
    if type(k) is not int or k < 1:
        raise EmbedderError("k", "positive-int", f"{k!r} is not an int >= 1")
    parts: dict[bytes, list[float]] = {}
    for ids in rankings:
        seen: set[bytes] = set()
        for rank, cid in enumerate(ids, start=1):
            if cid not in seen:
                seen.add(cid)
                parts.setdefault(cid, []).append(1.0 / (k + rank))
    # summed smallest first: the same floats whatever order the rankings came in
    return {cid: sum(sorted(ps)) for cid, ps in parts.items()}


def ranking(scores: Mapping[bytes, float]) -> list[bytes]:
    """Claim ids with a positive score, best first, ties by claim id."""
    return [cid for s, cid in sorted((-s, cid) for cid, s in scores.items() if s > 0)]


def claim_text(c: ClaimAdded) -> str:
    """What is embedded for a claim: its key's words and its value (``offsite/room_size:
    40 people`` reads ``offsite room size: 40 people``)."""
    key = f"{c.namespace} {c.subject} {c.predicate}".replace("_", " ")
    return f"{key}: {value_text(c.value)}"


class HybridRanker:
    """A `Ranker` fusing lexical and vector rankings by `rrf` (see the module docstring).

    ``embedder``: an `Embedder` or anything `as_embedder` takes. ``vectors``: where claim
    vectors are kept (default: in memory; a replica hands its store's, so they persist).
    ``lexical``: the lexical ranker (default a new `LexicalRanker`). Claims without a vector
    for this embedder are embedded on first use, `EMBED_BATCH` texts per call, and stored.
    Raises `EmbedderError` when the embedder's answer breaks a rule, and whatever the embedder
    raises (an adapter's `EmbeddingServiceError`)."""

    __slots__ = ("_norms", "_queries", "depth", "embedder", "k", "lexical", "vectors")

    def __init__(
        self,
        embedder: object,
        *,
        vectors: VectorStore | None = None,
        lexical: Ranker | None = None,
        k: int = RRF_K,
        depth: int = VECTOR_DEPTH,
    ) -> None:
        self.embedder: Embedder = as_embedder(embedder)
        self.vectors: VectorStore = MemoryVectors() if vectors is None else vectors
        self.lexical: Ranker = LexicalRanker() if lexical is None else lexical
        rrf((), k=k)
        if type(depth) is not int or depth < 1:
            raise EmbedderError("depth", "positive-int", f"{depth!r} is not an int >= 1")
        self.k = k
        self.depth = depth
        self._norms: dict[bytes, float] = {}
        self._queries: dict[str, Vector] = {}

    @property
    def name(self) -> str:
        return self.embedder.name

    def _checked(self, raw: object, count: int, dim: int | None) -> list[Vector]:
        return checked_vectors(raw, count=count, dimension=dim, name=self.embedder.name)

    def _remember(self, query: str, v: Vector) -> Vector:
        if len(self._queries) >= _QUERY_MEMO:
            self._queries.clear()
        self._queries[query] = v
        return v

    def query_vector(self, query: str) -> Vector:
        """The query's vector (remembered for the next calls)."""
        v = self._queries.get(query)
        if v is None:
            (v,) = self._checked(self.embedder.embed([query]), 1, None)
            self._remember(query, v)
        return v

    async def aquery_vector(self, query: str) -> Vector:
        v = self._queries.get(query)
        if v is None:
            (v,) = self._checked(await self.embedder.aembed([query]), 1, None)
            self._remember(query, v)
        return v

    def _missing(
        self, claims: Sequence[ClaimAdded], dim: int
    ) -> tuple[dict[bytes, Vector], list[ClaimAdded]]:
        ids = [c.claim_id for c in claims]
        have = self.vectors.get(self.embedder.name, dim, ids)
        todo: dict[bytes, ClaimAdded] = {}
        for c in claims:
            if c.claim_id not in have:
                todo.setdefault(c.claim_id, c)
        return have, list(todo.values())

    def embed_claims(self, claims: Sequence[ClaimAdded], dim: int) -> dict[bytes, Vector]:
        """The vectors of ``claims`` for this embedder, embedding (and storing) only those the
        vector store does not hold."""
        have, todo = self._missing(claims, dim)
        name = self.embedder.name
        for at in range(0, len(todo), EMBED_BATCH):
            part = todo[at : at + EMBED_BATCH]
            got = self._checked(self.embedder.embed([claim_text(c) for c in part]), len(part), dim)
            rows = {c.claim_id: v for c, v in zip(part, got, strict=True)}
            self.vectors.put(name, dim, rows)
            have.update(rows)
        return have

    async def aembed_claims(self, claims: Sequence[ClaimAdded], dim: int) -> dict[bytes, Vector]:
        have, todo = self._missing(claims, dim)
        name = self.embedder.name
        for at in range(0, len(todo), EMBED_BATCH):
            part = todo[at : at + EMBED_BATCH]
            raw = await self.embedder.aembed([claim_text(c) for c in part])
            got = self._checked(raw, len(part), dim)
            rows = {c.claim_id: v for c, v in zip(part, got, strict=True)}
            self.vectors.put(name, dim, rows)
            have.update(rows)
        return have

    def fuse(
        self, lexical: Mapping[bytes, float], query: Vector, vectors: Mapping[bytes, Vector]
    ) -> dict[bytes, float]:
        """The fused scores of one query from its lexical scores and the claims' vectors."""
        near = [cid for cid, _ in nearest(query, vectors, self.depth, norms=self._norms)]
        return rrf([ranking(lexical), near], k=self.k)

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> dict[bytes, float]:
        if not claims or not query.strip():
            return {}
        lexical = self.lexical.scores(query, claims)
        q = self.query_vector(query)
        return self.fuse(lexical, q, self.embed_claims(claims, len(q)))

    async def ascores(self, query: str, claims: Sequence[ClaimAdded]) -> dict[bytes, float]:
        """`scores`, awaiting the embedder's `aembed`."""
        if not claims or not query.strip():
            return {}
        lexical = self.lexical.scores(query, claims)
        q = await self.aquery_vector(query)
        return self.fuse(lexical, q, await self.aembed_claims(claims, len(q)))

    def __repr__(self) -> str:
        return f"HybridRanker({self.embedder.name!r}, k={self.k}, depth={self.depth})"
