"""When and where a claim holds, and which claims of one key therefore conflict (SEMANTICS §5, §9).

Invariant: `conflicting` is one pure function of a locus' active claims and their value groups,
used by every place that judges conflicts (the in-memory index and State, the store's derived
state), so a lazily opened replica and a fully loaded one agree. Two active claims conflict iff
their value groups differ, their validity intervals overlap, and their contexts agree on every
dimension both name. With no interval and no context anywhere it is today's rule exactly: every
claim is a candidate as soon as there are two value groups.

Cost: claims are put in classes by their context (the exact map). Each class, and each pair of
classes whose contexts agree, is swept once over its intervals sorted by start, so the work is
``O(s * n log n)`` for ``n`` claims in ``s`` distinct contexts (``s`` is 1 for claims without
contexts): never all pairs of claims, only pairs of distinct context signatures.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import Any

from statefuse.core.error import OpRuleError
from statefuse.core.op import ClaimAdded
from statefuse.registry.value import INT_MAX

#: Where an interval without ``valid_from`` starts, and one without ``valid_until`` ends
#: (every instant is a non-negative int64).
OPEN_START = -1
OPEN_END = INT_MAX + 1

#: The first instant `datetime` cannot show (year 10000), and the epoch.
_YEAR_10000 = 253_402_300_800_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

Scalar = str | int | bool
#: A context as given or stored (a `FrozenMap` on a claim): dimension -> str, int or bool.
Context = Mapping[str, Any]


def span(c: ClaimAdded) -> tuple[int, int]:
    """The claim's interval as ``[start, end)`` with the open ends made numbers."""
    vf, vu = c.valid_from, c.valid_until
    return (OPEN_START if vf is None else vf, OPEN_END if vu is None else vu)


def holds_at(c: ClaimAdded, at: int) -> bool:
    """True when ``at`` (ms) lies in the claim's ``[valid_from, valid_until)``."""
    vf, vu = c.valid_from, c.valid_until
    return (vf is None or vf <= at) and (vu is None or at < vu)


def contexts_agree(a: Context | None, b: Context | None) -> bool:
    """True when the two contexts give equal values (of one type: ``1`` is not ``True``) to
    every dimension both name; a dimension only one names applies to every value of it."""
    if not a or not b:
        return True
    if len(b) < len(a):
        a, b = b, a
    for k, v in a.items():
        if k in b:
            w = b[k]
            if type(w) is not type(v) or w != v:
                return False
    return True


def overlaps(a: ClaimAdded, b: ClaimAdded) -> bool:
    """True when the two claims' intervals share an instant."""
    sa, ea = span(a)
    sb, eb = span(b)
    return sa < eb and sb < ea


def replaces(new: ClaimAdded, old: ClaimAdded) -> bool:
    """Whether an update writing ``new`` replaces its author's ``old`` claim at the key: when
    the two could not both apply (their intervals overlap and their contexts agree). A claim
    without interval or context replaces every earlier one, as updates always did."""
    return overlaps(new, old) and contexts_agree(new.context, old.context)


def _signature(c: ClaimAdded) -> tuple[tuple[str, str, Any], ...]:
    ctx = c.context
    if not ctx:
        return ()
    return tuple((k, type(v).__name__, v) for k, v in ctx.items())


def conflicting(claims: Sequence[ClaimAdded], gkey: Callable[[bytes], bytes]) -> tuple[bytes, ...]:
    """The ids (sorted) of the claims that conflict with at least one other of ``claims`` (the
    active claims of one functional locus; ``gkey`` gives a claim id's value group)."""
    if len(claims) < 2:
        return ()
    g0 = gkey(claims[0].op_id)
    if all(gkey(c.op_id) == g0 for c in claims):
        return ()  # one value: agreement, whatever the intervals and contexts
    for c in claims:  # (`ClaimAdded.situated`, inline: this runs for every conflict read)
        if c.valid_from is not None or c.valid_until is not None or c.context is not None:
            break
    else:
        return tuple(sorted(c.op_id for c in claims))
    classes: dict[tuple[tuple[str, str, Any], ...], list[ClaimAdded]] = {}
    for c in claims:
        classes.setdefault(_signature(c), []).append(c)
    sigs = list(classes)
    marked: set[bytes] = set()
    for i, a in enumerate(sigs):
        members = classes[a]
        _sweep(members, gkey, marked)
        ctx_a = members[0].context
        for b in sigs[i + 1 :]:
            others = classes[b]
            if contexts_agree(ctx_a, others[0].context):
                _sweep(members + others, gkey, marked)
    return tuple(sorted(marked))


def has_conflict(claims: Sequence[ClaimAdded], gkey: Callable[[bytes], bytes]) -> bool:
    """True when some two of ``claims`` conflict (`conflicting` is not empty)."""
    if len(claims) < 2:
        return False
    g0 = gkey(claims[0].op_id)
    if all(gkey(c.op_id) == g0 for c in claims):
        return False
    if not any(c.situated for c in claims):
        return True
    return bool(conflicting(claims, gkey))


