"""An adversarial corpus against the merge boundary, `ChangeLog.receive` (SEMANTICS §8).

Every case is what a hostile or broken peer could send, built here and deterministically: keys
from fixed seeds, writers whose clock reads 0, and msgpack packed by hand wherever the bytes must
be non-canonical. For each case the tests check

1. the exact outcome: `Status.QUARANTINED` with the exact `QuarantineReason`; for a change that
   verifies but must not count, the exact `Ignored` verdict; `DUPLICATE` for a replay, `PENDING`
   for a gap;
2. that memory did not move: the materialized digest and the accepted change ids are what they
   were before the bad input (for trust cases: the ignored change's ops are absent from
   ``log.ops()`` and the digest is that of the changes that count);
3. that quarantine keeps the exact bytes with the reason, and that the genuine change received
   afterwards is still accepted: a forged copy never blocks the genuine one.

Most attacks imitate one genuine change, alice's seq 2 (``World.alice2``), against a log that
already holds alice's seq 1 and bob's seq 1. A library bug a new case finds is pinned with
``xfail(strict=True, reason="bug: ...")`` until it is fixed, and then loses the mark.
"""

from __future__ import annotations

import hashlib
import struct
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import blake3
import msgpack
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

import statefuse.core.op
from statefuse import Op, OpSet, Writer, materialize
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.registry.value import MAX_DEPTH, decode_value
from statefuse.sync.author import AuthorNamed
from statefuse.sync.change import (
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    MAX_SPACE_CHARS,
    UnverifiedChange,
    VerifiedChange,
    change_body,
    change_id_of,
    sign_change,
    signed_message,
)
from statefuse.sync.changelog import ChangeLog, Equivocation, Ignored, Status
from statefuse.sync.key import PublicKey, PublicKeyError, SigningKey
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode, TrustWriter
from statefuse.sync.verify import (
    QuarantineReason,
    VerificationError,
    verify_change,
    verify_change_reference,
)

Q = QuarantineReason
#: NFC spelling; the NFD spelling of the same text is another space.
SPACE = "café-memory"
FP = DEFAULT_REGISTRY.fingerprint
SEEN_MS = 1_000
#: Marks a field to delete in `_edit`.
DROP = object()

#: The eight points of order dividing 8, canonically encoded (RFC 8032 §5.1.2).
SMALL_ORDER_POINTS = {
    "identity": "01" + "00" * 31,
    "order_2": "ec" + "ff" * 30 + "7f",
    "order_4_even_x": "00" * 32,
    "order_4_odd_x": "00" * 31 + "80",
    "order_8_a": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
    "order_8_a_negated": "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
    "order_8_b": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
    "order_8_b_negated": "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
}
#: Second spellings of small-order points (y not reduced mod p, or x = 0 with the sign bit set).
NON_CANONICAL_KEYS = {
    "identity_spelled_y_equals_p_plus_1": "ee" + "ff" * 30 + "7f",
    "identity_with_the_sign_bit_set": "01" + "00" * 30 + "80",
    "order_2_with_the_sign_bit_set": "ec" + "ff" * 31,
    "order_4_spelled_y_equals_p": "ed" + "ff" * 30 + "7f",
}
IDENTITY = bytes.fromhex(SMALL_ORDER_POINTS["identity"])
#: R = the identity point, S = 0: under the identity key the signature library alone accepts it
#: for every message, under the other small-order keys for a share of messages.
ZERO_STYLE_SIGNATURE = IDENTITY + bytes(32)


# --- the cast -----------------------------------------------------------------------------------


class Feed:
    """One author: a key from a fixed seed, a writer whose clock reads 0, a place in the feed."""

    def __init__(self, seed: int) -> None:
        self.seed = bytes([seed]) * 32
        self.key = SigningKey.from_seed(self.seed)
        self.author = self.key.author
        self.writer = Writer(self.author, clock=lambda: 0)
        self.trust = TrustWriter(self.author)
        self.seq = 0
        self.prev: bytes | None = None

    def claim(self, value: Any = "blue", **options: Any) -> Op:
        subject = f"item-{self.writer.lamport}"
        return self.writer.claim("corpus", subject, "colour", value, **options)

    def next(self, ops: list[Any] | None = None) -> VerifiedChange:
        """The next change of the feed (one fresh claim unless ``ops`` are given)."""
        change = self.at(self.seq + 1, self.prev, ops)
        self.seq, self.prev = change.seq, change.change_id
        return change

    def at(self, seq: int, prev: bytes | None, ops: list[Any] | None = None) -> VerifiedChange:
        """A change at a chosen place of the feed, leaving the feed as it was (for forks)."""
        ops = [self.claim()] if ops is None else ops
        return sign_change(
            self.key, space=SPACE, seq=seq, prev=prev, registry=FP, ops=ops, version=1
        )


class World:
    """alice (whose seq 2 most attacks imitate), bob, mallory and a root key, with their first
    changes. Built fresh for every case, so no case sees another's writer clocks."""

    def __init__(self) -> None:
        self.alice, self.bob, self.mallory, self.root = Feed(1), Feed(2), Feed(3), Feed(4)
        self.alice1 = self.alice.next()
        self.bob1 = self.bob.next()
        self.alice2 = self.alice.next(
            [self.alice.claim("blue"), self.alice.claim("green", confidence=0.5)]
        )
        self.alice3 = self.alice.next()

    def base_log(self) -> ChangeLog:
        """An open log holding alice's seq 1 and bob's seq 1."""
        log = ChangeLog(SPACE)
        for change in (self.alice1, self.bob1):
            assert log.receive(change.data, seen_ms=0).status is Status.ACCEPTED
        return log

    @property
    def body2(self) -> bytes:
        """The canonical change bytes of alice's seq 2 (what its id hashes)."""
        return _body_of(self.alice2)

    def fields2(self) -> dict[str, Any]:
        return decode_value(self.body2)


# --- building bytes by hand ----------------------------------------------------------------------


def _pack(value: object) -> bytes:
    """msgpack of ``value`` as given: map keys in the given order, shortest int and str forms."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _edit(fields: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of ``fields`` with ``changes`` (``DROP`` deletes), keys in canonical order."""
    out = {**fields, **changes}
    out = {k: v for k, v in out.items() if v is not DROP}
    return dict(sorted(out.items(), key=lambda kv: kv[0].encode()))


def _body_of(change: VerifiedChange) -> bytes:
    body = decode_value(change.data)["change"]
    assert isinstance(body, bytes)
    return body


def _envelope(body: object, signature: object, **changes: Any) -> bytes:
    return _pack(_edit({"change": body, "sig": signature, "v": 1}, **changes))


def _sign(key: SigningKey, body: bytes) -> bytes:
    return key.sign(signed_message(change_id_of(body)))


def _signed(body: bytes, key: SigningKey) -> bytes:
    return _envelope(body, _sign(key, body))


def _variant(w: World, *, key: SigningKey | None = None, **changes: Any) -> bytes:
    """alice's seq 2 with ``changes`` to its fields, signed by alice (or ``key``)."""
    return _signed(_pack(_edit(w.fields2(), **changes)), key or w.alice.key)


