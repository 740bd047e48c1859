"""The View: what one lens sees of a State, resolved or surfaced (SEMANTICS §7.5).

Invariant: a View holds only what its lens may see. Hidden claims appear nowhere in it — not as
values, ids, candidates, repair notes or explanations — only as a count under
``excluded["hidden"]``. Every visible conflict is either in ``selected`` (with how it was
chosen) or in ``unresolved`` and ``surfaced_conflicts`` with all its visible candidates.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from registry.value import Value
from statefuse.op import ClaimAdded

Key = tuple[str, str, str]


class How(Enum):
    """How a key's value was chosen."""

    SOLE = "sole candidate"
    AGREEMENT = "agreement"
    MULTI = "multi-valued"
    DECISION = "decision"
    POLICY = "registry policy"
    RESOLVER = "resolver"


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen value of one key: ``claim`` is the representative, ``claims`` every selected
    claim (the agreeing group, or all values of a multi-valued predicate), sorted by id."""

    key: Key
    scope: str
    claim: ClaimAdded
    claims: tuple[ClaimAdded, ...]
    how: How
    reason: str


@dataclass(frozen=True, slots=True)
class SurfacedConflict:
    """A conflict this view could not resolve, with every candidate it may see."""

    key: Key
    scope: str
    locus: bytes
    conflict_id: bytes
    candidates: tuple[ClaimAdded, ...]
    groups: tuple[tuple[ClaimAdded, ...], ...]
    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class StaleNote:
    """Why a visible claim needs review. Ids of claims the lens may not see are left out."""

    dependency: bytes | None
    replacements: tuple[bytes, ...]
    via: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class View:
    """The projection of a State through a Lens. Serialise with `to_json`."""

    selected: Mapping[Key, Selection]
    unresolved: tuple[Key, ...]
    surfaced_conflicts: tuple[SurfacedConflict, ...]
    stale: Mapping[bytes, tuple[StaleNote, ...]]
    excluded: Mapping[str, int]
    excluded_ids: Mapping[str, tuple[bytes, ...]]
    explanations: Mapping[Key, str]

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys; ids in hex; bytes values as ``{"$bytes": hex}``)."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "selected": [_selection(s) for _, s in sorted(self.selected.items())],
            "unresolved": ["/".join(k) for k in self.unresolved],
            "surfaced_conflicts": [_conflict(c) for c in self.surfaced_conflicts],
            "stale": {
                cid.hex(): [
                    {
                        "dependency": n.dependency.hex() if n.dependency else None,
                        "replacements": [r.hex() for r in n.replacements],
                        "via": [v.hex() for v in n.via],
                    }
                    for n in notes
                ]
                for cid, notes in sorted(self.stale.items())
            },
            "excluded": dict(sorted(self.excluded.items())),
            "excluded_ids": {k: [i.hex() for i in v] for k, v in sorted(self.excluded_ids.items())},
            "explanations": {"/".join(k): v for k, v in sorted(self.explanations.items())},
        }


def json_value(v: Value) -> Any:
    """A JSON-ready deep copy of a value; bytes become ``{"$bytes": "<hex>"}`` (shared by the
    View's JSON and the judge payload, so both spell values the same way)."""
    if isinstance(v, bytes):
        return {"$bytes": v.hex()}
    if isinstance(v, list):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {k: json_value(x) for k, x in v.items()}
    return v


def _claim(c: ClaimAdded) -> dict[str, Any]:
    return {
        "claim_id": c.claim_id.hex(),
        "value": json_value(c.value),
        "scope": c.scope,
        "confidence": c.confidence,
        "authority": c.authority,
        "provenance": c.provenance,
        "author": c.author.hex() if isinstance(c.author, bytes) else c.author,
        "lamport": c.lamport,
        "layer": c.layer.value,
        "kind": c.kind,
        "constraint": c.constraint,
    }


def _selection(s: Selection) -> dict[str, Any]:
    return {
        "key": list(s.key),
        "scope": s.scope,
        "claim": _claim(s.claim),
        "claims": [c.claim_id.hex() for c in s.claims],
        "how": s.how.value,
        "reason": s.reason,
    }


def _conflict(c: SurfacedConflict) -> dict[str, Any]:
    return {
        "key": list(c.key),
        "scope": c.scope,
        "locus": c.locus.hex(),
        "conflict_id": c.conflict_id.hex(),
        "candidates": [_claim(x) for x in c.candidates],
        "groups": [[x.claim_id.hex() for x in g] for g in c.groups],
        "reason": c.reason,
        "error": c.error,
    }
