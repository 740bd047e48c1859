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
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

from registry import DEFAULT_REGISTRY, Registry
from registry.error import InputError
from registry.value import Value
from statefuse.materializer import Materializer
from statefuse.op import (
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Op,
    sealed_encoding,
)
from statefuse.opset import OpSet
from statefuse.state import ConflictSet, State
from statefuse.store import MemoryStore, QuarantineRecord, Store, StoreError, StoreInfo, StoreWrite
from statefuse.view import SurfacedConflict
from statefuse.writer import Writer
from sync.change import (
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    UnverifiedChange,
    VerifiedChange,
    change_body,
    change_id_of,
    signed_message,
    wire,
)
from sync.changelog import ChangeLog, Ignored, Status
from sync.key import SigningKey
from sync.quarantine import QuarantineEntry
from sync.reconcile import Reconciler
from sync.snapshot import (
    Identity,
    Load,
    Restored,
    SnapshotError,
    SnapshotWarning,
    encode_snapshot,
    open_snapshot,
)
from sync.trust import TRUST_OP_TYPES, TrustMode, TrustOp, TrustState, TrustWriter

Observer = Callable[[tuple[Op, ...]], object]

#: `Replica.close` saves a snapshot when the accepted changes it would not cover number at least
#: this fraction (1/N) of those it covers: replaying a few changes at the next open is cheaper
#: than rewriting a large snapshot on every close.
CLOSE_SNAPSHOT_SHARE = 64


class ReplicaError(InputError, ValueError):
    """A replica asked to do something its rules forbid (e.g. trust ops from a non-root key)."""


@dataclass(frozen=True, slots=True)
class MergeReport:
    """What one receive, merge or import did, counted by outcome."""

    accepted: int = 0
    duplicate: int = 0
    pending: int = 0
    quarantined: int = 0
    new_ops: int = 0

    def __add__(self, other: MergeReport) -> MergeReport:
        return MergeReport(
            self.accepted + other.accepted,
            self.duplicate + other.duplicate,
            self.pending + other.pending,
            self.quarantined + other.quarantined,
            self.new_ops + other.new_ops,
        )


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def key_path(path: str | os.PathLike[str]) -> Path:
    """Where a store's author key lives: next to it, ``<store>.key`` (mode 0600)."""
    return Path(str(path) + ".key")


