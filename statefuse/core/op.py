"""Ops: the immutable facts a replica stores, and their ids (SEMANTICS §2).

Invariant: an op's ``op_id`` is blake3 of its canonical encoding, computed from the content when
the op is built, so ids can never be chosen, only derived. Every field is validated when an op is
built (by a writer or by `decode_op`; `decode_ops` validates a batch column by column and builds
only ops `decode_op` would build, with the same ids), so a well-formed op has exactly one encoding
and one id.
Set-valued fields (roles, evidence ids, dependencies, re-asserted retractions, decision groups)
are kept sorted and unique for the same reason.

Versions: every op carries its encoding version as ``"v"``. A type whose fields change keeps its
earlier encodings (`_OpBase._EARLIER`), and each version has its own field set
(`_OpBase._LACKS`: version -> the fields it lacks, held at their defaults): an op encodes as the
one version its content fits (`_OpBase._version`), and the decoders take exactly that version's
field set, so ops written before the change keep their bytes and ids and each op still has one
encoding. `DecisionAdded`: version 1 is the first release's decision (applies while its
candidate set ``conflict_id`` is current), version 2 adds the value groups it chose among
(``groups``, ``selected_group``; SEMANTICS §6), version 3 adds the ``outcome`` (select,
preserve, merge, defer) and the version it was made at (``made_at``), written only for a
decision other than a plain select or one that records its version. `ClaimAdded`: version 1
states a ``confidence``, version 2 is a claim whose author stated none (``confidence`` is None
and the field is left out of the encoding, so "unset" has one encoding and no float stands in
for it); versions 3 (a stated confidence) and 4 (none) add when and where the claim holds
(``valid_from``, ``valid_until``, ``context``; SEMANTICS §5, §9), written only for a claim that
says one of them. A release that knows fewer versions refuses an op of a newer one as an unknown
op version (rule ``op-version``), so its change is quarantined with that reason, never half
read. Each stays one Python type rather than a new op kind because every layer dispatches on
``type(op) is ...`` (op-set, index, materializer, the replica snapshot's columns and restore
path).

Ops compare and hash by ``op_id``: Python's ``==`` would call ``1``, ``1.0`` and ``True`` equal,
while StateFuse keeps them apart.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from itertools import repeat
from operator import attrgetter
from typing import Any, ClassVar, Union, cast

import blake3
import msgpack

from statefuse.core.error import EncodingError, OpRuleError, StateFuseError
from statefuse.registry import Registry
from statefuse.registry.error import ValueRuleError, ValueTypeError
from statefuse.registry.value import (
    INT_MAX,
    INT_MIN,
    MAX_ENCODED_BYTES,
    MAX_STRING_BYTES,
    FrozenList,
    FrozenMap,
    PackerPool,
    Value,
    _entries_of,
    canonical_value,
    encode_canonical,
    encode_frozen,
    encode_value,
    frozen_value,
    plain_value,
    unpack_strict,
)

#: Version of the op encoding; stored in every op as ``"v"``.
OP_FORMAT_VERSION = 1
#: Length of every id (op, claim, evidence, ref, locus, conflict): a blake3 digest.
ID_BYTES = 32
#: Longest author id, namespace, subject, predicate, role or other short text field, in characters.
MAX_NAME_CHARS = 1024
#: Longest free-text field (reasons, provenance), in characters.
MAX_TEXT_CHARS = 16_384
#: Most entries in one id list (evidence, depends_on, reasserts) or role list.
MAX_LIST_ITEMS = 1024
#: The highest lamport an op may carry: the signed 64-bit limit every value obeys. A writer's
#: clock saturates here instead of failing (SEMANTICS §2): once a counted op holds it, new ops
#: take it too, and equal lamports are ordered by op id, as everywhere.
MAX_LAMPORT = INT_MAX

CLAIM_REF_DOMAIN = b"statefuse/claim_ref/v1"

Author = Union[str, bytes]  # noqa: UP007 - a runtime alias on Python 3.10

_SCOPE_RE = re.compile(r"\A(?:global|hypothetical|draft|(?:task|session):[^\s].{0,1023})\Z", re.S)


class Outcome(Enum):
    """What a decision does with its conflict (SEMANTICS §6): ``select`` one value group,
    ``preserve`` every current group as an accepted alternative (settled without a winner),
    ``merge`` (select a claim the decider wrote that combines candidates it names in
    ``depends_on``; StateFuse never invents a merged value) or ``defer`` (acknowledged, still
    open)."""

    SELECT = "select"
    PRESERVE = "preserve"
    MERGE = "merge"
    DEFER = "defer"

    @property
    def settles(self) -> bool:
        """Whether a decision of this outcome settles its conflict (all but ``defer``)."""
        return self is not Outcome.DEFER

    @property
    def selects(self) -> bool:
        """Whether a decision of this outcome selects one value (``select``, ``merge``)."""
        return self is Outcome.SELECT or self is Outcome.MERGE


class Layer(Enum):
    """Where a claim sits in the context an LLM reads (identity, fact, working set, environment)."""

    IDENTITY = "identity"
    FACT = "fact"
    WORKING = "working"
    ENVIRONMENT = "environment"


def compute_claim_ref(
    namespace: str, subject: str, predicate: str, scope: str, ref_value: Value
) -> bytes:
    """The semantic handle of a claim (SEMANTICS §2)::

    blake3("statefuse/claim_ref/v1" ‖ canonical([namespace, subject, predicate, scope, ref_value]))
    """
    body = encode_value([namespace, subject, predicate, scope, ref_value], "claim_ref")
    return blake3.blake3(CLAIM_REF_DOMAIN + body).digest()


def _checked_claim_ref(
    namespace: str,
    subject: str,
    predicate: str,
    scope: str,
    ref_value: Value,
    *,
    canonical: bool = False,
) -> bytes:
    """`compute_claim_ref` for names a writer has validated already: the same bytes, without
    re-validating the names. ``ref_value`` is checked too unless ``canonical`` says it came
    from `canonical_value` (a normal form from a normalizer must always be checked)."""
    if not canonical:
        ref_value = canonical_value(ref_value, "claim_ref[4]", depth=2)
    parts: Value = [namespace, subject, predicate, scope, ref_value]
    if type(ref_value) is FrozenList or type(ref_value) is FrozenMap:
        body = encode_frozen(parts, "claim_ref")
    else:
        body = encode_canonical(parts, "claim_ref")
    return blake3.blake3(CLAIM_REF_DOMAIN + body).digest()


def claim_ref_for(
    registry: Registry, namespace: str, subject: str, predicate: str, scope: str, value: Value
) -> bytes:
    """The claim_ref a writer using ``registry`` stores for this claim.

    Raises NormalizationError if the predicate's contract derives refs from normal forms and the
    normalizer declines ``value``.
    """
    contract = registry.contract_for(namespace, predicate)
    return compute_claim_ref(
        namespace, subject, predicate, scope, registry.ref_value(contract, value)
    )


# --- field checks -------------------------------------------------------------------------------
# Each check takes (field name, raw input) and returns the stored form or raises OpRuleError.


def _err(name: str, rule: str, message: str) -> OpRuleError:
    return OpRuleError(name, rule, message)


def _name(name: str, v: object) -> str:
    if type(v) is not str:
        raise _err(name, "str", f"expected str, got {type(v).__name__}")
    if not v or len(v) > MAX_NAME_CHARS:
        raise _err(name, "name-length", f"must be 1..{MAX_NAME_CHARS} characters")
    _utf8(name, v)
    return v


def _text(name: str, v: object) -> str:
    if type(v) is not str:
        raise _err(name, "str", f"expected str, got {type(v).__name__}")
    if len(v) > MAX_TEXT_CHARS:
        raise _err(name, "text-length", f"longer than {MAX_TEXT_CHARS} characters")
    _utf8(name, v)
    return v


def _utf8(name: str, v: str) -> None:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise _err(name, "utf8", "not valid UTF-8 (lone surrogate)") from None


def _author(name: str, v: object) -> Author:
    if type(v) is bytes:
        if not 1 <= len(v) <= MAX_NAME_CHARS:
            raise _err(name, "author-length", f"must be 1..{MAX_NAME_CHARS} bytes")
        return v
    if type(v) is str:
        return _name(name, v)
    raise _err(name, "author-type", f"expected str or bytes, got {type(v).__name__}")


def _lamport(name: str, v: object) -> int:
    if type(v) is not int:
        raise _err(name, "int", f"expected int, got {type(v).__name__}")
    if not 1 <= v <= MAX_LAMPORT:
        raise _err(name, "lamport-range", f"must be 1..{MAX_LAMPORT} (MAX_LAMPORT), got {v}")
    return v


def _ms(name: str, v: object) -> int:
    if type(v) is not int:
        raise _err(name, "int", f"expected int, got {type(v).__name__}")
    if not 0 <= v <= INT_MAX:
        raise _err(name, "ms-range", f"must be a non-negative int64 (got {v})")
    return v


def _opt_ms(name: str, v: object) -> int | None:
    return None if v is None else _ms(name, v)


def _id(name: str, v: object) -> bytes:
    if type(v) is not bytes:
        raise _err(name, "id-type", f"expected {ID_BYTES} bytes, got {type(v).__name__}")
    if len(v) != ID_BYTES:
        raise _err(name, "id-length", f"expected {ID_BYTES} bytes, got {len(v)}")
    return v


def _opt_id(name: str, v: object) -> bytes | None:
    return None if v is None else _id(name, v)


def _sorted_unique(name: str, v: object, item: Any) -> tuple[Any, ...]:
    if (type(v) is tuple or type(v) is list) and not v:
        return ()
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple, set, frozenset)):
        raise _err(name, "list", f"expected a list, got {type(v).__name__}")
    if len(v) > MAX_LIST_ITEMS:
        raise _err(name, "list-length", f"more than {MAX_LIST_ITEMS} items")
    items = {item(f"{name}[]", x) for x in v}
    return tuple(sorted(items, key=_sort_key))


def _sort_key(x: str | bytes) -> bytes:
    return x.encode("utf-8") if isinstance(x, str) else x


def _ids(name: str, v: object) -> tuple[bytes, ...]:
    return _sorted_unique(name, v, _id)


#: Distinct labels kept for sharing (see `_label`); past this many, new labels are not shared.
MAX_SHARED_LABELS = 65_536
_shared_labels: dict[str, str] = {}


#: Labels that passed `_label` before, each mapped to its shared object: a writer names the
#: same few namespaces and predicates over and over, and a lookup is cheaper than the checks.
#: Bounded like the sharing table.
_checked_labels: dict[str, str] = {}


def _label(name: str, v: object) -> str:
    """A name from a small vocabulary (namespace, predicate, scope, kind...), shared, so that a
    million decoded claims hold one string object per distinct name instead of a copy each.
    Sharing equal immutable strings changes no result; the table is bounded."""
    if type(v) is str:
        seen = _checked_labels.get(v)
        if seen is not None:
            return seen
    shared = _share(_name(name, v))
    if len(_checked_labels) < MAX_SHARED_LABELS:
        _checked_labels[shared] = shared
    return shared


def _share(s: str) -> str:
    shared = _shared_labels.get(s)
    if shared is not None:
        return shared
    if len(_shared_labels) < MAX_SHARED_LABELS:
        _shared_labels[s] = s
    return s


def _opt_label(name: str, v: object) -> str:
    return "" if v == "" else _label(name, v)


def _roles(name: str, v: object) -> tuple[str, ...]:
    return _sorted_unique(name, v, _name)


def _scope(name: str, v: object) -> str:
    if type(v) is not str:
        raise _err(name, "str", f"expected str, got {type(v).__name__}")
    if not _SCOPE_RE.match(v):
        raise _err(
            name,
            "scope-format",
            f"{v!r} is not one of global, hypothetical, draft, task:<id>, session:<id>",
        )
    return _share(v)


def _layer(name: str, v: object) -> Layer:
    if isinstance(v, Layer):
        return v
    try:
        return Layer(v)
    except ValueError:
        allowed = ", ".join(m.value for m in Layer)
        raise _err(name, "layer", f"{v!r} is not a layer ({allowed})") from None


def _outcome(name: str, v: object) -> Outcome:
    if isinstance(v, Outcome):
        return v
    try:
        return Outcome(v)
    except ValueError:
        allowed = ", ".join(m.value for m in Outcome)
        raise _err(name, "outcome", f"{v!r} is not an outcome ({allowed})") from None


#: One head of a version a decision records: (author key, seq, change id).
MadeAtHead = tuple[bytes, int, bytes]


def _made_at_head(name: str, v: object) -> MadeAtHead:
    if not (isinstance(v, (list, tuple)) and len(v) == 3):
        raise _err(name, "made-at-head", "a head is (author key, seq, change id)")
    author, seq, change = v
    if type(seq) is not int or not 1 <= seq <= INT_MAX:
        raise _err(name, "made-at-head", "a head's seq is an int >= 1")
    return (_id(name, author), seq, _id(name, change))


def _made_at(name: str, v: object) -> tuple[MadeAtHead, ...]:
    """The replica version a decision was made at, as plain canonical data: its heads as
    ``(author, seq, change_id)``, sorted and distinct (the sync layer's ``Version`` builds and
    reads it; the core op stays free of sync). Empty: not recorded."""
    if (type(v) is tuple or type(v) is list) and not v:
        return ()
    if not isinstance(v, (list, tuple)):
        raise _err(name, "list", f"expected a list, got {type(v).__name__}")
    if len(v) > MAX_LIST_ITEMS:
        raise _err(name, "list-length", f"more than {MAX_LIST_ITEMS} items")
    return tuple(sorted({_made_at_head(f"{name}[]", x) for x in v}))


def _confidence(name: str, v: object) -> float | None:
    """None (the author stated no confidence) or a float in [0, 1] (an int 0 or 1 is taken as
    that float). NaN is refused with the rule ``unit-interval``: it is in no interval."""
    if v is None:
        return None
    if type(v) is int and v in (0, 1):
        return float(v)
    if type(v) is not float:
        raise _err(name, "float", f"expected float in [0, 1], got {type(v).__name__}")
    if not 0.0 <= v <= 1.0:
        raise _err(name, "unit-interval", f"must be in [0, 1] (got {v!r})")
    return v


#: Where an unset confidence ranks: below every stated confidence, 0.0 included.
UNSET_CONFIDENCE_RANK = -1.0


def confidence_rank(confidence: float | None) -> float:
    """The sort key of a claim's ``confidence``: the stated value, or `UNSET_CONFIDENCE_RANK`
    when the author stated none, so an unset confidence ranks below every stated one (0.0
    included) and two unset ones tie. Every ordering by confidence uses it."""
    return UNSET_CONFIDENCE_RANK if confidence is None else confidence


#: Most dimensions one claim's ``context`` names.
MAX_CONTEXT_DIMENSIONS = 16
#: Longest dimension name, and longest text value of a dimension, in characters.
MAX_DIMENSION_CHARS = 128


def _context(name: str, v: object) -> FrozenMap | None:
    """A claim's context dimensions: None (it names none; an empty map is stored as None, so
    "no dimensions" has one encoding) or a small map of names to scalars (str, int or bool),
    stored sorted (a `FrozenMap`) so that one context has one encoding. Floats, None and
    containers are refused: a dimension's values must compare exactly (SEMANTICS §5)."""
    if v is None:
        return None
    if not isinstance(v, Mapping):
        raise _err(
            name, "context-map", f"expected a map of dimension -> value, got {type(v).__name__}"
        )
    if not v:
        return None
    if len(v) > MAX_CONTEXT_DIMENSIONS:
        raise _err(name, "context-size", f"more than {MAX_CONTEXT_DIMENSIONS} dimensions")
    for k, x in v.items():
        if type(k) is not str or not k or len(k) > MAX_DIMENSION_CHARS:
            raise _err(
                name,
                "context-dimension",
                f"a dimension is a str of 1..{MAX_DIMENSION_CHARS} characters, not {k!r}",
            )
        _utf8(f"{name}.{k}", k)
        t = type(x)
        if t is str:
            if len(x) > MAX_DIMENSION_CHARS:
                raise _err(
                    f"{name}.{k}", "context-value", f"longer than {MAX_DIMENSION_CHARS} characters"
                )
            _utf8(f"{name}.{k}", x)
        elif t is int:
            if not INT_MIN <= x <= INT_MAX:
                raise _err(f"{name}.{k}", "context-value", "int outside the signed 64-bit range")
        elif t is not bool:
            raise _err(
                f"{name}.{k}",
                "context-value",
                f"a dimension's value is a str, int or bool, not {t.__name__}",
            )
    if type(v) is FrozenMap:
        return v
    return FrozenMap(v)


