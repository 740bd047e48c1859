"""The embedded default store: one SQLite file (stdlib `sqlite3`) in WAL mode.

Durability: every `SQLiteStore.write` is one ``BEGIN IMMEDIATE … COMMIT`` transaction with
``synchronous=FULL``, so when it returns the change is on disk (in WAL mode that is one fsync of
the log per commit, however many ops the change holds). A crash at any point leaves either the
whole batch or none of it.

Single writer: a replica owns its store while open. Opening takes an exclusive advisory lock on
``<path>.lock`` (``fcntl.flock``, released by the kernel if the process dies), so two processes can
never interleave appends to one author's hash chain; the second gets a `StoreError` naming the
lock holder's pid, or waits up to ``wait`` seconds if asked to.

Schema versions live in ``PRAGMA user_version``; `_MIGRATIONS` carries a store forward one version
at a time inside a transaction, and a store from a newer release is refused rather than guessed at.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from statefuse.store import SCHEMA_VERSION, QuarantineRecord, StoreError, StoreInfo, StoreWrite

try:  # POSIX; elsewhere the lock degrades to SQLite's own busy handling
    import fcntl
except ImportError:  # pragma: no cover - not on the CI platform
    fcntl = None  # type: ignore[assignment]

#: Schema steps: ``_MIGRATIONS[v]`` turns a version-``v`` store into version ``v + 1``.
_MIGRATIONS: dict[int, str] = {
    0: """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE changes (
            pos INTEGER PRIMARY KEY AUTOINCREMENT,
            change_id BLOB NOT NULL UNIQUE,
            data BLOB NOT NULL
        );
        CREATE TABLE pending (change_id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
        CREATE TABLE quarantine (
            key BLOB PRIMARY KEY,
            data BLOB NOT NULL,
            reason TEXT NOT NULL,
            message TEXT NOT NULL,
            first_seen_ms INTEGER NOT NULL,
            last_seen_ms INTEGER NOT NULL,
            count INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE snapshot (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            upto INTEGER NOT NULL,
            data BLOB NOT NULL
        );
    """,
}
assert len(_MIGRATIONS) == SCHEMA_VERSION


class _Lock:
    """An exclusive advisory lock on ``<db>.lock`` holding the owner's pid."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, wait: float) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if fcntl is None:  # pragma: no cover
            return
        deadline = time.monotonic() + max(wait, 0.0)
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(self._fd, 32, 0).decode("ascii", "replace").strip()
                    self.release()
                    who = f" by process {holder}" if holder else ""
                    raise StoreError(
                        "path",
                        "single-writer",
                        f"{path.with_suffix('')} is locked{who}; close that replica first"
                        " (or open with wait=SECONDS)",
                    ) from None
                time.sleep(0.05)
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, str(os.getpid()).encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None


class SQLiteStore:
    """A durable store in one SQLite file. See the module docstring for the guarantees."""

    __slots__ = ("_db", "_lock", "path")

    def __init__(self, path: str | os.PathLike[str], *, create: bool = True, wait: float = 0.0):
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError("path", "exists", f"no store at {self.path}")
        if self.path.exists() and not self.path.is_file():
            raise StoreError("path", "file", f"{self.path} is not a file")
        self._lock = _Lock(Path(str(self.path) + ".lock"), wait)
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._lock.release()
            raise StoreError("path", "sqlite-store", f"{self.path}: {exc}") from None

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                "path",
                "schema-version",
                f"{self.path} has schema {version}; this release reads up to {SCHEMA_VERSION}",
            )
        while version < SCHEMA_VERSION:
            with self._transaction() as db:
                for statement in _MIGRATIONS[version].split(";"):
                    if statement.strip():
                        db.execute(statement)
                version += 1
                db.execute(f"PRAGMA user_version = {version}")

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- the Store protocol ---------------------------------------------------------------------

    def info(self) -> StoreInfo | None:
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        if "space" not in rows:
            return None
        root = rows.get("root")
        return StoreInfo(
            space=str(rows["space"]),
            mode=str(rows.get("mode", "open")),
            root=bytes(root) if root else None,
            registry=bytes(rows.get("registry", b"")),
        )

    def initialize(self, info: StoreInfo) -> None:
        with self._transaction() as db:
            current = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if "space" in current:
                raise StoreError("store", "initialized-once", "the store is already initialized")
            db.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?)",
                [
                    ("space", info.space),
                    ("mode", info.mode),
                    ("root", info.root or b""),
                    ("registry", info.registry),
                ],
            )

    def write(self, batch: StoreWrite) -> None:
        if not batch:
            return
        with self._transaction() as db:
            if batch.accepted:
                db.executemany(
                    "INSERT OR IGNORE INTO changes (change_id, data) VALUES (?, ?)", batch.accepted
                )
                db.executemany(
                    "DELETE FROM pending WHERE change_id = ?", [(c,) for c, _ in batch.accepted]
                )
            if batch.pending:
                db.executemany(
                    "INSERT OR IGNORE INTO pending (change_id, data)"
                    " SELECT ?, ? WHERE NOT EXISTS (SELECT 1 FROM changes WHERE change_id = ?)",
                    [(c, d, c) for c, d in batch.pending],
                )
            if batch.quarantined:
                db.executemany(
                    "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT (key) DO UPDATE SET"
                    " first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),"
                    " last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),"
                    " count = count + excluded.count",
                    [
                        (
                            r.key,
                            r.data,
                            r.reason,
                            r.message,
                            r.first_seen_ms,
                            r.last_seen_ms,
                            r.count,
                        )
                        for r in batch.quarantined
                    ],
                )

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        cursor = self._db.execute(
            "SELECT pos, data FROM changes WHERE pos > ? ORDER BY pos", (after,)
        )
        for pos, data in cursor:
            yield pos, bytes(data)

    def pending(self) -> list[bytes]:
        rows = self._db.execute("SELECT data FROM pending ORDER BY change_id").fetchall()
        return [bytes(r[0]) for r in rows]

    def quarantine(self) -> list[QuarantineRecord]:
        rows = self._db.execute(
            "SELECT key, data, reason, message, first_seen_ms, last_seen_ms, count"
            " FROM quarantine ORDER BY first_seen_ms, key"
        ).fetchall()
        return [
            QuarantineRecord(bytes(k), bytes(d), r, m, f, last, n)
            for k, d, r, m, f, last, n in rows
        ]

    def count(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM changes").fetchone()[0])

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        cursor = self._db.execute(
            "SELECT pos, change_id FROM changes WHERE pos > ? ORDER BY pos", (after,)
        )
        for pos, change_id in cursor:
            yield pos, bytes(change_id)

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        with self._transaction() as db:
            db.execute(
                "INSERT INTO snapshot (id, upto, data) VALUES (1, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET upto = excluded.upto, data = excluded.data",
                (upto, blob),
            )

    def load_snapshot(self) -> tuple[int, bytes] | None:
        row = self._db.execute("SELECT upto, data FROM snapshot WHERE id = 1").fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        self._lock.release()
