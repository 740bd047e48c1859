"""Bounded resolvers: choose one shown candidate of a conflict, or abstain (SEMANTICS §7.4).

Invariant: a resolver can only select a candidate it was shown, or abstain; it can never change
memory. It receives an immutable `ResolverInput` (a `ShownConflict` and the frozen
`ClaimAdded` ops the lens may see) and returns a value, `Select(claim_id, reason)` or
`Abstain(reason)`; it has no handle on the op-set, the writer or the state, so the worst it can
do is choose badly among what it was shown. Every caller goes through `run_resolver`, which turns
anything else (an exception, a wrong type, an id that was not shown, such as a hidden or
retracted claim) into `Abstain` with the error recorded. A bad resolver therefore leaves a
conflict surfaced with all its candidates, never resolved to something it was not offered:
failing closed keeps a planner from acting on a choice nobody could check.

Second invariant: nothing reachable from a `ResolverInput` names a candidate the lens may not
see (SEMANTICS §7.1). A `ConflictSet` lists every candidate id and its groups' normal forms
(which spell the values), so the input keeps none of it: its `ShownConflict` holds the
conflict's place and snapshot (hashes, which reveal no id) and only a count of the candidates
not shown, never which they are or how they group. Resolvers are often outside code (an LLM
judge, a plugin), and what they are handed may be logged or sent anywhere.

The built-ins (`AbstainAll`, `LatestWins`, `AuthorityRank`, `Conservative`, `Chain`) are pure:
their answer depends only on the set of shown candidates and how they group, never on the order
they are given in or on the hash seed. `statefuse.reading.judge.CallableResolver` (its own module:
it starts threads, which the pure core must not) hands a conflict to an outside judge.

Errors: the constructors raise `ResolverConfigError` (an `InputError` and `ValueError`) naming
the bad argument; `ResolverInput` raises `ResolverInputError` likewise. Resolving never raises.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple, Protocol

from statefuse.core.op import UNSET_CONFIDENCE_RANK, ClaimAdded, confidence_rank
from statefuse.core.state import ConflictSet
from statefuse.registry.error import InputError
from statefuse.registry.registry import check_authority_order

#: Longest error text kept from a failing resolver (a hostile one may raise a huge message).
MAX_ERROR_CHARS = 500


class ResolverConfigError(InputError, ValueError):
    """A resolver built with a bad argument (``field`` names it, ``rule`` says which rule)."""


class ResolverInputError(InputError, ValueError):
    """A `ResolverInput` whose candidates do not belong to its conflict."""


@dataclass(frozen=True, slots=True)
class Select:
    """Choose the shown candidate ``claim_id``; ``reason`` says why (for the View's explanation)."""

    claim_id: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Abstain:
    """Choose nothing: the conflict stays unresolved and is surfaced with all its candidates.

    ``error`` is set when the abstention is a failure (the resolver raised, timed out or answered
    something malformed), and says what went wrong.
    """

    reason: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShownConflict:
    """A conflict as a resolver may see it: where it is and which snapshot, not who is in it.

    ``locus`` (of the key and scope) and ``conflict_id`` (of the whole candidate set, SEMANTICS
    §5) are hashes: a decision names them, so `Writer.decide_on` works from what a viewer saw,
    and neither reveals a claim id. ``not_shown`` counts the conflict's candidates the resolver
    is not shown (hidden from the lens, or expired), so a resolver can abstain rather than
    choose among part of a conflict; which candidates they are and how they group is never
    given.
    """

    locus: bytes
    conflict_id: bytes
    key: tuple[str, str, str]
    scope: str
    not_shown: int = 0

    @classmethod
    def of(cls, conflict: ConflictSet, shown: int) -> ShownConflict:
        """``conflict`` with only its place and snapshot kept, ``shown`` of its candidates
        shown."""
        return cls(
            conflict.locus,
            conflict.conflict_id,
            conflict.key,
            conflict.scope,
            len(conflict.candidates) - shown,
        )


@dataclass(frozen=True, slots=True, init=False)
class ResolverInput:
    """What a resolver is shown: one conflict, its visible candidates, and the lens.

    ``ResolverInput(conflict, candidates, lens=None)`` takes the whole `ConflictSet` and the
    claims of it the lens may see (the projection drops hidden, out-of-scope and expired ones),
    in any order, and keeps only what those reveal (see the module docstring): ``conflict`` is
    its `ShownConflict`; ``candidates`` are sorted by claim_id; ``groups`` are the conflict's
    candidate groups restricted to the shown candidates, as tuples of claims sorted by claim_id,
    the groups sorted by normal form (groups with no shown claim are dropped, so a hidden
    claim's agreement never counts). ``lens`` is opaque here; resolvers that need it know its
    type.

    Raises ResolverInputError if ``conflict`` is not a ConflictSet, ``candidates`` is not a
    sequence, or a candidate is not a ClaimAdded, appears twice, is not a candidate of
    ``conflict`` or belongs to none of its groups.
    """

    conflict: ShownConflict
    candidates: tuple[ClaimAdded, ...]
    lens: object | None
    groups: tuple[tuple[ClaimAdded, ...], ...] = field(repr=False, compare=False)

    def __init__(
        self,
        conflict: ConflictSet,
        candidates: Sequence[ClaimAdded],
        lens: object | None = None,
    ) -> None:
        if not isinstance(conflict, ConflictSet):
            raise ResolverInputError(
                "conflict", "conflict-type", f"expected ConflictSet, got {type(conflict)}"
            )
        if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
            raise ResolverInputError(
                "candidates", "sequence", f"expected a tuple of claims, got {type(candidates)}"
            )
        shown: dict[bytes, ClaimAdded] = {}
        for i, c in enumerate(candidates):
            if not isinstance(c, ClaimAdded):
                raise ResolverInputError(
                    f"candidates[{i}]", "claim-type", f"expected ClaimAdded, got {type(c)}"
                )
            if c.claim_id in shown:
                raise ResolverInputError(
                    f"candidates[{i}]", "unique", f"claim {c.claim_id.hex()} is listed twice"
                )
            shown[c.claim_id] = c
        group_of: dict[bytes, bytes] = {}
        for g in conflict.groups:
            for cid in g.claim_ids:
                group_of[cid] = g.normal_key
        members: dict[bytes, list[ClaimAdded]] = {}
        in_conflict = frozenset(conflict.candidates)
        for cid in sorted(shown):
            if cid not in in_conflict or cid not in group_of:
                raise ResolverInputError(
                    "candidates",
                    "candidate-of-conflict",
                    f"claim {cid.hex()} is not a grouped candidate of the conflict",
                )
            members.setdefault(group_of[cid], []).append(shown[cid])
        self._fill(
            ShownConflict.of(conflict, len(shown)),
            tuple(shown[cid] for cid in sorted(shown)),
            tuple(tuple(members[k]) for k in sorted(members)),
            lens,
        )

    def _fill(
        self,
        conflict: ShownConflict,
        candidates: tuple[ClaimAdded, ...],
        groups: tuple[tuple[ClaimAdded, ...], ...],
        lens: object | None,
    ) -> None:
        object.__setattr__(self, "conflict", conflict)
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "lens", lens)
        object.__setattr__(self, "groups", groups)

    @classmethod
    def _checked_by_caller(
        cls,
        conflict: ShownConflict,
        candidates: tuple[ClaimAdded, ...],
        groups: tuple[tuple[ClaimAdded, ...], ...],
        lens: object | None,
    ) -> ResolverInput:
        """The input the constructor would build, from parts the caller already holds in that
        form: ``conflict`` the `ShownConflict` of the conflict for these candidates,
        ``candidates`` grouped candidates of it sorted by claim_id, ``groups`` exactly what the
        constructor derives. The projection builds one per conflict and gets them from the
        conflict's own sorted groups; its tests check that both ways agree."""
        inp = object.__new__(cls)
        inp._fill(conflict, candidates, groups, lens)
        return inp


