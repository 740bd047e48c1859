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
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Protocol, overload, runtime_checkable

from statefuse.core.op import ClaimAdded
from statefuse.reading.view import json_value
from statefuse.registry.value import Value

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
    """Scores claims against a query, keyed by claim id; higher is more relevant. Claims
    missing from the answer score 0. An embedding ranker fits the same shape."""

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> Mapping[bytes, float]: ...


def value_text(value: Value) -> str:
    """A value as words to match: strings as they are, anything else as its JSON."""
    if isinstance(value, str):
        return value
    if type(value) is int:  # its JSON, without the encoder (every write indexes its words)
        return str(value)
    return json.dumps(json_value(value), ensure_ascii=False, sort_keys=True)


def words(text: str) -> list[str]:
    """Lower-case words of ``text`` (letters and digits; ``_`` and punctuation split words)."""
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def query_identifiers(query: str) -> frozenset[str]:
    """Identifier-like tokens of a query (``vendor_a``, ``launch/deadline``), lower-cased."""
    return frozenset(t.strip("./:-").lower() for t in _IDENT.findall(query)) - {""}


def _doc_words(c: ClaimAdded) -> list[str]:
    return words(f"{c.namespace} {c.subject} {c.predicate} {value_text(c.value)}")


def _doc_idents(c: ClaimAdded) -> tuple[str, str, str, str]:
    sub, pred = c.subject.lower(), c.predicate.lower()
    return (c.namespace.lower(), sub, pred, f"{sub}/{pred}")


class _Doc:
    __slots__ = ("cid", "idents", "length", "tf")

    def __init__(self, c: ClaimAdded, ws: list[str] | None = None) -> None:
        self.cid = c.op_id
        if ws is None:
            ws = _doc_words(c)
        tf = dict.fromkeys(ws, 1)
        if len(tf) < len(ws):  # a word said twice (most claims have none)
            tf = {}
            for w in ws:
                tf[w] = tf.get(w, 0) + 1
        self.tf = tf
        self.length = len(ws)
        self.idents = frozenset(_doc_idents(c))


class Corpus(Sequence[ClaimAdded]):
    """Claims to rank that know where they came from: the corpus named ``parent`` (a
    ``serial``; 0: none) with ``added`` claims and the ids in ``removed``. A ranker that keeps
    postings moves them by that difference (context assembly hands one over per View, each
    made from the one before); any other ranker reads it as a plain sequence of claims."""

    __slots__ = ("_by_id", "_seq", "added", "parent", "removed", "serial")

    def __init__(
        self,
        by_id: dict[bytes, ClaimAdded],
        *,
        serial: int,
        parent: int = 0,
        added: Sequence[ClaimAdded] = (),
        removed: Sequence[bytes] = (),
    ) -> None:
        self._by_id = MappingProxyType(by_id)  # a ranker can read the claims, not change them
        self._seq: tuple[ClaimAdded, ...] | None = None
        self.serial = serial
        self.parent = parent
        self.added = tuple(added)
        self.removed = tuple(removed)

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[ClaimAdded]:
        return iter(self._by_id.values())

    def __contains__(self, c: object) -> bool:
        return isinstance(c, ClaimAdded) and self._by_id.get(c.op_id) is c

    @overload
    def __getitem__(self, i: int) -> ClaimAdded: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ClaimAdded, ...]: ...
    def __getitem__(self, i: int | slice) -> ClaimAdded | tuple[ClaimAdded, ...]:
        if self._seq is None:
            self._seq = tuple(self._by_id.values())
        return self._seq[i]


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


