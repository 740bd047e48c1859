"""SEMANTICS §1: values and their canonical encoding.

The laws are checked against an independent reference encoder (`reference_encode`, plain msgpack
with recursively sorted keys) and against hand-built byte strings, never against the library's own
helpers. `values()` is the strategy for every allowed value; test_op and test_opset reuse it.
"""

from __future__ import annotations

import math
import re
import struct
import sys
from decimal import Decimal
from enum import IntEnum
from pathlib import Path

import msgpack
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statefuse import registry
from statefuse.registry import (
    MAX_CONTAINER_ITEMS,
    MAX_DEPTH,
    MAX_ENCODED_BYTES,
    MAX_STRING_BYTES,
    EncodingError,
    InputError,
    StateFuseError,
    ValueRuleError,
    ValueTypeError,
    canonical_value,
    decode_value,
    encode_value,
    same_value,
)

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# --- strategies -----------------------------------------------------------------------------------

#: Integers at every boundary between two msgpack integer forms, and the int64 edges.
EDGE_INTS = (
    0,
    1,
    -1,
    127,
    128,
    -32,
    -33,
    255,
    256,
    -128,
    -129,
    65535,
    65536,
    -32768,
    -32769,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    (1 << 32) - 1,
    -(1 << 31),
    -(1 << 31) - 1,
    INT64_MAX,
    INT64_MIN,
)
#: Floats at the edges of float64: signed zero, subnormals, the normal range, the largest finite.
EDGE_FLOATS = (
    0.0,
    -0.0,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    2.225073858507201e-308,
    sys.float_info.max,
    -sys.float_info.max,
    1.5,
    0.1,
)

int64s = st.one_of(st.sampled_from(EDGE_INTS), st.integers(INT64_MIN, INT64_MAX))
finite_floats = st.one_of(
    st.sampled_from(EDGE_FLOATS), st.floats(allow_nan=False, allow_infinity=False)
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    int64s,
    finite_floats,
    st.text(max_size=24),
    st.binary(max_size=24),
)


def values(max_leaves: int = 8) -> st.SearchStrategy[object]:
    """Every allowed value: scalars, and lists / str-keyed maps of them (depth <= max_leaves)."""
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=8), children, max_size=4),
        ),
        max_leaves=max_leaves,
    )


# --- independent helpers --------------------------------------------------------------------------


def _sorted_maps(value: object) -> object:
    if type(value) is dict:
        return {k: _sorted_maps(value[k]) for k in sorted(value, key=lambda k: k.encode("utf-8"))}
    if type(value) is list:
        return [_sorted_maps(v) for v in value]
    return value


def reference_encode(value: object) -> bytes:
    """SEMANTICS §1 written out: msgpack, float64 floats, map keys sorted by their UTF-8 bytes."""
    return msgpack.packb(_sorted_maps(value), use_bin_type=True, use_single_float=False)


def _reordered(data: st.DataObject, value: object) -> object:
    """The same value with every map rebuilt in an order drawn by Hypothesis."""
    if type(value) is dict:
        items = data.draw(st.permutations(list(value.items())))
        return {k: _reordered(data, v) for k, v in items}
    if type(value) is list:
        return [_reordered(data, v) for v in value]
    return value


def _nested_lists(depth: int) -> object:
    value: object = None
    for _ in range(depth):
        value = [value]
    return value


def _nested_maps(depth: int) -> object:
    value: object = None
    for _ in range(depth):
        value = {"k": value}
    return value


def _int_forms(n: int) -> list[bytes]:
    """Every msgpack encoding of the integer ``n``."""
    forms = []
    if 0 <= n <= 0x7F or -32 <= n < 0:
        forms.append(struct.pack(">b", n) if n < 0 else bytes([n]))
    for tag, fmt, lo, hi in (
        (0xCC, ">B", 0, 0xFF),
        (0xCD, ">H", 0, 0xFFFF),
        (0xCE, ">I", 0, 0xFFFF_FFFF),
        (0xCF, ">Q", 0, 0xFFFF_FFFF_FFFF_FFFF),
        (0xD0, ">b", -(1 << 7), (1 << 7) - 1),
        (0xD1, ">h", -(1 << 15), (1 << 15) - 1),
        (0xD2, ">i", -(1 << 31), (1 << 31) - 1),
        (0xD3, ">q", INT64_MIN, INT64_MAX),
    ):
        if lo <= n <= hi:
            forms.append(bytes([tag]) + struct.pack(fmt, n))
    return forms


