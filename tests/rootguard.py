"""The test suite leaves the repository root as it found it.

A test that writes a file into the working directory (a bundle, a store, a key) while run from a
checkout leaves litter that ends up committed. The guard notes the root's entries when the session
starts and fails the run, naming each one, if the session added an entry or rewrote a file there.
Under pytest-xdist the controller alone checks, once every worker is done.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: Caches that tools create in the working directory by design (Hypothesis's example database).
ALLOWED = frozenset({".hypothesis", ".pytest_cache", "__pycache__"})

_KEY = pytest.StashKey[dict[str, tuple[int, int]]]()


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Each entry of ``root`` with its size and modification time (zero for a folder)."""
    out: dict[str, tuple[int, int]] = {}
    for entry in os.scandir(root):
        if entry.is_dir(follow_symlinks=False):
            out[entry.name] = (0, 0)
        else:
            st = entry.stat(follow_symlinks=False)
            out[entry.name] = (st.st_size, st.st_mtime_ns)
    return out


def changes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> list[str]:
    """What the session did to the root: entries added or rewritten, caches aside."""
    out = []
    for name in sorted(after.keys() - ALLOWED):
        if name not in before:
            out.append(f"{name} (new)")
        elif after[name] != before[name]:
            out.append(f"{name} (rewritten)")
    return out


def _controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _controller(session.config):
        session.config.stash[_KEY] = listing(session.config.rootpath)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_KEY, None)
    if before is None:
        return
    found = changes(before, listing(session.config.rootpath))
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = "the test suite wrote into the repository root: " + ", ".join(found)
        if reporter is not None:
            reporter.write_line(f"ERROR: {line}", red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
