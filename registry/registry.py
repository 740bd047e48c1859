"""The predicate registry: which contract governs a predicate, and what that means for values.

Invariant: everything here is a pure function of the registry's declaration and its arguments,
so two replicas with equal fingerprints compute equal normal forms, refs and conflict groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import blake3

from registry.contract import DEFAULT_CONTRACT, PredicateContract
from registry.error import ContractError, InputError, NormalizationError
from registry.normalizer import BUILTIN_NORMALIZERS, Normalizer
from registry.value import Value, canonical_value, encode_canonical, encode_value

FINGERPRINT_DOMAIN = b"statefuse/registry/v1"

#: Authority labels, highest first, that rank the claims of predicates whose policy is
#: ``authority`` unless a registry names its own order.
DEFAULT_AUTHORITY_ORDER: tuple[str, ...] = ("system", "user", "operator", "tool", "agent")


def check_authority_order(
    order: object,
    *,
    field: str = "authority_order",
    allow_empty: bool = False,
    error: type[InputError] = ContractError,
) -> tuple[str, ...]:
    """``order`` as a tuple of distinct non-empty labels, highest first; raises ``error`` naming
    ``field`` (or the bad item) and the rule. Shared by the registry and the resolvers, so an
    order means the same wherever it is given."""
    if isinstance(order, (str, bytes)) or not isinstance(order, Sequence):
        raise error(field, "sequence-of-str", f"expected a sequence of labels, got {order!r}")
    if not order and not allow_empty:
        raise error(field, "non-empty", "list at least one authority label")
    seen: set[str] = set()
    for i, label in enumerate(order):
        if type(label) is not str or not label:
            raise error(
                f"{field}[{i}]", "non-empty-str", f"expected a non-empty str, got {label!r}"
            )
        if label in seen:
            raise error(f"{field}[{i}]", "unique", f"{label!r} is listed twice")
        seen.add(label)
    return tuple(order)


class Registry:
    """An immutable set of predicate contracts plus the normalizers they name.

    A contract with ``namespace=None`` matches the predicate in every namespace; one with a
    namespace narrows it and wins over the namespace-free one. Predicates without a contract get
    ``default`` (functional, exact, surface). ``authority_order`` (highest first) ranks the
    claims of predicates whose policy is ``authority``; it is part of the fingerprint, since two
    replicas that rank authorities differently resolve the same conflict differently.

    Raises ContractError (naming the field and the rule) for a bad contract, normalizer name or
    ``authority_order`` (a non-empty sequence of distinct non-empty strs).
    """

    __slots__ = (
        "_authority_order",
        "_by_key",
        "_contracts",
        "_default",
        "_fingerprint",
        "_normalizers",
    )

    def __init__(
        self,
        contracts: Iterable[PredicateContract] = (),
        *,
        normalizers: Mapping[str, Normalizer] | None = None,
        default: PredicateContract = DEFAULT_CONTRACT,
        authority_order: Sequence[str] = DEFAULT_AUTHORITY_ORDER,
    ) -> None:
        self._authority_order = check_authority_order(authority_order)
        custom = dict(normalizers or {})
        for name in custom:
            if name in BUILTIN_NORMALIZERS:
                raise ContractError(
                    "normalizers", "no-builtin-override", f"{name!r} is a built-in normalizer name"
                )
            if not isinstance(name, str) or not name:
                raise ContractError("normalizers", "non-empty-str", f"bad normalizer name {name!r}")
            if not callable(custom[name]):
                raise ContractError(
                    "normalizers", "callable", f"normalizer {name!r} is not callable"
                )
        self._normalizers: Mapping[str, Normalizer] = MappingProxyType(
            {**BUILTIN_NORMALIZERS, **custom}
        )
        by_key: dict[tuple[str | None, str], PredicateContract] = {}
        for contract in (*contracts, default):
            if not isinstance(contract, PredicateContract):
                raise ContractError(
                    "contracts", "type", f"expected PredicateContract, got {contract!r}"
                )
            if contract.normalizer not in self._normalizers:
                raise ContractError(
                    "normalizer",
                    "known-normalizer",
                    f"contract for {contract.predicate!r} names unknown normalizer"
                    f" {contract.normalizer!r}",
                )
            if contract is default:
                continue
            key = (contract.namespace, contract.predicate)
            if key in by_key and by_key[key] != contract:
                raise ContractError(
                    "contracts",
                    "one-contract-per-predicate",
                    f"two different contracts for predicate {contract.predicate!r}"
                    f" in namespace {contract.namespace!r}",
                )
            by_key[key] = contract
        self._by_key = by_key
        self._default = default
        self._contracts = tuple(
            sorted(by_key.values(), key=lambda c: (c.predicate, c.namespace or ""))
        )
        declaration: Value = {
            "v": 2,
            "default": default.declaration(),
            "contracts": [c.declaration() for c in self._contracts],
            "custom_normalizers": list[Value](sorted(custom)),
            "authority_order": list[Value](self._authority_order),
        }
        self._fingerprint = blake3.blake3(FINGERPRINT_DOMAIN + encode_value(declaration)).digest()

    @property
    def contracts(self) -> tuple[PredicateContract, ...]:
        return self._contracts

    @property
    def default(self) -> PredicateContract:
        """The contract of predicates no declared contract matches."""
        return self._default

    @property
    def authority_order(self) -> tuple[str, ...]:
        """Authority labels, highest first, for predicates whose policy is ``authority``."""
        return self._authority_order

    @property
    def fingerprint(self) -> bytes:
        """blake3 of the canonical declaration; equal registries have equal fingerprints."""
        return self._fingerprint

    def normalizer(self, name: str) -> Normalizer:
        """The normalizer registered as ``name``; raises ContractError if there is none."""
        try:
            return self._normalizers[name]
        except KeyError:
            raise ContractError(
                "normalizer", "known-normalizer", f"no normalizer named {name!r}"
            ) from None

    def contract_for(self, namespace: str, predicate: str) -> PredicateContract:
        """The contract for ``predicate`` in ``namespace`` (namespace-specific first)."""
        by_key = self._by_key
        return by_key.get((namespace, predicate)) or by_key.get((None, predicate)) or self._default

    def normal_form(self, contract: PredicateContract, value: Value) -> Value:
        """The contract's normal form of ``value``; raises NormalizationError if it has none."""
        try:
            out = self._normalizers[contract.normalizer](value)
        except InputError:
            raise
        except Exception as exc:
            raise NormalizationError(
                "value",
                f"normalizer:{contract.normalizer}",
                f"normalizer {contract.normalizer!r} failed on {value!r}: {exc}",
            ) from exc
        return canonical_value(out, "normal_form")

    def ref_value(self, contract: PredicateContract, value: Value) -> Value:
        """The value a ``claim_ref`` is derived from: the normal form, if the contract says so."""
        if contract.ref_uses_normal_form and contract.normalizer != "exact":
            return self.normal_form(contract, value)
        return value

    def group_key(self, contract: PredicateContract, value: Value) -> bytes:
        """Bytes equal for two values iff they are equal under ``contract``.

        Total on purpose (the materializer must accept whatever a peer wrote): a value the
        normalizer rejects is keyed by its exact bytes in a separate tag space, so it can only
        agree with values that are byte-identical to it. Raises ValueRuleError /
        ValueTypeError if ``value`` is not a StateFuse value.
        """
        return self.canonical_group_key(contract, canonical_value(value))

    def canonical_group_key(self, contract: PredicateContract, value: Value) -> bytes:
        """`group_key` for a value that is canonical already (taken from a built op), which
        skips validating it again: the materializer's hot path."""
        if contract.normalizer == "exact":
            return b"=" + encode_canonical(value)
        try:
            return b"~" + encode_canonical(self.normal_form(contract, value))
        except InputError:
            return b"=" + encode_canonical(value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registry) and other._fingerprint == self._fingerprint

    def __hash__(self) -> int:
        return hash(self._fingerprint)

    def __repr__(self) -> str:
        fp = self._fingerprint.hex()[:16]
        return f"Registry({len(self._contracts)} contracts, fingerprint={fp})"


DEFAULT_REGISTRY = Registry()
