"""A key's timeline: its values by the interval they hold in (SEMANTICS §9).

Valid time says when a value holds in the world; a timeline lists a key's claims by that
interval, so "12 until March, 15 from March" reads as a sequence rather than as two values.
Pure: read from the State (the same on every replica holding the same changes); what the CLI's
``timeline`` and `Replica.timeline` show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from statefuse.core.op import ClaimAdded
from statefuse.core.state import State
from statefuse.core.validity import Scalar, contexts_agree, holds_at, span
from statefuse.reading.view import Key


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One claim of a key on its timeline: when it holds (``valid_from`` / ``valid_until``,
    None: unbounded), whether it is retracted (a retraction says it was wrong; an interval
    that ended is not a retraction) and whether it is a candidate of the key's conflict."""

    claim: ClaimAdded
    valid_from: int | None
    valid_until: int | None
    retracted: bool
    in_conflict: bool


def timeline(
    state: State,
    key: Key,
    *,
    scope: str | None = None,
    context: Mapping[str, Scalar] | None = None,
    valid_at: int | None = None,
    retracted: bool = False,
) -> list[TimelineEntry]:
    """The claims of ``key`` (of one ``scope``, or all) ordered by interval: by start, an
    open start first; then by end, an open end last; then by claim id. Retracted claims are
    left out unless ``retracted`` (then listed, marked). ``context`` keeps the claims whose
    context agrees with it; ``valid_at`` (ms) keeps those holding at that instant."""
    claims = [
        c
        for c in state.all_claims()
        if (c.namespace, c.subject, c.predicate) == key and scope in (None, c.scope)
    ]
    conflicted: set[bytes] = set()
    for sc in sorted({c.scope for c in claims}):
        conflict = state.conflict_of(*key, sc)
        if conflict is not None:
            conflicted.update(conflict.candidates)
    out = []
    for c in claims:
        active = state.is_active(c.claim_id)
        if not active and not retracted:
            continue
        if context and not contexts_agree(c.context, context):
            continue
        if valid_at is not None and not holds_at(c, valid_at):
            continue
        out.append(
            TimelineEntry(c, c.valid_from, c.valid_until, not active, c.claim_id in conflicted)
        )
    out.sort(key=lambda e: (*span(e.claim), e.claim.claim_id))
    return out
