"""The ingest fast paths give exactly the reference verdicts.

`statefuse.core.op.decode_ops` (batch, column by column) must return what ``[decode_op(d) for d in
batch]`` returns, or raise the same error with the same message; `sync.verify.verify_change`
(batch envelope and ops) must do what `verify_change_reference` does, down to the quarantine
reason and message. The inputs are valid encodings damaged the ways a broken or hostile peer
could: bytes flipped, inserted or deleted, item boundaries shifted; fields swapped, dropped,
added or given tricky values (``True`` for ``1``, ``-0.0``, NaN, int64 edges, unsorted or
repeated id lists, unsorted nested maps, extension types); and everything packed with
integer, length and header widths, float widths and map key orders drawn by Hypothesis, the
canonical choice first (so failures shrink towards canonical bytes). A damage that leaves the
bytes valid is fine: then both sides must accept and build the same ops.

Each comparison runs twice: as shipped, and with the batch threshold at 1, so that even one-
and two-op groups take the column path.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import blake3
import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_op import ops as op_strategy

import statefuse.core.op
from statefuse import ClaimAdded, ClaimRetracted, EvidenceAdded, Layer, OpSet, Writer, decode_op
from statefuse.core.op import OP_TYPES, decode_ops, decode_ops_fast
from statefuse.registry import DEFAULT_REGISTRY, EncodingError, StateFuseError
from statefuse.sync import verify as verify_module
from statefuse.sync.change import UnverifiedChange, change_id_of, signed_message
from statefuse.sync.key import SigningKey
from statefuse.sync.trust import TrustWriter
from statefuse.sync.verify import (
    QuarantineReason,
    VerificationError,
    verify_change,
    verify_change_reference,
    verify_changes,
)

SPACE = "fast-path"
KEY = SigningKey.from_seed(bytes([7]) * 32)
OTHER_KEY = SigningKey.from_seed(bytes([8]) * 32)
FP = DEFAULT_REGISTRY.fingerprint
CORPUS = Path(__file__).resolve().parent / "corpus"


@contextmanager
def batch_threshold(n: int) -> Iterator[None]:
    """Run with `statefuse.core.op._MIN_BATCH` at ``n`` (1: every group takes the column path)."""
    saved = statefuse.core.op._MIN_BATCH
    statefuse.core.op._MIN_BATCH = n
    try:
        yield
    finally:
        statefuse.core.op._MIN_BATCH = saved


THRESHOLDS = (1, statefuse.core.op._MIN_BATCH)


# --- what is compared ---------------------------------------------------------------------------


def _types(v: object) -> object:
    """The exact types inside a stored field (tuple vs list, Layer vs str, bool vs int...)."""
    if type(v) in (list, tuple):
        return (type(v), tuple(_types(x) for x in v))  # type: ignore[attr-defined]
    if type(v) is dict:
        return (dict, tuple((k, _types(x)) for k, x in v.items()))  # type: ignore[attr-defined]
    return type(v)


def summary(op: Any) -> tuple[object, ...]:
    """Everything observable about a decoded op: type, id, canonical bytes, exact field types."""
    assert op.recompute_id() == op.op_id, "a decoded op must hash to its own id"
    fields = tuple((name, _types(getattr(op, name))) for name, _ in op._SCHEMA)
    return (type(op), op.op_id, op.encode(), fields)


def decoded(decode: Callable[[], list[Any]]) -> tuple[object, ...]:
    try:
        return ("ok", [summary(op) for op in decode()])
    except StateFuseError as exc:
        return ("error", type(exc), str(exc))


def verdict(verify: Callable[..., Any], data: bytes) -> tuple[object, ...]:
    try:
        c = verify(UnverifiedChange(data), space=SPACE)
    except VerificationError as exc:
        return ("error", exc.reason, exc.message)
    fields = (c.space, c.author, c.seq, c.prev, c.registry, c.change_id, c.signature, c.data)
    return ("ok", fields, [summary(op) for op in c.ops])


def assert_batch_agrees(batch: list[bytes]) -> None:
    """decode_ops, and decode_ops_fast when it answers, agree with decode_op item by item."""
    reference = decoded(lambda: [decode_op(d) for d in batch])
    for n in THRESHOLDS:
        with batch_threshold(n):
            assert decoded(lambda: decode_ops(batch)) == reference
            fast = decode_ops_fast(batch)
        if fast is not None:
            assert reference[0] == "ok", "the fast path accepted what the reference refuses"
            assert [summary(op) for op in fast] == reference[1]


def assert_verifiers_agree(data: bytes) -> None:
    reference = verdict(verify_change_reference, data)
    for n in THRESHOLDS:
        with batch_threshold(n):
            assert verdict(verify_change, data) == reference


# --- loose msgpack: every width and order a decoder could be offered ----------------------------


def _int_forms(v: int) -> list[bytes]:
    forms = []
    for lo, hi, prefix, fmt in (
        (0, 0x7F, b"", ">B"),
        (-32, -1, b"", ">b"),
        (0, 0xFF, b"\xcc", ">B"),
        (0, 0xFFFF, b"\xcd", ">H"),
        (0, 0xFFFF_FFFF, b"\xce", ">I"),
        (0, 0xFFFF_FFFF_FFFF_FFFF, b"\xcf", ">Q"),
        (-(1 << 7), (1 << 7) - 1, b"\xd0", ">b"),
        (-(1 << 15), (1 << 15) - 1, b"\xd1", ">h"),
        (-(1 << 31), (1 << 31) - 1, b"\xd2", ">i"),
        (-(1 << 63), (1 << 63) - 1, b"\xd3", ">q"),
    ):
        if lo <= v <= hi:
            forms.append(prefix + struct.pack(fmt, v))
    return forms


def _length_forms(
    n: int, fixed: int | None, fix_limit: int, wide: tuple[bytes, ...]
) -> list[bytes]:
    forms = [bytes([fixed | n])] if fixed is not None and n < fix_limit else []
    for prefix, size in zip(wide, (1, 2, 4)[-len(wide) :], strict=True):
        if n < 1 << (8 * size):
            forms.append(prefix + n.to_bytes(size, "big"))
    return forms


def _pick(data: st.DataObject, canonical: bytes, forms: list[bytes], loose: bool) -> bytes:
    """The canonical form, or (when packing loosely) one drawn from all valid forms."""
    if not loose:
        return canonical
    others = [f for f in forms if f != canonical]
    i = data.draw(st.integers(0, len(others)), label="form")
    return canonical if i == 0 else others[i - 1]


def loose_pack(value: object, data: st.DataObject, loose: bool) -> bytes:
    """msgpack of ``value``; when ``loose``, widths, float sizes and key orders are drawn."""
    t = type(value)
    if value is None or t is bool:
        return msgpack.packb(value)
    if t is int:
        return _pick(data, msgpack.packb(value), _int_forms(value), loose)  # type: ignore[arg-type]
    if t is float:
        forms = [b"\xcb" + struct.pack(">d", value)]
        with suppress(OverflowError):
            forms.append(b"\xca" + struct.pack(">f", value))
        return _pick(data, forms[0], forms, loose)
    if isinstance(value, Layer):
        return loose_pack(value.value, data, loose)
    if t is str or t is bytes:
        raw = value.encode("utf-8") if t is str else value  # type: ignore[union-attr]
        if t is str:
            heads = _length_forms(len(raw), 0xA0, 32, (b"\xd9", b"\xda", b"\xdb"))
        else:
            heads = _length_forms(len(raw), None, 0, (b"\xc4", b"\xc5", b"\xc6"))
        canonical = msgpack.packb(value, use_bin_type=True)
        head = _pick(data, canonical[: len(canonical) - len(raw)], heads, loose)
        return head + raw
    if t is msgpack.ExtType:
        return msgpack.packb(value)
    if t is list or t is tuple:
        items = list(value)  # type: ignore[call-overload]
        heads = _length_forms(len(items), 0x90, 16, (b"\xdc", b"\xdd"))
        head = _pick(data, heads[0], heads, loose)
        return head + b"".join(loose_pack(v, data, loose) for v in items)
    if t is dict:
        keys = sorted(value, key=lambda k: k.encode("utf-8") if type(k) is str else k)  # type: ignore[arg-type]
        if loose and data.draw(st.booleans(), label="reorder keys"):
            keys = data.draw(st.permutations(keys), label="key order")
        heads = _length_forms(len(keys), 0x80, 16, (b"\xde", b"\xdf"))
        head = _pick(data, heads[0], heads, loose)
        return head + b"".join(
            loose_pack(k, data, loose) + loose_pack(value[k], data, loose)  # type: ignore[index]
            for k in keys
        )
    raise AssertionError(f"cannot pack {t.__name__}")


# --- damage ---------------------------------------------------------------------------------------

#: Values that look like a field's type, or nearly: the edges the column checks must get right.
TRICKY: tuple[object, ...] = (
    None,
    True,
    False,
    0,
    1,
    -1,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
    -(1 << 63),
    0.0,
    -0.0,
    0.5,
    1.0,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "global",
    "task:x",
    "task: x",
    "fact",
    "identity",
    "é",
    "\U0001f600",
    "a" * 1025,
    b"",
    b"x",
    bytes(32),
    bytes(31),
    [],
    [bytes(32)],
    [b"\x01" * 32, bytes(32)],
    [bytes(32), bytes(32)],
    ["a", "b"],
    ["b", "a"],
    ["a", "a"],
    [""],
    [[1]],
    {"a": 1, "b": [2, {"z": None, "y": 1.5}]},
    {"b": 1, "a": 2},
    msgpack.ExtType(1, b"x"),
)


@st.composite
def damaged_map(draw: st.DrawFn, fields: dict[str, object]) -> dict[str, object]:
    """``fields`` with one structural change drawn (or none)."""
    out = dict(fields)
    names = sorted(out)
    how = draw(st.sampled_from(["none", "swap", "retype", "drop", "extra", "kind"]))
    if how == "swap":
        a, b = draw(st.lists(st.sampled_from(names), min_size=2, max_size=2, unique=True))
        out[a], out[b] = out[b], out[a]
    elif how == "retype":
        out[draw(st.sampled_from(names))] = draw(st.sampled_from(TRICKY))
    elif how == "drop":
        del out[draw(st.sampled_from(names))]
    elif how == "extra":
        out[draw(st.sampled_from(["op_id", "zzz", "a"]))] = draw(st.sampled_from(TRICKY))
    elif how == "kind" and "op" in out:
        out["op"] = draw(st.sampled_from([*OP_TYPES, "AuthorAdmitted", "Nope", 1]))
    return out


@st.composite
def damaged_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with up to two byte edits (flip a bit, set, insert or delete a byte)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if how == "insert" or not out:
            out.insert(at, draw(st.integers(0, 255)))
        elif how == "delete":
            del out[at]
        elif how == "set":
            out[at] = draw(st.integers(0, 255))
        else:
            out[at] ^= 1 << draw(st.integers(0, 7))
    return bytes(out)


@st.composite
def op_encodings(draw: st.DrawFn, op: Any) -> bytes:
    """The bytes of ``op``, intact or damaged (structure, packing widths, bytes)."""
    fields = draw(damaged_map(op.to_value()))
    loose = draw(st.booleans())
    packed = loose_pack(fields, draw(st.data()), loose)
    return draw(damaged_bytes(packed)) if draw(st.booleans()) else packed


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    """A few ops' bytes, at most one of them damaged, item boundaries perhaps shifted."""
    ops = draw(st.lists(op_strategy(), min_size=1, max_size=6))
    batch = [op.encode() for op in ops]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(ops) - 1))
        batch[i] = draw(op_encodings(ops[i]))
    if len(batch) > 1 and draw(st.booleans()):
        i = draw(st.integers(0, len(batch) - 2))
        shift = draw(st.integers(-3, 3))
        joined = batch[i] + batch[i + 1]
        cut = min(max(len(batch[i]) + shift, 0), len(joined))
        batch[i], batch[i + 1] = joined[:cut], joined[cut:]
    return batch


