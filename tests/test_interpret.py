"""The turn interpretation hook (`statefuse.core.interpret`, `Replica.add_turn(..., interpret=)`).

The interpreters here are deterministic fakes written for the tests: they read a structured
test convention (``set <key> = <value>``), never natural wording. What is checked is the
replica's side: the answer's ops are written with the turn, in one change signed by the
replica's key, citing the turn, through the same verification as any write; a malformed answer
raises naming the field and writes nothing, not even the turn.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import (
    ClaimAdded,
    ClaimRequest,
    Interpretation,
    InterpretationError,
    Lens,
    QuestionRequest,
    RetractionRequest,
    State,
    TurnInterpreter,
    ValueTypeError,
)
from statefuse.sync.replica import Replica

LENS = Lens(session="s1")


def setter(turn: ClaimAdded, state: State) -> Interpretation:
    """``set ns/subject/predicate = value``: a claim replacing the key's active claims."""
    text = turn.value
    assert isinstance(text, str)
    if not text.startswith("set "):
        return Interpretation()
    key, value = text[4:].split(" = ", 1)
    ns, subject, predicate = key.split("/")
    old = state.active_at(ns, subject, predicate)
    return Interpretation(
        claims=(ClaimRequest(ns, subject, predicate, value),),
        retractions=tuple(RetractionRequest(claim_id=c.claim_id, superseded_by=0) for c in old),
    )


def test_a_fake_interpreter_is_a_turn_interpreter():
    assert isinstance(setter, TurnInterpreter)


def test_a_correction_made_in_conversation_becomes_a_retraction_and_is_scrubbed():
    rep = Replica.memory(space="talk")
    old = rep.add_claim("fact/budget/value", "$40k")
    rep.add_turn("user", "the budget is $40k for now", session="s1")
    before = len(rep.log)
    turn = rep.add_turn("user", "set fact/budget/value = $50k", session="s1", interpret=setter)
    assert len(rep.log) == before + 1  # the turn and what it says: one change
    state = rep.state()
    assert not state.is_active(old.claim_id)
    (new,) = state.active_at("fact", "budget", "value")
    assert new.value == "$50k" and new.author == rep.author == turn.author
    assert new.provenance == f"turn {turn.claim_id.hex()}"
    (ret,) = state.retracted[old.claim_id]
    assert ret.superseded_by == new.claim_id and turn.claim_id.hex() in ret.reason
    ctx = rep.context("budget", lens=LENS)
    assert "$40k" not in ctx.text
    assert "[corrected: now budget/value]" in ctx.text


def test_questions_and_retractions_by_ref_are_written_too():
    rep = Replica.memory(space="talk")
    c = rep.add_claim("fact/room/value", "Room 7b")

    def interpret(turn: ClaimAdded, state: State) -> Interpretation:
        return Interpretation(
            retractions=(RetractionRequest(claim_ref=c.claim_ref, reason="room withdrawn"),),
            questions=(QuestionRequest("fact", "room", "value", "which room now?"),),
        )

    rep.add_turn("user", "anything", session="s1", interpret=interpret)
    state = rep.state()
    assert not state.is_active(c.claim_id)
    assert [q.value for q in state.active_at("fact", "room", "value?")] == ["which room now?"]


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        (None, "interpretation"),
        (Interpretation(claims=[]), "claims"),  # type: ignore[arg-type]
        (Interpretation(claims=("x",)), "claims[0]"),  # type: ignore[arg-type]
        (Interpretation(claims=(ClaimRequest("f", "s", 3, "v"),)), "claims[0].predicate"),  # type: ignore[arg-type]
        (Interpretation(retractions=(RetractionRequest(),)), "retractions[0]"),
        (
            Interpretation(retractions=(RetractionRequest(claim_id=b"short"),)),
            "retractions[0].claim_id",
        ),
        (
            Interpretation(retractions=(RetractionRequest(claim_ref=bytes(32), superseded_by=0),)),
            "retractions[0].superseded_by",
        ),
        (
            Interpretation(questions=(QuestionRequest("f", "s", "p", b"text"),)),  # type: ignore[arg-type]
            "questions[0].text",
        ),
    ],
)
def test_a_malformed_answer_names_the_field_and_writes_nothing(answer, field):
    rep = Replica.memory(space="talk")
    rep.add_claim("fact/budget/value", "$40k")
    before, digest = len(rep.log), rep.state().digest
    with pytest.raises(InterpretationError) as e:
        rep.add_turn("user", "hello", session="s1", interpret=lambda t, s: answer)
    assert e.value.field == field
    assert isinstance(e.value, TypeError)
    assert len(rep.log) == before and rep.state().digest == digest


def test_a_value_the_writer_refuses_raises_its_error_and_writes_nothing():
    rep = Replica.memory(space="talk")
    before = len(rep.log)

    def bad(turn: ClaimAdded, state: State) -> Interpretation:
        return Interpretation(claims=(ClaimRequest("f", "s", "p", {1, 2}),))  # type: ignore[arg-type]

    with pytest.raises(ValueTypeError):
        rep.add_turn("user", "hello", session="s1", interpret=bad)
    assert len(rep.log) == before and not rep.state().active_claims()


keys = st.sampled_from(("fact/budget/value", "fact/room/value", "plan/launch/date"))
values = st.sampled_from(("$40k", "$50k", "Room 7b", "2026-03-01", "none yet"))
turns = st.one_of(
    st.tuples(st.just("set"), keys, values),
    st.tuples(st.just("say"), values),
    st.tuples(st.just("claim"), keys, values),
)


@settings(max_examples=min(settings.default.max_examples, 200), deadline=None)
@given(st.lists(turns, min_size=1, max_size=12))
def test_what_an_interpreter_writes_goes_through_verification_like_any_write(program):
    rep = Replica.memory(space="talk")
    for step in program:
        if step[0] == "set":
            rep.add_turn("user", f"set {step[1]} = {step[2]}", session="s1", interpret=setter)
            held = [c.value for c in rep.state().active_at(*step[1].split("/"))]
            assert held == [step[2]]
        elif step[0] == "say":
            rep.add_turn("user", f"we said {step[1]}", session="s1", interpret=setter)
        else:
            rep.add_claim(step[1], step[2])
    # a peer takes every change in through the verifying path, and agrees on the state
    peer = Replica.memory(space="talk")
    report = peer.receive(rep.all_change_bytes())
    assert report.quarantined == 0 and report.accepted == len(rep.log)
    mine, theirs = rep.state(), peer.state()
    assert [c.claim_id for c in theirs.active_claims()] == [
        c.claim_id for c in mine.active_claims()
    ]
    assert list(theirs.retracted) == list(mine.retracted)
    assert all(c.author == rep.author for c in rep.state().all_claims())
    assert rep.context("", lens=LENS, budget=100_000).token_count <= 100_000
