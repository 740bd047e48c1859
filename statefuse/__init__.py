"""StateFuse: replicated, conflict-preserving memory for teams of AI agents.

The core: ops and their canonical encoding, the grow-only op-set, the pure materializer and the
writer helper. See the README for a tour, and docs/ for the rest.
"""

from statefuse.core.authorname import SHORT_AUTHOR_CHARS, AuthorNames, AuthorNamesError
from statefuse.core.current import KeyConflict, KeyValue, current_of
from statefuse.core.error import (
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
from statefuse.core.interpret import (
    ClaimRequest,
    Interpretation,
    InterpretationError,
    QuestionRequest,
    RetractionRequest,
    TurnInterpreter,
)
from statefuse.core.keytext import KeyTextError, format_key, parse_key
from statefuse.core.materializer import Materializer, materialize
from statefuse.core.op import (
    MAX_LAMPORT,
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Layer,
    Op,
    claim_ref_for,
    compute_claim_ref,
    confidence_rank,
    decode_op,
)
from statefuse.core.opset import OpSet
from statefuse.core.state import (
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
from statefuse.reading.context import (
    DEFAULT_BUDGET,
    SYSTEM_PROMPT,
    Context,
    ContextCache,
    ContextError,
    ContextPolicy,
    ContextTotals,
    PreviousValues,
    Section,
    SectionName,
    Transcript,
    assemble_context,
    context_for,
    default_resolver,
    previous_values,
)
from statefuse.reading.history import HistoryEvent, key_history
from statefuse.reading.judge import CallableResolver, judge_payload
from statefuse.reading.lens import Include, Lens, LensError
from statefuse.reading.projection import DEFAULT_AUTHORITY_ORDER, ProjectionError, project
from statefuse.reading.ranker import LexicalRanker, Ranker
from statefuse.reading.resolver import (
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
from statefuse.reading.statediff import RetractedClaim, StateDiff, state_diff
from statefuse.reading.timeline import TimelineEntry, timeline
from statefuse.reading.tokenizer import (
    BpeTokenizer,
    ByteEstimate,
    CachedTokenizer,
    Tokenizer,
    TokenizerError,
    default_tokenizer,
)
from statefuse.reading.view import (
    Contest,
    How,
    Selection,
    StaleNote,
    SurfacedConflict,
    SurfacedFinding,
    View,
)
from statefuse.registry import (
    DEFAULT_REGISTRY,
    EXACT_REGISTRY,
    Cardinality,
    ClaimView,
    DetectorClaim,
    DetectorInput,
    DetectorSpec,
    Finding,
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
    register_detector,
    register_normalizer,
)
from statefuse.registry.file import load_registry, save_registry
from statefuse.retrieval.embedder import Embedder, EmbedderError, EmbeddingServiceError, as_embedder
from statefuse.retrieval.fusion import HybridRanker, rrf
from statefuse.retrieval.search import SearchHit
from statefuse.storage.storeindex import StoreIndex
from statefuse.storage.writer import Writer

__version__ = "0.1.0"

from statefuse.storage.store import (
    MemoryStore,
    QuarantineRecord,
    StoreError,
    StoreInfo,
    StoreWarning,
)

__all__ = [
    "DEFAULT_AUTHORITY_ORDER",
    "DEFAULT_BUDGET",
    "DEFAULT_REGISTRY",
    "EXACT_REGISTRY",
    "MAX_LAMPORT",
    "SHORT_AUTHOR_CHARS",
    "SYSTEM_PROMPT",
    "Abstain",
    "AbstainAll",
    "AuthorNamed",
    "AuthorNames",
    "AuthorNamesError",
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
    "ClaimView",
    "ConflictPage",
    "ConflictSet",
    "Conservative",
    "Contest",
    "Context",
    "ContextCache",
    "ContextError",
    "ContextPolicy",
    "ContextTotals",
    "ContractError",
    "Damage",
    "DecisionAdded",
    "DetectorClaim",
    "DetectorInput",
    "DetectorSpec",
    "Embedder",
    "EmbedderError",
    "EmbeddingServiceError",
    "EncodingError",
    "EvidenceAdded",
    "Finding",
    "FollowError",
    "FollowStatus",
    "Follower",
    "FrozenList",
    "FrozenMap",
    "HistoryEvent",
    "How",
    "HybridRanker",
    "Include",
    "InputError",
    "Interpretation",
    "InterpretationError",
    "KeyConflict",
    "KeyTextError",
    "KeyValue",
    "LatestWins",
    "Layer",
    "Lens",
    "LensError",
    "LexicalRanker",
    "Materializer",
    "MemoryStore",
    "MergeReport",
    "NormalizationError",
    "Observed",
    "Op",
    "OpIdMismatch",
    "OpRuleError",
    "OpSet",
    "Origin",
    "OwnFeedWarning",
    "PeerStatus",
    "Policy",
    "PredicateContract",
    "PreviousValues",
    "ProjectionError",
    "QuarantineRecord",
    "QuestionRequest",
    "Ranker",
    "ReadOnlyError",
    "RefusedDeclaration",
    "Registry",
    "RegistryError",
    "RepairReport",
    "Replica",
    "ReplicaError",
    "Resolver",
    "ResolverConfigError",
    "ResolverInput",
    "ResolverInputError",
    "RetractedClaim",
    "RetractionRequest",
    "SearchHit",
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
    "StateDiff",
    "StateFuseError",
    "StoreDamagedError",
    "StoreError",
    "StoreIndex",
    "StoreInfo",
    "StoreWarning",
    "SurfacedConflict",
    "SurfacedFinding",
    "TimelineEntry",
    "Tokenizer",
    "TokenizerError",
    "Transcript",
    "TurnInterpreter",
    "TwoSpacesError",
    "UnknownClaimError",
    "UnknownVersionError",
    "Value",
    "ValueRuleError",
    "ValueTypeError",
    "Version",
    "VersionError",
    "View",
    "Writer",
    "__version__",
    "as_embedder",
    "assemble_context",
    "claim_ref_for",
    "compute_claim_ref",
    "confidence_rank",
    "conflict_id_of",
    "context_for",
    "current_of",
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
    "register_detector",
    "register_normalizer",
    "rrf",
    "run_resolver",
    "save_registry",
    "state_diff",
    "timeline",
]

#: Names served from the layer above (`sync`): the replica signs and verifies changes, so it lives
#: with the merge boundary, and is imported only when first used (``statefuse`` itself never
#: imports ``sync`` at import time, keeping the layering one-way).
_FROM_SYNC = {
    "Replica": "statefuse.sync.replica",
    "Version": "statefuse.sync.version",
    "VersionError": "statefuse.sync.version",
    "UnknownVersionError": "statefuse.sync.version",
    "MergeReport": "statefuse.sync.replica",
    "ReplicaError": "statefuse.sync.replica",
    "UnknownClaimError": "statefuse.sync.replica",
    "TwoSpacesError": "statefuse.sync.replica",
    "RefusedDeclaration": "statefuse.sync.creator",
    "ReadOnlyError": "statefuse.sync.replica",
    "StoreDamagedError": "statefuse.sync.replica",
    "OwnFeedWarning": "statefuse.sync.replica",
    "Damage": "statefuse.sync.replica",
    "RepairReport": "statefuse.sync.replica",
    "ConflictPage": "statefuse.sync.replica",
    "BundleError": "statefuse.sync.bundle",
    "AuthorNamed": "statefuse.sync.author",
    "Observed": "statefuse.sync.replica",
    "Origin": "statefuse.sync.replica",
    "Follower": "statefuse.sync.follower",
    "FollowError": "statefuse.sync.follower",
    "FollowStatus": "statefuse.sync.follower",
    "PeerStatus": "statefuse.sync.follower",
}


from collections.abc import Sequence as _Sequence  # noqa: E402
from importlib.machinery import ModuleSpec as _ModuleSpec  # noqa: E402
from types import ModuleType as _ModuleType  # noqa: E402

#: The modules of the flat layout before the floors (``statefuse.op``, ``statefuse.context``, ...)
#: and the floor each moved to. An import of the old path gives the very module object of the new
#: one (`_MovedFinder`), so code, pickles and patches written against the old paths keep working.
#: The command line, the MCP server and the LangGraph store keep real modules at their public
#: paths instead (``statefuse/cli.py`` ...), which type checkers read too.
_MOVED = {
    "argument": "entry",
    "authorname": "core",
    "clitable": "entry",
    "context": "reading",
    "current": "core",
    "demo": "entry",
    "embedder": "retrieval",
    "embeddingservice": "retrieval",
    "error": "core",
    "filemark": "storage",
    "fusion": "retrieval",
    "history": "reading",
    "index": "core",
    "interpret": "core",
    "judge": "reading",
    "keytext": "core",
    "lens": "reading",
    "lifecycle": "core",
    "materializer": "core",
    "op": "core",
    "opset": "core",
    "projection": "reading",
    "ranker": "reading",
    "resolver": "reading",
    "scrub": "reading",
    "search": "retrieval",
    "sentencetransformer": "retrieval",
    "sqlitestore": "storage",
    "state": "core",
    "statediff": "reading",
    "store": "storage",
    "storeindex": "storage",
    "testing": "storage",
    "timeline": "reading",
    "tokenizer": "reading",
    "typo": "core",
    "validity": "core",
    "vectorstore": "retrieval",
    "view": "reading",
    "writer": "storage",
}


class _MovedLoader:
    """Loads an old module path as the module at its new path, keeping that module's own spec."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: _ModuleSpec | None = None

    def create_module(self, spec: _ModuleSpec) -> _ModuleType:
        import importlib

        module = importlib.import_module(self.new)
        self.spec = module.__spec__
        return module

    def exec_module(self, module: _ModuleType) -> None:
        # the import system gave the module the old path's spec; give it back its own, so that
        # reload, inspect and pickle see where it lives
        module.__spec__ = self.spec


class _MovedFinder:
    """Finds ``statefuse.<old>`` for each module of `_MOVED` (on ``sys.meta_path``)."""

    def find_spec(
        self, name: str, path: _Sequence[str] | None = None, target: _ModuleType | None = None
    ) -> _ModuleSpec | None:
        head, _, tail = name.rpartition(".")
        floor = _MOVED.get(tail) if head == "statefuse" else None
        if floor is None:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, _MovedLoader(f"statefuse.{floor}.{tail}"))  # type: ignore[arg-type]


class _Surface(_ModuleType):
    """The package ``statefuse``: loading an old module path sets it as an attribute here, as
    Python does for every submodule, but never over a name this package exports
    (``statefuse.timeline`` stays the function, as it was in the flat layout)."""

    def __setattr__(self, name: str, value: object) -> None:
        held = self.__dict__.get(name)
        exported = held is not None and not isinstance(held, _ModuleType)
        if name in _MOVED and isinstance(value, _ModuleType) and exported:
            return
        super().__setattr__(name, value)


def _install_moved_finder() -> None:
    import sys

    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    sys.modules[__name__].__class__ = _Surface


_install_moved_finder()


def __getattr__(name: str) -> object:
    import importlib

    floor = _MOVED.get(name)
    if floor is not None:
        # ``statefuse.op`` as an attribute, as the flat layout had it once the module was loaded
        return importlib.import_module(f"statefuse.{name}")
    module = _FROM_SYNC.get(name)
    if module is None:
        raise AttributeError(f"module 'statefuse' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
