"""Reliability: what refusing and parking changes costs, and opening and repairing a damaged store.

``python -m benchmarks.reliability [--quick] [--repeat N] [--seed S] [--json PATH]``

Rows:

- ``quarantine insert, N refused``: a new replica (in memory, and on SQLite, the store a served
  replica uses) receives N distinct garbage changes (random bytes, 2 KB each) in pushes of 100,
  as an HTTP peer delivers them; every one must be quarantined. The total of the pushes, per
  refused change, the slowest single push (a served replica holds its lock for one push: it must
  stay bounded as the quarantine grows) and the ratio to the previous size (target: ≤ 5× per 4×
  input). The note gives the slowest push less the full collections of the cyclic garbage
  collector inside it (`FullCollections`), which grow with the heap. A second set does the
  same with 180 KB of garbage per change at the small sizes, in pushes of 20 (one 4 MB page of
  the HTTP protocol).
- ``pending insert, N parked``: one author signs a chain of N + 1 changes and the replica gets
  all of them but the first, predecessors first, in pushes of 100; every one must be parked.
  Same columns and target.
- ``open sound store, N ops``: `Replica.open` of a store of N ops in 100-op changes, with its
  snapshot and with ``load="verify"`` (no target: the baseline for the rows below).
- ``open damaged store, N ops``: the same store after the bytes of one stored change in the middle
  of the author's chain were altered in place (same length); `Replica.open` (the snapshot no
  longer matches the stored bytes, so every change is verified) and reading ``damage``, which
  must report it; also with ``load="verify"``.
- ``repair, N ops``: `Replica.open` then `Replica.repair` on a fresh copy of the damaged store
  (file and key); afterwards the store must be sound, with the damaged change in quarantine and
  the rest of the chain parked.

Progress goes to stderr, the table to stdout, the JSON (every sample, the options, the machine)
to ``--json`` or ``benchmarks/results/reliability-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.measure import sectioned
from benchmarks.report import load_average, machine_info, utc_stamp
from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync.change import sign_change
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
SPACE = "bench"
DEFAULT_SEED = 20_261_122
#: The issue's bound on the growth of insertion cost when the input grows 4×.
TARGET_RATIO = 5.0
#: Changes per push: what an HTTP peer sends in one request (well under one 4 MB page).
PUSH = 100
#: Garbage changes of the large kind per push: 20 × 180 KB fill one 4 MB page.
BIG_PUSH = 20
SMALL_GARBAGE = 2 * 1024
BIG_GARBAGE = 180 * 1024
#: Ops in each change of the parked chain (a change of about 3 KB on the wire).
CHAIN_OPS = 8
#: Ops per change in the damaged store.
STORE_CHANGE_OPS = 100


_START = time.perf_counter()


def _log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:7.1f} s] {message}", file=sys.stderr, flush=True)


@dataclass
class Row:
    """One table line; ``samples`` are wall seconds of the timed operation, one per run."""

    section: str
    name: str
    samples: list[float]
    changes: int = 0
    slowest_push: list[float] = field(default_factory=list)
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "section": self.section,
            "row": self.name,
            "median_s": self.median,
            "min_s": min(self.samples),
            "samples_s": self.samples,
        }
        if self.changes:
            doc["changes"] = self.changes
            doc["per_change_us"] = self.median / self.changes * 1e6
        if self.slowest_push:
            doc["slowest_push_s"] = statistics.median(self.slowest_push)
            doc["slowest_push_samples_s"] = self.slowest_push
        if self.ratio is not None:
            doc["ratio_to_previous_size"] = self.ratio
        if self.target:
            doc["target"] = self.target
            doc["met"] = self.met
        if self.note:
            doc["note"] = self.note
        doc.update(self.extra)
        return doc


# --- inputs --------------------------------------------------------------------------------------


def garbage(rng: random.Random, n: int, size: int) -> list[bytes]:
    """``n`` distinct blobs of ``size`` random bytes (a leading counter keeps them distinct)."""
    return [i.to_bytes(4, "big") + rng.randbytes(size - 4) for i in range(n)]


def parked_chain(n: int) -> list[bytes]:
    """Wire bytes of changes 2 .. n + 1 of one new author's chain: each waits for the one
    before it, and the first never comes, so every one of them is parked."""
    key = SigningKey.generate()
    writer = Writer(key.author, clock=lambda: 0)
    prev: bytes | None = None
    out = []
    for seq in range(1, n + 2):
        ops = [writer.claim("bench", f"parked{seq}-{i}", "value", i) for i in range(CHAIN_OPS)]
        change = sign_change(
            key,
            space=SPACE,
            seq=seq,
            prev=prev,
            registry=DEFAULT_REGISTRY.fingerprint,
            ops=ops,
        )
        prev = change.change_id
        if seq > 1:
            out.append(change.data)
    return out


# --- refused and parked changes -------------------------------------------------------------------


def _new_replica(kind: str, home: Path, tag: str) -> Replica:
    if kind == "memory":
        return Replica.memory(space=SPACE)
    return Replica.open(home / f"{tag}.db", space=SPACE, create=True)


def _remove_store(home: Path, tag: str) -> None:
    for p in home.glob(f"{tag}.db*"):
        p.unlink()


class FullCollections:
    """A `gc.callbacks` hook adding up the seconds of full (generation 2) collections of the
    cyclic garbage collector, whose cost grows with everything the process holds."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                self._start = time.perf_counter()
            else:
                self.seconds += time.perf_counter() - self._start


