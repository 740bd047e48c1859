"""How the command line shows things to people: aligned tables and the text of their cells.

Everything here turns data into text and nothing else (no I/O, no clock), so the exact output of
``statefuse`` can be pinned by tests. Machine output (``--json``) does not come through here: it
keeps full ids and whole values, while a cell may shorten both.

Invariant: a table's columns line up in a terminal for any text, wide characters included (the
width of a cell is its display width, not its length), and no line ends in spaces.
"""

from __future__ import annotations

import json
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from itertools import accumulate, repeat

from statefuse.core.op import ClaimAdded, Outcome
from statefuse.core.state import State
from statefuse.reading.view import json_value
from statefuse.registry.value import Value

#: Hex digits of an id shown in a table cell (full ids are in ``--json`` output).
SHORT_ID_CHARS = 12
#: Longest value shown in a table cell, in display columns; longer ones end in ``…``.
MAX_VALUE_WIDTH = 60
_GAP = "  "
#: ``json.dumps(..., ensure_ascii=False, sort_keys=True)`` without making an encoder per call.
_to_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


class _CharWidths(dict[str, int]):
    """Columns of one character, worked out once per distinct character (a memo that starts
    over when full), so a cell's width is one C-level pass: ``sum(map(...))``."""

    MAX_ENTRIES = 65_536

    def __missing__(self, ch: str) -> int:
        if len(self) >= self.MAX_ENTRIES:
            self.clear()
        if unicodedata.combining(ch):
            width = 0
        else:
            width = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
        self[ch] = width
        return width


_char_width = _CharWidths().__getitem__


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: wide East Asian characters take two, combining
    marks none."""
    if text.isascii():  # every ASCII character, control characters too, takes one column
        return len(text)
    return sum(map(_char_width, text))


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` display columns, ending in ``…`` when it was cut."""
    if text.isascii():
        return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
    if display_width(text) <= limit:
        return text
    widths = list(accumulate(map(_char_width, text)))
    # widths never decrease (no character is narrower than nothing): keep the longest prefix
    # that leaves one column for the ellipsis
    return text[: bisect_right(widths, limit - 1)] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, indent: str = "") -> str:
    """``headers`` and ``rows`` as left-aligned columns two spaces apart, one line each."""
    padded = []
    for column in zip(headers, *rows, strict=True):
        if all(map(str.isascii, column)):  # widths are lengths: pad in C
            padded.append(list(map(str.ljust, column, repeat(max(map(len, column))))))
        else:
            widths = list(map(display_width, column))
            width = max(widths)
            padded.append([c + " " * (width - w) for c, w in zip(column, widths, strict=True)])
    lines = map(_GAP.join, zip(*padded, strict=True))
    return "\n".join(map(str.rstrip, map(indent.__add__, lines) if indent else lines))


def short_id(ident: bytes) -> str:
    """The first `SHORT_ID_CHARS` hex digits of an id (a claim id prefix the CLI accepts)."""
    return ident[: SHORT_ID_CHARS // 2].hex()  # SHORT_ID_CHARS is even: whole bytes


def value_json(v: Value) -> str:
    """A value spelled as JSON (the spelling the command line reads back); bytes become
    ``{"$bytes": "<hex>"}``."""
    return _to_json(json_value(v))


#: What a listing shows in place of a redacted claim's value (SEMANTICS §10).
REDACTED_CELL = "(redacted)"


def value_cell(v: Value) -> str:
    """`value_json`, clipped to `MAX_VALUE_WIDTH` columns."""
    return clip(value_json(v), MAX_VALUE_WIDTH)


def utc_time(ms: int) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DD HH:MM:SSZ`` (UTC)."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def byte_size(n: int) -> str:
    """A byte count for people: ``512 B``, ``1.5 kB``, ``2.0 MB`` (powers of 1000)."""
    if n < 1000:
        return f"{n} B"
    value = n / 1000
    for unit in ("kB", "MB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"


def fields(pairs: Sequence[tuple[str, str]], *, indent: str = "") -> str:
    """``label  value`` lines with the values lined up."""
    return table(pairs[0], pairs[1:], indent=indent) if pairs else ""


def claim_notes(c: ClaimAdded, state: State) -> list[str]:
    """What ``show`` writes in NOTE: ``conflict`` (undecided; with ``deferred`` when a defer
    decision left it open), ``chosen`` / ``overruled`` (a decision applies), ``preserved`` (a
    preserve decision kept every value) and ``stale`` (it rests on a retracted claim)."""
    notes = []
    key = (c.namespace, c.subject, c.predicate)
    if not state.in_conflict(*key, c.scope):
        conflict = None
    elif not state.decisions:  # undecided, whatever its ConflictSet holds: do not make it
        notes.append("conflict")
        conflict = None
    else:
        conflict = state.conflict_of(*key, c.scope)
    if conflict is not None:
        decision = state.decision_for(conflict)
        if decision is None:
            notes.append("conflict")
        elif decision.outcome is Outcome.PRESERVE:
            notes.append("preserved")
        elif decision.outcome is Outcome.DEFER:
            notes.append("conflict")
            notes.append("deferred")
        else:
            notes.append("chosen" if state.decision_selects(decision, c.claim_id) else "overruled")
    if c.op_id in state.stale:
        notes.append("stale")
    return notes
