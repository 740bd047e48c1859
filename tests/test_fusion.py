"""Hybrid ranking (`statefuse.retrieval.fusion`): the laws of reciprocal rank fusion, and search by
meaning through a replica (`Replica.search`, `Replica.context` with an embedder): 20 questions
reworded so they share no word with the memory they ask about (but two names), over 200
memories."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search import TARGETS, ConceptEmbedder, load  # noqa: E402
from statefuse.reading.ranker import LexicalRanker  # noqa: E402
from statefuse.retrieval.embedder import EmbedderError  # noqa: E402
from statefuse.retrieval.fusion import HybridRanker, ranking, rrf  # noqa: E402
from statefuse.sync.replica import Replica  # noqa: E402

ids = st.binary(min_size=1, max_size=2)
rankings = st.lists(st.lists(ids, max_size=8, unique=True), max_size=4)


@given(rankings, st.randoms())
def test_fused_scores_do_not_depend_on_the_order_of_the_rankings(
    lists: list[list[bytes]], rnd: object
) -> None:
    shuffled = list(lists)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert rrf(shuffled) == rrf(lists)


@given(rankings, ids)
def test_a_claim_first_in_every_ranking_is_first(lists: list[list[bytes]], top: bytes) -> None:
    lists = [[top, *(x for x in ids_ if x != top)] for ids_ in lists] or [[top]]
    fused = rrf(lists)
    assert ranking(fused)[0] == top
    assert all(fused[top] > s for cid, s in fused.items() if cid != top)


@given(rankings, ids)
def test_a_ranking_that_lists_a_claim_lifts_it_and_no_other(
    lists: list[list[bytes]], x: bytes
) -> None:
    before, after = rrf(lists), rrf([*lists, [x]])
    assert after[x] > before.get(x, 0.0)
    assert {c: s for c, s in after.items() if c != x} == {
        c: pytest.approx(s) for c, s in before.items() if c != x
    }


def test_rrf_is_one_over_k_plus_rank_summed() -> None:
    fused = rrf([[b"a", b"b"], [b"b", b"c"]], k=60)
    assert fused == {
        b"a": 1 / 61,
        b"b": pytest.approx(1 / 62 + 1 / 61),
        b"c": 1 / 62,
    }
    with pytest.raises(EmbedderError) as info:
        rrf([], k=0)
    assert (info.value.field, info.value.rule) == ("k", "positive-int")


def _hits(replica: Replica, embedder: object | None) -> tuple[int, int]:
    claims = {
        f"{c.namespace}/{c.subject}/{c.predicate}": c for c in replica.state().claims.values()
    }
    at1 = at5 = 0
    for key, _, question in TARGETS:
        found = [h.claim.claim_id for h in replica.search(question, embedder=embedder, limit=5)]
        at1 += found[:1] == [claims[key].claim_id]
        at5 += claims[key].claim_id in found
    return at1, at5


def test_reworded_questions_find_the_right_memory_first_with_an_embedder() -> None:
    with Replica.memory(space="team") as replica:
        load(replica)
        lexical = _hits(replica, None)
        hybrid = _hits(replica, ConceptEmbedder())
    assert hybrid[0] >= 18, hybrid
    assert lexical[0] <= 9, lexical  # words alone: the reworded questions share none
    assert hybrid[0] > lexical[0] and hybrid[1] > lexical[1]


def test_the_context_shows_the_memory_a_reworded_question_means() -> None:
    question = "Is the espresso maker working?"
    with Replica.memory(space="team") as replica:
        load(replica)
        claims = tuple(replica.state().active_claims())
        meant = replica.context(question, budget=60, embedder=ConceptEmbedder()).text
    (espresso,) = [c for c in claims if c.value == "broken since Monday"]
    # by words alone the question names nothing of it: a plain context shows it only where
    # unranked facts fall (by claim id, which differs from run to run), never for the question
    assert not LexicalRanker().scores(question, claims).get(espresso.op_id)
    # by meaning it ranks first, and the most relevant fact is the last line of the facts
    facts = meant.split("\n\n")[0].splitlines()
    assert facts[-1].endswith("broken since Monday")


def test_a_search_sees_only_what_the_lens_sees() -> None:
    from statefuse.reading.lens import Lens

    e = ConceptEmbedder()
    with Replica.memory(space="team") as replica:
        replica.add_claim("hr/salary/alice", "95k", visibility=["hr"])
        replica.add_claim("office/espresso/status", "working")
        found = replica.search("How much is Alice paid?", embedder=e)
        assert all(h.claim.subject != "salary" for h in found)
        found = replica.search("salary", embedder=e, lens=Lens(roles=frozenset({"hr"})))
        assert [h.claim.subject for h in found][:1] == ["salary"]


def test_a_hit_on_a_conflict_candidate_carries_the_conflict() -> None:
    with Replica.memory(space="team") as a, Replica.memory(space="team") as b:
        a.add_claim("events/offsite/room_size", "40 people")
        b.add_claim("events/offsite/room_size", "25 people")
        a.merge(b)
        found = a.search("What capacity must the retreat venue have?", embedder=ConceptEmbedder())
    assert {h.claim.value for h in found} == {"40 people", "25 people"}
    assert all(h.conflict is not None for h in found)


def test_a_search_limit_must_be_a_positive_int() -> None:
    with Replica.memory(space="team") as replica, pytest.raises(ValueError) as info:
        replica.search("x", limit=0)
    assert getattr(info.value, "rule", None) == "positive-int"


def test_hybrid_ranker_is_a_ranker_that_scores_only_claims_it_was_given() -> None:
    from statefuse.reading.ranker import Ranker

    with Replica.memory(space="team") as replica:
        claims = tuple(load(replica).values())
    ranker = HybridRanker(ConceptEmbedder())
    assert isinstance(ranker, Ranker)
    scores = ranker.scores("Is the espresso maker working?", claims[:50])
    assert set(scores) <= {c.claim_id for c in claims[:50]}
    assert ranker.scores("   ", claims) == {}
