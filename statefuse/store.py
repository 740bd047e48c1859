"""Stores: where a replica's signed changes, pending changes and quarantine live.

A store keeps bytes, not objects: the wire bytes of every accepted change (in the order they were
accepted), of every change parked waiting for a predecessor, and of every refused copy with its
reason. What those bytes mean is decided above, by the change log that verifies them; a store only
promises that what one `Store.write` call hands it is kept all together or not at all, and kept for
good once the call returns.

Invariant (the store contract, tested against every implementation): writes are atomic and
idempotent (re-appending a change that is already there changes nothing), accepted changes come
back in append order, a change that moves from pending to accepted is in exactly one of the two,
and a reopened store returns exactly what was written before it was closed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from registry.error import InputError

#: Current layout version of durable stores; older stores are migrated forward on open.
SCHEMA_VERSION = 1


class StoreError(InputError, RuntimeError):
    """A store that cannot be used as asked: another space, a newer schema, a lock held by a live
    writer, a missing or unreadable file."""


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a store is for, fixed when it is created."""

    space: str
    mode: str = "open"
    root: bytes | None = None
    registry: bytes = b""


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
class StoreWrite:
    """Everything one received or written batch changes, stored in one transaction.

    ``accepted`` and ``pending`` hold ``(change_id, wire bytes)`` pairs; an accepted change that
    was pending leaves the pending area in the same transaction.
    """

    accepted: tuple[tuple[bytes, bytes], ...] = ()
    pending: tuple[tuple[bytes, bytes], ...] = ()
    quarantined: tuple[QuarantineRecord, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.accepted or self.pending or self.quarantined)


class Store(Protocol):
    """What a replica needs from durable (or in-memory) storage."""

    def info(self) -> StoreInfo | None:
        """The store's info, or None for a store never initialized."""

    def initialize(self, info: StoreInfo) -> None:
        """Record what a new store is for (once)."""

    def write(self, batch: StoreWrite) -> None:
        """Apply ``batch`` atomically and durably."""

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(position, wire bytes)`` of accepted changes past ``after``, in append order."""

    def pending(self) -> list[bytes]:
        """Wire bytes of parked changes, sorted by change id."""

    def quarantine(self) -> list[QuarantineRecord]:
        """Every refused copy, sorted by first sight then key."""

    def count(self) -> int:
        """How many accepted changes the store holds."""

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        """``(position, change id)`` of accepted changes past ``after``, in append order."""

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        """Keep a materialized snapshot covering accepted positions ``<= upto``."""

    def load_snapshot(self) -> tuple[int, bytes] | None:
        """The latest snapshot, or None."""

    def close(self) -> None:
        """Release files and locks; the store is unusable afterwards."""


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


class MemoryStore:
    """A store in memory (for tests and short-lived replicas): the same contract, no durability."""

    __slots__ = (
        "_accepted",
        "_closed",
        "_id_order",
        "_ids",
        "_info",
        "_pending",
        "_quarantine",
        "_snapshot",
    )

    def __init__(self) -> None:
        self._info: StoreInfo | None = None
        self._accepted: list[bytes] = []
        self._ids: set[bytes] = set()
        self._id_order: list[bytes] = []
        self._pending: dict[bytes, bytes] = {}
        self._quarantine: dict[bytes, QuarantineRecord] = {}
        self._snapshot: tuple[int, bytes] | None = None
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise StoreError("store", "open", "the store is closed")

    def info(self) -> StoreInfo | None:
        return self._info

    def initialize(self, info: StoreInfo) -> None:
        self._open()
        if self._info is not None and self._info != info:
            raise StoreError("store", "initialized-once", "the store is already initialized")
        self._info = info

    def write(self, batch: StoreWrite) -> None:
        self._open()
        for cid, data in batch.accepted:
            self._pending.pop(cid, None)
            if cid not in self._ids:
                self._ids.add(cid)
                self._id_order.append(cid)
                self._accepted.append(data)
        for cid, data in batch.pending:
            if cid not in self._ids:
                self._pending.setdefault(cid, data)
        for rec in batch.quarantined:
            self._quarantine[rec.key] = merge_quarantine(self._quarantine.get(rec.key), rec)

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        self._open()
        for i in range(after, len(self._accepted)):
            yield i + 1, self._accepted[i]

    def pending(self) -> list[bytes]:
        self._open()
        return [self._pending[c] for c in sorted(self._pending)]

    def quarantine(self) -> list[QuarantineRecord]:
        self._open()
        return sorted(self._quarantine.values(), key=lambda r: (r.first_seen_ms, r.key))

    def count(self) -> int:
        return len(self._accepted)

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        self._open()
        for i in range(after, len(self._id_order)):
            yield i + 1, self._id_order[i]

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        self._open()
        self._snapshot = (upto, blob)

    def load_snapshot(self) -> tuple[int, bytes] | None:
        return self._snapshot

    def close(self) -> None:
        self._closed = True
