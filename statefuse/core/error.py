"""The StateFuse error tree, in one place.

::

    StateFuseError                      every error raised on purpose
    ├── InputError                      .field and .rule name what is wrong
    │   ├── ValueRuleError (ValueError)     a value breaks the value model (range, depth, size)
    │   ├── ValueTypeError (TypeError)      a type StateFuse does not store
    │   ├── EncodingError (ValueError)      bytes that are not the canonical encoding
    │   ├── NormalizationError (ValueError) a contract's normalizer declines a value
    │   ├── LensError (ValueError)           a lens built with a bad argument
    │   ├── ProjectionError (TypeError)      project() given something that is not a State/Lens
    │   ├── ResolverConfigError (ValueError) a resolver built with bad options
    │   ├── ResolverInputError (ValueError)  a resolver input that is not a conflict's candidates
    │   ├── ContractError (ValueError)      a bad predicate contract or registry
    │   │   ├── NormalizerContractError     a custom normalizer breaks the normalizer contract
    │   │   ├── DetectorContractError       a detector breaks the detector contract
    │   │   │                               (registry.checker.check_detector)
    │   │   └── RegistryError               a registry file / declaration that cannot be used
    │   │                                   (registry.checker; not pure, so not re-exported here)
    │   ├── OpRuleError (ValueError)        an op field breaks the op schema
    │   ├── KeyTextError (ValueError)       a string that is not ``namespace/subject/predicate``
    │   │                                   (`statefuse.core.keytext`)
    │   ├── ClaimLookupError (LookupError)  a claim id, hex id or id prefix that names no claim
    │   │                                   of the state, or several (`State.claim`)
    │   ├── ContextError (ValueError)       assemble_context given a bad argument, or
    │   │                                   Context.expand an unknown handle
    │   ├── AuthorNamesError (TypeError)    AuthorNames given something other than author
    │   │                                   ids (bytes) mapped to names (non-empty str)
    │   ├── TokenizerError (ValueError)     a tokenizer asked for with a bad argument, or one
    │   │                                   whose package is not installed
    │   ├── InterpretationError (TypeError) a turn interpreter's answer that is not a
    │   │                                   well-formed Interpretation (`statefuse.core.interpret`)
    │   ├── StoreError (RuntimeError)       a store for another space or a newer schema, locked
    │   │                                   by a live writer, or missing or unreadable
    │   ├── CliError (ValueError)           a command-line usage error (printed as ``Error: …``)
    │   ├── DemoDirError (ValueError)       a ``statefuse demo --dir`` that cannot take the demo's
    │   │                                   stores (not a directory, or holding one already)
    │   ├── EmbedderError (ValueError)      an embedder, or the vectors it returned, that breaks
    │   │                                   the interface (count, dimension, finite numbers;
    │   │                                   `statefuse.retrieval.embedder`)
    │   └── ToolArgumentError (ValueError)  an MCP tool argument that breaks a rule (sent to the
    │                                       client as a one-line error result;
    ``statefuse.entry.mcp``)
    ├── OpIdMismatch (ValueError)       an op whose recomputed id differs from the one it claims
    │
    │   defined in ``sync`` (the merge boundary; ``statefuse`` cannot import it):
    ├── InputError
    │   ├── PublicKeyError (ValueError)     a degenerate, small-order or malformed author key
    │   ├── SignatureError (ValueError)     a signature or message of the wrong type or length
    │   ├── SigningKeyError (ValueError)    a bad private seed
    │   ├── KeyFileError (ValueError)       a key file that is missing, malformed or too open
    │   ├── ChangeInputError (TypeError)    something that is not bytes handed over as a change
    │   ├── TrustConfigError (ValueError)   a change log set up against the trust rules
    │   ├── ReconcileError (ValueError)     a malformed or hostile reconciliation message
    │   ├── BoundsConfigError (ValueError)  a change-log bound that is not a positive int
    │   ├── ReplicaError (ValueError)       a replica verb used against its rules (e.g. trust
    │   │   │                               ops from a non-root key, an op too big for a change)
    │   │   ├── UnknownClaimError           ... naming a claim it does not have (also a
    │   │   │                               ClaimLookupError)
    │   │   └── TwoSpacesError              two stores pinned to different creators under one
    │   │                                   space name (also a SyncError)
    │   ├── StoreError
    │   │   └── ReadOnlyError               a write or receive on a read-only replica (opened
    │   │       │                           read-only, or without its key file)
    │   │       └── StoreDamagedError       ... on a store that failed verification on open
    │   │                                   (read-only until `statefuse repair`)
    │   ├── VersionError (ValueError)       a version text / JSON / value that breaks its format
    │   │   │                               (``statefuse.sync.version``)
    │   │   └── UnknownVersionError         ... naming changes this replica does not hold
    │   │                                   (also a LookupError; ``.missing`` lists them)
    │   ├── BundleError (ValueError)        a bundle file that is truncated, altered, for another
    │   │                                   space or not signed by its exporter (imports nothing)
    │   └── SyncError (RuntimeError)        HTTP sync failed: PeerUnreachableError,
    │       │                               PeerTimeoutError, PeerRejectedError,
    │       │                               MalformedResponseError, ServerIdentityError (a
    │       │                               closed space's server proves no admitted author:
    │       │                               nothing pushed); and FollowError, a
    │       │                               follower's bad argument, a URL scheme no transport
    │       │                               handles, or a round on demand that could not run
    │       └── JetStreamError              a JetStream link failed (``statefuse.sync.jetstream``,
    │                                       needs ``nats-py``): BrokerUnavailableError,
    │                                       BrokerRefusedError
    │
    │   defined in ``statefuse.entry.langgraph`` (an entry point; needs ``langgraph``):
    ├── InputError
    │   └── LangGraphStoreError (ValueError) bad input to a StateFuseStore batch (a filter, a
    │       │                               key, a value, an embedding of the wrong size)
    │       └── NamespaceError              a namespace LangGraph does not allow; also
    │                                       LangGraph's InvalidNamespaceError
    ├── EmbeddingServiceError (RuntimeError)  an embedding service failed (``rule``,
    │                                   ``status``; `statefuse.retrieval.embedder`):
    │                                   EmbeddingRejectedError (4xx), EmbeddingUnavailableError
    │                                   (5xx, no connection), EmbeddingTimeoutError,
    │                                   EmbeddingResponseError (not the vectors asked for)
    ├── SnapshotError                   a replica snapshot that cannot be used (``rule`` says
    │                                   why); the replica reports it as a SnapshotWarning and
    │                                   verifies the store in full instead
    ├── AreaFullError                   a change would pass a bound of the pending area or the
    │                                   quarantine (the change log is left unchanged)
    └── VerificationError (ValueError)  bytes that are not a valid signed change; carries the
                                        QuarantineReason the change log records

The bottom of the tree lives in ``registry.error`` (``registry`` is the bottom layer and imports
nothing of ours); this module re-exports it so users import every error from ``statefuse``.
"""

from __future__ import annotations

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


class OpRuleError(InputError, ValueError):
    """An op field that breaks the op schema (type, range, format)."""


class ClaimLookupError(InputError, LookupError):
    """A claim reference (an id, its hex, or a hex prefix) that names no claim of the state, or
    several (``rule``: ``claim-ref``, ``known-claim`` or ``unique-prefix``)."""


class OpIdMismatch(StateFuseError, ValueError):
    """An op whose content no longer hashes to the id it carries (tampered or mutated)."""

    def __init__(self, claimed: bytes, actual: bytes) -> None:
        self.claimed = claimed
        self.actual = actual
        super().__init__(
            f"op_id: op claims id {claimed.hex()} but its content hashes to {actual.hex()}"
            " [rule: op-id-matches-content]"
        )

    def __reduce__(self) -> tuple[type[OpIdMismatch], tuple[bytes, bytes]]:
        return (type(self), (self.claimed, self.actual))


__all__ = [
    "ClaimLookupError",
    "ContractError",
    "EncodingError",
    "InputError",
    "NormalizationError",
    "OpIdMismatch",
    "OpRuleError",
    "RegistryError",
    "StateFuseError",
    "ValueRuleError",
    "ValueTypeError",
]
