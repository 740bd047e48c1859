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

The pending area and the quarantine hold what peers send, so they can be bounded (`Bounds`). A
change that would take either past its bound is refused with `AreaFullError` and the log is left
as it was: nothing is dropped in silence, the caller still has the bytes and decides (retry once
the area drains, or stop listening to that peer). Verdicts stay a function of the bytes: a bound
only ever refuses to take something in.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from registry import DEFAULT_REGISTRY, Registry
from registry.error import InputError, StateFuseError
from statefuse.materializer import materialize
from statefuse.opset import OpSet
from statefuse.state import State
from sync.change import ChangeInputError, UnverifiedChange, VerifiedChange
from sync.quarantine import Quarantine
from sync.trust import TRUST_OP_TYPES, TrustMode, TrustState, trust_state
from sync.verify import QuarantineReason, VerificationError, verify_change, verify_changes


class TrustConfigError(InputError, ValueError):
    """A change log configured against the trust rules (e.g. closed mode without a root)."""


class BoundsConfigError(InputError, ValueError):
    """A bound that is not a positive int (or None for no bound)."""


class Area(Enum):
    """The parts of a change log that hold what is not (yet) accepted."""

    PENDING = "pending"
    QUARANTINE = "quarantine"


class AreaFullError(StateFuseError):
    """Taking in a change would pass a bound of its area; the log did not change.

    ``area`` is the Area, ``bound`` the name of the `Bounds` field that would be passed and
    ``limit`` its value."""

    def __init__(self, area: Area, bound: str, limit: int) -> None:
        self.area = area
        self.bound = bound
        self.limit = limit
        super().__init__(f"the {area.value} area is full ({bound} = {limit})")

    def __reduce__(self) -> tuple[type[AreaFullError], tuple[Area, str, int]]:
        return (type(self), (self.area, self.bound, self.limit))


