"""Scrubbing: the values of retracted claims, found again in the free text a context shows.

A retraction withdraws a claim, so the materializer never selects it and context assembly never
shows it as a fact. But the working set keeps conversation turns and scratch items word for word,
and "the budget moved from $40k to $50k" shows ``$40k`` long after the claim saying $40k was
superseded. This module finds such values in free text by exact text identity, so context
assembly can replace them with a marker (`statefuse.reading.context`, ``Transcript.CLEAN``).

Rules (SEMANTICS §7; the guide ``docs/guides/context.md`` explains them):

- **Which values.** A claim's value as text (`value_text`: a string as it is, any other value as
  the JSON the context renders), *folded*: lower case, every run of whitespace one space, no
  leading or trailing space (`fold`). A folded value shorter than `MIN_CHARS` is never looked
  for, or shorter than `MIN_CHARS_WITH_DIGIT` when it holds a digit: ``"5"`` or ``"no"`` would
  destroy unrelated text, while ``"2pm"`` or ``"$5k"`` name one thing.
- **Whole words.** A value is found only where it does not start or end inside a word (a value
  that begins or ends with a letter, digit or ``_`` needs a non-word character, or the text's
  edge, beside it): ``40k`` is not found in ``$140k``.
- **Which retracted claims.** Only those the lens may see (roles, scope, not expired): a View
  never scrubs (nor names) a hidden claim's value. The Index keeps a `RetractedIndex` of them
  (by folded value, with the value lengths under each anchor and the visibility and scope
  labels there are), updated by each retraction it applies, so a projection hands its View a
  `RetractedValues` (the labels its lens sees, and how far the index went) without walking
  every retracted claim, and a text costs its own length, not the number of retractions.

Invariant: matching is deterministic — leftmost first, then the longest value, ties by the
value's text — and a pure function of the text and the values; nothing here reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from statefuse.core.op import ClaimAdded, ClaimRetracted
from statefuse.core.state import State
from statefuse.registry.value import Value, json_value

#: Fewest characters a folded value needs to be looked for in free text.
MIN_CHARS = 4
#: ... or fewer, when it holds a digit (amounts, times, dates: ``2pm``, ``$5k``, ``150``).
MIN_CHARS_WITH_DIGIT = 3
#: Characters of a folded value that index it (every value looked for has at least this many).
_ANCHOR = min(MIN_CHARS, MIN_CHARS_WITH_DIGIT)


def value_text(v: Value) -> str:
    """A value as the text it reads as: a string as it is, anything else as its JSON (numbers
    as their repr, ``true``, ``null``, lists and maps with sorted keys)."""
    if isinstance(v, str):
        return v
    return json.dumps(json_value(v), ensure_ascii=False, sort_keys=True)


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def fold(text: str) -> tuple[str, Sequence[int] | None]:
    """``text`` folded for matching (lower case, whitespace runs as one space, stripped) and,
    for each folded character, the index of the character of ``text`` it comes from (None when
    every folded character sits where it was)."""
    if text.isascii():
        lowered = text.lower()
        if " ".join(text.split()) == text:
            return lowered, None
    out: list[str] = []
    where: list[int] = []
    space = True  # drops leading whitespace
    for i, ch in enumerate(text):
        if ch.isspace():
            if not space:
                out.append(" ")
                where.append(i)
                space = True
            continue
        space = False
        for low in ch.lower():
            out.append(low)
            where.append(i)
    if out and out[-1] == " ":
        out.pop()
        where.pop()
    return "".join(out), where


def folded(text: str) -> str:
    """`fold`'s text alone: how a value is written for matching."""
    return fold(text)[0]


def findable(f: str) -> bool:
    """Whether a folded value is long enough to be looked for (see the module docstring)."""
    n = len(f)
    return n >= MIN_CHARS or (n >= MIN_CHARS_WITH_DIGIT and any(c.isdigit() for c in f))


