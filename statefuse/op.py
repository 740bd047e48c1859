"""Ops: the immutable facts a replica stores, and their ids (SEMANTICS §2).

Invariant: an op's ``op_id`` is blake3 of its canonical encoding, computed from the content when
the op is built, so ids can never be chosen, only derived. Every field is validated when an op is
built (by a writer or by `decode_op`), so a well-formed op has exactly one encoding and one id.
Set-valued fields (roles, evidence ids, dependencies, re-asserted retractions) are kept sorted and
unique for the same reason.

Ops compare and hash by ``op_id``: Python's ``==`` would call ``1``, ``1.0`` and ``True`` equal,
while StateFuse keeps them apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter
from typing import Any, ClassVar, Union

import blake3
import msgpack

from registry import Registry
from registry.error import ValueRuleError, ValueTypeError
from registry.value import (
    INT_MAX,
    MAX_ENCODED_BYTES,
    Value,
    canonical_value,
    encode_value,
    unpack_strict,
)
from statefuse.error import EncodingError, OpRuleError

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

CLAIM_REF_DOMAIN = b"statefuse/claim_ref/v1"

Author = Union[str, bytes]  # noqa: UP007 - a runtime alias on Python 3.10

_SCOPE_RE = re.compile(r"\A(?:global|hypothetical|draft|(?:task|session):[^\s].{0,1023})\Z", re.S)


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
    if not 1 <= v <= INT_MAX:
        raise _err(name, "lamport-range", f"must be >= 1 (got {v})")
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


def _label(name: str, v: object) -> str:
    """A name from a small vocabulary (namespace, predicate, scope, kind...), shared, so that a
    million decoded claims hold one string object per distinct name instead of a copy each.
    Sharing equal immutable strings changes no result; the table is bounded."""
    return _share(_name(name, v))


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


def _confidence(name: str, v: object) -> float:
    if type(v) is int and v in (0, 1):
        return float(v)
    if type(v) is not float:
        raise _err(name, "float", f"expected float in [0, 1], got {type(v).__name__}")
    if not 0.0 <= v <= 1.0:
        raise _err(name, "unit-interval", f"must be in [0, 1] (got {v!r})")
    return v


def _value(name: str, v: object) -> Value:
    # Depth 2: a value sits one level inside the op's own map, and the decoder counts from there.
    return canonical_value(v, name, depth=2)


def _opt_name(name: str, v: object) -> str:
    return "" if v == "" else _name(name, v)


# --- the op types ---------------------------------------------------------------------------------


_ORDERS: dict[type, tuple[str, ...]] = {}


def _encoding_order(cls: type[_OpBase]) -> tuple[str, ...]:
    """The op's map keys in canonical order (by UTF-8 bytes), computed once per op type."""
    order = _ORDERS.get(cls)
    if order is None:
        names = ["op", "v", *(name for name, _ in cls._SCHEMA)]
        order = _ORDERS[cls] = tuple(sorted(names, key=lambda n: n.encode("utf-8")))
    return order


def _encoder(cls: type[_OpBase]) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    """The op's map keys in canonical order and a getter of its values in that order."""
    enc = _ENCODERS.get(cls)
    if enc is None:
        order = _encoding_order(cls)
        names = ("KIND" if n == "op" else "FORMAT_VERSION" if n == "v" else n for n in order)
        enc = _ENCODERS[cls] = (order, attrgetter(*names))
    return enc


_ENCODERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _plain(obj: object) -> object:
    if isinstance(obj, Layer):
        return obj.value
    raise TypeError(f"{type(obj).__name__} is not encodable")