def _claims(n: int, author: str | bytes = "w", **options: Any) -> list[ClaimAdded]:
    writer = Writer(author, clock=lambda: 0)
    return [writer.claim("ns", f"s{i}", "colour", i, **options) for i in range(n)]


# --- decode_ops against decode_op -----------------------------------------------------------------


#: Each example decodes a batch both ways: CI runs 500 (1,000 took over 7 s).
@settings(max_examples=min(settings.default.max_examples, 500))
@given(batches())
@example([op.encode() for op in _claims(3)])
def test_decode_ops_gives_the_ops_or_the_first_error_that_decode_op_gives(batch):
    assert_batch_agrees(batch)


def test_a_batch_whose_item_boundaries_are_shifted_is_refused_like_one_op_at_a_time():
    a, b, c = (op.encode() for op in _claims(3))
    for cut in (1, 2, 5):
        # The concatenation is unchanged: only per-item parsing can tell.
        for shifted in ([a + b[:cut], b[cut:], c], [a[:-cut], a[-cut:] + b, c]):
            assert b"".join(shifted) == a + b + c
            assert decoded(lambda: [decode_op(d) for d in shifted])[0] == "error"  # noqa: B023
            assert_batch_agrees(shifted)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("confidence", 1),
        ("confidence", True),
        ("lamport", True),
        ("value", {"b": 1, "a": 2}),
        ("evidence", [b"\x01" * 32, bytes(32)]),
        ("evidence", [bytes(32), bytes(32)]),
        ("visibility", ["b", "a"]),
        ("layer", "FACT"),
        ("value", float("nan")),
        ("value", 1 << 63),
        ("scope", "task: x"),
    ],
)
def test_a_field_the_schema_would_rewrite_or_refuse_is_refused_like_decode_op_does(field, value):
    good = [op.encode() for op in _claims(4, confidence=0.5)]
    fields = _claims(5, confidence=0.5)[4].to_value()
    fields[field] = value
    bad = msgpack.packb(fields, use_bin_type=True)  # keys stay in canonical order
    for batch in ([*good, bad], [good[0], bad, *good[1:]]):
        assert decoded(lambda: [decode_op(d) for d in batch])[0] == "error"  # noqa: B023
        assert_batch_agrees(batch)


