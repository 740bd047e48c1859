"""The one door from bytes to a `VerifiedChange` (SEMANTICS §8, intrinsic checks).

Invariant: this module is the only code that builds a VerifiedChange from outside bytes, and
its verdict depends only on the bytes and the expected space — never on arrival order or on what
else the replica holds — so every replica reaches the same verdict for the same bytes. Checks
that need other changes (the ``prev`` link, trust, equivocation) happen later, in the change log.

Every failure is a `VerificationError` carrying a `QuarantineReason`: the caller quarantines the
bytes with that reason; nothing is dropped in silence.

The door has two halves with one contract. `verify_change_reference` runs each check plainly,
one op at a time. `verify_change` (and `verify_changes`, for many changes at once) decodes the
envelope and the ops in batches with C-level passes, and hands any input its batch paths cannot
vouch for to the reference steps, so its verdicts, reasons and messages are the reference's;
tests compare the two on damaged bytes. Only the batch paths are fast enough for ingest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from itertools import chain
from operator import attrgetter

import msgpack

from statefuse.core.op import ID_BYTES, Op, decode_op, decode_ops_fast
from statefuse.registry.error import InputError, StateFuseError
from statefuse.registry.value import INT_MAX, INT_MIN, decode_value
from statefuse.sync.change import (
    CHANGE_FORMAT_VERSION,
    CHANGE_FORMATS,
    LEGACY_CHANGE_FORMAT,
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    MAX_SPACE_CHARS,
    UnverifiedChange,
    VerifiedChange,
    change_id_of,
    signed_message,
)
from statefuse.sync.key import SIGNATURE_BYTES, PublicKeyError, verify_signature


class QuarantineReason(Enum):
    """Why bytes were refused at the merge boundary. The value is stable (stored, reported)."""

    OVERSIZED = "oversized"
    MALFORMED = "malformed"
    VERSION = "unsupported-version"
    WRONG_SPACE = "wrong-space"
    BAD_AUTHOR_KEY = "bad-author-key"
    BAD_SIGNATURE = "bad-signature"
    BAD_OP = "bad-op"
    OP_ID_MISMATCH = "op-id-mismatch"
    OP_AUTHOR_MISMATCH = "op-author-mismatch"
    BAD_SEQUENCE = "bad-sequence"
    BROKEN_CHAIN = "broken-chain"
    EMPTY_CHANGE = "empty-change"
    TOO_MANY_OPS = "too-many-ops"


class VerificationError(StateFuseError, ValueError):
    """Bytes that are not a valid signed change; ``reason`` says which rule, for quarantine."""

    def __init__(self, reason: QuarantineReason, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"{reason.value}: {message}")

    def __reduce__(self) -> tuple[type[VerificationError], tuple[QuarantineReason, str]]:
        return (type(self), (self.reason, self.message))


def _fail(reason: QuarantineReason, message: str) -> VerificationError:
    return VerificationError(reason, message)


def _map(
    raw: object, what: str, keys: set[str], versions: tuple[int, ...] = CHANGE_FORMATS
) -> dict[str, object]:
    if type(raw) is not dict:
        raise _fail(QuarantineReason.MALFORMED, f"{what} is not a map")
    version = raw.get("v")
    if type(version) is not int or version not in versions:
        raise _fail(QuarantineReason.VERSION, f"{what} has unsupported version {version!r}")
    if set(raw) != keys:
        raise _fail(
            QuarantineReason.MALFORMED,
            f"{what} fields {sorted(raw)} differ from {sorted(keys)}",
        )
    return raw


def _id(value: object, what: str) -> bytes:
    if type(value) is not bytes or len(value) != ID_BYTES:
        raise _fail(QuarantineReason.MALFORMED, f"{what} is not a {ID_BYTES}-byte id")
    return value


class _Decoding(Enum):
    """How `_verify` decodes: through the batch fast paths (falling back to the reference code
    whenever they cannot vouch for the input) or through the reference code only."""

    FAST = "fast"
    REFERENCE = "reference"


def verify_change(change: UnverifiedChange, *, space: str) -> VerifiedChange:
    """Check ``change`` completely and return it as a VerifiedChange.

    Checks, in order: size; canonical encoding and schema of the signed change and of the
    change; version; space; seq/prev consistency; the author's key (not small-order or
    degenerate); the op count; the signature over the change id; every op's canonical bytes,
    recomputed id and author. Raises VerificationError with the QuarantineReason of the first
    failed check.

    Same verdicts, reasons and messages as `verify_change_reference`, faster: the envelope and
    the ops are decoded in batches, and any input the batch paths cannot vouch for goes through
    the reference steps.
    """
    return _verify(change, space, _Decoding.FAST)


def verify_change_reference(change: UnverifiedChange, *, space: str) -> VerifiedChange:
    """`verify_change` through the plain reference decoders only: the oracle the fast paths
    are tested against. Same contract."""
    return _verify(change, space, _Decoding.REFERENCE)


def verify_changes(
    changes: Iterable[UnverifiedChange], *, space: str
) -> list[VerifiedChange | VerificationError]:
    """`verify_change` on each change, in order: the VerifiedChange, or the VerificationError
    it raises. Same results, faster for many small changes: the ops of consecutive changes are
    decoded in shared batches, so the per-batch cost is paid once for them all."""
    results: list[VerifiedChange | VerificationError | None] = []
    group: list[tuple[int, _Signed]] = []
    ops_in_group = 0
    for change in changes:
        try:
            signed = _signed_part(change, space, _Decoding.FAST)
        except VerificationError as exc:
            results.append(exc)
            continue
        group.append((len(results), signed))
        results.append(None)  # settled with its group
        ops_in_group += len(signed.raw_ops)
        if ops_in_group >= _SHARED_BATCH_OPS:
            _settle(group, results)
            group, ops_in_group = [], 0
    _settle(group, results)
    return [r for r in results if r is not None]


#: Ops per shared batch in `verify_changes`: enough to spread the per-batch cost thin, few enough
#: that a batch's working set stays in cache.
_SHARED_BATCH_OPS = 256


def _verify(change: UnverifiedChange, space: str, decoding: _Decoding) -> VerifiedChange:
    signed = _signed_part(change, space, decoding)
    ops = _ops_fast(signed.raw_ops, signed.author) if decoding is _Decoding.FAST else None
    return signed.with_ops(_ops(signed.raw_ops, signed.author) if ops is None else ops)


@dataclass(frozen=True, slots=True)
class _Signed:
    """A change whose every check but the ops' passed (envelope, fields, signature)."""

    space: str
    author: bytes
    seq: int
    prev: bytes | None
    registry: bytes
    raw_ops: list[object]
    change_id: bytes
    signature: bytes
    data: bytes
    #: Every op id the change lists (format 2); () for format 1 (the ids of ``raw_ops``).
    op_ids: tuple[bytes, ...] = ()
    version: int = LEGACY_CHANGE_FORMAT

    def with_ops(self, ops: list[Op]) -> VerifiedChange:
        return VerifiedChange(
            space=self.space,
            author=self.author,
            seq=self.seq,
            prev=self.prev,
            registry=self.registry,
            ops=tuple(ops),
            change_id=self.change_id,
            signature=self.signature,
            data=self.data,
            op_ids=self.op_ids,
            version=self.version,
        )