class Resolver(Protocol):
    """Chooses one shown candidate of a conflict, or abstains. Call it through `run_resolver`."""

    def resolve(self, inp: ResolverInput) -> Select | Abstain: ...


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = f"{type(exc).__name__}: <unprintable>"
    return text[:MAX_ERROR_CHARS]


def _failed(resolver: object, error: str) -> Abstain:
    return Abstain(
        reason=f"{type(resolver).__name__} failed; conflict surfaced",
        error=error[:MAX_ERROR_CHARS],
    )


def run_resolver(resolver: Resolver, inp: ResolverInput) -> Select | Abstain:
    """Ask ``resolver`` about ``inp``, failing closed; never raises an `Exception`.

    Returns a fresh `Select` of a shown candidate, or an `Abstain`. Becomes ``Abstain(error=...)``:
    an exception from the resolver, an answer that is not exactly a Select or Abstain (subclasses
    included, so a hostile object cannot smuggle behaviour downstream), a claim_id that is not
    bytes or not among ``inp.candidates``, and a reason or error of the wrong type. Does not bound
    time: wrap a resolver that may hang in `CallableResolver`. ``KeyboardInterrupt`` and
    ``SystemExit`` propagate, so a user can still stop the process.
    """
    try:
        answer: object = resolver.resolve(inp)
    except Exception as exc:
        return _failed(resolver, f"raised {_describe(exc)}")
    if isinstance(answer, (Select, Abstain)) and type(answer) not in (Select, Abstain):
        return _failed(
            resolver, f"answered {type(answer).__name__}, a subclass of Select or Abstain"
        )
    if isinstance(answer, Select):
        cid, reason = answer.claim_id, answer.reason
        if type(cid) is not bytes:
            return _failed(resolver, f"selected a claim_id of type {type(cid).__name__}")
        if type(reason) is not str:
            return _failed(resolver, f"gave a reason of type {type(reason).__name__}")
        for c in inp.candidates:
            if c.op_id == cid:
                return Select(cid, reason)
        # The id is not echoed: the error is shown to the viewer, and an id the resolver was
        # not shown may be a hidden claim's, learnt elsewhere.
        return _failed(resolver, "selected a claim_id that is not a shown candidate")
    if isinstance(answer, Abstain):
        reason, error = answer.reason, answer.error
        if type(reason) is not str:
            return _failed(resolver, f"gave a reason of type {type(reason).__name__}")
        if error is not None and type(error) is not str:
            return _failed(resolver, f"gave an error of type {type(error).__name__}")
        return Abstain(reason, error)
    return _failed(resolver, f"answered {type(answer).__name__}, expected Select or Abstain")