@pytest.mark.parametrize(
    ("a", "b"), [("authority", "constraint"), ("evidence", "reasserts"), ("namespace", "kind")]
)
def test_map_keys_out_of_canonical_order_are_refused_even_when_the_swapped_values_are_equal(a, b):
    good = [op.encode() for op in _claims(4)]
    fields = Writer("w", clock=lambda: 0).claim("fact", "s", "p", 1).to_value()
    assert fields[a] == fields[b]
    keys = list(fields)
    i, j = keys.index(a), keys.index(b)
    keys[i], keys[j] = keys[j], keys[i]
    bad = msgpack.packb({k: fields[k] for k in keys}, use_bin_type=True)
    with pytest.raises(EncodingError) as err:
        decode_op(bad)
    assert err.value.rule == "canonical"
    assert_batch_agrees([*good, bad])


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.bin")), ids=lambda p: p.name)
def test_every_op_corpus_file_is_refused_inside_a_batch_with_its_own_error(path):
    good = [op.encode() for op in _claims(4)]
    assert_batch_agrees([*good[:2], path.read_bytes(), *good[2:]])


def test_the_batch_path_vouches_for_well_formed_batches_of_every_core_op_type(monkeypatch):
    writer = Writer("w", clock=lambda: 0)
    claims = [writer.claim("ns", f"s{i}", "p", [i, {"b": 2, "a": 1}]) for i in range(4)]
    evidence = [writer.evidence("doc", {"page": i}) for i in range(3)]
    retractions = [writer.retract(claim_id=c.claim_id, reason="r") for c in claims[:3]]
    decisions = [
        writer.decide(
            locus=blake3.blake3(b"%d" % i).digest(),
            conflict_id=bytes(32),
            selected_claim_id=c.claim_id,
        )
        for i, c in enumerate(claims[:3])
    ]
    ops = [*claims, *evidence, *retractions, *decisions]
    batch = [op.encode() for op in ops]

    def refuse(data: bytes) -> None:
        raise AssertionError("a well-formed batch of core ops must not need decode_op")

    monkeypatch.setattr(statefuse.core.op, "decode_op", refuse)
    fast = decode_ops_fast(batch)
    assert fast is not None
    assert [op.op_id for op in fast] == [op.op_id for op in ops]
    assert [type(op) for op in fast] == [type(op) for op in ops]
    assert OpSet(fast) == OpSet(ops)  # OpSet re-hashes every op: the ids are the true ones


