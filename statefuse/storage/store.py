"""Stores: where a replica's signed changes, pending changes and quarantine live.

A store keeps bytes, not objects: the wire bytes of every accepted change (in the order they were
accepted), of every change parked waiting for a predecessor, and of every refused copy with its
reason. What those bytes mean is decided above, by the change log that verifies them; a store only
promises that what one `Store.write` call hands it is kept all together or not at all, and kept for
good once the call returns.

Invariant (the store contract, tested against every implementation): writes are atomic and
idempotent (re-appending a change that is already there changes nothing), accepted changes come
back in append order, a change that moves from pending to accepted is in exactly one of the two,
and a reopened store returns exactly what was written before it was closed. Nothing a store holds
is ever dropped silently: the only call that removes a row, `Store.apply_repair`, moves it to
another table in the same transaction.
"""

from __future__ import annotations

import contextlib
import os
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from statefuse.storage.storeerror import StoreError as StoreError

if TYPE_CHECKING:
    from statefuse.storage.storeindex import StoreIndex

#: Current layout version of durable stores; older stores are migrated forward on open.
#: Version 2 marks the file as StateFuse's (SQLite ``application_id``) and gives every store a
#: random ``store_id``, so a key file can be bound to the one store it writes. Version 4 adds the
#: publish marks (`Store.published`) of the transports that publish a replica's own changes.
#: Version 5 stores each pending change's index (author, seq, prev) beside its bytes, so a replica
#: restores its pending area without verifying it again, and tallies evictions (`Store.evictions`).
#: Version 6 adds the derived state (`statefuse.storage.storeindex`): tables created empty, built
#: by the
#: first writer. Version 7 lays the derived state out so that writes append where they can (its
#: tables are dropped and built again from the ops by the first writer).
SCHEMA_VERSION = 7

#: Most authors the eviction tally names one by one per area; the rest are added up under the
#: empty author (the totals always count every eviction).
EVICTION_AUTHORS = 256

#: Seconds a write waits for other writers of the same store by default (a store's ``wait``):
#: long enough for any ordinary burst of writers, short enough that a stuck one is reported.
DEFAULT_WAIT = 30.0

#: Length of a new store's random ``store_id``.
STORE_ID_BYTES = 16


class StoreWarning(UserWarning):
    """A store that works but is at risk (``rule`` says how): ``hard-link``, a store file with
    more than one name, which SQLite gives a -wal each and the write lock cannot join."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"{message} ({rule})")


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a store is for, fixed when it is created, and which store it is.

    ``store_id`` (random, made by the store when it is created) names this one store, so a key
    can be bound to it; it is left out of ``==`` because two infos that agree on what a store is
    for describe the same purpose, whichever file holds it. ``author`` is the key that writes
    the store (None: not recorded, e.g. a store of the first release before it is bound).

    ``creator``: the open space's creator this store follows, the one author whose registry
    declarations count (None: none pinned yet; see `sync.creator`). Unlike the rest it may be
    set after creation (`Store.pin_creator`), so it is left out of ``==`` too.
    ``creator_unknown``: a store of an earlier release, which never recorded one: the replica
    works it out at its first open and records it.
    """

    space: str
    mode: str = "open"
    root: bytes | None = None
    registry: bytes = b""
    store_id: bytes = field(default=b"", compare=False)
    author: bytes | None = None
    creator: bytes | None = field(default=None, compare=False)
    creator_unknown: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """Refused bytes, keyed by blake3 of the bytes (never by an id they claim)."""

    key: bytes
    data: bytes = field(repr=False)
    reason: str
    message: str
    first_seen_ms: int
    last_seen_ms: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A parked change as stored: its id, and the index a replica restores it by without
    verifying it again (``author``, ``seq``, ``prev``; None for a row stored without one, e.g. by
    an older release or a repair). Read by `Store.pending_index`, ``data`` is None for an
    indexed row (its bytes stay in the store: `Store.pending_data`) and ``size`` is their length."""

    change_id: bytes
    data: bytes | None = field(default=None, repr=False)
    author: bytes | None = None
    seq: int | None = None
    prev: bytes | None = None
    size: int = 0


@dataclass(frozen=True, slots=True)
class EvictedRow:
    """A pending change evicted to keep the pending area within its bounds: its row goes, and
    the author's tally counts it."""

    change_id: bytes
    author: bytes
    size: int
    seen_ms: int


