"""Where the vectors of claims are kept: `VectorStore`, in the SQLite store file
(`SQLiteVectors`) or in memory (`MemoryVectors`), and `nearest` (cosine top-k).

Invariant: a vector is stored under its claim id *and* the embedder's name and dimension, and
read back only under the same pair, so the vectors of two embedders never mix (another model,
or the same name asked for another dimension, sees none of them and embeds afresh). A claim is
immutable, so its vector for one embedder never changes: rows are only added (``INSERT OR
IGNORE``), and a store reopened with the same embedder embeds only the claims that have no
vector yet (`statefuse.retrieval.fusion.HybridRanker`).

Vectors are not ops: they never enter the op-set, are never signed or synced (peers may use
another model), and a vector of a retracted claim stays until the file is rebuilt
(`SQLiteStore.rebuild` copies the op-set, not this cache; vectors are made again on use).

Layout in the store file: one table, made by the first use of an embedder on a store opened
writable (a read-only open reads it when present and keeps what it embeds in memory)::

    vec_embedding(embedder TEXT, dim INTEGER, claim_id BLOB, vector BLOB,
                  PRIMARY KEY (embedder, dim, claim_id))

``vector`` is ``dim`` little-endian IEEE 754 32-bit floats, or a multiple of them for a claim
embedded as several texts (the LangGraph store's ``fields``; empty: embedded as no text). A row
whose length is not a multiple of ``dim`` (damage) is read as no vector, and the claim is
embedded again.

Cosine similarity is computed in pure Python (``sum(map(mul, ...))`` over 32-bit floats read
into Python floats; numpy is not a dependency of StateFuse): about 1.5 s per 100,000
384-dimension vectors on one core. Norms are computed once per vector and remembered.
"""

from __future__ import annotations

import heapq
import math
import sqlite3
import sys
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping
from contextlib import AbstractContextManager
from operator import mul
from typing import Protocol, runtime_checkable

from statefuse.retrieval.embedder import Vector

__all__ = [
    "TABLE",
    "MemoryVectors",
    "SQLiteVectors",
    "VectorStore",
    "nearest",
    "pack",
    "unpack",
    "unpack_all",
]

#: The statement that makes the table (idempotent).
TABLE = (
    "CREATE TABLE IF NOT EXISTS vec_embedding ("
    " embedder TEXT NOT NULL,"
    " dim INTEGER NOT NULL,"
    " claim_id BLOB NOT NULL,"
    " vector BLOB NOT NULL,"
    " PRIMARY KEY (embedder, dim, claim_id))"
)
#: Most parameters one statement binds.
_CHUNK = 500


#: The vectors of one claim (most claims: one; the LangGraph store: one per text).
Vectors = tuple[Vector, ...]


def pack(v: Vector | Vectors) -> bytes:
    """One vector, or several of one length one after another, as stored: little-endian
    32-bit floats."""
    flat: list[float] = []
    for x in v:
        if isinstance(x, tuple):
            flat += x
        else:
            flat.append(x)
    a = array("f", flat)
    if sys.byteorder == "big":  # pragma: no cover - not on the CI platform
        a.byteswap()
    return a.tobytes()


def unpack_all(blob: object, dim: int) -> Vectors | None:
    """The vectors of a stored row, or None when it is not whole ``dim``-float vectors."""
    if not isinstance(blob, bytes) or len(blob) % (4 * dim):
        return None
    a = array("f")
    a.frombytes(blob)
    if sys.byteorder == "big":  # pragma: no cover - not on the CI platform
        a.byteswap()
    return tuple(tuple(a[i : i + dim]) for i in range(0, len(a), dim))


def unpack(blob: bytes, dim: int) -> Vector | None:
    """A stored vector, or None when the blob is not one vector of ``dim`` 32-bit floats."""
    got = unpack_all(blob, dim) if isinstance(blob, bytes) and len(blob) == 4 * dim else None
    return got[0] if got else None


