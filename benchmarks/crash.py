"""A kill -9 campaign on one store written by several processes at once.

``python -m benchmarks.crash [--trials N] [--writers W] [--seed S] [--json PATH]``

Each trial starts ``W`` writer processes (`Replica.open` on one SQLite store, one claim per
call, printing each claim id only after the call returned, i.e. after its commit), kills one
with SIGKILL at a random moment, then the others. After every trial the store is opened and
checked: no damage, every acknowledged claim present, no fork of the store's own feed, the
state equal to a fresh `materialize` of its ops, and the store's derived state (kept by each
write in its own transaction, `statefuse.storage.storeindex`) answering as that state on every key.
The
check's verified open marks the store clean, so the next trial's writers open on the derived
state and write lean; the kill leaves it unclean, so the check verifies everything again. Any
failure stops the run with the trial named. This is a proof run, not a timing: it prints what
was checked and writes the JSON.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.report import machine_info, utc_stamp, write_document
from statefuse import materialize
from statefuse.storage.testing import assert_index_agrees
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"

_WRITER = """
import sys
from statefuse.sync.replica import Replica
rep = Replica.open(sys.argv[1])
for i in range(100_000):
    print(rep.add_claim(f"p/{sys.argv[2]}/v{i}", i).op_id.hex(), flush=True)
"""


def _trial(path: Path, tag: str, writers: int, rng: random.Random) -> set[str]:
    """One trial's acknowledged claim ids."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), f"{tag}w{k}"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k in range(writers)
    ]
    time.sleep(rng.uniform(0.3, 1.5))
    procs[rng.randrange(writers)].send_signal(signal.SIGKILL)  # likely inside a transaction
    time.sleep(rng.uniform(0.0, 0.3))  # the others go on writing after the kill
    acked: set[str] = set()
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        acked.update(line for line in out.split() if len(line) == 64)
    return acked


def _check(path: Path, acked: set[str], trial: int) -> None:
    rep = Replica.open(path, load="verify")  # every change verified again: no derived state
    try:
        if rep.damage is not None:
            raise SystemExit(f"trial {trial}: the store is damaged: {rep.damage.describe()}")
        state = rep.state()
        lost = acked - {c.hex() for c in state.claims}
        if lost:
            raise SystemExit(f"trial {trial}: {len(lost)} acknowledged claims lost")
        if rep.forks():
            raise SystemExit(f"trial {trial}: the store's feed forked: {rep.forks()}")
        if state.digest() != materialize(rep.log.ops(), registry=rep.registry).digest():
            raise SystemExit(f"trial {trial}: the state differs from materialize")
        index = rep.index
        if index is None:
            raise SystemExit(f"trial {trial}: the store's derived state does not cover it")
        try:
            assert_index_agrees(index, state)
        except AssertionError as exc:
            raise SystemExit(f"trial {trial}: {exc}") from None
    finally:
        rep.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crash", description=__doc__)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path)
    a = parser.parse_args(argv)
    rng = random.Random(a.seed)
    path = Path(tempfile.mkdtemp(prefix="statefuse-crash-")) / "s.db"
    Replica.open(path, space="team", create=True).close()
    acked: set[str] = set()
    start = time.perf_counter()
    for t in range(a.trials):
        acked |= _trial(path, f"t{t}", a.writers, rng)
        _check(path, acked, t)
        if t % 10 == 9:
            print(f"trial {t + 1}: {len(acked)} acknowledged claims, all present", file=sys.stderr)
    seconds = time.perf_counter() - start
    print(
        f"kill -9 campaign: {a.trials} trials, {a.writers} writers each, {len(acked)} acknowledged"
        " claims: all present, no damage, no fork, state == materialize == the derived state"
        f" ({seconds:.0f} s, seed {a.seed})"
    )
    RESULTS.mkdir(exist_ok=True)
    document = {
        "benchmark": "crash",
        "machine": machine_info(),
        "trials": a.trials,
        "writers": a.writers,
        "seed": a.seed,
        "acknowledged": len(acked),
        "seconds": seconds,
        "ok": True,
    }
    return write_document(a.json or RESULTS / f"crash-{utc_stamp()}.json", document)


if __name__ == "__main__":
    raise SystemExit(main())
