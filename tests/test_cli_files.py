"""The command line on file systems that refuse writes: a read-only one (``verify``, ``export``
and ``serve`` read a sound store there and say so) and a full one (a snapshot that cannot be
saved is one plain ``Warning:`` line).

The file systems are real (`tests.mounts`: a read-only bind mount or a tiny tmpfs in a private
mount namespace), and every command runs as its own process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mounts import ReadOnly, namespaces, need, on_tmpfs, remove, shared_dir

ROOT = Path(__file__).resolve().parents[1]


def _statefuse(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _values(path: Path) -> list[str]:
    shown = _statefuse("--store", str(path), "--json", "show", "--all")
    assert shown.returncode == 0, shown.stderr
    return sorted(json.dumps(c["value"]) for c in json.loads(shown.stdout)["claims"])


@pytest.fixture
def outer() -> Iterator[Path]:
    """A directory any user can reach, removed after the test."""
    made = shared_dir()
    try:
        yield made
    finally:
        remove(made)


@pytest.fixture
def read_only(outer: Path) -> Iterator[ReadOnly]:
    """``ro/s.db``, a sound store with two claims, on a read-only file system."""
    home = outer / "ro"
    home.mkdir()
    for i, value in enumerate(("1", "2")):
        if i == 0:
            made = _statefuse("--store", str(home / "s.db"), "init", "--space", "team")
            assert made.returncode == 0, made.stderr
        assert (
            _statefuse("--store", str(home / "s.db"), "claim", f"p/s/v{i}", value).returncode == 0
        )
    fs = ReadOnly(home)
    try:
        yield fs
    finally:
        fs.restore()


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_verify_on_a_read_only_file_system_finds_a_sound_store_sound(read_only):
    before = _files(read_only.directory)
    verified = read_only.statefuse("--store", "s.db", "verify")
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    assert "OK: every stored change verifies" in verified.stdout
    assert "repair" not in verified.stdout + verified.stderr
    assert "2 accepted" in verified.stdout
    assert _files(read_only.directory) == before


def test_export_reads_a_store_on_a_read_only_file_system(read_only, outer):
    out = outer / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    bundle = out / "b.bundle"
    exported = read_only.statefuse("--store", "s.db", "export", str(bundle))
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == f"Exported 2 changes to {bundle}\n"
    peer = out / "peer.db"
    assert _statefuse("--store", str(peer), "init", "--space", "team").returncode == 0
    assert _statefuse("--store", str(peer), "import", str(bundle)).returncode == 0
    assert _values(peer) == ["1", "2"]


def test_serve_on_a_read_only_file_system_answers_reads_and_refuses_pushes(read_only, outer):
    before = _files(read_only.directory)
    peer = outer / "peer.db"
    assert _statefuse("--store", str(peer), "init", "--space", "team").returncode == 0
    assert _statefuse("--store", str(peer), "claim", "p/peer/v", "3").returncode == 0
    proc = subprocess.Popen(
        read_only.argv(
            sys.executable, "-m", "statefuse", "--store", "s.db", "serve", "--port", "0"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=read_only.directory,
        **read_only.options(),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)", first)
        assert match, (first, proc.poll(), proc.poll() is not None and proc.stderr.read())
        url = match.group(1)
        synced = _statefuse("--store", str(peer), "sync", url)
        # reconcile and fetch are answered: the served claims arrive; the push is refused
        assert _values(peer) == ["1", "2", "3"]
        assert synced.returncode == 1
        assert synced.stderr == (
            f"Error: {url} answered /v1/push with 503: this server serves its store read-only:"
            " it answers reconcile, fetch and info, and refuses pushes\n"
        )
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert err.splitlines()[0] == (
        "Warning: s.db is read-only to this process (a read-only file system or directory):"
        " serving it read-only; pushes are refused"
    )
    assert "Traceback" not in err
    assert _files(read_only.directory) == before


def test_a_writer_on_a_read_only_file_system_is_told_which_commands_work(read_only):
    refused = read_only.statefuse("--store", "s.db", "claim", "p/s/v9", "9")
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: cannot ")
    assert refused.stderr.endswith("(a read-only directory? commands that only read still work)\n")
    assert len(refused.stderr.splitlines()) == 1


_MAKE_UNSNAPSHOTTED = textwrap.dedent(
    """
    import os, sqlite3, sys
    from statefuse.sync.replica import Replica
    rep = Replica.open(sys.argv[1], space="team", create=True)
    with rep.batch():
        for i in range(1500):
            rep.add_claim(f"p/s{i}/v", os.urandom(100).hex())
    sqlite3.connect(sys.argv[1]).execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    os._exit(0)  # never closed: no snapshot saved, so the next writer's close saves one
    """
)

_FULL_DISK = textwrap.dedent(
    """
    set -e
    cd "$1"
    "$2" -c "$3" s.db
    free=$(df -k --output=avail . | tail -1)
    dd if=/dev/zero of=filler bs=1k count=$((free - 256)) 2>/dev/null || true
    "$2" -m statefuse --store s.db claim p/last/v 1
    """
)


def test_a_snapshot_a_full_disk_refuses_is_one_plain_warning_line(outer):
    need("a full file system", namespaces())
    disk = outer / "disk"
    disk.mkdir()
    # a 32 MB tmpfs holds the store; a filler leaves 256 KB: room for one claim and what it
    # adds to the derived state, not for a snapshot of 1,500 claims
    argv = on_tmpfs(
        disk,
        "32m",
        ["sh", "-c", _FULL_DISK, "sh", str(disk), sys.executable, _MAKE_UNSNAPSHOTTED],
    )
    run = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("Added claim ")
    assert run.stderr == (
        "Warning: snapshot not saved: s.db: SQLite failed while saving a snapshot: database or"
        " disk is full (snapshot-save)\n"
    )
