"""The derived state kept in the store: the materialized index as SQL tables (`StoreIndex`).

Why: a process that opens a large store should not replay its whole history to answer one
question. The tables below hold, for the *counted* ops of a space, what `statefuse.core.index.Index`
holds in RAM (which claims are active, retractions by target, conflict loci, decisions, the
evidence claims cite) plus a full-text index of the active claims, kept current by whoever
writes, inside the writer's own transaction.

Invariant: after `StoreIndex.rebuild` of an op-set, or `StoreIndex.apply` of the same ops in any
batches, orders and with duplicates, the tables are one function of the set of ops and the
registry, and `StoreIndex.state_of` of any loci equals `materialize` of every op on those loci
(SEMANTICS §4–§6): that is the definition, and the tests check it.

Why a slice is exact: a claim's ref hashes its locus (namespace, subject, predicate, scope), so
every retraction belongs to the locus of its target (by id or ref), a decision names its locus,
and staleness follows ``depends_on`` across loci, which `state_of` closes over transitively.

Activity only ever goes from active to retracted as ops are added (a retraction never revives a
claim), so `apply` touches only the new rows and the claims a new retraction names; each changed
locus has its conflict row worked out again from its active claims' value groups.

Layout (prefix ``ix_``): every op row keeps the op's canonical bytes (``data``), decoded only when
a slice is read, with no signature work (ops were verified on ingest). The SQL lives in this
module only, written portably where it can be (``ON CONFLICT``, no ``WITHOUT ROWID``); the
full-text part is SQLite's FTS5 (BM25 in C), an external-content table over ``ix_claim.words``
holding rows of active claims only. Nothing here commits: callers own transactions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from statefuse.core.index import Index
from statefuse.core.materializer import Materializer
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Layer, Op
from statefuse.core.op import decode_ops as _decode_ops
from statefuse.core.state import State, _locus_of_key, group_id_of
from statefuse.core.validity import has_conflict
from statefuse.reading.ranker import _doc_words, words
from statefuse.registry import Registry
from statefuse.storage.storeerror import StoreError

#: Bytes every encoded claim with an interval or a context holds (the key of a field only
#: ClaimAdded versions 3 and 4 carry): a claim without them may hold them too, inside a value,
#: so this only picks the loci worth decoding.
_SITUATED_MARK = b"\xaavalid_from"
#: Ops read from the caller's iterable per step of `StoreIndex.rebuild` (and per progress call).
REBUILD_CHUNK = 5_000
#: Most parameters one statement binds (well under every SQLite build's limit, and PostgreSQL's).
_CHUNK = 500
#: Active claims from which a search leaves out the words more than half of them hold.
COMMON_FROM = 1_000
#: Most claims the rarer words of a context's query may match together (`StoreIndex._bounded`).
MATCH_BUDGET = 1_000
#: Most claims a word's count is read up to by matching it (`StoreIndex._frequencies`); past
#: that FTS5's vocabulary counts faster.
COUNT_MOST = 16_384
#: Context tokens per locus `StoreIndex.context_loci` reckons with when it sizes its lists.
TOKENS_PER_LOCUS = 16

#: The tables, each statement on its own (schema 6 of the SQLite store creates them empty).
TABLES: tuple[str, ...] = (
    "CREATE TABLE ix_claim ("
    " n INTEGER PRIMARY KEY,"
    " claim_id BLOB NOT NULL UNIQUE,"
    " locus BLOB NOT NULL,"
    " ref BLOB NOT NULL,"
    " grp BLOB NOT NULL,"
    " namespace TEXT NOT NULL,"
    " subject TEXT NOT NULL,"
    " predicate TEXT NOT NULL,"
    " scope TEXT NOT NULL,"
    " layer TEXT NOT NULL,"
    " constraint_kind TEXT NOT NULL,"
    " kind TEXT NOT NULL,"
    " lamport INTEGER NOT NULL,"
    " active INTEGER NOT NULL,"
    " words TEXT NOT NULL,"
    " data BLOB NOT NULL)",
    "CREATE INDEX ix_claim_locus ON ix_claim (locus, active)",
    "CREATE INDEX ix_claim_ref ON ix_claim (ref)",
    "CREATE INDEX ix_claim_recent ON ix_claim (lamport, claim_id) WHERE active = 1",
    # the claims a context shows whatever the query (`_PINNED` must repeat this condition)
    "CREATE INDEX ix_claim_pinned ON ix_claim (namespace, subject, predicate, scope)"
    " WHERE active = 1 AND (layer = 'identity' OR kind = 'constraint' OR constraint_kind <> '')",
    # one row per locus ever claimed: the key order of loci without a key index on every claim.
    # Keyed by the key alone: a locus is found by its hash through ix_claim_locus, so a new
    # locus costs no insert at a random place of a hash-ordered tree
    "CREATE TABLE ix_locus ("
    " locus BLOB NOT NULL,"
    " namespace TEXT NOT NULL,"
    " subject TEXT NOT NULL,"
    " predicate TEXT NOT NULL,"
    " scope TEXT NOT NULL,"
    " UNIQUE (namespace, subject, predicate, scope))",
    # the ref retractions a claim re-asserts past (most claims have none)
    "CREATE TABLE ix_reassert ("
    " claim_id BLOB NOT NULL,"
    " retraction_id BLOB NOT NULL,"
    " PRIMARY KEY (claim_id, retraction_id))",
    "CREATE TABLE ix_retraction ("
    " n INTEGER PRIMARY KEY,"
    " op_id BLOB NOT NULL UNIQUE,"
    " target_id BLOB,"
    " target_ref BLOB,"
    " lamport INTEGER NOT NULL,"
    " data BLOB NOT NULL)",
    "CREATE INDEX ix_retraction_id ON ix_retraction (target_id)",
    "CREATE INDEX ix_retraction_ref ON ix_retraction (target_ref)",
    "CREATE TABLE ix_decision ("
    " n INTEGER PRIMARY KEY,"
    " op_id BLOB NOT NULL UNIQUE,"
    " locus BLOB NOT NULL,"
    " data BLOB NOT NULL)",
    "CREATE INDEX ix_decision_locus ON ix_decision (locus)",
    "CREATE TABLE ix_evidence (op_id BLOB PRIMARY KEY, data BLOB NOT NULL)",
    "CREATE TABLE ix_conflict ("
    " locus BLOB PRIMARY KEY,"
    " namespace TEXT NOT NULL,"
    " subject TEXT NOT NULL,"
    " predicate TEXT NOT NULL,"
    " scope TEXT NOT NULL)",
    "CREATE INDEX ix_conflict_key ON ix_conflict (namespace, subject, predicate, scope)",
    # SQLite only: BM25 over the words of active claims, rowid = ix_claim.n
    "CREATE VIRTUAL TABLE ix_text USING fts5("
    "words, content='ix_claim', content_rowid='n', tokenize='unicode61 remove_diacritics 0')",
    "CREATE TABLE ix_meta (key TEXT PRIMARY KEY, value)",
)

_DATA_TABLES = (
    "ix_claim",
    "ix_locus",
    "ix_reassert",
    "ix_retraction",
    "ix_decision",
    "ix_evidence",
)

_INSERT_CLAIM = (
    "INSERT INTO ix_claim (n, claim_id, locus, ref, grp, namespace, subject, predicate, scope,"
    " layer, constraint_kind, kind, lamport, active, words, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_LOCUS = (
    "INSERT INTO ix_locus (locus, namespace, subject, predicate, scope)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_REASSERT = (
    "INSERT INTO ix_reassert (claim_id, retraction_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_RETRACTION = (
    "INSERT INTO ix_retraction (op_id, target_id, target_ref, lamport, data)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_DECISION = (
    "INSERT INTO ix_decision (op_id, locus, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"
)
_INSERT_EVIDENCE = "INSERT INTO ix_evidence (op_id, data) VALUES (?, ?) ON CONFLICT DO NOTHING"
_INSERT_CONFLICT = (
    "INSERT INTO ix_conflict (locus, namespace, subject, predicate, scope)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
_SET_META = (
    "INSERT INTO ix_meta (key, value) VALUES (?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
# what `StoreIndex.apply` checks and moves, in one read
_APPLY_META = (
    "SELECT key, value FROM ix_meta WHERE key IN ('upto', 'registry', 'lamport', 'active')"
)
# whether any retraction is held (a store of claims alone never looks one up)
_ANY_RETRACTION = "SELECT 1 FROM ix_retraction LIMIT 1"
_TEXT_ADD = "INSERT INTO ix_text (rowid, words) VALUES (?, ?)"
_TEXT_REMOVE = "INSERT INTO ix_text (ix_text, rowid, words) VALUES ('delete', ?, ?)"
_CHANGED_COLUMNS = "n, locus, namespace, subject, predicate, scope, words"
# the claims a new ref retraction retracts: active, with its ref, not re-asserting past it
_KILLED_BY_REF = (
    f"SELECT {_CHANGED_COLUMNS} FROM ix_claim c WHERE c.ref = ? AND c.active = 1"
    " AND NOT EXISTS (SELECT 1 FROM ix_reassert x"
    " WHERE x.claim_id = c.claim_id AND x.retraction_id = ?)"
)
# every claim a stored ref retraction retracts (set-based, for `rebuild`)
_DEACTIVATE_BY_ID = (
    "UPDATE ix_claim SET active = 0 WHERE active = 1 AND claim_id IN"
    " (SELECT target_id FROM ix_retraction WHERE target_id IS NOT NULL)"
)
_DEACTIVATE_BY_REF = (
    "UPDATE ix_claim SET active = 0 WHERE active = 1 AND EXISTS (SELECT 1 FROM ix_retraction r"
    " WHERE r.target_ref = ix_claim.ref AND NOT EXISTS (SELECT 1 FROM ix_reassert x"
    " WHERE x.claim_id = ix_claim.claim_id AND x.retraction_id = r.op_id))"
)
_PINNED = (
    "SELECT DISTINCT locus, namespace, subject, predicate, scope FROM ix_claim"
    " WHERE active = 1 AND (layer = 'identity' OR kind = 'constraint' OR constraint_kind <> '')"
    " ORDER BY namespace, subject, predicate, scope"
)
# the best-ranked matches, at most ? of them (their order among equal scores is settled by
# claim id in Python, `StoreIndex._ranked`)
_MATCHES = (
    "SELECT rowid, bm25(ix_text) AS score FROM ix_text WHERE ix_text MATCH ? ORDER BY score LIMIT ?"
)
# the first ? matches scoring exactly ? by claim id (the ties at the cut of `_MATCHES`)
_TIES = (
    "SELECT t.rowid, t.score FROM (SELECT rowid, bm25(ix_text) AS score FROM ix_text"
    " WHERE ix_text MATCH ?) t JOIN ix_claim c ON c.n = t.rowid WHERE t.score = ?"
    " ORDER BY c.claim_id LIMIT ?"
)
# every match's locus in (score, claim id) order (for expressions known to match few claims)
_RANKED_FEW = (
    "SELECT c.locus FROM ix_text JOIN ix_claim c ON c.n = ix_text.rowid"
    " WHERE ix_text MATCH ? ORDER BY bm25(ix_text), c.claim_id"
)
# the loci of two matches, any two (FTS5 scores nothing without bm25())
_FIRST_TWO = (
    "SELECT c.locus FROM (SELECT rowid FROM ix_text WHERE ix_text MATCH ? LIMIT 2) t"
    " JOIN ix_claim c ON c.n = t.rowid"
)
# how many claims match, counting no further than ? (FTS5 stops reading postings there)
_COUNT_UPTO = "SELECT count(*) FROM (SELECT 1 FROM ix_text WHERE ix_text MATCH ? LIMIT ?)"
# the matches on loci in conflict, with their scores (at most `MATCH_BUDGET` rows: see
# `StoreIndex.conflict_matches`)
_CONFLICT_MATCHES = (
    "SELECT bm25(ix_text), c.claim_id, c.locus FROM ix_text JOIN ix_claim c ON c.n = ix_text.rowid"
    " WHERE ix_text MATCH ? AND c.locus IN (SELECT locus FROM ix_conflict)"
)
# what `StoreIndex.state_of` reads of a claim
_SLICE = "claim_id, active, data, locus"
_RECENT = "SELECT locus FROM ix_claim WHERE active = 1 ORDER BY lamport DESC, claim_id DESC"


def create_tables(db: sqlite3.Connection) -> None:
    """Create the (empty) tables of the derived state, inside the caller's transaction."""
    for statement in TABLES:
        db.execute(statement)


