"""The built-in detectors, written as examples to copy: ``budget`` and ``bookings``.

Each is a pure function of its `DetectorInput` (no clock, no randomness, no hash-seed order:
everything is walked in the input's claim-id or key order, or sorted), and each is version 1
of its name in every process, so a registry may declare it without registering anything.
Copy one, change what it reads and finds, and register yours under your own name
(`register_detector`); check it with `registry.checker.check_registry`.

``budget`` (declare it reading the predicates ``cost`` and ``limit``, e.g.
``reads = ["budget/cost", "budget/limit"]``): a *limit* is a claim ``(namespace, B, "limit")``
whose value is a number (int, float or decimal str, as the ``number`` normalizer reads it); a
*cost* is a claim ``(namespace, item, "cost")`` whose value is a map ``{"budget": B, "amount":
<number>}``. When the costs of budget ``B`` in one namespace and scope sum to more than its limit,
it finds ``over-budget`` anchored at the limit's key, naming every cost and the limit, with the
witness ``{"budget": B, "required": <sum>, "available": <limit>}``. Several active limits for
one budget (a same-key conflict of their own) are read as the lowest. Values it cannot read are
skipped: they are not costs or limits.

``bookings`` (declare it reading ``booking``): a booking is a claim ``(namespace, id,
"booking")`` whose value is a map ``{"room": R, "start": <ISO 8601 datetime>, "end": <ISO 8601
datetime>}`` (a half-open slot ``[start, end)``). Bookings of one room in one namespace and scope
whose slots overlap, directly or through a chain, form one ``double-booking`` finding anchored at
the key of the earliest booking of the chain, with the witness ``{"room": R, "slots":
[[start, end], ...]}`` (UTC, in start order).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType

from statefuse.registry.detector import ClaimView, Detector, DetectorInput, Finding
from statefuse.registry.error import InputError
from statefuse.registry.normalizer import datetime as _utc
from statefuse.registry.normalizer import number as _number
from statefuse.registry.value import Value


def _amount(value: Value) -> Decimal | None:
    """The number ``value`` holds (as the ``number`` normalizer reads it), or None."""
    try:
        return Decimal(_number(value))
    except InputError:
        return None


def _shown(amount: Decimal) -> int | str:
    """An amount as a witness shows it: an int when whole, else its decimal text."""
    if amount == amount.to_integral_value() and abs(amount) < 2**63:
        return int(amount)
    return _number(str(amount))


def budget(claims: DetectorInput) -> list[Finding]:
    """``over-budget``: the costs of one budget sum to more than its limit (module doc)."""
    limits: dict[tuple[str, str, str], tuple[Decimal, list[ClaimView]]] = {}
    costs: dict[tuple[str, str, str], list[tuple[ClaimView, Decimal]]] = {}
    for c in claims.claims:
        if c.predicate == "limit":
            amount = _amount(c.value)
            if amount is None:
                continue
            where = (c.namespace, c.subject, c.scope)
            held = limits.get(where)
            if held is None or amount < held[0]:
                limits[where] = (amount, [c])
            elif amount == held[0]:
                held[1].append(c)
        elif c.predicate == "cost" and isinstance(c.value, Mapping):
            name = c.value.get("budget")
            amount = _amount(c.value.get("amount"))
            if type(name) is str and amount is not None:
                costs.setdefault((c.namespace, name, c.scope), []).append((c, amount))
    out: list[Finding] = []
    for where in sorted(limits):
        limit, limit_claims = limits[where]
        spent = costs.get(where, [])
        required = sum((a for _, a in spent), Decimal(0))
        if required <= limit:
            continue
        namespace, name, scope = where
        out.append(
            Finding(
                type="over-budget",
                anchor=(namespace, name, "limit"),
                scope=scope,
                claim_ids=tuple(c.claim_id for c, _ in spent)
                + tuple(c.claim_id for c in limit_claims),
                reason=f"{len(spent)} costs of budget {name} sum to {_shown(required)},"
                f" over its limit {_shown(limit)}",
                witness={"budget": name, "required": _shown(required), "available": _shown(limit)},
            )
        )
    return out


def _instant(value: Value) -> str | None:
    """A datetime as UTC text that sorts as time does (fraction always written), or None."""
    try:
        text = _utc(value)
    except InputError:
        return None
    return text if "." in text else text[:-1] + ".000000Z"


def _plain_time(text: str) -> str:
    return text.replace(".000000Z", "Z")


def bookings(claims: DetectorInput) -> list[Finding]:
    """``double-booking``: bookings of one room whose slots overlap (module doc)."""
    rooms: dict[tuple[str, str, str], list[tuple[str, str, ClaimView]]] = {}
    for c in claims.claims:
        if c.predicate != "booking" or not isinstance(c.value, Mapping):
            continue
        room = c.value.get("room")
        start, end = _instant(c.value.get("start")), _instant(c.value.get("end"))
        if type(room) is not str or start is None or end is None or not start < end:
            continue
        rooms.setdefault((c.namespace, room, c.scope), []).append((start, end, c))
    out: list[Finding] = []
    chains: dict[tuple[tuple[str, str, str], str], list[tuple[str, str, ClaimView]]] = {}
    rooms_of: dict[tuple[tuple[str, str, str], str], set[str]] = {}
    for where in sorted(rooms):
        _, room, scope = where
        slots = sorted(rooms[where], key=lambda s: (s[0], s[1], s[2].key, s[2].claim_id))
        chain: list[tuple[str, str, ClaimView]] = []
        reach = ""
        for slot in (*slots, None):
            if slot is not None and chain and slot[0] < reach:
                chain.append(slot)
                reach = max(reach, slot[1])
                continue
            if len(chain) > 1:
                # one finding per anchor: a key with two values (a same-key conflict) may start
                # two chains, which then share a finding
                chains.setdefault((chain[0][2].key, scope), []).extend(chain)
                rooms_of.setdefault((chain[0][2].key, scope), set()).add(room)
            if slot is not None:
                chain, reach = [slot], slot[1]
    for (anchor, scope), found in sorted(chains.items()):
        room = ", ".join(sorted(rooms_of[(anchor, scope)]))
        found.sort(key=lambda s: (s[0], s[1], s[2].claim_id))
        out.append(
            Finding(
                type="double-booking",
                anchor=anchor,
                scope=scope,
                claim_ids=tuple(s[2].claim_id for s in found),
                reason=f"{len(found)} bookings of room {room} overlap",
                witness={
                    "room": room,
                    "slots": [[_plain_time(s[0]), _plain_time(s[1])] for s in found],
                },
            )
        )
    return out


BUILTIN_DETECTORS: Mapping[str, Detector] = MappingProxyType(
    {"budget": budget, "bookings": bookings}
)
