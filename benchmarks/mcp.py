"""The MCP server (issue 14): ``remember`` then ``recall`` through ``statefuse mcp`` over stdio on a
10k-claim store, and the server's cold start to its first answered request.

``python -m benchmarks.mcp [--claims N] [--calls N] [--starts N] [--seed S] [--json PATH]``

Setup: a SQLite store of ``--claims`` claims (default 10,000) with the agent-loop workload
(`benchmarks.agent_loop`: about 10% of keys conflicting, 10% of claims retracted, 5%
task-scoped, 10% restricted to a role), closed so that its snapshot is saved, as a store is
between sessions. The server is a fresh ``python -m statefuse mcp --store S`` process started
by the MCP SDK's stdio client, with the initialize handshake today's clients use.

Rows:

- **cold start**, median of ``--starts`` (default 5) processes: from spawning the server to
  ``initialize`` answered, and to the first ``tools/call`` answered (a ``recall``, so the
  store is open and its first context assembled). ``python -m statefuse --version`` is the floor
  (interpreter and import of the CLI, no SDK).
- **round trip**, one session, ``--calls`` steps (default 50, at least 30) after 2 warm-up
  steps: ``remember`` (even steps a new key, odd steps a new value of a loaded key, both with
  the default ``update=true``), then ``recall`` whose query names that key (budget 2,000 tokens,
  role ``planner``). Each call, and the pair, as the client sees it (JSON-RPC over the pipes,
  argument validation, a worker thread, the write's fsync, the context); every ``recall`` is
  checked to include the claim just written.
- **in process**, the same steps through the library (`Replica.update` then `Replica.context`
  with the same lens and resolver) on the same store after the server stopped: what the MCP
  layer adds is the difference.

Progress goes to stderr, the table to stdout, the JSON (every sample) to ``--json`` or
``benchmarks/results/mcp-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from benchmarks.agent_loop import Plan, build_store, key_of, value_of
from benchmarks.measure import sectioned
from benchmarks.report import ROOT, load_average, machine_info, seconds, utc_stamp, write_document
from statefuse.entry.cli import format_key
from statefuse.reading.lens import Lens
from statefuse.reading.resolver import Conservative
from statefuse.sync.replica import Replica

SPACE = "agent-loop"
CLAIMS = 10_000
CALLS = 50
MIN_CALLS = 30
WARMUP = 2
STARTS = 5
BUDGET = 2_000
ROLE = "planner"
BATCH = 1_000
RESULTS = Path(__file__).resolve().parent / "results"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(slots=True)
class Row:
    """One line of the table: seconds per sample."""

    section: str
    name: str
    samples: list[float]
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "name": self.name,
            "samples": self.samples,
            "median": self.median,
            "min": min(self.samples),
            "note": self.note,
            **self.extra,
        }


@dataclass(frozen=True, slots=True)
class Step:
    """One step's write: the key (``i`` of the workload), the value, and the recall query."""

    i: int
    value: Any

    @property
    def key(self) -> str:
        return format_key(key_of(self.i))

    @property
    def query(self) -> str:
        _, subject, predicate = key_of(self.i)
        return f"What is the {predicate} of {subject}?"


def steps_of(plan: Plan, count: int, *, first: int) -> list[Step]:
    """Steps ``first`` .. ``first + count - 1``: even ones a new key, odd ones a loaded key that
    is global, visible to the planner and not in conflict, with a value it never had."""
    out = []
    for k in range(first, first + count):
        if k % 2 == 0:
            i = plan.new_key_base + k
            out.append(Step(i, value_of(plan.seed, i, 0)))
        else:
            i = plan.update_keys[k // 2]
            out.append(Step(i, value_of(plan.seed, i, 1000 + k)))
    return out


def build(path: Path, plan: Plan) -> dict[str, object]:
    """The store of `benchmarks.agent_loop` for the plan's size and seed, closed (its snapshot
    saved). Its claims do not depend on the steps a plan makes room for."""
    loaded = build_store(path, plan.n, seed=plan.seed, batch=plan.batch, progress=_log)
    with Replica.open(path, readonly=True) as rep:
        state = rep.state()
        return {
            "claims": loaded.claims + loaded.peer_claims,
            "retractions": loaded.retractions,
            "active_claims": len(state.active_claims()),
            "conflicts": len(state.conflicts),
            "load_s": loaded.seconds,
        }


def _server(path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "statefuse", "mcp", "--store", str(path)], cwd=ROOT
    )


def _included(result: Any, claim_id: str) -> bool:
    structured = result.structured_content or {}
    return any(claim_id in s["claim_ids"] for s in structured.get("sections", ()))


async def cold_start(path: Path, errlog: Any) -> tuple[float, float]:
    """Seconds from spawning the server to ``initialize`` answered, and to a ``recall`` answered."""
    t0 = time.perf_counter()
    async with Client(stdio_client(_server(path), errlog=errlog), mode="legacy") as client:
        t1 = time.perf_counter()
        result = await client.call_tool("recall", {"query": "status", "budget": BUDGET})
        t2 = time.perf_counter()
        if result.is_error:
            raise RuntimeError(f"recall failed: {result.content}")
    return t1 - t0, t2 - t0


@dataclass(slots=True)
class Laps:
    """Seconds of each timed step: the write, the context, and both."""

    write: list[float] = field(default_factory=list)
    read: list[float] = field(default_factory=list)

    @property
    def pair(self) -> list[float]:
        return [w + r for w, r in zip(self.write, self.read, strict=True)]


