"""The change log: a replica's verified changes, its pending area and its quarantine.

Invariant: which changes are *accepted* is a function of the set of bytes received, not of their
order: a verified change is accepted iff its whole ``prev`` chain back to ``seq`` 1 is present and
consistent (each link one seq lower, same author). A change whose predecessor is missing waits in
the pending area and is admitted the moment the predecessor is; a link that contradicts its
predecessor is quarantined as a broken chain. Two different accepted changes with the same author
and seq are an *equivocation*: both are kept as proof, and the author's ops from that seq on are
left out of the op-set that is materialized.

Trust (`sync.trust`) is applied the same way, as a pure function of the accepted set: changes by
authors a closed space has not admitted, or after a revocation's cutoff, stay in the log (so a
later admission or an audit can see them) but do not count; `ChangeLog.verdicts` says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from registry import DEFAULT_REGISTRY, Registry
from registry.error import InputError
from statefuse.materializer import materialize
from statefuse.opset import OpSet
from statefuse.state import State
from sync.change import UnverifiedChange, VerifiedChange
from sync.quarantine import Quarantine
from sync.trust import TRUST_OP_TYPES, TrustMode, TrustState, trust_state
from sync.verify import QuarantineReason, VerificationError, verify_change


class TrustConfigError(InputError, ValueError):
    """A change log configured against the trust rules (e.g. closed mode without a root)."""


class Ignored(Enum):
    """Why an accepted (verified, kept) change does not count in the materialized memory."""

    EQUIVOCATION = "equivocation"
    UNKNOWN_AUTHOR = "unknown-author"
    REVOKED = "revoked"


class Status(Enum):
    """What happened to one received change."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    PENDING = "pending"
    QUARANTINED = "quarantined"


@dataclass(frozen=True, slots=True)
class Receipt:
    """The verdict on one received change, plus every change it let in (itself and any pending
    successors), in admission order."""

    status: Status
    change_id: bytes | None
    admitted: tuple[VerifiedChange, ...] = ()
    reason: QuarantineReason | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Equivocation:
    """Proof that an author signed two different changes with one seq."""

    author: bytes
    seq: int
    change_ids: tuple[bytes, ...]