def _check_interval(valid_from: int | None, valid_until: int | None) -> None:
    if valid_from is not None and valid_until is not None and not valid_from < valid_until:
        raise _err(
            "valid_until",
            "valid-interval",
            f"valid_until ({valid_until}) must be after valid_from ({valid_from}): [from, until)",
        )


def _value(name: str, v: object) -> Value:
    # Depth 2: a value sits one level inside the op's own map, and the decoder counts from there.
    # Frozen, so that nothing reading the op can change it under its id (SEMANTICS §1).
    return frozen_value(v, name, depth=2)


def _opt_name(name: str, v: object) -> str:
    return "" if v == "" else _name(name, v)


# --- the op types ---------------------------------------------------------------------------------


_ORDERS: dict[tuple[type, int], tuple[str, ...]] = {}


def _encoding_order(cls: type[_OpBase], version: int | None = None) -> tuple[str, ...]:
    """The map keys of ``cls`` ops encoded as ``version`` (default: the type's current one), in
    canonical order (by UTF-8 bytes), computed once per op type and version."""
    v = cls.FORMAT_VERSION if version is None else version
    order = _ORDERS.get((cls, v))
    if order is None:
        names = ["op", "v", *_version_fields(cls, v)]
        order = _ORDERS[cls, v] = tuple(sorted(names, key=lambda n: n.encode("utf-8")))
    return order


