"""Verified ingest (`sync.ChangeLog.receive`): signed changes of 1, 10 and 100 ops.

``python -m benchmarks --ingest``. One author's feed of signed changes (built before the clock
starts) is received by a fresh ChangeLog per repeat: verification (canonical bytes, every op
decoded and its id recomputed, the author key, the Ed25519 signature) plus admission. Three ways
per change size, interleaved within each repeat so that they share the machine's load:

- ``ChangeLog.receive``: one change at a time (the figure the issue's target is about);
- ``ChangeLog.receive_all``: the whole feed in one call (ops decoded in shared batches);
- ``reference verifier``: `verify_change_reference` then `receive_verified`, the plain
  one-op-at-a-time decoders the fast paths are tested against (what ingest cost before them).

The row's per-op figure is wall seconds per op; the note gives ops per second from the median
wall time and from the median CPU time of the process (steadier on a shared machine).

Invariant: every change of every run is accepted (checked), so a run that quarantined its
input cannot pass for a fast one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import blake3
import msgpack
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from benchmarks.materialize import Row, Target, Unit
from benchmarks.report import (
    format_table,
    load_average,
    machine_info,
    timed,
    utc_stamp,
    write_document,
)
from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync import ChangeLog, Receipt, SigningKey, Status, sign_change
from statefuse.sync.change import UnverifiedChange, change_id_of, signed_message
from statefuse.sync.verify import verify_change_reference

SPACE = "bench"
CHANGE_SIZES = (1, 10, 100)
OPS_PER_RUN = 5_000
RESULTS = Path(__file__).resolve().parent / "results"
#: The issue's target: >= 300,000 ops/s with 100-op changes.
TARGET_100 = Target(1 / 300_000, per_op=True, text=">= 300k ops/s")
_digest = blake3.blake3.digest


def feed(size: int, total_ops: int) -> list[bytes]:
    """Signed changes of ``size`` ops each, ``total_ops`` ops in all, one author's chain."""
    key = SigningKey.from_seed(bytes([size % 256]) * 32)
    writer = Writer(key.author, clock=lambda: 0)
    out, prev = [], None
    for seq in range(1, total_ops // size + 1):
        ops = [writer.claim("bench", f"s{seq}-{i}", "value", i) for i in range(size)]
        change = sign_change(
            key, space=SPACE, seq=seq, prev=prev, registry=DEFAULT_REGISTRY.fingerprint, ops=ops
        )
        prev = change.change_id
        out.append(change.data)
    return out


def _receive(changes: list[bytes]) -> list[Receipt]:
    log = ChangeLog(SPACE)
    return [log.receive(data, seen_ms=0) for data in changes]


def _receive_all(changes: list[bytes]) -> list[Receipt]:
    return ChangeLog(SPACE).receive_all(changes, seen_ms=0)


def _reference(changes: list[bytes]) -> list[Receipt]:
    log = ChangeLog(SPACE)
    return [
        log.receive_verified(
            verify_change_reference(UnverifiedChange(data), space=SPACE), seen_ms=0
        )
        for data in changes
    ]


WAYS: tuple[tuple[str, Callable[[list[bytes]], list[Receipt]]], ...] = (
    ("ChangeLog.receive", _receive),
    ("ChangeLog.receive_all", _receive_all),
    ("reference verifier", _reference),
)


def bench_ingest(repeat: int) -> list[Row]:
    rows = []
    for size in CHANGE_SIZES:
        changes = feed(size, OPS_PER_RUN)
        ops = len(changes) * size
        wall: dict[str, list[float]] = {name: [] for name, _ in WAYS}
        cpu: dict[str, list[float]] = {name: [] for name, _ in WAYS}
        for _ in range(repeat):
            for name, way in WAYS:
                start, start_cpu = time.perf_counter(), time.process_time()
                receipts = way(changes)
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - start_cpu)
                assert all(r.status is Status.ACCEPTED for r in receipts)
        for name, _ in WAYS:
            rate = ops / statistics.median(wall[name])
            cpu_rate = ops / statistics.median(cpu[name])
            rows.append(
                Row(
                    section=f"verified ingest, {size}-op changes",
                    name=name,
                    ops=ops,
                    unit=Unit.SECONDS,
                    samples=wall[name],
                    per=ops,
                    target=TARGET_100 if size == 100 and name == "ChangeLog.receive" else None,
                    note=f"{rate:,.0f} ops/s; {cpu_rate:,.0f} ops/s of CPU time",
                )
            )
    return rows


