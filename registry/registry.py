"""The predicate registry: which contract governs a predicate, and what that means for values.

Invariant: everything here is a pure function of the registry's declaration and its arguments,
so two replicas with equal fingerprints compute equal normal forms, refs and conflict groups.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

import blake3

from statefuse.registry.catalog import check_version, find_detector, find_normalizer
from statefuse.registry.contract import DEFAULT_CONTRACT, EXACT_CONTRACT, Param, PredicateContract
from statefuse.registry.detector import Detector, DetectorSpec, check_detector_name
from statefuse.registry.error import ContractError, InputError, NormalizationError, RegistryError
from statefuse.registry.normalizer import BUILTIN_NORMALIZERS, Normalizer
from statefuse.registry.value import Value, canonical_value, encode_canonical, encode_value

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
    ``default`` (functional, ``natural`` normal form, surface). A contract that names no
    normalizer takes the default's. ``authority_order`` (highest first) ranks the claims of
    predicates whose policy is ``authority``; it is part of the fingerprint, since two replicas
    that rank authorities differently resolve the same conflict differently.

    Normalizers are found by name and version among the built-ins, ``normalizers`` (version 1
    of each name given) and those registered in this process (`register_normalizer`). A space
    carries its registry as data (`to_document`, `from_document`, `to_toml`, `from_toml`, files:
    `registry.file`); a process
    only supplies the code of the normalizers it names.

    Raises ContractError (naming the field and the rule) for a bad contract, normalizer name or
    ``authority_order`` (a non-empty sequence of distinct non-empty strs), and RegistryError
    (rule ``unknown-normalizer``) for a normalizer this process does not have.
    """

    __slots__ = (
        "_authority_order",
        "_bound",
        "_by_key",
        "_contracts",
        "_custom",
        "_default",
        "_detector_code",
        "_detectors",
        "_fingerprint",
        "_given",
        "_normalizers",
    )

    def __init__(
        self,
        contracts: Iterable[PredicateContract] = (),
        *,
        normalizers: Mapping[str, Normalizer] | None = None,
        default: PredicateContract = DEFAULT_CONTRACT,
        authority_order: Sequence[str] = DEFAULT_AUTHORITY_ORDER,
        detectors: Iterable[DetectorSpec] = (),
    ) -> None:
        self._authority_order = check_authority_order(authority_order)
        self._detectors, self._detector_code = _bind_detectors(detectors)
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
        self._custom: Mapping[str, Normalizer] = MappingProxyType(custom)
        self._normalizers: Mapping[str, Normalizer] = MappingProxyType(
            {**BUILTIN_NORMALIZERS, **custom}
        )
        if not isinstance(default, PredicateContract):
            raise ContractError("default", "type", f"expected PredicateContract, got {default!r}")
        if default.predicate != "*" or default.namespace is not None:
            raise ContractError(
                "default",
                "default-contract",
                "the default contract is for predicate '*' in every namespace, not"
                f" {default.predicate!r} in {default.namespace!r}",
            )
        if default.normalizer is None:
            default = replace(default, normalizer=DEFAULT_CONTRACT.normalizer)
        given = tuple(contracts)
        self._given = given
        self._bound: dict[tuple[str, int, tuple[tuple[str, Param], ...]], Normalizer] = {}
        by_key: dict[tuple[str | None, str], PredicateContract] = {}
        for index, contract in enumerate((*given, default)):
            where = "default" if index == len(given) else f"contracts[{index}]"
            if not isinstance(contract, PredicateContract):
                raise ContractError(
                    "contracts", "type", f"expected PredicateContract, got {contract!r}"
                )
            if contract.normalizer is None:
                contract = replace(
                    contract,
                    normalizer=default.normalizer,
                    normalizer_version=default.normalizer_version,
                    params=contract.params or default.params,
                )
            try:
                self._bind(contract)
            except RegistryError:
                raise
            except ContractError as exc:
                raise ContractError(f"{where}.{exc.field}", exc.rule, exc.message) from None
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
        named = set(custom)
        for c in (*self._contracts, default):
            assert c.normalizer is not None
            if c.normalizer not in BUILTIN_NORMALIZERS or c.normalizer_version != 1:
                named.add(
                    c.normalizer
                    if c.normalizer_version == 1
                    else f"{c.normalizer}@{c.normalizer_version}"
                )
        declaration: dict[str, Value] = {
            "v": 2,
            "default": default.declaration(),
            "contracts": [c.declaration() for c in self._contracts],
            "custom_normalizers": list[Value](sorted(named)),
            "authority_order": list[Value](self._authority_order),
        }
        if self._detectors:  # a registry without detectors keeps its fingerprint
            declaration["detectors"] = [d.declaration() for d in self._detectors]
        self._fingerprint = blake3.blake3(FINGERPRINT_DOMAIN + encode_value(declaration)).digest()

    def _bind(self, contract: PredicateContract) -> Normalizer:
        """The code of ``contract``'s normalizer with its params applied (cached)."""
        name = contract.normalizer or self._default.normalizer
        assert name is not None
        key = (name, contract.normalizer_version, contract.param_items)
        fn = self._bound.get(key)
        if fn is not None:
            return fn
        try:
            fn = find_normalizer(name, contract.normalizer_version, self._custom)
        except RegistryError as exc:
            raise RegistryError(
                "normalizer", exc.rule, f"contract for {contract.predicate!r}: {exc.message}"
            ) from None
        if contract.params:
            fn = _with_params(fn, name, contract.param_items)
        self._bound[key] = fn
        return fn

    def with_default(self, default: PredicateContract) -> Registry:
        """This registry with another default contract (contracts that name no normalizer
        follow it)."""
        return Registry(
            self._given,
            normalizers=self._custom,
            default=default,
            authority_order=self._authority_order,
            detectors=self._detectors,
        )

    def to_document(self) -> dict[str, Value]:
        """The registry as data: what a registry file holds and a space declares."""
        from statefuse.registry.document import render

        return render(self)

    @classmethod
    def from_document(
        cls,
        document: object,
        *,
        normalizers: Mapping[str, Normalizer] | None = None,
        field: str = "registry",
    ) -> Registry:
        """The registry a document (a parsed registry file, or a space's declaration) describes.

        Normalizer code comes from the built-ins, ``normalizers`` (version-1 code by name, as
        the constructor takes it; only the names the document uses are taken) and those
        registered in this process. Raises RegistryError naming the field path
        (``registry.contracts[2].policy``) and the rule for a malformed document, and rule
        ``unknown-normalizer`` for a normalizer this process does not have."""
        from statefuse.registry.document import parse, parse_detectors

        contracts, default, order, extra = parse(document, field=field)
        detectors = parse_detectors(document, field=field)
        default = default or DEFAULT_CONTRACT
        given = dict(normalizers or {})
        wanted = set(extra)
        for c in (*contracts, default):
            name = c.normalizer or default.normalizer
            if name is not None and c.normalizer_version == 1 and name not in BUILTIN_NORMALIZERS:
                wanted.add(name)
        code = {n: given[n] if n in given else find_normalizer(n, 1) for n in sorted(wanted)}
        try:
            return cls(
                contracts,
                normalizers=code,
                default=default,
                authority_order=DEFAULT_AUTHORITY_ORDER if order is None else order,
                detectors=detectors,
            )
        except RegistryError:
            raise
        except ContractError as exc:
            raise RegistryError(f"{field}.{exc.field}", exc.rule, exc.message) from None

    @classmethod
    def from_toml(
        cls, text: str, *, normalizers: Mapping[str, Normalizer] | None = None
    ) -> Registry:
        """The registry a TOML registry file's text describes (see `from_document`)."""
        from statefuse.registry.document import from_text

        return cls.from_document(from_text(text, json_format=False), normalizers=normalizers)

    @classmethod
    def from_json(
        cls, text: str, *, normalizers: Mapping[str, Normalizer] | None = None
    ) -> Registry:
        """The registry a JSON registry file's text describes (see `from_document`)."""
        from statefuse.registry.document import from_text

        return cls.from_document(from_text(text, json_format=True), normalizers=normalizers)

    def to_json(self) -> str:
        """The registry file in JSON."""
        from statefuse.registry.document import to_json

        return to_json(self.to_document())

    def to_toml(self) -> str:
        """The registry file in TOML."""
        from statefuse.registry.document import to_toml

        return to_toml(self.to_document())

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

    @property
    def detectors(self) -> tuple[DetectorSpec, ...]:
        """The detectors this registry declares, sorted by ``name@version``."""
        return self._detectors

    def detector_code(self, spec: DetectorSpec) -> Detector:
        """The code of a declared detector (found when the registry was made)."""
        return self._detector_code[spec.label]

    def detectors_reading(self, namespace: str, predicate: str) -> tuple[DetectorSpec, ...]:
        """The declared detectors that read ``predicate`` in ``namespace``."""
        if not self._detectors:
            return ()
        return tuple(d for d in self._detectors if d.reads_predicate(namespace, predicate))

    @property
    def custom_normalizers(self) -> Mapping[str, Normalizer]:
        """The version-1 normalizers this registry was built with (``normalizers=``)."""
        return self._custom

    def normalizer(self, name: str, version: int = 1) -> Normalizer:
        """The normalizer ``name`` at ``version``; raises ContractError if there is none."""
        if version == 1 and name in self._normalizers:
            return self._normalizers[name]
        try:
            return find_normalizer(name, version, self._custom)
        except RegistryError:
            raise RegistryError(
                "normalizer", "unknown-normalizer", f"no normalizer named {name}@{version}"
            ) from None

    def contract_for(self, namespace: str, predicate: str) -> PredicateContract:
        """The contract for ``predicate`` in ``namespace`` (namespace-specific first)."""
        by_key = self._by_key
        return by_key.get((namespace, predicate)) or by_key.get((None, predicate)) or self._default

    def normal_form(self, contract: PredicateContract, value: Value) -> Value:
        """The contract's normal form of ``value``; raises NormalizationError if it has none."""
        fn = self._bound.get(contract.normalizer_key) or self._bind(contract)
        try:
            out = fn(value)
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
        if (
            contract.ref_uses_normal_form
            and (contract.normalizer or self._default.normalizer) != "exact"
        ):
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
        if (contract.normalizer or self._default.normalizer) == "exact":
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