class _Index:
    """Postings of one corpus: term -> {(tf, claim length): {claim id}} (a term's claims in
    groups that share one BM25 weight), identifier -> {claim id}, and each claim's length.
    A query weighs each group once and adds it to the scores with set operations, so a term
    found in a tenth of a large memory costs its groups and the claims it shares with the
    other terms, not a Python step per claim.

    `update` and `moved` move it to another corpus by the difference (claims gone, claims
    new), so a corpus that changed by a few claims costs a few postings, not a rebuild: what
    carries the ranking from one State to the next. Scores do not depend on the path:
    lengths, document frequencies and the average length are the same integers either way,
    and every weight is computed by the same formula from them."""

    __slots__ = ("claims", "df", "docs", "idents", "postings", "serial", "total", "weights")

    def __init__(self, claims: tuple[ClaimAdded, ...] | None, docs: Sequence[_Doc]) -> None:
        self.claims = claims
        self.serial = 0  # of the `Corpus` this is the index of (0: of ``claims``)
        self.postings: dict[str, dict[tuple[int, int], dict[bytes, None]]] = {}
        self.df: dict[str, int] = {}
        self.idents: dict[str, dict[bytes, None]] = {}
        self.docs: dict[bytes, _Doc] = {}
        self.total = 0
        self.weights: dict[str, list[tuple[float, dict[bytes, None]]]] = {}
        for d in docs:
            self._add(d.cid, d)

    def _add(self, cid: bytes, d: _Doc) -> None:
        if cid in self.docs:
            return  # a claim listed twice counts once
        self.docs[cid] = d
        dl = d.length
        self.total += dl
        postings, df, idents = self.postings, self.df, self.idents
        for t, f in d.tf.items():
            groups = postings.get(t)
            if groups is None:
                postings[t] = {(f, dl): {cid: None}}
                df[t] = 1
            else:
                group = groups.get((f, dl))
                if group is None:
                    groups[(f, dl)] = {cid: None}
                else:
                    group[cid] = None
                df[t] += 1
        for t in d.idents:
            ids = idents.get(t)
            if ids is None:
                idents[t] = {cid: None}
            else:
                ids[cid] = None

    def _remove(self, cid: bytes) -> None:
        d = self.docs.pop(cid)
        dl = d.length
        self.total -= dl
        postings, df, idents = self.postings, self.df, self.idents
        for t, f in d.tf.items():
            groups = postings[t]
            group = groups[(f, dl)]
            del group[cid]
            if not group:
                del groups[(f, dl)]
            df[t] -= 1
            if not groups:
                del postings[t], df[t]
        for t in d.idents:
            ids = idents[t]
            del ids[cid]
            if not ids:
                del idents[t]

    def update(self, claims: tuple[ClaimAdded, ...], doc: Callable[[ClaimAdded], _Doc]) -> bool:
        """Become the index of ``claims`` by the difference from the current corpus; False
        (and unchanged) when most of the corpus changed, where a rebuild is cheaper."""
        new = {c.op_id: c for c in claims}
        docs = self.docs
        gone = [cid for cid in docs if cid not in new]
        added = [c for cid, c in new.items() if cid not in docs]
        if 2 * (len(gone) + len(added)) > len(new) + 16:
            return False
        for cid in gone:
            self._remove(cid)
        for c in added:
            self._add(c.op_id, doc(c))
        self.claims = claims
        self.serial = 0
        self.weights = {}
        return True

    def moved(self, corpus: Corpus, doc: Callable[[ClaimAdded], _Doc]) -> bool:
        """Become the index of ``corpus`` when this is the index of its parent and it changed
        by a few claims; False (and unchanged) otherwise."""
        if not corpus.parent or corpus.parent != self.serial:
            return False
        if 2 * (len(corpus.added) + len(corpus.removed)) > len(corpus) + 16:
            return False
        docs = self.docs
        for cid in corpus.removed:
            if cid in docs:
                self._remove(cid)
        for c in corpus.added:
            self._add(c.op_id, doc(c))
        self.claims = None
        self.serial = corpus.serial
        self.weights = {}
        return True

    def weighted(self, term: str) -> list[tuple[float, dict[bytes, None]]] | None:
        """The groups of ``term`` with BM25's saturated term frequency, made on first use."""
        found = self.weights.get(term)
        if found is None:
            groups = self.postings.get(term)
            if groups is None:
                return None
            n = len(self.docs)
            avgdl = self.total / n if n and self.total else 1.0
            found = self.weights[term] = [
                (f * (K1 + 1.0) / (f + K1 * (1.0 - B + B * dl / avgdl)), ids)
                for (f, dl), ids in groups.items()
            ]
        return found


def _add_to(acc: dict[bytes, float], ids: dict[bytes, None], v: float) -> None:
    """``acc[c] = acc.get(c, 0.0) + v`` for every id in ``ids``, with set operations and
    C-level maps: the same floats (``0.0 + v`` is ``v``, and ``v + x`` is ``x + v``), no
    Python step per id."""
    if not acc:
        acc.update(dict.fromkeys(ids, v))
        return
    both = list(ids.keys() & acc.keys())
    if not both:
        acc.update(dict.fromkeys(ids, v))
        return
    summed = zip(both, map(v.__add__, map(acc.__getitem__, both)), strict=True)
    if len(both) == len(ids):
        acc.update(summed)
        return
    add = dict.fromkeys(ids, v)
    add.update(summed)
    acc.update(add)