def _op_item(op_bytes: bytes) -> list[bytes]:
    """An ops entry whose claimed id is the true hash of ``op_bytes``."""
    return [blake3.blake3(op_bytes).digest(), op_bytes]


def _op_variant(w: World, **changes: Any) -> bytes:
    """alice's seq 2 with ``changes`` to the fields of its first op (id recomputed, re-signed)."""
    first = _op_item(_pack(_edit(w.alice2.ops[0].to_value(), **changes)))
    return _variant(w, ops=[first, *w.fields2()["ops"][1:]])


def _splice(data: bytes, old: bytes, new: bytes) -> bytes:
    assert data.count(old) == 1, f"{old!r} occurs {data.count(old)} times"
    return data.replace(old, new)


def _nested(depth: int) -> object:
    value: object = None
    for _ in range(depth):
        value = [value]
    return value


def _library_accepts(author: bytes, signature: bytes, message: bytes) -> bool:
    """Whether the signature library alone, without our key checks, accepts the signature."""
    try:
        Ed25519PublicKey.from_public_bytes(author).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _forged_by_weak_key(author: bytes) -> bytes:
    """A seq-1 change 'by' ``author`` under the zero-style signature. Among a few op values it
    takes the first for which the library alone accepts that signature, so that only the check
    of the author key stands between the forgery and memory."""
    writer = Writer(author, clock=lambda: 0)
    for value in range(64):
        ops = [writer.claim("corpus", "forged", "colour", value)]
        body = change_body(space=SPACE, author=author, seq=1, prev=None, registry=FP, ops=ops)
        if _library_accepts(author, ZERO_STYLE_SIGNATURE, signed_message(change_id_of(body))):
            break
    return _envelope(body, ZERO_STYLE_SIGNATURE)


# A second valid Ed25519 signature of a change needs a nonce other than RFC 8032's deterministic
# one, which the signature library never lets us choose: so sign by the book, in integers.
_P = 2**255 - 19
_L = 2**252 + 27742317777372353535851937790883648493
_D = -121665 * pow(121666, -1, _P) % _P
_BASE = (
    15112221349535400772501151409588531511454012693041857206046113283949847762202,
    46316835694926478169428394003475163141307993866256225615783033603165251855960,
)


