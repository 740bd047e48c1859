"""The store as index (issue 25): what a fresh process and an agent step cost on a large store.

``python -m benchmarks.storeindex [--claims N] [--repeat R] [--steps S] [--seed S]
[--store PATH] [--json PATH]``

Setup: a SQLite store of ``--claims`` claims (default 100,000) with the agent-loop workload
(`benchmarks.agent_loop`: 8 namespaces, 8 predicates, N / 64 subjects, short realistic values;
about 10% of keys conflict (a second author's disagreement arrives as a signed change after each
batch) and about 10% of the claims are retracted), written through the public API in changes of
``BATCH`` claims. ``--store PATH`` measures an existing store instead (built before with
``--keep PATH``, so one build serves several runs); the build time is in the JSON, in no row.

Rows (medians of ``--repeat`` runs, default 5; each figure beside the issue's target):

- **cold CLI**: the wall time of a new ``python -m statefuse`` process, as an agent calling the
  CLI as a tool pays it: ``--version`` (interpreter + import: the floor of every other row),
  ``claim KEY VALUE`` (a new key each run), ``show KEY``, ``conflicts --limit 20`` and
  ``context --query Q``. One untimed run first writes the bytecode, as an install does.
- **fresh process**: a child process runs ``Replica.open(path)`` and then the first
  ``Replica.context(Q)``; each is timed inside the child, and its peak RSS
  (``resource.getrusage``) is read before ``close()``.
- **cold reads**: a new process opens the store and makes one read of an entry point, timed
  inside it: MCP ``search`` with a query and no prefix (the text index ranks and counts), MCP
  ``search`` with neither (the first claims by key), through the MCP SDK's client in memory; the
  LangGraph store's ``search`` with a query and ``list_namespaces`` (the items under
  ``("bench",)``, a few that each run adds). The child checks that none loaded the history.
- **agent step**: in one child process, after open and one warm-up step, ``--steps`` steps
  (default 100), each ``add_claim`` on a new key then ``Replica.context`` (budget 2,000 tokens)
  for a query naming that key; the step median, and the process's resident memory after them
  (peak, and current from ``/proc/self/status``). Then the floor: as many steps again, each
  part timed on its own as `Replica.context` runs it (the write; the slice's reads from the
  derived state; the context assembled over the slice with the caches carried).

The targets are the issue's, stated for a 1M-claim store (the agent step also for 100k); at
other sizes the target column still shows them, so the gap reads the same at every size.
Progress goes to stderr, the table to stdout, the JSON (every sample, the machine, the load
average) to ``--json`` or ``benchmarks/results/storeindex-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.agent_loop import CLI_QUERY, Loaded, Progress, build_store, key_of
from benchmarks.report import ROOT, load_average, machine_info, seconds, utc_stamp, write_document

CLAIMS = 100_000
REPEAT = 5
STEPS = 100
SEED = 20_261_127
#: Claims per signed change while building (the peer's disagreements follow each one).
BATCH = 5_000
BUDGET = 2_000
CONFLICT_LIMIT = 20
RESULTS = Path(__file__).resolve().parent / "results"
MB = 1_000_000


@dataclass(frozen=True, slots=True)
class Target:
    """The issue's target for a row: at most ``limit`` (seconds or bytes)."""

    limit: float
    text: str


TARGET_CLI = Target(0.3, "<= 0.3 s (1M)")
TARGET_CONTEXT_CLI = Target(0.5, "<= 0.5 s (1M)")
TARGET_OPEN_CONTEXT = Target(0.2, "<= 0.2 s (1M)")
TARGET_RSS = Target(200 * MB, "<= 200 MB (1M)")


def step_target(claims: int) -> Target:
    """The agent step's target: 5 ms up to 100k claims, 10 ms at 1M."""
    return Target(5e-3, "<= 5 ms (100k)") if claims <= CLAIMS else Target(10e-3, "<= 10 ms (1M)")


class Unit:
    SECONDS = "s"
    BYTES = "B"


