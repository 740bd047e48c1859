"""Rendering results: the text table, the JSON document and the machine description in it.

Invariant: the table and the JSON show the same rows; the JSON adds every raw sample, the run's
options, the workload statistics and enough about the machine and checkout to compare runs.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from benchmarks.materialize import Row, Unit
from benchmarks.measure import sectioned

ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def utc_stamp() -> str:
    """Now in UTC as ``YYYYMMDDTHHMMSSZ``: the suffix of every result file's name, so names
    sort by when they ran."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (other work on the machine makes timings noisy)."""
    getloadavg = getattr(os, "getloadavg", None)
    return None if getloadavg is None else [round(x, 2) for x in getloadavg()]


def machine_info() -> dict[str, object]:
    """Python, platform, CPUs and the checkout (commit, uncommitted changes) of this run."""
    affinity = getattr(os, "sched_getaffinity", None)
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(affinity(0)) if affinity is not None else None,
        "packages": {p: _version(p) for p in ("msgpack", "blake3")},
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "load_average": load_average(),
        "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def seconds(s: float) -> str:
    """A duration for a table cell: us below a millisecond, ms below a second, else s."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def write_document(path: Path, document: dict[str, object]) -> int:
    """Write a run's JSON document to ``path``, say where, and return the exit code 0."""
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nJSON: {path}")
    return 0


def _bytes(b: float) -> str:
    if b < 10_000:
        return f"{b:.0f} B"
    if b < 10_000_000:
        return f"{b / 1e3:.0f} kB"
    return f"{b / 1e6:.0f} MB"


def _cells(row: Row) -> tuple[str, str, str]:
    if row.unit is Unit.BYTES:
        return _bytes(row.median), "", f"{row.per_op:.0f} B"
    per_op = f"{row.per_op * 1e6:.2f} us" if row.per_op < 1e-3 else seconds(row.per_op)
    return seconds(row.median), seconds(row.min), per_op


_NAME_WIDTH = 60
_HEADER = (
    f"{'measurement':<{_NAME_WIDTH}} {'ops':>9}  {'median':>9}  {'min':>9}  {'per op':>10}"
    f"  {'target':<13} verdict"
)


def format_table(rows: list[Row], title: str) -> str:
    """The result table: a title, then one block of rows per section."""

    def line(row: Row) -> str:
        median, low, per_op = _cells(row)
        met = row.met
        verdict = "" if met is None else ("ok" if met else "MISS")
        target = row.target.text if row.target else ""
        name = f"  {row.name}"
        return (
            f"{name:<{_NAME_WIDTH}} {row.ops:>9,}  {median:>9}  {low:>9}  {per_op:>10}"
            f"  {target:<13} {verdict}"
        )

    return sectioned(title, _HEADER, rows, line)


def timed(call: Callable[[], object], repeat: int) -> list[float]:
    """Wall seconds of ``repeat`` calls of ``call``, one sample each."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples
