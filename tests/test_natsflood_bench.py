"""The pure helpers of the chunk-flood benchmark (`benchmarks.natsflood`); it is not run here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("nats", reason="the benchmark needs nats-py (statefuse[nats])")

from benchmarks.natsflood import parse_args, table  # noqa: E402


def test_options_default_to_the_issue_settings_and_refuse_non_positive_ones() -> None:
    args = parse_args([])
    assert (args.changes, args.every, args.size, args.flood_rate) == (40, 0.25, 10_000, 2000.0)
    with pytest.raises(SystemExit):
        parse_args(["--flood-rate", "0"])


def test_a_run_with_a_missing_change_does_not_meet_the_target() -> None:
    run = {
        "flood_rate": 2000.0,
        "changes": 3,
        "delivered": 2,
        "missing": 1,
        "p50_s": 0.01,
        "p99_s": 0.02,
        "max_s": 0.02,
        "follower": {"evicted": 5, "abandoned": 0},
    }
    text = table([run])
    assert "2/3" in text and "NOT met" in text
    assert "| met" in table([{**run, "delivered": 3, "missing": 0}])
