"""``statefuse version``, ``statefuse diff`` and ``--at`` on read commands, through real
processes on a store in a temp dir: a point-in-time question ("what did memory say before the
limit changed?") answered from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statefuse.sync.replica import Replica
from statefuse.sync.version import Version


def _run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STATEFUSE_STORE": str(cwd / "m.db")}
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(cwd: Path, *argv: str) -> str:
    done = _run(cwd, *argv)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


@pytest.fixture
def story(tmp_path: Path) -> tuple[Path, str, str, str]:
    """A limit of 1000, the version then, a correction to 2000, the version now."""
    _ok(tmp_path, "init", "--space", "ops")
    _ok(tmp_path, "claim", "ops/api/rate_limit", "1000")
    before = _ok(tmp_path, "version").strip()
    with Replica.open(tmp_path / "m.db") as r:
        (old,) = r.state().active_claims()
    _ok(tmp_path, "supersede", old.claim_id.hex(), "2000")
    after = _ok(tmp_path, "version").strip()
    return tmp_path, before, after, old.claim_id.hex()


def test_version_prints_the_replica_version_which_reads_back(story):
    cwd, before, after, _ = story
    with Replica.open(cwd / "m.db") as r:
        assert Version.parse(after) == r.version()
        assert Version.parse(before) < r.version()
    doc = json.loads(_ok(cwd, "version", "--json"))
    assert doc["version"] == after
    assert Version.from_json(doc) == Version.parse(after)


def test_show_at_an_earlier_version_shows_what_memory_said_then(story):
    cwd, before, after, old = story
    then = _ok(cwd, "show", "--at", before)
    assert "1000" in then and "2000" not in then and old[:12] in then
    now = _ok(cwd, "show")
    assert _ok(cwd, "show", "--at", after) == now
    assert "2000" in now and "1000" not in now
    history = _ok(cwd, "history", "ops/api/rate_limit", "--at", before)
    assert history.count("\n") == 2 and "1000" in history  # the header and the one claim
    assert _ok(cwd, "conflicts", "--at", before) == "No conflicts.\n"
    context = _ok(cwd, "context", "--query", "rate limit", "--at", before)
    assert "1000" in context and "2000" not in context
    doc = json.loads(_ok(cwd, "context", "--query", "rate limit", "--at", before, "--json"))
    assert doc["at"] == before


def test_diff_prints_one_line_per_change_and_json(story):
    cwd, before, after, old = story
    lines = _ok(cwd, "diff", before).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("+ claim ") and lines[0].endswith("ops/api/rate_limit = 2000")
    assert lines[1].startswith(f"x retracted {old[:12]} ops/api/rate_limit = 1000 by ")
    assert _ok(cwd, "diff", before, after).splitlines() == lines
    doc = json.loads(_ok(cwd, "diff", before, "--json"))
    assert doc["from"] == before and doc["to"] == after
    assert [c["value"] for c in doc["added"]] == [2000]
    assert [c["claim_id"] for c in doc["retracted"]] == [old]
    back = _ok(cwd, "diff", after, before).splitlines()
    assert [x.split()[0] for x in back] == ["-", "~"]
    assert _ok(cwd, "diff", after) == "No changes.\n"


def test_at_refuses_a_zoneless_time_a_bad_version_and_a_version_of_changes_it_lacks(
    story, tmp_path
):
    cwd, _, _, _ = story
    done = _run(cwd, "show", "--at", "2026-11-27T10:00:00")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("Error: --at: ") and "no time zone" in done.stderr
    done = _run(cwd, "show", "--at", "v1:nothex")
    assert done.returncode == 1 and done.stderr.startswith("Error: --at: ")
    assert done.stderr.count("\n") == 1
    other = tmp_path / "other"
    other.mkdir()
    _ok(other, "init", "--space", "ops")
    _ok(other, "claim", "ops/api/rate_limit", "5")
    foreign = _ok(other, "version").strip()
    for argv, field in ((("show", "--at", foreign), "at"), (("diff", foreign), "before")):
        done = _run(cwd, *argv)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.startswith(f"Error: {field}: this replica lacks 1 change(s)")
        assert Version.parse(foreign).authors()[0].hex()[:12] in done.stderr
        assert "Traceback" not in done.stderr
