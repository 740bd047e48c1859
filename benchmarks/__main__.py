"""``python -m benchmarks``: run the benchmarks, print the table, write the JSON.

Progress goes to stderr, the table to stdout. The JSON goes to ``--json PATH`` or to
``benchmarks/results/<name>.json`` (``--name``, default: the UTC time of the run).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks import ingest, reconcile, validtime
from benchmarks.materialize import (
    Row,
    bench_codecs,
    bench_full,
    bench_hot_key,
    bench_incremental,
    bench_memory,
)
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from benchmarks.workload import WorkloadGenerator, bench_registry, ops_digest
from statefuse import ClaimAdded, ClaimRetracted, Op, OpSet, State

DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
DEFAULT_SEED = 20_261_122
RESULTS = Path(__file__).resolve().parent / "results"
#: Sections in table order.
SECTIONS = ("materialize", "memory", "incremental", "hot key", "informational")


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not sizes or sizes[0] < 1_000:
        raise argparse.ArgumentTypeError("each size must be at least 1000 ops")
    return sizes


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description="StateFuse materialization benchmarks."
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--sizes",
        type=_sizes,
        default=list(DEFAULT_SIZES),
        help="comma-separated op-set sizes (default: 10000,100000,1000000)",
    )
    which.add_argument(
        "--quick", action="store_true", help="smoke run: sizes 10000 and 100000 only"
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=None,
        help="runs per timing (default: 5, and 3 for sizes of 1M ops and more)",
    )
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"workload seed (default {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--reconcile", action="store_true", help="run only the set-reconciliation benchmarks"
    )
    parser.add_argument(
        "--ingest", action="store_true", help="run only the verified-ingest benchmarks"
    )
    parser.add_argument(
        "--valid-time",
        action="store_true",
        help="run only materialize with 10%% of claims carrying intervals, against plain",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    parser.add_argument(
        "--name",
        default=None,
        help="result name: writes benchmarks/results/NAME.json (default: UTC time of the run)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes = list(QUICK_SIZES)
    return args


class _Progress:
    """Timestamped progress lines on stderr."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f}s] {message}", file=sys.stderr, flush=True)


def _workload_stats(ops: list[Op], state: State) -> dict[str, int]:
    kinds = Counter(type(op).__name__ for op in ops)
    active = state.active_claims()
    by_ref = sum(1 for op in ops if type(op) is ClaimRetracted and op.target_claim_ref is not None)
    return {
        "ops": len(ops),
        "claims": kinds["ClaimAdded"],
        "retractions": kinds["ClaimRetracted"],
        "retractions_by_ref": by_ref,
        "retractions_by_id": kinds["ClaimRetracted"] - by_ref,
        "reasserting_claims": sum(1 for op in ops if type(op) is ClaimAdded and op.reasserts),
        "active_claims": len(active),
        "active_keys": len({(c.namespace, c.subject, c.predicate, c.scope) for c in active}),
        "conflicts": len(state.conflicts),
    }


def run(args: argparse.Namespace) -> tuple[list[Row], dict[str, object]]:
    """Every measurement; returns the rows and the run description for the JSON."""
    progress = _Progress()
    registry, normalizer = bench_registry()
    if normalizer != "number":
        progress("the 'number' normalizer is not available: price falls back to 'exact'")
    largest = max(args.sizes)
    rows: list[Row] = []
    workloads: dict[str, object] = {}
    for n in args.sizes:
        repeat = args.repeat or (3 if n >= 1_000_000 else 5)
        progress(f"generating {n:,} ops through Writer")
        gen = WorkloadGenerator(args.seed, registry, label=f"size-{n}")
        t0 = time.perf_counter()
        ops = gen.ops(n, progress=lambda k: progress(f"  {k:,} ops"))
        generated = time.perf_counter() - t0
        progress(f"building the OpSet of {n:,} ops (verifies every op id)")
        t0 = time.perf_counter()
        opset = OpSet(ops)
        built = time.perf_counter() - t0
        full_rows, state = bench_full(opset, registry, repeat=repeat, progress=progress)
        rows += full_rows
        rows += bench_memory(opset, state, progress=progress)
        workloads[str(n)] = {
            **_workload_stats(ops, state),
            "digest": ops_digest(ops),
            "generate_s": generated,
            "generate_us_per_op": generated / n * 1e6,
            "opset_build_s": built,
        }
        del ops, state
        if n == largest:
            rows += bench_incremental(opset, gen, registry, progress=progress)
        del opset, gen
        gc.collect()
    hot_repeat = args.repeat or 5
    rows += bench_hot_key(args.seed, registry, repeat=hot_repeat, progress=progress)
    rows += bench_codecs(args.seed, registry, repeat=hot_repeat, progress=progress)
    rows.sort(key=lambda r: SECTIONS.index(r.section.split(" (")[0]))
    progress("done")
    run_info: dict[str, object] = {
        "options": {
            "sizes": args.sizes,
            "repeat": args.repeat,
            "seed": args.seed,
            "quick": args.quick,
        },
        "price_normalizer": normalizer,
        "registry_fingerprint": registry.fingerprint.hex(),
        "gc_enabled_while_timing": True,
        "total_s": time.perf_counter() - progress.start,
        "load_average_at_end": load_average(),
        "workloads": workloads,
    }
    return rows, run_info


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reconcile:
        return reconcile.main(args)
    if args.ingest:
        return ingest.main(args)
    if args.valid_time:
        return validtime.main(args)
    machine = machine_info()
    rows, info = run(args)
    title = (
        f"StateFuse benchmarks: seed {args.seed}; Python {machine['python']};"
        f" {machine['platform']}; {machine['cpu_count']} CPUs ({machine['cpu_model']});"
        f" price normalizer: {info['price_normalizer']}"
        + ("" if info["price_normalizer"] == "number" else " (number normalizer unavailable)")
    )
    print(format_table(rows, title))
    if args.json is not None:
        path: Path = args.json
    else:
        name = args.name or utc_stamp()
        path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine, **info, "rows": [r.to_json() for r in rows]}
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
