"""The pending area: changes that wait for their predecessor, bounded, and what leaves it first.

A change whose ``prev`` is missing waits here until the predecessor arrives. Anyone who can reach
a replica can send such changes (an open space takes any valid signature; a closed space still
parks what it cannot judge yet), so the area is bounded (`Bounds`): in all, in bytes and per
author. A replica bounds it by default (`DEFAULT_BOUNDS`).

When a new change would pass a bound, the area makes room by *eviction*, in this order (lowest
`Standing` first, then the one that has waited longest):

1. ``cannot-count``: a closed space's change by an author the root has not admitted, or by a
   revoked author past what the revocation keeps. Nothing it waits for can make it count.
2. ``unconnected``: an author with no accepted change at all (not even its seq 1): a chain that
   may never connect, which is what a stranger's flood of made-up ``prev`` ids looks like.
3. ``known``: a gap in the feed of an author whose earlier changes are accepted: an honest peer's
   change whose predecessor is late.

One author past its own bound (``pending_per_author``) loses its change of highest seq first
(waiting longest among equal seqs): the lowest ones connect first when the gap closes. So a flood
cannot push out an honest peer's pending change, and one author cannot take the whole area.

Eviction never loses an acknowledged change: a pending change was never accepted here, so the
peer that sent it still holds it, and the next reconciliation (which compares accepted changes
only) sees it missing and sends it again, predecessors first. Every eviction is counted
(`Eviction`, reported in receipts and `MergeReport.evicted`, tallied per author in the store).

A `Parked` entry may hold only the index of a stored change (its bytes stay in the store): the
change was verified when it arrived, and it is verified again only when its predecessor arrives,
so opening a store never verifies its pending area.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

from statefuse.registry.error import InputError, StateFuseError
from statefuse.sync.change import VerifiedChange


class BoundsConfigError(InputError, ValueError):
    """A bound that is not a positive int (or None for no bound)."""


class Area(Enum):
    """The parts of a change log that hold what is not (yet) accepted."""

    PENDING = "pending"
    QUARANTINE = "quarantine"


class AreaFullError(StateFuseError):
    """Taking in a change would pass a bound of its area; the log did not change.

    ``area`` is the Area, ``bound`` the name of the `Bounds` field that would be passed and
    ``limit`` its value. Raised only by bounds with ``overflow=Overflow.REFUSE``."""

    def __init__(self, area: Area, bound: str, limit: int) -> None:
        self.area = area
        self.bound = bound
        self.limit = limit
        super().__init__(f"the {area.value} area is full ({bound} = {limit})")

    def __reduce__(self) -> tuple[type[AreaFullError], tuple[Area, str, int]]:
        return (type(self), (self.area, self.bound, self.limit))


class Overflow(Enum):
    """What a full area does with one more change."""

    #: Refuse it with `AreaFullError`; the log is left as it was (the caller keeps the bytes).
    REFUSE = "refuse"
    #: Make room: evict what counts least (see the module docstring), and count it.
    EVICT = "evict"


_BOUND_FIELDS = (
    "pending_changes",
    "pending_bytes",
    "pending_per_author",
    "quarantine_entries",
    "quarantine_bytes",
)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Most a change log keeps in its pending area and quarantine (None: no bound).

    Sizes are those of the changes' bytes. A change leaving the pending area for quarantine
    (its predecessor arrived, and the link is broken) is always kept: it was already counted
    against the pending bounds, so the quarantine can pass its own by at most that much (with
    ``overflow=EVICT`` the oldest quarantine entries make room again).
    Raises BoundsConfigError (naming the field) for a bound that is not a positive int.
    """

    pending_changes: int | None = None
    pending_bytes: int | None = None
    quarantine_entries: int | None = None
    quarantine_bytes: int | None = None
    #: Most pending changes of one author.
    pending_per_author: int | None = None
    overflow: Overflow = Overflow.REFUSE

    def __post_init__(self) -> None:
        for name in _BOUND_FIELDS:
            v = getattr(self, name)
            if v is not None and (type(v) is not int or v < 1):
                raise BoundsConfigError(
                    name, "positive-int", f"must be an int >= 1 or None, got {v!r}"
                )
        if not isinstance(self.overflow, Overflow):
            raise BoundsConfigError(
                "overflow", "overflow", f"overflow is an Overflow, got {self.overflow!r}"
            )


#: The bounds every replica keeps unless it is given others (`Replica.open(bounds=…)`, the CLI's
#: ``--max-pending`` options): about 64 MiB of memory and disk per area at most.
DEFAULT_BOUNDS = Bounds(
    pending_changes=10_000,
    pending_bytes=64 * 1024 * 1024,
    pending_per_author=1_000,
    quarantine_entries=10_000,
    quarantine_bytes=64 * 1024 * 1024,
    overflow=Overflow.EVICT,
)

#: No bound at all (what a `ChangeLog` keeps unless given bounds).
UNBOUNDED = Bounds()


class Standing(Enum):
    """How likely a pending change is ever to count; the lowest is evicted first."""

    CANNOT_COUNT = "cannot-count"
    UNCONNECTED = "unconnected"
    KNOWN = "known"


#: Eviction order: index in this tuple.
_ORDER = {s: k for k, s in enumerate(Standing)}