class Replica:
    """One author's memory on one store. Not thread-safe: use one replica per thread, or a lock.

    Open one with `Replica.open` (SQLite, durable) or `Replica.memory` (in memory).
    """

    def __init__(
        self,
        store: Store,
        key: SigningKey,
        *,
        registry: Registry = DEFAULT_REGISTRY,
        clock: Callable[[], int] = _wall_ms,
        path: Path | None = None,
        load: Load | str = Load.SNAPSHOT,
    ) -> None:
        try:
            load = Load(load)
        except ValueError:
            raise ReplicaError(
                "load", "load-mode", f"load is 'snapshot' or 'verify', not {load!r}"
            ) from None
        info = store.info()
        if info is None:
            raise StoreError("store", "initialized", "initialize the store before opening it")
        if info.registry and info.registry != registry.fingerprint:
            raise StoreError(
                "registry",
                "registry-fingerprint",
                "the store was written under another predicate registry"
                f" ({info.registry.hex()[:16]}…, this one is {registry.fingerprint.hex()[:16]}…)",
            )
        self.store = store
        self.key = key
        self.registry = registry
        self.path = path
        self.space = info.space
        self.mode = TrustMode(info.mode)
        self.root = info.root
        self._clock = clock
        self._observers: list[Observer] = []
        #: Ops written inside `batch()`, each with its encoding.
        self._batch: list[tuple[Op, bytes]] | None = None
        self._closed = False
        self._reconciler: tuple[int, Reconciler] | None = None
        self._load_mode = load
        #: How many accepted changes the last open (or reload) restored from a snapshot
        #: instead of verifying them again (0: none).
        self.restored = 0
        self._load()

    # --- opening ---------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        space: str | None = None,
        registry: Registry = DEFAULT_REGISTRY,
        key: SigningKey | None = None,
        mode: TrustMode | str = TrustMode.OPEN,
        root: bytes | None = None,
        create: bool = True,
        wait: float = 0.0,
        clock: Callable[[], int] = _wall_ms,
        load: Load | str = Load.SNAPSHOT,
    ) -> Replica:
        """Open (or create) the SQLite replica at ``path``.

        A new store needs ``space``; its author key is generated (or ``key`` is used) and saved
        to ``<path>.key`` with mode 0600. An existing store refuses another ``space`` and a
        different registry. ``mode="closed"`` admits only authors the root admits; the root
        defaults to this replica's own key. Raises StoreError when the store is locked by a live
        writer (unless it frees up within ``wait`` seconds).

        ``load="verify"`` ignores the store's snapshot and verifies every stored change again;
        by default the changes a valid snapshot covers are restored from it (`sync.snapshot`).
        """
        from statefuse.sqlitestore import SQLiteStore

        path = Path(path)
        kpath = key_path(path)
        existed = path.exists()
        if not existed and not create:
            raise StoreError("path", "exists", f"no store at {path}")
        if not existed and space is None:
            raise StoreError("space", "required", "a new store needs a space name")
        store = SQLiteStore(path, wait=wait)
        try:
            info = store.info()
            if info is None:
                if space is None:
                    raise StoreError("space", "required", "a new store needs a space name")
                key = key or (SigningKey.load(kpath) if kpath.exists() else SigningKey.generate())
                if not kpath.exists():
                    key.save(kpath)
                store.initialize(_new_info(space, registry, key, mode, root))
            else:
                if space is not None and space != info.space:
                    raise StoreError(
                        "space",
                        "same-space",
                        f"{path} holds space {info.space!r}, not {space!r}",
                    )
                if key is None:
                    if not kpath.exists():
                        raise StoreError(
                            "key", "exists", f"no author key at {kpath} (pass key= to use one)"
                        )
                    key = SigningKey.load(kpath)
            return cls(store, key, registry=registry, clock=clock, path=path, load=load)
        except BaseException:
            store.close()
            raise

    @classmethod
    def memory(
        cls,
        *,
        space: str,
        registry: Registry = DEFAULT_REGISTRY,
        key: SigningKey | None = None,
        mode: TrustMode | str = TrustMode.OPEN,
        root: bytes | None = None,
        clock: Callable[[], int] = _wall_ms,
    ) -> Replica:
        """A replica in memory: same rules and verification, nothing on disk."""
        key = key or SigningKey.generate()
        store = MemoryStore()
        store.initialize(_new_info(space, registry, key, mode, root))
        return cls(store, key, registry=registry, clock=clock)

    def fork(self, path: str | os.PathLike[str] | None = None) -> Replica:
        """A branch: a new author key and a copy of this replica's changes (accepted and
        pending), in a new store at ``path`` (or in memory when ``path`` is None)."""
        self._check_open()
        info = self.store.info()
        assert info is not None
        if path is None:
            child = Replica.memory(
                space=self.space,
                registry=self.registry,
                mode=self.mode,
                root=info.root,
                clock=self._clock,
            )
        else:
            if Path(path).exists():
                raise StoreError("path", "new", f"{path} already exists; fork into a new path")
            from statefuse.sqlitestore import SQLiteStore

            key = SigningKey.generate()
            key.save(key_path(path))
            store = SQLiteStore(path)
            store.initialize(info)
            child = Replica(store, key, registry=self.registry, clock=self._clock, path=Path(path))
        child.merge(self)
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
        self.log = ChangeLog(self.space, root=self.root, mode=self.mode)
        self._reconciler = None
        now = self._clock()
        restored = self._restore() if self._load_mode is Load.SNAPSHOT else None
        upto = 0
        if restored is not None:
            snap, upto = restored
            for c in snap.changes:
                self.log.receive_verified(c, seen_ms=now)
        for _pos, data in self.store.accepted(upto):
            self.log.receive(data, seen_ms=now)
        for data in self.store.pending():
            self.log.receive(data, seen_ms=now)
        self.restored = self._snap_count = 0 if restored is None else len(restored[0].changes)
        self._by_seq: dict[tuple[bytes, int], bytes] = {}
        self._head: tuple[int, bytes | None] = (0, None)
        for c in self.log.changes():
            self._by_seq.setdefault((c.author, c.seq), c.change_id)
            if c.author == self.key.author and c.seq > self._head[0]:
                self._head = (c.seq, c.change_id)
        self.writer = Writer(self.key.author, registry=self.registry, clock=self._clock)
        self.trust_writer = TrustWriter(self.key.author)
        self._mat = Materializer(registry=self.registry)
        self._counted: set[bytes] = set()
        rest = self.log.changes()
        if restored is not None:
            covered = {c.change_id for c in restored[0].changes}
            rest = [c for c in rest if c.change_id not in covered]
            self._from_snapshot(restored[0])
        self._recount()
        for c in rest:
            self.writer.observe(op for op in c.ops if not isinstance(op, TRUST_OP_TYPES))
            if c.author == self.key.author:
                for op in c.ops:
                    if isinstance(op, TRUST_OP_TYPES):
                        self._observe_trust(op.lamport)

    def _observe_trust(self, lamport: int) -> None:
        if lamport > self.trust_writer._lamport:
            self.trust_writer._lamport = lamport

    def _identity(self) -> Identity:
        return Identity(
            self.space, self.key.author, self.registry.fingerprint, self.mode.value, self.root
        )

    def _restore(self) -> tuple[Restored, int] | None:
        """The changes of the store's snapshot and the position it covers, or None (no
        snapshot, or one that does not check out: then a SnapshotWarning says why)."""
        found = self.store.load_snapshot()
        if found is None:
            return None
        upto, blob = found
        try:
            snap = open_snapshot(blob, key=self.key, identity=self._identity(), upto=upto)
            datas = []
            for pos, data in self.store.accepted():
                if pos > upto:
                    break
                datas.append(data)
            return snap.restore(self.space, datas), upto
        except SnapshotError as exc:
            rule, why = exc.rule, exc.message
        except Exception as exc:  # a cache must never stop a store from opening
            rule, why = "snapshot-format", repr(exc)
        warnings.warn(
            SnapshotWarning(rule, f"snapshot ignored, every stored change verified again: {why}"),
            stacklevel=_caller_level(),
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
        by_type = snap.by_type
        if len(counted) != len(snap.changes):
            by_type = {t: [] for t in by_type}
            for c in counted:
                for op in c.ops:
                    group = by_type.get(type(op))
                    if group is not None:
                        group.append(op)
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
        self._counted = {c.change_id for c in counted}
        lamport = attrgetter("lamport")
        marks: list[Op] = [max(ops, key=lamport) for ops in snap.by_type.values() if ops]
        marks += [
            r
            for r in snap.by_type[ClaimRetracted]
            if isinstance(r, ClaimRetracted) and r.target_claim_ref is not None
        ]
        marks += [op for op in snap.others if not isinstance(op, TRUST_OP_TYPES)]
        self.writer.observe(marks)
        for op in snap.others:
            if isinstance(op, TRUST_OP_TYPES) and op.author == self.key.author:
                self._observe_trust(op.lamport)

    # --- counting (which accepted changes the state includes) -----------------------------------

    def _recount(self) -> tuple[Op, ...]:
        """Recompute trust verdicts from the whole log; rebuild the state if a change stopped
        counting, else apply the changes that started to. Returns the ops newly applied."""
        self._trust: TrustState = self.log.trust()
        ignored = self.log.verdicts()
        self._cutoff: dict[bytes, int] = {}
        for e in self.log.equivocations():
            self._cutoff[e.author] = min(self._cutoff.get(e.author, e.seq), e.seq)
        counted = {cid for cid in self.log.change_ids() if cid not in ignored}
        if self._counted - counted:
            self._mat = Materializer(self.log.ops(), registry=self.registry)
            self._counted = counted
            return ()
        fresh = sorted(counted - self._counted)
        self._counted = counted
        return self._apply(self.log.get(cid) for cid in fresh)

    def _apply(self, changes: Iterable[VerifiedChange | None]) -> tuple[Op, ...]:
        # A VerifiedChange's ops hashed to their ids when verified or sealed: no re-hash.
        ops = OpSet.of_sealed(
            op
            for c in changes
            if c is not None
            for op in c.ops
            if not isinstance(op, TRUST_OP_TYPES)
        )
        return tuple(self._mat.apply_all(ops)) if len(ops) else ()

    def _admitted(self, admitted: Sequence[VerifiedChange]) -> tuple[Op, ...]:
        """Count newly admitted changes; returns the ops the state gained."""
        recount = False
        for c in admitted:
            first = self._by_seq.setdefault((c.author, c.seq), c.change_id)
            if first != c.change_id:
                recount = True  # equivocation: later changes of this author stop counting
            if c.author == self.root and any(isinstance(op, TRUST_OP_TYPES) for op in c.ops):
                recount = True
        if recount:
            return self._recount()
        counting = []
        for c in admitted:
            cut = self._cutoff.get(c.author)
            if (
                (cut is None or c.seq < cut)
                and self._trust.may_write(c.author)
                and self._trust.counts(c.author, c.seq, c.change_id)
            ):
                self._counted.add(c.change_id)
                counting.append(c)
        return self._apply(counting)

    # --- reading ---------------------------------------------------------------------------------

    @property
    def author(self) -> bytes:
        """This replica's author id (its raw Ed25519 public key)."""
        return self.key.author

    def state(self) -> State:
        """The current memory (an immutable snapshot; later writes do not change it)."""
        self._check_open()
        return self._mat.state()

    def quarantine(self) -> list[QuarantineRecord]:
        """Every refused copy this replica has seen, durable, with its reason."""
        self._check_open()
        return self.store.quarantine()

    def pending(self) -> list[VerifiedChange]:
        """Changes parked until their predecessor arrives."""
        return self.log.pending()

    def verdicts(self) -> dict[bytes, Ignored]:
        """Accepted changes that do not count, and why (equivocation, unknown author, revoked)."""
        return self.log.verdicts()

    def trust(self) -> TrustState:
        return self._trust

    def change_ids(self) -> list[bytes]:
        """Sorted ids of accepted changes (what reconciliation compares)."""
        return self.log.change_ids()

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

    def change_bytes(self, ids: Iterable[bytes]) -> list[bytes]:
        """Wire bytes of the accepted changes named (unknown ids are skipped)."""
        out = []
        for cid in ids:
            c = self.log.get(cid)
            if c is not None:
                out.append(c.data)
        return out

    def all_change_bytes(self) -> list[bytes]:
        """Every accepted and pending change, predecessors first (what a copy needs)."""
        accepted = sorted(self.log.changes(), key=lambda c: (c.author, c.seq, c.change_id))
        return [c.data for c in accepted] + [c.data for c in self.log.pending()]

    def __len__(self) -> int:
        return len(self.log)

    # --- writing ---------------------------------------------------------------------------------

    def _emit(self, op: Any) -> Any:
        pair = (op, sealed_encoding(op))
        if self._batch is not None:
            self._batch.append(pair)
        else:
            self._commit([pair])
        return op

    def add_evidence(self, source: str, content: Value = None) -> EvidenceAdded:
        """Record evidence; cite it from claims by its ``evidence_id``."""
        self._check_open()
        op: EvidenceAdded = self._emit(self.writer.evidence(source, content))
        return op

    def add_claim(
        self, namespace: str, subject: str, predicate: str, value: Value, **meta: Any
    ) -> ClaimAdded:
        """Assert a value; ``meta`` takes the claim metadata `Writer.claim` takes (scope,
        confidence, evidence, provenance, authority, layer, visibility, constraint, depends_on,
        expires, kind)."""
        self._check_open()
        op: ClaimAdded = self._emit(self.writer.claim(namespace, subject, predicate, value, **meta))
        return op

    def add_identity(self, subject: str, predicate: str, value: Value, **meta: Any) -> ClaimAdded:
        """A claim in the identity layer (who is asking, role, authority): `Writer.identity`."""
        return self._layered(self.writer.identity(subject, predicate, value, **meta))

    def add_constraint(
        self, namespace: str, subject: str, predicate: str, value: Value, **meta: Any
    ) -> ClaimAdded:
        """A constraint (budget, deadline, policy, capacity…): `Writer.constraint`."""
        return self._layered(self.writer.constraint(namespace, subject, predicate, value, **meta))

    def add_turn(self, speaker: str, text: str, *, session: str, **meta: Any) -> ClaimAdded:
        """A conversation turn in the working set of ``session``: `Writer.add_turn`."""
        return self._layered(self.writer.add_turn(speaker, text, session=session, **meta))

    def add_signal(
        self, subject: str, predicate: str, value: Value, *, expires: int | None, **meta: Any
    ) -> ClaimAdded:
        """An environment signal that expires: `Writer.signal`."""
        return self._layered(self.writer.signal(subject, predicate, value, expires=expires, **meta))

    def add_question(
        self, namespace: str, subject: str, predicate: str, text: str, **meta: Any
    ) -> ClaimAdded:
        """An open question about a key (a known unknown until answered): `Writer.question`."""
        return self._layered(self.writer.question(namespace, subject, predicate, text, **meta))

    def _layered(self, op: ClaimAdded) -> ClaimAdded:
        self._check_open()
        emitted: ClaimAdded = self._emit(op)
        return emitted

    def retract(
        self,
        claim: bytes | ClaimAdded | None = None,
        *,
        claim_ref: bytes | None = None,
        reason: str = "",
        superseded_by: bytes | None = None,
    ) -> ClaimRetracted:
        """Retract one claim exactly (``claim``: its id or the claim) or, with ``claim_ref``,
        every claim with that semantic ref, including copies that arrive later."""
        self._check_open()
        claim_id = claim.claim_id if isinstance(claim, ClaimAdded) else claim
        op: ClaimRetracted = self._emit(
            self.writer.retract(
                claim_id=claim_id, claim_ref=claim_ref, reason=reason, superseded_by=superseded_by
            )
        )
        return op

    def supersede(
        self, old: bytes | ClaimAdded, new_value: Value, reason: str = ""
    ) -> tuple[ClaimAdded, ClaimRetracted]:
        """Replace a claim: a new claim (same key and metadata, new value) plus an exact
        retraction of the old one naming the new one in ``superseded_by``, in one change."""
        self._check_open()
        if not isinstance(old, ClaimAdded):
            found = self._mat.state().claims.get(old) if isinstance(old, bytes) else None
            if found is None:
                raise ReplicaError("old", "known-claim", "supersede needs a claim this replica has")
            old = found
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
            )
            retraction = self.retract(old, reason=reason, superseded_by=new.claim_id)
        return new, retraction

    def decide(
        self,
        conflict: ConflictSet | SurfacedConflict,
        claim_id: bytes,
        *,
        scope: str = "global",
        reason: str = "",
        payload: Value = None,
    ) -> DecisionAdded:
        """Decide a conflict for one of its candidates (applies while the conflict is current)."""
        self._check_open()
        op: DecisionAdded = self._emit(
            self.writer.decide_on(conflict, claim_id, scope=scope, reason=reason, payload=payload)
        )
        return op

    @contextlib.contextmanager
    def batch(self) -> Iterator[Replica]:
        """Everything written inside becomes one signed change, stored atomically on exit
        (nothing is stored if the block raises). Batches nest into the outermost one."""
        self._check_open()
        if self._batch is not None:
            yield self
            return
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
        if self.root != self.key.author:
            raise ReplicaError("key", "root-only", "only the space's root key signs trust ops")
        emitted: TrustOp = self._emit(op)
        return emitted

    def admit(self, author: bytes, roles: Iterable[str] = ()) -> TrustOp:
        """Admit an author (closed mode), with roles."""
        return self._trust_op(self.trust_writer.admit(author, roles))

    def revoke(
        self,
        author: bytes,
        *,
        through_seq: int,
        through_change: bytes | None = None,
        reason: str = "",
    ) -> TrustOp:
        """Revoke an author: its changes after ``through_seq`` stop counting everywhere."""
        return self._trust_op(
            self.trust_writer.revoke(
                author, through_seq=through_seq, through_change=through_change, reason=reason
            )
        )

    def grant(self, author: bytes, roles: Iterable[str]) -> TrustOp:
        return self._trust_op(self.trust_writer.grant(author, roles))

    def withdraw(self, author: bytes, roles: Iterable[str]) -> TrustOp:
        return self._trust_op(self.trust_writer.withdraw(author, roles))

    def last_change(self, author: bytes) -> tuple[int, bytes | None]:
        """``(seq, change_id)`` of an author's latest accepted change (``(0, None)`` if none):
        what a revocation names as the last change that stays valid."""
        best: tuple[int, bytes | None] = (0, None)
        for (a, seq), cid in self._by_seq.items():
            if a == author and seq > best[0]:
                best = (seq, cid)
        return best

    def _commit(self, written: list[tuple[Op, bytes]]) -> None:
        seq, prev = self._head
        changes = []
        for ops, datas in _chunks(written):
            seq += 1
            c = self._sign(seq, prev, ops, datas)
            changes.append(c)
            prev = c.change_id
        try:
            self.store.write(StoreWrite(accepted=tuple((c.change_id, c.data) for c in changes)))
        except BaseException:
            self._reload()
            raise
        self._head = (seq, prev)
        now = self._clock()
        admitted: list[VerifiedChange] = []
        for c in changes:
            admitted.extend(self.log.receive_verified(c, seen_ms=now).admitted)
        self._notify(self._admitted(admitted))

    def _sign(
        self, seq: int, prev: bytes | None, ops: Sequence[Op], datas: Sequence[bytes]
    ) -> VerifiedChange:
        """Sign our own ops as a change. The writer built and checked every op, and `_chunks`
        keeps the change within the limits peers apply, so it is not decoded back again (what
        `sign_change` does for ops of unknown origin); `verify` re-checks stored changes."""
        registry = self.registry.fingerprint
        body = change_body(
            space=self.space,
            author=self.author,
            seq=seq,
            prev=prev,
            registry=registry,
            ops=ops,
            datas=datas,
        )
        cid = change_id_of(body)
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
            wire(body, signature),
        )

    # --- receiving -------------------------------------------------------------------------------

    def receive(self, changes: Iterable[bytes | UnverifiedChange]) -> MergeReport:
        """Verify and take in changes from outside (a peer, a bundle); bad ones are quarantined
        with their reason, ones missing a predecessor are parked. One store transaction."""
        self._check_open()
        now = self._clock()
        accepted: list[VerifiedChange] = []
        pending: list[tuple[bytes, bytes]] = []
        quarantined: list[QuarantineRecord] = []
        counts = {s: 0 for s in Status}
        known = len(self.log.quarantine)
        seen_keys = {e.key for e in self.log.quarantine} if known else set()
        for raw in changes:
            r = self.log.receive(raw, seen_ms=now)
            counts[r.status] += 1
            if r.status is Status.ACCEPTED:
                accepted.extend(r.admitted)
            elif r.status is Status.PENDING:
                assert r.change_id is not None
                data = raw.data if isinstance(raw, UnverifiedChange) else bytes(raw)
                pending.append((r.change_id, data))
            elif r.status is Status.QUARANTINED and len(self.log.quarantine) == known:
                # the same bytes refused again: count the sighting
                data = raw.data if isinstance(raw, UnverifiedChange) else bytes(raw)
                entry = self.log.quarantine.get(UnverifiedChange(data).key)
                if entry is not None:
                    quarantined.append(_record(entry, now))
            if len(self.log.quarantine) != known:
                # new refusals: this change, or a parked successor whose link broke
                for e in self.log.quarantine:
                    if e.key not in seen_keys:
                        seen_keys.add(e.key)
                        quarantined.append(_record(e, now))
                known = len(self.log.quarantine)
        seen_keys = {e.key for e in self.log.quarantine} if known else set()
        admitted_ids = {c.change_id for c in accepted}
        batch = StoreWrite(
            accepted=tuple((c.change_id, c.data) for c in accepted),
            pending=tuple(p for p in pending if p[0] not in admitted_ids),
            quarantined=tuple(quarantined),
        )
        try:
            self.store.write(batch)
        except BaseException:
            self._reload()
            raise
        new_ops = self._admitted(accepted)
        self._notify(new_ops)
        return MergeReport(
            accepted=len(accepted),
            duplicate=counts[Status.DUPLICATE],
            pending=len(batch.pending),
            quarantined=len(quarantined),
            new_ops=len(new_ops),
        )

    def merge(self, other: Replica) -> MergeReport:
        """Take in every change ``other`` has that this replica lacks (one way; merge both ways
        for a full sync), through the same verification as network data."""
        self._check_open()
        other._check_open()
        mine = self.log
        theirs = sorted(other.log.changes(), key=lambda c: (c.author, c.seq, c.change_id))
        theirs += other.log.pending()
        return self.receive([c.data for c in theirs if c.change_id not in mine])

    # --- bundles ---------------------------------------------------------------------------------

    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every accepted and pending change to a bundle file; returns how many."""
        from sync.bundle import write_bundle

        self._check_open()
        changes = self.all_change_bytes()
        write_bundle(path, self.key, self.space, changes)
        return len(changes)

    def import_(
        self, path: str | os.PathLike[str], *, progress: Callable[[int, int], object] | None = None
    ) -> MergeReport:
        """Verify and take in the changes of a bundle file (see `sync.bundle`)."""
        from sync.bundle import read_bundle

        self._check_open()
        changes = read_bundle(path, space=self.space)
        report = MergeReport()
        step = 256
        for start in range(0, len(changes), step):
            report = report + self.receive(changes[start : start + step])
            if progress is not None:
                progress(min(start + step, len(changes)), len(changes))
        return report

    # --- observers and lifetime ------------------------------------------------------------------

    def observe(self, callback: Observer) -> Callable[[], None]:
        """Call ``callback(ops)`` with the ops the state gains after each write or receive.
        Returns a function that stops the calls."""
        self._observers.append(callback)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                self._observers.remove(callback)

        return stop

    def _notify(self, ops: tuple[Op, ...]) -> None:
        if ops:
            for callback in list(self._observers):
                callback(ops)

    def _reload(self) -> None:
        with contextlib.suppress(Exception):
            self._load()

    def _check_open(self) -> None:
        if self._closed:
            raise ReplicaError("replica", "open", "the replica is closed")

    def snapshot(self) -> int:
        """Save a snapshot of the accepted changes now, so the next open restores them instead
        of verifying them again; returns how many changes it covers. Only a cache: the changes
        themselves are already durable, and `close` saves one when enough is new.

        Raises SnapshotError (rule ``snapshot-covers``) if a stored change is not in the log
        (one that failed verification on reload), and what the store raises on a failed write.
        """
        self._check_open()
        rows = list(self.store.accepted_ids())
        changes = [self.log.get(cid) for _, cid in rows]
        covered = [c for c in changes if c is not None]
        if len(covered) != len(rows):
            raise SnapshotError("snapshot-covers", "a stored change is not accepted on reload")
        upto = rows[-1][0] if rows else 0
        collecting = gc.isenabled()
        gc.disable()  # many new lists, none of them garbage until the blob is built
        try:
            blob = encode_snapshot(covered, key=self.key, identity=self._identity(), upto=upto)
        finally:
            if collecting:
                gc.enable()
        self.store.save_snapshot(upto, blob)
        self._snap_count = len(covered)
        return len(covered)

    def _snapshot_due(self) -> bool:
        new = len(self.log) - self._snap_count
        return new > 0 and new * CLOSE_SNAPSHOT_SHARE >= self._snap_count

    def close(self) -> None:
        """Close the store (saving a snapshot first when enough changed: `CLOSE_SNAPSHOT_SHARE`).
        A snapshot that cannot be saved is reported as a SnapshotWarning, never raised."""
        if not self._closed:
            try:
                if self.path is not None and self._snapshot_due():
                    self.snapshot()
            except SnapshotError:
                pass  # a store with changes that fail on reload: `statefuse verify` says which
            except Exception as exc:  # a cache must never stop a close
                warnings.warn(
                    SnapshotWarning("snapshot-save", f"snapshot not saved: {exc!r}"),
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
        return f"Replica({self.space!r}, author={who}…, {where}, {len(self)} changes)"


#: Room left in a change for everything but the ops' bytes (keys, ids, framing, signature).
_CHANGE_OVERHEAD = 4096


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


def _new_info(
    space: str, registry: Registry, key: SigningKey, mode: TrustMode | str, root: bytes | None
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
    return StoreInfo(space=space, mode=mode.value, root=root, registry=registry.fingerprint)