class LexicalRanker:
    """BM25 over key and value words with an identifier boost (see the module docstring).

    Reuse one instance across calls to keep its per-claim memo of words. Handed a tuple of
    claims it builds postings for them and keeps them while it is handed the same tuple again
    (a tuple cannot change); handed any other sequence it scans the claims once.
    """

    __slots__ = ("_index", "_memo", "max_entries")

    def __init__(self, *, max_entries: int = DEFAULT_MEMO_ENTRIES) -> None:
        self.max_entries = max_entries
        self._memo: dict[bytes, _Doc] = {}
        self._index: _Index | None = None

    def _doc(self, c: ClaimAdded) -> _Doc:
        d = self._memo.get(c.op_id)
        if d is None:
            if len(self._memo) >= self.max_entries:
                self._memo.clear()
            d = self._memo[c.op_id] = _Doc(c)
        return d

    def _corpus(self, claims: tuple[ClaimAdded, ...] | Corpus) -> _Index:
        index = self._index
        if type(claims) is Corpus:
            if index is not None and (
                index.serial == claims.serial or index.moved(claims, self._doc)
            ):
                return index
            memo, doc = self._memo, self._doc
            index = self._index = _Index(None, [memo.get(c.op_id) or doc(c) for c in claims])
            index.serial = claims.serial
            return index
        assert type(claims) is tuple
        if index is None or index.claims is not claims:
            memo, doc = self._memo, self._doc
            if index is None or not index.update(claims, doc):
                docs = [memo.get(c.op_id) or doc(c) for c in claims]
                index = self._index = _Index(claims, docs)
        return index

    def scores(self, query: str, claims: Sequence[ClaimAdded]) -> dict[bytes, float]:
        qwords = sorted(frozenset(words(query)))
        qidents = sorted(query_identifiers(query))
        if not claims or not (qwords or qidents):
            return {}
        if type(claims) is not tuple and type(claims) is not Corpus:
            return self._scan(qwords, qidents, claims)
        index = self._corpus(claims)
        n = len(claims)
        acc: dict[bytes, float] = {}
        # Terms in sorted order, so each claim's sum is added up in one fixed order.
        for t in qwords:
            groups = index.weighted(t)
            if groups:
                idf = _idf(n, index.df[t])
                for wt, group in groups:
                    _add_to(acc, group, idf * wt)
        for t in qidents:
            ids = index.idents.get(t)
            if ids:
                _add_to(acc, ids, IDENTIFIER_BOOST * _idf(n, len(ids)))
        return acc

    def _scan(
        self, qwords: list[str], qidents: list[str], claims: Sequence[ClaimAdded]
    ) -> dict[bytes, float]:
        """The same scores as the postings give, from one pass over the claims: a claim met
        for the first time is split into words to count its length, and made a `_Doc` (and
        remembered) only when the query names one of its words or identifiers."""
        memo = self._memo
        wset, iset = frozenset(qwords), frozenset(qidents)
        total = 0
        hits: list[tuple[bytes, _Doc]] = []
        for c in claims:
            d = memo.get(c.op_id)
            if d is None:
                ws = _doc_words(c)
                total += len(ws)
                if wset.isdisjoint(ws) and (not iset or iset.isdisjoint(_doc_idents(c))):
                    continue
                d = _Doc(c, ws)
                if len(memo) < self.max_entries:
                    memo[c.op_id] = d
            else:
                total += d.length
                if wset.isdisjoint(d.tf) and iset.isdisjoint(d.idents):
                    continue
            hits.append((c.op_id, d))
        n = len(claims)
        avgdl = total / n if total else 1.0
        wdf = {t: sum(t in d.tf for _, d in hits) for t in qwords}
        idf_ = {t: sum(t in d.idents for _, d in hits) for t in qidents}
        out: dict[bytes, float] = {}
        for cid, d in hits:
            norm = K1 * (1.0 - B + B * d.length / avgdl)
            s: float | None = None
            for t in qwords:
                f = d.tf.get(t)
                if f:
                    part = _idf(n, wdf[t]) * (f * (K1 + 1.0) / (f + norm))
                    s = part if s is None else s + part
            for t in qidents:
                if t in d.idents:
                    part = IDENTIFIER_BOOST * _idf(n, idf_[t])
                    s = part if s is None else s + part
            if s is not None:
                out[cid] = s
        return out
