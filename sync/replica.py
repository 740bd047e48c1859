"""The replica: one author's key, one store and the materialized memory, kept incrementally.

A replica is what an agent (or a branch of one) holds: it writes ops as signed changes of its own
key, receives other replicas' changes through the same verification as any network data, keeps
every accepted, parked or refused change in its store, and keeps the `State` current without
re-materializing on each read.

Invariants:

- Write-ahead: an own change is committed to the store before the in-memory state sees it, and a
  received batch is committed before the call returns; if the store fails, the in-memory side is
  rebuilt from the store, so memory never runs ahead of disk.
- The state equals ``materialize`` of the ops that count (`ChangeLog.ops`): changes are applied
  incrementally while they only add; a trust op from the root or a new equivocation can make
  earlier changes stop counting, and then the state is rebuilt from the log (rare and explicit).
- Trust verdicts and the state are functions of the set of accepted changes, never of arrival
  order (that is `ChangeLog`'s invariant; the replica only caches it).
- Receiving is atomic per call: the whole input is checked before anything is taken in, and a
  call that raises leaves log, state, store, pending area and quarantine exactly as before.
- The replica never forks its own feed knowingly: it signs after the highest head of its own
  author that it knows from any source (its store, a peer, a bundle, a snapshot). Changes of its
  own author that it did not write in this store (a restored backup, a key used by two stores)
  are reported once per call with an `OwnFeedWarning`, and writing continues after them.
- A store that does not verify on open (a damaged page, a broken chain, a change that no longer
  verifies) is read-only until repaired (`Replica.repair`): reads show what verifies, every write
  and every receive raises `StoreDamagedError`. A replica never signs from a partially loaded
  feed, so damage cannot spread to peers as a fork of lost history.
- Many replicas may share one store (other processes, or other replica objects on the same
  file): each call first takes in what they committed (`_catch_up`), and every write runs inside
  the store's write transaction (`_writing`), where it catches up again before it allocates its
  seq, prev and lamports, so the replicas of one store sign one feed and never fork it. Changes
  of its own author that another replica of the same store wrote are its own history, never an
  `OwnFeedWarning`.
- One replica may be used from several threads: every public method that reads or changes its
  log, state or store holds its re-entrant lock (`Replica.lock`), a `batch` holds it for the
  whole block, and observers run inside it, on the thread whose write or receive made the
  change (so an observer sees the state exactly as of the ops it is handed, and may read or
  write the replica itself). Another replica's lock is never taken while this one's is held
  (`merge` copies the other's changes first), so two replicas merging each other cannot
  deadlock.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import os
import sys
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from enum import Enum
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, overload

from statefuse.core.authorname import AuthorNames
from statefuse.core.current import KeyConflict, KeyValue, current_of
from statefuse.core.error import ClaimLookupError
from statefuse.core.interpret import TurnInterpreter, check_interpretation
from statefuse.core.keytext import key_parts, parse_key
from statefuse.core.lifecycle import ConflictEvent
from statefuse.core.materializer import Materializer, materialize, with_residue
from statefuse.core.op import (
    MAX_LAMPORT,
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Op,
    Outcome,
    _outcome,
    decode_op,
    sealed_encoding,
)
from statefuse.core.opset import OpSet
from statefuse.core.redactedclaim import Placed, RedactedClaim, decode_held, encode_held
from statefuse.core.residue import (
    NO_RESIDUES,
    ResidueFormatError,
    Residues,
    encode_residue,
)
from statefuse.core.state import ConflictSet, State, key_of, locus_of
from statefuse.core.typo import nearest, typo_of
from statefuse.core.validity import replaces
from statefuse.core.wording import plural
from statefuse.reading.context import (
    DEFAULT_BUDGET,
    Context,
    ContextCache,
    ContextTotals,
    context_for,
)
from statefuse.reading.history import HistoryEvent, key_history
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.ranker import LexicalRanker, Ranker
from statefuse.reading.resolver import Resolver
from statefuse.reading.scrub import residue_of
from statefuse.reading.statediff import StateDiff, state_diff
from statefuse.reading.timeline import TimelineEntry, timeline
from statefuse.reading.view import SurfacedConflict, SurfacedFinding
from statefuse.registry import DEFAULT_REGISTRY, EXACT_CONTRACT, EXACT_REGISTRY, Registry
from statefuse.registry.error import InputError, StateFuseError
from statefuse.registry.normalizer import Normalizer
from statefuse.registry.value import Value, plain_value
from statefuse.retrieval.fusion import HybridRanker
from statefuse.retrieval.search import SearchHit, search_view
from statefuse.retrieval.vectorstore import MemoryVectors, VectorStore
from statefuse.storage.store import (
    DEFAULT_WAIT,
    EvictedRow,
    MemoryStore,
    PendingRow,
    QuarantineRecord,
    RepairPlan,
    Store,
    StoreError,
    StoreInfo,
    StoreWrite,
)
from statefuse.storage.storeindex import OpMemo
from statefuse.storage.writer import Writer
from statefuse.sync.archive import (
    ARCHIVE_NOTE,
    RESIDUE_NOTE,
    compactable,
    read_archive,
    without_redacted,
    write_archive,
)
from statefuse.sync.author import (
    AuthorNamed,
    check_author_name,
    latest_names,
    name_latest,
    names_among,
)
from statefuse.sync.change import (
    CHANGE_FORMAT_VERSION,
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    ChangeInputError,
    UnverifiedChange,
    VerifiedChange,
    change_header,
    change_id_of,
    signed_message,
    wire_with_bodies,
    without_bodies,
)
from statefuse.sync.changelog import ChangeLog, Fork, Ignored, Receipt, Status, verdict
from statefuse.sync.clock import ClockJump, LamportGaps
from statefuse.sync.creator import (
    REFUSED_RULE,
    RefusedDeclaration,
    check_creator,
    first_declarer,
    refused_declarations,
    two_spaces,
)
from statefuse.sync.declaration import (
    SPACE_OP_TYPES,
    RegistryDeclared,
    declaration_in_force,
)
from statefuse.sync.key import KeyFileError, SigningKey
from statefuse.sync.pending import DEFAULT_BOUNDS, Area, Bounds, BoundsConfigError, Parked
from statefuse.sync.protocol import SyncError
from statefuse.sync.quarantine import QuarantineEntry
from statefuse.sync.reconcile import Reconciler
from statefuse.sync.redaction import (
    EMPTY as EMPTY_REDACTION,
)
from statefuse.sync.redaction import (
    MAX_REDACTED_PER_OP,
    REDACTOR_ROLE,
    OpsRedacted,
    Redacted,
    RedactionState,
    may_redact_any,
)
from statefuse.sync.snapshot import (
    Identity,
    Load,
    Restored,
    SnapshotError,
    SnapshotWarning,
    encode_snapshot,
    open_snapshot,
)
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode, TrustOp, TrustState, TrustWriter
from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change
from statefuse.sync.version import (
    Version,
    VersionError,
    counted,
    covered,
    made_at_of,
    parse_time,
    received_by,
    version_of,
)

if TYPE_CHECKING:
    from statefuse.storage.storeindex import StoreIndex
    from statefuse.sync.follower import Follower


class Origin(Enum):
    """How the ops an observer is called with reached the replica."""

    #: Written by this replica: its own writes, batches, trust ops and registry declarations.
    LOCAL = "local"
    #: Taken in from outside: `Replica.receive`, `merge`, `import_`, a sync or a `Follower`.
    RECEIVED = "received"
    #: Written to the same store by another process (or another replica object on the same
    #: file), and taken in from the store on this replica's next call (``source``: the path).
    STORE = "store"


class Observed(tuple[Op, ...]):
    """What an observer is called with: the ops the state gained from one write or receive,
    in the order they were applied (a tuple, as observers always got), and where they came
    from: ``origin`` (`Origin`) and ``source`` (the peer URL a sync or follower took them
    from, the bundle file of an `import_`, else None)."""

    origin: Origin
    source: str | None

    def __new__(cls, ops: Iterable[Op], origin: Origin, source: str | None = None) -> Observed:
        self = super().__new__(cls, ops)
        self.origin = origin
        self.source = source
        return self

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source is not None else ""
        return f"Observed({tuple.__repr__(self)}, {self.origin.value}{where})"


#: ``callback(ops)``: called with the `Observed` ops the state gains (see `Replica.observe`).
Observer = Callable[[Observed], object]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _locked(
    method: Callable[Concatenate[Replica, _P], _R],
) -> Callable[Concatenate[Replica, _P], _R]:
    """Run ``method`` holding the replica's lock (`Replica.lock`)."""

    @functools.wraps(method)
    def locked(self: Replica, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            self._catch_up()
            return method(self, *args, **kwargs)

    return locked


def _writes(
    method: Callable[Concatenate[Replica, _P], _R],
) -> Callable[Concatenate[Replica, _P], _R]:
    """Run ``method`` holding the replica's lock and, on a replica that may write, the store's
    write transaction (`Replica._writing`): what it reads and the seq, prev and lamports it
    signs come after every change another process committed."""

    @functools.wraps(method)
    def writes(self: Replica, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            if self._in_write:  # inside a batch or another write: joined, at no cost per op
                return method(self, *args, **kwargs)
            with self._writing():
                return method(self, *args, **kwargs)

    return writes


#: `Replica.close` saves a snapshot when the accepted changes it would not cover number at least
#: this fraction (1/N) of those it covers: replaying a few changes at the next open is cheaper
#: than rewriting a large snapshot on every close.
CLOSE_SNAPSHOT_SHARE = 64
#: The store note holding where the claims whose bodies this replica cut were (the audit of
#: redactions: `statefuse.core.redactedclaim`).
REDACTED_NOTE = "redacted-claims"


class _Unset:
    """No value given (``None`` is a value)."""


_UNSET = _Unset()


@dataclass(frozen=True, slots=True)
class Redaction:
    """What `Replica.redact` did: the claims chosen (ids), the redaction ops it wrote, and how
    many of the chosen claims were redacted already."""

    claims: tuple[bytes, ...]
    ops: tuple[OpsRedacted, ...]
    already: int


@dataclass(frozen=True, slots=True)
class Compaction:
    """What `Replica.compact` moved: how many op bodies, out of how many changes, how many
    bytes of op encodings, into which archive; and the store file's size before and after
    (None for a store in memory)."""

    ops: int
    changes: int
    bytes: int
    archive: Path
    store_before: int | None
    store_after: int | None


class ArchiveWarning(UserWarning):
    """A compacted store whose archive cannot be read: the changes whose bodies moved there
    are not served until it is back."""


def _file_size(path: object) -> int | None:
    """Bytes of a store's database file and its write-ahead log (None: in memory)."""
    if path is None:
        return None
    db = Path(os.fspath(path))  # type: ignore[call-overload]
    total = 0
    for p in (db, db.with_name(db.name + "-wal")):
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


class ReplicaError(InputError, ValueError):
    """A replica asked to do something its rules forbid (e.g. trust ops from a non-root key)."""


class TwoSpacesError(ReplicaError, SyncError):
    """Two stores created apart under one space name, pinned to different creators (field
    ``creator``, rule ``two-spaces``): a sync, import or merge between them is refused before
    anything moves (SEMANTICS §2). Also a `SyncError`, so a sync reports it like any failed
    peer."""


class UnknownClaimError(ReplicaError, ClaimLookupError):
    """A replica verb named a claim it cannot find (`State.claim`'s rules): both a
    `ReplicaError`, as such errors of a replica verb always were, and a `ClaimLookupError`."""


class ReadOnlyError(StoreError):
    """A write or receive on a replica that is read-only: opened with ``readonly=True``
    (rule ``readonly``) or without its author key (rule ``no-key``). The message says why and
    what to do."""


class StoreDamagedError(ReadOnlyError):
    """A write or receive on a store that failed verification on open (rule
    ``store-damaged``): the message names the damage and the repair command."""


class OwnFeedWarning(UserWarning):
    """Changes of this replica's own author arrived that this store did not write: a restored
    backup, a copied store, or one key used by two stores. Both branches are kept (a fork, see
    `Replica.forks`); this replica writes on after the highest of them."""


@dataclass(frozen=True, slots=True)
class Damage:
    """Why a store opened read-only: what failed verification or SQLite's checks."""

    #: Stored accepted changes that no longer verify (bad bytes, broken links).
    failed: int
    #: Stored changes that verify but follow a failed one (parked until it comes back).
    orphaned: int
    #: Stored pending changes that no longer verify.
    failed_pending: int
    #: What SQLite reported about the file (empty: the file itself is sound).
    sqlite: tuple[str, ...]
    #: One line per problem found first (at most `DAMAGE_DETAIL`).
    details: tuple[str, ...]

    def describe(self) -> str:
        """One line: what is damaged and the fix."""
        parts = []
        if self.sqlite:
            parts.append(f"SQLite reports damage ({self.sqlite[0]})")
        if self.failed:
            parts.append(f"failing verification: {plural(self.failed, 'stored change')}")
        if self.orphaned:
            parts.append(f"after a damaged change: {plural(self.orphaned, 'stored change')}")
        if self.failed_pending:
            parts.append(f"failing verification: {plural(self.failed_pending, 'pending change')}")
        first = f" (first: {self.details[0]})" if self.details else ""
        return (
            f"the store is damaged: {'; '.join(parts)}{first}; it is read-only until repaired:"
            " run `statefuse repair` (add --from URL to fetch the lost changes from a peer)"
        )


#: How many problems `Damage.details` keeps.
DAMAGE_DETAIL = 20


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What `Replica.repair` did: rows moved (never deleted) and where a damaged file went."""

    #: Stored changes moved into quarantine, with the reason they failed.
    quarantined: int = 0
    #: Stored changes that verify but wait for a damaged predecessor: moved to pending.
    parked: int = 0
    #: Where the damaged file was kept when SQLite could not read all of it (else None).
    original: Path | None = None
    #: This replica's own changes waiting for a damaged predecessor (fetch it from a peer
    #: before writing, or the next write forks the feed: both branches are kept).
    own_waiting: int = 0


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What one receive, merge or import did, counted by outcome, with the forks it revealed
    (`ChangeLog.forks` of the authors and seqs it touched), the clock jumps among the changes
    that started to count (`sync.clock`) and how many of this replica's own changes arrived
    from elsewhere. ``registry_changed``: (old, new) fingerprints when the
    changes taken in put another registry declaration in force (the memory was recomputed
    under it). ``refused_declarations``: registry declarations among the changes taken in
    that do not count (their author is not the space's creator or root; `sync.creator`), with
    the reason. ``adopted_creator``: the creator this store adopted from the source (an import,
    a sync, a merge) before taking its changes in, or None."""

    accepted: int = 0
    duplicate: int = 0
    pending: int = 0
    quarantined: int = 0
    new_ops: int = 0
    forks: tuple[Fork, ...] = ()
    own_from_elsewhere: int = 0
    registry_changed: tuple[bytes, bytes] | None = None
    clock_jumps: tuple[ClockJump, ...] = ()
    refused_declarations: tuple[RefusedDeclaration, ...] = ()
    adopted_creator: bytes | None = None
    #: Pending changes and quarantine entries evicted to keep those areas within their bounds
    #: (`sync.pending`; a peer sends an evicted pending change again on its next sync).
    evicted: int = 0

    def __add__(self, other: MergeReport) -> MergeReport:
        forks = {(f.author, f.seq): f for f in (*self.forks, *other.forks)}
        refused = {r.op_id: r for r in (*self.refused_declarations, *other.refused_declarations)}
        return MergeReport(
            accepted=self.accepted + other.accepted,
            duplicate=self.duplicate + other.duplicate,
            pending=self.pending + other.pending,
            quarantined=self.quarantined + other.quarantined,
            new_ops=self.new_ops + other.new_ops,
            forks=tuple(forks[k] for k in sorted(forks)),
            own_from_elsewhere=self.own_from_elsewhere + other.own_from_elsewhere,
            registry_changed=_joined(self.registry_changed, other.registry_changed),
            clock_jumps=_jumps_joined(self.clock_jumps, other.clock_jumps),
            refused_declarations=tuple(refused.values()),
            adopted_creator=self.adopted_creator or other.adopted_creator,
            evicted=self.evicted + other.evicted,
        )

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON document (ids in hex): what the HTTP server answers a push."""
        out: dict[str, Any] = {name: getattr(self, name) for name in _COUNTS}
        out["own_from_elsewhere"] = self.own_from_elsewhere
        out["evicted"] = self.evicted
        out["forks"] = [
            {"author": f.author.hex(), "seq": f.seq, "change_ids": [c.hex() for c in f.change_ids]}
            for f in self.forks
        ]
        if self.registry_changed is not None:
            out["registry_changed"] = [fp.hex() for fp in self.registry_changed]
        out["clock_jumps"] = [j.to_json() for j in self.clock_jumps]
        if self.refused_declarations:
            out["refused_declarations"] = [r.to_json() for r in self.refused_declarations]
        if self.adopted_creator is not None:
            out["adopted_creator"] = self.adopted_creator.hex()
        return out

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> MergeReport | None:
        """The report `to_json` wrote, or None for a document that is not one. A peer of the
        first release sends the counts only: no forks, nothing from elsewhere."""
        counts: dict[str, int] = {}
        for name in _COUNTS:
            c = document.get(name)
            if type(c) is not int or c < 0:
                return None
            counts[name] = c
        own = document.get("own_from_elsewhere", 0)
        evicted = document.get("evicted", 0)  # a peer of an earlier release evicts nothing
        raw_forks = document.get("forks", [])
        if type(own) is not int or own < 0 or not isinstance(raw_forks, list):
            return None
        if type(evicted) is not int or evicted < 0:
            return None
        forks = []
        try:
            for f in raw_forks[:_MAX_REPORTED_FORKS]:
                seq = f["seq"]
                if type(seq) is not int or seq < 1:
                    return None
                ids = tuple(bytes.fromhex(c) for c in f["change_ids"][:_MAX_REPORTED_FORKS])
                forks.append(Fork(bytes.fromhex(f["author"]), seq, ids))
            jumps = _jumps_from_json(document.get("clock_jumps", []))
        except (TypeError, KeyError, ValueError):
            return None
        if jumps is None:
            return None
        raw_refused = document.get("refused_declarations", [])
        if not isinstance(raw_refused, list):
            return None
        refused = [RefusedDeclaration.from_json(r) for r in raw_refused[:_MAX_REPORTED_FORKS]]
        return cls(
            accepted=counts["accepted"],
            duplicate=counts["duplicate"],
            pending=counts["pending"],
            quarantined=counts["quarantined"],
            new_ops=counts["new_ops"],
            forks=tuple(forks),
            own_from_elsewhere=own,
            registry_changed=_fingerprints(document.get("registry_changed")),
            clock_jumps=jumps,
            refused_declarations=tuple(r for r in refused if r is not None),
            evicted=evicted,
        )


def _jumps_joined(a: tuple[ClockJump, ...], b: tuple[ClockJump, ...]) -> tuple[ClockJump, ...]:
    both = {(j.lamport, j.change_id): j for j in (*a, *b)}
    return tuple(both[k] for k in sorted(both))


def _jumps_from_json(raw: object) -> tuple[ClockJump, ...] | None:
    """The clock jumps of a peer's report (at most `_MAX_REPORTED_FORKS`), or None when they
    are not well formed. Raises TypeError / KeyError / ValueError on bad fields."""
    if not isinstance(raw, list):
        return None
    jumps = []
    for j in raw[:_MAX_REPORTED_FORKS]:
        lamport, gap = j["lamport"], j["gap"]
        if type(lamport) is not int or type(gap) is not int or not 1 <= lamport <= MAX_LAMPORT:
            return None
        jumps.append(
            ClockJump(bytes.fromhex(j["author"]), bytes.fromhex(j["change_id"]), lamport, gap)
        )
    return tuple(jumps)


def _joined(
    a: tuple[bytes, bytes] | None, b: tuple[bytes, bytes] | None
) -> tuple[bytes, bytes] | None:
    """Two registry changes in a row, as one (None when the second undid the first)."""
    if a is None or b is None:
        return a or b
    return None if a[0] == b[1] else (a[0], b[1])


def _fingerprints(raw: object) -> tuple[bytes, bytes] | None:
    if not isinstance(raw, list) or len(raw) != 2:
        return None
    try:
        old, new = (bytes.fromhex(x) for x in raw)
    except (TypeError, ValueError):
        return None
    return (old, new) if len(old) == len(new) == 32 else None


_COUNTS = ("accepted", "duplicate", "pending", "quarantined", "new_ops")
#: Most forks (and change ids per fork) read from a peer's report.
_MAX_REPORTED_FORKS = 1000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


_first = itemgetter(0)


def _said(exc: Exception) -> str:
    """What ``exc`` says, on one line: a StateFuse error's message (no field or rule), an OS
    error's text, else its str (its class name when it has none)."""
    if isinstance(exc, InputError):
        text = exc.message
    elif isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror + (f": {exc.filename}" if exc.filename else "")
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def key_path(path: str | os.PathLike[str]) -> Path:
    """Where a store's author key lives: beside the store file itself, ``<file>.key`` (mode
    0600), ``path`` resolved as for its lock (`lock_path`), so every path to one store finds
    one key. A path without symlinks is kept as given; a key beside a symlink (where earlier
    releases looked) is still found when there is none beside the file."""
    given = Path(f"{os.fspath(path)}.key")
    real = Path(f"{os.path.realpath(path)}.key")
    if real == Path(os.path.abspath(given)) or (given.exists() and not real.exists()):
        return given
    return real


class Replica:
    """One author's memory on one store.

    Open one with `Replica.open` (SQLite, durable) or `Replica.memory` (in memory). Safe to use
    from several threads (a server thread, a `Follower`, the application): each call holds the
    replica's lock (`lock`); hold it yourself (``with replica.lock:``) to make several calls
    one step that no other thread interleaves with.
    """

    def __init__(
        self,
        store: Store,
        key: SigningKey | None,
        *,
        registry: Registry | None = None,
        clock: Callable[[], int] = _wall_ms,
        path: Path | None = None,
        load: Load | str = Load.INDEX,
        readonly: bool = False,
        bounds: Bounds | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> None:
        if bounds is not None and not isinstance(bounds, Bounds):
            raise BoundsConfigError("bounds", "bounds-type", f"expected Bounds, got {bounds!r}")
        #: The bounds of the pending area and the quarantine (`sync.pending`).
        self.bounds: Bounds = DEFAULT_BOUNDS if bounds is None else bounds
        try:
            load = Load(load)
        except ValueError:
            raise ReplicaError(
                "load", "load-mode", f"load is 'index', 'snapshot' or 'verify', not {load!r}"
            ) from None
        info = store.info()
        if info is None:
            raise StoreError("store", "initialized", "initialize the store before opening it")
        self._lock = threading.RLock()
        #: Followers started by `follow` and not yet stopped (`close` stops them).
        self._followers: list[Follower] = []
        self.store = store
        self.key = key
        #: The registry the process asked for (None: whatever the space declares).
        self._asked = registry
        #: Code of custom normalizers this process supplied with a registry (by name, v1).
        self._custom: dict[str, Normalizer] = dict(
            registry.custom_normalizers if registry is not None else {}
        )
        #: The fingerprint the store was created under (what snapshots are bound to).
        self._info_registry = info.registry
        #: The registry in force: the space's declaration (see `sync.declaration`).
        self.registry: Registry = registry if registry is not None else DEFAULT_REGISTRY
        #: The declaration in force (None: the space declares none).
        self.declaration: RegistryDeclared | None = None
        #: Registries built from declarations, by op id.
        self._built: dict[bytes, Registry] = {}
        #: (old, new) registry fingerprints when the last receive changed the one in force.
        self._registry_change: tuple[bytes, bytes] | None = None
        #: Caches `context` keeps between calls (made on first use).
        self._context_cache: ContextCache | None = None
        #: Ops decoded from the derived state, by id, for the slices read next (`OpMemo`),
        #: and the caches of the contexts read from it (made on first use).
        self._op_memo = OpMemo()
        self._slice_cache: ContextCache | None = None
        #: Where claim vectors are kept (`vectors`), and a hybrid ranker per embedder name.
        self._vectors: VectorStore | None = None
        self._rankers: dict[int, tuple[object, HybridRanker]] = {}
        #: Each author's `AuthorNamed` in force, and the names as labels (None: worked out on
        #: first use; see `author_names`).
        self._naming: dict[bytes, AuthorNamed] | None = None
        self._labels: AuthorNames | None = None
        self.path = path
        self.space = info.space
        self.mode = TrustMode(info.mode)
        self.root = info.root
        #: The open space's creator this store follows: the one author whose registry
        #: declarations count (None: none pinned, or a closed space; see `sync.creator`).
        self.creator: bytes | None = info.creator if self.mode is TrustMode.OPEN else None
        #: A store of an earlier release: its creator is worked out once, on load.
        self._creator_unknown = info.creator_unknown and self.mode is TrustMode.OPEN
        author = key.author if key is not None else info.author
        #: This replica's author id: the key's, or, opened without its key, the store's.
        self.author: bytes = author if author is not None else b""
        #: Why writes are refused (None: they are not): read-only open, no key.
        self._readonly: ReadOnlyError | None = None
        if readonly or store.readonly:
            self._readonly = ReadOnlyError(
                "store",
                "readonly",
                "this replica was opened read-only; open it without readonly=True to write",
            )
        elif key is None:
            self._readonly = ReadOnlyError(
                "key",
                "no-key",
                "no author key for this store"
                + (f" (expected at {key_path(path)})" if path is not None else "")
                + ": it opened read-only; restore the key file to write, or give the store a"
                " new author key (CLI: statefuse keys new)",
            )
        #: What failed verification when the store was opened (None: it verified).
        self.damage: Damage | None = None
        self._new_forks: set[tuple[bytes, int]] = set()
        #: Clock jumps among the changes that started to count since the last report.
        self._new_jumps: dict[tuple[int, bytes], ClockJump] = {}
        self._clock = clock
        self._observers: list[Observer] = []
        #: Ops written inside `batch()`, each with its encoding.
        self._batch: list[tuple[Op, bytes]] | None = None
        self._closed = False
        self._reconciler: tuple[int, Reconciler] | None = None
        self._load_mode = Load.SNAPSHOT if load is Load.INDEX else load
        #: Inside the store's write transaction (`_writing`); whether this one wrote to the
        #: store, and the own changes it signed, taken into memory once it commits.
        self._in_write = False
        self._wrote = False
        self._signed: list[VerifiedChange] = []
        #: Stored pending changes whose predecessor is accepted already: the next receive
        #: takes them in (`_pending_ready`).
        self._due: list[bytes] = []
        #: The changes the current write transaction stored (own and received), and the store
        #: position before it: what the store's derived state is brought up to date with
        #: before it commits (`_index_block`).
        self._block: list[VerifiedChange] = []
        self._block_base = 0
        #: The store's derived state was dropped inside a write (trust, a declaration or a
        #: name changed what counts): rebuilt once memory has taken the change in.
        self._index_due = False
        #: Reports progress while the store's derived state is built (`open`'s ``progress``).
        self._index_progress: Callable[[int, int], object] | None = None
        #: How many accepted changes the last open (or reload) restored from a snapshot
        #: instead of verifying them again (0: none).
        self.restored = 0
        #: Opened on the store's derived state alone (`_open_lazily`): reads answer from it,
        #: and the first call that needs the whole history loads it (`__getattr__`).
        self._lazy = False
        if not self._open_lazily(load):
            self._load()
        if self._creator_unknown and not self.readonly:
            store.pin_creator(self.creator)  # decided once, by the old rule (`_load_all`)
            self._creator_unknown = False
        self._check_asked()
        if (
            self.declaration is None
            and not self.readonly
            and self.registry.fingerprint != DEFAULT_REGISTRY.fingerprint
            and self._may_declare() is None
        ):
            # a store created with (or, before declarations, written under) another registry:
            # the space declares it, so every replica will use it (SEMANTICS §2)
            self.declare_registry(self.registry)
        self._index_progress = progress
        self._index_due = True  # a store of an earlier release has none yet: built now
        self._index_settle()
        note = getattr(self.store, "note", None)
        if (
            self._may_write()
            and note is not None
            and note(ARCHIVE_NOTE) is not None
            and note(RESIDUE_NOTE) is None
        ):
            self._scrub_residue()  # compacted by an earlier release: built from the archive
        if self.__dict__.pop("_residue_unsaved", False) and self._may_write():
            with self.store.write_transaction():  # built from the archive: kept from now on
                self._store_residue(self._scrub_residue())
        if not self._lazy and self._may_write():
            self.store.mark_clean()  # loaded and verified: the next open may trust it

    # --- the registry in force ---------------------------------------------------------------

    def _check_asked(self) -> None:
        """Refuse a process registry that is not the one in force (SEMANTICS §2)."""
        asked = self._asked
        if asked is None or asked.fingerprint == self.registry.fingerprint:
            return
        legacy = asked.with_default(EXACT_CONTRACT).fingerprint
        if legacy == self.registry.fingerprint == self._info_registry:
            return  # the first release's Registry(...) meant an exact default
        where = "declares" if self.declaration is not None else "uses (no declaration)"
        raise StoreError(
            "registry",
            "registry-mismatch",
            f"the space {where} registry {self.registry.fingerprint.hex()[:16]}…, not the"
            f" registry this process passed ({asked.fingerprint.hex()[:16]}…): open it without"
            " registry= to use the space's, or declare yours with Replica.declare_registry()"
            " (CLI: statefuse registry declare FILE)",
        )

    def _registry_of(self, declared: RegistryDeclared | None) -> Registry:
        """The registry ``declared`` describes, or the one of a space that declares none."""
        if declared is not None:
            built = self._built.get(declared.op_id)
            if built is None:
                built = self._built[declared.op_id] = declared.build(self._custom)
            return built
        fp = self._info_registry
        asked = self._asked
        candidates = [DEFAULT_REGISTRY, EXACT_REGISTRY]
        if asked is not None:
            candidates[:0] = [asked, asked.with_default(EXACT_CONTRACT)]
        if not fp:
            return asked or DEFAULT_REGISTRY
        for candidate in candidates:
            if candidate.fingerprint == fp:
                return candidate
        raise StoreError(
            "registry",
            "registry-undeclared",
            f"the store was written under registry {fp.hex()[:16]}…, which its space never"
            " declared: open it once in Python with that registry (Replica.open(path,"
            " registry=...)), which declares it for every replica",
        )

    def _refresh_registry(self) -> None:
        """Follow the declaration in force: when another one came into force, recompute the
        memory under its registry (a rare event: a space changes its contract)."""
        declared = self._in_force()
        if declared == self.declaration:
            return
        registry = self._registry_of(declared)
        self.declaration = declared
        if registry.fingerprint != self.registry.fingerprint:
            self._registry_change = _joined(
                self._registry_change, (self.registry.fingerprint, registry.fingerprint)
            )
            self.registry = registry
            self.writer.registry = registry
            self._mat = Materializer(self.log.ops(), registry=registry)
            self._mat.set_residue(self._scrub_residue())

    def _in_force(self) -> RegistryDeclared | None:
        """The declaration in force among the counted changes (`declaration_in_force`)."""
        return declaration_in_force(
            self.log.declarations(), mode=self.mode, root=self.root, creator=self.creator
        )

    def _may_declare(self) -> str | None:
        """Why this replica may not declare the space's registry (None: it may; an open store
        with no creator pinned may, and is pinned to its own author by declaring)."""
        if self.mode is TrustMode.CLOSED:
            if self.author != self.root:
                return "in a closed space only the root key declares the registry"
            return None
        if self.creator is not None and self.creator != self.author:
            return (
                f"in an open space only its creator ({self.author_label(self.creator)},"
                f" {self.creator.hex()[:12]}…) declares the registry; this store follows space"
                f" {self.space!r} created by that author"
            )
        return None

    # --- the open space's creator (`sync.creator`) --------------------------------------------

    @_locked
    def refused_declarations(self) -> list[RefusedDeclaration]:
        """The registry declarations in counted changes that do not count, with the reason
        (rule ``not-registry-authority``): by anyone but the open space's creator (every one,
        while none is pinned) or the closed space's root. They stay in the log."""
        return refused_declarations(
            self.log.declarations(),
            mode=self.mode,
            root=self.root,
            creator=self.creator,
            space=self.space,
        )

    @_writes
    def pin_creator(self, creator: bytes, *, force: bool = False) -> bool:
        """Make ``creator`` the open space's creator this store follows: only its registry
        declarations count from now on (the memory is recomputed under the latest of them).
        Returns False, writing nothing, when it is pinned to ``creator`` already.

        Raises ReplicaError rule ``closed-space`` in a closed space (its root declares), and
        `TwoSpacesError` when the store is pinned to another creator (it belongs to another
        space) unless ``force=True``: for a store of an earlier release whose creator the old
        rule got wrong (a stranger's declaration stamped with a low lamport)."""
        creator = check_creator("creator", creator)
        if self.mode is TrustMode.CLOSED:
            raise ReplicaError(
                "creator",
                "closed-space",
                "a closed space's registry is declared by its root: it has no creator to pin",
            )
        if self.creator == creator:
            return False
        self._check_writable()
        if self.creator is not None and not force:
            raise TwoSpacesError(
                "creator",
                "two-spaces",
                f"this store follows space {self.space!r} created by"
                f" {self.creator.hex()[:16]}…, not {creator.hex()[:16]}…: re-pinning it means"
                " it belongs to another space. Use force (CLI: --force) only to correct a"
                " creator an earlier release's rule picked wrongly",
            )
        self._set_creator(creator)
        return True

    def _set_creator(self, creator: bytes | None) -> None:
        """Record ``creator`` and follow the declaration it puts in force. All or nothing: a
        declaration of it naming a normalizer this process lacks (RegistryError) or a failed
        store write leaves the creator as it was."""
        old = self.creator
        self.creator = creator
        try:
            self._registry_of(self._in_force())  # raises before anything is recorded
            self.store.pin_creator(creator)
        except BaseException:
            self.creator = old
            raise
        self._refresh_registry()

    def _meet(self, theirs: bytes | None, source: str) -> bytes | None:
        """Before taking in the changes of ``source`` (a bundle, a server, a replica) that
        follows creator ``theirs``: refuse two spaces that share a name (`TwoSpacesError`),
        and adopt ``theirs`` when this store has none pinned (its user chose the source).
        Returns the creator adopted, or None."""
        if self.mode is TrustMode.CLOSED or theirs is None or theirs == self.creator:
            return None
        if self.creator is not None:
            raise TwoSpacesError(
                "creator", "two-spaces", two_spaces(self.space, self.creator, theirs, source)
            )
        self._check_writable()
        self._set_creator(check_creator("creator", theirs))
        return theirs

    def _unmeet(self, adopted: bytes | None) -> None:
        """Undo `_meet`'s adoption when taking the changes in failed (the call changes
        nothing)."""
        if adopted is not None and self.creator == adopted:
            self._set_creator(None)

    @_writes
    def declare_registry(self, registry: Registry) -> RegistryDeclared | None:
        """Make ``registry`` the space's contract for every replica (SEMANTICS §2): a
        `RegistryDeclared` op holding its document. The memory is recomputed under it here,
        and on every replica that receives it.

        Only the root (closed mode) or the space's creator (open mode: the creator this store
        follows; a store with none pinned is pinned to this replica's author by declaring, see
        `sync.creator`) may declare; others get ReplicaError rule ``not-registry-authority``.
        Returns None, writing nothing, when ``registry`` is already the declaration in force.
        """
        self._check_writable()
        if not isinstance(registry, Registry):
            raise ReplicaError("registry", "type", f"expected a Registry, got {registry!r}")
        if self.declaration is not None and registry.fingerprint == self.registry.fingerprint:
            return None
        why = self._may_declare()
        if why is not None:
            raise ReplicaError("registry", REFUSED_RULE, why)
        if self.mode is TrustMode.OPEN and self.creator is None:
            self._set_creator(self.author)  # declaring creates the space's contract
        self._custom.update(registry.custom_normalizers)
        lamport, wall = self._space_tick()
        op = RegistryDeclared(self.author, lamport, wall, registry.to_document())
        self.writer.advance(lamport)
        self._built[op.op_id] = Registry.from_document(op.registry, normalizers=self._custom)
        written: RegistryDeclared = self._emit(op)
        return written

    def _space_tick(self) -> tuple[int, int]:
        """(lamport, wall) for a space op: past both writers' clocks, saturating at
        `MAX_LAMPORT`."""
        lamport, wall = self.writer._tick()
        return min(max(lamport, self.trust_writer._lamport + 1), MAX_LAMPORT), wall

    # --- author names ----------------------------------------------------------------------------

    def author_names(self) -> AuthorNames:
        """author id -> the name it declared for itself (`sync.author`: each author's latest
        `AuthorNamed` among the changes that count), as an immutable `AuthorNames`, which also
        labels authors for display. The same object until a name changes."""
        labels = self._labels
        if labels is None:
            labels = self._labels = AuthorNames({a: op.name for a, op in self._named().items()})
        return labels

    def names(self) -> dict[bytes, str]:
        """author id -> the name it declared for itself, sorted by author id (a new dict; see
        `author_names`)."""
        return dict(self.author_names())

    def author_name(self, author: bytes) -> str | None:
        """The name ``author`` declared for itself, or None."""
        return self.author_names().get(author)

    def author_label(self, author: bytes | str) -> str:
        """How every surface shows ``author``: its name (with its key's first 8 hex digits when
        the name alone could pass for another author: shared, or looking like a key); the 8
        hex digits alone when it has none (`AuthorNames.label`)."""
        return self.author_names().label(author)

    @_writes
    def declare_name(self, name: str) -> AuthorNamed | None:
        """Call this replica's author ``name`` from now on, for every replica of the space: an
        `AuthorNamed` op signed by its key (see `sync.author` for the rule: the author's latest
        name wins). Returns None, writing nothing, when ``name`` is the name it declared last.

        Raises OpRuleError (field ``name``; rules ``str``, ``name-length``,
        ``name-whitespace``, ``name-control``) for a name that breaks the rule, before anything
        is written, and ReadOnlyError / StoreDamagedError on a replica that may not write."""
        self._check_open()
        check_author_name("name", name)
        if self._declared_name() == name:
            return None
        self._check_writable()
        lamport, wall = self._space_tick()
        op = AuthorNamed(self.author, lamport, wall, name)
        self.writer.advance(lamport)
        written: AuthorNamed = self._emit(op)
        return written

    def _go_by(self, name: str) -> None:
        """`declare_name` on open, refused with the reason on a replica that may not write
        (the field is ``name``, the rule that of the reason: ``readonly``, ``no-key``,
        ``store-damaged``)."""
        if self._declared_name() == name:
            return
        what = f"cannot declare the name {name!r}"
        if self.damage is not None:
            raise StoreDamagedError("name", "store-damaged", f"{what}: {self.damage.describe()}")
        e = self._readonly
        if e is not None:
            raise ReadOnlyError("name", e.rule, f"{what}: {e.message}")
        self.declare_name(name)

    def _declared_name(self) -> str | None:
        """The name this replica's author declared last, whether or not its changes count (an
        author a closed space has not admitted yet has no name to show, but has declared one)."""
        counted = self._named().get(self.author)
        if counted is not None:
            mine = [counted]
        else:
            mine = list(
                names_among(
                    op for c in self.log.changes() if c.author == self.author for op in c.ops
                )
            )
        latest = latest_names(mine).get(self.author)
        return None if latest is None else latest.name

    def _named(self) -> dict[bytes, AuthorNamed]:
        """Each author's `AuthorNamed` in force, from the changes that count (worked out once,
        then kept as changes come in)."""
        naming = self._naming
        if naming is None:
            get = self.log.get
            counted = (get(cid) for cid in self._counted)
            naming = self._naming = latest_names(
                names_among(op for c in counted if c is not None for op in c.ops)
            )
        return naming

    def _take_names(self, changes: Iterable[VerifiedChange]) -> None:
        """Follow the names in newly counted ``changes``."""
        naming = self._naming
        if naming is None:
            return  # not worked out yet: it will be from every counted change
        for op in names_among(op for c in changes for op in c.ops):
            if name_latest(naming, op):
                self._labels = None

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        space: str | None = None,
        registry: Registry | None = None,
        key: SigningKey | None = None,
        mode: TrustMode | str = TrustMode.OPEN,
        root: bytes | None = None,
        create: bool = False,
        readonly: bool = False,
        adopt_key: bool = False,
        wait: float = DEFAULT_WAIT,
        clock: Callable[[], int] = _wall_ms,
        load: Load | str = Load.INDEX,
        name: str | None = None,
        creator: bytes | None = None,
        bounds: Bounds | None = None,
        progress: Callable[[int, int], object] | None = None,
    ) -> Replica:
        """Open the SQLite replica at ``path`` (or, with ``create=True``, create it there).

        Creating needs ``space``; the author key is generated (or ``key`` is used) and saved to
        ``<path>.key`` with mode 0600, bound to the new store. Opening refuses: a missing path
        without ``create`` (StoreError rule ``no-such-store``), a file that is not a StateFuse
        store (``not-a-store``; the file is left untouched), another ``space``, another registry,
        a key bound to another store (``key-bound-elsewhere``) or of another author
        (``key-author``) unless ``adopt_key=True``.

        Any number of processes may open one store and write: each write waits for the others'
        (the store's write lock, up to ``wait`` seconds, default `DEFAULT_WAIT`; StoreError
        ``busy`` past that) and each call sees what the others wrote before it. Opened with the
        store's key, they all sign one feed: each write takes the next seq of the author inside
        the write transaction, so they never fork it.

        ``readonly=True`` takes no lock and works beside the writers (SQLite WAL readers see
        the last committed state); a store whose key file is missing opens read-only too. A
        store that fails verification opens read-only with `damage` set (`repair` fixes it).
        ``mode="closed"`` admits only authors the root admits; the root defaults to this
        replica's own key.

        ``load``: by default (``"index"``) a store whose derived state covers every stored
        change opens on it alone, loading no history (`loaded` is False): opening costs nothing
        that grows with history, `context`, `state_for`, `conflicts` and lean writes read a few
        indexed rows, and the first call that needs the history (`state`, a sync, a receive,
        trust ops) loads it then. Such an open does not verify the stored changes again (they
        were verified when they were taken in; `statefuse verify` does). ``load="snapshot"``
        loads the history now, from the store's snapshot and what was stored after it;
        ``load="verify"`` ignores the snapshot and verifies every stored change again.

        ``name``: the name this replica's author goes by (`declare_name`, written only when
        it differs from the one it declared last; OpRuleError field ``name`` for a bad one,
        before anything is opened, and ReadOnlyError when it differs on a replica that may
        not write). ``creator``: the open space's creator, the one author
        whose registry declarations count (`sync.creator`): a new store is created pinned to
        it, an existing one with none pinned is pinned to it (`pin_creator`; another one
        pinned already raises `TwoSpacesError`). ``bounds``: how much the pending area and the
        quarantine keep (default `DEFAULT_BOUNDS`; see `sync.pending`). ``progress(done,
        total)`` is called while a writable open builds the store's derived state (once, for a
        store of an earlier release: `statefuse.storage.storeindex`).
        """
        from statefuse.storage.sqlitestore import SQLiteStore

        if name is not None:
            check_author_name("name", name)
        path = Path(path)
        kpath = key_path(path)
        made: list[Path] = []  # what this call creates, removed again if it fails
        if path.exists() or not create:
            store = SQLiteStore(path, create=False, readonly=readonly, wait=wait)
        else:
            if space is None:
                raise StoreError("space", "required", "a new store needs a space name")
            file = os.path.realpath(path)  # where a link to nothing yet gets its store
            made = [Path(f"{file}{end}") for end in ("", ".lock", "-wal", "-shm", ".key", ".clean")]
            made = [p for p in made if not p.exists()]
            store = SQLiteStore(path, create=True, wait=wait)
        try:
            info = store.info()
            if info is None:  # a store created by a process that died before initializing it
                if readonly or space is None:
                    raise StoreError(
                        "path", "not-a-store", f"{path} was never initialized as a store"
                    )
                key = key or (_load_key(kpath) if kpath.exists() else SigningKey.generate())
                new = _new_info(space, registry, key, mode, root, creator)
                _check_key(key, new, path, adopt_key=adopt_key)  # before the store is marked
                store.initialize(new)
                info = store.info()
                assert info is not None
                _bind_key_file(key, kpath, info, create=True)
            else:
                if space is not None and space != info.space:
                    raise StoreError(
                        "space",
                        "same-space",
                        f"{path} holds space {info.space!r}, not {space!r}",
                    )
                if key is None and kpath.exists():
                    try:
                        key = _load_key(kpath)
                    except KeyFileError:
                        if not readonly:
                            raise
                if readonly and key is not None and info.author not in (None, key.author):
                    key = None  # another author's key: reads need none
                if key is not None and not readonly:
                    _check_key(key, info, path, adopt_key=adopt_key)
                    info = store.bind(key.author)
                    _bind_key_file(key, kpath, info, create=False)
            replica = cls(
                store,
                key,
                registry=registry,
                clock=clock,
                path=path,
                load=load,
                readonly=readonly,
                bounds=bounds,
                progress=progress,
            )
            if creator is not None:
                replica.pin_creator(creator)
            if name is not None:
                replica._go_by(name)
            return replica
        except BaseException:
            store.close()
            for p in made:  # a refused create leaves nothing behind
                with contextlib.suppress(OSError):
                    p.unlink()
            raise

    @classmethod
    def memory(
        cls,
        *,
        space: str,
        registry: Registry | None = None,
        key: SigningKey | None = None,
        mode: TrustMode | str = TrustMode.OPEN,
        root: bytes | None = None,
        clock: Callable[[], int] = _wall_ms,
        name: str | None = None,
        creator: bytes | None = None,
        bounds: Bounds | None = None,
    ) -> Replica:
        """A replica in memory: same rules and verification, nothing on disk. ``name``: the
        name its author goes by (`declare_name`); ``creator``: the open space's creator (see
        `open`); ``bounds`` as for `open`."""
        if name is not None:
            check_author_name("name", name)
        key = key or SigningKey.generate()
        store = MemoryStore()
        store.initialize(_new_info(space, registry, key, mode, root, creator))
        replica = cls(store, key, registry=registry, clock=clock, bounds=bounds)
        if name is not None:
            replica.declare_name(name)
        return replica

    @_locked
    def fork(
        self, path: str | os.PathLike[str] | None = None, *, name: str | None = None
    ) -> Replica:
        """A branch: a new author key and a copy of this replica's changes (accepted and
        pending), in a new store at ``path`` (or in memory when ``path`` is None); ``name``
        declares the new author's name (see `declare_name`)."""
        self._check_open()
        info = self.store.info()
        assert info is not None
        # the child takes the space's declaration from the changes it copies (it declares
        # nothing itself) and follows the same creator; it gets the code of the custom
        # normalizers this process has
        if path is None:
            child = Replica.memory(
                space=self.space,
                mode=self.mode,
                root=info.root,
                clock=self._clock,
                creator=self.creator,
            )
        else:
            if Path(path).exists():
                raise StoreError("path", "new", f"{path} already exists; fork into a new path")
            child = Replica.open(
                path,
                create=True,
                space=self.space,
                mode=self.mode,
                root=info.root,
                clock=self._clock,
                creator=self.creator,
            )
        child._custom.update(self._custom)
        child.merge(self)
        if name is not None:
            child.declare_name(name)
        return child

    def _load(self) -> None:
        """(Re)build the log and state from the store. The changes a valid snapshot covers are
        restored from it (see `sync.snapshot`); every other stored change is verified again."""
        collecting = gc.isenabled()
        gc.disable()  # millions of new objects, none of them garbage: no collection passes
        try:
            self._load_all()
        finally:
            if collecting:
                gc.enable()

    def _load_all(self) -> None:
        self.log = ChangeLog(self.space, root=self.root, mode=self.mode, bounds=self.bounds)
        self._unindexed: list[bytes] = []
        self._pending_loaded = True  # nothing to restore until `_restore_pending` says so
        self._reconciler = None
        self.damage = None
        now = self._clock()
        scan = _Scan()
        restored: tuple[Restored, int] | None = None
        self._unused_snapshot: SnapshotWarning | None = None
        #: The position of a stored snapshot this load found unusable (-1: none), which a
        #: close replaces whatever it covers.
        self._snap_unusable = -1
        #: The store's `data_version` when this replica last looked, and the highest store
        #: position it has taken in (`_catch_up` reads what is past it).
        self._version = self.store.data_version()
        self._pos = 0
        try:
            with self.store.read_transaction():
                if self._load_mode is Load.SNAPSHOT and self.key is not None:
                    restored = self._restore()
                upto = 0
                if restored is not None:
                    snap, upto = restored
                    for c in snap.changes:
                        self.log.receive_verified(c, seen_ms=now)
                self._pos = upto
                for pos, data in self.store.accepted(upto):
                    self._pos = pos
                    scan.accepted(pos, data, self.log.receive(data, seen_ms=now))
                for cid, data in self._restore_pending():
                    scan.pending(cid, data, self.log.receive(data, seen_ms=now))
        except StoreError as exc:  # SQLite could not read part of the file
            scan.sqlite.append(exc.message)
        if not self.readonly:  # a writer must not write into a file SQLite finds damaged
            scan.sqlite.extend(self.store.integrity_problems(full=True))
        self.log.take_quarantined()  # damage found on load is reported as damage, not stored
        self.damage = scan.damage(self.log)
        self._index_pending()
        if self._unused_snapshot is not None and self.damage is None:
            warnings.warn(self._unused_snapshot, stacklevel=_caller_level())
        self._scan = scan
        self.restored = self._snap_count = 0 if restored is None else len(restored[0].changes)
        self._by_seq: dict[tuple[bytes, int], bytes] = {}
        for c in self.log.changes():
            self._by_seq.setdefault((c.author, c.seq), c.change_id)
        heads = self.log.heads(self.author)
        self._head: tuple[int, bytes | None] = (
            (heads[0].seq, heads[0].change_id) if heads else (0, None)
        )
        if self._creator_unknown:
            # a store of an earlier release: pinned by that release's rule, over the changes
            # it holds now, once (SEMANTICS §2; recorded by `__init__` when writable)
            self.creator = first_declarer(self.log.declarations())
        self.declaration = self._in_force()
        self.registry = self._registry_of(self.declaration)
        self.writer = Writer(self.author or bytes(32), registry=self.registry, clock=self._clock)
        self.trust_writer = TrustWriter(self.author or bytes(32))
        self._mat = Materializer(registry=self.registry)
        self.__dict__.pop("_residue", None)  # read again from the store
        self._mat.set_residue(self._scrub_residue())
        #: Which op ids the counted redactions order deleted (`sync.redaction`).
        self._redaction: RedactionState = EMPTY_REDACTION
        self._counted: set[bytes] = set()
        #: The counted lamports' clusters (`sync.clock`; None: worked out on first receive).
        self._gaps: LamportGaps | None = None
        if restored is not None:
            self._from_snapshot(restored[0])
        self._recount()  # observes the counted changes the snapshot did not cover
        self._observe_own()
        self._new_jumps.clear()
        if any(isinstance(op, OpsRedacted) for c in self.log.changes() for op in c.ops):
            self._count_redactions()

    def _restore_pending(self) -> list[tuple[bytes, bytes]]:
        """The stored pending rows to verify on open: those stored without an index (by an
        earlier release, or a repair). The others stay out of the load path: `_pending_ready`
        restores them by their index, without verifying them (`sync.pending`), the first time
        the pending area is needed (a receive, `pending`), so a read-only open of a flooded
        store costs what one of an unflooded store does."""
        self._pending_loaded = False
        self.log.restore_pending((), loader=self._pending_bytes)
        check = [(r.change_id, r.data) for r in self.store.pending_unindexed() if r.data]
        self._unindexed = [cid for cid, _ in check]
        return check

    def _pending_ready(self) -> None:
        """Restore the indexed pending rows (once per load, and again after the store changed:
        `_catch_up`). One whose predecessor is accepted already (a store written by a release
        that did not take pending changes in beside the writes of another process) waits in
        ``_due`` for the next receive, which takes it in."""
        if self._pending_loaded:
            return
        self._pending_loaded = True
        parked = [
            Parked(row.change_id, row.author, row.seq, row.prev, row.size, k + 1)
            for k, row in enumerate(self.store.pending_index())
            if row.author is not None and row.seq is not None and row.prev is not None
        ]
        due = self.log.restore_pending(parked, loader=self._pending_bytes)
        self._due = [d for d in map(self._pending_bytes, (p.change_id for p in due)) if d]

    def _pending_read(self) -> None:
        """`_pending_ready` for a read: the due changes are taken in now when this replica may
        write (one transaction of their own), so the read shows them where they belong."""
        self._pending_ready()
        if self._due and self._may_write():
            self._receive([])

    def _pending_bytes(self, change_id: bytes) -> bytes | None:
        return self.store.pending_data(change_id)

    def _index_pending(self) -> None:
        """Store the index of pending rows that had none (verified on this open), so the next
        open does not verify them again. Only a cache: a store that cannot take it is left as
        it is (and verifies them again next time)."""
        if not self._unindexed or self.readonly or self.damage is not None:
            return
        rows = []
        for cid in self._unindexed:
            c = self.log.pending_change(cid)
            if c is not None and c.prev is not None:
                rows.append(PendingRow(c.change_id, c.data, c.author, c.seq, c.prev))
        with contextlib.suppress(StoreError):
            self.store.write(StoreWrite(parked=tuple(rows)))

    # --- other processes of this store ------------------------------------------------------------

    def _catch_up(self) -> None:
        """Take in what another process (or another replica object on the same file) committed
        to this store since this replica last looked: called on every call, and first thing
        inside every write transaction, so each call sees the others' writes and a write signs
        after every change of its own author already stored.

        Cheap when nothing changed (one ``PRAGMA data_version``). The new accepted rows are
        verified again (`ChangeLog.receive_all`), as an open verifies the rows its snapshot
        does not cover: the same checks at the same cost per change, so a row damaged on disk
        since it was written is caught here too (the replica then reloads and reports it as
        `damage`). The pending area is read again from the store when next needed (another
        process may have parked or taken in changes), the quarantine is always read from the
        store, and a creator another process pinned is followed. A damaged or closed replica
        keeps the view it has."""
        if self._closed or self.damage is not None:
            return
        if self._lazy:
            self._catch_up_lazily()
            return
        version = self.store.data_version()
        if version == self._version:
            return
        self._version = version
        now = self._clock()
        with self.store.read_transaction():
            rows = list(self.store.accepted(self._pos))
            info = self.store.info()
        self.log.forget_pending()  # restored again from the store when next needed
        check = self._restore_pending()
        if rows or check:
            receipts = self.log.receive_all([d for _, d in rows], seen_ms=now)
            for _, data in check:
                self.log.receive(data, seen_ms=now)
            self.log.take_quarantined()
            self._pos = rows[-1][0] if rows else self._pos
            if any(
                r.status is Status.QUARANTINED
                or (r.status is Status.PENDING and r.change_id not in self.log)
                for r in receipts
            ):
                self._load()  # a stored change that does not verify: damage, found by a load
                return
            accepted = [c for r in receipts if r.status is Status.ACCEPTED for c in r.admitted]
            # the forks, clock jumps and registry change these reveal were reported to whoever
            # received them: what this process's next report lists is what its own call brings
            forks, jumps = set(self._new_forks), dict(self._new_jumps)
            registry_change = self._registry_change
            new_ops = self._admitted(accepted)
            self._new_forks, self._new_jumps = forks, jumps
            self._registry_change = registry_change
            self._notify(new_ops, Origin.STORE, None if self.path is None else str(self.path))
        if (
            info is not None
            and info.creator is not None
            and self.creator is None
            and self.mode is TrustMode.OPEN
        ):
            self.creator = info.creator
            self._creator_unknown = False
            self._refresh_registry()

    def _may_write(self) -> bool:
        return not self._closed and self.damage is None and self._readonly is None

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """The store's write transaction around a write (joined when one runs already): it
        waits for other processes' writes (up to the store's ``wait``), catches up with them,
        and commits what the block wrote when it ends. Own changes signed inside are taken
        into memory (and shown to observers) only once they are committed; a block that
        raises after writing leaves memory rebuilt from the store. On a replica that may not
        write it only catches up (the write inside raises as it always did)."""
        if self._in_write:
            yield
            return
        if not self._may_write():
            self._catch_up()
            yield
            return
        self._in_write = True
        self._wrote = False
        try:
            with self.store.write_transaction():
                self._catch_up()
                if self._lazy:
                    self._lean_begin()
                self._block, self._block_base = [], self.store.last_position()
                yield
                if self._wrote:
                    self._index_block()
        except BaseException:
            self._signed, self._block = [], []
            if self._wrote:
                self._reload()
            raise
        finally:
            self._in_write = False
        signed, self._signed = self._signed, []
        if signed and self._lazy:  # nothing in memory to take them into: the store has them
            ops = tuple(_state_ops(signed))
            self._notify(ops, Origin.LOCAL)
            if not ops:
                self._wake_followers()
        elif signed:
            self._apply_own(signed)
            self._index_settle()

    def _apply_own(self, changes: list[VerifiedChange]) -> None:
        """Take this replica's own committed changes into the log and state, and tell the
        observers."""
        now = self._clock()
        admitted: list[VerifiedChange] = []
        for c in changes:
            admitted.extend(self.log.receive_verified(c, seen_ms=now).admitted)
        ops = self._admitted(admitted, own=True)
        self._notify(ops, Origin.LOCAL)
        if not ops:
            self._wake_followers()

    def _wake_followers(self) -> None:
        """A change of this replica's own that no observer hears of (only space ops: a
        redaction, a trust op, a name) is published now by its followers too, not at their
        next round: a redaction must travel as fast as a claim."""
        for f in self._followers:
            if f.running:
                f.written()

    def _observe(self, changes: Iterable[VerifiedChange]) -> None:
        """Advance both writers' lamport clocks past every op of ``changes`` and let the writer
        remember the ref retractions among them (for ``reasserts``). SEMANTICS §2: only ops
        that count move a clock, so callers pass counted changes (`_counting`) and this
        replica's own (`_observe_own`); a stranger's op, however high its lamport, moves
        nothing until its author counts."""
        self.writer.observe(op for c in changes for op in c.ops)
        if self.writer.lamport > self.trust_writer._lamport:
            self.trust_writer._lamport = self.writer.lamport

    def _observe_own(self, changes: Iterable[VerifiedChange] | None = None) -> None:
        """Observe this replica's own changes (of ``changes``, default every accepted one) that
        do not count: an author a closed space has not admitted yet still writes after its own
        ops, so they keep their order once it is."""
        source = self.log.changes() if changes is None else changes
        counted = self._counted
        self._observe(c for c in source if c.author == self.author and c.change_id not in counted)

    def _counting(self, changes: Sequence[VerifiedChange], *, observe: bool = True) -> None:
        """``changes`` started to count: the clocks advance past their ops (unless ``observe``
        is False: this replica's writers made them) and their lamports are checked for clock
        jumps (`sync.clock`), noted for the next report."""
        if observe:
            self._observe(changes)
        gaps = self._gaps
        if gaps is None:
            return  # not worked out yet: it will be from every counted change
        jumps = self._new_jumps
        # lowest first, so that a jump's gap is measured from every lower lamport of the batch
        # too, whatever order its changes came in (the sort is stable: ties keep that order)
        stamped = sorted(((op.lamport, c) for c in changes for op in c.ops), key=_first)
        for lamport, c in stamped:
            gap = gaps.add(lamport)
            if gap is not None and observe:
                jumps.setdefault(
                    (lamport, c.change_id), ClockJump(c.author, c.change_id, lamport, gap)
                )

    def _lamport_gaps(self) -> LamportGaps:
        """The counted lamports' clusters, worked out from every counted change on first use
        and kept as changes start to count."""
        gaps = self._gaps
        if gaps is None:
            get = self.log.get
            gaps = self._gaps = LamportGaps(
                op.lamport for c in map(get, self._counted) if c is not None for op in c.ops
            )
        return gaps

    def _take_jumps(self) -> tuple[ClockJump, ...]:
        """The clock jumps noted since the last call, by lamport and change id."""
        jumps, self._new_jumps = self._new_jumps, {}
        return tuple(jumps[k] for k in sorted(jumps))

    def _identity(self) -> Identity:
        return Identity(self.space, self.author, self._info_registry, self.mode.value, self.root)

    def _restore(self) -> tuple[Restored, int] | None:
        """The changes of the store's snapshot and the position it covers, or None (no
        snapshot, or one that does not check out: then `_load_all` warns why, unless the store
        turns out damaged, which says more)."""
        found = self.store.load_snapshot()
        if found is None:
            return None
        upto, blob = found
        self._snap_unusable = upto
        try:
            assert self.key is not None  # snapshots are authenticated with the key
            snap = open_snapshot(blob, key=self.key, identity=self._identity(), upto=upto)
            datas = []
            for pos, data in self.store.accepted():
                if pos > upto:
                    break
                datas.append(data)
            restored = snap.restore(self.space, datas), upto
            self._snap_unusable = -1
            return restored
        except SnapshotError as exc:
            rule, why = exc.rule, exc.message
        except Exception as exc:  # a cache must never stop a store from opening
            rule, why = "snapshot-format", repr(exc)
        self._unused_snapshot = SnapshotWarning(
            rule, f"snapshot ignored, every stored change verified again: {why}"
        )
        return None

    def _from_snapshot(self, snap: Restored) -> None:
        """Set the state and the writers' clocks from restored changes, as observing and
        applying each of their ops would (the ops were checked when the snapshot was written;
        its mac vouches for that)."""
        ignored = self.log.verdicts()
        counted = [
            c for c in snap.changes if c.change_id in self.log and c.change_id not in ignored
        ]
        by_type, others = snap.by_type, snap.others
        if len(counted) != len(snap.changes):  # only counted ops move the clocks (§2)
            by_type, others = {t: [] for t in by_type}, []
            for c in counted:
                for op in c.ops:
                    group = by_type.get(type(op))
                    (group if group is not None else others).append(op)
        op_id = attrgetter("op_id")

        def index(t: type[Any]) -> dict[bytes, Any]:
            ops = by_type[t]
            return dict(zip(map(op_id, ops), ops, strict=True))

        self._mat = Materializer.from_checked(
            index(ClaimAdded),
            index(ClaimRetracted),
            index(EvidenceAdded),
            index(DecisionAdded),
            registry=self.registry,
        )
        self._mat.set_residue(self._scrub_residue())
        self._counted = {c.change_id for c in counted}
        lamport = attrgetter("lamport")
        marks: list[Op] = [max(ops, key=lamport) for ops in by_type.values() if ops]
        marks += [
            r
            for r in by_type[ClaimRetracted]
            if isinstance(r, ClaimRetracted) and r.target_claim_ref is not None
        ]
        marks += others
        self.writer.observe(marks)

    # --- the store's derived state (`statefuse.storage.storeindex`) -------------------------------

    def _store_index(self) -> StoreIndex | None:
        """The store's derived state, when the store keeps one and this replica may write it."""
        if not self._may_write():
            return None
        return self.store.index()

    def _index_current(self, ix: StoreIndex, upto: int) -> bool:
        return ix.upto == upto and ix.registry_fingerprint() == self.registry.fingerprint

    def _index_block(self) -> None:
        """Bring the store's derived state up to the store's last position, inside the write
        transaction that stored the block's changes, so it commits (or rolls back) with them.

        The common case costs what the block brought: its counted ops are applied. A block
        that may change what counts or how it is read (trust ops of the root, a kept author's
        change, a registry declaration, an author name) drops the derived state here, in the
        same transaction, and `_index_settle` rebuilds it once memory has counted the block:
        never stale, at worst absent (a reader then loads the store in full)."""
        block, self._block = self._block, []
        ix = self._store_index()
        if ix is None:
            return
        last = self.store.last_position()
        if self._index_current(ix, last):
            return
        if self._lazy:  # a lean write (`_lean_begin`): own claims, retractions, decisions
            # current when it began (`_catch_up_lazily`), and the write lock held since
            assert self._index_current(ix, self._block_base)
            ix.apply(_state_ops(block), upto=last, registry=self.registry)
            doc = _writer_doc(self.author, self._head, self.writer.lamport, True)
            ix.set_meta(_WRITER_META, doc)
            return
        declares, names = _governs(block)
        if declares or any(
            c.author in self._kept
            or (c.author == self.root and any(isinstance(op, TRUST_OP_TYPES) for op in c.ops))
            for c in block
        ):
            ix.drop()
            self._index_due = True
            return
        counted = [c for c in block if verdict(c, self._trust, self._kept) is None]
        naming = self._named()
        if names:  # the names in force after this block, kept with the derived state
            naming = dict(naming)
            for op in names_among(op for c in counted for op in c.ops):
                name_latest(naming, op)
        if self._index_current(ix, self._block_base):
            ix.apply(_state_ops(counted), upto=last, registry=self.registry)
            if names:
                ix.set_meta(_SPACE_META, _space_meta(self.declaration, naming))
        else:  # never built (a store of an earlier release), or dropped: built now, whole
            ops = itertools.chain(self._mat.ops(), _state_ops(counted))
            self._index_rebuild(ix, ops, upto=last, names=naming)
        self._writer_meta(ix, block)

    def _index_settle(self) -> None:
        """Rebuild the store's derived state when a write dropped it (`_index_block`) or the
        store has none yet, from what memory counts now (one write transaction of its own)."""
        if not self._index_due or self._in_write:
            return
        ix = self._store_index()
        if ix is None or self._index_current(ix, self.store.last_position()):
            self._index_due = False
            return
        with self.store.write_transaction():
            self._catch_up()
            self._index_due = False
            if not self._index_current(ix, self._pos):
                self._index_rebuild(ix, self._mat.ops(), upto=self._pos, names=self._named())

    def _index_rebuild(
        self, ix: StoreIndex, ops: Iterable[Op], *, upto: int, names: dict[bytes, AuthorNamed]
    ) -> None:
        every = list(ops)
        ix.rebuild(
            every,
            upto=upto,
            registry=self.registry,
            progress=self._index_progress,
            total=len(every),
        )
        ix.set_meta(_SPACE_META, _space_meta(self.declaration, names))
        self._writer_meta(ix, ())

    def _writer_meta(self, ix: StoreIndex, block: Sequence[VerifiedChange]) -> None:
        """Keep with the derived state what a lean write needs (`_lean_begin`): the clock (one
        more than every op that counts, and this author's own), the store author's head, and
        whether its next change counts without a recount (admitted, not revoked or cut off).
        Worked out from memory, which holds the whole history here."""
        info = self.store.info()
        author = None if info is None else info.author
        if author is None or author != self.author:
            ix.set_meta(_WRITER_META, b"")  # another author's key: no lean writes
            return
        head = self._head
        for c in block:
            if c.author == author and (c.seq, c.change_id) > (head[0], head[1] or b""):
                head = (c.seq, c.change_id)
        lamport = max(self.writer.lamport, self.trust_writer._lamport)
        for c in block:
            for op in c.ops:
                lamport = max(lamport, op.lamport)
        trust = self._trust
        plain = trust.may_write(author) and author not in trust.cutoffs and author not in self._kept
        ix.set_meta(_WRITER_META, _writer_doc(author, head, lamport, plain))

    def _lean_begin(self) -> None:
        """Inside the write transaction of a replica opened on the derived state: set up the
        writer from what the derived state keeps (`_writer_meta`), or load the history when it
        cannot write lean (another author's key, one whose changes need a recount, a store
        that keeps no writer record)."""
        ix = self.store.index()
        doc = None if ix is None else _from_writer_doc(ix.meta(_WRITER_META), self.author)
        if ix is None or doc is None:
            self._load_history()
            return
        head, lamport = doc
        writer = Writer(self.author, registry=self.registry, clock=self._clock)
        writer.advance(lamport)
        writer._ref_lookup = ix.ref_retractions
        self.writer = writer
        self._head = head

    # --- opening on the derived state alone ------------------------------------------------------

    def _open_lazily(self, load: Load) -> bool:
        """Open on the store's derived state, without loading its history, when it covers
        every stored change: what a read needs is then a few indexed rows (`context`,
        `state_for`, `conflicts`), and opening costs nothing that grows with history. The
        first call that needs the history (a write, `state`, a sync) loads it then."""
        if load is not Load.INDEX or self._creator_unknown or not self.store.clean():
            return False  # written by something else since a commit: loaded and verified
        seen = self._derived_space()
        if seen is None:
            return False
        version, last, declaration, names = seen
        try:
            registry = self._registry_of(declaration)
        except StateFuseError:
            return False  # a normalizer this process lacks: the full load says which
        ix = self.store.index()
        if ix is None or ix.registry_fingerprint() != registry.fingerprint:
            return False
        self.declaration, self.registry = declaration, registry
        self._labels = AuthorNames(names)
        self._version, self._pos = version, last
        self._lazy = True
        return True

    def _derived_space(
        self,
    ) -> tuple[int, int, RegistryDeclared | None, dict[bytes, str]] | None:
        """(data version, last position, declaration, names) as the store's derived state keeps
        them, read together; None when it does not cover every stored change."""
        ix = self.store.index()
        if ix is None:
            return None
        with self.store.read_transaction():
            version = self.store.data_version()
            upto, last = ix.upto, self.store.last_position()
            meta = ix.meta(_SPACE_META)
        taken = None if meta is None or upto != last else _from_space_meta(meta)
        return None if taken is None else (version, last, *taken)

    def _catch_up_lazily(self) -> None:
        """What another process wrote, for a replica opened on the derived state: the names in
        force are read again; a derived state that no longer covers the store (dropped by a
        trust change), another declaration in force or a creator pinned meanwhile mean a full
        load, which follows them as it always did."""
        if self.store.data_version() == self._version:
            return
        seen = self._derived_space()
        info = self.store.info()
        pinned = None if info is None or self.mode is not TrustMode.OPEN else info.creator
        if pinned is not None and self.creator is None:
            self.creator = pinned  # pinned by another process: followed, as a load does
            seen = None  # which declarations count may change: loaded with it
        if seen is None or seen[2] != self.declaration:
            self._load_history()
            return
        self._version, self._pos, _, names = seen
        self._labels = AuthorNames(names)

    def _load_history(self) -> None:
        """Leave the lazy open: load the store's history into memory, as a full open does."""
        with self._lock:
            if self._lazy:
                self._lazy = False
                self._labels = None
                self._load()

    def __getattr__(self, name: str) -> Any:
        # Only reached for an attribute not set: those a full load sets, on a lazy open.
        if name.startswith("__") or not self.__dict__.get("_lazy"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._load_history()
        return getattr(self, name)

    @property
    def loaded(self) -> bool:
        """Whether this replica holds the store's history in memory. False after an open on
        the store's derived state (a store whose derived state covers every stored change,
        opened with the default ``load``), until a call needs the history: `state`, a sync, a
        receive, trust ops, a name or registry declaration. Reads through `context`,
        `state_for`, `conflicts`, `author_names` and writes of claims, retractions and
        decisions do not."""
        return not self._lazy

    @property
    def index(self) -> StoreIndex | None:
        """The store's derived state when it covers every stored change (None: a store in
        memory, a store of an earlier release opened read-only, or one whose derived state is
        being rebuilt). Read it inside ``with replica.lock:`` for answers that agree."""
        ix = self.store.index()
        if ix is None or self._closed:
            return None
        return ix if self._index_current(ix, self.store.last_position()) else None

    # --- counting (which accepted changes the state includes) -----------------------------------

    def _recount(self) -> tuple[Op, ...]:
        """Recompute trust verdicts from the whole log; rebuild the state if a change stopped
        counting, else apply the changes that started to. Returns the ops newly applied."""
        self._trust: TrustState = self.log.trust()
        self._kept = self.log.kept(self._trust)
        # which changes count may have changed, and so whose names count
        self._naming = self._labels = None
        ignored = self.log.verdicts()
        counted = {cid for cid in self.log.change_ids() if cid not in ignored}
        get = self.log.get
        fresh = [c for c in map(get, sorted(counted - self._counted)) if c is not None]
        if self._counted - counted:
            self._counted = counted
            self._bring_back()
            self._mat = Materializer(self._unredacted_ops(), registry=self.registry)
            self._mat.set_residue(self._scrub_residue())
            self._counted = counted
            if self._gaps is not None:  # lamports cannot be taken out: work them out again
                ids = {c.change_id for c in fresh}
                self._gaps = LamportGaps(
                    op.lamport for c in map(get, counted - ids) if c is not None for op in c.ops
                )
            self._counting(fresh)
            return ()
        self._counted = counted
        self._counting(fresh)
        return self._apply(fresh)

    def _apply(self, changes: Iterable[VerifiedChange | None]) -> tuple[Op, ...]:
        # A VerifiedChange's ops hashed to their ids when verified or sealed: no re-hash.
        ops = OpSet.of_sealed(
            op
            for c in changes
            if c is not None
            for op in c.ops
            if not isinstance(op, SPACE_OP_TYPES)
        )
        if self._redaction.redacted and len(ops):  # a format-1 change keeps redacted bodies
            ops = OpSet.of_sealed(op for op in ops if op.op_id not in self._redaction.redacted)
        return tuple(self._mat.apply_all(ops)) if len(ops) else ()

    def _admitted(
        self,
        admitted: Sequence[VerifiedChange],
        *,
        own: bool = False,
        declares: bool | None = None,
        names: bool | None = None,
    ) -> tuple[Op, ...]:
        """Count newly admitted changes; returns the ops the state gained. Follows this
        replica's own head (whatever source the change came from) and notes new forks. ``own``:
        changes this replica just signed, whose ops its writers made (nothing to observe op by
        op: the clocks only need to agree)."""
        recount = False
        if declares is None or names is None:
            declares, names = _governs(admitted)
        head = self._head
        for c in admitted:
            first = self._by_seq.setdefault((c.author, c.seq), c.change_id)
            if first != c.change_id:
                self._new_forks.add((c.author, c.seq))
            if c.author == self.author and (c.seq, c.change_id) > (head[0], head[1] or b""):
                head = (c.seq, c.change_id)
            if c.author == self.root and any(isinstance(op, TRUST_OP_TYPES) for op in c.ops):
                recount = True  # trust changed: earlier changes may stop (or start) counting
            if c.author in self._kept:
                recount = True  # a kept change may arrive after its revocation
        self._head = head
        if own:
            if self.writer.lamport > self.trust_writer._lamport:
                self.trust_writer._lamport = self.writer.lamport
        else:
            self._lamport_gaps()  # so that the changes starting to count are checked for jumps
        if recount:
            new_ops = self._recount()
        else:
            counting = [c for c in admitted if verdict(c, self._trust, self._kept) is None]
            self._counted.update(c.change_id for c in counting)
            self._counting(counting, observe=not own)
            new_ops = self._apply(counting)
            if names:
                self._take_names(counting)
        if not own:
            self._observe_own(admitted)
        if declares or recount:
            self._refresh_registry()
        if own:  # a receive reports what it made count; `clock_jumps` lists every jump
            self._new_jumps.clear()
        return new_ops

    def _take_forks(self) -> tuple[Fork, ...]:
        """The forks that changes admitted since the last call created or widened."""
        found = []
        for author, seq in sorted(self._new_forks):
            fork = self.log.fork_at(author, seq)
            if fork is not None:
                found.append(fork)
        self._new_forks.clear()
        return tuple(found)

    # --- reading ---------------------------------------------------------------------------------

    @property
    def lock(self) -> threading.RLock:
        """The re-entrant lock every call of this replica holds (and a `batch` for its whole
        block). Hold it to make several calls atomic against other threads, e.g. a read and the
        write that depends on it while the replica is served."""
        return self._lock

    @property
    def closed(self) -> bool:
        """True once `close` has run."""
        return self._closed

    @property
    def readonly(self) -> bool:
        """True when writes and receives are refused: opened read-only, without the author key,
        or on a damaged store (`damage`)."""
        return self._readonly is not None or self.damage is not None

    @property
    def key_missing(self) -> bool:
        """True when the store opened read-only because its author key file is missing (the
        way back: restore the file, or `new_author_key`; CLI ``statefuse keys new``)."""
        return self._readonly is not None and self._readonly.rule == "no-key"

    @_locked
    def forks(self) -> list[Fork]:
        """Every fork in the accepted changes: (author, seq) signed twice or more. Both branches
        are kept and count; revoke the author (`revoke`) or re-key it if that was not an
        accident."""
        return self.log.forks()

    @_locked
    def clock_jumps(self) -> list[ClockJump]:
        """Every counted change that moved the lamport clock far past every lower counted op
        (`sync.clock`: more than `LAMPORT_JUMP`). Kept and counted, like a fork's branches;
        revoke the author (`revoke`) if it should not move every writer's clock."""
        return self.log.clock_jumps()

    @_locked
    def state(self, *, at: Version | str | None = None) -> State:
        """The current memory (an immutable snapshot; later writes do not change it), or with
        ``at`` the memory at a version (`version`; a Version or its text): `materialize` of
        the ops of the changes it covers, under the trust and the registry declaration in
        force among them (SEMANTICS §9), the same on every replica that holds those changes.
        ``state(at=self.version())`` equals ``state()``. Raises VersionError for a version
        text that is not one, UnknownVersionError naming the changes this replica lacks."""
        self._check_open()
        if at is None:
            return self._mat.state()
        return self._state_of(self._covered(at))

    @_locked
    def version(self) -> Version:
        """This replica's version: for each author, the heads of its accepted feed (pending
        and quarantined changes are not in it). Loads the history on a lazy open."""
        self._check_open()
        return version_of(self.log.tips())

    @_locked
    def version_received_by(self, when: int | str) -> Version:
        """The version made of the changes this replica had received (accepted) by ``when``
        (ms since the epoch, or an ISO 8601 time with a zone): a local fact, read from the
        receive marks this store keeps (one per write), never shared: another replica
        received the same changes at other times. Changes stored by a release that kept no
        marks count as received at the first mark after them (none yet: not counted). Loads
        the history on a lazy open. Raises VersionError for a time it cannot read."""
        self._check_open()
        ms = parse_time(when, field="at") if isinstance(when, str) else when
        marks_of = getattr(self.store, "received_marks", None)
        marks: list[tuple[int, int]] = marks_of() if marks_of is not None else []
        with self.store.read_transaction():
            ids = received_by(ms, marks, self.store.accepted_ids())
        got = [c for cid in ids if (c := self.log.get(cid)) is not None]
        named = {c.prev for c in got}
        return version_of(c for c in got if c.change_id not in named)

    @_locked
    def diff(self, before: Version | str, after: Version | str | None = None) -> StateDiff:
        """What changed from the memory at ``before`` to the memory at ``after`` (default:
        now): claims added and retracted (and by what), decisions made, conflicts opened and
        closed (`statefuse.reading.statediff`). Sensible for any two versions: going back shows what
        was removed. Raises as `state` does."""
        self._check_open()
        earlier = self._state_of(self._covered(before, "before"))
        later = (
            self._mat.state() if after is None else self._state_of(self._covered(after, "after"))
        )
        return state_diff(earlier, later)

    @_locked
    def covers(self, version: Version | str, other: Version | str) -> bool:
        """Whether ``version`` covers every change ``other`` covers, following the changes'
        ``prev`` links: exact on forked feeds too, where the pure ``other <= version`` reads
        each feed as a line. Raises as `state` does (fields ``version`` and ``other``)."""
        self._check_open()
        return self._covered(other, "other").keys() <= self._covered(version, "version").keys()

    def _covered(self, at: Version | str, field: str = "at") -> dict[bytes, VerifiedChange]:
        if isinstance(at, str):
            at = Version.parse(at, field=field)
        elif not isinstance(at, Version):
            raise VersionError(
                field, "version-type", f"expected a Version, got {type(at).__name__}"
            )
        return covered(at, self.log.get, field=field)

    def _state_of(self, changes: dict[bytes, VerifiedChange]) -> State:
        """`materialize` of the counted ops among ``changes`` (a covered set), under the
        declaration in force among them. Bodies compaction moved are read back from the archive
        (`_whole`): a claim retracted now may have been active at an earlier version."""
        counting = list(counted(self._whole(changes), root=self.root, mode=self.mode))
        declarations: list[RegistryDeclared] = []
        for c in counting:
            declarations.extend(op for op in c.ops if type(op) is RegistryDeclared)  # type: ignore[misc,comparison-overlap]
        declared = declaration_in_force(
            declarations, mode=self.mode, root=self.root, creator=self.creator
        )
        return materialize(_state_ops(counting), registry=self._registry_of(declared))

    @_locked
    def state_for(self, prefix: str | Sequence[str] = (), *, scope: str | None = None) -> State:
        """The memory at the keys under ``prefix`` (a key text ``ns/subject/predicate`` or a
        prefix of its parts) and in ``scope``: a State that agrees with `state` on those keys
        (their claims, retractions, conflicts, decisions and stale marks; it may hold more,
        such as what their ``depends_on`` reaches).

        On a store whose derived state is current this reads only those keys' rows, however
        large the memory (`statefuse.storage.storeindex`); otherwise, and for the whole memory (no
        prefix, no scope), it is `state`."""
        self._check_open()
        parts = _prefix_parts(prefix)
        ix = self.index if self._lazy else None
        if ix is None or (not parts and scope is None):
            return self.state()
        with self.store.read_transaction():
            loci = ix.loci(prefix=parts, scope=scope, active=False)
            return ix.state_of(loci, registry=self.registry)

    @_locked
    def get(
        self, key: str | Sequence[str], *, scope: str = "global"
    ) -> KeyValue | KeyConflict | None:
        """The current value of one key (``"namespace/subject/predicate"`` or its three
        parts) in ``scope``: a `KeyValue` (the claims agree, a decision chose, or a set-valued
        predicate's values), a `KeyConflict` (they disagree, undecided: the candidates), or
        None (no active claim). On a store opened on its derived state this reads that key's
        rows alone (`state_for`). Raises KeyTextError (field ``key``) for a bad key."""
        parts = key_of(key)
        return current_of(self.state_for(parts, scope=scope), parts, scope)

    @_locked
    def key_names(self, prefix: str | Sequence[str] = (), *, limit: int = 1000) -> list[str]:
        """The distinct next parts of the keys with an active claim under ``prefix`` (the
        namespaces for no prefix, a namespace's subjects, a subject's predicates), in code
        point order, at most ``limit``. On a store opened on its derived state this reads
        only the key index, not the history."""
        self._check_open()
        parts = _prefix_parts(prefix)
        if len(parts) > 2:
            return []
        ix = self.index if self._lazy else None
        if ix is not None:
            with self.store.read_transaction():
                return ix.key_names(parts, limit=limit)
        n = len(parts)
        names = {
            key[n]
            for c in self.state().active_claims()
            if (key := (c.namespace, c.subject, c.predicate))[:n] == parts
        }
        return sorted(names)[:limit]

    def nearest_prefix(self, prefix: str | Sequence[str]) -> tuple[str, ...] | None:
        """For a key prefix with no active claim under it, the nearest one that has some: the
        first part that names nothing replaced by the existing name nearest to it (at most
        `statefuse.core.typo.SUGGEST_DISTANCE` edits away), the parts after it kept. None when
        ``prefix`` has claims or nothing is near. What "did you mean" shows for a typo."""
        parts = _prefix_parts(prefix)
        for i, part in enumerate(parts):
            names = self.key_names(parts[:i])
            if part in names:
                continue
            best = nearest(part, names)
            return None if best is None else (*parts[:i], best, *parts[i + 1 :])
        return None

    def near_key(self, key: str | Sequence[str]) -> tuple[str, ...] | None:
        """When writing ``key`` would create a new namespace next to an existing one a single
        edit away or spelling the same text in another Unicode form (or such a new subject
        next to one in the same namespace), that existing prefix; else None. What a write
        warns about once (a typo makes a new key rather than an error)."""
        parts = _prefix_parts(key)
        for i, part in enumerate(parts[:2]):
            names = self.key_names(parts[:i])
            if part in names:
                continue
            # keys are not Unicode-normalized: "café" as one code point and as "e" plus a
            # combining accent are two keys, so the same text in another form is pointed out
            same = unicodedata.normalize("NFC", part)
            best = next((n for n in names if unicodedata.normalize("NFC", n) == same), None)
            best = best or typo_of(part, names)
            return None if best is None else (*parts[:i], best)
        return None

    @_locked
    def claim_state(self, text: str) -> State:
        """A State that agrees with `state` on the keys of the claims whose id in hex starts
        with ``text`` (what the command line and the MCP tools accept for a claim), so that
        ``claim_state(text).claim(text)`` finds the claim, or says that none or several have
        it, reading only those keys on a store opened on its derived state."""
        self._check_open()
        ix = self.index if self._lazy else None
        if ix is None:
            return self.state()
        with self.store.read_transaction():
            return ix.state_of(ix.claim_loci(text), registry=self.registry)

    @_locked
    def conflicts(
        self, *, limit: int | None = None, at: Version | str | None = None
    ) -> ConflictPage:
        """The memory's conflicts in order of key and scope, the first ``limit`` of them (None:
        all), with a State to read their candidates and decisions from, and how many there are
        in all. On a store whose derived state is current this reads only the conflicts shown.
        ``at``: the conflicts of the memory at that version (`state`; reads the whole history).
        Raises ReplicaError (field ``limit``) for a limit that is not a positive int."""
        self._check_open()
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ReplicaError("limit", "positive", f"limit is a positive int, not {limit!r}")
        ix = self.index if self._lazy and at is None else None
        if ix is None:
            state = self.state(at=at)
            every = sorted(state.conflicts, key=_conflict_order)
            shown = every if limit is None else every[:limit]
            return ConflictPage(state, tuple(shown), len(every))
        registry = self.registry
        with self.store.read_transaction():
            loci = ix.conflict_loci(limit=limit)
            total = ix.conflict_count()
            if not registry.detectors:
                state = ix.state_of(loci, registry=registry)
                shown = sorted(state.conflicts, key=_conflict_order)
                return ConflictPage(state, tuple(shown), total)
            # findings: the slice holds what the declared detectors read (`state_of`)
            state = ix.state_of([*loci, *ix.detector_loci(registry)], registry=registry)
        listed = set(loci)
        every = [c for c in state.conflicts if c.finding or c.locus in listed]
        every.sort(key=_conflict_order)
        findings = len(state.findings)
        return ConflictPage(state, tuple(every[:limit] if limit else every), total + findings)

    @_locked
    def quarantine(self) -> list[QuarantineRecord]:
        """Every refused copy this replica has seen, durable, with its reason."""
        self._check_open()
        return self.store.quarantine()

    @_locked
    def pending_count(self) -> int:
        """How many changes wait for a predecessor (verifies none of them)."""
        self._pending_read()
        return self.log.pending_count()

    @_locked
    def pending(self) -> list[VerifiedChange]:
        """Changes parked until their predecessor arrives."""
        self._pending_read()
        return self.log.pending()

    @_locked
    def verdicts(self) -> dict[bytes, Ignored]:
        """Accepted changes that do not count, and why (unknown author, revoked)."""
        return self.log.verdicts()

    @_locked
    def trust(self) -> TrustState:
        return self._trust

    @_locked
    def change_ids(self) -> list[bytes]:
        """Sorted ids of accepted changes (what reconciliation compares)."""
        return self.log.change_ids()

    @_locked
    def reconciler(self) -> Reconciler:
        """A new `Reconciler` over the accepted change ids (what sync compares with a peer).

        The sorted ids and their fingerprints are built once and shared by every reconciler
        handed out until a change is accepted (the set only grows, so its size names it); then
        only the new ids are added to them (`Reconciler.with_ids`). A replica polled by peers,
        or polling them, pays for the whole set once."""
        self._check_open()
        count = len(self.log)
        cached = self._reconciler
        if cached is None:
            cached = self._reconciler = (count, Reconciler(self.log.change_ids()))
        elif cached[0] != count:
            added = self.log.accepted_since(cached[0])
            cached = self._reconciler = (count, cached[1].with_ids(added))
        return cached[1].fresh()

    @_locked
    def change_bytes(self, ids: Iterable[bytes]) -> list[bytes]:
        """Wire bytes of the accepted changes named (unknown ids are skipped)."""
        out = []
        withheld = self._withheld()
        for cid in ids:
            c = self.log.get(cid)
            if c is not None and cid not in withheld:
                data = self._served(c)
                if data is not None:
                    out.append(data)
        return out

    @_locked
    def all_change_bytes(self) -> list[bytes]:
        """Every accepted and pending change, predecessors first (what a copy needs)."""
        accepted = sorted(self.log.changes(), key=lambda c: (c.author, c.seq, c.change_id))
        withheld = self._withheld()
        served = (self._served(c) for c in accepted if c.change_id not in withheld)
        return [d for d in served if d is not None] + [d for _, d in self._pending_served()]

    def _pending_served(self) -> list[tuple[bytes, bytes]]:
        """The parked changes as a peer may have them (change id, bytes): without redacted
        bodies (a format-1 one holding such a body is not served)."""
        out = []
        redacted = self._redaction.redacted
        for c in self.pending():
            hit = frozenset(i for i in c.op_ids if i in redacted) if redacted else frozenset()
            if not hit or not any(op.op_id in hit for op in c.ops):
                out.append((c.change_id, c.data))
            elif c.version == CHANGE_FORMAT_VERSION:
                out.append((c.change_id, without_bodies(c, hit)))
        return out

    # --- compaction (SEMANTICS §10) ---------------------------------------------------------------

    def _served(self, c: VerifiedChange) -> bytes | None:
        """What a peer is given of ``c``: the change as held, or, for a change whose bodies
        compaction moved, the whole change from the archive (redacted bodies cut out), or
        nothing when the archive is missing (said once, as a warning): never a change that
        lacks a body for any reason but a redaction."""
        if len(c.op_ids) == len(c.ops):
            return c.data
        redacted = self._redaction.redacted
        if all(i in redacted for i in c.missing):
            return c.data
        whole = self._archived().get(c.change_id)
        if whole is None:
            return None
        if redacted:
            full = verify_change(UnverifiedChange(whole), space=self.space)
            hit = frozenset(i for i in full.op_ids if i in redacted)
            if hit:
                return without_bodies(full, hit)
        return whole

    def _whole(self, changes: dict[bytes, VerifiedChange]) -> dict[bytes, VerifiedChange]:
        """``changes`` with the bodies compaction moved read back from the archive (redacted
        bodies stay cut). A change the archive cannot give stays as held; the missing archive
        is said once (`_archived`)."""
        redacted = self._redaction.redacted
        out = changes
        for cid, c in changes.items():
            if len(c.op_ids) == len(c.ops) or all(i in redacted for i in c.missing):
                continue
            data = self._served(c)
            if data is None or data == c.data:
                continue
            if out is changes:
                out = dict(changes)
            out[cid] = verify_change(UnverifiedChange(data), space=self.space)
        return out

    def _bring_back(self) -> None:
        """After changes stopped counting (a revocation), a claim compaction moved may show
        again: its retraction no longer counts, or what no longer counts was all that made
        it unreadable. Such bodies come back from the archive into the log and the store (the
        residue of a claim that comes back goes), so no View loses a claim to compaction."""
        moved = self._moved()
        if not moved:
            return
        changes = {cid: c for cid in self.log.change_ids() if (c := self.log.get(cid)) is not None}
        back = moved - compactable(self._state_of(changes))
        if not back:
            return
        whole = self._whole(
            {cid: c for cid, c in changes.items() if not back.isdisjoint(c.missing)}
        )
        returned = [c for cid, c in whole.items() if c is not changes[cid]]
        self.log.restore(returned)
        residue = self._scrub_residue()
        if not residue.keys().isdisjoint(back):
            residue = residue.without(back)
            self.__dict__["_residue"] = residue
        if self._may_write() and not self._lazy:
            with self.store.write_transaction():
                self.store.write(
                    StoreWrite(rewritten=tuple((c.change_id, c.data) for c in returned))
                )
                self._store_residue(residue)
                ix = self.store.index()
                if ix is not None:
                    ix.drop()
                self._index_due = True

    def _moved(self) -> frozenset[bytes]:
        """The op ids whose bodies compaction moved to the archive (missing, not redacted)."""
        if not self._archived():
            return frozenset()
        redacted = self._redaction.redacted
        return frozenset(
            i
            for c in self.log.changes()
            if len(c.op_ids) != len(c.ops)
            for i in c.missing
            if i not in redacted
        )

    def _archived(self) -> dict[bytes, bytes]:
        """The archive of this compacted store (change id -> whole change; {} if none), read
        once; a missing or unreadable one is said once, as an `ArchiveWarning`."""
        cached = self.__dict__.get("_archive_changes")
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        note = getattr(self.store, "note", None)
        path = note(ARCHIVE_NOTE) if note is not None else None
        out: dict[bytes, bytes] = {}
        if path is not None:
            try:
                out = read_archive(os.fsdecode(path), space=self.space)
            except (StateFuseError, OSError) as exc:
                warnings.warn(
                    ArchiveWarning(
                        f"this store was compacted into {os.fsdecode(path)}, which cannot be"
                        f" read ({exc}): the changes whose bodies moved there are not served"
                        " until it is back"
                    ),
                    stacklevel=_caller_level(),
                )
        self.__dict__["_archive_changes"] = out
        return out

    def _scrub_residue(self) -> Residues:
        """What the scrub keeps of the retracted claims whose bodies moved to the archive
        (`statefuse.core.residue`), read from the store once (without loading the history).

        A compacted store without one (compacted by an earlier release, which moved only
        values the scrub never looks for) gets it built from its archive once, and kept when
        this replica may write; with the archive missing it is built when the archive is back
        (nothing the scrub looks for moved without a residue, so no scrub is lost)."""
        held = self.__dict__.get("_residue")
        if held is not None:
            return held  # type: ignore[no-any-return]
        note = getattr(self.store, "note", None)
        data = note(RESIDUE_NOTE) if note is not None else None
        out: Residues | None = None
        if data is not None:
            try:
                out = Residues.stored(data)
            except ResidueFormatError as exc:
                warnings.warn(
                    ArchiveWarning(f"the scrub residue cannot be read ({exc}): made again"),
                    stacklevel=_caller_level(),
                )
        if out is None:
            out = NO_RESIDUES
            path = note(ARCHIVE_NOTE) if note is not None else None
            if path is not None:
                made = self._residue_from_archive(os.fsdecode(path))
                if made is not None:
                    out = made
                    self._residue_unsaved = True  # kept by the open (`__init__`)
        self.__dict__["_residue"] = out
        return out

    def _residue_from_archive(self, path: str) -> Residues | None:
        """The residue of every claim the archive holds whole whose body this store lacks
        (None: the archive cannot be read now)."""
        try:
            archived = read_archive(path, space=self.space)
        except (StateFuseError, OSError):
            return None
        out = []
        log = self.__dict__.get("log")
        for cid, data in archived.items():
            held = log.get(cid) if log is not None else None
            if held is not None and not held.missing:
                continue
            lacks = None if held is None else frozenset(held.missing)
            c = verify_change(UnverifiedChange(data), space=self.space)
            for op in c.ops:
                if lacks is not None and op.op_id not in lacks:
                    continue
                if isinstance(op, ClaimAdded) and (r := residue_of(op)) is not None:
                    out.append(r)
        return Residues(out)

    def _moved_claims(self) -> list[ClaimAdded]:
        """The claims whose bodies compaction moved to the archive (not redacted): a
        redaction chooses among them too, so a retracted secret can still be redacted after
        its body moved (and is then cut out of the archive)."""
        archived = self._archived()
        if not archived:
            return []
        held = self._mat.state().claims
        redacted = self._redaction.redacted
        out: list[ClaimAdded] = []
        for data in archived.values():
            c = verify_change(UnverifiedChange(data), space=self.space)
            out.extend(
                op
                for op in c.ops
                if isinstance(op, ClaimAdded) and op.op_id not in held and op.op_id not in redacted
            )
        return out

    def _store_residue(self, residue: Residues) -> None:
        """Keep ``residue`` with the store (inside the caller's write transaction)."""
        note = getattr(self.store, "set_note", None)
        if note is not None:
            note(RESIDUE_NOTE, encode_residue(residue))

    @_locked
    def compact(self, *, archive: str | os.PathLike[str]) -> Compaction:
        """Move the bodies no projection can show any more (`sync.archive.compactable`:
        evidence nothing cites, retracted claims nothing reads) out of the store into the
        archive file ``archive`` (a bundle of the whole changes, merged with what it holds
        already), and shrink the store file. Every View, for every lens, is the same before
        and after; ids and signatures stay; a peer asking for such a change is served the
        whole change from the archive. Nothing is deleted: the archive is written (and
        synced) before the store lets go of a body.

        Raises ReadOnlyError on a replica that may not write or has no key."""
        self._check_writable()
        if self._lazy:
            self._load_history()
        if self.key is None:
            raise ReadOnlyError("key", "no-key", "an archive is signed: compact needs the key")
        path = Path(archive)
        state = self._mat.state()
        ids = compactable(state)
        holders = [
            c
            for c in self.log.changes()
            if c.version == CHANGE_FORMAT_VERSION and not ids.isdisjoint(c.op_ids)
        ]
        holders = [c for c in holders if any(op.op_id in ids for op in c.ops)]
        size = getattr(self.store, "path", None)
        before = _file_size(size)
        if not holders:
            return Compaction(0, 0, 0, path, before, before)
        kept = dict(self._archived())
        if path.exists() and not kept:
            kept = read_archive(path, space=self.space)
        for c in holders:
            kept.setdefault(c.change_id, c.data)
        moved = sum(len(op.encode()) for c in holders for op in c.ops if op.op_id in ids)
        n_ops = sum(1 for c in holders for op in c.ops if op.op_id in ids)
        # what the scrub reads of the retracted claims that move (`statefuse.core.residue`)
        left = [
            r
            for cid in sorted(ids)
            if (claim := state.claims.get(cid)) is not None and (r := residue_of(claim)) is not None
        ]
        residue = self._scrub_residue().with_(left) if left else self._scrub_residue()
        write_archive(path, self.key, self.space, kept, creator=self.creator)
        self.__dict__["_archive_changes"] = kept
        with self.store.write_transaction():
            lost = self.log.strip(ids, among=[c.change_id for c in holders])
            self.store.write(StoreWrite(rewritten=tuple((c.change_id, c.data) for c in lost)))
            self._store_residue(residue)
            note = getattr(self.store, "set_note", None)
            if note is not None:
                note(ARCHIVE_NOTE, os.fsencode(path.resolve()))
            ix = self.store.index()
            if ix is not None:
                ix.drop()
            self._index_due = True
        self.__dict__["_residue"] = residue
        self._mat = Materializer(self._unredacted_ops(), registry=self.registry)
        self._mat.set_residue(residue)
        self._index_settle()
        vacuum = getattr(self.store, "vacuum", None)
        if vacuum is not None:
            vacuum()
        return Compaction(n_ops, len(holders), moved, path, before, _file_size(size))

    # --- redaction (SEMANTICS §10) ----------------------------------------------------------------

    def _withheld(self) -> frozenset[bytes]:
        """Format-1 changes carrying a redacted body: never served (their signature covers the
        body, so it cannot be cut out)."""
        if not self._redaction.redacted:
            return frozenset()
        return self.log.withheld(self._redaction.ids)

    def _unredacted_ops(self) -> OpSet:
        """The memory ops that count, without any redacted op (`ChangeLog.ops` minus the
        bodies a format-1 change could not lose)."""
        ops = self.log.ops()
        if not self._redaction.redacted:
            return ops
        return OpSet.of_sealed(op for op in ops if op.op_id not in self._redaction.redacted)

    def _count_redactions(self) -> bool:
        """Work out which redactions count now; when the redacted set changed, cut the bodies
        out of the log and rebuild the state without them. Returns the changes that lost a
        body (for the store)."""
        state = self.log.redactions(creator=self.creator)
        before = self._redaction.ids
        self._redaction = state
        self._placing = self._placed_before_cut(state.ids - before)
        self._lost = self.log.strip(state.ids)
        if state.ids == before and not self._lost:
            return False
        residue = self._scrub_residue()
        if not residue.keys().isdisjoint(state.ids):  # a residue is a fingerprint: cut too
            self.__dict__["_residue"] = residue.without(state.ids)
            self._residue_cut = True
        self._mat = Materializer(self._unredacted_ops(), registry=self.registry)
        self._mat.set_residue(self._scrub_residue())
        return True

    def _enforce_redactions(self) -> None:
        """Count the redactions the log holds and make them true in the store: the changes
        that carry a redacted body are rewritten without it (freed space overwritten), the
        snapshot is dropped, the derived state rebuilt without the redacted ops, and the
        write-ahead log checkpointed and truncated, so the bytes are in no file of the store."""
        if not self._count_redactions():
            return
        lost = self._lost
        if self._may_write() and not self._lazy:
            with self.store.write_transaction():
                self._keep_placed(self._placing)
                self.store.write(StoreWrite(rewritten=tuple((c.change_id, c.data) for c in lost)))
                if self.__dict__.pop("_residue_cut", False):
                    self._store_residue(self._scrub_residue())
                ix = self.store.index()
                if ix is not None:
                    ix.drop()
                self._index_due = True
            self._index_settle()
            self._redact_archive()
            scrub = getattr(self.store, "scrub_free_space", None)
            if scrub is not None:
                scrub()

    def _redact_archive(self) -> None:
        """Cut the redacted bodies out of this store's archive too (rewritten in place)."""
        archived = self._archived()
        if not archived or self.key is None:
            return
        fixed = without_redacted(archived, self._redaction.ids, space=self.space)
        if fixed == archived:
            return
        note = getattr(self.store, "note", None)
        path = note(ARCHIVE_NOTE) if note is not None else None
        if path is not None:
            write_archive(os.fsdecode(path), self.key, self.space, fixed, creator=self.creator)
        self.__dict__["_archive_changes"] = fixed

    def _placed_before_cut(self, ids: frozenset[bytes]) -> list[RedactedClaim]:
        """The audit records of the claims among ``ids`` whose bodies this replica holds (in
        its store, or moved to its archive by compaction): where each was (digests of key and
        locus, never the value) and the redaction that counts for it, read before the bodies
        are cut."""
        if not ids:
            return []
        out: list[RedactedClaim] = []
        archived: dict[bytes, bytes] | None = None
        for c in self.log.changes():
            if ids.isdisjoint(c.op_ids):
                continue
            ops = c.ops
            if not ids.isdisjoint(c.missing):  # compaction moved the body: the archive has it
                archived = self._archived() if archived is None else archived
                whole = archived.get(c.change_id)
                if whole is not None:
                    ops = verify_change(UnverifiedChange(whole), space=self.space).ops
            for op in ops:
                if op.op_id in ids and isinstance(op, ClaimAdded):
                    key = (op.namespace, op.subject, op.predicate)
                    locus = locus_of(*key, op.scope)
                    r = self._redaction.redacted[op.op_id]
                    placed = Placed.of(op.op_id, c.author, op.lamport, key, locus)
                    out.append(
                        RedactedClaim(
                            r.op_id, r.by, r.lamport, r.wall_ms, r.reason, r.redaction, placed
                        )
                    )
        return out

    def _keep_placed(self, records: list[RedactedClaim]) -> None:
        """Add ``records`` to the store's audit records (in the transaction that cuts the
        bodies: a record is kept exactly when its body is cut)."""
        note = getattr(self.store, "note", None)
        if not records or note is None:
            return
        held = decode_held(note(REDACTED_NOTE))
        held.update((r.op_id, r) for r in records)
        self.store.set_note(REDACTED_NOTE, encode_held(held.values()))  # type: ignore[attr-defined]

    @_locked
    def redacted_claims(self, *, held: bool = False) -> list[RedactedClaim]:
        """Every redacted op id with the redaction that counts for it (by whom, when, why) and,
        where this replica held the body before it cut it, where the claim was (digests of its
        key and locus: `statefuse.core.redactedclaim`); never what it said. Ordered by the
        redaction's lamport, then the redacted id. ``held``: only those this replica held,
        as recorded when it cut them (what `history` and `conflict_history` place), read from
        the store's records alone: a lazily opened store stays lazy."""
        note = getattr(self.store, "note", None)
        records = decode_held(note(REDACTED_NOTE) if note is not None else None)
        if held:
            out = list(records.values())
        else:
            out = [
                RedactedClaim(
                    r.op_id,
                    r.by,
                    r.lamport,
                    r.wall_ms,
                    r.reason,
                    r.redaction,
                    records[r.op_id].placed if r.op_id in records else None,
                )
                for r in self.redactions().redacted.values()
            ]
        return sorted(out, key=lambda r: (r.lamport, r.redaction, r.op_id))

    @_locked
    def redactions(self) -> RedactionState:
        """Which op ids are redacted here (by whom, when, why: never what), and which
        redactions were refused, with the reason (`sync.redaction`)."""
        if self._lazy:
            self._load_history()
        return self._redaction

    @_locked
    def redact(
        self,
        *,
        reason: str,
        claim: bytes | str | Iterable[bytes | str] | None = None,
        key: str | None = None,
        value: Value | _Unset = _UNSET,
        author: bytes | str | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> Redaction:
        """Order every replica to delete the bodies of chosen claims (SEMANTICS §10).

        Choose by ``claim`` (one claim id or several, bytes or hex), by ``key``
        (``"namespace/subject/predicate"``; with ``value``, only the claims holding that
        value), or by ``author`` (bytes or hex) with an optional writer-clock range
        ``since`` <= ``wall_ms`` < ``until`` (milliseconds since the epoch); given together,
        the choices intersect. ``reason`` is required and kept with the audit trail: never
        put the secret in it.

        Raises ReplicaError (rule ``nothing-to-redact``) when nothing matches, and (rule
        ``not-authorized``) when this replica's author may not redact a chosen claim: in a
        closed space only the root or an author granted ``redactor``; in an open space only
        the claim's author or the space's creator. Nothing is written then.
        """
        self._check_open()
        if self._lazy:
            self._load_history()
        if not isinstance(reason, str) or not reason.strip():
            raise ReplicaError("reason", "non-empty", "a redaction says why: give a reason")
        chosen = self._redaction_targets(claim, key, value, author, since, until)
        if not chosen:
            raise ReplicaError("claim", "nothing-to-redact", "no claim matches: nothing redacted")
        trust = self.log.trust()
        anyone = may_redact_any(self.author, trust=trust, creator=self.creator)
        if not anyone:
            foreign = [op for op in chosen if op.author != self.author]
            if trust.mode is TrustMode.CLOSED or foreign:
                who = (
                    f"the root or an author granted {REDACTOR_ROLE!r}"
                    if trust.mode is TrustMode.CLOSED
                    else "the claim's author or the space's creator"
                )
                raise ReplicaError(
                    "author",
                    "not-authorized",
                    f"only {who} may redact here; {self.author_label(self.author)} may not",
                )
        ids = sorted({op.op_id for op in chosen} - self._redaction.ids)
        written: list[OpsRedacted] = []
        if ids:
            self._write_redactions(ids, reason, written)
        self._enforce_redactions()
        return Redaction(
            claims=tuple(sorted(op.op_id for op in chosen)),
            ops=tuple(written),
            already=len(chosen) - len(ids),
        )

    @_writes
    def _write_redactions(self, ids: list[bytes], reason: str, out: list[OpsRedacted]) -> None:
        for start in range(0, len(ids), MAX_REDACTED_PER_OP):
            part = ids[start : start + MAX_REDACTED_PER_OP]
            lamport = max(self.writer.lamport, self.trust_writer._lamport) + 1
            op = OpsRedacted(
                author=self.author,
                lamport=min(lamport, MAX_LAMPORT),
                wall_ms=self._clock(),
                ops=tuple(part),
                reason=reason,
            )
            self._emit(op)
            self.writer.advance(op.lamport)
            if op.lamport > self.trust_writer._lamport:
                self.trust_writer._lamport = op.lamport
            out.append(op)

    def _redaction_targets(
        self,
        claim: bytes | str | Iterable[bytes | str] | None,
        key: str | None,
        value: Value | _Unset,
        author: bytes | str | None,
        since: int | None,
        until: int | None,
    ) -> list[ClaimAdded]:
        if key is None and not isinstance(value, _Unset):
            raise ReplicaError("value", "with-key", "value= chooses among the claims of a key=")
        if claim is None and key is None and author is None:
            raise ReplicaError(
                "claim", "choose", "choose what to redact: claim=, key= (value=) or author="
            )
        if author is None and (since is not None or until is not None):
            raise ReplicaError("since", "with-author", "since= / until= go with author=")
        for name, t in (("since", since), ("until", until)):
            if t is not None and (type(t) is not int or t < 0):
                raise ReplicaError(name, "wall-ms", f"{name} is milliseconds since the epoch")
        claims: list[ClaimAdded] = list(self._mat.state().claims.values())
        claims += self._moved_claims()
        if claim is not None:
            items = [claim] if isinstance(claim, (bytes, str)) else list(claim)
            wanted = {_claim_id_arg(c) for c in items}
            unknown = wanted - {c.op_id for c in claims}
            if unknown:
                raise UnknownClaimError(
                    "claim", "known-claim", f"no claim {sorted(unknown)[0].hex()[:16]}… here"
                )
            claims = [c for c in claims if c.op_id in wanted]
        if key is not None:
            namespace, subject, predicate, _ = _key_and_value((key, None), {})
            claims = [
                c
                for c in claims
                if (c.namespace, c.subject, c.predicate) == (namespace, subject, predicate)
                and (isinstance(value, _Unset) or _same_value(c.value, value))
            ]
        if author is not None:
            who = _claim_id_arg(author)
            claims = [
                c
                for c in claims
                if c.author == who
                and (since is None or c.wall_ms >= since)
                and (until is None or c.wall_ms < until)
            ]
        return claims

    @_locked
    def __len__(self) -> int:
        return len(self.log)

    # --- writing ---------------------------------------------------------------------------------

    def _emit(self, op: Any) -> Any:
        self._check_writable()
        pair = (op, sealed_encoding(op))
        if self._batch is not None:
            self._batch.append(pair)
        else:
            self._commit([pair])
        return op

    @_writes
    def add_evidence(self, source: str, content: Value = None) -> EvidenceAdded:
        """Record evidence; cite it from claims by its ``evidence_id``."""
        self._check_open()
        op: EvidenceAdded = self._emit(self.writer.evidence(source, content))
        return op

    @overload
    def add_claim(self, key: str, value: Value, /, **meta: Any) -> ClaimAdded: ...
    @overload
    def add_claim(
        self, namespace: str, subject: str, predicate: str, value: Value, /, **meta: Any
    ) -> ClaimAdded: ...
    @_writes
    def add_claim(self, /, *key_and_value: Any, **meta: Any) -> ClaimAdded:
        """Assert a value at a key given as three parts (``namespace, subject, predicate,
        value``) or as one ``"namespace/subject/predicate"`` string (``key, value``; parts
        holding ``/`` or ``%`` written ``%2F`` / ``%25``, as on the command line). ``meta``
        takes the claim metadata `Writer.claim` takes (scope, confidence, evidence,
        provenance, authority, layer, visibility, constraint, depends_on, expires, kind).
        Raises ReplicaError / KeyTextError for a key it cannot read."""
        self._check_open()
        namespace, subject, predicate, value = _key_and_value(key_and_value, meta)
        op: ClaimAdded = self._emit(self.writer.claim(namespace, subject, predicate, value, **meta))
        return op

    @_writes
    def add_identity(
        self, /, subject: str, predicate: str, value: Value, **meta: Any
    ) -> ClaimAdded:
        """A claim in the identity layer (who is asking, role, authority): `Writer.identity`."""
        return self._layered(self.writer.identity(subject, predicate, value, **meta))

    @overload
    def add_constraint(self, key: str, value: Value, /, **meta: Any) -> ClaimAdded: ...
    @overload
    def add_constraint(
        self, namespace: str, subject: str, predicate: str, value: Value, /, **meta: Any
    ) -> ClaimAdded: ...
    @_writes
    def add_constraint(self, /, *key_and_value: Any, **meta: Any) -> ClaimAdded:
        """A constraint (budget, deadline, policy, capacity…): `Writer.constraint`. The key is
        three parts or one ``"namespace/subject/predicate"`` string, as `add_claim` takes it."""
        namespace, subject, predicate, value = _key_and_value(key_and_value, meta)
        return self._layered(self.writer.constraint(namespace, subject, predicate, value, **meta))

    @_writes
    def add_turn(
        self,
        /,
        speaker: str,
        text: str,
        *,
        session: str,
        interpret: TurnInterpreter | None = None,
        **meta: Any,
    ) -> ClaimAdded:
        """A conversation turn in the working set of ``session``: `Writer.add_turn`.

        ``interpret``: a `TurnInterpreter` called with the turn and the current state; the
        claims, retractions and questions it returns are written with the turn, in one change
        signed by this replica's key (so attributed to this replica's author, who ran the
        interpreter), each citing the turn: claims by provenance ``turn <turn id in hex>``
        unless the request names one, retractions by their reason. Written in the order
        turn, claims, questions, retractions. A retraction's
        ``superseded_by`` may name a claim of the same answer by index. Raises
        InterpretationError naming the field of a malformed answer, and the writer's errors
        for a value it refuses; then nothing is written, not even the turn."""
        self._check_open()
        turn = self.writer.add_turn(speaker, text, session=session, **meta)
        if interpret is None:
            return self._layered(turn)
        if not callable(interpret):
            raise ReplicaError("interpret", "callable", "interpret must be a TurnInterpreter")
        answer = check_interpretation(interpret(turn, self.state()))
        cite = f"turn {turn.claim_id.hex()}"
        with self.batch():
            self._emit(turn)
            made: list[ClaimAdded] = []
            for c in answer.claims:
                made.append(
                    self._emit(
                        self.writer.claim(
                            c.namespace,
                            c.subject,
                            c.predicate,
                            c.value,
                            scope=c.scope,
                            confidence=c.confidence,
                            authority=c.authority,
                            provenance=c.provenance or cite,
                            layer=c.layer,
                            kind=c.kind,
                            constraint=c.constraint,
                        )
                    )
                )
            for q in answer.questions:
                self._emit(
                    self.writer.question(q.namespace, q.subject, q.predicate, q.text, scope=q.scope)
                )
            for r in answer.retractions:
                by = r.superseded_by
                if isinstance(by, int):
                    by = made[by].claim_id
                self._emit(
                    self.writer.retract(
                        claim_id=r.claim_id,
                        claim_ref=r.claim_ref,
                        reason=r.reason or f"corrected in {cite}",
                        superseded_by=by,
                    )
                )
        return turn

    @_writes
    def add_signal(
        self, /, subject: str, predicate: str, value: Value, *, expires: int | None, **meta: Any
    ) -> ClaimAdded:
        """An environment signal that expires: `Writer.signal`."""
        return self._layered(self.writer.signal(subject, predicate, value, expires=expires, **meta))

    @overload
    def add_question(self, key: str, text: str, /, **meta: Any) -> ClaimAdded: ...
    @overload
    def add_question(
        self, namespace: str, subject: str, predicate: str, text: str, /, **meta: Any
    ) -> ClaimAdded: ...
    @_writes
    def add_question(self, /, *key_and_text: Any, **meta: Any) -> ClaimAdded:
        """An open question about a key (a known unknown until answered): `Writer.question`.
        The key is three parts or one ``"namespace/subject/predicate"`` string."""
        namespace, subject, predicate, text = _key_and_value(key_and_text, meta, last="text")
        return self._layered(self.writer.question(namespace, subject, predicate, text, **meta))

    def _layered(self, op: ClaimAdded) -> ClaimAdded:
        self._check_open()
        emitted: ClaimAdded = self._emit(op)
        return emitted

    @_writes
    def retract(
        self,
        claim: bytes | str | ClaimAdded | None = None,
        *,
        claim_ref: bytes | None = None,
        reason: str = "",
        superseded_by: bytes | str | ClaimAdded | None = None,
    ) -> ClaimRetracted:
        """Retract one claim exactly (``claim``: the claim, its id, the id in hex or a unique
        hex prefix, see `State.claim`) or, with ``claim_ref``, every claim with that semantic
        ref, including copies that arrive later. A 32-byte id need not be known yet (the
        retraction then waits for its claim); a hex form must name a claim this replica has."""
        self._check_open()
        claim_id = None if claim is None else self._claim_id(claim, "claim")
        if superseded_by is not None:
            superseded_by = self._claim_id(superseded_by, "superseded_by")
        op: ClaimRetracted = self._emit(
            self.writer.retract(
                claim_id=claim_id, claim_ref=claim_ref, reason=reason, superseded_by=superseded_by
            )
        )
        return op

    @overload
    def update(self, key: str, value: Value, /, **meta: Any) -> ClaimAdded: ...
    @overload
    def update(
        self, namespace: str, subject: str, predicate: str, value: Value, /, **meta: Any
    ) -> ClaimAdded: ...
    @_writes
    def update(self, /, *key_and_value: Any, **meta: Any) -> ClaimAdded:
        """Make ``value`` this replica's current value at a key (three parts or one string,
        as `add_claim` takes it) and scope: one change holding
        the new claim and an exact retraction (``superseded_by`` the new claim) of each of this
        replica's own active claims there. Other authors' claims are untouched, so a real
        disagreement still surfaces as a conflict; two replicas updating one key concurrently
        still conflict (each retracts only its own). ``meta`` is `add_claim`'s.

        A value with an interval or a context (SEMANTICS §9, §5) replaces only those of your
        claims it would conflict with: whose interval overlaps its own and whose context
        agrees (`statefuse.core.validity.replaces`), so "15 from March" written after "12 until
        March" leaves the earlier value standing.

        Use `update` when your own value changed (a status, a counter, a date that moved); use
        `add_claim` for a new, independent assertion that should stand beside your earlier ones
        (a second source, an observation at another time)."""
        self._check_writable()
        namespace, subject, predicate, value = _key_and_value(key_and_value, meta)
        scope = meta.get("scope", "global")
        mine = [
            c
            for c in self._active_at(namespace, subject, predicate, scope)
            if c.author == self.author
        ]
        with self.batch():
            new = self.add_claim(namespace, subject, predicate, value, **meta)
            for old in mine:
                if replaces(new, old):
                    self.retract(old, reason="updated", superseded_by=new.claim_id)
        return new

    @_writes
    def supersede(
        self, old: bytes | str | ClaimAdded, new_value: Value, reason: str = ""
    ) -> tuple[ClaimAdded, ClaimRetracted]:
        """Replace a claim (the claim, its id, hex or a unique hex prefix; one this replica
        has, else ClaimLookupError): a new claim (same key and metadata, interval and context
        included, new value) plus an exact retraction of the old one naming the new one in
        ``superseded_by``, in one change."""
        self._check_open()
        old = self._claim(old, "old")
        with self.batch():
            new = self.add_claim(
                old.namespace,
                old.subject,
                old.predicate,
                new_value,
                scope=old.scope,
                confidence=old.confidence,
                evidence=old.evidence,
                provenance=old.provenance,
                authority=old.authority,
                layer=old.layer,
                visibility=old.visibility,
                constraint=old.constraint,
                depends_on=old.depends_on,
                expires=old.expires,
                kind=old.kind,
                valid_from=old.valid_from,
                valid_until=old.valid_until,
                context=old.context,
            )
            retraction = self.retract(old, reason=reason, superseded_by=new.claim_id)
        return new, retraction

    @_writes
    def decide(
        self,
        conflict: ConflictSet | SurfacedConflict | SurfacedFinding,
        claim_id: bytes | str | ClaimAdded | None = None,
        *,
        scope: str = "global",
        reason: str = "",
        payload: Value = None,
        outcome: Outcome | str = Outcome.SELECT,
        record_version: bool | None = None,
    ) -> DecisionAdded:
        """Decide a conflict for the value of one of its candidates (``claim_id``: the claim,
        its id, hex or a unique hex prefix): the decision applies while that value is held and
        no value outside the conflict's appears, whoever agrees later (see `Writer.decide_on`;
        the value groups come from this replica's state).

        ``outcome``: ``select`` (default), ``merge`` (``claim_id`` is a claim this replica
        wrote at the key whose ``depends_on`` names the candidates it combines), ``preserve``
        or ``defer`` (no ``claim_id``; ``defer`` needs a ``reason``); see SEMANTICS §6.
        ``record_version``: record this replica's `version` in the decision (``made_at``:
        ``state(at=decision_version(d))`` is what the decider saw). By default it is recorded
        for every outcome but ``select``: a plain ``select`` without it keeps the encoding
        peers of the previous release read, one with it needs this release."""
        self._check_open()
        kind = _outcome("outcome", outcome)
        record = kind is not Outcome.SELECT if record_version is None else record_version
        made_at = made_at_of(self.version()) if record else ()
        op: DecisionAdded = self._emit(
            self.writer.decide_on(
                conflict,
                None if claim_id is None else self._claim_id(claim_id, "claim_id"),
                state=self._state_at(conflict.locus),
                scope=scope,
                reason=reason,
                payload=payload,
                outcome=kind,
                made_at=made_at,
            )
        )
        return op

    @_locked
    def history(
        self,
        of: str | tuple[str, str, str] | bytes | ClaimAdded,
        *,
        scope: str | None = None,
        at: Version | str | None = None,
    ) -> list[HistoryEvent]:
        """Every assertion, retraction and decision of a key's claims, in lamport order (see
        `key_history`). ``of`` is the key (one ``"namespace/subject/predicate"`` string, or
        three parts) or a claim (the claim, its id, hex or a unique hex prefix: a string
        without ``/``), whose key's history it is; ``scope`` keeps one scope. Claims redacted
        here after this replica held them are listed too, without their values
        (`redacted_claims`). Raises
        KeyTextError for a key it cannot read, UnknownClaimError for an id it does not know.
        ``at``: the history as the memory at that version had it (`state`; reads the whole
        history; a claim named by id is looked up in the memory at that version)."""
        if isinstance(of, tuple):
            if len(of) != 3 or not all(isinstance(p, str) for p in of):
                raise ReplicaError("of", "key-parts", "a key is three strings")
            key = of
        elif isinstance(of, str) and "/" in of:
            key = parse_key(of)
        elif at is not None:
            c = _claim_in(self.state(at=at), of, "of")
            key = (c.namespace, c.subject, c.predicate)
        else:
            c = self._claim(of, "of")
            key = (c.namespace, c.subject, c.predicate)
        gone = self.redacted_claims(held=True)
        if at is not None:
            return key_history(self.state(at=at), key, scope, redacted=gone)
        if any(r.at_key(key) for r in gone):
            # a retraction of a redacted claim is at no key's rows: read the whole memory
            return key_history(self.state(), key, scope, redacted=gone)
        # the key's rows alone on a store opened on its derived state (`state_for`)
        return key_history(self.state_for(key, scope=scope), key, scope, redacted=gone)

    @_locked
    def timeline(
        self,
        key: str | tuple[str, str, str],
        *,
        scope: str | None = None,
        context: Mapping[str, str | int | bool] | None = None,
        valid_at: int | None = None,
        retracted: bool = False,
        at: Version | str | None = None,
    ) -> list[TimelineEntry]:
        """A key's values by the interval they hold in (`statefuse.reading.timeline.timeline`): open
        starts first, open ends last; retracted values only with ``retracted`` (marked).
        ``key`` is ``"namespace/subject/predicate"`` or its three parts; ``at`` reads the
        memory at that version. Raises KeyTextError for a key it cannot read."""
        parts = key_of(key)
        state = self.state(at=at) if at is not None else self.state_for(parts, scope=scope)
        return timeline(
            state, parts, scope=scope, context=context, valid_at=valid_at, retracted=retracted
        )

    @_locked
    def conflict_history(
        self,
        of: bytes | str | tuple[str, str, str],
        *,
        scope: str = "global",
        at: Version | str | None = None,
    ) -> list[ConflictEvent]:
        """The lifecycle of one conflict (`statefuse.core.lifecycle.conflict_history`): opened,
        decided (with its outcome), deferred, reopened and why, closed, and ``redacted`` for
        each claim of the locus redacted after this replica held it. ``of`` is its locus
        (32 bytes) or its key (one ``"namespace/subject/predicate"`` string or three parts)
        with ``scope``. ``at``: as the memory at that version had it. Reads the whole
        history (the lifecycle replays the locus' ops). Raises KeyTextError for a key it
        cannot read, and as `state` does for ``at``."""
        self._check_open()
        if isinstance(of, bytes):
            if len(of) != 32:
                raise ReplicaError("of", "locus", "a locus is 32 bytes")
            locus = of
        else:
            locus = locus_of(*key_of(of), scope)
        state = self.state() if at is None else self.state(at=at)
        return state.conflict_history(locus, redacted=self.redacted_claims(held=True))

    def _claim_id(self, ref: bytes | str | ClaimAdded, field: str) -> bytes:
        """The id ``ref`` names: a claim's own, a 32-byte id as it is, a hex form resolved
        against this replica's claims (`State.claim`)."""
        if isinstance(ref, ClaimAdded):
            return ref.claim_id
        if isinstance(ref, bytes) and len(ref) == 32:
            return ref
        return self._claim(ref, field).claim_id

    def _state_at(self, locus: bytes) -> State:
        """A State that agrees with `state` at ``locus`` (read from the derived state alone on
        a lazy open)."""
        ix = self.index if self._lazy else None
        if ix is None:
            return self.state()
        return ix.state_of([locus], registry=self.registry)

    def _active_at(
        self, namespace: str, subject: str, predicate: str, scope: str
    ) -> list[ClaimAdded]:
        """The active claims at one key and scope (from the derived state on a lazy open)."""
        ix = self.index if self._lazy else None
        if ix is None:
            return list(self._mat.active_at(namespace, subject, predicate, scope))
        locus = locus_of(namespace, subject, predicate, scope)
        state = ix.state_of([locus], registry=self.registry)
        members = state.active_by_key().get((namespace, subject, predicate), ())
        return [c for c in members if c.scope == scope]

    def _claim(self, ref: bytes | str | ClaimAdded, field: str) -> ClaimAdded:
        try:
            if isinstance(ref, str):
                return self.claim_state(ref).claim(ref, field=field)
            return self._mat.state().claim(ref, field=field)
        except ClaimLookupError as e:
            gone = self._redacted_named(ref)
            if gone is not None:
                when = datetime.fromtimestamp(gone.wall_ms / 1000, tz=timezone.utc)
                raise UnknownClaimError(
                    field,
                    "redacted-claim",
                    f"claim {gone.op_id.hex()[:12]}… was redacted by {gone.by.hex()[:12]}…"
                    f" at {when:%Y-%m-%d %H:%M:%S}Z ({gone.reason or 'no reason given'}):"
                    " its body is gone from this replica",
                ) from None
            raise UnknownClaimError(e.field, e.rule, e.message) from None

    def _redacted_named(self, ref: bytes | str | ClaimAdded) -> Redacted | None:
        """The redaction of the op ``ref`` names by its whole id (bytes or hex), if any."""
        if isinstance(ref, str):
            try:
                ref = bytes.fromhex(ref)
            except ValueError:
                return None
        if not isinstance(ref, bytes):
            return None
        return self._redaction.redacted.get(ref)

    @contextlib.contextmanager
    def batch(self) -> Iterator[Replica]:
        """Everything written inside becomes one signed change, stored atomically on exit
        (nothing is stored if the block raises). Batches nest into the outermost one.

        The block holds the replica's lock (`lock`): other threads wait until it ends, so what
        the block reads is still true when its change is stored. Keep it short."""
        with self._lock:
            self._check_writable()
            if self._batch is not None:
                yield self
                return
            with self._writing():
                self._batch = []
                try:
                    yield self
                    ops, self._batch = self._batch, None
                    if ops:
                        self._commit(ops)
                finally:
                    self._batch = None

    # --- trust (root key only) --------------------------------------------------------------------

    def _trust_op(self, op: TrustOp) -> TrustOp:
        if self.root != self.author:
            raise ReplicaError("key", "root-only", "only the space's root key signs trust ops")
        emitted: TrustOp = self._emit(op)
        self.writer.advance(emitted.lamport)  # the memory writer's clock follows the trust writer's
        return emitted

    @_writes
    def admit(self, author: bytes, roles: Iterable[str] = ()) -> TrustOp:
        """Admit an author (closed mode), with roles."""
        return self._trust_op(self.trust_writer.admit(author, roles))

    @_writes
    def revoke(
        self,
        author: bytes,
        *,
        keep: Iterable[bytes] | None = None,
        through_seq: int | None = None,
        through_change: bytes | None = None,
        reason: str = "",
    ) -> TrustOp:
        """Revoke an author: only its changes in ``keep`` and their ancestors go on counting,
        everywhere, whatever arrives later (an `AuthorCutOff`). ``keep`` defaults to the
        author's heads this replica knows (`heads`): everything seen so far stays, on every
        branch of a forked feed, and nothing signed after counts.

        ``through_seq`` (with ``through_change``) writes the first release's shorthand
        (`AuthorRevoked`) instead; it is refused once the author's feed has forked at or before
        that seq, where it could not say which branch stays."""
        if through_seq is None:
            kept = [c.change_id for c in self.log.heads(author)] if keep is None else list(keep)
            return self._trust_op(self.trust_writer.cut_off(author, keep=kept, reason=reason))
        if keep is not None:
            raise ReplicaError(
                "keep", "revocation-form", "name the kept changes or through_seq, not both"
            )
        forked = [f for f in self.log.forks() if f.author == author and f.seq <= through_seq]
        if forked and through_change is None:
            raise ReplicaError(
                "through_seq",
                "revocation-ambiguous",
                f"{forked[0].describe()}; through_seq cannot say which branch stays valid:"
                " revoke with keep= (the default keeps every head this replica knows)",
            )
        return self._trust_op(
            self.trust_writer.revoke(
                author, through_seq=through_seq, through_change=through_change, reason=reason
            )
        )

    @_locked
    def heads(self, author: bytes) -> list[bytes]:
        """Ids of ``author``'s accepted changes that no other names as ``prev``: its latest
        change, or one per branch of a forked feed (highest seq first)."""
        return [c.change_id for c in self.log.heads(author)]

    @_writes
    def grant(self, author: bytes, roles: Iterable[str]) -> TrustOp:
        return self._trust_op(self.trust_writer.grant(author, roles))

    @_writes
    def withdraw(self, author: bytes, roles: Iterable[str]) -> TrustOp:
        return self._trust_op(self.trust_writer.withdraw(author, roles))

    @_locked
    def last_change(self, author: bytes) -> tuple[int, bytes | None]:
        """``(seq, change_id)`` of an author's latest accepted change (``(0, None)`` if none;
        on a feed forked at its top seq, the branch with the highest change id)."""
        heads = self.log.heads(author)  # highest (seq, change_id) first: stable on a fork
        return (heads[0].seq, heads[0].change_id) if heads else (0, None)

    def _commit(self, written: list[tuple[Op, bytes]]) -> None:
        """Sign ``written`` after this author's highest stored change and store it, inside the
        store's write transaction (`_writing`), after catching up with every change other
        processes of this store committed: two of them can never sign the same seq."""
        if not self._in_write:
            self._check_writable()
            with self._writing():
                self._commit(written)
            return
        seq, prev = self._head
        changes = []
        for ops, datas in _chunks(written):
            seq += 1
            c = self._sign(seq, prev, ops, datas)
            changes.append(c)
            prev = c.change_id
        self._wrote = True
        self.store.write(
            StoreWrite(
                accepted=tuple((c.change_id, c.data) for c in changes), received_ms=self._clock()
            )
        )
        self._block.extend(changes)
        self._head = (seq, prev)
        self._pos = max(self._pos, self.store.last_position())
        self._signed.extend(changes)

    def _sign(
        self, seq: int, prev: bytes | None, ops: Sequence[Op], datas: Sequence[bytes]
    ) -> VerifiedChange:
        """Sign our own ops as a change. The writer built and checked every op, and `_chunks`
        keeps the change within the limits peers apply, so it is not decoded back again (what
        `sign_change` does for ops of unknown origin); `verify` re-checks stored changes."""
        registry = self.registry.fingerprint
        op_ids = tuple(op.op_id for op in ops)
        header = change_header(
            space=self.space,
            author=self.author,
            seq=seq,
            prev=prev,
            registry=registry,
            op_ids=op_ids,
        )
        cid = change_id_of(header)
        assert self.key is not None  # `_check_writable` refused to write without it
        signature = self.key.sign(signed_message(cid))
        return VerifiedChange(
            self.space,
            self.author,
            seq,
            prev,
            registry,
            tuple(ops),
            cid,
            signature,
            wire_with_bodies(header, signature, datas),
            op_ids,
            CHANGE_FORMAT_VERSION,
        )

    # --- receiving -------------------------------------------------------------------------------

    @_locked
    def receive(
        self, changes: Iterable[bytes | UnverifiedChange], *, source: str | None = None
    ) -> MergeReport:
        """Verify and take in changes from outside (a peer, a bundle); bad ones are quarantined
        with their reason, ones missing a predecessor are parked. One store transaction.
        ``source`` says where they came from (a peer's URL), for the observers (`Observed`).

        Atomic: the whole input is checked first (ChangeInputError names the first item that is
        not bytes), and a call that raises (a full pending area or quarantine, a failed store
        write, Ctrl-C) leaves log, state, store, pending area and quarantine as they were.
        Raises ReadOnlyError / StoreDamagedError on a replica that may not take anything in.
        """
        self._check_writable()
        if source is not None and not isinstance(source, str):
            raise ReplicaError("source", "type", f"a source is a str or None, got {source!r}")
        return self._receive(_unverified(changes), source=source)

    def _receive(
        self,
        items: list[UnverifiedChange],
        progress: Callable[[int, int], object] | None = None,
        *,
        source: str | None = None,
    ) -> MergeReport:
        with self._writing():  # verified and stored after every write of the other processes
            self._pending_ready()
            if self._due:
                items = _unverified(self._due) + items
                self._due = []
            taken = self._take_in(items, progress)
        return self._report(taken, source)

    def _take_in(
        self, items: list[UnverifiedChange], progress: Callable[[int, int], object] | None
    ) -> _Taken:
        """Verify ``items`` into the log and store what they bring (one store write, inside
        the write transaction); the log is as before if this raises."""
        now = self._clock()
        accepted: list[VerifiedChange] = []
        pending: list[VerifiedChange] = []
        counts = {s: 0 for s in Status}
        known = self.log.highest_seq(self.author)
        with self.log.atomic():
            for start in range(0, len(items), _RECEIVE_STEP):
                part = items[start : start + _RECEIVE_STEP]
                for r in self.log.receive_all(part, seen_ms=now):
                    counts[r.status] += 1
                    if r.status is Status.ACCEPTED:
                        accepted.extend(r.admitted)
                    elif r.status is Status.PENDING:
                        parked = self.log.pending_change(r.change_id or b"")
                        if parked is not None:
                            pending.append(parked)
                if progress is not None:
                    progress(min(start + _RECEIVE_STEP, len(items)), len(items))
            if self._redaction.redacted and accepted:  # bodies known redacted: never stored
                self.log.strip(self._redaction.ids, among=[c.change_id for c in accepted])
                accepted = [self.log.get(c.change_id) or c for c in accepted]
            quarantined = [_record(e, now) for e in self.log.take_quarantined()]
            declares, _ = _governs(accepted)
            if declares:
                # a declaration naming a normalizer this process lacks: refuse the whole call
                # (nothing stored) rather than hold memory it cannot compute
                self._registry_of(self._in_force())
            evicted = [e for e in self.log.take_evicted() if e.area is Area.PENDING]
            waiting = {c.change_id: c for c in pending if self.log.is_pending(c.change_id)}
            b = self.bounds
            batch = StoreWrite(
                accepted=tuple((c.change_id, c.data) for c in accepted),
                parked=tuple(
                    PendingRow(c.change_id, c.data, c.author, c.seq, c.prev)
                    for c in waiting.values()
                ),
                quarantined=tuple(quarantined),
                evicted=tuple(
                    EvictedRow(e.change_id, e.author or b"", e.size, e.seen_ms) for e in evicted
                ),
                quarantine_bounds=(b.quarantine_entries, b.quarantine_bytes),
                received_ms=now,
            )
            trimmed = self.store.write(batch) or 0
            self._block.extend(accepted)
            self._wrote = True
            if batch.accepted:  # caught up inside this transaction: every row up to it is known
                self._pos = max(self._pos, self.store.last_position())
            self.log.unload_pending(waiting)  # stored: memory keeps their index only
        return _Taken(
            accepted, counts, len(quarantined), len(batch.parked), len(evicted) + trimmed, known
        )

    def _report(self, taken: _Taken, source: str | None) -> MergeReport:
        """Count what `_take_in` stored (committed by now, unless an outer write transaction
        still runs) and tell the observers."""
        accepted, counts, known = taken.accepted, taken.counts, taken.known
        declares, names = _governs(accepted)
        # Stored: from here on, memory follows the store (rebuilt from it if this fails).
        try:
            new_ops = self._admitted(accepted, declares=declares, names=names)
        except BaseException:
            self._reload()
            raise
        self._index_settle()
        if _may_redact(accepted, self.root):
            self._enforce_redactions()
        # Own changes past any seq this store held: written elsewhere (those up to it are its
        # own history coming back, e.g. after `repair`).
        own = sum(1 for c in accepted if c.author == self.author and c.seq > known)
        if own:
            warnings.warn(
                OwnFeedWarning(
                    f"{plural(own, 'change')} of this replica's own author arrived that this"
                    " store did not write (a restored backup, a copied store, or its key used"
                    f" by another store); writing continues after seq {self._head[0]}"
                ),
                stacklevel=_caller_level(),
            )
        self._notify(new_ops, Origin.RECEIVED, source)
        refused: tuple[RefusedDeclaration, ...] = ()
        if declares:  # reported with their reason, never refused in silence (`sync.creator`)
            brought = {op.op_id for c in accepted for op in c.ops if type(op) is RegistryDeclared}  # type: ignore[comparison-overlap]
            refused = tuple(r for r in self.refused_declarations() if r.op_id in brought)
        return MergeReport(
            accepted=len(accepted),
            duplicate=counts[Status.DUPLICATE],
            pending=taken.parked,
            quarantined=taken.quarantined,
            new_ops=len(new_ops),
            forks=self._take_forks(),
            own_from_elsewhere=own,
            registry_changed=self._take_registry_change(),
            clock_jumps=self._take_jumps(),
            refused_declarations=refused,
            evicted=taken.evicted,
        )

    def _take_registry_change(self) -> tuple[bytes, bytes] | None:
        change, self._registry_change = self._registry_change, None
        return change

    def merge(self, other: Replica) -> MergeReport:
        """Take in every change ``other`` has that this replica lacks (one way; merge both ways
        for a full sync), through the same verification as network data. ``other``'s changes
        are copied under its lock first, then taken in under this replica's: the two locks are
        never held together.

        Like an import or a sync, this replica adopts ``other``'s creator when it has none
        pinned, and two replicas pinned to different creators raise `TwoSpacesError` before
        anything moves (`sync.creator`)."""
        with self._lock:
            self._check_writable()
        with other._lock:
            other._check_open()
            theirs = sorted(other.log.changes(), key=lambda c: (c.author, c.seq, c.change_id))
            withheld = other._withheld()
            # what ``other`` serves of each: compacted ones whole (from its archive), none
            # that would carry a redacted body
            served = [
                (c.change_id, other._served(c)) for c in theirs if c.change_id not in withheld
            ]
            served += other._pending_served()
            creator = other.creator
        with self._lock:
            mine = self.log
            return self._receive_from(
                creator,
                f"replica {other.author.hex()[:12]}…",
                None,
                [d for cid, d in served if d is not None and cid not in mine],
                source=None,
            )

    def _receive_from(
        self,
        creator: bytes | None,
        label: str,
        progress: Callable[[int, int], object] | None,
        changes: Iterable[bytes | UnverifiedChange],
        *,
        source: str | None,
    ) -> MergeReport:
        """`receive` from a source this store's user chose, which follows ``creator``: meet
        it first (`_meet`), then take the changes in; undo an adoption if that fails."""
        self._check_writable()
        items = _unverified(changes)
        adopted = self._meet(creator, label)
        try:
            report = self._receive(items, progress, source=source)
        except BaseException:
            self._unmeet(adopted)
            raise
        return report if adopted is None else replace(report, adopted_creator=adopted)

    # --- bundles ---------------------------------------------------------------------------------

    @_locked
    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every accepted and pending change to a bundle file; returns how many."""
        from statefuse.sync.bundle import write_bundle

        self._check_open()
        changes = self.all_change_bytes()
        if self.key is None:
            raise ReadOnlyError(
                "key", "no-key", "a bundle is signed by its exporter: export needs the author key"
            )
        write_bundle(path, self.key, self.space, changes, creator=self.creator)
        return len(changes)

    @_locked
    def import_(
        self, path: str | os.PathLike[str], *, progress: Callable[[int, int], object] | None = None
    ) -> MergeReport:
        """Verify and take in the changes of a bundle file (see `sync.bundle`), all or nothing:
        the file is read and checked whole before anything is taken in, and one store
        transaction keeps what it brought."""
        from statefuse.sync.bundle import open_bundle

        self._check_writable()
        bundle = open_bundle(path, space=self.space)
        where = os.fspath(path)
        return self._receive_from(
            bundle.creator, f"bundle {where}", progress, bundle.changes, source=where
        )

    # --- observers and lifetime ------------------------------------------------------------------

    @_locked
    def context(
        self,
        query: str,
        *,
        lens: Lens | None = None,
        budget: int = DEFAULT_BUDGET,
        resolver: Resolver | None = None,
        embedder: object | None = None,
        at: Version | str | None = None,
        record_version: bool = False,
    ) -> Context:
        """`_context` (see there for everything but ``record_version``). ``record_version``:
        record this replica's `version` in the context (`Context.made_at`, ``"made_at"`` in its
        JSON), so that ``state(at=made_at)`` is the memory it was read from; it reads every
        head, which loads the history on a store opened on its derived state. A context read
        ``at`` a version records that one (`Context.at`)."""
        made = self._context(
            query, lens=lens, budget=budget, resolver=resolver, embedder=embedder, at=at
        )
        if record_version and at is None:
            made.made_at = str(self.version())
        return made

    def _context(
        self,
        query: str,
        *,
        lens: Lens | None = None,
        budget: int = DEFAULT_BUDGET,
        resolver: Resolver | None = None,
        embedder: object | None = None,
        at: Version | str | None = None,
    ) -> Context:
        """The context an agent's next LLM call reads: the current memory through ``lens``
        (default: a viewer with no roles, at the replica clock's now, so expired claims are
        left out), for ``query``, within ``budget`` tokens; the defaults are those of
        ``statefuse context`` (budget, lens, `default_resolver`), so both give the same text
        for the same store.

        The one-call path of an agent loop (write what it learned, then read this): the replica
        keeps the caches (token counts per line, the ranker's postings, the projection carried
        from the previous State), so a call after a write costs what changed as far as each of
        them goes. Conflict candidates name their authors by the names they declared
        (`author_names`). Same result as `context_for(replica.state(), lens, ...,
        authors=replica.names())`; raises as it does. Opened on the derived state, it lays out
        the keys it draws on (`StoreIndex.context_loci`), and its counted lines count the
        whole memory's facts and conflicts (`ContextTotals`; docs/operations.md says when
        they are exact).

        ``embedder`` (an `Embedder`, or a callable `as_embedder` takes): rank by meaning as
        well as by words (`statefuse.retrieval.fusion.HybridRanker`), with the claims' vectors kept
        in
        the store (`vectors`), so only claims never embedded by it are embedded. Reads the
        whole memory (a store opened on its derived state loads it). Raises EmbedderError
        when the embedder breaks its interface, and what the embedder raises.

        ``at``: the context of the memory at that version (`state`): what an agent would have
        read then, under today's lens; the context records it (`Context.at`, ``"at"`` in its
        JSON). Reads the whole history; raises as `state` does.
        """
        self._check_open()
        if at is not None:
            version = Version.parse(at, field="at") if isinstance(at, str) else at
            made = context_for(
                self.state(at=version),
                lens if lens is not None else Lens(now=self._clock()),
                budget=budget,
                query=query,
                resolver=resolver,
                ranker=None if embedder is None else self.ranker(embedder),
                authors=self.author_names(),
            )
            made.at = str(version)
            return made
        ix = self.index if self._lazy and embedder is None else None
        if ix is not None:  # opened on the derived state: read what this context needs
            lens = lens if lens is not None else Lens(now=self._clock())
            with self.store.read_transaction():
                loci = ix.context_loci(query, budget=budget)
                if self.registry.detectors:  # what the findings are made of (`state_of`)
                    loci = [*loci, *ix.detector_loci(self.registry)]
                state = ix.state_of(loci, registry=self.registry, memo=self._op_memo)
                residue = self._scrub_residue()
                if residue:  # the residue of the loci read, as their moved claims would be
                    read = {*loci, *(_locus_of_claim(c) for c in state.claims.values())}
                    mine = residue.of_loci(read)
                    if mine:
                        got = mine.values()
                        rets = ix.retractions_of(
                            [r.op_id for r in got],
                            {r.claim_ref for r in got},
                            memo=self._op_memo,
                        )
                        state = with_residue(state, mine, rets)
                totals = _totals(ix, state)
            cache = self._slice_cache
            if cache is None:  # the words of claims met, as many as a few slices' worth
                ranker = LexicalRanker(max_entries=SLICE_WORDS)
                cache = self._slice_cache = ContextCache(ranker=ranker)
            return context_for(
                state,
                lens,
                budget=budget,
                query=query,
                resolver=resolver,
                ranker=_Scanning(cache.ranker),
                cache=cache,
                authors=self.author_names(),
                totals=totals,
            )
        cache = self._context_cache
        if cache is None:
            cache = self._context_cache = ContextCache()
        return context_for(
            self.state(),
            lens if lens is not None else Lens(now=self._clock()),
            budget=budget,
            query=query,
            resolver=resolver,
            ranker=None if embedder is None else self.ranker(embedder),
            cache=cache,
            authors=self.author_names(),
        )

    @_locked
    def search(
        self,
        query: str,
        *,
        lens: Lens | None = None,
        limit: int = 10,
        resolver: Resolver | None = None,
        embedder: object | None = None,
    ) -> list[SearchHit]:
        """The claims that answer ``query`` best among those ``lens`` sees (default: a viewer
        with no roles, at the replica clock's now), at most ``limit``, best first: each key's
        selected claim (by ``resolver``, default none) and the candidates of its unresolved
        conflict, which a hit carries (`statefuse.retrieval.search.search_view`). Ranked by words
        (`LexicalRanker`), or with ``embedder`` by words and meaning fused
        (`statefuse.retrieval.fusion.HybridRanker`, vectors kept as for `context`). Raises
        ReplicaError for a ``limit`` that is not an int >= 1, EmbedderError as `context`."""
        self._check_open()
        if type(limit) is not int or limit < 1:
            raise ReplicaError("limit", "positive-int", f"{limit!r} is not an int >= 1")
        if not isinstance(query, str):
            raise ReplicaError("query", "str", f"expected a str, got {type(query).__name__}")
        view = project(
            self.state(),
            lens if lens is not None else Lens(now=self._clock()),
            resolver=resolver,
        )
        cache = self._context_cache
        if cache is None:
            cache = self._context_cache = ContextCache()
        ranker = cache.ranker if embedder is None else self.ranker(embedder)
        return search_view(view, query, ranker=ranker, limit=limit)

    def vectors(self) -> VectorStore:
        """Where this replica keeps claim vectors: a table of its SQLite file (made on first
        use when writable; `statefuse.retrieval.vectorstore`), or memory for a replica in memory."""
        with self._lock:
            if self._vectors is None:
                made = getattr(self.store, "vectors", None)
                self._vectors = made() if callable(made) else MemoryVectors()
            return self._vectors

    def ranker(self, embedder: object) -> HybridRanker:
        """The hybrid ranker of ``embedder`` over this replica's `vectors`, sharing the lexical
        postings of `context`; kept while the same embedder object is handed in again (it
        remembers query vectors and norms). Raises EmbedderError for something that is not
        an embedder."""
        with self._lock:
            kept = self._rankers.get(id(embedder))
            if kept is not None and kept[0] is embedder:
                return kept[1]
            cache = self._context_cache
            if cache is None:
                cache = self._context_cache = ContextCache()
            ranker = HybridRanker(embedder, vectors=self.vectors(), lexical=cache.ranker)
            if len(self._rankers) >= 8:
                self._rankers.clear()
            self._rankers[id(embedder)] = (embedder, ranker)
            return ranker

    @_locked
    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(ops)`` with the ops the state gains after each write or receive
        (none for a call that adds nothing). ``ops`` is an `Observed`: a tuple of the ops, in
        the order applied, that also says where they came from (``ops.origin``: `Origin.LOCAL`
        for this replica's writes, `Origin.RECEIVED` for changes taken in by `receive`,
        `merge`, `import_`, a sync or a `Follower`; ``ops.source``: the peer URL or bundle).

        The callback runs on the thread that made the change, inside the replica's lock, once
        the change is stored and the state shows it: it may read the replica (``state()``
        there is the state as of these ops) and even write to it, but it holds up every other
        thread using the replica while it runs, so hand slow work to a queue. A callback must
        not wait for another thread that uses this replica: that thread waits for the lock.
        An exception it raises propagates to the call that made the change (which is already
        stored). Returns a function that stops the calls."""
        self._observers.append(callback)

        def stop() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._observers.remove(callback)

        return stop

    def follow(
        self,
        peers: str | Sequence[str],
        *,
        interval: float = 5.0,
        timeout: float | None = None,
    ) -> Follower:
        """Sync with ``peers`` (one URL or several) in a background thread, now and then every
        ``interval`` seconds, until the returned `Follower` is stopped (``stop()``, or leaving
        its ``with`` block) or this replica closes. Changes that arrive reach the observers
        (`observe`) as `Origin.RECEIVED`, with the peer's URL as ``source``; a peer that fails
        is retried with backoff and its last error is kept in ``follower.status``.

        ``timeout`` bounds each request (default: the transport's). Raises FollowError for a
        URL whose scheme no transport handles (naming the URL) or a bad ``interval``, and
        ReplicaError on a closed replica. See `sync.follower`.
        """
        from statefuse.sync.follower import Follower

        with self._lock:
            self._check_open()
            follower = Follower(self, peers, interval=interval, timeout=timeout)
            self._followers = [f for f in self._followers if f.running]
            self._followers.append(follower)
        return follower.start()

    def _notify(self, ops: tuple[Op, ...], origin: Origin, source: str | None = None) -> None:
        if ops:
            observed = Observed(ops, origin, source)
            for callback in list(self._observers):
                callback(observed)

    def _reload(self) -> None:
        if self._lazy:
            return  # nothing in memory: the store is what a lazy open reads
        with contextlib.suppress(Exception):
            self._load()

    def _check_open(self) -> None:
        if self._closed:
            raise ReplicaError("replica", "open", "the replica is closed")

    def _check_writable(self) -> None:
        """Raise unless this replica may write and take changes in: a damaged store
        (StoreDamagedError), a read-only open or a missing key (ReadOnlyError)."""
        self._check_open()
        if self.damage is not None:
            raise StoreDamagedError("store", "store-damaged", self.damage.describe())
        if self._readonly is not None:
            e = self._readonly
            raise ReadOnlyError(e.field, e.rule, e.message)

    @_locked
    def repair(self) -> RepairReport:
        """Make a damaged store writable again, losing nothing (`damage` says what is wrong).

        When SQLite cannot read the whole file, it is rebuilt from every readable row and the
        damaged file is kept beside it (`RepairReport.original`). Then every stored change that
        still verifies stays; each one that does not moves into quarantine with its reason, and
        changes that verify but follow a damaged one move to the pending area, where they wait
        for the lost change to come back from a peer (`statefuse repair --from URL`). Nothing is
        deleted. The replica is reloaded and writable afterwards; a store with no damage is left
        as it is. Raises ReadOnlyError on a replica opened read-only or without its key.
        """
        self._check_open()
        if self._readonly is not None:
            e = self._readonly
            raise ReadOnlyError(e.field, e.rule, e.message)
        failed = self._failed_pending()
        if self.damage is None and not failed:
            return RepairReport()
        original: Path | None = None
        rebuild = getattr(self.store, "rebuild", None)
        if self.damage is not None and self.damage.sqlite and rebuild is not None:
            original = rebuild()
            self._load()
            failed = self._failed_pending()
        plan = self._scan.plan(self.log, now=self._clock())
        plan = replace(plan, quarantine_pending=plan.quarantine_pending + tuple(failed))
        self.store.apply_repair(plan)  # the store drops its derived state with it
        self._load()
        self._index_due = True
        self._index_settle()
        if self.damage is not None:  # what is left SQLite reports; the rows all verify
            raise StoreDamagedError("store", "store-damaged", self.damage.describe())
        own_waiting = sum(1 for c in self.pending() if c.author == self.author)
        return RepairReport(
            quarantined=len(plan.quarantine_accepted) + len(plan.quarantine_pending),
            parked=len(plan.park),
            original=original,
            own_waiting=own_waiting,
        )

    def _failed_pending(self) -> list[tuple[bytes, QuarantineRecord]]:
        """The pending rows stored with an index that no longer verify (an open does not look:
        `sync.pending`; `statefuse verify` does, and `repair` moves them to quarantine)."""
        now = self._clock()
        out = []
        for row in self.store.pending_index():
            data = self.store.pending_data(row.change_id)
            if data is None:
                continue
            try:
                c = verify_change(UnverifiedChange(data), space=self.space)
            except VerificationError as exc:
                out.append(
                    (row.change_id, _seen(_damaged(data, exc.reason.value, exc.message), now))
                )
                continue
            if c.change_id != row.change_id:
                why = "stored under another id"
                out.append((row.change_id, _seen(_damaged(data, "malformed", why), now)))
        return out

    @_locked
    def snapshot(self) -> int:
        """Save a snapshot of the accepted changes now, so the next open restores them instead
        of verifying them again; returns how many changes it covers. Only a cache: the changes
        themselves are already durable, and `close` saves one when enough is new.

        Raises SnapshotError (rule ``snapshot-covers``) if a stored change is not in the log
        (one that failed verification on reload), and what the store raises on a failed write.
        """
        self._check_open()
        # what this replica has taken in: rows another process commits meanwhile come after
        rows = list(itertools.takewhile(lambda r: r[0] <= self._pos, self.store.accepted_ids()))
        changes = [self.log.get(cid) for _, cid in rows]
        covered = [c for c in changes if c is not None]
        if len(covered) != len(rows):
            raise SnapshotError("snapshot-covers", "a stored change is not accepted on reload")
        upto = rows[-1][0] if rows else 0
        collecting = gc.isenabled()
        gc.disable()  # many new lists, none of them garbage until the blob is built
        try:
            assert self.key is not None
            blob = encode_snapshot(covered, key=self.key, identity=self._identity(), upto=upto)
        finally:
            if collecting:
                gc.enable()
        self.store.save_snapshot(upto, blob)
        self._snap_count = len(covered)
        return len(covered)

    def _snapshot_due(self) -> bool:
        """Whether the stored changes past the store's snapshot (whoever saved it: every
        process of the store shares one) are enough to save a new one (by position, which
        counts the stored changes without reading them)."""
        at = self.store.snapshot_position() or 0
        if at == self._snap_unusable:
            at = 0  # the one this replica could not use: replaced whatever it covers
        new = self._pos - at
        return new > 0 and new * CLOSE_SNAPSHOT_SHARE >= at

    def close(self) -> None:
        """Stop this replica's followers (`follow`), then close the store (saving a snapshot
        first when enough changed: `CLOSE_SNAPSHOT_SHARE`). A snapshot that cannot be saved is
        reported as a SnapshotWarning, never raised."""
        # A follower may be waiting for the lock: join it only when this thread does not hold
        # the lock already (a caller's ``with replica.lock:``, an observer); else it ends on
        # its own once the lock is free and it finds the replica closed.
        held = self._lock._is_owned()  # type: ignore[attr-defined]  # what Condition uses
        for follower in list(self._followers):
            follower.stop(timeout=0 if held else None)
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self._closed:
            try:
                if (
                    self.path is not None
                    and not self._lazy
                    and not self.readonly
                    and self._snapshot_due()
                ):
                    self.snapshot()
            except SnapshotError:
                pass  # a store with changes that fail on reload: `statefuse verify` says which
            except Exception as exc:  # a cache must never stop a close
                # another process writing (busy) saves one, or a later close does: no news
                if not (isinstance(exc, StoreError) and exc.rule == "busy"):
                    warnings.warn(
                        SnapshotWarning("snapshot-save", f"snapshot not saved: {_said(exc)}"),
                        stacklevel=_caller_level(),
                    )
            finally:
                self._closed = True
                self.store.close()

    def __enter__(self) -> Replica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self.path) if self.path else "memory"
        who = self.author.hex()[:12]
        with self._lock:  # what this replica holds, without looking at the store again
            count = self.store.count() if self._lazy else len(self.log)
        return f"Replica({self.space!r}, author={who}…, {where}, {count} changes)"


#: How many received changes are verified together (progress is reported per step).
_RECEIVE_STEP = 256


@dataclass(frozen=True, slots=True)
class _Taken:
    """What one receive stored (`Replica._take_in`), to count once it is committed."""

    accepted: list[VerifiedChange]
    counts: dict[Status, int]
    quarantined: int
    parked: int
    evicted: int
    #: The highest seq of this replica's own author the log held before (`OwnFeedWarning`).
    known: int


@dataclass(frozen=True, slots=True)
class ConflictPage:
    """Conflicts as `Replica.conflicts` returns them: ``conflicts`` in order of key and
    scope, ``state`` to read their candidates and decisions from, ``total`` in the memory."""

    state: State
    conflicts: tuple[ConflictSet, ...]
    total: int


#: Most claims whose words a replica opened on its derived state keeps for its contexts.
SLICE_WORDS = 65_536


@dataclass(frozen=True, slots=True)
class _Scanning:
    """The ranker of a context read from the derived state: ``inner``'s scores of the claims
    handed over, read as a plain sequence. Each call ranks a slice of its own, which no
    later call carries over, so one pass over its claims (``inner`` keeps their words by
    id) costs less than postings built for it; the floats are the same either way."""

    inner: Ranker

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> Mapping[bytes, float]:
        return self.inner.scores(query, list(claims))


def _totals(ix: StoreIndex, state: State) -> ContextTotals | None:
    """The whole memory's counts for a context assembled from ``state``, a slice of it read
    from the derived state (`ContextTotals`, from `StoreIndex.context_counts`); None when
    the slice holds every active claim (then it counts for itself)."""
    if len(state.active_claims()) >= ix.active_count():
        return None
    counts = ix.context_counts()
    names = counts.fact_namespaces
    return ContextTotals(
        facts=counts.facts,
        conflicts=counts.conflicts,
        fact_namespace=names[0] if len(names) == 1 else None,
    )


def _conflict_order(c: ConflictSet) -> tuple[tuple[str, str, str], str]:
    return c.key, c.scope


def _prefix_parts(prefix: str | Sequence[str]) -> tuple[str, ...]:
    """A key prefix as its parts: a key text (``ns/subject/predicate``, or fewer parts) or
    the parts themselves. Raises ReplicaError (field ``prefix``) for anything else."""
    if isinstance(prefix, str):
        if not prefix:
            return ()
        return key_parts(prefix, range(1, 4), "namespace[/subject[/predicate]]", field="prefix")
    parts = tuple(prefix)
    if len(parts) > 3 or not all(isinstance(p, str) and p for p in parts):
        raise ReplicaError(
            "prefix", "key-prefix", f"a key prefix is up to 3 strings, got {prefix!r}"
        )
    return parts


#: The key under which the derived state keeps what the space says of itself (the registry
#: declaration and author names in force), so a lazy open needs no history for them.
_SPACE_META = "space"


def _space_meta(declaration: RegistryDeclared | None, names: dict[bytes, AuthorNamed]) -> bytes:
    doc = {
        "declaration": None if declaration is None else declaration.encode().hex(),
        "names": {a.hex(): op.encode().hex() for a, op in sorted(names.items())},
    }
    return json.dumps(doc, sort_keys=True).encode()


def _from_space_meta(raw: bytes) -> tuple[RegistryDeclared | None, dict[bytes, str]] | None:
    """(declaration, names) from `_space_meta`, or None for anything else (the caller then
    loads in full: derived data never decides what it cannot read)."""
    try:
        doc = json.loads(raw)
        d = doc["declaration"]
        declaration = None if d is None else decode_op(bytes.fromhex(d))
        if declaration is not None and not isinstance(declaration, RegistryDeclared):
            return None
        names: dict[bytes, str] = {}
        for a, op in doc["names"].items():
            named = decode_op(bytes.fromhex(op))
            if not isinstance(named, AuthorNamed) or named.author != bytes.fromhex(a):
                return None
            names[named.author] = named.name
        return declaration, names
    except (StateFuseError, ValueError, KeyError, TypeError, AttributeError):
        return None


#: The key under which the derived state keeps what a lean write needs (`_writer_meta`).
_WRITER_META = "writer"


def _writer_doc(author: bytes, head: tuple[int, bytes | None], lamport: int, plain: bool) -> bytes:
    seq, change = head
    doc = {
        "author": author.hex(),
        "seq": seq,
        "change": None if change is None else change.hex(),
        "lamport": lamport,
        "plain": plain,
    }
    return json.dumps(doc, sort_keys=True).encode()


def _from_writer_doc(
    raw: bytes | None, author: bytes
) -> tuple[tuple[int, bytes | None], int] | None:
    """(head, lamport) for ``author`` from `_writer_doc`, or None: no record, another
    author's, or one whose next change would not count plainly."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        if doc["author"] != author.hex() or doc["plain"] is not True:
            return None
        seq, change, lamport = doc["seq"], doc["change"], doc["lamport"]
        if type(seq) is not int or type(lamport) is not int or seq < 0 or lamport < 0:
            return None
        return (seq, None if change is None else bytes.fromhex(change)), lamport
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _claim_in(state: State, ref: bytes | str | ClaimAdded, field: str) -> ClaimAdded:
    try:
        return state.claim(ref, field=field)
    except ClaimLookupError as e:
        raise UnknownClaimError(e.field, e.rule, e.message) from None


def _state_ops(changes: Iterable[VerifiedChange]) -> Iterator[Op]:
    """The ops of ``changes`` that the state is made of (the space's own ops are not)."""
    return (op for c in changes for op in c.ops if not isinstance(op, SPACE_OP_TYPES))


def _governs(changes: Iterable[VerifiedChange]) -> tuple[bool, bool]:
    """Whether ``changes`` hold a registry declaration, and an author name (the one scan of
    their ops a receive makes for them)."""
    kinds: set[type[object]] = {type(op) for c in changes for op in c.ops}
    return RegistryDeclared in kinds, AuthorNamed in kinds


def _unverified(changes: Iterable[bytes | UnverifiedChange]) -> list[UnverifiedChange]:
    """The whole input as UnverifiedChange, before any of it is taken in. Raises
    ChangeInputError (field ``changes[i]``) for the first item that is not bytes-like."""
    out = []
    for i, c in enumerate(changes):
        if isinstance(c, UnverifiedChange):
            out.append(c)
            continue
        try:
            out.append(UnverifiedChange(c))
        except ChangeInputError as exc:
            raise ChangeInputError(f"changes[{i}]", exc.rule, exc.message) from None
    return out


#: Room left in a change for everything but the ops' bytes (keys, ids, framing, signature).
_CHANGE_OVERHEAD = 4096


def _claim_id_arg(ref: bytes | str) -> bytes:
    if isinstance(ref, bytes) and len(ref) == 32:
        return ref
    if isinstance(ref, str):
        try:
            raw = bytes.fromhex(ref)
        except ValueError:
            raw = b""
        if len(raw) == 32:
            return raw
    raise ReplicaError("claim", "id", f"{ref!r} is not a 32-byte id (bytes or 64 hex digits)")


def _same_value(a: object, b: object) -> bool:
    return type(a) is type(b) and plain_value(a) == plain_value(b)  # type: ignore[arg-type]


def _locus_of_claim(c: ClaimAdded) -> bytes:
    return locus_of(c.namespace, c.subject, c.predicate, c.scope)


def _may_redact(changes: Sequence[VerifiedChange], root: bytes | None) -> bool:
    """Whether taking in ``changes`` may change what is redacted: they hold a redaction, or
    trust ops of the root (a redactor role granted or withdrawn)."""
    for c in changes:
        for op in c.ops:
            if isinstance(op, OpsRedacted):
                return True
            if c.author == root and isinstance(op, TRUST_OP_TYPES):
                return True
    return False


def _chunks(written: list[tuple[Op, bytes]]) -> Iterator[tuple[list[Op], list[bytes]]]:
    """Split (op, encoding) pairs into changes within `MAX_OPS_PER_CHANGE` and
    `MAX_CHANGE_BYTES`: each chunk is its ops and their encodings."""
    ops: list[Op] = []
    datas: list[bytes] = []
    size = 0
    budget = MAX_CHANGE_BYTES - _CHANGE_OVERHEAD
    for op, data in written:
        n = len(data) + 40
        if n > budget:
            raise ReplicaError(
                "op", "change-size", f"an op of {n} bytes does not fit a change ({budget} bytes)"
            )
        if ops and (len(ops) == MAX_OPS_PER_CHANGE or size + n > budget):
            yield ops, datas
            ops, datas, size = [], [], 0
        ops.append(op)
        datas.append(data)
        size += n
    if ops:
        yield ops, datas


_KEY_WORDS = ("namespace", "subject", "predicate", "value")
_KEY_PARTS = frozenset(_KEY_WORDS[:3])


def _key_and_value(
    args: tuple[Any, ...], meta: dict[str, Any], *, last: str = "value"
) -> tuple[str, str, str, Any]:
    """(namespace, subject, predicate, value) from ``key, value`` or the four of them, by
    position or by name (names are taken out of ``meta``; ``last`` names the fourth, ``text``
    for a question). Raises ReplicaError (rule ``key-parts``) for another shape, KeyTextError
    for a key string it cannot read."""
    all_words = (*_KEY_WORDS[:3], last)
    named = {w: meta.pop(w) for w in ("key", *all_words) if w in meta}
    one_string = "key" in named or (0 < len(args) <= 2 and not _KEY_PARTS & named.keys())
    words = ("key", last) if one_string else all_words
    given = dict(zip(words, args, strict=False))
    if len(args) > len(words) or given.keys() & named.keys():
        raise ReplicaError("key", "key-parts", "the key and value are given twice")
    given.update(named)
    if set(given) != set(words):
        raise ReplicaError(
            "key",
            "key-parts",
            f"give namespace, subject, predicate and {last}, or 'namespace/subject/predicate'"
            f" and {last}",
        )
    if not one_string:
        return given["namespace"], given["subject"], given["predicate"], given[last]
    key = given["key"]
    if not isinstance(key, str):
        raise ReplicaError("key", "key-type", f"a key is a str, got {type(key).__name__}")
    return (*parse_key(key), given[last])


def _caller_level() -> int:
    """The ``warnings.warn`` stacklevel, for the function calling this one, that names the
    first frame outside this module: the user's ``Replica.open`` or ``close`` line, not ours."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _record(entry: QuarantineEntry, now: int) -> QuarantineRecord:
    return QuarantineRecord(entry.key, entry.data, entry.reason.value, entry.message, now, now)


class _Scan:
    """What loading found in the store, row by row: the rows that did not verify (damage) and
    what `Replica.repair` must move where."""

    __slots__ = ("_orphan_rows", "details", "failed", "failed_pending", "sqlite")

    def __init__(self) -> None:
        #: (position, quarantine record) of stored accepted rows that fail verification.
        self.failed: list[tuple[int, QuarantineRecord]] = []
        #: (position, change id, wire bytes) of stored accepted rows parked on load.
        self._orphan_rows: list[tuple[int, bytes, bytes]] = []
        #: (change id, quarantine record) of stored pending rows that fail verification.
        self.failed_pending: list[tuple[bytes, QuarantineRecord]] = []
        self.sqlite: list[str] = []
        self.details: list[str] = []

    def _note(self, text: str) -> None:
        if len(self.details) < DAMAGE_DETAIL:
            self.details.append(text)

    def accepted(self, pos: int, data: bytes, r: Receipt) -> None:
        if r.status is Status.QUARANTINED:
            reason = r.reason.value if r.reason is not None else "malformed"
            self.failed.append((pos, _damaged(data, reason, r.message)))
            self._note(f"stored change #{pos}: {reason}: {r.message}")
        elif r.status is Status.PENDING:
            assert r.change_id is not None
            self._orphan_rows.append((pos, r.change_id, data))

    def pending(self, cid: bytes, data: bytes, r: Receipt) -> None:
        if r.status is Status.QUARANTINED and r.reason is not QuarantineReason.BROKEN_CHAIN:
            reason = r.reason.value if r.reason is not None else "malformed"
            self.failed_pending.append((cid, _damaged(data, reason, r.message)))
            self._note(f"pending change {cid.hex()[:12]}…: {reason}: {r.message}")

    def orphans(self, log: ChangeLog) -> list[tuple[int, bytes]]:
        """Stored accepted rows still parked once every row was read (rows stored out of order
        were admitted by a later one): they follow a change that failed."""
        return [(pos, cid) for pos, cid, _ in self._orphan_rows if cid not in log]

    def damage(self, log: ChangeLog) -> Damage | None:
        orphans = self.orphans(log)
        if not (self.failed or orphans or self.failed_pending or self.sqlite):
            return None
        details = list(self.details)
        if not details and orphans:
            details.append(f"stored change #{orphans[0][0]} follows a change that is missing")
        return Damage(
            failed=len(self.failed),
            orphaned=len(orphans),
            failed_pending=len(self.failed_pending),
            sqlite=tuple(self.sqlite[:DAMAGE_DETAIL]),
            details=tuple(details),
        )

    def plan(self, log: ChangeLog, *, now: int) -> RepairPlan:
        """Where `Replica.repair` moves each damaged row, found at ``now``."""
        return RepairPlan(
            quarantine_accepted=tuple((p, _seen(r, now)) for p, r in self.failed),
            park=tuple(self.orphans(log)),
            quarantine_pending=tuple((c, _seen(r, now)) for c, r in self.failed_pending),
        )


def _damaged(data: bytes, reason: str, message: str) -> QuarantineRecord:
    """The quarantine record of a stored row that failed verification on load (its times are
    filled in when `repair` moves it)."""
    key = UnverifiedChange(data).key
    return QuarantineRecord(key, data, reason, f"damaged in the store: {message}", 0, 0)


def _seen(record: QuarantineRecord, now: int) -> QuarantineRecord:
    return replace(record, first_seen_ms=now, last_seen_ms=now)


def _load_key(kpath: Path) -> SigningKey:
    return SigningKey.load(kpath)


def new_author_key(path: str | os.PathLike[str], *, wait: float = DEFAULT_WAIT) -> SigningKey:
    """Give the store at ``path``, whose key file is lost, a new author key: generated, saved
    to its key file (mode 0600, bound to the store) and made the store's author, so that the
    store writes again, as a new author. The old author's changes stay and count as before;
    what the old key alone could do (sign as that author, act as a closed space's root,
    declare the open space's registry as its creator) is not given to the new one.

    Raises StoreError: ``no-such-store`` for a missing store, ``key-exists`` when the key file
    is there (a store keeps its key; nothing is written), and what opening for writing
    raises (``busy``, ``not-a-store``)."""
    from statefuse.storage.sqlitestore import SQLiteStore

    path = Path(path)
    if not path.exists():
        raise StoreError("path", "no-such-store", f"no store at {path}")
    kpath = key_path(path)
    if kpath.exists():
        raise StoreError(
            "key",
            "key-exists",
            f"{kpath} exists: this store has its key, and keeps it (to write with another key,"
            " remove that file first)",
        )
    store = SQLiteStore(path, create=False, wait=wait)
    try:
        info = store.info()
        if info is None:
            raise StoreError("path", "not-a-store", f"{path} was never initialized as a store")
        key = SigningKey.generate()
        info = store.rebind(key.author)
        key.bound(info.store_id).save(kpath)
        return key
    finally:
        store.close()


def _check_key(key: SigningKey, info: StoreInfo, path: Path, *, adopt_key: bool) -> None:
    """Refuse a key that belongs to another store, unless the caller adopts it: one key
    writing in two stores forks its feed (kept and reported, but never by accident)."""
    if adopt_key:
        return
    if info.author is not None and info.author != key.author:
        raise StoreError(
            "key",
            "key-author",
            f"{path} was created by author {info.author.hex()[:16]}…, the key given is author"
            f" {key.author.hex()[:16]}… (pass adopt_key=True / --adopt-key to write with it)",
        )
    bound = key.bound_to
    if bound is not None and bound != info.store_id:  # a new store has no id yet: elsewhere
        raise StoreError(
            "key",
            "key-bound-elsewhere",
            f"the key for {path} belongs to another store ({bound.hex()[:16]}…, this one is"
            f" {info.store_id.hex()[:16]}…): two stores writing with one key fork its feed."
            " Give this store its own key, or pass adopt_key=True / --adopt-key to use it anyway",
        )


def _bind_key_file(key: SigningKey, kpath: Path, info: StoreInfo, *, create: bool) -> None:
    """Save the key next to its store, bound to it: a new store's key, or a key file of the
    first release, which carried no binding (a key handed over for an existing store is not
    written where there was no file)."""
    if not info.store_id:
        return
    if not kpath.exists() and not create:
        return
    if kpath.exists():
        try:
            on_disk = SigningKey.load(kpath)
        except KeyFileError:
            return  # not ours to rewrite; `_check_key` judged the key handed over
        if on_disk.author != key.author or on_disk.bound_to == info.store_id:
            return
    key.bound(info.store_id).save(kpath, overwrite=True)


def _new_info(
    space: str,
    registry: Registry | None,
    key: SigningKey,
    mode: TrustMode | str,
    root: bytes | None,
    creator: bytes | None = None,
) -> StoreInfo:
    try:
        mode = TrustMode(mode)
    except ValueError:
        raise ReplicaError(
            "mode", "trust-mode", f"mode is 'open' or 'closed', not {mode!r}"
        ) from None
    if not isinstance(space, str) or not space or len(space) > 256:
        raise ReplicaError("space", "space-name", "a space is a non-empty name of up to 256 chars")
    if mode is TrustMode.CLOSED and root is None:
        root = key.author
    if creator is not None:
        creator = check_creator("creator", creator)
        if mode is TrustMode.CLOSED:
            raise ReplicaError(
                "creator",
                "closed-space",
                "a closed space's registry is declared by its root: give creator= only for an"
                " open space",
            )
        declares = registry is not None and registry.fingerprint != DEFAULT_REGISTRY.fingerprint
        if declares and creator != key.author:
            raise ReplicaError(
                "registry",
                REFUSED_RULE,
                f"only the space's creator ({creator.hex()[:12]}…) declares its registry: leave"
                " out registry= to take the space's from its changes",
            )
    fingerprint = (registry or DEFAULT_REGISTRY).fingerprint
    return StoreInfo(
        space=space,
        mode=mode.value,
        root=root,
        registry=fingerprint,
        author=key.author,
        creator=creator,
    )