def test_a_batch_mixing_trust_ops_with_core_ops_decodes_like_one_op_at_a_time():
    root = KEY.author
    trust = TrustWriter(root)
    ops = [
        *_claims(3, author=root),
        trust.admit(OTHER_KEY.author, ["writer"]),
        trust.revoke(OTHER_KEY.author, through_seq=3),
        *_claims(2, author=root, confidence=0.5),
    ]
    assert_batch_agrees([op.encode() for op in ops])


def test_decoded_labels_are_shared_like_decode_op_shares_them():
    batch = [op.encode() for op in _claims(4)]
    one = decode_op(batch[0])
    for op in decode_ops(batch):
        assert op.namespace is one.namespace and op.predicate is one.predicate
        assert op.scope is one.scope and op.kind is one.kind


def test_decode_ops_of_nothing_is_nothing():
    assert decode_ops([]) == [] and decode_ops_fast([]) == []


# --- verify_change against verify_change_reference ---------------------------------------------


def _item(op_bytes: bytes) -> list[bytes]:
    return [blake3.blake3(op_bytes).digest(), op_bytes]


#: One damage per signed change, so that every check is reached about as often.
CHANGE_DAMAGE = (
    "intact",
    "op bytes",
    "op id",
    "swap ids",
    "other author",
    "duplicate op",
    "body fields",
    "body packing",
    "body bytes",
    "signer",
    "outer fields",
    "outer packing",
    "outer bytes",
)