@dataclass(frozen=True, slots=True)
class Bounds:
    """Most a change log keeps in its pending area and quarantine (None: no bound).

    Sizes are those of the changes' bytes. A change leaving the pending area for quarantine
    (its predecessor arrived, and the link is broken) is always kept: it was already counted
    against the pending bounds, so the quarantine can pass its own by at most that much.
    Raises BoundsConfigError (naming the field) for a bound that is not a positive int.
    """

    pending_changes: int | None = None
    pending_bytes: int | None = None
    quarantine_entries: int | None = None
    quarantine_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("pending_changes", "pending_bytes", "quarantine_entries", "quarantine_bytes"):
            v = getattr(self, name)
            if v is not None and (type(v) is not int or v < 1):
                raise BoundsConfigError(
                    name, "positive-int", f"must be an int >= 1 or None, got {v!r}"
                )


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

    __slots__ = (
        "_accepted",
        "_by_seq",
        "_pending",
        "_pending_bytes",
        "_pending_ids",
        "bounds",
        "mode",
        "quarantine",
        "root",
        "space",
    )

    def __init__(
        self,
        space: str,
        *,
        root: bytes | None = None,
        mode: TrustMode = TrustMode.OPEN,
        bounds: Bounds = Bounds(),
    ) -> None:
        if mode is TrustMode.CLOSED and root is None:
            raise TrustConfigError("root", "closed-needs-root", "closed mode needs a root key")
        if not isinstance(bounds, Bounds):
            raise BoundsConfigError("bounds", "bounds-type", f"expected Bounds, got {bounds!r}")
        self.space = space
        self.root = root
        self.mode = mode
        self.bounds = bounds
        self._accepted: dict[bytes, VerifiedChange] = {}
        self._by_seq: dict[tuple[bytes, int], list[bytes]] = {}
        # prev -> {change id -> change}: what each missing predecessor will let in.
        self._pending: dict[bytes, dict[bytes, VerifiedChange]] = {}
        self._pending_ids: set[bytes] = set()
        self._pending_bytes = 0
        self.quarantine = Quarantine()

    # --- receiving -------------------------------------------------------------------------------

    def receive(
        self, change: UnverifiedChange | bytes | bytearray | memoryview, *, seen_ms: int
    ) -> Receipt:
        """Verify one change and accept, park or quarantine it.

        Never raises for bad bytes; raises ChangeInputError for input that is not bytes-like,
        and AreaFullError (leaving the log unchanged) if the change would have to be parked or
        quarantined past a bound.
        """
        if not isinstance(change, UnverifiedChange):
            change = UnverifiedChange(change)  # type: ignore[arg-type]  # copied to bytes
        try:
            verified = verify_change(change, space=self.space)
        except VerificationError as exc:
            return self._refuse(change.data, exc, seen_ms)
        return self.receive_verified(verified, seen_ms=seen_ms)

    def receive_verified(self, change: VerifiedChange, *, seen_ms: int) -> Receipt:
        """Accept or park a change that `verify_change` already accepted.

        Raises AreaFullError (leaving the log unchanged) as `receive` does."""
        cid = change.change_id
        if cid in self._accepted or cid in self._pending_ids:
            return Receipt(Status.DUPLICATE, cid)
        if change.prev is not None:
            pred = self._accepted.get(change.prev)
            if pred is None:
                self._check_room(Area.PENDING, change.data)
                self._pending.setdefault(change.prev, {})[cid] = change
                self._pending_ids.add(cid)
                self._pending_bytes += len(change.data)
                return Receipt(Status.PENDING, cid)
            problem = _link_problem(pred, change)
            if problem:
                self._check_room(Area.QUARANTINE, change.data)
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
        """`receive` on each change in order, with the same receipts and the same errors (the
        changes before an error are taken in, the rest are not looked at).

        Faster than a loop for many small changes: they are verified together
        (`sync.verify.verify_changes`), which decodes their ops in shared batches.
        """
        receipts: list[Receipt] = []
        batch: list[UnverifiedChange] = []
        for change in changes:
            try:
                if not isinstance(change, UnverifiedChange):
                    change = UnverifiedChange(change)  # copied to bytes
            except ChangeInputError:
                self._take(batch, receipts, seen_ms)  # the changes before it still count
                raise
            batch.append(change)
            if len(batch) == _RECEIVE_BATCH:
                self._take(batch, receipts, seen_ms)
                batch = []
        self._take(batch, receipts, seen_ms)
        return receipts

    def _take(self, batch: list[UnverifiedChange], receipts: list[Receipt], seen_ms: int) -> None:
        for change, verified in zip(batch, verify_changes(batch, space=self.space), strict=True):
            if isinstance(verified, VerificationError):
                receipts.append(self._refuse(change.data, verified, seen_ms))
            else:
                receipts.append(self.receive_verified(verified, seen_ms=seen_ms))

    def _refuse(self, data: bytes, exc: VerificationError, seen_ms: int) -> Receipt:
        self._check_room(Area.QUARANTINE, data)
        self.quarantine.add(data, exc.reason, exc.message, seen_ms=seen_ms)
        return Receipt(Status.QUARANTINED, None, reason=exc.reason, message=exc.message)

    def _check_room(self, area: Area, data: bytes) -> None:
        """Raise AreaFullError if keeping ``data`` in ``area`` would pass one of its bounds."""
        b = self.bounds
        if area is Area.PENDING:
            checks = (
                ("pending_changes", b.pending_changes, len(self._pending_ids) + 1),
                ("pending_bytes", b.pending_bytes, self._pending_bytes + len(data)),
            )
        else:
            if data in self.quarantine:
                return  # seen before: only its count grows
            checks = (
                ("quarantine_entries", b.quarantine_entries, len(self.quarantine) + 1),
                ("quarantine_bytes", b.quarantine_bytes, self.quarantine.nbytes + len(data)),
            )
        for name, limit, after in checks:
            if limit is not None and after > limit:
                raise AreaFullError(area, name, limit)

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
                self._pending_ids.discard(cid)
                self._pending_bytes -= len(succ.data)
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

    def accepted_since(self, count: int) -> list[bytes]:
        """Ids of the changes accepted after the first ``count``, in the order they were
        accepted (the log only ever adds): what changed since a reader last saw ``count``."""
        return list(itertools.islice(self._accepted, count, None))

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


#: How many changes `ChangeLog.receive_all` verifies together.
_RECEIVE_BATCH = 256


def _link_problem(pred: VerifiedChange, succ: VerifiedChange) -> str:
    if pred.author != succ.author:
        return "prev names another author's change"
    if pred.seq != succ.seq - 1:
        return f"seq {succ.seq} names a prev with seq {pred.seq}"
    return ""
