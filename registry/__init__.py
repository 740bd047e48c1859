"""Predicate contracts for StateFuse: cardinality, normalizers, claim_ref derivation and the
registry fingerprint. The bottom layer: it imports nothing else of the project."""

# This folder installs as ``statefuse.registry``; imported as ``registry`` (from the repository
# root) it would be a second copy of every module, whose classes are not ours.
if __name__ != "statefuse.registry":
    raise ImportError(f"import statefuse.registry, not {__name__}")


from statefuse.registry.catalog import (
    register_detector,
    register_normalizer,
    registered_detectors,
    registered_normalizers,
)
from statefuse.registry.contract import (
    DEFAULT_CONTRACT,
    EXACT_CONTRACT,
    Cardinality,
    Policy,
    PredicateContract,
)
from statefuse.registry.detector import (
    DETECTOR_FAILED,
    ClaimView,
    Detector,
    DetectorClaim,
    DetectorInput,
    DetectorSpec,
    Finding,
)
from statefuse.registry.error import (
    ContractError,
    EncodingError,
    InputError,
    NormalizationError,
    RegistryError,
    StateFuseError,
    ValueRuleError,
    ValueTypeError,
)
from statefuse.registry.normalizer import BUILTIN_NORMALIZERS, Normalizer
from statefuse.registry.registry import (
    DEFAULT_AUTHORITY_ORDER,
    DEFAULT_REGISTRY,
    EXACT_REGISTRY,
    Registry,
)
from statefuse.registry.value import (
    MAX_CONTAINER_ITEMS,
    MAX_DEPTH,
    MAX_ENCODED_BYTES,
    MAX_STRING_BYTES,
    FrozenList,
    FrozenMap,
    Value,
    canonical_value,
    decode_value,
    encode_value,
    frozen_value,
    plain_value,
    same_value,
)

__all__ = [
    "BUILTIN_NORMALIZERS",
    "DEFAULT_AUTHORITY_ORDER",
    "DEFAULT_CONTRACT",
    "DEFAULT_REGISTRY",
    "DETECTOR_FAILED",
    "EXACT_CONTRACT",
    "EXACT_REGISTRY",
    "MAX_CONTAINER_ITEMS",
    "MAX_DEPTH",
    "MAX_ENCODED_BYTES",
    "MAX_STRING_BYTES",
    "Cardinality",
    "ClaimView",
    "ContractError",
    "Detector",
    "DetectorClaim",
    "DetectorInput",
    "DetectorSpec",
    "EncodingError",
    "Finding",
    "FrozenList",
    "FrozenMap",
    "InputError",
    "NormalizationError",
    "Normalizer",
    "Policy",
    "PredicateContract",
    "Registry",
    "RegistryError",
    "StateFuseError",
    "Value",
    "ValueRuleError",
    "ValueTypeError",
    "canonical_value",
    "decode_value",
    "encode_value",
    "frozen_value",
    "plain_value",
    "register_detector",
    "register_normalizer",
    "registered_detectors",
    "registered_normalizers",
    "same_value",
]