def drop_tables(db: sqlite3.Connection) -> None:
    """Drop every table of the derived state (whatever layout an earlier schema gave them,
    their indexes and the text index's own tables with them), inside the caller's
    transaction: the derived state is rebuilt from the ops, never carried over."""
    names = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ix\\_%' ESCAPE '\\'"
            " AND sql LIKE 'CREATE VIRTUAL TABLE%'"
        )
    ]
    for name in names:  # first: dropping a virtual table drops its shadow tables
        db.execute(f'DROP TABLE "{name}"')
    names = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ix\\_%' ESCAPE '\\'"
        )
    ]
    for name in names:
        db.execute(f'DROP TABLE "{name}"')


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _decode(datas: Sequence[bytes]) -> list[Op]:
    """Ops from bytes this index stored: they were verified on ingest, so the batch decoder's
    checks of the canonical form are all that runs (no signature, no trust work)."""
    return _decode_ops(datas) if datas else []


#: Most ops an `OpMemo` keeps by default (about 1 KB each: a few MB).
MEMO_OPS = 8_192


class OpMemo:
    """Ops decoded from the derived state's rows, kept by op id for the reads to come.

    Why: an agent step reads about the same slice again after each write (the recent keys,
    the pinned ones), and decoding its ops again is the larger part of reading it. An op id
    is the hash of the op's bytes, so an op kept under its id is the op any later row with
    that id decodes to: keeping one never changes an answer. At most ``max_ops`` are kept;
    when full it forgets everything (the next reads fill it again with what they use)."""

    __slots__ = ("_ops", "max_ops")

    def __init__(self, *, max_ops: int = MEMO_OPS) -> None:
        self.max_ops = max_ops
        self._ops: dict[bytes, Op] = {}

    def __len__(self) -> int:
        return len(self._ops)

    def decode(self, rows: Sequence[tuple[bytes, bytes]]) -> list[Op]:
        """The ops of ``rows`` (op id, canonical bytes), in order: those kept from before,
        the others decoded (`_decode`) and kept under their ids."""
        ops = self._ops
        missing = {oid: data for oid, data in rows if oid not in ops}
        if not missing:
            return [ops[oid] for oid, _ in rows]
        if len(ops) + len(missing) > self.max_ops:
            ops.clear()
            missing = {oid: data for oid, data in rows}
        made = dict(zip(missing, _decode(list(missing.values())), strict=True))
        if len(made) <= self.max_ops:
            ops.update((oid, op) for oid, op in made.items() if op.op_id == oid)
        return [made[oid] if oid in made else ops[oid] for oid, _ in rows]


class _Split:
    """One batch of ops by type, duplicates dropped, and the highest lamport among them."""

    __slots__ = ("claims", "decisions", "evidence", "lamport", "retractions")

    def __init__(self, ops: Iterable[Op]) -> None:
        self.claims: dict[bytes, ClaimAdded] = {}
        self.retractions: dict[bytes, ClaimRetracted] = {}
        self.evidence: dict[bytes, EvidenceAdded] = {}
        self.decisions: dict[bytes, DecisionAdded] = {}
        self.lamport = 0
        lamport = 0
        for op in ops:
            t = type(op)
            if t is ClaimAdded:
                self.claims[op.op_id] = op  # type: ignore[assignment]
            elif t is ClaimRetracted:
                self.retractions[op.op_id] = op  # type: ignore[assignment]
            elif t is EvidenceAdded:
                self.evidence[op.op_id] = op  # type: ignore[assignment]
            elif t is DecisionAdded:
                self.decisions[op.op_id] = op  # type: ignore[assignment]
            else:
                raise TypeError(f"not an op of the materialized memory: {t.__name__}")
            if op.lamport > lamport:
                lamport = op.lamport
        self.lamport = lamport


