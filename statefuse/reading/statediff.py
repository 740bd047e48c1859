"""What changed between two States: claims added, claims retracted (and by what), decisions
made, conflicts opened and closed.

Invariant: `state_diff` is a pure function of the two States, and applying it to the first gives
the second's sets: ``claims(before) ∪ added − removed == claims(after)``, likewise for the
retracted claims, the decisions and the conflicts' loci. So a diff is sensible between any two
States, not only an earlier and a later one: going back, what the later State had shows under
``removed``, ``unretracted``, ``decisions_dropped`` and ``conflicts_closed``. Every tuple is
sorted by id, so equal States give an empty diff and equal inputs equal diffs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from statefuse.core.keytext import format_key
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded
from statefuse.core.state import ConflictSet, State
from statefuse.reading.view import json_value


@dataclass(frozen=True, slots=True)
class RetractedClaim:
    """A claim retracted in the later State, with the retractions (new there) that retract it."""

    claim: ClaimAdded
    by: tuple[ClaimRetracted, ...]


@dataclass(frozen=True, slots=True)
class StateDiff:
    """The difference from one State to another (see the module docstring)."""

    #: Claims the later State holds and the earlier does not (active or already retracted).
    added: tuple[ClaimAdded, ...] = ()
    #: Claims the earlier State holds and the later does not (only when going back).
    removed: tuple[ClaimAdded, ...] = ()
    #: Claims retracted in the later State and not in the earlier, with what retracts them.
    retracted: tuple[RetractedClaim, ...] = ()
    #: Claims retracted in the earlier State and not in the later (only when going back).
    unretracted: tuple[ClaimAdded, ...] = ()
    #: Decisions the later State holds and the earlier does not.
    decisions: tuple[DecisionAdded, ...] = ()
    #: Decisions the earlier State holds and the later does not (only when going back).
    decisions_dropped: tuple[DecisionAdded, ...] = ()
    #: Conflicts at loci in conflict in the later State and not in the earlier.
    conflicts_opened: tuple[ConflictSet, ...] = ()
    #: Conflicts (as the earlier State had them) at loci no longer in conflict in the later.
    conflicts_closed: tuple[ConflictSet, ...] = ()
    #: Conflicts at loci in conflict in both, whose candidates changed (the later ones).
    conflicts_changed: tuple[ConflictSet, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, f) for f in self.__slots__)

    def lines(self) -> list[str]:
        """One line per item, in field order (what ``statefuse diff`` prints)."""
        out: list[str] = []
        for c in self.added:
            out.append(f"+ claim {_claim(c)}")
        for c in self.removed:
            out.append(f"- claim {_claim(c)}")
        for r in self.retracted:
            by = ", ".join(_retraction(x) for x in r.by) or "?"
            out.append(f"x retracted {_claim(r.claim)} by {by}")
        for c in self.unretracted:
            out.append(f"~ unretracted {_claim(c)}")
        for d in self.decisions:
            out.append(_decision_line(d))
        for d in self.decisions_dropped:
            out.append(f"- decision {d.op_id.hex()[:12]}")
        for k in self.conflicts_opened:
            out.append(f"! conflict opened {_conflict(k)}")
        for k in self.conflicts_closed:
            out.append(f"= conflict closed {_conflict(k)}")
        for k in self.conflicts_changed:
            out.append(f"! conflict changed {_conflict(k)}")
        return out

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (ids in hex, values as JSON values)."""
        return {
            "added": [_claim_json(c) for c in self.added],
            "removed": [_claim_json(c) for c in self.removed],
            "retracted": [
                {**_claim_json(r.claim), "by": [_retraction_json(x) for x in r.by]}
                for r in self.retracted
            ],
            "unretracted": [_claim_json(c) for c in self.unretracted],
            "decisions": [_decision_json(d) for d in self.decisions],
            "decisions_dropped": [_decision_json(d) for d in self.decisions_dropped],
            "conflicts_opened": [_conflict_json(k) for k in self.conflicts_opened],
            "conflicts_closed": [_conflict_json(k) for k in self.conflicts_closed],
            "conflicts_changed": [_conflict_json(k) for k in self.conflicts_changed],
        }


