"""A redacted claim as the audit shows it: who redacted it, when and why, never what.

A redaction (SEMANTICS §10) deletes a claim's body, and with it the only place its key and
value were written. The audit (a key's `history`, a conflict's lifecycle) must still say that
something was redacted there. So a replica that cuts a body it held keeps, in its own store,
a small record of where the claim was: the claim's id, author and lamport, and two digests,
one of its key (`key_digest`) and one of its key and scope (its locus, `state.locus_of`,
computed by the caller: this module stays below the State).
Digests, not the text: they let this replica match a key or a locus someone names, they never
spell the key out, and the value is never kept in any form.

The record is local: a replica that never held the body (it synced after the redaction, or
the body reached it only after the redaction, and was dropped on receipt) has no such record.
It still counts the redaction and lists it (`held` is False): which key it was at is not
known there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import blake3

from statefuse.core.keytext import Key
from statefuse.registry.value import encode_value

#: Domain of `key_digest` (distinct from a locus').
KEY_DOMAIN = b"statefuse.redacted-key.v1\x00"


def key_digest(namespace: str, subject: str, predicate: str) -> bytes:
    """``blake3(key)``: how the audit record of a redacted claim names its key."""
    return blake3.blake3(KEY_DOMAIN + encode_value([namespace, subject, predicate])).digest()


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a claim whose body this replica cut was (kept in its store): its author and
    lamport, and digests of its key and of its locus. Never its value or key text."""

    claim_id: bytes
    author: bytes
    lamport: int
    key: bytes
    locus: bytes

    @classmethod
    def of(cls, claim_id: bytes, author: bytes, lamport: int, key: Key, locus: bytes) -> Placed:
        """The record of a claim of ``key`` at ``locus`` (`state.locus_of` of key and scope)."""
        return cls(claim_id, author, lamport, key_digest(*key), locus)


@dataclass(frozen=True, slots=True)
class RedactedClaim:
    """One redacted op id for the audit: the redaction that counts for it (``redaction``, by
    ``by``, at ``lamport`` and ``wall_ms``, because ``reason``), and where it was (``placed``)
    when this replica held its body before cutting it, else None (``held`` is False)."""

    op_id: bytes
    by: bytes
    lamport: int
    wall_ms: int
    reason: str
    redaction: bytes
    placed: Placed | None = None

    @property
    def held(self) -> bool:
        """Whether this replica held the body (and so knows where it was)."""
        return self.placed is not None

    def at_key(self, key: Key, locus: bytes | None = None) -> bool:
        """Whether this was a claim of ``key`` (at ``locus``, when given: the key's locus in
        one scope)."""
        p = self.placed
        if p is None or p.key != key_digest(*key):
            return False
        return locus is None or p.locus == locus

    def at_locus(self, locus: bytes) -> bool:
        return self.placed is not None and self.placed.locus == locus


#: One record in the store note: claim id, author, lamport (8 bytes, big-endian), key digest,
#: locus (fixed width: a note of 10k records is 1.4 MB).
_ROW = struct.Struct(">32s32sQ32s32s")


def encode_placed(records: Iterable[Placed]) -> bytes:
    """The store note holding the records (fixed-width rows, sorted by claim id)."""
    rows = sorted({r.claim_id: r for r in records}.values(), key=lambda r: r.claim_id)
    return b"".join(_ROW.pack(r.claim_id, r.author, r.lamport, r.key, r.locus) for r in rows)


def decode_placed(data: bytes | None) -> dict[bytes, Placed]:
    """The records of a store note (empty for None; a torn tail is ignored: the audit then
    lists those redactions as not held, it never fails an open)."""
    if not data:
        return {}
    whole = len(data) - len(data) % _ROW.size
    return {row[0]: Placed(*row) for row in _ROW.iter_unpack(data[:whole])}


__all__ = ["KEY_DOMAIN", "Placed", "RedactedClaim", "decode_placed", "encode_placed", "key_digest"]
