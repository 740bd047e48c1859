"""The embedded default store: one SQLite file (stdlib `sqlite3`) in WAL mode.

Durability: every `SQLiteStore.write` is one ``BEGIN IMMEDIATE … COMMIT`` transaction with
``synchronous=FULL``, so when it returns the change is on disk (in WAL mode that is one fsync of
the log per commit, however many ops the change holds). A crash at any point leaves either the
whole batch or none of it. A new store is built under a temporary name and linked into place
complete, so a path holds either nothing or a whole store, never a half-made file.

Many writers: any number of processes (and store objects of one process) open one store
writable and write. Writes serialize on the write lock, an exclusive advisory lock on
``<file>.lock`` (``fcntl.flock``, released by the kernel if the process dies) taken only around
one write transaction (`SQLiteStore.write_transaction`, and every single write), so two writers
never interleave; a writer waits up to ``wait`` seconds (`DEFAULT_WAIT`) for the others, then
gets a `StoreError` ``busy``. ``<file>`` is the path with every symlink, ``..`` and relative part
resolved (`lock_path`), as SQLite resolves it to name the -wal and -shm: two paths to one file
take one lock. `SQLiteStore.data_version` tells a store object that another one committed, so
its replica takes the new rows in (`sync.replica`). (A hard link is a second name SQLite gives a
-wal of its own: one store must never have two; copy it, or `export` it, instead.)

Readers: ``SQLiteStore(path, readonly=True)`` takes no lock and opens the file read-only (a
``mode=ro`` URI), so readers in any process run beside the writers: in WAL mode a reader sees
the last committed state, and `SQLiteStore.read_transaction` holds one such state across several
reads. A read-only store never migrates and refuses every write (rule ``readonly``). In a
read-only directory without a -wal file (where no writer can run) it reads the file as
``immutable`` (see `_open_reader`).

Foreign files are refused untouched: before SQLite may write to an existing path, `_inspect`
looks at it without changing it (its type, its first 16 bytes, then a read-only connection: no
journal mode, no migration), and anything that is not a StateFuse store is refused with rule
``not-a-store`` before even the lock file is made. A store is recognised by its
`APPLICATION_ID` (schema 2 on) or, for the first release, by ``user_version`` 1 and its exact
tables.

Errors: every `sqlite3.Error` (and text SQLite hands over that is no longer UTF-8) becomes a
`StoreError` at one seam (`SQLiteStore._sqlite`, built on `_store_error`), naming the path,
SQLite's message and, for damage, the fix. Values read back are type-checked (`_typed`), so a
damaged record surfaces as a StoreError too, never as a TypeError in the caller.

Schema versions live in ``PRAGMA user_version``; `_MIGRATIONS` carries a store forward one version
at a time inside a transaction, and a store from a newer release is refused rather than guessed at.

Damage: `SQLiteStore.integrity_problems` runs SQLite's ``quick_check`` (``integrity_check`` with
``full=True``, which a replica opened for writing runs); `SQLiteStore.rebuild`
copies every row SQLite can still read into a fresh file and keeps the damaged one beside it as
``<path>.damaged-<UTC time>``. Rows SQLite cannot read are not recovered by this module, but they
are never deleted either: they survive in that kept original.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import secrets
import sqlite3
import stat
import struct
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from statefuse.retrieval.vectorstore import SQLiteVectors
from statefuse.storage import filemark
from statefuse.storage.store import (
    DEFAULT_WAIT,
    SCHEMA_VERSION,
    STORE_ID_BYTES,
    EvictionTally,
    PendingRow,
    QuarantineRecord,
    RepairPlan,
    StoreError,
    StoreInfo,
    StoreWarning,
    StoreWrite,
    check_author,
    over_bounds,
    repair_plan_error,
    tallied,
)
from statefuse.storage.storeindex import StoreIndex
from statefuse.storage.storeindex import create_tables as create_index_tables
from statefuse.storage.storeindex import drop_tables as drop_index_tables

try:  # POSIX; elsewhere the lock degrades to SQLite's own busy handling
    import fcntl
except ImportError:  # pragma: no cover - not on the CI platform
    fcntl = None  # type: ignore[assignment]

#: ``PRAGMA application_id`` of every StateFuse store from schema 2 on: the ASCII bytes ``SFus``.
#: SQLite keeps it at offset 68 of the file header, so it tells a StateFuse store from any other
#: SQLite file without reading a table.
APPLICATION_ID = 0x53467573

#: The first schema whose derived state this release reads (`SQLiteStore.index`): a read-only
#: open of an older store loads the history instead.
INDEX_SCHEMA = 7

#: Pages the write-ahead log may hold before a writer copies them into the database file
#: (SQLite's default is 1,000). A write of the derived state touches pages all over its
#: hash-keyed indexes, hundreds per 100-op change: with the default, every other such commit
#: ran a checkpoint that wrote those pages back and synced the file; with more room a page
#: rewritten by many commits is copied back once. Durability does not depend on it (a commit
#: is durable in the log, ``synchronous=FULL``); the log file grows to about this many pages.
WAL_AUTOCHECKPOINT = 8_192

#: The first 16 bytes of every SQLite 3 database file.
SQLITE_HEADER = b"SQLite format 3\x00"

#: The tables of a schema-1 store (the first release, which set no application id).
_V1_TABLES = frozenset({"meta", "changes", "pending", "quarantine", "snapshot"})

#: Meta keys a store writes; `SQLiteStore.rebuild` looks each one up when the table scan fails.
_META_KEYS = ("space", "mode", "root", "registry", "store_id", "author", "creator")

#: What SQLite raises on a file it cannot use: its own errors, and UnicodeDecodeError when the
#: text it hands over (a message naming a damaged schema entry, say) is not UTF-8 any more.
_FAILURES = (sqlite3.Error, UnicodeDecodeError)

#: Words of SQLite's messages for a file it cannot read (SQLITE_CORRUPT, SQLITE_NOTADB).
_DAMAGE_WORDS = ("malformed", "not a database", "corrupt")

#: How many seeks `SQLiteStore.rebuild` may spend per table probing past damage; past this the
#: rest of the table stays in the kept original only.
_PROBE_BUDGET = 100_000

_T = TypeVar("_T", bytes, str, int)

_FIX_AT_OPEN = (
    "restore it from a backup, or make a new store (`statefuse init`) and sync it from a peer"
)
_FIX_IN_USE = "run `statefuse verify`, then `statefuse repair`"


def _create_tables(db: sqlite3.Connection) -> None:
    """Schema 0 → 1: the tables of the first release."""
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
    db.execute(
        "CREATE TABLE changes ("
        " pos INTEGER PRIMARY KEY AUTOINCREMENT,"
        " change_id BLOB NOT NULL UNIQUE,"
        " data BLOB NOT NULL)"
    )
    db.execute(
        "CREATE TABLE pending (change_id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE quarantine ("
        " key BLOB PRIMARY KEY,"
        " data BLOB NOT NULL,"
        " reason TEXT NOT NULL,"
        " message TEXT NOT NULL,"
        " first_seen_ms INTEGER NOT NULL,"
        " last_seen_ms INTEGER NOT NULL,"
        " count INTEGER NOT NULL"
        ") WITHOUT ROWID"
    )
    db.execute(
        "CREATE TABLE snapshot ("
        " id INTEGER PRIMARY KEY CHECK (id = 1),"
        " upto INTEGER NOT NULL,"
        " data BLOB NOT NULL)"
    )


def _identify(db: sqlite3.Connection) -> None:
    """Schema 1 → 2: mark the file as StateFuse's and give the store its random id."""
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)",
        (os.urandom(STORE_ID_BYTES),),
    )


def _rowid_areas(db: sqlite3.Connection) -> None:
    """Schema 2 → 3: the pending area and the quarantine become rowid tables with a unique key.

    Their rows hold whole changes (kilobytes, up to megabytes of refused garbage). In a
    ``WITHOUT ROWID`` table every row sits in the key's b-tree, so each insert at a random key
    rewrites a page anywhere in a tree of big rows, and refusing 4x the changes cost 6-7x the
    time; a rowid table appends the row and keeps only the 32-byte key in its index."""
    for table, columns in (
        ("pending", "change_id BLOB NOT NULL UNIQUE, data BLOB NOT NULL"),
        (
            "quarantine",
            "key BLOB NOT NULL UNIQUE, data BLOB NOT NULL, reason TEXT NOT NULL,"
            " message TEXT NOT NULL, first_seen_ms INTEGER NOT NULL,"
            " last_seen_ms INTEGER NOT NULL, count INTEGER NOT NULL",
        ),
    ):
        db.execute(f"ALTER TABLE {table} RENAME TO {table}_v2")
        db.execute(f"CREATE TABLE {table} ({columns})")
        db.execute(f"INSERT INTO {table} SELECT * FROM {table}_v2")
        db.execute(f"DROP TABLE {table}_v2")


