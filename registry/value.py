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
subclass) and maps as `FrozenMap` (a read-only ``Mapping`` whose dict no attribute reaches), at
every depth. Both compare equal to the ``list`` / ``dict`` with the same
contents (either way round), have no mutating method, encode to exactly the bytes of that list or
dict, and are accepted wherever a value is (so a value read back can be written again);
`plain_value` gives an editable deep copy. `canonical_value` and `decode_value` still return
fresh plain containers, which their callers own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from operator import is_
from typing import Any, NoReturn, Union, cast

import msgpack

from statefuse.registry.error import EncodingError, InputError, ValueRuleError, ValueTypeError

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
    encoded like one. Its items are frozen values too: ``FrozenList(items)`` is
    ``frozen_value(list(items))``, so it validates and freezes at every depth and raises what
    `frozen_value` raises."""

    __slots__ = ()

    def __new__(cls, items: Iterable[object] = ()) -> FrozenList:
        return cast(FrozenList, frozen_value(list(items)))

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
    key order. Its values are frozen values too: ``FrozenMap(items)`` is
    ``frozen_value(dict(items))``, so it validates, sorts and freezes at every depth and raises
    what `frozen_value` raises.

    Its entries live in a dict that no attribute reaches: the slot holding it has no name on the
    class (its descriptor is taken off below, so only this module can read or set it), and
    attributes cannot be set. Why not a ``MappingProxyType`` attribute over the dict: that is two
    more objects per map for the cyclic garbage collector to track, which made decoding ops with
    map values a third slower.
    """

    __slots__ = ("_entries",)

    def __new__(cls, items: Mapping[str, Value] | Iterable[tuple[str, Value]] = ()) -> FrozenMap:
        return cast(FrozenMap, frozen_value(dict(items)))

    def __getitem__(self, key: str) -> Value:
        return _entries_of(self)[key]

    # The views and `get` of the entries themselves: read-only (a view's ``mapping`` is a
    # ``MappingProxyType``), and C-level (the `Mapping` mixins would walk the map in Python).
    def keys(self) -> KeysView[str]:
        return _entries_of(self).keys()

    def values(self) -> ValuesView[Value]:
        return _entries_of(self).values()

    def items(self) -> ItemsView[str, Value]:
        return _entries_of(self).items()

    def get(self, key: str, default: Any = None) -> Any:
        return _entries_of(self).get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(_entries_of(self))

    def __len__(self) -> int:
        return len(_entries_of(self))

    def __contains__(self, key: object) -> bool:
        return key in _entries_of(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return _entries_of(self) == _entries_of(other)
        if isinstance(other, dict):
            return _entries_of(self) == other
        if isinstance(other, Mapping):
            return _entries_of(self) == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, which do not hash

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError(f"FrozenMap is immutable (cannot set {name!r})")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError(f"FrozenMap is immutable (cannot delete {name!r})")

    def __repr__(self) -> str:
        return repr(_entries_of(self))

    def __copy__(self) -> FrozenMap:
        return self

    def __deepcopy__(self, memo: object) -> FrozenMap:
        return self

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, Value]]]:
        return (FrozenMap, (dict(_entries_of(self)),))


_ENTRIES = FrozenMap.__dict__["_entries"]
del FrozenMap._entries  # type: ignore[attr-defined]  # see the class docstring
#: The dict a FrozenMap holds, itself: for this module, and the op encoder's packing hook.
_entries_of: Callable[[FrozenMap], dict[str, Value]] = _ENTRIES.__get__
_set_entries: Callable[[FrozenMap, dict[str, Value]], None] = _ENTRIES.__set__


def _frozen_list(items: Iterable[Value]) -> FrozenList:
    """A FrozenList of ``items`` as they are (frozen values already: nothing is checked)."""
    return tuple.__new__(FrozenList, items)


def _frozen_map(entries: dict[str, Value]) -> FrozenMap:
    """A FrozenMap over ``entries`` itself (frozen values in canonical key order already: nothing
    is checked; the caller hands the dict over and keeps no reference)."""
    m = object.__new__(FrozenMap)
    _set_entries(m, entries)
    return m


def canonical_value(value: object, field: str = "value", *, depth: int = 1) -> Value:
    """Validate ``value`` and return a fresh plain copy (lists and dicts, which the caller owns)
    whose maps are in canonical key order. Accepts frozen values as well as plain ones.

    Raises ValueTypeError for types outside the model and ValueRuleError for out-of-range
    numbers, non-finite floats, over-deep nesting and oversized containers or strings.
    """
    try:
        return _canon(value, field, depth, False, False)
    except InputError:  # again, naming each item's field: the same error, naming the culprit
        return _canon(value, field, depth, False, True)


