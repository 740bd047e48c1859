"""The clean mark: whether a store's file is as a StateFuse writer last left it.

A replica that opens on the store's derived state reads a few indexed rows and verifies none
of the stored changes, so it must know that nothing but StateFuse wrote the file since those
changes were verified: a flipped byte, a copy, a restored backup, a crash in the middle of a
write, an edit by another tool. Reading every row to find out would cost what the open avoids.

So every writer, after each commit and while it still holds the write lock, records the
identity of the file and its write-ahead log as they are then (size, modification and change
times in nanoseconds, inode) in ``<file>.clean``. An open compares: equal means no one has
written the files since a StateFuse commit (the change time cannot be set back from user
space); anything else (no mark, another identity) means the replica loads and verifies the
store as before, and marks it again once it found it sound. The mark is a hint, never data:
it is written without fsync, and a lost or stale one only costs a full load.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

#: What the mark file's name adds to the store's (resolved) path.
SUFFIX = ".clean"


def _identity(path: str, *, log: bool = False) -> list[int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    if log:
        # A reader opening the store creates an empty -wal when there is none: no content, so
        # the same as none (a write makes it non-empty, and changes its times). And SQLite,
        # run as root, hands the -wal to the database file's owner each time a connection
        # opens it (fchown), which moves its change time though nothing was written: the
        # log's identity leaves the change time out (its size and modification time still
        # move with every write; the database file keeps all of them).
        if st.st_size == 0:
            return None
        return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _seen(file: Path) -> dict[str, list[int] | None]:
    return {"db": _identity(str(file)), "wal": _identity(f"{file}-wal", log=True)}


class Marker:
    """The clean mark of one store file, as its writer keeps it: the mark file stays open, so
    marking after a commit is one write of a few bytes (a new file and a rename per commit
    cost more than the commit's own work). A reader that meets a mark half written finds no
    mark (it does not parse, or names another identity) and loads in full: never wrong."""

    __slots__ = ("_fd", "_file")

    def __init__(self, file: Path) -> None:
        self._file = file
        self._fd: int | None = None

    def mark(self) -> None:
        """Record the file and its -wal as they are now. Call it only holding the store's
        write lock, right after a commit (or a load that verified the store): what it records
        is then what StateFuse wrote. Never raises: a mark that cannot be written is left out
        (and the file closed, to be opened again next time)."""
        data = json.dumps(_seen(self._file), sort_keys=True).encode()
        try:
            if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
                self.close()  # removed meanwhile (a repair, a person): made again
            if self._fd is None:
                self._fd = os.open(f"{self._file}{SUFFIX}", os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))
        except OSError:
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def unmark(file: Path) -> None:
    """Forget the mark (a repair, a rebuild: the next open loads and verifies)."""
    with contextlib.suppress(OSError):
        Path(f"{file}{SUFFIX}").unlink()


def is_marked(file: Path) -> bool:
    """Whether ``file`` and its -wal are exactly as the last mark recorded them."""
    try:
        recorded = json.loads(Path(f"{file}{SUFFIX}").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(recorded, dict) and recorded == _seen(file)