class StoreIndex:
    """The derived state of one store, on the store's connection (see the module docstring).

    Maintenance (`apply`, `rebuild`, `drop`) runs inside the caller's write transaction; reads
    inside one read transaction of the caller's if they must agree with each other. ``present``
    False: the store's schema has no such tables (a read-only open of an older store): the index
    says it was never built (`upto` None) and refuses every other read.
    """

    __slots__ = ("_db", "_present")

    def __init__(self, db: sqlite3.Connection, *, present: bool = True) -> None:
        self._db = db
        self._present = present

    # --- meta ------------------------------------------------------------------------------------

    def _meta(self, key: str) -> Any:
        if not self._present:
            return None
        row = self._db.execute("SELECT value FROM ix_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _set_meta(self, key: str, value: object) -> None:
        self._db.execute(_SET_META, (key, value))

    def meta(self, key: str) -> bytes | None:
        """A value the replica keeps with the derived state under ``key`` (`set_meta`), or None:
        what the space says of itself (names, the registry declaration) and what a lean write
        needs, so that neither needs the history. Namespaced apart from the index's own."""
        v = self._meta(f"x:{key}")
        return None if v is None else bytes(v)

    def set_meta(self, key: str, value: bytes) -> None:
        """Keep ``value`` under ``key`` (in the caller's write transaction; `drop` forgets it
        with the rest)."""
        self._check_present()
        self._set_meta(f"x:{key}", value)

    @property
    def upto(self) -> int | None:
        """The last store position whose counted ops the tables hold; None: never built (or
        dropped), so nothing may be read from them."""
        v = self._meta("upto")
        return None if v is None else int(v)

    def registry_fingerprint(self) -> bytes | None:
        """The fingerprint of the registry the tables were built under (None: not built)."""
        v = self._meta("registry")
        return None if v is None else bytes(v)

    def lamport(self) -> int:
        """The highest lamport among the ops held (0: none)."""
        v = self._meta("lamport")
        return 0 if v is None else int(v)

    def active_count(self) -> int:
        """How many claims are active."""
        v = self._meta("active")
        return 0 if v is None else int(v)

    def _check_present(self) -> None:
        if not self._present:
            raise StoreError(
                "index",
                "index-not-built",
                "this store's schema predates the derived state; open it writable once to"
                " migrate it",
            )

    # --- maintenance -----------------------------------------------------------------------------

    def apply(self, ops: Iterable[Op], *, upto: int, registry: Registry) -> None:
        """Add counted ops (any order; ops already held are ignored) and move the watermark to
        ``upto``. Raises StoreError ``index-not-built`` before the first `rebuild`,
        ``index-registry`` when ``registry`` is not the one the tables were built under (then
        `rebuild`), ``index-upto`` when ``upto`` goes backwards."""
        self._check_present()
        db = self._db
        meta = dict(db.execute(_APPLY_META))
        held = meta.get("upto")
        if held is None:
            raise StoreError(
                "index", "index-not-built", "the derived state was never built: rebuild it first"
            )
        if upto < int(held):
            raise StoreError(
                "upto", "index-upto", f"the derived state covers position {held}, not {upto}"
            )
        fingerprint = meta.get("registry")
        if fingerprint is None or bytes(fingerprint) != registry.fingerprint:
            raise StoreError(
                "registry",
                "index-registry",
                "the derived state was built under another registry: rebuild it",
            )
        batch = _Split(ops)
        self._drop_held(batch)
        if batch.retractions:
            db.executemany(_INSERT_RETRACTION, map(_retraction_row, batch.retractions.values()))
        grouping = Index(registry)
        touched: dict[bytes, tuple[str, str, str, str]] = {}
        fresh: dict[bytes, set[bytes]] = {}
        delta = 0
        if batch.claims:
            delta += self._add_claims(batch.claims, grouping, touched, fresh)
        if batch.retractions:
            delta -= self._retract(batch.retractions, touched, fresh)
        if batch.decisions:
            db.executemany(_INSERT_DECISION, map(_decision_row, batch.decisions.values()))
        if batch.evidence:
            db.executemany(
                _INSERT_EVIDENCE, ((e.op_id, e.encode()) for e in batch.evidence.values())
            )
        if touched:
            self._judge_conflicts(touched, grouping, fresh)
        moved: list[tuple[str, int]] = []
        if batch.lamport > int(meta.get("lamport") or 0):
            moved.append(("lamport", batch.lamport))
        if delta:
            moved.append(("active", int(meta.get("active") or 0) + delta))
        if upto != int(held):
            moved.append(("upto", upto))
        db.executemany(_SET_META, moved)

    def _drop_held(self, batch: _Split) -> None:
        """Forget the ops of ``batch`` the tables hold already (claims and retractions: what
        changes activity; evidence and decisions are inserted idempotently)."""
        db = self._db
        for table, column, found in (
            ("ix_claim", "claim_id", batch.claims),
            ("ix_retraction", "op_id", batch.retractions),
        ):
            if not found:
                continue
            for part in _chunks(list(found)):
                for (oid,) in db.execute(
                    f"SELECT {column} FROM {table} WHERE {column} IN ({_marks(len(part))})", part
                ):
                    del found[oid]

    def _add_claims(
        self,
        claims: dict[bytes, ClaimAdded],
        grouping: Index,
        touched: dict[bytes, tuple[str, str, str, str]],
        fresh: dict[bytes, set[bytes]],
    ) -> int:
        """Insert new claims, each active unless a held retraction (those of this batch
        included) retracts it; returns how many are active. ``fresh`` gets the loci no claim
        was held on before, each with the group ids of its (new) active claims: their conflict
        rows are judged from these alone (`_judge_conflicts`)."""
        db = self._db
        killed: set[bytes] = set()
        by_ref: dict[bytes, list[bytes]] = {}
        if db.execute(_ANY_RETRACTION).fetchone() is not None:
            for part in _chunks(list(claims)):
                killed.update(
                    r[0]
                    for r in db.execute(
                        "SELECT target_id FROM ix_retraction"
                        f" WHERE target_id IN ({_marks(len(part))})",
                        part,
                    )
                )
            refs = list({c.claim_ref for c in claims.values()})
            for part in _chunks(refs):
                for ref, rid in db.execute(
                    "SELECT target_ref, op_id FROM ix_retraction"
                    f" WHERE target_ref IN ({_marks(len(part))})",
                    part,
                ):
                    by_ref.setdefault(ref, []).append(rid)
        keys: dict[bytes, tuple[str, str, str, str]] = {}
        loci: list[bytes] = []
        for c in claims.values():
            lk = (c.namespace, c.subject, c.predicate, c.scope)
            locus = _locus_of_key(lk)
            keys[locus] = lk
            loci.append(locus)
        new = dict(keys)
        for part in _chunks(list(keys)):
            for (locus,) in db.execute(
                f"SELECT DISTINCT locus FROM ix_claim WHERE locus IN ({_marks(len(part))})", part
            ):
                del new[locus]
        (top,) = db.execute("SELECT coalesce(max(n), 0) FROM ix_claim").fetchone()
        grouping.claims = claims
        rows = []
        text = []
        reasserts: list[tuple[bytes, bytes]] = []
        active_n = 0
        n = int(top)
        for (cid, c), locus in zip(claims.items(), loci, strict=True):
            n += 1
            refs_held = by_ref.get(c.claim_ref) if by_ref else None
            active = cid not in killed and not (
                refs_held and any(r not in c.reasserts for r in refs_held)
            )
            ws = " ".join(_doc_words(c))
            row = _claim_row(n, c, locus, grouping, active, ws)
            rows.append(row)
            if c.reasserts:
                reasserts.extend((cid, r) for r in c.reasserts)
            if active:
                active_n += 1
                text.append((n, ws))
                touched[locus] = keys[locus]
                if locus in new:
                    fresh.setdefault(locus, set()).add(row[4])
        db.executemany(_INSERT_CLAIM, rows)
        if new:
            db.executemany(_INSERT_LOCUS, ((lc, *lk) for lc, lk in new.items()))
        if reasserts:
            db.executemany(_INSERT_REASSERT, reasserts)
        if text:
            db.executemany(_TEXT_ADD, text)
        return active_n

    def _retract(
        self,
        retractions: dict[bytes, ClaimRetracted],
        touched: dict[bytes, tuple[str, str, str, str]],
        fresh: dict[bytes, set[bytes]],
    ) -> int:
        """Retract the held active claims new retractions name; returns how many."""
        db = self._db
        changed: dict[int, tuple[Any, ...]] = {}
        ids = [r.target_claim_id for r in retractions.values() if r.target_claim_id is not None]
        for part in _chunks(ids):
            for row in db.execute(
                f"SELECT {_CHANGED_COLUMNS} FROM ix_claim"
                f" WHERE active = 1 AND claim_id IN ({_marks(len(part))})",
                part,
            ):
                changed[row[0]] = row
        for rid, r in retractions.items():
            if r.target_claim_ref is not None:
                for row in db.execute(_KILLED_BY_REF, (r.target_claim_ref, rid)):
                    changed[row[0]] = row
        if not changed:
            return 0
        db.executemany("UPDATE ix_claim SET active = 0 WHERE n = ?", ((n,) for n in changed))
        db.executemany(_TEXT_REMOVE, ((row[0], row[6]) for row in changed.values()))
        for row in changed.values():
            touched[row[1]] = (row[2], row[3], row[4], row[5])
            fresh.pop(row[1], None)  # judged from the table, not the batch alone
        return len(changed)

    def _judge_conflicts(
        self,
        touched: dict[bytes, tuple[str, str, str, str]],
        grouping: Index,
        fresh: dict[bytes, set[bytes]],
    ) -> None:
        """Make the conflict rows of the touched loci say what their active claims say: more
        than one value group under a functional predicate (SEMANTICS §5). A locus first
        claimed in this batch (``fresh``) holds only the batch's claims and no conflict row
        yet: judged from the group ids at hand, with no read of the tables."""
        db = self._db
        split: set[bytes] = set()
        held: list[bytes] = []
        for lc, lk in touched.items():
            if not grouping.functional(lk[0], lk[2]):
                if lc not in fresh:
                    held.append(lc)
            elif lc in fresh:
                if len(fresh[lc]) > 1:
                    split.add(lc)
            else:
                held.append(lc)
        functional = [lc for lc in held if grouping.functional(touched[lc][0], touched[lc][2])]
        for part in _chunks(functional):
            split.update(
                r[0]
                for r in db.execute(
                    "SELECT locus FROM ix_claim"
                    f" WHERE locus IN ({_marks(len(part))}) AND active = 1"
                    " GROUP BY locus HAVING count(DISTINCT grp) > 1",
                    part,
                )
            )
        split = self._narrowed(split)
        if split:
            db.executemany(_INSERT_CONFLICT, ((lc, *touched[lc]) for lc in split))
        stale: list[bytes] = []
        for part in _chunks([lc for lc in held if lc not in split]):
            stale.extend(
                r[0]
                for r in db.execute(
                    f"SELECT locus FROM ix_conflict WHERE locus IN ({_marks(len(part))})", part
                )
            )
        if stale:
            db.executemany("DELETE FROM ix_conflict WHERE locus = ?", ((lc,) for lc in stale))

    def _narrowed(self, split: set[bytes]) -> set[bytes]:
        """The loci of ``split`` (each with active claims of more than one value group) where
        two active claims conflict by `statefuse.core.validity.has_conflict`, the rule the
        in-memory index applies: claims with an interval or a context conflict only where
        their intervals overlap and their contexts agree. Only loci holding such a claim are
        decoded (they, and only they, encode the key ``valid_from``); the others conflict as
        their value groups say."""
        if not split:
            return split
        db = self._db
        situated: set[bytes] = set()
        for part in _chunks(list(split)):
            situated.update(
                r[0]
                for r in db.execute(
                    "SELECT DISTINCT locus FROM ix_claim"
                    f" WHERE locus IN ({_marks(len(part))}) AND active = 1"
                    " AND instr(data, ?) > 0",
                    (*part, _SITUATED_MARK),
                )
            )
        if not situated:
            return split
        out = split - situated
        by_locus: dict[bytes, list[tuple[bytes, bytes]]] = {}
        for part in _chunks(list(situated)):
            for locus, grp, data in db.execute(
                "SELECT locus, grp, data FROM ix_claim"
                f" WHERE locus IN ({_marks(len(part))}) AND active = 1",
                part,
            ):
                by_locus.setdefault(locus, []).append((grp, data))
        for locus, rows in by_locus.items():
            claims = _decode_ops([data for _, data in rows])
            groups = {c.op_id: grp for c, (grp, _) in zip(claims, rows, strict=True)}
            if has_conflict(claims, groups.__getitem__):  # type: ignore[arg-type]
                out.add(locus)
        return out

    def rebuild(
        self,
        ops: Iterable[Op],
        *,
        upto: int,
        registry: Registry,
        progress: Callable[[int, int], object] | None = None,
        total: int | None = None,
    ) -> None:
        """Forget everything and hold exactly ``ops`` (counted ops, any order, duplicates
        ignored), built under ``registry``, covering store positions up to ``upto``.

        One pass over ``ops``: rows go in by the thousand with every claim active, then
        activity, the text index and the conflict rows are worked out by set-based statements.
        ``progress(done, total)`` is called after each `REBUILD_CHUNK` ops and at the end
        (``total`` as given, 0 when unknown)."""
        self._check_present()
        self._clear()
        db = self._db
        grouping = Index(registry)
        it = iter(ops)
        done = 0
        lamport = 0
        while True:
            chunk = list(islice(it, REBUILD_CHUNK))
            if not chunk:
                break
            batch = _Split(chunk)
            lamport = max(lamport, batch.lamport)
            grouping = Index(registry)  # a fresh memo of group keys per chunk: bounded memory
            grouping.claims = batch.claims
            rows = []
            reasserts: list[tuple[bytes, bytes]] = []
            for c in batch.claims.values():
                lk = (c.namespace, c.subject, c.predicate, c.scope)
                rows.append(
                    _claim_row(None, c, _locus_of_key(lk), grouping, True, " ".join(_doc_words(c)))
                )
                reasserts.extend((c.op_id, r) for r in c.reasserts)
            db.executemany(_INSERT_CLAIM, rows)
            db.executemany(_INSERT_LOCUS, _locus_rows(rows))
            db.executemany(_INSERT_REASSERT, reasserts)
            db.executemany(_INSERT_RETRACTION, map(_retraction_row, batch.retractions.values()))
            db.executemany(_INSERT_DECISION, map(_decision_row, batch.decisions.values()))
            db.executemany(
                _INSERT_EVIDENCE, ((e.op_id, e.encode()) for e in batch.evidence.values())
            )
            done += len(chunk)
            if progress is not None:
                progress(done, total or 0)
        db.execute(_DEACTIVATE_BY_ID)
        db.execute(_DEACTIVATE_BY_REF)
        db.execute(
            "INSERT INTO ix_text (rowid, words) SELECT n, words FROM ix_claim WHERE active = 1"
        )
        conflicts = [
            row
            for row in db.execute(
                "SELECT locus, namespace, subject, predicate, scope FROM ix_claim"
                " WHERE active = 1 GROUP BY locus, namespace, subject, predicate, scope"
                " HAVING count(DISTINCT grp) > 1"
            )
            if grouping.functional(row[1], row[3])
        ]
        kept = self._narrowed({row[0] for row in conflicts})
        db.executemany(_INSERT_CONFLICT, (row for row in conflicts if row[0] in kept))
        (active,) = db.execute("SELECT count(*) FROM ix_claim WHERE active = 1").fetchone()
        self._set_meta("active", active)
        self._set_meta("lamport", lamport)
        self._set_meta("registry", registry.fingerprint)
        self._set_meta("upto", upto)
        if progress is not None:
            progress(done, total or 0)

    def _clear(self) -> None:
        db = self._db
        db.execute("INSERT INTO ix_text (ix_text) VALUES ('delete-all')")
        for table in (*_DATA_TABLES, "ix_conflict", "ix_meta"):
            db.execute(f"DELETE FROM {table}")

    def drop(self) -> None:
        """Forget everything (`upto` becomes None), e.g. when ops stop counting: the next
        writer rebuilds."""
        self._check_present()
        self._clear()

    # --- reads -----------------------------------------------------------------------------------

    def state_of(
        self,
        loci: Iterable[bytes],
        *,
        registry: Registry,
        retracted: bool = True,
        memo: OpMemo | None = None,
    ) -> State:
        """The State of the ops on ``loci`` and on every locus their claims' ``depends_on``
        names (by claim id or ref), transitively: on ``loci`` it answers what the State of the
        whole op-set answers (active claims, conflicts, decisions, stale marks, and with
        ``retracted`` the retracted claims and their retractions too).

        ``retracted`` False leaves out the retracted history of the loci (a key updated
        thousands of times costs what its active claims cost), keeping only the retracted
        claims a dependency names: active claims, conflicts, decisions and stale marks on
        ``loci`` are still exact; `State.retracted`, `State.all_claims` and the digest cover
        only what was read.

        ``memo``: ops decoded by earlier reads (`OpMemo`), used and filled by this one; the
        State is the same with or without it."""
        self._check_present()
        memo = OpMemo(max_ops=0) if memo is None else memo
        claims: dict[bytes, ClaimAdded] = {}
        gone: set[bytes] = set()  # the retracted claims read
        seen_loci: set[bytes] = set()
        seen_deps: set[bytes] = set()
        only_active = "" if retracted else " AND active = 1"
        frontier = list(dict.fromkeys(loci))
        deps: set[bytes] = set()
        while frontier or deps:
            seen_loci.update(frontier)
            rows = self._rows("ix_claim", _SLICE, "locus", frontier, only_active)
            deps |= self._take_claims(rows, claims, gone, memo)
            deps -= seen_deps
            seen_deps |= deps
            # the claims the dependencies name, by id or ref, retracted ones included
            named = self._rows("ix_claim", _SLICE, "claim_id", list(deps))
            named += self._rows("ix_claim", _SLICE, "ref", list(deps))
            deps = self._take_claims(named, claims, gone, memo) - seen_deps
            frontier = sorted({r[3] for r in named} - seen_loci)
        if registry.detectors:
            self._close_over_detectors(registry, claims, gone, memo, seen_loci)
        # a retraction by id always retracts its target, so only retracted claims (and what a
        # dependency names) can be the target of one: active claims need no lookup by id
        ids = gone | seen_deps
        refs = {claims[c].claim_ref for c in (gone if not retracted else claims)} | seen_deps
        retractions: dict[bytes, ClaimRetracted] = {}
        rows = self._rows("ix_retraction", "op_id, data", "target_id", list(ids))
        rows += self._rows("ix_retraction", "op_id, data", "target_ref", list(refs))
        for r in memo.decode(list({oid: (oid, data) for oid, data in rows}.values())):
            retractions[r.op_id] = r  # type: ignore[assignment]
        decisions: dict[bytes, DecisionAdded] = {}
        rows = self._rows("ix_decision", "op_id, data", "locus", list(seen_loci))
        for d in memo.decode(rows):
            decisions[d.op_id] = d  # type: ignore[assignment]
        evidence: dict[bytes, EvidenceAdded] = {}
        cited = list({e for c in claims.values() for e in c.evidence})
        for e in memo.decode(self._rows("ix_evidence", "op_id, data", "op_id", cited)):
            evidence[e.op_id] = e  # type: ignore[assignment]
        if not registry.detectors:
            return Materializer.from_checked(
                claims, retractions, evidence, decisions, registry=registry
            ).state()
        state = Materializer.from_checked(
            dict(claims), dict(retractions), dict(evidence), dict(decisions), registry=registry
        ).state()
        # decisions made on the findings: a finding's locus is no claim's, so read them now
        rows = self._rows("ix_decision", "op_id, data", "locus", [f.locus for f in state.findings])
        fresh = [d for d in memo.decode(rows) if d.op_id not in decisions]
        if not fresh:
            return state
        for d in fresh:
            decisions[d.op_id] = d  # type: ignore[assignment]
        return Materializer.from_checked(
            claims, retractions, evidence, decisions, registry=registry
        ).state()

    def _close_over_detectors(
        self,
        registry: Registry,
        claims: dict[bytes, ClaimAdded],
        gone: set[bytes],
        memo: OpMemo,
        seen_loci: set[bytes],
    ) -> None:
        """Add to a slice every active claim a declared detector reads, for each detector
        that reads a claim of the slice (and so on, for detectors reading what that added):
        a detector is a function of its whole input, so a slice that holds part of it holds
        all of it, and its findings are those of the whole State. Costs a read of the claims
        of those predicates (by namespace and predicate on the key index, or a scan of the
        claims for a predicate declared for every namespace)."""
        done: set[str] = set()
        while True:
            wanted = [
                spec
                for spec in registry.detectors
                if spec.label not in done
                and any(
                    spec.reads_predicate(c.namespace, c.predicate)
                    for cid, c in claims.items()
                    if cid not in gone
                )
            ]
            if not wanted:
                return
            for spec in wanted:
                done.add(spec.label)
                rows = self._detector_rows(spec.reads, _SLICE)
                self._take_claims(rows, claims, gone, memo)
                seen_loci.update(r[3] for r in rows)

    def _detector_rows(
        self, reads: Iterable[tuple[str | None, str]], columns: str
    ) -> list[tuple[Any, ...]]:
        """``columns`` of the active claims of the (namespace or None, predicate) ``reads``."""
        out: list[tuple[Any, ...]] = []
        for namespace, predicate in reads:
            if namespace is None:
                sql = f"SELECT {columns} FROM ix_claim WHERE predicate = ? AND active = 1"
                out.extend(self._db.execute(sql, (predicate,)))
            else:
                sql = (
                    f"SELECT {columns} FROM ix_claim"
                    " WHERE namespace = ? AND predicate = ? AND active = 1"
                )
                out.extend(self._db.execute(sql, (namespace, predicate)))
        return out

    def detector_loci(self, registry: Registry) -> list[bytes]:
        """The loci of the active claims the declared detectors of ``registry`` read, sorted
        (none when it declares none): what a slice must hold to show every finding."""
        self._check_present()
        if not registry.detectors:
            return []
        reads = sorted({r for spec in registry.detectors for r in spec.reads}, key=str)
        return sorted({r[0] for r in self._detector_rows(reads, "locus")})

    def _rows(
        self, table: str, columns: str, key: str, values: Sequence[bytes], extra: str = ""
    ) -> list[tuple[Any, ...]]:
        """``columns`` of the rows of ``table`` whose ``key`` is one of ``values``."""
        out: list[tuple[Any, ...]] = []
        for part in _chunks(values):
            out.extend(
                self._db.execute(
                    f"SELECT {columns} FROM {table} WHERE {key} IN ({_marks(len(part))}){extra}",
                    part,
                )
            )
        return out

    @staticmethod
    def _take_claims(
        rows: list[tuple[Any, ...]],
        claims: dict[bytes, ClaimAdded],
        gone: set[bytes],
        memo: OpMemo,
    ) -> set[bytes]:
        """Decode `_SLICE` rows of claims not in ``claims`` yet into it (through ``memo``),
        noting the retracted ones in ``gone``; returns what the new claims depend on."""
        fresh = list({r[0]: r for r in rows if r[0] not in claims}.values())
        deps: set[bytes] = set()
        decoded = memo.decode([(r[0], r[2]) for r in fresh])
        for (_, active, _, _), c in zip(fresh, decoded, strict=True):
            claims[c.op_id] = c  # type: ignore[assignment]
            if not active:
                gone.add(c.op_id)
            deps.update(c.depends_on)  # type: ignore[union-attr]
        return deps

    def loci(
        self,
        *,
        prefix: tuple[str, ...] = (),
        scope: str | None = None,
        active: bool = True,
        limit: int | None = None,
    ) -> list[bytes]:
        """Loci of claims (only those with an active claim unless ``active`` is False) whose
        key starts with ``prefix`` (namespace, subject, predicate), in ``scope`` if given,
        ordered by key and scope, at most ``limit``."""
        self._check_present()
        if len(prefix) > 3:
            raise StoreError(
                "prefix", "key-prefix", "a key prefix names at most namespace, subject, predicate"
            )
        if not all(map(_text, (*prefix, scope or ""))):
            return []  # a lone surrogate: no stored key or scope holds one (nor can SQLite bind it)
        where = [f"l.{name} = ?" for name in ("namespace", "subject", "predicate")[: len(prefix)]]
        params: list[object] = list(prefix)
        if scope is not None:
            where.append("l.scope = ?")
            params.append(scope)
        if active:
            where.append(
                "EXISTS (SELECT 1 FROM ix_claim c WHERE c.locus = l.locus AND c.active = 1)"
            )
        sql = "SELECT l.locus FROM ix_locus l"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY l.namespace, l.subject, l.predicate, l.scope"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(max(0, limit))
        return [r[0] for r in self._db.execute(sql, params)]

    def key_names(self, prefix: tuple[str, ...] = (), *, limit: int = 1000) -> list[str]:
        """The distinct next parts of the keys with an active claim under ``prefix``: the
        namespaces (no prefix), a namespace's subjects, or a subject's predicates; in code
        point order, at most ``limit``. Each found by a seek past the one before on the key
        index, so the cost follows how many names there are, not how many claims they hold
        (what a "did you mean" reads)."""
        self._check_present()
        if len(prefix) > 2:
            return []
        if not all(map(_text, prefix)):
            return []
        columns = ("namespace", "subject", "predicate")
        name = columns[len(prefix)]
        fixed = "".join(f" AND l.{c} = ?" for c in columns[: len(prefix)])
        out: list[str] = []
        at, op = "", ">="
        while len(out) < limit:
            row = self._db.execute(
                f"SELECT l.{name} FROM ix_locus l WHERE l.{name} {op} ?{fixed}"
                " AND EXISTS (SELECT 1 FROM ix_claim c WHERE c.locus = l.locus AND c.active = 1)"
                f" ORDER BY l.{name} LIMIT 1",
                (at, *prefix),
            ).fetchone()
            if row is None:
                break
            at, op = row[0], ">"
            out.append(at)
        return out

    def conflict_loci(self, *, limit: int | None = None) -> list[bytes]:
        """Loci in conflict, ordered by key and scope, at most ``limit``."""
        self._check_present()
        sql = "SELECT locus FROM ix_conflict ORDER BY namespace, subject, predicate, scope"
        params: tuple[object, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (max(0, limit),)
        return [r[0] for r in self._db.execute(sql, params)]

    def conflict_count(self) -> int:
        """How many loci are in conflict."""
        self._check_present()
        (n,) = self._db.execute("SELECT count(*) FROM ix_conflict").fetchone()
        return int(n)

    def search(self, query: str, *, limit: int) -> list[bytes]:
        """The loci of the active claims that best match any word of ``query`` (BM25 over the
        words `statefuse.reading.ranker` sees in a claim), best first (equal scores by claim id),
        each
        once, at most ``limit``."""
        self._check_present()
        expr = self._expression(query)
        if expr is None or limit <= 0:
            return []
        return self._ranked(expr, limit)

    def _frequencies(self, query: str, *, cap: int | None = None) -> list[tuple[int, str]]:
        """``query``'s words with how many active claims hold each, rarest first.

        With ``cap``: a word held by ``cap`` claims or more may say ``cap`` (or more) instead
        of its count, as long as one word at most does (it then sorts last, where its count
        would put it): a word's count costs what its postings hold (FTS5 reads them all), and
        a common word's exact count is what a context's search needs least. Words that reach
        the cap together are counted again up to eight times as far, then exactly."""
        ws = sorted(set(words(query)))
        if not ws:
            return []
        db = self._db
        out: dict[str, int] = {}
        # a word that is one FTS5 token as it is can be counted by matching it, as far as needed
        left = [w for w in ws if w.isascii() and w.isalnum() and w == w.lower()] if cap else []
        exact = [w for w in ws if w not in left]
        while cap is not None and left:
            for w in left:
                (n,) = db.execute(_COUNT_UPTO, (f'"{w}"', cap)).fetchone()
                out[w] = int(n)
            left = [w for w in left if out[w] >= cap]
            if len(left) < 2:
                break
            # several words reach the cap: count them further (their order is needed)
            cap = cap * 8 if cap * 8 <= COUNT_MOST else None
        if cap is None:
            exact += left
        for w in exact:
            out[w] = self._vocabulary_count(w)
        if left and cap is not None and any(out[w] >= cap for w in exact):
            out[left[0]] = self._vocabulary_count(left[0])  # another word is as common
        return sorted((n, w) for w, n in out.items())

    def _vocabulary_count(self, word: str) -> int:
        """How many active claims hold ``word`` (one FTS5 token), from FTS5's vocabulary."""
        db = self._db
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.ix_text_vocab"
            " USING fts5vocab(main, 'ix_text', 'row')"
        )
        row = db.execute("SELECT doc FROM temp.ix_text_vocab WHERE term = ?", (word,)).fetchone()
        return 0 if row is None else int(row[0])

    def _expression(self, query: str) -> str | None:
        """The FTS5 query for ``query``'s words, without the words held by more than half of
        the active claims (when the memory holds `COMMON_FROM` or more): their BM25 weight is
        below ln 2 against about ln N for a rare word, so they hardly move a ranking. None when
        no word is left."""
        if self.active_count() < COMMON_FROM:
            return _match_expression(query)
        n = self.active_count()
        rare = [w for df, w in self._frequencies(query) if 2 * df <= n]
        return _match_expression(" ".join(rare)) if rare else None

    def _bounded(
        self, query: str, limit: int, *, freq: list[tuple[int, str]] | None = None
    ) -> list[bytes]:
        """The best matches for ``query`` a context draws on, at a cost bounded by what they
        are rather than by how many claims share a common word of it (BM25 scores every claim
        a query matches): first the claims that hold every word, then those that hold every
        word but the commonest, and so on down to the two rarest (few claims each, and the most
        to the point), then the claims that hold any of the rarest words, as many words as
        together match at most `MATCH_BUDGET` claims. The context ranks what it is given with
        every word of the query again. ``freq``: the query's words as `_frequencies` counts
        them with the cap below, if counted already."""
        # rarest first; a word past MATCH_BUDGET is never chosen below, and its exact count
        # only places it after the rarer ones
        if freq is None:
            freq = self._frequencies(query, cap=MATCH_BUDGET + 1)
        freq = [(df, w) for df, w in freq if df > 0]
        ws = [w for _, w in freq]
        if not ws:
            return []
        found: dict[bytes, None] = {}
        for m in range(len(ws), 1, -1):
            every = " AND ".join('"' + w.replace('"', '""') + '"' for w in ws[:m])
            found.update(dict.fromkeys(self._ranked(every, limit, most=freq[0][0])))
            if len(found) >= limit:
                return list(found)[:limit]
        chosen: list[str] = []
        total = 0
        for df, w in freq:
            if total + df > MATCH_BUDGET:
                break
            chosen.append(w)
            total += df
        expr = _match_expression(" ".join(chosen))
        if expr is not None:
            found.update(dict.fromkeys(self._ranked(expr, limit, most=total)))
        return list(found)[:limit]

    def _ranked(self, expr: str, limit: int, *, most: int | None = None) -> list[bytes]:
        """The first ``limit`` distinct loci of the matches of ``expr`` in (score, claim id)
        order. FTS5 sorts only the best few (never every match) by score; the matches tied
        with the last one kept are cut by claim id (fetched again only when they run past
        what was fetched), so the cut never depends on the order rows were written in.
        ``most``: how many claims ``expr`` can match at most; when that is `MATCH_BUDGET` or
        fewer, one statement joins every match to its claim and sorts them in that order
        (BM25 scores every match either way; this saves the second read of the claims).
        With ``most`` given, a single match is found without scoring anything."""
        db = self._db
        if most is not None:
            # one match or none needs no score: BM25 weighs a word by how many claims hold
            # it, which FTS5 counts by reading every posting of each word
            first = db.execute(_FIRST_TWO, (expr,)).fetchall()
            if len(first) < 2:
                return [r[0] for r in first]
            if most <= MATCH_BUDGET:
                return _distinct(db.execute(_RANKED_FEW, (expr,)), limit)
        want = limit * 2 + 16
        while True:
            fetch = 2 * want + 1
            rows = db.execute(_MATCHES, (expr, fetch)).fetchall()
            cut = len(rows) > want
            if cut:
                edge = rows[want - 1][1]
                if len(rows) == fetch and rows[-1][1] == edge:  # ties past what was fetched
                    rows = [r for r in rows if r[1] < edge]
                    rows.extend(db.execute(_TIES, (expr, edge, want - len(rows))))
                else:  # every match tied with the edge is here
                    rows = [r for r in rows if r[1] <= edge]
            score = dict(rows)
            found: list[tuple[float, bytes, bytes]] = []
            ns = list(score)
            for part in _chunks(ns):
                for n, claim_id, locus in db.execute(
                    f"SELECT n, claim_id, locus FROM ix_claim WHERE n IN ({_marks(len(part))})",
                    part,
                ):
                    found.append((score[n], claim_id, locus))
            found.sort()
            out = _distinct(((f[2],) for f in found), limit)
            if len(out) >= limit or not cut:
                return out
            want *= 4

    def context_loci(self, query: str, *, budget: int) -> list[bytes]:
        """The loci a context for ``query`` within ``budget`` tokens draws on, each once, in
        this order: every locus with an active identity or constraint claim (a context shows
        them whatever the query), the best matches for the query, the conflicts among the
        query's next best matches and the conflicts whose own claims best match the query
        (`conflict_matches`: the conflict a question is about, however many facts share its
        words; with no query words: the first conflicts by key), then the loci of the most
        recent active claims (by lamport); each list after the first holds at most ``budget //
        TOKENS_PER_LOCUS`` loci."""
        self._check_present()
        db = self._db
        k = max(1, budget // TOKENS_PER_LOCUS)
        out = dict.fromkeys(r[0] for r in db.execute(_PINNED))
        freq = self._frequencies(query, cap=MATCH_BUDGET + 1)  # once for both searches
        ranked = self._bounded(query, 2 * k, freq=freq)
        if not ranked:
            out.update(dict.fromkeys(self.conflict_loci(limit=k)))
        else:
            out.update(dict.fromkeys(ranked[:k]))
            conflicted: set[bytes] = set()
            for part in _chunks(ranked):
                conflicted.update(
                    r[0]
                    for r in db.execute(
                        f"SELECT locus FROM ix_conflict WHERE locus IN ({_marks(len(part))})",
                        part,
                    )
                )
            out.update(dict.fromkeys([x for x in ranked if x in conflicted][:k]))
            out.update(dict.fromkeys(self._conflict_matches(freq, k)))
        out.update(dict.fromkeys(_distinct(db.execute(_RECENT), k)))
        return list(out)

    def claim_loci(self, prefix: str, *, limit: int = 64) -> list[bytes]:
        """The loci of the claims (active or retracted) whose id in hex starts with
        ``prefix`` (hex digits, any case), at most ``limit`` claims' worth: what resolving a
        claim named by a hex prefix reads (the caller's State then says which one, or that
        several share it). An empty list for a prefix that is not hex."""
        self._check_present()
        text = prefix.strip().lower()
        if not text or len(text) > 64 or any(ch not in "0123456789abcdef" for ch in text):
            return []
        low = bytes.fromhex(text.ljust(64, "0"))
        high = bytes.fromhex(text.ljust(64, "f"))
        rows = self._db.execute(
            "SELECT locus FROM ix_claim WHERE claim_id BETWEEN ? AND ? LIMIT ?",
            (low, high, limit),
        )
        return list(dict.fromkeys(r[0] for r in rows))

    def ref_retractions(self, ref: bytes) -> tuple[bytes, ...]:
        """The ids of the retractions of ``ref``, sorted: what a writer that asserts a value of
        that ref again lists in ``reasserts``."""
        self._check_present()
        return tuple(
            r[0]
            for r in self._db.execute(
                "SELECT op_id FROM ix_retraction WHERE target_ref = ? ORDER BY op_id", (ref,)
            )
        )

    # --- reads for the entry points (LangGraph store, MCP search) ---------------------------------

    def namespaces_between(self, low: str, high: str, *, predicate: str) -> list[str]:
        """The namespaces from ``low`` (included) to ``high`` (excluded), in code point order,
        that hold an active claim at ``predicate``: each one found by a seek past the one
        before, so the cost follows how many there are, not how many claims they hold."""
        self._check_present()
        if not all(map(_text, (low, high, predicate))):
            return []
        out: list[str] = []
        at, op = low, ">="
        while True:
            row = self._db.execute(
                f"SELECT l.namespace FROM ix_locus l WHERE l.namespace {op} ? AND l.namespace < ?"
                " AND l.predicate = ? AND EXISTS (SELECT 1 FROM ix_claim c"
                " WHERE c.locus = l.locus AND c.active = 1) ORDER BY l.namespace LIMIT 1",
                (at, high, predicate),
            ).fetchone()
            if row is None:
                return out
            at, op = row[0], ">"
            out.append(at)

    def namespace_loci(
        self,
        namespace: str,
        *,
        nested: str = "",
        predicate: str,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[bytes]:
        """The loci with an active claim at ``predicate`` whose namespace is ``namespace`` or,
        given ``nested`` (a separator), starts with ``namespace + nested``; by key and scope,
        from ``offset``, at most ``limit``: the items of a namespace and those nested in it."""
        self._check_present()
        if not all(map(_text, (namespace, nested, predicate))):
            return []
        where = "l.namespace = ?"
        params: list[object] = [namespace]
        if nested:
            # every text that starts with namespace + nested sorts between it and the text
            # whose last character is the next code point after ``nested``'s last one
            upper = nested[:-1] + chr(ord(nested[-1]) + 1)
            where = f"({where} OR (l.namespace >= ? AND l.namespace < ?))"
            params += [namespace + nested, namespace + upper]
        sql = (
            f"SELECT l.locus FROM ix_locus l WHERE {where} AND l.predicate = ?"
            " AND EXISTS (SELECT 1 FROM ix_claim c WHERE c.locus = l.locus AND c.active = 1)"
            " ORDER BY l.namespace, l.subject, l.predicate, l.scope"
        )
        params.append(predicate)
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params += [-1 if limit is None else max(0, limit), max(0, offset)]
        return [r[0] for r in self._db.execute(sql, params)]

    def text_matches(
        self, query: str, *, limit: int, scope: str | None = None
    ) -> tuple[list[tuple[bytes, bytes]], int]:
        """The (claim id, locus) of the active claims (in ``scope`` if given) that hold a word
        of ``query``, best first by BM25 as FTS5 computes it over the words of every active
        claim (`ranker.words` of the key and value; k1 1.2, b 0.75, idf ln((N - n + 0.5) /
        (n + 0.5)), floored at 1e-6), equal scores by claim id, at most ``limit``; and how many
        match in all. Every word counts, common ones too: the answer is exact, and costs what
        the query's postings hold (in C), never a read of every claim."""
        self._check_present()
        expr = _match_expression(query)
        if expr is None or (scope is not None and not _text(scope)):
            return [], 0
        where, params = "ix_text MATCH ?", [expr]
        if scope is not None:
            where += " AND c.scope = ?"
            params.append(scope)
        join = "FROM ix_text JOIN ix_claim c ON c.n = ix_text.rowid"
        if scope is None:  # no join: FTS5 counts and sorts the matches by itself
            (total,) = self._db.execute(
                "SELECT count(*) FROM ix_text WHERE ix_text MATCH ?", (expr,)
            ).fetchone()
            return self._best_claims(expr, max(0, limit)), int(total)
        (total,) = self._db.execute(f"SELECT count(*) {join} WHERE {where}", params).fetchone()
        rows = self._db.execute(
            f"SELECT c.claim_id, c.locus {join} WHERE {where}"
            " ORDER BY bm25(ix_text), c.claim_id LIMIT ?",
            [*params, max(0, limit)],
        ).fetchall()
        return [(r[0], r[1]) for r in rows], int(total)

    def _best_claims(self, expr: str, limit: int) -> list[tuple[bytes, bytes]]:
        """The (claim id, locus) of the first ``limit`` matches of ``expr`` in (score, claim
        id) order: FTS5 sorts a window of the best by score alone; the matches tied with the
        last one kept are fetched by claim id only when the window does not hold them all."""
        if limit <= 0:
            return []
        db = self._db
        fetch = 2 * limit + 16
        rows = db.execute(_MATCHES, (expr, fetch)).fetchall()
        if len(rows) > limit:
            edge = rows[limit - 1][1]
            better = [r for r in rows if r[1] < edge]
            if len(rows) == fetch and rows[-1][1] == edge:  # ties past the window
                rows = better + db.execute(_TIES, (expr, edge, limit - len(better))).fetchall()
            else:
                rows = [r for r in rows if r[1] <= edge]
        score = dict(rows)
        found: list[tuple[float, bytes, bytes]] = []
        for part in _chunks(list(score)):
            for n, claim_id, locus in db.execute(
                f"SELECT n, claim_id, locus FROM ix_claim WHERE n IN ({_marks(len(part))})", part
            ):
                found.append((score[n], claim_id, locus))
        found.sort()
        return [(f[1], f[2]) for f in found[:limit]]

    def scope_count(self, scope: str) -> int:
        """How many active claims are in ``scope`` (a scan of the claims: no index by scope)."""
        self._check_present()
        if not _text(scope):
            return 0
        (n,) = self._db.execute(
            "SELECT count(*) FROM ix_claim WHERE active = 1 AND scope = ?", (scope,)
        ).fetchone()
        return int(n)

    def context_counts(self) -> ContextCounts:
        """What a context assembled from a slice of the memory counts in its lines for what
        it leaves out (`ContextCounts`), at a cost that does not grow with the claims: the
        active count kept with the tables, a count of the pinned claims (their partial index),
        of the conflict rows (a b-tree count) and of the decided ones (one lookup per locus
        with a decision), and a seek per namespace for at most two that hold facts."""
        self._check_present()
        db = self._db
        (pinned,) = db.execute(
            f"SELECT count(*) FROM ix_claim INDEXED BY ix_claim_pinned WHERE {_PINNED_WHERE}"
        ).fetchone()
        (conflicts,) = db.execute("SELECT count(*) FROM ix_conflict").fetchone()
        (decided,) = db.execute(
            "SELECT count(*) FROM (SELECT DISTINCT locus FROM ix_decision) d"
            " CROSS JOIN ix_conflict x ON x.locus = d.locus"
        ).fetchone()
        names: list[str] = []
        at, op = "", ">="
        while len(names) < 2:
            row = db.execute(
                f"SELECT l.namespace FROM ix_locus l WHERE l.namespace {op} ? AND EXISTS"
                " (SELECT 1 FROM ix_claim c WHERE c.locus = l.locus AND c.active = 1"
                f" AND NOT ({_PINNED_WHERE})) ORDER BY l.namespace LIMIT 1",
                (at,),
            ).fetchone()
            if row is None:
                break
            at, op = row[0], ">"
            names.append(at)
        facts = self.active_count() - int(pinned) - 2 * int(conflicts) + int(decided)
        return ContextCounts(max(0, facts), int(conflicts) - int(decided), tuple(names))

    @classmethod
    def text_only(cls, claims: Iterable[ClaimAdded]) -> StoreIndex:
        """An index in memory of ``claims`` (taken as the active ones) that answers
        `text_matches` only, with the text index a store keeps (same words, same tokenizer,
        same BM25): what a replica without a store index ranks with, so that a search answers
        the same however the replica was opened. Costs every claim: build it once per State."""
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute(
            "CREATE TABLE ix_claim (n INTEGER PRIMARY KEY, claim_id BLOB NOT NULL,"
            " locus BLOB NOT NULL, scope TEXT NOT NULL, words TEXT NOT NULL)"
        )
        db.execute(next(t for t in TABLES if t.startswith("CREATE VIRTUAL TABLE ix_text")))
        rows = [
            (
                n,
                c.op_id,
                _locus_of_key((c.namespace, c.subject, c.predicate, c.scope)),
                c.scope,
                " ".join(_doc_words(c)),
            )
            for n, c in enumerate(sorted(claims, key=lambda c: c.op_id), start=1)
        ]
        db.executemany("INSERT INTO ix_claim VALUES (?, ?, ?, ?, ?)", rows)
        db.executemany(_TEXT_ADD, ((r[0], r[4]) for r in rows))
        db.commit()
        return cls(db)

    def conflict_matches(self, query: str, *, limit: int) -> list[bytes]:
        """The loci in conflict whose active claims best match ``query`` (BM25 over the words
        `statefuse.reading.ranker` sees in a claim: its key's and its value's), best first (equal
        scores by claim id), each once, at most ``limit``: what a context must draw on to
        show the conflict a question names, as a loaded replica's context ranks its
        conflicts. The cost is bounded by what the rarer words match: the query's words are
        looked up rarest first, as many as together match at most `MATCH_BUDGET` claims (a
        word that alone matches more is left out, as `context_loci` leaves it)."""
        self._check_present()
        if limit <= 0:
            return []
        return self._conflict_matches(self._frequencies(query, cap=MATCH_BUDGET + 1), limit)

    def _conflict_matches(self, freq: list[tuple[int, str]], limit: int) -> list[bytes]:
        """`conflict_matches` of the query whose words `_frequencies` counted as ``freq`` (a
        word counted short is past `MATCH_BUDGET`, where the choice below stops anyway)."""
        if limit <= 0:
            return []
        chosen: list[str] = []
        total = 0
        for df, w in freq:
            if df == 0:
                continue
            if total + df > MATCH_BUDGET:
                break
            chosen.append(w)
            total += df
        expr = _match_expression(" ".join(chosen))
        if expr is None:
            return []
        rows = self._db.execute(_CONFLICT_MATCHES, (expr,)).fetchall()
        rows.sort(key=lambda r: (r[0], r[1]))
        return _distinct(((r[2],) for r in rows), limit)


def _claim_row(
    n: int | None,
    c: ClaimAdded,
    locus: bytes,
    grouping: Index,
    active: bool,
    ws: str,
) -> tuple[Any, ...]:
    layer = c.layer.value if isinstance(c.layer, Layer) else str(c.layer)
    return (
        n,
        c.op_id,
        locus,
        c.claim_ref,
        group_id_of(grouping.gkey(c.op_id)),
        c.namespace,
        c.subject,
        c.predicate,
        c.scope,
        layer,
        c.constraint,
        c.kind,
        c.lamport,
        1 if active else 0,
        ws,
        c.encode(),
    )


def _locus_rows(claim_rows: list[tuple[Any, ...]]) -> Iterable[tuple[Any, ...]]:
    """The `ix_locus` rows of `_claim_row` rows, one per locus."""
    return {r[2]: (r[2], r[5], r[6], r[7], r[8]) for r in claim_rows}.values()


def _retraction_row(r: ClaimRetracted) -> tuple[Any, ...]:
    return (r.op_id, r.target_claim_id, r.target_claim_ref, r.lamport, r.encode())


def _decision_row(d: DecisionAdded) -> tuple[Any, ...]:
    return (d.op_id, d.locus, d.encode())


def _text(part: str) -> bool:
    """Whether ``part`` is valid Unicode text (UTF-8 encodable), as every stored label is."""
    try:
        part.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _match_expression(query: str) -> str | None:
    """An FTS5 query matching any word of ``query`` (each quoted, so no character of the query
    is read as FTS5 syntax), or None when it has no word."""
    ws = sorted(set(words(query)))
    if not ws:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in ws)


def _distinct(rows: Iterable[tuple[Any, ...]], limit: int) -> list[bytes]:
    out: dict[bytes, None] = {}
    for (locus,) in rows:
        if locus not in out:
            out[locus] = None
            if len(out) >= limit:
                break
    return list(out)


# the condition of `_PINNED` (and of the partial index ix_claim_pinned), to count by
_PINNED_WHERE = (
    "active = 1 AND (layer = 'identity' OR kind = 'constraint' OR constraint_kind <> '')"
)


@dataclass(frozen=True, slots=True)
class ContextCounts:
    """What `StoreIndex.context_counts` finds: ``facts``, the active claims outside identity
    and constraint claims, less two per conflict, plus one per decided conflict (the selected
    claim); ``conflicts``, the conflicts without a decision, in every scope;
    ``fact_namespaces``, the first two namespaces (in code point order) holding an active
    claim outside identity and constraints. What a context of the whole memory counts when
    every conflict has two candidates, the lens sees every claim counted, no two claims of
    one key agree, no resolver settles a conflict and the memory holds no turns, signals or
    questions (exact counts of those would read every conflict or every claim)."""

    facts: int
    conflicts: int
    fact_namespaces: tuple[str, ...]
