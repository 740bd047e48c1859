"""A conflict's lifecycle: opened, decided, deferred, reopened and why, closed (SEMANTICS §6).

The State says where a conflict stands now; a user auditing it asks how it got there. The
lifecycle is derived from the op-set alone: the ops of one locus (the claims at its key and
scope, the retractions that reach them, the decisions made for it) are replayed in
``(lamport, op_id)`` order, and each op that changes the conflict's standing adds an event. So
the history is the same on every replica holding the same ops, whatever order they arrived
in; it follows the ops' logical clocks, never wall time or arrival (an op written offline
with a low lamport and received late takes its lamport's place). Replaying a prefix of the
ops materializes that prefix, so a history costs O(n²) in the locus' ops, which stay few.

Events, each stamped with the op that caused it:

- ``opened``: the locus holds two or more value groups (first time, or again after a close);
- ``decided`` (with the outcome, author, lamport and reason) or ``deferred``: a decision for the
  locus (its staleness at that point, if it was already stale when it took its place, in
  ``stale``);
- ``reopened``: the decision that ruled the conflict stopped applying (``reason``: ``new
  value``, ``chosen value lost``, ``kept value lost`` or, for a first-release decision,
  ``candidates changed``);
- ``closed``: retractions left fewer than two value groups (``reason``: ``candidates
  retracted``);
- ``redacted``: a claim of the locus was redacted (SEMANTICS §10), stamped with the redaction
  op (who, lamport, ``reason``: why; ``claim_id``: which claim; never its value). A redacted
  claim has no body, so it is not replayed: the events are those of the ops that remain, and
  a redaction is known to be at the locus only on a replica that held the body when it cut it
  (its audit records, `statefuse.core.redactedclaim`, passed as ``redacted``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from statefuse.core.index import LocusKey
from statefuse.core.materializer import Materializer
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, Outcome
from statefuse.core.redactedclaim import RedactedClaim
from statefuse.core.state import ConflictSet, StaleReason, State, locus_of


class LifecycleEvent(Enum):
    """What happened to a conflict."""

    OPENED = "opened"
    DECIDED = "decided"
    DEFERRED = "deferred"
    REOPENED = "reopened"
    CLOSED = "closed"
    REDACTED = "redacted"


#: The reason of a ``closed`` event.
CLOSED_BY_RETRACTION = "candidates retracted"


@dataclass(frozen=True, slots=True)
class ConflictEvent:
    """One event of a conflict's lifecycle, caused by the op ``op_id`` (of ``author``, at
    ``lamport``). ``values`` counts the value groups held just after it. For ``decided`` and
    ``deferred``, ``decision_id``, ``outcome`` and ``reason`` are the decision's (``stale``:
    why it did not apply even when it took its place, else None); for ``reopened`` they name
    the decision that stopped applying and ``reason`` says why; for ``closed`` ``reason`` is
    `CLOSED_BY_RETRACTION`; for ``redacted`` ``op_id`` is the redaction's, ``claim_id`` the
    redacted claim's and ``reason`` the redaction's."""

    event: LifecycleEvent
    lamport: int
    op_id: bytes
    author: str | bytes
    values: int
    reason: str = ""
    decision_id: bytes | None = None
    outcome: Outcome | None = None
    stale: StaleReason | None = None
    claim_id: bytes | None = None

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (ids in hex), as the CLI and MCP print it."""
        return {
            "event": self.event.value,
            "lamport": self.lamport,
            "op_id": self.op_id.hex(),
            "author": self.author.hex() if isinstance(self.author, bytes) else self.author,
            "values": self.values,
            "reason": self.reason,
            "decision_id": None if self.decision_id is None else self.decision_id.hex(),
            "outcome": None if self.outcome is None else self.outcome.value,
            "stale": None if self.stale is None else self.stale.value,
            "claim_id": None if self.claim_id is None else self.claim_id.hex(),
        }


