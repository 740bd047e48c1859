"""StateFuse: replicated, conflict-preserving memory for teams of AI agents.

The core: ops and their canonical encoding, the grow-only op-set, the pure materializer and the
writer helper. See the README for a tour.
"""

from registry import (
    DEFAULT_REGISTRY,
    Cardinality,
    Policy,
    PredicateContract,
    Registry,
    Value,
    decode_value,
    encode_value,
)
from statefuse.error import (
    ContractError,
    EncodingError,
    InputError,
    NormalizationError,
    OpIdMismatch,
    OpRuleError,
    StateFuseError,
    ValueRuleError,
    ValueTypeError,
)
from statefuse.materializer import Materializer, materialize
from statefuse.op import (
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Layer,
    Op,
    claim_ref_for,
    compute_claim_ref,
    decode_op,
)
from statefuse.opset import OpSet
from statefuse.state import CandidateGroup, ConflictSet, StaleCause, State, conflict_id_of, locus_of
from statefuse.writer import Writer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REGISTRY",
    "CandidateGroup",
    "Cardinality",
    "ClaimAdded",
    "ClaimRetracted",
    "ConflictSet",
    "ContractError",
    "DecisionAdded",
    "EncodingError",
    "EvidenceAdded",
    "InputError",
    "Layer",
    "Materializer",
    "NormalizationError",
    "Op",
    "OpIdMismatch",
    "OpRuleError",
    "OpSet",
    "Policy",
    "PredicateContract",
    "Registry",
    "StaleCause",
    "State",
    "StateFuseError",
    "Value",
    "ValueRuleError",
    "ValueTypeError",
    "Writer",
    "__version__",
    "claim_ref_for",
    "compute_claim_ref",
    "conflict_id_of",
    "decode_op",
    "decode_value",
    "encode_value",
    "locus_of",
    "materialize",
]
