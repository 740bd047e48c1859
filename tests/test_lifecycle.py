"""A conflict's lifecycle (SEMANTICS §6): opened, decided with its outcome, deferred, reopened
and why, closed; derived from the op-set alone, the same whatever order the ops arrived in.
Stories through the command line (real processes) and MCP (the SDK's client): a ``preserve``
decision made on one replica, seen by a second after sync."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Writer, materialize
from statefuse.core.lifecycle import LifecycleEvent
from statefuse.core.materializer import Materializer
from statefuse.core.op import Outcome
from statefuse.core.state import locus_of
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.view import How
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
KEY = ("shop", "acme", "hours")
LOCUS = locus_of(*KEY, "global")
SPACE = "team"


def w(name: str) -> Writer:
    return Writer(name, clock=lambda: 0)


def kinds(events):
    return [(e.event.value, e.outcome.value if e.outcome else None, e.reason) for e in events]


def test_a_conflicts_lifecycle_reads_opened_decided_reopened_and_closed():
    a, b, p = w("a"), w("b"), w("planner")
    london = a.claim(*KEY, "9-17")
    paris = b.claim(*KEY, "10-18")
    s = materialize([london, paris])
    p.observe([london, paris])
    chose = p.decide_on(s.conflicts[0], london.claim_id, state=s, reason="HQ hours")
    b.observe([chose])
    tokyo = b.claim(*KEY, "8-16")
    s2 = materialize([london, paris, chose, tokyo])
    p.observe([tokyo])
    kept = p.decide_on(s2.conflicts[0], outcome="preserve", state=s2, reason="per city")
    b.observe([kept])
    gone = b.retract(claim_id=tokyo.claim_id)
    a.observe([gone])
    gone2 = a.retract(claim_id=paris.claim_id)
    ops = [london, paris, chose, tokyo, kept, gone, gone2]
    state = materialize(ops)
    assert kinds(state.conflict_history(LOCUS)) == [
        ("opened", None, ""),
        ("decided", "select", "HQ hours"),
        ("reopened", "select", "new value"),
        ("decided", "preserve", "per city"),
        ("reopened", "preserve", "kept value lost"),
        ("closed", None, "candidates retracted"),
    ]
    events = state.conflict_history(LOCUS)
    assert [e.values for e in events] == [2, 2, 3, 3, 2, 1]
    assert events[1].author == "planner" and events[1].decision_id == chose.op_id
    assert [e.lamport for e in events] == sorted(e.lamport for e in events)


def test_a_deferred_conflict_reads_deferred_then_decided():
    a, b, p = w("a"), w("b"), w("planner")
    ops = [a.claim(*KEY, "9-17"), b.claim(*KEY, "10-18")]
    s = materialize(ops)
    p.observe(ops)
    d1 = p.decide_on(s.conflicts[0], outcome="defer", state=s, reason="ask the owner")
    d2 = p.decide_on(s.conflicts[0], ops[1].claim_id, state=s, reason="the owner said")
    events = materialize([*ops, d1, d2]).conflict_history(LOCUS)
    assert [e.event for e in events] == [
        LifecycleEvent.OPENED,
        LifecycleEvent.DEFERRED,
        LifecycleEvent.DECIDED,
    ]
    assert events[1].reason == "ask the owner" and events[1].outcome is Outcome.DEFER


def test_a_locus_no_claim_is_at_has_no_history():
    assert materialize([w("a").claim("x", "y", "z", 1)]).conflict_history(LOCUS) == []


# --- the same history whatever the arrival order -------------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.sampled_from("abc"), st.sampled_from(("1", "2", "3"))),
        st.tuples(st.just("retract"), st.integers(0, 30)),
        st.tuples(st.just("decide"), st.sampled_from(list(Outcome)), st.integers(0, 30)),
    ),
    min_size=2,
    max_size=10,
)


@settings(max_examples=60, deadline=None)
@given(steps=steps, seed=st.randoms(use_true_random=False))
def test_the_lifecycle_is_the_same_whatever_order_the_ops_arrive_in(steps, seed):
    writers = {n: w(n) for n in "abcp"}
    ops: list = []
    claims: list = []
    for step in steps:
        if step[0] == "claim":
            c = writers[step[1]].claim(*KEY, step[2])
            claims.append(c)
            ops.append(c)
        elif step[0] == "retract" and claims:
            ops.append(writers["a"].retract(claim_id=claims[step[1] % len(claims)].claim_id))
        elif step[0] == "decide":
            state = materialize(ops)
            conflict = state.conflict_at(LOCUS)
            if conflict is None:
                continue
            outcome = step[1]
            if outcome is Outcome.MERGE:
                continue  # needs a claim of the decider; select covers what merge decides
            pick = conflict.candidates[step[2] % len(conflict.candidates)]
            ops.append(
                writers["p"].decide_on(
                    conflict,
                    pick if outcome.selects else None,
                    state=state,
                    outcome=outcome,
                    reason="r",
                )
            )
        for wr in writers.values():
            wr.observe(ops[-1:])
    expected = materialize(ops).conflict_history(LOCUS)
    shuffled = list(ops)
    seed.shuffle(shuffled)
    mat = Materializer()
    for op in shuffled:
        mat.apply(op)
    assert mat.state().conflict_history(LOCUS) == expected


# --- stories through the command line and MCP ----------------------------------------------------


def _statefuse(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
        cwd=ROOT,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _ok(store: Path, *argv: str) -> str:
    done = _statefuse(store, *argv)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def test_a_preserve_decision_made_on_one_store_is_seen_by_another_after_sync(tmp_path):
    london, paris = tmp_path / "london.db", tmp_path / "paris.db"
    for store in (london, paris):
        _ok(store, "init", "--space", SPACE)
    _ok(london, "claim", "shop/acme/hours", "9-17", "--string")
    _ok(paris, "claim", "shop/acme/hours", "10-18", "--string")
    _ok(paris, "export", str(tmp_path / "paris.bundle"))
    _ok(london, "import", str(tmp_path / "paris.bundle"))
    [conflict] = json.loads(_ok(london, "--json", "conflicts"))["conflicts"]
    some = conflict["candidates"][0]["claim_id"]
    refused = _statefuse(london, "decide", some, "--outcome", "defer")
    assert refused.returncode != 0 and "needs --reason" in refused.stderr
    out = _ok(london, "decide", some, "--outcome", "preserve", "--reason", "per city")
    assert out.startswith("Preserved shop/acme/hours [global]")
    _ok(london, "export", str(tmp_path / "london.bundle"))
    _ok(paris, "import", str(tmp_path / "london.bundle"))
    # the second store sees the conflict settled with both values kept
    [seen] = json.loads(_ok(paris, "--json", "conflicts"))["conflicts"]
    assert seen["decision"]["outcome"] == "preserve"
    assert seen["decision"]["made_at"] and seen["decision"]["made_at"].startswith("v1:")
    assert "preserved: every value accepted (per city)" in _ok(paris, "conflicts")
    context = _ok(paris, "context", "--query", "acme hours")
    assert "UNRESOLVED" not in context
    assert context.count("accepted alternative, preserved by decision") == 2
    history = json.loads(_ok(paris, "--json", "conflicts", "--history", "shop/acme/hours"))
    assert [(e["event"], e["outcome"]) for e in history["events"]] == [
        ("opened", None),
        ("decided", "preserve"),
    ]
    by_locus = _ok(paris, "conflicts", "--history", conflict["locus"])
    assert "decided" in by_locus and "preserve" in by_locus and "per city" in by_locus
    bad = _statefuse(paris, "conflicts", "--history", "nothex")
    assert bad.returncode != 0 and bad.stderr.startswith("Error: --history takes a KEY")


def test_a_preserve_decision_through_mcp_is_seen_by_a_second_replica(tmp_path):
    from test_mcp import connected

    from statefuse.entry.mcp import build_server

    first = Replica.open(tmp_path / "first.db", space=SPACE, create=True)
    second = Replica.open(tmp_path / "second.db", space=SPACE, create=True)
    try:
        first.add_claim(*KEY, "9-17")
        second.add_claim(*KEY, "10-18")
        first.merge(second)
        with connected(build_server(first)) as s:
            decided = s.ok("decide", key="shop/acme/hours", outcome="preserve", reason="per city")
            assert decided["outcome"] == "preserve" and decided["value"] is None
            assert s.ok("conflicts")["total"] == 0  # settled: not listed as undecided
        second.merge(first)
        view = project(second.state(), Lens())
        assert view.selected[KEY].how is How.PRESERVED
        with connected(build_server(second)) as s:
            [info] = s.ok("conflicts", include_decided=True)["conflicts"]
            assert info["decision"]["outcome"] == "preserve"
            lifecycle = s.ok("conflict_history", key="shop/acme/hours")
            assert [(e["event"], e["outcome"]) for e in lifecycle["events"]] == [
                ("opened", None),
                ("decided", "preserve"),
            ]
            deferred = s.ok("decide", key="shop/acme/hours", outcome="defer", reason="re-check")
            assert deferred["outcome"] == "defer"
            assert s.ok("conflicts")["total"] == 1  # a defer leaves it open
            refused = s.call("decide", key="shop/acme/hours", outcome="merge")
            assert refused.is_error
    finally:
        first.close()
        second.close()


def test_show_notes_a_preserved_and_a_deferred_conflict(tmp_path):
    store = tmp_path / "m.db"
    _ok(store, "init", "--space", SPACE)
    _ok(store, "claim", "shop/acme/hours", "9-17", "--string")
    _ok(store, "claim", "shop/acme/hours", "10-18", "--string")
    some = json.loads(_ok(store, "--json", "show"))["claims"][0]["claim_id"]
    _ok(store, "decide", some, "--outcome", "preserve")
    assert [c["notes"] for c in json.loads(_ok(store, "--json", "show"))["claims"]] == [
        ["preserved"],
        ["preserved"],
    ]
    _ok(store, "decide", some, "--outcome", "defer", "--reason", "ask the owner")
    notes = [c["notes"] for c in json.loads(_ok(store, "--json", "show"))["claims"]]
    assert notes == [["conflict", "deferred"], ["conflict", "deferred"]]
    assert "deferred by" in _ok(store, "conflicts")


def test_recall_marks_a_merged_value_with_its_outcome(tmp_path):
    from test_mcp import connected

    from statefuse.entry.mcp import build_server

    r = Replica.open(tmp_path / "r.db", space=SPACE, create=True)
    other = Replica.memory(space=SPACE)
    try:
        a = r.add_claim(*KEY, "9-17")
        b = other.add_claim(*KEY, "10-18")
        r.merge(other)
        merged = r.add_claim(*KEY, "9-18", depends_on=[a.claim_id, b.claim_id])
        [conflict] = r.state().conflicts
        r.decide(conflict, merged, outcome="merge", reason="both shifts")
        with connected(build_server(r)) as s:
            recalled = s.ok("recall", query="acme hours")
        [mark] = recalled["contested"]
        assert mark["outcome"] == "merge" and mark["claim_id"] == merged.claim_id.hex()
        assert "merged from 2 other values" in recalled["text"]
    finally:
        r.close()
