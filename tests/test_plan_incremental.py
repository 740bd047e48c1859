"""The projection plan carries from one State to the next (issue 13): after any sequence of
writes, retractions and decisions, the plan a State derives from its predecessor's equals the
plan made from scratch, key order included (a bucket a write added keys to is sorted when
walked), and so does every View."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, materialize, project
from statefuse.core.materializer import Materializer
from statefuse.reading.projection import _plan, _plan_full
from statefuse.reading.resolver import Conservative
from statefuse.reading.view import Layered, _in_order
from statefuse.registry import Cardinality, PredicateContract, Registry
from statefuse.storage.writer import Writer

REG = Registry([PredicateContract("tags", cardinality=Cardinality.MANY)])
SUBJECTS = ["a", "b", "c"]
PREDICATES = ["price", "owner", "tags"]
SCOPES = ["global", "global", "task:t1", "session:s1"]
VALUES = ["x", "X", "y", 1, 1.0, "z"]

claim = st.fixed_dictionaries(
    {
        "subject": st.sampled_from(SUBJECTS),
        "predicate": st.sampled_from(PREDICATES),
        "value": st.sampled_from(VALUES),
        "scope": st.sampled_from(SCOPES),
        "visibility": st.sampled_from([(), (), ("planner",), ("auditor",)]),
        "expires": st.sampled_from([None, None, None, 5]),
    }
)
step = st.one_of(
    claim.map(lambda c: ("claim", c)),
    st.integers(0, 50).map(lambda i: ("retract", i)),
    st.integers(0, 50).map(lambda i: ("retract-ref", i)),
    st.integers(0, 50).map(lambda i: ("decide", i)),
)
batches = st.lists(st.lists(step, min_size=1, max_size=4), min_size=1, max_size=10)


def _plan_shape(plan: object) -> object:
    buckets = [
        (b.visibility, b.scope, list(_in_order(b.entries)), b.ids)
        for b in plan.buckets  # type: ignore[attr-defined]
    ]
    return buckets, plan.rest, plan.rest_keys  # type: ignore[attr-defined]


class _Run:
    """Applies a program's batches to one materializer, alternating two writers, as the
    property tests here generate them (decisions only on a current conflict's candidates)."""

    def __init__(self) -> None:
        self.writers = [Writer(n, registry=REG, clock=lambda: 0) for n in ("w1", "w2")]
        self.m = Materializer(registry=REG)
        self.claims: list = []
        self.ops: list = []

    def batch(self, i: int, batch: list) -> tuple[Materializer, list]:
        claims = self.claims
        for j, (kind, arg) in enumerate(batch):
            w = self.writers[(i + j) % 2]
            if kind == "claim":
                op = w.claim(
                    "ns",
                    arg["subject"],
                    arg["predicate"],
                    arg["value"],
                    scope=arg["scope"],
                    visibility=arg["visibility"],
                    expires=arg["expires"],
                )
                claims.append(op)
            elif not claims:
                continue
            elif kind == "retract":
                op = w.retract(claim_id=claims[arg % len(claims)].claim_id)
            elif kind == "retract-ref":
                op = w.retract(claim_ref=claims[arg % len(claims)].claim_ref)
            else:
                state = self.m.state()
                target = claims[arg % len(claims)]
                conflict = state.conflict_of(
                    target.namespace, target.subject, target.predicate, target.scope
                )
                if conflict is None or target.claim_id not in conflict.candidates:
                    continue
                op = w.decide_on(conflict, target.claim_id, state=state)
            self.ops.append(op)
            self.m.apply(op)
        return self.m, self.ops


@settings(max_examples=300, deadline=None)
@given(batches)
def test_a_plan_carried_over_equals_the_plan_made_from_scratch(program):
    run = _Run()
    lenses = [Lens(roles=("planner",), task="t1"), Lens(session="s1", now=10)]
    for i, batch in enumerate(program):
        m, ops = run.batch(i, batch)
        state = m.state()
        carried = state.derived(_plan)
        assert _plan_shape(carried) == _plan_shape(_plan_full(state))
        fresh = materialize(ops, registry=REG)
        for lens in lenses:
            got = project(state, lens, resolver=Conservative()).to_json()
            assert got == project(fresh, lens, resolver=Conservative()).to_json()


def test_a_view_of_the_next_state_reuses_the_selections_of_unchanged_keys_only():
    w = Writer("w", registry=REG, clock=lambda: 0)
    m = Materializer(registry=REG)
    for s in SUBJECTS:
        m.apply(w.claim("ns", s, "owner", f"owner of {s}"))
    lens = Lens()
    first = project(m.state(), lens)
    before = {k: first.selected[k] for k in first.selected}
    m.apply(w.claim("ns", "a", "owner", "someone else"))  # key a now conflicts
    m.apply(w.claim("ns", "d", "owner", "new"))
    second = project(m.state(), lens)
    for key in (("ns", "b", "owner"), ("ns", "c", "owner")):
        assert second.selected[key] is before[key]  # carried over, not made again
    assert ("ns", "a", "owner") not in second.selected  # a conflict now: unresolved
    assert second.selected[("ns", "d", "owner")].claim.value == "new"
    # each View keeps returning its own objects, however the two are read in turn
    assert first.selected[("ns", "a", "owner")] is before[("ns", "a", "owner")]
    assert second.selected[("ns", "b", "owner")] is second.selected[("ns", "b", "owner")]


CONSERVATIVE = Conservative()  # one instance: Views projected with it carry over


def _views(state, lenses) -> list[str]:
    return [
        project(state, lens, resolver=r).to_json() for lens in lenses for r in (None, CONSERVATIVE)
    ]


@settings(max_examples=150, deadline=None)
@given(batches)
def test_a_view_carried_from_the_state_before_equals_one_made_from_scratch(program):
    """A View is projected after every batch (so each one carries over from the one before:
    same lens and resolver, rest items of untouched keys reused) and equals, in JSON, the View
    of a fresh materialize of the same ops; the same State and lens give the very same View."""
    run = _Run()
    lenses = [Lens(), Lens(roles=("planner",), task="t1"), Lens(session="s1", now=10)]
    for i, batch in enumerate(program):
        m, ops = run.batch(i, batch)
        state = m.state()
        fresh = materialize(ops, registry=REG)
        assert _views(state, lenses) == _views(fresh, lenses)
        assert project(state, lenses[1]) is project(state, lenses[1])
        # the time moves between calls (claims here expire at 5): one memo entry per lens
        # carries over, only keys with a claim that expires are worked out again
        for now in (i % 9, 4, 6):
            timed = [Lens(roles=("planner",), now=now)]
            # a State of its own for the reference, so nothing carries over on that side
            assert _views(state, timed) == _views(materialize(ops, registry=REG), timed)


KEYS = [("ns", f"s{i:02d}", p) for i in range(30) for p in ("a", "b")]
key = st.sampled_from(KEYS)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(key, st.integers(0, 9), max_size=40),
    st.lists(
        st.tuples(st.dictionaries(key, st.integers(0, 9), max_size=8), st.sets(key, max_size=8)),
        max_size=30,
    ),
)
def test_a_layered_bucket_reads_as_the_dict_it_stands_for(initial, patches):
    """A bucket patched key by key (a layer over the bucket it came from, folded back into one
    dict once the layer grows) reads, walks in key order and counts as a plain dict would."""
    held: object = dict(sorted(initial.items()))
    model = dict(initial)
    for new, removed in patches:
        gone = [k for k in removed if k not in new]
        held = Layered.patched(held, new, gone)  # type: ignore[arg-type]
        for k in gone:
            model.pop(k, None)
        model.update(new)
        assert len(held) == len(model)  # type: ignore[arg-type]
        assert list(_in_order(held)) == sorted(model.items())  # type: ignore[arg-type]
        assert all(held.get(k) == model.get(k) for k in KEYS)  # type: ignore[attr-defined]
        assert all((k in held) == (k in model) for k in KEYS)  # type: ignore[operator]
