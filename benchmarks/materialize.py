"""The measurements: full and incremental materialization, a hot key, memory, and op codecs.

Invariant: only the operation a row names is inside the timer. Workloads, op-sets and encoded
bytes are built before the clock starts; results are kept alive until it stops (so freeing a
large State is not billed to the next step), and a full garbage collection runs before each
repeat of a large step so one repeat does not pay for the previous one's garbage. The cyclic
garbage collector stays enabled while timing, as it is for users.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from types import BuiltinFunctionType, FunctionType, ModuleType

from benchmarks.measure import GcTimer
from benchmarks.workload import HOT_KEY_CLAIMS, WorkloadGenerator
from statefuse import (
    ClaimAdded,
    Materializer,
    Op,
    OpSet,
    State,
    Writer,
    decode_op,
    materialize,
)
from statefuse.registry import Registry

Progress = Callable[[str], None]


class Unit(Enum):
    """What a row's samples are: seconds per call, or bytes held."""

    SECONDS = "s"
    BYTES = "B"


@dataclass(frozen=True, slots=True)
class Target:
    """The issue's target for a row: ``limit`` on the median, per op or for the whole call."""

    limit: float
    per_op: bool
    text: str


TARGET_FULL = Target(2.5e-6, per_op=True, text="<= 2.5 us/op")
TARGET_APPLY = Target(50e-6, per_op=True, text="<= 50 us/op")
TARGET_HOT_KEY = Target(20e-3, per_op=False, text="<= 20 ms")
TARGET_MEMORY = Target(300.0, per_op=True, text="<= 300 B/op")


@dataclass(slots=True)
class Row:
    """One line of the result table.

    ``samples`` are seconds per call (``Unit.SECONDS``) or bytes held (``Unit.BYTES``, one
    sample). ``per`` is how many ops one call handles or one sample holds, so the per-op figure
    is ``median / per``.
    """

    section: str
    name: str
    ops: int
    unit: Unit
    samples: list[float]
    per: int = 1
    target: Target | None = None
    note: str = ""
    gc_samples: list[float] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def per_op(self) -> float:
        return self.median / self.per

    @property
    def met(self) -> bool | None:
        """Whether the median meets the target (None when the row has no target)."""
        if self.target is None:
            return None
        value = self.per_op if self.target.per_op else self.median
        return value <= self.target.limit

    def to_json(self) -> dict[str, object]:
        return {
            "section": self.section,
            "name": self.name,
            "ops": self.ops,
            "unit": self.unit.value,
            "samples": self.samples,
            "median": self.median,
            "min": self.min,
            "per": self.per,
            "per_op": self.per_op,
            "target": None if self.target is None else self.target.text,
            "target_met": self.met,
            "note": self.note,
            "gc_samples": self.gc_samples,
        }


def _timing(
    section: str,
    name: str,
    ops: int,
    samples: list[float],
    per: int = 1,
    target: Target | None = None,
    note: str = "",
) -> Row:
    return Row(section, name, ops, Unit.SECONDS, samples, per, target, note)


@dataclass(slots=True)
class _Clock:
    """Collects (label -> seconds) laps of one timed call."""

    laps: dict[str, list[float]] = field(default_factory=dict)

    def add(self, label: str, seconds: float) -> None:
        self.laps.setdefault(label, []).append(seconds)


def _fmt_n(n: int) -> str:
    return f"{n:,}"


# --- 1. full materialization ---------------------------------------------------------------------


def bench_full(
    opset: OpSet, registry: Registry, *, repeat: int, progress: Progress
) -> tuple[list[Row], State]:
    """``materialize`` alone, and with the lazy parts a reader uses (active claims, conflicts).

    Both figures come from the same runs: one timer, read after ``materialize`` returns and again
    after ``active_claims()`` and ``conflicts``. Returns the rows and the last State.
    """
    n = len(opset)
    clock = _Clock()
    state: State | None = None
    for i in range(repeat):
        progress(f"materialize {_fmt_n(n)} ops: run {i + 1}/{repeat}")
        state = None
        gc.collect()
        with GcTimer() as in_gc:
            t0 = time.perf_counter()
            state = materialize(opset, registry=registry)
            t1 = time.perf_counter()
            gc1 = in_gc.seconds
            active = state.active_claims()
            conflicts = state.conflicts
            t2 = time.perf_counter()
        del active, conflicts
        clock.add("materialize", t1 - t0)
        clock.add("read", t2 - t0)
        clock.add("gc materialize", gc1)
        clock.add("gc read", in_gc.seconds)
    assert state is not None
    rows = []
    for name, lap in (
        ("materialize", "materialize"),
        ("materialize + read active+conflicts", "read"),
    ):
        gc_laps = clock.laps[f"gc {lap}"]
        rows.append(
            Row(
                "materialize",
                name,
                n,
                Unit.SECONDS,
                clock.laps[lap],
                n,
                TARGET_FULL,
                note=f"garbage collector: {statistics.median(gc_laps):.3f} s of it (median)",
                gc_samples=gc_laps,
            )
        )
    return rows, state


