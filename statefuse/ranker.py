"""Relevance of claims to a query: the `Ranker` protocol and a lexical BM25 ranker.

Invariant: scores are a deterministic function of the query and the claims — never of hash
seeds or input order. Query terms are visited in sorted order (float sums are not associative,
so a set's iteration order could change the last bit of a score and flip a tie), and the
assembler breaks ties by claim id. Claims a ranker leaves out of its answer score 0.

`LexicalRanker` is BM25 (k1 = 1.2, b = 0.75) over the words of a claim's key and value, plus a
boost when a query word names one of the claim's identifiers exactly (its namespace, subject,
predicate or the ``subject/predicate`` path), so "vendor_a" finds ``vendor/vendor_a/price``
ahead of claims that only mention "vendor". The words of each claim are computed once and
remembered by claim id (claims are immutable), so re-ranking the same claims is cheap.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from registry.value import Value
from statefuse.op import ClaimAdded
from statefuse.view import json_value

K1 = 1.2
B = 0.75
#: Weight of an exact identifier match relative to one BM25 word match of the same rarity.
IDENTIFIER_BOOST = 2.0
#: Most claims a `LexicalRanker` remembers the words of before it starts over.
DEFAULT_MEMO_ENTRIES = 1_048_576

_WORD = re.compile(r"[^\W_]+")
_IDENT = re.compile(r"[\w./:-]+")
#: Words too common to say anything about relevance.
_STOPWORDS_TEXT = (
    "a an and are as at be but by can could did do does for from had has have how i if in "
    "into is it its me my no not of on or our should so than that the their then there these "
    "they this to us was we were what when where which who why will with would you your"
)
STOPWORDS = frozenset(_STOPWORDS_TEXT.split(" "))


@runtime_checkable
class Ranker(Protocol):
    """Scores claims against a query; higher is more relevant. Claims missing from the
    answer score 0. An embedding ranker fits the same shape."""

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> Mapping[bytes, float]: ...


def value_text(value: Value) -> str:
    """A value as words to match: strings as they are, anything else as its JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(json_value(value), ensure_ascii=False, sort_keys=True)


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters and digits; ``_`` and punctuation split words)."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def query_identifiers(query: str) -> frozenset[str]:
    """Identifier-like tokens of a query (``vendor_a``, ``launch/deadline``), lower-cased."""
    return frozenset(t.strip("./:-").lower() for t in _IDENT.findall(query)) - {""}


class _Doc:
    __slots__ = ("idents", "length", "terms", "tf")

    def __init__(self, c: ClaimAdded) -> None:
        tf: dict[str, int] = {}
        for w in words(f"{c.namespace} {c.subject} {c.predicate} {value_text(c.value)}"):
            tf[w] = tf.get(w, 0) + 1
        self.tf = tf
        self.terms = frozenset(tf)
        self.length = sum(tf.values())
        sub, pred = c.subject.lower(), c.predicate.lower()
        self.idents = frozenset((c.namespace.lower(), sub, pred, f"{sub}/{pred}"))


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class LexicalRanker:
    """BM25 over key and value words with an identifier boost (see the module docstring).

    Reuse one instance across calls to keep its per-claim memo of words.
    """

    __slots__ = ("_memo", "max_entries")

    def __init__(self, *, max_entries: int = DEFAULT_MEMO_ENTRIES) -> None:
        self.max_entries = max_entries
        self._memo: dict[bytes, _Doc] = {}

    def _doc(self, c: ClaimAdded) -> _Doc:
        d = self._memo.get(c.op_id)
        if d is None:
            if len(self._memo) >= self.max_entries:
                self._memo.clear()
            d = self._memo[c.op_id] = _Doc(c)
        return d

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> dict[bytes, float]:
        qwords = frozenset(words(query))
        qidents = query_identifiers(query)
        if not claims or not (qwords or qidents):
            return {}
        memo, doc = self._memo, self._doc
        total = 0
        hits: list[tuple[bytes, _Doc]] = []
        for c in claims:
            d = memo.get(c.op_id) or doc(c)
            total += d.length
            if not (qwords.isdisjoint(d.terms) and qidents.isdisjoint(d.idents)):
                hits.append((c.op_id, d))
        if not hits:
            return {}
        n = len(claims)
        avgdl = total / n or 1.0
        wterms = sorted(qwords)
        iterms = sorted(qidents)
        wdf = {t: sum(t in d.terms for _, d in hits) for t in wterms}
        idf_df = {t: sum(t in d.idents for _, d in hits) for t in iterms}
        widf = {t: _idf(n, df) for t, df in wdf.items() if df}
        iidf = {t: IDENTIFIER_BOOST * _idf(n, df) for t, df in idf_df.items() if df}
        out: dict[bytes, float] = {}
        for cid, d in hits:
            norm = K1 * (1.0 - B + B * d.length / avgdl)
            s = 0.0
            for t in wterms:
                f = d.tf.get(t)
                if f:
                    s += widf[t] * f * (K1 + 1.0) / (f + norm)
            for t in iterms:
                if t in d.idents:
                    s += iidf[t]
            out[cid] = s
        return out
