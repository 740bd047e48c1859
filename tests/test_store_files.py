"""The SQLite store's file: what it refuses, how it is read beside a writer, how SQLite's errors
surface, and how a damaged file is rebuilt (`statefuse.storage.sqlitestore`).

The store contract itself (what every store keeps) is in ``test_store.py``; these tests are about
bytes on disk: foreign files left untouched, schema 1 stores migrated (or read as they are),
read-only opens next to a live writer process, damaged pages, and the rebuild that keeps every
row SQLite can still read while the damaged original stays beside it, byte for byte.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from statefuse.storage.sqlitestore import APPLICATION_ID, SQLiteStore
from statefuse.storage.store import (
    SCHEMA_VERSION,
    QuarantineRecord,
    RepairPlan,
    StoreError,
    StoreInfo,
    StoreWrite,
)
from tests.mounts import ReadOnly, remove, shared_dir

ROOT = Path(__file__).resolve().parents[1]
INFO = StoreInfo(space="team", mode="open", root=None, registry=b"\x01" * 32)
#: Every file a store may put beside its own.
SIDECARS = ("-wal", "-shm", "-journal", ".lock")


def _cid(i: int) -> bytes:
    return i.to_bytes(32, "big")


def _sidecars(path: Path) -> list[str]:
    return [end for end in SIDECARS if Path(f"{path}{end}").exists()]


def _header(path: Path) -> tuple[int, int]:
    """``(user_version, application_id)`` read from the file header, without SQLite."""
    raw = path.read_bytes()[:100]
    return int.from_bytes(raw[60:64], "big"), int.from_bytes(raw[68:72], "big")


# --- files that are not stores --------------------------------------------------------------------


def _foreign_db(path: Path, journal: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode={journal}")
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, user TEXT)")
    db.execute("INSERT INTO users VALUES ('ada')")
    db.commit()
    db.close()


OPENS = {
    "create": {},
    "no-create": {"create": False},
    "readonly": {"readonly": True},
}


@pytest.mark.parametrize("journal", ["delete", "wal"])
@pytest.mark.parametrize("how", sorted(OPENS))
def test_a_foreign_sqlite_database_is_refused_and_left_byte_for_byte(tmp_path, journal, how):
    path = tmp_path / "their.db"
    _foreign_db(path, journal)
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path, **OPENS[how])
    assert (err.value.field, err.value.rule) == ("path", "not-a-store")
    assert err.value.message == (
        f"{path} is not a StateFuse store (an SQLite database with tables: orders, users);"
        " nothing was changed"
    )
    assert path.read_bytes() == before
    assert _sidecars(path) == []
    assert sorted(os.listdir(tmp_path)) == ["their.db"]


def _text(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("hello, these are notes\n" * 40)
    return path


def _binary(tmp_path: Path) -> Path:
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8)
    return path


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "folder.db"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (_text, "a text file"),
        (_binary, "a file that is not an SQLite database"),
        (_empty, "an empty file"),
        (_directory, "a directory"),
    ],
)
@pytest.mark.parametrize("how", sorted(OPENS))
def test_files_that_are_not_sqlite_databases_are_refused_untouched(tmp_path, make, what, how):
    path = make(tmp_path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(StoreError) as err:
        SQLiteStore(path, **OPENS[how])
    assert err.value.rule == "not-a-store"
    assert err.value.message == f"{path} is not a StateFuse store ({what}); nothing was changed"
    if before is not None:
        assert path.read_bytes() == before
    assert _sidecars(path) == []
    assert sorted(os.listdir(tmp_path)) == [path.name]


def test_an_sqlite_database_of_another_application_is_refused_even_with_our_table_names(tmp_path):
    path = tmp_path / "s.db"
    _v1_store(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA application_id = 4660")
    db.close()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "not-a-store" and "0x00001234" in err.value.message


def test_a_store_lookalike_with_an_extra_table_is_refused(tmp_path):
    path = tmp_path / "s.db"
    _v1_store(path)
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name TEXT)")
    db.close()
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        SQLiteStore(path)
    assert err.value.rule == "not-a-store"
    assert "changes, meta, pending, quarantine, snapshot, users" in err.value.message
    assert path.read_bytes() == before


@pytest.mark.parametrize("how", ["no-create", "readonly"])
def test_a_missing_path_is_no_such_store_and_nothing_is_created(tmp_path, how):
    path = tmp_path / "typo.db"
    with pytest.raises(StoreError) as err:
        SQLiteStore(path, **OPENS[how])
    assert (err.value.field, err.value.rule) == ("path", "no-such-store")
    assert str(path) in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_an_sqlite_header_over_bytes_sqlite_cannot_read_is_store_unreadable(tmp_path):
    path = tmp_path / "s.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4080)
    before = path.read_bytes()
    for how in sorted(OPENS):
        with pytest.raises(StoreError) as err:
            SQLiteStore(path, **OPENS[how])
        assert err.value.rule == "store-unreadable", how
        message = err.value.message
        assert str(path) in message and "file is not a database" in message
        assert "restore it from a backup, or make a new store (`statefuse init`)" in message
    assert path.read_bytes() == before
    assert _sidecars(path) == []


def test_a_new_store_is_marked_as_statefuse_and_appears_whole(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    assert sorted(os.listdir(tmp_path)) == ["s.db", "s.db-shm", "s.db-wal", "s.db.lock"]
    store.close()
    assert sorted(os.listdir(tmp_path)) == ["s.db", "s.db.lock"]  # no temporary file left
    assert _header(path) == (SCHEMA_VERSION, APPLICATION_ID) == (7, APPLICATION_ID)
    db = sqlite3.connect(path)
    (store_id,) = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    db.close()
    assert len(store_id) == 16
    store = SQLiteStore(path)  # an uninitialized store of ours is recognised
    assert store.info() is None
    store.initialize(INFO)
    assert store.info().store_id == store_id
    store.close()


def test_a_path_with_spaces_and_uri_characters_opens_read_write_and_read_only(tmp_path):
    home = tmp_path / "my dir?x=1#top"
    home.mkdir()
    path = home / "a store?mode=rw#%20.db"
    store = SQLiteStore(path)
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    store.close()
    reader = SQLiteStore(path, readonly=True)
    assert [d for _, d in reader.accepted()] == [b"c1"] and reader.info() == INFO
    reader.close()
    assert sorted(p.name for p in home.iterdir() if p.name.endswith(".db")) == [path.name]


# --- schema 1 -------------------------------------------------------------------------------------

#: The tables of the first release, as it created them.
V1_DDL = """
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
"""


def _v1_store(path: Path, *, initialized: bool = True) -> None:
    """A store as the first release left it (WAL mode, user_version 1, no application id)."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(V1_DDL)
    if initialized:
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("space", "team"), ("mode", "open"), ("root", b""), ("registry", b"\x01" * 32)],
        )
    db.executemany(
        "INSERT INTO changes (change_id, data) VALUES (?, ?)",
        [(_cid(i), b"c%d" % i) for i in (1, 2, 3)],
    )
    db.execute("INSERT INTO pending VALUES (?, ?)", (_cid(9), b"c9"))
    db.execute(
        "INSERT INTO quarantine VALUES (?, ?, ?, ?, ?, ?, ?)",
        (_cid(7), b"bad", "malformed", "garbage", 5, 6, 2),
    )
    db.execute("INSERT INTO snapshot VALUES (1, 3, ?)", (b"snap",))
    db.execute("PRAGMA user_version = 1")
    db.close()


