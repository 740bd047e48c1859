"""``python -m benchmarks --valid-time``: full materialization of op-sets where a share of the
claims carry validity intervals, against the same-size plain op-set, in one run; and the same
op-set with intervals materialized under a registry that declares a detector.

The issue's target: materialize of 1M ops with 10% intervals and one detector within 1.3x of
the plain 1M materialize measured in the same run. The detector is the shipped ``budget``
detector reading two of the workload's predicates (``price`` and ``headcount``, about two
sevenths of the claims), so it is handed every active claim of them; it finds nothing there
(no budget limits), so what it costs is its input and its run, not the findings.

Both op-sets come from the same workload generator and seed (the interval draws make them differ
in which keys conflict); the variants are timed in turn, repeat by repeat, so load on a shared
machine falls on all alike.
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
from benchmarks.workload import NUMBER_PREDICATE, WorkloadGenerator, bench_registry
from statefuse import OpSet, Registry, materialize
from statefuse.registry.detector import DetectorSpec

RESULTS = Path(__file__).resolve().parent / "results"
#: The share of claims given an interval.
INTERVAL_SHARE = 0.10
SECTION = "valid time"
#: The detector the third variant declares, and what it reads.
DETECTOR = DetectorSpec("budget", 1, ((None, NUMBER_PREDICATE), (None, "headcount")))
WITH_DETECTOR = "10% intervals, a detector"


def _with_detector(registry: Registry) -> Registry:
    """``registry`` with `DETECTOR` declared as well."""
    doc = registry.to_document()
    assert isinstance(doc, dict)
    return Registry.from_document({**doc, "detectors": [DETECTOR.declaration()]})


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
        runs = [(label, opset, registry) for label, opset in sets.items()]
        runs.append((WITH_DETECTOR, sets["10% intervals"], _with_detector(registry)))
        laps: dict[str, dict[str, list[float]]] = {k: {"m": [], "r": []} for k, _, _ in runs}
        conflicts: dict[str, int] = {}
        for i in range(repeat):
            for label, opset, reg in runs:
                progress(f"materialize {n:,} ops ({label}): run {i + 1}/{repeat}")
                gc.collect()
                with GcTimer():
                    t0 = time.perf_counter()
                    state = materialize(opset, registry=reg)
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
            for label in laps:
                ratio = statistics.median(laps[label][lap]) / plain
                if label != "plain":
                    ratios.setdefault(str(n), {})[f"{what} ({label})"] = ratio
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
        del sets, runs
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
