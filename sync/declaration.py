"""A space's registry declaration: the predicate contracts of a space, as an op in the space.

SEMANTICS §2: the registry is data of the space. ``RegistryDeclared`` holds a registry document
(the registry file format, `registry.document`) and travels in changes like any other op. The
declaration in force is a pure function of the counted changes, so every replica that holds the
same changes materializes under the same contracts, whatever registry its process was started
with:

- closed mode: only the root's declarations count (as with trust ops);
- open mode: every author may write, so the space has no root; only its *creator*'s
  declarations count. The creator is a property of the store (`StoreInfo.creator`, see
  `sync.creator`), never read from the ops: an author chooses its lamports, so "the first
  declaration" would let a stranger's lamport-1 declaration take the space over. A store with
  no creator pinned counts no declaration;
- among the declarations that count, the highest ``(lamport, op_id)`` is in force; a space
  without one uses the built-in default (`DEFAULT_REGISTRY`).

Why not let any declaration win in open mode: a member that joins with another registry would
silently change every replica's memory. Why not trust the process's registry: two replicas with
the same changes would show different memory (the bug this replaces).

Validity of the op is intrinsic (the document parses; contracts, names and the authority order
are well formed), so a malformed declaration is quarantined on receipt like any bad op. Whether
this process has the code of every normalizer it names is not: that is checked when the
declaration comes into force (`RegistryError`, rule ``unknown-normalizer``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from statefuse.core.error import OpRuleError
from statefuse.core.op import _author, _lamport, _ms, _OpBase, _value, register_op_type
from statefuse.registry import Registry
from statefuse.registry.document import parse
from statefuse.registry.error import ContractError
from statefuse.registry.normalizer import Normalizer
from statefuse.registry.registry import check_authority_order
from statefuse.registry.value import Value
from statefuse.sync.author import AuthorNamed
from statefuse.sync.redaction import OpsRedacted
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode


def _document(name: str, v: object) -> Value:
    """A registry document that is well formed whatever normalizers a process has."""
    value = _value(name, v)
    try:
        contracts, _, order, _ = parse(value, field=name)
        if order is not None:
            check_authority_order(order, field=f"{name}.authority_order")
        seen: dict[tuple[str | None, str], Any] = {}
        for i, c in enumerate(contracts):
            key = (c.namespace, c.predicate)
            if key in seen and seen[key] != c:
                raise ContractError(
                    f"{name}.contracts[{i}]",
                    "one-contract-per-predicate",
                    f"a second, different contract for {c.predicate!r}",
                )
            seen[key] = c
    except ContractError as exc:
        raise OpRuleError(exc.field, exc.rule, exc.message) from None
    return value


@dataclass(frozen=True, slots=True, eq=False)
class RegistryDeclared(_OpBase):
    """The space's predicate contracts from now on (see the module doc for who may declare)."""

    KIND: ClassVar[str] = "RegistryDeclared"
    author: bytes
    lamport: int
    wall_ms: int
    registry: Value
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("registry", _document),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()

    def build(self, normalizers: Mapping[str, Normalizer] | None = None) -> Registry:
        """The registry this declaration describes; raises RegistryError (rule
        ``unknown-normalizer``) if this process lacks a normalizer it names."""
        return Registry.from_document(self.registry, normalizers=normalizers, field="registry")


register_op_type(RegistryDeclared)

#: Ops that govern the space rather than hold memory: trust ops, registry declarations and author
#: names. The materializer never sees them.
SPACE_OP_TYPES: tuple[type[_OpBase], ...] = (
    *TRUST_OP_TYPES,
    RegistryDeclared,
    AuthorNamed,
    OpsRedacted,
)


def declaration_in_force(
    declarations: Iterable[RegistryDeclared],
    *,
    mode: TrustMode,
    root: bytes | None,
    creator: bytes | None = None,
) -> RegistryDeclared | None:
    """The declaration in force among ``declarations`` (those of counted changes), or None:
    the latest of the root's (closed mode) or of ``creator``'s (open mode; None: no creator
    pinned, so none counts)."""
    authority = root if mode is TrustMode.CLOSED else creator
    if authority is None:
        return None
    counting = [op for op in declarations if op.author == authority]
    return max(counting, key=_stamp) if counting else None


def creator(declarations: Iterable[RegistryDeclared]) -> bytes | None:
    """The rule of earlier releases (the author of the lowest ``(lamport, op_id)``
    declaration), kept for callers of that release; it is forgeable, so it only ever pins the
    creator of an old store once (`sync.creator.first_declarer`)."""
    ops = list(declarations)
    return min(ops, key=_stamp).author if ops else None


def _stamp(op: RegistryDeclared) -> tuple[int, bytes]:
    return (op.lamport, op.op_id)


__all__ = ["SPACE_OP_TYPES", "RegistryDeclared", "creator", "declaration_in_force"]
