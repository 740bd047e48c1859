"""The LangGraph store (`statefuse.entry.langgraph.StateFuseStore`): put, get and search latency.

``python -m benchmarks.langgraph_store [--items N] [--steps N] [--seed S] [--json PATH]``

Setup, per backend: N items (default 10,000) in N / 100 namespaces ``("users", "u<j>")`` of 100
keys each, values ``{"text": <8 words>, "n": <int>, "kind": <one of 4>}``, loaded through
``store.batch`` in batches of 1,000 puts (one signed change each). Backends: `StateFuseStore` on
a `Replica.memory`, on a SQLite replica (``synchronous=FULL``: every put is one fsync), and
LangGraph's ``InMemoryStore`` as the reference. The embedding rows use a second store of each
kind with ``index={"embed": <hashing bag of words, 64 dims, pure Python>, "fields": ["text"]}``
(no model, no network; its cost is in every embedding row of both stores alike).

Rows (median and 90th percentile of ``--steps`` calls, default 200, after 5 warm-up calls; the
store is the same across a row's calls, so a put row grows it by ``--steps`` items at most):

- **put, existing key**: ``put`` of a new value at a random existing key (`Replica.update`: a
  claim and a retraction, one signed change).
- **put, new key**: ``put`` at a key not held yet.
- **get, warm**: ``get`` of a random key, nothing written since the last read.
- **put + get**: a put, then a get of another key: the first read of a new State (the
  projection and the store's catalog carried from the previous State). The put is inside.
- **search one namespace**: ``search(("users", "u<j>"))``, 100 items, first 10.
- **search, filter, whole store**: ``search(("users",), filter={"kind": k, "n": {"$gte": x}})``
  whose first 10 matches come early; and **... that scans**: a filter only the last namespace
  matches (every item is looked at).
- **search, lexical query, whole store**: ``search(("users",), query=<2 words>)``, BM25 over
  all N items, first 10 (`StateFuseStore` without an embedding index; the reference store
  ignores the query and returns the first 10).
- **search, embedding query, whole store**: the same with embeddings (cosine over N vectors).
- **list_namespaces**: ``list_namespaces(prefix=("users",), limit=100)``.

Progress goes to stderr, the table to stdout, the JSON (every sample) to ``--json`` or
``benchmarks/results/langgraph-store-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.store.base import BaseStore, PutOp
from langgraph.store.memory import InMemoryStore

from benchmarks.measure import sectioned
from benchmarks.report import load_average, machine_info, utc_stamp, write_document
from statefuse.entry.langgraph import StateFuseStore
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
ITEMS = 10_000
PER_NAMESPACE = 100
BATCH = 1_000
STEPS = 200
WARMUP = 5
DIMS = 64
SEED = 14
WORDS = (
    *("apple", "river", "stone", "cloud", "vendor", "price", "launch", "delay", "budget"),
    *("team", "review", "memory", "agent", "plan", "theme", "editor", "dark", "light"),
    *("coffee", "travel", "meeting", "report", "invoice", "deadline", "garden", "music"),
)
KINDS = ("preference", "fact", "task", "note")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def embed(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic bag-of-words embedding (each word adds 1 to one of DIMS buckets)."""
    out = []
    for text in texts:
        v = [0.0] * DIMS
        for w in text.split():
            digest = hashlib.blake2b(w.encode(), digest_size=4).digest()
            v[int.from_bytes(digest, "big") % DIMS] += 1
        out.append(v)
    return out


@dataclass(frozen=True, slots=True)
class Workload:
    """Every item the stores load, and the random choices of the timed calls, from one seed."""

    items: int
    seed: int

    @property
    def namespaces(self) -> int:
        return max(1, self.items // PER_NAMESPACE)

    def place(self, i: int) -> tuple[tuple[str, ...], str]:
        return ("users", f"u{i % self.namespaces}"), f"m{i // self.namespaces}"

    def value(self, rng: random.Random, i: int) -> dict[str, Any]:
        return {"text": " ".join(rng.choices(WORDS, k=8)), "n": i, "kind": KINDS[i % 4]}

    def ops(self) -> Iterator[list[PutOp]]:
        rng = random.Random(self.seed)
        for start in range(0, self.items, BATCH):
            yield [
                PutOp(*self.place(i), self.value(rng, i))
                for i in range(start, min(start + BATCH, self.items))
            ]


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
        }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:9.3f} ms"


def _timed(call: Callable[[int], object], steps: int) -> list[float]:
    for i in range(WARMUP):
        call(-1 - i)
    out = []
    for i in range(steps):
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return out


def load(store: BaseStore, work: Workload) -> float:
    start = time.perf_counter()
    for ops in work.ops():
        store.batch(ops)
    return time.perf_counter() - start


