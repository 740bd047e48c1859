"""Real file systems for tests that need one the host does not offer: a read-only one and a tiny
full one, each mounted in a private user and mount namespace (``unshare --user --map-root-user
--mount``), so no root, no host mount and nothing left behind. Inside, the command sees a real
``EROFS`` or ``ENOSPC``; outside, nothing changed.

Where namespaces are not allowed, `read_only` falls back to an unprivileged user (``nobody``) in a
0555 copy, when the test runs as root and that user can run this interpreter; `need` skips
otherwise, and under ``CI=true`` fails instead: a CI run never silently skips.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

_UNSHARE = ("unshare", "--user", "--map-root-user", "--mount")
_READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" "$1" && shift && exec "$@"'
_TMPFS = 'mount -t tmpfs -o size="$2" tmpfs "$1" && shift 2 && exec "$@"'


@functools.cache
def namespaces() -> bool:
    """Whether this host lets a process mount in a user namespace of its own (the variable
    ``STATEFUSE_TEST_NO_NAMESPACES=1`` says no, to try the fallback)."""
    if os.environ.get("STATEFUSE_TEST_NO_NAMESPACES") == "1":
        return False
    try:
        probe = subprocess.run(
            [*_UNSHARE, "sh", "-c", _READ_ONLY, "sh", str(ROOT), "true"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


@functools.cache
def _nobody() -> pwd.struct_passwd | None:
    """The unprivileged user a root test can drop to, if it can run this interpreter and import
    the project (a clone or interpreter in a 0700 folder is out of its reach)."""
    if os.geteuid() != 0:
        return None
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        return None
    probe = subprocess.run(
        [sys.executable, "-c", "import statefuse.sync.replica"],
        capture_output=True,
        cwd="/",
        user=user.pw_uid,
        group=user.pw_gid,
        timeout=120,
        check=False,
    )
    return user if probe.returncode == 0 else None


def need(what: str, available: bool) -> None:
    """Skip a test that cannot run here; under CI=true fail it instead."""
    if available:
        return
    reason = f"{what}: this host allows no user/mount namespace (unshare) to make one in"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class ReadOnly:
    """``directory`` as a read-only file system: `argv` wraps a command to run there."""

    def __init__(self, directory: Path) -> None:
        need("a read-only file system", namespaces() or _nobody() is not None)
        self.directory = directory
        self._user: pwd.struct_passwd | None = None
        if not namespaces():  # the fallback: files the unprivileged user owns and may read
            self._user = _nobody()  # (a key file stays private), in a 0555 root directory
            assert self._user is not None
            for f in directory.iterdir():
                os.chown(f, self._user.pw_uid, self._user.pw_gid)
                os.chmod(f, 0o400 if f.name.endswith(".key") else 0o444)
            os.chmod(directory, 0o555)

    def argv(self, *command: str) -> list[str]:
        if self._user is not None:
            return list(command)
        return [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            _READ_ONLY,
            "sh",
            str(self.directory),
            *command,
        ]

    def options(self) -> dict[str, Any]:
        """`subprocess` options for the command: the unprivileged user, where one is used."""
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid}

    def statefuse(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(sys.executable, "-m", "statefuse", *argv),
            capture_output=True,
            text=True,
            cwd=self.directory,
            timeout=120,
            check=False,
            **self.options(),
        )

    def restore(self) -> None:
        """Make the directory writable again (the fallback changed its modes)."""
        if self._user is not None:
            os.chmod(self.directory, 0o755)


def shared_dir() -> Path:
    """A new directory under the system's temp dir that any user can reach (the fallback's
    user cannot enter a test's tmp_path when that lies in a 0700 folder); `remove` it after."""
    outer = Path(tempfile.mkdtemp(prefix="statefuse-mount-"))
    os.chmod(outer, 0o755)
    return outer


def on_tmpfs(directory: Path, size: str, command: Sequence[str]) -> list[str]:
    """``command`` run with a fresh tmpfs of ``size`` (``"32m"``) mounted on ``directory``."""
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "--mount",
        "sh",
        "-c",
        _TMPFS,
        "sh",
        str(directory),
        size,
        *command,
    ]


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
