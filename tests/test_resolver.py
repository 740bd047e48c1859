"""Bounded resolvers (SEMANTICS §7.4): select a shown candidate or abstain, and fail closed."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import threading
import time
import types
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError, dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from statefuse import ClaimAdded, PredicateContract, Registry, Writer, materialize
from statefuse.core.state import ConflictSet
from statefuse.reading.judge import JUDGE_INPUT_FORMAT, CallableResolver, judge_payload
from statefuse.reading.resolver import (
    Abstain,
    AbstainAll,
    AuthorityRank,
    Chain,
    Conservative,
    LatestWins,
    ResolverConfigError,
    ResolverInput,
    ResolverInputError,
    Select,
    ShownConflict,
    run_resolver,
)

REG = Registry([PredicateContract("price", normalizer="number")])
KEY = ("p", "x", "price")
ROOT = Path(__file__).resolve().parents[1]


def writers(*names: str) -> list[Writer]:
    return [Writer(n, registry=REG, clock=lambda: 0) for n in names]


def price(
    w: Writer, value: Any, *, confidence: float | None = 1.0, authority: str = ""
) -> ClaimAdded:
    return w.claim(*KEY, value, confidence=confidence, authority=authority)


def the_conflict(ops: list[Any]) -> ConflictSet:
    (conflict,) = materialize(ops, registry=REG).conflicts
    return conflict


def shown(ops: list[Any], *, hide: tuple[bytes, ...] = ()) -> ResolverInput:
    """The input for the one conflict of ``ops``, with the claims in ``hide`` not shown."""
    state = materialize(ops, registry=REG)
    (conflict,) = state.conflicts
    visible = tuple(state.claims[c] for c in conflict.candidates if c not in hide)
    return ResolverInput(conflict, visible)


def builtins() -> list[Any]:
    return [
        AbstainAll(),
        LatestWins(),
        AuthorityRank(["admin", "user"]),
        Conservative(),
        Conservative(corroboration_margin=0, confidence_margin=0, authority_margin=0),
        Conservative(authority_order=["admin", "user", "bot"], authority_margin=0),
        Chain(AuthorityRank(["admin"]), Conservative(), LatestWins()),
    ]


# --- random conflicts ----------------------------------------------------------------------------

AUTHORS = ("ana", "bo", "cy", "di")
#: Three normal forms (1000, 999, 500), so some candidates agree and some disagree.
VALUES = (1000, "1,000", 999, "999.00", 500)
#: None: the author stated no confidence (it ranks below every stated one, 0.0 included).
CONFIDENCES = (None, 0.0, 0.1, 0.5, 0.7, 0.9, 1.0)
AUTHORITIES = ("", "admin", "user", "bot")


@dataclass(frozen=True)
class Scenario:
    conflict: ConflictSet
    inp: ResolverInput
    hidden: tuple[bytes, ...]
    retracted: tuple[bytes, ...]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(0, len(AUTHORS) - 1),
                st.sampled_from(VALUES),
                st.sampled_from(CONFIDENCES),
                st.sampled_from(AUTHORITIES),
                st.booleans(),
            ),
            min_size=2,
            max_size=6,
        )
    )
    ws = writers(*AUTHORS)
    ops: list[Any] = []
    for who, value, confidence, authority, catch_up in steps:
        if catch_up:
            ws[who].observe(ops)
        ops.append(price(ws[who], value, confidence=confidence, authority=authority))
    victim = draw(st.none() | st.integers(0, len(ops) - 1))
    if victim is not None:
        ops.append(ws[0].retract(claim_id=ops[victim].claim_id))
    state = materialize(ops, registry=REG)
    assume(state.conflicts)
    (conflict,) = state.conflicts
    ids = conflict.candidates
    hidden = draw(st.sets(st.sampled_from(ids), max_size=len(ids) - 1))
    visible = tuple(state.claims[c] for c in ids if c not in hidden)
    return Scenario(
        conflict,
        ResolverInput(conflict, visible),
        tuple(sorted(hidden)),
        tuple(state.retracted),
    )


class Hostile:
    """A resolver that misbehaves in one of many ways."""

    def __init__(self, answer: Any = None, *, raises: BaseException | None = None) -> None:
        self.answer, self.raises = answer, raises

    def resolve(self, inp: ResolverInput) -> Any:
        if self.raises is not None:
            raise self.raises
        return self.answer


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


class SneakySelect(Select):
    __slots__ = ()


def hostile_resolvers(s: Scenario, stranger: bytes) -> list[Any]:
    some = s.inp.candidates[0].claim_id
    not_shown = [stranger, *s.hidden, *s.retracted]
    return [
        *(Hostile(Select(cid, "trust me")) for cid in not_shown),
        Hostile(Select(some.hex(), "a str id")),  # type: ignore[arg-type]
        Hostile(Select(bytearray(some), "a bytearray id")),  # type: ignore[arg-type]
        Hostile(Select(some, None)),  # type: ignore[arg-type]
        Hostile(Select([some], "unhashable")),  # type: ignore[arg-type]
        Hostile(SneakySelect(some, "a subclass")),
        Hostile(Abstain(b"bytes reason")),  # type: ignore[arg-type]
        Hostile(Abstain("fine", error=42)),  # type: ignore[arg-type]
        Hostile(None),
        Hostile(42),
        Hostile("select it"),
        Hostile({"select": some.hex()}),
        Hostile(some),
        Hostile(raises=ValueError("boom")),
        Hostile(raises=Unprintable()),
        Hostile(raises=RecursionError("x" * 10_000)),
        object(),
    ]


@given(scenarios(), st.binary(min_size=32, max_size=32))
def test_a_hostile_resolver_always_yields_abstain_with_an_error(s, stranger):
    for resolver in hostile_resolvers(s, stranger):
        answer = run_resolver(resolver, s.inp)
        assert type(answer) is Abstain, resolver
        assert answer.error, resolver
        assert len(answer.error) <= 500


@given(scenarios())
def test_every_builtin_abstains_or_selects_a_shown_candidate(s):
    ids = {c.claim_id for c in s.inp.candidates}
    for resolver in builtins():
        answer = resolver.resolve(s.inp)
        assert run_resolver(resolver, s.inp) == answer
        if type(answer) is Select:
            assert answer.claim_id in ids
        else:
            assert type(answer) is Abstain and answer.error is None


@given(scenarios(), st.data())
def test_builtins_answer_the_same_whatever_the_order_of_candidates_and_groups(s, data):
    conflict = s.conflict
    groups = data.draw(st.permutations(conflict.groups))
    groups = [replace(g, claim_ids=tuple(data.draw(st.permutations(g.claim_ids)))) for g in groups]
    shuffled = ResolverInput(
        replace(conflict, groups=tuple(groups)), tuple(data.draw(st.permutations(s.inp.candidates)))
    )
    for resolver in builtins():
        assert resolver.resolve(shuffled) == resolver.resolve(s.inp)


_SEED_SCRIPT = """
from tests.test_resolver import builtins, fixed_conflict
inp = fixed_conflict()
print([repr(r.resolve(inp)) for r in builtins()])
"""


def fixed_conflict() -> ResolverInput:
    a, b, c, d = writers("ana", "bo", "cy", "di")
    return shown(
        [
            price(a, 1000, confidence=0.9, authority="user"),
            price(b, "1,000", confidence=0.8, authority="bot"),
            price(c, 999, confidence=0.5, authority="admin"),
            price(d, 500, confidence=0.1),
        ]
    )


def test_builtins_answer_the_same_under_different_hash_seeds():
    here = str([repr(r.resolve(fixed_conflict())) for r in builtins()])
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", _SEED_SCRIPT],
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            cwd=ROOT,
            check=True,
            timeout=60,
        )
        assert out.stdout.strip() == here


# --- ResolverInput and run_resolver --------------------------------------------------------------


def test_resolver_input_sorts_candidates_and_groups_only_the_shown_ones():
    a, b, c = writers("a", "b", "c")
    agree1, agree2, other = price(a, 1000), price(b, "1,000"), price(c, 999)
    inp = shown([agree1, agree2, other], hide=(agree2.claim_id,))
    assert [x.claim_id for x in inp.candidates] == sorted([agree1.claim_id, other.claim_id])
    assert sorted(len(g) for g in inp.groups) == [1, 1]
    conflict = the_conflict([agree1, agree2, other])
    backwards = ResolverInput(conflict, tuple(reversed(inp.candidates)))
    assert backwards.candidates == inp.candidates and backwards.groups == inp.groups


def test_resolver_input_rejects_claims_that_are_not_candidates_of_the_conflict():
    a, b = writers("a", "b")
    x, y = price(a, 1000), price(b, 999)
    gone = a.retract(claim_id=x.claim_id)
    z = price(b, 500)
    inp = shown([x, y, z, gone])
    conflict = the_conflict([x, y, z, gone])
    with pytest.raises(ResolverInputError) as err:
        ResolverInput(conflict, (*inp.candidates, x))
    assert err.value.field == "candidates" and isinstance(err.value, ValueError)
    with pytest.raises(ResolverInputError, match=r"candidates\[1\].*twice"):
        ResolverInput(conflict, (y, y))
    with pytest.raises(ResolverInputError, match=r"candidates\[0\]"):
        ResolverInput(conflict, ("claim",))  # type: ignore[arg-type]
    with pytest.raises(ResolverInputError, match="conflict"):
        ResolverInput(None, ())  # type: ignore[arg-type]
    with pytest.raises(ResolverInputError) as err:
        ResolverInput(conflict, None)  # type: ignore[arg-type]
    assert err.value.rule == "sequence"


def test_run_resolver_returns_a_fresh_select_of_a_shown_candidate():
    inp = fixed_conflict()
    pick = inp.candidates[-1].claim_id
    answer = run_resolver(Hostile(Select(pick, "ok")), inp)
    assert answer == Select(pick, "ok") and type(answer) is Select


def test_run_resolver_records_which_resolver_failed_and_how():
    inp = fixed_conflict()
    answer = run_resolver(Hostile(raises=KeyError("k")), inp)
    assert answer == Abstain("Hostile failed; conflict surfaced", "raised KeyError: 'k'")
    sneaky = run_resolver(Hostile(SneakySelect(inp.candidates[0].claim_id, "")), inp)
    assert sneaky.error == "answered SneakySelect, a subclass of Select or Abstain"
    stranger = run_resolver(Hostile(Select(b"\x00" * 32, "")), inp)
    assert stranger.error == "selected a claim_id that is not a shown candidate"


# --- LatestWins ----------------------------------------------------------------------------------


def test_latest_wins_picks_the_highest_lamport():
    a, b = writers("a", "b")
    old = price(a, 1000)
    b.observe([old])
    new = price(b, 999)
    assert new.lamport > old.lamport
    answer = LatestWins().resolve(shown([old, new]))
    assert answer == Select(new.claim_id, f"latest: highest lamport ({new.lamport})")


def test_latest_wins_breaks_a_lamport_tie_by_the_highest_claim_id():
    a, b = writers("a", "b")
    x, y = price(a, 1000), price(b, 999)
    assert x.lamport == y.lamport
    answer = LatestWins().resolve(shown([x, y]))
    assert isinstance(answer, Select) and answer.claim_id == max(x.claim_id, y.claim_id)


# --- AuthorityRank -------------------------------------------------------------------------------


def test_authority_rank_picks_the_higher_authority():
    a, b = writers("a", "b")
    user, admin = price(a, 1000, authority="user"), price(b, 999, authority="admin")
    answer = AuthorityRank(["admin", "user"]).resolve(shown([user, admin]))
    assert answer == Select(admin.claim_id, "authority: highest-ranked source (admin)")


def test_authority_rank_abstains_when_disagreeing_groups_tie_at_the_top_rank():
    a, b, c = writers("a", "b", "c")
    ops = [price(a, 1000, authority="admin"), price(b, 999, authority="admin")]
    ops.append(price(c, 500, authority="user"))
    answer = AuthorityRank(["admin", "user"]).resolve(shown(ops))
    assert answer == Abstain("authority: 2 disagreeing groups tie at the top rank (admin)")


def test_authority_rank_selects_within_one_agreeing_group_at_the_top_rank():
    a, b, c = writers("a", "b", "c")
    weak = price(a, 1000, confidence=0.4, authority="admin")
    strong = price(b, "1,000", confidence=0.9, authority="admin")
    answer = AuthorityRank(["admin"]).resolve(shown([weak, strong, price(c, 999)]))
    assert isinstance(answer, Select) and answer.claim_id == strong.claim_id


def test_authority_rank_ranks_unknown_labels_below_every_listed_one():
    a, b, c = writers("a", "b", "c")
    intern, user = price(a, 1000, authority="intern"), price(b, 999, authority="user")
    answer = AuthorityRank(["admin", "user"]).resolve(shown([intern, user]))
    assert isinstance(answer, Select) and answer.claim_id == user.claim_id
    nobody = shown([intern, price(c, 500)])
    assert AuthorityRank(["admin"]).resolve(nobody) == Abstain(
        "authority: 2 disagreeing groups tie at the top rank (unranked)"
    )


@pytest.mark.parametrize(
    ("order", "field", "rule"),
    [
        ([], "order", "non-empty"),
        ("admin", "order", "sequence-of-str"),
        ({"admin"}, "order", "sequence-of-str"),
        (["admin", "admin"], "order[1]", "unique"),
        (["admin", ""], "order[1]", "non-empty-str"),
        (["admin", 1], "order[1]", "non-empty-str"),
    ],
)
def test_authority_rank_rejects_a_bad_order_naming_the_argument(order, field, rule):
    with pytest.raises(ResolverConfigError) as err:
        AuthorityRank(order)
    assert (err.value.field, err.value.rule) == (field, rule)
    assert isinstance(err.value, ValueError)


# --- Conservative --------------------------------------------------------------------------------


@st.composite
def conservatives(draw: st.DrawFn) -> Conservative:
    return Conservative(
        corroboration_margin=draw(st.integers(0, 2)),
        confidence_margin=draw(st.sampled_from((0, 0.1, 0.2, 0.5, 1))),
        authority_order=draw(st.sampled_from(((), ("admin", "user", "bot")))),
        authority_margin=draw(st.integers(0, 1)),
    )


@settings(max_examples=min(settings.default.max_examples, 200))
@given(scenarios(), conservatives(), st.data())
def test_a_resolver_choosing_by_confidence_never_prefers_an_unset_one_to_a_stated_one(
    s, drawn, data
):
    """`Conservative` ranks groups by confidence and picks within the leading group by it;
    `AuthorityRank` picks by it within the top-ranked claims of a group. Neither chooses a claim
    whose author stated no confidence over one whose author stated any, and neither depends on
    the order of candidates or groups."""
    groups = [
        replace(g, claim_ids=tuple(data.draw(st.permutations(g.claim_ids))))
        for g in data.draw(st.permutations(s.conflict.groups))
    ]
    shuffled = ResolverInput(
        replace(s.conflict, groups=tuple(groups)),
        tuple(data.draw(st.permutations(s.inp.candidates))),
    )
    ranks = {"admin": 2, "user": 1}
    by_rank = AuthorityRank(list(ranks))
    for resolver in (drawn, Conservative(), by_rank):
        answer = resolver.resolve(s.inp)
        assert resolver.resolve(shuffled) == answer
        if type(answer) is not Select:
            continue
        chosen = next(c for c in s.inp.candidates if c.claim_id == answer.claim_id)
        rivals = s.inp.candidates  # Conservative: every shown candidate
        if resolver is by_rank:
            rank = ranks.get(chosen.authority, 0)
            group = next(g for g in s.inp.groups if chosen in g)
            rivals = tuple(c for c in group if ranks.get(c.authority, 0) == rank)
        if any(c.confidence is not None for c in rivals):
            assert chosen.confidence is not None, (resolver, answer.reason)


def test_a_stated_confidence_even_zero_leads_an_unset_one_by_any_margin():
    a, b = writers("a", "b")
    unset, zero = price(a, 1000, confidence=None), price(b, 999, confidence=0.0)
    inp = shown([unset, zero])
    for margin in (0, 0.5, 1):
        answer = Conservative(corroboration_margin=0, confidence_margin=margin).resolve(inp)
        assert answer == Select(
            zero.claim_id,
            "conservative: the group of 1 author(s) (confidence 0.0) dominates 1 other group(s)",
        )


def test_conservative_names_an_unset_confidence_as_unset_and_never_lets_it_lead():
    a, b, c = writers("a", "b", "c")
    pair = [price(a, 1000, confidence=None), price(b, "1,000", confidence=None)]
    inp = shown([*pair, price(c, 999, confidence=0.5)])
    assert Conservative(corroboration_margin=0).resolve(inp) == Abstain(
        "conservative: no group clearly dominates (confidence unset vs 0.5 (margin 0.2))"
    )
    both_unset = shown([*pair, price(c, 999, confidence=None)])
    zero = Conservative(confidence_margin=0)  # unset ties unset: not worse, so it may win
    assert isinstance(zero.resolve(both_unset), Select)
    assert isinstance(Conservative().resolve(both_unset), Abstain)  # but leads by nothing


def test_within_a_group_the_stated_confidence_speaks_for_it():
    a, b, c = writers("a", "b", "c")
    unset, low = price(a, 1000, confidence=None), price(b, "1,000", confidence=0.1)
    inp = shown([unset, low, price(c, 999, confidence=None)])
    answer = Conservative(corroboration_margin=0).resolve(inp)
    assert isinstance(answer, Select) and answer.claim_id == low.claim_id


def test_conservative_selects_three_confident_agreeing_authors_over_a_lone_doubter():
    a, b, c, d = writers("a", "b", "c", "d")
    agree = [price(a, 1000, confidence=0.8), price(b, "1,000", confidence=0.9)]
    agree.append(price(c, 1000.0, confidence=0.85))
    lone = price(d, 999, confidence=0.3)
    answer = Conservative().resolve(shown([*agree, lone]))
    assert answer == Select(
        agree[1].claim_id,
        "conservative: the group of 3 author(s) (confidence 0.9) dominates 1 other group(s)",
    )


def test_conservative_abstains_on_a_symmetric_one_against_one_conflict():
    a, b = writers("a", "b")
    inp = shown([price(a, 1000, confidence=0.9), price(b, 999, confidence=0.9)])
    answer = Conservative().resolve(inp)
    assert answer == Abstain(
        "conservative: no group clearly dominates (corroboration 1 vs 1 (margin 1))"
    )
    zero = Conservative(corroboration_margin=0, confidence_margin=0, authority_margin=0)
    assert zero.resolve(inp) == Abstain(
        "conservative: no group clearly dominates (the groups are symmetric)"
    )


def two_against_one(*, strong: float = 0.9, weak: float = 0.3, auth=("user", "user")):
    a, b, c = writers("a", "b", "c")
    pair = [price(a, 1000, confidence=strong, authority=auth[0])]
    pair.append(price(b, "1,000", confidence=strong, authority=auth[0]))
    return shown([*pair, price(c, 999, confidence=weak, authority=auth[1])])


def test_conservative_respects_the_corroboration_margin():
    assert isinstance(Conservative().resolve(two_against_one()), Select)
    assert isinstance(Conservative(corroboration_margin=2).resolve(two_against_one()), Abstain)


def test_conservative_respects_the_confidence_margin_exactly_at_the_boundary():
    inp = two_against_one(strong=0.7, weak=0.5)  # 0.7 - 0.5 < 0.2 in binary floating point
    assert isinstance(Conservative(confidence_margin=0.2).resolve(inp), Select)
    assert Conservative(confidence_margin=0.3).resolve(inp) == Abstain(
        "conservative: no group clearly dominates (confidence 0.7 vs 0.5 (margin 0.3))"
    )


def test_conservative_respects_the_authority_margin_only_when_an_order_is_given():
    order = ["admin", "user"]
    same = two_against_one(auth=("user", "user"))
    above = two_against_one(auth=("admin", "user"))
    assert isinstance(Conservative().resolve(same), Select)
    assert isinstance(Conservative(authority_order=order).resolve(same), Abstain)
    assert isinstance(Conservative(authority_order=order, authority_margin=0).resolve(same), Select)
    assert isinstance(Conservative(authority_order=order).resolve(above), Select)
    assert isinstance(
        Conservative(authority_order=order, authority_margin=2).resolve(above), Abstain
    )
    below = two_against_one(auth=("user", "admin"))
    assert isinstance(
        Conservative(authority_order=order, authority_margin=0).resolve(below), Abstain
    )


def test_conservative_counts_distinct_authors_not_claims():
    a, b = writers("a", "b")
    inp = shown([price(a, 1000), price(a, "1,000"), price(b, 999, confidence=0.5)])
    assert isinstance(Conservative().resolve(inp), Abstain)


def test_conservative_ignores_the_agreement_of_hidden_claims():
    a, b, c, d = writers("a", "b", "c", "d")
    agree = [price(a, 1000), price(b, "1,000"), price(c, 1000.0)]
    inp = shown([*agree, price(d, 999, confidence=0.1)])
    assert isinstance(Conservative().resolve(inp), Select)
    hidden = (agree[1].claim_id, agree[2].claim_id)
    thin = shown([*agree, price(d, 999, confidence=0.1)], hide=hidden)
    assert isinstance(Conservative().resolve(thin), Abstain)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"corroboration_margin": -1}, "corroboration_margin"),
        ({"corroboration_margin": True}, "corroboration_margin"),
        ({"corroboration_margin": 1.5}, "corroboration_margin"),
        ({"confidence_margin": 1.5}, "confidence_margin"),
        ({"confidence_margin": float("nan")}, "confidence_margin"),
        ({"confidence_margin": "0.2"}, "confidence_margin"),
        ({"authority_margin": -1}, "authority_margin"),
        ({"authority_order": ["a", "a"]}, "authority_order[1]"),
        ({"authority_order": "admin"}, "authority_order"),
    ],
)
def test_conservative_rejects_bad_margins_naming_the_argument(kwargs, field):
    with pytest.raises(ResolverConfigError) as err:
        Conservative(**kwargs)
    assert err.value.field == field


def test_conservative_options_are_keyword_only():
    with pytest.raises(TypeError):
        Conservative(1)  # type: ignore[misc]


# --- Chain ---------------------------------------------------------------------------------------


def test_chain_falls_through_to_the_first_resolver_that_selects():
    inp = fixed_conflict()
    chain = Chain(
        AbstainAll(), Hostile(raises=ValueError("boom")), LatestWins(), AuthorityRank(["x"])
    )
    assert chain.resolve(inp) == LatestWins().resolve(inp)


def test_chain_abstains_with_every_reason_and_error_when_all_abstain():
    answer = Chain(AbstainAll(), Hostile(raises=ValueError("boom"))).resolve(fixed_conflict())
    assert answer == Abstain(
        "surface: every conflict is shown to the reader; Hostile failed; conflict surfaced",
        "raised ValueError: boom",
    )


def test_chain_rejects_no_resolvers_and_things_that_cannot_resolve():
    with pytest.raises(ResolverConfigError, match="resolvers"):
        Chain()
    with pytest.raises(ResolverConfigError) as err:
        Chain(LatestWins(), object())  # type: ignore[arg-type]
    assert err.value.field == "resolvers[1]"


# --- CallableResolver ----------------------------------------------------------------------------


def judge_of(answer: Any) -> CallableResolver:
    return CallableResolver(lambda payload: answer, timeout_s=1.0)


def test_a_good_judge_selects_from_structured_json_ready_input():
    inp = fixed_conflict()
    seen: list[dict[str, Any]] = []

    def judge(payload: dict[str, Any]) -> dict[str, Any]:
        seen.append(payload)
        (pick,) = [c for c in payload["candidates"] if c["value"] == 999]
        return {"select": pick["claim_id"], "reason": "the audited figure"}

    answer = CallableResolver(judge).resolve(inp)
    (pick,) = [c for c in inp.candidates if c.value == 999]
    assert answer == Select(pick.claim_id, "judge: the audited figure")
    (payload,) = seen
    assert payload == judge_payload(inp)
    assert payload["format"] == JUDGE_INPUT_FORMAT
    assert payload["key"] == {"namespace": "p", "subject": "x", "predicate": "price"}
    assert payload["scope"] == "global"
    assert payload["conflict_id"] == inp.conflict.conflict_id.hex()
    first = payload["candidates"][0]
    assert set(first) == {
        "claim_id",
        "group",
        "value",
        "confidence",
        "authority",
        "author",
        "lamport",
        "provenance",
    }
    assert [c["claim_id"] for c in payload["candidates"]] == [
        c.claim_id.hex() for c in inp.candidates
    ]
    assert len({c["group"] for c in payload["candidates"]}) == len(inp.groups) == 3


def test_a_judge_may_abstain_without_an_error():
    assert judge_of({"abstain": "not sure"}).resolve(fixed_conflict()) == Abstain("judge: not sure")


def test_a_judge_sees_bytes_authors_and_values_as_hex_and_cannot_mutate_claims():
    a, b = Writer(b"\x01\x02", clock=lambda: 0), Writer(b"\x03", clock=lambda: 0)
    x, y = a.claim("p", "x", "blob", [b"\xff", 1]), b.claim("p", "x", "blob", [2])

    def vandal(payload: dict[str, Any]) -> dict[str, Any]:
        for c in payload["candidates"]:
            c["value"].append("junk")
        return {"abstain": "vandalised"}

    state = materialize([x, y])
    (conflict,) = state.conflicts
    inp = ResolverInput(conflict, (x, y))
    payload = judge_payload(inp)
    mine = payload["candidates"][[c.claim_id for c in inp.candidates].index(x.claim_id)]
    assert mine["author"] == "0102" and mine["value"] == [{"$bytes": "ff"}, 1]
    before = state.digest()
    CallableResolver(vandal).resolve(inp)
    assert x.value == [b"\xff", 1] and y.value == [2] and state.digest() == before


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ({"select": "ab" * 32, "reason": "?"}, "is not the id of a shown candidate"),
        ({"select": "not hex"}, "'select' must be a claim_id in hex"),
        ({"select": " ab"}, "'select' must be a claim_id in hex"),
        ({"select": 7}, "'select' must be a claim_id in hex"),
        ({"select": "ab", "reason": 3}, "'reason' must be a str"),
        ({"select": "ab", "why": "x"}, "expected keys"),
        ({"select": "ab", "abstain": "x"}, "expected keys"),
        ({}, "expected keys"),
        ({"abstain": None}, "'abstain' must be a str reason"),
        ([("select", "ab")], "expected a dict, got list"),
        ("ab" * 32, "expected a dict, got str"),
        (None, "expected a dict, got NoneType"),
    ],
)
def test_a_malformed_judge_answer_abstains_with_the_error_recorded(answer, error):
    result = judge_of(answer).resolve(fixed_conflict())
    assert isinstance(result, Abstain) and result.reason == "judge failed; conflict surfaced"
    assert result.error is not None and error in result.error


class Spiteful:
    """A dict key that cannot be compared or printed."""

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    def __repr__(self) -> str:
        raise RuntimeError("no printing")


def test_a_judge_answer_with_spiteful_keys_still_fails_closed():
    result = judge_of({Spiteful(): "x"}).resolve(fixed_conflict())
    assert isinstance(result, Abstain) and result.error is not None
    assert result.error.startswith("malformed answer: RuntimeError")


def test_a_raising_judge_abstains_with_the_error_recorded():
    def judge(payload: dict[str, Any]) -> dict[str, Any]:
        raise ConnectionError("model unavailable")

    result = CallableResolver(judge).resolve(fixed_conflict())
    assert result == Abstain(
        "judge failed; conflict surfaced", "judge raised ConnectionError: model unavailable"
    )


#: Seconds after which a wait for an event fails: a hang guard, however slow the machine.
HANG = 60.0


def hung_judge() -> tuple[CallableResolver, threading.Event, threading.Event]:
    """A judge that answers only once ``release`` is set (then sets ``answered``)."""
    release, answered = threading.Event(), threading.Event()

    def judge(payload: dict[str, Any]) -> dict[str, Any]:
        release.wait(HANG)
        answered.set()
        return {"select": payload["candidates"][0]["claim_id"]}

    return CallableResolver(judge, timeout_s=0.2), release, answered


def test_a_judge_past_its_time_limit_abstains_with_a_timeout_error():
    judge, release, answered = hung_judge()
    start = time.monotonic()
    result = judge.resolve(fixed_conflict())
    waited = time.monotonic() - start
    assert not answered.is_set()  # it gave up on the judge rather than waiting for its answer
    release.set()
    assert result == Abstain("judge failed; conflict surfaced", "timeout after 0.2s")
    assert waited >= 0.2  # it let the judge have its time limit first


def test_a_judge_works_and_times_out_when_called_off_the_main_thread():
    inp = fixed_conflict()
    hung, release, _ = hung_judge()
    good = judge_of({"select": inp.candidates[0].claim_id.hex()})
    with ThreadPoolExecutor(max_workers=2) as pool:
        timed_out = pool.submit(hung.resolve, inp)
        selected = pool.submit(run_resolver, good, inp)
        assert timed_out.result(timeout=HANG) == Abstain(
            "judge failed; conflict surfaced", "timeout after 0.2s"
        )
        expected = Select(inp.candidates[0].claim_id, "judge: selected")
        assert selected.result(timeout=HANG) == expected
    release.set()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"fn": "not callable"}, "fn"),
        ({"fn": dict, "timeout_s": 0}, "timeout_s"),
        ({"fn": dict, "timeout_s": -1.0}, "timeout_s"),
        ({"fn": dict, "timeout_s": float("inf")}, "timeout_s"),
        ({"fn": dict, "timeout_s": True}, "timeout_s"),
    ],
)
def test_callable_resolver_rejects_a_bad_judge_or_time_limit(kwargs, field):
    with pytest.raises(ResolverConfigError) as err:
        CallableResolver(**kwargs)
    assert err.value.field == field


@given(scenarios())
def test_the_input_the_projection_builds_unchecked_equals_the_checked_one(s):
    from statefuse.reading.projection import _visible_groups

    groups = _visible_groups(s.conflict, s.inp.candidates)
    shown = ShownConflict.of(s.conflict, len(s.inp.candidates))
    fast = ResolverInput._checked_by_caller(shown, s.inp.candidates, groups, None)
    assert fast == s.inp
    assert fast.groups == s.inp.groups


# --- what a resolver may see (SEMANTICS §7.1) ---------------------------------------------------

_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), Enum)
_OPAQUE = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
)


def _attribute_names(obj: object) -> set[str]:
    """Every attribute a resolver could read off ``obj``: slots along the class chain, the
    instance dict, and whatever `dir` lists (properties included), dunders aside."""
    names: set[str] = set()
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    names.update(getattr(obj, "__dict__", {}))
    names.update(n for n in dir(obj) if not n.startswith("__"))
    return names


def reachable(root: object, *, depth: int = 10) -> list[object]:
    """Every object a hostile resolver reaches from ``root`` by attributes (slots, ``vars``,
    properties) and by the contents of mappings, sequences and sets, up to ``depth`` steps;
    atoms (strs, bytes, numbers) included, so a caller can search them."""
    found: list[object] = []  # keeps every object alive, so no id is reused while walking
    seen: set[int] = set()
    todo: list[tuple[object, int]] = [(root, 0)]
    while todo:
        obj, d = todo.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        found.append(obj)
        if d == depth or isinstance(obj, _ATOMS):
            continue
        children: list[object] = []
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                children += (k, v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            children += obj
        for name in sorted(_attribute_names(obj)):
            try:
                children.append(getattr(obj, name))
            except Exception:  # an unset slot, a property that refuses: nothing to read
                continue
        todo.extend((c, d + 1) for c in children)
    return found


def leaks(root: object, ids: Iterable[bytes], values: Iterable[str] = ()) -> list[str]:
    """What of ``ids`` (raw or in hex) and ``values`` (as text or inside bytes, e.g. a
    normal form) can be found from ``root``; empty if nothing."""
    ids, values = list(ids), list(values)
    out = []
    for obj in reachable(root):
        if isinstance(obj, (bytes, bytearray)):
            out += [f"id {i.hex()[:12]} in bytes" for i in ids if i in obj]
            out += [f"value {v!r} in bytes" for v in values if v.encode() in obj]
        elif isinstance(obj, str):
            out += [f"id {i.hex()[:12]} in {obj[:60]!r}" for i in ids if i.hex() in obj]
            out += [f"value {v!r} in {obj[:60]!r}" for v in values if v in obj]
    return out


class Snoop:
    """A hostile resolver: keeps everything it is given, then answers ``then``."""

    def __init__(self, then: Any = None) -> None:
        self.inputs: list[ResolverInput] = []
        self.then = then or AbstainAll()

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        self.inputs.append(inp)
        answer: Select | Abstain = self.then.resolve(inp)
        return answer


def test_a_resolver_input_holds_no_id_value_or_grouping_of_a_hidden_candidate():
    a, b, c, d = writers("a", "b", "c", "d")
    seen1, seen2 = price(a, 1000), price(b, 999)
    twin = price(c, "1,000")  # agrees with a shown claim: its value is no secret, its id is
    secret = price(d, 424242)
    inp = shown([seen1, seen2, twin, secret], hide=(twin.claim_id, secret.claim_id))
    assert leaks(inp, [twin.claim_id, secret.claim_id], ["424242"]) == []
    assert inp.conflict.not_shown == 2
    assert [len(g) for g in inp.groups] == [1, 1]


@given(scenarios())
def test_no_hidden_candidate_id_is_reachable_from_any_resolver_input(s):
    assert leaks(s.inp, s.hidden) == []
    assert s.inp.conflict.not_shown == len(s.hidden)


# --- through the projection: random visibility ---------------------------------------------------

VIS_KEYS = (("p", "x", "color"), ("p", "y", "color"))
VIS_ROLES = ((), ("admin",), ("ops",), ("admin", "ops"))


@st.composite
def visibility_worlds(draw: st.DrawFn) -> tuple[list[Any], Any]:
    """Claims at two keys with random values, visibilities, scopes and expiries, a decision now
    and then (on any candidate, hidden or not), and a lens with random roles."""
    from statefuse import Lens

    ws = [Writer(n, clock=lambda: 0) for n in AUTHORS]
    ops: list[Any] = []
    for who, k, value, vis, scope, expires in draw(
        st.lists(
            st.tuples(
                st.integers(0, len(AUTHORS) - 1),
                st.integers(0, len(VIS_KEYS) - 1),
                st.integers(0, 3),
                st.sampled_from(VIS_ROLES),
                st.sampled_from(("global", "global", "task:t1")),
                st.sampled_from((None, None, 500, 1500)),
            ),
            min_size=2,
            max_size=8,
        )
    ):
        key = VIS_KEYS[k]
        ops.append(
            ws[who].claim(
                *key,
                f"val{value}-{key[1]}",
                visibility=vis,
                scope=scope,
                expires=expires,
            )
        )
    conflicts = materialize(ops).conflicts
    if conflicts and draw(st.booleans()):
        conflict = draw(st.sampled_from(conflicts))
        ops.append(ws[0].decide_on(conflict, draw(st.sampled_from(conflict.candidates))))
    lens = Lens(
        roles=draw(st.sets(st.sampled_from(("admin", "ops")))),
        task=draw(st.sampled_from((None, "t1"))),
        now=1000,
    )
    return ops, lens


@given(visibility_worlds(), st.sampled_from([AbstainAll(), LatestWins(), Conservative()]))
def test_neither_a_snooping_resolver_nor_the_view_finds_a_hidden_claim(world, then):
    from statefuse import project

    ops, lens = world
    state = materialize(ops)
    hidden = [c for c in state.active_claims() if not lens.sees_roles(c.visibility)]
    seen_values = {c.value for c in state.all_claims() if lens.sees_roles(c.visibility)}
    secrets = sorted({str(c.value) for c in hidden} - seen_values)
    hidden_ids = [c.claim_id for c in hidden]
    snoop = Snoop(then)
    view = project(state, lens, resolver=snoop)
    for inp in snoop.inputs:
        assert leaks(inp, hidden_ids, secrets) == []
        missing = len(state.conflict_of(*inp.conflict.key, inp.conflict.scope).candidates)
        assert inp.conflict.not_shown == missing - len(inp.candidates)
    assert leaks(view, hidden_ids, secrets) == []
    text = view.to_json()
    assert not [i for i in hidden_ids if i.hex() in text]
    assert not [v for v in secrets if v in text]


def test_a_resolver_input_cannot_be_changed_and_survives_copying():
    inp = fixed_conflict()
    with pytest.raises(FrozenInstanceError):
        inp.conflict = None  # type: ignore[misc]
    for copied in (copy.deepcopy(inp), pickle.loads(pickle.dumps(inp))):
        assert copied == inp and copied.groups == inp.groups and hash(copied) == hash(inp)
