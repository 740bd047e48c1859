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

The pending area and the quarantine hold what peers send, so they can be bounded (`Bounds`). With
``overflow=Overflow.REFUSE`` (the default of `Bounds`) a change that would take either past its
bound is refused with `AreaFullError` and the log is left as it was: the caller still has the
bytes and decides. With ``overflow=Overflow.EVICT`` (what a replica uses, `DEFAULT_BOUNDS`) the
area makes room: what counts least goes first (`sync.pending`), and every eviction is counted
(`Receipt.evicted`, `take_evicted`). Verdicts on accepted changes stay a function of the bytes: a
bound only ever keeps something out of the pending area or the quarantine.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from statefuse.core.materializer import materialize
from statefuse.core.opset import OpSet
from statefuse.core.state import State
from statefuse.registry import DEFAULT_REGISTRY, Registry
from statefuse.registry.error import InputError
from statefuse.sync.author import author_names, names_among
from statefuse.sync.change import (
    CHANGE_FORMAT_VERSION,
    ChangeInputError,
    UnverifiedChange,
    VerifiedChange,
    stripped,
)
from statefuse.sync.clock import ClockJump, clock_jumps
from statefuse.sync.declaration import SPACE_OP_TYPES, RegistryDeclared
from statefuse.sync.pending import (
    UNBOUNDED,
    Area,
    AreaFullError,
    Bounds,
    BoundsConfigError,
    Eviction,
    Overflow,
    Parked,
    PendingArea,
    Standing,
)
from statefuse.sync.quarantine import Quarantine, QuarantineEntry
from statefuse.sync.redaction import RedactionState, redaction_state
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode, TrustState, trust_state
from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change, verify_changes


class TrustConfigError(InputError, ValueError):
    """A change log configured against the trust rules (e.g. closed mode without a root)."""


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
    #: It would have waited in the pending area, but that area is full of changes more likely to
    #: count (`sync.pending`): it was evicted on arrival, and counted.
    EVICTED = "evicted"


