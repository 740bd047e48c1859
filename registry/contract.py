"""Predicate contracts: how a predicate's values are compared, referenced and resolved.

A contract is plain data so that it can be hashed into the registry fingerprint: two replicas
that declare the same contracts compute the same normal forms, refs and conflicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from registry.error import ContractError
from registry.value import Value


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

    ``normalizer`` names a normalizer known to the registry; equality of values is equality of
    their normal forms. ``ref_uses_normal_form`` makes ``claim_ref`` derive from the normal form,
    so that ``"1,000"`` and ``1000`` share one correction handle.
    """

    predicate: str
    namespace: str | None = None
    cardinality: Cardinality = Cardinality.ONE
    normalizer: str = "exact"
    ref_uses_normal_form: bool = True
    policy: Policy = Policy.SURFACE

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
        if not isinstance(self.normalizer, str) or not self.normalizer:
            raise ContractError("normalizer", "non-empty-str", "normalizer must be a name")
        if not isinstance(self.ref_uses_normal_form, bool):
            raise ContractError(
                "ref_uses_normal_form", "bool", "ref_uses_normal_form must be a bool"
            )

    @property
    def functional(self) -> bool:
        return self.cardinality is Cardinality.ONE

    def declaration(self) -> dict[str, Value]:
        """The canonical, hashable description of this contract."""
        return {
            "predicate": self.predicate,
            "namespace": self.namespace,
            "cardinality": self.cardinality.value,
            "normalizer": self.normalizer,
            "ref_uses_normal_form": self.ref_uses_normal_form,
            "policy": self.policy.value,
        }


DEFAULT_CONTRACT = PredicateContract(predicate="*")
