"""Known time (SEMANTICS §9): decisions and contexts record the version they were made at, and a
time names the changes this replica had received by then (a local fact)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from statefuse.sync.replica import Replica
from statefuse.sync.version import Version, VersionError, decision_version, parse_time

ROOT = Path(__file__).resolve().parents[1]
KEY = ("ops", "api", "rate_limit")
SPACE = "ops"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat()


# --- decisions and contexts record the version they were made at --------------------------------


def test_state_at_a_decisions_recorded_version_is_what_the_decider_saw_on_every_replica():
    a, b = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    a.add_claim(*KEY, 1000)
    b.add_claim(*KEY, 2000)
    a.merge(b)
    seen, before = a.state(), a.version()
    [conflict] = seen.conflicts
    d = a.decide(conflict, outcome="preserve", reason="per region")
    made_at = decision_version(d)
    assert made_at == before and made_at < a.version()
    a.add_claim(*KEY, 3000)  # later: the memory moves on
    assert a.state(at=made_at).digest() == seen.digest()
    then = a.state(at=made_at).conflict_at(conflict.locus)
    assert then is not None and {g.group_id for g in then.groups} == set(d.groups)
    b.merge(a)
    assert b.state(at=made_at).digest() == seen.digest()  # one answer wherever it is held
    # a plain select keeps the encoding the previous release reads, unless asked
    plain = a.decide(a.state().conflicts[0], a.state().conflicts[0].candidates[0])
    assert decision_version(plain) is None and plain.to_value()["v"] == 2
    recorded = a.decide(
        a.state().conflicts[0], a.state().conflicts[0].candidates[0], record_version=True
    )
    assert decision_version(recorded) is not None and recorded.to_value()["v"] == 3


def test_a_context_records_the_version_it_was_read_from():
    r = Replica.memory(space=SPACE)
    r.add_claim(*KEY, 1000)
    ctx = r.context("rate limit", record_version=True)
    assert ctx.made_at == str(r.version())
    assert json.loads(ctx.to_json())["made_at"] == ctx.made_at
    assert r.context("rate limit").made_at is None
    r.add_claim(*KEY, 2000)
    then = r.context("rate limit", at=Version.parse(ctx.made_at))
    assert then.text == ctx.text


# --- a time: the changes received by then --------------------------------------------------------


def test_a_time_names_the_changes_this_replica_had_received_by_then():
    now = [1_000]
    r = Replica.memory(space=SPACE, clock=lambda: now[0])
    r.add_claim(*KEY, 1000)
    now[0] = 2_000
    r.add_claim("ops", "api", "owner", "dana")
    peer = Replica.memory(space=SPACE)
    peer.add_claim(*KEY, 2000)
    now[0] = 3_000
    r.merge(peer)
    assert r.version_received_by(500) == Version()
    first = r.version_received_by(1_500)
    assert [repr(c.value) for c in r.state(at=first).active_claims()] == ["1000"]
    assert len(r.state(at=r.version_received_by(2_999)).active_claims()) == 2
    assert r.version_received_by(3_000) == r.version()
    assert r.version_received_by("1970-01-01T00:00:01.500Z") == first
    # local: the peer received its own change at another time, and never the others
    assert peer.version_received_by(3_000) != r.version_received_by(3_000)


def test_a_zoneless_or_unreadable_time_is_refused_naming_the_field():
    with pytest.raises(VersionError) as e:
        parse_time("2026-11-27T10:00:00", field="--at")
    assert (e.value.field, e.value.rule) == ("--at", "time-zone")
    with pytest.raises(VersionError) as e:
        parse_time("2026-13-45", field="--at")
    assert e.value.rule == "time"
    assert parse_time("2026-11-27") == parse_time("2026-11-27T00:00:00+00:00")
    assert parse_time("1970-01-01T00:00:00.001Z") == 1


def _statefuse(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        cwd=ROOT,
    )


def _ok(store: Path, *argv: str) -> str:
    done = _statefuse(store, *argv)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def test_at_a_time_reads_what_this_store_had_received_by_then(tmp_path):
    store = tmp_path / "m.db"
    _ok(store, "init", "--space", SPACE)
    _ok(store, "claim", "ops/api/rate_limit", "1000")
    db = sqlite3.connect(store)
    [(first_ms,)] = db.execute("SELECT ms FROM received").fetchall()
    db.close()
    old = json.loads(_ok(store, "--json", "show"))["claims"][0]["claim_id"]
    _ok(store, "supersede", old, "2000")
    then = json.loads(_ok(store, "--json", "show", "--at", _iso(first_ms)))
    assert [c["value"] for c in then["claims"]] == [1000]
    now = json.loads(_ok(store, "--json", "show", "--at", "2999-01-01T00:00:00Z"))
    assert [c["value"] for c in now["claims"]] == [2000]
    assert _ok(store, "show", "--at", "2000-01-01") == "No active claims.\n"
    ctx = json.loads(_ok(store, "--json", "context", "--query", "rate limit"))
    assert ctx["made_at"] == _ok(store, "version").strip()


def test_a_store_written_before_receive_marks_reads_and_gains_them(tmp_path):
    store = tmp_path / "m.db"
    with Replica.open(store, space=SPACE, create=True) as r:
        r.add_claim(*KEY, 1000)
    db = sqlite3.connect(store)
    db.execute("DROP TABLE received")  # as the previous release left it
    db.commit()
    db.close()
    with Replica.open(store) as r:
        assert r.store.received_marks() == []
        assert r.version_received_by(parse_time("2999-01-01T00:00:00Z")) == Version()
        r.add_claim("ops", "api", "owner", "dana")
        assert len(r.store.received_marks()) == 1
        # the change without a mark counts as received with the first mark after it
        assert r.version_received_by(parse_time("2999-01-01T00:00:00Z")) == r.version()