def _version_fields(cls: type[_OpBase], version: int) -> tuple[str, ...]:
    """The ``_SCHEMA`` fields an op of ``cls`` encoded as ``version`` carries, in schema order."""
    absent = cls._LACKS.get(version, frozenset())
    return tuple(name for name, _ in cls._SCHEMA if name not in absent)


@dataclass(frozen=True, slots=True)
class _Encoder:
    """How to encode one op type fast.

    A msgpack map is its header followed by key, value, key, value...: exactly what an array of
    the keys and values interleaved packs to after the array's own header. So the op's values
    are fetched in canonical key order with one C-level getter, interleaved with the keys by
    slice assignment and packed as a flat list, and the array header is swapped for the map
    header: no dict is built, and the C packer never calls back into Python.
    """

    keys: tuple[str, ...]
    fetch: Callable[[Any], tuple[Any, ...]]
    #: Where Layer values sit in the fetched tuple (packed as their string value).
    layers: tuple[int, ...]
    #: Where the value field sits in the fetched tuple (None: the type has none). A `FrozenMap`
    #: there needs a packer whose hook unfreezes it (a `FrozenList` is a tuple, which packs as
    #: an array as it is).
    value_at: int | None
    #: Where ``"v"`` sits when the version is another than ``FORMAT_VERSION`` (which is what
    #: the getter fetches), else None.
    old_version_at: int | None
    version: int
    map_header: bytes
    #: Length of the flat array's header, replaced by ``map_header``.
    array_header_len: int


def _encoder(cls: type[_OpBase], version: int) -> _Encoder:
    enc = _ENCODERS.get((cls, version))
    if enc is None:
        order = _encoding_order(cls, version)
        names = ("KIND" if n == "op" else "FORMAT_VERSION" if n == "v" else n for n in order)
        checks = dict(cls._SCHEMA)
        n = len(order)
        enc = _ENCODERS[cls, version] = _Encoder(
            keys=order,
            fetch=attrgetter(*names),
            layers=tuple(
                i for i, name in enumerate(order) if checks.get(name) in (_layer, _outcome)
            ),
            value_at=next((i for i, name in enumerate(order) if checks.get(name) is _value), None),
            old_version_at=None if version == cls.FORMAT_VERSION else order.index("v"),
            version=version,
            map_header=bytes((0x80 | n,)) if n <= 15 else b"\xde" + n.to_bytes(2, "big"),
            array_header_len=1 if 2 * n <= 15 else 3,
        )
    return enc


_ENCODERS: dict[tuple[type, int], _Encoder] = {}
#: A Layer's (or an Outcome's) string value (a dict lookup is several times cheaper than the
#: enum's property).
_LAYER_VALUE: dict[Enum, str] = {m: m.value for e in (Layer, Outcome) for m in e}
#: Reused: creating a packer costs more than packing an op. It is never given a ``default``
#: hook, so packing runs no Python code and cannot be interleaved by another thread.
_PACKER = msgpack.Packer(use_bin_type=True, use_single_float=False, autoreset=True)


def _plain(obj: object) -> object:
    if type(obj) is FrozenMap:  # a map value (lists are tuples, which pack as arrays)
        return _entries_of(obj)  # only read, by the packer
    if isinstance(obj, (Layer, Outcome)):
        return obj.value
    raise TypeError(f"{type(obj).__name__} is not encodable")


#: Packs what `_PACKER` cannot: ops whose values hold maps, and fields of types `_plain` knows
#: (see `PackerPool` for why these are not `_PACKER`).
_HOOKED_PACKERS = PackerPool(use_bin_type=True, use_single_float=False, default=_plain)


_NO_DEFAULT = object()
_Step = tuple[str, Union[Callable[[str, Any], Any], None], Callable[[Any, Any], None], object]  # noqa: UP007
_PLANS: dict[tuple[type, frozenset[str]], tuple[_Step, ...]] = {}