def frozen_value(value: object, field: str = "value", *, depth: int = 1) -> Value:
    """`canonical_value`, with every list built as a `FrozenList` and every map as a
    `FrozenMap`: the form values take inside an op. Validating and freezing are one pass, and a
    frozen container that is valid at ``depth`` and in canonical order comes back itself (so
    writing a value read back copies nothing). Raises what `canonical_value` raises."""
    try:
        return _canon(value, field, depth, True, False)
    except InputError:  # again, naming each item's field: the same error, naming the culprit
        return _canon(value, field, depth, True, True)


def frozen_canonical(value: Value) -> Value:
    """A value that is canonical already (from `canonical_value`, or restored from a trusted
    cache) with its lists and maps frozen; scalars and frozen containers come back as they are.
    Skips validation: anything else must go through `frozen_value`."""
    t = type(value)
    if t is list:
        return _frozen_list(map(frozen_canonical, value))  # type: ignore[arg-type]
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


def json_value(v: Value) -> Any:
    """A JSON-ready deep copy of a value; bytes become ``{"$bytes": "<hex>"}`` (shared by the
    View's JSON and the judge payload, so both spell values the same way)."""
    if isinstance(v, bytes):
        return {"$bytes": v.hex()}
    if isinstance(v, (list, FrozenList)):
        return [json_value(x) for x in v]
    if isinstance(v, (dict, FrozenMap)):
        return {k: json_value(x) for k, x in v.items()}
    return v


def _canon(value: Any, field: str, depth: int, frozen: bool, named: bool) -> Value:
    """``value`` validated, its maps in canonical order, its containers frozen or plain. Unless
    ``named``, items are checked under their container's field (formatting a name per item
    costs more than checking most items), so a caller that gets an error checks again, named.
    """
    t = type(value)
    if t is str:
        # An ASCII str is its own UTF-8; only others are encoded (to check for lone surrogates).
        if value.isascii():
            if len(value) > MAX_STRING_BYTES:
                raise ValueRuleError(
                    field, "max-string-bytes", f"string longer than {MAX_STRING_BYTES} bytes"
                )
        elif len(_utf8(value, field)) > MAX_STRING_BYTES:
            raise ValueRuleError(
                field, "max-string-bytes", f"string longer than {MAX_STRING_BYTES} bytes"
            )
        out: Value = value
        return out
    if t is int:
        if not INT_MIN <= value <= INT_MAX:
            raise ValueRuleError(field, "int64", f"integer {value} outside signed 64-bit range")
        return value  # type: ignore[no-any-return]
    if t is bool or value is None:
        return value  # type: ignore[no-any-return]
    if t is float:
        if not math.isfinite(value):
            raise ValueRuleError(field, "finite-float", f"float {value!r} is not finite")
        return value  # type: ignore[no-any-return]
    if t is bytes:
        if len(value) > MAX_STRING_BYTES:
            raise ValueRuleError(field, "max-string-bytes", f"bytes longer than {MAX_STRING_BYTES}")
        return value  # type: ignore[no-any-return]
    if t is list or t is dict or t is FrozenList or t is FrozenMap:
        if depth > MAX_DEPTH:
            raise ValueRuleError(field, "max-depth", f"nesting deeper than {MAX_DEPTH}")
        if len(value) > MAX_CONTAINER_ITEMS:
            raise ValueRuleError(
                field,
                "max-container-items",
                f"container with more than {MAX_CONTAINER_ITEMS} items",
            )
        depth += 1
        if t is list or t is FrozenList:
            if named:
                items = [
                    _canon(v, f"{field}[{i}]", depth, frozen, True) for i, v in enumerate(value)
                ]
            else:
                items = [_canon(v, field, depth, frozen, False) for v in value]
            if not frozen:
                return items
            if t is FrozenList and all(map(is_, items, value)):
                return value  # type: ignore[no-any-return]
            return _frozen_list(items)
        entries = _entries_of(value) if t is FrozenMap else value
        keys = list(entries)
        if not _STR.issuperset(map(type, keys)) or not all(map(str.isascii, keys)):
            for k in keys:
                if type(k) is not str:
                    raise ValueTypeError(
                        field, "str-map-keys", f"map key {k!r} is a {type(k).__name__}, not str"
                    )
                _utf8(k, f"{field}.<key>")
        # Canonical order is by UTF-8 bytes, which is code point order: the order of str.
        order = sorted(keys)
        if named:
            out_map = {k: _canon(entries[k], f"{field}.{k}", depth, frozen, True) for k in order}
        else:
            out_map = {k: _canon(entries[k], field, depth, frozen, False) for k in order}
        if not frozen:
            return out_map
        if t is FrozenMap and order == keys and all(map(is_, out_map.values(), entries.values())):
            return value  # type: ignore[no-any-return]
        return _frozen_map(out_map)
    if isinstance(value, (msgpack.Timestamp, msgpack.ExtType)):
        raise ValueTypeError(field, "no-ext-types", "msgpack extension types are not values")
    raise ValueTypeError(
        field,
        "value-type",
        f"{t.__name__} is not a StateFuse value "
        "(allowed: None, bool, int, float, str, bytes, list, dict with str keys)",
    )


