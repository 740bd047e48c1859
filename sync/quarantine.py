"""Quarantine: where refused bytes are kept, with the reason, for audit (never dropped).

Invariant: entries are keyed by blake3 of the exact bytes, never by an id the bytes claim, so a
forged or corrupted copy seen first can never shadow or block the genuine change that arrives
later. The store only grows; seeing the same bytes again updates ``last_seen_ms`` and ``count``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import blake3

from statefuse.sync.verify import QuarantineReason


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """Refused bytes, why they were refused, and when they were seen."""

    key: bytes
    data: bytes
    reason: QuarantineReason
    message: str
    first_seen_ms: int
    last_seen_ms: int
    count: int = 1


class Quarantine:
    """An append-only, in-memory quarantine of one change log (the store keeps the durable copy:
    `Replica.quarantine` reads it back)."""

    __slots__ = ("_entries", "_nbytes")

    def __init__(self) -> None:
        self._entries: dict[bytes, QuarantineEntry] = {}
        self._nbytes = 0

    def add(
        self, data: bytes, reason: QuarantineReason, message: str, *, seen_ms: int
    ) -> QuarantineEntry:
        """Record ``data`` as refused; returns the (possibly updated) entry."""
        key = blake3.blake3(data).digest()
        entry = self._entries.get(key)
        if entry is None:
            entry = QuarantineEntry(key, data, reason, message, seen_ms, seen_ms)
            self._nbytes += len(data)
        else:
            entry = replace(
                entry, last_seen_ms=max(entry.last_seen_ms, seen_ms), count=entry.count + 1
            )
        self._entries[key] = entry
        return entry

    def get_bytes(self, data: bytes) -> QuarantineEntry | None:
        """The entry of exactly these bytes, if refused before."""
        return self._entries.get(blake3.blake3(data).digest())

    def put_back(self, key: bytes, entry: QuarantineEntry | None) -> None:
        """Undo an `add`: restore the entry ``key`` had before it (None: it had none)."""
        current = self._entries.pop(key, None)
        if current is not None:
            self._nbytes -= len(current.data)
        if entry is not None:
            self._entries[key] = entry
            self._nbytes += len(entry.data)

    def oldest(self, *, besides: bytes = b"") -> QuarantineEntry | None:
        """The entry added longest ago (other than ``besides``): the first a bound evicts."""
        for key, entry in self._entries.items():
            if key != besides:
                return entry
        return None

    @property
    def nbytes(self) -> int:
        """Total size of the kept bytes (each entry counted once, however often seen)."""
        return self._nbytes

    def get(self, key: bytes) -> QuarantineEntry | None:
        return self._entries.get(key)

    def __contains__(self, data: object) -> bool:
        return isinstance(data, bytes) and blake3.blake3(data).digest() in self._entries

    def __iter__(self) -> Iterator[QuarantineEntry]:
        """Entries sorted by key (deterministic)."""
        return iter([self._entries[k] for k in sorted(self._entries)])

    def __len__(self) -> int:
        return len(self._entries)

    def verdicts(self) -> dict[bytes, QuarantineReason]:
        """key -> reason, for comparing replicas."""
        return {k: e.reason for k, e in sorted(self._entries.items())}