def _build_plan(cls: type[_OpBase], checked: frozenset[str]) -> tuple[_Step, ...]:
    """Per field of ``cls`` in ``_SCHEMA`` order: its name, its check (None when the caller
    checked it), its slot setter (which bypasses frozen-ness, as dataclass ``__init__`` itself
    does) and its default. The default object itself needs no check when its check would store
    it unchanged (most metadata is left at its default, and a check costs more than ``is``)."""
    plan = _PLANS.get((cls, checked))
    if plan is None:
        defaults = {f.name: f.default for f in fields(cast(Any, cls))}
        steps = []
        for name, check in cls._SCHEMA:
            default = defaults.get(name, MISSING)
            if default is MISSING or check(name, default) is not default:
                default = _NO_DEFAULT
            steps.append(
                (name, None if name in checked else check, cls.__dict__[name].__set__, default)
            )
        plan = _PLANS[cls, checked] = tuple(steps)
    return plan


_ID_SETTERS: dict[type, Callable[[Any, bytes], None]] = {}


def _set_op_id(op: _OpBase, op_id: bytes) -> None:
    """Set ``op_id`` through the slot's own setter (bypassing frozen-ness, as the dataclass
    ``__init__`` does), found once per op type."""
    setter = _ID_SETTERS.get(type(op))
    if setter is None:
        slot = type(op).__dict__.get("op_id")
        if isinstance(slot, types.MemberDescriptorType):
            setter = slot.__set__
        else:

            def setter(o: Any, v: bytes) -> None:
                object.__setattr__(o, "op_id", v)

        _ID_SETTERS[type(op)] = setter
    setter(op, op_id)


#: The op sealed last and its encoding. An op is usually built and at once put into a change,
#: which needs its bytes again: `sealed_encoding` hands them over instead of encoding twice.
#: One slot, so nothing accumulates (keeping every op's bytes would double its memory). The
#: slot holds one (op, bytes) pair, replaced whole, so a thread sealing ops of its own can never
#: pair another thread's op with these bytes.
_LAST_SEALED: list[tuple[Any, bytes]] = [(None, b"")]


def sealed_encoding(op: _OpBase) -> bytes:
    """``op.encode()``, taken from the seal when ``op`` is the op built last (no re-encoding)."""
    sealed, data = _LAST_SEALED[0]
    return data if sealed is op else op.encode()


class _OpBase:
    """Shared behaviour: validation from ``_SCHEMA``, canonical encoding, id, equality by id."""

    __slots__ = ()
    KIND: ClassVar[str]
    #: The version this type's newest encoding carries as ``"v"``.
    FORMAT_VERSION: ClassVar[int] = OP_FORMAT_VERSION
    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]]
    #: Earlier encodings of this type that stay readable and writable. An op whose content fits
    #: an earlier version (`_version`) encodes as that version, so ops written before the type
    #: changed keep their bytes and ids. Empty for types with one encoding.
    _EARLIER: ClassVar[tuple[int, ...]] = ()
    #: The ``_SCHEMA`` fields each version's encoding lacks (held at their defaults when
    #: decoded): version -> field names. A version not named here carries every field.
    _LACKS: ClassVar[dict[int, frozenset[str]]] = {}
    op_id: bytes

    def _version(self) -> int:
        """The encoding version of this op (types with earlier versions say which fits)."""
        return self.FORMAT_VERSION

    def _validate_and_seal(self) -> None:
        self._validate()
        self._seal()

    def _validate(self) -> None:
        for name, check in self._SCHEMA:
            old = getattr(self, name)
            new = check(name, old)
            if new is not old:
                object.__setattr__(self, name, new)

    @classmethod
    def _from_checked(cls, checked: frozenset[str], values: Sequence[Any]) -> Any:
        """Build an op from its field ``values`` in ``_SCHEMA`` order, skipping the checks of
        the fields named in ``checked``: the caller (a writer) has just validated those into
        their stored form with the very checks ``_SCHEMA`` names. The rest are checked and the
        op is sealed exactly as the constructor does. For types whose constructor adds rules
        of its own (`_ROW_RULES`), use the constructor."""
        plan = _build_plan(cls, checked)
        if len(values) != len(plan):
            raise OpRuleError("values", "one-per-field", f"{cls.KIND} takes one value per field")
        op = object.__new__(cls)
        for (name, check, setter, default), v in zip(plan, values, strict=True):
            setter(op, v if check is None or v is default else check(name, v))
        op._seal()
        return op

    def _seal(self) -> None:
        data = self.encode()
        if len(data) > MAX_ENCODED_BYTES:
            raise OpRuleError(
                "op", "max-encoded-bytes", f"op encodes to more than {MAX_ENCODED_BYTES} bytes"
            )
        _set_op_id(self, blake3.blake3(data).digest())
        _LAST_SEALED[0] = (self, data)

    def to_value(self) -> dict[str, Value]:
        """The op as a plain value map (the thing that is canonically encoded), the caller's
        to edit: its lists and maps are plain copies."""
        out: dict[str, Value] = {}
        version = self._version()
        for name in _encoding_order(type(self), version):
            if name == "op":
                v: object = self.KIND
            elif name == "v":
                v = version
            else:
                v = getattr(self, name)
                if type(v) is FrozenList or type(v) is FrozenMap:
                    v = plain_value(v)
                elif isinstance(v, tuple):
                    v = [list(x) if isinstance(x, tuple) else x for x in v]
                elif isinstance(v, (Layer, Outcome)):
                    v = v.value
            out[name] = v  # type: ignore[assignment]
        return out

    def encode(self) -> bytes:
        """The canonical bytes of this op; ``op_id`` is their blake3.

        The same bytes as canonically encoding `to_value`, built faster (this runs for every op
        written and every op received; see `_Encoder`). Tuples pack as arrays and a Layer as
        its value. Fields hold exact, validated types, so msgpack's non-strict mode cannot
        change their meaning.
        """
        cls = type(self)
        enc = _encoder(cls, self._version() if cls._EARLIER else cls.FORMAT_VERSION)
        values: Sequence[Any] = enc.fetch(self)
        if enc.layers:
            values = list(values)
            for i in enc.layers:
                values[i] = _LAYER_VALUE[values[i]]
        if enc.old_version_at is not None:
            values = list(values)
            values[enc.old_version_at] = enc.version
        flat: list[Any] = [None] * (2 * len(enc.keys))
        flat[::2] = enc.keys
        flat[1::2] = values
        at = enc.value_at
        packer: Any = (
            _PACKER if at is None or type(values[at]) is not FrozenMap else _HOOKED_PACKERS
        )
        try:
            packed: bytes = packer.pack(flat)
        except TypeError:  # a map inside a list value, or a field of a type `_plain` knows
            packed = _HOOKED_PACKERS.pack(flat)
        return enc.map_header + packed[enc.array_header_len :]

    def recompute_id(self) -> bytes:
        """blake3 of the op's current content (differs from ``op_id`` only after tampering)."""
        return blake3.blake3(self.encode()).digest()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _OpBase):
            return NotImplemented
        return self.op_id == other.op_id

    def __hash__(self) -> int:
        return hash(self.op_id)


@dataclass(frozen=True, slots=True, eq=False)
class EvidenceAdded(_OpBase):
    """A piece of evidence (a document excerpt, a tool result...) claims can cite by id."""

    KIND: ClassVar[str] = "EvidenceAdded"
    author: Author
    lamport: int
    wall_ms: int
    source: str
    content: Value = None
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("source", _text),
        ("content", _value),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()

    @property
    def evidence_id(self) -> bytes:
        return self.op_id


