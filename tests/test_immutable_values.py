"""Values inside ops are deeply immutable (SEMANTICS §1): nothing that reads an op (a caller, a
resolver, a ranker, a normalizer, an integration, a reader of a State, View or Context) can change
it after its id was computed (issue 12, item 5).

The hostile ones here try every mutation on every list, map and set they can reach through
attributes and items (`_hostile`); the same tests fail when values are held as plain lists and
dicts, as they were before."""

from __future__ import annotations

import contextlib
import copy
import pickle
import types
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import blake3
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import (
    Lens,
    PredicateContract,
    Registry,
    State,
    Writer,
    assemble_context,
    materialize,
    project,
)
from statefuse.core.op import ClaimAdded, EvidenceAdded, decode_op, decode_ops
from statefuse.reading.resolver import Abstain, ResolverInput, Select
from statefuse.reading.view import json_value
from statefuse.registry import (
    FrozenList,
    FrozenMap,
    ValueRuleError,
    ValueTypeError,
    canonical_value,
    encode_value,
    plain_value,
)
from statefuse.registry.value import frozen_value
from statefuse.sync.replica import Replica
from tests.test_value import values

HOSTILE = (TypeError, AttributeError)


def _pinned_ops() -> list[Any]:
    w = Writer("alice", clock=lambda: 1000)
    stated = 1.0  # the default when these ids were pinned (now a claim may leave it unset)
    return [
        w.claim(
            "ns", "s", "tags", ["b", "a", {"z": 1, "a": [1.5, None, b"\x00"]}], confidence=stated
        ),
        w.claim("ns", "s", "cfg", {"k": {"y": [True, -1]}, "a": "x"}, confidence=stated),
        w.claim("ns", "s", "n", 7, confidence=stated),
        EvidenceAdded(
            author="bob", lamport=1, wall_ms=5, source="doc", content={"rows": [[1, 2], [3]]}
        ),
    ]


#: Ids of `_pinned_ops`, computed before values became immutable containers: they must not move.
PINNED_IDS = [
    "09ebdc3a47c52e0100d32be2269bcd01007aefea6f8af59258a704146689e304",
    "2061cb9f555777c4683f2c3eb8fbf523065f69a496d6ce4925586474a4b76293",
    "988f65c5eb7346cee28a5bf0ae7561aff702b93f291124c8e2e9ac4242f5fbae",
    "a9664a1151a7cbab4db6b47ac23d04966183b69991a4f45d40d409c812e14892",
]


def test_ops_with_list_and_map_values_keep_the_ids_they_had_as_plain_containers():
    ops = _pinned_ops()
    assert [op.op_id.hex() for op in ops] == PINNED_IDS
    datas = [op.encode() for op in ops]
    assert [blake3.blake3(d).hexdigest() for d in datas] == PINNED_IDS
    assert [decode_op(d).op_id.hex() for d in datas] == PINNED_IDS
    batch = decode_ops(datas * 3)
    assert [op.op_id.hex() for op in batch] == PINNED_IDS * 3
    for op in (*ops, *batch):
        assert op.recompute_id() == op.op_id


def test_values_read_back_are_immutable_and_equal_to_what_was_written():
    written = ["b", "a", {"z": 1, "a": [1.5, None, b"\x00"]}]
    op = Writer("alice").claim("ns", "s", "tags", written)
    for read in (op.value, decode_op(op.encode()).value, decode_ops([op.encode()] * 3)[1].value):
        _equal_both_ways(read, written)
        assert type(read) is FrozenList and type(read[2]) is FrozenMap
        assert type(read[2]["a"]) is FrozenList
        assert not isinstance(read, list) and not isinstance(read[2], dict)
        _unequal_both_ways(read, ["b", "a"])


def _equal_both_ways(a: object, b: object) -> None:
    assert a == b and b == a
    assert not a != b and not b != a  # noqa: SIM202 - __ne__ is what is tested


def _unequal_both_ways(a: object, b: object) -> None:
    assert a != b and b != a
    assert not a == b and not b == a  # noqa: SIM201 - __eq__ is what is tested


