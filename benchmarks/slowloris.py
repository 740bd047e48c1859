"""An honest HTTP sync while slow clients hold connections open (`sync.guard`'s bounds).

``python -m benchmarks.slowloris`` (``--repeat N`` timed syncs per scenario, default 9;
``--slow N`` slow connections, default 200; ``--json PATH``, default
``benchmarks/results/slowloris-<UTC>.json``). Replica B (n = 2,000 shared signed changes) is
served on loopback by `sync.http.serve` with its default limits; replica A syncs with it over
HTTP (`sync_with`, ``timeout=5`` as in the report that found the attack), each run after both
sides wrote 10 new changes, so every timed sync moves d = 20 changes.

Scenarios, each timed the same way:

- no slow connections;
- ``--slow`` connections from one other address (127.0.0.2), the attack as reported;
- ``--slow`` connections from as many addresses (127.0.1.x), one each, so the per-client bound
  does not apply and only the header deadline and the total bound do.

A slow connection sends a request line, then one header line every 3 to 5 s and never ends its
headers; when the server closes or refuses it, the attacker opens it again at its next beat
(3 to 5 s later), so the server faces the full count for the whole run. The syncs are spread
over more than the default header deadline (10 s), so they also meet the churn of closed and
reopened connections. Client, server and attacker share this process (the attacker's sockets
are idle between its lines).

Invariant: every timed sync is checked to have moved exactly its 20 changes and to leave both
replicas with the same ids; a sync that fails (it times out on a server without the bounds) is
counted as failed, never timed. Target: the median with slow connections within 1.5x of the
median without.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import select
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks.http import shared_changes
from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from statefuse.sync.http import SyncError, serve, sync_with
from statefuse.sync.replica import Replica

SPACE = "bench-http"  # the space benchmarks.http signs its shared changes for
SHARED = 2_000
EACH_SIDE = 10
SLOW = 200
REPEAT = 9
SPACING = 1.5  # seconds between timed syncs: 9 runs span more than a 10 s header deadline
TIMEOUT = 5.0
RESULTS = Path(__file__).resolve().parent / "results"

Progress = Callable[[str], None]


class Slowloris:
    """``count`` connections from ``addresses`` (round robin), each trickling a header line
    every 3 to 5 s; one the server closes or refuses is opened again at its next beat."""

    def __init__(self, host: str, port: int, count: int, addresses: list[str]) -> None:
        self.target = (host, port)
        self.count = count
        self.addresses = addresses
        self.opened = 0
        self.ended = 0  # closed or refused by the server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slowloris", daemon=True)
        self._rng = random.Random(7)

    def _open(self, k: int) -> tuple[socket.socket | None, float]:
        address = self.addresses[k % len(self.addresses)]
        try:
            sock = socket.create_connection(self.target, timeout=5, source_address=(address, 0))
            sock.setblocking(False)
            sock.send(b"GET /v1/info HTTP/1.1\r\nHost: bench\r\n")
        except OSError:
            return None, time.monotonic() + 0.2
        self.opened += 1
        return sock, time.monotonic() + self._rng.uniform(3.0, 5.0)

    def _run(self) -> None:
        slots = [self._open(k) for k in range(self.count)]
        while not self._stop.wait(0.1):
            live = [s for s, _ in slots if s is not None]
            readable = set(select.select(live, [], [], 0)[0]) if live else set()
            now = time.monotonic()
            for k, (sock, due) in enumerate(slots):
                if sock is not None and sock in readable:  # a 503, or the EOF of a close
                    sock.close()
                    self.ended += 1
                    slots[k] = (None, now + self._rng.uniform(3.0, 5.0))
                elif sock is None and now >= due:
                    slots[k] = self._open(k)
                elif sock is not None and now >= due:
                    try:
                        sock.send(b"X-Slow: 1\r\n")
                    except OSError:
                        sock.close()
                        self.ended += 1
                        slots[k] = (None, now + self._rng.uniform(3.0, 5.0))
                        continue
                    slots[k] = (sock, now + self._rng.uniform(3.0, 5.0))
        for sock, _ in slots:
            if sock is not None:
                sock.close()

    def __enter__(self) -> Slowloris:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _sync_runs(
    a: Replica, b: Replica, url: str, label: str, repeat: int, progress: Progress
) -> tuple[list[float], list[str], int]:
    """``repeat`` timed syncs of 20 new changes: their seconds, the errors of the failed ones,
    and how many changes each way are still owed (a failed sync leaves its 20 for the next)."""
    seconds: list[float] = []
    errors: list[str] = []
    owed = 0
    for run in range(repeat):
        for k in range(EACH_SIDE):
            a.add_claim("bench", f"{label}-a{run}-{k}", "value", k)
            b.add_claim("bench", f"{label}-b{run}-{k}", "value", k)
        owed += EACH_SIDE
        t0 = time.perf_counter()
        try:
            report = sync_with(a, url, timeout=TIMEOUT)
        except SyncError as exc:
            errors.append(exc.rule)
            progress(f"{label}: run {run + 1} failed after {time.perf_counter() - t0:.1f} s: {exc}")
            continue
        elapsed = time.perf_counter() - t0
        if (report.fetched, report.pushed) != (owed, owed) or a.change_ids() != b.change_ids():
            raise AssertionError(f"{label}: the sync did not move {owed} each way: {report}")
        owed = 0
        seconds.append(elapsed)
        progress(f"{label}: run {run + 1}/{repeat}: {elapsed * 1e3:.1f} ms")
        time.sleep(SPACING)
    return seconds, errors, owed


@contextlib.contextmanager
def _attack(host: str, port: int, count: int, addresses: list[str]) -> Iterator[Slowloris]:
    with Slowloris(host, port, count, addresses) as attack:
        deadline = time.monotonic() + 30
        while attack.opened < count and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # let the server see them all
        yield attack


def bench_slowloris(
    *, repeat: int, slow: int, progress: Progress
) -> tuple[list[Row], list[dict[str, object]]]:
    changes = shared_changes(SHARED, progress)
    a, b = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    for replica in (a, b):
        if replica.receive(changes).accepted != len(changes):
            raise AssertionError("the shared changes were not all accepted")
    records: list[dict[str, object]] = []
    results: list[tuple[str, list[float], int, str]] = []
    with serve(b) as server:
        limits = getattr(server, "limits", None)
        sync_with(a, server.url)  # both sides build their reconcilers outside the clock
        scenarios: list[tuple[str, list[str] | None]] = [
            ("no slow connections", None),
            (f"{slow} slow connections from one address", ["127.0.0.2"]),
            (
                f"{slow} slow connections from {slow} addresses",
                [f"127.0.{1 + k // 250}.{1 + k % 250}" for k in range(slow)],
            ),
        ]
        for label, addresses in scenarios:
            progress(f"scenario: {label}")
            ended = opened = 0
            if addresses is None:
                seconds, errors, owed = _sync_runs(a, b, server.url, "none", repeat, progress)
            else:
                with _attack(server.host, server.port, slow, addresses) as attack:
                    seconds, errors, owed = _sync_runs(
                        a, b, server.url, f"slow{len(addresses)}", repeat, progress
                    )
                    ended, opened = attack.ended, attack.opened
            if owed:  # converge outside the clock, once the slow connections are gone
                sync_with(a, server.url, timeout=120)
            failed = len(errors)
            note = (
                f"{failed} of {repeat} syncs failed ({', '.join(sorted(set(errors)))})"
                if failed
                else ""
            )
            if addresses is not None:
                note = (
                    f"{opened:,} slow connections opened, {ended:,} closed or refused by the"
                    f" server during the run" + (f"; {note}" if note else "")
                )
            results.append((label, seconds, failed, note))
            records.append(
                {
                    "scenario": label,
                    "seconds": seconds,
                    "failed": failed,
                    "errors": errors,
                    "slow_opened": opened,
                    "slow_ended": ended,
                }
            )
    baseline = sorted(results[0][1])[len(results[0][1]) // 2] if results[0][1] else float("nan")
    target = Target(1.5 * baseline, per_op=False, text="<= 1.5x no slow")
    section = f"honest sync of d={2 * EACH_SIDE} over HTTP, n={SHARED:,} shared changes" + (
        f" (per client {limits.max_connections_per_client}, header deadline"
        f" {limits.header_timeout:g} s)"
        if limits is not None
        else " (server without ServerLimits)"
    )
    rows = [
        Row(
            section,
            label,
            SHARED,
            Unit.SECONDS,
            seconds or [float("inf")],
            target=None if k == 0 else target,
            note=note,
        )
        for k, (label, seconds, _, note) in enumerate(results)
    ]
    return rows, records


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.slowloris",
        description="An honest HTTP sync while slow clients hold connections open.",
    )
    parser.add_argument("--repeat", type=int, default=REPEAT, help=f"syncs per scenario ({REPEAT})")
    parser.add_argument("--slow", type=int, default=SLOW, help=f"slow connections ({SLOW})")
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    if args.repeat < 1 or not 1 <= args.slow <= 1000:
        parser.error("--repeat must be at least 1 and --slow in [1, 1000]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    rows, records = bench_slowloris(repeat=args.repeat, slow=args.slow, progress=progress)
    progress("done")
    title = (
        f"StateFuse HTTP sync under slow connections: medians of {args.repeat} syncs; Python"
        f" {machine['python']}; {machine['platform']}; {machine['cpu_count']} CPUs"
        f" ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    path: Path = args.json or RESULTS / f"slowloris-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "slowloris",
        "options": {
            "shared": SHARED,
            "differences": 2 * EACH_SIDE,
            "repeat": args.repeat,
            "slow": args.slow,
            "sync_timeout": TIMEOUT,
        },
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "runs": records,
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