@dataclass(frozen=True, slots=True, eq=False)
class ClaimAdded(_OpBase):
    """An assertion that ``subject``'s ``predicate`` in ``namespace`` is ``value`` (in ``scope``).

    ``claim_ref`` is the semantic handle, computed by the writer from its registry; readers use
    the stored ref. ``reasserts`` lists the ref retractions the writer saw and deliberately
    overrides by asserting the value again.

    ``confidence`` is what the author stated, a float in [0, 1], or None when it stated none
    (the default). Unset is not a number: wherever confidence orders candidates it ranks below
    every stated confidence, 0.0 included (`confidence_rank`), and it is never shown as one.
    Claims with a stated confidence encode as version 1 (so claims written before unset
    existed, at 1.0, keep their bytes and ids); claims without one encode as version 2, which
    leaves the field out.

    ``valid_from`` / ``valid_until`` (ms since the epoch, UTC; None: unbounded) say when the
    value holds in the world, half-open ``[from, until)``; ``context`` names the dimensions it
    holds in (``{"location": "London"}``; a dimension not named applies to every value of it).
    Both narrow conflicts (SEMANTICS §5, §9) and are data of the claim: part of its id, not of
    its ``claim_ref``. A claim carrying any of them encodes as version 3 (a stated confidence)
    or 4 (none), which add the three fields; every other claim keeps the encoding (and id) of
    version 1 or 2. A reader of an earlier release refuses versions 3 and 4 with the
    ``op-version`` rule (its peers quarantine such changes with that reason).
    """

    KIND: ClassVar[str] = "ClaimAdded"
    FORMAT_VERSION: ClassVar[int] = 4
    _EARLIER: ClassVar[tuple[int, ...]] = (1, 2, 3)
    _LACKS: ClassVar[dict[int, frozenset[str]]] = {
        1: frozenset(("valid_from", "valid_until", "context")),
        2: frozenset(("confidence", "valid_from", "valid_until", "context")),
        4: frozenset(("confidence",)),
    }
    author: Author
    lamport: int
    wall_ms: int
    namespace: str
    subject: str
    predicate: str
    value: Value
    claim_ref: bytes
    scope: str = "global"
    confidence: float | None = None
    evidence: tuple[bytes, ...] = ()
    provenance: str = ""
    authority: str = ""
    layer: Layer = Layer.FACT
    visibility: tuple[str, ...] = ()
    constraint: str = ""
    depends_on: tuple[bytes, ...] = ()
    expires: int | None = None
    kind: str = "fact"
    reasserts: tuple[bytes, ...] = ()
    valid_from: int | None = None
    valid_until: int | None = None
    context: FrozenMap | None = None
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("namespace", _label),
        ("subject", _name),
        ("predicate", _label),
        ("value", _value),
        ("claim_ref", _id),
        ("scope", _scope),
        ("confidence", _confidence),
        ("evidence", _ids),
        ("provenance", _text),
        ("authority", _opt_label),
        ("layer", _layer),
        ("visibility", _roles),
        ("constraint", _opt_label),
        ("depends_on", _ids),
        ("expires", _opt_ms),
        ("kind", _label),
        ("reasserts", _ids),
        ("valid_from", _opt_ms),
        ("valid_until", _opt_ms),
        ("context", _context),
    )

    def __post_init__(self) -> None:
        self._validate()
        _check_interval(self.valid_from, self.valid_until)
        self._seal()

    def _version(self) -> int:
        if self.valid_from is None and self.valid_until is None and self.context is None:
            return 2 if self.confidence is None else 1
        return 4 if self.confidence is None else 3

    @property
    def situated(self) -> bool:
        """True when the claim says when or where it holds (an interval or a context)."""
        return (
            self.valid_from is not None or self.valid_until is not None or self.context is not None
        )

    @property
    def claim_id(self) -> bytes:
        return self.op_id

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.subject, self.predicate)


@dataclass(frozen=True, slots=True, eq=False)
class ClaimRetracted(_OpBase):
    """Withdraws one claim (``target_claim_id``) and/or every claim with a ref
    (``target_claim_ref``).

    ``superseded_by`` names the claim that replaces the target; it is metadata for rendering and
    repair and never changes which claims are active.
    """

    KIND: ClassVar[str] = "ClaimRetracted"
    author: Author
    lamport: int
    wall_ms: int
    target_claim_id: bytes | None = None
    target_claim_ref: bytes | None = None
    reason: str = ""
    superseded_by: bytes | None = None
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("target_claim_id", _opt_id),
        ("target_claim_ref", _opt_id),
        ("reason", _text),
        ("superseded_by", _opt_id),
    )

    def __post_init__(self) -> None:
        if self.target_claim_id is None and self.target_claim_ref is None:
            raise _err(
                "target_claim_id",
                "retraction-target",
                "a retraction needs target_claim_id, target_claim_ref or both",
            )
        self._validate_and_seal()


@dataclass(frozen=True, slots=True, eq=False)
class DecisionAdded(_OpBase):
    """A planner's choice among the candidate values of the conflict at ``locus``.

    A decision records the candidate *value groups* it chose among (``groups``: the group ids,
    `statefuse.core.state.group_id_of` of each group's normal key, sorted) and the one it chose
    (``selected_group``, the group of ``selected_claim_id``). It applies while that group is
    still held by an active candidate and no value outside ``groups`` has appeared at the
    locus, so agreement and the retraction of other candidates never make it stale
    (SEMANTICS §6). ``conflict_id`` names the candidate set the decider saw.

    Decisions written before value groups existed have no ``groups`` (empty) and no
    ``selected_group`` (None): they keep their encoding (version 1, without those fields),
    their ids, and their rule: they apply only while ``conflict_id`` is the current candidate
    set of the locus. Why the same type rather than a new op kind: every layer dispatches on
    ``type(op) is DecisionAdded`` (the op-set's per-type dicts, the index, the materializer's
    inputs, the replica snapshot's columns and its restore path), so one type with two
    encodings reaches all of them with no second path to keep in step; the decoders choose the
    field set by the ``"v"`` tag, so each op still has exactly one encoding and one id.

    Outcomes (version 3): ``outcome`` says what the decision does (`Outcome`; SEMANTICS §6).
    ``select`` is the decision above. ``merge`` selects, like ``select``, a claim the decider
    wrote whose ``depends_on`` names the candidates it combines (the writer checks both; the
    merged claim is a value at the locus, so it is among ``groups`` and its group is
    ``selected_group``). ``preserve`` and ``defer`` select nothing: ``selected_group`` is None
    and ``selected_claim_id`` names one candidate the decider saw (the lowest candidate id),
    because a locus is a hash and a reader finds the decided key through that claim. A
    ``defer`` carries why in ``reason`` (who deferred is the author). ``made_at`` is the
    replica version the decision was made at, as plain canonical data (heads as ``(author,
    seq, change_id)``, sorted; empty: not recorded), built and read by the sync layer's
    ``Version``. A decision with outcome ``select`` and no recorded version encodes as before
    (version 1 or 2), so its bytes and id are unchanged; any other is version 3, which always
    records its value groups. A peer of an earlier release refuses a version 3 decision as an
    unknown op version (its change is quarantined with that reason, never half-read).

    Decisions never change which claims are active.
    """

    KIND: ClassVar[str] = "DecisionAdded"
    FORMAT_VERSION: ClassVar[int] = 3
    _EARLIER: ClassVar[tuple[int, ...]] = (1, 2)
    _LACKS: ClassVar[dict[int, frozenset[str]]] = {
        1: frozenset(("groups", "selected_group", "outcome", "made_at")),
        2: frozenset(("outcome", "made_at")),
    }
    author: Author
    lamport: int
    wall_ms: int
    locus: bytes
    conflict_id: bytes
    selected_claim_id: bytes
    scope: str = "global"
    reason: str = ""
    payload: Value = None
    groups: tuple[bytes, ...] = ()
    selected_group: bytes | None = None
    outcome: Outcome = Outcome.SELECT
    made_at: tuple[MadeAtHead, ...] = ()
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("locus", _id),
        ("conflict_id", _id),
        ("selected_claim_id", _id),
        ("scope", _scope),
        ("reason", _text),
        ("payload", _value),
        ("groups", _ids),
        ("selected_group", _opt_id),
        ("outcome", _outcome),
        ("made_at", _made_at),
    )

    def __post_init__(self) -> None:
        self._validate()
        _check_decision(self.groups, self.selected_group, self.outcome, self.reason, self.made_at)
        self._seal()

    def _version(self) -> int:
        if self.outcome is not Outcome.SELECT or self.made_at:
            return 3
        return 2 if self.groups else 1

    @property
    def by_groups(self) -> bool:
        """True for a decision that records value groups (False: the first release's form)."""
        return bool(self.groups)