@dataclass(frozen=True, slots=True)
class Receipt:
    """The verdict on one received change, plus every change it let in (itself and any pending
    successors), in admission order."""

    status: Status
    change_id: bytes | None
    admitted: tuple[VerifiedChange, ...] = ()
    reason: QuarantineReason | None = None
    message: str = ""
    #: Ids of the pending changes evicted to make room for this one (itself when EVICTED).
    evicted: tuple[bytes, ...] = ()


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
        "_area",
        "_by_seq",
        "_evictions",
        "_journal",
        "_loader",
        "_root_count",
        "_top",
        "_touched",
        "_trust_cache",
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
        bounds: Bounds = UNBOUNDED,
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
        #: What waits for a predecessor, indexed by prev, standing and author (`sync.pending`).
        self._area = PendingArea(self._standing)
        #: change id -> stored bytes of a pending change restored by index only (None: none).
        self._loader: Callable[[bytes], bytes | None] | None = None
        #: Pending changes and quarantine entries evicted since `take_evicted` last ran.
        self._evictions: list[Eviction] = []
        #: (root changes accepted, the trust they decide): `trust` cached for `_standing`.
        self._root_count = 0
        self._trust_cache: tuple[int, TrustState] | None = None
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
        touched, evicted = len(self._touched), len(self._evictions)
        self._journal = journal
        try:
            yield self
        except BaseException:
            for undo in reversed(journal):
                undo()
            del self._touched[touched:]
            del self._evictions[evicted:]
            if journal:
                self._area.restand()  # standings may have moved back with what was undone
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
        if self.bounds.overflow is Overflow.EVICT:
            self._trim_quarantine(entry.key, seen_ms)
        return entry

    def _trim_quarantine(self, keep: bytes, seen_ms: int) -> None:
        """Evict the oldest quarantine entries (never ``keep``, the one just added) until the
        quarantine is within its bounds again; each is counted (`take_evicted`)."""
        q, b = self.quarantine, self.bounds
        while (b.quarantine_entries is not None and len(q) > b.quarantine_entries) or (
            b.quarantine_bytes is not None and q.nbytes > b.quarantine_bytes
        ):
            old = q.oldest(besides=keep)
            if old is None:
                return
            q.put_back(old.key, None)
            self._undo(lambda old=old: q.put_back(old.key, old))  # type: ignore[misc]
            self._evictions.append(Eviction(Area.QUARANTINE, old.key, None, len(old.data), seen_ms))

    def take_evicted(self) -> list[Eviction]:
        """The evictions (pending changes and quarantine entries) since the last call, in
        order: what a replica must remove from its store and count."""
        out, self._evictions = self._evictions, []
        return out

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
        if cid in self._accepted or cid in self._area:
            return Receipt(Status.DUPLICATE, cid)
        if change.prev is not None:
            pred = self._accepted.get(change.prev)
            if pred is None:
                if self.bounds.overflow is Overflow.REFUSE:
                    self._check_room(Area.PENDING, change.data, change.author)
                    self._park(change)
                    return Receipt(Status.PENDING, cid)
                self._park(change)
                evicted = self._make_room(change.author, seen_ms)
                if cid in evicted:
                    return Receipt(
                        Status.EVICTED,
                        cid,
                        evicted=evicted,
                        message="the pending area is full of changes more likely to count",
                    )
                return Receipt(Status.PENDING, cid, evicted=evicted)
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
        self._raise_top(change)
        self._put(Parked.of(change, self._area.next_arrival()))

    def _put(self, p: Parked) -> None:
        self._area.add(p)
        self._undo(lambda: self._unput(p))

    def _unput(self, p: Parked) -> None:
        self._area.remove(p.change_id)

    def _take_out(self, p: Parked) -> None:
        self._area.remove(p.change_id)
        self._undo(lambda: self._area.add(p))

    def _make_room(self, author: bytes, seen_ms: int) -> tuple[bytes, ...]:
        """Evict until the pending area is within its bounds: first ``author``'s own changes
        past ``pending_per_author``, then by standing and age (`sync.pending`)."""
        area, b = self._area, self.bounds
        victims: list[Parked] = []
        while b.pending_per_author is not None and area.of_author(author) > b.pending_per_author:
            v = area.author_victim(author)
            assert v is not None
            victims.append(v)
            self._evict(v, seen_ms)
        while (b.pending_changes is not None and len(area) > b.pending_changes) or (
            b.pending_bytes is not None and area.nbytes > b.pending_bytes
        ):
            v = area.victim()
            if v is None:
                break
            self._evict(v, seen_ms)
            victims.append(v)
        return tuple(v.change_id for v in victims)

    def _evict(self, p: Parked, seen_ms: int) -> None:
        standing = self._standing(p)
        self._take_out(p)
        self._evictions.append(
            Eviction(Area.PENDING, p.change_id, p.author, p.size, seen_ms, standing)
        )

    def _standing(self, p: Parked) -> Standing:
        """How likely a pending change is ever to count (`sync.pending.Standing`)."""
        if self.mode is TrustMode.CLOSED:
            trust = self._trust_now()
            cut = trust.cutoffs.get(p.author)
            if not trust.may_write(p.author) or (cut is not None and p.seq > cut.through_seq):
                return Standing.CANNOT_COUNT
        if (p.author, 1) not in self._by_seq:
            return Standing.UNCONNECTED
        return Standing.KNOWN

    def _trust_now(self) -> TrustState:
        cached = self._trust_cache
        if cached is None or cached[0] != self._root_count:
            cached = self._trust_cache = (self._root_count, self.trust())
        return cached[1]

    def restore_pending(
        self, parked: Iterable[Parked], *, loader: Callable[[bytes], bytes | None]
    ) -> list[Parked]:
        """Take back pending changes a store holds by index only (their bytes stay in the
        store: they were verified when they arrived, and are loaded with ``loader`` and verified
        again only when their predecessor arrives). Returns, without parking them, those whose
        predecessor is accepted already: the caller receives their bytes (``loader``)."""
        self._loader = loader
        due: list[Parked] = []
        for p in parked:
            if p.change_id in self._accepted or p.change_id in self._area:
                continue
            self._raise_top_of(p.author, p.seq)
            if p.prev in self._accepted:
                due.append(p)
            else:
                self._area.add(p)
        return due

    def _loaded(self, p: Parked, seen_ms: int | None) -> VerifiedChange | None:
        """The verified change of a pending entry, its bytes loaded and verified if it was
        restored by index only; None when they are gone or fail (then quarantined, unless
        ``seen_ms`` is None: a read)."""
        if p.change is not None:
            return p.change
        data = self._loader(p.change_id) if self._loader is not None else None
        if data is None:
            return None
        try:
            change = verify_change(UnverifiedChange(data), space=self.space)
        except VerificationError as exc:
            if seen_ms is not None:
                why = f"pending in the store: {exc.message}"
                self._quarantine(data, exc.reason, why, seen_ms)
            return None
        if change.change_id != p.change_id:
            if seen_ms is not None:
                why = "pending in the store under another id"
                self._quarantine(data, QuarantineReason.MALFORMED, why, seen_ms)
            return None
        p.change = change
        return change

    def _refuse(self, data: bytes, exc: VerificationError, seen_ms: int) -> Receipt:
        self._check_room(Area.QUARANTINE, data)
        self._quarantine(data, exc.reason, exc.message, seen_ms)
        return Receipt(Status.QUARANTINED, None, reason=exc.reason, message=exc.message)

    def _check_room(self, area: Area, data: bytes, author: bytes = b"") -> None:
        """Raise AreaFullError if keeping ``data`` in ``area`` would pass one of its bounds
        (``overflow=REFUSE``; with ``EVICT`` the areas make room instead: `_make_room`,
        `_trim_quarantine`)."""
        b = self.bounds
        if area is Area.PENDING:
            checks: tuple[tuple[str, int | None, int], ...] = (
                ("pending_changes", b.pending_changes, len(self._area) + 1),
                ("pending_bytes", b.pending_bytes, self._area.nbytes + len(data)),
                ("pending_per_author", b.pending_per_author, self._area.of_author(author) + 1),
            )
        elif b.overflow is Overflow.EVICT:
            return  # the oldest entries make room (`_trim_quarantine`)
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
            if c.author == self.root:
                self._root_count += 1
            self._undo(lambda c=c: self._unaccept(c))  # type: ignore[misc]
            admitted.append(c)
            for p in self._area.waiting_on(c.change_id):
                self._take_out(p)
                succ = self._loaded(p, seen_ms)
                if succ is None:
                    continue
                problem = _link_problem(c, succ)
                if problem:
                    self._quarantine(succ.data, QuarantineReason.BROKEN_CHAIN, problem, seen_ms)
                else:
                    work.append(succ)
        return admitted

    def _raise_top(self, c: VerifiedChange) -> None:
        self._raise_top_of(c.author, c.seq)

    def _raise_top_of(self, author: bytes, seq: int) -> None:
        if seq > self._top.get(author, 0):
            self._top[author] = seq

    def highest_seq(self, author: bytes) -> int:
        """The highest seq of ``author`` this log has held, accepted or pending (0: none). Only
        grows, even when an `atomic` block is undone: it answers "has this seq been seen
        before", which a replica asks to tell its own changes coming back from changes it never
        knew of."""
        return self._top.get(author, 0)

    def _unaccept(self, c: VerifiedChange) -> None:
        del self._accepted[c.change_id]  # the newest entry: the order of the others is kept
        if c.author == self.root:
            self._root_count -= 1
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
        """Changes waiting for a predecessor, sorted by change id (those restored by index
        only are loaded and verified now; one that fails is left out)."""
        waiting = [self._loaded(p, None) for p in self._area]
        return sorted((c for c in waiting if c is not None), key=lambda c: c.change_id)

    def pending_change(self, change_id: bytes) -> VerifiedChange | None:
        """One pending change (loaded and verified if it was restored by index only)."""
        p = self._area.get(change_id)
        return None if p is None else self._loaded(p, None)

    def unload_pending(self, ids: Iterable[bytes]) -> None:
        """Keep only the index of these pending changes (their bytes are stored: a replica
        calls this once they are): they are loaded and verified again when their predecessor
        arrives, so a flood of the pending area costs memory only for its index."""
        if self._loader is None:
            return
        for cid in ids:
            p = self._area.get(cid)
            if p is not None:
                p.change = None

    def forget_pending(self) -> None:
        """Drop the pending area from memory (not from any store): a replica whose store
        another process changed restores it from the store again (`restore_pending`)."""
        self._area = PendingArea(self._standing)

    def is_pending(self, change_id: bytes) -> bool:
        """Whether the change waits in the pending area."""
        return change_id in self._area

    def pending_count(self) -> int:
        """How many changes wait for a predecessor (loads nothing)."""
        return len(self._area)

    def pending_ids(self) -> list[bytes]:
        """Ids of the changes waiting for a predecessor, sorted (loads nothing)."""
        return sorted(p.change_id for p in self._area)

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

    def tips(self) -> list[VerifiedChange]:
        """Every author's heads (`heads`) at once: the accepted changes no accepted change
        names as ``prev``, sorted by (author, seq, change_id). What a version lists."""
        named = {c.prev for c in self._accepted.values()}
        tips = [c for cid, c in self._accepted.items() if cid not in named]
        return sorted(tips, key=lambda c: (c.author, c.seq, c.change_id))

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

    def redactions(self, *, creator: bytes | None = None) -> RedactionState:
        """Which op ids the redactions of the counted changes order deleted, and which
        redactions are refused (`sync.redaction`): a pure function of the accepted set."""
        ignored = self.verdicts()
        return redaction_state(
            (c for cid, c in self._accepted.items() if cid not in ignored),
            trust=self.trust(),
            creator=creator,
        )

    def strip(
        self, ids: frozenset[bytes], *, among: Iterable[bytes] | None = None
    ) -> list[VerifiedChange]:
        """Cut the bodies of ``ids`` out of every accepted change that carries one (SEMANTICS
        §10): each keeps its id, signature and op ids, and still verifies. Returns the changes
        that lost a body (to rewrite in the store); ``among`` limits the search to those change
        ids. A format-1 change cannot lose a body
        without breaking its signature: it is left whole (see `withheld`). Undone with the
        enclosing `atomic` block."""
        out: list[VerifiedChange] = []
        if not ids:
            return out
        pick = (
            list(self._accepted.items())
            if among is None
            else [(cid, self._accepted[cid]) for cid in among if cid in self._accepted]
        )
        for cid, c in pick:
            if c.version != CHANGE_FORMAT_VERSION or ids.isdisjoint(c.op_ids):
                continue
            if all(op.op_id not in ids for op in c.ops):
                continue
            new = stripped(c, ids)
            self._accepted[cid] = new
            self._undo(functools.partial(self._accepted.__setitem__, cid, c))
            out.append(new)
        return out

    def restore(self, whole: Iterable[VerifiedChange]) -> None:
        """Put bodies back: each of ``whole`` (an accepted change with more of its bodies, as
        an archive holds it) replaces the change of its id. What `strip` took out for
        compaction comes back when it must show again. Undone with the enclosing `atomic`
        block."""
        for new in whole:
            old = self._accepted.get(new.change_id)
            if old is None:
                continue
            self._accepted[new.change_id] = new
            self._undo(functools.partial(self._accepted.__setitem__, new.change_id, old))

    def withheld(self, ids: frozenset[bytes]) -> frozenset[bytes]:
        """The format-1 accepted changes that carry a body of ``ids``: they cannot lose it and
        keep their signature, so a replica never serves them (`Replica.change_bytes`)."""
        return frozenset(
            cid
            for cid, c in self._accepted.items()
            if c.version != CHANGE_FORMAT_VERSION and not ids.isdisjoint(c.op_ids)
        )


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
