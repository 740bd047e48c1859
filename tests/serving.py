"""``statefuse serve`` in a real process, for tests that talk to a served store over HTTP.

One helper instead of a copy per test file: the process is started from the project root with
the test's interpreter, its first line (``Serving space … at URL, auth …``) gives the URL, and
the process is stopped (and waited for) when the block ends, whatever the test did.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_URL = re.compile(r" at (https?://127\.0\.0\.1:\d+), auth ")


@contextmanager
def served_process(path: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``statefuse --store PATH serve OPTIONS`` until the block ends; yields its URL and the
    process (its stderr, when it died before serving, is in the assertion's message)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "statefuse", "--store", str(path), "serve", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = _URL.search(first)
        assert match, (first, proc.stderr.read() if proc.poll() is not None else "")
        yield match.group(1), proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=60)


@contextmanager
def served(path: Path, *options: str) -> Iterator[str]:
    """`served_process`, yielding the URL alone."""
    with served_process(path, *options) as (url, _):
        yield url
