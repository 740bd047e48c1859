"""Token counting (`statefuse.reading.tokenizer`) and relevance ranking
(`statefuse.reading.ranker`)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import Lens, Writer, materialize
from statefuse import tokenizer as tokenizer_module
from statefuse.reading.context import context_for
from statefuse.reading.ranker import LexicalRanker, Ranker, query_identifiers, words
from statefuse.reading.tokenizer import (
    BpeTokenizer,
    ByteEstimate,
    CachedTokenizer,
    Tokenizer,
    TokenizerError,
    default_tokenizer,
)

O200K = BpeTokenizer("o200k_base")
CL100K = BpeTokenizer("cl100k_base")


@pytest.mark.parametrize(
    ("text", "cl100k", "o200k"),
    [
        ("", 0, 0),
        ("hello world", 2, 2),
        ("tiktoken is great!", 6, 6),
        ("<|endoftext|>", 7, 7),  # special-token text counts as ordinary text
    ],
)
def test_bpe_counts_match_known_counts_of_both_encodings(text, cl100k, o200k):
    assert CL100K.count(text) == cl100k and O200K.count(text) == o200k


def test_a_bpe_count_is_far_above_a_quarter_of_the_characters_for_dense_text():
    dense = "0x9f3a 7c1e 44b2 ad90 e5f1 0b77 c3d8 1a6e"
    assert O200K.count(dense) > 2 * (len(dense) // 4)  # the undercount len // 4 would make


texts = st.text(st.characters(codec="utf-8"), max_size=200)


@given(texts)
def test_the_fallback_never_counts_fewer_tokens_than_bpe(text):
    bound = ByteEstimate().count(text)
    assert bound >= O200K.count(text) and bound >= CL100K.count(text)


def test_the_default_is_exact_bpe_and_falls_back_when_the_package_is_missing(monkeypatch):
    assert default_tokenizer().name == "bpe:o200k_base"
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # makes the import fail
    monkeypatch.setattr(tokenizer_module, "_ENCODINGS", {})
    fallback = default_tokenizer()
    assert isinstance(fallback, ByteEstimate) and fallback.name == "utf8-bytes (upper bound)"
    with pytest.raises(TokenizerError) as err:
        BpeTokenizer()
    assert err.value.rule == "bpe-installed"
    w = Writer("a", clock=lambda: 0)
    state = materialize([w.claim("p", f"s{i}", "v", "ünïcode välue " * 3) for i in range(40)])
    ctx = context_for(state, Lens(), budget=300)
    assert ctx.tokenizer == fallback.name
    assert ctx.token_count == len(ctx.text.encode("utf-8")) <= 300 and ctx.omitted


def test_a_cached_tokenizer_counts_each_text_once_and_starts_over_when_full():
    calls: list[str] = []

    class Spy:
        name = "spy"

        def count(self, text: str) -> int:
            calls.append(text)
            return len(text)

    cached = CachedTokenizer(Spy(), max_entries=2)
    assert [cached.count(t) for t in ("ab", "ab", "abc", "ab")] == [2, 2, 3, 2]
    assert calls == ["ab", "abc"]
    cached.count("abcd")  # the third entry: the memo starts over
    cached.count("ab")
    assert calls == ["ab", "abc", "abcd", "ab"]
    assert isinstance(cached, Tokenizer) and cached.name == "spy"


def test_tokenizer_arguments_are_checked():
    with pytest.raises(TokenizerError) as err:
        BpeTokenizer("p50k_base")
    assert err.value.field == "encoding"
    with pytest.raises(TokenizerError) as err:
        CachedTokenizer(len)  # type: ignore[arg-type]
    assert err.value.field == "inner"
    with pytest.raises(TokenizerError) as err:
        CachedTokenizer(O200K, max_entries=0)
    assert err.value.field == "max_entries"


# --- ranking --------------------------------------------------------------------------------------


W = Writer("r", clock=lambda: 0)


def test_words_split_identifiers_and_drop_stopwords():
    # "a" of vendor_a is a stopword as a word; the identifier boost tells vendor_a apart.
    assert words("What is the vendor_a Price? 2026-03") == ["vendor", "price", "2026", "03"]
    assert query_identifiers("price of vendor_a, please.") == {"price", "of", "vendor_a", "please"}


def test_a_rarer_matching_word_scores_higher_than_a_common_one():
    common = [W.claim("p", f"s{i}", "note", "budget") for i in range(5)]
    rare = W.claim("p", "x", "note", "budget escalation")
    scores = LexicalRanker().scores("escalation budget", [*common, rare])
    assert scores[rare.claim_id] > max(scores[c.claim_id] for c in common) > 0


def test_a_query_sharing_no_word_scores_nothing():
    claims = [W.claim("p", "x", "note", "alpha"), W.claim("p", "y", "note", "beta")]
    assert LexicalRanker().scores("gamma", claims) == {}
    assert LexicalRanker().scores("", claims) == {}
    assert LexicalRanker().scores("what is the", claims) == {}


def test_an_exact_identifier_match_is_boosted_over_the_same_words_in_a_value():
    by_name = W.claim("vendor", "vendor_a", "price", 95)
    by_words = W.claim("vendor", "x", "note", "vendor a")
    scores = LexicalRanker().scores("vendor_a", [by_name, by_words])
    assert scores[by_name.claim_id] > scores[by_words.claim_id]


@given(st.permutations(range(8)), st.sampled_from(["launch budget", "vendor_a price", "risk"]))
def test_scores_do_not_depend_on_the_order_of_the_claims(order, query):
    values = ["launch budget", "vendor price", "risk risk", "budget", "a", "launch", "price", "b"]
    claims = [W.claim("p", f"s{i}", "v", v) for i, v in enumerate(values)]
    shuffled = [claims[i] for i in order]
    scanned = LexicalRanker().scores(query, claims)
    assert LexicalRanker().scores(query, shuffled) == scanned
    # Postings (kept for a tuple) give exactly the floats of a one-off scan (any sequence).
    assert LexicalRanker().scores(query, tuple(shuffled)) == scanned


def test_a_plugged_in_ranker_decides_which_fact_comes_last():
    class ByLength:
        def scores(self, query, claims):
            return {c.claim_id: float(len(str(c.value))) for c in claims}

    assert isinstance(ByLength(), Ranker)
    claims = [W.claim("p", f"k{i}", "v", "x" * (i + 1)) for i in range(4)]
    ctx = context_for(materialize(claims), Lens(), budget=500, ranker=ByLength())
    assert ctx.sections[-1].lines == (
        "[p]",  # four keys of one namespace: written once, above them
        "k0/v: x",
        "k1/v: xx",
        "k2/v: xxx",
        "k3/v: xxxx",
    )
