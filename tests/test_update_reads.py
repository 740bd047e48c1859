"""Reads after many updates: the work of a read does not grow with the number of updates.

Each update (`Replica.update`, a LangGraph ``put`` over a key, a delete) adds a retraction; a
read after a write used to rebuild the index of retracted values over all of them, and the
LangGraph store's next write copied the whole materialized index because it still held the
State it had read. These tests count, never time: the Python calls one step makes (a profile
hook sees every call, C calls included, so a sort by key or a walk over every retraction shows
up) and the index copies, after few and after many updates of one key.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Writer, materialize
from statefuse import index as index_module
from statefuse.reading.lens import Lens
from statefuse.sync.replica import Replica

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI must run it: a missing langgraph fails loudly
else:
    pytest.importorskip("langgraph")

from statefuse.entry.langgraph import StateFuseStore

FEW, MANY = 150, 600
LENS = Lens(roles=("ops",), session="s1", now=1_000)


@contextmanager
def counted() -> Iterator[dict[str, int]]:
    """Counts Python and C function calls, and copies of a materialized index, inside."""
    out = {"calls": 0, "copies": 0}
    copy = index_module.Index.copy

    def counting_copy(self: index_module.Index) -> index_module.Index:
        out["copies"] += 1
        return copy(self)

    def hook(frame: object, event: str, arg: object) -> None:
        if event in ("call", "c_call"):
            out["calls"] += 1

    index_module.Index.copy = counting_copy  # type: ignore[method-assign]
    collecting = gc.isenabled()
    gc.disable()  # a collection runs whatever callbacks other code registered: not the step's work
    sys.setprofile(hook)
    try:
        yield out
    finally:
        sys.setprofile(None)
        if collecting:
            gc.enable()
        index_module.Index.copy = copy  # type: ignore[method-assign]


def work_of(step: Callable[[int], object]) -> dict[str, int]:
    for i in range(3):  # warm: caches, the first State's derived data
        step(-1 - i)
    with counted() as out:
        step(0)
    return out


def store_after(updates: int, make: Callable[[], StateFuseStore]) -> StateFuseStore:
    store = make()
    store.batch([])
    for i in range(20):
        store.put(("users", "u1"), f"other{i}", {"text": f"item {i}"})
    for i in range(updates):
        store.put(("users", "u1"), "k", {"text": f"value number {i}", "n": i})
    return store


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_put_and_get_of_one_key_do_the_same_work_after_many_updates_as_after_few(backend, tmp_path):
    def make(n: int) -> Callable[[], StateFuseStore]:
        if backend == "memory":
            return lambda: StateFuseStore.memory(space="lg")
        return lambda: StateFuseStore.open(tmp_path / f"{n}.db", create=True, space="lg")

    work = []
    for n in (FEW, MANY):
        store = store_after(n, make(n))

        def step(i: int, store: StateFuseStore = store) -> None:
            store.put(("users", "u1"), "k", {"text": f"another {i}"})
            assert store.get(("users", "u1"), "k") is not None

        work.append(work_of(step))
        store.close()
    few, many = work
    assert few["copies"] == many["copies"] == 0
    assert many["calls"] == few["calls"]


def test_a_delete_then_get_copies_no_index_and_does_the_same_work_after_many_updates():
    work = []
    for n in (FEW, MANY):
        store = store_after(n, lambda: StateFuseStore.memory(space="lg"))

        def step(i: int, store: StateFuseStore = store) -> None:
            store.put(("users", "u1"), "k", {"text": f"another {i}"})
            store.delete(("users", "u1"), "k")
            assert store.get(("users", "u1"), "k") is None

        work.append(work_of(step))
    few, many = work
    assert few["copies"] == many["copies"] == 0
    assert many["calls"] == few["calls"]


def test_update_then_a_context_that_scrubs_turns_does_the_same_work_after_many_updates():
    work = []
    for n in (FEW, MANY):
        rep = Replica.memory(space="ctx")
        rep.add_turn("user", "the budget was value number 3, then value number 7", session="s1")
        for i in range(n):
            rep.update("fact", "budget", "value", f"value number {i}")

        def step(i: int, rep: Replica = rep, n: int = n) -> None:
            rep.update("fact", "budget", "value", f"value number {n + i + 10}")
            ctx = rep.context("budget", lens=LENS, budget=500)
            assert "[corrected" in ctx.text  # the turn's old values are scrubbed

        work.append(work_of(step))
    few, many = work
    assert few["copies"] == many["copies"] == 0
    assert many["calls"] == few["calls"]


@settings(max_examples=min(settings.default.max_examples, 200), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("claim"), st.sampled_from("abc"), st.sampled_from("xyz")),
            st.tuples(st.just("retract"), st.integers(0, 30), st.booleans()),
        ),
        max_size=30,
    ),
    st.randoms(use_true_random=False),
)
def test_what_a_retraction_retracts_read_from_the_index_equals_the_map_of_every_one(program, rng):
    w = Writer("a", clock=lambda: 0)
    ops: list = []
    claims = []
    for s in program:
        if s[0] == "claim":
            c = w.claim("fact", s[1], "value", s[2])
            claims.append(c)
            ops.append(c)
        elif claims:
            c = claims[s[1] % len(claims)]
            ops.append(w.retract(claim_ref=c.claim_ref) if s[2] else w.retract(claim_id=c.op_id))
    rng.shuffle(ops)  # a retraction may come before the claims it names
    state = materialize(ops)
    for r in state.retractions.values():
        expected = tuple(cid for cid, rets in state.retracted.items() if r in rets)
        assert state.retracted_by(r) == expected
