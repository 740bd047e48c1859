"""StateFuse: replicated, conflict-preserving memory for teams of AI agents.

The core: ops and their canonical encoding, the grow-only op-set, the pure materializer and the
writer helper. See the README for a tour.
"""

from statefuse.context import (
    DEFAULT_BUDGET,
    SYSTEM_PROMPT,
    Context,
    ContextCache,
    ContextError,
    ContextPolicy,
    PreviousValues,
    Section,
    SectionName,
    Transcript,
    assemble_context,
    context_for,
    default_resolver,
    previous_values,
)
from statefuse.error import (
    ClaimLookupError,
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
from statefuse.history import HistoryEvent, key_history
from statefuse.interpret import (
    ClaimRequest,
    Interpretation,
    InterpretationError,
    QuestionRequest,
    RetractionRequest,
    TurnInterpreter,
)
from statefuse.judge import CallableResolver, judge_payload
from statefuse.keytext import KeyTextError, format_key, parse_key
from statefuse.lens import Include, Lens, LensError
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
from statefuse.projection import DEFAULT_AUTHORITY_ORDER, ProjectionError, project
from statefuse.ranker import LexicalRanker, Ranker
from statefuse.registry import (
    DEFAULT_REGISTRY,
    EXACT_REGISTRY,
    Cardinality,
    FrozenList,
    FrozenMap,
    Policy,
    PredicateContract,
    Registry,
    RegistryError,
    Value,
    decode_value,
    encode_value,
    plain_value,
    register_normalizer,
)
from statefuse.registry.file import load_registry, save_registry
from statefuse.resolver import (
    Abstain,
    AbstainAll,
    AuthorityRank,
    Chain,
    Conservative,
    LatestWins,
    Resolver,
    ResolverConfigError,
    ResolverInput,
    ResolverInputError,
    Select,
    ShownConflict,
    run_resolver,
)
from statefuse.state import (
    CandidateGroup,
    ConflictSet,
    StaleCause,
    StaleDecision,
    StaleReason,
    State,
    conflict_id_of,
    group_id_of,
    locus_of,
)
from statefuse.tokenizer import (
    BpeTokenizer,
    ByteEstimate,
    CachedTokenizer,
    Tokenizer,
    TokenizerError,
    default_tokenizer,
)
from statefuse.view import How, Selection, StaleNote, SurfacedConflict, View
from statefuse.writer import Writer

__version__ = "0.1.0"

from statefuse.store import MemoryStore, QuarantineRecord, StoreError, StoreInfo

__all__ = [
    "DEFAULT_AUTHORITY_ORDER",
    "DEFAULT_BUDGET",
    "DEFAULT_REGISTRY",
    "EXACT_REGISTRY",
    "SYSTEM_PROMPT",
    "Abstain",
    "AbstainAll",
    "AuthorityRank",
    "BpeTokenizer",
    "BundleError",
    "ByteEstimate",
    "CachedTokenizer",
    "CallableResolver",
    "CandidateGroup",
    "Cardinality",
    "Chain",
    "ClaimAdded",
    "ClaimLookupError",
    "ClaimRequest",
    "ClaimRetracted",
    "ConflictSet",
    "Conservative",
    "Context",
    "ContextCache",
    "ContextError",
    "ContextPolicy",
    "ContractError",
    "Damage",
    "DecisionAdded",
    "EncodingError",
    "EvidenceAdded",
    "FrozenList",
    "FrozenMap",
    "HistoryEvent",
    "How",
    "Include",
    "InputError",
    "Interpretation",
    "InterpretationError",
    "KeyTextError",
    "LatestWins",
    "Layer",
    "Lens",
    "LensError",
    "LexicalRanker",
    "Materializer",
    "MemoryStore",
    "MergeReport",
    "NormalizationError",
    "Op",
    "OpIdMismatch",
    "OpRuleError",
    "OpSet",
    "OwnFeedWarning",
    "Policy",
    "PredicateContract",
    "PreviousValues",
    "ProjectionError",
    "QuarantineRecord",
    "QuestionRequest",
    "Ranker",
    "ReadOnlyError",
    "Registry",
    "RegistryError",
    "RepairReport",
    "Replica",
    "ReplicaError",
    "Resolver",
    "ResolverConfigError",
    "ResolverInput",
    "ResolverInputError",
    "RetractionRequest",
    "Section",
    "SectionName",
    "Select",
    "Selection",
    "ShownConflict",
    "StaleCause",
    "StaleDecision",
    "StaleNote",
    "StaleReason",
    "State",
    "StateFuseError",
    "StoreDamagedError",
    "StoreError",
    "StoreInfo",
    "SurfacedConflict",
    "Tokenizer",
    "TokenizerError",
    "Transcript",
    "TurnInterpreter",
    "UnknownClaimError",
    "Value",
    "ValueRuleError",
    "ValueTypeError",
    "View",
    "Writer",
    "__version__",
    "assemble_context",
    "claim_ref_for",
    "compute_claim_ref",
    "conflict_id_of",
    "context_for",
    "decode_op",
    "decode_value",
    "default_resolver",
    "default_tokenizer",
    "encode_value",
    "format_key",
    "group_id_of",
    "judge_payload",
    "key_history",
    "load_registry",
    "locus_of",
    "materialize",
    "parse_key",
    "plain_value",
    "previous_values",
    "project",
    "register_normalizer",
    "run_resolver",
    "save_registry",
]

#: Names served from the layer above (`sync`): the replica signs and verifies changes, so it lives
#: with the merge boundary, and is imported only when first used (``statefuse`` itself never
#: imports ``sync`` at import time, keeping the layering one-way).
_FROM_SYNC = {
    "Replica": "statefuse.sync.replica",
    "MergeReport": "statefuse.sync.replica",
    "ReplicaError": "statefuse.sync.replica",
    "UnknownClaimError": "statefuse.sync.replica",
    "ReadOnlyError": "statefuse.sync.replica",
    "StoreDamagedError": "statefuse.sync.replica",
    "OwnFeedWarning": "statefuse.sync.replica",
    "Damage": "statefuse.sync.replica",
    "RepairReport": "statefuse.sync.replica",
    "BundleError": "statefuse.sync.bundle",
}


def __getattr__(name: str) -> object:
    module = _FROM_SYNC.get(name)
    if module is None:
        raise AttributeError(f"module 'statefuse' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