def _bind_detectors(
    detectors: Iterable[DetectorSpec],
) -> tuple[tuple[DetectorSpec, ...], Mapping[str, Detector]]:
    """The declared detectors sorted by label, and their code; raises ContractError for a bad
    declaration and RegistryError (rule ``unknown-detector``) for one this process lacks."""
    specs: dict[str, DetectorSpec] = {}
    for i, spec in enumerate(detectors):
        if not isinstance(spec, DetectorSpec):
            raise ContractError(
                f"detectors[{i}]", "type", f"expected DetectorSpec, got {type(spec).__name__}"
            )
        check_detector_name(spec.name, f"detectors[{i}].name")
        check_version(spec.version, f"detectors[{i}].version")
        if not spec.reads:
            raise ContractError(f"detectors[{i}].reads", "non-empty", "a detector reads something")
        if spec.label in specs and specs[spec.label] != spec:
            raise ContractError(
                f"detectors[{i}]", "unique", f"{spec.label} is declared twice, reading differently"
            )
        specs[spec.label] = spec
    ordered = tuple(specs[k] for k in sorted(specs))
    code = {s.label: find_detector(s.name, s.version) for s in ordered}
    return ordered, MappingProxyType(code)


def _with_params(fn: Normalizer, name: str, params: tuple[tuple[str, Param], ...]) -> Normalizer:
    """``fn`` with ``params`` as keyword arguments; raises ContractError (rule
    ``normalizer-params``) if ``fn`` does not take them."""
    kwargs = dict(params)
    try:
        inspect.signature(fn).bind(None, **kwargs)
    except TypeError as exc:
        raise ContractError(
            "params",
            "normalizer-params",
            f"normalizer {name!r} does not take params {sorted(kwargs)}: {exc}",
        ) from None
    except ValueError:  # no signature to inspect (a builtin): trust the declaration
        pass
    return functools.partial(fn, **kwargs)


#: The registry of a space that declares none: no contracts, the ``natural`` default.
DEFAULT_REGISTRY = Registry()
#: The default registry of the first release (every value compared by its exact bytes): stores
#: written under it keep that meaning (they declare it on their first writable open).
EXACT_REGISTRY = Registry(default=EXACT_CONTRACT)