def _publish_marks(db: sqlite3.Connection) -> None:
    """Schema 3 → 4: the publish marks of transports that publish this replica's own changes
    (`SQLiteStore.published`). A store migrated from an older schema has none, so a transport's
    first run publishes every own change once (a broker dedupes, receivers are idempotent)."""
    db.execute(
        "CREATE TABLE published ("
        " target TEXT NOT NULL,"
        " change_id BLOB NOT NULL,"
        " PRIMARY KEY (target, change_id)"
        ") WITHOUT ROWID"
    )


def _pending_index(db: sqlite3.Connection) -> None:
    """Schema 4 → 5: each pending change's index beside its bytes (NULL for rows parked before:
    the replica verifies those once more and fills it in), and the tally of evictions."""
    for column in ("author BLOB", "seq INTEGER", "prev BLOB"):
        db.execute(f"ALTER TABLE pending ADD COLUMN {column}")
    db.execute("CREATE INDEX pending_unindexed ON pending (change_id) WHERE author IS NULL")
    db.execute(
        "CREATE TABLE evictions ("
        " area TEXT NOT NULL,"
        " author BLOB NOT NULL,"
        " changes INTEGER NOT NULL,"
        " bytes INTEGER NOT NULL,"
        " first_ms INTEGER NOT NULL,"
        " last_ms INTEGER NOT NULL,"
        " PRIMARY KEY (area, author)"
        ") WITHOUT ROWID"
    )


def _mark_received(db: sqlite3.Connection, ms: int) -> None:
    """Record that the changes up to the last position were received at ``ms`` (one row per
    write; a position already marked keeps its first time). The table is made on first use,
    not by a schema step: a store stays readable and writable by the releases before it
    (which ignore the table and record no marks)."""
    db.execute("CREATE TABLE IF NOT EXISTS received (pos INTEGER PRIMARY KEY, ms INTEGER NOT NULL)")
    db.execute(
        "INSERT OR IGNORE INTO received (pos, ms)"
        " SELECT max(pos), ? FROM changes WHERE EXISTS (SELECT 1 FROM changes)",
        (ms,),
    )


def _derived_state(db: sqlite3.Connection) -> None:
    """Schema 5 → 6: the tables of the derived state (`statefuse.storage.storeindex`), empty: their
    watermark is absent, which says "never built", so the first writer builds them."""
    create_index_tables(db)


def _derived_state_layout(db: sqlite3.Connection) -> None:
    """Schema 6 → 7: the derived state's tables in the layout that writes append where they can
    (`statefuse.storage.storeindex`): the old tables are dropped and the new ones created empty, so
    the
    first writer builds them from the ops, as after schema 5 → 6."""
    drop_index_tables(db)
    create_index_tables(db)


#: Schema steps: ``_MIGRATIONS[v]`` turns a version-``v`` store into version ``v + 1``; the caller
#: runs each inside a transaction and sets ``user_version`` in the same one.
_MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {
    0: _create_tables,
    1: _identify,
    2: _rowid_areas,
    3: _publish_marks,
    4: _pending_index,
    5: _derived_state,
    6: _derived_state_layout,
}
assert len(_MIGRATIONS) == SCHEMA_VERSION


# --- errors ---------------------------------------------------------------------------------------


def _is_damage(exc: sqlite3.Error | UnicodeDecodeError) -> bool:
    """Whether SQLite failed because the file's bytes are not a sound database."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    name = str(getattr(exc, "sqlite_errorname", ""))  # Python 3.11+
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and any(w in text for w in _DAMAGE_WORDS)


def _store_error(
    path: Path, exc: sqlite3.Error | UnicodeDecodeError, doing: str, *, opening: bool = False
) -> StoreError:
    """The StoreError for ``exc``, raised by SQLite while ``doing`` something with ``path``."""
    field = "path" if opening else "store"
    said = str(exc) or type(exc).__name__
    name = str(getattr(exc, "sqlite_errorname", ""))
    text = said.lower()
    if _is_damage(exc):
        fix = _FIX_AT_OPEN if opening else _FIX_IN_USE
        return StoreError(
            field, "store-unreadable", f"SQLite cannot read {path} ({said}) {doing}; {fix}"
        )
    if name.startswith("SQLITE_READONLY") or "readonly database" in text:
        return StoreError(
            field,
            "readonly",
            f"{path} cannot be written ({said}) {doing}: the file or its directory is read-only"
            " to this process",
        )
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "database is locked" in text:
        return StoreError(
            field,
            "busy",
            f"{path} is held by another SQLite connection ({said}) {doing}; close the other"
            " program using it",
        )
    return StoreError(field, "sqlite-error", f"{path}: SQLite failed {doing}: {said}")


def _typed(path: Path, value: object, kind: type[_T], what: str) -> _T:
    """``value`` read from a row, checked: SQLite returns whatever type a damaged record's header
    says, and a wrong one must surface as damage, not as a TypeError deep in the caller."""
    if isinstance(value, kind):
        return value
    raise StoreError(
        "store",
        "store-unreadable",
        f"{path}: {what} holds a {type(value).__name__}, not {kind.__name__} (a damaged row);"
        f" {_FIX_IN_USE}",
    )


def _os_error(path: Path, exc: OSError, doing: str) -> StoreError:
    """The StoreError for a file-system error ``doing`` something with ``path``."""
    said = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreError(
            "path",
            "readonly",
            f"cannot {doing} {path}: {said} (a read-only directory? open with readonly=True to"
            " read the store)",
        )
    return StoreError("path", "io-error", f"cannot {doing} {path}: {said}")


def _not_a_store(path: Path, what: str) -> StoreError:
    return StoreError(
        "path", "not-a-store", f"{path} is not a StateFuse store ({what}); nothing was changed"
    )


def _missing(path: Path, *, readonly: bool) -> StoreError:
    why = " (a read-only open creates nothing)" if readonly else ""
    return StoreError("path", "no-such-store", f"no store at {path}{why}")


def _newer(path: Path, version: int) -> StoreError:
    return StoreError(
        "path",
        "schema-version",
        f"{path} has schema {version}; this release reads up to {SCHEMA_VERSION}",
    )


# --- files ----------------------------------------------------------------------------------------


def _ro_uri(path: Path) -> str:
    """A ``mode=ro`` URI for ``path``: quoted, so spaces, ``?``, ``#`` and ``%`` stay part of the
    name, and absolute with an empty authority, so a path that starts with ``//`` is no host."""
    return f"file://{quote(os.fsencode(os.path.abspath(path)))}?mode=ro"


def _connect_ro(path: Path, *, immutable: bool = False) -> sqlite3.Connection:
    uri = _ro_uri(path) + ("&immutable=1" if immutable else "")
    return sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)


