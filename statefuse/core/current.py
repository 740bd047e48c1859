"""One key's current value, or its conflict: what `Replica.get` returns. Pure.

A key (and scope) with active claims is one of two things, each its own type so that code
reading a value cannot take one side of a disagreement by accident:

- `KeyValue`: the active claims agree (one value group), or a decision that applies chose one
  of their values, or the predicate holds several values at once (a set-valued contract: then
  ``value`` is the list of them and ``many`` is True), or a ``preserve`` decision kept every
  value (``value`` lists them, ``many`` is True, ``decision`` says which);
- `KeyConflict`: the active claims disagree and nothing decided it, or a ``defer`` decision
  left it open (SEMANTICS §5, §6): the candidates, each with its author, are there to show or
  to decide.

No active claim: None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from statefuse.core.keytext import Key
from statefuse.core.op import ClaimAdded, DecisionAdded
from statefuse.core.state import ConflictSet, State, key_of
from statefuse.registry.value import Value


@dataclass(frozen=True, slots=True)
class KeyValue:
    """The current value of a key in a scope, and the active claims that hold it."""

    key: Key
    scope: str
    #: The value (for a set-valued predicate, the list of its values in claim id order).
    value: Value
    #: The active claims holding it, by claim id (all of them for a set-valued predicate).
    claims: tuple[ClaimAdded, ...]
    #: The decision that chose it out of a conflict, when one did.
    decision: DecisionAdded | None = None
    #: True when the predicate holds several values at once and ``value`` lists them.
    many: bool = False


@dataclass(frozen=True, slots=True)
class KeyConflict:
    """A key whose active claims disagree, undecided: no current value, the candidates."""

    key: Key
    scope: str
    conflict: ConflictSet
    #: The candidate claims, by claim id (their ``value`` and ``author`` say who says what).
    candidates: tuple[ClaimAdded, ...]


def current_of(
    state: State, key: str | Sequence[str], scope: str = "global"
) -> KeyValue | KeyConflict | None:
    """``key``'s current value in ``scope`` in ``state`` (see the module docstring)."""
    parts = key_of(key)
    claims = state.active_at(*parts, scope)
    if not claims:
        return None
    conflict = state.conflict_of(*parts, scope)
    if conflict is not None:
        decision = state.decision_for(conflict)
        if decision is None or not decision.outcome.settles:  # undecided, or deferred
            return KeyConflict(parts, scope, conflict, tuple(claims))
        if not decision.outcome.selects:  # preserved: every value is an accepted alternative
            return KeyValue(parts, scope, _values(state, claims), tuple(claims), decision, True)
        chosen = tuple(c for c in claims if state.decision_selects(decision, c.claim_id))
        return KeyValue(parts, scope, chosen[0].value, chosen, decision)
    groups: dict[bytes, ClaimAdded] = {}
    for c in claims:
        groups.setdefault(state.group_id(c.claim_id), c)
    if len(groups) == 1:
        return KeyValue(parts, scope, claims[0].value, tuple(claims))
    return KeyValue(parts, scope, _values(state, claims), tuple(claims), many=True)


def _values(state: State, claims: Sequence[ClaimAdded]) -> list[Value]:
    """One value per value group, in the claim id order of each group's first claim."""
    groups: dict[bytes, ClaimAdded] = {}
    for c in claims:
        groups.setdefault(state.group_id(c.claim_id), c)
    return [c.value for c in sorted(groups.values(), key=lambda c: c.claim_id)]
