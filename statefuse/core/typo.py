"""Near-identical names: the edit distance between two key parts and the existing name nearest
to one that has no claims, so that a typo (``projct`` for ``project``) is pointed out rather
than taken as a new namespace in silence. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: How far a name may be from the one asked for and still be suggested ("did you mean").
SUGGEST_DISTANCE = 2
#: The fewest characters a new name has before a write next to a near one is warned about:
#: short names (``u1``, ``dev``) sit one edit apart from each other by design.
WARN_MIN_CHARS = 4

_DIGITS = re.compile(r"[0-9]+")


def edit_distance(a: str, b: str, *, most: int) -> int:
    """The optimal-string-alignment distance between ``a`` and ``b`` (insertions, deletions,
    substitutions and swaps of two neighbours each cost one), or ``most + 1`` once it is
    known to exceed ``most`` (names are short, but a memory may hold many of them)."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    if a == b:
        return 0
    before: list[int] | None = None
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        new = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            d = min(row[j] + 1, new[j - 1] + 1, row[j - 1] + cost)
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                d = min(d, before[j - 2] + 1)
            new[j] = d
        if min(new) > most:
            return most + 1
        before, row = row, new
    return min(row[-1], most + 1)


def nearest(word: str, names: Iterable[str], *, most: int = SUGGEST_DISTANCE) -> str | None:
    """The name among ``names`` nearest to ``word`` (other than ``word`` itself), at most
    ``most`` edits away and fewer edits than ``word`` has characters; ties go to the first in
    code point order. None when no name is that near."""
    best: tuple[int, str] | None = None
    limit = min(most, len(word) - 1)
    if limit < 1:
        return None
    for name in names:
        if name == word:
            continue
        d = edit_distance(word, name, most=limit)
        if d <= limit and (best is None or (d, name) < best):
            best = (d, name)
    return None if best is None else best[1]


def series(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ only in their digits (``item1`` and ``item2``, ``t9``
    and ``t10``): members of a numbered series, not a typo of each other."""
    return _DIGITS.sub("0", a) == _DIGITS.sub("0", b)


def typo_of(word: str, names: Iterable[str]) -> str | None:
    """The existing name a new name ``word`` is likely a typo of, what a write warns about:
    one edit away, ``word`` at least `WARN_MIN_CHARS` long, and not a sibling in a numbered
    series. None otherwise."""
    if len(word) < WARN_MIN_CHARS:
        return None
    return nearest(word, (n for n in names if not series(n, word)), most=1)