def _point_add(p: tuple[int, int], q: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = p, q
    t = _D * x1 * x2 * y1 * y2 % _P
    x3 = (x1 * y2 + x2 * y1) * pow(1 + t, -1, _P) % _P
    y3 = (y1 * y2 + x1 * x2) * pow(1 - t, -1, _P) % _P
    return x3, y3


def _point_mul(k: int, point: tuple[int, int]) -> tuple[int, int]:
    out = (0, 1)
    while k:
        if k & 1:
            out = _point_add(out, point)
        point, k = _point_add(point, point), k >> 1
    return out


def _encode_point(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _sign_with_nonce(seed: bytes, message: bytes, nonce: int) -> tuple[bytes, bytes]:
    """(public key, signature) of ``message`` under ``seed``'s key with a chosen nonce."""
    h = hashlib.sha512(seed).digest()
    scalar = int.from_bytes(h[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    public = _encode_point(_point_mul(scalar, _BASE))
    r = _encode_point(_point_mul(nonce, _BASE))
    k = int.from_bytes(hashlib.sha512(r + public + message).digest(), "little") % _L
    return public, r + ((nonce + k * scalar) % _L).to_bytes(32, "little")


def _snapshot(log: ChangeLog) -> tuple[bytes, list[bytes], list[bytes]]:
    return (
        log.materialize().digest(),
        log.change_ids(),
        [c.change_id for c in log.pending()],
    )


def _digest_of(changes: list[VerifiedChange]) -> bytes:
    """The digest of memory holding exactly the memory ops of ``changes``."""
    ops = [op for c in changes for op in c.ops if not isinstance(op, TRUST_OP_TYPES)]
    return materialize(OpSet(ops)).digest()


# --- 1. bytes that must be quarantined ----------------------------------------------------------

QUARANTINE_CASES: list[Any] = []


def _case(
    name: str, reason: QuarantineReason, build: Callable[[World], bytes], *marks: Any
) -> None:
    QUARANTINE_CASES.append(pytest.param(build, reason, id=name, marks=marks))


def quarantined(reason: QuarantineReason, *marks: Any) -> Callable[[Any], Any]:
    """Register the decorated builder as a case named after it, expecting ``reason``."""

    def register(build: Callable[[World], bytes]) -> Callable[[World], bytes]:
        _case(build.__name__, reason, build, *marks)
        return build

    return register


# Signatures.


@quarantined(Q.BAD_SIGNATURE)
def another_key_signs_the_authors_change(w: World) -> bytes:
    return _signed(w.body2, w.mallory.key)


@quarantined(Q.BAD_SIGNATURE)
def one_bit_of_the_signature_is_flipped(w: World) -> bytes:
    sig = bytearray(w.alice2.signature)
    sig[17] ^= 0x04
    return _envelope(w.body2, bytes(sig))


@quarantined(Q.BAD_SIGNATURE)
def the_signature_is_all_zero(w: World) -> bytes:
    return _envelope(w.body2, bytes(64))


@quarantined(Q.BAD_SIGNATURE)
def the_signature_is_the_zero_style_one_that_small_order_keys_accept(w: World) -> bytes:
    return _envelope(w.body2, ZERO_STYLE_SIGNATURE)


@quarantined(Q.BAD_SIGNATURE)
def the_signature_covers_the_bare_change_id_without_the_domain(w: World) -> bytes:
    return _envelope(w.body2, w.alice.key.sign(change_id_of(w.body2)))


@quarantined(Q.BAD_SIGNATURE)
def the_signature_covers_the_change_bytes_instead_of_the_id(w: World) -> bytes:
    return _envelope(w.body2, w.alice.key.sign(w.body2))


@quarantined(Q.BAD_SIGNATURE)
def the_signature_is_lifted_from_the_authors_previous_change(w: World) -> bytes:
    return _envelope(w.body2, w.alice1.signature)


@quarantined(Q.BAD_SIGNATURE)
def the_signature_s_is_not_reduced_modulo_the_group_order(w: World) -> bytes:
    sig = w.alice2.signature
    s = int.from_bytes(sig[32:], "little") + _L
    return _envelope(w.body2, sig[:32] + s.to_bytes(32, "little"))


@quarantined(Q.MALFORMED)
def the_signature_is_63_bytes(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature[:-1])


@quarantined(Q.MALFORMED)
def the_signature_is_65_bytes(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature + b"\x00")


@quarantined(Q.MALFORMED)
def the_signature_is_empty(w: World) -> bytes:
    return _envelope(w.body2, b"")


@quarantined(Q.MALFORMED)
def the_signature_is_a_str(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature.hex())


# Tampered ops and claimed op ids.


def _tampered_body(w: World) -> bytes:
    """alice's seq 2 with one value byte changed inside its first op ("blue" -> "blve")."""
    return _splice(w.body2, b"blue", b"blve")


@quarantined(Q.BAD_SIGNATURE)
def an_op_value_byte_is_changed_and_nobody_re_signs(w: World) -> bytes:
    return _envelope(_tampered_body(w), w.alice2.signature)


@quarantined(Q.OP_ID_MISMATCH)
def an_op_value_byte_is_changed_and_the_author_re_signs_the_stale_op_id(w: World) -> bytes:
    return _signed(_tampered_body(w), w.alice.key)


@quarantined(Q.BAD_SIGNATURE)
def an_op_value_byte_is_changed_with_a_fresh_op_id_under_the_old_signature(w: World) -> bytes:
    op = _splice(w.alice2.ops[0].encode(), b"blue", b"blve")
    body = _pack(_edit(w.fields2(), ops=[_op_item(op), *w.fields2()["ops"][1:]]))
    return _envelope(body, w.alice2.signature)


@quarantined(Q.BAD_SIGNATURE)
def an_op_value_byte_is_changed_with_a_fresh_op_id_and_signed_by_another_key(w: World) -> bytes:
    op = _splice(w.alice2.ops[0].encode(), b"blue", b"blve")
    return _variant(w, key=w.mallory.key, ops=[_op_item(op), *w.fields2()["ops"][1:]])


@quarantined(Q.OP_ID_MISMATCH)
def the_claimed_op_id_is_all_zero(w: World) -> bytes:
    first, second = w.fields2()["ops"]
    return _variant(w, ops=[[bytes(32), first[1]], second])


@quarantined(Q.OP_ID_MISMATCH)
def two_ops_swap_their_claimed_ids(w: World) -> bytes:
    (id1, op1), (id2, op2) = w.fields2()["ops"]
    return _variant(w, ops=[[id2, op1], [id1, op2]])


@quarantined(Q.MALFORMED)
def the_claimed_op_id_is_31_bytes(w: World) -> bytes:
    first, second = w.fields2()["ops"]
    return _variant(w, ops=[[first[0][:31], first[1]], second])


@quarantined(Q.MALFORMED)
def an_ops_entry_is_an_id_without_op_bytes(w: World) -> bytes:
    first, second = w.fields2()["ops"]
    return _variant(w, ops=[[first[0]], second])


@quarantined(Q.MALFORMED)
def an_ops_entry_carries_a_third_element(w: World) -> bytes:
    first, second = w.fields2()["ops"]
    return _variant(w, ops=[[*first, b""], second])


@quarantined(Q.MALFORMED)
def an_op_travels_as_a_map_instead_of_its_bytes(w: World) -> bytes:
    first, second = w.fields2()["ops"]
    return _variant(w, ops=[[first[0], w.alice2.ops[0].to_value()], second])


# Non-canonical encodings (each re-signed where the change bytes changed, so that the encoding
# is the only fault).


@quarantined(Q.MALFORMED)
def the_envelope_keys_are_out_of_order(w: World) -> bytes:
    return _pack({"v": 1, "sig": w.alice2.signature, "change": w.body2})


@quarantined(Q.MALFORMED)
def the_change_keys_are_out_of_order(w: World) -> bytes:
    fields = w.fields2()
    return _signed(_pack(dict(reversed(fields.items()))), w.alice.key)


@quarantined(Q.BAD_OP)
def the_op_keys_are_out_of_order(w: World) -> bytes:
    op = _pack(dict(reversed(w.alice2.ops[0].to_value().items())))
    return _variant(w, ops=[_op_item(op), *w.fields2()["ops"][1:]])


@quarantined(Q.MALFORMED)
def the_change_repeats_a_key(w: World) -> bytes:
    body = w.body2
    assert body[0] == 0x87  # fixmap of the seven change fields
    return _signed(b"\x88" + body[1:] + _pack("v") + _pack(1), w.alice.key)


@quarantined(Q.MALFORMED)
def the_seq_is_an_int_in_a_longer_form(w: World) -> bytes:
    body = _splice(w.body2, _pack("seq") + b"\x02", _pack("seq") + b"\xcc\x02")
    return _signed(body, w.alice.key)


@quarantined(Q.MALFORMED)
def the_envelope_version_is_an_int_in_a_longer_form(w: World) -> bytes:
    data = w.alice2.data
    assert data.endswith(_pack("v") + b"\x01")
    return data[:-1] + b"\xcc\x01"


@quarantined(Q.BAD_OP)
def an_op_lamport_is_an_int_in_a_longer_form(w: World) -> bytes:
    op = w.alice2.ops[0]
    lamport = _pack("lamport") + _pack(op.lamport)
    long_form = _pack("lamport") + b"\xcd" + op.lamport.to_bytes(2, "big")
    item = _op_item(_splice(op.encode(), lamport, long_form))
    return _variant(w, ops=[item, *w.fields2()["ops"][1:]])


@quarantined(Q.MALFORMED)
def the_seq_is_a_float32(w: World) -> bytes:
    float32 = b"\xca" + struct.pack(">f", 2.0)
    return _signed(_splice(w.body2, _pack("seq") + b"\x02", _pack("seq") + float32), w.alice.key)


@quarantined(Q.BAD_OP)
def an_op_float_is_a_float32(w: World) -> bytes:
    op = w.alice2.ops[1]
    assert op.confidence == 0.5
    float64 = _pack("confidence") + b"\xcb" + struct.pack(">d", 0.5)
    float32 = _pack("confidence") + b"\xca" + struct.pack(">f", 0.5)
    item = _op_item(_splice(op.encode(), float64, float32))
    return _variant(w, ops=[w.fields2()["ops"][0], item])


@quarantined(Q.MALFORMED)
def the_space_is_a_str8_where_a_fixstr_fits(w: World) -> bytes:
    utf8 = SPACE.encode()
    assert len(utf8) < 32
    str8 = b"\xd9" + bytes([len(utf8)]) + utf8
    return _signed(
        _splice(w.body2, _pack("space") + _pack(SPACE), _pack("space") + str8), w.alice.key
    )


@quarantined(Q.MALFORMED)
def the_change_bytes_are_a_bin32_where_a_shorter_bin_fits(w: World) -> bytes:
    body = w.body2
    bin32 = b"\xc6" + len(body).to_bytes(4, "big") + body
    sig = _pack("sig") + _pack(w.alice2.signature)
    return b"\x83" + _pack("change") + bin32 + sig + _pack("v") + _pack(1)


@quarantined(Q.MALFORMED)
def the_envelope_is_a_map16_where_a_fixmap_fits(w: World) -> bytes:
    data = w.alice2.data
    assert data[0] == 0x83
    return b"\xde\x00\x03" + data[1:]


# Truncation, garbage and trailing bytes.


def _truncated(keep: Callable[[int], int], w: World) -> bytes:
    data = w.alice2.data
    return data[: keep(len(data))]


for _name, _keep in (
    ("to_nothing", lambda n: 0),
    ("to_one_byte", lambda n: 1),
    ("to_two_bytes", lambda n: 2),
    ("inside_the_change_bytes", lambda n: 40),
    ("to_half", lambda n: n // 2),
    ("inside_the_signature", lambda n: n - 20),
    ("by_one_byte", lambda n: n - 1),
):
    _case(f"the_change_is_truncated_{_name}", Q.MALFORMED, partial(_truncated, _keep))


@quarantined(Q.MALFORMED)
def the_change_bytes_are_truncated_and_re_signed(w: World) -> bytes:
    return _signed(w.body2[:-1], w.alice.key)


@quarantined(Q.MALFORMED)
def the_bytes_are_random(w: World) -> bytes:
    return blake3.blake3(b"statefuse/test/change-corpus/garbage").digest(length=300)


@quarantined(Q.MALFORMED)
def the_bytes_are_a_lone_msgpack_nil(w: World) -> bytes:
    return b"\xc0"


@quarantined(Q.MALFORMED)
def the_bytes_are_the_reserved_msgpack_byte(w: World) -> bytes:
    return b"\xc1"


@quarantined(Q.MALFORMED)
def the_bytes_are_a_msgpack_extension(w: World) -> bytes:
    return _pack(msgpack.ExtType(1, w.alice2.data[:16]))


@quarantined(Q.MALFORMED)
def the_envelope_is_an_array_instead_of_a_map(w: World) -> bytes:
    return _pack([w.body2, w.alice2.signature, 1])


@quarantined(Q.MALFORMED)
def the_bytes_nest_arrays_deeper_than_the_decoder_stack(w: World) -> bytes:
    return b"\x91" * 100_000 + b"\xc0"


@quarantined(Q.MALFORMED)
def a_byte_trails_the_envelope(w: World) -> bytes:
    return w.alice2.data + b"\x00"


@quarantined(Q.MALFORMED)
def a_second_change_trails_the_first(w: World) -> bytes:
    return w.alice2.data + w.alice1.data


@quarantined(Q.MALFORMED)
def a_byte_trails_the_change_bytes_and_it_is_re_signed(w: World) -> bytes:
    return _signed(w.body2 + b"\xc0", w.alice.key)


# Limits.


@quarantined(Q.OVERSIZED)
def the_change_is_one_byte_over_max_change_bytes(w: World) -> bytes:
    data = w.alice2.data
    return data + bytes(MAX_CHANGE_BYTES + 1 - len(data))


@quarantined(Q.TOO_MANY_OPS)
def the_change_holds_one_op_more_than_max_ops_per_change(w: World) -> bytes:
    # The count is checked before any entry is read, so the entries are the cheapest value.
    return _variant(w, ops=[None] * (MAX_OPS_PER_CHANGE + 1))


@quarantined(Q.BAD_OP)
def an_op_value_nests_deeper_than_max_depth(w: World) -> bytes:
    # The op map is depth 1 and its value starts at depth 2: MAX_DEPTH lists reach MAX_DEPTH + 1.
    return _op_variant(w, value=_nested(MAX_DEPTH))


@quarantined(Q.MALFORMED)
def a_change_field_nests_deeper_than_max_depth(w: World) -> bytes:
    return _variant(w, registry=_nested(MAX_DEPTH + 8))


@quarantined(Q.EMPTY_CHANGE)
def the_change_holds_no_ops(w: World) -> bytes:
    return _variant(w, ops=[])


# Authors of ops, spaces.


@quarantined(Q.OP_AUTHOR_MISMATCH)
def an_op_is_by_another_author(w: World) -> bytes:
    foreign = w.mallory.claim("red").encode()
    return _variant(w, ops=[*w.fields2()["ops"], _op_item(foreign)])


@quarantined(Q.OP_AUTHOR_MISMATCH)
def an_op_names_the_author_as_hex_text_instead_of_key_bytes(w: World) -> bytes:
    op = Writer(w.alice.author.hex(), clock=lambda: 0).claim("corpus", "x", "colour", "red")
    return _variant(w, ops=[_op_item(op.encode())])


@quarantined(Q.WRONG_SPACE)
def the_change_is_for_another_space(w: World) -> bytes:
    return _variant(w, space="other-memory")


@quarantined(Q.WRONG_SPACE)
def the_space_differs_only_in_unicode_normalization(w: World) -> bytes:
    nfd = unicodedata.normalize("NFD", SPACE)
    assert nfd != SPACE
    return _variant(w, space=nfd)


@quarantined(Q.MALFORMED)
def the_space_is_empty(w: World) -> bytes:
    return _variant(w, space="")


@quarantined(Q.MALFORMED)
def the_space_is_longer_than_max_space_chars(w: World) -> bytes:
    return _variant(w, space="s" * (MAX_SPACE_CHARS + 1))


# Sequence numbers and the prev chain.


@quarantined(Q.BROKEN_CHAIN)
def prev_names_another_authors_change(w: World) -> bytes:
    return _variant(w, prev=w.bob1.change_id)


@quarantined(Q.BROKEN_CHAIN)
def prev_names_the_authors_change_with_the_wrong_seq(w: World) -> bytes:
    return _variant(w, seq=3)


@quarantined(Q.BAD_SEQUENCE)
def seq_1_names_a_prev(w: World) -> bytes:
    return _variant(w, seq=1)


@quarantined(Q.BAD_SEQUENCE)
def seq_2_names_no_prev(w: World) -> bytes:
    return _variant(w, prev=None)


@quarantined(Q.BAD_SEQUENCE)
def seq_is_0(w: World) -> bytes:
    return _variant(w, seq=0, prev=None)


@quarantined(Q.BAD_SEQUENCE)
def seq_is_negative(w: World) -> bytes:
    return _variant(w, seq=-1)


@quarantined(Q.BAD_SEQUENCE)
def seq_is_true(w: World) -> bytes:
    return _variant(w, seq=True, prev=None)


@quarantined(Q.BAD_SEQUENCE)
def seq_is_a_str(w: World) -> bytes:
    return _variant(w, seq="2")


@quarantined(Q.MALFORMED)
def seq_is_beyond_int64(w: World) -> bytes:
    return _variant(w, seq=2**64 - 1)


@quarantined(Q.MALFORMED)
def prev_is_31_bytes(w: World) -> bytes:
    return _variant(w, prev=w.alice1.change_id[:31])


@quarantined(Q.MALFORMED)
def the_registry_fingerprint_is_31_bytes(w: World) -> bytes:
    return _variant(w, registry=FP[:31])


# Author keys.

for _name, _hex in SMALL_ORDER_POINTS.items():
    _case(
        f"the_author_is_the_small_order_point_{_name}",
        Q.BAD_AUTHOR_KEY,
        partial(lambda point, w: _forged_by_weak_key(point), bytes.fromhex(_hex)),
    )
for _name, _hex in NON_CANONICAL_KEYS.items():
    _case(
        f"the_author_is_the_non_canonical_key_{_name}",
        Q.BAD_AUTHOR_KEY,
        partial(lambda point, w: _forged_by_weak_key(point), bytes.fromhex(_hex)),
    )


@quarantined(Q.BAD_AUTHOR_KEY)
def the_author_key_is_not_on_the_curve(w: World) -> bytes:
    return _forged_by_weak_key(bytes([2]) + bytes(31))


@quarantined(Q.BAD_AUTHOR_KEY)
def the_author_key_is_31_bytes(w: World) -> bytes:
    return _forged_by_weak_key(w.alice.author[:31])


@quarantined(Q.BAD_AUTHOR_KEY)
def the_author_key_is_33_bytes(w: World) -> bytes:
    return _forged_by_weak_key(w.alice.author + b"\x00")


@quarantined(Q.BAD_AUTHOR_KEY)
def the_author_key_is_empty(w: World) -> bytes:
    return _variant(w, author=b"")


@quarantined(Q.MALFORMED)
def the_author_is_hex_text_instead_of_key_bytes(w: World) -> bytes:
    return _variant(w, author=w.alice.author.hex())


# Versions and fields.


@quarantined(Q.VERSION)
def the_envelope_version_is_3(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature, v=3)


@quarantined(Q.MALFORMED)
def the_envelope_says_format_2_around_a_format_1_change(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature, v=2)


@quarantined(Q.VERSION)
def the_change_version_is_2(w: World) -> bytes:
    return _variant(w, v=2)


@quarantined(Q.VERSION)
def the_change_version_is_3(w: World) -> bytes:
    return _variant(w, v=3)


@quarantined(Q.VERSION)
def the_envelope_has_no_version(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature, v=DROP)


@quarantined(Q.VERSION)
def the_change_version_is_the_str_1(w: World) -> bytes:
    return _variant(w, v="1")


@quarantined(Q.VERSION)
def the_change_version_is_true(w: World) -> bytes:
    return _variant(w, v=True)


@quarantined(Q.MALFORMED)
def the_envelope_has_no_signature(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature, sig=DROP)


@quarantined(Q.MALFORMED)
def the_change_has_no_prev_field(w: World) -> bytes:
    return _variant(w, prev=DROP)


@quarantined(Q.MALFORMED)
def the_change_has_no_author_field(w: World) -> bytes:
    return _variant(w, author=DROP)


@quarantined(Q.MALFORMED)
def the_envelope_has_an_extra_field(w: World) -> bytes:
    return _envelope(w.body2, w.alice2.signature, note="hi")


@quarantined(Q.MALFORMED)
def the_change_has_an_extra_field(w: World) -> bytes:
    return _variant(w, note="hi")


@quarantined(Q.MALFORMED)
def the_change_is_inlined_as_a_map_instead_of_its_bytes(w: World) -> bytes:
    return _envelope(w.fields2(), w.alice2.signature)


# Op types and op schema.


@quarantined(Q.BAD_OP)
def an_op_is_labelled_with_another_registered_kind(w: World) -> bytes:
    return _op_variant(w, op="AuthorAdmitted")


@quarantined(Q.BAD_OP)
def an_op_kind_differs_only_in_case(w: World) -> bytes:
    return _op_variant(w, op="claimAdded")


@quarantined(Q.BAD_OP)
def an_op_kind_is_unknown(w: World) -> bytes:
    return _op_variant(w, op="ClaimDeleted")


@quarantined(Q.BAD_OP)
def an_op_version_is_unknown(w: World) -> bytes:
    return _op_variant(w, v=3)


@quarantined(Q.BAD_OP)
def an_op_lacks_a_field(w: World) -> bytes:
    return _op_variant(w, provenance=DROP)


@quarantined(Q.BAD_OP)
def an_op_has_an_extra_field(w: World) -> bytes:
    return _op_variant(w, mood="sure")


def _author_named(w: World, **changes: Any) -> bytes:
    """alice's seq 2 led by an `AuthorNamed` op of hers with ``changes`` to its fields."""
    named = AuthorNamed(w.alice.author, 1, 0, "alice").to_value()
    return _variant(w, ops=[_op_item(_pack(_edit(named, **changes))), *w.fields2()["ops"]])


@quarantined(Q.BAD_OP)
def an_author_name_holds_a_bidirectional_override(w: World) -> bytes:
    return _author_named(w, name="ecila\u202e")


@quarantined(Q.BAD_OP)
def an_author_name_is_empty(w: World) -> bytes:
    return _author_named(w, name="")


@quarantined(Q.BAD_OP)
def an_author_name_ends_in_whitespace(w: World) -> bytes:
    return _author_named(w, name="alice ")


@quarantined(Q.BAD_OP)
def an_author_name_says_whom_it_names(w: World) -> bytes:
    return _author_named(w, subject=w.bob.author)


@quarantined(Q.OP_AUTHOR_MISMATCH)
def an_author_name_in_alices_change_names_mallory(w: World) -> bytes:
    return _author_named(w, author=w.mallory.author)


@quarantined(Q.BAD_OP)
def a_hand_built_root_op_admits_the_identity_key(w: World) -> bytes:
    admit = w.root.trust.admit(w.alice.author).to_value()
    item = _op_item(_pack(_edit(admit, subject=IDENTITY)))
    fields = {"author": w.root.author, "ops": [item], "prev": None, "registry": FP}
    return _signed(_pack(_edit(fields, seq=1, space=SPACE, v=1)), w.root.key)


@pytest.mark.parametrize(("build", "reason"), QUARANTINE_CASES)
def test_bad_bytes_are_quarantined_with_their_reason_and_leave_memory_unchanged(build, reason):
    w = World()
    log = w.base_log()
    before = _snapshot(log)
    bad = build(w)

    receipt = log.receive(bad, seen_ms=SEEN_MS)

    assert (receipt.status, receipt.reason) == (Status.QUARANTINED, reason), receipt.message
    assert _snapshot(log) == before
    (entry,) = log.quarantine
    assert entry.key == UnverifiedChange(bad).key and entry.data == bad
    assert (entry.reason, entry.first_seen_ms, entry.count) == (reason, SEEN_MS, 1)
    genuine = log.receive(w.alice2.data, seen_ms=SEEN_MS + 1)
    assert genuine.status is Status.ACCEPTED and genuine.admitted == (w.alice2,)
    assert list(log.quarantine) == [entry]
    assert log.materialize().digest() == _digest_of([w.alice1, w.bob1, w.alice2])


def _verdict(verify: Callable[..., VerifiedChange], data: bytes) -> tuple[object, ...]:
    try:
        change = verify(UnverifiedChange(data), space=SPACE)
    except VerificationError as exc:
        return (exc.reason, exc.message)
    return (change.change_id, tuple(op.op_id for op in change.ops))


@pytest.mark.parametrize(("build", "reason"), QUARANTINE_CASES)
def test_every_case_gets_the_same_verdict_and_message_from_the_fast_and_reference_verifiers(
    build, reason
):
    bad = build(World())
    reference = _verdict(verify_change_reference, bad)
    if reason is Q.BROKEN_CHAIN:
        assert type(reference[0]) is bytes  # verified: a link problem is the log's to find
    else:
        assert reference[0] is reason
    # Threshold 1: even the one- and two-op changes of the corpus take the batch path.
    saved, statefuse.core.op._MIN_BATCH = statefuse.core.op._MIN_BATCH, 1
    try:
        assert _verdict(verify_change, bad) == reference
    finally:
        statefuse.core.op._MIN_BATCH = saved


def test_the_corpus_reaches_every_quarantine_reason_and_holds_at_least_50_cases():
    reasons = {p.values[1] for p in QUARANTINE_CASES}
    assert reasons == set(QuarantineReason)
    assert len(QUARANTINE_CASES) >= 50
    assert len({p.id for p in QUARANTINE_CASES}) == len(QUARANTINE_CASES)


WEAK_KEYS = {**SMALL_ORDER_POINTS, **NON_CANONICAL_KEYS}


@pytest.mark.parametrize(
    "author", [bytes.fromhex(h) for h in WEAK_KEYS.values()], ids=list(WEAK_KEYS)
)
def test_the_weak_key_forgeries_would_fool_the_signature_library_alone(author):
    """Why the author-key check matters: each weak-key case above carries a signature that the
    library accepts by itself (with the build we ship; the cases do not depend on it)."""
    data = _forged_by_weak_key(author)
    body = decode_value(data)["change"]
    if not _library_accepts(author, ZERO_STYLE_SIGNATURE, signed_message(change_id_of(body))):
        pytest.skip("this build of the signature library refuses this forgery by itself")
    with pytest.raises(VerificationError) as err:
        verify_change(UnverifiedChange(data), space=SPACE)
    assert err.value.reason is Q.BAD_AUTHOR_KEY


# --- 2. replays and gaps ------------------------------------------------------------------------


@dataclass
class Step:
    data: bytes
    status: Status
    reason: QuarantineReason | None = None
    admitted: tuple[VerifiedChange, ...] | None = None


@dataclass
class Flow:
    """Steps received in order after the base log, then what the log must hold."""

    steps: list[Step]
    accepted: list[VerifiedChange]
    pending: list[VerifiedChange] = field(default_factory=list)
    quarantined: dict[bytes, QuarantineReason] = field(default_factory=dict)


FLOWS: list[Any] = []


def flow(build: Callable[[World], Flow]) -> Callable[[World], Flow]:
    FLOWS.append(pytest.param(build, id=build.__name__))
    return build


@flow
def a_replayed_change_is_a_duplicate(w: World) -> Flow:
    return Flow(
        [
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
            Step(w.alice2.data, Status.DUPLICATE),
            Step(w.alice1.data, Status.DUPLICATE),
        ],
        accepted=[w.alice2],
    )


@flow
def a_replayed_change_waiting_in_pending_is_a_duplicate(w: World) -> Flow:
    return Flow(
        [Step(w.alice3.data, Status.PENDING), Step(w.alice3.data, Status.DUPLICATE)],
        accepted=[],
        pending=[w.alice3],
    )


@flow
def a_second_valid_signature_of_an_accepted_change_is_a_duplicate(w: World) -> Flow:
    message = signed_message(w.alice2.change_id)
    public, other = _sign_with_nonce(w.alice.seed, message, nonce=0xC0FFEE)
    assert public == w.alice.author and other != w.alice2.signature
    assert PublicKey(public).verify(other, message)
    return Flow(
        [
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
            Step(_envelope(w.body2, other), Status.DUPLICATE),
        ],
        accepted=[w.alice2],
    )


@flow
def a_gap_waits_in_pending_and_is_admitted_when_it_closes(w: World) -> Flow:
    return Flow(
        [
            Step(w.alice3.data, Status.PENDING),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2, w.alice3)),
        ],
        accepted=[w.alice2, w.alice3],
    )


@flow
def a_longer_gap_closes_from_its_far_end(w: World) -> Flow:
    alice4 = w.alice.next()
    return Flow(
        [
            Step(alice4.data, Status.PENDING),
            Step(w.alice3.data, Status.PENDING),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2, w.alice3, alice4)),
        ],
        accepted=[w.alice2, w.alice3, alice4],
    )


@flow
def a_forged_predecessor_does_not_close_a_gap(w: World) -> Flow:
    forged = _signed(w.body2, w.mallory.key)
    return Flow(
        [
            Step(w.alice3.data, Status.PENDING),
            Step(forged, Status.QUARANTINED, Q.BAD_SIGNATURE),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2, w.alice3)),
        ],
        accepted=[w.alice2, w.alice3],
        quarantined={forged: Q.BAD_SIGNATURE},
    )


