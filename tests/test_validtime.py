"""Valid time and context dimensions on claims (SEMANTICS §5 first bullet, §9): the op layout,
the conflict rule, and that every place judging conflicts applies the same rule."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Materializer, Writer, materialize, project
from statefuse.core.error import EncodingError, OpRuleError
from statefuse.core.op import ClaimAdded, decode_op, decode_ops
from statefuse.core.validity import (
    conflicting,
    contexts_agree,
    format_interval,
    holds_at,
    instant_ms,
    overlaps,
)
from statefuse.reading.lens import Lens, LensError
from statefuse.reading.timeline import timeline
from statefuse.reading.view import How
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import StoreInfo
from statefuse.storage.testing import (
    TEST_REGISTRY,
    assert_index_agrees,
    assert_same_state,
    op_lists,
    state_summary,
)

REG = TEST_REGISTRY
INFO = StoreInfo(space="team", mode="open", root=b"", registry=b"\x01" * 32)
DAY = 86_400_000
JAN, MAR, JUN = 1_767_225_600_000, 1_772_323_200_000, 1_780_272_000_000  # 2026-01/03/06-01


def _claim(**kw):
    base = dict(
        author="w",
        lamport=1,
        wall_ms=0,
        namespace="ns",
        subject="s",
        predicate="p",
        value=1,
        claim_ref=bytes(range(32)),
    )
    base.update(kw)
    return ClaimAdded(**base)


# --- the op ---------------------------------------------------------------------------------


def test_a_claim_without_the_new_fields_keeps_the_bytes_and_id_of_the_first_release():
    from test_op import FIRST_RELEASE_CLAIM, FIRST_RELEASE_CLAIM_ID

    claim = _claim(claim_ref=bytes(range(32)), confidence=1.0)
    assert claim.encode() == FIRST_RELEASE_CLAIM
    assert claim.op_id.hex() == FIRST_RELEASE_CLAIM_ID
    assert claim.valid_from is None and claim.valid_until is None and claim.context is None
    assert decode_op(FIRST_RELEASE_CLAIM).op_id == claim.op_id
    assert _claim()._version() == 2 and _claim(confidence=0.5)._version() == 1


def test_a_claim_with_an_interval_or_a_context_encodes_as_a_new_version_and_decodes_back():
    plain = _claim()
    timed = _claim(valid_from=JAN, valid_until=MAR)
    placed = _claim(context={"location": "London"})
    stated = _claim(confidence=0.5, valid_until=MAR)
    assert timed._version() == 4 and placed._version() == 4 and stated._version() == 3
    assert len({plain.op_id, timed.op_id, placed.op_id}) == 3  # part of the id
    assert plain.claim_ref == timed.claim_ref == placed.claim_ref  # not of the ref
    for c in (timed, placed, stated):
        back = decode_op(c.encode())
        assert back.op_id == c.op_id
        assert (back.valid_from, back.valid_until) == (c.valid_from, c.valid_until)
        assert back.context == c.context
    assert [o.op_id for o in decode_ops([timed.encode(), plain.encode()] * 3)] == [
        timed.op_id,
        plain.op_id,
    ] * 3


def test_a_context_is_stored_sorted_and_an_empty_one_is_no_context():
    a = _claim(context={"z": 1, "a": "x", "b": True})
    b = _claim(context={"b": True, "a": "x", "z": 1})
    assert a.op_id == b.op_id and list(a.context) == ["a", "b", "z"]
    assert _claim(context={}).op_id == _claim().op_id


@pytest.mark.parametrize(
    ("kw", "field", "rule"),
    [
        ({"valid_from": MAR, "valid_until": JAN}, "valid_until", "valid-interval"),
        ({"valid_from": MAR, "valid_until": MAR}, "valid_until", "valid-interval"),
        ({"valid_from": -1}, "valid_from", "ms-range"),
        ({"valid_until": "2026"}, "valid_until", "int"),
        ({"context": {"a": 1.5}}, "context.a", "context-value"),
        ({"context": {"a": None}}, "context.a", "context-value"),
        ({"context": {"": 1}}, "context", "context-dimension"),
        ({"context": {f"d{i}": i for i in range(17)}}, "context", "context-size"),
        ({"context": ["a"]}, "context", "context-map"),
    ],
)
def test_bad_intervals_and_contexts_are_typed_errors_naming_the_field(kw, field, rule):
    with pytest.raises(OpRuleError) as e:
        _claim(**kw)
    assert (e.value.field, e.value.rule) == (field, rule)


def test_a_reader_of_the_current_release_refuses_the_new_encoding_with_the_op_version_rule(
    monkeypatch,
):
    """What a peer on the release before sees: it knows ClaimAdded versions 1 and 2 and op
    versions {1, 2} only (emulated by taking the new versions out of the decoder)."""
    from statefuse.core import op as op_module

    data = _claim(valid_from=JAN).encode()
    assert b"\xa1v\x04" in data
    monkeypatch.setattr(op_module, "_KNOWN_VERSIONS", frozenset((1, 2)))
    with pytest.raises(EncodingError) as e:
        decode_op(data)
    assert (e.value.field, e.value.rule) == ("op.v", "op-version")
    assert decode_op(_claim().encode()).op_id == _claim().op_id


def test_instants_are_taken_as_ms_aware_datetimes_or_iso_8601_text():
    assert instant_ms("valid_from", "2026-01-01") == JAN
    assert instant_ms("valid_from", "2026-01-01T00:00:00Z") == JAN
    assert instant_ms("valid_from", "2026-01-01T01:00:00+01:00") == JAN
    assert instant_ms("valid_from", datetime(2026, 1, 1, tzinfo=timezone.utc)) == JAN
    assert instant_ms("valid_from", JAN + 5) == JAN + 5
    for bad, rule in (
        (datetime(2026, 1, 1), "aware-datetime"),
        ("2026-01-01T10:00", "aware-datetime"),
        ("yesterday", "iso-8601"),
        (1.5, "instant"),
    ):
        with pytest.raises(OpRuleError) as e:
            instant_ms("valid_from", bad)
        assert (e.value.field, e.value.rule) == ("valid_from", rule)
    assert format_interval(JAN, MAR) == "[2026-01-01 .. 2026-03-01)"
    assert format_interval(None, MAR) == "[.. 2026-03-01)"
    assert format_interval(JAN + 9 * 3_600_000, None) == "[2026-01-01T09:00Z ..)"


def test_the_writer_takes_the_new_keywords_and_checks_the_interval():
    w = Writer("w", registry=REG, clock=lambda: 0)
    c = w.claim(
        "shop",
        "s1",
        "price",
        12,
        valid_from="2026-01-01",
        valid_until=datetime(2026, 3, 1, tzinfo=timezone.utc),
        context={"location": "London"},
    )
    assert (c.valid_from, c.valid_until, dict(c.context)) == (JAN, MAR, {"location": "London"})
    with pytest.raises(OpRuleError) as e:
        w.claim("shop", "s1", "price", 12, valid_from=MAR, valid_until=JAN)
    assert e.value.field == "valid_until"
    with pytest.raises(OpRuleError) as e:
        w.claim("shop", "s1", "price", 12, valid_from=datetime(2026, 1, 1))
    assert e.value.field == "valid_from"


# --- the rule ----------------------------------------------------------------------------------


def _pairwise(claims, gkey):
    """The definition: a claim is a candidate iff it conflicts with some other claim."""
    out = set()
    for a in claims:
        for b in claims:
            if (
                a is not b
                and gkey(a.op_id) != gkey(b.op_id)
                and overlaps(a, b)
                and contexts_agree(a.context, b.context)
            ):
                out.add(a.op_id)
    return tuple(sorted(out))


_bounds = st.one_of(st.none(), st.integers(0, 6))
_ctx = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["loc", "tier"]),
        st.sampled_from(["London", "Paris", 1, True]),
        max_size=2,
    ),
)


@st.composite
def _situated_claims(draw, max_size=8):
    out = []
    for i in range(draw(st.integers(0, max_size))):
        a, b = draw(_bounds), draw(_bounds)
        if a is not None and b is not None and a >= b:
            a, b = (b, a) if a != b else (a, a + 1)
        out.append(
            _claim(
                lamport=i + 1,
                value=draw(st.integers(0, 2)),
                valid_from=a,
                valid_until=b,
                context=draw(_ctx),
            )
        )
    return out


def _gkey(claims):
    by_id = {c.op_id: repr(c.value).encode() for c in claims}
    return by_id.__getitem__


@settings(max_examples=min(settings.default.max_examples, 300))
@given(_situated_claims())
def test_interval_and_context_grouping_equals_the_pairwise_definition(claims):
    gkey = _gkey(claims)
    assert conflicting(claims, gkey) == _pairwise(claims, gkey)


@settings(max_examples=min(settings.default.max_examples, 200))
@given(st.lists(st.integers(0, 3), max_size=8))
def test_without_intervals_or_contexts_every_claim_is_a_candidate_once_two_values_differ(values):
    claims = [_claim(lamport=i + 1, value=v) for i, v in enumerate(values)]
    gkey = _gkey(claims)
    want = tuple(sorted(c.op_id for c in claims)) if len(set(values)) > 1 else ()
    assert conflicting(claims, gkey) == want


def test_grouping_is_not_quadratic_on_many_claims():
    """20,000 claims of two values on disjoint consecutive days: no conflict, found by one
    sweep (all pairs would be 2e8 comparisons)."""
    claims = [
        _claim(lamport=i + 1, value=i % 2, valid_from=i * DAY, valid_until=(i + 1) * DAY)
        for i in range(20_000)
    ]
    assert conflicting(claims, _gkey(claims)) == ()


# --- every place that judges conflicts ------------------------------------------------------------


@st.composite
def _situated_programs(draw):
    """Claims on two keys by three writers, some with intervals and contexts, some retracted
    by id or ref."""
    writers = [Writer(f"w{i}", registry=REG, clock=lambda: 0) for i in range(3)]
    ops: list = []
    for _ in range(draw(st.integers(1, 14))):
        w = draw(st.sampled_from(writers))
        if ops and draw(st.integers(0, 4)) == 0:
            target = draw(st.sampled_from([o for o in ops if isinstance(o, ClaimAdded)]))
            if draw(st.booleans()):
                ops.append(w.retract(claim_id=target.op_id))
            else:
                ops.append(w.retract(claim_ref=target.claim_ref))
            continue
        a, b = draw(_bounds), draw(_bounds)
        if a is not None and b is not None and a >= b:
            a, b = (b, a) if a != b else (a, a + 1)
        ops.append(
            w.claim(
                "proj",
                draw(st.sampled_from(["launch", "vendor"])),
                "price",
                draw(st.sampled_from([1000, "1,000", 999, 5])),
                valid_from=None if a is None else a * DAY,
                valid_until=None if b is None else b * DAY,
                context=draw(_ctx),
            )
        )
    return ops


@settings(max_examples=min(settings.default.max_examples, 100))
@given(_situated_programs(), st.data())
def test_incremental_equals_full_with_intervals_and_dimensions(ops, data):
    order = data.draw(st.permutations(ops))
    m = Materializer(registry=REG)
    for op in order:
        m.apply(op)
    full = materialize(ops, registry=REG)
    assert_same_state(m.state(), full)
    # and the candidates of each conflict are those of the definition
    for c in full.conflicts:
        here = [full.claims[i] for i in full._ix.members_at((*c.key, c.scope))]
        assert c.candidates == _pairwise(here, full._ix.gkey)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = SQLiteStore(tmp_path_factory.mktemp("vt") / "s.db")
    s.initialize(INFO)
    yield s
    s.close()


@settings(max_examples=min(settings.default.max_examples, 40))
@given(_situated_programs(), st.integers(1, 5))
def test_the_store_derived_state_agrees_with_the_in_memory_state(store, ops, size):
    ix = store.index()
    full = materialize(ops, registry=REG)
    with store.write_transaction():
        ix.rebuild(ops, upto=len(ops), registry=REG)
        assert_index_agrees(ix, full)
        assert ix.conflict_loci() == [
            c.locus for c in sorted(full.conflicts, key=lambda k: (k.key, k.scope))
        ]
    with store.write_transaction():
        ix.rebuild([], upto=0, registry=REG)
        for at in range(0, len(ops), size):
            ix.apply(ops[at : at + size], upto=at + size, registry=REG)
        assert_index_agrees(ix, full)
        assert ix.conflict_count() == len(full.conflicts)


# --- the reference implementation's example: a shop open or closed, by location and hours ---------


def _hours(day: int, start: int, end: int) -> dict:
    base = JUN + day * DAY
    return {"valid_from": base + start * 3_600_000, "valid_until": base + end * 3_600_000}


def test_shop_open_or_closed_by_location_and_hours():
    w1, w2 = (Writer(n, registry=DEFAULT_REGISTRY, clock=lambda: 0) for n in ("a", "b"))
    london_open = w1.claim("shop", "s1", "status", "open", context={"location": "London"})
    paris_closed = w2.claim("shop", "s1", "status", "closed", context={"location": "Paris"})
    # London vs Paris: two facts, not a conflict
    state = materialize([london_open, paris_closed])
    assert state.conflicts == ()
    # two London values: a conflict between them only
    london_closed = w2.claim("shop", "s1", "status", "closed", context={"location": "London"})
    state = materialize([london_open, paris_closed, london_closed])
    (c,) = state.conflicts
    assert c.candidates == tuple(sorted((london_open.op_id, london_closed.op_id)))
    assert len(c.groups) == 2
    # hours: overlapping hours of two London values conflict, consecutive hours do not
    open_9_17 = w1.claim(
        "shop", "s2", "status", "open", context={"location": "London"}, **_hours(0, 9, 17)
    )
    closed_17_24 = w2.claim(
        "shop", "s2", "status", "closed", context={"location": "London"}, **_hours(0, 17, 24)
    )
    assert materialize([open_9_17, closed_17_24]).conflicts == ()
    closed_16_24 = w2.claim(
        "shop", "s2", "status", "closed", context={"location": "London"}, **_hours(0, 16, 24)
    )
    (c,) = materialize([open_9_17, closed_17_24, closed_16_24]).conflicts
    assert c.candidates == tuple(sorted((open_9_17.op_id, closed_16_24.op_id)))
    # a claim naming no location applies to every location: it conflicts with both
    closed_all = w2.claim("shop", "s1", "status", "closed")
    (c,) = materialize([london_open, paris_closed, closed_all]).conflicts
    assert c.candidates == tuple(sorted((london_open.op_id, closed_all.op_id)))


def test_a_price_that_changed_on_a_date_is_a_timeline_not_a_conflict():
    w = Writer("w", registry=REG, clock=lambda: 0)
    old = w.claim("shop", "tea", "price", 12, valid_until="2026-03-01")
    new = w.claim("shop", "tea", "price", 15, valid_from="2026-03-01")
    assert materialize([old, new]).conflicts == ()
    overlapping = w.claim("shop", "tea", "price", 14, valid_from="2026-02-15")
    (c,) = materialize([old, new, overlapping]).conflicts
    assert c.candidates == tuple(sorted((old.op_id, overlapping.op_id, new.op_id)))
    assert state_summary(materialize([old, new]))["conflicts"] == []


# --- what a lens sees: Lens.valid_at, Lens.context ----------------------------------------------


def _price_change():
    w = Writer("w", registry=REG, clock=lambda: 0)
    old = w.claim("shop", "tea", "price", 12, valid_until="2026-03-01")
    new = w.claim("shop", "tea", "price", 15, valid_from="2026-03-01")
    return old, new


TEA = ("shop", "tea", "price")


def test_a_lens_at_an_instant_shows_the_value_that_holds_then_and_counts_the_other():
    old, new = _price_change()
    state = materialize([old, new], registry=REG)
    feb = project(state, Lens(valid_at=instant_ms("t", "2026-02-01")))
    assert feb.selected[TEA].claim == old and feb.selected[TEA].how is How.SOLE
    assert feb.excluded["not-valid-at"] == 1
    assert feb.excluded_ids["not-valid-at"] == (new.claim_id,)
    # without valid_at, the lens's now is the instant
    april = project(state, Lens(now=instant_ms("t", "2026-04-01")))
    assert april.selected[TEA].claim == new and april.excluded["not-valid-at"] == 1
    # valid_at wins over now
    both = project(state, Lens(now=instant_ms("t", "2026-04-01"), valid_at=JAN))
    assert both.selected[TEA].claim == old
    # neither: every interval is shown, side by side (no conflict), with its interval
    timeless = project(state, Lens())
    assert timeless.unresolved == () and "not-valid-at" not in timeless.excluded
    sel = timeless.selected[TEA]
    assert sel.how is How.MULTI and {c.op_id for c in sel.claims} == {old.op_id, new.op_id}
    assert timeless.explanations[TEA] == (
        "shop/tea/price [global]: 12 [.. 2026-03-01), 15 [2026-03-01 ..)"
        " (values hold in different intervals or contexts)"
    )


def test_a_conflict_is_visible_only_among_the_claims_a_lens_still_shows():
    w1, w2 = (Writer(n, registry=DEFAULT_REGISTRY, clock=lambda: 0) for n in ("a", "b"))
    london_open = w1.claim("shop", "s1", "status", "open", context={"location": "London"})
    paris_closed = w2.claim("shop", "s1", "status", "closed", context={"location": "Paris"})
    london_closed = w2.claim(
        "shop", "s1", "status", "closed", context={"location": "London"}, valid_until=MAR
    )
    state = materialize([london_open, paris_closed, london_closed])
    key = ("shop", "s1", "status")
    london = project(state, Lens(context={"location": "London"}, valid_at=JAN))
    (surfaced,) = london.surfaced_conflicts
    assert {c.op_id for c in surfaced.candidates} == {london_open.op_id, london_closed.op_id}
    assert london.excluded["other-context"] == 1
    paris = project(state, Lens(context={"location": "Paris"}, valid_at=JAN))
    assert paris.unresolved == () and paris.selected[key].claim == paris_closed
    assert paris.excluded["other-context"] == 2
    # in June the London "closed" no longer holds: one value left, no conflict
    june = project(state, Lens(context={"location": "London"}, valid_at=JUN))
    assert june.unresolved == () and june.selected[key].claim == london_open
    assert june.excluded == {
        "hidden": 0,
        "out-of-scope": 0,
        "expired": 0,
        "shadowed": 0,
        "not-valid-at": 1,
        "other-context": 1,
    }


@settings(max_examples=min(settings.default.max_examples, 60))
@given(_situated_programs(), st.integers(0, 7), _ctx)
def test_a_lens_shows_exactly_the_claims_that_hold_and_agree_and_carries_over(ops, day, ctx):
    lens = Lens(valid_at=day * DAY, context=ctx)
    full = materialize(ops, registry=REG)
    view = project(full, lens)
    shown: dict = {}
    for key, sel in view.selected.items():
        shown[key] = list(sel.claims)
    for sc in view.surfaced_conflicts:
        shown[sc.key] = list(sc.candidates)
    for claims in shown.values():
        for c in claims:
            assert holds_at(c, day * DAY) and contexts_agree(c.context, ctx)
    active = full.active_claims()
    late = [c for c in active if not holds_at(c, day * DAY)]
    elsewhere = [c for c in active if holds_at(c, day * DAY) and not contexts_agree(c.context, ctx)]
    assert view.excluded.get("not-valid-at", 0) == len(late)
    assert view.excluded.get("other-context", 0) == len(elsewhere)
    for key in view.unresolved:
        assert conflicting(shown[key], full._ix.gkey)
    # the View carried over from State to State equals the one made from scratch
    m = Materializer(registry=REG)
    for op in ops:
        m.apply(op)
        project(m.state(), lens)
    again = project(m.state(), lens)
    assert again.unresolved == view.unresolved
    assert dict(again.excluded) == dict(view.excluded)
    assert {k: s.claim.op_id for k, s in again.selected.items()} == {
        k: s.claim.op_id for k, s in view.selected.items()
    }


def test_a_lens_with_a_context_is_a_value_equal_and_hashed_by_its_dimensions():
    a, b = Lens(context={"b": 1, "a": "x"}), Lens(context={"a": "x", "b": 1})
    assert a == b and hash(a) == hash(b) and len({a, b, Lens()}) == 2
    assert Lens(context={}) == Lens() and Lens(context={"a": 1}) != Lens(context={"a": True})
    # and a View made for one is never handed to the other
    w = Writer("w", registry=REG, clock=lambda: 0)
    state = materialize([w.claim("shop", "s1", "status", "open", context={"tier": 1})])
    assert project(state, Lens(context={"tier": 1})).excluded.get("other-context", 0) == 0
    assert project(state, Lens(context={"tier": True})).excluded["other-context"] == 1


def test_bad_lens_instants_and_contexts_are_typed_errors():
    with pytest.raises(LensError) as e:
        Lens(valid_at=-5)
    assert (e.value.field, e.value.rule) == ("valid_at", "ms")
    with pytest.raises(LensError) as e:
        Lens(context={"location": 1.5})
    assert e.value.field == "context.location"


# --- a key's timeline ------------------------------------------------------------------------


def test_a_timeline_lists_a_keys_values_by_interval_with_retracted_ones_on_request():
    w = Writer("w", registry=REG, clock=lambda: 0)
    old, new = _price_change()
    wrong = w.claim("shop", "tea", "price", 99, valid_from="2026-02-01", valid_until="2026-02-02")
    plain = w.claim("shop", "tea", "price", 12)
    oops = w.retract(claim_id=wrong.claim_id)
    state = materialize([new, wrong, old, plain, oops], registry=REG)
    entries = timeline(state, TEA)
    # open start first (by end: the one ending in March before the unbounded one)
    assert [e.claim for e in entries] == [old, plain, new]
    assert [(e.valid_from, e.valid_until) for e in entries] == [
        (None, MAR),
        (None, None),
        (MAR, None),
    ]
    assert [e.in_conflict for e in entries] == [False, True, True]  # 12 forever vs 15 from March
    every = timeline(state, TEA, retracted=True)
    assert [e.claim for e in every] == [old, plain, wrong, new]
    assert [e.retracted for e in every] == [False, False, True, False]
    assert [e.claim for e in timeline(state, TEA, valid_at=JAN)] == [old, plain]


# --- old stores and old peers -------------------------------------------------------------------


def test_a_store_of_the_release_before_reads_unchanged_and_takes_situated_claims(tmp_path):
    """The schema-6 release store: every claim keeps its id and status, its conflicts and its
    decision are as written, on a read-only open and on the lazy open of its derived state;
    a claim with an interval then joins it without touching the old conflicts."""
    from test_migration import RELEASE_6, WRITTEN_6, _check_replica_holds_what_was_written, _copy

    from statefuse.sync.replica import Replica

    path = _copy(tmp_path, release=RELEASE_6)
    rep = Replica.open(path, readonly=True)
    try:
        _check_replica_holds_what_was_written(rep, written=WRITTEN_6)
        assert not any(c.situated for c in rep.state().all_claims())
    finally:
        rep.close()
    rep = Replica.open(path)
    try:
        before = {(c.locus, c.conflict_id) for c in rep.state().conflicts}
        timed = rep.add_claim("project/alpha/owner", "Kim", valid_from="2027-01-01")
        # an open-ended owner (Dana, Lee) overlaps 2027: Kim joins that conflict
        joined = rep.state().conflict_of("project", "alpha", "owner")
        assert joined is not None and timed.claim_id in joined.candidates
        rest = {(c.locus, c.conflict_id) for c in rep.state().conflicts if c.key != joined.key}
        assert rest <= before
    finally:
        rep.close()
    again = Replica.open(path)  # the lazy open on the derived state agrees
    try:
        assert (
            again.state_for(("project", "alpha", "owner")).conflict_of("project", "alpha", "owner")
            == joined
        )
    finally:
        again.close()


def test_a_peer_of_the_release_before_quarantines_a_situated_claim_with_the_op_version_rule(
    monkeypatch, tmp_path
):
    """What `statefuse import` of this release's bundle does on the release before (seen with
    that release: ``bad-op ... unsupported op format version 4 [rule: op-version]``), with the
    new versions taken out of the decoder; the plain change beside it is accepted."""
    from statefuse.core import op as op_module
    from statefuse.sync.replica import Replica

    writer = Replica.memory(space="team")
    writer.add_claim("shop/tea/price", 12)
    writer.add_claim("shop/tea/price", 15, valid_from="2026-03-01")
    changes = [c.data for c in writer.log.changes()]
    monkeypatch.setattr(op_module, "_KNOWN_VERSIONS", frozenset((1, 2)))
    old = Replica.open(tmp_path / "old.db", space="team", create=True)
    try:
        report = old.receive(changes)
        assert report.quarantined == 1
        (q,) = old.quarantine()
        assert q.reason == "bad-op" and "op-version" in q.message and "version 4" in q.message
        assert [c.value for c in old.state().active_claims()] == [12]
    finally:
        old.close()


@settings(max_examples=min(settings.default.max_examples, 100))
@given(op_lists())
def test_on_programs_without_intervals_or_contexts_conflicts_are_todays(ops):
    """Today's rule, written out: a functional locus conflicts iff its active claims hold more
    than one value group, and then every active claim there is a candidate."""
    state = materialize(ops, registry=REG)
    ix = state._ix
    want = {}
    for lk in ix.members:
        ids = tuple(sorted(ix.members_at(lk)))
        if ix.functional(lk[0], lk[2]) and len({ix.gkey(i) for i in ids}) > 1:
            want[lk] = ids
    assert {(*c.key, c.scope): c.candidates for c in state.conflicts} == want


def test_superseding_a_value_keeps_its_interval_and_context():
    from statefuse.sync.replica import Replica

    rep = Replica.memory(space="team")
    old = rep.add_claim("shop/s1/hours", "9-17", valid_from=JAN, context={"location": "London"})
    new, _ = rep.supersede(old, "9-18")
    assert (new.valid_from, new.valid_until, new.context) == (JAN, None, old.context)
    assert [c.value for c in rep.state().active_claims()] == ["9-18"]
