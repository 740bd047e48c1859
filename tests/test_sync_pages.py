"""A sync fetched in pages reports what is really pending at its end.

Pages of a fetch come in change-id order, so a page can park a change whose predecessor a later
page brings; the sync's report then counts what still waits when the sync is done, not the sum of
what each page parked. Driven against a real `statefuse serve` process on 127.0.0.1.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from statefuse.sync import DEFAULT_BOUNDS
from statefuse.sync.client import sync_with
from statefuse.sync.replica import Replica
from tests.serving import served_process

ROOT = Path(__file__).resolve().parents[1]
CHANGES = 1500


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A served store holding 1,500 changes of one author (one chain of seqs), 8 KB each, so
    the server's fetch answers (4 MB at most) cut even one request into several pages."""
    path = tmp_path_factory.mktemp("served") / "a.db"
    with Replica.open(path, space="team", create=True) as rep:
        for i in range(CHANGES):
            rep.add_claim(f"p/s{i}/v", f"{i:05}" + "x" * 8000)
        assert len(rep.log) == CHANGES
    with served_process(path, "--port", "0") as (url, _):
        yield url


def test_a_paged_sync_reports_nothing_pending_once_every_predecessor_arrived(served, tmp_path):
    with Replica.open(tmp_path / "b.db", space="team", create=True) as rep:
        report = sync_with(rep, served, page_size=100)
        assert report.round_trips > CHANGES // 100  # several pages, most parked something
        assert rep.pending() == []
        assert (report.fetched, report.merge.accepted, report.merge.pending) == (
            CHANGES,
            CHANGES,
            0,
        )
        # one author's 1,500 changes in change-id order pass the per-author pending bound
        # (DEFAULT_BOUNDS: 1,000): what it evicted was fetched again within the same sync
        assert DEFAULT_BOUNDS.pending_per_author is not None
        assert DEFAULT_BOUNDS.pending_per_author < CHANGES
        assert report.merge.evicted == 0
        assert len(rep.change_ids()) >= CHANGES


def test_statefuse_sync_prints_zero_pending_after_a_complete_sync(served, tmp_path):
    store = tmp_path / "c.db"
    made = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), "init", "--space", "team"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    synced = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), "sync", served],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert synced.returncode == 0, synced.stderr
    assert f"fetched {CHANGES}, " in synced.stdout
    assert f"; {CHANGES} accepted, 0 already known, 0 pending, 0 quarantined" in synced.stdout