@dataclass(slots=True)
class Row:
    """One line of the table: samples (seconds or bytes) and the issue's target."""

    section: str
    name: str
    samples: list[float]
    target: Target | None
    unit: str = Unit.SECONDS
    note: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def gap(self) -> float | None:
        """How many times the target the median is (above 1: not met)."""
        return None if self.target is None else self.median / self.target.limit

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "name": self.name,
            "unit": self.unit,
            "median": self.median,
            "min": min(self.samples),
            "samples": self.samples,
            "target": None if self.target is None else self.target.limit,
            "target_text": None if self.target is None else self.target.text,
            "met": None if self.gap is None else self.gap <= 1.0,
            "note": self.note,
            **self.extra,
        }


def _cell(row: Row, value: float) -> str:
    if row.unit == Unit.BYTES:
        return f"{value / MB:,.0f} MB"
    return seconds(value)


HEADER = f"{'measurement':<44} {'median':>9}  {'min':>9}  {'target':<15} {'gap':>8}"


def format_table(rows: list[Row], title: str) -> str:
    lines = [title, "", HEADER, "-" * len(HEADER)]
    section = None
    for row in rows:
        if row.section != section:
            if section is not None:
                lines.append("")
            section = row.section
            lines.append(f"[{section}]")
        target = "" if row.target is None else row.target.text
        gap = "" if row.gap is None else f"{row.gap:,.1f}x"
        lines.append(
            f"{row.name:<44} {_cell(row, row.median):>9}  {_cell(row, min(row.samples)):>9}"
            f"  {target:<15} {gap:>8}".rstrip()
        )
        if row.note:
            lines.append(f"      ({row.note})")
    return "\n".join(lines)


# --- the child processes --------------------------------------------------------------------------

#: Opens the store, then the first context; prints one JSON line (seconds, peak RSS in bytes).
_OPEN = textwrap.dedent(
    """
    import json, resource, sys, time
    t0 = time.perf_counter()
    from statefuse.sync.replica import Replica
    t1 = time.perf_counter()
    rep = Replica.open(sys.argv[1])
    t2 = time.perf_counter()
    ctx = rep.context(sys.argv[2], budget=int(sys.argv[3]))
    t3 = time.perf_counter()
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's peak (the parent that
    # built the store in-process holds gigabytes), VmHWM is this program's own
    peak = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status")
                if l.startswith("VmHWM:"))
    assert ctx.text
    rep.close()
    print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "context_s": t3 - t2,
                      "peak_rss": peak}))
    """
)

#: Opens the store, one warm-up step, then N steps: add_claim on a new key + context.
_STEPS = textwrap.dedent(
    """
    import json, resource, sys, time
    from statefuse.sync.replica import Replica
    path, steps, budget, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    def rss(field="VmRSS:"):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024
        return 0

    rep = Replica.open(path)
    times = []
    for k in range(steps + 1):
        subject = f"step_{tag}_{k}"
        t0 = time.perf_counter()
        rep.add_claim("agents", subject, "status", f"working on item {k}",
                      provenance="agent step")
        ctx = rep.context(f"What is the status of {subject}?", budget=budget)
        dt = time.perf_counter() - t0
        if f"working on item {k}" not in ctx.text:
            raise SystemExit(f"step {k}: the context does not include the claim just written")
        if k:
            times.append(dt)
    peak = rss("VmHWM:")  # this program's own peak (see _OPEN)
    now = rss()
    # the floor: the same steps again, each part timed apart, as `Replica.context` runs them
    from statefuse.reading.context import ContextCache, context_for
    from statefuse.reading.lens import Lens
    from statefuse.sync import replica as module
    from statefuse.sync.replica import _totals
    cache, memo = ContextCache(), getattr(rep, "_op_memo", None)
    scanning = getattr(module, "_Scanning", None)
    ranked = {} if scanning is None else {"ranker": scanning(cache.ranker)}
    parts = {"write_s": [], "reads_s": [], "assembly_s": [], "slice_claims": []}
    for k in range(steps + 1):
        subject = f"step_{tag}f_{k}"
        query = f"What is the status of {subject}?"
        t0 = time.perf_counter()
        rep.add_claim("agents", subject, "status", f"working on item {k}",
                      provenance="agent step")
        t1 = time.perf_counter()
        ix = rep.index
        with rep.store.read_transaction():
            loci = ix.context_loci(query, budget=budget)
            extra = {} if memo is None else {"memo": memo}
            state = ix.state_of(loci, registry=rep.registry, **extra)
            totals = _totals(ix, state)
        t2 = time.perf_counter()
        ctx = context_for(state, Lens(now=rep._clock()), budget=budget, query=query,
                          cache=cache, authors=rep.author_names(), totals=totals, **ranked)
        t3 = time.perf_counter()
        assert f"working on item {k}" in ctx.text
        if k:
            parts["write_s"].append(t1 - t0)
            parts["reads_s"].append(t2 - t1)
            parts["assembly_s"].append(t3 - t2)
            parts["slice_claims"].append(len(state.claims))
    rep.close()
    print(json.dumps({"step_s": times, "peak_rss": peak, "rss": now, **parts}))
    """
)