def bench_store(
    backend: str, store: BaseStore, indexed: BaseStore, work: Workload, steps: int
) -> list[Row]:
    """Every row for one backend (``indexed``: the same kind of store with embeddings)."""
    rng = random.Random(work.seed + 1)
    n = work.items
    rows: list[Row] = []

    def row(section: str, name: str, call: Callable[[int], object], note: str = "") -> None:
        _log(f"  {backend}: {name}")
        rows.append(Row(section, name, backend, _timed(call, steps), note))

    def existing() -> tuple[tuple[str, ...], str]:
        return work.place(rng.randrange(n))

    fresh = iter(range(n, 10 * n))
    row("write", "put, existing key", lambda i: store.put(*existing(), work.value(rng, i)))
    row("write", "put, new key", lambda i: store.put(*work.place(next(fresh)), {"n": i}))
    row("read", "get, warm", lambda i: store.get(*existing()))

    def put_get(i: int) -> None:
        store.put(*existing(), work.value(rng, i))
        store.get(*existing())

    row("read", "put + get", put_get)
    last = ("users", f"u{work.namespaces - 1}")
    row("search", "search one namespace (100 items)", lambda i: store.search(existing()[0]))
    row(
        "search",
        "search, filter, whole store",
        lambda i: store.search(("users",), filter={"kind": "fact", "n": {"$gte": n // 2}}),
    )
    row(
        "search",
        "search, filter that scans, whole store",
        lambda i: store.search(("users",), filter={"kind": KINDS[(n - 1) % 4], "n": n - 1}),
        note=f"only {last} matches",
    )
    row(
        "search",
        "search, lexical query, whole store",
        lambda i: store.search(("users",), query=" ".join(rng.choices(WORDS, k=2))),
        note="without an index it ignores the query" if backend == "InMemoryStore" else "",
    )
    row(
        "search",
        "search, embedding query, whole store",
        lambda i: indexed.search(("users",), query=" ".join(rng.choices(WORDS, k=2))),
    )
    row("search", "list_namespaces, first 100", lambda i: store.list_namespaces(prefix=("users",)))
    return rows


def _key(name: str, seed: int) -> SigningKey:
    return SigningKey.from_seed(hashlib.sha256(f"langgraph-store/{seed}/{name}".encode()).digest())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=ITEMS, help="items per store (default 10k)")
    parser.add_argument("--steps", type=int, default=STEPS, help="timed calls per row")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--json", type=Path, default=None, help="where the JSON goes")
    args = parser.parse_args(argv)
    if args.items < PER_NAMESPACE or args.steps < 2:
        parser.error(f"--items is at least {PER_NAMESPACE} and --steps at least 2")
    work = Workload(args.items, args.seed)
    index = {"embed": embed, "dims": DIMS, "fields": ["text"]}
    start = time.perf_counter()
    rows: list[Row] = []
    loads: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="statefuse-langgraph-") as tmp:
        backends: list[tuple[str, Callable[[], BaseStore], Callable[[], BaseStore]]] = [
            (
                "StateFuse, memory",
                lambda: StateFuseStore(Replica.memory(space="lg", key=_key("m", args.seed))),
                lambda: StateFuseStore(
                    Replica.memory(space="lg", key=_key("mi", args.seed)), index=index
                ),
            ),
            (
                "StateFuse, SQLite",
                lambda: StateFuseStore.open(Path(tmp) / "s.db", create=True, space="lg"),
                lambda: StateFuseStore.open(
                    Path(tmp) / "si.db", create=True, space="lg", index=index
                ),
            ),
            ("InMemoryStore", InMemoryStore, lambda: InMemoryStore(index=index)),  # type: ignore[arg-type]
        ]
        for backend, make, make_indexed in backends:
            _log(f"[{time.perf_counter() - start:6.1f}s] {backend}: loading {work.items:,} items")
            store, indexed = make(), make_indexed()
            loads[backend] = load(store, work)
            loads[backend + ", with embeddings"] = load(indexed, work)
            rows += bench_store(backend, store, indexed, work, args.steps)
            for s in (store, indexed):
                if isinstance(s, StateFuseStore):
                    s.close()
    names = list(dict.fromkeys(r.name for r in rows))
    backends_seen = list(dict.fromkeys(r.backend for r in rows))
    rows.sort(key=lambda r: (names.index(r.name), backends_seen.index(r.backend)))
    machine = machine_info()
    title = (
        f"LangGraph store at {work.items:,} items: medians (p90) of {args.steps} calls;"
        f" Python {machine['python']}; {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    header = f"{'row':<42} {'backend':<18} {'median':>12} {'p90':>12}"
    print(
        sectioned(
            title,
            header,
            rows,
            lambda r: f"{r.name:<42} {r.backend:<18} {_ms(r.median):>12} {_ms(r.p90):>12}",
        )
    )
    print("\nload, batches of 1,000 puts: " + ", ".join(f"{k} {v:.2f} s" for k, v in loads.items()))
    name = "langgraph-store-" + utc_stamp()
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "langgraph_store",
        "options": {"items": work.items, "steps": args.steps, "warmup": WARMUP, "seed": args.seed},
        "load_s": loads,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
