"""Set reconciliation (`sync.reconcile`): round trips, bytes and time per exchange.

``python -m benchmarks --reconcile`` (``--quick``: 100k ids only). Two replicas share n ids and
each holds d/2 more that the other lacks; ids are blake3 digests of counters, so every run
reconciles the same sets. Each exchange runs between two in-memory `Reconciler`s, A starting.

Invariant: only the exchange of messages is inside the timer. Both Reconcilers are built before
the clock starts (their build — sort, deduplicate, prefix sums — is its own row), fresh for each
repeat, and every exchange is checked to have found exactly the ids each side lacks.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import blake3

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from statefuse.sync.reconcile import ReconcileConfig, Reconciler

Progress = Callable[[str], None]

SIZES = (100_000, 1_000_000)
QUICK_SIZES = (100_000,)
DIFFERENCES = (10, 100, 1_000)
RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's targets, for n = 100k ids and d = 100 differences.
TARGET_BYTES = Target(150_000, per_op=False, text="<= 150 kB")
TARGET_ROUND_TRIPS = 3
TARGET_AT = (100_000, 100)


def _ids(tag: str, start: int, stop: int) -> list[bytes]:
    return [blake3.blake3(f"{tag}:{i}".encode()).digest() for i in range(start, stop)]


def _exchange(a: Reconciler, b: Reconciler) -> tuple[float, list[int]]:
    """Seconds for the whole exchange, and the size of each message (A's first)."""
    sides = (a, b)
    sizes = []
    t0 = time.perf_counter()
    message: bytes | None = a.initiate()
    receiver = 1
    while message is not None:
        sizes.append(len(message))
        message = sides[receiver].respond(message).message
        receiver = 1 - receiver
    return time.perf_counter() - t0, sizes


def bench_reconcile(
    sizes: tuple[int, ...], *, repeat: int | None, progress: Progress
) -> tuple[list[Row], list[dict[str, object]]]:
    """Rows for every (n, d), and one JSON record per exchange shape."""
    config = ReconcileConfig()
    byte_rows: list[Row] = []
    time_rows: list[Row] = []
    build_rows: list[Row] = []
    records: list[dict[str, object]] = []
    for n in sizes:
        runs = repeat or (3 if n >= 1_000_000 else 5)
        progress(f"reconcile: generating {n:,} shared ids")
        shared = _ids("shared", 0, n)
        builds: list[float] = []
        for d in DIFFERENCES:
            only_a, only_b = _ids("only-a", 0, d // 2), _ids("only-b", 0, d - d // 2)
            a_ids, b_ids = shared + only_a, shared + only_b
            timings: list[float] = []
            message_sizes: list[int] = []
            for run in range(runs):
                progress(f"reconcile: n={n:,} d={d:,}: run {run + 1}/{runs}")
                gc.collect()
                t0 = time.perf_counter()
                a = Reconciler(a_ids, config=config)
                builds.append(time.perf_counter() - t0)
                b = Reconciler(b_ids, config=config)
                seconds, message_sizes = _exchange(a, b)
                timings.append(seconds)
                if set(a.fetch) != set(only_b) or set(b.fetch) != set(only_a):
                    raise AssertionError(f"n={n} d={d}: the exchange missed a difference")
                del a, b
            total = sum(message_sizes)
            a_to_b, b_to_a = sum(message_sizes[0::2]), sum(message_sizes[1::2])
            round_trips = (len(message_sizes) + 1) // 2
            targeted = (n, d) == TARGET_AT
            note = (
                f"{round_trips} round trips ({len(message_sizes)} messages, largest"
                f" {max(message_sizes):,} B); A->B {a_to_b:,} B, B->A {b_to_a:,} B"
            )
            if targeted:
                verdict = "ok" if round_trips <= TARGET_ROUND_TRIPS else "MISS"
                note += f"; round trips target <= {TARGET_ROUND_TRIPS}: {verdict}"
            name = f"n={n:,} d={d:,}"
            byte_rows.append(
                Row(
                    "reconcile: bytes, both ways (per op = per difference)",
                    name,
                    n,
                    Unit.BYTES,
                    [float(total)],
                    d,
                    TARGET_BYTES if targeted else None,
                    note,
                )
            )
            time_rows.append(
                Row(
                    "reconcile: exchange time (per op = per difference)",
                    name,
                    n,
                    Unit.SECONDS,
                    timings,
                    d,
                )
            )
            records.append(
                {
                    "n": n,
                    "d": d,
                    "messages": len(message_sizes),
                    "round_trips": round_trips,
                    "message_bytes": message_sizes,
                    "bytes_total": total,
                    "bytes_a_to_b": a_to_b,
                    "bytes_b_to_a": b_to_a,
                    "exchange_s": timings,
                    "exchange_median_s": statistics.median(timings),
                }
            )
        build_rows.append(
            Row(
                "reconcile: build one Reconciler from unsorted ids (per op = per id)",
                f"n={n:,} (+ d/2)",
                n,
                Unit.SECONDS,
                builds,
                n,
            )
        )
        del shared
        gc.collect()
    return byte_rows + time_rows + build_rows, records


def main(args: argparse.Namespace) -> int:
    """``python -m benchmarks --reconcile``: honours ``--quick``, ``--repeat``, ``--json`` and
    ``--name`` (``--sizes`` and ``--seed`` belong to the materialize workload)."""
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    sizes = QUICK_SIZES if args.quick else SIZES
    rows, records = bench_reconcile(sizes, repeat=args.repeat, progress=progress)
    progress("done")
    config = ReconcileConfig()
    title = (
        f"StateFuse set reconciliation: branching {config.branching}, leaf size"
        f" {config.leaf_size}, answer size {config.answer_size}, frame limit"
        f" {config.frame_limit:,} B; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    if args.json is not None:
        path: Path = args.json
    else:
        name = args.name or "reconcile-" + utc_stamp()
        path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "reconcile",
        "options": {"sizes": list(sizes), "differences": list(DIFFERENCES), "repeat": args.repeat},
        "config": {
            "branching": config.branching,
            "leaf_size": config.leaf_size,
            "answer_size": config.answer_size,
            "frame_limit": config.frame_limit,
        },
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "exchanges": records,
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)
