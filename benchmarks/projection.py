"""Projection (`statefuse.project`): a View of 10k and 100k active claims, one conflict in 20.

``python -m benchmarks.projection`` (``--quick``: fewer repeats). For each size a seeded
workload is made through the public `Writer` and materialized, outside the clock:

- 32 authors, 8 namespaces, predicates with every registry policy (``surface``; ``latest`` for
  ``eta``; ``authority`` for ``owner``), a ``number`` contract (``price``) and a multi-valued one
  (``tags``); confidences 0.5-1.0 and authority labels from the default order (or none);
- mostly global claims, some ``task:`` / ``session:`` claims (a few shadowing a global claim of
  the same key), a few ``hypothetical`` and ``draft`` ones, some visible only to a role, some
  with an expiry (half of them already past for the lens);
- exactly ``n / 20`` conflicts with 2 to 4 candidates by different authors (some agreeing pairs
  among them), agreeing keys spelled differently under ``number``, multi-valued keys;
- retractions (by id and by ref, some with ``superseded_by``) of extra claims, and claims that
  depend on retracted ones (stale, with repair notes);
- decisions on one conflict in ten, a fifth of them made stale by a later candidate.

The active claim and conflict counts are checked exactly, so a generator that drifted cannot
pass for the workload the issue names. Rows time ``project(state, Lens(), resolver=R)`` on a
State whose caches are warm (median and min of ``--repeat`` calls), for R in AbstainAll,
Conservative, LatestWins and AuthorityRank; then, for Conservative: a lens with roles, task,
session and ``now``; the first call on a new State (which builds the per-state plan); and a
call followed by reading every selection and explanation (the View makes most of them lazily).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import (
    format_table,
    load_average,
    machine_info,
    timed,
    utc_stamp,
    write_document,
)
from statefuse import (
    AbstainAll,
    AuthorityRank,
    ClaimAdded,
    Conservative,
    LatestWins,
    Lens,
    Op,
    Resolver,
    View,
    Writer,
    materialize,
    project,
)
from statefuse.registry import (
    DEFAULT_AUTHORITY_ORDER,
    Cardinality,
    Policy,
    PredicateContract,
    Registry,
)

SIZES = (10_000, 100_000)
CONFLICT_SHARE = 20  # one conflict per this many active claims
SEED = 20261122
REPEAT = 9
QUICK_REPEAT = 3
RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's target: 100k active claims, 5k conflicts, Conservative, <= 100 ms.
TARGET_100K = Target(0.100, per_op=False, text="<= 100 ms")
#: The lens's clock; half of the expiring claims expire before it.
NOW_MS = 1_800_000_000_000
AUTHORS = 32
NAMESPACES = 8
REGISTRY = Registry(
    [
        PredicateContract("price", normalizer="number"),
        PredicateContract("tags", cardinality=Cardinality.MANY),
        PredicateContract("eta", policy=Policy.LATEST),
        PredicateContract("owner", policy=Policy.AUTHORITY),
    ]
)
SURFACE_PREDICATES = ("status", "deadline", "region", "headcount", "price")
CONFLICT_PREDICATES = (*SURFACE_PREDICATES, "eta", "owner")
ROLES = ("finance", "hr", "legal")
CONFIDENCES = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
AUTHORITIES = ("", "", *DEFAULT_AUTHORITY_ORDER)
RESOLVERS: tuple[tuple[str, Callable[[], Resolver]], ...] = (
    ("AbstainAll", AbstainAll),
    ("Conservative", Conservative),
    ("LatestWins", LatestWins),
    ("AuthorityRank", lambda: AuthorityRank(DEFAULT_AUTHORITY_ORDER)),
)
FULL_LENS = Lens(roles=frozenset({"finance"}), task="t1", session="s1", now=NOW_MS)


@dataclass
class Workload:
    """The ops of one size, and what they are meant to hold."""

    ops: list[Op]
    active: int
    conflicts: int
    stats: dict[str, int]


class _Maker:
    """Writes the ops of one workload; every choice comes from one seeded ``random.Random``."""

    def __init__(self, seed: int, n: int) -> None:
        self.rng = random.Random(f"statefuse-bench/projection/{seed}/{n}")
        clock = itertools.count(1_767_225_600_000, 7).__next__
        self.writers = [Writer(f"agent-{i:02d}", registry=REGISTRY, clock=clock) for i in range(32)]
        self.ops: list[Op] = []
        self.serial = itertools.count()
        self.stats: dict[str, int] = {}

    def count(self, what: str, k: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + k

    def subject(self) -> tuple[str, str]:
        return f"ns{self.rng.randrange(NAMESPACES)}", f"entity-{next(self.serial):07d}"

    def claim(
        self, who: int, ns: str, subject: str, predicate: str, value: object, **kw: object
    ) -> ClaimAdded:
        rng = self.rng
        kw.setdefault("confidence", rng.choice(CONFIDENCES))
        kw.setdefault("authority", rng.choice(AUTHORITIES))
        c = self.writers[who].claim(ns, subject, predicate, value, **kw)  # type: ignore[arg-type]
        self.ops.append(c)
        return c

    def value(self, predicate: str, variant: int) -> object:
        if predicate == "price":
            return 100 * (variant + 1)
        if predicate == "headcount":
            return variant + 3
        return f"{predicate}-{variant}"

    def single(self) -> None:
        """One claim on a new key, in a mostly global scope, some hidden or expiring."""
        rng = self.rng
        ns, subject = self.subject()
        roll = rng.random()
        kw: dict[str, object] = {}
        if roll < 0.04:
            kw["scope"] = f"task:t{rng.randrange(4)}"
        elif roll < 0.06:
            kw["scope"] = f"session:s{rng.randrange(4)}"
        elif roll < 0.065:
            kw["scope"] = "hypothetical"
        elif roll < 0.07:
            kw["scope"] = "draft"
        if rng.random() < 0.05:
            kw["visibility"] = [rng.choice(ROLES)]
            self.count("hidden-from-some-roles")
        if rng.random() < 0.02:
            kw["expires"] = NOW_MS + rng.choice((-1, 1)) * rng.randrange(1, 10**9)
            self.count("expiring")
        predicate = rng.choice((*SURFACE_PREDICATES, "eta", "owner", "tags"))
        self.claim(rng.randrange(AUTHORS), ns, subject, predicate, self.value(predicate, 0), **kw)

    def conflict(self) -> list[ClaimAdded]:
        """2-4 candidates by different authors on one global key; sometimes two agree."""
        rng = self.rng
        ns, subject = self.subject()
        predicate = rng.choice(CONFLICT_PREDICATES)
        k = rng.choice((2, 2, 2, 3, 3, 4))
        authors = rng.sample(range(AUTHORS), k)
        variants = list(range(k))
        if k > 2 and rng.random() < 0.3:
            variants[-1] = 0  # an agreeing pair: corroboration
            self.count("conflicts-with-agreement")
        return [
            self.claim(a, ns, subject, predicate, self.value(predicate, v))
            for a, v in zip(authors, variants, strict=True)
        ]

    def agreement(self) -> int:
        """A price spelled two ways by two authors (agreement under the ``number`` contract)."""
        ns, subject = self.subject()
        a, b = self.rng.sample(range(AUTHORS), 2)
        self.claim(a, ns, subject, "price", 1200)
        self.claim(b, ns, subject, "price", "1,200")
        return 2

    def tags(self) -> int:
        ns, subject = self.subject()
        k = self.rng.choice((2, 3))
        for v in range(k):
            self.claim(self.rng.randrange(AUTHORS), ns, subject, "tags", f"tag-{v}")
        return k

    def shadowing(self) -> int:
        """A global claim and a task claim on the same key (the task one shadows it in task t1)."""
        ns, subject = self.subject()
        self.claim(self.rng.randrange(AUTHORS), ns, subject, "status", "status-0")
        self.claim(self.rng.randrange(AUTHORS), ns, subject, "status", "status-1", scope="task:t1")
        return 2

    def retracted_with_dependents(self) -> int:
        """A claim retracted (by id or ref, maybe superseded) that a live claim depends on."""
        rng = self.rng
        ns, subject = self.subject()
        who = rng.randrange(AUTHORS)
        old = self.claim(who, ns, subject, "deadline", "deadline-old")
        new = self.claim(who, ns, subject, "deadline", "deadline-new")
        w = self.writers[who]
        if rng.random() < 0.5:
            t = w.retract(claim_id=old.claim_id, superseded_by=new.claim_id)
        else:
            t = w.retract(claim_ref=old.claim_ref)
        self.ops.append(t)
        ns2, subject2 = self.subject()
        self.claim(who, ns2, subject2, "status", "status-0", depends_on=[old.claim_id])
        self.count("retractions")
        return 2  # new and the dependent claim stay active


def make_workload(n: int, seed: int) -> Workload:
    """``n`` active claims with exactly ``n // CONFLICT_SHARE`` conflicts (deterministic)."""
    m = _Maker(seed, n)
    rng = m.rng
    conflicts = n // CONFLICT_SHARE
    active = 0
    decided: list[tuple[list[ClaimAdded], bool]] = []
    for _ in range(conflicts):
        candidates = m.conflict()
        active += len(candidates)
        if rng.random() < 0.1:
            decided.append((candidates, rng.random() < 0.2))
    state = materialize(m.ops, registry=REGISTRY)
    by_key = {c.key: c for c in state.conflicts}
    for candidates, make_stale in decided:
        conflict = by_key[candidates[0].key]
        d = m.writers[0].decide_on(conflict, rng.choice(candidates).claim_id, reason="checked")
        m.ops.append(d)
        m.count("decisions")
        if make_stale:
            c0 = candidates[0]
            m.claim(1, c0.namespace, c0.subject, c0.predicate, m.value(c0.predicate, 9))
            active += 1
            m.count("stale-decisions")
    shares = ((0.01, m.agreement), (0.01, m.tags), (0.005, m.shadowing))
    for share, make in shares:
        for _ in range(int(n * share / 2)):
            active += make()
    for _ in range(int(n * 0.004)):
        active += m.retracted_with_dependents()
    while active < n:
        m.single()
        active += 1
    m.stats["ops"] = len(m.ops)
    return Workload(m.ops, active, conflicts, m.stats)


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def _read_all(view: View) -> int:
    return sum(1 for _ in view.selected.values()) + sum(1 for _ in view.explanations.values())


