"""A key's history: every assertion, retraction and decision of its claims, in lamport order.

The materialized state answers "what holds now"; a user arbitrating a conflict or auditing a
correction asks "how did it get here, and who said so". The history is read from the op-set the
State holds (retracted claims included), so it is the same on every replica holding the same
changes. Pure: what the CLI's and the MCP server's ``history`` and `Replica.history` show.
"""

from __future__ import annotations

from dataclasses import dataclass

from statefuse.core.op import ClaimAdded
from statefuse.core.state import State, locus_of
from statefuse.reading.view import Key

#: Hex digits of the id a retraction's ``why`` names its replacement by (as the CLI shows ids).
SHORT_ID_CHARS = 12


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a key's history: an assertion (``claim``), a retraction (``retract`` exact,
    ``retract-ref`` semantic) or a decision (``decide``) of one of the key's claims. ``why`` is
    the claim's provenance, the retraction's reason (and what superseded it) or the decision's
    reason (and, when it no longer applies, why)."""

    lamport: int
    op_id: bytes
    event: str
    author: bytes | str
    claim: ClaimAdded
    why: str
    superseded_by: bytes | None = None


def key_history(state: State, key: Key, scope: str | None = None) -> list[HistoryEvent]:
    """Every assertion, retraction and decision of ``key``'s claims (of one ``scope``, or all),
    in lamport order (ties by op id, then claim id)."""
    claims = [
        c
        for c in state.all_claims()
        if (c.namespace, c.subject, c.predicate) == key and scope in (None, c.scope)
    ]
    events = [HistoryEvent(c.lamport, c.op_id, "claim", c.author, c, c.provenance) for c in claims]
    by_id = {c.claim_id: c for c in claims}
    by_ref: dict[bytes, list[ClaimAdded]] = {}
    for c in claims:
        by_ref.setdefault(c.claim_ref, []).append(c)
    for r in state.retractions.values():
        targets = []
        if r.target_claim_id in by_id:
            targets.append(("retract", by_id[r.target_claim_id]))
        if r.target_claim_ref is not None:
            targets += [("retract-ref", c) for c in by_ref.get(r.target_claim_ref, ())]
        why = r.reason
        if r.superseded_by is not None:
            why += ("; " if why else "") + f"superseded by {r.superseded_by.hex()[:SHORT_ID_CHARS]}"
        events += [
            HistoryEvent(r.lamport, r.op_id, kind, r.author, c, why, r.superseded_by)
            for kind, c in targets
        ]
    loci = {locus_of(*key, c.scope) for c in claims}
    for d in state.decisions:
        if d.locus in loci and d.selected_claim_id in by_id:
            stale = state.why_stale(d)
            why = d.reason if stale is None else f"{d.reason} (no longer applies: {stale.value})"
            if d.outcome.value != "select":  # preserve, defer: the claim is one it names
                why = f"{d.outcome.value}: {why}" if why else d.outcome.value
            chosen = by_id[d.selected_claim_id]
            events.append(HistoryEvent(d.lamport, d.op_id, "decide", d.author, chosen, why))
    events.sort(key=lambda e: (e.lamport, e.op_id, e.claim.claim_id))
    return events
