"""The agent loop's one-call path (`Replica.context`) carries caches from one State to the next;
after any sequence of writes, updates, retractions, decisions and receives its Context equals
the one a fresh `materialize` + `context_for` gives, text and JSON byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, context_for, materialize
from sync.replica import Replica

SUBJECTS = ["acme", "globex", "initech"]
PREDICATES = ["price", "status", "owner"]
VALUES = ["USD 100", "usd 100", "open", "closed", "Dana", "dana", 5, 5.0]
LENSES = [Lens(roles=("planner",)), Lens(task="t1")]
QUERIES = ["price of acme", "who owns globex", "status"]

action = st.one_of(
    st.tuples(
        st.just("claim"),
        st.sampled_from(SUBJECTS),
        st.sampled_from(PREDICATES),
        st.sampled_from(VALUES),
        st.sampled_from(["global", "task:t1"]),
    ),
    st.tuples(
        st.just("update"),
        st.sampled_from(SUBJECTS),
        st.sampled_from(PREDICATES),
        st.sampled_from(VALUES),
        st.just("global"),
    ),
    st.tuples(
        st.just("peer"),
        st.sampled_from(SUBJECTS),
        st.sampled_from(PREDICATES),
        st.sampled_from(VALUES),
        st.just("global"),
    ),
    st.tuples(st.just("retract"), st.integers(0, 30)),
    st.tuples(st.just("decide"), st.integers(0, 30)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(action, min_size=1, max_size=12), st.sampled_from(QUERIES), st.integers(40, 400))
def test_the_replica_context_after_each_step_equals_a_fresh_one(program, query, budget):
    rep = Replica.memory(space="loop")
    peer = rep.fork()
    for step in program:
        kind = step[0]
        if kind in ("claim", "update", "peer"):
            _, subject, predicate, value, scope = step
            if kind == "claim":
                rep.add_claim("vendor", subject, predicate, value, scope=scope)
            elif kind == "update":
                rep.update("vendor", subject, predicate, value)
            else:
                peer.add_claim("vendor", subject, predicate, value)
                rep.merge(peer)
        elif kind == "retract":
            active = rep.state().active_claims()
            if active:
                rep.retract(active[step[1] % len(active)])
        else:
            conflicts = rep.state().conflicts
            if conflicts:
                conflict = conflicts[step[1] % len(conflicts)]
                rep.decide(conflict, conflict.candidates[0])
        fresh = materialize(rep.log.ops(), registry=rep.registry)
        for lens in LENSES:
            got = rep.context(query, lens=lens, budget=budget)
            want = context_for(fresh, lens, budget=budget, query=query)
            assert got.text == want.text
            assert got.to_json() == want.to_json()