def _check_decision_groups(groups: tuple[bytes, ...], selected: bytes | None) -> None:
    """Both group fields or neither; at least two groups; the chosen one among them."""
    if not groups and selected is None:
        return
    if selected is None or not groups:
        raise _err(
            "groups" if not groups else "selected_group",
            "decision-groups",
            "a decision records both its value groups and the chosen group, or neither",
        )
    if len(groups) < 2:
        raise _err("groups", "decision-groups", "a decision chooses among at least two values")
    if selected not in groups:
        raise _err("selected_group", "decision-groups", "the chosen group is not among groups")


def _check_decision(
    groups: tuple[bytes, ...],
    selected: bytes | None,
    outcome: Outcome,
    reason: str,
    made_at: tuple[MadeAtHead, ...],
) -> None:
    """The group rules of `_check_decision_groups`, and those of the outcomes: a decision
    with an outcome other than ``select`` or a recorded version records its value groups;
    ``preserve`` and ``defer`` select no group; ``defer`` says why."""
    if outcome.selects:
        _check_decision_groups(groups, selected)
    elif selected is not None:
        raise _err(
            "selected_group",
            "outcome-selects-nothing",
            f"a {outcome.value} decision selects no value (selected_group is None)",
        )
    if (outcome is not Outcome.SELECT or made_at) and len(groups) < 2:
        raise _err(
            "groups",
            "decision-groups",
            "a decision with an outcome or a recorded version records the value groups"
            " (at least two) it was made among",
        )
    if outcome is Outcome.DEFER and not reason.strip():
        raise _err("reason", "defer-reason", "a defer decision says why (reason)")


Op = Union[EvidenceAdded, ClaimAdded, ClaimRetracted, DecisionAdded]  # noqa: UP007
OP_TYPES: dict[str, type[Op]] = {
    t.KIND: t for t in (EvidenceAdded, ClaimAdded, ClaimRetracted, DecisionAdded)
}
#: Op types other layers add (the trust ops of ``sync``), decoded like the core ones. The
#: materializer never sees them: the layer that registers a type filters its ops out first.
_EXTRA_OP_TYPES: dict[str, type[_OpBase]] = {}


def register_op_type(cls: type[_OpBase]) -> None:
    """Let `decode_op` decode ``cls`` (an `_OpBase` dataclass with a unique ``KIND``).

    Raises OpRuleError if the kind is taken by another type.
    """
    taken = OP_TYPES.get(cls.KIND) or _EXTRA_OP_TYPES.get(cls.KIND)
    if taken is not None and taken is not cls:
        raise OpRuleError("KIND", "unique-op-kind", f"op kind {cls.KIND!r} is already taken")
    _EXTRA_OP_TYPES[cls.KIND] = cls


def decode_op(data: bytes) -> Op:
    """The op whose canonical encoding is ``data``.

    Raises EncodingError for bytes that are not canonical msgpack, an unknown op type or
    version, missing or extra fields, or a value outside the value model (with that rule);
    OpRuleError for a field that breaks the op schema.

    This is also the reference the batch decoder `decode_ops` is tested against, so it stays
    plain: the bytes are unpacked once, the fields validated and the op encoded once to derive
    its id; the bytes are canonical iff their blake3 equals that id, which replaces a second
    encoding and comparison.
    """
    raw = unpack_strict(data, "op")
    if type(raw) is not dict:
        raise EncodingError("op", "op-is-map", f"an op is a map, got {type(raw).__name__}")
    version = raw.pop("v", None)
    if type(version) is not int or version not in _KNOWN_VERSIONS:
        raise EncodingError("op.v", "op-version", f"unsupported op format version {version!r}")
    kind = raw.pop("op", None)
    cls: type[_OpBase] | None = None
    if isinstance(kind, str):
        cls = OP_TYPES.get(kind) or _EXTRA_OP_TYPES.get(kind)
    if cls is None:
        raise EncodingError("op.op", "op-type", f"unknown op type {kind!r}")
    if version != cls.FORMAT_VERSION and version not in cls._EARLIER:
        raise EncodingError("op.v", "op-version", f"{kind!r} has no format version {version!r}")
    expected = _field_names(cls, version)
    if raw.keys() != expected:
        for other in (cls.FORMAT_VERSION, *cls._EARLIER):
            if raw.keys() == _field_names(cls, other):  # e.g. a stated confidence labelled v2
                raise EncodingError(
                    "op.v", "op-version", f"the fields hold a version {other} {kind!r}"
                )
        missing = sorted(expected - set(raw))
        extra = sorted(map(repr, set(raw) - expected))
        raise EncodingError(
            "op",
            "op-fields",
            f"{kind!r} fields differ from schema: missing {missing}, extra {extra}",
        )
    try:
        op = cls(**raw)
    except (ValueRuleError, ValueTypeError) as exc:
        raise EncodingError(f"op.{exc.field}", exc.rule, exc.message) from None
    if op._version() != version:
        raise EncodingError(
            "op.v", "op-version", f"the fields hold a version {op._version()} {kind!r}"
        )
    if blake3.blake3(data).digest() != op.op_id:
        raise EncodingError("op", "canonical", "op bytes are not the canonical encoding")
    return op  # type: ignore[return-value]  # or an op of a registered extra type


#: Every version some core op type reads (registered extra types use `OP_FORMAT_VERSION`).
_KNOWN_VERSIONS = frozenset(v for t in OP_TYPES.values() for v in (t.FORMAT_VERSION, *t._EARLIER))
_FIELD_NAMES: dict[tuple[type, int], frozenset[str]] = {}


def _field_names(cls: type[_OpBase], version: int) -> frozenset[str]:
    names = _FIELD_NAMES.get((cls, version))
    if names is None:
        names = _FIELD_NAMES[cls, version] = frozenset(_version_fields(cls, version))
    return names


def as_ops(items: Iterable[object]) -> list[Op]:
    """Check that every item is an op (used where ops enter from user code)."""
    out: list[Op] = []
    for i, item in enumerate(items):
        if not isinstance(item, _OpBase):
            raise OpRuleError(f"ops[{i}]", "op-type", f"expected an op, got {type(item).__name__}")
        out.append(item)  # type: ignore[arg-type]
    return out