@st.composite
def signed_changes(draw: st.DrawFn) -> bytes:
    """A signed change, intact or with one damage: ops, ids, fields, packing, signer, bytes."""
    ops = [
        dataclasses.replace(op, author=KEY.author)
        for op in draw(st.lists(op_strategy(), min_size=1, max_size=6))
    ]
    items = [[op.op_id, op.encode()] for op in ops]
    what = draw(st.sampled_from(CHANGE_DAMAGE))
    i = draw(st.integers(0, len(items) - 1))
    if what == "op bytes":
        damaged = draw(op_encodings(ops[i]))
        items[i] = _item(damaged) if draw(st.booleans()) else [items[i][0], damaged]
    elif what == "op id":
        items[i] = [draw(st.sampled_from(TRICKY)), items[i][1]]
    elif what == "swap ids" and len(items) > 1:
        items[0][0], items[-1][0] = items[-1][0], items[0][0]
    elif what == "other author":
        items[i] = _item(dataclasses.replace(ops[i], author=OTHER_KEY.author).encode())
    elif what == "duplicate op":
        items.append(items[i])
    seq = draw(st.integers(1, 3))
    body_fields: dict[str, object] = {
        "author": KEY.author,
        "ops": items,
        "prev": None if seq == 1 else blake3.blake3(b"prev").digest(),
        "registry": FP,
        "seq": seq,
        "space": SPACE,
        "v": 1,
    }
    if what == "body fields":
        body_fields = draw(damaged_map(body_fields))
    body = loose_pack(body_fields, draw(st.data()), what == "body packing")
    if what == "body bytes":
        body = draw(damaged_bytes(body))
    signer = OTHER_KEY if what == "signer" else KEY
    outer: dict[str, object] = {
        "change": body,
        "sig": signer.sign(signed_message(change_id_of(body))),
        "v": 1,
    }
    if what == "outer fields":
        outer = draw(damaged_map(outer))
    data = loose_pack(outer, draw(st.data()), what == "outer packing")
    return draw(damaged_bytes(data)) if what == "outer bytes" else data


#: Each example verifies a signed change both ways: CI runs 500 (1,000 took over 7 s).
@settings(max_examples=min(settings.default.max_examples, 500))
@given(signed_changes())
def test_verify_change_gives_the_verdict_reason_and_message_of_the_reference(data):
    assert_verifiers_agree(data)


def _signed_items(items: list[list[bytes]], **changes: object) -> bytes:
    """A change by KEY holding ``items`` ([claimed id, op bytes]), canonical and signed."""
    fields = {
        "author": KEY.author,
        "ops": items,
        "prev": None,
        "registry": FP,
        "seq": 1,
        "space": SPACE,
        "v": 1,
        **changes,
    }
    body = msgpack.packb(fields, use_bin_type=True)
    signature = KEY.sign(signed_message(change_id_of(body)))
    return msgpack.packb({"change": body, "sig": signature, "v": 1}, use_bin_type=True)


def _signed(ops: list[Any]) -> bytes:
    return _signed_items([[op.op_id, op.encode()] for op in ops])


def test_a_well_formed_change_is_verified_without_the_one_op_at_a_time_steps(monkeypatch):
    data = _signed(_claims(10, author=KEY.author))
    expected = verdict(verify_change_reference, data)

    def refuse(*args: object) -> None:
        raise AssertionError("a well-formed change must not need the reference steps")

    monkeypatch.setattr(verify_module, "_envelope", refuse)
    monkeypatch.setattr(verify_module, "_ops", refuse)
    assert expected[0] == "ok" and verdict(verify_change, data) == expected


def _verdict_of(result: Any) -> tuple[object, ...]:
    if isinstance(result, VerificationError):
        return ("error", result.reason, result.message)
    c = result
    fields = (c.space, c.author, c.seq, c.prev, c.registry, c.change_id, c.signature, c.data)
    return ("ok", fields, [summary(op) for op in c.ops])