@flow
def a_forged_copy_seen_after_the_genuine_change_disturbs_nothing(w: World) -> Flow:
    forged = _envelope(w.body2, bytes(64))
    return Flow(
        [
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
            Step(forged, Status.QUARANTINED, Q.BAD_SIGNATURE),
        ],
        accepted=[w.alice2],
        quarantined={forged: Q.BAD_SIGNATURE},
    )


@flow
def the_same_bad_bytes_twice_make_one_quarantine_entry_seen_twice(w: World) -> Flow:
    forged = _signed(w.body2, w.mallory.key)
    return Flow(
        [
            Step(forged, Status.QUARANTINED, Q.BAD_SIGNATURE),
            Step(forged, Status.QUARANTINED, Q.BAD_SIGNATURE),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
        ],
        accepted=[w.alice2],
        quarantined={forged: Q.BAD_SIGNATURE},
    )


@flow
def a_link_to_another_author_waiting_in_pending_is_quarantined_when_its_prev_arrives(
    w: World,
) -> Flow:
    crooked = w.bob.at(2, w.alice2.change_id)
    genuine = w.bob.at(2, w.bob1.change_id)
    return Flow(
        [
            Step(crooked.data, Status.PENDING),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
            Step(genuine.data, Status.ACCEPTED, admitted=(genuine,)),
        ],
        accepted=[w.alice2, genuine],
        quarantined={crooked.data: Q.BROKEN_CHAIN},
    )