# --- batch decoding: the ingest fast path ---------------------------------------------------------
#
# `decode_op` validates one op field by field, encodes it and hashes the encoding: about
# twenty Python calls per field. Ingest decodes ops by the hundred, so `decode_ops` works on a
# batch at once, column by column, with C-level passes (``set(map(type, column))``, ``min``,
# ``max``...) and one msgpack call for the canonical check. It is only ever a shortcut to the
# reference verdict: whenever it meets anything it does not fully vouch for (a rare field shape,
# a failed rule, an op type it does not know), it returns None and the reference decoder
# decides, so errors and their messages are the reference's by construction.
#
# Why accepting is sound: every item is unpacked on its own as exactly one msgpack object; the
# parsed fields pass checks that accept only what the schema validators accept *and* store in a
# form that packs the same (a check returns None for an input its validator would rewrite, such
# as an int confidence or an unsorted id list; map values are replaced by the sorted copy the
# validator stores); the keys are in canonical order; and msgpack packs the parsed batch back to
# exactly the concatenated input. Msgpack objects are self-delimiting, so the concatenations
# agree only if every item packs back to itself: each input is then the canonical encoding of the
# op built from it, the condition the reference checks through the id. The ids are the blake3 of
# the inputs, as the reference computes them.

_NoneType = type(None)
#: Types whose values are equal only to values of the same type with the same encoding (unlike
#: ``1 == 1.0 == True`` or ``0.0 == -0.0``), so that ``column.count(x)`` proves a column uniform.
_EQUAL_MEANS_SAME = frozenset({str, bytes, _NoneType})
_VALUE_TYPES = frozenset({_NoneType, bool, int, float, str, bytes, list, dict})
_LAYER_BY_VALUE = {m.value: m for m in Layer}

#: (field name, parsed column, set of the column's types) -> the stored column, or None to leave
#: the verdict to the reference decoder.
_ColumnCheck = Callable[[str, Sequence[Any], set[type]], Union[Sequence[Any], None]]  # noqa: UP007


