"""Reads after many updates: LangGraph put + get and MCP remember + recall after U updates of
one key, and LangGraph's large concurrent store workload.

``python -m benchmarks.updates [--items N] [--steps N] [--updates LIST] [--mcp-updates LIST]
[--rounds N] [--keys N] [--seed S] [--json PATH]``

Every update (`Replica.update`, a LangGraph ``put`` over a key, a delete) adds a retraction,
and a read after a write must not pay for all of them (issue 25). Rows (median and 90th
percentile of ``--steps`` calls, default 30, after 3 warm-up calls):

- **put + get after U updates** (``--updates``, default 0, 1,000, 4,000 and 16,000), on a
  `StateFuseStore` over a `Replica.memory` and over a SQLite replica: a store of ``--items``
  items (default 1,000, in 10 namespaces), then U puts of one key, then the timed step: a put of
  that key and a get of it. The SQLite store receives the U updates from a memory replica of the
  same key in one transaction (`Replica.merge`: the same op-set, without U fsyncs of setup); the
  timed puts are ordinary durable writes (one fsync each). The note gives the ratio to U = 0.
- **remember + recall after U updates** (``--mcp-updates``, default 0, 2,000 and 8,000): the MCP
  server's tools in process (`statefuse.entry.mcp`, on a `Replica.memory`; what JSON-RPC adds is in
  `benchmarks.mcp`) after 200 other keys and U ``remember`` calls of one key; the step is a
  ``remember`` of that key and a ``recall`` (2,000 tokens) whose query names it.
- **LangGraph's large concurrent workload**: the calls of LangGraph's own store test
  ``test_large_batches_async`` (``--rounds`` rounds, default 10, of ``--keys`` keys, default
  1,000, each a put, a
  get, a list_namespaces, a search, a put and a delete: 60,000 calls) gathered at once on one
  event loop, on LangGraph's ``InMemoryStore`` and on both `StateFuseStore`s (one run each; the
  note gives the ratio to ``InMemoryStore``). **... awaited one at a time** runs one round
  (6,000 calls by default), each call awaited before the next: every put and delete is then a
  signed change of its own, the floor of a store whose calls are not joined into batches.

Progress goes to stderr, the table to stdout, the JSON (every sample) to ``--json`` or
``benchmarks/results/updates-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from benchmarks.measure import sectioned
from benchmarks.report import load_average, machine_info, utc_stamp, write_document
from statefuse.entry.langgraph import StateFuseStore
from statefuse.entry.mcp import _Tools
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
ITEMS = 1_000
STEPS = 30
WARMUP = 3
UPDATES = (0, 1_000, 4_000, 16_000)
MCP_UPDATES = (0, 2_000, 8_000)
ROUNDS = 10
KEYS_PER_ROUND = 1_000
SEED = 25
NAMESPACE = ("users", "u1")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(slots=True)
class Row:
    section: str
    name: str
    backend: str
    samples: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        if len(self.samples) < 2:
            return self.median
        return statistics.quantiles(self.samples, n=10)[-1]

    def to_json(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "backend": self.backend,
            "median_s": self.median,
            "p90_s": self.p90,
            "samples_s": self.samples,
            "note": self.note,
        }


def _timed(call: Callable[[int], object], steps: int) -> list[float]:
    for i in range(WARMUP):
        call(-1 - i)
    out = []
    for i in range(steps):
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return out


def _key(name: str, seed: int) -> SigningKey:
    return SigningKey.from_seed(hashlib.sha256(f"updates/{seed}/{name}".encode()).digest())


def _loaded(key: SigningKey, items: int, updates: int) -> StateFuseStore:
    """A memory store of ``items`` items, then ``updates`` puts of one key."""
    store = StateFuseStore(Replica.memory(space="updates", key=key))
    place = [(("users", f"u{i % 10}"), f"m{i}") for i in range(items)]
    store.batch([PutOp(ns, k, {"text": f"item {i}", "n": i}) for i, (ns, k) in enumerate(place)])
    for i in range(updates):
        store.put(NAMESPACE, "k", {"text": f"value number {i}", "n": i})
    return store


def bench_put_get(backend: str, items: int, updates: int, steps: int, seed: int, tmp: Path) -> Row:
    key = _key(f"{backend}/{updates}", seed)
    store = _loaded(key, items, updates)
    if backend == "SQLite":
        replica = Replica.open(tmp / f"put-get-{updates}.db", create=True, space="updates", key=key)
        with warnings.catch_warnings():  # the store's own key wrote them elsewhere, on purpose
            warnings.simplefilter("ignore")
            replica.merge(store.replica)
        store.close()
        store = StateFuseStore(replica)

    def step(i: int) -> None:
        store.put(NAMESPACE, "k", {"text": f"another {i}", "n": i})
        if store.get(NAMESPACE, "k") is None:
            raise AssertionError("the put is not read back")

    row = Row("put + get", f"put + get after {updates:,} updates", backend, _timed(step, steps))
    store.replica.close()
    return row


def bench_mcp(updates: int, steps: int, seed: int) -> Row:
    tools = _Tools(
        Replica.memory(space="updates", key=_key(f"mcp/{updates}", seed)),
        threading.RLock(),
        (),
        5.0,
    )
    for i in range(200):
        tools.remember(f"team/s{i}/note", f"base value {i}")
    for i in range(updates):
        tools.remember("team/plan/budget", f"budget is {i} dollars")

    def step(i: int) -> None:
        tools.remember("team/plan/budget", f"budget now {i} euros")
        tools.recall("plan budget", budget=2_000)

    return Row(
        "remember + recall",
        f"remember + recall after {updates:,} updates",
        "MCP tools",
        _timed(step, steps),
    )


def _workload(store: BaseStore, rounds: int, keys: int) -> list[Coroutine[Any, Any, object]]:
    calls: list[Coroutine[Any, Any, object]] = []
    for m in range(rounds):
        ns = ("test", "foo", "bar", "baz", str(m % 2))
        for i in range(keys):
            calls += [
                store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                store.aget(ns, f"key{i}"),
                store.alist_namespaces(prefix=None, max_depth=m + 1),
                store.asearch(("test",)),
                store.aput(ns, f"key{i}", value={"foo": f"bar{i}"}),
                store.adelete(ns, f"key{i}"),
            ]
    return calls


def bench_large(make: Callable[[], BaseStore], rounds: int, keys: int, *, gathered: bool) -> float:
    store = make()

    async def run() -> None:
        calls = _workload(store, rounds, keys)
        if gathered:
            results = await asyncio.gather(*calls)
        else:
            results = [await c for c in calls]
        if len(results) != rounds * keys * 6:
            raise AssertionError("a call went unanswered")

    start = time.perf_counter()
    asyncio.run(run())
    took = time.perf_counter() - start
    if isinstance(store, StateFuseStore):
        store.close()
    return took


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:10.2f} ms"


def _with_ratios(rows: list[Row]) -> None:
    """Notes: each put + get row against U = 0 of its backend, each large-workload row against
    InMemoryStore's."""
    fresh = {r.backend: r.median for r in rows if r.name.endswith(" after 0 updates")}
    for r in rows:
        base = fresh.get(r.backend)
        if r.section in ("put + get", "remember + recall") and base:
            r.note = f"{r.median / base:.2f}x fresh"
    for name in {r.name for r in rows if r.section == "large workload"}:
        reference = next(
            (r.median for r in rows if r.name == name and r.backend == "InMemoryStore"), None
        )
        for r in rows:
            if r.name == name and reference:
                r.note = f"{r.median / reference:.1f}x InMemoryStore"