def deliver(
    replica: Replica, items: list[bytes], push: int, outcome: str
) -> tuple[list[float], list[float]]:
    """Wall seconds of each push of ``push`` items, and the seconds of full collections inside
    each; every item must end as ``outcome`` (``quarantined`` or ``pending``)."""
    times, collecting = [], []
    full = FullCollections()
    gc.callbacks.append(full)
    try:
        for start in range(0, len(items), push):
            part = items[start : start + push]
            before = full.seconds
            t0 = time.perf_counter()
            report = replica.receive(part)
            times.append(time.perf_counter() - t0)
            collecting.append(full.seconds - before)
            got = getattr(report, outcome)
            assert got == len(part), f"push at {start}: {got} of {len(part)} {outcome}: {report}"
    finally:
        gc.callbacks.remove(full)
    return times, collecting


@dataclass
class Intake:
    """One size of one intake row: per run, the time of every push and of the full collections
    inside it."""

    n: int
    pushes: list[list[float]] = field(default_factory=list)
    collections: list[list[float]] = field(default_factory=list)

    @property
    def totals(self) -> list[float]:
        return [sum(t) for t in self.pushes]

    @property
    def slowest(self) -> list[float]:
        return [max(t) for t in self.pushes]

    @property
    def slowest_without_gc(self) -> list[float]:
        return [
            max(t - g for t, g in zip(ts, gs, strict=True))
            for ts, gs in zip(self.pushes, self.collections, strict=True)
        ]


def bench_intake(
    kind: str,
    make: Callable[[int], list[bytes]],
    sizes: list[int],
    push: int,
    outcome: str,
    repeats: int,
    home: Path,
) -> list[Intake]:
    out = []
    for n in sizes:
        items = make(n)
        result = Intake(n)
        for r in range(repeats):
            tag = f"{outcome}-{kind}-{n}-{r}"
            replica = _new_replica(kind, home, tag)
            try:
                times, collecting = deliver(replica, items, push, outcome)
            finally:
                replica.close()
                _remove_store(home, tag)
            result.pushes.append(times)
            result.collections.append(collecting)
            _log(
                f"  {kind}, {n:,}: {sum(times):.2f} s, slowest push {max(times) * 1e3:.1f} ms,"
                f" full collections {sum(collecting) * 1e3:.0f} ms"
            )
        out.append(result)
        del items
    return out