def test_frozen_containers_compare_equal_to_their_plain_forms_both_ways():
    _equal_both_ways(FrozenList([1]), [1])
    _unequal_both_ways(FrozenList([1]), [2])
    _unequal_both_ways(FrozenList([1]), [1, 2])
    _equal_both_ways(FrozenMap({"a": 1}), {"a": 1})
    _unequal_both_ways(FrozenMap({"a": 1}), {"a": 2})
    _unequal_both_ways(FrozenMap({"a": 1}), {"a": 1, "b": 2})
    _equal_both_ways(frozen_value({"x": [1, {"y": []}]}), {"x": [1, {"y": []}]})
    assert repr(frozen_value({"x": [1, {"y": []}]})) == repr({"x": [1, {"y": []}]})
    assert isinstance(FrozenMap({}), Mapping) and isinstance(FrozenList([]), Sequence)


def test_frozen_containers_built_directly_are_checked_sorted_and_frozen_at_every_depth():
    m = FrozenMap({"b": [1, {"c": []}], "a": 1})
    assert list(m) == ["a", "b"] and list(m.items()) == [("a", 1), ("b", [1, {"c": []}])]
    assert type(m["b"]) is FrozenList and type(m["b"][1]) is FrozenMap  # type: ignore[index]
    assert type(FrozenList([[1]])[0]) is FrozenList
    with pytest.raises(ValueTypeError) as info:
        FrozenList([1, {2}])
    assert info.value.field == "value[1]"
    with pytest.raises(ValueRuleError):
        FrozenMap({"x": float("nan")})
    frozen = frozen_value({"a": [1, {"b": []}]})
    assert frozen_value(frozen) is frozen  # written again: nothing copied
    assert frozen_value([frozen])[0] is frozen


def _mutations(v: Any) -> list[Any]:
    """Every way we know to try to change a list or map in place (on a plain one, they work)."""
    if isinstance(v, (FrozenList, list)):
        return [
            lambda: v.append("EVIL"),
            lambda: v.extend(["EVIL"]),
            lambda: v.insert(0, "EVIL"),
            lambda: v.pop(),
            lambda: v.remove(v[0]),
            lambda: v.clear(),
            lambda: v.sort(),
            lambda: v.reverse(),
            lambda: v.__setitem__(0, "EVIL"),
            lambda: v.__delitem__(0),
            lambda: v.__iadd__(["EVIL"]),
            lambda: list.append(v, "EVIL"),
            lambda: list.__setitem__(v, 0, "EVIL"),
            lambda: list.clear(v),
            lambda: setattr(v, "x", 1),
        ]
    if isinstance(v, set):
        return [lambda: v.add("EVIL"), lambda: v.discard(next(iter(v))), lambda: v.clear()]
    if isinstance(v, (FrozenMap, dict)):
        return [
            lambda: v.__setitem__("k", "EVIL"),
            lambda: v.__delitem__(next(iter(v))),
            lambda: v.update({"k": "EVIL"}),
            lambda: v.setdefault("k", "EVIL"),
            lambda: v.pop(next(iter(v))),
            lambda: v.popitem(),
            lambda: v.clear(),
            lambda: v.__ior__({"k": "EVIL"}),
            lambda: dict.__setitem__(v, "k", "EVIL"),
            lambda: dict.clear(v),
            lambda: dict.update(v, {"k": "EVIL"}),
            lambda: setattr(v, "_entries", {"k": "EVIL"}),
            lambda: object.__setattr__(v, "_entries", {"k": "EVIL"}),
            lambda: delattr(v, "_entries"),
            lambda: v._entries.__setitem__("k", "EVIL"),
            lambda: v.items().mapping.__setitem__("k", "EVIL"),
        ]
    return []


def _attack(v: Any) -> None:
    """Try every mutation on every list and map inside ``v``, then on ``v`` itself: what a
    hostile resolver, ranker, normalizer or integration could do with a value it is handed."""
    if isinstance(v, Mapping):
        children = list(v.values())
    elif isinstance(v, (FrozenList, list)):
        children = list(v)
    else:
        children = []
    for child in children:
        _attack(child)
    for mutate in _mutations(v):
        with contextlib.suppress(Exception):
            mutate()