def _content(store: SQLiteStore) -> tuple[object, ...]:
    return (
        list(store.accepted()),
        store.pending_rows(),
        store.quarantine(),
        store.load_snapshot(),
    )


V1_CONTENT = (
    [(1, b"c1"), (2, b"c2"), (3, b"c3")],
    [(_cid(9), b"c9")],
    [QuarantineRecord(_cid(7), b"bad", "malformed", "garbage", 5, 6, 2)],
    (3, b"snap"),
)


def test_a_schema_1_store_opens_and_is_migrated_to_the_current_schema_with_a_store_id(tmp_path):
    path = tmp_path / "s.db"
    _v1_store(path)
    assert _header(path) == (1, 0)
    store = SQLiteStore(path)
    info = store.info()
    assert info == INFO and len(info.store_id) == 16 and info.author is None
    assert _content(store) == V1_CONTENT
    assert store.bind(b"\x0a" * 32).author == b"\x0a" * 32
    store.close()
    assert _header(path) == (SCHEMA_VERSION, APPLICATION_ID)
    db = sqlite3.connect(path)
    schema = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
    db.close()
    for area in ("pending", "quarantine"):  # big rows: appended, only the key in an index
        assert "WITHOUT ROWID" not in schema[area] and "UNIQUE" in schema[area]
    again = SQLiteStore(path)
    assert again.info().store_id == info.store_id  # migrated once, not again
    assert _content(again) == V1_CONTENT
    again.close()