#: Opens the store, then one read of an entry point per run; prints the seconds of each read.
_READS = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from mcp import Client
    from statefuse.entry.langgraph import StateFuseStore
    from statefuse.entry.mcp import build_server
    from statefuse.sync.replica import Replica
    path, query, tag = sys.argv[1], sys.argv[2], sys.argv[3]
    out = {}

    async def mcp_search(arguments):
        rep = Replica.open(path)
        async with Client(build_server(rep), mode="legacy") as client:
            t0 = time.perf_counter()
            result = await client.call_tool("search", arguments)
            dt = time.perf_counter() - t0
        assert not result.is_error and not rep.loaded, result
        rep.close()
        return dt

    out["mcp_query_s"] = asyncio.run(mcp_search({"query": query}))
    out["mcp_first_s"] = asyncio.run(mcp_search({}))
    with StateFuseStore.open(path) as store:
        store.put(("bench", tag), "note", {"text": query})  # lean: loads nothing
    for name, read in (
        ("lg_search_s", lambda s: s.search(("bench",), query=query, limit=10)),
        ("lg_namespaces_s", lambda s: s.list_namespaces(prefix=("bench",))),
    ):
        with StateFuseStore.open(path) as store:
            t0 = time.perf_counter()
            found = read(store)
            out[name] = time.perf_counter() - t0
            assert found and not store.replica.loaded
    print(json.dumps(out))
    """
)


def _env() -> dict[str, str]:
    # As an installed package runs: compiled bytecode may be kept, whatever this shell says.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _python(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run ``python ARGS`` in the checkout; raises RuntimeError when it fails."""
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, check=False, env=_env()
    )
    if done.returncode != 0 or not done.stdout:
        err = done.stderr.decode(errors="replace").strip()[-2000:]
        raise RuntimeError(f"python {' '.join(args)[:200]} failed ({done.returncode}): {err}")
    return done


def _child(script: str, *args: str) -> dict[str, object]:
    out = _python("-c", script, *args).stdout.decode().strip().splitlines()[-1]
    result: dict[str, object] = json.loads(out)
    return result


def _key_text(i: int) -> str:
    return "/".join(key_of(i))


def bench_cli(path: Path, *, repeat: int, progress: Progress) -> list[Row]:
    """Cold CLI rows: a new process per run, each timed from the outside."""
    section = f"cold CLI: a new process each run, median of {repeat}"
    store = ["--store", str(path)]
    shown = _key_text(1)
    commands: list[tuple[str, Target | None, Callable[[int], list[str]]]] = [
        ("statefuse --version (floor)", None, lambda k: ["--version"]),
        (
            "statefuse claim KEY VALUE",
            TARGET_CLI,
            lambda k: [*store, "claim", f"agents/cli_{os.getpid()}_{k}/status", '"open"'],
        ),
        ("statefuse show KEY", TARGET_CLI, lambda k: [*store, "show", shown]),
        (
            f"statefuse conflicts --limit {CONFLICT_LIMIT}",
            TARGET_CLI,
            lambda k: [*store, "conflicts", "--limit", str(CONFLICT_LIMIT)],
        ),
        (
            "statefuse context --query Q",
            TARGET_CONTEXT_CLI,
            lambda k: [*store, "context", "--query", CLI_QUERY],
        ),
    ]
    rows = []
    for name, target, argv_of in commands:
        progress(f"cold CLI: {name} ...")
        _python("-m", "statefuse", *argv_of(-1))  # untimed: writes the bytecode
        times, printed = [], 0
        for k in range(repeat):
            t0 = time.perf_counter()
            done = _python("-m", "statefuse", *argv_of(k))
            times.append(time.perf_counter() - t0)
            printed = len(done.stdout)
        note = f"Q = {CLI_QUERY!r}; " if "context" in name else ""
        note += f"KEY = {shown}; " if "show" in name else ""
        rows.append(Row(section, name, times, target, note=note + f"{printed:,} bytes printed"))
    return rows