# --- 2. incremental ------------------------------------------------------------------------------

#: Single applies timed per op kind for "apply only".
APPLY_SAMPLES = 1_000
#: Snapshot rounds per op kind (each copies the whole index once, so they are few).
SNAPSHOT_SAMPLES = 30
#: Rounds of apply + state() + reading active claims and conflicts (each is a full read).
READ_SAMPLES = 3

_KINDS = ("claim", "retraction by id", "retraction by ref")


def _next_op(gen: WorkloadGenerator, kind: str, i: int) -> Op:
    if kind == "claim":
        # Alternate new keys and existing keys (the latter can start or widen a conflict).
        return gen.next_claim() if i % 2 else gen.next_claim_on_existing_key()
    return gen.next_retraction(by_ref=kind == "retraction by ref")


def bench_incremental(
    opset: OpSet, gen: WorkloadGenerator, registry: Registry, *, progress: Progress
) -> list[Row]:
    """Single applies on a `Materializer` built on ``opset``, for each op kind.

    - "apply only": ``apply(op)`` with no snapshot taken in between (no copy-on-write copy);
    - "apply + state()": ``apply(op)`` then ``state()``, on a Materializer that holds no
      snapshot and has settled after its last copy; excludes the copy the *next* apply makes;
    - "apply after a snapshot": ``apply(op)`` right after ``state()``: pays the O(n) index copy;
    - "apply after a snapshot + state() + read": the above plus ``active_claims()`` and
      ``conflicts`` of the new State, which a fresh State computes from scratch.

    The first ref retraction builds the claim_ref index (one O(n) pass); it is reported on its
    own row and kept out of the medians.
    """
    n = len(opset)
    progress(f"incremental: generating ops and building a Materializer on {_fmt_n(n)} ops")
    plan = {
        kind: [_next_op(gen, kind, i) for i in range(APPLY_SAMPLES + 3 * SNAPSHOT_SAMPLES + 1)]
        for kind in _KINDS
    }
    reads = [gen.next_claim_on_existing_key() for _ in range(READ_SAMPLES)]
    m = Materializer(opset, registry=registry)
    rows: list[Row] = []
    section = f"incremental (Materializer on {_fmt_n(n)} ops)"

    gc.collect()
    warm: dict[str, float] = {}
    for kind in _KINDS:
        op = plan[kind].pop()
        t0 = time.perf_counter()
        m.apply(op)
        warm[kind] = time.perf_counter() - t0
    rows.append(
        _timing(
            section,
            "first ref retraction (builds claim_ref index)",
            n,
            [warm["retraction by ref"]],
            note="one-off O(n); not in the medians below",
        )
    )

    for kind in _KINDS:
        progress(f"incremental: {APPLY_SAMPLES} single applies ({kind})")
        ops = plan[kind]
        samples = []
        gc.collect()
        for op in ops[:APPLY_SAMPLES]:
            t0 = time.perf_counter()
            m.apply(op)
            samples.append(time.perf_counter() - t0)
        rows.append(_timing(section, f"apply only: {kind}", n, samples, target=TARGET_APPLY))

    for kind in _KINDS:
        progress(f"incremental: {SNAPSHOT_SAMPLES} snapshot rounds ({kind})")
        rest = plan[kind][APPLY_SAMPLES:]
        clock = _Clock()
        gc.collect()
        for i in range(SNAPSHOT_SAMPLES):
            after_snapshot, settle, steady = rest[3 * i : 3 * i + 3]
            # Both snapshots live until the clock stops: freeing an old index is O(n) too, and
            # is paid by whoever drops the last reference, not by apply or state().
            before = m.state()
            t0 = time.perf_counter()
            m.apply(after_snapshot)
            t1 = time.perf_counter()
            # The copy streams the whole index through the CPU caches, so whatever runs next is
            # slow once; one untimed apply absorbs that (README: left out of both rows).
            m.apply(settle)
            t2 = time.perf_counter()
            m.apply(steady)
            after = m.state()
            t3 = time.perf_counter()
            del before, after
            clock.add("after", t1 - t0)
            clock.add("state", t3 - t2)
        rows += [
            _timing(
                section, f"apply + state(): {kind}", n, clock.laps["state"], target=TARGET_APPLY
            ),
            _timing(
                section,
                f"apply after a snapshot: {kind}",
                n,
                clock.laps["after"],
                target=TARGET_APPLY,
                note="copies the index (copy-on-write)",
            ),
        ]

    progress(f"incremental: {READ_SAMPLES} rounds of apply + state() + read")
    samples = []
    for op in reads:
        gc.collect()
        t0 = time.perf_counter()
        m.apply(op)
        state = m.state()
        active = state.active_claims()
        conflicts = state.conflicts
        samples.append(time.perf_counter() - t0)
        del state, active, conflicts
    rows.append(
        _timing(
            section,
            "apply after a snapshot + state() + read: claim",
            n,
            samples,
            note="read = active_claims() + conflicts; a new State recomputes them from scratch",
        )
    )
    return rows