def _col_author(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if not types <= {bytes, str}:
        return None
    return col if all(1 <= len(u) <= MAX_NAME_CHARS for u in set(col)) else None


def _col_int(lo: int) -> _ColumnCheck:
    def check(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
        return col if types == {int} and min(col) >= lo and max(col) <= INT_MAX else None

    return check


def _col_opt_ms(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types == {_NoneType}:
        return col
    if not types <= {int, _NoneType}:
        return None
    ints = [v for v in col if v is not None]
    return col if min(ints) >= 0 and max(ints) <= INT_MAX else None


def _col_id(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    return col if types == {bytes} and set(map(len, col)) == {ID_BYTES} else None


def _col_opt_id(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types == {_NoneType}:
        return col
    if not types <= {bytes, _NoneType}:
        return None
    return col if {len(v) for v in col if v is not None} == {ID_BYTES} else None


def _col_name(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    # Strings parsed from msgpack are valid UTF-8 (the unpacker decodes strictly).
    if types != {str}:
        return None
    lengths = list(map(len, col))
    return col if min(lengths) >= 1 and max(lengths) <= MAX_NAME_CHARS else None


def _col_text(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    return col if types == {str} and max(map(len, col)) <= MAX_TEXT_CHARS else None


def _shared_column(col: Sequence[str], distinct: set[str]) -> list[str]:
    for s in distinct:
        if s not in _shared_labels:
            _share(s)
    return list(map(_shared_labels.get, col, col))


def _col_label(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {str}:
        return None
    distinct = set(col)
    if not all(1 <= len(u) <= MAX_NAME_CHARS for u in distinct):
        return None
    return _shared_column(col, distinct)


def _col_opt_label(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {str}:
        return None
    distinct = set(col)
    distinct.discard("")  # stored as is, never shared (as `_opt_label` does)
    if not all(len(u) <= MAX_NAME_CHARS for u in distinct):
        return None
    return _shared_column(col, distinct) if distinct else col


def _col_scope(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {str}:
        return None
    distinct = set(col)
    if not all(_SCOPE_RE.match(u) for u in distinct):
        return None
    return _shared_column(col, distinct)


def _col_layer(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {str}:
        return None
    stored = list(map(_LAYER_BY_VALUE.get, col))
    return None if None in stored else stored


_OUTCOME_BY_VALUE = {m.value: m for m in Outcome}


def _col_outcome(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {str}:
        return None
    stored = list(map(_OUTCOME_BY_VALUE.get, col))
    return None if None in stored else stored


def _col_made_at(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    if types != {list}:
        return None
    stored: list[tuple[MadeAtHead, ...]] = []
    for v in col:
        try:
            t = _made_at(name, v)
        except OpRuleError:
            return None
        if [list(h) for h in t] != v:
            return None  # unsorted, repeated or oddly typed: the reference decides
        stored.append(t)
    return stored


def _col_confidence(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    # An int 0 or 1 is valid but stored as a float, which encodes differently: the reference
    # decides (and finds the bytes non-canonical).
    if types != {float}:
        return None
    return col if all(0.0 <= u <= 1.0 for u in set(col)) else None


def _col_sorted_unique(check: Callable[[str, object], tuple[Any, ...]]) -> _ColumnCheck:
    def column(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
        if types != {list}:
            return None
        if col.count([]) == len(col):
            return [()] * len(col)
        stored: list[tuple[Any, ...]] = []
        for v in col:
            try:
                t = check(name, v) if v else ()
            except OpRuleError:
                return None
            if len(t) != len(v) or any(a != b for a, b in zip(t, v, strict=True)):
                return None  # unsorted or repeated items: stored sorted, so not canonical
            stored.append(t)
        return stored

    return column


def _col_value(name: str, col: Sequence[Any], types: set[type]) -> Sequence[Any] | None:
    # No string or bytes needs a length check: the batch path takes items of at most
    # MAX_STRING_BYTES, so nothing inside one can be longer.
    if not types <= _VALUE_TYPES:
        return None
    if int in types:
        ints = [v for v in col if type(v) is int]
        if min(ints) < INT_MIN or max(ints) > INT_MAX:
            return None
    if float in types and not all(math.isfinite(v) for v in col if type(v) is float):
        return None
    if list not in types and dict not in types:
        return col
    stored = list(col)
    for i, v in enumerate(col):
        if type(v) is list or type(v) is dict:
            try:
                stored[i] = frozen_value(v, name, depth=2)
            except (ValueRuleError, ValueTypeError):
                return None
    return stored


#: The column form of each field check of the core op types. Other layers' op types (the trust
#: ops, whose subject keys need a curve check) always go to the reference decoder.
_COLUMN_CHECKS: dict[Callable[..., Any], _ColumnCheck] = {
    _author: _col_author,
    _lamport: _col_int(1),
    _ms: _col_int(0),
    _opt_ms: _col_opt_ms,
    _id: _col_id,
    _opt_id: _col_opt_id,
    _name: _col_name,
    _text: _col_text,
    _label: _col_label,
    _opt_label: _col_opt_label,
    _scope: _col_scope,
    _layer: _col_layer,
    _outcome: _col_outcome,
    _made_at: _col_made_at,
    _confidence: _col_confidence,
    _ids: _col_sorted_unique(_ids),
    _roles: _col_sorted_unique(_roles),
    _value: _col_value,
}


def _retraction_targets(stored: dict[str, Sequence[Any]]) -> bool:
    return not any(
        a is None and b is None
        for a, b in zip(stored["target_claim_id"], stored["target_claim_ref"], strict=True)
    )


def _decision_groups(stored: dict[str, Sequence[Any]]) -> bool:
    if "groups" not in stored:  # the first encoding: no group fields
        return True
    try:
        if "outcome" not in stored:  # the second encoding: no outcome, no version recorded
            for groups, selected in zip(stored["groups"], stored["selected_group"], strict=True):
                _check_decision_groups(groups, selected)
            return True
        for row in zip(
            stored["groups"],
            stored["selected_group"],
            stored["outcome"],
            stored["reason"],
            stored["made_at"],
            strict=True,
        ):
            _check_decision(*row)
    except OpRuleError:
        return False
    return True


#: Rules a type's ``__post_init__`` adds to its field checks, over the stored columns.
_ROW_RULES: dict[type, Callable[[dict[str, Sequence[Any]]], bool]] = {
    ClaimRetracted: _retraction_targets,
    DecisionAdded: _decision_groups,
}


class _FastType:
    """How to check and build one op type, encoded as one of its versions, from parsed maps
    whose keys are in canonical order."""

    __slots__ = ("absent", "cls", "fields", "kind_at", "set_id", "version", "version_at")

    def __init__(self, cls: type[_OpBase], version: int) -> None:
        order = _encoding_order(cls, version)
        checks = dict(cls._SCHEMA)
        present = _version_fields(cls, version)
        defaults = {f.name: f.default for f in fields(cast(Any, cls))}
        self.cls = cls
        self.version = version
        self.kind_at = order.index("op")
        self.version_at = order.index("v")
        self.fields = tuple(
            (
                order.index(name),
                name,
                _COLUMN_CHECKS[checks[name]],
                cls.__dict__[name].__set__,
                checks[name] is _value,
            )
            for name in present
        )
        #: The fields this version lacks: set to their defaults, as the constructor does.
        self.absent = tuple(
            (cls.__dict__[name].__set__, defaults[name])
            for name, _ in cls._SCHEMA
            if name not in present
        )
        self.set_id = cls.__dict__["op_id"].__set__

    def build(self, rows: list[dict[str, Any]], ids: list[bytes]) -> list[Any] | None:
        """The ops of ``rows`` (parsed maps of this type), or None if the reference must decide.

        Rows whose stored value differs from the parsed one (values with maps, whose keys are
        stored sorted) get the stored value written back, so the caller's canonical check sees
        what the op would encode.
        """
        n = len(rows)
        cols = list(zip(*map(dict.values, rows), strict=True))
        kinds, versions = cols[self.kind_at], cols[self.version_at]
        if kinds.count(self.cls.KIND) != n:
            return None
        if set(map(type, versions)) != {int} or versions.count(self.version) != n:
            return None
        stored: dict[str, Sequence[Any]] = {}
        for at, name, check, _, rewrites in self.fields:
            col = cols[at]
            first = col[0]
            out: Sequence[Any] | None
            if (type(first) in _EQUAL_MEANS_SAME or first == []) and col.count(first) == n:
                # One value throughout (an author, a namespace, empty id lists...): check it
                # once, and let every op share the one stored object.
                one = check(name, (first,), {type(first)})
                out = None if one is None else [one[0]] * n
            else:
                out = check(name, col, set(map(type, col)))
            if out is None:
                return None
            if rewrites and out is not col:
                for row, old, new in zip(rows, col, out, strict=True):
                    if new is not old:
                        row[name] = new
            stored[name] = out
        rule = _ROW_RULES.get(self.cls)
        if rule is not None and not rule(stored):
            return None
        ops = list(map(object.__new__, repeat(self.cls, n)))
        # Slot setters return None, so any() runs each one over its whole column.
        for _, name, _, setter, _ in self.fields:
            any(map(setter, ops, stored[name]))
        for setter, default in self.absent:
            any(map(setter, ops, repeat(default, n)))
        any(map(self.set_id, ops, ids))
        return ops


#: ClaimAdded versions with valid time and context: decoded one by one by the reference (their
#: context map is stored sorted, which the column checks do not rewrite).
_SITUATED_VERSIONS = frozenset((3, 4))
#: Core op types and versions by their canonical key order (each order is distinct).
_FAST_TYPES: dict[tuple[str, ...], _FastType] = {
    _encoding_order(t, v): _FastType(t, v)
    for t in (EvidenceAdded, ClaimAdded, ClaimRetracted, DecisionAdded)
    for v in (t.FORMAT_VERSION, *t._EARLIER)
    if not (t is ClaimAdded and v in _SITUATED_VERSIONS)
}
_digest = blake3.blake3.digest
#: Fewer ops of one type than this are decoded one by one: the column checks cost about as much
#: as `decode_op` for a single op, and win from about three.
_MIN_BATCH = 3


def _array_header(n: int) -> bytes:
    if n <= 15:
        return bytes((0x90 | n,))
    if n <= 0xFFFF:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def decode_ops(datas: Sequence[bytes]) -> list[Op]:
    """The ops whose canonical encodings are ``datas``, in order.

    Exactly ``[decode_op(d) for d in datas]``: the same ops, or the error `decode_op` raises for
    the first bad item. Faster per op for batches (the ops of a change): see the notes above.
    """
    ops = decode_ops_fast(datas)
    return [decode_op(d) for d in datas] if ops is None else ops


def decode_ops_fast(datas: Sequence[bytes]) -> list[Op] | None:
    """The ops of ``datas`` if the batch path vouches for every item, else None: then
    `decode_op` decides each item (it may still accept them all).

    For callers with their own fallback, such as a verifier that checks more per op and must
    report the first failure of any kind. Never raises for bad bytes.
    """
    n = len(datas)
    if n < _MIN_BATCH:
        try:
            return [decode_op(d) for d in datas]
        except StateFuseError:
            return None
    # Above MAX_STRING_BYTES an item could hold a string the strict unpacker refuses; the
    # default limits used here are the item's own length.
    if set(map(type, datas)) != {bytes} or max(map(len, datas)) > MAX_STRING_BYTES:
        return None
    try:
        raws = list(map(msgpack.unpackb, datas))
    except Exception:  # any unpacking trouble is the reference decoder's to name
        return None
    if set(map(type, raws)) != {dict}:
        return None
    ids = list(map(_digest, map(blake3.blake3, datas)))
    layouts = list(map(tuple, raws))
    groups: dict[tuple[str, ...], Sequence[int]]
    if layouts.count(layouts[0]) == n:
        groups = {layouts[0]: range(n)}
    else:
        by_layout: dict[tuple[str, ...], list[int]] = {}
        for i, layout in enumerate(layouts):
            by_layout.setdefault(layout, []).append(i)
        groups = dict(by_layout)
    out: list[Any] = [None] * n
    for layout, where in groups.items():
        fast = _FAST_TYPES.get(layout)
        if fast is None or len(where) < _MIN_BATCH:
            try:  # few ops of this type, another layer's op types, or a malformed op
                for i in where:
                    out[i] = decode_op(datas[i])
            except StateFuseError:
                return None
            continue
        whole = len(where) == n
        built = fast.build(
            raws if whole else [raws[i] for i in where], ids if whole else [ids[i] for i in where]
        )
        if built is None:
            return None
        if whole:
            out = built
        else:
            for i, op in zip(where, built, strict=True):
                out[i] = op
    packed = msgpack.packb(raws, use_bin_type=True, use_single_float=False, default=_plain)
    if packed != _array_header(n) + b"".join(datas):
        return None
    return out
