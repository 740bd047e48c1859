"""A live agent loop (issue 13): write one fact, then read the context for the next LLM call.

``python -m benchmarks.agent_loop [--quick] [--sizes N,...] [--steps N] [--seed S] [--json PATH]
[--detector]``

Measured as a new user would write it. Setup, per size N (1k, 10k, 100k, 1M claims; ``--quick``:
1k and 10k): a `Replica.memory` loads N claims in signed changes of 1,000 claims, a peer
replica's disagreements arriving after each (`Replica.receive`), so that about 10% of keys
conflict (two authors, two values) and about 10% of the claims are retracted (exact retractions
in the change after the claim's). The keys spread over 8 namespaces, 8 predicates and N / 64
subjects; values are short strings, dates and numbers; 5% of claims are task-scoped and 10%
restricted to a role (half of them ``planner``). Every value, key and author comes from
``--seed``, so a seed gives the same ops (compare ``sizes.<N>.digest`` in the JSON).

Rows, per size (one `ContextCache` per row, kept across its steps, as an agent keeps it):

- **step: add_claim / update, then context**: `Replica.add_claim` on a new key and
  `Replica.update` of an existing one, alternately, then ``state = rep.state()`` and
  ``context_for(state, Lens(roles=("planner",)), budget=2000, query=..., cache=cache)``. The
  query names the key just written, and every step is checked to have stored that claim and to
  return a context that includes it (a step that assembled nothing cannot pass for a fast one).
  "of which context" is ``state()`` plus ``context_for`` alone.
- **step: add_claim / update, then Replica.context**: the same through the replica's one-call
  path, measured only when `Replica` has a ``context`` method.
- **step: ..., a detector declared** (``--detector``, issue 27): after the first row, the space
  declares the shipped ``budget`` detector reading ``finance/budget`` (a workload predicate: the
  steps that write one run it again over all of them) and ``budget/cost`` / ``budget/limit``
  (three costs over one limit are added: one finding, in every context); the first row again,
  and the ratio of the two medians (target: <= 1.2x). The rows after it run with it declared.
- **step: receive a 100-op change, then context**: instead of writing, the replica takes one
  signed change of 100 claims from the peer (90 on new keys, 10 disagreeing with existing
  ones), written before the clock starts; "of which context" as above.

Medians over ``--steps`` steps (default 50) after 2 warm-up steps. At 1M claims and more, a row
whose first warm-up step takes over a second runs ``FEW_STEPS`` steps instead, and says so.

Then: the ratio of step medians (target: 100k / 1k ≤ 3); memory per op at the largest size
(tracemalloc: every Python allocation the replica holds after loading and one ``state()`` whose
active claims and conflicts were read, divided by its ops); cold CLI times, each a fresh
``python -m statefuse`` process, median of 3: ``context --query`` on a 10k-claim SQLite store and
``show`` on a 60k-claim one (built with the same workload), plus ``--version`` as the floor.

Progress goes to stderr, the table to stdout, the JSON (every sample) to ``--json`` or
``benchmarks/results/agent-loop-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import heapq
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from benchmarks.materialize import Target
from benchmarks.measure import GcTimer, sectioned
from benchmarks.report import ROOT, load_average, machine_info, seconds, utc_stamp, write_document
from statefuse import ClaimAdded, Context, ContextCache, Lens, context_for
from statefuse.core.op import Layer
from statefuse.reading.ranker import Corpus, LexicalRanker
from statefuse.registry import Value
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

Progress = Callable[[str], None]

SIZES = (1_000, 10_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000)
SPACE = "agent-loop"
BATCH = 1_000
BUDGET = 2_000
LENS = Lens(roles=frozenset({"planner"}))
STEPS = 50
WARMUP = 2
#: From this size on, a row whose first warm-up step is slower than SLOW_STEP_S runs FEW_STEPS.
FEW_STEPS_FROM = 1_000_000
SLOW_STEP_S = 1.0
FEW_STEPS = 5
PEER_CHANGE_OPS = 100
PEER_CHANGE_CONTESTED = 10
CLI_SIZES = (10_000, 60_000)
CLI_RUNS = 3
CLI_QUERY = "What is the status of order_12?"
#: 2026-01-01T00:00:00Z: the replicas' clocks count milliseconds from here, one per call.
EPOCH_MS = 1_767_225_600_000
#: The one-call path issue 13 asks `Replica` for, measured when it exists.
CONTEXT_METHOD = "context"
WRITE_ROW = "step: add_claim / update, then context_for"
RESULTS = Path(__file__).resolve().parent / "results"

TARGET_STEP = {
    100_000: Target(5e-3, per_op=False, text="<= 5 ms"),
    1_000_000: Target(20e-3, per_op=False, text="<= 20 ms"),
}
TARGET_RATIO = Target(3.0, per_op=False, text="<= 3x")
RATIO_SIZES = (1_000, 100_000)
TARGET_MEMORY = Target(400.0, per_op=False, text="<= 400 B/op")
MEMORY_TARGET_FROM = 1_000_000
TARGET_COLD_CONTEXT = Target(0.4, per_op=False, text="<= 0.4 s")
TARGET_SHOW = Target(0.5, per_op=False, text="<= 0.5 s")

NAMESPACES = (
    ("orders", "order"),
    ("vendors", "vendor"),
    ("projects", "project"),
    ("customers", "customer"),
    ("shipments", "shipment"),
    ("finance", "account"),
    ("people", "person"),
    ("services", "service"),
)
PREDICATES = ("status", "owner", "deadline", "price", "region", "risk", "supplier", "budget")
_WORDS: dict[str, tuple[str, ...]] = {
    "status": (
        *("open", "shipped", "on hold", "in review", "approved", "cancelled"),
        *("delayed by supplier", "waiting for invoice"),
    ),
    "owner": ("alice", "bob", "carol kim", "dmitri", "emeka", "fatima", "guo wei", "hana"),
    "region": ("emea", "apac", "us-east", "us-west", "latam", "nordics"),
    "risk": (
        *("low", "medium", "high", "high: single supplier", "low after audit"),
        "medium: currency exposure",
    ),
}
_MASK = (1 << 64) - 1


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the workload ---------------------------------------------------------------------------------


def _mix(seed: int, i: int, variant: int) -> int:
    """A 64-bit hash of (seed, key index, variant) (splitmix64's finalizer): every value and
    metadata field is a pure function of these, so a seed names the workload in any order."""
    x = (seed * 0x9E3779B97F4A7C15 + i * 0xD1B54A32D192ED03 + variant * 0xABC98388FB8FAC03) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def key_of(i: int) -> tuple[str, str, str]:
    """(namespace, subject, predicate) of key ``i``: distinct for distinct ``i``."""
    namespace, kind = NAMESPACES[i % 8]
    return namespace, f"{kind}_{i // 64}", PREDICATES[(i // 8) % 8]


def value_of(seed: int, i: int, variant: int) -> Value:
    """A short, realistic value for key ``i`` (another ``variant``: usually another value)."""
    h = _mix(seed, i, variant)
    predicate = PREDICATES[(i // 8) % 8]
    pool = _WORDS.get(predicate)
    if pool is not None:
        return pool[h % len(pool)]
    if predicate == "deadline":
        return f"2026-{1 + h % 12:02d}-{1 + (h >> 8) % 28:02d}"
    if predicate == "price":
        return (5_000 + h % 5_000_000) / 100
    if predicate == "supplier":
        return f"supplier_{h % 300}"
    return 1_000 * (1 + h % 2_000)  # budget


def other_value(seed: int, i: int, variant: int = 1) -> Value:
    """A value for key ``i`` that differs from ``value_of(seed, i, 0)``: the first such from
    ``variant`` on."""
    first = value_of(seed, i, 0)
    while (found := value_of(seed, i, variant)) == first:
        variant += 1
    return found


def meta_of(seed: int, i: int) -> dict[str, Any]:
    """Claim metadata of key ``i``: 5% task-scoped, 5% visible to ``finance`` only, 5% to
    ``planner`` only; authority and confidence vary."""
    h = _mix(seed, i, -1)
    meta: dict[str, Any] = {
        "confidence": 0.6 + (h % 41) / 100,
        "authority": ("", "owner", "finance", "ops")[(h >> 8) % 4],
    }
    if (h >> 16) % 20 == 0:
        meta["scope"] = f"task:t{(h >> 24) % 50}"
    roles = (h >> 32) % 20
    if roles < 2:
        meta["visibility"] = (("finance",), ("planner",))[roles]
    return meta


def _plain(meta: dict[str, Any]) -> bool:
    """Global and visible to the planner lens (so a step's query can find it)."""
    return "scope" not in meta and meta.get("visibility", ("planner",)) == ("planner",)


@dataclass(frozen=True, slots=True)
class Plan:
    """Which keys a size uses for what. Key ``i < keys`` holds one claim of the replica's;
    ``i % 10 == 0`` (the first ``conflicting`` of them) also the peer's disagreement, and
    ``retracted_key(i)`` ones are retracted. Update steps take ``update_keys`` (loaded, global,
    visible to the planner, neither conflicting nor retracted), the peer's receive steps
    disagree at ``contested_keys`` (the rest of those, in turn); add steps and the peer's new
    claims write keys from ``new_key_base`` and ``peer_key_base`` on, which no load touched."""

    n: int
    seed: int
    batch: int
    keys: int
    conflicting: int
    update_keys: tuple[int, ...]
    contested_keys: tuple[int, ...]
    new_key_base: int
    peer_key_base: int

    @classmethod
    def make(cls, n: int, *, seed: int, batch: int, steps: int) -> Plan:
        """A plan for ``n`` claims with update keys for ``steps`` steps. Raises ValueError
        when ``n`` is too small for that."""
        conflicting = n // 11
        keys = n - conflicting
        plain = [
            i
            for i in range(keys)
            if i % 10 != 0 and not retracted_key(i) and _plain(meta_of(seed, i))
        ]
        random.Random(seed).shuffle(plain)
        if len(plain) < steps + PEER_CHANGE_CONTESTED:
            raise ValueError(f"{n:,} claims leave too few keys for {steps} steps")
        base = -(-keys // 64) * 64  # the first unused subject, so new keys never meet old ones
        return cls(
            n=n,
            seed=seed,
            batch=batch,
            keys=keys,
            conflicting=conflicting,
            update_keys=tuple(plain[:steps]),
            contested_keys=tuple(plain[steps:]),
            new_key_base=base,
            peer_key_base=base + 64 * (steps + 64),
        )

    def is_conflicting(self, i: int) -> bool:
        return i % 10 == 0 and i // 10 < self.conflicting

    def batches(self) -> Iterator[range]:
        for start in range(0, self.keys, self.batch):
            yield range(start, min(start + self.batch, self.keys))


def retracted_key(i: int) -> bool:
    """About 11% of the replica's keys, so 10% of all claims (the peer's are never retracted)."""
    return i % 10 == 5 or i % 100 == 7


def _key(name: bytes, seed: int) -> SigningKey:
    return SigningKey.from_seed(hashlib.sha256(b"agent-loop/%d/" % seed + name).digest())


class _Clock:
    """Milliseconds from EPOCH_MS, one more per call: reproducible ops, increasing time."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = EPOCH_MS

    def __call__(self) -> int:
        self.now += 1
        return self.now


@dataclass(frozen=True, slots=True)
class PeerStep:
    """One 100-op change of the peer's, and a claim in it that the step's query names."""

    data: bytes
    named: ClaimAdded


@dataclass(frozen=True, slots=True)
class PeerFeed:
    """The peer's signed changes: one per load batch (None when the batch has no conflicting
    key), then one per receive step."""

    load: tuple[bytes | None, ...]
    steps: tuple[PeerStep, ...]


def _new_change(peer: Replica, before: int) -> bytes:
    (data,) = peer.change_bytes(peer.log.accepted_since(before))
    return data


def peer_feed(plan: Plan, steps: int) -> PeerFeed:
    """Everything the peer sends, written before the replica loads (the peer is then dropped,
    so none of it is in the memory row)."""
    seed = plan.seed
    peer = Replica.memory(space=SPACE, key=_key(b"peer", seed), clock=_Clock())
    load: list[bytes | None] = []
    for keys in plan.batches():
        before = len(peer)
        with peer.batch():
            for i in keys:
                if plan.is_conflicting(i):
                    meta = meta_of(seed, i) | {"authority": "ops", "provenance": "peer"}
                    peer.add_claim(*key_of(i), other_value(seed, i), **meta)
        load.append(_new_change(peer, before) if len(peer) > before else None)
    contested = itertools.cycle(plan.contested_keys)
    fresh = PEER_CHANGE_OPS - PEER_CHANGE_CONTESTED
    out = []
    for s in range(steps):
        before = len(peer)
        with peer.batch():
            made = [
                peer.add_claim(*key_of(i), value_of(seed, i, 0), provenance="peer")
                for i in range(plan.peer_key_base + s * fresh, plan.peer_key_base + (s + 1) * fresh)
            ]
            for _ in range(PEER_CHANGE_CONTESTED):
                i = next(contested)
                peer.add_claim(*key_of(i), other_value(seed, i, 1 + s), provenance="peer")
        out.append(PeerStep(_new_change(peer, before), made[0]))
    peer.close()
    return PeerFeed(tuple(load), tuple(out))


@dataclass(slots=True)
class Loaded:
    """What a load wrote, counted."""

    claims: int = 0
    retractions: int = 0
    peer_claims: int = 0
    changes: int = 0
    seconds: float = 0.0

    @property
    def ops(self) -> int:
        return self.claims + self.retractions + self.peer_claims


def load(rep: Replica, plan: Plan, feed: PeerFeed, progress: Progress) -> Loaded:
    """Write the plan's claims into ``rep`` in batches, each followed by the peer's change for
    the same keys; each batch also retracts the chosen claims of the batch before it."""
    seed = plan.seed
    done = Loaded()
    start = time.perf_counter()
    doomed: list[ClaimAdded] = []
    report_every = max(1, len(feed.load) // 10)
    for b, (keys, peer_change) in enumerate(zip(plan.batches(), feed.load, strict=True)):
        with rep.batch():
            for c in doomed:
                rep.retract(c, reason="outdated")
            done.retractions += len(doomed)
            doomed = []
            for i in keys:
                c = rep.add_claim(*key_of(i), value_of(seed, i, 0), **meta_of(seed, i))
                if retracted_key(i):
                    doomed.append(c)
            done.claims += len(keys)
        done.changes += 1
        if peer_change is not None:
            report = rep.receive([peer_change])
            if report.accepted != 1:
                raise RuntimeError(f"the peer's load change was not accepted: {report}")
            done.peer_claims += report.new_ops
            done.changes += 1
        if (b + 1) % report_every == 0 and plan.keys >= 100_000:
            progress(f"  loaded {done.claims + done.peer_claims:,} / {plan.n:,} claims")
    if doomed:
        with rep.batch():
            for c in doomed:
                rep.retract(c, reason="outdated")
        done.retractions += len(doomed)
        done.changes += 1
    done.seconds = time.perf_counter() - start
    return done


# --- the steps ------------------------------------------------------------------------------------


class Unit(Enum):
    """What a row's samples are."""

    SECONDS = "s"
    BYTES_PER_OP = "B/op"
    RATIO = "x"


@dataclass(slots=True)
class Row:
    """One line of the table. Step rows also carry per-step laps: ``context`` (``state()`` +
    ``context_for``, or ``Replica.context``) and ``state`` (``state()`` alone)."""

    section: str
    name: str
    claims: int
    unit: Unit
    samples: list[float]
    target: Target | None = None
    context: list[float] | None = None
    state: list[float] | None = None
    few_steps: bool = False
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.median <= self.target.limit

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "name": self.name,
            "claims": self.claims,
            "unit": self.unit.value,
            "samples": self.samples,
            "median": self.median,
            "min": min(self.samples),
            "context_samples": self.context,
            "context_median": None if self.context is None else statistics.median(self.context),
            "state_samples": self.state,
            "target": None if self.target is None else self.target.text,
            "target_met": self.met,
            "few_steps": self.few_steps,
            "note": self.note,
            **self.extra,
        }


@dataclass(slots=True)
class StepResult:
    """One step: seconds in all, in its context part and in ``state()``, the claim the step
    wrote or received, and the context it read."""

    seconds: float
    context_s: float
    state_s: float
    claim: ClaimAdded
    context: Context


Step = Callable[[int], StepResult]


def _query(claim: ClaimAdded) -> str:
    return f"What is the {claim.predicate} of {claim.subject}?"


def _write(rep: Replica, plan: Plan, k: int) -> ClaimAdded:
    """Step ``k``'s write: even steps add a claim on a new key, odd ones update a loaded key."""
    seed = plan.seed
    if k % 2 == 0:
        i = plan.new_key_base + k
        return rep.add_claim(*key_of(i), value_of(seed, i, 0), provenance="agent step")
    i = plan.update_keys[k]
    return rep.update(*key_of(i), value_of(seed, i, 2 + k), **meta_of(seed, i))


def write_step(rep: Replica, plan: Plan, cache: ContextCache) -> Step:
    """``add_claim`` / ``update``, then ``state()`` and ``context_for``."""

    def step(k: int) -> StepResult:
        t0 = time.perf_counter()
        claim = _write(rep, plan, k)
        t1 = time.perf_counter()
        state = rep.state()
        t2 = time.perf_counter()
        ctx = context_for(state, LENS, budget=BUDGET, query=_query(claim), cache=cache)
        t3 = time.perf_counter()
        return StepResult(t3 - t0, t3 - t1, t2 - t1, claim, ctx)

    return step


def replica_context_step(rep: Replica, plan: Plan) -> Step:
    """``add_claim`` / ``update``, then the replica's one-call ``context`` (when it has one)."""
    one_call: Callable[..., Context] = getattr(rep, CONTEXT_METHOD)

    def step(k: int) -> StepResult:
        t0 = time.perf_counter()
        claim = _write(rep, plan, k)
        t1 = time.perf_counter()
        ctx = one_call(_query(claim), lens=LENS, budget=BUDGET)
        t2 = time.perf_counter()
        return StepResult(t2 - t0, t2 - t1, 0.0, claim, ctx)

    return step


def receive_step(rep: Replica, feed: PeerFeed, cache: ContextCache) -> Step:
    """``receive`` one 100-op change of the peer's, then ``state()`` and ``context_for``."""

    def step(k: int) -> StepResult:
        sent = feed.steps[k]
        t0 = time.perf_counter()
        report = rep.receive([sent.data])
        t1 = time.perf_counter()
        state = rep.state()
        t2 = time.perf_counter()
        ctx = context_for(state, LENS, budget=BUDGET, query=_query(sent.named), cache=cache)
        t3 = time.perf_counter()
        if report.accepted != 1 or report.new_ops != PEER_CHANGE_OPS:
            raise RuntimeError(f"step {k}: the peer's change was not taken in whole: {report}")
        return StepResult(t3 - t0, t3 - t1, t2 - t1, sent.named, ctx)

    return step


def check(rep: Replica, result: StepResult) -> None:
    """The step's claim is in the replica's state and in the context it read.
    Raises RuntimeError otherwise."""
    cid = result.claim.claim_id
    if cid not in rep.state().claims:
        raise RuntimeError(f"claim {cid.hex()[:12]} is not in the replica's state")
    if cid not in result.context.included or result.context.token_count > BUDGET:
        raise RuntimeError(
            f"the context for {result.context.query!r} does not include the claim just written"
            f" ({len(result.context.included)} claims, {result.context.token_count} tokens)"
        )


@dataclass(frozen=True, slots=True)
class Lap:
    """The times of one checked step (its context is not kept: a context is large), and the
    seconds the cyclic garbage collector ran inside it."""

    seconds: float
    context_s: float
    state_s: float
    gc_s: float


@dataclass(frozen=True, slots=True)
class Steps:
    """The timed steps of one row (warm-up steps left out); ``few``: FEW_STEPS of them."""

    laps: list[Lap]
    few: bool


def run_steps(rep: Replica, step: Step, *, n: int, steps: int, first: int) -> Steps:
    """``WARMUP`` steps, then ``steps`` timed ones (FEW_STEPS from FEW_STEPS_FROM claims when
    the first warm-up step took over SLOW_STEP_S), numbered from ``first``; every step is
    checked. Returns the timed ones."""
    gc.collect()
    warm = step(first)
    check(rep, warm)
    few = n >= FEW_STEPS_FROM and warm.seconds > SLOW_STEP_S and steps > FEW_STEPS
    count, warmup = (FEW_STEPS, 1) if few else (steps, WARMUP)
    for k in range(first + 1, first + warmup):
        check(rep, step(k))
    laps = []
    for k in range(first + warmup, first + warmup + count):
        with GcTimer() as in_gc:
            r = step(k)
        check(rep, r)
        laps.append(Lap(r.seconds, r.context_s, r.state_s, in_gc.seconds))
    return Steps(laps, few)


def _step_row(
    section: str, name: str, n: int, done: Steps, target: Target | None, *, with_state: bool
) -> Row:
    results = done.laps
    context = [r.context_s for r in results]
    state = [r.state_s for r in results] if with_state else None
    write = statistics.median(r.seconds - r.context_s for r in results)
    parts = [f"write {seconds(write)}"]
    if state is not None:
        parts.append(f"state() {seconds(statistics.median(state))}")
        parts.append(
            f"context_for {seconds(statistics.median(r.context_s - r.state_s for r in results))}"
        )
    else:
        parts.append(f"context {seconds(statistics.median(context))}")
    parts.append(f"in the garbage collector {seconds(statistics.median(r.gc_s for r in results))}")
    note = "medians: " + ", ".join(parts)
    if done.few:
        note += (
            f"; only {len(results)} steps: a step takes over {SLOW_STEP_S:.0f} s at this size"
            " (the issue asks for >= 50)"
        )
    return Row(
        section,
        name,
        n,
        Unit.SECONDS,
        [r.seconds for r in results],
        target,
        context=context,
        state=state,
        few_steps=done.few,
        note=note,
        extra={"gc_samples": [r.gc_s for r in results]},
    )


def bench_size(
    n: int,
    *,
    seed: int,
    steps: int,
    batch: int,
    measure_memory: bool,
    progress: Progress,
    detector: bool = False,
) -> tuple[list[Row], dict[str, object]]:
    """Load ``n`` claims and run every step row; with ``measure_memory``, the memory row too."""
    section = f"{n:,} claims"
    plan = Plan.make(n, seed=seed, batch=batch, steps=(3 if detector else 2) * (WARMUP + steps))
    progress(f"{n:,} claims: the peer's changes ...")
    feed = peer_feed(plan, WARMUP + steps)
    gc.collect()
    if measure_memory:
        tracemalloc.start()
    progress(f"{n:,} claims: loading" + (" (under tracemalloc)" if measure_memory else "") + " ...")
    rep = Replica.memory(space=SPACE, key=_key(b"main", seed), clock=_Clock())
    loaded = load(rep, plan, feed, progress)
    state = rep.state()
    active = len(state.active_claims())
    conflicts = len(state.conflicts)
    ops = len(state.claims) + len(state.retractions)
    memory: list[Row] = []
    if measure_memory:
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        memory.append(
            Row(
                "memory at the largest size",
                "replica after loading, plus one state() read",
                n,
                Unit.BYTES_PER_OP,
                [held / ops],
                TARGET_MEMORY if n >= MEMORY_TARGET_FROM else None,
                note=f"tracemalloc: {_bytes(held)} held for {ops:,} ops, peak {_bytes(peak)};"
                " Python allocations only, no allocator overhead",
                extra={"bytes": held, "peak_bytes": peak, "ops": ops},
            )
        )
    digest = state.digest().hex()
    del state
    stats: dict[str, object] = {
        "claims": loaded.claims + loaded.peer_claims,
        "keys": plan.keys,
        "conflicting_keys": plan.conflicting,
        "retractions": loaded.retractions,
        "changes": loaded.changes,
        "ops": ops,
        "active_claims": active,
        "conflicts": conflicts,
        "load_s": loaded.seconds,
        "digest": digest,
    }
    progress(
        f"{n:,} claims: loaded in {loaded.seconds:.1f} s ({ops:,} ops, {conflicts:,} conflicts,"
        f" {active:,} active)"
    )
    if ops != loaded.ops:
        raise RuntimeError(f"the state holds {ops:,} ops, the load wrote {loaded.ops:,}")
    target = TARGET_STEP.get(n)
    progress(f"{n:,} claims: add_claim / update, then context_for ...")
    done = run_steps(rep, write_step(rep, plan, ContextCache()), n=n, steps=steps, first=0)
    rows = [_step_row(section, WRITE_ROW, n, done, target, with_state=True)]
    if detector:
        rows += detector_rows(rep, plan, n, steps=steps, without=rows[0], progress=progress)
    if hasattr(rep, CONTEXT_METHOD):
        progress(f"{n:,} claims: add_claim / update, then Replica.context ...")
        step = replica_context_step(rep, plan)
        done = run_steps(rep, step, n=n, steps=steps, first=WARMUP + steps)
        name = "step: add_claim / update, then Replica.context"
        rows.append(_step_row(section, name, n, done, target, with_state=False))
    progress(f"{n:,} claims: receive a {PEER_CHANGE_OPS}-op change, then context_for ...")
    held = len(rep.state().claims)
    done = run_steps(rep, receive_step(rep, feed, ContextCache()), n=n, steps=steps, first=0)
    name = f"step: receive a {PEER_CHANGE_OPS}-op change, then context_for"
    row = _step_row(section, name, n, done, None, with_state=True)
    row.note += (
        f"; the state gains {PEER_CHANGE_OPS} claims a step: {held:,} before the row,"
        f" {len(rep.state().claims):,} after it"
    )
    rows.append(row)
    progress(f"{n:,} claims: the ranking floor ...")
    rows.append(rank_floor(rep, plan, n, steps))
    if measure_memory:
        progress(f"{n:,} claims: the memory floor ...")
        memory.append(ops_floor(rep, n))
    rep.close()
    del rep
    gc.collect()
    return rows + memory, stats


#: The registry ``--detector`` declares: the shipped budget detector, reading the workload's
#: ``finance/budget`` (so the steps that write one run it again over every such claim) and the
#: ``budget/cost`` and ``budget/limit`` claims the row adds (three costs over one limit: one
#: finding, in every context).
DETECTOR_REGISTRY = """\
[[detectors]]
detector = "budget@1"
reads = ["finance/budget", "budget/cost", "budget/limit"]
"""
TARGET_DETECTOR_RATIO = Target(1.2, per_op=False, text="<= 1.2x")


def detector_rows(
    rep: Replica, plan: Plan, n: int, *, steps: int, without: Row, progress: Progress
) -> list[Row]:
    """The write step again with a detector declared (issue 27), and its ratio to the step
    without one (``without``, measured just before on the same replica)."""
    from statefuse.registry import Registry

    progress(f"{n:,} claims: declaring a detector ...")
    rep.declare_registry(Registry.from_toml(DETECTOR_REGISTRY))
    rep.add_claim("budget", "q3", "limit", 100_000)
    for i in range(3):
        rep.add_claim("budget", f"buy{i}", "cost", {"budget": "q3", "amount": 40_000})
    if len(rep.state().findings) != 1:
        raise RuntimeError("the declared detector found no over-budget finding")
    progress(f"{n:,} claims: add_claim / update, then context_for, with a detector ...")
    first = 2 * (WARMUP + steps)
    done = run_steps(rep, write_step(rep, plan, ContextCache()), n=n, steps=steps, first=first)
    section = f"{n:,} claims"
    row = _step_row(section, WRITE_ROW + ", a detector declared", n, done, None, with_state=True)
    ratio = row.median / without.median
    return [
        row,
        Row(
            section,
            "step with a detector / step without",
            n,
            Unit.RATIO,
            [ratio],
            TARGET_DETECTOR_RATIO,
            note=f"{seconds(row.median)} / {seconds(without.median)} (medians)",
        ),
    ]


RANK_TOP = 200
FLOOR_SAMPLE = 10_000


def rank_floor(rep: Replica, plan: Plan, n: int, steps: int) -> Row:
    """The floor under a step's context: BM25 over the postings of the query's terms, and the
    best ``RANK_TOP`` picked, on a corpus that changed by one claim since the call before:
    what the ranker does each step, alone (`LexicalRanker` with a `Corpus` naming its
    parent, as context assembly hands it over). Everything else a step does is above it."""
    facts = {
        c.op_id: c
        for c in rep.state().active_claims()
        if c.layer is Layer.FACT and c.kind == "fact" and not c.constraint
    }
    ids = sorted(facts)
    spare = [facts.pop(ids[i * len(ids) // (steps + 1)]) for i in range(steps + 1)]
    ranker = LexicalRanker()
    serial = 1
    ranker.scores(_query(spare[0]), Corpus(dict(facts), serial=serial))  # postings, untimed
    times = []
    for c in spare[1:]:
        facts[c.op_id] = c
        corpus = Corpus(dict(facts), serial=serial + 1, parent=serial, added=(c,))
        serial += 1
        query = _query(c)
        t0 = time.perf_counter()
        scores = ranker.scores(query, corpus)
        heapq.nlargest(RANK_TOP, scores.values())
        times.append(time.perf_counter() - t0)
        if c.op_id not in scores:
            raise RuntimeError(f"the floor's query {query!r} did not find its claim")
    return Row(
        f"{n:,} claims",
        f"floor: rank {len(facts):,} facts for the query, pick the best {RANK_TOP}",
        n,
        Unit.SECONDS,
        times,
        None,
        note="BM25 over the postings of the query's terms (a predicate and a subject kind each"
        " name an eighth of the claims here), with the corpus moved by one claim per call",
    )


def _deep_size(roots: list[object]) -> int:
    """Bytes of ``roots`` and everything they reach (objects shared among them counted once;
    classes, enum members and other module-level objects are not counted)."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (type, Enum)):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, (str, bytes, int, float, bool)) or o is None:
            continue
        if isinstance(o, (tuple, list, set, frozenset)):
            stack.extend(o)
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        else:
            for cls in type(o).__mro__:
                for slot in cls.__dict__.get("__slots__", ()):
                    if hasattr(o, slot) and slot not in ("__weakref__", "__dict__"):
                        stack.append(getattr(o, slot))
            stack.extend(getattr(o, "__dict__", {}).values())
    return total


def ops_floor(rep: Replica, n: int) -> Row:
    """The floor under memory per op: the decoded ops alone (their objects, ids, strings and
    values), from a sample of ``FLOOR_SAMPLE`` claims and retractions."""
    state = rep.state()
    ops: list[object] = [*state.claims.values(), *state.retractions.values()]
    step = max(1, len(ops) // FLOOR_SAMPLE)
    sample = ops[::step][:FLOOR_SAMPLE]
    per_op = _deep_size(sample) / len(sample)
    return Row(
        "memory at the largest size",
        "floor: the decoded ops alone",
        n,
        Unit.BYTES_PER_OP,
        [per_op],
        None,
        note=f"deep size of a sample of {len(sample):,} ops (shared objects once); a claim"
        " holds about 20 fields, among them three 32-byte ids",
    )


def ratio_rows(rows: list[Row]) -> list[Row]:
    """Step medians of each size over the smallest's; the issue's target for 100k over 1k."""
    steps = {r.claims: r for r in rows if r.name == WRITE_ROW}
    if len(steps) < 2:
        return []
    low = min(steps)
    out = []
    for n in sorted(steps)[1:]:
        target = TARGET_RATIO if (low, n) == RATIO_SIZES else None
        out.append(
            Row(
                "cost follows what changed",
                f"step median at {n:,} / at {low:,}",
                n,
                Unit.RATIO,
                [steps[n].median / steps[low].median],
                target,
            )
        )
    return out


# --- cold CLI -------------------------------------------------------------------------------------


def build_store(path: Path, n: int, *, seed: int, batch: int, progress: Progress) -> Loaded:
    """A SQLite store of ``n`` claims with the benchmark's workload (closed: snapshot saved)."""
    plan = Plan.make(n, seed=seed, batch=batch, steps=0)
    feed = peer_feed(plan, 0)
    with Replica.open(
        path, create=True, space=SPACE, key=_key(b"main", seed), clock=_Clock()
    ) as rep:
        return load(rep, plan, feed, progress)


def _cold(args: list[str], runs: int) -> tuple[list[float], int]:
    """Wall seconds of ``runs`` fresh ``python -m statefuse ARGS`` processes, and the bytes the
    last one printed. Raises RuntimeError when one fails."""
    times, printed = [], 0
    # As an installed package runs: Python may keep compiled bytecode (pip writes it at
    # install time; here one untimed run writes it), whatever this shell says.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, "-m", "statefuse", *args]
    subprocess.run(command, cwd=ROOT, capture_output=True, check=False, env=env)
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, check=False, env=env)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0 or not done.stdout:
            err = done.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"statefuse {' '.join(args)} failed ({done.returncode}): {err}")
        printed = len(done.stdout)
    return times, printed


def bench_cli(
    home: Path, *, seed: int, sizes: tuple[int, int], runs: int, batch: int, progress: Progress
) -> list[Row]:
    """Cold ``context`` on a store of ``sizes[0]`` claims and ``show`` on one of ``sizes[1]``."""
    section = f"cold CLI: a new process each run, median of {runs}"
    context_n, show_n = sizes
    stores = {}
    for n in sorted(set(sizes)):
        progress(f"cold CLI: building a {n:,}-claim SQLite store ...")
        stores[n] = home / f"cli-{n}.db"
        build_store(stores[n], n, seed=seed, batch=batch, progress=progress)
    rows = []
    for name, n, args, target in (
        ("statefuse --version (interpreter + import)", 0, ["--version"], None),
        (
            "statefuse context --query Q",
            context_n,
            ["--store", str(stores[context_n]), "context", "--query", CLI_QUERY],
            TARGET_COLD_CONTEXT,
        ),
        ("statefuse show", show_n, ["--store", str(stores[show_n]), "show"], TARGET_SHOW),
        (
            "floor: statefuse show, a prefix no claim has",
            show_n,
            ["--store", str(stores[show_n]), "show", "nothing-here"],
            None,
        ),
    ):
        progress(f"cold CLI: {name} ...")
        times, printed = _cold(args, runs)
        rows.append(
            Row(
                section,
                name,
                n,
                Unit.SECONDS,
                times,
                target,
                note=(f"Q = {CLI_QUERY!r}; " if "context" in args else "")
                + (f"{printed:,} bytes printed" if n else ""),
                extra={"stdout_bytes": printed},
            )
        )
    return rows


# --- the report -----------------------------------------------------------------------------------


def _bytes(b: float) -> str:
    return f"{b / 1e6:,.1f} MB" if b >= 1e6 else f"{b / 1e3:,.0f} kB"


def _value(row: Row, v: float) -> str:
    if row.unit is Unit.SECONDS:
        return seconds(v)
    if row.unit is Unit.BYTES_PER_OP:
        return f"{v:,.0f} B/op"
    return f"{v:.1f}x"


_NAME = 52
_HEADER = (
    f"{'measurement':<{_NAME}} {'claims':>9} {'steps':>5} {'median':>10} {'min':>10}"
    f" {'of which context':>16}  {'target':<12} verdict"
)


def format_table(rows: list[Row], title: str) -> str:
    """The result table: a title, then one block of rows per section, notes under their row."""

    def line(row: Row) -> str:
        steps = str(len(row.samples)) if row.unit is Unit.SECONDS else ""
        low = _value(row, min(row.samples)) if len(row.samples) > 1 else ""
        ctx = seconds(statistics.median(row.context)) if row.context else ""
        met = row.met
        verdict = "" if met is None else ("ok" if met else "MISS")
        if row.few_steps and verdict:
            verdict += f" ({len(row.samples)} steps only)"
        target = row.target.text if row.target else ""
        claims = f"{row.claims:,}" if row.claims else ""
        return (
            f"{'  ' + row.name:<{_NAME}} {claims:>9} {steps:>5} {_value(row, row.median):>10}"
            f" {low:>10} {ctx:>16}  {target:<12} {verdict}"
        )

    return sectioned(title, _HEADER, rows, line)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x.strip().replace("_", "")) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated claim counts") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes are at least 100 claims")
    return sizes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.agent_loop", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="1k and 10k claims only")
    parser.add_argument("--sizes", type=_sizes, default=None, help="comma-separated claim counts")
    parser.add_argument("--steps", type=int, default=STEPS, help="timed steps per row")
    parser.add_argument("--seed", type=int, default=20261122, help="workload seed")
    parser.add_argument("--batch", type=int, default=BATCH, help="claims per loaded change")
    parser.add_argument(
        "--cli-sizes",
        type=_sizes,
        default=CLI_SIZES,
        help="claims in the cold `context` and `show` stores (default 10000,60000)",
    )
    parser.add_argument("--cli-runs", type=int, default=CLI_RUNS, help="processes per CLI row")
    parser.add_argument("--no-cli", action="store_true", help="skip the cold CLI rows")
    parser.add_argument(
        "--detector",
        action="store_true",
        help="also run the write step with the budget detector declared, and the ratio",
    )
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.cli_runs < 1:
        parser.error("--steps, --batch and --cli-runs must be at least 1")
    if len(args.cli_sizes) != 2:
        parser.error("--cli-sizes takes two sizes: the `context` store and the `show` store")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_info()
    start = time.perf_counter()

    def progress(message: str) -> None:
        _log(f"[{time.perf_counter() - start:7.1f}s] {message}")

    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    sizes = tuple(sorted(set(sizes)))
    ContextCache()  # loads the BPE tables once, outside every timer
    rows: list[Row] = []
    stats: dict[str, object] = {}
    for n in sizes:
        got, stats[str(n)] = bench_size(
            n,
            seed=args.seed,
            steps=args.steps,
            batch=args.batch,
            measure_memory=n == sizes[-1],
            progress=progress,
            detector=args.detector,
        )
        rows += got
    memory = [r for r in rows if r.unit is Unit.BYTES_PER_OP]
    rows = [r for r in rows if r.unit is not Unit.BYTES_PER_OP] + ratio_rows(rows) + memory
    if not args.no_cli:
        with tempfile.TemporaryDirectory(prefix="statefuse-agent-loop-") as tmp:
            rows += bench_cli(
                Path(tmp),
                seed=args.seed,
                sizes=args.cli_sizes,
                runs=args.cli_runs,
                batch=args.batch,
                progress=progress,
            )
    title = (
        f"StateFuse agent loop: one write, then a {BUDGET:,}-token context for"
        f" Lens(roles=planner); Python {machine['python']}; {machine['cpu_count']} CPUs"
        f" ({machine['cpu_model']}); seed {args.seed}"
    )
    print(format_table(rows, title))
    name = "agent-loop-" + utc_stamp()
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "agent_loop",
        "options": {
            "sizes": list(sizes),
            "steps": args.steps,
            "warmup": WARMUP,
            "seed": args.seed,
            "batch": args.batch,
            "budget": BUDGET,
            "lens_roles": sorted(LENS.roles),
            "cli_sizes": None if args.no_cli else list(args.cli_sizes),
            "cli_runs": None if args.no_cli else args.cli_runs,
        },
        "replica_context_method": hasattr(Replica, CONTEXT_METHOD),
        "sizes": stats,
        "total_s": time.perf_counter() - start,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
