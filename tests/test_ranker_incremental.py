"""A `LexicalRanker` reused across corpora (one per State) gives exactly the scores of a fresh
ranker on each corpus: its postings move by the difference between corpora (issue 13: the
ranking carries from one State to the next), and no path may change a score's last bit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.reading.ranker import LexicalRanker
from statefuse.storage.writer import Writer

WORDS = ["acme", "price", "deadline", "launch", "vendor", "blue", "red", "usd", "2026", "plan"]

_writer = Writer("w", clock=lambda: 0)
POOL = [
    _writer.claim(
        f"ns{i % 3}",
        f"{WORDS[i % len(WORDS)]}_{i % 5}",
        WORDS[(i * 7) % len(WORDS)],
        " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 4)),
    )
    for i in range(40)
]

corpora = st.lists(
    st.lists(st.integers(0, len(POOL) - 1), unique=True, max_size=len(POOL)), min_size=1, max_size=8
)
queries = st.lists(
    st.sampled_from([*WORDS, "ns1", "acme_0", "red_1/launch"]), min_size=1, max_size=4
)


@settings(max_examples=200, deadline=None)
@given(corpora, queries)
def test_a_reused_ranker_scores_every_corpus_exactly_as_a_fresh_one(picks, query_words):
    query = " ".join(query_words)
    reused = LexicalRanker()
    for pick in picks:
        claims = tuple(POOL[i] for i in pick)
        assert reused.scores(query, claims) == LexicalRanker().scores(query, claims)


def test_small_changes_update_the_postings_instead_of_rebuilding_them():
    ranker = LexicalRanker()
    first = tuple(POOL[:30])
    ranker.scores("acme price", first)
    index = ranker._index
    second = (*first[1:], POOL[30])  # one claim gone, one new
    assert ranker.scores("acme price", second) == LexicalRanker().scores("acme price", second)
    assert ranker._index is index and index is not None and index.claims is second
    assert POOL[0].op_id not in index.docs and POOL[30].op_id in index.docs