def _open_reader(path: Path, *, ours: bool) -> sqlite3.Connection:
    """A read-only connection to ``path`` that has read the schema (so SQLite's complaints about
    the file surface here, as one of `_FAILURES`).

    A reader of a WAL-mode file opens its -wal and -shm, creating them if they are missing. For
    a file that is not known to be ``ours`` and has no -wal, the connection is ``immutable``
    instead, reading the main file only: no file appears beside someone else's database. And
    where the -wal is missing and cannot be created (a read-only directory), immutable is how
    the store can be read at all; it is safe there because no writer can run without that file.
    """
    wal = Path(f"{path}-wal")
    db = _connect_ro(path, immutable=not ours and not wal.exists())
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except _FAILURES as exc:
        db.close()
        said = f"{getattr(exc, 'sqlite_errorname', '')} {exc}".lower()
        if wal.exists() or not ("readonly" in said or "unable to open" in said):
            raise
    db = _connect_ro(path, immutable=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def _connect_rw(path: Path, wait: float) -> sqlite3.Connection:
    """A read-write connection; ``wait`` bounds SQLite's own wait for its locks (a checkpoint,
    a program that is not StateFuse), which the write lock leaves rare."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=wait)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
    # deleted content is overwritten with zeros (a redacted body must not be recoverable
    # from free pages, SEMANTICS §10)
    db.execute("PRAGMA secure_delete = ON")
    return db


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` (None: nothing there)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _check_wait(wait: object) -> float:
    """``wait`` checked up front: seconds, at least 0 (StoreError ``wait``)."""
    if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
        raise StoreError("wait", "seconds", f"wait is a number of seconds >= 0, not {wait!r}")
    return float(wait)


def _looks_like_text(head: bytes) -> bool:
    return all(32 <= b < 127 or b in b"\t\n\r" for b in head)


def _inspect(path: Path) -> int | None:
    """The schema version of the StateFuse store at ``path``, or None when nothing is there.

    Looks without changing anything: the file's type, its first bytes, then a read-only SQLite
    connection (`_open_reader`: no journal mode, no migration, and no -wal or -shm made beside a
    file that does not carry our application id). Raises StoreError: ``not-a-store`` for
    anything that is not a store, ``store-unreadable`` for an SQLite file SQLite cannot read,
    ``schema-version`` for a store of a newer release.
    """
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise _os_error(path, exc, "look at") from None
    if stat.S_ISDIR(st.st_mode):
        raise _not_a_store(path, "a directory")
    if not stat.S_ISREG(st.st_mode):
        raise _not_a_store(path, "not a regular file")
    if st.st_size == 0:
        raise _not_a_store(path, "an empty file")
    try:
        with path.open("rb") as f:
            header = f.read(100)
            head = header[: len(SQLITE_HEADER)]
    except OSError as exc:
        raise _os_error(path, exc, "read") from None
    if head != SQLITE_HEADER:
        what = "a text file" if _looks_like_text(head) else "a file that is not an SQLite database"
        raise _not_a_store(path, what)
    marked = int.from_bytes(header[68:72], "big") == APPLICATION_ID
    try:
        db = _open_reader(path, ours=marked)
        try:
            names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            app = int(db.execute("PRAGMA application_id").fetchone()[0])
        finally:
            db.close()
    except _FAILURES as exc:
        raise _store_error(path, exc, "on open", opening=True) from None
    tables = {str(n) for n in names if not str(n).startswith("sqlite_")}
    listed = ", ".join(sorted(tables))
    if app == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise _newer(path, version)
        if version < 1:  # no release marks a file before it has tables
            raise StoreError(
                "path",
                "store-unreadable",
                f"{path} carries StateFuse's mark but schema version {version}, which no release"
                f" writes: its header is damaged; {_FIX_AT_OPEN}",
            )
        return version
    if app != 0:
        raise _not_a_store(path, f"an SQLite database of another application, id {app:#010x}")
    if tables - _V1_TABLES:
        raise _not_a_store(path, f"an SQLite database with tables: {listed}")
    if version > SCHEMA_VERSION:  # a store from a release that marks its files some other way
        raise _newer(path, version)
    if not tables:
        raise _not_a_store(path, "an SQLite database with no tables")
    if version == 1 and tables == _V1_TABLES:
        return 1
    raise _not_a_store(path, f"an SQLite database at version {version} with tables: {listed}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    """Make a rename or link in ``path`` durable (not every platform can open a directory)."""
    with contextlib.suppress(OSError):
        _fsync(path)


def _temp_beside(path: Path, tag: str) -> Path:
    """A new empty file next to ``path`` (same file system, so it can be renamed into place),
    created with the permissions any new file gets (0666 less the umask)."""
    tmp = path.with_name(f".{path.name}.{tag}-{secrets.token_hex(6)}")
    os.close(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666))
    return tmp


def _remove_temp(tmp: Path) -> None:
    for end in ("", "-journal", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{tmp}{end}")


def _fresh(path: Path) -> sqlite3.Connection:
    """A connection to a new database at ``path``, inside the transaction that created the
    current schema (the caller fills it and calls `_seal`)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA synchronous=FULL")
        db.execute("BEGIN IMMEDIATE")
        for version in range(SCHEMA_VERSION):
            _MIGRATIONS[version](db)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.close()
        raise
    return db


def _seal(db: sqlite3.Connection, path: Path) -> None:
    """Commit a `_fresh` database, switch it to WAL and make it durable before it is renamed."""
    try:
        db.execute("COMMIT")
        db.execute("PRAGMA journal_mode=WAL")
    finally:
        db.close()
    _fsync(path)


def _create(path: Path) -> None:
    """Build a new store under a temporary name and link it into place complete.

    Raises FileExistsError if a file appeared at ``path`` meanwhile (it is never replaced).
    """
    try:
        tmp = _temp_beside(path, "new")
    except OSError as exc:
        raise _os_error(path, exc, "create") from None
    try:
        _seal(_fresh(tmp), tmp)
        try:
            os.link(tmp, path)  # unlike a rename, never replaces a file that appeared meanwhile
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if path.exists():
                raise FileExistsError(path) from None
            os.rename(tmp, path)
        _fsync_dir(path.parent)
    except _FAILURES as exc:
        raise _store_error(path, exc, "creating it", opening=True) from None
    except FileExistsError:
        raise
    except OSError as exc:
        raise _os_error(path, exc, "create") from None
    finally:
        _remove_temp(tmp)


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open; SQLite may have rolled it back already (a full
    disk, say), and the error that got us here is the one to report."""
    if db.in_transaction:
        with contextlib.suppress(*_FAILURES):
            db.execute("ROLLBACK")


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    version = int(db.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise _newer(path, version)
    while version < SCHEMA_VERSION:
        db.execute("BEGIN IMMEDIATE")
        try:
            _MIGRATIONS[version](db)
            version += 1
            db.execute(f"PRAGMA user_version = {version}")
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise


def _warn_of_links(path: Path) -> None:
    """A `StoreWarning` when the file has more names than one (hard links): each name gets its
    own -wal and its own lock, so writes through another name fork the store. A crash in the
    middle of a create or a rebuild can leave one (``.<name>.new-…``, ``<name>.damaged-…``)."""
    with contextlib.suppress(OSError):
        names = os.stat(path).st_nlink
        if names > 1:
            warnings.warn(
                StoreWarning(
                    "hard-link",
                    f"{path} has {names} names (hard links): SQLite keeps a -wal per name and the"
                    " lock holds only this one, so a writer through another name forks the store;"
                    " remove the other names (copy a store, never link it)",
                ),
                stacklevel=4,
            )


def lock_path(path: str | os.PathLike[str]) -> Path:
    """Where the write lock of the store at ``path`` lives: ``<file>.lock`` beside the file
    itself, ``path`` resolved (symlinks, ``..``, relative parts), so every path to one file
    names one lock; SQLite resolves the path the same way for the -wal and -shm."""
    return Path(f"{os.path.realpath(path)}.lock")


#: ``struct flock`` for an OFD record lock on the first byte of a file (Linux: l_type, l_whence,
#: l_start, l_len, l_pid = 0, padded to the kernel's 32 bytes).
_FLOCK = struct.Struct("@hhqqi4x")


class _Presence:
    """Which processes have the store open for writing: each writable store holds a shared
    record lock on the first byte of ``<file>.lock`` for its whole life (an open-file-
    description lock: per store object, never dropped when some other fd of the file closes,
    and independent of the write lock's ``flock``). A rebuild, which puts a new file at the
    path, takes it exclusive, and so runs only when no other store has the file open (one
    that had would go on using the damaged original, and SQLite would delete the new file's
    -wal by name when it closed). Where the platform has no such locks, nothing is held."""

    __slots__ = ("_fd",)

    def __init__(self, path: Path, wait: float, *, store: Path) -> None:
        self._fd: int | None = None
        if fcntl is None or not hasattr(fcntl, "F_OFD_SETLK"):  # pragma: no cover
            return
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _os_error(path, exc, "create the lock file") from None
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_RDLCK, 0, 0, 1, 0))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise StoreError(
                        "path",
                        "busy",
                        f"{store} is being rebuilt by another process past the {wait:g} s wait"
                        " (open with wait=SECONDS to wait longer)",
                    ) from None
                time.sleep(0.05)
            except OSError:  # a kernel or file system without OFD locks: nothing held
                os.close(fd)
                return
        self._fd = fd

    def alone(self) -> bool:
        """Take the lock exclusive (True) when no other store has the file open; else keep
        it shared (a failed conversion leaves the shared lock in place) and say False."""
        if self._fd is None:
            return True
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, 0, 0, 1, 0))
        except OSError:
            return False
        return True

    def share(self) -> None:
        """Back to shared, after a rebuild."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_RDLCK, 0, 0, 1, 0))

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class _Lock:
    """The store's write lock: an exclusive advisory lock on ``<file>.lock`` (`lock_path`),
    taken only around one write transaction (and a migration or a rebuild), released by the
    kernel if the process dies. Each hold opens the file anew, so two stores of one process
    (two threads, two replicas) exclude each other as two processes do.

    A waiting writer blocks in the kernel (in a helper thread, so the wait is bounded): it is
    woken as soon as the holder lets go, where a poller would keep losing the lock to a writer
    that takes it again at once."""

    __slots__ = ("_fd", "path", "store")

    def __init__(self, path: Path, *, store: Path) -> None:
        self.path = path
        self.store = store
        self._fd: int | None = None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise _os_error(self.path, exc, "create the lock file") from None

    def acquire(self, wait: float) -> None:
        """Hold the lock, waiting up to ``wait`` seconds for another writer; raises StoreError
        ``busy`` past that (nothing written)."""
        assert self._fd is None, "the write lock is not re-entrant"
        fd = self._open()
        if fcntl is None:  # pragma: no cover
            self._fd = fd
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._fd = fd
            return
        except BlockingIOError:
            os.close(fd)
        except BaseException:
            os.close(fd)
            raise
        if wait > 0:
            waited = self._blocking(wait)
            if waited is not None:
                self._fd = waited
                return
        holder = self._holder()
        file = self.path.with_suffix("")
        alias = f" (the file {file})" if Path(os.path.abspath(self.store)) != file else ""
        raise StoreError(
            "path",
            "busy",
            f"{self.store}{alias} is busy: {holder} held its write lock past the {wait:g} s wait"
            " (open with wait=SECONDS to wait longer)",
        )

    def _blocking(self, wait: float) -> int | None:
        """Wait for the lock in the kernel, in a helper thread, at most ``wait`` seconds; the
        fd that holds it, or None. A helper still waiting when the time is up keeps waiting
        and lets go of the lock (closing its own fd) as soon as it gets it."""
        fd = self._open()
        done = threading.Event()
        guard = threading.Lock()
        got: list[bool] = []  # [True] once the helper holds the lock for us
        abandoned: list[bool] = []

        def take() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                os.close(fd)
                done.set()
                return
            with guard:
                if abandoned:
                    os.close(fd)  # closing drops the flock
                else:
                    got.append(True)
            done.set()

        threading.Thread(target=take, name="statefuse-write-lock", daemon=True).start()
        done.wait(wait)
        with guard:
            if got:
                return fd
            abandoned.append(True)
        return None

    def _holder(self) -> str:
        try:
            with open(self.path, "rb") as f:
                pid = f.read(32).decode("ascii", "replace").strip()
        except OSError:
            return "another process"
        return f"process {pid}" if pid.isdigit() else "another process"

    def note_holder(self) -> None:
        """Write this process's pid into the lock file, for a waiter's error message."""
        if self._fd is not None:
            with contextlib.suppress(OSError):  # one fixed-width write: no truncate per write
                os.pwrite(self._fd, f"{os.getpid():<20}".encode(), 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing drops the flock


# --- salvage (rebuild) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _KeySpace:
    """A table's key as an integer range, so `_salvage` can probe past damage by arithmetic."""

    lowest: int
    highest: int
    to_int: Callable[[Any], int]
    from_int: Callable[[int], Any]


def _blob_to_int(key: Any) -> int:
    if not isinstance(key, bytes):
        raise TypeError(key)
    return int.from_bytes(key[:32].ljust(32, b"\x00"), "big")


def _int_to_blob(n: int) -> bytes:
    return n.to_bytes(32, "big")


#: Rowids (``changes.pos``): signed 64-bit.
_ROWIDS = _KeySpace(-(2**63), 2**63 - 1, int, int)
#: 32-byte blob keys (change ids, quarantine keys), in SQLite's memcmp order.
_BLOBS = _KeySpace(0, 2**256 - 1, _blob_to_int, _int_to_blob)


class _Budget:
    __slots__ = ("left",)

    def __init__(self, seeks: int) -> None:
        self.left = seeks


def _salvage(
    db: sqlite3.Connection, table: str, key: str, columns: str, keys: _KeySpace
) -> Iterator[tuple[Any, ...]]:
    """Every row of ``table`` SQLite can read, in key order (``key`` is the first column).

    A scan runs until SQLite raises on damage; then `_next_readable` finds the first row past
    the damaged region it can reach and the scan resumes there. Each round moves strictly past
    a stored key, and the seeks per table are capped, so this ends on any file.
    """
    scan = f"SELECT {columns} FROM {table} WHERE {key} >= ? ORDER BY {key}"
    seek = f"SELECT {key} FROM {table} WHERE {key} >= ? ORDER BY {key} LIMIT 1"
    one = f"SELECT {columns} FROM {table} WHERE {key} = ?"
    budget = _Budget(_PROBE_BUDGET)
    start = keys.lowest
    while True:
        last: int | None = None
        try:
            for row in db.execute(scan, (keys.from_int(start),)):
                last = keys.to_int(row[0])
                yield row
            return
        except _FAILURES as exc:
            if not _is_damage(exc):
                raise
        except (TypeError, ValueError):  # a damaged key read back as the wrong type
            pass
        # The scan can fail stepping *past* a row it has not handed over yet (a cursor reads
        # one row ahead), so the rows from here on are tried one at a time until one reads.
        lo = start if last is None else last + 1
        while True:
            found = _next_readable(db, seek, keys, lo, budget)
            if found is None:
                return
            lo = found + 1
            row = _read_one(db, one, keys.from_int(found))
            if row is not None:
                yield row
                break
        start = lo


def _read_one(db: sqlite3.Connection, one: str, key: object) -> tuple[Any, ...] | None:
    """The row with ``key``, or None if SQLite cannot read it."""
    try:
        row: tuple[Any, ...] | None = db.execute(one, (key,)).fetchone()
    except _FAILURES as exc:
        if not _is_damage(exc):
            raise
        return None
    return row


def _next_readable(
    db: sqlite3.Connection, seek: str, keys: _KeySpace, lo: int, budget: _Budget
) -> int | None:
    """The key of the first row at or past ``lo`` a seek gets to, or None when none is left.

    Gallops past the damage (``lo`` + 1, 2, 4, … keys), then bisects back to the first probe
    that gets through, so the rows right after a damaged region are kept. Rows between two
    damaged regions closer together than the gallop step can be missed; they stay in the kept
    original.
    """

    def probe(p: int) -> tuple[bool, int | None]:
        budget.left -= 1
        try:
            row = db.execute(seek, (keys.from_int(p),)).fetchone()
            found = None if row is None else keys.to_int(row[0])
        except _FAILURES as exc:
            if not _is_damage(exc):
                raise
            return False, None
        except (TypeError, ValueError):  # a damaged cell read back as the wrong type
            return False, None
        if found is not None and found < p:
            return False, None
        return True, found

    if lo > keys.highest or budget.left <= 0:
        return None
    through, found = probe(lo)
    if through:
        return found
    bad, step = lo, 1
    while True:
        if budget.left <= 0:
            return None
        good = min(lo + step, keys.highest)
        through, found = probe(good)
        if through:
            break
        if good == keys.highest:
            return None
        bad, step = good, step * 2
    while good - bad > 1 and budget.left > 0:
        mid = (bad + good) // 2
        through, at_mid = probe(mid)
        if through:
            good, found = mid, at_mid
        else:
            bad = mid
    return found


def _salvage_meta(db: sqlite3.Connection) -> list[tuple[str, Any]]:
    rows: dict[str, Any] = {}
    try:
        for k, v in db.execute("SELECT key, value FROM meta ORDER BY key"):
            rows[str(k)] = v
    except _FAILURES as exc:
        if not _is_damage(exc):
            raise
        for k in _META_KEYS:
            if k in rows:
                continue
            try:
                found = db.execute("SELECT value FROM meta WHERE key = ?", (k,)).fetchone()
            except _FAILURES as exc2:
                if not _is_damage(exc2):
                    raise
                continue
            if found is not None:
                rows[k] = found[0]
    return sorted(rows.items())


def _sequence(db: sqlite3.Connection) -> int:
    """The highest position ``changes`` ever handed out (0 if SQLite cannot say)."""
    try:
        row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
    except _FAILURES as exc:
        if not _is_damage(exc):
            raise
        return 0
    return int(row[0]) if row is not None and isinstance(row[0], int) else 0


def _copy_readable(old: sqlite3.Connection, new: sqlite3.Connection) -> None:
    """Copy every row of ``old`` SQLite can read into the `_fresh` store ``new`` (the snapshot,
    only a cache, and the publish marks, whose loss only publishes a change once more, are left
    behind). ``INSERT OR IGNORE``: a row that breaks a constraint (a damaged
    cell read back as NULL, a duplicated id) stays in the kept original only."""
    new.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", _salvage_meta(old))
    new.executemany(
        "INSERT OR IGNORE INTO changes (pos, change_id, data) VALUES (?, ?, ?)",
        _salvage(old, "changes", "pos", "pos, change_id, data", _ROWIDS),
    )
    # positions are never handed out twice, even those of rows that could not be read
    new.execute(
        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'changes'", (_sequence(old),)
    )
    new.executemany(
        "INSERT OR IGNORE INTO pending (change_id, data) VALUES (?, ?)",
        _salvage(old, "pending", "change_id", "change_id, data", _BLOBS),
    )
    new.executemany(
        "INSERT OR IGNORE INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)",
        _salvage(
            old,
            "quarantine",
            "key",
            "key, data, reason, message, first_seen_ms, last_seen_ms, count",
            _BLOBS,
        ),
    )
    with contextlib.suppress(*_FAILURES):  # a tally SQLite cannot read stays in the original
        new.executemany(
            "INSERT OR IGNORE INTO evictions VALUES (?, ?, ?, ?, ?, ?)",
            old.execute("SELECT area, author, changes, bytes, first_ms, last_ms FROM evictions"),
        )


def _keep_aside(path: Path) -> Path:
    """Give the file at ``path`` a second name, ``<path>.damaged-<UTC time>``, and return it.

    A hard link keeps ``path`` in place until the rebuilt file replaces it, so at every moment
    some store is at ``path``; a file system without links gets a rename instead.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        aside = Path(f"{path}.damaged-{stamp}" + (f"-{n}" if n else ""))
        try:
            os.link(path, aside)
            return aside
        except FileExistsError:
            continue
        except OSError:
            if aside.exists():
                continue
            os.rename(path, aside)
            return aside
    raise StoreError("path", "io-error", f"no free name for the damaged copy of {path}")


# --- the store ------------------------------------------------------------------------------------


#: Writable stores not closed yet. A process that ends without closing its store still closes
#: SQLite's connection, and the last connection to close folds the -wal into the file: closed
#: here first (`SQLiteStore.close`), a clean store is marked clean again
#: (`statefuse.storage.filemark`),
#: so the next open needs no verifying load.
_OPEN_WRITERS: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()


@atexit.register
def _close_writers() -> None:
    for store in list(_OPEN_WRITERS):
        with contextlib.suppress(Exception):
            store.close()


class SQLiteStore:
    """A durable store in one SQLite file. See the module docstring for the guarantees.

    ``create``: make a new store when nothing is at ``path`` (else StoreError
    ``no-such-store``). ``readonly``: no lock, no migration, no writes. ``wait``: seconds each
    write (and the open's migration) waits for another writer's lock (`DEFAULT_WAIT`). Opening
    raises StoreError ``not-a-store``, ``store-unreadable``, ``schema-version``, ``busy``,
    ``wait`` or ``no-such-store``.
    """

    __slots__ = (
        "__weakref__",
        "_db",
        "_depth",
        "_file",
        "_identity",
        "_lock",
        "_marker",
        "_presence",
        "_readonly",
        "path",
        "wait",
    )

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = True,
        readonly: bool = False,
        wait: float = DEFAULT_WAIT,
    ) -> None:
        self.path = Path(path)
        #: The file itself (`lock_path`'s resolution): what is locked, created and rebuilt, so
        #: a rebuild through a symlink replaces the file and not the link.
        self._file = Path(os.path.realpath(self.path))
        self._readonly = bool(readonly)
        #: Keeps the clean mark after each commit (`statefuse.storage.filemark`; made on first use).
        self._marker: filemark.Marker | None = None
        self._db: sqlite3.Connection | None = None
        self._lock: _Lock | None = None
        self._presence: _Presence | None = None
        #: Seconds a write waits for another process's write (the bound of every wait).
        self.wait = _check_wait(wait)
        #: How deep the write transactions running on this store nest (0: none).
        self._depth = 0
        #: (device, inode) of the file this store opened: a write refuses to go on once
        #: another process's rebuild put another file at the path.
        self._identity: tuple[int, int] | None = None
        # judged before anything is created: a refused path gets no lock file either
        found = _inspect(self.path)
        if found is None and (readonly or not create):
            raise _missing(self.path, readonly=readonly)
        if readonly:
            try:
                self._db = _open_reader(self.path, ours=True)
            except _FAILURES as exc:
                raise _store_error(self.path, exc, "on open", opening=True) from None
            return
        self._lock = _Lock(lock_path(self.path), store=self.path)
        self._presence = _Presence(self._lock.path, self.wait, store=self.path)
        # a store to create or migrate is made so under the write lock; a current one needs
        # none to open (a writer busy elsewhere does not hold up an open)
        locked = found != SCHEMA_VERSION
        try:
            if locked:
                self._lock.acquire(self.wait)
            # again under the lock: another writer may have created or migrated it meanwhile
            if locked and _inspect(self.path) is None:
                if not create:
                    raise _missing(self.path, readonly=False)
                try:
                    # through a symlink to nothing yet, the store is made where the link points
                    _create(self._file if self.path.is_symlink() else self.path)
                except FileExistsError:  # something appeared at the path: judge it as any file
                    _inspect(self.path)
            try:
                self._db = _connect_rw(self.path, self.wait)
                _migrate(self._db, self.path)
            except _FAILURES as exc:
                raise _store_error(self.path, exc, "on open", opening=True) from None
            self._identity = _file_identity(self._file)
        except BaseException:
            self.close()
            raise
        finally:
            self._lock.release()
        _OPEN_WRITERS.add(self)
        _warn_of_links(self.path)

    # --- the one seam for SQLite's errors ---------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("store", "open", "the store is closed")
        return self._db

    @contextlib.contextmanager
    def _sqlite(self, doing: str) -> Iterator[sqlite3.Connection]:
        """The connection, with every `sqlite3.Error` (and undecodable text, see `_FAILURES`)
        raised inside mapped to a StoreError."""
        db = self._conn()
        try:
            yield db
        except _FAILURES as exc:
            raise _store_error(self.path, exc, doing) from exc

    def _check_writable(self, doing: str) -> None:
        if self._readonly:
            raise StoreError(
                "store",
                "readonly",
                f"{self.path} was opened read-only: {doing} needs an open without readonly=True",
            )

    @contextlib.contextmanager
    def _transaction(self, doing: str) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the write lock (`_Lock`), or the one already running
        on this store (`write_transaction`): its writes commit with it."""
        db = self._conn()
        self._check_writable(doing)
        if self._depth:
            self._depth += 1
            try:
                yield db
            finally:
                self._depth -= 1
            return
        lock = self._lock
        assert lock is not None  # a writable store has one
        lock.acquire(self.wait)
        try:
            self._check_same_file()
            lock.note_holder()
            with self._sqlite(f"while {doing}"):
                db.execute("BEGIN IMMEDIATE")
                self._depth = 1
                try:
                    yield db
                    db.execute("COMMIT")
                    self._mark()  # still under the lock: what we wrote
                except BaseException:
                    _rollback(db)
                    raise
                finally:
                    self._depth = 0
        finally:
            lock.release()

    def _check_same_file(self) -> None:
        """Refuse to write once the path holds another file than the one opened (another
        process rebuilt the store: writes here would land in the damaged original)."""
        if self._identity is not None and _file_identity(self._file) != self._identity:
            raise StoreError(
                "store",
                "store-replaced",
                f"{self.path} was rebuilt by another process since this one opened it; open it"
                " again to write",
            )

    @contextlib.contextmanager
    def write_transaction(self) -> Iterator[None]:
        """Hold the store's write lock and one SQLite write transaction for the whole block:
        every read inside sees the last committed state, no other process writes meanwhile,
        and every `write` inside commits (durably) when the block ends, or none if it raises.
        Waits up to ``wait`` seconds for another writer (StoreError ``busy`` past that)."""
        with self._transaction("writing"):
            yield

    def data_version(self) -> int:
        """A number that changes whenever another connection (another process, or another
        store object on this file) commits a write: SQLite's ``PRAGMA data_version``. Equal
        numbers mean nothing changed since the last look."""
        with self._sqlite("while checking for changes") as db:
            return int(db.execute("PRAGMA data_version").fetchone()[0])

    def last_position(self) -> int:
        """The highest position of an accepted change (0: none)."""
        with self._sqlite("while reading the last position") as db:
            row = db.execute("SELECT max(pos) FROM changes").fetchone()
        return 0 if row is None or row[0] is None else _typed(self.path, row[0], int, "a position")

    def snapshot_position(self) -> int | None:
        """The position the saved snapshot covers (None: none saved), without reading it."""
        with self._sqlite("while reading the snapshot") as db:
            row = db.execute("SELECT upto FROM snapshot WHERE id = 1").fetchone()
        return None if row is None else _typed(self.path, row[0], int, "the snapshot")

    # --- the Store protocol -----------------------------------------------------------------------

    @property
    def readonly(self) -> bool:
        """Opened with ``readonly=True``: no lock held, every write refused."""
        return self._readonly

    def info(self) -> StoreInfo | None:
        with self._sqlite("while reading the store's info") as db:
            rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if "space" not in rows:
            return None
        p = self.path
        root = _typed(p, rows.get("root", b""), bytes, "meta root")
        author = _typed(p, rows.get("author", b""), bytes, "meta author")
        # no row: a store of an earlier release, whose creator the replica works out once
        creator = _typed(p, rows.get("creator", b""), bytes, "meta creator")
        return StoreInfo(
            space=_typed(p, rows["space"], str, "meta space"),
            mode=_typed(p, rows.get("mode", "open"), str, "meta mode"),
            root=root or None,
            registry=_typed(p, rows.get("registry", b""), bytes, "meta registry"),
            store_id=_typed(p, rows.get("store_id", b""), bytes, "meta store_id"),
            author=author or None,
            creator=creator or None,
            creator_unknown="creator" not in rows,
        )

    def initialize(self, info: StoreInfo) -> None:
        with self._transaction("initializing the store") as db:
            current = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if "space" in current:
                raise StoreError("store", "initialized-once", "the store is already initialized")
            store_id = info.store_id or current.get("store_id") or os.urandom(STORE_ID_BYTES)
            rows: list[tuple[str, object]] = [
                ("space", info.space),
                ("mode", info.mode),
                ("root", info.root or b""),
                ("registry", info.registry),
                ("store_id", bytes(store_id)),
            ]
            if info.author is not None:
                rows.append(("author", info.author))
            if not info.creator_unknown:
                rows.append(("creator", info.creator or b""))
            db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", rows)

    def pin_creator(self, creator: bytes | None) -> StoreInfo:
        self._check_writable("recording the space's creator")
        with self._transaction("recording the space's creator") as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'space'").fetchone() is None:
                raise StoreError("store", "initialized", "initialize the store before pinning it")
            db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('creator', ?)", (creator or b"",)
            )
        pinned = self.info()
        assert pinned is not None
        return pinned

    def rebind(self, author: bytes) -> StoreInfo:
        """Make ``author`` the store's own author in place of the one it was bound to: what
        giving a store a new key after its key file was lost takes (the old author's changes
        stay and count as before; only who writes here from now on changes)."""
        author = check_author(author)
        self._check_writable("binding the store to a new author")
        with self._transaction("binding the store to a new author") as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'space'").fetchone() is None:
                raise StoreError("store", "initialized", "initialize the store before binding it")
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('author', ?)", (author,))
        bound = self.info()
        assert bound is not None
        return bound

    def bind(self, author: bytes) -> StoreInfo:
        author = check_author(author)
        self._check_writable("binding the store to its author")
        info = self.info()
        if info is not None and info.author is not None and info.store_id:
            return info  # the common case: nothing to write, no write transaction
        with self._transaction("binding the store to its author") as db:
            current = dict(db.execute("SELECT key, value FROM meta").fetchall())
            if "space" not in current:
                raise StoreError("store", "initialized", "initialize the store before binding it")
            if not current.get("author"):
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('author', ?)", (author,)
                )
            if not current.get("store_id"):
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('store_id', ?)",
                    (os.urandom(STORE_ID_BYTES),),
                )
        bound = self.info()
        assert bound is not None
        return bound

    def write(self, batch: StoreWrite) -> int:
        if not batch:
            self._conn()
            self._check_writable("writing")
            return 0
        with self._transaction("writing") as db:
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
            # evictions first (one parked again later in the batch is in ``parked``); one
            # parked by this same batch never had a row: it is counted all the same
            db.executemany(
                "DELETE FROM pending WHERE change_id = ?", [(e.change_id,) for e in batch.evicted]
            )
            counts = [(e.author, e.size, e.seen_ms) for e in batch.evicted]
            if batch.parked:
                db.executemany(
                    "INSERT INTO pending (change_id, data, author, seq, prev)"
                    " SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS"
                    " (SELECT 1 FROM changes WHERE change_id = ?)"
                    " ON CONFLICT (change_id) DO UPDATE SET"
                    " author = excluded.author, seq = excluded.seq, prev = excluded.prev",
                    [
                        (r.change_id, r.data, r.author, r.seq, r.prev, r.change_id)
                        for r in batch.parked
                    ],
                )
            if batch.quarantined:
                _upsert_quarantine(db, batch.quarantined)
            if batch.rewritten:
                _rewrite(db, batch.rewritten)
            trimmed: list[tuple[bytes, int]] = []
            if batch.quarantined and batch.quarantine_bounds != (None, None):
                trimmed = over_bounds(
                    db.execute("SELECT key, length(data) FROM quarantine ORDER BY rowid"),
                    batch.quarantine_bounds,
                )
                db.executemany("DELETE FROM quarantine WHERE key = ?", [(k,) for k, _ in trimmed])
            if counts:
                _tally(db, "pending", counts)
            if trimmed:
                ms = max(r.last_seen_ms for r in batch.quarantined)
                _tally(db, "quarantine", [(b"", n, ms) for _, n in trimmed])
            if batch.accepted and batch.received_ms is not None:
                _mark_received(db, batch.received_ms)
        return len(trimmed)

    def note(self, key: str) -> bytes | None:
        """A small value the replica keeps with the store (the archive of a compacted store),
        in the meta table under ``note:<key>``."""
        with self._sqlite("while reading a note") as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (f"note:{key}",)).fetchone()
        return None if row is None else _typed(self.path, row[0], bytes, f"note {key}")

    def set_note(self, key: str, value: bytes | None) -> None:
        with self._transaction("writing a note") as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE key = ?", (f"note:{key}",))
            else:
                db.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                    (f"note:{key}", bytes(value)),
                )

    def vacuum(self) -> None:
        """Give the free pages back to the file system (``VACUUM``), so a compacted store's
        file shrinks, then checkpoint and truncate the log."""
        self._check_writable("vacuuming")
        lock = self._lock
        assert lock is not None
        lock.acquire(self.wait)
        try:
            with self._sqlite("while vacuuming") as db:
                db.execute("VACUUM")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                self._mark()
        finally:
            lock.release()

    def scrub_free_space(self) -> None:
        """Make bytes this store deleted unrecoverable from its files (SEMANTICS §10): freed
        pages were overwritten with zeros as they were freed (``secure_delete``); here the
        write-ahead log, which still holds the old page images, is copied back and truncated
        to nothing (``wal_checkpoint(TRUNCATE)``). A reader holding an old snapshot of the log
        can make the truncation wait; it is tried again on close."""
        with self._sqlite("while checkpointing after a redaction") as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    def received_marks(self) -> list[tuple[int, int]]:
        """``(position, ms)`` receive marks, sorted (`statefuse.storage.store.ReceiveMarks`); none
        in
        a store no write of this release has touched."""
        with self._sqlite("while reading the receive marks") as db:
            found = db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'received'"
            ).fetchone()
            if found is None:
                return []
            rows = db.execute("SELECT pos, ms FROM received ORDER BY pos").fetchall()
        return [(int(pos), int(ms)) for pos, ms in rows]

    def pending_index(self) -> list[PendingRow]:
        with self._sqlite("while reading the pending changes") as db:
            if self._schema(db) < 5:  # read-only, not migrated: no index stored yet
                return []
            rows = db.execute(
                "SELECT change_id, author, seq, prev, length(data) FROM pending"
                " WHERE author IS NOT NULL AND seq IS NOT NULL AND prev IS NOT NULL"
                " ORDER BY rowid"
            ).fetchall()
        p, what = self.path, "a pending change"
        return [
            PendingRow(
                _typed(p, cid, bytes, what),
                None,
                _typed(p, author, bytes, what),
                _typed(p, seq, int, what),
                _typed(p, prev, bytes, what),
                _typed(p, size, int, what),
            )
            for cid, author, seq, prev, size in rows
        ]

    def pending_unindexed(self) -> list[PendingRow]:
        with self._sqlite("while reading the pending changes") as db:
            if self._schema(db) < 5:  # read-only, not migrated: no index stored yet
                rows = db.execute("SELECT change_id, data FROM pending ORDER BY change_id")
            else:  # the partial index `pending_unindexed`: never a scan of the whole area
                rows = db.execute(
                    "SELECT change_id, data FROM pending INDEXED BY pending_unindexed"
                    " WHERE author IS NULL ORDER BY change_id"
                )
            found = rows.fetchall()
        p, what = self.path, "a pending change"
        return [
            PendingRow(_typed(p, c, bytes, what), _typed(p, d, bytes, what), size=len(d))
            for c, d in found
        ]

    def pending_data(self, change_id: bytes) -> bytes | None:
        with self._sqlite("while reading a pending change") as db:
            row = db.execute(
                "SELECT data FROM pending WHERE change_id = ?", (change_id,)
            ).fetchone()
        return None if row is None else _typed(self.path, row[0], bytes, "a pending change")

    def _schema(self, db: sqlite3.Connection) -> int:
        """The schema version of the file (older than `SCHEMA_VERSION` only when read-only)."""
        return (
            SCHEMA_VERSION
            if not self._readonly
            else int(db.execute("PRAGMA user_version").fetchone()[0])
        )

    def index(self) -> StoreIndex:
        """The derived state of this store (`statefuse.storage.storeindex`) on its connection: the
        caller's transactions (`write_transaction`, `read_transaction`) hold its writes and
        reads. On a read-only open of a store older than `INDEX_SCHEMA` it says it was never
        built (schema 6 held an earlier layout of it, rebuilt by the first writable open).
        Bound to the connection of the moment: ask again after `rebuild`, which reopens."""
        with self._sqlite("while opening the derived state") as db:
            return StoreIndex(db, present=self._schema(db) >= INDEX_SCHEMA)

    def vectors(self) -> SQLiteVectors:
        """The embedding vectors kept in this file (`statefuse.retrieval.vectorstore`), through this
        store's connection and write lock; on a writable store their table is made now."""
        return SQLiteVectors(self._sqlite, self.write_transaction, readonly=self._readonly)

    def evictions(self) -> list[EvictionTally]:
        with self._sqlite("while reading the evictions") as db:
            if self._schema(db) < 5:
                return []
            rows = db.execute(
                "SELECT area, author, changes, bytes, first_ms, last_ms FROM evictions"
                " ORDER BY area, author"
            ).fetchall()
        p, what = self.path, "an eviction tally"
        return [
            EvictionTally(
                _typed(p, area, str, what),
                _typed(p, author, bytes, what),
                _typed(p, n, int, what),
                _typed(p, size, int, what),
                _typed(p, first, int, what),
                _typed(p, last, int, what),
            )
            for area, author, n, size, first, last in rows
        ]

    @contextlib.contextmanager
    def read_transaction(self) -> Iterator[None]:
        """One consistent state of the store (the last one committed when the first read runs)
        across every read inside, even while a writer in another process commits. Nested uses
        join the outer one."""
        with self._sqlite("while starting a read") as db:
            nested = db.in_transaction
            if not nested:
                db.execute("BEGIN")
        if nested:
            yield
            return
        try:
            yield
        except BaseException:
            _rollback(db)
            raise
        if self._db is db:  # not closed inside the block
            with self._sqlite("while ending a read"):
                db.execute("COMMIT")

    def accepted(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        with self._sqlite("while reading the accepted changes") as db:
            cursor = db.execute(
                "SELECT pos, data FROM changes WHERE pos > ? ORDER BY pos", (after,)
            )
            for pos, data in cursor:
                yield pos, _typed(self.path, data, bytes, f"accepted change #{pos}")

    def pending(self) -> list[bytes]:
        return [data for _, data in self.pending_rows()]

    def pending_rows(self) -> list[tuple[bytes, bytes]]:
        with self._sqlite("while reading the pending changes") as db:
            rows = db.execute("SELECT change_id, data FROM pending ORDER BY change_id").fetchall()
        p = self.path
        return [
            (_typed(p, c, bytes, "a pending change id"), _typed(p, d, bytes, "a pending change"))
            for c, d in rows
        ]

    def quarantine(self) -> list[QuarantineRecord]:
        with self._sqlite("while reading the quarantine") as db:
            rows = db.execute(
                "SELECT key, data, reason, message, first_seen_ms, last_seen_ms, count"
                " FROM quarantine ORDER BY first_seen_ms, key"
            ).fetchall()
        p, q = self.path, "a quarantine row"
        return [
            QuarantineRecord(
                _typed(p, k, bytes, q),
                _typed(p, d, bytes, q),
                _typed(p, r, str, q),
                _typed(p, m, str, q),
                _typed(p, f, int, q),
                _typed(p, last, int, q),
                _typed(p, n, int, q),
            )
            for k, d, r, m, f, last, n in rows
        ]

    def count(self) -> int:
        with self._sqlite("while counting the accepted changes") as db:
            return int(db.execute("SELECT count(*) FROM changes").fetchone()[0])

    def accepted_ids(self, after: int = 0) -> Iterator[tuple[int, bytes]]:
        with self._sqlite("while reading the accepted change ids") as db:
            cursor = db.execute(
                "SELECT pos, change_id FROM changes WHERE pos > ? ORDER BY pos", (after,)
            )
            for pos, change_id in cursor:
                yield pos, _typed(self.path, change_id, bytes, f"the id of accepted change #{pos}")

    def published(self, target: str) -> set[bytes]:
        with self._sqlite("while reading the publish marks") as db:
            rows = db.execute("SELECT change_id FROM published WHERE target = ?", (target,))
            return {_typed(self.path, c, bytes, "a published change id") for (c,) in rows}

    def mark_published(self, target: str, ids: Iterable[bytes]) -> None:
        rows = [(target, bytes(c)) for c in ids]
        with self._transaction("marking changes as published") as db:
            db.executemany(
                "INSERT OR IGNORE INTO published (target, change_id) VALUES (?, ?)", rows
            )

    def save_snapshot(self, upto: int, blob: bytes) -> None:
        with self._transaction("saving a snapshot") as db:
            db.execute(
                "INSERT INTO snapshot (id, upto, data) VALUES (1, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET upto = excluded.upto, data = excluded.data",
                (upto, blob),
            )

    def load_snapshot(self) -> tuple[int, bytes] | None:
        with self._sqlite("while reading the snapshot") as db:
            row = db.execute("SELECT upto, data FROM snapshot WHERE id = 1").fetchone()
        if row is None:
            return None
        what = "the snapshot"
        return _typed(self.path, row[0], int, what), _typed(self.path, row[1], bytes, what)

    def integrity_problems(self, limit: int = 20, *, full: bool = False) -> list[str]:
        """What SQLite's ``quick_check`` finds (at most ``limit`` lines; [] for a sound file),
        or the mapped error when SQLite cannot even run it. ``quick_check`` reads every page
        but skips the index-content cross-check that ``full=True`` adds (``integrity_check``:
        an index that lost a row would let a duplicate in; about 4x the time). Raises
        StoreError ``limit`` for a limit below 1."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise StoreError(
                "limit", "positive-int", f"limit is an int of at least 1, not {limit!r}"
            )
        self._conn()
        try:
            with self._sqlite("while checking the file") as db:
                check = "integrity_check" if full else "quick_check"
                rows = db.execute(f"PRAGMA {check}({limit})").fetchall()
        except StoreError as exc:
            return [exc.message]
        return [str(r[0]) for r in rows if r[0] != "ok"]

    def apply_repair(self, plan: RepairPlan) -> None:
        with self._transaction("applying a repair") as db:
            if plan and self._schema(db) >= INDEX_SCHEMA:
                # rows leave the accepted changes: the derived state no longer holds, and is
                # built again by the replica's next writable load
                StoreIndex(db).drop()
            for pos, rec in plan.quarantine_accepted:
                data = _take(db, "changes", "pos", pos, f"no accepted change at position {pos}")
                if rec.data != data:
                    raise repair_plan_error(
                        f"the record for position {pos} does not hold its bytes"
                    )
                _upsert_quarantine(db, (rec,))
            for pos, cid in plan.park:
                data = _take(db, "changes", "pos", pos, f"no accepted change at position {pos}")
                row = db.execute("SELECT data FROM pending WHERE change_id = ?", (cid,)).fetchone()
                if row is not None and row[0] != data:
                    raise repair_plan_error(f"pending holds other bytes as {cid.hex()}")
                db.execute(
                    "INSERT OR IGNORE INTO pending (change_id, data) VALUES (?, ?)", (cid, data)
                )
            for cid, rec in plan.quarantine_pending:
                data = _take(db, "pending", "change_id", cid, f"no pending change {cid.hex()}")
                if rec.data != data:
                    raise repair_plan_error(
                        f"the record for pending {cid.hex()} does not hold its bytes"
                    )
                _upsert_quarantine(db, (rec,))
            db.execute("DELETE FROM snapshot")

    def clean(self) -> bool:
        """Whether the file (and its -wal) is exactly as a StateFuse writer left it after its
        last commit (`statefuse.storage.filemark`): nothing else wrote it since, so what was
        verified
        when it was written still holds. False after a crash mid-write, a copy, a restore, a
        repair or an outside edit, and for a store whose mark could not be written."""
        return filemark.is_marked(self._file)

    def mark_clean(self) -> None:
        """Mark the file clean (`clean`) after a load that verified it found it sound: under
        the write lock, so no other writer's commit slips between. Never raises (a hint)."""
        if self._readonly or self._lock is None or self._depth:
            return
        with contextlib.suppress(Exception):
            self._lock.acquire(self.wait)
            try:
                self._mark()
            finally:
                self._lock.release()

    def _mark(self) -> None:
        marker = self._marker
        if marker is None:
            marker = self._marker = filemark.Marker(self._file)
        marker.mark()

    def close(self) -> None:
        _OPEN_WRITERS.discard(self)
        db, self._db = self._db, None
        try:
            if db is not None:
                # the last connection to close folds the -wal into the file: a clean file
                # is marked again after (an unclean one stays so: nothing is blessed here)
                was_clean = not self._readonly and not self._depth and self.clean()
                try:
                    db.close()
                except _FAILURES as exc:
                    raise _store_error(self.path, exc, "while closing") from exc
                if was_clean:
                    self.mark_clean()
        finally:
            if self._marker is not None:
                self._marker.close()
            if self._lock is not None:
                self._lock.release()  # held only if closed inside a write
            if self._presence is not None:
                self._presence.release()

    # --- damage -----------------------------------------------------------------------------------

    def rebuild(self) -> Path:
        """Copy every row SQLite can read into a fresh file that takes the store's place, and
        return where the damaged original was kept (``<path>.damaged-<UTC time>``).

        For a file SQLite cannot fully read (``quick_check`` fails, or reads raise). Tables are
        read in key order; where a read raises, the copy resumes past the damaged region (see
        `_salvage`). Rows SQLite cannot read are not recovered here, but the original (with its
        -wal) is never deleted: they survive there. The snapshot is not copied (a cache; the
        next open verifies every change). The store then works on the new file. It holds the
        write lock throughout, so no write of another process lands in the original, and
        another process's store refuses to write afterwards (``store-replaced``: it must open
        the new file). Raises StoreError (``readonly`` on a read-only open; ``busy`` when the
        write lock stays held; what SQLite or the file system raise, with nothing changed, if
        the copy cannot be made; ``in-use`` while another store object, in this process or
        another, has the file open for writing: a rebuild needs the file alone).
        """
        self._conn()
        self._check_writable("rebuilding the store")
        lock, presence = self._lock, self._presence
        assert lock is not None and presence is not None and self._depth == 0
        if not presence.alone():
            raise StoreError(
                "store",
                "in-use",
                f"{self.path} is open in another process (or another store object): close every"
                " other program using it, then rebuild; nothing was changed",
            )
        try:
            lock.acquire(self.wait)
            try:
                self._check_same_file()
                aside = self._rebuild()
                self._identity = _file_identity(self._file)
                return aside
            finally:
                lock.release()
        finally:
            presence.share()

    def _rebuild(self) -> Path:
        old = self._conn()
        try:
            tmp = _temp_beside(self._file, "rebuild")
        except OSError as exc:
            raise _os_error(self.path, exc, "rebuild") from None
        try:
            with self._sqlite("while rebuilding"):
                new = _fresh(tmp)
                try:
                    _copy_readable(old, new)
                except BaseException:
                    new.close()
                    raise
                _seal(new, tmp)
        except OSError as exc:
            _remove_temp(tmp)
            raise _os_error(self.path, exc, "rebuild") from None
        except BaseException:
            _remove_temp(tmp)
            raise
        return self._swap(tmp)

    def _swap(self, tmp: Path) -> Path:
        """Put the rebuilt ``tmp`` in the store's place; the original (and its -wal and -shm,
        which must never meet the new file) moves aside. Reopens whatever is then at the path."""
        old = self._conn()
        with contextlib.suppress(*_FAILURES):
            old.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db = None
        with contextlib.suppress(*_FAILURES):
            old.close()
        aside: Path | None = None
        try:
            if self._marker is not None:
                self._marker.close()  # the mark of the file set aside, never written again
            filemark.unmark(self._file)  # a new file: loaded and verified at the next open
            aside = _keep_aside(self._file)  # the file, not a symlink to it
            for end in ("-wal", "-shm"):
                side = Path(f"{self._file}{end}")
                if side.exists():
                    os.replace(side, f"{aside}{end}")
            os.replace(tmp, self._file)
            _fsync_dir(self._file.parent)
        except OSError as exc:
            _remove_temp(tmp)
            if aside is not None and not self._file.exists():
                os.rename(aside, self._file)  # the rename fallback moved it: put it back
            self._reopen()
            raise _os_error(self.path, exc, "rebuild") from None
        self._reopen()
        return aside

    def _reopen(self) -> None:
        try:
            self._db = _connect_rw(self._file, self.wait)
        except _FAILURES as exc:
            raise _store_error(self.path, exc, "after rebuilding", opening=True) from None


def _take(db: sqlite3.Connection, table: str, key: str, value: object, missing: str) -> object:
    """Delete the row ``key = value`` from ``table`` and return its data as stored, to land
    unchanged where the plan says (a plan that names a row the store does not hold raises
    StoreError ``repair-plan``; the transaction rolls back)."""
    row = db.execute(f"SELECT data FROM {table} WHERE {key} = ?", (value,)).fetchone()
    if row is None:
        raise repair_plan_error(missing)
    db.execute(f"DELETE FROM {table} WHERE {key} = ?", (value,))
    return row[0]


def _tally(db: sqlite3.Connection, area: str, counts: list[tuple[bytes, int, int]]) -> None:
    """Count evictions in the tally of ``area`` (`statefuse.storage.store.tallied`: bounded)."""
    old = [
        EvictionTally(area, a, n, size, first, last)
        for a, n, size, first, last in db.execute(
            "SELECT author, changes, bytes, first_ms, last_ms FROM evictions WHERE area = ?",
            (area,),
        )
    ]
    db.execute("DELETE FROM evictions WHERE area = ?", (area,))
    db.executemany(
        "INSERT INTO evictions VALUES (?, ?, ?, ?, ?, ?)",
        [
            (t.area, t.author, t.changes, t.nbytes, t.first_ms, t.last_ms)
            for t in tallied(old, area, counts)
        ],
    )


def _rewrite(db: sqlite3.Connection, rows: tuple[tuple[bytes, bytes], ...]) -> None:
    """Replace the bytes of accepted changes (redacted bodies cut out) and drop the snapshot,
    with freed space overwritten (``secure_delete``, on for every writing connection)."""
    db.executemany("UPDATE changes SET data = ? WHERE change_id = ?", [(d, c) for c, d in rows])
    db.execute("DELETE FROM snapshot")


def _upsert_quarantine(db: sqlite3.Connection, records: tuple[QuarantineRecord, ...]) -> None:
    """Store refused copies with the rule of `merge_quarantine`: keep the first verdict, count
    the sightings."""
    db.executemany(
        "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (key) DO UPDATE SET"
        " first_seen_ms = min(first_seen_ms, excluded.first_seen_ms),"
        " last_seen_ms = max(last_seen_ms, excluded.last_seen_ms),"
        " count = count + excluded.count",
        [
            (r.key, r.data, r.reason, r.message, r.first_seen_ms, r.last_seen_ms, r.count)
            for r in records
        ],
    )