def bench_open(path: Path, *, repeat: int, progress: Progress) -> list[Row]:
    """``Replica.open`` + first ``context()`` in a fresh process, timed inside it."""
    section = f"fresh process: Replica.open + first context(), median of {repeat}"
    runs = []
    for k in range(repeat):
        progress(f"fresh process: open + first context, run {k + 1} of {repeat} ...")
        runs.append(_child(_OPEN, str(path), CLI_QUERY, str(BUDGET)))

    def floats(name: str) -> list[float]:
        return [float(r[name]) for r in runs]  # type: ignore[arg-type]

    both = [o + c for o, c in zip(floats("open_s"), floats("context_s"), strict=True)]
    return [
        Row(
            section,
            "Replica.open + first context()",
            both,
            TARGET_OPEN_CONTEXT,
            note=f"import statefuse {seconds(statistics.median(floats('import_s')))}, not counted",
        ),
        Row(section, "  of which Replica.open", floats("open_s"), None),
        Row(section, "  of which first context()", floats("context_s"), None),
        Row(section, "peak RSS after them", floats("peak_rss"), None, unit=Unit.BYTES),
    ]


def bench_steps(path: Path, *, claims: int, steps: int, progress: Progress) -> list[Row]:
    """The agent step in a warm process, and the memory it holds after ``steps`` of them."""
    section = f"agent step, warm process: add_claim + context({BUDGET:,} tokens), {steps} steps"
    progress(f"agent step: {steps} steps ...")
    r = _child(_STEPS, str(path), str(steps), str(BUDGET), utc_stamp())
    times = [float(t) for t in r["step_s"]]  # type: ignore[attr-defined]

    def part(name: str) -> list[float]:
        return [float(t) for t in r[name]]  # type: ignore[attr-defined]

    held = statistics.median(part("slice_claims"))
    return [
        Row(section, "agent step (write 1 claim + context)", times, step_target(claims)),
        # the floor: what each part of the same steps costs on its own (again `steps` of them)
        Row(section, "  floor: the write (add_claim)", part("write_s"), None),
        Row(
            section,
            "  floor: the slice's reads",
            part("reads_s"),
            None,
            note=f"context_loci + state_of + counts; a median {held:,.0f} claims read",
        ),
        Row(
            section,
            "  floor: assembly over the slice",
            part("assembly_s"),
            None,
            note="context_for with the caches carried: projection, ranking, token counts, layout",
        ),
        Row(
            section,
            f"peak RSS after open + {steps} steps",
            [float(r["peak_rss"])],  # type: ignore[arg-type]
            TARGET_RSS,
            unit=Unit.BYTES,
        ),
        Row(
            section,
            f"current RSS after open + {steps} steps",
            [float(r["rss"])],  # type: ignore[arg-type]
            None,
            unit=Unit.BYTES,
        ),
    ]


