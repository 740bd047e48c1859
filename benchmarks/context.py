"""Context assembly (`statefuse.reading.context.assemble_context`): latency at 1k / 10k / 100k
facts.

``python -m benchmarks.context`` (``--quick``: 1k and 10k only). A View with n visible facts
(plus a few constraints, identity claims, turns, signals, conflicts, stale claims and open
questions) is projected once, outside the timer; each row times `assemble_context` with a
2,000-token budget (exact o200k BPE counts) for a rotation of queries.

- **cold**: a fresh `CachedTokenizer` and `LexicalRanker` for every call, so every line is
  counted and every claim's words are computed anew (the BPE ranks are loaded once, before).
- **warm, per claim**: one `CachedTokenizer` and one `LexicalRanker` kept across calls (token
  counts and words cached per claim), after one pass over the queries. The View is still
  sorted into sections on every call.
- **warm, ContextCache**: a `ContextCache` kept across calls: the same per-claim caches, and
  the View's sorting into sections and the ranker's postings kept for that View. This is the
  row the issue's target applies to.

Invariant: every timed context is checked to be within budget and to hold facts, so a run that
assembled nothing cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import format_table, load_average, machine_info, utc_stamp, write_document
from statefuse import Lens, Op, View, Writer, materialize, project
from statefuse.reading.context import ContextCache, SectionName, assemble_context
from statefuse.reading.ranker import LexicalRanker
from statefuse.reading.tokenizer import BpeTokenizer, CachedTokenizer

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (1_000, 10_000)
BUDGET = 2_000
RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's target: 10k facts, warm, <= 5 ms.
TARGET_WARM_10K = Target(5e-3, per_op=False, text="<= 5 ms")
WORDS = (
    *("launch", "deadline", "vendor", "price", "budget", "owner", "risk", "plan", "team"),
    *("region", "customer", "contract", "invoice", "shipment", "capacity", "forecast"),
    *("audit", "policy", "margin", "supplier"),
)
QUERIES = (
    "What is the launch deadline for region 7?",
    "Can we sign the vendor contract with supplier_12?",
    "Which risks affect the budget forecast?",
    "Who owns shipment 4410?",
    "Is the margin above policy for customer 93?",
)


def build_view(n: int) -> View:
    """A View with ``n`` visible facts and a little of every other section."""
    w = Writer("bench", clock=lambda: 0)
    ops: list[Op] = []
    for i in range(n):
        a, b, c = WORDS[i % 20], WORDS[(i * 7 + 3) % 20], WORDS[(i * 13 + 5) % 20]
        ops.append(
            w.claim(
                f"ns{i % 8}",
                f"{a}_{i % 997}",
                f"{b}_{i // 997}",
                f"{c} {a} {i % 101} for region {i % 13}",
                authority=("finance", "sales", "")[i % 3],
            )
        )
    for i in range(10):
        ops.append(w.constraint("policy", f"rule{i}", "limit", f"at most {i * 1000} per order"))
        ops.append(w.add_turn("user", f"question {i} about the {WORDS[i]}", session="s"))
        ops.append(w.signal("market", WORDS[i], i, expires=None))
        ops.append(w.question("proj", f"open{i}", WORDS[i], f"what is the {WORDS[i]}?"))
    ops.append(w.identity("alice", "role", "planner", authority="manager"))
    other = Writer("other", clock=lambda: 0)
    for i in range(5):
        ops.append(other.claim("ns0", f"{WORDS[0]}_{i}", f"{WORDS[3]}_0", f"disputed {i}"))
        base = w.claim("calc", f"base{i}", "rate", i)
        fix = w.claim("calc", f"base{i}", "rate", i + 1)
        ops += [base, fix, w.claim("calc", f"total{i}", "cost", i * 9, depends_on=[base.op_id])]
        ops.append(w.retract(claim_id=base.op_id, superseded_by=fix.op_id))
    return project(materialize(ops), Lens(session="s", now=0))


def _time(view: View, query: str, **kw: object) -> float:
    t0 = time.perf_counter()
    ctx = assemble_context(view, query=query, budget=BUDGET, **kw)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - t0
    assert ctx.token_count <= BUDGET and ctx.section(SectionName.FACTS) is not None
    return elapsed


def bench_context(
    sizes: tuple[int, ...], repeat: int, progress: Callable[[str], None]
) -> tuple[list[Row], dict[str, object]]:
    bpe = BpeTokenizer()
    rows: list[Row] = []
    stats: dict[str, object] = {}
    for n in sizes:
        progress(f"building a view with {n:,} facts ...")
        view = build_view(n)
        stats[str(n)] = {"selected_keys": len(view.selected), "conflicts": len(view.unresolved)}
        calls = max(len(QUERIES), repeat * (5 if n <= 10_000 else 1))
        gc.collect()
        progress(f"{n:,} facts: {calls} cold calls ...")
        cold = [
            _time(
                view,
                QUERIES[i % len(QUERIES)],
                tokenizer=CachedTokenizer(bpe),
                ranker=LexicalRanker(),
            )
            for i in range(calls)
        ]
        tokenizer, ranker = CachedTokenizer(bpe), LexicalRanker()
        cache = ContextCache(tokenizer=bpe)
        for q in QUERIES:
            _time(view, q, tokenizer=tokenizer, ranker=ranker)
            _time(view, q, cache=cache)
        progress(f"{n:,} facts: {calls} warm calls ...")
        warm = [
            _time(view, QUERIES[i % len(QUERIES)], tokenizer=tokenizer, ranker=ranker)
            for i in range(calls)
        ]
        kept = [_time(view, QUERIES[i % len(QUERIES)], cache=cache) for i in range(calls)]
        section = f"assemble_context, {BUDGET:,}-token budget (per op = per visible fact)"
        for label, samples in (
            ("cold", cold),
            ("warm, per claim (token counts, words)", warm),
            ("warm, ContextCache (+ the View's sorting)", kept),
        ):
            rows.append(
                Row(
                    section=section,
                    name=f"{n:,} facts, {label}",
                    ops=n,
                    unit=Unit.SECONDS,
                    samples=samples,
                    per=n,
                    target=TARGET_WARM_10K if (n == 10_000 and "ContextCache" in label) else None,
                )
            )
        del view
        gc.collect()
    return rows, stats


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.context", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="1k and 10k facts only")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per row, x5 up to 10k")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    sizes = QUICK_SIZES if args.quick else SIZES
    rows, stats = bench_context(sizes, max(1, args.repeat), progress)
    title = (
        f"StateFuse context assembly; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    name = "context-" + utc_stamp()
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "context",
        "options": {"sizes": list(sizes), "budget": BUDGET, "repeat": args.repeat},
        "tokenizer": BpeTokenizer().name,
        "views": stats,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
