"""The one door from bytes to a `VerifiedChange` (SEMANTICS §8, intrinsic checks).

Invariant: `verify_change` is the only code that builds a VerifiedChange from outside bytes, and
its verdict depends only on the bytes and the expected space — never on arrival order or on what
else the replica holds — so every replica reaches the same verdict for the same bytes. Checks
that need other changes (the ``prev`` link, trust, equivocation) happen later, in the change log.

Every failure is a `VerificationError` carrying a `QuarantineReason`: the caller quarantines the
bytes with that reason; nothing is dropped in silence.
"""

from __future__ import annotations

from enum import Enum

from registry.error import InputError, StateFuseError
from registry.value import decode_value
from statefuse.op import ID_BYTES, decode_op
from sync.change import (
    CHANGE_FORMAT_VERSION,
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    MAX_SPACE_CHARS,
    UnverifiedChange,
    VerifiedChange,
    change_id_of,
    signed_message,
)
from sync.key import SIGNATURE_BYTES, PublicKeyError, verify_signature


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


def _map(raw: object, what: str, keys: set[str]) -> dict[str, object]:
    if type(raw) is not dict:
        raise _fail(QuarantineReason.MALFORMED, f"{what} is not a map")
    version = raw.get("v")
    if type(version) is not int or version != CHANGE_FORMAT_VERSION:
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


def verify_change(change: UnverifiedChange, *, space: str) -> VerifiedChange:
    """Check ``change`` completely and return it as a VerifiedChange.

    Checks, in order: size; canonical encoding and schema of the signed change and of the
    change; version; space; seq/prev consistency; the author's key (not small-order or
    degenerate); the op count; every op's canonical bytes, recomputed id and author; and the
    signature over the change id. Raises VerificationError with the QuarantineReason of the
    first failed check.
    """
    data = change.data
    if type(data) is not bytes:
        raise _fail(QuarantineReason.MALFORMED, "a change must be bytes")
    if len(data) > MAX_CHANGE_BYTES:
        raise _fail(QuarantineReason.OVERSIZED, f"{len(data)} bytes exceeds {MAX_CHANGE_BYTES}")
    try:
        outer = _map(decode_value(data, "signed"), "signed change", {"change", "sig", "v"})
        body = outer["change"]
        if type(body) is not bytes:
            raise _fail(QuarantineReason.MALFORMED, "change body is not bytes")
        inner = _map(
            decode_value(body, "change"),
            "change",
            {"author", "ops", "prev", "registry", "seq", "space", "v"},
        )
    except InputError as exc:
        raise _fail(QuarantineReason.MALFORMED, str(exc)) from None
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

    change_id = change_id_of(body)
    try:
        if not verify_signature(author, signature, signed_message(change_id)):
            raise _fail(QuarantineReason.BAD_SIGNATURE, "signature does not verify")
    except PublicKeyError as exc:
        raise _fail(QuarantineReason.BAD_AUTHOR_KEY, str(exc)) from None

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
    return VerifiedChange(
        space=got_space,
        author=author,
        seq=seq,
        prev=prev,
        registry=registry,
        ops=tuple(ops),
        change_id=change_id,
        signature=signature,
        data=data,
    )