def _assert_attacks_fail(v: Any) -> None:
    before = plain_value(v)
    for mutate in _mutations(v):
        with pytest.raises(HOSTILE):
            mutate()
    v.__init__(["EVIL"] if isinstance(v, FrozenList) else {"k": "EVIL"})  # runs, changes nothing
    assert v == before and plain_value(v) == before


def test_every_mutation_of_a_read_back_value_fails():
    op = Writer("alice").claim("ns", "s", "tags", ["b", "a", {"z": [1], "a": {"q": 2}}])
    before = op.encode()
    _assert_attacks_fail(op.value)
    _assert_attacks_fail(op.value[2])
    _assert_attacks_fail(op.value[2]["z"])
    _assert_attacks_fail(op.value[2]["a"])
    with pytest.raises(HOSTILE):
        op.value += ["EVIL"]  # type: ignore[misc, operator]
    assert op.encode() == before and op.recompute_id() == op.op_id


#: What a walk does not enter: objects the whole process shares (types, modules, enum members,
#: registries and the normalizers in them), which are not what one State or input holds.
_SHARED = (type, types.ModuleType, Enum, Registry)
_ATOMS = (str, bytes, int, float, bool, type(None))


def _reachable(*roots: object) -> list[Any]:
    """Every object reachable from ``roots`` through attributes (slots and ``__dict__``, private
    ones too) and the items and keys of containers and mappings, but no callable and nothing
    `_SHARED`: what code handed the roots reaches by ordinary Python. Going around Python's
    rules (``object.__setattr__``, ``gc``, ``ctypes``) is out of scope, as for the ops."""
    found: dict[int, Any] = {}
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in found or isinstance(obj, (*_ATOMS, *_SHARED)) or callable(obj):
            continue
        found[id(obj)] = obj
        if isinstance(obj, Mapping):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            for cls in type(obj).__mro__:
                slots = cls.__dict__.get("__slots__", ())
                for slot in (slots,) if isinstance(slots, str) else slots:
                    if slot.startswith("__") and not slot.endswith("__"):
                        slot = f"_{cls.__name__.lstrip('_')}{slot}"
                    if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                        stack.append(getattr(obj, slot))
            stack.extend(getattr(obj, "__dict__", {}).values())
    return list(found.values())


def _hostile(*roots: object) -> list[Any]:
    """Find everything reachable from ``roots``, then try every mutation on every list, map and
    set among it (the roots' own included). Returns the lists and maps found."""
    found = _reachable(*roots)
    for obj in found:
        for mutate in _mutations(obj):
            with contextlib.suppress(Exception):
                mutate()
    return [obj for obj in found if type(obj) in _CONTAINERS]


def _memory() -> tuple[list[Any], list[bytes]]:
    """Ops with lists and maps at every place a value sits, and their bytes: evidence content,
    two conflicting claims (one citing the evidence) that a resolver is shown, a conflict
    decided with a payload, a correction and a claim made stale by it."""
    a, b = Writer("alice", clock=lambda: 1), Writer("bob", clock=lambda: 2)
    ev = a.evidence("doc", {"rows": [[1, 2], {"cell": [3]}]})
    old = a.claim("ns", "s", "budget", [100, {"per": "month"}])
    new = a.claim("ns", "s", "budget", [120, {"per": "month"}])
    ops = [
        ev,
        a.claim("ns", "s", "tags", ["x", {"deep": ["y"]}], evidence=[ev.evidence_id]),
        b.claim("ns", "s", "tags", ["z", {"deep": {"m": [1]}}]),
        a.claim("ns", "s", "cfg", {"k": [1, 2]}),
        b.claim("ns", "s", "cfg", {"k": [3]}),
        old,
        new,
        a.retract(claim_id=old.claim_id, superseded_by=new.claim_id),
        a.claim("ns", "s", "plan", {"uses": ["budget"]}, depends_on=[old.claim_id]),
    ]
    state = materialize(ops)
    (cfg,) = (c for c in state.conflicts if c.key == ("ns", "s", "cfg"))
    ops.append(a.decide_on(cfg, ops[3].claim_id, state=state, payload={"why": ["cheaper", {}]}))
    return ops, [op.encode() for op in ops]