def anchors_of(values: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Folded findable values by their first characters, longest first (ties by text)."""
    by: dict[str, list[str]] = {}
    for f in values:
        by.setdefault(f[:_ANCHOR], []).append(f)
    return {a: tuple(sorted(fs, key=lambda f: (-len(f), f))) for a, fs in by.items()}


@dataclass(frozen=True, slots=True)
class Match:
    """One value found in a text: ``start``/``end`` index the original text, ``value`` is the
    folded value found."""

    start: int
    end: int
    value: str


class Lookup(Protocol):
    """Folded values to look for, asked position by position (`find`): a `RetractedValues`
    answers from the lengths of its values, so a text costs what it holds, not what was
    retracted."""

    def candidates(self, f: str, i: int, anchor: str) -> Iterable[str]:
        """The values it holds that ``f`` (folded) starts with at ``i`` (whose first
        characters are ``anchor``), longest first."""
        ...


#: What `find` looks through: `anchors_of` maps (anchor -> values, longest first) or `Lookup`s.
Anchors = Mapping[str, tuple[str, ...]] | Lookup


def _candidates(index: Anchors, f: str, i: int, key: str) -> Iterable[str]:
    if isinstance(index, Mapping):
        return (v for v in index.get(key, ()) if f.startswith(v, i))
    return index.candidates(f, i, key)


def find(
    text: str,
    anchors: Sequence[Anchors],
    accept: Callable[[str], bool] = lambda f: True,
) -> list[Match]:
    """Where the folded values indexed by ``anchors`` (`anchors_of` maps, or `Lookup`s) occur
    in ``text`` as whole words, leftmost first, then longest, never overlapping; a value
    ``accept`` refuses is passed over."""
    if not anchors:
        return []
    f, where = fold(text)
    n = len(f)
    out: list[Match] = []
    i = 0
    while i + _ANCHOR <= n:
        if i and _word(f[i]) and _word(f[i - 1]):
            i += 1
            continue
        key = f[i : i + _ANCHOR]
        best = ""
        for index in anchors:
            for value in _candidates(index, f, i, key):
                if len(value) <= len(best):
                    break
                end = i + len(value)
                if (end == n or not (_word(f[end - 1]) and _word(f[end]))) and accept(value):
                    best = value
                    break
        if not best:
            i += 1
            continue
        end = i + len(best)
        if where is None:
            out.append(Match(i, end, best))
        else:
            out.append(Match(where[i], where[end - 1] + 1, best))
        i = end
    return out


# --- retracted claims, per index and per lens ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retracted:
    """A retracted claim whose value can be looked for, and the claims its retractions name as
    replacing it (``superseded_by``, sorted)."""

    claim: ClaimAdded
    superseded_by: tuple[bytes, ...]


Label = tuple[tuple[str, ...], str]


class RetractedIndex:
    """Every retracted claim of an `Index` whose value is findable, kept by the Index itself
    (`Index.watch_kills`): built on the first read that needs it, then updated by each
    retraction the Index applies, so a read after a write never walks every retraction.

    Within one Index retractions only add (a claim retracted stays retracted; an Index that
    loses ops is built again), so every change is an append, numbered in ``serial``: a
    `RetractedValues` handed to a View reads only the entries numbered below the count it was
    made at, and stays exactly what it was if the Index is later written in place.

    - ``values``: folded value -> (serial, `Retracted`) entries; a claim retracted again by
      another retraction gets a later entry (its ``superseded_by`` may have grown).
    - ``lengths``: anchor (first characters) -> the distinct lengths of the values under it,
      longest first: `find` asks a text's slices of those lengths, never every value.
    - ``labels``: (visibility, scope) -> how many entries have it (only whether a lens sees
      any of them is asked).
    """

    __slots__ = ("count", "labels", "lengths", "values")

    def __init__(self) -> None:
        self.values: dict[str, tuple[tuple[int, Retracted], ...]] = {}
        self.lengths: dict[str, tuple[int, ...]] = {}
        self.labels: dict[Label, int] = {}
        self.count = 0

    @classmethod
    def of(
        cls,
        claims: Mapping[bytes, ClaimAdded],
        killed: Mapping[bytes, tuple[bytes, ...]],
        retractions: Mapping[bytes, ClaimRetracted],
    ) -> RetractedIndex:
        """The index of every retracted claim in ``killed`` (claim id -> its retractions)."""
        out = cls()
        for cid in sorted(killed):
            c = claims.get(cid)
            if c is not None:
                out.add(c, killed[cid], retractions)
        return out

    def add(
        self,
        claim: ClaimAdded,
        killers: tuple[bytes, ...],
        retractions: Mapping[bytes, ClaimRetracted],
    ) -> None:
        """``claim`` is retracted by ``killers`` (now, or now by more of them)."""
        f = folded(value_text(claim.value))
        if not findable(f):
            return
        by = sorted({b for r in killers if (b := retractions[r].superseded_by) is not None})
        entry = (self.count, Retracted(claim, tuple(by)))
        self.count += 1
        held = self.values.get(f, ())
        self.values[f] = (*held, entry)
        if not held:
            anchor = f[:_ANCHOR]
            have = self.lengths.get(anchor, ())
            if len(f) not in have:
                self.lengths[anchor] = tuple(sorted((*have, len(f)), reverse=True))
        label = _label(claim)
        self.labels[label] = self.labels.get(label, 0) + 1

    def copy(self) -> RetractedIndex:
        """A copy for a copied Index (the entries are immutable, so shallow)."""
        out = RetractedIndex.__new__(RetractedIndex)
        out.values = self.values.copy()
        out.lengths = self.lengths.copy()
        out.labels = self.labels.copy()
        out.count = self.count
        return out

    def entries(self, upto: int | None = None) -> dict[tuple[Label, str], tuple[Retracted, ...]]:
        """Everything it holds (as of ``upto`` entries), by label and value, by claim id: a
        canonical form, so that two indexes of the same retracted claims compare equal."""
        out: dict[tuple[Label, str], dict[bytes, Retracted]] = {}
        for f, held in self.values.items():
            for r in _latest(held, self.count if upto is None else upto):
                out.setdefault((_label(r.claim), f), {})[r.claim.op_id] = r
        return {k: tuple(v[c] for c in sorted(v)) for k, v in sorted(out.items())}


def _label(c: ClaimAdded) -> Label:
    return (c.visibility, c.scope)


def _latest(held: tuple[tuple[int, Retracted], ...], upto: int) -> list[Retracted]:
    """Each claim's latest entry numbered below ``upto``."""
    out: dict[bytes, tuple[int, Retracted]] = {}
    for serial, r in held:
        if serial < upto:
            was = out.get(r.claim.op_id)
            if was is None or was[0] < serial:
                out[r.claim.op_id] = (serial, r)
    return [r for _, r in out.values()]


def retracted_index(state: State) -> RetractedIndex:
    """The `RetractedIndex` of ``state``: its Index's, made on the first call and kept up to
    date by that Index from then on (treat it as read-only)."""
    ix = state._ix
    return ix.watch_kills(lambda: RetractedIndex.of(ix.claims, ix.killed, ix.retractions))


@dataclass(frozen=True, slots=True)
class RetractedValues:
    """The retracted claims one lens may see whose values can be found in free text: those of
    a `RetractedIndex` (as of ``upto`` of its entries) with a visibility and scope in
    ``labels``, which the lens sees, not expired at the lens's ``now``. A `Lookup` for `find`.
    """

    index: RetractedIndex = field(default_factory=RetractedIndex)
    upto: int = 0
    labels: frozenset[Label] = frozenset()
    now: int | None = None

    @property
    def anchors(self) -> tuple[Lookup, ...]:
        """What `find` looks through."""
        return (self,) if self.labels else ()

    def candidates(self, f: str, i: int, anchor: str) -> Iterable[str]:
        values = self.index.values
        for k in self.index.lengths.get(anchor, ()):
            value = f[i : i + k]
            if len(value) == k and value in values:
                yield value

    def claims(self, value: str) -> tuple[Retracted, ...]:
        """The retracted claims (the lens may see) holding the folded ``value``, by claim id."""
        held = self.index.values.get(value)
        if held is None:
            return ()
        now, labels = self.now, self.labels
        out = [
            r
            for r in _latest(held, self.upto)
            if _label(r.claim) in labels
            and (now is None or r.claim.expires is None or r.claim.expires >= now)
        ]
        return tuple(sorted(out, key=lambda r: r.claim.op_id))

    def __bool__(self) -> bool:
        return bool(self.labels)


NO_RETRACTED = RetractedValues()


def occurs(text: str, value: str) -> bool:
    """Whether the folded ``value`` occurs in the folded ``text`` as whole words (as `find`
    finds values)."""
    n, k = len(text), len(value)
    i = text.find(value)
    while i >= 0:
        end = i + k
        if (i == 0 or not (_word(text[i - 1]) and _word(value[0]))) and (
            end == n or not (_word(value[-1]) and _word(text[end]))
        ):
            return True
        i = text.find(value, i + 1)
    return False
