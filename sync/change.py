"""Changes: the unit of authorship, signing and sync (SEMANTICS §8).

A change is one author's batch of ops in one shared memory (``space``), numbered ``seq`` from 1
per author and linked to the author's previous change by ``prev`` (its change id), so an author's
changes form a hash-chained feed. ``change_id`` is blake3 of the change's canonical encoding; the
author signs ``SIGNATURE_DOMAIN ‖ change_id`` with Ed25519. The signature is not part of the id,
so a change has one id however it travels.

Invariant: a `VerifiedChange` exists only if `sync.verify.verify_change` accepted its bytes;
everything received from outside is an `UnverifiedChange` (just bytes) until then.

Wire format (version 1), canonical msgpack::

    signed change = {"change": <change bytes>, "sig": <64 bytes>, "v": 1}
    change        = {"author": <32 bytes>, "ops": [[op_id, op bytes], ...],
                     "prev": <32 bytes> | nil, "registry": <32 bytes>, "seq": int >= 1,
                     "space": str, "v": 1}

Ops travel as their canonical bytes next to the id the author claims for them; the verifier
recomputes every id from the bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import blake3

from statefuse.op import Op
from statefuse.registry.error import InputError
from statefuse.registry.value import (
    MAX_STRING_BYTES,
    Value,
    canonical_value,
    encode_canonical,
    encode_value,
)
from statefuse.sync.key import SigningKey

#: Version of the change and signed-change encodings.
CHANGE_FORMAT_VERSION = 1
#: What an author's signature covers, before the change id (domain separation: a signature made
#: for a change can never be mistaken for a signature over anything else).
SIGNATURE_DOMAIN = b"statefuse/change-signature/v1:"
#: Most ops in one change (below the decoder's container limit, so the verifier, not the decoder,
#: names this rule).
MAX_OPS_PER_CHANGE = 4096
#: Longest signed change accepted, in bytes: the change body travels as one bytes value, which
#: the canonical decoder caps at MAX_STRING_BYTES.
MAX_CHANGE_BYTES = MAX_STRING_BYTES
#: Longest space name, in characters.
MAX_SPACE_CHARS = 256


class ChangeInputError(InputError, TypeError):
    """Something that is not bytes handed over as a change."""


@dataclass(frozen=True, slots=True)
class UnverifiedChange:
    """Bytes that claim to be a signed change: what arrives from a peer, a bundle or a store.

    Any bytes-like input is copied to immutable ``bytes``, so what is verified (and possibly
    quarantined) can never change behind the verifier's back. Raises ChangeInputError for input
    that is not bytes-like.
    """

    data: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.data, (bytes, bytearray, memoryview)):
            raise ChangeInputError(
                "change", "bytes-like", f"a change is bytes, got {type(self.data).__name__}"
            )
        if type(self.data) is not bytes:
            object.__setattr__(self, "data", bytes(self.data))

    @property
    def key(self) -> bytes:
        """blake3 of the bytes: how quarantine names this exact copy (never by a claimed id)."""
        return blake3.blake3(self.data).digest()


@dataclass(frozen=True, slots=True)
class VerifiedChange:
    """A change whose bytes, ids, author, signature and limits were checked.

    Build one only through `sync.verify.verify_change` (or `sign_change` for your own ops).
    """

    space: str
    author: bytes
    seq: int
    prev: bytes | None
    registry: bytes
    ops: tuple[Op, ...]
    change_id: bytes
    signature: bytes
    data: bytes = field(repr=False)

    def __hash__(self) -> int:
        return hash(self.change_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VerifiedChange):
            return NotImplemented
        return self.change_id == other.change_id and self.signature == other.signature


def change_body(
    *,
    space: str,
    author: bytes,
    seq: int,
    prev: bytes | None,
    registry: bytes,
    ops: Sequence[Op],
    datas: Sequence[bytes] | None = None,
) -> bytes:
    """The canonical bytes of a change (what ``change_id`` hashes).

    ``datas``, when given, are the ops' encodings (``op.encode()``, in order), for a caller that
    already has them: the envelope is validated, the op bytes are taken as given.
    """
    if datas is None:
        datas = [op.encode() for op in ops]
    elif len(datas) != len(ops):
        raise ChangeInputError("datas", "one-per-op", "datas must hold one encoding per op")
    head: dict[str, Value] = {
        "author": author,
        "ops": [],
        "prev": prev,
        "registry": registry,
        "seq": seq,
        "space": space,
        "v": CHANGE_FORMAT_VERSION,
    }
    body = canonical_value(head, "change")
    assert isinstance(body, dict)
    body["ops"] = [[op.op_id, d] for op, d in zip(ops, datas, strict=True)]
    return encode_canonical(body, "change")


def change_id_of(body: bytes) -> bytes:
    return blake3.blake3(body).digest()


def signed_message(change_id: bytes) -> bytes:
    """The exact bytes an author signs for a change."""
    return SIGNATURE_DOMAIN + change_id


def wire(body: bytes, signature: bytes) -> bytes:
    """The signed-change bytes that travel and are stored."""
    return encode_value({"change": body, "sig": signature, "v": CHANGE_FORMAT_VERSION}, "signed")


def sign_change(
    key: SigningKey,
    *,
    space: str,
    seq: int,
    prev: bytes | None,
    registry: bytes,
    ops: Sequence[Op],
) -> VerifiedChange:
    """Sign a batch of one's own ops as one change and check it like any received change.

    Raises VerificationError (with the reason) if the result would not verify, e.g. an op by
    another author, a broken seq/prev pair or too many ops — the same rules peers apply.
    """
    from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change

    if len(ops) > MAX_OPS_PER_CHANGE:
        raise VerificationError(
            QuarantineReason.TOO_MANY_OPS, f"{len(ops)} ops exceeds {MAX_OPS_PER_CHANGE}"
        )
    if sum(len(op.encode()) for op in ops) > MAX_CHANGE_BYTES:
        raise VerificationError(
            QuarantineReason.OVERSIZED, f"the ops encode to more than {MAX_CHANGE_BYTES} bytes"
        )
    body = change_body(
        space=space, author=key.author, seq=seq, prev=prev, registry=registry, ops=ops
    )
    signature = key.sign(signed_message(change_id_of(body)))
    return verify_change(UnverifiedChange(wire(body, signature)), space=space)