def _v3_store(path: Path) -> None:
    """A store as schema 3 left it (before the publish marks): the first release's file,
    migrated by the steps of that time."""
    from statefuse.storage.sqlitestore import _MIGRATIONS

    _v1_store(path)
    db = sqlite3.connect(path, isolation_level=None)
    for version in (1, 2):
        db.execute("BEGIN IMMEDIATE")
        _MIGRATIONS[version](db)
        db.execute(f"PRAGMA user_version = {version + 1}")
        db.execute("COMMIT")
    db.close()


def test_a_schema_3_store_gains_the_publish_marks_and_keeps_everything_else(tmp_path):
    path = tmp_path / "s.db"
    _v3_store(path)
    assert _header(path) == (3, APPLICATION_ID)
    store = SQLiteStore(path)
    assert _content(store) == V1_CONTENT
    assert store.published("SF_team") == set()
    store.mark_published("SF_team", [_cid(1), _cid(2)])
    store.close()
    assert _header(path) == (SCHEMA_VERSION, APPLICATION_ID)
    again = SQLiteStore(path)
    assert again.published("SF_team") == {_cid(1), _cid(2)}
    assert again.published("SF_other") == set()
    assert _content(again) == V1_CONTENT
    again.close()


def test_a_read_only_open_reads_a_schema_1_store_as_it_is(tmp_path):
    path = tmp_path / "s.db"
    _v1_store(path)
    before = path.read_bytes()
    reader = SQLiteStore(path, readonly=True)
    assert reader.readonly
    assert reader.info() == INFO and reader.info().store_id == b""
    assert _content(reader) == V1_CONTENT
    reader.close()
    assert path.read_bytes() == before  # not migrated: still schema 1, byte for byte
    assert not Path(f"{path}.lock").exists()


def test_a_schema_1_store_created_but_never_initialized_still_opens(tmp_path):
    path = tmp_path / "s.db"
    _v1_store(path, initialized=False)
    store = SQLiteStore(path)
    assert store.info() is None
    store.initialize(INFO)
    assert store.info() == INFO and [d for _, d in store.accepted()] == [b"c1", b"c2", b"c3"]
    store.close()


def test_a_store_of_a_newer_schema_is_refused_read_only_too(tmp_path):
    path = tmp_path / "s.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = path.read_bytes()
    for how in ("create", "readonly"):
        with pytest.raises(StoreError) as err:
            SQLiteStore(path, **OPENS[how])
        assert err.value.rule == "schema-version"
        assert f"schema {SCHEMA_VERSION + 1}" in err.value.message
    assert path.read_bytes() == before


# --- read-only opens ------------------------------------------------------------------------------


