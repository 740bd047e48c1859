"""The pure helpers of the NATS benchmark (`benchmarks.nats`); the benchmark itself is not run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# `benchmarks` is a folder of the checkout, not an installed package (as in the other tests of it)
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.nats import parse_args, percentile, table  # noqa: E402


def test_percentile_takes_the_nearest_rank() -> None:
    samples = [float(k) for k in range(1, 101)]
    assert percentile(samples, 50) == 50.0
    assert percentile(samples, 99) == 99.0
    assert percentile(samples, 100) == 100.0
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0


def test_percentile_refuses_no_samples_and_a_bad_rank() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_options_default_to_the_issue_settings_and_refuse_non_positive_ones() -> None:
    args = parse_args([])
    assert (args.replicas, args.rate, args.seconds, args.catchup) == (8, 100.0, 10.0, 100_000)
    with pytest.raises(SystemExit):
        parse_args(["--replicas", "0"])


def test_phases_pick_what_runs_and_the_redaction_rows_sit_beside_the_claim_rows() -> None:
    assert parse_args([]).phases == ["propagation", "throughput", "catchup", "redaction"]
    assert parse_args(["--phases", "redaction", "--redactions", "3"]).phases == ["redaction"]
    for bad in (["--phases", "nope"], ["--phases", ","], ["--redactions", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
    result = {"replicas": 8, "rounds": 2, "arrived": 32, "expected": 32}
    for what, p50 in (("claim", 0.012), ("redact", 0.2)):
        result |= {f"{what}_p50_s": p50, f"{what}_p99_s": 0.05, f"{what}_all_p50_s": 0.02}
    text = table([], None, None, result)
    lines = text.splitlines()
    [claim] = [x for x in lines if "claim: add_claim -> in a follower, p50" in x]
    [cut] = [x for x in lines if "redaction: redact -> a follower, p50" in x]
    assert claim.rstrip().endswith("ok") and cut.rstrip().endswith("MISS")
    assert "32/32" in text