# --- 3. hot key ----------------------------------------------------------------------------------


def bench_hot_key(seed: int, registry: Registry, *, repeat: int, progress: Progress) -> list[Row]:
    """One (key, scope) with HOT_KEY_CLAIMS claims, all different values: one conflict.

    Full: ``materialize`` + ``conflicts``. Incremental (informational): the claims applied one by
    one to an empty Materializer, then ``conflicts`` of its State.
    """
    progress(f"hot key: {HOT_KEY_CLAIMS} claims on one key")
    ops = WorkloadGenerator(seed, registry, label="hot-key").hot_key_ops()
    opset = OpSet(ops)
    n = len(opset)
    section = "hot key"

    full: list[float] = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        state = materialize(opset, registry=registry)
        conflicts = state.conflicts
        full.append(time.perf_counter() - t0)
        if len(conflicts) != 1 or len(conflicts[0].groups) != HOT_KEY_CLAIMS:
            raise AssertionError(f"hot key workload: expected one conflict, got {conflicts!r:.200}")
        del state, conflicts

    incremental: list[float] = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        m = Materializer(registry=registry)
        for op in ops:
            m.apply(op)
        conflicts = m.state().conflicts
        incremental.append(time.perf_counter() - t0)
        del m, conflicts

    return [
        _timing(section, "materialize + read conflicts", n, full, n, TARGET_HOT_KEY),
        _timing(section, "apply one by one + read conflicts", n, incremental, n),
    ]


# --- 4. memory -----------------------------------------------------------------------------------

#: Objects shared by everything (types, functions, modules, the registry, enum members): never
#: counted, and never walked into.
_SHARED = (type, ModuleType, FunctionType, BuiltinFunctionType, Registry, Enum)


def deep_size(root: object, seen: set[int]) -> int:
    """Bytes of every object reachable from ``root`` and not in ``seen`` (which it extends).

    Counts each object once, by ``sys.getsizeof``, following ``gc.get_referents``; strings and
    small ints shared between ops are counted once, as they are stored once.
    """
    total = 0
    stack = [root]
    getsizeof = sys.getsizeof
    referents = gc.get_referents
    while stack:
        obj = stack.pop()
        key = id(obj)
        if key in seen or isinstance(obj, _SHARED):
            continue
        seen.add(key)
        total += getsizeof(obj)
        stack.extend(referents(obj))
    return total


def bench_memory(opset: OpSet, state: State, *, progress: Progress) -> list[Row]:
    """Bytes per op of the OpSet (the ops) and of the State on top of it (index + read caches).

    ``state`` must already have computed what a reader uses (active claims, conflicts). The
    OpSet is measured as it is after the materializations (with any cache it keeps).
    """
    n = len(opset)
    progress(f"memory: walking OpSet and State of {_fmt_n(n)} ops")
    seen: set[int] = set()
    ops_bytes = deep_size(opset, seen)
    state_bytes = deep_size(state, seen)
    section = "memory"
    return [
        Row(section, "ops only (OpSet)", n, Unit.BYTES, [ops_bytes], n),
        Row(section, "materialized state on top", n, Unit.BYTES, [state_bytes], n),
        Row(section, "OpSet + State", n, Unit.BYTES, [ops_bytes + state_bytes], n, TARGET_MEMORY),
    ]


# --- informational: op codecs and op-set building ------------------------------------------------

#: Ops per informational timing run.
CODEC_OPS = 10_000


def bench_codecs(seed: int, registry: Registry, *, repeat: int, progress: Progress) -> list[Row]:
    """Writer.claim, OpSet(ops) (which re-hashes every op) and decode_op, per op."""
    progress(f"codecs: Writer.claim, OpSet build and decode_op on {_fmt_n(CODEC_OPS)} ops")
    ops = WorkloadGenerator(seed, registry, label="codecs").ops(CODEC_OPS)
    claims = [op for op in ops if type(op) is ClaimAdded]
    args = [(c.namespace, c.subject, c.predicate, c.value, c.scope) for c in claims]
    encoded = [op.encode() for op in ops]
    section = "informational"

    def write_claims() -> None:
        w = Writer("writer-bench", registry=registry, clock=lambda: 1_767_225_600_000)
        for ns, subject, predicate, value, scope in args:
            w.claim(ns, subject, predicate, value, scope=scope)

    def decode_all() -> None:
        for data in encoded:
            decode_op(data)

    def build_opset() -> None:
        opsets.append(OpSet(ops))

    opsets: list[OpSet] = []
    rows = []
    for name, fn, count in (
        ("Writer.claim", write_claims, len(args)),
        ("OpSet(ops): verify ids + insert", build_opset, len(ops)),
        ("decode_op", decode_all, len(encoded)),
    ):
        samples = []
        for _ in range(repeat):
            opsets.clear()
            gc.collect()
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        rows.append(_timing(section, name, count, samples, count))
    return rows