@flow
def a_prev_naming_a_later_change_is_quarantined_once_that_change_arrives(w: World) -> Flow:
    crooked = w.alice.at(2, w.alice3.change_id, [w.alice.claim("red")])
    return Flow(
        [
            Step(crooked.data, Status.PENDING),
            Step(w.alice2.data, Status.ACCEPTED, admitted=(w.alice2,)),
            Step(w.alice3.data, Status.ACCEPTED, admitted=(w.alice3,)),
        ],
        accepted=[w.alice2, w.alice3],
        quarantined={crooked.data: Q.BROKEN_CHAIN},
    )


@pytest.mark.parametrize("build", FLOWS)
def test_replays_and_gaps_move_nothing_until_the_chain_is_whole(build):
    w = World()
    log = w.base_log()
    case = build(w)
    for step in case.steps:
        digest, ids, _ = _snapshot(log)
        receipt = log.receive(step.data, seen_ms=SEEN_MS)
        assert (receipt.status, receipt.reason) == (step.status, step.reason), receipt.message
        if step.admitted is not None:
            assert receipt.admitted == step.admitted
        if step.status is not Status.ACCEPTED:
            assert _snapshot(log)[:2] == (digest, ids)

    counted = [w.alice1, w.bob1, *case.accepted]
    assert log.change_ids() == sorted(c.change_id for c in counted)
    for change in counted:
        assert log.get(change.change_id).data == change.data  # the first copy is the one kept
    assert log.pending() == sorted(case.pending, key=lambda c: c.change_id)
    assert {e.data: e.reason for e in log.quarantine} == case.quarantined
    for entry in log.quarantine:
        seen = [s for s in case.steps if s.data == entry.data and s.status is Status.QUARANTINED]
        assert entry.count == max(len(seen), 1)
    assert log.verdicts() == {} and log.equivocations() == []
    assert log.materialize().digest() == _digest_of(counted)