#: The one type a map key may have.
_STR = frozenset((str,))


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


class PackerPool:
    """msgpack packers with a ``default`` hook, each lent to one `pack` call at a time.

    A packer keeps its buffer between calls, so a packer shared by threads must never run
    Python code while it packs (another thread could start packing into the same buffer); a
    hook is Python code. So each `pack` takes a packer from the pool and puts it back when done
    (``list.pop`` and ``list.append`` are atomic), and a new one is made only while every packer
    is lent: the pool holds at most as many packers as threads ever packed at once, and packing
    costs about what a shared packer costs, far less than making a packer per call.
    """

    __slots__ = ("_free", "_options")

    def __init__(self, **options: Any) -> None:
        self._options = {**options, "autoreset": True}
        self._free: list[Any] = []

    def pack(self, obj: object) -> bytes:
        free = self._free
        try:
            packer = free.pop()
        except IndexError:
            packer = msgpack.Packer(**self._options)
        try:
            packed: bytes = packer.pack(obj)
        finally:
            free.append(packer)
        return packed


def _unfreeze(obj: object) -> object:
    """msgpack's ``default`` hook: a `FrozenMap` as the dict it encodes as (a `FrozenList` is a
    tuple, which a packer that is not strict packs as an array as it is)."""
    if type(obj) is FrozenMap:
        return _entries_of(obj)  # only read, by the packer
    raise TypeError(f"{type(obj).__name__} is not a StateFuse value")


#: Packs values that hold frozen containers, which `_PACKER` does not take. Not strict about
#: types, so that a FrozenList packs as it is: it only ever gets values that are canonical.
_FROZEN_PACKERS = PackerPool(use_bin_type=True, use_single_float=False, default=_unfreeze)


def _pack(value: Any) -> bytes:
    t = type(value)
    if t is FrozenList or t is FrozenMap:
        return _FROZEN_PACKERS.pack(value)
    try:
        packed: bytes = _PACKER.pack(value)
    except TypeError:  # a frozen container inside a plain one, or not a value at all
        pass
    else:
        return packed
    # Made plain (and checked: anything that is not a value raises the error that says so).
    packed = _PACKER.pack(canonical_value(value))
    return packed


def encode_value(value: object, field: str = "value") -> bytes:
    """The canonical bytes of ``value`` (validated first; see `canonical_value`)."""
    return encode_canonical(canonical_value(value, field), field)


def encode_canonical(value: Value, field: str = "value") -> bytes:
    """Encode a value already returned by `canonical_value` or `frozen_value` (skips
    validation)."""
    data = _pack(value)
    if len(data) > MAX_ENCODED_BYTES:
        raise _too_long(field)
    return data


def encode_frozen(value: Value, field: str = "value") -> bytes:
    """`encode_canonical` for a value known to hold frozen containers, such as a plain list
    around one: packed by a packer that takes them at once, rather than after the plain packer
    has tried and failed."""
    data = _FROZEN_PACKERS.pack(value)
    if len(data) > MAX_ENCODED_BYTES:
        raise _too_long(field)
    return data


def _too_long(field: str) -> ValueRuleError:
    return ValueRuleError(
        field, "max-encoded-bytes", f"encoding longer than {MAX_ENCODED_BYTES} bytes"
    )


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
    must re-encode what it built and compare (as `statefuse.core.op.decode_op` does through the id).

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
