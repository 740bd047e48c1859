"""The agent loop's one-call path (`Replica.context`) carries caches from one State to the next;
after any sequence of writes (facts, identity, constraints, turns, signals, questions, claims
that depend on others, restricted claims, multi-valued ones), updates, retractions, decisions,
receives from forks and revocations its Context equals the one a fresh `materialize` +
`context_for` gives, text and JSON byte for byte."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, context_for, materialize
from statefuse.registry import Cardinality, PredicateContract, Registry
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

REGISTRY = Registry([PredicateContract("tags", cardinality=Cardinality.MANY)])

SUBJECTS = ["acme", "globex", "initech"]
PREDICATES = ["price", "status", "owner", "tags"]
VALUES = ["USD 100", "usd 100", "open", "closed", "Dana", "dana", 5, 5.0]
LENSES = [Lens(roles=("planner",)), Lens(task="t1"), Lens(session="s1", now=50)]
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
    st.tuples(st.just("depends"), st.sampled_from(SUBJECTS), st.integers(0, 30)),
    st.tuples(st.just("restricted"), st.sampled_from(SUBJECTS), st.sampled_from(VALUES)),
    st.tuples(st.just("identity"), st.sampled_from(VALUES)),
    st.tuples(st.just("constraint"), st.sampled_from(SUBJECTS), st.sampled_from(VALUES)),
    st.tuples(st.just("turn"), st.sampled_from(VALUES)),
    st.tuples(st.just("signal"), st.sampled_from(VALUES), st.sampled_from([None, 10, 100])),
    st.tuples(st.just("question"), st.sampled_from(SUBJECTS), st.sampled_from(PREDICATES)),
    st.tuples(st.just("fork"), st.sampled_from(SUBJECTS), st.sampled_from(VALUES)),
    st.tuples(st.just("unbase"), st.booleans()),
    st.just(("revoke",)),
)


@settings(max_examples=120, deadline=None)
@given(
    st.lists(action, min_size=1, max_size=20),
    st.sampled_from(QUERIES),
    st.integers(40, 400),
    st.booleans(),
)
def test_the_replica_context_after_each_step_equals_a_fresh_one(program, query, budget, kept_every):
    root = SigningKey.generate()
    rep = Replica.memory(space="loop", key=root, mode="closed", root=root.author, registry=REGISTRY)
    peer = rep.fork()
    rep.admit(peer.author)
    bases: list = []
    kept: list = []
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
        elif kind == "decide":
            conflicts = rep.state().conflicts
            if conflicts:
                conflict = conflicts[step[1] % len(conflicts)]
                rep.decide(conflict, conflict.candidates[0])
        elif kind == "depends":
            active = rep.state().active_claims()
            if active:
                basis = active[step[2] % len(active)]
                rep.add_claim("plan", step[1], "cost", "derived", depends_on=(basis.claim_id,))
                bases.append(basis)
        elif kind == "unbase":  # withdraw what a derived claim depends on: it goes stale
            if bases and rep.state().is_active(bases[-1].claim_id):
                basis = bases.pop()
                if step[1] and basis.author == rep.author:  # corrected: the fact replacing it
                    rep.update(basis.namespace, basis.subject, basis.predicate, "corrected")
                else:
                    rep.retract(basis)
        elif kind == "restricted":
            rep.add_claim("vendor", step[1], "secret", step[2], visibility=("auditor",))
        elif kind == "identity":
            rep.add_identity("agent", "role", step[1])
        elif kind == "constraint":
            rep.add_constraint("vendor", step[1], "budget", step[2])
        elif kind == "turn":
            rep.add_turn("user", str(step[1]), session="s1")
        elif kind == "signal":
            rep.add_signal("system", "load", step[1], expires=step[2])
        elif kind == "question":
            rep.add_question("vendor", step[1], step[2], f"what is the {step[2]}?")
        elif kind == "fork":
            branch = rep.fork()
            rep.admit(branch.author)
            branch.add_claim("vendor", step[1], "status", step[2])
            rep.merge(branch)
        else:
            rep.revoke(peer.author)
        fresh = materialize(rep.log.ops(), registry=rep.registry)
        for lens in LENSES:
            got = rep.context(query, lens=lens, budget=budget)
            want = context_for(fresh, lens, budget=budget, query=query)
            assert got.text == want.text
            if kept_every and lens is LENSES[0]:  # expanded only at the end (expand caches)
                kept.append((got, want.to_json()))
            else:
                assert got.to_json() == want.to_json()
    # a Context kept while the replica went on still expands its handles to what it left out
    for ctx, then in kept:
        assert ctx.to_json() == then