def _length_forms(kind: str, length: int) -> list[bytes]:
    """Every msgpack header announcing a str / bin / array / map of ``length``."""
    fix = {"str": (0xA0, 31), "array": (0x90, 15), "map": (0x80, 15)}
    wide = {
        "str": ((0xD9, ">B"), (0xDA, ">H"), (0xDB, ">I")),
        "bin": ((0xC4, ">B"), (0xC5, ">H"), (0xC6, ">I")),
        "array": ((0xDC, ">H"), (0xDD, ">I")),
        "map": ((0xDE, ">H"), (0xDF, ">I")),
    }
    forms = []
    if kind in fix and length <= fix[kind][1]:
        forms.append(bytes([fix[kind][0] | length]))
    for tag, fmt in wide[kind]:
        if length < 1 << (8 * struct.calcsize(fmt)):
            forms.append(bytes([tag]) + struct.pack(fmt, length))
    return forms


def _expect(exc_type: type[InputError], call, *, field: str, rule: str) -> InputError:
    with pytest.raises(exc_type) as info:
        call()
    assert isinstance(info.value, StateFuseError)
    assert (info.value.field, info.value.rule) == (field, rule), str(info.value)
    return info.value


def _decode_rejects(data: bytes, *, rule: str, field: str = "value") -> EncodingError:
    error = _expect(EncodingError, lambda: decode_value(data), field=field, rule=rule)
    assert isinstance(error, EncodingError)
    return error


# --- the limits -----------------------------------------------------------------------------------


def test_limits_are_named_constants_exported_from_registry():
    for name in ("MAX_DEPTH", "MAX_CONTAINER_ITEMS", "MAX_STRING_BYTES", "MAX_ENCODED_BYTES"):
        assert name in registry.__all__
        assert type(getattr(registry, name)) is int
        assert getattr(registry, name) > 0
    assert MAX_STRING_BYTES < MAX_ENCODED_BYTES


def documented_limits() -> dict[str, int]:
    """The limits table of the data model reference, as ``{constant name: value}``."""
    page = Path(__file__).resolve().parents[1] / "docs" / "reference" / "data-model.md"
    text = page.read_text(encoding="utf-8")
    limits = {}
    for name, shown in re.findall(r"^\| `(MAX_[A-Z_]+)` \| ([^|]+?) \|", text, re.M):
        number, _, unit = shown.replace(",", "").partition(" ")
        limits[name] = int(number) << {"": 0, "KiB": 10, "MiB": 20}[unit]
    return limits


def test_the_data_model_reference_documents_every_value_limit_with_its_value():
    documented = documented_limits()
    for name in ("MAX_DEPTH", "MAX_CONTAINER_ITEMS", "MAX_STRING_BYTES", "MAX_ENCODED_BYTES"):
        assert documented.get(name) == getattr(registry, name), name


def test_error_classes_form_one_tree_and_subclass_the_builtins_callers_expect():
    assert issubclass(EncodingError, StateFuseError) and issubclass(EncodingError, ValueError)
    assert issubclass(ValueRuleError, StateFuseError) and issubclass(ValueRuleError, ValueError)
    assert issubclass(ValueTypeError, StateFuseError) and issubclass(ValueTypeError, TypeError)
    for cls in (EncodingError, ValueRuleError, ValueTypeError):
        assert issubclass(cls, InputError)


# --- laws -----------------------------------------------------------------------------------------


@given(values())
@example(-0.0)
@example(5e-324)
@example({"b": 1, "a": [INT64_MIN, INT64_MAX, -0.0, b"", ""]})
def test_decoding_an_encoding_gives_back_the_same_canonical_bytes(value):
    data = encode_value(value)
    decoded = decode_value(data)
    assert encode_value(decoded) == data
    assert same_value(decoded, value)