def _signed_part(change: UnverifiedChange, space: str, decoding: _Decoding) -> _Signed:
    """Every check of `verify_change` up to and including the signature, in its order."""
    data = change.data
    if type(data) is not bytes:
        raise _fail(QuarantineReason.MALFORMED, "a change must be bytes")
    if len(data) > MAX_CHANGE_BYTES:
        raise _fail(QuarantineReason.OVERSIZED, f"{len(data)} bytes exceeds {MAX_CHANGE_BYTES}")
    envelope = _envelope_fast(data) if decoding is _Decoding.FAST else None
    outer, body, inner = _envelope(data) if envelope is None else envelope
    version = outer["v"]
    signature = outer["sig"]
    if type(signature) is not bytes or len(signature) != SIGNATURE_BYTES:
        raise _fail(QuarantineReason.MALFORMED, f"signature is not {SIGNATURE_BYTES} bytes")

    got_space = inner["space"]
    if type(got_space) is not str or not 0 < len(got_space) <= MAX_SPACE_CHARS:
        raise _fail(QuarantineReason.MALFORMED, "space is not a short non-empty str")
    if got_space != space:
        raise _fail(
            QuarantineReason.WRONG_SPACE, f"change is for space {got_space!r}, not {space!r}"
        )
    seq, prev = inner["seq"], inner["prev"]
    if type(seq) is not int or seq < 1:
        raise _fail(QuarantineReason.BAD_SEQUENCE, f"seq must be an int >= 1, got {seq!r}")
    if (seq == 1) != (prev is None):
        raise _fail(
            QuarantineReason.BAD_SEQUENCE,
            "seq 1 has no prev, and every later seq names its prev",
        )
    if prev is not None:
        prev = _id(prev, "prev")
    registry = _id(inner["registry"], "registry fingerprint")
    author = inner["author"]
    if type(author) is not bytes:
        raise _fail(QuarantineReason.MALFORMED, "author is not bytes")

    raw_ops = inner["ops"]
    if type(raw_ops) is not list:
        raise _fail(QuarantineReason.MALFORMED, "ops is not a list")
    if not raw_ops:
        raise _fail(QuarantineReason.EMPTY_CHANGE, "a change holds at least one op")
    if len(raw_ops) > MAX_OPS_PER_CHANGE:
        raise _fail(
            QuarantineReason.TOO_MANY_OPS, f"{len(raw_ops)} ops exceeds {MAX_OPS_PER_CHANGE}"
        )
    op_ids: tuple[bytes, ...] = ()
    if version == CHANGE_FORMAT_VERSION:
        op_ids, raw_ops = _listed_bodies(raw_ops, outer["ops"])

    change_id = change_id_of(body)
    try:
        if not verify_signature(author, signature, signed_message(change_id)):
            raise _fail(QuarantineReason.BAD_SIGNATURE, "signature does not verify")
    except PublicKeyError as exc:
        raise _fail(QuarantineReason.BAD_AUTHOR_KEY, str(exc)) from None
    return _Signed(
        got_space,
        author,
        seq,
        prev,
        registry,
        raw_ops,
        change_id,
        signature,
        data,
        op_ids,
        version,  # type: ignore[arg-type]
    )