@dataclass(frozen=True, slots=True)
class EvictionTally:
    """How much one area evicted of one author (the empty author: entries not attributed to one,
    quarantine entries and authors past `EVICTION_AUTHORS`), and when."""

    area: str
    author: bytes
    changes: int
    nbytes: int
    first_ms: int
    last_ms: int


@dataclass(frozen=True, slots=True)
class StoreWrite:
    """Everything one received or written batch changes, stored in one transaction.

    ``accepted`` and ``pending`` hold ``(change_id, wire bytes)`` pairs; an accepted change that
    was pending leaves the pending area in the same transaction.
    """

    accepted: tuple[tuple[bytes, bytes], ...] = ()
    pending: tuple[tuple[bytes, bytes], ...] = ()
    quarantined: tuple[QuarantineRecord, ...] = ()
    #: Changes to park with their index (`PendingRow` with ``data``); a row already parked gets
    #: the index it lacked.
    parked: tuple[PendingRow, ...] = ()
    #: Pending changes evicted: removed and tallied (`Store.evictions`).
    evicted: tuple[EvictedRow, ...] = ()
    #: (most entries, most bytes) the quarantine keeps after this write (None: no bound): the
    #: oldest rows past them are evicted and tallied.
    quarantine_bounds: tuple[int | None, int | None] = (None, None)
    #: ``(change_id, wire bytes)``: accepted changes whose stored bytes are replaced by these
    #: (the same change with redacted op bodies cut out, SEMANTICS §10). The old bytes must not
    #: be recoverable: the store overwrites freed space and drops its snapshot (which holds
    #: the ops) in the same transaction.
    rewritten: tuple[tuple[bytes, bytes], ...] = ()
    #: When this replica received the ``accepted`` changes (ms since the epoch, its own clock;
    #: None: not recorded): the store keeps a receive mark (`ReceiveMarks`), so that a time
    #: can name the changes received by then. A local fact, never shared.
    received_ms: int | None = None

    def __bool__(self) -> bool:
        return bool(
            self.accepted
            or self.pending
            or self.quarantined
            or self.parked
            or self.evicted
            or self.rewritten
        )


@dataclass(frozen=True, slots=True)
class RepairPlan:
    """Where `Store.apply_repair` moves damaged rows; decided above, by what fails verification.

    Rows are moved, never deleted, so a repair cannot lose what a later, better verifier (or a
    person) might still want. Each quarantine record must carry the very bytes of the row it
    replaces.
    """

    #: ``(position, record)``: accepted rows that fail verification, into quarantine.
    quarantine_accepted: tuple[tuple[int, QuarantineRecord], ...] = ()
    #: ``(position, change id)``: accepted rows that verify but follow a damaged change, into
    #: the pending area (where they wait for the lost change to come back from a peer).
    park: tuple[tuple[int, bytes], ...] = ()
    #: ``(change id, record)``: pending rows that fail verification, into quarantine.
    quarantine_pending: tuple[tuple[bytes, QuarantineRecord], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.quarantine_accepted or self.park or self.quarantine_pending)


