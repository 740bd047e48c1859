"""A key's history: every assertion, retraction and decision of its claims, in lamport order.

The materialized state answers "what holds now"; a user arbitrating a conflict or auditing a
correction asks "how did it get here, and who said so". The history is read from the op-set the
State holds (retracted claims included), so it is the same on every replica holding the same
changes. Pure: what the CLI's and the MCP server's ``history`` and `Replica.history` show.

A redacted claim (SEMANTICS §10) has no body left, so no key: the replica's audit records
(`statefuse.core.redactedclaim`, passed as ``redacted``) say which redacted claims were at the key.
Each adds its assertion (``claim``, with no claim: who wrote it and when, never what) and a
``redact`` event (by whom, at the redaction's lamport, why).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from statefuse.core.op import ClaimAdded
from statefuse.core.redactedclaim import RedactedClaim
from statefuse.core.state import State, locus_of
from statefuse.reading.view import Key

#: Hex digits of the id a retraction's ``why`` names its replacement by (as the CLI shows ids).
SHORT_ID_CHARS = 12


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One event of a key's history: an assertion (``claim``), a retraction (``retract`` exact,
    ``retract-ref`` semantic) or a decision (``decide``) of one of the key's claims. ``why`` is
    the claim's provenance, the retraction's reason (and what superseded it) or the decision's
    reason (and, when it no longer applies, why).

    For a redacted claim ``claim`` is None and ``redacted`` says which (`RedactedClaim`): its
    assertion (event ``claim``, ``why`` empty: the provenance went with the body) and the
    redaction (event ``redact``, ``why`` its reason) are listed, never its value; ``scope``
    is its scope when this replica can tell (else None)."""

    lamport: int
    op_id: bytes
    event: str
    author: bytes | str
    claim: ClaimAdded | None
    why: str
    superseded_by: bytes | None = None
    redacted: RedactedClaim | None = None
    redacted_scope: str | None = None

    @property
    def claim_id(self) -> bytes:
        """The id of the claim the event is about (redacted or not)."""
        if self.claim is not None:
            return self.claim.claim_id
        assert self.redacted is not None  # an event is about a claim or a redacted one
        return self.redacted.op_id

    @property
    def scope(self) -> str | None:
        """The claim's scope (None: a redacted claim's, not known here)."""
        return self.claim.scope if self.claim is not None else self.redacted_scope


def key_history(
    state: State,
    key: Key,
    scope: str | None = None,
    *,
    redacted: Iterable[RedactedClaim] = (),
) -> list[HistoryEvent]:
    """Every assertion, retraction and decision of ``key``'s claims (of one ``scope``, or all),
    in lamport order (ties by op id, then claim id); with ``redacted`` (a replica's
    `redacted_claims`), the redacted claims known to have been at ``key`` too (see the module
    notes)."""
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
    events += _redacted_events(state, key, scope, claims, redacted)
    events.sort(key=lambda e: (e.lamport, e.op_id, e.claim_id))
    return events


def _redacted_events(
    state: State,
    key: Key,
    scope: str | None,
    claims: list[ClaimAdded],
    redacted: Iterable[RedactedClaim],
) -> list[HistoryEvent]:
    """The assertion, the retractions and the redaction of each redacted claim of ``key``."""
    here = [r for r in redacted if r.at_key(key, None if scope is None else locus_of(*key, scope))]
    if not here:
        return []
    # the scope is kept as part of the locus digest only: shown when it is one of these
    scopes = sorted({c.scope for c in claims} | {"global"} | ({scope} if scope else set()))
    loci = {locus_of(*key, s): s for s in scopes}
    out: list[HistoryEvent] = []
    for r in here:
        p = r.placed
        assert p is not None  # at_key holds only for a placed one
        where = loci.get(p.locus)
        out.append(HistoryEvent(p.lamport, r.op_id, "claim", p.author, None, "", None, r, where))
        for x in state.retractions.values():
            if x.target_claim_id == r.op_id:
                out.append(
                    HistoryEvent(
                        x.lamport, x.op_id, "retract", x.author, None, x.reason, None, r, where
                    )
                )
        out.append(
            HistoryEvent(r.lamport, r.redaction, "redact", r.by, None, r.reason, None, r, where)
        )
    return out