def _listed_bodies(ids: list[object], bodies: object) -> tuple[tuple[bytes, ...], list[object]]:
    """Format 2: the signed op ids, and ``[op_id, body]`` pairs for the bodies present (each is
    then checked against its id as in format 1; a missing body is ``nil``)."""
    if type(bodies) is not list or len(bodies) != len(ids):
        raise _fail(QuarantineReason.MALFORMED, "ops bodies do not match the listed op ids")
    listed = tuple(_id(op_id, f"ops[{i}] id") for i, op_id in enumerate(ids))
    pairs: list[object] = []
    for i, body in enumerate(bodies):
        if body is None:
            continue
        if type(body) is not bytes:
            raise _fail(QuarantineReason.MALFORMED, f"ops[{i}] body is neither bytes nor nil")
        pairs.append([listed[i], body])
    return listed, pairs


def _settle(
    group: list[tuple[int, _Signed]], results: list[VerifiedChange | VerificationError | None]
) -> None:
    """Decode the ops of ``group`` in one batch and put each change's verdict at its place; a
    change the shared batch cannot settle takes the one-change path."""
    if not group:
        return
    shared: list[Op] | None = None
    if all(_pairs_of_bytes(s.raw_ops) for _, s in group):
        shared = decode_ops_fast([item[1] for _, s in group for item in s.raw_ops])  # type: ignore[index]
    start = 0
    for i, signed in group:
        n = len(signed.raw_ops)
        if shared is None:
            ops = _ops_fast(signed.raw_ops, signed.author)
        else:
            ops = shared[start : start + n]
            start += n
            if not _ids_and_author_match(ops, signed.raw_ops, signed.author):
                ops = None  # the reference step finds and reports the first bad op
        try:
            results[i] = signed.with_ops(
                _ops(signed.raw_ops, signed.author) if ops is None else ops
            )
        except VerificationError as exc:
            results[i] = exc


_Envelope = tuple[dict[str, object], bytes, dict[str, object]]
_SIGNED_KEYS = ("change", "sig", "v")
_SIGNED_KEYS_2 = ("change", "ops", "sig", "v")
_CHANGE_KEYS = ("author", "ops", "prev", "registry", "seq", "space", "v")


def _envelope(data: bytes) -> _Envelope:
    """The signed change and the change it carries, decoded strictly (the reference step)."""
    try:
        raw = decode_value(data, "signed")
        version = raw.get("v") if type(raw) is dict else None
        keys = _SIGNED_KEYS_2 if version == CHANGE_FORMAT_VERSION else _SIGNED_KEYS
        outer = _map(raw, "signed change", set(keys))
        body = outer["change"]
        if type(body) is not bytes:
            raise _fail(QuarantineReason.MALFORMED, "change body is not bytes")
        inner = _map(decode_value(body, "change"), "change", set(_CHANGE_KEYS), (outer["v"],))  # type: ignore[arg-type]
    except InputError as exc:
        raise _fail(QuarantineReason.MALFORMED, str(exc)) from None
    return outer, body, inner


