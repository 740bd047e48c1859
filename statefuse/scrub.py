"""Scrubbing: the values of retracted claims, found again in the free text a context shows.

A retraction withdraws a claim, so the materializer never selects it and context assembly never
shows it as a fact. But the working set keeps conversation turns and scratch items word for word,
and "the budget moved from $40k to $50k" shows ``$40k`` long after the claim saying $40k was
superseded. This module finds such values in free text by exact text identity, so context
assembly can replace them with a marker (`statefuse.context`, ``Transcript.CLEAN``).

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
  holds nothing of a hidden claim, not even a value to look for. `RetractedIndex` keeps them per
  State, in buckets of one visibility and scope, so a projection hands its View the buckets its
  lens sees (`RetractedValues`) without walking every retracted claim.

Invariant: matching is deterministic — leftmost first, then the longest value, ties by the
value's text — and a pure function of the text and the values; nothing here reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from statefuse.op import ClaimAdded
from statefuse.registry.value import Value
from statefuse.state import State
from statefuse.view import json_value

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


def find(
    text: str,
    anchors: Sequence[Mapping[str, tuple[str, ...]]],
    accept: Callable[[str], bool] = lambda f: True,
) -> list[Match]:
    """Where the folded values indexed by ``anchors`` occur in ``text`` as whole words, leftmost
    first, then longest, never overlapping; a value ``accept`` refuses is passed over."""
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
            for value in index.get(key, ()):
                if len(value) <= len(best):
                    break
                end = i + len(value)
                if (
                    f.startswith(value, i)
                    and (end == n or not (_word(f[end - 1]) and _word(f[end])))
                    and accept(value)
                ):
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


# --- retracted claims, per State and per lens ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Retracted:
    """A retracted claim whose value can be looked for, and the claims its retractions name as
    replacing it (``superseded_by``, sorted)."""

    claim: ClaimAdded
    superseded_by: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class _Bucket:
    """Retracted claims of one visibility and scope: by folded value, and that value's anchor."""

    visibility: tuple[str, ...]
    scope: str
    values: Mapping[str, tuple[Retracted, ...]]  # never changed
    anchors: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class RetractedIndex:
    """Every retracted claim of a State whose value is findable, in buckets by (visibility,
    scope). Made once per State (`retracted_index`), from the previous State's when few
    retractions changed since."""

    buckets: Mapping[tuple[tuple[str, ...], str], _Bucket]
    #: What the index was made from: retracted claim id -> its retractions.
    killed: Mapping[bytes, tuple[bytes, ...]]


def retracted_index(state: State) -> RetractedIndex:
    """The `RetractedIndex` of ``state`` (use through ``state.derived``)."""
    killed = state._ix.killed
    if not killed:
        return RetractedIndex({}, {})  # never a shared one: its maps are handed out
    since = state.changes_since()
    before = since[0].get(retracted_index) if since is not None else None
    if isinstance(before, RetractedIndex) and before.killed:
        changed = {cid for cid, _ in killed.items() ^ before.killed.items()}
        if 8 * len(changed) < len(killed) + 64:
            return _patched(state, before, changed)
    return _built(state, killed.keys())


def _entry(state: State, cid: bytes) -> tuple[str, Retracted] | None:
    ix = state._ix
    c = ix.claims.get(cid)
    if c is None:
        return None
    f = folded(value_text(c.value))
    if not findable(f):
        return None
    rets = ix.killed[cid]
    by = sorted({b for r in rets if (b := ix.retractions[r].superseded_by) is not None})
    return f, Retracted(c, tuple(by))


def _label(c: ClaimAdded) -> tuple[tuple[str, ...], str]:
    return (c.visibility, c.scope)


def _built(state: State, ids: Iterable[bytes]) -> RetractedIndex:
    values: dict[tuple[tuple[str, ...], str], dict[str, list[Retracted]]] = {}
    for cid in sorted(ids):
        e = _entry(state, cid)
        if e is not None:
            values.setdefault(_label(e[1].claim), {}).setdefault(e[0], []).append(e[1])
    buckets = {
        label: _bucket(label, {f: tuple(rs) for f, rs in vs.items()})
        for label, vs in sorted(values.items())
    }
    return RetractedIndex(buckets, dict(state._ix.killed))


def _bucket(
    label: tuple[tuple[str, ...], str], values: dict[str, tuple[Retracted, ...]]
) -> _Bucket:
    return _Bucket(label[0], label[1], values, anchors_of(values))


def _patched(state: State, before: RetractedIndex, changed: set[bytes]) -> RetractedIndex:
    """``before`` with the claims in ``changed`` (retracted, no longer retracted, or retracted
    again by another retraction) taken out and put back as ``state`` has them: only the buckets
    they are in are copied."""
    claims = state._ix.claims
    killed = state._ix.killed
    touched: dict[tuple[tuple[str, ...], str], dict[str, list[Retracted]]] = {}

    def bucket(label: tuple[tuple[str, ...], str]) -> dict[str, list[Retracted]]:
        found = touched.get(label)
        if found is None:
            old = before.buckets.get(label)
            found = touched[label] = (
                {f: list(rs) for f, rs in old.values.items()} if old is not None else {}
            )
        return found

    for cid in sorted(changed):
        c = claims.get(cid)
        if c is None:
            continue
        f = folded(value_text(c.value))
        if not findable(f):
            continue
        held = bucket(_label(c))
        rs = [r for r in held.get(f, ()) if r.claim.op_id != cid]
        e = _entry(state, cid) if cid in killed else None
        if e is not None:
            rs.append(e[1])
            rs.sort(key=lambda r: r.claim.op_id)
        if rs:
            held[f] = rs
        else:
            held.pop(f, None)
    buckets = dict(before.buckets)
    for label, vs in touched.items():
        if vs:
            buckets[label] = _bucket(label, {f: tuple(rs) for f, rs in vs.items()})
        else:
            buckets.pop(label, None)
    return RetractedIndex(dict(sorted(buckets.items())), dict(killed))


@dataclass(frozen=True, slots=True)
class RetractedValues:
    """The retracted claims one lens may see whose values can be found in free text: the
    buckets of the State's `RetractedIndex` in a visibility and scope the lens sees, and the
    lens's ``now`` (a retracted claim that has expired is left out when looked up)."""

    buckets: tuple[_Bucket, ...] = ()
    now: int | None = None

    @property
    def anchors(self) -> tuple[Mapping[str, tuple[str, ...]], ...]:
        return tuple(b.anchors for b in self.buckets)

    def claims(self, value: str) -> tuple[Retracted, ...]:
        """The retracted claims (the lens may see) holding the folded ``value``, by claim id."""
        now = self.now
        out = [
            r
            for b in self.buckets
            for r in b.values.get(value, ())
            if now is None or r.claim.expires is None or r.claim.expires >= now
        ]
        return tuple(sorted(out, key=lambda r: r.claim.op_id))

    def __bool__(self) -> bool:
        return bool(self.buckets)

    def __len__(self) -> int:
        return sum(len(b.values) for b in self.buckets)


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
