"""`statefuse show` on a served store before and after an anonymous flood of its pending area.

``python -m benchmarks.flood`` (``--pushes N``, default 8; ``--changes N`` per push, default
2,800; ``--repeat N`` runs of ``show`` per row, default 5; ``--claims N`` the store holds first,
default 2,000; ``--json PATH``, default ``benchmarks/results/flood-<UTC>.json``).

A store of an open space with ``--claims`` claims is served by ``statefuse serve`` (a real
subprocess on loopback, default options: `DEFAULT_BOUNDS`). ``statefuse show`` (a subprocess,
read-only beside the server) is timed, then ``--pushes`` anonymous ``POST /v1/push`` requests
each carry ``--changes`` changes by fresh keys with seq 2 and a random ``prev`` (a chain that never
connects: every one can only wait in the pending area), and ``show`` is timed again. The target
(issue 24): within 1.2x of the unflooded time. The JSON also holds the store's size and pending
rows before and after, the evictions the pushes reported and the server's resident memory.

Invariant: the flood is checked to have reached the server (each push answered 200 with its
counts), so a run that pushed nothing cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync import SigningKey, sign_change
from statefuse.sync.protocol import CONTENT_TYPE, encode_frames

SPACE = "bench-flood"
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]


def flood_changes(space: str, n: int, *, seq: int = 2) -> list[bytes]:
    """``n`` signed changes by fresh keys, each with ``seq`` and a random ``prev``: changes that
    verify but wait for a predecessor that never comes."""
    out = []
    for i in range(n):
        key = SigningKey.generate()
        op = Writer(key.author, clock=lambda: 1).claim("flood", f"s{i}", "v", i)
        change = sign_change(
            key,
            space=space,
            seq=seq,
            prev=os.urandom(32),
            registry=DEFAULT_REGISTRY.fingerprint,
            ops=[op],
        )
        out.append(change.data)
    return out


def push(url: str, space: str, changes: list[bytes], *, timeout: float = 300.0) -> dict[str, int]:
    """One anonymous ``POST /v1/push``; returns the server's counts (raises on another status)."""
    body = encode_frames([space.encode(), *changes])
    request = urllib.request.Request(
        f"{url}/v1/push", data=body, method="POST", headers={"Content-Type": CONTENT_TYPE}
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        document: dict[str, int] = json.loads(answer.read())
    return document


@contextmanager
def served(path: Path, *options: str) -> Iterator[tuple[str, int]]:
    """``statefuse --store PATH serve`` as a subprocess: its URL and pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "statefuse", "--store", str(path), *options, "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)", first)
        if not match:
            raise RuntimeError(f"serve did not start: {first!r}")
        yield match.group(1), proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def cli(path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(path), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )


def _rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _pending_rows(path: Path) -> int:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM pending").fetchone()[0])
    finally:
        db.close()


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _time_show(path: Path, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        cli(path, "show")
        samples.append(time.perf_counter() - start)
    return samples


def run(*, pushes: int, changes: int, repeat: int, claims: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "served.db"
        cli(path, "init", "--space", SPACE)
        from statefuse.sync.replica import Replica

        with Replica.open(path) as r, r.batch():
            for i in range(claims):
                r.add_claim("bench", f"s{i}", "value", i)
        floods = [flood_changes(SPACE, changes) for _ in range(pushes)]
        with served(path) as (url, pid):
            before = _time_show(path, repeat)
            rss_before = _rss(pid)
            size_before, rows_before = _size(path), _pending_rows(path)
            reports = [push(url, SPACE, f) for f in floods]
            rss_after = _rss(pid)
            after = _time_show(path, repeat)
            size_after, rows_after = _size(path), _pending_rows(path)
        pushed = sum(r["pending"] + r.get("evicted", 0) for r in reports)
        if pushed < pushes * changes:
            raise AssertionError(f"the flood did not reach the server: {reports}")
    return {
        "before": before,
        "after": after,
        "reports": reports,
        "rss": [rss_before, rss_after],
        "store_bytes": [size_before, size_after],
        "pending_rows": [rows_before, rows_after],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pushes", type=int, default=8)
    p.add_argument("--changes", type=int, default=2800)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--claims", type=int, default=2000)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    out = run(pushes=a.pushes, changes=a.changes, repeat=a.repeat, claims=a.claims)
    before = Row("show", "statefuse show, unflooded", a.claims, Unit.SECONDS, out["before"])  # type: ignore[arg-type]
    limit = 1.2 * before.median
    after = Row(
        "show",
        f"statefuse show after {a.pushes} pushes of {a.changes:,} flood changes",
        a.claims,
        Unit.SECONDS,
        out["after"],  # type: ignore[arg-type]
        target=Target(limit, per_op=False, text="<= 1.2x before"),
    )
    print(format_table([before, after], f"flood of the pending area ({a.repeat} runs each)"))
    rss, size, rows = out["rss"], out["store_bytes"], out["pending_rows"]
    evicted = sum(r.get("evicted", 0) for r in out["reports"])  # type: ignore[union-attr]
    print(
        f"\nserver RSS {rss}, store bytes {size}, pending rows {rows}, evicted {evicted:,}"
        f" (ratio after/before {after.median / before.median:.2f})"
    )
    document = {
        "benchmark": "flood",
        "options": vars(a) | {"json": str(a.json) if a.json else None},
        "rows": [before.to_json(), after.to_json()],
        "evicted": evicted,
        **{k: v for k, v in out.items() if k not in ("before", "after")},
        "machine": machine_info(),
        "load_average": load_average(),
    }
    RESULTS.mkdir(exist_ok=True)
    return write_document(a.json or RESULTS / f"flood-{utc_stamp()}.json", document)


if __name__ == "__main__":
    sys.exit(main())