@runtime_checkable
class VectorStore(Protocol):
    """Vectors of claims under (embedder name, dimension). ``get`` answers for the ids it has
    (a claim's first vector); ``put`` adds the rows it does not have yet and returns how many
    were new; ``get_all`` / ``put_all`` do the same with every vector of a claim (none, one
    or several)."""

    def get(self, embedder: str, dim: int, claim_ids: Collection[bytes]) -> dict[bytes, Vector]: ...

    def put(self, embedder: str, dim: int, rows: Mapping[bytes, Vector]) -> int: ...

    def get_all(
        self, embedder: str, dim: int, claim_ids: Collection[bytes]
    ) -> dict[bytes, Vectors]: ...

    def put_all(self, embedder: str, dim: int, rows: Mapping[bytes, Vectors]) -> int: ...

    def count(self, embedder: str, dim: int) -> int: ...

    def embedders(self) -> list[tuple[str, int, int]]: ...


def _first(held: Mapping[bytes, Vectors], claim_ids: Collection[bytes]) -> dict[bytes, Vector]:
    out: dict[bytes, Vector] = {}
    for cid in claim_ids:
        vs = held.get(cid)
        if vs:
            out[cid] = vs[0]
    return out


def _fits(vs: Vectors, dim: int) -> bool:
    return all(len(v) == dim for v in vs)


class MemoryVectors:
    """A `VectorStore` in this process's memory (a replica in memory keeps one)."""

    __slots__ = ("_by",)

    def __init__(self) -> None:
        self._by: dict[tuple[str, int], dict[bytes, Vectors]] = {}

    def get(self, embedder: str, dim: int, claim_ids: Collection[bytes]) -> dict[bytes, Vector]:
        return _first(self._by.get((embedder, dim), {}), claim_ids)

    def get_all(
        self, embedder: str, dim: int, claim_ids: Collection[bytes]
    ) -> dict[bytes, Vectors]:
        held = self._by.get((embedder, dim), {})
        return {cid: held[cid] for cid in claim_ids if cid in held}

    def put(self, embedder: str, dim: int, rows: Mapping[bytes, Vector]) -> int:
        return self.put_all(embedder, dim, {cid: (v,) for cid, v in rows.items()})

    def put_all(self, embedder: str, dim: int, rows: Mapping[bytes, Vectors]) -> int:
        held = self._by.setdefault((embedder, dim), {})
        new = 0
        for cid, vs in rows.items():
            if cid not in held and _fits(vs, dim):
                held[cid] = tuple(vs)
                new += 1
        return new

    def count(self, embedder: str, dim: int) -> int:
        return len(self._by.get((embedder, dim), {}))

    def embedders(self) -> list[tuple[str, int, int]]:
        return sorted((name, dim, len(held)) for (name, dim), held in self._by.items() if held)


#: The store's seam for SQLite: the connection, with SQLite's errors mapped to StoreError.
Seam = Callable[[str], AbstractContextManager[sqlite3.Connection]]


class SQLiteVectors:
    """A `VectorStore` in the table ``vec_embedding`` of a SQLite store file, reached through
    the store's connection (`SQLiteStore.vectors`): ``seam`` maps SQLite's errors to the
    store's, ``transaction`` is the store's write transaction (its lock), and a read-only
    store keeps new vectors in memory only.

    What was read or written is remembered by (embedder, dimension): the first `get` for an
    embedder reads all its rows once; later ones ask the file only for ids not held yet (which
    another process may have embedded meanwhile)."""

    __slots__ = ("_held", "_loaded", "_seam", "_transaction", "readonly")

    def __init__(
        self,
        seam: Seam,
        transaction: Callable[[], AbstractContextManager[None]],
        *,
        readonly: bool,
    ) -> None:
        self._seam = seam
        self._transaction = transaction
        self.readonly = readonly
        self._held: dict[tuple[str, int], dict[bytes, Vectors]] = {}
        self._loaded: set[tuple[str, int]] = set()
        if not readonly:
            with transaction(), seam("while making the vector table") as db:
                db.execute(TABLE)

    def _present(self, db: sqlite3.Connection) -> bool:
        """Whether the file has the table: asked each time (one cheap lookup), since a
        rebuild (`SQLiteStore.rebuild`) puts a file without it in place."""
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vec_embedding'"
        ).fetchone()
        return found is not None

    def get(self, embedder: str, dim: int, claim_ids: Collection[bytes]) -> dict[bytes, Vector]:
        return _first(self.get_all(embedder, dim, claim_ids), claim_ids)

    def get_all(
        self, embedder: str, dim: int, claim_ids: Collection[bytes]
    ) -> dict[bytes, Vectors]:
        pair = (embedder, dim)
        held = self._held.setdefault(pair, {})
        with self._seam("while reading vectors") as db:
            if not self._present(db):
                pass
            elif pair not in self._loaded:
                rows = db.execute(
                    "SELECT claim_id, vector FROM vec_embedding WHERE embedder = ? AND dim = ?",
                    pair,
                )
                self._take(held, rows, dim)
                self._loaded.add(pair)
            else:
                missing = [cid for cid in claim_ids if cid not in held]
                for at in range(0, len(missing), _CHUNK):
                    part = missing[at : at + _CHUNK]
                    rows = db.execute(
                        "SELECT claim_id, vector FROM vec_embedding WHERE embedder = ? AND dim = ?"
                        f" AND claim_id IN ({','.join('?' * len(part))})",
                        (embedder, dim, *part),
                    )
                    self._take(held, rows, dim)
        return {cid: held[cid] for cid in claim_ids if cid in held}

    @staticmethod
    def _take(held: dict[bytes, Vectors], rows: Iterable[tuple[object, object]], dim: int) -> None:
        for cid, blob in rows:
            vs = unpack_all(blob, dim)
            if isinstance(cid, bytes) and vs is not None:
                held[cid] = vs

    def put(self, embedder: str, dim: int, rows: Mapping[bytes, Vector]) -> int:
        return self.put_all(embedder, dim, {cid: (v,) for cid, v in rows.items()})

    def put_all(self, embedder: str, dim: int, rows: Mapping[bytes, Vectors]) -> int:
        held = self._held.setdefault((embedder, dim), {})
        fresh = {cid: tuple(vs) for cid, vs in rows.items() if cid not in held and _fits(vs, dim)}
        if not fresh:
            return 0
        if not self.readonly:
            with self._transaction(), self._seam("while storing vectors") as db:
                db.execute(TABLE)  # again: a rebuilt file has none
                db.executemany(
                    "INSERT OR IGNORE INTO vec_embedding (embedder, dim, claim_id, vector)"
                    " VALUES (?, ?, ?, ?)",
                    [(embedder, dim, cid, pack(vs)) for cid, vs in fresh.items()],
                )
        held.update(fresh)
        return len(fresh)

    def count(self, embedder: str, dim: int) -> int:
        with self._seam("while counting vectors") as db:
            if not self._present(db):
                return len(self._held.get((embedder, dim), {}))
            row = db.execute(
                "SELECT count(*) FROM vec_embedding WHERE embedder = ? AND dim = ?",
                (embedder, dim),
            ).fetchone()
        return int(row[0])

    def embedders(self) -> list[tuple[str, int, int]]:
        with self._seam("while counting vectors") as db:
            if not self._present(db):
                return sorted((n, d, len(h)) for (n, d), h in self._held.items() if h)
            rows = db.execute(
                "SELECT embedder, dim, count(*) FROM vec_embedding GROUP BY embedder, dim"
                " ORDER BY embedder, dim"
            ).fetchall()
        return [(str(name), int(dim), int(n)) for name, dim, n in rows]


def norm(v: Vector) -> float:
    return math.sqrt(sum(map(mul, v, v)))


def nearest(
    query: Vector,
    vectors: Mapping[bytes, Vector],
    k: int,
    *,
    norms: dict[bytes, float] | None = None,
) -> list[tuple[bytes, float]]:
    """The ``k`` vectors most similar to ``query`` by cosine, best first (ties by claim id),
    as (claim id, cosine); only those with a positive cosine. ``norms`` remembers each
    vector's norm across calls (vectors are immutable)."""
    qn = norm(query)
    if not qn or k <= 0:
        return []
    memo = norms if norms is not None else {}
    sims: list[tuple[float, bytes]] = []
    for cid, v in vectors.items():
        n = memo.get(cid)
        if n is None:
            n = memo[cid] = norm(v)
        if n:
            s = sum(map(mul, query, v)) / (qn * n)
            if s > 0:
                sims.append((s, cid))
    best = heapq.nsmallest(k, sims, key=lambda t: (-t[0], t[1]))
    return [(cid, s) for s, cid in best]