def _bench_size(
    n: int, seed: int, repeat: int, progress: Callable[[str], None]
) -> tuple[list[Row], dict[str, object]]:
    progress(f"{n:,} claims: generating ...")
    t0 = time.perf_counter()
    w = make_workload(n, seed)
    generate_s = time.perf_counter() - t0
    progress(f"{n:,} claims: materializing {len(w.ops):,} ops ...")
    state = materialize(w.ops, registry=REGISTRY)
    assert len(state.active_claims()) == w.active == n, (len(state.active_claims()), n)
    assert len(state.conflicts) == w.conflicts, (len(state.conflicts), w.conflicts)
    first = project(state, Lens(), resolver=Conservative())  # warms the state's caches
    stats = {
        **w.stats,
        "active_claims": n,
        "conflicts": w.conflicts,
        "generate_s": generate_s,
        "view_of_Lens()_with_Conservative": {
            "selected": len(first.selected),
            "unresolved": len(first.unresolved),
            "stale": len(first.stale),
            "excluded": dict(first.excluded),
        },
    }
    rows: list[Row] = []
    section = f"project, {n:,} active claims, {w.conflicts:,} conflicts"

    def row(name: str, samples: list[float], target: Target | None = None, note: str = "") -> None:
        rows.append(Row(section, name, n, Unit.SECONDS, samples, n, target, note))

    for name, make in RESOLVERS:
        resolver = make()
        progress(f"{n:,} claims: {name} x {repeat} ...")
        gc.collect()
        samples = timed(lambda r=resolver: project(state, Lens(), resolver=r), repeat)
        row(
            f"Lens(), {name}",
            samples,
            TARGET_100K if (n, name) == (100_000, "Conservative") else None,
        )
    progress(f"{n:,} claims: Conservative variants ...")
    gc.collect()
    samples = timed(lambda: project(state, FULL_LENS, resolver=Conservative()), repeat)
    row(
        "full lens, Conservative",
        samples,
        note="roles, task, session, now: hiding, expiry, shadowing",
    )
    cold = []
    for _ in range(max(1, repeat // 3)):
        fresh = materialize(w.ops, registry=REGISTRY)
        gc.collect()
        start = time.perf_counter()
        project(fresh, Lens(), resolver=Conservative())
        cold.append(time.perf_counter() - start)
        del fresh
    row(
        "Lens(), Conservative, cold",
        cold,
        note="first call on a new State: builds its key index and plan",
    )
    gc.collect()
    samples = timed(lambda: _read_all(project(state, Lens(), resolver=Conservative())), repeat)
    row(
        "Lens(), Conservative, read all", samples, note="then reads every selection and explanation"
    )
    return rows, stats


def bench_projection(
    sizes: tuple[int, ...], seed: int, repeat: int, progress: Callable[[str], None]
) -> tuple[list[Row], dict[str, object]]:
    rows: list[Row] = []
    stats: dict[str, object] = {}
    for n in sizes:
        size_rows, stats[str(n)] = _bench_size(n, seed, repeat, progress)
        rows += size_rows
        gc.collect()
    return rows, stats


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.projection", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEAT} calls per row")
    parser.add_argument("--repeat", type=int, default=None, help=f"calls per row ({REPEAT})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"workload seed ({SEED})")
    parser.add_argument(
        "--sizes",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=SIZES,
        help="active claims per workload, comma-separated (10000,100000)",
    )
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repeat = max(1, args.repeat or (QUICK_REPEAT if args.quick else REPEAT))
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr, flush=True)

    rows, stats = bench_projection(args.sizes, args.seed, repeat, progress)
    title = (
        f"StateFuse projection; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    name = "projection-" + utc_stamp()
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "projection",
        "options": {"sizes": list(args.sizes), "seed": args.seed, "repeat": repeat},
        "workloads": stats,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