def _counts(text: str) -> list[int]:
    try:
        out = sorted({int(p.replace("_", "")) for p in text.split(",") if p.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not out or out[0] < 0:
        raise argparse.ArgumentTypeError("counts are integers >= 0")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=ITEMS, help="items besides the updated key")
    parser.add_argument("--steps", type=int, default=STEPS, help="timed calls per row")
    parser.add_argument("--updates", type=_counts, default=list(UPDATES))
    parser.add_argument("--mcp-updates", type=_counts, default=list(MCP_UPDATES))
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds of the large workload")
    parser.add_argument("--keys", type=int, default=KEYS_PER_ROUND, help="keys per round")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--json", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.items < 0 or args.steps < 2 or args.rounds < 1 or args.keys < 1:
        parser.error("--items is at least 0, --steps at least 2, --rounds and --keys at least 1")
    start = time.perf_counter()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="statefuse-updates-") as name:
        tmp = Path(name)
        for backend in ("memory", "SQLite"):
            for u in args.updates:
                _log(f"[{time.perf_counter() - start:6.1f}s] put + get, {backend}, {u:,} updates")
                rows.append(bench_put_get(backend, args.items, u, args.steps, args.seed, tmp))
        for u in args.mcp_updates:
            _log(f"[{time.perf_counter() - start:6.1f}s] remember + recall, {u:,} updates")
            rows.append(bench_mcp(u, args.steps, args.seed))
        makers: list[tuple[str, Callable[[], BaseStore]]] = [
            ("InMemoryStore", InMemoryStore),
            ("memory", lambda: StateFuseStore.memory(space="large")),
            (
                "SQLite",
                lambda: StateFuseStore.open(
                    tmp / f"large-{time.perf_counter_ns()}.db", create=True, space="large"
                ),
            ),
        ]
        calls = args.rounds * args.keys * 6
        for gathered, rounds, label in (
            (True, args.rounds, f"{calls:,} calls gathered"),
            (False, 1, f"{args.keys * 6:,} calls awaited one at a time"),
        ):
            for backend, make in makers:
                _log(f"[{time.perf_counter() - start:6.1f}s] large workload, {label}, {backend}")
                took = bench_large(make, rounds, args.keys, gathered=gathered)
                rows.append(Row("large workload", label, backend, [took]))
    _with_ratios(rows)
    machine = machine_info()
    title = (
        f"Reads after updates, {args.items:,} other items, medians (p90) of {args.steps} calls;"
        f" Python {machine['python']}; {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    header = f"{'row':<44} {'backend':<14} {'median':>13} {'p90':>13}"
    print(
        sectioned(
            title,
            header,
            rows,
            lambda r: f"{r.name:<44} {r.backend:<14} {_ms(r.median):>13} {_ms(r.p90):>13}",
        )
    )
    path: Path = args.json if args.json is not None else RESULTS / f"updates-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "updates",
        "options": {
            "items": args.items,
            "steps": args.steps,
            "warmup": WARMUP,
            "updates": args.updates,
            "mcp_updates": args.mcp_updates,
            "rounds": args.rounds,
            "keys": args.keys,
            "seed": args.seed,
        },
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