def _small_store(path: Path) -> None:
    store = SQLiteStore(path)
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"), (_cid(2), b"c2"))))
    store.write(StoreWrite(pending=((_cid(5), b"c5"),)))
    store.close()


def test_a_read_only_store_refuses_every_write_and_changes_nothing(tmp_path):
    path = tmp_path / "s.db"
    _small_store(path)
    reader = SQLiteStore(path, readonly=True)
    before = _content(reader)
    positions = [p for p, _ in reader.accepted()]
    writes = {
        "initialize": lambda: reader.initialize(INFO),
        "write": lambda: reader.write(StoreWrite(accepted=((_cid(3), b"c3"),))),
        "write nothing": lambda: reader.write(StoreWrite()),
        "bind": lambda: reader.bind(b"\x0a" * 32),
        "save_snapshot": lambda: reader.save_snapshot(2, b"snap"),
        "apply_repair": lambda: reader.apply_repair(RepairPlan(park=((positions[0], _cid(1)),))),
        "rebuild": reader.rebuild,
    }
    for name, call in writes.items():
        with pytest.raises(StoreError) as err:
            call()
        assert (err.value.field, err.value.rule) == ("store", "readonly"), name
        assert str(path) in err.value.message
    assert _content(reader) == before and reader.info().author is None
    reader.close()
    assert list(tmp_path.glob("*.damaged-*")) == []


def test_a_read_only_open_takes_no_lock(tmp_path):
    path = tmp_path / "s.db"
    _small_store(path)
    writer = SQLiteStore(path)
    try:
        reader = SQLiteStore(path, readonly=True)  # beside a writer holding the lock
        writer.write(StoreWrite(accepted=((_cid(3), b"c3"),)))
        assert reader.count() == 3  # a new read sees the last commit
        reader.close()
    finally:
        writer.close()
    reader = SQLiteStore(path, readonly=True)
    writer = SQLiteStore(path)  # and a writer opens beside a reader
    writer.close()
    reader.close()


def test_a_read_transaction_holds_one_state_while_the_writer_commits(tmp_path):
    path = tmp_path / "s.db"
    _small_store(path)
    writer = SQLiteStore(path)
    reader = SQLiteStore(path, readonly=True)
    try:
        with reader.read_transaction():
            assert reader.count() == 2
            writer.write(StoreWrite(accepted=((_cid(3), b"c3"),)))
            assert reader.count() == 2 and len(list(reader.accepted())) == 2
        assert reader.count() == 3
    finally:
        reader.close()
        writer.close()


def test_a_read_only_open_works_when_the_wal_and_shm_files_are_absent(tmp_path):
    path = tmp_path / "s.db"
    _small_store(path)
    assert _sidecars(path) == [".lock"]
    before = path.read_bytes()
    reader = SQLiteStore(path, readonly=True)
    assert [d for _, d in reader.accepted()] == [b"c1", b"c2"]
    assert reader.pending() == [b"c5"] and reader.info() == INFO
    reader.close()
    assert path.read_bytes() == before


_READ_IN_READ_ONLY_DIRECTORY = textwrap.dedent(
    """
    import sys
    from statefuse.storage.sqlitestore import SQLiteStore
    from statefuse.storage.store import StoreError
    path = sys.argv[1]
    reader = SQLiteStore(path, readonly=True)
    print([d.decode() for _, d in reader.accepted()], reader.pending(), reader.info().space)
    reader.close()
    try:
        SQLiteStore(path)
    except StoreError as exc:
        print(exc.rule)
    """
)


