"""Crash safety: a writer process killed with SIGKILL at random moments never loses an
acknowledged change, and the store it leaves always reopens, verifies and materializes.

The writer is a forked child (so each trial costs milliseconds, not an interpreter start); it
appends batches and reports each change id on a pipe only after `Replica.batch` returned, i.e.
after the commit. The parent kills it at a random moment, reopens the store and checks.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time

import pytest

from statefuse import materialize
from statefuse.storage.testing import assert_index_agrees
from statefuse.sync.replica import Replica

TRIALS = 50
TRIALS_PER_STORE = 10

pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or not hasattr(signal, "SIGKILL"),
    reason="needs fork and SIGKILL (POSIX)",
)


def _writer(path: str, seed: int, conn) -> None:  # runs in the child
    rng = random.Random(seed)
    replica = Replica.open(path, wait=10.0)
    i = 0
    while True:
        with replica.batch():
            for j in range(rng.randint(1, 30)):
                replica.add_claim("ns", f"s{i % 50}", "p", j, confidence=rng.random())
                if rng.random() < 0.1:
                    replica.add_evidence("crawler", f"page {i}")
        conn.send_bytes(replica.last_change(replica.author)[1])
        i += 1


def _drain(conn) -> list[bytes]:
    acked = []
    while conn.poll():
        try:
            acked.append(conn.recv_bytes())
        except EOFError:
            break
    return acked


def test_sigkill_at_random_moments_never_loses_an_acknowledged_change(tmp_path):
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(20261122)
    acked: set[bytes] = set()
    total_acked = 0
    path = None
    for trial in range(TRIALS):
        if trial % TRIALS_PER_STORE == 0:
            path = str(tmp_path / f"store{trial}.db")
            Replica.open(path, create=True, space="crash").close()
            acked = set()
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_writer, args=(path, trial, child), daemon=True)
        proc.start()
        child.close()
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)  # a hang guard: it was killed
        fresh = _drain(parent)
        total_acked += len(fresh)
        acked.update(fresh)
        parent.close()
        replica = Replica.open(path, wait=60.0)  # a hang guard
        try:
            stored = set(replica.change_ids())
            missing = acked - stored
            assert not missing, f"trial {trial}: {len(missing)} acknowledged changes lost"
            # every stored change verified again on reopen: nothing refused, nothing parked
            assert len(replica.log.quarantine) == 0
            assert replica.pending() == []
            assert replica.store.count() == len(stored)
            assert replica.state().digest() == materialize(replica.log.ops()).digest()
            # kept in each write's own transaction: whole after any kill
            index = replica.index
            assert index is not None
            assert_index_agrees(index, replica.state())
        finally:
            replica.close()
    assert total_acked > TRIALS, (
        "the writer never got to acknowledge anything: the test proved nothing"
    )