# --- 3. changes that verify but must not count ---------------------------------------------------


@dataclass
class TrustCase:
    """Changes received in order (all accepted in the end), then the verdicts and the memory they
    must give, and a genuine change received afterwards that must count."""

    log: ChangeLog
    steps: list[VerifiedChange]
    ignored: dict[bytes, Ignored]
    counted: list[VerifiedChange]
    then: VerifiedChange
    equivocations: list[Equivocation] = field(default_factory=list)


TRUST_CASES: list[Any] = []


def trust_case(build: Callable[[World], TrustCase]) -> Callable[[World], TrustCase]:
    TRUST_CASES.append(pytest.param(build, id=build.__name__))
    return build


def _closed(w: World) -> ChangeLog:
    return ChangeLog(SPACE, root=w.root.author, mode=TrustMode.CLOSED)


def _proof(author: bytes, seq: int, *changes: VerifiedChange) -> Equivocation:
    return Equivocation(author, seq, tuple(sorted(c.change_id for c in changes)))


@trust_case
def an_unknown_author_writes_to_a_closed_space(w: World) -> TrustCase:
    admit = w.root.next([w.root.trust.admit(w.alice.author, ["editor"])])
    stranger = w.mallory.next()
    return TrustCase(
        _closed(w),
        [admit, w.alice1, stranger],
        {stranger.change_id: Ignored.UNKNOWN_AUTHOR},
        counted=[admit, w.alice1],
        then=w.alice2,
    )