def test_a_read_only_open_works_in_a_read_only_directory(tmp_path):
    expected = "['c1', 'c2'] [b'c5'] team\nreadonly\n"
    home = tmp_path / "ro"
    home.mkdir()
    path = home / "s.db"
    _small_store(path)
    Path(f"{path}.lock").unlink()
    before = sorted(os.listdir(home))  # the store and its clean mark (statefuse.storage.filemark)
    os.chmod(home, 0o555)
    try:
        if not os.access(home, os.W_OK):
            result = subprocess.run(
                [sys.executable, "-c", _READ_IN_READ_ONLY_DIRECTORY, str(path)],
                capture_output=True,
                text=True,
                cwd=ROOT,
                check=False,
            )
            assert (result.returncode, result.stdout) == (0, expected), result.stderr
            assert sorted(os.listdir(home)) == before
            return
    finally:
        os.chmod(home, 0o755)
    # Root ignores directory modes: the check runs on a read-only file system instead (a bind
    # mount in a namespace of its own, or an unprivileged user's 0555 copy: tests/mounts.py), in
    # a directory any user can reach (a clone in a 0700 folder is out of the fallback's reach).
    outer = shared_dir()
    try:
        shared = outer / "ro"
        shutil.copytree(home, shared)
        fs = ReadOnly(shared)
        try:
            result = subprocess.run(
                fs.argv(sys.executable, "-c", _READ_IN_READ_ONLY_DIRECTORY, str(shared / "s.db")),
                capture_output=True,
                text=True,
                cwd=shared,
                timeout=120,
                check=False,
                **fs.options(),
            )
        finally:
            fs.restore()
        assert (result.returncode, result.stdout) == (0, expected), result.stderr
        assert sorted(os.listdir(shared)) == before
    finally:
        remove(outer)