def bench_floor(repeat: int) -> list[Row]:
    """The C-level steps that verifying a 100-op change cannot skip, timed alone over the same
    feed: what is left of the 3.3 µs per op that 300k ops/s allows once they have run.

    Every op must be unpacked (msgpack), packed again to prove its bytes canonical, hashed for
    its id (blake3), and its change's Ed25519 signature checked once. None of these runs any
    Python code per op here (``map`` over C functions), so their sum is a floor for any
    verifier built on these libraries, before a single field is checked or an op object built.
    """
    changes = feed(100, OPS_PER_RUN)
    bodies = [msgpack.unpackb(msgpack.unpackb(c)["change"]) for c in changes]
    datas = [d for body in bodies for _, d in body["ops"]]
    raws = list(map(msgpack.unpackb, datas))
    author = SigningKey.from_seed(bytes([100]) * 32).author  # the seed `feed` signs with
    public = Ed25519PublicKey.from_public_bytes(author)
    wires = [msgpack.unpackb(c) for c in changes]
    messages = [signed_message(change_id_of(w["change"])) for w in wires]
    sigs = [w["sig"] for w in wires]

    def verify_all() -> None:
        for message, sig in zip(messages, sigs, strict=True):
            public.verify(sig, message)  # raises InvalidSignature: the feed is genuine

    steps: list[tuple[str, Callable[[], object]]] = [
        ("unpack every op (msgpack.unpackb)", lambda: list(map(msgpack.unpackb, datas))),
        (
            "pack them again (canonical check)",
            lambda: msgpack.packb(raws, use_bin_type=True, use_single_float=False),
        ),
        ("blake3 of every op (op ids)", lambda: list(map(_digest, map(blake3.blake3, datas)))),
        ("Ed25519 check, one per change", verify_all),
    ]
    section = "verified ingest floor, 100-op changes (C-level steps alone)"
    rows = []
    total = 0.0
    for name, call in steps:
        samples = timed(call, repeat)
        total += statistics.median(samples)
        rows.append(Row(section, name, len(datas), Unit.SECONDS, samples, per=len(datas)))
    rows.append(
        Row(
            section,
            "sum of the medians: the ceiling before any Python-level work",
            len(datas),
            Unit.SECONDS,
            [total],
            per=len(datas),
            target=TARGET_100,
            note=f"{len(datas) / total:,.0f} ops/s at most",
        )
    )
    return rows


def main(args: argparse.Namespace) -> int:
    """``python -m benchmarks --ingest``: honours ``--repeat``, ``--json`` and ``--name``."""
    machine = machine_info()
    started = time.perf_counter()
    print("building signed feeds ...", file=sys.stderr, flush=True)
    rows = bench_ingest(args.repeat or 5)
    rows += bench_floor(args.repeat or 5)
    title = (
        f"StateFuse verified ingest; Python {machine['python']}; {machine['platform']};"
        f" {machine['cpu_count']} CPUs ({machine['cpu_model']})"
    )
    print(format_table(rows, title))
    name = args.name or "ingest-" + utc_stamp()
    path: Path = args.json if args.json is not None else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "ingest",
        "options": {"change_sizes": list(CHANGE_SIZES), "ops_per_run": OPS_PER_RUN},
        "total_s": time.perf_counter() - started,
        "load_average_at_end": load_average(),
        "rows": [r.to_json() for r in rows],
    }
    return write_document(path, document)
