"""The command line: the demo runs, prints the story and exits 0; errors never show tracebacks."""

from __future__ import annotations

import subprocess
import sys

from statefuse.cli import main
from statefuse.demo import run


def test_the_demo_merges_two_branches_and_shows_the_deadline_conflict():
    lines: list[str] = []
    state = run(lines.append)
    text = "\n".join(lines)
    (conflict,) = state.conflicts
    assert conflict.key == ("project", "launch", "deadline")
    assert "conflicts kept, not overwritten: 1" in text
    assert "merging B into A instead: same digest" in text
    values = {state.claims[c].value for c in conflict.candidates}
    assert values == {"2026-03-25", "2026-04-01"}
    prices = [c for c in state.active_claims() if c.predicate == "price"]
    assert len(prices) == 2 and all("1,200" not in str(c.value) for c in prices)


def test_statefuse_demo_exits_zero_and_prints_the_merge(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "merge A and B" in out and "deadline" in out


def test_the_module_entry_point_runs_the_demo_in_a_fresh_process():
    proc = subprocess.run(
        [sys.executable, "-m", "statefuse", "demo"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "state digest" in proc.stdout


def test_an_unknown_command_exits_nonzero_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "statefuse", "nonsense"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