#: The lists and maps a value may be held as (frozen, or plain where they are not frozen).
_CONTAINERS = (FrozenList, FrozenMap, list, dict)


def _values_of(ops: Sequence[Any]) -> set[int]:
    """Ids of the list and map values the ops hold (claim values, content, payloads)."""
    held = (getattr(op, f, None) for op in ops for f in ("value", "content", "payload"))
    return {id(v) for v in held if type(v) in _CONTAINERS}


def _assert_untouched(ops: list[Any], datas: list[bytes], digest: bytes) -> None:
    assert [op.encode() for op in ops] == datas
    assert all(op.recompute_id() == op.op_id for op in ops)
    state = materialize(ops)
    assert state.digest() == digest
    view = project(state, Lens())
    assert "EVIL" not in view.to_json()
    text = assemble_context(view, query="tags cfg", budget=2000).text
    assert "EVIL" not in text


class _HostileResolver:
    """Attacks everything it is shown (candidates, groups, the conflict, the lens)."""

    def __init__(self) -> None:
        self.reached: list[Any] = []

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        # Asserting here would prove nothing: a resolver's exceptions become Abstain.
        self.reached.extend(_hostile(inp))
        return Abstain("hostile")


def test_a_resolver_that_mutates_everything_it_is_shown_changes_no_op_and_no_digest():
    ops, datas = _memory()
    digest = materialize(ops).digest()
    resolver = _HostileResolver()
    project(materialize(ops), Lens(), resolver=resolver)
    tags = [op for op in ops if getattr(op, "predicate", None) == "tags"]
    assert _values_of(tags) <= {id(v) for v in resolver.reached}
    _assert_untouched(ops, datas, digest)


class _HostileRanker:
    """Scores every claim 1, after attacking the claims and the sequence they came in."""

    def __init__(self) -> None:
        self.reached: list[Any] = []

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> Mapping[bytes, float]:
        out = {c.claim_id: 1.0 for c in claims}
        self.reached.extend(_hostile(claims))
        return out


def test_a_ranker_that_mutates_everything_it_is_given_changes_no_op_and_no_digest():
    ops, datas = _memory()
    state = materialize(ops)
    digest = state.digest()
    ranker = _HostileRanker()
    assemble_context(project(state, Lens()), query="tags", budget=2000, ranker=ranker)
    assert ranker.reached
    _assert_untouched(ops, datas, digest)


def _read_everything(state: State) -> tuple[object, ...]:
    """What a State's accessors hand out (and, read once, cache inside it)."""
    return (
        state.claims,
        state.all_claims(),
        state.active_claims(),
        state.active_by_key(),
        state.evidence,
        state.decisions,
        state.retractions,
        state.retracted,
        state.conflicts,
        state.stale,
        state.stale_decision_reasons,
        state.digest(),
    )


def test_nothing_reachable_from_a_state_or_what_it_hands_out_can_change_an_op():
    ops, datas = _memory()
    state = materialize(ops)
    handed_out = _read_everything(state)
    reached = _hostile(state, handed_out)
    assert _values_of(ops) <= {id(v) for v in reached}
    _assert_untouched(ops, datas, handed_out[-1])  # type: ignore[arg-type]


def test_nothing_reachable_from_a_view_can_change_an_op():
    ops, datas = _memory()
    state = materialize(ops)
    digest = state.digest()
    view = project(state, Lens())
    view.to_json()
    handed_out = (dict(view.selected), dict(view.explanations), view.surfaced_conflicts)
    shown = [c for s in view.selected.values() for c in s.claims]
    shown += [c for sc in view.surfaced_conflicts for c in sc.candidates]
    want = _values_of(shown)
    assert len(want) == 5  # budget, cfg, plan and both tags
    reached = _hostile(view, handed_out)
    assert want <= {id(v) for v in reached}
    _assert_untouched(ops, datas, digest)