@given(values())
def test_encoding_is_msgpack_with_map_keys_sorted_by_utf8_bytes(value):
    assert encode_value(value) == reference_encode(value)


@given(values(), st.data())
def test_encoding_and_same_value_do_not_depend_on_map_insertion_order(value, data):
    reordered = _reordered(data, value)
    assert encode_value(reordered) == encode_value(value)
    assert same_value(reordered, value)


@given(st.dictionaries(st.text(max_size=6), st.none(), min_size=2, max_size=8), st.data())
def test_canonical_value_returns_maps_in_utf8_key_order_whatever_the_input_order(mapping, data):
    shuffled = dict(data.draw(st.permutations(list(mapping.items()))))
    keys = list(canonical_value(shuffled))
    assert keys == sorted(mapping, key=lambda k: k.encode("utf-8"))


def test_map_keys_sort_by_bytes_so_a_prefix_comes_first_and_length_does_not_matter():
    data = encode_value({"b": 0, "aa": 0, "a": 0})
    assert data == b"\x83\xa1a\x00\xa2aa\x00\xa1b\x00"


@pytest.mark.parametrize(
    ("value", "data"),
    [(1, b"\x01"), (1.0, b"\xcb" + struct.pack(">d", 1.0)), (True, b"\xc3")],
)
def test_one_one_point_oh_and_true_have_their_own_encodings(value, data):
    assert encode_value(value) == data


def test_one_one_point_oh_and_true_are_three_different_values():
    for a, b in [(1, 1.0), (1, True), (1.0, True), (0, 0.0), (0, False), (0.0, -0.0)]:
        assert encode_value(a) != encode_value(b)
        assert not same_value(a, b)
        assert not same_value([a], [b])
        assert not same_value({"k": a}, {"k": b})


@given(values(), values())
def test_same_value_is_equality_of_canonical_bytes(a, b):
    assert same_value(a, b) == (encode_value(a) == encode_value(b))
    assert same_value(a, a)


@given(int64s)
def test_every_integer_has_exactly_one_accepted_encoding_and_it_is_the_shortest(n):
    canonical = encode_value(n)
    forms = _int_forms(n)
    assert canonical in forms
    assert len(canonical) == min(len(f) for f in forms)
    assert decode_value(canonical) == n and type(decode_value(canonical)) is int
    for other in forms:
        if other != canonical:
            _decode_rejects(other, rule="canonical")


@given(
    st.one_of(
        st.tuples(st.just("str"), st.text(max_size=40).map(lambda s: s.encode("utf-8"))),
        st.tuples(st.just("bin"), st.binary(max_size=300)),
    )
)
@example(("str", b"x" * 31))
@example(("str", b"x" * 32))
@example(("bin", b"x" * 255))
@example(("bin", b"x" * 256))
def test_every_string_length_has_exactly_one_accepted_header(kind_and_body):
    kind, body = kind_and_body
    canonical = encode_value(body.decode("utf-8") if kind == "str" else body)
    forms = [header + body for header in _length_forms(kind, len(body))]
    assert canonical == min(forms, key=len)
    for other in forms:
        if other != canonical:
            _decode_rejects(other, rule="canonical")


@given(st.sampled_from(["array", "map"]), st.integers(0, 20))
def test_every_container_length_has_exactly_one_accepted_header(kind, length):
    items = (
        b"\xc0" * length
        if kind == "array"
        else b"".join(encode_value(f"k{i:02d}") + b"\xc0" for i in range(length))
    )
    value = [None] * length if kind == "array" else {f"k{i:02d}": None for i in range(length)}
    canonical = encode_value(value)
    forms = [header + items for header in _length_forms(kind, length)]
    assert canonical == min(forms, key=len)
    for other in forms:
        if other != canonical:
            _decode_rejects(other, rule="canonical")


# --- rejected at encode ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, float("-nan")])
def test_encoder_rejects_non_finite_floats(bad):
    _expect(ValueRuleError, lambda: encode_value(bad), field="value", rule="finite-float")
    _expect(
        ValueRuleError,
        lambda: encode_value({"a": [1, bad]}),
        field="value.a[1]",
        rule="finite-float",
    )