def bench_reads(path: Path, *, repeat: int, progress: Progress) -> list[Row]:
    """Cold reads of the entry points: each run a new process, each read timed inside it."""
    section = f"cold reads: a new process, one read timed inside it, median of {repeat}"
    runs = []
    for k in range(repeat):
        progress(f"cold reads: MCP search, LangGraph search, run {k + 1} of {repeat} ...")
        runs.append(_child(_READS, str(path), CLI_QUERY, f"{utc_stamp()}_{k}"))

    def floats(name: str) -> list[float]:
        return [float(r[name]) for r in runs]  # type: ignore[arg-type]

    return [
        Row(
            section,
            "MCP search QUERY (no prefix)",
            floats("mcp_query_s"),
            None,
            note=f"QUERY = {CLI_QUERY!r}: ranked and counted by the text index",
        ),
        Row(section, "MCP search (no query, no prefix)", floats("mcp_first_s"), None),
        Row(section, "LangGraph search, query, under a prefix", floats("lg_search_s"), None),
        Row(section, "LangGraph list_namespaces(prefix)", floats("lg_namespaces_s"), None),
    ]


# --- running --------------------------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.storeindex",
        description="StateFuse: cold CLI, open + first context and the agent step on one store.",
    )
    parser.add_argument(
        "--claims", type=_positive, default=CLAIMS, help=f"claims in the store (default {CLAIMS})"
    )
    parser.add_argument(
        "--repeat", type=_positive, default=REPEAT, help=f"runs per timing (default {REPEAT})"
    )
    parser.add_argument(
        "--steps", type=_positive, default=STEPS, help=f"agent steps (default {STEPS})"
    )
    parser.add_argument("--seed", type=int, default=SEED, help=f"workload seed (default {SEED})")
    parser.add_argument(
        "--store", type=Path, default=None, help="measure this existing store (no build)"
    )
    parser.add_argument("--keep", type=Path, default=None, help="build the store at this path")
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    if args.store is not None and args.keep is not None:
        parser.error("--store and --keep exclude each other")
    if args.store is not None and not args.store.exists():
        parser.error(f"--store: no such file: {args.store}")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep: {args.keep} exists already")
    return args


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(path: Path, args: argparse.Namespace, built: Loaded | None) -> tuple[list[Row], str]:
    claims = args.claims
    rows = bench_cli(path, repeat=args.repeat, progress=_log)
    rows += bench_open(path, repeat=args.repeat, progress=_log)
    rows += bench_steps(path, claims=claims, steps=args.steps, progress=_log)
    rows += bench_reads(path, repeat=args.repeat, progress=_log)
    machine = machine_info()
    what = f"{claims:,}-claim store"
    if built is not None:
        what += f", {built.ops:,} ops ({built.retractions:,} retractions)"
    title = (
        f"StateFuse, the store as index: {what}, {path.stat().st_size / MB:,.0f} MB on disk;"
        f" Python {machine['python']}, {machine['cpu_count']} CPUs, load {load_average()}"
    )
    return rows, title


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    built: Loaded | None = None
    with tempfile.TemporaryDirectory(prefix="sf-storeindex-") as tmp:
        path = args.store or args.keep or Path(tmp) / "team.db"
        if args.store is None:
            _log(f"building a {args.claims:,}-claim store at {path} ...")
            t0 = time.perf_counter()
            built = build_store(path, args.claims, seed=args.seed, batch=BATCH, progress=_log)
            built.seconds = time.perf_counter() - t0  # with close(): the snapshot it writes
            _log(f"  built in {built.seconds:.1f} s")
        rows, title = run(path, args, built)
    print(format_table(rows, title))
    out: Path = args.json or RESULTS / f"storeindex-{utc_stamp()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, object] = {
        "machine": machine_info(),
        "benchmark": "storeindex",
        "options": {
            "claims": args.claims,
            "repeat": args.repeat,
            "steps": args.steps,
            "seed": args.seed,
            "batch": BATCH,
            "budget": BUDGET,
            "store": None if args.store is None else str(args.store),
        },
        "build": None
        if built is None
        else {
            "claims": built.claims,
            "retractions": built.retractions,
            "peer_claims": built.peer_claims,
            "changes": built.changes,
            "seconds": round(built.seconds, 2),
        },
        "load_average_at_end": load_average(),
        "wall_s": round(time.perf_counter() - start, 1),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(out, document)


if __name__ == "__main__":
    sys.exit(main())