@trust_case
def an_unknown_authors_whole_feed_is_ignored(w: World) -> TrustCase:
    admit = w.root.next([w.root.trust.admit(w.alice.author)])
    first, second = w.mallory.next(), w.mallory.next()
    return TrustCase(
        _closed(w),
        [second, admit, first, w.alice1],
        {first.change_id: Ignored.UNKNOWN_AUTHOR, second.change_id: Ignored.UNKNOWN_AUTHOR},
        counted=[admit, w.alice1],
        then=w.alice2,
    )


@trust_case
def an_unknown_author_admits_itself(w: World) -> TrustCase:
    admit = w.root.next([w.root.trust.admit(w.alice.author)])
    self_admit = w.mallory.next([w.mallory.trust.admit(w.mallory.author), w.mallory.claim()])
    return TrustCase(
        _closed(w),
        [admit, w.alice1, self_admit],
        {self_admit.change_id: Ignored.UNKNOWN_AUTHOR},
        counted=[admit, w.alice1],
        then=w.alice2,
    )


@trust_case
def an_admitted_author_who_is_not_the_root_admits_a_stranger(w: World) -> TrustCase:
    admit = w.root.next([w.root.trust.admit(w.alice.author), w.root.trust.admit(w.bob.author)])
    bob2 = w.bob.next([w.bob.trust.admit(w.mallory.author), w.bob.claim()])
    stranger = w.mallory.next()
    return TrustCase(
        _closed(w),
        [admit, w.alice1, w.bob1, bob2, stranger],
        {stranger.change_id: Ignored.UNKNOWN_AUTHOR},
        counted=[admit, w.alice1, w.bob1, bob2],
        then=w.alice2,
    )


@trust_case
def a_revocation_signed_by_someone_other_than_the_root_is_ignored(w: World) -> TrustCase:
    bob2 = w.bob.next([w.bob.trust.revoke(w.alice.author, through_seq=0)])
    return TrustCase(
        ChangeLog(SPACE, root=w.root.author),
        [w.alice1, w.bob1, bob2],
        {},
        counted=[w.alice1, w.bob1, bob2],
        then=w.alice2,
    )


@trust_case
def a_revoked_author_writes_after_the_cutoff(w: World) -> TrustCase:
    t = w.root.trust
    admit = w.root.next([t.admit(w.alice.author), t.admit(w.bob.author)])
    revoke = w.root.next(
        [t.revoke(w.alice.author, through_seq=1, through_change=w.alice1.change_id)]
    )
    return TrustCase(
        _closed(w),
        [admit, w.alice1, revoke, w.alice2, w.alice3],
        {w.alice2.change_id: Ignored.REVOKED, w.alice3.change_id: Ignored.REVOKED},
        counted=[admit, w.alice1, revoke],
        then=w.bob1,
    )


@trust_case
def a_revocation_that_arrives_after_the_revoked_changes_still_applies(w: World) -> TrustCase:
    t = w.root.trust
    admit = w.root.next([t.admit(w.alice.author), t.admit(w.bob.author)])
    revoke = w.root.next([t.revoke(w.alice.author, through_seq=1)])
    return TrustCase(
        _closed(w),
        [w.alice1, w.alice2, w.alice3, admit, revoke],
        {w.alice2.change_id: Ignored.REVOKED, w.alice3.change_id: Ignored.REVOKED},
        counted=[admit, w.alice1, revoke],
        then=w.bob1,
    )


@trust_case
def a_change_at_the_cutoff_seq_other_than_the_one_the_revocation_names(w: World) -> TrustCase:
    t = w.root.trust
    admit = w.root.next([t.admit(w.alice.author), t.admit(w.bob.author)])
    revoke = w.root.next(
        [t.revoke(w.alice.author, through_seq=2, through_change=w.alice2.change_id)]
    )
    substitute = w.alice.at(2, w.alice1.change_id, [w.alice.claim("red")])
    return TrustCase(
        _closed(w),
        [admit, w.alice1, revoke, substitute],
        {substitute.change_id: Ignored.REVOKED},
        counted=[admit, w.alice1, revoke],
        then=w.bob1,
    )


@trust_case
def a_revoked_author_admitted_again_stays_revoked(w: World) -> TrustCase:
    t = w.root.trust
    admit = w.root.next([t.admit(w.alice.author), t.admit(w.bob.author)])
    revoke = w.root.next([t.revoke(w.alice.author, through_seq=1)])
    again = w.root.next([t.admit(w.alice.author, ["editor"])])
    return TrustCase(
        _closed(w),
        [admit, w.alice1, revoke, again, w.alice2],
        {w.alice2.change_id: Ignored.REVOKED},
        counted=[admit, w.alice1, revoke, again],
        then=w.bob1,
    )


@trust_case
def the_root_cannot_revoke_itself(w: World) -> TrustCase:
    revoke_self = w.root.next([w.root.trust.revoke(w.root.author, through_seq=0)])
    return TrustCase(
        ChangeLog(SPACE, root=w.root.author),
        [revoke_self, w.alice1],
        {},
        counted=[revoke_self, w.alice1],
        then=w.root.next(),
    )


@trust_case
def an_author_forks_and_builds_on_its_fork(w: World) -> TrustCase:
    fork = w.alice.at(2, w.alice1.change_id, [w.alice.claim("red")])
    on_fork = w.alice.at(3, fork.change_id)
    return TrustCase(
        ChangeLog(SPACE),
        [w.alice1, w.bob1, w.alice2, fork, on_fork],
        {},
        counted=[w.alice1, w.bob1, w.alice2, fork, on_fork],
        then=w.bob.next(),
        equivocations=[_proof(w.alice.author, 2, w.alice2, fork)],
    )


