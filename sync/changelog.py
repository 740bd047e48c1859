"""The change log: a replica's verified changes, its pending area and its quarantine.

Invariant: which changes are *accepted* is a function of the set of bytes received, not of their
order: a verified change is accepted iff its whole ``prev`` chain back to ``seq`` 1 is present and
consistent (each link one seq lower, same author). A change whose predecessor is missing waits in
the pending area and is admitted the moment the predecessor is; a link that contradicts its
predecessor is quarantined as a broken chain. Two different accepted changes with the same author
and seq are a *fork* (SEMANTICS §8): a restored backup, a key used by two stores, a damaged store
or malice. Both are kept and both count (their ops are the author's signed statements and merge is
union, so counting both cannot break convergence); `ChangeLog.forks` lists them as proof, so an
operator can revoke or re-key. Ignoring an author because of a fork would turn everyday accidents
into silent memory loss.

Trust (`sync.trust`) is applied the same way, as a pure function of the accepted set: changes by
authors a closed space has not admitted, or outside a revocation's kept changes, stay in the log (so
a later admission or an audit can see them) but do not count; `ChangeLog.verdicts` says why.

Receiving is atomic per call when wrapped in `ChangeLog.atomic`: everything taken in inside the
block is undone if it raises, so a caller that fails to store what it received leaves the log
exactly as it was.

The pending area and the quarantine hold what peers send, so they can be bounded (`Bounds`). A
change that would take either past its bound is refused with `AreaFullError` and the log is left
as it was: nothing is dropped in silence, the caller still has the bytes and decides (retry once
the area drains, or stop listening to that peer). Verdicts stay a function of the bytes: a bound
only ever refuses to take something in.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from statefuse.materializer import materialize
from statefuse.opset import OpSet
from statefuse.registry import DEFAULT_REGISTRY, Registry
from statefuse.registry.error import InputError, StateFuseError
from statefuse.state import State
from statefuse.sync.author import author_names, names_among
from statefuse.sync.change import ChangeInputError, UnverifiedChange, VerifiedChange
from statefuse.sync.clock import ClockJump, clock_jumps
from statefuse.sync.declaration import SPACE_OP_TYPES, RegistryDeclared
from statefuse.sync.quarantine import Quarantine, QuarantineEntry
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode, TrustState, trust_state
from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change, verify_changes


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
    """Why an accepted (verified, kept) change does not count in the materialized memory.
    (A fork is never a reason: both branches count, see the module docstring.)"""

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
class Fork:
    """Proof that an author signed two (or more) different changes with one seq. Every branch
    is kept and counts; the fork is reported so that an operator can act."""

    author: bytes
    seq: int
    change_ids: tuple[bytes, ...]

    def describe(self) -> str:
        """The one line users see: ``fork in author 1a2b3c4d5e6f… at seq 3: both branches
        kept``."""
        n = len(self.change_ids)
        kept = "both branches" if n == 2 else f"all {n} branches"
        return f"fork in author {self.author.hex()[:12]}… at seq {self.seq}: {kept} kept"


#: The name of the first release, when a fork was called an equivocation and ignored.
Equivocation = Fork


class ChangeLog:
    """Verified changes of one space, with pending and quarantine areas."""

    __slots__ = (
        "_accepted",
        "_by_seq",
        "_journal",
        "_pending",
        "_pending_bytes",
        "_pending_ids",
        "_top",
        "_touched",
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
        #: author -> highest seq ever parked or accepted (see `highest_seq`).
        self._top: dict[bytes, int] = {}
        #: Quarantine entries added or seen again since `take_quarantined` last ran.
        self._touched: list[QuarantineEntry] = []
        #: Undo steps of the `atomic` block running, newest last (None: no block).
        self._journal: list[Callable[[], None]] | None = None

    # --- atomicity -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[ChangeLog]:
        """Everything the block takes in is undone if it raises (accepted, parked and refused
        changes alike), so the log is exactly as before. Blocks nest into the outermost one."""
        if self._journal is not None:
            yield self
            return
        journal: list[Callable[[], None]] = []
        touched = len(self._touched)
        self._journal = journal
        try:
            yield self
        except BaseException:
            for undo in reversed(journal):
                undo()
            del self._touched[touched:]
            raise
        finally:
            self._journal = None

    def _undo(self, step: Callable[[], None]) -> None:
        if self._journal is not None:
            self._journal.append(step)

    def take_quarantined(self) -> list[QuarantineEntry]:
        """The quarantine entries added (or seen again) since the last call, in order: what a
        replica must store. O(new entries), however large the quarantine."""
        out, self._touched = self._touched, []
        return out

    def _quarantine(
        self, data: bytes, reason: QuarantineReason, message: str, seen_ms: int
    ) -> QuarantineEntry:
        q = self.quarantine
        before = q.get_bytes(data)
        entry = q.add(data, reason, message, seen_ms=seen_ms)
        self._touched.append(entry)
        self._undo(lambda: q.put_back(entry.key, before))
        return entry

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
                self._park(change)
                return Receipt(Status.PENDING, cid)
            problem = _link_problem(pred, change)
            if problem:
                self._check_room(Area.QUARANTINE, change.data)
                self._quarantine(change.data, QuarantineReason.BROKEN_CHAIN, problem, seen_ms)
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

    def _park(self, change: VerifiedChange) -> None:
        assert change.prev is not None
        waiting = self._pending.setdefault(change.prev, {})
        waiting[change.change_id] = change
        self._raise_top(change)
        self._pending_ids.add(change.change_id)
        self._pending_bytes += len(change.data)
        self._undo(lambda: self._unpark(change))

    def _unpark(self, change: VerifiedChange) -> None:
        assert change.prev is not None
        waiting = self._pending[change.prev]
        del waiting[change.change_id]
        if not waiting:
            del self._pending[change.prev]
        self._pending_ids.discard(change.change_id)
        self._pending_bytes -= len(change.data)

    def _refuse(self, data: bytes, exc: VerificationError, seen_ms: int) -> Receipt:
        self._check_room(Area.QUARANTINE, data)
        self._quarantine(data, exc.reason, exc.message, seen_ms)
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
            self._raise_top(c)
            self._undo(lambda c=c: self._unaccept(c))  # type: ignore[misc]
            admitted.append(c)
            waiting = dict(self._pending.get(c.change_id, {}))
            for cid in sorted(waiting):
                succ = waiting[cid]
                self._unpark(succ)
                self._undo(lambda succ=succ: self._park(succ))  # type: ignore[misc]
                problem = _link_problem(c, succ)
                if problem:
                    self._quarantine(succ.data, QuarantineReason.BROKEN_CHAIN, problem, seen_ms)
                else:
                    work.append(succ)
        return admitted

    def _raise_top(self, c: VerifiedChange) -> None:
        if c.seq > self._top.get(c.author, 0):
            self._top[c.author] = c.seq

    def highest_seq(self, author: bytes) -> int:
        """The highest seq of ``author`` this log has held, accepted or pending (0: none). Only
        grows, even when an `atomic` block is undone: it answers "has this seq been seen
        before", which a replica asks to tell its own changes coming back from changes it never
        knew of."""
        return self._top.get(author, 0)

    def _unaccept(self, c: VerifiedChange) -> None:
        del self._accepted[c.change_id]  # the newest entry: the order of the others is kept
        ids = self._by_seq[(c.author, c.seq)]
        ids.remove(c.change_id)
        if not ids:
            del self._by_seq[(c.author, c.seq)]

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

    def forks(self) -> list[Fork]:
        """Every (author, seq) with more than one accepted change, sorted: the proof of each
        fork (both branches are kept and count)."""
        return [
            Fork(author, seq, tuple(sorted(ids)))
            for (author, seq), ids in sorted(self._by_seq.items())
            if len(ids) > 1
        ]

    #: The name of the first release.
    equivocations = forks

    def clock_jumps(self) -> list[ClockJump]:
        """Every counted change holding an op whose lamport jumps far past every lower counted
        one (`sync.clock`): kept and counted, reported like a fork so an operator can revoke
        its author."""
        ignored = self.verdicts()
        return clock_jumps(c for cid, c in self._accepted.items() if cid not in ignored)

    def fork_at(self, author: bytes, seq: int) -> Fork | None:
        """The fork at ``(author, seq)``, or None if only one change holds that seq."""
        ids = self._by_seq.get((author, seq), ())
        return Fork(author, seq, tuple(sorted(ids))) if len(ids) > 1 else None

    def heads(self, author: bytes) -> list[VerifiedChange]:
        """The author's accepted changes that no accepted change names as ``prev`` (one per
        branch of a forked feed), highest ``(seq, change_id)`` first."""
        mine = [
            self._accepted[cid]
            for (a, _), ids in self._by_seq.items()
            if a == author
            for cid in ids
        ]
        named = {c.prev for c in mine}
        tips = [c for c in mine if c.change_id not in named]
        return sorted(tips, key=lambda c: (c.seq, c.change_id), reverse=True)

    def declarations(self) -> list[RegistryDeclared]:
        """The registry declarations of the accepted changes that count (see
        `sync.declaration.declaration_in_force` for which one is in force)."""
        ignored = self.verdicts()
        found: list[RegistryDeclared] = []
        for cid, c in self._accepted.items():
            if cid not in ignored:
                found.extend(op for op in c.ops if type(op) is RegistryDeclared)  # type: ignore[misc,comparison-overlap]
        return found

    def names(self) -> dict[bytes, str]:
        """author -> the name it declared, from the `AuthorNamed` ops of the accepted changes
        that count (`sync.author`: each author's latest wins), sorted by author id."""
        ignored = self.verdicts()
        return author_names(
            names_among(
                op for cid, c in self._accepted.items() if cid not in ignored for op in c.ops
            )
        )

    def trust(self) -> TrustState:
        """The trust decisions of the root's trust ops in its accepted changes (every branch of
        a forked root feed counts, as any author's does)."""
        root = self.root if self.root is not None else b""
        trust_ops = [
            op
            for c in self._accepted.values()
            if c.author == root
            for op in c.ops
            if isinstance(op, TRUST_OP_TYPES)
        ]
        return trust_state(root, self.mode, trust_ops)

    def kept(self, trust: TrustState) -> dict[bytes, frozenset[bytes]]:
        """author -> the ids of its changes that survive every `AuthorCutOff` of it: the kept
        changes and their ancestors (by ``prev``), intersected over the revocations. A kept
        change not (yet) accepted keeps nothing until it arrives: which changes are its
        ancestors is only known from it."""
        out: dict[bytes, frozenset[bytes]] = {}
        for author, keeps in trust.keeps.items():
            sets = [self._ancestry(author, keep) for keep in keeps]
            out[author] = frozenset.intersection(*sets)
        return out

    def _ancestry(self, author: bytes, keep: frozenset[bytes]) -> frozenset[bytes]:
        seen: set[bytes] = set()
        for cid in keep:
            c = self._accepted.get(cid)
            while c is not None and c.author == author and c.change_id not in seen:
                seen.add(c.change_id)
                c = self._accepted.get(c.prev) if c.prev is not None else None
        return frozenset(seen)

    def verdicts(self) -> dict[bytes, Ignored]:
        """change_id -> why an accepted change does not count (changes that count are absent).

        A pure function of the accepted set, so replicas with the same changes agree."""
        trust = self.trust()
        kept = self.kept(trust)
        out: dict[bytes, Ignored] = {}
        for cid in sorted(self._accepted):
            why = verdict(self._accepted[cid], trust, kept)
            if why is not None:
                out[cid] = why
        return out

    def ops(self) -> OpSet:
        """The memory ops that count: accepted changes minus those in `verdicts` (unknown
        author in closed mode, revoked). Trust ops, registry declarations and author names are
        not memory ops: see `trust`, `declarations` and `names`."""
        ignored = self.verdicts()
        out = OpSet()
        for cid, c in self._accepted.items():
            if cid not in ignored:
                out.update(op for op in c.ops if not isinstance(op, SPACE_OP_TYPES))
        return out

    def materialize(self, *, registry: Registry = DEFAULT_REGISTRY) -> State:
        return materialize(self.ops(), registry=registry)


#: How many changes `ChangeLog.receive_all` verifies together.
_RECEIVE_BATCH = 256


def verdict(
    change: VerifiedChange, trust: TrustState, kept: dict[bytes, frozenset[bytes]]
) -> Ignored | None:
    """Why ``change`` does not count under ``trust`` and the revocations' ``kept`` sets
    (`ChangeLog.kept`), or None when it counts."""
    author = change.author
    if not trust.may_write(author):
        return Ignored.UNKNOWN_AUTHOR
    if not trust.counts(author, change.seq, change.change_id):
        return Ignored.REVOKED
    keep = kept.get(author)
    if keep is not None and change.change_id not in keep:
        return Ignored.REVOKED
    return None


def _link_problem(pred: VerifiedChange, succ: VerifiedChange) -> str:
    if pred.author != succ.author:
        return "prev names another author's change"
    if pred.seq != succ.seq - 1:
        return f"seq {succ.seq} names a prev with seq {pred.seq}"
    return ""
