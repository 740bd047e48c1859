"""Predicate contracts: how a predicate's values are compared, referenced and resolved.

A contract is plain data so that it can be hashed into the registry fingerprint: two replicas
that declare the same contracts compute the same normal forms, refs and conflicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from statefuse.registry.error import ContractError
from statefuse.registry.value import INT_MAX, INT_MIN, Value

#: A normalizer parameter's value: a scalar, so that contracts stay hashable.
Param = str | int | float | bool
#: Most parameters one contract may give its normalizer.
MAX_PARAMS = 16


class Cardinality(Enum):
    """``one``: a functional predicate (one true value per key and scope; more is a conflict).
    ``many``: a multi-valued predicate (several values coexist and never conflict)."""

    ONE = "one"
    MANY = "many"


class Policy(Enum):
    """Default resolution policy a projection applies to this predicate's conflicts."""

    SURFACE = "surface"
    LATEST = "latest"
    AUTHORITY = "authority"


@dataclass(frozen=True, slots=True)
class PredicateContract:
    """The rules for one predicate, optionally only within one namespace.

    ``normalizer`` names a normalizer known to the registry (None: the registry's default
    contract's), at ``normalizer_version`` and with ``params`` (a map of scalar keyword arguments,
    held as sorted pairs); equality of values is equality of their normal forms.
    ``ref_uses_normal_form`` makes ``claim_ref`` derive from the normal form, so that ``"1,000"``
    and ``1000`` share one correction handle.
    """

    predicate: str
    namespace: str | None = None
    cardinality: Cardinality = Cardinality.ONE
    normalizer: str | None = None
    ref_uses_normal_form: bool = True
    policy: Policy = Policy.SURFACE
    normalizer_version: int = 1
    params: Mapping[str, Param] | tuple[tuple[str, Param], ...] = ()
    #: What decides this contract's normal forms: normalizer name ("" for the registry
    #: default's), version and params. Equal keys in one registry give equal normal forms.
    normalizer_key: tuple[str, int, tuple[tuple[str, Param], ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.predicate, str) or not self.predicate:
            raise ContractError("predicate", "non-empty-str", "predicate must be a non-empty str")
        if self.namespace is not None and (
            not isinstance(self.namespace, str) or not self.namespace
        ):
            raise ContractError(
                "namespace", "non-empty-str", "namespace must be None or a non-empty str"
            )
        if not isinstance(self.cardinality, Cardinality):
            raise ContractError(
                "cardinality", "enum", f"expected Cardinality, got {self.cardinality!r}"
            )
        if not isinstance(self.policy, Policy):
            raise ContractError("policy", "enum", f"expected Policy, got {self.policy!r}")
        if self.normalizer is not None and (
            not isinstance(self.normalizer, str) or not self.normalizer
        ):
            raise ContractError("normalizer", "non-empty-str", "normalizer must be a name")
        version = self.normalizer_version
        if type(version) is not int or version < 1:
            raise ContractError(
                "normalizer_version", "positive-int", f"expected an int >= 1, got {version!r}"
            )
        object.__setattr__(self, "params", _params(self.params))
        object.__setattr__(
            self, "normalizer_key", (self.normalizer or "", version, self.param_items)
        )
        if not isinstance(self.ref_uses_normal_form, bool):
            raise ContractError(
                "ref_uses_normal_form", "bool", "ref_uses_normal_form must be a bool"
            )

    @property
    def functional(self) -> bool:
        return self.cardinality is Cardinality.ONE

    @property
    def param_items(self) -> tuple[tuple[str, Param], ...]:
        """``params`` as sorted (name, value) pairs (how the contract holds them)."""
        return self.params  # type: ignore[return-value]

    @property
    def param_map(self) -> dict[str, Param]:
        """``params`` as a dict (keyword arguments of the normalizer)."""
        return dict(self.param_items)

    def declaration(self) -> dict[str, Value]:
        """The canonical, hashable description of this contract (normalizer resolved).

        The version and params appear only when they are not the defaults, so contracts of the
        first release keep the fingerprint they had (their stores open as before).
        """
        out: dict[str, Value] = {
            "predicate": self.predicate,
            "namespace": self.namespace,
            "cardinality": self.cardinality.value,
            "normalizer": self.normalizer,
            "ref_uses_normal_form": self.ref_uses_normal_form,
            "policy": self.policy.value,
        }
        if self.normalizer_version != 1:
            out["normalizer_version"] = self.normalizer_version
        if self.params:
            out["params"] = dict(self.param_items)
        return out


def _params(params: object) -> tuple[tuple[str, Param], ...]:
    """``params`` as sorted (name, scalar) pairs; raises ContractError naming the bad one."""
    if isinstance(params, Mapping):
        items = list(params.items())
    elif isinstance(params, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in params):
        items = list(params)
    else:
        raise ContractError(
            "params", "map", f"params must be a map of names to scalars, got {params!r}"
        )
    if len(items) > MAX_PARAMS:
        raise ContractError("params", "max-params", f"at most {MAX_PARAMS} params")
    seen: set[str] = set()
    for name, value in items:
        if type(name) is not str or not name:
            raise ContractError("params", "non-empty-str", f"bad param name {name!r}")
        if name in seen:
            raise ContractError(f"params.{name}", "unique", f"param {name!r} given twice")
        seen.add(name)
        if type(value) not in (str, int, float, bool):
            raise ContractError(
                f"params.{name}", "scalar", f"a param is a str, int, float or bool, not {value!r}"
            )
        if type(value) is int and not INT_MIN <= value <= INT_MAX:
            raise ContractError(
                f"params.{name}", "int64", f"param {name!r} must fit in a signed 64-bit int"
            )
        if type(value) is float and not math.isfinite(value):
            raise ContractError(f"params.{name}", "finite", f"param {name!r} must be finite")
    return tuple(sorted(items))


#: The contract of predicates no declared contract matches: values agree in the everyday sense
#: (strings by their text normal form, numbers by value; see `registry.normalizer.natural`).
DEFAULT_CONTRACT = PredicateContract(predicate="*", normalizer="natural")
#: The default contract of the first release (every value compared by its exact bytes). Stores
#: written under it declare it on their first open, so they keep their meaning.
EXACT_CONTRACT = PredicateContract(predicate="*", normalizer="exact")
