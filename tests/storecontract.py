"""The factory hook of the store contract (tests/test_store_contract.py), and the real signed
changes the contract writes.

Every `Store` (statefuse/storage/store.py) must show the behaviours the contract tests list. They
are
written once, against the ``store_factory`` fixture, which runs them on each factory of
`FACTORIES`. A new backend (PostgreSQL, say) adds one `StoreFactory` subclass to that list and
nothing else: the contract never names a backend.

A backend that legitimately cannot do something (memory does not outlive its process) says so in
its `Capabilities`; a test then asserts the stronger behaviour where the backend claims it and
the weaker one where it does not: it never skips.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import blake3

from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import MemoryStore, PendingRow, QuarantineRecord, Store, StoreInfo
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

#: What every factory's fresh store is initialized with (the store adds a random ``store_id``).
INFO = StoreInfo(space="contract", mode="open", root=None, registry=b"\x01" * 32)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend promises beyond the behaviours every store shows.

    ``durable``: a store opened again on the same storage (`StoreFactory.reopen`) holds exactly
    what was written before it was closed. ``transactions``: `Store.write_transaction` keeps the
    writes of a block that raises none of them, and a batch that fails partway keeps nothing of
    itself (memory applies a batch item by item, and its owner reloads when one fails).
    ``shared``: several store objects (processes) use the same storage at once
    (`StoreFactory.another`): one sees what another commits, `Store.data_version` tells it so,
    and `Store.read_transaction` holds one consistent view while another commits.
    ``readonly_opens``: a store can be opened read-only beside its writers, refusing every write.
    """

    durable: bool
    transactions: bool
    shared: bool
    readonly_opens: bool


class StoreFactory:
    """The hook: makes fresh stores of one backend, and opens their storage again.

    Calling the factory gives a fresh store, initialized with ``info`` (`INFO`; None: never
    initialized). Every store it hands out is closed when the test ends (`close_all`).
    """

    name = "abstract"
    capabilities = Capabilities(
        durable=False, transactions=False, shared=False, readonly_opens=False
    )

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self._made: list[Store] = []

    def __call__(self, info: StoreInfo | None = INFO) -> Store:
        store = self._keep(self.create())
        if info is not None:
            store.initialize(info)
        return store

    def _keep(self, store: Store) -> Store:
        self._made.append(store)
        return store

    def create(self) -> Store:
        """A fresh, empty store on storage of its own."""
        raise NotImplementedError

    def reopen(self, store: Store) -> Store:
        """Close ``store`` and open its storage again (``durable`` backends only)."""
        raise NotImplementedError(f"{self.name} stores are not durable")

    def another(self, store: Store, *, readonly: bool = False) -> Store:
        """A second store object on ``store``'s storage, as another process opens it
        (``shared`` backends; ``readonly`` needs ``readonly_opens``)."""
        raise NotImplementedError(f"{self.name} stores are not shared")

    def close_all(self) -> None:
        for store in self._made:
            store.close()


class MemoryFactory(StoreFactory):
    name = "memory"
    capabilities = Capabilities(
        durable=False, transactions=False, shared=False, readonly_opens=False
    )

    def create(self) -> Store:
        return MemoryStore()


class SQLiteFactory(StoreFactory):
    """SQLite stores on real files, each in a directory of its own."""

    name = "sqlite"
    capabilities = Capabilities(durable=True, transactions=True, shared=True, readonly_opens=True)

    def create(self) -> Store:
        home = self.tmp_path / f"store-{len(self._made)}"
        home.mkdir()
        return SQLiteStore(home / "s.db")

    def _path(self, store: Store) -> Path:
        assert isinstance(store, SQLiteStore)
        return store.path

    def reopen(self, store: Store) -> Store:
        store.close()
        return self._keep(SQLiteStore(self._path(store), create=False))

    def another(self, store: Store, *, readonly: bool = False) -> Store:
        return self._keep(SQLiteStore(self._path(store), create=False, readonly=readonly))


#: Every backend the contract runs on: a new backend adds its factory here.
FACTORIES: list[Callable[[Path], StoreFactory]] = [MemoryFactory, SQLiteFactory]


# --- real signed changes ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One real signed change as a store keeps it: its id, wire bytes, and pending index."""

    change_id: bytes
    data: bytes
    author: bytes
    seq: int
    prev: bytes | None

    @property
    def pair(self) -> tuple[bytes, bytes]:
        return self.change_id, self.data

    def parked(self) -> PendingRow:
        """The pending row a replica parks this change as (with its index)."""
        return PendingRow(self.change_id, self.data, self.author, self.seq, self.prev)


def refused(data: bytes, *, seen: int, reason: str = "bad-signature") -> QuarantineRecord:
    """A quarantine record as a replica makes one for ``data``: keyed by blake3 of the bytes."""
    return QuarantineRecord(
        blake3.blake3(data).digest(), data, reason, f"refused: {reason}", seen, seen
    )


def forged(change: Change) -> bytes:
    """``change`` with one bit of its signature (its last bytes) flipped."""
    out = bytearray(change.data)
    out[-1] ^= 1
    return bytes(out)


@dataclass(frozen=True, slots=True)
class Feeds:
    """Two authors' feeds of real changes (each one claim per change, in seq order)."""

    alice: tuple[Change, ...]
    bob: tuple[Change, ...]


def _feed(seed: int, who: str, n: int) -> tuple[Change, ...]:
    replica = Replica.memory(
        space=INFO.space, key=SigningKey.from_seed(bytes([seed]) * 32), clock=_Ticks()
    )
    for i in range(n):
        replica.add_claim(f"team/{who}/fact{i}", f"{who} value {i}")
    changes = [replica.log.get(cid) for cid in replica.change_ids()]
    out = sorted((c for c in changes if c is not None), key=lambda c: c.seq)
    replica.close()
    return tuple(Change(c.change_id, c.data, c.author, c.seq, c.prev) for c in out)


class _Ticks:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


@functools.cache
def feeds() -> Feeds:
    """The same changes for every test of a run (signing is the slow part)."""
    return Feeds(alice=_feed(1, "alice", 8), bob=_feed(2, "bob", 4))
