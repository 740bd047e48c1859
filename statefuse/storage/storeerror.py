"""The error a store raises when it cannot be used as asked.

Apart from `statefuse.storage.store` so that the derived state (`statefuse.storage.storeindex`),
which the Store contract names, raises it without importing the contract.
"""

from __future__ import annotations

from statefuse.registry.error import InputError


class StoreError(InputError, RuntimeError):
    """A store that cannot be used as asked. ``rule`` says why: ``no-such-store``,
    ``not-a-store`` (a foreign file, left untouched), ``store-unreadable`` (SQLite cannot read
    it), ``schema-version`` (a newer release), ``busy`` (other writers held the write lock past
    the wait), ``store-replaced`` (another process rebuilt the file since this open), ``readonly``
    (a write on a read-only open), ``repair-plan``, ``sqlite-error``, …"""
