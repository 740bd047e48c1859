"""Output that grows with the memory is bounded: every list the command line and the MCP tools
return takes a limit and says how many it left out, and ``context --json`` lists a bounded
number of omitted claim ids (the counts in full)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statefuse.sync.replica import Replica

SPACE = "team"


def _statefuse(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STATEFUSE_STORE"}
    done = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        cwd=store.parent,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """300 claims under 30 namespaces, 25 keys in conflict, a key with 3 events."""
    path = tmp_path / "team.db"
    rep = Replica.open(path, create=True, space=SPACE)
    with rep.batch():
        for i in range(300):
            rep.add_claim(f"ns{i % 30}", f"item{i}", "status", f"value {i}", provenance="crawl")
        for i in range(25):
            rep.add_claim(f"ns{i % 30}", f"item{i}", "status", f"other {i}", provenance="mail")
    rep.update("log", "run", "state", "started")
    rep.update("log", "run", "state", "done")
    rep.close()
    return path


def test_context_json_lists_a_bounded_number_of_omitted_ids_and_counts_them_all(
    store: Path,
) -> None:
    version = _statefuse(store, "version").stdout.split()[-1]
    ask = ("--json", "context", "--query", "status", "--at", version)  # the whole memory
    data = json.loads(_statefuse(store, *ask).stdout)
    counts = data["omitted_counts"]
    assert sum(counts.values()) > 100
    assert all(len(ids) == min(20, counts[h]) for h, ids in data["omitted"].items())
    assert data["omitted_left_out"] == sum(max(0, n - 20) for n in counts.values())
    every = json.loads(_statefuse(store, *ask, "--limit", "1000").stdout)
    assert {h: len(ids) for h, ids in every["omitted"].items()} == counts
    assert every["omitted_left_out"] == 0
    assert data["text"] == every["text"]


def test_show_and_history_take_a_limit_and_say_what_they_left_out(store: Path) -> None:
    shown = _statefuse(store, "show", "ns1", "--limit", "3").stdout.splitlines()
    assert len(shown) == 1 + 3 + 1
    assert shown[-1] == "8 more claims not shown (11 in all; --all lists every one)."
    data = json.loads(_statefuse(store, "--json", "show", "ns1", "--limit", "3").stdout)
    assert (len(data["claims"]), data["more"]) == (3, 8)
    history = _statefuse(store, "history", "log/run/state", "--limit", "1").stdout.splitlines()
    assert history[0] == "2 earlier events not shown (3 in all; --all lists every one)."
    assert len(history) == 1 + 1 + 1 and "retract" in history[-1]  # the update's retraction
    asked = ("--json", "history", "log/run/state", "--limit", "1")
    data = json.loads(_statefuse(store, *asked).stdout)
    assert (len(data["events"]), data["more"]) == (1, 2)


def test_the_mcp_conflicts_and_history_tools_take_a_limit_and_say_what_they_left_out(
    store: Path,
) -> None:
    pytest.importorskip("mcp")
    from statefuse.entry.mcp import build_server
    from tests.test_mcp import connected

    rep = Replica.open(store)
    try:
        with connected(build_server(rep)) as session:
            first = session.ok("conflicts")
            assert (len(first["conflicts"]), first["total"], first["left_out"]) == (20, 25, 5)
            text = session.text("conflicts")
            assert text.splitlines()[0] == (
                "25 conflicts undecided, 20 shown (5 left out: pass a larger limit or a prefix)"
            )
            every = session.ok("conflicts", limit=100)
            assert (len(every["conflicts"]), every["left_out"]) == (25, 0)
            latest = session.ok("history", key="log/run/state", limit=1)
            assert latest["left_out"] == 2
            assert [e["event"] for e in latest["events"]] == ["retract"]
            assert session.text("history", key="log/run/state", limit=1).splitlines()[0] == (
                "3 events for log/run/state, the latest 1 shown (2 earlier left out)"
            )
    finally:
        rep.close()


def test_quarantine_takes_a_limit_and_says_what_it_left_out(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    rep = Replica.open(path, create=True, space=SPACE)
    assert rep.receive([bytes([i]) * 40 for i in range(5)]).quarantined == 5
    rep.close()
    listed = _statefuse(path, "quarantine", "--limit", "2").stdout.splitlines()
    assert len(listed) == 1 + 2 + 1
    assert listed[-1] == "3 more entries not shown (5 in all; --all lists every one)."
    data = json.loads(_statefuse(path, "--json", "quarantine", "--limit", "2").stdout)
    assert (len(data["quarantine"]), data["more"]) == (2, 3)
    assert len(json.loads(_statefuse(path, "--json", "quarantine").stdout)["quarantine"]) == 5


def test_the_listing_commands_stop_at_a_hundred_rows_unless_asked_for_all(store: Path) -> None:
    # more than a hundred active claims and 25 conflicts: show stops at the default, --all
    # lists them, and both at once is an error
    data = json.loads(_statefuse(store, "--json", "show").stdout)
    every = json.loads(_statefuse(store, "--json", "show", "--all").stdout)
    assert len(every["claims"]) > 100 and every["more"] == 0
    assert (len(data["claims"]), data["more"]) == (100, len(every["claims"]) - 100)
    assert data["claims"] == every["claims"][:100]
    text = _statefuse(store, "show").stdout.splitlines()
    total = len(every["claims"])
    left = f"{total - 100} more claims not shown ({total} in all; --all lists every one)."
    assert text[-1] == left
    conflicts = json.loads(_statefuse(store, "--json", "conflicts", "--all").stdout)
    assert len(conflicts["conflicts"]) == 25 and conflicts["more"] == 0
    env = {k: v for k, v in os.environ.items() if k != "STATEFUSE_STORE"}
    both = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), "show", "--all", "--limit", "5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert both.returncode != 0 and both.stderr.startswith("Error: ")
    assert "--all" in both.stderr and len(both.stderr.strip().splitlines()) == 1