# Each example signs and verifies several changes: a quarter of the profile's examples.
@settings(max_examples=max(10, settings.default.max_examples // 4))
@given(st.lists(signed_changes(), max_size=5))
def test_verify_changes_gives_each_change_the_verdict_verify_change_gives_it(datas):
    expected = [verdict(verify_change_reference, d) for d in datas]
    got = verify_changes([UnverifiedChange(d) for d in datas], space=SPACE)
    assert [_verdict_of(r) for r in got] == expected


def test_verify_changes_settles_a_bundle_of_many_small_changes_in_shared_batches(monkeypatch):
    changes = [_signed(_claims(2, author=KEY.author)) for _ in range(5)]
    bad = [[op.op_id, op.encode()] for op in _claims(3, author=OTHER_KEY.author)]
    changes.insert(2, _signed_items(bad))
    expected = [verdict(verify_change_reference, d) for d in changes]
    calls = []
    real = statefuse.core.op.decode_ops_fast

    def spy(datas: Any) -> Any:
        calls.append(len(datas))
        return real(datas)

    monkeypatch.setattr(verify_module, "decode_ops_fast", spy)
    got = verify_changes([UnverifiedChange(d) for d in changes], space=SPACE)
    assert [_verdict_of(r) for r in got] == expected
    assert expected[2][1] is QuarantineReason.OP_AUTHOR_MISMATCH
    assert calls[0] == 13  # every op of the bundle in one batch


def _by_other_author(item: list[bytes]) -> list[bytes]:
    op = decode_op(item[1])
    return _item(dataclasses.replace(op, author=OTHER_KEY.author).encode())


def _claiming_another_id(item: list[bytes]) -> list[bytes]:
    return [blake3.blake3(item[0]).digest(), item[1]]


def _undecodable(item: list[bytes]) -> list[bytes]:
    return _item(item[1][:-1])


@pytest.mark.parametrize("position", [0, 5, 9])
@pytest.mark.parametrize("spoil", [_by_other_author, _claiming_another_id, _undecodable])
def test_the_first_bad_op_of_a_change_is_the_one_reported(position, spoil):
    items = [[op.op_id, op.encode()] for op in _claims(10, author=KEY.author)]
    items[position] = spoil(items[position])
    data = _signed_items(items)
    reference = verdict(verify_change_reference, data)
    assert reference[0] == "error" and f"ops[{position}]" in reference[2]  # type: ignore[operator]
    assert_verifiers_agree(data)


@pytest.mark.parametrize(
    "changes",
    [
        {"seq": 1 << 63, "prev": bytes(32)},
        {"seq": (1 << 64) - 1, "prev": bytes(32)},
        {"seq": -(1 << 63)},
        {"seq": 0},
        {"seq": True},
        {"seq": 1.0},
        {"v": True},
        {"v": 2},
        {"prev": b""},
        {"prev": bytes(32)},
        {"registry": "fingerprint"},
        {"space": ""},
        {"space": "x" * 257},
        {"author": "alice"},
        {"ops": []},
        {"ops": [[bytes(32)]]},
        {"ops": [[bytes(32), b"", b""]]},
        {"ops": "none"},
    ],
    ids=repr,
)
def test_a_change_field_at_the_edge_of_its_rule_gets_the_reference_verdict(changes):
    items = [[op.op_id, op.encode()] for op in _claims(4, author=KEY.author)]
    assert_verifiers_agree(_signed_items(items, **changes))


def test_a_retraction_without_a_target_inside_a_batch_is_refused_like_decode_op_does():
    writer = Writer("w", clock=lambda: 0)
    claims = _claims(3)
    good = writer.retract(claim_id=claims[0].claim_id)
    fields = good.to_value()
    fields["target_claim_id"] = None
    bad = msgpack.packb(fields, use_bin_type=True)
    batch = [*(c.encode() for c in claims), bad, good.encode()]
    assert decoded(lambda: [decode_op(d) for d in batch])[0] == "error"
    assert_batch_agrees(batch)
    assert isinstance(decode_op(good.encode()), ClaimRetracted)


def test_evidence_with_map_content_is_stored_with_sorted_keys_from_canonical_bytes():
    writer = Writer("w", clock=lambda: 0)
    evidence = [writer.evidence("doc", {"b": i, "a": [i]}) for i in range(3)]
    batch = [e.encode() for e in evidence]
    assert_batch_agrees(batch)
    for op in decode_ops(batch):
        assert isinstance(op, EvidenceAdded) and list(op.content) == ["a", "b"]  # type: ignore[arg-type]