def test_encoder_errors_name_the_field_the_caller_gives():
    _expect(
        ValueRuleError, lambda: encode_value(math.nan, "price"), field="price", rule="finite-float"
    )


@given(st.one_of(st.integers(min_value=INT64_MAX + 1), st.integers(max_value=INT64_MIN - 1)))
@example(INT64_MAX + 1)
@example(INT64_MIN - 1)
@example(1 << 64)
def test_encoder_rejects_integers_outside_int64(n):
    _expect(ValueRuleError, lambda: encode_value(n), field="value", rule="int64")


@pytest.mark.parametrize(
    "bad",
    [
        set(),
        frozenset({1}),
        (1, 2),
        object(),
        1j,
        Decimal("1.5"),
        bytearray(b"x"),
        memoryview(b"x"),
        range(3),
        IntEnum("E", "A").A,
        type("S", (str,), {})("s"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_encoder_rejects_types_outside_the_value_model(bad):
    _expect(ValueTypeError, lambda: encode_value(bad), field="value", rule="value-type")
    _expect(
        ValueTypeError, lambda: encode_value([0, {"k": bad}]), field="value[1].k", rule="value-type"
    )


@pytest.mark.parametrize("key", [1, b"k", None, (1,), 1.5, True], ids=repr)
def test_encoder_rejects_map_keys_that_are_not_str(key):
    _expect(ValueTypeError, lambda: encode_value({key: 1}), field="value", rule="str-map-keys")


@pytest.mark.parametrize("text", ["\ud800", "a\udfffb", "\udc80"])
def test_encoder_rejects_lone_surrogates_in_strings_and_keys(text):
    _expect(ValueRuleError, lambda: encode_value(text), field="value", rule="utf8")
    _expect(ValueRuleError, lambda: encode_value({text: 1}), field="value.<key>", rule="utf8")


@pytest.mark.parametrize("make", [_nested_lists, _nested_maps], ids=["lists", "maps"])
def test_encoder_accepts_the_depth_limit_and_rejects_one_level_more(make):
    assert decode_value(encode_value(make(MAX_DEPTH))) == make(MAX_DEPTH)
    step = "[0]" if make is _nested_lists else ".k"
    _expect(
        ValueRuleError,
        lambda: encode_value(make(MAX_DEPTH + 1)),
        field="value" + step * MAX_DEPTH,
        rule="max-depth",
    )


def test_encoder_rejects_absurd_nesting_with_a_typed_error_not_a_recursion_error():
    deep = _nested_lists(sys.getrecursionlimit() * 10)
    with pytest.raises(ValueRuleError) as info:
        encode_value(deep)
    assert info.value.rule == "max-depth"


def test_encoder_accepts_containers_at_the_item_limit_and_rejects_one_more():
    encode_value([None] * MAX_CONTAINER_ITEMS)
    encode_value({f"{i}": None for i in range(MAX_CONTAINER_ITEMS)})
    _expect(
        ValueRuleError,
        lambda: encode_value([None] * (MAX_CONTAINER_ITEMS + 1)),
        field="value",
        rule="max-container-items",
    )
    _expect(
        ValueRuleError,
        lambda: encode_value({f"{i}": None for i in range(MAX_CONTAINER_ITEMS + 1)}),
        field="value",
        rule="max-container-items",
    )


@pytest.mark.parametrize(
    "char", ["x", "\u00e9", "\u20ac", "\U0001f600"], ids=["1B", "2B", "3B", "4B"]
)
def test_encoder_limits_strings_by_utf8_bytes_not_characters(char):
    width = len(char.encode("utf-8"))
    at_limit = char * (MAX_STRING_BYTES // width)
    encode_value(at_limit)
    over = at_limit + char
    assert len(over.encode("utf-8")) > MAX_STRING_BYTES
    _expect(ValueRuleError, lambda: encode_value(over), field="value", rule="max-string-bytes")


def test_encoder_rejects_bytes_longer_than_the_limit():
    encode_value(b"\x00" * MAX_STRING_BYTES)
    _expect(
        ValueRuleError,
        lambda: encode_value(b"\x00" * (MAX_STRING_BYTES + 1)),
        field="value",
        rule="max-string-bytes",
    )


def _list_of_bytes_encoding_to(total: int) -> list[bytes]:
    """A list of bin32 items (5-byte headers) in a fixarray whose encoding is ``total`` bytes."""
    chunks, remaining = [], total - 1
    while remaining:
        n = min(MAX_STRING_BYTES, remaining - 5)
        chunks.append(b"\x00" * n)
        remaining -= n + 5
    value = chunks
    assert len(value) <= 15 and all(len(c) > 0xFFFF for c in value)
    return value


def test_total_encoded_size_limit_is_inclusive_at_both_encode_and_decode():
    value = _list_of_bytes_encoding_to(MAX_ENCODED_BYTES)
    data = encode_value(value)
    assert len(data) == MAX_ENCODED_BYTES
    assert decode_value(data) == value


def test_encoder_and_decoder_reject_values_over_the_total_size_limit():
    value = _list_of_bytes_encoding_to(MAX_ENCODED_BYTES + 1)
    _expect(ValueRuleError, lambda: encode_value(value), field="value", rule="max-encoded-bytes")
    _decode_rejects(reference_encode(value), rule="max-encoded-bytes")


# --- rejected at decode ---------------------------------------------------------------------------


@given(st.integers(1, (1 << 52) - 1), st.booleans())
@example(1 << 51, False)
def test_decoder_rejects_nan_payloads_crafted_as_float64_bytes(mantissa, negative):
    bits = (negative << 63) | (0x7FF << 52) | mantissa
    _decode_rejects(b"\xcb" + struct.pack(">Q", bits), rule="finite-float")


@pytest.mark.parametrize(
    "data",
    [
        b"\xcb" + struct.pack(">d", math.inf),
        b"\xcb" + struct.pack(">d", -math.inf),
        b"\xca" + struct.pack(">f", math.inf),
        b"\xca" + struct.pack(">f", math.nan),
    ],
    ids=["+inf64", "-inf64", "+inf32", "nan32"],
)
def test_decoder_rejects_infinities_and_nan_in_either_float_width(data):
    _decode_rejects(data, rule="finite-float")


def test_decoder_rejects_a_nan_nested_in_a_map_naming_its_path():
    _decode_rejects(
        b"\x81\xa1a\x91\xcb" + struct.pack(">d", math.nan), rule="finite-float", field="value.a[0]"
    )


@given(st.integers(INT64_MAX + 1, (1 << 64) - 1))
@example(INT64_MAX + 1)
@example((1 << 64) - 1)
def test_decoder_rejects_uint64_values_outside_int64(n):
    _decode_rejects(b"\xcf" + struct.pack(">Q", n), rule="int64")


@pytest.mark.parametrize(
    "data",
    [
        b"\xcc\x01",
        b"\xd0\x05",
        b"\xcd\x00\x10",
        b"\xd1\x00\x05",
        b"\xce\x00\x00\x00\x01",
        b"\xd3" + struct.pack(">q", -1),
        b"\xd0\xff",
        b"\xcf" + struct.pack(">Q", 1),
    ],
    ids=lambda d: d.hex(),
)
def test_decoder_rejects_integers_in_a_longer_form_than_needed(data):
    _decode_rejects(data, rule="canonical")


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
@example(1.5)
@example(-0.0)
def test_decoder_rejects_float32_even_when_the_value_fits(x):
    _decode_rejects(b"\xca" + struct.pack(">f", x), rule="canonical")


@pytest.mark.parametrize(
    "data",
    [
        b"\xd9\x01a",
        b"\xda\x00\x01a",
        b"\xc5\x00\x01a",
        b"\xdc\x00\x01\xc0",
        b"\xde\x00\x01\xa1a\xc0",
    ],
    ids=["str8-for-fixstr", "str16-for-fixstr", "bin16-for-bin8", "array16", "map16"],
)
def test_decoder_rejects_a_wider_length_header_than_needed(data):
    _decode_rejects(data, rule="canonical")


def test_str_and_bin_are_distinct_values_and_each_decodes_to_its_own_type():
    assert decode_value(b"\xa1a") == "a"
    assert decode_value(b"\xc4\x01a") == b"a"
    assert not same_value("a", b"a")


@pytest.mark.parametrize(
    "data",
    [b"\x82\xa1b\xc0\xa1a\xc0", b"\x82\xa2aa\xc0\xa1a\xc0", b"\x91\x82\xa1z\x01\xa1y\x02"],
    ids=["top-level", "prefix-after-longer", "nested"],
)
def test_decoder_rejects_maps_with_unsorted_keys(data):
    _decode_rejects(data, rule="canonical")


def test_decoder_rejects_maps_with_duplicate_keys():
    _decode_rejects(b"\x82\xa1a\x01\xa1a\x02", rule="canonical")
    _decode_rejects(b"\x82\xa1a\x01\xa1a\x01", rule="canonical")


def test_decoder_rejects_integer_map_keys_before_building_the_map():
    # strict_map_key makes msgpack refuse int keys itself (a defence against hash flooding),
    # so the rule is the generic msgpack one.
    _decode_rejects(b"\x81\x01\xc0", rule="msgpack")
    _decode_rejects(b"\x81\x91\x01\xc0", rule="msgpack")


def test_decoder_rejects_bytes_map_keys():
    _decode_rejects(b"\x81\xc4\x01k\xc0", rule="str-map-keys")


EXT_ENCODINGS = {
    "fixext1": b"\xd4\x01\x00",
    "fixext2": b"\xd5\x01\x00\x00",
    "fixext4": b"\xd6\x01" + bytes(4),
    "fixext8": b"\xd7\x01" + bytes(8),
    "fixext16": b"\xd8\x01" + bytes(16),
    "ext8-empty": b"\xc7\x00\x05",
    "ext8": b"\xc7\x03\x05abc",
    "ext16": b"\xc8\x00\x03\x05abc",
    "ext32": b"\xc9\x00\x00\x00\x03\x05abc",
    "timestamp32": b"\xd6\xff" + struct.pack(">I", 1),
    "timestamp64": b"\xd7\xff" + struct.pack(">Q", 1),
    "timestamp96": b"\xc7\x0c\xff" + struct.pack(">Iq", 0, 1),
    "nested-in-list": b"\x91\xd4\x01\x00",
}


@pytest.mark.parametrize("data", EXT_ENCODINGS.values(), ids=EXT_ENCODINGS.keys())
def test_decoder_rejects_extension_types_and_timestamps_with_an_encoding_error(data):
    with pytest.raises(EncodingError):
        decode_value(data)


@pytest.mark.parametrize("data", EXT_ENCODINGS.values(), ids=EXT_ENCODINGS.keys())
def test_decoder_rejects_extension_types_naming_the_callers_field_and_the_no_ext_rule(data):
    _decode_rejects(data, rule="no-ext-types")


@given(values(max_leaves=4), st.binary(min_size=1, max_size=8))
def test_decoder_rejects_trailing_bytes_after_one_value(value, extra):
    _decode_rejects(encode_value(value) + extra, rule="trailing-bytes")


@given(values(max_leaves=4))
@example("a" * 40)
@example(INT64_MIN)
@example(-0.0)
def test_decoder_rejects_every_truncation_of_a_valid_encoding(value):
    data = encode_value(value)
    for cut in range(len(data)):
        _decode_rejects(data[:cut], rule="truncated" if cut == 0 else "msgpack")


@pytest.mark.parametrize("make", [_nested_lists, _nested_maps], ids=["lists", "maps"])
def test_decoder_rejects_one_level_deeper_than_the_depth_limit(make):
    _decode_rejects(
        reference_encode(make(MAX_DEPTH + 1)),
        rule="max-depth",
        field="value" + ("[0]" if make is _nested_lists else ".k") * MAX_DEPTH,
    )


@pytest.mark.parametrize(
    "data",
    [b"\x91" * 2000 + b"\xc0", b"\x81\xa1k" * 2000 + b"\xc0", b"\x91" * 200_000 + b"\xc0"],
    ids=["lists-2000", "maps-2000", "lists-200000"],
)
def test_decoder_turns_pathological_nesting_into_an_encoding_error_not_a_crash(data):
    with pytest.raises(EncodingError) as info:
        decode_value(data)
    assert info.value.field == "value"
    assert info.value.rule in {"msgpack", "max-depth"}


def test_decoder_rejects_containers_over_the_item_limit():
    n = MAX_CONTAINER_ITEMS + 1
    _decode_rejects(b"\xdd" + struct.pack(">I", n) + b"\xc0" * n, rule="msgpack")
    entries = b"".join(reference_encode(f"{i:05d}") + b"\xc0" for i in range(n))
    _decode_rejects(b"\xdf" + struct.pack(">I", n) + entries, rule="msgpack")


def test_decoder_rejects_strings_and_bytes_over_the_size_limit():
    n = MAX_STRING_BYTES + 1
    _decode_rejects(b"\xdb" + struct.pack(">I", n) + b"a" * n, rule="msgpack")
    _decode_rejects(b"\xc6" + struct.pack(">I", n) + b"a" * n, rule="msgpack")


def test_decoder_rejects_a_length_header_that_promises_more_than_the_input_holds():
    _decode_rejects(b"\xdb\xff\xff\xff\xff" + b"a", rule="msgpack")
    _decode_rejects(b"\xdd\x7f\xff\xff\xff" + b"\xc0", rule="msgpack")


@pytest.mark.parametrize(
    "data",
    [b"\xa2\xed\xa0", b"\xa1\xff", b"\xa3\xf4\x90\x80"],
    ids=["surrogate", "ff", "above-max-code-point"],
)
def test_decoder_rejects_strings_that_are_not_utf8(data):
    _decode_rejects(data, rule="msgpack")


def test_decoder_rejects_the_reserved_byte_and_empty_input():
    _decode_rejects(b"\xc1", rule="msgpack")
    _decode_rejects(b"", rule="truncated")


@pytest.mark.parametrize("data", ["\xc0", 0, None, [0xC0]], ids=repr)
def test_decoder_rejects_input_that_is_not_bytes(data):
    _expect(ValueTypeError, lambda: decode_value(data), field="value", rule="bytes-input")


def test_decoder_accepts_bytearray_and_memoryview():
    assert decode_value(bytearray(b"\x92\x01\xa1a")) == [1, "a"]
    assert decode_value(memoryview(b"\x92\x01\xa1a")) == [1, "a"]


def _decodes_canonically_or_raises_encoding_error(data: bytes) -> None:
    try:
        value = decode_value(data)
    except EncodingError:
        return
    assert encode_value(value) == data


@given(st.binary(max_size=64))
@example(b"\x91" * 40 + b"\xc0")
@example(b"\x81\xc4\x00\xc0")
@example(b"\xd6\xff\x00\x00\x00\x00")
def test_random_bytes_decode_canonically_or_raise_an_encoding_error(data):
    _decodes_canonically_or_raises_encoding_error(data)


@given(values(max_leaves=6), st.data())
def test_mutated_encodings_decode_canonically_or_raise_an_encoding_error(value, data):
    raw = bytearray(encode_value(value))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["set", "insert", "delete"]))
        if action == "set" and at < len(raw):
            raw[at] = data.draw(st.integers(0, 255))
        elif action == "insert":
            raw[at:at] = bytes([data.draw(st.integers(0, 255))])
        elif at < len(raw):
            del raw[at]
    _decodes_canonically_or_raises_encoding_error(bytes(raw))


# The encoder reuses one msgpack packer; a value it refuses halfway must not leave bytes behind.
REFUSED_HALFWAY = [
    [1, "two", object()],
    {"a": [1, {"b": math.nan}]},
    [1] * 10 + [1 << 64],
    ["ok", "lone \ud800 surrogate"],
]


@pytest.mark.parametrize("bad", REFUSED_HALFWAY, ids=["object", "nan", "int64", "surrogate"])
@given(value=values(max_leaves=8))
def test_a_value_refused_halfway_leaves_the_next_encoding_exact(bad, value):
    with pytest.raises(StateFuseError):
        encode_value(bad)
    assert encode_value(value) == reference_encode(value)