class ChangeLog:
    """Verified changes of one space, with pending and quarantine areas."""

    __slots__ = ("_accepted", "_by_seq", "_pending", "mode", "quarantine", "root", "space")

    def __init__(
        self, space: str, *, root: bytes | None = None, mode: TrustMode = TrustMode.OPEN
    ) -> None:
        if mode is TrustMode.CLOSED and root is None:
            raise TrustConfigError("root", "closed-needs-root", "closed mode needs a root key")
        self.space = space
        self.root = root
        self.mode = mode
        self._accepted: dict[bytes, VerifiedChange] = {}
        self._by_seq: dict[tuple[bytes, int], list[bytes]] = {}
        self._pending: dict[bytes, dict[bytes, VerifiedChange]] = {}
        self.quarantine = Quarantine()

    # --- receiving -------------------------------------------------------------------------------

    def receive(
        self, change: UnverifiedChange | bytes | bytearray | memoryview, *, seen_ms: int
    ) -> Receipt:
        """Verify one change and accept, park or quarantine it.

        Never raises for bad bytes; raises ChangeInputError for input that is not bytes-like.
        """
        if not isinstance(change, UnverifiedChange):
            change = UnverifiedChange(change)  # type: ignore[arg-type]  # copied to bytes
        try:
            verified = verify_change(change, space=self.space)
        except VerificationError as exc:
            self.quarantine.add(change.data, exc.reason, exc.message, seen_ms=seen_ms)
            return Receipt(Status.QUARANTINED, None, reason=exc.reason, message=exc.message)
        return self.receive_verified(verified, seen_ms=seen_ms)

    def receive_verified(self, change: VerifiedChange, *, seen_ms: int) -> Receipt:
        """Accept or park a change that `verify_change` already accepted."""
        cid = change.change_id
        if cid in self._accepted or any(cid in p for p in self._pending.values()):
            return Receipt(Status.DUPLICATE, cid)
        if change.prev is not None:
            pred = self._accepted.get(change.prev)
            if pred is None:
                self._pending.setdefault(change.prev, {})[cid] = change
                return Receipt(Status.PENDING, cid)
            problem = _link_problem(pred, change)
            if problem:
                self.quarantine.add(
                    change.data, QuarantineReason.BROKEN_CHAIN, problem, seen_ms=seen_ms
                )
                return Receipt(
                    Status.QUARANTINED, cid, reason=QuarantineReason.BROKEN_CHAIN, message=problem
                )
        return Receipt(Status.ACCEPTED, cid, admitted=tuple(self._admit(change, seen_ms)))

    def receive_all(
        self, changes: Iterable[UnverifiedChange | bytes], *, seen_ms: int
    ) -> list[Receipt]:
        return [self.receive(c, seen_ms=seen_ms) for c in changes]

    def _admit(self, change: VerifiedChange, seen_ms: int) -> list[VerifiedChange]:
        admitted = []
        work = [change]
        while work:
            c = work.pop()
            self._accepted[c.change_id] = c
            self._by_seq.setdefault((c.author, c.seq), []).append(c.change_id)
            admitted.append(c)
            waiting = self._pending.pop(c.change_id, {})
            for cid in sorted(waiting):
                succ = waiting[cid]
                problem = _link_problem(c, succ)
                if problem:
                    self.quarantine.add(
                        succ.data, QuarantineReason.BROKEN_CHAIN, problem, seen_ms=seen_ms
                    )
                else:
                    work.append(succ)
        return admitted

    # --- reading ---------------------------------------------------------------------------------

    def __contains__(self, change_id: object) -> bool:
        return change_id in self._accepted

    def __len__(self) -> int:
        return len(self._accepted)

    def get(self, change_id: bytes) -> VerifiedChange | None:
        return self._accepted.get(change_id)

    def change_ids(self) -> list[bytes]:
        """Ids of every accepted change, sorted (what reconciliation compares)."""
        return sorted(self._accepted)

    def changes(self) -> list[VerifiedChange]:
        return [self._accepted[c] for c in sorted(self._accepted)]

    def pending(self) -> list[VerifiedChange]:
        """Changes waiting for a predecessor, sorted by change id."""
        waiting = [c for p in self._pending.values() for c in p.values()]
        return sorted(waiting, key=lambda c: c.change_id)

    def equivocations(self) -> list[Equivocation]:
        """Every (author, seq) with more than one accepted change, sorted."""
        return [
            Equivocation(author, seq, tuple(sorted(ids)))
            for (author, seq), ids in sorted(self._by_seq.items())
            if len(ids) > 1
        ]

    def _equivocation_cutoffs(self) -> dict[bytes, int]:
        cutoff: dict[bytes, int] = {}
        for e in self.equivocations():
            cutoff[e.author] = min(cutoff.get(e.author, e.seq), e.seq)
        return cutoff

    def trust(self) -> TrustState:
        """The trust decisions of the root's trust ops in its counted changes."""
        root = self.root if self.root is not None else b""
        equivocated = self._equivocation_cutoffs()
        limit = equivocated.get(root)
        trust_ops = [
            op
            for c in self._accepted.values()
            if c.author == root and (limit is None or c.seq < limit)
            for op in c.ops
            if isinstance(op, TRUST_OP_TYPES)
        ]
        return trust_state(root, self.mode, trust_ops)

    def verdicts(self) -> dict[bytes, Ignored]:
        """change_id -> why an accepted change does not count (changes that count are absent).

        A pure function of the accepted set, so replicas with the same changes agree."""
        trust = self.trust()
        equivocated = self._equivocation_cutoffs()
        out: dict[bytes, Ignored] = {}
        for cid in sorted(self._accepted):
            c = self._accepted[cid]
            limit = equivocated.get(c.author)
            if limit is not None and c.seq >= limit:
                out[cid] = Ignored.EQUIVOCATION
            elif not trust.may_write(c.author):
                out[cid] = Ignored.UNKNOWN_AUTHOR
            elif not trust.counts(c.author, c.seq, cid):
                out[cid] = Ignored.REVOKED
        return out

    def ops(self) -> OpSet:
        """The memory ops that count: accepted changes minus those in `verdicts` (equivocation,
        unknown author in closed mode, revoked). Trust ops are not memory ops: see `trust`."""
        ignored = self.verdicts()
        out = OpSet()
        for cid, c in self._accepted.items():
            if cid not in ignored:
                out.update(op for op in c.ops if not isinstance(op, TRUST_OP_TYPES))
        return out

    def materialize(self, *, registry: Registry = DEFAULT_REGISTRY) -> State:
        return materialize(self.ops(), registry=registry)


def _link_problem(pred: VerifiedChange, succ: VerifiedChange) -> str:
    if pred.author != succ.author:
        return "prev names another author's change"
    if pred.seq != succ.seq - 1:
        return f"seq {succ.seq} names a prev with seq {pred.seq}"
    return ""
