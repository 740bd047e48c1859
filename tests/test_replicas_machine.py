"""A multi-replica state machine beside a model op-set (plain set union).

Replicas write, exchange ops in any pattern and materialize incrementally; after every step each
replica holds a subset of the model and its incremental state equals a full materialize of what
it holds; after a full sync every replica equals the model.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from statefuse import ClaimAdded, Materializer, OpSet, Writer, materialize
from statefuse.storage.testing import KEYS, SCOPES, TEST_REGISTRY, VALUES, assert_same_state

REPLICAS = 3


class Replicas(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model = OpSet()
        self.sets = [OpSet() for _ in range(REPLICAS)]
        self.mats = [Materializer(registry=TEST_REGISTRY) for _ in range(REPLICAS)]
        self.writers = [
            Writer(f"r{i}", registry=TEST_REGISTRY, clock=lambda: 0) for i in range(REPLICAS)
        ]

    def _write(self, i: int, op) -> None:
        self.model.add(op)
        self.sets[i].add(op)
        self.mats[i].apply(op)

    def _claims(self, i: int) -> list[ClaimAdded]:
        return [op for op in self.sets[i] if isinstance(op, ClaimAdded)]

    @rule(
        i=st.integers(0, REPLICAS - 1),
        k=st.integers(0, len(KEYS) - 1),
        v=st.integers(0, 6),
        s=st.integers(0, len(SCOPES) - 1),
    )
    def claim(self, i: int, k: int, v: int, s: int) -> None:
        ns, subj, pred = KEYS[k]
        values = VALUES.get(pred, VALUES["note"])
        value = values[v % len(values)]
        if pred == "price" and value == "n/a":
            value = 5
        self._write(i, self.writers[i].claim(ns, subj, pred, value, scope=SCOPES[s]))

    @rule(i=st.integers(0, REPLICAS - 1), n=st.integers(0, 50), by_ref=st.booleans())
    def retract(self, i: int, n: int, by_ref: bool) -> None:
        claims = self._claims(i)
        if claims:
            c = claims[n % len(claims)]
            op = (
                self.writers[i].retract(claim_ref=c.claim_ref)
                if by_ref
                else self.writers[i].retract(claim_id=c.claim_id)
            )
            self._write(i, op)

    @rule(
        src=st.integers(0, REPLICAS - 1), dst=st.integers(0, REPLICAS - 1), take=st.integers(0, 10)
    )
    def send_some(self, src: int, dst: int, take: int) -> None:
        missing = [op for op in self.sets[src] if op not in self.sets[dst]][:take]
        self.sets[dst].update(missing)
        self.mats[dst].apply_all(missing)
        self.writers[dst].observe(missing)

    @rule()
    def snapshot_everyone(self) -> None:
        for m in self.mats:
            m.state()

    @invariant()
    def every_replica_holds_a_subset_of_the_model(self) -> None:
        for s in self.sets:
            assert set(s.ids()) <= set(self.model.ids())

    @invariant()
    def incremental_state_equals_full_materialize_of_what_a_replica_holds(self) -> None:
        for s, m in zip(self.sets, self.mats, strict=True):
            assert m.state().digest() == materialize(s, registry=TEST_REGISTRY).digest()

    def teardown(self) -> None:
        everything = list(self.model)
        for i in range(REPLICAS):
            self.mats[i].apply_all(everything)
            self.sets[i].update(everything)
        full = materialize(self.model, registry=TEST_REGISTRY)
        for m in self.mats:
            assert_same_state(m.state(), full)


TestReplicas = Replicas.TestCase
# Each example runs several replicas' materializers: CI=true's 1,000 took 19 s, 500 keep budget.
TestReplicas.settings = settings(
    settings.default, max_examples=min(settings.default.max_examples, 500)
)
