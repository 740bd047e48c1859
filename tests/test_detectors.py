"""Detectors (SEMANTICS §5): the catalog, the declaration, pure runs, findings as conflicts."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from statefuse import ClaimAdded, Materializer, Writer, materialize
from statefuse.registry import (
    DEFAULT_REGISTRY,
    DETECTOR_FAILED,
    DetectorInput,
    DetectorSpec,
    Finding,
    Registry,
    RegistryError,
    register_detector,
)
from statefuse.registry.catalog import find_detector
from statefuse.registry.detectors import bookings, budget
from statefuse.storage.testing import assert_same_state

BUDGET_TOML = """
[[detectors]]
detector = "budget@1"
reads = ["budget/cost", "budget/limit"]

[[detectors]]
detector = "bookings@1"
reads = ["booking"]
"""
REGISTRY = Registry.from_toml(BUDGET_TOML)


def _writer(name: str, registry: Registry = REGISTRY) -> Writer:
    return Writer(name, registry=registry, clock=lambda: 0)


def _purchases(n: int, *, amount: int = 40_000, limit: int = 100_000) -> list:
    agents = [_writer(f"agent{i}") for i in range(max(n, 1))]
    ops = [agents[0].claim("budget", "q3", "limit", limit)]
    for i in range(n):
        ops.append(agents[i].claim("budget", f"buy{i}", "cost", {"budget": "q3", "amount": amount}))
    return ops


# --- the reference implementation's capacity example ---------------------------------------------


def test_three_purchases_of_40k_against_a_budget_of_100k_make_one_finding():
    ops = _purchases(3)
    state = materialize(ops, registry=REGISTRY)
    (finding,) = state.conflicts
    assert finding.finding == "over-budget"
    assert finding.detector == "budget@1"
    assert finding.key == ("budget", "q3", "limit")
    assert dict(finding.witness) == {"budget": "q3", "required": 120000, "available": 100000}
    assert set(finding.candidates) == {op.op_id for op in ops}
    assert [g.claim_ids for g in finding.groups] == [(c,) for c in finding.candidates]
    assert finding.keys == tuple(sorted({(o.namespace, o.subject, o.predicate) for o in ops}))
    assert state.conflict_at(finding.locus) == finding
    assert "120000" in finding.reason and "100000" in finding.reason


def test_two_purchases_of_40k_stay_within_the_budget():
    assert materialize(_purchases(2), registry=REGISTRY).conflicts == ()


def test_a_finding_keeps_its_locus_as_claims_change_and_a_retraction_closes_it():
    ops = _purchases(4)
    four = materialize(ops, registry=REGISTRY).conflicts[0]
    three = materialize(ops[:4], registry=REGISTRY).conflicts[0]
    assert four.locus == three.locus and four.conflict_id != three.conflict_id
    undo = _writer("agent0").retract(claim_id=ops[1].op_id, reason="cancelled")
    assert len(materialize([*ops[:4], undo], registry=REGISTRY).conflicts) == 0


def test_same_key_conflicts_keep_their_shape_ids_and_digest_with_detectors_declared():
    a, b = _writer("a", DEFAULT_REGISTRY), _writer("b", DEFAULT_REGISTRY)
    ops = [a.claim("p", "x", "owner", "Dana"), b.claim("p", "x", "owner", "Lee")]
    plain = materialize(ops).conflicts[0]
    declared = materialize(ops, registry=REGISTRY).conflicts[0]
    assert declared == plain
    assert (declared.finding, declared.detector, declared.keys, declared.witness) == (
        "",
        "",
        (),
        None,
    )


def test_double_bookings_of_one_room_are_one_finding_with_the_slots():
    w = _writer("desk")
    ops = [
        w.claim(
            "rooms",
            "b1",
            "booking",
            {"room": "4", "start": "2026-03-25T10:00Z", "end": "2026-03-25T11:00Z"},
        ),
        w.claim(
            "rooms",
            "b2",
            "booking",
            {"room": "4", "start": "2026-03-25T10:30+00:00", "end": "2026-03-25T12:00Z"},
        ),
        w.claim(
            "rooms",
            "b3",
            "booking",
            {"room": "4", "start": "2026-03-25T12:00Z", "end": "2026-03-25T13:00Z"},
        ),
        w.claim(
            "rooms",
            "b4",
            "booking",
            {"room": "5", "start": "2026-03-25T10:00Z", "end": "2026-03-25T11:00Z"},
        ),
    ]
    (finding,) = materialize(ops, registry=REGISTRY).conflicts
    assert finding.finding == "double-booking"
    assert finding.key == ("rooms", "b1", "booking")
    assert set(finding.candidates) == {ops[0].op_id, ops[1].op_id}
    assert dict(finding.witness)["slots"] == [
        ["2026-03-25T10:00:00Z", "2026-03-25T11:00:00Z"],
        ["2026-03-25T10:30:00Z", "2026-03-25T12:00:00Z"],
    ]


# --- the catalog and the declaration -------------------------------------------------------------


def test_a_declared_detector_the_process_lacks_is_the_typed_error_of_a_missing_normalizer():
    with pytest.raises(RegistryError) as err:
        Registry.from_toml('[[detectors]]\ndetector = "acme.capacity@3"\nreads = ["seats"]\n')
    assert err.value.rule == "unknown-detector"
    assert "acme.capacity@3" in str(err.value) and "register_detector" in str(err.value)
    with pytest.raises(RegistryError):
        find_detector("acme.capacity", 3)


def test_registry_documents_without_detectors_keep_their_fingerprint():
    doc = DEFAULT_REGISTRY.to_document()
    assert "detectors" not in doc
    assert Registry.from_document(doc).fingerprint == DEFAULT_REGISTRY.fingerprint
    # the fingerprint of the default registry as every earlier release computed it
    assert DEFAULT_REGISTRY.fingerprint.hex().startswith("fe2b9fb0")
    assert REGISTRY.fingerprint != DEFAULT_REGISTRY.fingerprint


def test_the_detectors_section_round_trips_through_toml_and_json_and_is_in_the_fingerprint():
    assert Registry.from_toml(REGISTRY.to_toml()) == REGISTRY
    assert Registry.from_json(REGISTRY.to_json()) == REGISTRY
    other = Registry.from_toml(BUDGET_TOML.replace('"budget/cost", ', ""))
    assert other.fingerprint != REGISTRY.fingerprint
    assert [d.label for d in REGISTRY.detectors] == ["bookings@1", "budget@1"]


@pytest.mark.parametrize(
    ("toml", "field", "rule"),
    [
        ('[[detectors]]\nreads = ["x"]\n', "registry.detectors[0].detector", "required"),
        ('[[detectors]]\ndetector = "budget@1"\n', "registry.detectors[0].reads", "list-of-str"),
        (
            '[[detectors]]\ndetector = "budget@1"\nreads = ["a/b/c"]\n',
            "registry.detectors[0].reads[0]",
            "read",
        ),
        (
            '[[detectors]]\ndetector = "budget@1"\nreads = ["x"]\nlimit = 3\n',
            "registry.detectors[0].limit",
            "unknown-field",
        ),
        (
            '[[detectors]]\ndetector = "bud get"\nreads = ["x"]\n',
            "registry.detectors[0].detector",
            "normalizer-name",
        ),
    ],
)
def test_a_malformed_detectors_section_names_the_field_and_the_rule(toml, field, rule):
    with pytest.raises(RegistryError) as err:
        Registry.from_toml(toml)
    assert (err.value.field, err.value.rule) == (field, rule)


def test_register_detector_refuses_builtin_names_and_a_second_function():
    from statefuse.registry import ContractError

    with pytest.raises(ContractError, match="built-in"):
        register_detector("budget", 1, budget)
    register_detector("tests.same", 1, bookings)
    register_detector("tests.same", 1, bookings)  # idempotent
    with pytest.raises(ContractError) as err:
        register_detector("tests.same", 1, budget)
    assert err.value.rule == "detector-registered"


# --- detector-failed -----------------------------------------------------------------------------


def _raises(claims: DetectorInput) -> list[Finding]:
    raise ZeroDivisionError("boom")


def _unordered(claims: DetectorInput) -> set[Finding]:
    return set()


def _stranger(claims: DetectorInput) -> list[Finding]:
    return [Finding("odd", ("a", "b", "c"), (b"\x00" * 32,), "names a claim it was not given")]


def _bad_witness(claims: DetectorInput) -> list[Finding]:
    c = claims.claims[0]
    return [Finding("odd", c.key, (c.claim_id,), "nan", witness={"x": float("nan")})]


register_detector("tests.raises", 1, _raises)
register_detector("tests.unordered", 1, _unordered)  # type: ignore[arg-type]
register_detector("tests.stranger", 1, _stranger)
register_detector("tests.badwitness", 1, _bad_witness)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("tests.raises", "raised ZeroDivisionError: boom"),
        ("tests.unordered", "returned a set"),
        ("tests.stranger", "a claim not in its input"),
        ("tests.badwitness", "witness"),
    ],
)
def test_a_detector_that_fails_yields_a_detector_failed_finding_naming_it(name, says):
    registry = Registry(detectors=[DetectorSpec(name, 1, ((None, "cost"),))])
    w = _writer("a", registry)
    ops = [w.claim("budget", "x", "cost", 1), w.claim("p", "y", "owner", "Dana")]
    state = materialize(ops, registry=registry)
    (failed,) = state.conflicts
    assert failed.finding == DETECTOR_FAILED
    assert failed.detector == f"{name}@1"
    assert name in failed.reason and says in failed.reason
    assert failed.candidates == ()
    assert state.active_at("p/y/owner")  # the rest of the state is made as ever
    # no input, no run: a detector is not run on nothing
    assert materialize(ops[1:], registry=registry).conflicts == ()


# --- laws ----------------------------------------------------------------------------------------

_SUBJECTS = ("q1", "q2")
_ROOMS = ("4", "5")


@st.composite
def _programs(draw: st.DrawFn) -> list:
    """Ops of three agents: limits, costs, bookings and retractions of earlier ones."""
    agents = [_writer(f"agent{i}") for i in range(3)]
    ops: list = []
    for _ in range(draw(st.integers(3, 14))):
        who = agents[draw(st.integers(0, 2))]
        kind = draw(
            st.sampled_from(
                ("limit", "limit", "cost", "cost", "booking", "booking", "retract", "other")
            )
        )
        if kind == "limit":
            amount = draw(st.sampled_from((50, 100, "n/a")))
            ops.append(who.claim("budget", draw(st.sampled_from(_SUBJECTS)), "limit", amount))
        elif kind == "cost":
            value = {
                "budget": draw(st.sampled_from(_SUBJECTS)),
                "amount": draw(st.sampled_from((30, 40.5, "60"))),
            }
            scope = draw(st.sampled_from(("global", "global", "task:t")))
            ops.append(
                who.claim("budget", f"item{draw(st.integers(0, 5))}", "cost", value, scope=scope)
            )
        elif kind == "booking":
            start = draw(st.integers(8, 12))
            value = {
                "room": draw(st.sampled_from(_ROOMS)),
                "start": f"2026-01-01T{start:02d}:00Z",
                "end": f"2026-01-01T{start + draw(st.integers(1, 2)):02d}:00Z",
            }
            ops.append(who.claim("rooms", f"b{draw(st.integers(0, 5))}", "booking", value))
        elif kind == "retract":
            claims = [o for o in ops if isinstance(o, ClaimAdded)]
            if claims:
                ops.append(who.retract(claim_id=draw(st.sampled_from(claims)).op_id))
        else:
            ops.append(who.claim("p", "x", "owner", draw(st.sampled_from(("Dana", "Lee")))))
    return ops


@settings(max_examples=60, deadline=None)
@given(_programs(), st.data())
def test_findings_do_not_depend_on_arrival_order_or_duplicates(ops, data):
    event("findings" if materialize(ops, registry=REGISTRY).findings else "no findings")
    order = data.draw(st.permutations(ops))
    assert_same_state(
        materialize(ops, registry=REGISTRY), materialize(order + order[:2], registry=REGISTRY)
    )


@settings(max_examples=60, deadline=None)
@given(_programs(), st.data())
def test_incremental_findings_equal_the_full_ones_after_any_sequence(ops, data):
    order = data.draw(st.permutations(ops))
    m = Materializer(registry=REGISTRY)
    for op in order:
        m.apply(op)
        if data.draw(st.booleans()):
            m.state().conflicts  # noqa: B018 - read, so the next State carries findings over
    assert_same_state(m.state(), materialize(ops, registry=REGISTRY))
    assert m.state().findings == materialize(ops, registry=REGISTRY).findings


def test_a_write_reruns_only_the_detectors_that_read_its_predicate():
    runs: list[str] = []

    def counting(label):
        def run(claims):
            runs.append(label)
            return []

        return run

    register_detector("tests.count-a", 1, counting("a"))
    register_detector("tests.count-b", 1, counting("b"))
    registry = Registry(
        detectors=[
            DetectorSpec("tests.count-a", 1, ((None, "cost"),)),
            DetectorSpec("tests.count-b", 1, (("rooms", "booking"),)),
        ]
    )
    w = _writer("a", registry)
    m = Materializer(registry=registry)
    m.apply_all([w.claim("x", "i", "cost", 1), w.claim("rooms", "r", "booking", 2)])
    assert m.state().findings == () and sorted(runs) == ["a", "b"]
    runs.clear()
    m.apply(w.claim("x", "j", "cost", 2))
    m.state().findings  # noqa: B018
    assert runs == ["a"]
    runs.clear()
    m.apply(w.claim("x", "k", "owner", "Dana"))
    m.state().findings  # noqa: B018
    assert runs == []


# --- the View ------------------------------------------------------------------------------------


def test_a_finding_is_open_in_the_view_until_a_decision_settles_it_and_a_new_claim_reopens_it():
    from statefuse import Lens, project

    ops = _purchases(3)
    state = materialize(ops, registry=REGISTRY)
    view = project(state, Lens())
    (f,) = view.findings
    assert f.open and f.finding == "over-budget" and dict(f.witness)["required"] == 120000
    assert view.open_findings == (f,)
    assert "findings" in view.to_dict()
    boss = _writer("boss")
    decision = boss.decide_on(state.conflicts[0], ops[1].op_id, reason="approved overrun")
    decided = project(materialize([*ops, decision], registry=REGISTRY), Lens())
    assert decided.findings[0].decided == "approved overrun"
    assert decided.findings[0].selected.op_id == ops[1].op_id and decided.open_findings == ()
    # a fourth purchase is a new candidate: the decision goes stale and the finding reopens
    more = _writer("agent9").claim("budget", "buy9", "cost", {"budget": "q3", "amount": 1})
    later = materialize([*ops, decision, more], registry=REGISTRY)
    assert later.why_stale(decision) is not None
    assert project(later, Lens()).findings[0].open


def test_a_finding_with_a_hidden_claim_shows_without_it_and_keeps_its_numbers_back():
    from statefuse import Lens, project

    ops = _purchases(2)
    secret = _writer("cfo").claim(
        "budget", "bonus", "cost", {"budget": "q3", "amount": 40000}, visibility=["finance"]
    )
    state = materialize([*ops, secret], registry=REGISTRY)
    (f,) = project(state, Lens(roles=("planner",))).findings
    assert secret.op_id not in {c.op_id for c in f.candidates}
    assert f.not_shown == 1 and f.withheld
    assert f.reason == "" and f.witness is None
    assert ("budget", "bonus", "cost") not in f.keys
    (full,) = project(state, Lens(roles=("finance",))).findings
    assert full.not_shown == 0 and dict(full.witness)["required"] == 120000
    # a finding whose claims are all hidden is only counted
    w = _writer("hr")
    only = [
        w.claim("budget", "q9", "limit", 1, visibility=["hr"]),
        w.claim("budget", "pay", "cost", {"budget": "q9", "amount": 5}, visibility=["hr"]),
    ]
    view = project(materialize(only, registry=REGISTRY), Lens())
    assert view.findings == () and view.findings_not_shown == 1


# --- the context ---------------------------------------------------------------------------------


def test_the_context_shows_a_finding_in_one_line_with_its_reason_and_witness():
    from statefuse import Lens, SectionName, context_for

    ops = _purchases(3)
    ctx = context_for(materialize(ops, registry=REGISTRY), Lens(), budget=2000)
    section = ctx.section(SectionName.FINDINGS)
    assert section is not None
    (line,) = section.lines
    assert line.startswith("over-budget at budget/q3/limit (budget@1): 3 costs of budget q3")
    assert "required=120000" in line and "available=100000" in line
    assert "budget/buy0/cost" in line
    assert set(section.claim_ids) == {op.op_id for op in ops}
    assert "Findings:" in ctx.text


def test_the_context_keeps_a_finding_s_numbers_back_from_a_lens_that_misses_a_claim():
    from statefuse import Lens, SectionName, context_for

    ops = _purchases(2)
    secret = _writer("cfo").claim(
        "budget", "bonus", "cost", {"budget": "q3", "amount": 40000}, visibility=["finance"]
    )
    ctx = context_for(materialize([*ops, secret], registry=REGISTRY), Lens(), budget=2000)
    (line,) = ctx.section(SectionName.FINDINGS).lines
    assert "1 of its claims not shown" in line
    assert "120000" not in ctx.text and "bonus" not in ctx.text


# --- the derived state of a store ----------------------------------------------------------------


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory):
    from statefuse.storage.sqlitestore import SQLiteStore
    from statefuse.storage.store import StoreInfo

    s = SQLiteStore(tmp_path_factory.mktemp("ix") / "s.db")
    s.initialize(StoreInfo(space="team", mode="open", root=b"", registry=b"\x01" * 32))
    yield s
    s.close()


@settings(max_examples=40, deadline=None)
@given(_programs(), st.data())
def test_a_store_s_derived_state_gives_the_findings_of_materialize_at_any_slice(
    sqlite_store, ops, data
):
    order = data.draw(st.permutations(ops))
    head = data.draw(st.integers(0, len(order)))
    ix = sqlite_store.index()
    with sqlite_store.write_transaction():
        ix.rebuild(order[:head], upto=head, registry=REGISTRY)
        at = head
        while at < len(order):
            size = data.draw(st.integers(1, 4))
            ix.apply(order[at : at + size], upto=at + size, registry=REGISTRY)
            at += size
    full = materialize(ops, registry=REGISTRY)
    every = ix.state_of(ix.loci(active=False), registry=REGISTRY)
    assert every.findings == full.findings
    # a slice at any one key holds the whole input of the detectors reading it
    loci = ix.loci(active=True)
    if loci:
        one = ix.state_of([data.draw(st.sampled_from(loci))], registry=REGISTRY)
        readers = {
            s.label
            for c in one.active_claims()
            for s in REGISTRY.detectors
            if s.reads_predicate(c.namespace, c.predicate)
        }
        assert one.findings == tuple(f for f in full.findings if f.detector in readers)
    listed = ix.state_of(ix.detector_loci(REGISTRY), registry=REGISTRY)
    assert listed.findings == full.findings


# --- the contract check --------------------------------------------------------------------------

BUDGET_SAMPLES = [
    [
        {"namespace": "budget", "subject": "q3", "predicate": "limit", "value": 100000},
        *[
            {
                "namespace": "budget",
                "subject": f"buy{i}",
                "predicate": "cost",
                "value": {"budget": "q3", "amount": 40000},
            }
            for i in range(3)
        ],
    ],
    [{"namespace": "budget", "subject": "q3", "predicate": "limit", "value": "n/a"}],
    [],
]
BOOKING_SAMPLES = [
    [
        {
            "namespace": "rooms",
            "subject": f"b{i}",
            "predicate": "booking",
            "value": {
                "room": "4",
                "start": f"2026-03-25T1{i}:00Z",
                "end": f"2026-03-25T1{i + 2}:00Z",
            },
        }
        for i in range(3)
    ],
]


def test_check_registry_checks_the_shipped_detectors_in_fresh_interpreters():
    from statefuse.registry.checker import check_registry

    check_registry(REGISTRY, {"budget@1": BUDGET_SAMPLES, "bookings@1": BOOKING_SAMPLES})


def test_check_registry_wants_samples_for_a_declared_custom_detector():
    from statefuse.registry import ContractError
    from statefuse.registry.checker import check_registry

    registry = Registry(detectors=[DetectorSpec("tests.raises", 1, ((None, "cost"),))])
    with pytest.raises(ContractError) as err:
        check_registry(registry, {})
    assert err.value.rule == "samples-for-detectors"


@pytest.mark.parametrize(
    ("fn", "rule", "across"),
    [
        ("by_set_order", "same-in-every-interpreter", True),
        ("counting", "deterministic", False),
        ("raising", "detector-fails", False),
    ],
)
def test_check_registry_refuses_a_detector_that_breaks_the_contract(fn, rule, across):
    import detectors_for_tests

    from statefuse.registry.checker import DetectorContractError, check_registry

    name = f"tests.bad-{fn}"
    register_detector(name, 1, getattr(detectors_for_tests, fn))
    registry = Registry(detectors=[DetectorSpec(name, 1, ((None, "cost"),))])
    samples = [
        [
            {"namespace": "n", "subject": s, "predicate": "cost", "value": 1}
            for s in ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
        ]
    ]
    with pytest.raises(DetectorContractError) as err:
        check_registry(registry, {f"{name}@1": samples}, across_interpreters=across)
    assert err.value.rule == rule and name in str(err.value)


def test_a_finding_from_a_view_can_be_decided_and_one_missing_a_claim_needs_its_state():
    from statefuse import Lens, project
    from statefuse.core.error import OpRuleError

    ops = _purchases(2)
    secret = _writer("cfo").claim(
        "budget", "bonus", "cost", {"budget": "q3", "amount": 40000}, visibility=["finance"]
    )
    state = materialize([*ops, secret], registry=REGISTRY)
    boss = _writer("boss")
    (shown,) = project(state, Lens(roles=("finance",))).findings
    decision = boss.decide_on(shown, ops[1].op_id, reason="ok")
    assert state.why_stale(decision) is None
    (partial,) = project(state, Lens()).findings
    with pytest.raises(OpRuleError) as err:
        boss.decide_on(partial, ops[1].op_id)
    assert err.value.rule == "full-conflict"
    whole = boss.decide_on(partial, ops[1].op_id, state=state)
    assert set(whole.groups) == set(decision.groups)
    assert state.why_stale(whole) is None