_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from statefuse.storage.sqlitestore import SQLiteStore
    from statefuse.storage.store import StoreWrite
    store = SQLiteStore(sys.argv[1])
    print("ready", flush=True)
    for b in range(int(sys.argv[2])):  # until told to stop (the file sys.argv[3] exists)
        if os.path.exists(sys.argv[3]):
            break
        ids = [(1000 + 10 * b + j).to_bytes(32, "big") for j in range(10)]
        store.write(StoreWrite(accepted=tuple((c, b"x" * 200) for c in ids)))
        time.sleep(0.001)
    store.close()
    """
)


def test_read_only_opens_beside_a_live_writer_process_see_whole_committed_batches(tmp_path):
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    store.initialize(INFO)
    store.write(StoreWrite(accepted=((_cid(1), b"c1"),)))
    store.close()
    batches = 100_000  # a cap: the writer goes on until the readers saw it at work
    stop = tmp_path / "stop"

    def expected(n: int) -> list[bytes]:
        return [_cid(1)] + [_cid(1000 + i) for i in range(n - 1)]

    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path), str(batches), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    seen: list[int] = []
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 120
        while writer.poll() is None and time.monotonic() < deadline:
            reader = SQLiteStore(path, readonly=True)
            try:
                with reader.read_transaction():
                    n = reader.count()
                    ids = [c for _, c in reader.accepted_ids()]
            finally:
                reader.close()
            assert ids == expected(n)  # a prefix in append order: whole batches, no gaps
            assert n % 10 == 1
            seen.append(n)
            if len(set(seen)) >= 3:  # the readers really ran while the writer wrote
                stop.touch()
    finally:
        if writer.poll() is None:
            writer.kill()
        assert writer.wait(timeout=60) == 0
    assert seen == sorted(seen)
    assert len(set(seen)) >= 3, seen  # the readers really ran while the writer wrote
    reader = SQLiteStore(path, readonly=True)
    n = reader.count()
    assert n % 10 == 1 and [c for _, c in reader.accepted_ids()] == expected(n)
    reader.close()


# --- SQLite's errors, at one seam -----------------------------------------------------------------

ACCEPTED, PENDING, ROW = 300, 60, 2048


def _big_store(path: Path, *, accepted: int = ACCEPTED, pending: int = PENDING) -> None:
    """A closed store whose rows span many pages: accepted change ``i`` (at position i + 1)
    holds ``acc<i>`` then zeros, pending change ``1000 + i`` holds ``pen<i>``."""
    store = SQLiteStore(path)
    store.initialize(INFO)
    for i in range(accepted):
        store.write(StoreWrite(accepted=((_cid(i), b"acc%05d" % i + bytes(ROW - 8)),)))
    store.write(
        StoreWrite(
            pending=tuple(
                (_cid(1000 + i), b"pen%05d" % i + bytes(ROW - 8)) for i in range(pending)
            ),
            quarantined=(QuarantineRecord(_cid(7), b"bad", "malformed", "garbage", 5, 6),),
        )
    )
    store.save_snapshot(accepted, b"snap")
    store.close()
    assert _sidecars(path) == [".lock"]


def _page_size(raw: bytes) -> int:
    size = int.from_bytes(raw[16:18], "big")
    return 65536 if size == 1 else size


def _scramble_page_holding(path: Path, marker: bytes, seed: int) -> int:
    """Overwrite the page holding ``marker`` with bytes that are no b-tree page; its number."""
    raw = bytearray(path.read_bytes())
    size = _page_size(raw)
    page = raw.index(marker) // size
    noise = bytes((seed * 131 + k * 197) % 251 for k in range(size))
    raw[page * size : (page + 1) * size] = b"\xff" + noise[1:]
    path.write_bytes(bytes(raw))
    return page


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("big") / "s.db"
    _big_store(path)
    return path


def _copy(src: Path, dst_dir: Path) -> Path:
    dst = dst_dir / "s.db"
    shutil.copyfile(src, dst)
    return dst


def test_a_damaged_page_surfaces_as_a_store_error_even_in_the_middle_of_a_read(big, tmp_path):
    path = _copy(big, tmp_path)
    _scramble_page_holding(path, b"acc00150", seed=1)
    store = SQLiteStore(path)
    got: list[int] = []
    with pytest.raises(StoreError) as err:
        for pos, _ in store.accepted():
            got.append(pos)
    assert 100 < len(got) < 151  # the rows before the damage came through first
    assert err.value.rule == "store-unreadable"
    assert (
        str(path) in err.value.message and "database disk image is malformed" in err.value.message
    )
    assert "run `statefuse verify`, then `statefuse repair`" in err.value.message
    assert isinstance(err.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(StoreError), store.read_transaction():
        list(store.accepted_ids())
    assert store.info() == INFO  # the failed read ended its transaction; the store goes on
    store.write(StoreWrite(pending=((_cid(4000), b"p"),)))
    assert store.pending_rows()[-1] == (_cid(4000), b"p")
    store.close()


def test_integrity_problems_report_a_damaged_page_and_nothing_on_a_sound_file(big, tmp_path):
    sound = SQLiteStore(_copy(big, tmp_path))
    assert sound.integrity_problems() == []
    sound.close()
    damaged_dir = tmp_path / "damaged"
    damaged_dir.mkdir()
    path = _copy(big, damaged_dir)
    _scramble_page_holding(path, b"pen00030", seed=2)
    store = SQLiteStore(path)
    problems = store.integrity_problems(limit=5)
    assert 1 <= len(problems) <= 5 and all(isinstance(p, str) and p for p in problems)
    assert any(str(path) in p or "page" in p.lower() for p in problems)
    with pytest.raises(StoreError) as err:
        store.integrity_problems(limit=0)
    assert err.value.field == "limit"
    store.close()


def test_a_truncated_store_fails_with_store_errors_only(big, tmp_path):
    path = _copy(big, tmp_path)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size // 2)
    failures = _read_everything(path, readonly=False)
    assert failures, "half a store read back as sound"


def test_a_closed_store_says_so(tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    store.initialize(INFO)
    store.close()
    store.close()  # twice is fine
    for call in (store.info, store.count, store.pending_rows, lambda: list(store.accepted())):
        with pytest.raises(StoreError) as err:
            call()
        assert err.value.rule == "open"


#: The rules a damaged file may raise; anything else (or any other exception) is a bug.
DAMAGE_RULES = {"store-unreadable", "not-a-store", "schema-version", "sqlite-error", "readonly"}


def _read_everything(path: Path, *, readonly: bool) -> list[str]:
    """Open ``path`` and call every read; the rules of the StoreErrors raised. Any other
    exception propagates (and fails the caller)."""
    failures: list[str] = []

    def attempt(call) -> None:
        try:
            call()
        except StoreError as exc:
            assert exc.rule in DAMAGE_RULES, exc
            assert str(path) in exc.message, exc
            failures.append(exc.rule)

    try:
        store = SQLiteStore(path, readonly=readonly)
    except StoreError as exc:
        assert exc.rule in DAMAGE_RULES, exc
        return [exc.rule]
    try:
        for call in (
            store.info,
            store.count,
            lambda: list(store.accepted()),
            lambda: list(store.accepted_ids(after=5)),
            store.pending_rows,
            store.quarantine,
            store.load_snapshot,
        ):
            attempt(call)
        # (quick_check may pass where reads fail: a flipped byte in a column name is a valid
        # schema to SQLite, only not ours)
        failures.extend(store.integrity_problems())
    finally:
        attempt(store.close)
    return failures


damages = st.one_of(
    st.tuples(st.just("page"), st.integers(1, 10**6), st.integers(0, 250)),
    st.tuples(st.just("flip"), st.integers(0, 10**9), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(1, 99), st.just(0)),
)


@given(damage=damages, readonly=st.booleans())
@example(damage=("flip", 48, 13), readonly=False)  # user_version made negative
@example(damage=("flip", 3367, 6), readonly=False)  # a schema entry no longer UTF-8
@example(damage=("flip", 3657, 1), readonly=False)  # a column renamed: a sound file, not ours
def test_any_damage_to_the_file_surfaces_as_store_errors_never_sqlite_errors(
    small_big, damage, readonly
):
    kind, a, b = damage
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "s.db"
        raw = bytearray(small_big.read_bytes())
        size = _page_size(raw)
        if kind == "page":  # any page but the first: the schema must be read to get this far
            page = 1 + a % (len(raw) // size - 1)
            raw[page * size : (page + 1) * size] = bytes((b + k * 7) % 256 for k in range(size))
        elif kind == "flip":
            at = a % len(raw)
            raw[at : at + b] = bytes(x ^ 0xA5 for x in raw[at : at + b])
        else:
            del raw[len(raw) * a // 100 :]
        path.write_bytes(bytes(raw))
        _read_everything(path, readonly=readonly)


@pytest.fixture(scope="module")
def small_big(tmp_path_factory) -> Path:
    """A store of 40 accepted and 10 pending changes of 2 KB each: a few dozen pages."""
    path = tmp_path_factory.mktemp("small-big") / "s.db"
    _big_store(path, accepted=40, pending=10)
    return path


# --- rebuild --------------------------------------------------------------------------------------


def _readable(path: Path) -> tuple[dict[int, tuple[bytes, bytes]], dict[bytes, bytes]]:
    """What SQLite can read of the big store at ``path``, row by row (the oracle): accepted
    rows by position, pending rows by change id."""
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    accepted: dict[int, tuple[bytes, bytes]] = {}
    pending: dict[bytes, bytes] = {}
    for pos in range(1, ACCEPTED + 1):
        try:
            row = db.execute("SELECT change_id, data FROM changes WHERE pos = ?", (pos,)).fetchone()
        except sqlite3.DatabaseError:
            continue
        accepted[pos] = (row[0], row[1])
    for i in range(PENDING):
        try:
            row = db.execute("SELECT data FROM pending WHERE change_id = ?", (_cid(1000 + i),))
            pending[_cid(1000 + i)] = row.fetchone()[0]
        except sqlite3.DatabaseError:
            continue
    db.close()
    return accepted, pending


def test_rebuild_keeps_every_readable_row_and_the_damaged_original_beside_it(big, tmp_path):
    path = _copy(big, tmp_path)
    sound = SQLiteStore(path)
    store_id = sound.info().store_id
    sound.close()
    _scramble_page_holding(path, b"acc00150", seed=3)
    _scramble_page_holding(path, b"pen00030", seed=4)
    damaged = path.read_bytes()
    readable_accepted, readable_pending = _readable(path)
    # the damage cost a row or a few in each table, no more
    assert ACCEPTED - 3 <= len(readable_accepted) < ACCEPTED
    assert PENDING - 12 <= len(readable_pending) < PENDING

    store = SQLiteStore(path)
    other = SQLiteStore(path)  # as another process's store would, open on the damaged file
    with pytest.raises(StoreError):
        list(store.accepted())
    with pytest.raises(StoreError) as busy:  # it would go on writing into the original
        store.rebuild()
    assert busy.value.rule == "in-use"
    other.close()
    aside = store.rebuild()

    assert re.fullmatch(r"s\.db\.damaged-\d{8}T\d{6}Z", aside.name) and aside.parent == tmp_path
    assert aside.read_bytes() == damaged
    rows = zip(store.accepted(), store.accepted_ids(), strict=True)
    assert {p: (c, d) for (p, d), (_, c) in rows} == readable_accepted
    assert dict(store.pending_rows()) == readable_pending
    assert store.quarantine() == [QuarantineRecord(_cid(7), b"bad", "malformed", "garbage", 5, 6)]
    assert store.info() == INFO and store.info().store_id == store_id
    assert store.load_snapshot() is None  # a cache, not copied
    assert store.integrity_problems() == []
    store.write(StoreWrite(accepted=((_cid(5000), b"new"),)))
    assert list(store.accepted())[-1] == (ACCEPTED + 1, b"new")  # no position handed out twice
    store.close()
    names = sorted(os.listdir(tmp_path))
    # the write after the rebuild marked the new file clean (statefuse.storage.filemark)
    assert names == sorted(["s.db", "s.db.clean", "s.db.lock", aside.name])
    reopened = SQLiteStore(path)
    assert reopened.count() == len(readable_accepted) + 1
    reopened.close()


def test_rebuild_of_a_store_whose_table_root_is_damaged_keeps_the_other_tables(
    big, tmp_path, monkeypatch
):
    import statefuse.storage.sqlitestore as sqlitestore

    budgets: list[sqlitestore._Budget] = []

    class Counted(sqlitestore._Budget):
        __slots__ = ()

        def __init__(self, seeks: int) -> None:
            super().__init__(seeks)
            budgets.append(self)

    monkeypatch.setattr(sqlitestore, "_Budget", Counted)
    path = _copy(big, tmp_path)
    db = sqlite3.connect(path)
    (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'changes'").fetchone()
    db.close()
    raw = bytearray(path.read_bytes())
    size = _page_size(raw)
    raw[(root - 1) * size : root * size] = b"\xff" * size
    path.write_bytes(bytes(raw))
    store = SQLiteStore(path)
    aside = store.rebuild()
    # probing past the damage is bounded, counted in seeks (a gallop and a bisection per damaged
    # region: 66 here), not in seconds
    assert budgets and all(b.left >= 0 for b in budgets)
    assert all(sqlitestore._PROBE_BUDGET - b.left <= 1_000 for b in budgets)
    assert store.count() == 0 and len(store.pending_rows()) == PENDING
    assert store.info() == INFO and len(store.quarantine()) == 1
    assert aside.read_bytes() == bytes(raw)
    store.close()


def test_rebuild_of_a_sound_store_copies_it_exactly(big, tmp_path):
    path = _copy(big, tmp_path)
    store = SQLiteStore(path)
    before = (list(store.accepted()), store.pending_rows(), store.quarantine(), store.info())
    aside = store.rebuild()
    after = (list(store.accepted()), store.pending_rows(), store.quarantine(), store.info())
    assert after == before and store.info().store_id == before[3].store_id
    assert aside.read_bytes() == big.read_bytes()
    store.close()