class Store(Protocol):
    """What a replica needs from durable (or in-memory) storage."""

    @property
    def readonly(self) -> bool:
        """Whether every mutating call raises StoreError (rule ``readonly``)."""

    def info(self) -> StoreInfo | None:
        """The store's info, or None for a store never initialized."""

    def initialize(self, info: StoreInfo) -> None:
        """Record what a new store is for (once); an empty ``store_id`` gets a random one."""

    def bind(self, author: bytes) -> StoreInfo:
        """Record ``author`` as the store's writer unless one is recorded already (a recorded
        author is never changed), and a ``store_id`` if it has none; returns the info."""

    def pin_creator(self, creator: bytes | None) -> StoreInfo:
        """Record the open space's creator this store follows (None: recorded as none pinned,
        which ends ``creator_unknown``); returns the info. The replica decides who; the store
        only keeps it durably."""

    def write(self, batch: StoreWrite) -> int | None:
        """Apply ``batch`` atomically and durably; returns how many quarantine rows its
        ``quarantine_bounds`` evicted."""

    def read_transaction(self) -> contextlib.AbstractContextManager[None]:
        """A consistent view across several reads (a writer elsewhere commits meanwhile)."""

    def write_transaction(self) -> contextlib.AbstractContextManager[None]:
        """Hold the store for one writer for the whole block: reads inside see the last
        committed state, nothing else writes meanwhile, and the writes inside are kept all
        together (durably) when the block ends, or none if it raises. Nested uses join."""

    def data_version(self) -> int:
        """Changes whenever someone else (another process, another store object on the same
        data) commits a write; a store's own writes leave it as it is."""

    def last_position(self) -> int:
        """The highest position of an accepted change (0: none)."""

    def clean(self) -> bool:
        """Whether nothing but StateFuse has written the store since its last commit (see
        `statefuse.storage.filemark`): what was verified when it was written still holds, so a
        replica
        may open on its derived state without verifying it again."""

    def mark_clean(self) -> None:
        """Record the store as clean after a load that verified it found it sound."""

    def index(self) -> StoreIndex | None:
        """The derived state the store keeps beside its changes (`statefuse.storage.storeindex`), or
        None when it keeps none: a store in memory (the replica's own state is its index), or
        a store of an earlier schema opened read-only."""

    def snapshot_position(self) -> int | None:
        """The position the saved snapshot covers (None: none), without loading it."""

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(position, wire bytes)`` of accepted changes past ``after``, in append order."""

    def pending(self) -> list[bytes]:
        """Wire bytes of parked changes, sorted by change id."""

    def pending_rows(self) -> list[tuple[bytes, bytes]]:
        """``(change id, wire bytes)`` of parked changes, sorted by change id."""

    def pending_index(self) -> list[PendingRow]:
        """The parked changes stored with an index, by it (no bytes), oldest first."""

    def pending_unindexed(self) -> list[PendingRow]:
        """The parked changes stored without an index, with their bytes, by change id."""

    def pending_data(self, change_id: bytes) -> bytes | None:
        """The bytes of one parked change (None: not parked)."""

    def evictions(self) -> list[EvictionTally]:
        """What the bounds evicted, per area and author, sorted."""

    def quarantine(self) -> list[QuarantineRecord]:
        """Every refused copy, sorted by first sight then key."""

    def count(self) -> int:
        """How many accepted changes the store holds."""

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(position, change id)`` of accepted changes past ``after``, in append order."""

    def published(self, target: str) -> set[bytes]:
        """Ids of the changes marked as published to ``target`` (a transport's name for where
        it publishes, e.g. a JetStream stream): what its outbox no longer holds."""

    def mark_published(self, target: str, ids: Iterable[bytes]) -> None:
        """Mark changes as published to ``target`` (idempotent, durable when it returns)."""

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        """Keep a materialized snapshot covering accepted positions ``<= upto`` in place of
        the one kept (one write: two writers saving at once leave one whole snapshot, which
        the next open checks against the rows it covers)."""

    def load_snapshot(self) -> tuple[int, bytes] | None:
        """The latest snapshot, or None."""

    def integrity_problems(self, limit: int = 20, *, full: bool = False) -> list[str]:
        """What the storage engine's own check finds wrong (at most ``limit``; [] when sound);
        ``full`` also cross-checks index contents (slower)."""

    def apply_repair(self, plan: RepairPlan) -> None:
        """Move the rows ``plan`` names, and drop the snapshot, in one transaction; a plan that
        names a row the store does not hold writes nothing (StoreError ``repair-plan``)."""

    def close(self) -> None:
        """Release files and locks; the store is unusable afterwards."""


class ReceiveMarks(Protocol):
    """A store that records when it received its changes (both stores of this package do):
    ``(position, ms)`` marks, one per write that accepted changes, sorted by position. Every
    change at a position up to a mark's, and past the mark before, was received at that
    mark's ``ms`` (the replica's clock). Changes written by a release that kept no marks
    have none of their own: they count as received at the first mark after them."""

    def received_marks(self) -> list[tuple[int, int]]: ...


