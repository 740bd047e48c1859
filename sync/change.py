"""Changes: the unit of authorship, signing and sync (SEMANTICS §8).

A change is one author's batch of ops in one shared memory (``space``), numbered ``seq`` from 1
per author and linked to the author's previous change by ``prev`` (its change id), so an author's
changes form a hash-chained feed. ``change_id`` is blake3 of the change's canonical encoding; the
author signs ``SIGNATURE_DOMAIN ‖ change_id`` with Ed25519. The signature is not part of the id,
so a change has one id however it travels.

Invariant: a `VerifiedChange` exists only if `sync.verify.verify_change` accepted its bytes;
everything received from outside is an `UnverifiedChange` (just bytes) until then.

Wire format 2 (what this release writes), canonical msgpack::

    signed change = {"change": <header bytes>, "ops": [op bytes | nil, ...],
                     "sig": <64 bytes>, "v": 2}
    header        = {"author": <32 bytes>, "ops": [op_id, ...],
                     "prev": <32 bytes> | nil, "registry": <32 bytes>, "seq": int >= 1,
                     "space": str, "v": 2}

``change_id`` is blake3 of the header, which names the op ids only: the signature covers the ids,
and the op bodies travel beside the header, one per id, in order. A body may be missing (``nil``:
redacted, SEMANTICS §10), and the change still verifies; a body present must hash to its id.

Wire format 1 (every release before this one), still read and verified exactly as before::

    signed change = {"change": <change bytes>, "sig": <64 bytes>, "v": 1}
    change        = {"author": <32 bytes>, "ops": [[op_id, op bytes], ...],
                     "prev": <32 bytes> | nil, "registry": <32 bytes>, "seq": int >= 1,
                     "space": str, "v": 1}

In format 1 the id hashes the op bodies too, so none can be removed without breaking the
signature. A peer of a release that reads format 1 only refuses a format-2 change at its
door: it quarantines it with reason ``unsupported-version`` ("signed change has unsupported
version 2") and reports it; it merges nothing of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import blake3

from statefuse.core.op import Op
from statefuse.registry.error import InputError
from statefuse.registry.value import (
    MAX_STRING_BYTES,
    Value,
    canonical_value,
    encode_canonical,
    encode_value,
)
from statefuse.sync.key import SigningKey

#: Version of the change and signed-change encodings this release writes.
CHANGE_FORMAT_VERSION = 2
#: The first format (ids hash the op bodies): read and verified, never written any more.
LEGACY_CHANGE_FORMAT = 1
#: Every format this release reads.
CHANGE_FORMATS = (LEGACY_CHANGE_FORMAT, CHANGE_FORMAT_VERSION)
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
    #: Every op id the change lists, in order (format 2 signs these; in format 1 they are the
    #: ids of ``ops``). Ids of ops whose bodies are missing are here but not in ``ops``.
    op_ids: tuple[bytes, ...] = ()
    #: The change's format version.
    version: int = LEGACY_CHANGE_FORMAT

    def __post_init__(self) -> None:
        if not self.op_ids:
            object.__setattr__(self, "op_ids", tuple(op.op_id for op in self.ops))

    @property
    def missing(self) -> frozenset[bytes]:
        """The ids of the ops whose bodies this copy does not carry (redacted, SEMANTICS §10)."""
        if len(self.op_ids) == len(self.ops):
            return frozenset()
        return frozenset(self.op_ids) - {op.op_id for op in self.ops}

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
    """The canonical bytes of a format-1 change (what its ``change_id`` hashes).

    This release writes format 2 (`change_header`); format 1 stays for reading, and for tests
    that stand for an earlier release. ``datas``, when given, are the ops' encodings
    (``op.encode()``, in order), for a caller that already has them: the envelope is
    validated, the op bytes are taken as given.
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
        "v": LEGACY_CHANGE_FORMAT,
    }
    body = canonical_value(head, "change")
    assert isinstance(body, dict)
    body["ops"] = [[op.op_id, d] for op, d in zip(ops, datas, strict=True)]
    return encode_canonical(body, "change")


def stripped(change: VerifiedChange, drop: frozenset[bytes] | set[bytes]) -> VerifiedChange:
    """``change`` without the bodies of the ops in ``drop`` (format 2 only; see
    `without_bodies`): same id, signature and op ids, fewer ops."""
    from dataclasses import replace

    return replace(
        change,
        ops=tuple(op for op in change.ops if op.op_id not in drop),
        data=without_bodies(change, drop),
    )


def change_id_of(body: bytes) -> bytes:
    return blake3.blake3(body).digest()


