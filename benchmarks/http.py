"""End-to-end sync over HTTP (`sync.http`): wall time, round trips and bytes each way.

``python -m benchmarks.http`` (``--quick``: 10k shared changes instead of 100k; ``--repeat N``;
``--json PATH``, default ``benchmarks/results/http-<UTC>.json``). Two in-memory replicas share
n signed 1-op changes (eight authors' feeds, signed once before any clock starts and received
by both); replica B is served on loopback by `sync.http.serve`. Each run, A and B each write
d/2 = 50 new changes, then A syncs with B over HTTP (`sync_with`), so every run reconciles
n + (earlier runs' changes) ids with exactly d = 100 differences. A second sync right after,
between equal replicas, is timed too (each side adds the ids new since its last exchange to
the ids and fingerprints it keeps), and a third (nothing new since the second: both reuse
them as they are).

Invariant: every timed sync is checked to have moved exactly the d changes (50 fetched, 50
pushed, all accepted) and to leave both replicas with the same ids and state digest, so a run
that skipped work cannot pass for a fast one. The wall time includes everything a real sync
pays: each side bringing its reconciler up to date (`Replica.reconciler`: built once over all
ids, then grown by the ids accepted since), every HTTP request, verification of the received
changes and their storage. Client and server share this process (and its GIL), so the time
is the sum of both sides' work plus loopback latency; a reference row times one reconciler
build from scratch.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.materialize import Row, Unit
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync import Reconciler, SigningKey, reconcile_in_memory, sign_change
from statefuse.sync.http import SyncReport, serve, sync_with
from statefuse.sync.replica import Replica

SPACE = "bench-http"
SHARED = 100_000
QUICK_SHARED = 10_000
DIFFERENCES = 100
AUTHORS = 8
RESULTS = Path(__file__).resolve().parent / "results"

Progress = Callable[[str], None]


def shared_changes(n: int, progress: Progress) -> list[bytes]:
    """``n`` signed 1-op changes from `AUTHORS` feeds, interleaved (deterministic keys)."""
    feeds: list[list[bytes]] = []
    per_author = -(-n // AUTHORS)
    for a in range(AUTHORS):
        key = SigningKey.from_seed(bytes([0x40 + a]) * 32)
        writer = Writer(key.author, clock=lambda: 0)
        feed, prev = [], None
        for seq in range(1, min(per_author, n - a * per_author) + 1):
            op = writer.claim("bench", f"a{a}-s{seq}", "value", seq)
            change = sign_change(
                key,
                space=SPACE,
                seq=seq,
                prev=prev,
                registry=DEFAULT_REGISTRY.fingerprint,
                ops=[op],
            )
            prev = change.change_id
            feed.append(change.data)
        feeds.append(feed)
        progress(f"signed {sum(map(len, feeds)):,} of {n:,} shared changes")
    return [data for feed in feeds for data in feed]


def _fill(replica: Replica, changes: list[bytes], name: str, progress: Progress) -> None:
    step = 10_000
    for start in range(0, len(changes), step):
        report = replica.receive(changes[start : start + step])
        if report.accepted != len(changes[start : start + step]):
            raise AssertionError(f"{name}: shared changes were not all accepted: {report}")
        progress(f"{name}: received {min(start + step, len(changes)):,} of {len(changes):,}")


def _check(report: SyncReport, a: Replica, b: Replica, fetched: int, pushed: int) -> None:
    moved = (report.fetched, report.pushed, report.merge.accepted, report.peer_merge.accepted)
    if moved != (fetched, pushed, fetched, pushed):
        raise AssertionError(f"the sync moved {moved}, expected {fetched} each way: {report}")
    if a.change_ids() != b.change_ids() or a.state().digest() != b.state().digest():
        raise AssertionError("the replicas differ after the sync")


def bench_http(
    n: int, *, repeat: int, progress: Progress
) -> tuple[list[Row], list[dict[str, object]]]:
    """Rows for the d = 100 sync and the sync of equal replicas; one JSON record per run."""
    t0 = time.perf_counter()
    changes = shared_changes(n, progress)
    signed_s = time.perf_counter() - t0
    a, b = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    t0 = time.perf_counter()
    _fill(a, changes, "A", progress)
    received_s = time.perf_counter() - t0
    _fill(b, changes, "B", progress)
    del changes
    gc.collect()
    half = DIFFERENCES // 2
    records: list[dict[str, object]] = []
    runs: list[SyncReport] = []
    equal_runs: list[SyncReport] = []
    idle_runs: list[SyncReport] = []
    builds: list[float] = []
    with serve(b) as server:
        for run in range(repeat):
            for k in range(half):
                a.add_claim("bench", f"a-run{run}-{k}", "value", k)
                b.add_claim("bench", f"b-run{run}-{k}", "value", k)
            expected = reconcile_in_memory(a.change_ids(), b.change_ids())
            t0 = time.perf_counter()
            Reconciler(a.change_ids())
            builds.append(time.perf_counter() - t0)
            gc.collect()
            report = sync_with(a, server.url)
            _check(report, a, b, half, half)
            again = sync_with(a, server.url)
            _check(again, a, b, 0, 0)
            idle = sync_with(a, server.url)
            _check(idle, a, b, 0, 0)
            runs.append(report)
            equal_runs.append(again)
            idle_runs.append(idle)
            progress(
                f"run {run + 1}/{repeat}: {report.seconds * 1e3:.0f} ms, {report.round_trips}"
                f" round trips, {report.bytes_sent:,} B sent, {report.bytes_received:,} B"
                f" received; equal replicas: {again.seconds * 1e3:.1f} ms"
            )
            records.append(
                {
                    "ids": len(a),
                    "differences": DIFFERENCES,
                    "seconds": report.seconds,
                    "round_trips": report.round_trips,
                    "bytes_sent": report.bytes_sent,
                    "bytes_received": report.bytes_received,
                    "reconcile_round_trips_in_memory": expected.round_trips,
                    "reconcile_bytes_in_memory": expected.total_bytes,
                    "equal_seconds": again.seconds,
                    "equal_round_trips": again.round_trips,
                    "equal_bytes_sent": again.bytes_sent,
                    "equal_bytes_received": again.bytes_received,
                    "idle_seconds": idle.seconds,
                    "reconciler_build_seconds": builds[-1],
                }
            )
    first, last = records[0], records[-1]
    section = f"http sync, n={n:,} shared changes (loopback, one connection)"
    note = (
        f"{first['round_trips']} round trips (requests, fetch and push included); sent"
        f" {first['bytes_sent']:,} B, received {first['bytes_received']:,} B (bodies); the"
        f" same sets reconciled in memory: {first['reconcile_round_trips_in_memory']} round"
        f" trips, {first['reconcile_bytes_in_memory']:,} B; {first['ids']:,} to"
        f" {last['ids']:,} ids over the runs"
    )
    equal = equal_runs[0]
    rows = [
        Row(
            section,
            f"d={DIFFERENCES} (50 each way): wall time, per op = per difference",
            n,
            Unit.SECONDS,
            [r.seconds for r in runs],
            DIFFERENCES,
            note=note,
        ),
        Row(
            section,
            f"d={DIFFERENCES}: body bytes both ways, per op = per difference",
            n,
            Unit.BYTES,
            [float(runs[0].bytes_sent + runs[0].bytes_received)],
            DIFFERENCES,
        ),
        Row(
            section,
            "d=0 (equal replicas): wall time",
            n,
            Unit.SECONDS,
            [r.seconds for r in equal_runs],
            note=(
                f"{equal.round_trips} round trip; sent {equal.bytes_sent:,} B, received"
                f" {equal.bytes_received:,} B"
            ),
        ),
        Row(
            section,
            "d=0 again, nothing new since the last sync: wall time",
            n,
            Unit.SECONDS,
            [r.seconds for r in idle_runs],
            note="each side reuses the ids and fingerprints it keeps, unchanged",
        ),
        Row(
            section,
            "reference: one Reconciler build over A's ids",
            n,
            Unit.SECONDS,
            builds,
            n,
            note="from scratch (sort, hash every id, block sums); a replica pays it once, then adds"
            " only the ids accepted since its last exchange",
        ),
        Row(
            "setup (not part of a sync)",
            f"sign {n:,} 1-op changes / receive them into one replica",
            n,
            Unit.SECONDS,
            [signed_s],
            n,
            note=f"verified receive: {received_s:.1f} s ({n / received_s:,.0f} changes/s)",
        ),
    ]
    return rows, records


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.http", description="StateFuse end-to-end HTTP sync benchmark."
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_SHARED:,} shared changes, not {SHARED:,}"
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="timed syncs (default 5; 3 with --quick)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    if args.repeat is not None and args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    n = QUICK_SHARED if args.quick else SHARED
    repeat = args.repeat or (3 if args.quick else 5)
    rows, records = bench_http(n, repeat=repeat, progress=progress)
    progress("done")
    title = (
        f"StateFuse sync over HTTP: {n:,} shared changes, {DIFFERENCES} differences, medians of"
        f" {repeat} runs; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    if args.json is not None:
        path: Path = args.json
    else:
        stamp = utc_stamp()
        path = RESULTS / f"http-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "http",
        "options": {"shared": n, "differences": DIFFERENCES, "repeat": repeat},
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "runs": records,
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