# --- helpers shared by the built-ins --------------------------------------------------------------


def _check_order(name: str, order: object, *, allow_empty: bool) -> tuple[str, ...]:
    return check_authority_order(
        order, field=name, allow_empty=allow_empty, error=ResolverConfigError
    )


def _authority_scores(order: tuple[str, ...]) -> dict[str, int]:
    """Label -> score, higher is better; unknown labels score 0, below every listed one."""
    return {label: len(order) - i for i, label in enumerate(order)}


def _pick(claims: Sequence[ClaimAdded]) -> ClaimAdded:
    """The deterministic representative: highest (confidence, lamport, claim_id), an unset
    confidence below every stated one (`confidence_rank`)."""
    return max(claims, key=lambda c: (confidence_rank(c.confidence), c.lamport, c.claim_id))


def _no_candidates(name: str) -> Abstain:
    return Abstain(f"{name}: no candidates shown")


# --- built-ins ------------------------------------------------------------------------------------


class AbstainAll:
    """Always abstains: every conflict is surfaced with all its candidates."""

    __slots__ = ()

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        return Abstain("surface: every conflict is shown to the reader")

    def __repr__(self) -> str:
        return "AbstainAll()"

    # Built-in resolvers are pure, so two with the same settings are interchangeable: equal
    # and hashed alike, which lets a View projected with one carry over to a call with another.
    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class LatestWins:
    """Selects the candidate with the highest ``(lamport, claim_id)``: the "collapsed" policy.

    Last-writer-wins by logical clock, ties broken by claim_id; it discards the disagreement, so
    use it for comparison and for predicates whose newest value is by definition the true one.
    """

    __slots__ = ()

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        if not inp.candidates:
            return _no_candidates("latest")
        best = max(inp.candidates, key=lambda c: (c.lamport, c.claim_id))
        return Select(best.claim_id, f"latest: highest lamport ({best.lamport})")

    def __repr__(self) -> str:
        return "LatestWins()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class AuthorityRank:
    """Selects the candidate whose authority label ranks best in ``order`` (highest first).

    Labels not in ``order`` (including ``""``) rank below every listed one, and tie with each
    other. If the best-ranked claims belong to more than one candidate group, the conflict is a
    tie between equally authoritative sources and it abstains. Otherwise it selects the
    best-ranked claim of that group with the highest (confidence, lamport, claim_id).

    Raises ResolverConfigError if ``order`` is not a non-empty sequence of distinct non-empty strs.
    """

    __slots__ = ("_scores", "order")

    def __init__(self, order: Sequence[str]) -> None:
        self.order = _check_order("order", order, allow_empty=False)
        self._scores = _authority_scores(self.order)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.order == self.order

    def __hash__(self) -> int:
        return hash((type(self), self.order))

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        if not inp.candidates:
            return _no_candidates("authority")
        scores = self._scores
        top = max(scores.get(c.authority, 0) for c in inp.candidates)
        label = self.order[len(self.order) - top] if top else "unranked"
        top_groups = [
            [c for c in g if scores.get(c.authority, 0) == top]
            for g in inp.groups
            if any(scores.get(c.authority, 0) == top for c in g)
        ]
        if len(top_groups) > 1:
            return Abstain(
                f"authority: {len(top_groups)} disagreeing groups tie at the top rank ({label})"
            )
        best = _pick(top_groups[0])
        return Select(best.claim_id, f"authority: highest-ranked source ({label})")

    def __repr__(self) -> str:
        return f"AuthorityRank({list(self.order)!r})"