def locus_key(state: State, locus: bytes) -> LocusKey | None:
    """The (namespace, subject, predicate, scope) whose locus is ``locus``, if a claim of
    ``state`` (active or retracted) is there: a locus is a hash, so it is found through one."""
    conflict = state.conflict_at(locus)
    if conflict is not None:
        return (*conflict.key, conflict.scope)
    for d in state.decisions_at(locus):
        c = state.claims.get(d.selected_claim_id)
        if c is not None and locus_of(c.namespace, c.subject, c.predicate, c.scope) == locus:
            return (c.namespace, c.subject, c.predicate, c.scope)
    for c in state.all_claims():
        if locus_of(c.namespace, c.subject, c.predicate, c.scope) == locus:
            return (c.namespace, c.subject, c.predicate, c.scope)
    return None


def _locus_ops(state: State, lk: LocusKey) -> list[ClaimAdded | ClaimRetracted | DecisionAdded]:
    claims = [c for c in state.all_claims() if (*c.key, c.scope) == lk]
    ids = {c.claim_id for c in claims}
    refs = {c.claim_ref for c in claims}
    rets = [
        r
        for r in state.retractions.values()
        if r.target_claim_id in ids or r.target_claim_ref in refs
    ]
    locus = locus_of(*lk)
    ops: list[ClaimAdded | ClaimRetracted | DecisionAdded] = [
        *claims,
        *rets,
        *state.decisions_at(locus),
    ]
    ops.sort(key=lambda o: (o.lamport, o.op_id))
    return ops


def conflict_history(
    state: State, locus: bytes, *, redacted: Iterable[RedactedClaim] = ()
) -> list[ConflictEvent]:
    """The lifecycle of the conflict at ``locus`` (see the module notes), oldest first; empty
    when no claim of ``state`` is at that locus and no claim of ``redacted`` was. Pure: a
    function of the op-set (and of the redactions given)."""
    cuts = [r for r in redacted if r.at_locus(locus)]
    lk = locus_key(state, locus)
    if lk is None:
        return [_redacted_event(r, 0) for r in cuts]
    mat = Materializer(registry=state.registry)
    events: list[ConflictEvent] = []
    before: State = mat.state()
    replay: list[ClaimAdded | ClaimRetracted | DecisionAdded | RedactedClaim] = [
        *_locus_ops(state, lk),
        *cuts,
    ]
    replay.sort(key=lambda o: (o.lamport, o.redaction if isinstance(o, RedactedClaim) else o.op_id))
    for op in replay:
        if isinstance(op, RedactedClaim):
            events.append(_redacted_event(op, _values(before, lk, before.conflict_of(*lk))))
            continue
        mat.apply(op)
        after = mat.state()
        was = before.conflict_of(*lk)
        now = after.conflict_of(*lk)
        ruling = before.decision_for(was) if was is not None else None
        values = _values(after, lk, now)
        stamp = (op.lamport, op.op_id, op.author, values)
        if isinstance(op, DecisionAdded):
            kind = LifecycleEvent.DECIDED if op.outcome.settles else LifecycleEvent.DEFERRED
            events.append(
                ConflictEvent(kind, *stamp, op.reason, op.op_id, op.outcome, after.why_stale(op))
            )
        if now is not None and was is None:
            events.append(ConflictEvent(LifecycleEvent.OPENED, *stamp))
        elif now is None and was is not None:
            events.append(ConflictEvent(LifecycleEvent.CLOSED, *stamp, CLOSED_BY_RETRACTION))
        elif now is not None and ruling is not None:
            why = after.why_stale(ruling)
            if why is not None:
                events.append(
                    ConflictEvent(
                        LifecycleEvent.REOPENED,
                        *stamp,
                        why.value,
                        ruling.op_id,
                        ruling.outcome,
                    )
                )
        before = after
    return events


def _values(state: State, lk: LocusKey, conflict: ConflictSet | None) -> int:
    if conflict is not None:
        return len(conflict.groups)
    return 1 if state.active_at(lk[0], lk[1], lk[2], lk[3]) else 0


def _redacted_event(r: RedactedClaim, values: int) -> ConflictEvent:
    return ConflictEvent(
        LifecycleEvent.REDACTED, r.lamport, r.redaction, r.by, values, r.reason, claim_id=r.op_id
    )