@trust_case
def a_fork_that_arrives_before_the_other_branch_counts_as_well(w: World) -> TrustCase:
    fork = w.alice.at(2, w.alice1.change_id, [w.alice.claim("red")])
    return TrustCase(
        ChangeLog(SPACE),
        [w.alice1, fork, w.alice2, w.alice3],
        {},
        counted=[w.alice1, fork, w.alice2, w.alice3],
        then=w.bob1,
        equivocations=[_proof(w.alice.author, 2, w.alice2, fork)],
    )


@trust_case
def a_forked_root_keeps_the_trust_ops_of_both_branches(w: World) -> TrustCase:
    admit = w.root.next([w.root.trust.admit(w.alice.author)])
    let_in = w.root.at(2, admit.change_id, [w.root.trust.admit(w.mallory.author)])
    fork = w.root.at(2, admit.change_id, [TrustWriter(w.root.author).grant(w.alice.author, ["x"])])
    stranger = w.mallory.next()
    return TrustCase(
        _closed(w),
        [admit, w.alice1, let_in, fork, stranger],
        {},
        counted=[admit, w.alice1, let_in, fork, stranger],
        then=w.alice2,
        equivocations=[_proof(w.root.author, 2, let_in, fork)],
    )


@trust_case
def a_revocation_by_named_changes_keeps_every_branch_it_names(w: World) -> TrustCase:
    fork = w.alice.at(2, w.alice1.change_id, [w.alice.claim("red")])
    on_fork = w.alice.at(3, fork.change_id)
    cut = w.root.next(
        [
            TrustWriter(w.root.author).cut_off(
                w.alice.author, keep=[w.alice2.change_id, fork.change_id]
            )
        ]
    )
    return TrustCase(
        ChangeLog(SPACE, root=w.root.author),
        [on_fork, w.alice3, cut, w.alice2, fork, w.alice1],
        {on_fork.change_id: Ignored.REVOKED, w.alice3.change_id: Ignored.REVOKED},
        counted=[w.alice1, w.alice2, fork, cut],
        then=w.bob1,
        equivocations=[
            _proof(w.alice.author, 2, w.alice2, fork),
            _proof(w.alice.author, 3, w.alice3, on_fork),
        ],
    )


@trust_case
def two_revocations_by_named_changes_intersect(w: World) -> TrustCase:
    t = TrustWriter(w.root.author)
    first = w.root.next([t.cut_off(w.alice.author, keep=[w.alice3.change_id])])
    second = w.root.next([t.cut_off(w.alice.author, keep=[w.alice2.change_id])])
    return TrustCase(
        ChangeLog(SPACE, root=w.root.author),
        [w.alice1, w.alice2, w.alice3, first, second],
        {w.alice3.change_id: Ignored.REVOKED},
        counted=[w.alice1, w.alice2, first, second],
        then=w.bob1,
    )


@pytest.mark.parametrize("build", TRUST_CASES)
def test_a_change_that_must_not_count_is_kept_with_its_verdict_and_its_ops_left_out(build):
    case = build(World())
    log = case.log
    for change in case.steps:  # a change may wait for its predecessor; none is refused
        status = log.receive(change.data, seen_ms=SEEN_MS).status
        assert status in {Status.ACCEPTED, Status.PENDING}

    assert log.verdicts() == case.ignored
    assert set(case.ignored) <= set(log.change_ids())  # kept, as evidence
    counted_ops = {op.op_id for op in log.ops()}
    for change_id in case.ignored:
        assert not {op.op_id for op in log.get(change_id).ops} & counted_ops
    assert log.materialize().digest() == _digest_of(case.counted)
    assert log.equivocations() == case.equivocations
    assert len(log.quarantine) == 0 and log.pending() == []

    then = log.receive(case.then.data, seen_ms=SEEN_MS + 1)
    assert then.status is Status.ACCEPTED and then.admitted == (case.then,)
    assert log.verdicts() == case.ignored
    assert log.materialize().digest() == _digest_of([*case.counted, case.then])


# --- 4. trust ops that cannot even be built ------------------------------------------------------


@pytest.mark.parametrize(
    "point", [bytes.fromhex(h) for h in SMALL_ORDER_POINTS.values()], ids=list(SMALL_ORDER_POINTS)
)
def test_a_trust_op_admitting_a_small_order_key_cannot_be_built(point):
    with pytest.raises(PublicKeyError) as err:
        TrustWriter(SigningKey.from_seed(bytes([4]) * 32).author).admit(point)
    assert err.value.rule == "small-order"


@pytest.mark.parametrize("verb", ["revoke", "grant", "withdraw"])
def test_no_other_trust_op_can_name_the_identity_key_either(verb):
    t = TrustWriter(SigningKey.from_seed(bytes([4]) * 32).author)
    make = {
        "revoke": lambda: t.revoke(IDENTITY, through_seq=1),
        "grant": lambda: t.grant(IDENTITY, ["admin"]),
        "withdraw": lambda: t.withdraw(IDENTITY, ["admin"]),
    }[verb]
    with pytest.raises(PublicKeyError) as err:
        make()
    assert err.value.rule == "small-order"


def test_a_refused_trust_op_key_is_reported_under_the_subject_field():
    with pytest.raises(PublicKeyError) as err:
        TrustWriter(SigningKey.from_seed(bytes([4]) * 32).author).admit(IDENTITY)
    assert err.value.field == "subject"


# --- 5. the signer refuses what the verifier would refuse ---------------------------------------


@pytest.mark.parametrize(
    ("ops", "reason"),
    [
        pytest.param(
            lambda f: [f.claim()] * (MAX_OPS_PER_CHANGE + 1),
            Q.TOO_MANY_OPS,
            id="too_many_ops",
        ),
        pytest.param(
            lambda f: [f.claim("x" * 700_000), f.claim("y" * 700_000)],
            Q.OVERSIZED,
            id="over_one_mib",
        ),
        pytest.param(lambda f: [], Q.EMPTY_CHANGE, id="no_ops"),
    ],
)
def test_sign_change_refuses_what_peers_would_quarantine_with_the_same_reason(ops, reason):
    alice = Feed(1)
    with pytest.raises(VerificationError) as err:
        alice.at(1, None, ops(alice))
    assert err.value.reason is reason


# --- 6. what arrives is not bytes ----------------------------------------------------------------


@pytest.mark.parametrize("wrap", [bytearray, memoryview], ids=["bytearray", "memoryview"])
def test_a_genuine_change_in_a_bytes_like_buffer_is_received_like_bytes(wrap):
    w = World()
    log = w.base_log()
    receipt = log.receive(wrap(w.alice2.data), seen_ms=SEEN_MS)
    assert receipt.status is Status.ACCEPTED and receipt.admitted == (w.alice2,)


def test_quarantine_keeps_an_immutable_copy_of_what_it_was_given():
    w = World()
    log = w.base_log()
    raw = bytearray(_signed(w.body2, w.mallory.key))
    kept = bytes(raw)
    log.receive(UnverifiedChange(raw), seen_ms=SEEN_MS)
    raw[:] = b"overwritten"
    (entry,) = log.quarantine
    assert type(entry.data) is bytes and entry.data == kept
    assert entry.key == blake3.blake3(entry.data).digest()
