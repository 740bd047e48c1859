"""Values and their canonical encoding (SEMANTICS §1).

Invariant: every value has exactly one byte string, and ``decode_value`` accepts only that byte
string. Ids are hashes of these bytes, so a second accepted encoding would let one op live under
two ids. The decoder therefore re-encodes what it parsed and compares, which rejects every kind of
non-canonical input (long integer forms, float32, unsorted or duplicate map keys, str8 where fixstr
fits...) with one rule instead of a list of special cases.

Values: ``None``, ``bool``, ``int`` (signed 64-bit), finite ``float`` (always float64), ``str``,
``bytes``, ``list`` and ``dict`` with ``str`` keys. ``1``, ``1.0`` and ``True`` are different values
(they encode differently), which is why value equality is byte equality (`same_value`), not ``==``.

Values inside ops are deeply immutable (SEMANTICS §1): an op's id is the hash of its content, so
anything that could change a list or map held by an op (a caller keeping the list it wrote, a
resolver, a ranker) would leave an op that no longer matches its id. `frozen_value` is
`canonical_value` for values that go into an op: lists come back as `FrozenList` (a ``tuple``
subclass) and maps as `FrozenMap` (a read-only ``Mapping`` whose entries sit behind a
``MappingProxyType``), at every depth. Both compare equal to the ``list`` / ``dict`` with the same
contents (either way round), have no mutating method, encode to exactly the bytes of that list or
dict, and are accepted wherever a value is (so a value read back can be written again);
`plain_value` gives an editable deep copy. `canonical_value` and `decode_value` still return
fresh plain containers, which their callers own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NoReturn, Union

import msgpack

from registry.error import EncodingError, InputError, ValueRuleError, ValueTypeError

Value = Union[
    None, bool, int, float, str, bytes, list["Value"], dict[str, "Value"], "FrozenList", "FrozenMap"
]

#: Deepest nesting of lists/maps inside one value (the top level counts as depth 1).
MAX_DEPTH = 32
#: Most items in one list, or entries in one map.
MAX_CONTAINER_ITEMS = 10_000
#: Longest str (in UTF-8 bytes) or bytes value.
MAX_STRING_BYTES = 1 << 20
#: Largest canonical encoding of one value or op accepted by the decoder.
MAX_ENCODED_BYTES = 4 << 20

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1


class FrozenList(tuple[Value, ...]):
    """A list value as an op holds it: an immutable ``tuple`` that equals the ``list`` with the
    same items (``FrozenList([1]) == [1]`` and ``[1] == FrozenList([1])``), repr'd like one, and
    encoded like one. Built by `frozen_value`; its items are frozen values too."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return len(self) == len(other) and tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return repr(list(self))

    def __copy__(self) -> FrozenList:
        return self

    def __deepcopy__(self, memo: object) -> FrozenList:
        return self

    def __reduce__(self) -> tuple[type[FrozenList], tuple[tuple[Value, ...]]]:
        return (FrozenList, (tuple(self),))


class FrozenMap(Mapping[str, Value]):
    """A map value as an op holds it: a read-only ``Mapping`` that equals the ``dict`` with the
    same entries (either way round), repr'd like one, encoded like one, and iterated in canonical
    key order. Its entries live in a dict nothing outside reaches: the one attribute is a
    ``MappingProxyType`` over it, and attributes cannot be set. Built by `frozen_value`; its
    values are frozen values too."""

    __slots__ = ("_items",)
    _items: Mapping[str, Value]

    def __new__(cls, items: Mapping[str, Value] | Iterable[tuple[str, Value]] = ()) -> FrozenMap:
        return _frozen_map(dict(items))

    def __getitem__(self, key: str) -> Value:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, dict):
            return self._items == other
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, which do not hash

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"FrozenMap is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"FrozenMap is immutable (cannot delete {name!r})")

    def __repr__(self) -> str:
        return repr(dict(self._items))

    def __copy__(self) -> FrozenMap:
        return self

    def __deepcopy__(self, memo: object) -> FrozenMap:
        return self

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, Value]]]:
        return (FrozenMap, (dict(self._items),))


_SET_ITEMS = FrozenMap.__dict__["_items"].__set__


def _frozen_map(entries: dict[str, Value]) -> FrozenMap:
    """A FrozenMap over ``entries`` itself (the caller hands it over and keeps no reference)."""
    m = object.__new__(FrozenMap)
    _SET_ITEMS(m, MappingProxyType(entries))
    return m