def test_nothing_reachable_from_a_context_or_the_claims_it_expands_to_can_change_an_op():
    ops, datas = _memory()
    state = materialize(ops)
    digest = state.digest()
    context = assemble_context(project(state, Lens()), query="tags", budget=60)
    expanded = [context.expand(handle) for handle in context.omitted]
    want = _values_of([c for claims in expanded for c in claims])
    assert want  # some claims with list or map values were left out, under handles
    reached = _hostile(context, expanded)
    assert want <= {id(v) for v in reached}
    _assert_untouched(ops, datas, digest)


def test_a_caller_or_an_integration_mutating_values_around_add_claim_changes_no_stored_op(
    tmp_path: Path,
) -> None:
    path = tmp_path / "memory.db"
    observed: list[Any] = []
    written: list[Any] = ["x", {"deep": [1]}]
    content: dict[str, Any] = {"rows": [[1]]}
    with Replica.open(path, create=True, space="team", clock=lambda: 1) as replica:
        replica.observe(lambda ops: observed.extend(_hostile(ops)))  # a hostile integration
        with replica.batch():
            ev = replica.add_evidence("doc", content)
            op = replica.add_claim("ns", "s", "tags", written, evidence=[ev.evidence_id])
            _attack(written)  # what the caller passed in
            _attack(content)
            _attack(op.value)  # and what it got back, before the batch is committed
            _attack(ev.content)
        assert written != ["x", {"deep": [1]}] and observed
        # What the live State hands out (its private parts are the replica's, and mutable).
        _hostile(_read_everything(replica.state()))
        assert op.recompute_id() == op.op_id and ev.recompute_id() == ev.op_id
        state = replica.state()
        assert state.claims[op.claim_id].value == ["x", {"deep": [1]}]
        assert state.evidence[ev.evidence_id].content == {"rows": [[1]]}
        digest = state.digest()
    with Replica.open(path) as again:
        state = again.state()
        assert state.claims[op.claim_id].encode() == op.encode()
        assert state.evidence[ev.evidence_id].encode() == ev.encode()
        assert state.digest() == digest


def test_a_caller_mutating_the_list_it_wrote_changes_nothing():
    inner = {"deep": [1]}
    written: list[Any] = ["x", inner]
    op = Writer("alice").claim("ns", "s", "tags", written)
    data = op.encode()
    written.append("EVIL")
    inner["deep"].append("EVIL")
    inner["new"] = "EVIL"
    evidence_content: dict[str, Any] = {"rows": [[1]]}
    ev = EvidenceAdded(author="a", lamport=1, wall_ms=1, source="s", content=evidence_content)
    ev_data = ev.encode()
    evidence_content["rows"][0].append("EVIL")
    assert op.encode() == data and op.value == ["x", {"deep": [1]}]
    assert ev.encode() == ev_data and ev.recompute_id() == ev.op_id


def test_a_normalizer_is_given_the_stored_value_itself_frozen_so_it_can_change_no_op():
    # A contract's normalizer (user code) runs while the writer builds the claim, before the id
    # exists: anything it could change in the value it is given would be stored under that id.
    given: list[Any] = []

    def hostile(value: Any) -> Any:
        given.append(value)
        _attack(value)
        return "one normal form"

    registry = Registry(
        [PredicateContract("tags", normalizer="hostile")], normalizers={"hostile": hostile}
    )
    written = ["b", {"a": [1]}]
    a = Writer("alice", registry=registry, clock=lambda: 1)
    ops = [a.claim("ns", "s", "tags", written), a.claim("ns", "s", "tags", ["c", {"a": [2]}])]
    assert [type(v) for v in given] == [FrozenList, FrozenList]
    assert given[0] is ops[0].value and given[1] is ops[1].value
    _attack(given[0])  # a handle the normalizer kept, used later
    assert ops[0].value == written and decode_op(ops[0].encode()).value == written
    assert all(op.recompute_id() == op.op_id for op in ops)
    datas = [op.encode() for op in ops]
    state = materialize(ops, registry=registry)  # normalizes again, to group the two values
    assert len(given) > 2 and not state.conflicts  # one normal form: agreement
    assert [op.encode() for op in ops] == datas