async def round_trips(path: Path, steps: list[Step], errlog: Any) -> Laps:
    """``remember`` then ``recall`` for each step over one stdio session (warm-up included;
    the caller drops it)."""
    laps = Laps()
    async with Client(stdio_client(_server(path), errlog=errlog), mode="legacy") as client:
        for s in steps:
            t0 = time.perf_counter()
            wrote = await client.call_tool("remember", {"key": s.key, "value": s.value})
            t1 = time.perf_counter()
            read = await client.call_tool(
                "recall", {"query": s.query, "budget": BUDGET, "role": ROLE}
            )
            t2 = time.perf_counter()
            if wrote.is_error or read.is_error:
                raise RuntimeError(f"step {s.key}: {wrote.content} / {read.content}")
            claim_id = (wrote.structured_content or {})["claim_id"]
            if not _included(read, claim_id):
                raise RuntimeError(f"recall({s.query!r}) does not show the claim just written")
            laps.write.append(t1 - t0)
            laps.read.append(t2 - t1)
    return laps


def in_process(path: Path, steps: list[Step]) -> Laps:
    """The same steps through the library, on the store the server used."""
    laps = Laps()
    with Replica.open(path) as rep:
        resolver = Conservative(authority_order=rep.registry.authority_order)
        for s in steps:
            t0 = time.perf_counter()
            c = rep.update(*key_of(s.i), s.value)
            t1 = time.perf_counter()
            lens = Lens(roles=frozenset({ROLE}), now=time.time_ns() // 1_000_000)
            ctx = rep.context(s.query, lens=lens, budget=BUDGET, resolver=resolver)
            t2 = time.perf_counter()
            if c.claim_id not in ctx.included:
                raise RuntimeError(f"the context for {s.query!r} misses the claim just written")
            laps.write.append(t1 - t0)
            laps.read.append(t2 - t1)
    return laps


def _version_floor(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "statefuse", "--version"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - t0)
    return times


_NAME = 58
_HEADER = f"{'measurement':<{_NAME}} {'samples':>7} {'median':>10} {'min':>10} {'max':>10}"


def format_table(rows: list[Row], title: str) -> str:
    def line(row: Row) -> str:
        return (
            f"{'  ' + row.name:<{_NAME}} {len(row.samples):>7} {seconds(row.median):>10}"
            f" {seconds(min(row.samples)):>10} {seconds(max(row.samples)):>10}"
        )

    return sectioned(title, _HEADER, rows, line)


def _rows(section: str, laps: Laps, names: tuple[str, str, str]) -> list[Row]:
    return [
        Row(section, names[0], laps.write),
        Row(section, names[1], laps.read),
        Row(section, names[2], laps.pair),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mcp", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--claims", type=int, default=CLAIMS, help="claims in the store")
    parser.add_argument("--calls", type=int, default=CALLS, help="timed remember+recall steps")
    parser.add_argument("--starts", type=int, default=STARTS, help="cold starts to time")
    parser.add_argument("--seed", type=int, default=20261122, help="workload seed")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.calls < MIN_CALLS or args.starts < 1 or args.claims < 1_000:
        parser.error(f"--calls >= {MIN_CALLS}, --starts >= 1, --claims >= 1000")
    start = time.perf_counter()
    machine = machine_info()
    count = WARMUP + args.calls
    plan = Plan.make(args.claims, seed=args.seed, batch=BATCH, steps=2 * count)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="statefuse-mcp-bench-") as tmp:
        path = Path(tmp) / "store.db"
        _log(f"building a {args.claims:,}-claim store ...")
        stats = build(path, plan)
        with (Path(tmp) / "server-stderr.txt").open("w+") as errlog:
            _log(f"cold starts ({args.starts}) ...")
            starts = [anyio.run(cold_start, path, errlog) for _ in range(args.starts)]
            section = (
                f"cold start: a new `statefuse mcp` process over stdio, {args.claims:,} claims"
            )
            rows += [
                Row(section, "python -m statefuse --version (floor)", _version_floor(args.starts)),
                Row(section, "spawn -> initialize answered", [a for a, _ in starts]),
                Row(section, "spawn -> first recall answered", [b for _, b in starts]),
            ]
            _log(f"round trips ({count} steps over stdio) ...")
            laps = anyio.run(round_trips, path, steps_of(plan, count, first=0), errlog)
            errlog.seek(0)
            if "Traceback" in errlog.read():
                raise RuntimeError("the server printed a traceback")
        timed = Laps(laps.write[WARMUP:], laps.read[WARMUP:])
        section = f"round trip over stdio, one session, {args.claims:,} claims"
        names = ("remember", f"recall (budget {BUDGET:,}, role {ROLE})", "remember + recall")
        rows += _rows(section, timed, names)
        _log("the same steps in process ...")
        direct = in_process(path, steps_of(plan, count, first=count))
        direct = Laps(direct.write[WARMUP:], direct.read[WARMUP:])
        section = "in process: the library alone, same store and steps"
        names = ("Replica.update", "Replica.context", "update + context")
        rows += _rows(section, direct, names)
    overhead = statistics.median(timed.pair) - statistics.median(direct.pair)
    title = (
        f"StateFuse MCP server: stdio round trips and cold start; Python {machine['python']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']}); seed {args.seed}"
    )
    print(format_table(rows, title))
    print(f"\nMCP adds {seconds(overhead)} per remember + recall (median against median).")
    name = "mcp-" + utc_stamp()
    path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "mcp",
        "options": {
            "claims": args.claims,
            "calls": args.calls,
            "warmup": WARMUP,
            "starts": args.starts,
            "seed": args.seed,
            "budget": BUDGET,
            "role": ROLE,
        },
        "store": stats,
        "overhead_s": overhead,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