def state_diff(before: State, after: State) -> StateDiff:
    """What changed from ``before`` to ``after`` (pure; see the module docstring)."""
    b_claims, a_claims = before.claims, after.claims
    b_ret, a_ret = before.retracted, after.retracted
    b_dec = {d.op_id: d for d in before.decisions}
    a_dec = {d.op_id: d for d in after.decisions}
    b_con = {k.locus: k for k in before.conflicts}
    a_con = {k.locus: k for k in after.conflicts}
    return StateDiff(
        added=tuple(a_claims[c] for c in sorted(a_claims.keys() - b_claims.keys())),
        removed=tuple(b_claims[c] for c in sorted(b_claims.keys() - a_claims.keys())),
        retracted=tuple(
            RetractedClaim(
                a_claims[c],
                tuple(r for r in a_ret[c] if r.op_id not in before.retractions),
            )
            for c in sorted(a_ret.keys() - b_ret.keys())
        ),
        unretracted=tuple(
            b_claims[c] if c in b_claims else a_claims[c]
            for c in sorted(b_ret.keys() - a_ret.keys())
        ),
        decisions=tuple(a_dec[d] for d in sorted(a_dec.keys() - b_dec.keys())),
        decisions_dropped=tuple(b_dec[d] for d in sorted(b_dec.keys() - a_dec.keys())),
        conflicts_opened=tuple(a_con[k] for k in sorted(a_con.keys() - b_con.keys())),
        conflicts_closed=tuple(b_con[k] for k in sorted(b_con.keys() - a_con.keys())),
        conflicts_changed=tuple(
            a_con[k]
            for k in sorted(a_con.keys() & b_con.keys())
            if a_con[k].conflict_id != b_con[k].conflict_id
        ),
    )


def _claim(c: ClaimAdded) -> str:
    scope = "" if c.scope == "global" else f" [{c.scope}]"
    value = json.dumps(json_value(c.value), ensure_ascii=False)
    key = format_key((c.namespace, c.subject, c.predicate))
    return f"{c.claim_id.hex()[:12]} {key}{scope} = {value}"


def _retraction(r: ClaimRetracted) -> str:
    reason = f" ({r.reason})" if r.reason else ""
    return f"{r.op_id.hex()[:12]}{reason}"


def _conflict(k: ConflictSet) -> str:
    scope = "" if k.scope == "global" else f" [{k.scope}]"
    return f"{format_key(k.key)}{scope}: {len(k.candidates)} candidates"


def _author_hex(author: str | bytes) -> str:
    return author.hex() if isinstance(author, bytes) else author


def _claim_json(c: ClaimAdded) -> dict[str, Any]:
    return {
        "claim_id": c.claim_id.hex(),
        "key": format_key((c.namespace, c.subject, c.predicate)),
        "scope": c.scope,
        "value": json_value(c.value),
        "author": _author_hex(c.author),
    }


def _retraction_json(r: ClaimRetracted) -> dict[str, Any]:
    return {
        "retraction_id": r.op_id.hex(),
        "reason": r.reason,
        "author": _author_hex(r.author),
        "superseded_by": r.superseded_by.hex() if r.superseded_by is not None else None,
    }


def _decision_line(d: DecisionAdded) -> str:
    """``+ decision ID selects CLAIM`` (``merges into CLAIM``, ``preserves``, ``defers``)."""
    head = f"+ decision {d.op_id.hex()[:12]}"
    chosen = d.selected_claim_id.hex()[:12]
    outcome = d.outcome.value
    if outcome == "select":
        return f"{head} selects {chosen}"
    if outcome == "merge":
        return f"{head} merges into {chosen}"
    return f"{head} {outcome}s"


def _decision_json(d: DecisionAdded) -> dict[str, Any]:
    return {
        "decision_id": d.op_id.hex(),
        "locus": d.locus.hex(),
        "scope": d.scope,
        "selected_claim_id": d.selected_claim_id.hex(),
        "reason": d.reason,
        "outcome": d.outcome.value,
    }


def _conflict_json(k: ConflictSet) -> dict[str, Any]:
    return {
        "locus": k.locus.hex(),
        "conflict_id": k.conflict_id.hex(),
        "key": format_key(k.key),
        "scope": k.scope,
        "candidates": [c.hex() for c in k.candidates],
    }