def _dec(x: float) -> Decimal:
    # The shortest decimal that round-trips, i.e. what was written: 0.7 - 0.5 meets a 0.2 margin.
    return Decimal(repr(x))


#: A group's confidence when none of its claims states one. It is 1 below 0.0 and a margin is at
#: most 1, so a stated confidence leads an unset one by any margin and never trails it.
_UNSET = _dec(UNSET_CONFIDENCE_RANK)


def _shown(confidence: Decimal) -> str:
    return "unset" if confidence == _UNSET else str(confidence)


class _GroupScore(NamedTuple):
    """One group's standing; the first three fields are its rank, compared in order."""

    corroboration: int
    confidence: Decimal
    authority: int
    claims: tuple[ClaimAdded, ...]


def _rank(g: _GroupScore) -> tuple[int, Decimal, int]:
    return (g.corroboration, g.confidence, g.authority)


class Conservative:
    """Selects only when one candidate group clearly dominates every other; else abstains.

    The rule, over the groups of shown candidates (claims whose values share a normal form):

    - Each group G is scored on three dimensions: ``corroboration(G)`` = the number of distinct
      authors of its claims; ``confidence(G)`` = the highest confidence among its claims, where
      a claim whose author stated none ranks below every stated confidence (0.0 included): a
      stated confidence leads an unset one by any margin, and two unset ones tie;
      ``authority(G)`` = the best rank of its claims' authority labels in ``authority_order``
      (highest first; unknown labels rank below every listed one).
    - G *dominates* H iff ``corroboration(G) - corroboration(H) >= corroboration_margin``,
      ``confidence(G) - confidence(H) >= confidence_margin`` and, only when ``authority_order``
      is non-empty, G's authority rank is at least ``authority_margin`` places above H's; and G
      is strictly better than H on at least one dimension. (Without an order there is no
      authority information, so that dimension is not compared.) A margin of 0 means "not
      worse"; the strictness clause keeps a symmetric conflict from being won even then.
    - If exactly one group dominates every other group, select its claim with the highest
      (confidence, lamport, claim_id); otherwise abstain, naming the closest rival. At most one
      group can dominate all the others, and a single shown group wins unopposed.

    Confidences and ``confidence_margin`` are compared as the shortest decimals that round-trip
    (``Decimal(repr(x))``), so the result is exact and ``0.7`` leads ``0.5`` by ``0.2``.

    Raises ResolverConfigError for a margin that is not a non-negative int
    (``corroboration_margin``, ``authority_margin``) or a number in [0, 1]
    (``confidence_margin``), and for a bad ``authority_order`` (distinct non-empty strs).
    """

    __slots__ = (
        "_conf_margin",
        "_scores",
        "authority_margin",
        "authority_order",
        "confidence_margin",
        "corroboration_margin",
    )

    def __init__(
        self,
        *,
        corroboration_margin: int = 1,
        confidence_margin: float = 0.2,
        authority_order: Sequence[str] = (),
        authority_margin: int = 1,
    ) -> None:
        for name, v in (
            ("corroboration_margin", corroboration_margin),
            ("authority_margin", authority_margin),
        ):
            if type(v) is not int or v < 0:
                raise ResolverConfigError(
                    name, "non-negative-int", f"expected an int >= 0, got {v!r}"
                )
        if (
            type(confidence_margin) not in (int, float)
            or not math.isfinite(confidence_margin)
            or not 0 <= confidence_margin <= 1
        ):
            raise ResolverConfigError(
                "confidence_margin", "unit-interval", f"expected 0..1, got {confidence_margin!r}"
            )
        self.corroboration_margin = corroboration_margin
        self.confidence_margin = confidence_margin
        self.authority_order = _check_order("authority_order", authority_order, allow_empty=True)
        self.authority_margin = authority_margin
        self._conf_margin = _dec(confidence_margin)
        self._scores = _authority_scores(self.authority_order)

    def _settings(self) -> tuple[object, ...]:
        return (
            self.corroboration_margin,
            self._conf_margin,
            self.authority_order,
            self.authority_margin,
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._settings() == self._settings()

    def __hash__(self) -> int:
        return hash((type(self), self._settings()))

    def _score(self, group: tuple[ClaimAdded, ...]) -> _GroupScore:
        scores = self._scores
        if len(group) == 1:  # most groups: no set, no generators
            (c,) = group
            return _GroupScore(
                1, _dec(confidence_rank(c.confidence)), scores.get(c.authority, 0), group
            )
        return _GroupScore(
            len({c.author for c in group}),
            _dec(max(confidence_rank(c.confidence) for c in group)),
            max(scores.get(c.authority, 0) for c in group),
            group,
        )

    def _shortfall(self, g: _GroupScore, h: _GroupScore) -> str | None:
        """Why ``g`` does not dominate ``h`` (None if it does)."""
        if g.corroboration - h.corroboration < self.corroboration_margin:
            return (
                f"corroboration {g.corroboration} vs {h.corroboration}"
                f" (margin {self.corroboration_margin})"
            )
        if g.confidence - h.confidence < self._conf_margin:
            return (
                f"confidence {_shown(g.confidence)} vs {_shown(h.confidence)}"
                f" (margin {self._conf_margin})"
            )
        if self.authority_order and g.authority - h.authority < self.authority_margin:
            return (
                f"authority rank lead {g.authority - h.authority} (margin {self.authority_margin})"
            )
        if _rank(g) == _rank(h):
            return "the groups are symmetric"
        return None

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        if not inp.candidates:
            return _no_candidates("conservative")
        scored = [self._score(g) for g in inp.groups]
        # A group that dominates all others is the strict maximum of (corr, conf, auth), and
        # inp.groups has a fixed order, so the first maximum is a deterministic leader.
        leader = max(scored, key=_rank)
        for rival in scored:
            if rival is leader:
                continue
            why = self._shortfall(leader, rival)
            if why is not None:
                return Abstain(f"conservative: no group clearly dominates ({why})")
        best = _pick(leader.claims)
        return Select(
            best.claim_id,
            f"conservative: the group of {leader.corroboration} author(s)"
            f" (confidence {_shown(leader.confidence)}) dominates {len(scored) - 1} other group(s)",
        )

    def __repr__(self) -> str:
        return (
            f"Conservative(corroboration_margin={self.corroboration_margin!r},"
            f" confidence_margin={self.confidence_margin!r},"
            f" authority_order={list(self.authority_order)!r},"
            f" authority_margin={self.authority_margin!r})"
        )


class Chain:
    """Asks each resolver in turn (through `run_resolver`); the first that selects wins.

    If all abstain, abstains with their reasons joined by ``"; "`` (and their errors, if any).
    Raises ResolverConfigError if no resolver is given or one has no callable ``resolve``.
    """

    __slots__ = ("resolvers",)

    def __init__(self, *resolvers: Resolver) -> None:
        if not resolvers:
            raise ResolverConfigError("resolvers", "non-empty", "give at least one resolver")
        for i, r in enumerate(resolvers):
            if not callable(getattr(r, "resolve", None)):
                raise ResolverConfigError(
                    f"resolvers[{i}]", "resolver", f"{r!r} has no resolve(inp) method"
                )
        self.resolvers: tuple[Resolver, ...] = resolvers

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        reasons: list[str] = []
        errors: list[str] = []
        for r in self.resolvers:
            answer = run_resolver(r, inp)
            if isinstance(answer, Select):
                return answer
            reasons.append(answer.reason)
            if answer.error is not None:
                errors.append(answer.error)
        return Abstain("; ".join(reasons), "; ".join(errors) if errors else None)

    def __repr__(self) -> str:
        return f"Chain({', '.join(map(repr, self.resolvers))})"