def canonical_value(value: object, field: str = "value", *, depth: int = 1) -> Value:
    """Validate ``value`` and return a fresh plain copy (lists and dicts, which the caller owns)
    whose maps are in canonical key order. Accepts frozen values as well as plain ones.

    Raises ValueTypeError for types outside the model and ValueRuleError for out-of-range
    numbers, non-finite floats, over-deep nesting and oversized containers or strings.
    """
    return _canon(value, field, depth, list, dict)


def frozen_value(value: object, field: str = "value", *, depth: int = 1) -> Value:
    """`canonical_value`, with every list built as a `FrozenList` and every map as a
    `FrozenMap`: the form values take inside an op. Raises what `canonical_value` raises."""
    return _canon(value, field, depth, FrozenList, _frozen_map)


def frozen_canonical(value: Value) -> Value:
    """A value that is canonical already (from `canonical_value`, or restored from a trusted
    cache) with its lists and maps frozen; scalars and frozen containers come back as they are.
    Skips validation: anything else must go through `frozen_value`."""
    t = type(value)
    if t is list:
        return FrozenList(map(frozen_canonical, value))  # type: ignore[arg-type]
    if t is dict:
        return _frozen_map({k: frozen_canonical(v) for k, v in value.items()})  # type: ignore[union-attr]
    return value


def plain_value(value: Value) -> Value:
    """A deep copy of ``value`` with plain ``list`` and ``dict`` containers, for a caller that
    wants to edit a value it read back (and write the result as a new claim)."""
    if isinstance(value, (list, FrozenList)):
        return [plain_value(v) for v in value]
    if isinstance(value, (dict, FrozenMap)):
        return {k: plain_value(v) for k, v in value.items()}
    return value


def _canon(value: Any, field: str, depth: int, new_list: Any, new_map: Any) -> Value:
    t = type(value)
    if t is str:
        if len(value) > MAX_STRING_BYTES // 4 and len(_utf8(value, field)) > MAX_STRING_BYTES:
            raise ValueRuleError(
                field, "max-string-bytes", f"string longer than {MAX_STRING_BYTES} bytes"
            )
        _utf8(value, field)
        out: Value = value
        return out
    if t is bool or value is None:
        return value  # type: ignore[no-any-return]
    if t is int:
        if not INT_MIN <= value <= INT_MAX:
            raise ValueRuleError(field, "int64", f"integer {value} outside signed 64-bit range")
        return value  # type: ignore[no-any-return]
    if t is float:
        if not math.isfinite(value):
            raise ValueRuleError(field, "finite-float", f"float {value!r} is not finite")
        return value  # type: ignore[no-any-return]
    if t is bytes:
        if len(value) > MAX_STRING_BYTES:
            raise ValueRuleError(field, "max-string-bytes", f"bytes longer than {MAX_STRING_BYTES}")
        return value  # type: ignore[no-any-return]
    if isinstance(value, (msgpack.Timestamp, msgpack.ExtType)):
        raise ValueTypeError(field, "no-ext-types", "msgpack extension types are not values")
    if t is list or t is dict or t is FrozenList or t is FrozenMap:
        if depth > MAX_DEPTH:
            raise ValueRuleError(field, "max-depth", f"nesting deeper than {MAX_DEPTH}")
        if len(value) > MAX_CONTAINER_ITEMS:
            raise ValueRuleError(
                field,
                "max-container-items",
                f"container with more than {MAX_CONTAINER_ITEMS} items",
            )
        if t is list or t is FrozenList:
            return new_list(  # type: ignore[no-any-return]
                [
                    _canon(v, f"{field}[{i}]", depth + 1, new_list, new_map)
                    for i, v in enumerate(value)
                ]
            )
        items: list[tuple[bytes, str, Any]] = []
        for k, v in value.items():
            if type(k) is not str:
                raise ValueTypeError(
                    field, "str-map-keys", f"map key {k!r} is a {type(k).__name__}, not str"
                )
            items.append((_utf8(k, f"{field}.<key>"), k, v))
        items.sort(key=lambda kv: kv[0])
        return new_map(  # type: ignore[no-any-return]
            {k: _canon(v, f"{field}.{k}", depth + 1, new_list, new_map) for _, k, v in items}
        )
    raise ValueTypeError(
        field,
        "value-type",
        f"{t.__name__} is not a StateFuse value "
        "(allowed: None, bool, int, float, str, bytes, list, dict with str keys)",
    )