def conflicts_with(
    new: ClaimAdded, claims: Sequence[ClaimAdded], gkey: Callable[[bytes], bytes]
) -> bool:
    """True when ``new`` conflicts with one of ``claims`` (the incremental step: a locus
    without a conflict gains one iff its new claim conflicts with one already there)."""
    g = gkey(new.op_id)
    if not new.situated:  # unbounded and everywhere: it overlaps and agrees with every claim
        return any(gkey(c.op_id) != g for c in claims)
    ctx = new.context
    return any(
        gkey(c.op_id) != g and overlaps(new, c) and contexts_agree(ctx, c.context) for c in claims
    )


def _sweep(
    members: Sequence[ClaimAdded], gkey: Callable[[bytes], bytes], marked: set[bytes]
) -> None:
    """Mark every claim of ``members`` whose interval overlaps one of another value group.

    Sorted by start; for each prefix, the largest end overall (and its group) and the largest
    end among the other groups. A claim ``x`` overlaps some ``y`` of another group iff among
    the claims starting before ``x`` ends, the largest end of a group other than x's is after
    x's start: one binary search per claim."""
    if len(members) < 2:
        return
    items = sorted((*span(c), gkey(c.op_id), c.op_id) for c in members)
    if len({it[2] for it in items}) < 2:
        return
    starts = [it[0] for it in items]
    best: list[tuple[int, bytes | None, int]] = []
    e1, g1, e2 = OPEN_START, None, OPEN_START
    for _, e, g, _ in items:
        if g == g1:
            if e > e1:
                e1 = e
        elif e > e1:
            e1, g1, e2 = e, g, e1
        elif e > e2:
            e2 = e
        best.append((e1, g1, e2))
    for s, e, g, cid in items:
        if cid in marked:
            continue
        p = bisect_left(starts, e)
        if p == 0:
            continue
        b1, bg, b2 = best[p - 1]
        if (b1 if bg != g else b2) > s:
            marked.add(cid)


# --- instants as writers give them ----------------------------------------------------------------


def instant_ms(field: str, v: object) -> int | None:
    """An instant as ms since the epoch (UTC): an int (ms), an aware ``datetime``, or an ISO
    8601 string with an offset or ``Z`` (a bare date means its midnight UTC). None stays None.
    A naive datetime (or a time without an offset) is refused: it names no instant. Raises
    OpRuleError naming ``field``."""
    if v is None:
        return None
    if type(v) is int:
        return v
    if isinstance(v, str):
        text = v.strip()
        try:
            if len(text) == 10:
                d = date.fromisoformat(text)
                v = datetime(d.year, d.month, d.day, tzinfo=timezone.utc)
            else:
                if text.endswith(("Z", "z")):
                    text = text[:-1] + "+00:00"
                v = datetime.fromisoformat(text)
        except ValueError:
            raise OpRuleError(
                field, "iso-8601", f"{v!r} is not an ISO 8601 date or date-time"
            ) from None
    if isinstance(v, datetime):
        if v.tzinfo is None or v.utcoffset() is None:
            raise OpRuleError(
                field,
                "aware-datetime",
                f"{v.isoformat()} has no UTC offset: give one (e.g. Z or +01:00)",
            )
        delta = v - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    raise OpRuleError(
        field, "instant", f"expected ms (int), an aware datetime or ISO 8601 text, got {v!r}"
    )


def format_instant(ms: int) -> str:
    """``2026-01-01`` for a midnight UTC, else ``2026-01-01T09:30Z`` (seconds and ms only
    when not zero): compact text for the context and tables."""
    if ms >= _YEAR_10000:
        return str(ms)
    dt = _EPOCH + timedelta(milliseconds=ms)
    if ms % 86_400_000 == 0:
        return dt.strftime("%Y-%m-%d")
    if ms % 60_000 == 0:
        return dt.strftime("%Y-%m-%dT%H:%MZ")
    if ms % 1000 == 0:
        return dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_interval(valid_from: int | None, valid_until: int | None) -> str:
    """``[2026-01-01 .. 2026-03-01)``, with ``..`` alone on an open side; "" when both are
    open (an open-ended value shows no interval)."""
    if valid_from is None and valid_until is None:
        return ""
    a = "" if valid_from is None else format_instant(valid_from)
    b = "" if valid_until is None else format_instant(valid_until)
    return f"[{a} .. {b})".replace("[ ..", "[..").replace(".. )", "..)")


def format_context(ctx: Context | None) -> str:
    """``{location=London}``; "" for no dimensions."""
    if not ctx:
        return ""
    return "{" + ", ".join(f"{k}={_scalar(v)}" for k, v in ctx.items()) + "}"


def _scalar(v: Scalar) -> str:
    if type(v) is bool:
        return "true" if v else "false"
    return str(v)


def situation(c: ClaimAdded) -> str:
    """The claim's interval and context as one compact suffix (" [..) {k=v}"), or ""."""
    parts = [
        p for p in (format_interval(c.valid_from, c.valid_until), format_context(c.context)) if p
    ]
    return (" " + " ".join(parts)) if parts else ""
