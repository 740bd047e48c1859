"""The demo story's outcomes, checked against the rules it illustrates (not against its text)."""

from __future__ import annotations

from statefuse.entry.demo import run


def test_the_demo_ends_with_one_explicit_deadline_conflict_and_agreeing_prices():
    lines: list[str] = []
    state = run(lines.append)
    deadline = [c for c in state.active_claims() if c.predicate == "deadline"]
    assert sorted(c.value for c in deadline) == ["2026-04-01", "2026-04-08"]
    [conflict] = state.conflicts
    assert conflict.key[2] == "deadline"
    prices = [c for c in state.active_claims() if c.predicate == "price"]
    assert sorted(c.value for c in prices) == ["$120.00", "USD 120"]  # one normal form: agree
    # the retracted value is active nowhere, though it was re-asserted after the retraction
    assert all(c.value != "2026-03-25" for c in state.active_claims())
    assert sum(1 for c in state.all_claims() if c.value == "2026-03-25") == 2
    # the forged price never entered the memory
    assert all(c.value != "USD 9" for c in state.all_claims())
    assert any("quarantine" in line and "bad-signature" in line for line in lines)
