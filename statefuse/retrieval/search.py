"""Search of what a View shows: the claims that answer a query best (`search_view`).

Pure (no I/O of its own): the ranker handed over does the ranking, lexical (`LexicalRanker`)
or hybrid (`statefuse.retrieval.fusion.HybridRanker`, which reads and writes its vector store).

What is searched is what the lens sees and nothing else: the selected claim of every key, and
every candidate of an unresolved conflict (a hit on a candidate carries its conflict, so the
reader knows the key is contested). Claims the lens may not see are never ranked, so their
words or vectors cannot lift or sink anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from statefuse.core.op import ClaimAdded
from statefuse.reading.ranker import Ranker
from statefuse.reading.view import SurfacedConflict, View
from statefuse.retrieval.fusion import ranking

__all__ = ["SearchHit", "search_view"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One claim found: its ``score`` by the ranker (0.0 for a search without a query), and
    the unresolved ``conflict`` it is a candidate of (None: the key's selected claim)."""

    claim: ClaimAdded
    score: float
    conflict: SurfacedConflict | None = None


def search_view(view: View, query: str, *, ranker: Ranker, limit: int) -> list[SearchHit]:
    """The at most ``limit`` claims of ``view`` that ``ranker`` scores highest for ``query``
    (positive scores only, best first, ties by claim id); without a query (blank), the first
    ``limit`` in key order."""
    found: dict[bytes, tuple[ClaimAdded, SurfacedConflict | None]] = {}
    for _, s in sorted(view.selected.items(), key=lambda kv: (kv[0], kv[1].scope)):
        found.setdefault(s.claim.claim_id, (s.claim, None))
    for surfaced in view.surfaced_conflicts:
        for c in surfaced.candidates:
            found.setdefault(c.claim_id, (c, surfaced))
    if not query.strip():
        return [SearchHit(c, 0.0, conflict) for c, conflict in list(found.values())[:limit]]
    claims = tuple(c for c, _ in found.values())
    scores = ranker.scores(query, claims)
    out = []
    for cid in ranking(scores)[:limit]:
        c, conflict = found[cid]
        out.append(SearchHit(c, scores[cid], conflict))
    return out
