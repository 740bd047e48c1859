"""Forgetting on purpose: redaction and compaction (SEMANTICS §10).

``python -m benchmarks.forgetting [--quick] [--claims N | --sizes OPS,...] [--json PATH]``

Rows:

- ``redact K claims (of N)``: `Replica.redact` of K claims by id in a SQLite store holding
  them and 4K others that stay (one call: the redaction ops signed and stored, every change
  holding a body rewritten, the derived state rebuilt, the log checkpointed). Target: seconds.
- ``store size before / after compaction``: a store of N claims, 30% of them retracted, each
  claim citing nothing and one uncited evidence op per ten claims, checkpointed; then
  `Replica.compact` (which vacuums). Two workloads: values the scrub looks for (text of four
  characters or more: such retracted claims move and leave a scrub residue behind,
  `statefuse.core.residue`) and short codes it does not (``"ok"``/``"no"``: they move, nothing
  left). Target: >= 25% smaller. ``--sizes`` gives the stores by op count (three claims in ten
  bring a retraction, one in ten an evidence op: 1.4 ops per claim), e.g. ``--sizes
  100000,1000000`` for the issue's 100k and 1M-op stores.
- ``open + state, before / after``: `Replica.open(load="verify")` and `state()` of that store.

Progress goes to stderr, the table to stdout, the JSON to ``--json`` or
``benchmarks/results/forgetting-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import machine_info, utc_stamp
from statefuse.sync.replica import Replica

SPACE = "forget-bench"


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _size(path: Path) -> int:
    """The store's bytes once vacuumed (so free pages left by any write count on neither
    side: what compaction saves, not what a vacuum alone would)."""
    db = sqlite3.connect(path)
    db.execute("VACUUM")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return path.stat().st_size + sum(p.stat().st_size for p in path.parent.glob(path.name + "-wal"))


def _open_time(path: Path) -> float:
    start = time.perf_counter()
    with Replica.open(path, space=SPACE, load="verify") as r:
        r.state()
    return time.perf_counter() - start


def bench_redact(home: Path, k: int, others: int) -> dict[str, object]:
    path = home / "redact.sqlite"
    r = Replica.open(path, space=SPACE, create=True)
    ids = []
    with r.batch():
        for i in range(others):  # claims that stay: the derived state is rebuilt with them
            r.add_claim(f"notes/n{i}/text", f"note {i}")
    with r.batch():
        for i in range(k):
            ids.append(r.add_claim(f"people/p{i}/email", f"person{i}@example.com").op_id)
    start = time.perf_counter()
    done = r.redact(claim=ids, reason="erasure request")
    took = time.perf_counter() - start
    r.close()
    leaked = b"person7@example.com" in path.read_bytes()
    return {
        "row": f"redact {k:,} claims (of {k + others:,})",
        "seconds": took,
        "redaction_ops": len(done.ops),
        "secret_left_in_file": leaked,
        "target": "seconds",
    }


#: Ops per claim in the compaction store: the claim, 0.3 retractions, 0.1 evidence ops.
OPS_PER_CLAIM = 1.4


def bench_compact(home: Path, n: int, short: bool) -> dict[str, object]:
    tag = "short" if short else "text"
    path, archive = home / f"compact-{tag}-{n}.sqlite", home / f"compact-{tag}-{n}.archive"
    r = Replica.open(path, space=SPACE, create=True)
    step = 5_000
    for start in range(0, n, step):
        with r.batch():
            for i in range(start, min(n, start + step)):
                if short:
                    value: object = "no" if i % 10 < 3 else "ok"
                else:
                    value = f"the value of item {i}"
                c = r.add_claim(f"ns/s{i}/p", value, provenance="bench")
                if i % 10 < 3:
                    r.retract(c)
                if i % 10 == 0:
                    r.add_evidence(f"raw/{i}", f"tool output {i} " * 8)
        _log(f"  {tag}: {min(n, start + step):,} / {n:,} claims")
    ops = len(r.state().claims) + len(r.state().retractions) + len(r.state().evidence)
    r.close()
    before, open_before = _size(path), _open_time(path)
    r = Replica.open(path, space=SPACE)
    start = time.perf_counter()
    done = r.compact(archive=archive)
    took = time.perf_counter() - start
    r.close()
    after, open_after = _size(path), _open_time(path)
    archive_bytes = archive.stat().st_size if archive.exists() else 0
    for p in (path, archive):
        p.unlink(missing_ok=True)
    return {
        "row": f"{ops:,} ops ({n:,} claims, 30% retracted), {tag} values",
        "ops": ops,
        "claims": n,
        "moved_ops": done.ops,
        "moved_bytes": done.bytes,
        "compact_seconds": took,
        "store_before": before,
        "store_after": after,
        "smaller": 1 - after / before,
        "open_before": open_before,
        "open_after": open_after,
        "archive_bytes": archive_bytes,
        "target": ">= 25% smaller",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.forgetting", description=__doc__)
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--claims", type=int, default=None, help="claims in the compaction store")
    p.add_argument(
        "--sizes",
        default=None,
        help="compaction stores by op count, comma-separated (e.g. 100000,1000000)",
    )
    p.add_argument("--only-compact", action="store_true", help="skip the redaction row")
    p.add_argument(
        "--values",
        choices=("both", "short", "text"),
        default="both",
        help="which compaction workloads",
    )
    p.add_argument("--redact", type=int, default=None, help="claims to redact")
    p.add_argument("--others", type=int, default=None, help="claims beside them, kept")
    p.add_argument("--only-redact", action="store_true", help="skip the compaction rows")
    p.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    a = p.parse_args(argv)
    if a.sizes:
        sizes = [round(int(x) / OPS_PER_CLAIM) for x in a.sizes.split(",") if x.strip()]
    else:
        sizes = [a.claims or (10_000 if a.quick else 100_000)]
    k = a.redact or (1_000 if a.quick else 10_000)
    kinds = {"both": (True, False), "short": (True,), "text": (False,)}[a.values]
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="statefuse-forget-") as tmp:
        home = Path(tmp)
        if not a.only_compact:
            _log(f"redact {k:,}")
            rows.append(bench_redact(home, k, a.others if a.others is not None else 4 * k))
        for n in () if a.only_redact else sizes:
            for short in kinds:
                _log(f"compact {n:,} claims ({'short' if short else 'text'} values)")
                rows.append(bench_compact(home, n, short))
    print(f"{'benchmark':<56} {'result':>40}")
    for row in rows:
        if "seconds" in row:
            cell = f"{row['seconds']:.2f} s ({row['redaction_ops']} ops)"
        else:
            cell = f"{row['store_before']:,} -> {row['store_after']:,} B ({row['smaller']:.0%})"
        print(f"{row['row']:<56} {cell:>40}")
        if "open_before" in row:
            opened = f"{row['open_before']:.2f} s -> {row['open_after']:.2f} s"
            print(f"{'  open + state, before -> after':<56} {opened:>40}")
            moved = f"{row['moved_ops']:,} bodies, {row['moved_bytes']:,} B"
            print(f"{'  moved to the archive':<56} {moved:>40}")
    out = a.json or Path("benchmarks/results") / f"forgetting-{utc_stamp()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
