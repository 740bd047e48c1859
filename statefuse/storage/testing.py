"""Hypothesis strategies and shared assertions for testing StateFuse and code built on it.

Needs ``hypothesis`` (the ``test`` extra). The strategies draw *programs*: short lists of steps
(claim, retract by id or ref, re-assert, sync two writers, add evidence, decide) over a small
universe of keys and colliding values, played by several `Writer`s that each only know what they
wrote or observed. Programs shrink well (steps are small tuples of small integers) and turn into
realistic op lists: stale branches, unknowing and deliberate re-assertions, dependencies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hypothesis import strategies as st

from statefuse.core.materializer import materialize
from statefuse.core.op import ClaimAdded, Op
from statefuse.core.state import State
from statefuse.registry import (
    DEFAULT_REGISTRY,
    Cardinality,
    NormalizationError,
    PredicateContract,
    Registry,
    Value,
)
from statefuse.storage.writer import Writer

if TYPE_CHECKING:
    from statefuse.storage.storeindex import StoreIndex

#: A registry with one predicate per interesting contract kind.
TEST_REGISTRY = Registry(
    [
        PredicateContract("price", normalizer="number"),
        PredicateContract("owner", normalizer="text"),
        PredicateContract("tags", cardinality=Cardinality.MANY),
        PredicateContract("due", normalizer="date", ref_uses_normal_form=False),
    ]
)

#: Keys of the test universe and, per predicate, values chosen to collide under its normalizer
#: (and a value the normalizer declines, which must fall back to exact equality).
KEYS: tuple[tuple[str, str, str], ...] = (
    ("proj", "launch", "price"),
    ("proj", "launch", "owner"),
    ("proj", "launch", "note"),
    ("proj", "launch", "tags"),
    ("proj", "vendor", "due"),
)
VALUES: dict[str, tuple[Value, ...]] = {
    "price": (1000, "1,000", 1000.0, "1000", 999, "999.00", "n/a"),
    "owner": ("Dana", "dana", "  DANA ", "Lee", "lee"),
    "tags": ("a", "b", "c"),
    "note": (1, 1.0, True, "1"),
    "due": ("2026-03-25", "2026-04-01", "2026-03-25 "),
}
SCOPES: tuple[str, ...] = ("global", "global", "task:t1")
WRITERS = 3
#: The last writer uses the default registry (exact everywhere): replicas whose writers used
#: different registries must still converge, and its values the test registry's normalizers
#: decline exercise the exact-bytes fallback.
FOREIGN_WRITER = WRITERS - 1

_small = st.integers(min_value=0, max_value=40)
_writer = st.integers(min_value=0, max_value=WRITERS - 1)

Step = tuple[Any, ...]


def steps() -> st.SearchStrategy[Step]:
    """One step of a program (see module docstring).

    The kind is drawn first, weighted towards claims and retractions so that short programs
    already reach conflicts, corrections and dependencies; it shrinks towards "claim".
    """
    claim = st.tuples(
        st.just("claim"),
        _writer,
        st.integers(0, len(KEYS) - 1),
        st.integers(0, 6),
        st.integers(0, len(SCOPES) - 1),
        st.lists(st.tuples(_small, st.booleans()), max_size=2),
    )
    by_kind: dict[str, st.SearchStrategy[Step]] = {
        "claim": claim,
        "retract": st.tuples(
            st.just("retract"),
            _writer,
            _small,
            st.sampled_from(("id", "ref", "both")),
            st.booleans(),
        ),
        "reassert": st.tuples(st.just("reassert"), _writer, _small),
        "sync": st.tuples(st.just("sync"), _writer, _writer),
        "evidence": st.tuples(st.just("evidence"), _writer),
        "decide": st.tuples(st.just("decide"), _writer, _small, _small),
    }
    weighted = (
        ("claim",) * 5 + ("retract",) * 2 + ("sync",) * 2 + ("reassert", "decide", "evidence")
    )
    return st.sampled_from(weighted).flatmap(lambda kind: by_kind[kind])


def programs(max_steps: int = 30) -> st.SearchStrategy[list[Step]]:
    return st.lists(steps(), min_size=min(4, max_steps), max_size=max_steps)


@dataclass
class _Player:
    writer: Writer
    known: list[Op] = field(default_factory=list)
    known_ids: set[bytes] = field(default_factory=set)

    def learn(self, ops: Sequence[Op]) -> None:
        new = [op for op in ops if op.op_id not in self.known_ids]
        self.writer.observe(new)
        self.known.extend(new)
        self.known_ids.update(op.op_id for op in new)

    def claims(self) -> list[ClaimAdded]:
        return [op for op in self.known if isinstance(op, ClaimAdded)]


def run_program(program: Sequence[Step], registry: Registry = TEST_REGISTRY) -> list[Op]:
    """Play ``program`` and return every op written, in writing order."""
    players = [
        _Player(
            Writer(
                f"w{i}",
                registry=DEFAULT_REGISTRY if i == FOREIGN_WRITER else registry,
                clock=lambda: 0,
            )
        )
        for i in range(WRITERS)
    ]
    written: list[Op] = []

    def emit(p: _Player, op: Op) -> None:
        written.append(op)
        p.known.append(op)
        p.known_ids.add(op.op_id)

    for step in program:
        kind, w = step[0], players[step[1]]
        claims = w.claims()
        if kind == "claim":
            _, _, k, v, s, deps = step
            ns, subj, pred = KEYS[k]
            values = VALUES.get(pred, VALUES["note"])
            value = values[v % len(values)]
            dep_ids = []
            for i, by_ref in deps:
                if claims:
                    d = claims[i % len(claims)]
                    dep_ids.append(d.claim_ref if by_ref else d.claim_id)
            try:
                emit(w, w.writer.claim(ns, subj, pred, value, scope=SCOPES[s], depends_on=dep_ids))
            except NormalizationError:
                continue  # this writer's registry declines the value: the step does nothing
        elif kind == "retract" and claims:
            _, _, i, mode, supersede = step
            target = claims[i % len(claims)]
            sup = claims[(i + 1) % len(claims)].claim_id if supersede else None
            emit(
                w,
                w.writer.retract(
                    claim_id=target.claim_id if mode in ("id", "both") else None,
                    claim_ref=target.claim_ref if mode in ("ref", "both") else None,
                    reason="test",
                    superseded_by=sup,
                ),
            )
        elif kind == "reassert" and claims:
            t = claims[step[2] % len(claims)]
            try:
                emit(w, w.writer.claim(t.namespace, t.subject, t.predicate, t.value, scope=t.scope))
            except NormalizationError:
                continue
        elif kind == "sync":
            w.learn(players[step[2]].known)
        elif kind == "evidence":
            emit(w, w.writer.evidence("test", len(written)))
        elif kind == "decide":
            conflicts = materialize(w.known, registry=registry).conflicts
            if conflicts:
                c = conflicts[step[2] % len(conflicts)]
                pick = c.candidates[step[3] % len(c.candidates)]
                emit(
                    w,
                    w.writer.decide(
                        locus=c.locus, conflict_id=c.conflict_id, selected_claim_id=pick, reason="t"
                    ),
                )
    return written


def op_lists(max_steps: int = 30) -> st.SearchStrategy[list[Op]]:
    """Lists of ops written by a random program."""
    return programs(max_steps).map(run_program)


def state_summary(state: State) -> dict[str, object]:
    """Everything a State answers, as plain sorted data (for readable equality failures)."""
    return {
        "active": [c.claim_id.hex() for c in state.active_claims()],
        "retracted": {
            c.hex(): sorted(r.op_id.hex() for r in rs) for c, rs in state.retracted.items()
        },
        "conflicts": [
            (c.locus.hex(), c.conflict_id.hex(), [[x.hex() for x in g.claim_ids] for g in c.groups])
            for c in state.conflicts
        ],
        "stale": {c.hex(): [repr(s) for s in causes] for c, causes in state.stale.items()},
        "stale_decisions": [d.op_id.hex() for d in state.stale_decisions],
        "decisions": [d.op_id.hex() for d in state.decisions],
        "evidence": sorted(e.hex() for e in state.evidence),
    }


def assert_same_state(a: State, b: State) -> None:
    """Fail with a readable diff unless ``a`` and ``b`` answer everything alike, digest included."""
    sa, sb = state_summary(a), state_summary(b)
    for k in sa:
        assert sa[k] == sb[k], f"states differ in {k}: {sa[k]!r} != {sb[k]!r}"
    assert a.digest() == b.digest(), "summaries agree but digests differ"


def assert_index_agrees(index: StoreIndex, state: State) -> None:
    """Fail with a readable diff unless a store's derived state answers on every key as
    ``state`` (the State of the whole op-set) does: active claims, retractions, conflicts,
    stale marks, decisions. Evidence aside: a slice holds the evidence its claims cite."""
    got = state_summary(index.state_of(index.loci(active=False), registry=state.registry))
    want = state_summary(state)
    for k in want:
        if k != "evidence":
            assert got[k] == want[k], f"derived state differs in {k}: {got[k]!r} != {want[k]!r}"


def full_key_lines(lines: Sequence[str]) -> list[str]:
    """A context section's lines as they would read ungrouped: the ``[P]`` group lines
    dropped (P a namespace, or ``namespace/subject``), ``P/`` put back in front of each key
    under them (after a constraint's ``[tag] ``) and the ``(authority=A)`` of a
    ``[P] (authority=A)`` line back at the end of each (a section is grouped all or none, see
    `statefuse.reading.context`); counted ``…`` lines and lines under an item are left as they
    are."""
    out: list[str] = []
    prefix: str | None = None
    shared = ""
    for ln in lines:
        if ln.startswith("[") and ": " not in ln:
            if ln.endswith("]"):
                prefix, shared = ln[1:-1], ""
                continue
            if ln.endswith(")") and "] (authority=" in ln:
                prefix, _, meta = ln[1:].partition("] (")
                shared = f" ({meta}"
                continue
        if prefix is not None and not ln.startswith(("…", " ", "⚠")):
            if ln.startswith("[") and "] " in ln:  # a constraint's tag comes first
                tag, _, rest = ln.partition("] ")
                ln = f"{tag}] {prefix}/{rest}{shared}"
            else:
                ln = f"{prefix}/{ln}{shared}"
        out.append(ln)
    return out
