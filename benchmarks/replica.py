"""Durable replica: append throughput and reopen time on the SQLite store.

``python -m benchmarks.replica [--quick] [--reopen-ops N,...] [--json PATH]``

Rows:

- ``append, N-op changes``: `Replica.batch` end to end — the writer builds and checks each op,
  the change is signed, committed (WAL, ``synchronous=FULL``: one fsync per change) and applied
  to the incremental state. Median of repeats (5 new stores for 100-op changes), as ops/s;
  a second row gives the same runs per CPU second of the process (fsync waits left out;
  steadier on a shared machine, whose speed drifts by a quarter within seconds).
- ``store append, 100-op changes``: `SQLiteStore.write` alone for pre-signed changes (the
  durable part: one transaction and one fsync per change).
- ``reopen, N ops (snapshot)``: `Replica.open` of a store holding N ops in 100-op changes,
  plus `state()`, with the snapshot its last close saved: the changes are restored from it
  (`sync.snapshot`) and the state built from the restored ops.
- ``reopen, N ops (full verify, no snapshot)``: the same store with its snapshot row deleted:
  every stored change is verified again (signature, canonical bytes, op ids) and materialized.
- ``derived state apply alone, 100-op changes``: `StoreIndex.apply` of the ops of pre-signed
  100-op changes, one write transaction each (and per CPU second): what keeping the store's
  derived state adds to every durable write (`statefuse.storage.storeindex`), the floor under
  ``append``.
- ``floor: K hash-keyed index(es) alone, 100 rows a commit``: rows of K random 32-byte keys,
  each key indexed, 100 rows a transaction, in a SQLite file with the store's settings (WAL,
  ``synchronous=FULL``, the store's checkpoint size) and nothing else: the floor under any
  on-disk index that finds a claim by hash (its id, its ref, its locus: K = 3). Each new row
  lands on a random leaf page of each index, and the commit writes every page it touched to the
  log: the cost of a durable append that keeps such an index, whatever else it does.
- ``close, 10-op store``: `Replica.close` of a new store after ten 1-op changes, which saves
  its first snapshot.

Progress goes to stderr, the table to stdout, the JSON to ``--json`` or
``benchmarks/results/replica-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import load_average, machine_info, utc_stamp
from statefuse.storage.sqlitestore import WAL_AUTOCHECKPOINT, SQLiteStore
from statefuse.storage.store import StoreInfo, StoreWrite
from statefuse.sync.declaration import SPACE_OP_TYPES
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's target for batched durable appends.
TARGET_BATCHED = 50_000


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fill(replica: Replica, ops: int, size: int, tag: str) -> float:
    return _fill_timed(replica, ops, size, tag)[0]


def _fill_timed(replica: Replica, ops: int, size: int, tag: str) -> tuple[float, float]:
    """Wall and CPU seconds to write ``ops`` claims in changes of ``size``."""
    start, start_cpu = time.perf_counter(), time.process_time()
    for b in range(ops // size):
        with replica.batch():
            for i in range(size):
                replica.add_claim("bench", f"{tag}{b}-{i}", "value", i, confidence=0.5 + i % 2 / 4)
    return time.perf_counter() - start, time.process_time() - start_cpu


def bench_append(home: Path, size: int, ops: int, repeats: int) -> tuple[list[float], list[float]]:
    """Ops per wall second and per CPU second of the process, one sample per new store. The
    CPU figure leaves out the fsync waits and is steadier on a shared machine."""
    rates, cpu_rates = [], []
    for r in range(repeats):
        with Replica.open(
            home / f"append{size}-{r}.db", create=True, space="bench", clock=lambda: 0
        ) as rep:
            wall, cpu = _fill_timed(rep, ops, size, "a")
            rates.append(ops / wall)
            cpu_rates.append(ops / cpu)
    return rates, cpu_rates


def bench_store_append(home: Path, changes: int, repeats: int) -> list[float]:
    source = Replica.memory(space="bench", clock=lambda: 0)
    _fill(source, changes * 100, 100, "s")
    pairs = [(c.change_id, c.data) for c in source.log.changes()]
    rates = []
    for r in range(repeats):
        store = SQLiteStore(home / f"store-{r}.db")
        store.initialize(StoreInfo(space="bench"))
        start = time.perf_counter()
        for pair in pairs:
            store.write(StoreWrite(accepted=(pair,)))
        rates.append(len(pairs) * 100 / (time.perf_counter() - start))
        store.close()
    return rates


def bench_index_apply(home: Path, changes: int, repeats: int) -> tuple[list[float], list[float]]:
    """`StoreIndex.apply` alone for the ops of pre-signed 100-op changes, each in a write
    transaction of its own (no change stored): what keeping the derived state adds to every
    durable write, the floor below ``append``. Returns (ops per second, ops per CPU second)."""
    source = Replica.memory(space="bench", clock=lambda: 0)
    _fill(source, changes * 100, 100, "i")
    batches = [
        [op for op in c.ops if not isinstance(op, SPACE_OP_TYPES)] for c in source.log.changes()
    ]
    rates, cpu_rates = [], []
    for r in range(repeats):
        store = SQLiteStore(home / f"index-{r}.db")
        store.initialize(StoreInfo(space="bench"))
        ix = store.index()
        with store.write_transaction():
            ix.rebuild([], upto=0, registry=source.registry)
        start, cpu = time.perf_counter(), time.process_time()
        for k, ops in enumerate(batches, start=1):
            with store.write_transaction():
                ix.apply(ops, upto=k, registry=source.registry)
        n = sum(map(len, batches))
        rates.append(n / (time.perf_counter() - start))
        cpu_rates.append(n / (time.process_time() - cpu))
        store.close()
    return rates, cpu_rates


def bench_hash_floor(
    home: Path, changes: int, keys: int, repeats: int
) -> tuple[list[float], list[float]]:
    """Rows per second (and per CPU second) into a bare SQLite table whose ``keys`` random
    32-byte columns are each indexed, ``changes`` transactions of 100 rows (see the module
    docstring)."""
    rates, cpu_rates = [], []
    names = [f"k{i}" for i in range(keys)]
    insert = f"INSERT INTO t ({', '.join(names)}) VALUES ({', '.join('?' * keys)})"
    for r in range(repeats):
        batches = [
            [tuple(os.urandom(32) for _ in names) for _ in range(100)] for _ in range(changes)
        ]
        db = sqlite3.connect(home / f"floor{keys}-{r}.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT}")
        columns = ", ".join(f"{k} BLOB NOT NULL" for k in names)
        db.execute(f"CREATE TABLE t (n INTEGER PRIMARY KEY, {columns})")
        for k in names:
            db.execute(f"CREATE INDEX t_{k} ON t ({k})")
        start, cpu = time.perf_counter(), time.process_time()
        for rows in batches:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(insert, rows)
            db.execute("COMMIT")
        rates.append(changes * 100 / (time.perf_counter() - start))
        cpu_rates.append(changes * 100 / (time.process_time() - cpu))
        db.close()
    return rates, cpu_rates


def _drop_snapshot(path: Path) -> None:
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM snapshot")
    db.close()


def bench_reopen(home: Path, ops: int, repeats: int) -> tuple[list[float], list[float]]:
    """Reopen times with the snapshot and with none (full verification)."""
    path = home / f"reopen{ops}.db"
    with Replica.open(path, create=True, space="bench", clock=lambda: 0) as rep:
        step = max(ops // 10, 100)
        for done in range(0, ops, step):
            _fill(rep, min(step, ops - done), 100, f"r{done}-")
            _log(f"  reopen store: {done + step:,} / {ops:,} ops written")
        digest = rep.state().digest()
    _log("  (closed: snapshot saved)")
    times: dict[bool, list[float]] = {True: [], False: []}
    for snapshot in (True, False):
        for _ in range(repeats):
            if not snapshot:
                _drop_snapshot(path)
            start = time.perf_counter()
            with Replica.open(path) as again:
                state = again.state()
                elapsed = time.perf_counter() - start
                assert state.digest() == digest, "reopened state differs"
                assert (again.restored > 0) == snapshot, "snapshot used or not as intended"
            times[snapshot].append(elapsed)
    return times[True], times[False]


def bench_close(home: Path, repeats: int) -> list[float]:
    times = []
    for r in range(repeats):
        rep = Replica.open(home / f"close-{r}.db", create=True, space="bench", clock=lambda: 0)
        for i in range(10):
            rep.add_claim("bench", f"c{i}", "value", i)
        start = time.perf_counter()
        rep.close()
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replica", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    p.add_argument("--reopen-ops", default=None, help="comma-separated store sizes to reopen")
    p.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = p.parse_args(argv)
    repeats = 1 if args.quick else 3
    batched_ops = 10_000 if args.quick else 50_000
    if args.reopen_ops:
        reopen_sizes = [int(x.replace("_", "")) for x in args.reopen_ops.split(",")]
    else:
        reopen_sizes = [10_000] if args.quick else [100_000]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="statefuse-bench-") as tmp:
        home = Path(tmp)
        _log("append, 1-op changes")
        r1, _ = bench_append(home, 1, 500 if args.quick else 2_000, repeats)
        rows.append(
            {
                "row": "append, 1-op changes",
                "median": statistics.median(r1),
                "unit": "ops/s",
                "samples": r1,
            }
        )
        _log("append, 100-op changes")
        r100, c100 = bench_append(home, 100, batched_ops, 1 if args.quick else 5)
        rows.append(
            {
                "row": "append, 100-op changes",
                "median": statistics.median(r100),
                "unit": "ops/s",
                "samples": r100,
                "target": f">= {TARGET_BATCHED:,} ops/s",
            }
        )
        rows.append(
            {
                "row": "  the same, ops per CPU second",
                "median": statistics.median(c100),
                "unit": "ops/s",
                "samples": c100,
            }
        )
        _log("store append, 100-op changes")
        rs = bench_store_append(home, 100 if args.quick else 500, repeats)
        rows.append(
            {
                "row": "store append, 100-op changes",
                "median": statistics.median(rs),
                "unit": "ops/s",
                "samples": rs,
                "target": f">= {TARGET_BATCHED:,} ops/s",
            }
        )
        _log("derived state apply alone, 100-op changes")
        ri, ci = bench_index_apply(home, 100 if args.quick else 500, repeats)
        rows.append(
            {
                "row": "derived state apply alone, 100-op changes",
                "median": statistics.median(ri),
                "unit": "ops/s",
                "samples": ri,
            }
        )
        rows.append(
            {
                "row": "  the same, ops per CPU second",
                "median": statistics.median(ci),
                "unit": "ops/s",
                "samples": ci,
            }
        )
        for keys, what in ((1, "1 hash-keyed index"), (3, "3 hash-keyed indexes")):
            _log(f"floor: {what} alone")
            rf, cf = bench_hash_floor(home, 100 if args.quick else 500, keys, repeats)
            rows.append(
                {
                    "row": f"floor: {what} alone, 100 rows a commit",
                    "median": statistics.median(rf),
                    "unit": "ops/s",
                    "samples": rf,
                }
            )
            rows.append(
                {
                    "row": "  the same, ops per CPU second",
                    "median": statistics.median(cf),
                    "unit": "ops/s",
                    "samples": cf,
                }
            )
        _log("close, 10-op store")
        tc = bench_close(home, 5 if args.quick else 15)
        rows.append(
            {
                "row": "close, 10-op store",
                "median": statistics.median(tc),
                "unit": "s",
                "samples": tc,
            }
        )
        for n in reopen_sizes:
            _log(f"reopen, {n:,} ops")
            fast, full = bench_reopen(home, n, repeats)
            for label, t in (("snapshot", fast), ("full verify, no snapshot", full)):
                rows.append(
                    {
                        "row": f"reopen, {n:,} ops ({label})",
                        "median": statistics.median(t),
                        "unit": "s",
                        "samples": t,
                    }
                )
    print(f"{'benchmark':50} {'median':>14}  {'target':>18}")
    for row in rows:
        median = row["median"]
        assert isinstance(median, float)
        if row["unit"] == "ops/s":
            value = f"{median:,.0f} ops/s"
        elif median < 1:
            value = f"{median * 1000:.1f} ms"
        else:
            value = f"{median:.2f} s"
        print(f"{row['row']:50} {value:>14}  {row.get('target', ''):>18}")
    stamp = utc_stamp()
    out = args.json or RESULTS / f"replica-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"rows": rows, "machine": machine_info(), "load_average": load_average()}
    out.write_text(json.dumps(doc, indent=2))
    _log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