def merge_quarantine(old: QuarantineRecord | None, new: QuarantineRecord) -> QuarantineRecord:
    """Seeing the same bytes again: keep the first verdict, count the sighting."""
    if old is None:
        return new
    return replace(
        old,
        first_seen_ms=min(old.first_seen_ms, new.first_seen_ms),
        last_seen_ms=max(old.last_seen_ms, new.last_seen_ms),
        count=old.count + new.count,
    )


def tallied(
    tallies: Iterable[EvictionTally], area: str, counts: Iterable[tuple[bytes, int, int]]
) -> list[EvictionTally]:
    """``area``'s tallies after counting ``(author, size, seen_ms)`` evictions: one row per
    author, at most `EVICTION_AUTHORS` of them; the ones evicted from longest ago are added up
    under the empty author, so the totals always count everything."""
    rows = {t.author: t for t in tallies if t.area == area}
    for author, size, ms in counts:
        old = rows.get(author)
        rows[author] = (
            EvictionTally(area, author, 1, size, ms, ms)
            if old is None
            else replace(
                old,
                changes=old.changes + 1,
                nbytes=old.nbytes + size,
                first_ms=min(old.first_ms, ms),
                last_ms=max(old.last_ms, ms),
            )
        )
    named = sorted((t for t in rows.values() if t.author), key=lambda t: (t.last_ms, t.author))
    extra = named[: max(0, len(named) - EVICTION_AUTHORS)]
    if extra:
        rest = rows.get(b"") or EvictionTally(area, b"", 0, 0, extra[0].first_ms, 0)
        for t in extra:
            del rows[t.author]
            rest = replace(
                rest,
                changes=rest.changes + t.changes,
                nbytes=rest.nbytes + t.nbytes,
                first_ms=min(rest.first_ms, t.first_ms),
                last_ms=max(rest.last_ms, t.last_ms),
            )
        rows[b""] = rest
    return [rows[a] for a in sorted(rows)]


def over_bounds(
    sizes: Iterable[tuple[bytes, int]], bounds: tuple[int | None, int | None]
) -> list[tuple[bytes, int]]:
    """The oldest of ``sizes`` (``(key, size)``, oldest first) to evict so that at most
    ``bounds`` = (entries, bytes) are left."""
    most, most_bytes = bounds
    rows = list(sizes)
    total = sum(n for _, n in rows)
    out = []
    left = len(rows)
    for key, n in rows:
        if (most is None or left <= most) and (most_bytes is None or total <= most_bytes):
            break
        out.append((key, n))
        left -= 1
        total -= n
    return out


def check_author(author: object) -> bytes:
    """``author`` as handed to `Store.bind`, checked up front (raises StoreError ``author``)."""
    if not isinstance(author, bytes) or not author:
        raise StoreError("author", "author-bytes", "an author is a non-empty bytes id")
    return author


def repair_plan_error(what: str) -> StoreError:
    """The error of a repair plan that does not match the store (nothing was written)."""
    return StoreError("plan", "repair-plan", f"{what}; nothing was changed")


