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


#: The fixed part of one record in the store note: the claim's id, author, lamport (8 bytes,
#: big-endian), key digest and locus; the redaction's id, author, lamport and clock; the length
#: of its reason (UTF-8), which follows. A record is whole: history reads the note alone, never
#: the store's history (a lazily opened store stays lazy).
_ROW = struct.Struct(">32s32sQ32s32s32s32sQQI")


def encode_held(records: Iterable[RedactedClaim]) -> bytes:
    """The store note holding the records of placed redacted claims (sorted by claim id)."""
    out: list[bytes] = []
    for r in sorted({r.op_id: r for r in records if r.placed}.values(), key=lambda r: r.op_id):
        p = r.placed
        assert p is not None
        why = r.reason.encode()
        out.append(
            _ROW.pack(
                p.claim_id,
                p.author,
                p.lamport,
                p.key,
                p.locus,
                r.redaction,
                r.by,
                r.lamport,
                r.wall_ms,
                len(why),
            )
            + why
        )
    return b"".join(out)


def decode_held(data: bytes | None) -> dict[bytes, RedactedClaim]:
    """The records of a store note (empty for None; a torn tail is ignored: the audit then
    lists those redactions as not held, it never fails an open)."""
    out: dict[bytes, RedactedClaim] = {}
    at = 0
    while data and at + _ROW.size <= len(data):
        cid, author, lamport, key, locus, red, by, r_lamport, wall, n = _ROW.unpack_from(data, at)
        at += _ROW.size
        if at + n > len(data):
            break
        why = data[at : at + n].decode(errors="replace")
        at += n
        placed = Placed(cid, author, lamport, key, locus)
        out[cid] = RedactedClaim(cid, by, r_lamport, wall, why, red, placed)
    return out


__all__ = ["KEY_DOMAIN", "Placed", "RedactedClaim", "decode_held", "encode_held", "key_digest"]
