"""``python -m benchmarks --valid-time``: full materialization of op-sets where a share of the
claims carry validity intervals, against the same-size plain op-set, in one run.

The issue's target: materialize of 1M ops with 10% intervals within 1.3x of the plain 1M
materialize measured in the same run. Both op-sets come from the same workload generator and
seed (the interval draws make them differ in which keys conflict); the two are timed in turn,
repeat by repeat, so load on a shared machine falls on both alike.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

from benchmarks.materialize import Row, Unit
from benchmarks.measure import GcTimer
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from benchmarks.workload import WorkloadGenerator, bench_registry
from statefuse import OpSet, materialize

RESULTS = Path(__file__).resolve().parent / "results"
#: The share of claims given an interval.
INTERVAL_SHARE = 0.10
SECTION = "valid time"


def main(args: argparse.Namespace) -> int:
    """Honours ``--sizes`` / ``--quick``, ``--repeat``, ``--seed``, ``--json`` and ``--name``."""
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    registry, _ = bench_registry()
    rows: list[Row] = []
    ratios: dict[str, dict[str, float]] = {}
    for n in args.sizes:
        repeat = args.repeat or (3 if n >= 1_000_000 else 5)
        sets = {}
        for label, share in (("plain", 0.0), ("10% intervals", INTERVAL_SHARE)):
            progress(f"generating {n:,} ops ({label})")
            gen = WorkloadGenerator(args.seed, registry, label=f"size-{n}", interval_share=share)
            sets[label] = OpSet(gen.ops(n))
            del gen
        laps: dict[str, dict[str, list[float]]] = {k: {"m": [], "r": []} for k in sets}
        conflicts: dict[str, int] = {}
        for i in range(repeat):
            for label, opset in sets.items():
                progress(f"materialize {n:,} ops ({label}): run {i + 1}/{repeat}")
                gc.collect()
                with GcTimer():
                    t0 = time.perf_counter()
                    state = materialize(opset, registry=registry)
                    t1 = time.perf_counter()
                    active = state.active_claims()
                    found = state.conflicts
                    t2 = time.perf_counter()
                conflicts[label] = len(found)
                laps[label]["m"].append(t1 - t0)
                laps[label]["r"].append(t2 - t0)
                del state, active, found
        for lap, what in (("m", "materialize"), ("r", "materialize + read active+conflicts")):
            plain = statistics.median(laps["plain"][lap])
            timed = statistics.median(laps["10% intervals"][lap])
            ratio = timed / plain
            ratios.setdefault(str(n), {})[what] = ratio
            for label in sets:
                note = f"{conflicts[label]:,} conflicts"
                if label != "plain":
                    note += f"; {ratio:.2f}x plain (target <= 1.3x)"
                rows.append(
                    Row(
                        SECTION,
                        f"{what} ({label})",
                        n,
                        Unit.SECONDS,
                        laps[label][lap],
                        n,
                        None,
                        note,
                    )
                )
        del sets
        gc.collect()
    progress("done")
    title = (
        f"StateFuse valid time: {INTERVAL_SHARE:.0%} of claims with intervals vs plain; seed"
        f" {args.seed}; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    for n, by in ratios.items():
        for what, ratio in by.items():
            print(f"{int(n):,} ops, {what}: {ratio:.2f}x plain")
    if args.json is not None:
        path: Path = args.json
    else:
        path = RESULTS / f"{args.name or 'validtime-' + utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "valid time",
        "options": {"sizes": args.sizes, "repeat": args.repeat, "seed": args.seed},
        "interval_share": INTERVAL_SHARE,
        "ratios": ratios,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)