class _OpBase:
    """Shared behaviour: validation from ``_SCHEMA``, canonical encoding, id, equality by id."""

    __slots__ = ()
    KIND: ClassVar[str]
    FORMAT_VERSION: ClassVar[int] = OP_FORMAT_VERSION
    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]]
    op_id: bytes

    def _validate_and_seal(self) -> None:
        for name, check in self._SCHEMA:
            old = getattr(self, name)
            new = check(name, old)
            if new is not old:
                object.__setattr__(self, name, new)
        data = self.encode()
        if len(data) > MAX_ENCODED_BYTES:
            raise OpRuleError(
                "op", "max-encoded-bytes", f"op encodes to more than {MAX_ENCODED_BYTES} bytes"
            )
        object.__setattr__(self, "op_id", blake3.blake3(data).digest())

    def to_value(self) -> dict[str, Value]:
        """The op as a plain value map (the thing that is canonically encoded)."""
        out: dict[str, Value] = {}
        for name in _encoding_order(type(self)):
            if name == "op":
                v: object = self.KIND
            elif name == "v":
                v = OP_FORMAT_VERSION
            else:
                v = getattr(self, name)
                if isinstance(v, tuple):
                    v = list(v)
                elif isinstance(v, Layer):
                    v = v.value
            out[name] = v  # type: ignore[assignment]
        return out

    def encode(self) -> bytes:
        """The canonical bytes of this op; ``op_id`` is their blake3.

        The same bytes as canonically encoding `to_value`, built faster (this runs for every op
        written and every op received): one C-level attribute fetch in canonical key order;
        tuples pack as arrays and a Layer as its value. Fields hold exact, validated types, so
        msgpack's non-strict mode cannot change their meaning.
        """
        order, fetch = _encoder(type(self))
        packed: bytes = msgpack.packb(
            dict(zip(order, fetch(self), strict=True)),
            use_bin_type=True,
            use_single_float=False,
            default=_plain,
        )
        return packed

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
    """

    KIND: ClassVar[str] = "ClaimAdded"
    author: Author
    lamport: int
    wall_ms: int
    namespace: str
    subject: str
    predicate: str
    value: Value
    claim_ref: bytes
    scope: str = "global"
    confidence: float = 1.0
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
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()

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
    """A planner's choice of one candidate of the conflict snapshot ``conflict_id`` at ``locus``.

    Decisions never change which claims are active; a projection applies one only while its
    ``conflict_id`` is still the current one for the locus (SEMANTICS §6).
    """

    KIND: ClassVar[str] = "DecisionAdded"
    author: Author
    lamport: int
    wall_ms: int
    locus: bytes
    conflict_id: bytes
    selected_claim_id: bytes
    scope: str = "global"
    reason: str = ""
    payload: Value = None
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
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()


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

    Fast path on purpose (ingest verifies every op of every change): the bytes are unpacked
    once, the fields validated and the op encoded once to derive its id; the bytes are canonical
    iff their blake3 equals that id, which replaces a second encoding and comparison.
    """
    raw = unpack_strict(data, "op")
    if type(raw) is not dict:
        raise EncodingError("op", "op-is-map", f"an op is a map, got {type(raw).__name__}")
    version = raw.pop("v", None)
    if type(version) is not int or version != OP_FORMAT_VERSION:
        raise EncodingError("op.v", "op-version", f"unsupported op format version {version!r}")
    kind = raw.pop("op", None)
    cls: type[_OpBase] | None = None
    if isinstance(kind, str):
        cls = OP_TYPES.get(kind) or _EXTRA_OP_TYPES.get(kind)
    if cls is None:
        raise EncodingError("op.op", "op-type", f"unknown op type {kind!r}")
    expected = _field_names(cls)
    if raw.keys() != expected:
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
    if blake3.blake3(data).digest() != op.op_id:
        raise EncodingError("op", "canonical", "op bytes are not the canonical encoding")
    return op  # type: ignore[return-value]  # or an op of a registered extra type


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type[_OpBase]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(name for name, _ in cls._SCHEMA)
    return names


def as_ops(items: Iterable[object]) -> list[Op]:
    """Check that every item is an op (used where ops enter from user code)."""
    out: list[Op] = []
    for i, item in enumerate(items):
        if not isinstance(item, _OpBase):
            raise OpRuleError(f"ops[{i}]", "op-type", f"expected an op, got {type(item).__name__}")
        out.append(item)  # type: ignore[arg-type]
    return out