def claimed_change_id(data: bytes) -> bytes | None:
    """The id of the change that signed-change bytes ``data`` claim to be, or None when they
    are no signed change or, in format 2, a body they carry does not hash to the op id the
    header lists for it (the header alone names the change there, so bytes joined from a
    forged chunk of the bodies would otherwise pass for the change). Only the envelope, the
    header and the bodies' hashes are read: `sync.verify` checks the rest."""
    from statefuse.registry.value import decode_value

    try:
        outer = decode_value(data, "signed")
    except (InputError, ValueError, TypeError):
        return None
    body = outer.get("change") if isinstance(outer, dict) else None
    if not isinstance(body, bytes):
        return None
    assert isinstance(outer, dict)
    if outer.get("v") == CHANGE_FORMAT_VERSION:
        try:
            header = decode_value(body, "change")
        except (InputError, ValueError, TypeError):
            return None
        ids = header.get("ops") if isinstance(header, dict) else None
        bodies = outer.get("ops")
        if not isinstance(ids, list) or not isinstance(bodies, list) or len(ids) != len(bodies):
            return None
        for op_id, op in zip(ids, bodies, strict=True):
            if op is not None and (
                not isinstance(op, bytes) or blake3.blake3(op).digest() != op_id
            ):
                return None
    return change_id_of(body)


def signed_message(change_id: bytes) -> bytes:
    """The exact bytes an author signs for a change."""
    return SIGNATURE_DOMAIN + change_id


def wire(body: bytes, signature: bytes) -> bytes:
    """The signed-change bytes of a format-1 change (`change_body`)."""
    return encode_value({"change": body, "sig": signature, "v": LEGACY_CHANGE_FORMAT}, "signed")


def change_header(
    *,
    space: str,
    author: bytes,
    seq: int,
    prev: bytes | None,
    registry: bytes,
    op_ids: Sequence[bytes],
) -> bytes:
    """The canonical header of a format-2 change: what its ``change_id`` hashes (the op ids,
    never the bodies, so a body can be deleted and the change still verifies)."""
    head: dict[str, Value] = {
        "author": author,
        "ops": list(op_ids),
        "prev": prev,
        "registry": registry,
        "seq": seq,
        "space": space,
        "v": CHANGE_FORMAT_VERSION,
    }
    return encode_canonical(canonical_value(head, "change"), "change")


def wire_with_bodies(header: bytes, signature: bytes, bodies: Sequence[bytes | None]) -> bytes:
    """The signed-change bytes of a format-2 change: the header, then one body per op id
    (``None`` for a body this copy does not carry)."""
    outer: dict[str, Value] = {
        "change": header,
        "ops": list(bodies),
        "sig": signature,
        "v": CHANGE_FORMAT_VERSION,
    }
    return encode_value(outer, "signed")


def without_bodies(change: VerifiedChange, drop: frozenset[bytes] | set[bytes]) -> bytes:
    """The bytes of ``change`` without the bodies of the ops in ``drop`` (same id, same
    signature: it still verifies). Only a format-2 change can lose bodies: for format 1 this
    raises ChangeInputError (its id hashes the bodies)."""
    if change.version != CHANGE_FORMAT_VERSION:
        raise ChangeInputError(
            "change", "format-2", f"a format-{change.version} change cannot lose op bodies"
        )
    from statefuse.registry.value import decode_value

    outer = decode_value(change.data, "signed")
    assert isinstance(outer, dict)
    header = outer["change"]
    assert isinstance(header, bytes)
    by_id = {op.op_id: op for op in change.ops}
    bodies: list[bytes | None] = [
        None if i in drop or i not in by_id else by_id[i].encode() for i in change.op_ids
    ]
    return wire_with_bodies(header, change.signature, bodies)


def sign_change(
    key: SigningKey,
    *,
    space: str,
    seq: int,
    prev: bytes | None,
    registry: bytes,
    ops: Sequence[Op],
    version: int = CHANGE_FORMAT_VERSION,
) -> VerifiedChange:
    """Sign a batch of one's own ops as one change and check it like any received change.

    ``version`` is the change format: this release writes 2; 1 writes a change as the releases
    before it did (for tests and tools that stand for them).

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
    if version == LEGACY_CHANGE_FORMAT:
        body = change_body(
            space=space, author=key.author, seq=seq, prev=prev, registry=registry, ops=ops
        )
        signature = key.sign(signed_message(change_id_of(body)))
        return verify_change(UnverifiedChange(wire(body, signature)), space=space)
    if version != CHANGE_FORMAT_VERSION:
        raise ChangeInputError("version", "supported", f"no change format {version!r}")
    header = change_header(
        space=space,
        author=key.author,
        seq=seq,
        prev=prev,
        registry=registry,
        op_ids=[op.op_id for op in ops],
    )
    signature = key.sign(signed_message(change_id_of(header)))
    data = wire_with_bodies(header, signature, [op.encode() for op in ops])
    return verify_change(UnverifiedChange(data), space=space)