def test_a_frozen_value_written_again_keeps_its_bytes_and_the_op_its_id():
    op = Writer("alice", clock=lambda: 1).claim("ns", "s", "tags", ["b", {"a": 1}])
    again = Writer("alice", clock=lambda: 1).claim("ns", "s", "tags", op.value)
    assert again.op_id == op.op_id
    assert canonical_value(op.value) == ["b", {"a": 1}]
    assert encode_value(op.value) == encode_value(["b", {"a": 1}])


def test_to_value_gives_the_op_with_plain_lists_and_maps_the_caller_may_edit():
    op = Writer("alice", clock=lambda: 1).claim("ns", "s", "tags", ["b", {"a": [1]}])
    fields = op.to_value()
    value = fields["value"]
    assert type(value) is list and type(value[1]) is dict and type(value[1]["a"]) is list
    assert msgpack.packb(fields, use_bin_type=True, use_single_float=False) == op.encode()
    value[1]["a"].append("EVIL")
    assert op.value == ["b", {"a": [1]}] and op.recompute_id() == op.op_id


def test_frozen_values_pickle_copy_and_render_as_json():
    v = frozen_value({"b": [1, {"c": b"\x01"}], "a": None})
    for copied in (copy.copy(v), copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
        assert copied == v and type(copied) is FrozenMap
        assert type(copied["b"]) is FrozenList and encode_value(copied) == encode_value(v)
    assert json_value(v) == {"b": [1, {"c": {"$bytes": "01"}}], "a": None}
    assert plain_value(v) == v and type(plain_value(v)) is dict
    assert type(plain_value(v)["b"]) is list


@given(values())
def test_any_value_reads_back_equal_encodes_the_same_and_resists_mutation(value):
    op = Writer("alice", clock=lambda: 1).claim("ns", "s", "p", value)
    data = op.encode()
    read = op.value
    _equal_both_ways(read, value)
    assert encode_value(read) == encode_value(value)
    frozen = frozen_value(value)
    assert frozen == value and encode_value(frozen) == encode_value(value)
    assert decode_op(data).value == value
    _attack(read)
    assert op.encode() == data and op.recompute_id() == op.op_id and read == value


@given(st.lists(values(), min_size=1, max_size=3), values(), values())
def test_whatever_the_values_hostile_callers_resolvers_rankers_and_readers_change_no_op(
    claimed, content, payload
):
    """Issue 12, item 5, as a property: every mutation that callers (of the values they wrote),
    resolvers, rankers and readers of a State, View or Context try leaves every op's id
    recomputable and every digest unchanged."""
    mine = copy.deepcopy([claimed, content, payload])  # the caller's objects, which it keeps
    writers = [Writer(f"w{i}", clock=lambda: 1) for i in range(len(claimed))]
    ev = writers[0].evidence("doc", mine[1])
    ops: list[Any] = [ev]
    for w, v in zip(writers, mine[0], strict=True):
        ops.append(w.claim("ns", "s", "p", v, evidence=[ev.evidence_id]))
    some_id = ops[1].claim_id
    ops.append(
        writers[0].decide(
            locus=some_id, conflict_id=some_id, selected_claim_id=some_id, payload=mine[2]
        )
    )
    datas = [op.encode() for op in ops]
    digest = materialize(ops).digest()
    _attack(mine)
    state = materialize(ops)
    handed_out = _read_everything(state)
    view = project(state, Lens(), resolver=_HostileResolver())
    context = assemble_context(view, query="p", budget=200, ranker=_HostileRanker())
    expanded = [context.expand(handle) for handle in context.omitted]
    _hostile(state, handed_out, view, context, expanded)
    _assert_untouched(ops, datas, digest)