class MemoryStore:
    """A store in memory (for tests and short-lived replicas): the same contract, no durability."""

    __slots__ = (
        "_accepted",
        "_closed",
        "_evictions",
        "_ids",
        "_index",
        "_info",
        "_marks",
        "_next_pos",
        "_notes",
        "_pending",
        "_positions",
        "_published",
        "_quarantine",
        "_snapshot",
    )

    def __init__(self) -> None:
        self._info: StoreInfo | None = None
        #: position -> (change id, wire bytes); positions are never reused, as on disk.
        self._accepted: dict[int, tuple[bytes, bytes]] = {}
        self._positions: list[int] = []
        self._next_pos = 1
        self._ids: set[bytes] = set()
        self._pending: dict[bytes, bytes] = {}
        self._notes: dict[str, bytes] = {}
        #: change id -> the pending row's index (rows parked without one have none).
        self._index: dict[bytes, PendingRow] = {}
        self._quarantine: dict[bytes, QuarantineRecord] = {}
        self._evictions: list[EvictionTally] = []
        self._snapshot: tuple[int, bytes] | None = None
        self._published: dict[str, set[bytes]] = {}
        self._marks: list[tuple[int, int]] = []
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise StoreError("store", "open", "the store is closed")

    @property
    def readonly(self) -> bool:
        return False

    def index(self) -> StoreIndex | None:
        return None

    def clean(self) -> bool:
        return True  # nothing outside this process can write it

    def mark_clean(self) -> None:
        return None

    def info(self) -> StoreInfo | None:
        return self._info

    def initialize(self, info: StoreInfo) -> None:
        self._open()
        if self._info is not None and self._info != info:
            raise StoreError("store", "initialized-once", "the store is already initialized")
        if self._info is None:
            self._info = replace(info, store_id=info.store_id or os.urandom(STORE_ID_BYTES))

    def bind(self, author: bytes) -> StoreInfo:
        self._open()
        author = check_author(author)
        if self._info is None:
            raise StoreError("store", "initialized", "initialize the store before binding it")
        if self._info.author is None:
            self._info = replace(self._info, author=author)
        return self._info

    def pin_creator(self, creator: bytes | None) -> StoreInfo:
        self._open()
        if self._info is None:
            raise StoreError("store", "initialized", "initialize the store before pinning it")
        self._info = replace(self._info, creator=creator, creator_unknown=False)
        return self._info

    def write(self, batch: StoreWrite) -> int:
        self._open()
        for cid, data in batch.accepted:
            self._pending.pop(cid, None)
            self._index.pop(cid, None)
            if cid not in self._ids:
                self._append(cid, data)
        if batch.accepted and batch.received_ms is not None and self._positions:
            self._mark(self._positions[-1], batch.received_ms)
        for cid, data in batch.pending:
            if cid not in self._ids:
                self._pending.setdefault(cid, data)
        for e in batch.evicted:  # one parked by this same batch had no row: counted all the same
            self._pending.pop(e.change_id, None)
            self._index.pop(e.change_id, None)
        counts = [(e.author, e.size, e.seen_ms) for e in batch.evicted]
        for row in batch.parked:
            if row.change_id not in self._ids and row.data is not None:
                self._pending.setdefault(row.change_id, row.data)
                self._index[row.change_id] = replace(row, data=None)
        for rec in batch.quarantined:
            self._quarantine[rec.key] = merge_quarantine(self._quarantine.get(rec.key), rec)
        if batch.rewritten:
            new = dict(batch.rewritten)
            for pos, (cid, _) in list(self._accepted.items()):
                if cid in new:
                    self._accepted[pos] = (cid, new[cid])
            self._snapshot = None
        trimmed = over_bounds(
            ((k, len(r.data)) for k, r in self._quarantine.items()), batch.quarantine_bounds
        )
        ms = max((r.last_seen_ms for r in batch.quarantined), default=0)
        if trimmed:
            for key, _ in trimmed:
                del self._quarantine[key]
        if counts or trimmed:
            others = [t for t in self._evictions if t.area not in ("pending", "quarantine")]
            self._evictions = (
                others
                + tallied(self._evictions, "pending", counts)
                + tallied(self._evictions, "quarantine", [(b"", n, ms) for _, n in trimmed])
            )
        return len(trimmed)

    def _mark(self, pos: int, ms: int) -> None:
        if not self._marks or self._marks[-1][0] != pos:  # a marked position keeps its time
            self._marks.append((pos, ms))

    def received_marks(self) -> list[tuple[int, int]]:
        """See `ReceiveMarks`."""
        self._open()
        return list(self._marks)

    def _append(self, cid: bytes, data: bytes) -> None:
        pos = self._next_pos
        self._next_pos += 1
        self._ids.add(cid)
        self._accepted[pos] = (cid, data)
        self._positions.append(pos)

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """Nothing to do: nothing else writes to this store while its owner reads."""
        self._open()
        yield

    @contextlib.contextmanager
    def write_transaction(self) -> Iterator[None]:
        """Only this store's owner writes to it: nothing to hold. (Writes inside are each
        atomic; the replica keeps memory in step by reloading if one fails.)"""
        self._open()
        yield

    def data_version(self) -> int:
        """Always 0: no one but its owner writes to a memory store."""
        return 0

    def last_position(self) -> int:
        return self._positions[-1] if self._positions else 0

    def snapshot_position(self) -> int | None:
        return None if self._snapshot is None else self._snapshot[0]

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        self._open()
        for pos in self._positions[bisect_right(self._positions, after) :]:
            yield pos, self._accepted[pos][1]

    def pending(self) -> list[bytes]:
        self._open()
        return [self._pending[c] for c in sorted(self._pending)]

    def pending_rows(self) -> list[tuple[bytes, bytes]]:
        self._open()
        return [(c, self._pending[c]) for c in sorted(self._pending)]

    def pending_index(self) -> list[PendingRow]:
        self._open()
        return [
            replace(self._index[cid], size=len(data))
            for cid, data in self._pending.items()
            if cid in self._index
        ]

    def pending_unindexed(self) -> list[PendingRow]:
        self._open()
        return [
            PendingRow(cid, self._pending[cid], size=len(self._pending[cid]))
            for cid in sorted(self._pending)
            if cid not in self._index
        ]

    def pending_data(self, change_id: bytes) -> bytes | None:
        self._open()
        return self._pending.get(change_id)

    def evictions(self) -> list[EvictionTally]:
        self._open()
        return sorted(self._evictions, key=lambda t: (t.area, t.author))

    def quarantine(self) -> list[QuarantineRecord]:
        self._open()
        return sorted(self._quarantine.values(), key=lambda r: (r.first_seen_ms, r.key))

    def count(self) -> int:
        return len(self._accepted)

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        self._open()
        for pos in self._positions[bisect_right(self._positions, after) :]:
            yield pos, self._accepted[pos][0]

    def published(self, target: str) -> set[bytes]:
        self._open()
        return set(self._published.get(target, ()))

    def mark_published(self, target: str, ids: Iterable[bytes]) -> None:
        self._open()
        self._published.setdefault(target, set()).update(bytes(c) for c in ids)

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        self._open()
        self._snapshot = (upto, blob)

    def note(self, key: str) -> bytes | None:
        """A small value the replica keeps with the store (the archive of a compacted store)."""
        return self._notes.get(key)

    def set_note(self, key: str, value: bytes | None) -> None:
        if value is None:
            self._notes.pop(key, None)
        else:
            self._notes[key] = bytes(value)

    def load_snapshot(self) -> tuple[int, bytes] | None:
        return self._snapshot

    def integrity_problems(self, limit: int = 20, *, full: bool = False) -> list[str]:
        """Always []: memory has no storage engine that can tear a page."""
        self._open()
        return []

    def apply_repair(self, plan: RepairPlan) -> None:
        """Works on copies and swaps them in at the end: a plan that fails halfway (as SQLite
        rolls back) leaves the store as it was."""
        self._open()
        accepted = dict(self._accepted)
        pending = dict(self._pending)
        quarantine = dict(self._quarantine)

        def take(pos: int) -> bytes:
            row = accepted.pop(pos, None)
            if row is None:
                raise repair_plan_error(f"no accepted change at position {pos}")
            return row[1]

        for pos, rec in plan.quarantine_accepted:
            if rec.data != take(pos):
                raise repair_plan_error(f"the record for position {pos} does not hold its bytes")
            quarantine[rec.key] = merge_quarantine(quarantine.get(rec.key), rec)
        for pos, cid in plan.park:
            data = take(pos)
            if pending.setdefault(cid, data) != data:
                raise repair_plan_error(f"pending holds other bytes as {cid.hex()}")
        for cid, rec in plan.quarantine_pending:
            found = pending.pop(cid, None)
            if found is None:
                raise repair_plan_error(f"no pending change {cid.hex()}")
            if rec.data != found:
                raise repair_plan_error(
                    f"the record for pending {cid.hex()} does not hold its bytes"
                )
            quarantine[rec.key] = merge_quarantine(quarantine.get(rec.key), rec)
        self._accepted = accepted
        self._positions = list(accepted)  # insertion order is position order
        self._ids = {cid for cid, _ in accepted.values()}
        self._pending = pending
        self._index = {c: row for c, row in self._index.items() if c in pending}
        self._quarantine = quarantine
        self._snapshot = None

    def close(self) -> None:
        self._closed = True