def intake_rows(section: str, label: str, kind: str, results: list[Intake]) -> list[Row]:
    rows = []
    previous: Intake | None = None
    verb = "refused" if "quarantine" in label else "parked"
    for res in results:
        median = statistics.median(res.totals)
        ratio = growth = None
        if previous is not None:
            ratio = median / statistics.median(previous.totals)
            growth = res.n / previous.n
        # Growth within one run: the last tenth of the pushes against the first tenth.
        runs = res.pushes
        tenth = max(1, len(runs[0]) // 10)
        first = statistics.median(statistics.fmean(t[:tenth]) for t in runs)
        last = statistics.median(statistics.fmean(t[-tenth:]) for t in runs)
        no_gc = statistics.median(res.slowest_without_gc)
        gc_total = statistics.median(sum(g) for g in res.collections)
        row = Row(
            section=section,
            name=f"{label}, {_count(res.n)} {verb} ({kind})",
            samples=res.totals,
            changes=res.n,
            slowest_push=res.slowest,
            ratio=ratio,
            note=f"mean push: first tenth {first * 1e3:.1f} ms, last {last * 1e3:.1f} ms;"
            f" slowest less full GC {no_gc * 1e3:.1f} ms; full GC in all {gc_total * 1e3:.0f} ms",
            extra={
                "store": kind,
                "input_growth": growth,
                "slowest_push_without_full_gc_s": res.slowest_without_gc,
                "push_samples_s": runs,
                "full_gc_per_push_s": res.collections,
            },
        )
        if ratio is not None and growth == 4:
            row.target = f"<= {TARGET_RATIO:g}x"
            row.met = ratio <= TARGET_RATIO
        rows.append(row)
        previous = res
    return rows


def _count(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n:,}"


# --- damaged store -------------------------------------------------------------------------------


def build_store(path: Path, ops: int) -> int:
    """A store of ``ops`` claims in 100-op changes, closed (its snapshot saved); returns how
    many changes it holds."""
    changes = ops // STORE_CHANGE_OPS
    with Replica.open(path, space=SPACE, create=True) as rep:
        for b in range(changes):
            with rep.batch():
                for i in range(STORE_CHANGE_OPS):
                    rep.add_claim("bench", f"subj{b}-{i}", "pred", i)
            if (b + 1) % max(1, changes // 5) == 0:
                _log(f"  store: {(b + 1) * STORE_CHANGE_OPS:,} / {ops:,} ops written")
    return changes


def damage_store(path: Path) -> tuple[int, int]:
    """Alter a few bytes of the stored change in the middle of the chain, keeping its length.
    Returns its position and how many stored changes follow it."""
    db = sqlite3.connect(path)
    try:
        (count,) = db.execute("SELECT count(*) FROM changes").fetchone()
        pos, data = db.execute(
            "SELECT pos, data FROM changes ORDER BY pos LIMIT 1 OFFSET ?", (count // 2,)
        ).fetchone()
        blob = bytearray(data)
        middle = len(blob) // 2
        for i in range(middle, middle + 4):
            blob[i] ^= 0x5A
        assert bytes(blob) != data and len(blob) == len(data)
        with db:
            db.execute("UPDATE changes SET data = ? WHERE pos = ?", (bytes(blob), pos))
        (after,) = db.execute("SELECT count(*) FROM changes WHERE pos > ?", (pos,)).fetchone()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    return pos, after


def copy_store(src: Path, dst: Path) -> None:
    """Copy a closed store and its key file (mode 0600)."""
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
    shutil.copyfile(f"{src}.key", f"{dst}.key")
    os.chmod(f"{dst}.key", 0o600)


def _opened(path: Path, load: str, warned: list[str]) -> tuple[float, Replica]:
    """Wall seconds of `Replica.open` plus reading its ``damage``, and the open replica."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        rep = Replica.open(path, load=load)
        _ = rep.damage
        elapsed = time.perf_counter() - t0
    warned.extend(f"{type(w.message).__name__}: {w.message}" for w in caught)
    return elapsed, rep


def bench_open(
    path: Path, load: str, repeats: int, *, damaged: bool
) -> tuple[list[float], dict[str, Any]]:
    times: list[float] = []
    warned: list[str] = []
    seen: dict[str, Any] = {}
    for _ in range(repeats):
        elapsed, rep = _opened(path, load, warned)
        try:
            if damaged:
                assert rep.damage is not None, "the damaged store opened as sound"
                seen = {"failed": rep.damage.failed, "orphaned": rep.damage.orphaned}
            else:
                assert rep.damage is None, f"the sound store reports damage: {rep.damage}"
        finally:
            rep.close()
        times.append(elapsed)
    return times, {"damage": seen, "warnings": sorted(set(warned))}


def bench_repair(copies: list[Path], expect_parked: int) -> tuple[list[float], list[float]]:
    """Wall seconds of open + repair and of the repair alone, one sample per copy."""
    totals, repairs = [], []
    for path in copies:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            rep = Replica.open(path)
            t1 = time.perf_counter()
            report = rep.repair()
            t2 = time.perf_counter()
        try:
            assert rep.damage is None, f"still damaged after repair: {rep.damage}"
            assert report.quarantined == 1, f"repair quarantined {report.quarantined}, not 1"
            assert report.parked == expect_parked, (
                f"repair parked {report.parked}, not the {expect_parked} after the damage"
            )
        finally:
            rep.close()
        totals.append(t2 - t0)
        repairs.append(t2 - t1)
        _log(f"  repair: open {t1 - t0:.2f} s + repair {t2 - t1:.2f} s")
    return totals, repairs


def damaged_rows(home: Path, ops: int, repeats: int) -> list[Row]:
    path = home / "damaged.db"
    _log(f"damaged store: building {ops:,} ops")
    changes = build_store(path, ops)
    label = f"{_count(ops)} ops"
    rows = []
    _log("open sound store")
    for load in ("snapshot", "verify"):
        t, _ = bench_open(path, load, repeats, damaged=False)
        rows.append(Row("open", f"open sound store, {label} (load={load})", t))
    pos, after = damage_store(path)
    _log(f"damaged stored change #{pos} of {changes:,} ({after:,} follow it)")
    copies = []
    for i in range(3):
        copies.append(home / f"repair-{i}.db")
        copy_store(path, copies[-1])
    for load in ("snapshot", "verify"):
        _log(f"open damaged store (load={load})")
        t, seen = bench_open(path, load, repeats, damaged=True)
        d = seen["damage"]
        note = f"damage: {d['failed']} failed, {d['orphaned']:,} after it"
        if any(w.startswith("SnapshotWarning") for w in seen["warnings"]):
            note += "; the snapshot was ignored (SnapshotWarning), every change verified"
        rows.append(
            Row(
                "open",
                f"open damaged store, {label} (load={load})",
                t,
                note=note,
                extra=seen,
            )
        )
    _log("repair")
    totals, repairs = bench_repair(copies, after)
    rows.append(
        Row(
            "repair",
            f"repair, {label} (open + repair)",
            totals,
            note=f"repair alone: median {statistics.median(repairs):.2f} s; quarantined 1,"
            f" parked {after:,}",
            extra={"repair_only_s": repairs, "damaged_pos": pos, "parked": after},
        )
    )
    return rows


# --- output --------------------------------------------------------------------------------------


def _seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def format_table(rows: list[Row], title: str) -> str:
    header = (
        f"{'measurement':<52} {'total':>9} {'per change':>11} {'slowest push':>13}"
        f" {'ratio':>6}  {'target':<8} verdict"
    )

    def line(row: Row) -> str:
        per = f"{row.median / row.changes * 1e6:.1f} us" if row.changes else ""
        slow = _seconds(statistics.median(row.slowest_push)) if row.slowest_push else ""
        ratio = f"{row.ratio:.2f}x" if row.ratio is not None else ""
        verdict = "" if row.met is None else ("ok" if row.met else "MISS")
        return (
            f"  {row.name:<50} {_seconds(row.median):>9} {per:>11} {slow:>13} {ratio:>6}"
            f"  {row.target:<8} {verdict}"
        )

    return sectioned(title, header, rows, line)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.reliability", description=__doc__)
    p.add_argument("--quick", action="store_true", help="sizes 1k and 4k, a 20k-op store")
    p.add_argument("--repeat", type=int, default=None, help="runs per intake size (default 5)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the garbage bytes")
    p.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = p.parse_args(argv)
    sizes = [1_000, 4_000] if args.quick else [1_000, 4_000, 16_000]
    big_sizes = [250, 1_000]
    store_ops = 20_000 if args.quick else 100_000
    repeats = args.repeat or (1 if args.quick else 5)
    rng = random.Random(args.seed)
    _log(f"reliability benchmark: sizes {sizes}, {store_ops:,}-op store, {repeats} run(s)")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="statefuse-reliability-") as tmp:
        home = Path(tmp)
        for kind in ("memory", "sqlite"):
            _log(f"quarantine insert, 2 KB garbage ({kind})")
            res = bench_intake(
                kind,
                lambda n: garbage(rng, n, SMALL_GARBAGE),
                sizes,
                PUSH,
                "quarantined",
                repeats,
                home,
            )
            rows += intake_rows("quarantine", "quarantine insert", kind, res)
        for kind in ("memory", "sqlite"):
            _log(f"quarantine insert, 180 KB garbage ({kind})")
            res = bench_intake(
                kind,
                lambda n: garbage(rng, n, BIG_GARBAGE),
                big_sizes,
                BIG_PUSH,
                "quarantined",
                repeats,
                home,
            )
            rows += intake_rows("quarantine, 180 KB each", "quarantine insert", kind, res)
        chains: dict[int, list[bytes]] = {}

        def chain(n: int) -> list[bytes]:
            if n not in chains:
                _log(f"  signing a chain of {n + 1:,} changes")
                chains[n] = parked_chain(n)
            return chains[n]

        for kind in ("memory", "sqlite"):
            _log(f"pending insert ({kind})")
            res = bench_intake(kind, chain, sizes, PUSH, "pending", repeats, home)
            rows += intake_rows("pending", "pending insert", kind, res)
        chains.clear()
        rows += damaged_rows(home, store_ops, max(3, repeats))
    title = (
        f"StateFuse reliability: refused and parked changes in pushes of {PUSH}"
        f" ({BIG_PUSH} for 180 KB garbage), damaged store of {store_ops:,} ops"
    )
    print(format_table(rows, title))
    stamp = utc_stamp()
    out = args.json or RESULTS / f"reliability-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": "reliability",
        "options": {
            "quick": args.quick,
            "sizes": sizes,
            "big_sizes": big_sizes,
            "store_ops": store_ops,
            "repeat": repeats,
            "seed": args.seed,
            "push": PUSH,
            "big_push": BIG_PUSH,
            "garbage_bytes": [SMALL_GARBAGE, BIG_GARBAGE],
            "chain_ops_per_change": CHAIN_OPS,
        },
        "rows": [r.to_json() for r in rows],
        "machine": machine_info(),
        "load_average_end": load_average(),
    }
    out.write_text(json.dumps(doc, indent=2))
    _log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