def _envelope_fast(data: bytes) -> _Envelope | None:
    """What `_envelope` returns, if the input has the expected shape and `_envelope` would
    accept it; else None (then `_envelope` decides).

    The reference decoder walks every item of the op list in Python to check the value model;
    here the shape is checked with C-level passes (every field of an exact type, the op list of
    ``[bytes, bytes]`` pairs, no more items than a change may hold, keys in canonical order),
    which implies the value model, and canonical form is checked by packing back. Both inputs
    are at most MAX_CHANGE_BYTES, so no string in them can exceed the strict decoder's limit.
    """
    try:
        outer = msgpack.unpackb(data)
        if type(outer) is not dict:
            return None
        keys = tuple(outer)
        if keys == _SIGNED_KEYS:
            body, signature, outer_version = outer.values()
            bodies = None
        elif keys == _SIGNED_KEYS_2:
            body, bodies, signature, outer_version = outer.values()
            if type(bodies) is not list or not all(b is None or type(b) is bytes for b in bodies):
                return None
        else:
            return None
        if type(body) is not bytes or type(signature) is not bytes:
            return None
        if type(outer_version) is not int or outer_version not in CHANGE_FORMATS:
            return None
        if (bodies is None) != (outer_version == LEGACY_CHANGE_FORMAT):
            return None
        inner = msgpack.unpackb(body)
    except Exception:  # any unpacking trouble is the reference decoder's to name
        return None
    if type(inner) is not dict or tuple(inner) != _CHANGE_KEYS:
        return None
    author, ops, prev, registry, seq, space, version = inner.values()
    if type(version) is not int or version != outer_version:
        return None
    if type(author) is not bytes or type(registry) is not bytes or type(space) is not str:
        return None
    if prev is not None and type(prev) is not bytes:
        return None
    if type(seq) is not int or not INT_MIN <= seq <= INT_MAX:
        return None
    if type(ops) is not list or len(ops) > MAX_OPS_PER_CHANGE:
        return None
    if bodies is not None:
        if set(map(type, ops)) - {bytes} or len(bodies) != len(ops):
            return None
    elif ops and (
        set(map(type, ops)) != {list}
        or set(map(len, ops)) != {2}
        or set(map(type, chain.from_iterable(ops))) != {bytes}
    ):
        return None
    if _pack(inner) != body or _pack(outer) != data:
        return None
    return outer, body, inner


def _pack(value: object) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True, use_single_float=False)
    return packed


def _ops(raw_ops: list[object], author: bytes) -> list[Op]:
    """Every op checked in order (the reference step): the first failure is reported."""
    ops = []
    for i, item in enumerate(raw_ops):
        if type(item) is not list or len(item) != 2 or type(item[1]) is not bytes:
            raise _fail(QuarantineReason.MALFORMED, f"ops[{i}] is not [op_id, op bytes]")
        claimed = _id(item[0], f"ops[{i}] id")
        try:
            op = decode_op(item[1])
        except StateFuseError as exc:
            raise _fail(QuarantineReason.BAD_OP, f"ops[{i}]: {exc}") from None
        if op.op_id != claimed:
            raise _fail(
                QuarantineReason.OP_ID_MISMATCH,
                f"ops[{i}] claims id {claimed.hex()} but hashes to {op.op_id.hex()}",
            )
        if op.author != author:
            raise _fail(
                QuarantineReason.OP_AUTHOR_MISMATCH,
                f"ops[{i}] is by {op.author!r}, not by the change author",
            )
        ops.append(op)
    return ops


def _ops_fast(raw_ops: list[object], author: bytes) -> list[Op] | None:
    """What `_ops` returns, if every op is well formed, has the claimed id and is by
    ``author``; else None (then `_ops` finds and reports the first failure)."""
    if not _pairs_of_bytes(raw_ops):
        return None
    ops = decode_ops_fast([item[1] for item in raw_ops])  # type: ignore[index]
    if ops is None or not _ids_and_author_match(ops, raw_ops, author):
        return None
    return ops


def _pairs_of_bytes(raw_ops: list[object]) -> bool:
    """Whether every item is ``[bytes, bytes]`` with a first item of an id's length."""
    if set(map(type, raw_ops)) != {list} or set(map(len, raw_ops)) != {2}:  # type: ignore[arg-type]
        return False
    claimed, datas = zip(*raw_ops, strict=True)
    return (
        set(map(type, claimed)) == {bytes}
        and set(map(len, claimed)) == {ID_BYTES}
        and set(map(type, datas)) == {bytes}
    )


def _ids_and_author_match(ops: list[Op], raw_ops: list[object], author: bytes) -> bool:
    claimed = [item[0] for item in raw_ops]  # type: ignore[index]
    return list(map(_op_id, ops)) == claimed and list(map(_author, ops)).count(author) == len(ops)


_op_id = attrgetter("op_id")
_author = attrgetter("author")
