"""Smoke test of the agent-loop benchmark (`benchmarks/agent_loop.py`) at a tiny size: the
workload has the shape its docstring promises, a measured step really writes a claim and reads
a context that holds it (and a context that does not is caught), and a run prints every row
and writes the JSON the README describes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# `benchmarks` is a folder of the checkout, not an installed package: importable when pytest
# runs from the root as `python -m pytest`, not always as a bare `pytest`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import agent_loop as al  # noqa: E402
from statefuse import ContextCache, Lens, context_for  # noqa: E402
from statefuse.sync.replica import Replica  # noqa: E402

SEED = 7


def _loaded(n: int, steps: int) -> tuple[Replica, al.Plan, al.PeerFeed, al.Loaded]:
    plan = al.Plan.make(n, seed=SEED, batch=100, steps=2 * steps)
    feed = al.peer_feed(plan, steps)
    rep = Replica.memory(space=al.SPACE, key=al._key(b"main", SEED), clock=al._Clock())
    return rep, plan, feed, al.load(rep, plan, feed, lambda _: None)


def test_the_workload_has_ten_percent_conflicting_keys_and_ten_percent_retracted_claims() -> None:
    rep, plan, _, loaded = _loaded(1_100, 2)
    state = rep.state()
    assert loaded.claims + loaded.peer_claims == 1_100
    assert len(state.conflicts) == plan.conflicting == 100
    for conflict in state.conflicts:  # two authors, two values
        candidates = [state.claims[cid] for cid in conflict.candidates]
        assert len({c.author for c in candidates}) == len(conflict.groups) == 2
    assert loaded.retractions == 110
    assert len(state.active_claims()) == 1_100 - 110
    assert len(state.claims) + len(state.retractions) == loaded.ops
    assert len({al.key_of(i) for i in range(plan.new_key_base + 64)}) == plan.new_key_base + 64


def test_a_measured_step_writes_a_claim_and_reads_a_context_that_holds_it() -> None:
    rep, plan, feed, _ = _loaded(300, 3)
    step = al.write_step(rep, plan, ContextCache())
    added, updated = step(0), step(1)
    state = rep.state()
    for result in (added, updated):
        claim = result.claim
        assert state.claims[claim.claim_id] == claim
        assert state.is_active(claim.claim_id)
        assert claim.claim_id in result.context.included
        assert claim.subject in result.context.text
        assert 0 < result.state_s <= result.context_s <= result.seconds
        al.check(rep, result)
    key = al.key_of(plan.update_keys[1])
    assert key == (updated.claim.namespace, updated.claim.subject, updated.claim.predicate)
    replaced = [c for c in state.claims.values() if (c.namespace, c.subject, c.predicate) == key]
    assert len(replaced) == 2
    assert sum(state.is_active(c.claim_id) for c in replaced) == 1

    received = al.receive_step(rep, feed, ContextCache())(0)
    assert rep.state().is_active(received.claim.claim_id)
    assert received.claim.author != rep.author
    al.check(rep, received)


def test_a_context_without_the_written_claim_fails_the_check() -> None:
    rep, plan, _, _ = _loaded(300, 3)
    result = al.write_step(rep, plan, ContextCache())(0)
    later = rep.add_claim("orders", "order_9999", "status", "open")
    stale = al.StepResult(1.0, 1.0, 0.0, later, result.context)
    with pytest.raises(RuntimeError, match="does not include"):
        al.check(rep, stale)
    elsewhere = Replica.memory(space=al.SPACE).add_claim("orders", "order_1", "status", "open")
    with pytest.raises(RuntimeError, match="not in the replica's state"):
        al.check(rep, al.StepResult(1.0, 1.0, 0.0, elsewhere, result.context))


def test_a_tiny_run_prints_every_row_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    argv = ["--sizes", "300,600", "--steps", "3", "--seed", str(SEED), "--batch", "100"]
    assert al.main([*argv, "--no-cli", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    for line in ("[300 claims]", "[600 claims]", "[cost follows what changed]", al.WRITE_ROW):
        assert line in table
    assert "replica after loading, plus one state() read" in table
    doc = json.loads(out.read_text())
    assert doc["options"]["sizes"] == [300, 600] and doc["options"]["steps"] == 3
    assert doc["machine"]["cpu_count"] and doc["sizes"]["600"]["digest"]
    rows = {(r["claims"], r["name"]): r for r in doc["rows"]}
    for n in (300, 600):
        assert doc["sizes"][str(n)]["conflicts"] == n // 11
        for name in (al.WRITE_ROW, "step: receive a 100-op change, then context_for"):
            row = rows[(n, name)]
            assert len(row["samples"]) == len(row["context_samples"]) == 3
            assert all(c <= s for c, s in zip(row["context_samples"], row["samples"], strict=True))
            assert row["target"] is None and row["target_met"] is None
    ratio = rows[(600, "step median at 600 / at 300")]
    step = rows[(600, al.WRITE_ROW)]["median"] / rows[(300, al.WRITE_ROW)]["median"]
    assert ratio["median"] == pytest.approx(step)
    memory, floor = (r for r in doc["rows"] if r["unit"] == "B/op")
    assert memory["claims"] == 600 and memory["bytes"] / memory["ops"] == memory["median"]
    assert 100 < memory["median"] < 100_000
    # the floor (the decoded ops alone) is part of what the replica holds
    assert (
        floor["name"] == "floor: the decoded ops alone" and 50 < floor["median"] < memory["median"]
    )
    for n in (300, 600):
        (rank,) = [
            r for r in doc["rows"] if r["claims"] == n and r["name"].startswith("floor: rank")
        ]
        # measured apart from the steps, so how the two compare is the machine's to say, not a
        # test's (under load either may come out slower)
        assert len(rank["samples"]) == 3 and all(s > 0 for s in rank["samples"])


def test_the_replica_context_row_appears_once_the_replica_has_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    def context(self: Replica, query: str, *, lens: Lens, budget: int) -> object:
        calls.append(query)
        return context_for(self.state(), lens, budget=budget, query=query)

    monkeypatch.setattr(Replica, al.CONTEXT_METHOD, context, raising=False)
    rows, _ = al.bench_size(
        300, seed=SEED, steps=3, batch=100, measure_memory=False, progress=lambda _: None
    )
    names = [r.name for r in rows]
    assert "step: add_claim / update, then Replica.context" in names
    assert len(calls) == 2 + 3


def test_the_cold_cli_rows_run_statefuse_in_new_processes(tmp_path: Path) -> None:
    rows = al.bench_cli(
        tmp_path, seed=SEED, sizes=(200, 300), runs=1, batch=100, progress=lambda _: None
    )
    assert [r.claims for r in rows] == [0, 200, 300, 300]
    assert [r.target for r in rows] == [None, al.TARGET_COLD_CONTEXT, al.TARGET_SHOW, None]
    assert rows[3].name.startswith("floor: statefuse show")  # no table: the store opened only
    assert rows[3].extra["stdout_bytes"] < rows[2].extra["stdout_bytes"]
    assert all(len(r.samples) == 1 and r.samples[0] > 0 for r in rows)
    assert all(r.extra["stdout_bytes"] > 0 for r in rows)
    table = al.format_table(rows, "title")
    assert "statefuse show" in table and "<= 0.5 s" in table