def _utf8(value: str, field: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueRuleError(field, "utf8", "string is not valid UTF-8 (lone surrogate)") from None


#: Reused: creating a packer costs more than packing a small value. It has no ``default`` hook,
#: so packing runs no Python code and cannot be interleaved by another thread.
_PACKER = msgpack.Packer(
    use_bin_type=True, use_single_float=False, strict_types=True, autoreset=True
)


def _pack(value: Any) -> bytes:
    try:
        packed: bytes = _PACKER.pack(value)
    except TypeError:  # frozen containers: a packer of its own, whose hook makes them plain
        packed = msgpack.packb(
            value, use_bin_type=True, use_single_float=False, strict_types=True, default=_unfreeze
        )
    return packed


def _unfreeze(obj: object) -> object:
    """msgpack's ``default`` hook: a frozen container as the plain one it encodes as."""
    if type(obj) is FrozenList:
        return list(obj)
    if type(obj) is FrozenMap:
        return dict(obj._items)
    raise TypeError(f"{type(obj).__name__} is not a StateFuse value")


def encode_value(value: object, field: str = "value") -> bytes:
    """The canonical bytes of ``value`` (validated first; see `canonical_value`)."""
    return encode_canonical(canonical_value(value, field), field)


def encode_canonical(value: Value, field: str = "value") -> bytes:
    """Encode a value already returned by `canonical_value` (skips validation)."""
    data = _pack(value)
    if len(data) > MAX_ENCODED_BYTES:
        raise ValueRuleError(
            field, "max-encoded-bytes", f"encoding longer than {MAX_ENCODED_BYTES} bytes"
        )
    return data


class _ExtFound(Exception):
    """Raised inside msgpack's ext hook; mapped to EncodingError with the caller's field."""

    def __init__(self, code: int) -> None:
        self.code = code


def _reject_ext(code: int, data: bytes) -> Any:
    raise _ExtFound(code)


def decode_value(data: bytes, field: str = "value") -> Value:
    """Decode canonical bytes into a value, or raise EncodingError / ValueRuleError.

    Rejects trailing bytes, truncation, extension types, non-str map keys, integers outside
    int64, non-finite floats, over-deep or oversized data, and any non-canonical form.
    """
    value = unpack_strict(data, field)
    try:
        canon = canonical_value(value, field)
    except InputError as exc:
        raise EncodingError(exc.field, exc.rule, exc.message) from None
    if encode_canonical(canon, field) != data:
        raise EncodingError(
            field, "canonical", "bytes are valid msgpack but not the canonical encoding"
        )
    return canon


def unpack_strict(data: bytes, field: str = "value") -> Any:
    """The msgpack half of `decode_value`: one bounded msgpack object, no extension types, no
    trailing bytes. It does NOT check the value model or canonical form: a caller that uses it
    must re-encode what it built and compare (as `statefuse.op.decode_op` does through the id).

    Raises EncodingError (rules ``max-encoded-bytes``, ``truncated``, ``no-ext-types``,
    ``trailing-bytes``, ``msgpack``) and ValueTypeError for input that is not bytes.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueTypeError(field, "bytes-input", f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_ENCODED_BYTES:
        raise EncodingError(
            field, "max-encoded-bytes", f"{len(data)} bytes exceeds {MAX_ENCODED_BYTES}"
        )
    if not data:
        raise EncodingError(field, "truncated", "empty input")
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            ext_hook=_reject_ext,
            max_str_len=MAX_STRING_BYTES,
            max_bin_len=MAX_STRING_BYTES,
            max_array_len=MAX_CONTAINER_ITEMS,
            max_map_len=MAX_CONTAINER_ITEMS,
        )
    except _ExtFound as exc:
        raise EncodingError(
            field, "no-ext-types", f"msgpack extension type {exc.code} is not allowed"
        ) from None
    except msgpack.ExtraData:
        raise EncodingError(field, "trailing-bytes", "bytes left over after one value") from None
    except (ValueError, msgpack.UnpackException, TypeError, RecursionError) as exc:
        detail = str(exc) or type(exc).__name__
        raise EncodingError(field, "msgpack", f"not valid msgpack ({detail})") from None
    return value


def same_value(a: object, b: object) -> bool:
    """Value equality as SEMANTICS defines it: equal canonical bytes (so ``1 != 1.0 != True``)."""
    if _KIND.get(type(a), type(a)) is not _KIND.get(type(b), type(b)):
        return False
    if isinstance(a, (str, bytes)) or a is None:
        return a == b
    return encode_value(a) == encode_value(b)


#: A frozen container is the same kind of value as the plain one it stands for.
_KIND: dict[type, type] = {FrozenList: list, FrozenMap: dict}
