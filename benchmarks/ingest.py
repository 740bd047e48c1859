"""Verified ingest (`sync.ChangeLog.receive`): signed changes of 1, 10 and 100 ops.

``python -m benchmarks --ingest``. One author's feed of signed changes (built before the clock
starts) is received by a fresh ChangeLog per repeat: verification (canonical bytes, every op
decoded and its id recomputed, the author key, the Ed25519 signature) plus admission. The row's
per-op figure is seconds per op; the note gives ops per second.

Invariant: every change of every run is accepted (checked), so a run that quarantined its
input cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import format_table, load_average, machine_info
from registry import DEFAULT_REGISTRY
from statefuse import Writer
from sync import ChangeLog, SigningKey, Status, sign_change

SPACE = "bench"
CHANGE_SIZES = (1, 10, 100)
OPS_PER_RUN = 5_000
RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's target: >= 300,000 ops/s with 100-op changes.
TARGET_100 = Target(1 / 300_000, per_op=True, text=">= 300k ops/s")


def feed(size: int, total_ops: int) -> list[bytes]:
    """Signed changes of ``size`` ops each, ``total_ops`` ops in all, one author's chain."""
    key = SigningKey.from_seed(bytes([size % 256]) * 32)
    writer = Writer(key.author, clock=lambda: 0)
    out, prev = [], None
    for seq in range(1, total_ops // size + 1):
        ops = [writer.claim("bench", f"s{seq}-{i}", "value", i) for i in range(size)]
        change = sign_change(
            key, space=SPACE, seq=seq, prev=prev, registry=DEFAULT_REGISTRY.fingerprint, ops=ops
        )
        prev = change.change_id
        out.append(change.data)
    return out


def bench_ingest(repeat: int) -> list[Row]:
    rows = []
    for size in CHANGE_SIZES:
        changes = feed(size, OPS_PER_RUN)
        ops = len(changes) * size
        samples = []
        for _ in range(repeat):
            log = ChangeLog(SPACE)
            start = time.perf_counter()
            receipts = [log.receive(data, seen_ms=0) for data in changes]
            samples.append(time.perf_counter() - start)
            assert all(r.status is Status.ACCEPTED for r in receipts)
        rate = ops / sorted(samples)[len(samples) // 2]
        rows.append(
            Row(
                section="verified ingest",
                name=f"ChangeLog.receive, {size}-op changes",
                ops=ops,
                unit=Unit.SECONDS,
                samples=samples,
                per=ops,
                target=TARGET_100 if size == 100 else None,
                note=f"{rate:,.0f} ops/s",
            )
        )
    return rows


def main(args: argparse.Namespace) -> int:
    """``python -m benchmarks --ingest``: honours ``--repeat``, ``--json`` and ``--name``."""
    machine = machine_info()
    started = time.perf_counter()
    print("building signed feeds ...", file=sys.stderr, flush=True)
    rows = bench_ingest(args.repeat or 5)
    title = (
        f"StateFuse verified ingest; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    name = args.name or "ingest-" + datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "ingest",
        "options": {"change_sizes": list(CHANGE_SIZES), "ops_per_run": OPS_PER_RUN},
        "total_s": time.perf_counter() - started,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nJSON: {path}")
    return 0