@dataclass(slots=True)
class Parked:
    """One pending change: its index, and the verified change once it is in memory (None: the
    bytes are in the store, verified when they arrived, loaded when the predecessor does)."""

    change_id: bytes
    author: bytes
    seq: int
    prev: bytes
    size: int
    #: Arrival order within the area (the oldest is the lowest).
    arrival: int
    change: VerifiedChange | None = None

    @classmethod
    def of(cls, change: VerifiedChange, arrival: int) -> Parked:
        assert change.prev is not None
        return cls(
            change.change_id,
            change.author,
            change.seq,
            change.prev,
            len(change.data),
            arrival,
            change,
        )


@dataclass(frozen=True, slots=True)
class Eviction:
    """One change (or quarantine entry) evicted to keep an area within its bounds.

    ``change_id`` is the change's id (a quarantine entry: its key); ``author`` is None for a
    quarantine entry, ``standing`` None too."""

    area: Area
    change_id: bytes
    author: bytes | None
    size: int
    seen_ms: int
    standing: Standing | None = None


class PendingArea:
    """The pending changes of one log, indexed for admission (by ``prev``) and for eviction (by
    standing and age, and per author by seq). ``standing`` judges an entry when the area looks
    for what to evict; entries whose standing rose since they were filed are moved lazily, and
    `restand` files them all again (after trust changed)."""

    __slots__ = (
        "_author_heaps",
        "_by_author",
        "_by_prev",
        "_entries",
        "_heaps",
        "_nbytes",
        "_next",
        "_standing",
    )

    def __init__(self, standing: Callable[[Parked], Standing]) -> None:
        self._standing = standing
        self._entries: dict[bytes, Parked] = {}
        self._by_prev: dict[bytes, dict[bytes, Parked]] = {}
        self._by_author: dict[bytes, int] = {}
        self._nbytes = 0
        self._next = 1
        #: (arrival, change id) per standing, with stale entries skipped when met.
        self._heaps: dict[Standing, list[tuple[int, bytes]]] = {s: [] for s in Standing}
        #: author -> (-seq, arrival, change id), stale entries skipped when met.
        self._author_heaps: dict[bytes, list[tuple[int, int, bytes]]] = {}

    def next_arrival(self) -> int:
        n = self._next
        self._next += 1
        return n

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, change_id: object) -> bool:
        return change_id in self._entries

    def __iter__(self) -> Iterator[Parked]:
        return iter(list(self._entries.values()))

    @property
    def nbytes(self) -> int:
        return self._nbytes

    def of_author(self, author: bytes) -> int:
        return self._by_author.get(author, 0)

    def get(self, change_id: bytes) -> Parked | None:
        return self._entries.get(change_id)

    def waiting_on(self, prev: bytes) -> list[Parked]:
        """The entries that name ``prev``, by change id."""
        waiting = self._by_prev.get(prev, {})
        return [waiting[c] for c in sorted(waiting)]

    def add(self, p: Parked) -> None:
        if p.arrival >= self._next:
            self._next = p.arrival + 1
        self._entries[p.change_id] = p
        self._by_prev.setdefault(p.prev, {})[p.change_id] = p
        self._by_author[p.author] = self._by_author.get(p.author, 0) + 1
        self._nbytes += p.size
        heapq.heappush(self._heaps[self._standing(p)], (p.arrival, p.change_id))
        mine = self._author_heaps.setdefault(p.author, [])
        heapq.heappush(mine, (-p.seq, p.arrival, p.change_id))
        self._compact()

    def remove(self, change_id: bytes) -> Parked:
        p = self._entries.pop(change_id)
        waiting = self._by_prev[p.prev]
        del waiting[change_id]
        if not waiting:
            del self._by_prev[p.prev]
        left = self._by_author[p.author] - 1
        if left:
            self._by_author[p.author] = left
        else:
            del self._by_author[p.author]
            self._author_heaps.pop(p.author, None)
        self._nbytes -= p.size
        return p

    def _live(self, arrival: int, change_id: bytes) -> Parked | None:
        p = self._entries.get(change_id)
        return p if p is not None and p.arrival == arrival else None

    def victim(self) -> Parked | None:
        """The entry to evict first: the lowest standing, then the longest waiting."""
        for level in Standing:
            heap = self._heaps[level]
            while heap:
                arrival, cid = heap[0]
                p = self._live(arrival, cid)
                if p is None:
                    heapq.heappop(heap)
                    continue
                now = self._standing(p)
                if now is not level:  # its standing changed since it was filed
                    heapq.heappop(heap)
                    heapq.heappush(self._heaps[now], (arrival, cid))
                    if _ORDER[now] < _ORDER[level]:
                        return self.victim()
                    continue
                return p
        return None

    def author_victim(self, author: bytes) -> Parked | None:
        """The author's entry to evict first: its highest seq, then the longest waiting."""
        heap = self._author_heaps.get(author, [])
        while heap:
            _, arrival, cid = heap[0]
            p = self._live(arrival, cid)
            if p is not None:
                return p
            heapq.heappop(heap)
        return None

    def restand(self) -> None:
        """File every entry again under its standing now (trust changed, or a receive was
        undone)."""
        self._heaps = {s: [] for s in Standing}
        for p in self._entries.values():
            self._heaps[self._standing(p)].append((p.arrival, p.change_id))
        for heap in self._heaps.values():
            heapq.heapify(heap)
        self._author_heaps = {}
        for p in self._entries.values():
            self._author_heaps.setdefault(p.author, []).append((-p.seq, p.arrival, p.change_id))
        for mine in self._author_heaps.values():
            heapq.heapify(mine)

    def _compact(self) -> None:
        """Drop stale heap entries once they outnumber the live ones (keeps memory bounded)."""
        filed = sum(len(h) for h in self._heaps.values())
        if filed > 2 * len(self._entries) + 1024:
            self.restand()
