"""Projection: what one lens sees of a State, with every conflict resolved or surfaced (§7).

Invariant: `project` is pure and replayable — it reads the State and never changes it, and the
same state, lens and deterministic resolver give an identical View (everything is ordered by
ids or keys, never by hash order). Rules apply in SEMANTICS order: visibility, scope and
shadowing, expiry, then resolution. A hidden claim is dropped at the first rule, so it can never
reach a resolver, a conflict listing, a repair note or an explanation. The State's `ConflictSet`
names every candidate, hidden ones too, so it stays here (decisions are looked up by it) and
never goes out: a resolver gets a `ResolverInput` whose `ShownConflict` keeps only the
conflict's place, its snapshot id and a count of the candidates not shown, and a
`SurfacedConflict` lists only visible candidates and groups.

Resolution of a visible conflict: an applicable decision (`State.why_stale` is None: its chosen
value is still held and no value it did not choose among appeared; for a first-release decision,
its conflict snapshot is current), in a scope the lens sees, whose choice is visible (the decided
claim, or, when that one is retracted or not shown, the lowest claim_id of its value among the
shown candidates, with the explanation saying so), the highest (lamport, op_id) of them; else
the predicate's registry policy
(``latest``: `LatestWins`; ``authority``: `AuthorityRank` over the registry's
``authority_order``), else the given resolver (``surface``, the default policy, defers to it;
the default resolver abstains). A policy that abstains also defers to the resolver. An
abstained conflict is unresolved and surfaced with all its visible candidates.

Speed: a projection visits every active key, so what no lens changes is worked out once per
State (`_plan`, kept with `State.derived`). Keys that need no resolution — a sole candidate,
agreement, a multi-valued predicate — and whose claims share a visibility and a scope and do not
expire (most keys) are put in buckets by that visibility and scope. A lens sees a whole bucket or
none of it, so it judges buckets, not claims, and its View reads the seen buckets through
`statefuse.reading.view.SelectedMap`, which makes a sole candidate's `Selection` only when it is
read.
Conflicts of that shape get their groups and text prepared once; the few other keys (claims
in several scopes or visibilities, or with an expiry, a validity interval or a context) are
worked out per call. Whether the lens sees a scope is looked up once per scope and call. The
tests compare every View with a straightforward reference projection.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefuse.core.index import LocusKey
from statefuse.core.op import ClaimAdded, DecisionAdded, Outcome, confidence_rank
from statefuse.core.state import ConflictSet, State
from statefuse.core.validity import conflicting, contexts_agree, holds_at, situation, span
from statefuse.reading.lens import Lens, scope_rank, typed_context
from statefuse.reading.resolver import (
    Abstain,
    AbstainAll,
    AuthorityRank,
    LatestWins,
    Resolver,
    ResolverInput,
    Select,
    ShownConflict,
    _check_order,
    run_resolver,
)
from statefuse.reading.scrub import RetractedValues, retracted_index
from statefuse.reading.view import (
    Contest,
    Deferral,
    ExplanationMap,
    How,
    Key,
    Layered,
    Preserved,
    SelectedMap,
    Selection,
    StaleNote,
    SurfacedConflict,
    SurfacedFinding,
    Unordered,
    View,
)
from statefuse.registry.contract import Policy, PredicateContract
from statefuse.registry.error import InputError
from statefuse.registry.registry import DEFAULT_AUTHORITY_ORDER

__all__ = ["DEFAULT_AUTHORITY_ORDER", "PUBLIC_REASONS", "ProjectionError", "project"]

#: Exclusion reasons whose claim ids a View may list (``hidden`` is only ever counted).
PUBLIC_REASONS = ("out-of-scope", "expired", "shadowed")
#: Exclusion reasons of valid time and context (SEMANTICS §9, §5): a claim that does not hold
#: at the lens's instant, or holds in a context the lens's context disagrees with. A View
#: names them (in ``excluded`` and ``excluded_ids``) only when it left a claim out for them.
SITUATED_REASONS = ("not-valid-at", "other-context")


class ProjectionError(InputError, TypeError):
    """`project` called with something that is not a State / Lens / resolver."""


def _representative(claims: Sequence[ClaimAdded]) -> ClaimAdded:
    """The claim that speaks for agreeing claims: highest (confidence, lamport, op_id), an
    unset confidence below every stated one (`confidence_rank`)."""
    return max(claims, key=lambda c: (confidence_rank(c.confidence), c.lamport, c.op_id))


def _fmt(c: ClaimAdded) -> str:
    """A value as explanations show it, with its interval and context when it has them."""
    return repr(c.value) + situation(c) if c.situated else repr(c.value)


def _note(shadowed: int) -> str:
    return f" (shadows {shadowed} claim(s) of wider scope)" if shadowed else ""


def _selection(
    key: Key, group: tuple[ClaimAdded, ...], functional: bool, note: str
) -> tuple[Selection, str]:
    """The selection and explanation of a key whose visible claims in its narrowest scope all
    agree (one group), or hold together (multi-valued)."""
    scope = group[0].scope
    rep = _representative(group)
    name = "/".join(key)
    if not functional:
        values = ", ".join(_fmt(c) for c in group)
        line = f"{name} [{scope}]: {values} (multi-valued){note}"
        return Selection(key, scope, rep, group, How.MULTI, "all values hold"), line
    how = How.SOLE if len(group) == 1 else How.AGREEMENT
    why = "only candidate" if how is How.SOLE else f"{len(group)} claims agree"
    line = f"{name} [{scope}]: {_fmt(rep)} ({why}){note}"
    return Selection(key, scope, rep, group, how, why), line


def _visible_groups(
    conflict: ConflictSet | None, here: Sequence[ClaimAdded]
) -> tuple[tuple[ClaimAdded, ...], ...]:
    """The candidate groups restricted to visible claims (one group when there is no conflict):
    sorted by normal form, each sorted by claim_id, as `ResolverInput` derives them."""
    if conflict is None:
        return (tuple(here),)
    shown = {c.op_id: c for c in here}
    groups = (tuple(shown[i] for i in g.claim_ids if i in shown) for g in conflict.groups)
    return tuple(g for g in groups if g)


def _side_by_side(
    key: Key, here: Sequence[ClaimAdded], gkey: Callable[[bytes], bytes], note: str
) -> tuple[Selection, str] | None:
    """Shown claims of a functional key that hold several values, none conflicting with
    another (each holds in its own interval or context): all of them are selected, as the
    values of a multi-valued key are, with each value's interval and context in the line.
    None when they are all one value (then the key reads as agreement)."""
    if len({gkey(c.op_id) for c in here}) < 2:
        return None
    scope = here[0].scope
    ordered = tuple(sorted(here, key=_timeline_order))
    values = ", ".join(_fmt(c) for c in ordered)
    why = "values hold in different intervals or contexts"
    line = f"{'/'.join(key)} [{scope}]: {values} ({why}){note}"
    return Selection(key, scope, _representative(here), tuple(here), How.MULTI, why), line


def _timeline_order(c: ClaimAdded) -> tuple[int, int, bytes]:
    start, end = span(c)
    return (start, end, c.op_id)


def _decided_claim(state: State, d: DecisionAdded, shown: Sequence[ClaimAdded]) -> bytes | None:
    """The shown claim an applicable decision selects: the decided claim if shown; for a
    decision that records value groups, else the lowest claim_id of the chosen value among
    ``shown`` (deterministic whatever the order of arrival); None when the lens sees no claim
    of the decided value."""
    chosen = d.selected_claim_id
    if any(c.op_id == chosen for c in shown):
        return chosen
    if not d.groups:
        return None
    same = [c.op_id for c in shown if state.group_id(c.op_id) == d.selected_group]
    return min(same) if same else None


# --- what no lens changes: worked out once per State ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Bucket:
    """Keys that need no resolution and whose claims all have this visibility and scope, and do
    not expire: a lens sees all of them or none. ``entries`` holds each key's Selection and
    explanation or, for a key whose one claim is its only candidate, that claim (the View makes
    both from it when read)."""

    visibility: tuple[str, ...]
    scope: str
    entries: Mapping[Key, ClaimAdded | tuple[Selection, str]]  # never changed
    count: int  # claims of these keys
    _ids: list[tuple[bytes, ...]] = field(default_factory=list, compare=False, repr=False)

    @property
    def ids(self) -> tuple[bytes, ...]:
        """Every claim of these keys, sorted: made when first read (only a View's
        ``excluded_ids`` lists them), so carrying a bucket over copies no list of ids."""
        if not self._ids:
            entries = self.entries.values()
            self._ids.append(tuple(sorted(c for e in entries for c in _entry_ids(e))))
        return self._ids[0]


@dataclass(frozen=True, slots=True)
class _Conflict:
    """A conflict whose candidates share one visibility and scope and do not expire: a lens sees
    all of them or none, so the groups and the explanation's list of values are fixed."""

    key: Key
    visibility: tuple[str, ...]
    scope: str
    claims: tuple[ClaimAdded, ...]  # sorted by claim_id
    ids: tuple[bytes, ...]
    policy: Policy
    conflict: ConflictSet
    shown: ShownConflict  # every candidate is shown to a lens that sees the conflict at all
    groups: tuple[tuple[ClaimAdded, ...], ...]
    values: str


_serials = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _Plan:
    buckets: tuple[_Bucket, ...]
    #: Every other key in key order: a `_Conflict`, or the key and its claims sorted by claim_id.
    rest: tuple[_Conflict | tuple[Key, tuple[ClaimAdded, ...]], ...]
    #: The key of each item of ``rest``, in the same order.
    rest_keys: tuple[Key, ...] = ()
    #: Sole-candidate Selections Views of this plan made, shared by every plan carried over
    #: from it (an entry is reused only for the very claim it was made from).
    made: dict[Key, Selection] = field(default_factory=dict, compare=False, repr=False)
    #: Names this plan (a number, so a plan never keeps the one it came from alive).
    serial: int = field(default_factory=lambda: next(_serials), compare=False)
    #: The plan this one was updated from, and the keys placed again since (every other item
    #: of ``rest`` is the very object it was there): how a View carries over (`_Seen`).
    parent: int = field(default=0, compare=False)
    changed: frozenset[Key] = field(default=frozenset(), compare=False)


#: A key's place in a plan: in the bucket of a (visibility, scope) label, with its entry and
#: claim ids, or an item of the rest.
_Placed = tuple[
    tuple[tuple[str, ...], str], "ClaimAdded | tuple[Selection, str]", tuple[bytes, ...]
]


class _Placer:
    """Where one key goes in a plan (the per-key step shared by the full and the incremental
    plan, so both place every key the same way)."""

    __slots__ = ("contracts", "ns_specific", "registry", "state")

    def __init__(self, state: State) -> None:
        self.state = state
        self.registry = state.registry
        self.ns_specific = frozenset(c.predicate for c in self.registry.contracts if c.namespace)
        self.contracts: dict[str, PredicateContract] = {}

    def place(
        self, key: Key, claims: tuple[ClaimAdded, ...]
    ) -> _Placed | _Conflict | tuple[Key, tuple[ClaimAdded, ...]]:
        first = claims[0]
        vis, scope = first.visibility, first.scope
        if first.expires is not None or (
            len(claims) > 1
            and any(
                c.expires is not None or c.visibility != vis or c.scope != scope for c in claims
            )
        ):
            return (key, claims)
        for c in claims:  # shown per lens instant and context (`ClaimAdded.situated`, inline)
            if c.valid_from is not None or c.valid_until is not None or c.context is not None:
                return (key, claims)
        predicate = key[2]
        contract = self.contracts.get(predicate)
        if contract is None:
            contract = self.registry.contract_for(key[0], predicate)
            if predicate not in self.ns_specific:
                self.contracts[predicate] = contract
        label = (vis, scope)
        if len(claims) == 1:
            if contract.functional:
                return (label, first, (first.op_id,))
            return (label, _selection(key, claims, False, ""), (first.op_id,))
        conflict = self.state.conflict_of(*key, scope) if contract.functional else None
        groups = _visible_groups(conflict, claims)
        if conflict is None or len(groups) == 1:
            entry = _selection(key, groups[0], contract.functional, "")
            return (label, entry, tuple(c.op_id for c in claims))
        values = " | ".join(_fmt(g[0]) for g in groups)
        return _Conflict(
            key,
            vis,
            scope,
            claims,
            tuple(c.op_id for c in claims),
            contract.policy,
            conflict,
            ShownConflict.of(conflict, len(claims)),
            groups,
            values,
        )


def _is_placed(p: object) -> bool:
    return type(p) is tuple and len(p) == 3 and type(p[0]) is tuple


def _plan(state: State) -> _Plan:
    """Sort every active key (in key order) into a bucket or the rest (see `_Plan`); from the
    previous State's plan when only a few keys changed since (what carries the projection
    from one State to the next: the cost follows the keys written, not the keys held)."""
    since = state.changes_since()
    if since is not None:
        made, touched = since
        prev_plan = made.get(_plan)
        if isinstance(prev_plan, _Plan) and 8 * len(touched) < len(state._ix.members) + 64:
            return _plan_update(prev_plan, state, touched)
    return _plan_full(state)


def _plan_full(state: State) -> _Plan:
    """The plan of ``state`` from every active key."""
    placer = _Placer(state)
    entries: dict[tuple[tuple[str, ...], str], dict[Key, ClaimAdded | tuple[Selection, str]]] = {}
    counts: dict[tuple[tuple[str, ...], str], int] = {}
    rest: list[_Conflict | tuple[Key, tuple[ClaimAdded, ...]]] = []
    for key, claims in state.active_by_key().items():
        placed = placer.place(key, claims)
        if _is_placed(placed):
            label, entry, claim_ids = placed  # type: ignore[misc]
            bucket = entries.get(label)
            if bucket is None:
                bucket = entries[label] = {}
                counts[label] = 0
            bucket[key] = entry
            counts[label] += len(claim_ids)
        else:
            rest.append(placed)  # type: ignore[arg-type]
    buckets = (
        _Bucket(vis, scope, entries[(vis, scope)], counts[(vis, scope)])
        for vis, scope in sorted(entries)
    )
    return _Plan(tuple(buckets), tuple(rest), tuple(_rest_key(r) for r in rest))


def _rest_key(item: _Conflict | tuple[Key, tuple[ClaimAdded, ...]]) -> Key:
    return item.key if isinstance(item, _Conflict) else item[0]


def _entry_ids(entry: ClaimAdded | tuple[Selection, str]) -> tuple[bytes, ...]:
    if isinstance(entry, ClaimAdded):
        return (entry.op_id,)
    return tuple(c.op_id for c in entry[0].claims)


def _plan_update(prev: _Plan, state: State, touched: frozenset[LocusKey]) -> _Plan:
    """`_plan_full` of ``state``, made from ``prev`` (the plan of the State before) and the
    locus keys whose active claims changed since: only the keys of those loci are placed
    again. The result equals the full plan (a property test holds them equal)."""
    scopes: dict[Key, set[str]] = {}
    for lk in touched:
        scopes.setdefault((lk[0], lk[1], lk[2]), set()).add(lk[3])
    gone_ids: dict[tuple[tuple[str, ...], str], set[bytes]] = {}
    gone_keys: dict[tuple[tuple[str, ...], str], set[Key]] = {}
    by_label = {(b.visibility, b.scope): b for b in prev.buckets}
    rest = list(prev.rest)
    rest_keys = list(prev.rest_keys)
    for key, key_scopes in scopes.items():
        for label, held in by_label.items():
            entry = held.entries.get(key)
            if entry is not None:
                gone_keys.setdefault(label, set()).add(key)
                gone_ids.setdefault(label, set()).update(_entry_ids(entry))
                key_scopes.add(label[1])
                break
        else:
            i = bisect_left(rest_keys, key)
            if i < len(rest_keys) and rest_keys[i] == key:
                item = rest[i]
                key_scopes.update(
                    c.scope for c in (item.claims if isinstance(item, _Conflict) else item[1])
                )
                del rest[i], rest_keys[i]
    placer = _Placer(state)
    claims_of = state._ix.claims
    members_at = state._ix.members_at
    added: dict[
        tuple[tuple[str, ...], str],
        dict[Key, tuple[ClaimAdded | tuple[Selection, str], tuple[bytes, ...]]],
    ] = {}
    for key in sorted(scopes):
        ids = sorted(cid for scope in scopes[key] for cid in members_at((*key, scope)))
        if not ids:
            continue
        placed = placer.place(key, tuple(claims_of[c] for c in ids))
        if _is_placed(placed):
            label, entry, claim_ids = placed  # type: ignore[misc]
            added.setdefault(label, {})[key] = (entry, claim_ids)
        else:
            i = bisect_left(rest_keys, key)
            rest.insert(i, placed)  # type: ignore[arg-type]
            rest_keys.insert(i, key)
    buckets: list[_Bucket] = []
    for label in sorted({*by_label, *added}):
        b = by_label.get(label)
        new = added.get(label, {})
        gone = gone_keys.get(label, set())
        if b is not None and not new and not gone:
            buckets.append(b)
            continue
        # The bucket before under a layer of what changed (no copy of a large bucket), sorted
        # when (and if) a reader walks it in key order.
        entries = Layered.patched(
            b.entries if b is not None else {},
            {key: entry for key, (entry, _) in new.items()},
            [key for key in gone if key not in new],
        )
        if not entries:
            continue
        count = b.count if b is not None else 0
        count += sum(len(cids) for _, cids in new.values()) - len(gone_ids.get(label, ()))
        buckets.append(_Bucket(label[0], label[1], entries, count))
    made = prev.made
    for key in scopes:  # what the touched keys made is remade when read (and never kept stale)
        made.pop(key, None)
    return _Plan(
        tuple(buckets),
        tuple(rest),
        tuple(rest_keys),
        made,
        parent=prev.serial,
        changed=frozenset(scopes),
    )


# --- one projection ------------------------------------------------------------------------------


def project(
    state: State,
    lens: Lens,
    *,
    resolver: Resolver | None = None,
    authority_order: Sequence[str] | None = None,
) -> View:
    """The View of ``state`` through ``lens``.

    ``authority_order`` (highest first) overrides the registry's for predicates whose policy is
    ``authority``; by default ``state.registry.authority_order`` applies. Raises ProjectionError
    for wrong argument types and ResolverConfigError for a bad ``authority_order``; never raises
    because of a resolver (see `run_resolver`).

    The View of the State before, through the same lens, resolver and order, carries over: only
    the keys written since are worked out again (a resolver is asked again only about a
    conflict whose candidates changed, or after a decision), so an agent that writes and reads
    in turn pays for what it wrote. The same State and lens give the very same View.
    """
    if not isinstance(state, State):
        raise ProjectionError("state", "state-type", f"expected State, got {type(state).__name__}")
    if not isinstance(lens, Lens):
        raise ProjectionError("lens", "lens-type", f"expected Lens, got {type(lens).__name__}")
    if authority_order is None:
        order = state.registry.authority_order
    else:
        order = _check_order("authority_order", authority_order, allow_empty=False)
    plan = state.derived(_plan)
    run = _Run(state, lens, resolver if resolver is not None else AbstainAll(), order)
    memo_key = _memo_key(lens, resolver, order)
    if memo_key is None:
        return run.view(plan, run.seen(plan, None))
    views = state.derived(_carried_views)
    seen = views.current.get(memo_key)
    if seen is None or seen.now != lens.now:
        # From this State's View at another time, or from the State before's.
        before = seen if seen is not None else views.previous.pop(memo_key, None)
        usable = (
            before is not None
            and before.plan in (plan.serial, plan.parent)
            and before.decisions == len(state._ix.decisions)
        )
        if not usable:
            before = None
        seen = run.seen(plan, before)
        seen.view = run.view(plan, seen, before)
        views.current[memo_key] = seen
        while len(views.current) > MAX_CARRIED_VIEWS:
            del views.current[next(iter(views.current))]
    assert seen.view is not None
    return seen.view


#: Most lenses (with resolver and order) whose Views a State keeps for the next State.
MAX_CARRIED_VIEWS = 8

#: Stands for "no resolver given" (a fresh `AbstainAll` each call) in the memo of Views.
_DEFAULT_RESOLVER = "abstain-all"


def _memo_key(
    lens: Lens, resolver: Resolver | None, order: tuple[str, ...]
) -> tuple[object, ...] | None:
    """What a View depends on besides the State and the time (``lens.query`` ranks, it does
    not project; ``lens.now`` decides only keys with claims that expire, worked out again when
    it moves); None when the resolver cannot be a dict key (then nothing carries over)."""
    if resolver is None:
        r: object = _DEFAULT_RESOLVER
    else:
        try:
            hash(resolver)
        except TypeError:
            return None
        r = resolver
    ctx = typed_context(lens.context)
    return (lens.roles, lens.task, lens.session, lens.include, r, order, lens.valid_at, ctx)


class _Views:
    """The Views a State made (``current``, by `_memo_key`) and those of the State before that
    it may still carry over (``previous``)."""

    __slots__ = ("current", "previous")

    def __init__(self, previous: dict[tuple[object, ...], _Seen]) -> None:
        self.current: dict[tuple[object, ...], _Seen] = {}
        self.previous = previous


def _carried_views(state: State) -> _Views:
    since = state.changes_since()
    before = since[0].get(_carried_views) if since is not None else None
    return _Views(dict(before.current) if isinstance(before, _Views) else {})


class _Outcome:
    """What one item of a plan's ``rest`` adds to a View: its selection and explanation, or
    its surfaced conflict, and the claims it leaves out. Kept while the item is the same."""

    __slots__ = (
        "contested",
        "expired",
        "explanation",
        "hidden",
        "not_valid_at",
        "other_context",
        "out_of_scope",
        "preserved",
        "selected",
        "shadowed",
        "surfaced",
    )

    def __init__(self) -> None:
        self.preserved: Preserved | None = None
        self.selected: Selection | ClaimAdded | None = None
        self.explanation: str | ClaimAdded | None = None
        self.surfaced: SurfacedConflict | None = None
        self.contested: Contest | None = None
        self.hidden = 0
        self.out_of_scope: list[bytes] = []
        self.expired: list[bytes] = []
        self.shadowed: list[bytes] = []
        self.not_valid_at: list[bytes] = []
        self.other_context: list[bytes] = []


class _Seen:
    """One lens' worked-out ``rest`` of one plan: the outcome per key and what they add up
    to, patched key by key from the plan before (`_Run.seen`)."""

    __slots__ = (
        "changed",
        "contested",
        "decisions",
        "explanations",
        "hidden",
        "now",
        "outcomes",
        "plan",
        "preserved",
        "selected",
        "surfaced",
        "surfaced_keys",
        "tally",
        "timed",
        "view",
    )

    def __init__(self, plan: int, decisions: int, now: int | None) -> None:
        self.plan = plan
        self.decisions = decisions
        self.now = now
        #: Keys whose item holds a claim that expires: their outcome depends on ``now``.
        self.timed: set[Key] = set()
        #: The keys worked out again since the `_Seen` this one was carried from.
        self.changed: frozenset[Key] = frozenset()
        self.outcomes: dict[Key, _Outcome] = {}
        self.selected: dict[Key, Selection | ClaimAdded] = {}
        self.explanations: dict[Key, str | ClaimAdded] = {}
        self.surfaced_keys: list[Key] = []
        self.surfaced: list[SurfacedConflict] = []
        self.contested: dict[Key, Contest] = {}
        self.preserved: dict[Key, Preserved] = {}
        #: Claims left out, counted: hidden, out of scope, expired, shadowed, not valid at the
        #: lens's instant, of another context.
        self.tally = [0, 0, 0, 0, 0, 0]
        self.view: View | None = None

    def carried(self, plan: int, now: int | None) -> _Seen:
        out = _Seen(plan, self.decisions, now)
        out.timed = self.timed.copy()
        out.outcomes = self.outcomes.copy()
        out.selected = Unordered(self.selected)
        out.explanations = Unordered(self.explanations)
        out.surfaced_keys = self.surfaced_keys.copy()
        out.surfaced = self.surfaced.copy()
        out.contested = self.contested.copy()
        out.preserved = self.preserved.copy()
        out.tally = self.tally.copy()
        return out

    def take(self, key: Key, o: _Outcome, timed: bool) -> None:
        self.outcomes[key] = o
        if timed:
            self.timed.add(key)
        if o.selected is not None:
            self.selected[key] = o.selected
        if o.explanation is not None:
            self.explanations[key] = o.explanation
        if o.contested is not None:
            self.contested[key] = o.contested
        if o.preserved is not None:
            self.preserved[key] = o.preserved
        if o.surfaced is not None:
            i = bisect_left(self.surfaced_keys, key)
            self.surfaced_keys.insert(i, key)
            self.surfaced.insert(i, o.surfaced)
        self._count(o, 1)

    def drop(self, key: Key) -> None:
        self.timed.discard(key)
        o = self.outcomes.pop(key, None)
        if o is None:
            return
        self.selected.pop(key, None)
        self.explanations.pop(key, None)
        self.contested.pop(key, None)
        self.preserved.pop(key, None)
        if o.surfaced is not None:
            i = bisect_left(self.surfaced_keys, key)
            del self.surfaced_keys[i], self.surfaced[i]
        self._count(o, -1)

    def _count(self, o: _Outcome, sign: int) -> None:
        t = self.tally
        t[0] += sign * o.hidden
        t[1] += sign * len(o.out_of_scope)
        t[2] += sign * len(o.expired)
        t[3] += sign * len(o.shadowed)
        t[4] += sign * len(o.not_valid_at)
        t[5] += sign * len(o.other_context)


def _parent(before: _Seen | None, seen: _Seen) -> tuple[int, frozenset[Key]]:
    """The serial of the View ``before`` made (0: none), and the keys worked out again since."""
    if before is None or before.view is None or before.view._lineage is None:
        return 0, frozenset()
    return before.view._lineage[0], seen.changed


def _timed(item: _Conflict | tuple[Key, tuple[ClaimAdded, ...]]) -> bool:
    """Whether a rest item's outcome depends on the time (a claim of it expires, or holds in
    an interval: a lens without ``valid_at`` asks about its ``now``)."""
    return not isinstance(item, _Conflict) and any(
        c.expires is not None or c.valid_from is not None or c.valid_until is not None
        for c in item[1]
    )


class _ExcludedIds(Mapping[str, tuple[bytes, ...]]):
    """``View.excluded_ids``, sorted when first read (most readers only count)."""

    __slots__ = ("_ids", "_out_of_scope", "_outcomes")

    def __init__(self, out_of_scope: list[_Bucket], outcomes: Mapping[Key, _Outcome]) -> None:
        self._out_of_scope = out_of_scope
        self._outcomes = outcomes
        self._ids: dict[str, tuple[bytes, ...]] | None = None

    def _made(self) -> dict[str, tuple[bytes, ...]]:
        if self._ids is None:
            scope: list[bytes] = [i for b in self._out_of_scope for i in b.ids]
            expired: list[bytes] = []
            shadowed: list[bytes] = []
            not_valid_at: list[bytes] = []
            other_context: list[bytes] = []
            for o in self._outcomes.values():
                scope += o.out_of_scope
                expired += o.expired
                shadowed += o.shadowed
                not_valid_at += o.not_valid_at
                other_context += o.other_context
            self._ids = {
                "out-of-scope": tuple(sorted(scope)),
                "expired": tuple(sorted(expired)),
                "shadowed": tuple(sorted(shadowed)),
            }
            if not_valid_at:
                self._ids["not-valid-at"] = tuple(sorted(not_valid_at))
            if other_context:
                self._ids["other-context"] = tuple(sorted(other_context))
        return self._ids

    def __getitem__(self, reason: str) -> tuple[bytes, ...]:
        return self._made()[reason]

    def _reasons(self) -> tuple[str, ...]:
        """The reasons listed: always the three of `PUBLIC_REASONS`, then those of
        `SITUATED_REASONS` some claim was left out for (found without sorting any ids)."""
        if self._ids is not None:
            return tuple(self._ids)
        outcomes = self._outcomes.values()
        extra = (("not-valid-at",) if any(o.not_valid_at for o in outcomes) else ()) + (
            ("other-context",) if any(o.other_context for o in outcomes) else ()
        )
        return (*PUBLIC_REASONS, *extra)

    def __iter__(self) -> Iterator[str]:
        return iter(self._reasons())

    def __len__(self) -> int:
        return len(self._reasons())

    def __repr__(self) -> str:
        return repr(self._made())


class _Run:
    """One projection: the lens's memo tables, and the outcome of the item being worked out."""

    def __init__(
        self, state: State, lens: Lens, resolver: Resolver, authority_order: tuple[str, ...]
    ) -> None:
        self.state = state
        self.lens = lens
        self.resolver = resolver
        self.authority = AuthorityRank(authority_order)
        self.scope_seen: dict[str, bool] = {}
        self.out = _Outcome()

    def sees_scope(self, scope: str) -> bool:
        ok = self.scope_seen.get(scope)
        if ok is None:
            ok = self.scope_seen[scope] = self.lens.sees_scope(scope)
        return ok

    def sees(self, visibility: tuple[str, ...], scope: str, n: int, ids: Sequence[bytes]) -> bool:
        """Rules 1-2 for ``n`` claims sharing a visibility and a scope; counts them if unseen."""
        if visibility and self.lens.roles.isdisjoint(visibility):
            self.out.hidden += n
            return False
        if not self.sees_scope(scope):
            self.out.out_of_scope.extend(ids)
            return False
        return True

    def shows(self, c: ClaimAdded) -> bool:
        """Rules 1-3 for one claim: visible, in scope and not expired; counts it if not."""
        if not self.sees(c.visibility, c.scope, 1, (c.op_id,)):
            return False
        now = self.lens.now
        if now is not None and c.expires is not None and c.expires < now:
            self.out.expired.append(c.op_id)
            return False
        if c.situated:
            at = self.lens.instant
            if at is not None and not holds_at(c, at):
                self.out.not_valid_at.append(c.op_id)
                return False
            if not contexts_agree(c.context, self.lens.context):
                self.out.other_context.append(c.op_id)
                return False
        return True

    def outcome(self, item: _Conflict | tuple[Key, tuple[ClaimAdded, ...]]) -> _Outcome:
        out = self.out = _Outcome()
        if isinstance(item, _Conflict):
            self._conflict(item)
        else:
            self._key(*item)
        return out

    def seen(self, plan: _Plan, before: _Seen | None) -> _Seen:
        """The outcomes of ``plan.rest``: from ``before`` (of this plan or its parent, same
        lens but maybe another time) for every item but those of the keys placed again since
        and, when the time moved, those with a claim that expires; else all of them."""
        now = self.lens.now
        if before is None:
            seen = _Seen(plan.serial, len(self.state._ix.decisions), now)
            for key, item in zip(plan.rest_keys, plan.rest, strict=True):
                seen.take(key, self.outcome(item), _timed(item))
            return seen
        keys = set(plan.changed) if before.plan != plan.serial else set()
        if before.now != now:
            keys |= before.timed
        seen = before.carried(plan.serial, now)
        seen.changed = frozenset(keys)
        rest_keys = plan.rest_keys
        for key in sorted(keys):
            seen.drop(key)
            i = bisect_left(rest_keys, key)
            if i < len(rest_keys) and rest_keys[i] == key:
                item = plan.rest[i]
                seen.take(key, self.outcome(item), _timed(item))
        return seen

    def view(self, plan: _Plan, seen: _Seen, before: _Seen | None = None) -> View:
        hidden, out_of_scope = seen.tally[0], seen.tally[1]
        parts = []
        out: list[_Bucket] = []
        roles = self.lens.roles
        for b in plan.buckets:
            if b.visibility and roles.isdisjoint(b.visibility):
                hidden += b.count
            elif not self.sees_scope(b.scope):
                out_of_scope += b.count
                out.append(b)
            else:
                parts.append(b.entries)
        return View(
            selected=SelectedMap(parts, seen.selected, shared=plan.made),
            unresolved=tuple(seen.surfaced_keys),
            surfaced_conflicts=tuple(seen.surfaced),
            stale=self._stale_notes(),
            excluded={
                "hidden": hidden,
                "out-of-scope": out_of_scope,
                "expired": seen.tally[2],
                "shadowed": seen.tally[3],
                **{r: n for r, n in zip(SITUATED_REASONS, seen.tally[4:], strict=True) if n},
            },
            excluded_ids=_ExcludedIds(out, seen.outcomes),
            explanations=ExplanationMap(parts, seen.explanations),
            contested=dict(sorted(seen.contested.items())),
            preserved=dict(sorted(seen.preserved.items())),
            _lineage=(next(_serials), *_parent(before, seen)),
            retracted=self._retracted(),
            **self._findings(),
        )

    def _findings(self) -> dict[str, Any]:
        """``findings`` and ``findings_not_shown`` of the View: each finding of the State with
        the claims this lens sees (rules 1-3), its reason and witness kept back when it names
        a claim the lens does not see, settled by the applicable decision with the highest
        (lamport, op_id) whose scope and chosen claim the lens sees. Findings are few; this
        visits each of their claims once per View."""
        state = self.state
        found = state.findings
        if not found:
            return {}
        claims = state._ix.claims
        out: list[SurfacedFinding] = []
        unseen = 0
        for f in found:
            shown = tuple(c for c in map(claims.__getitem__, f.candidates) if self._sees(c))
            if f.candidates and not shown:
                unseen += 1
                continue
            missing = len(f.candidates) - len(shown)
            decided = self._finding_decision(f, {c.op_id: c for c in shown})
            out.append(
                SurfacedFinding(
                    finding=f.finding,
                    detector=f.detector,
                    key=f.key,
                    scope=f.scope,
                    locus=f.locus,
                    conflict_id=f.conflict_id,
                    candidates=shown,
                    keys=tuple(sorted({(c.namespace, c.subject, c.predicate) for c in shown}))
                    if f.candidates
                    else f.keys,
                    reason="" if missing else f.reason,
                    witness=None if missing else f.witness,
                    not_shown=missing,
                    decided=None if decided is None else (decided[0].reason or "decided"),
                    # a preserve decision settles the finding without choosing a claim
                    selected=None
                    if decided is None or not decided[0].outcome.selects
                    else decided[1],
                )
            )
        return {"findings": tuple(out), "findings_not_shown": unseen}

    def _sees(self, c: ClaimAdded) -> bool:
        """Rules 1-3 for one claim, counting nothing (a finding's claims are counted where
        their keys are projected)."""
        if c.visibility and self.lens.roles.isdisjoint(c.visibility):
            return False
        if not self.sees_scope(c.scope):
            return False
        now = self.lens.now
        return not (now is not None and c.expires is not None and c.expires < now)

    def _finding_decision(
        self, f: ConflictSet, shown: Mapping[bytes, ClaimAdded]
    ) -> tuple[DecisionAdded, ClaimAdded] | None:
        state = self.state
        best: tuple[DecisionAdded, ClaimAdded] | None = None
        for d in state.decisions_at(f.locus):
            pick = shown.get(d.selected_claim_id)
            if (
                pick is not None
                and d.outcome.settles  # a deferred finding stays open
                and (best is None or (d.lamport, d.op_id) > (best[0].lamport, best[0].op_id))
                and self.sees_scope(d.scope)
                and state.why_stale(d) is None
            ):
                best = (d, pick)
        return best

    def _retracted(self) -> RetractedValues | None:
        """The retracted values this lens may look for: the labels (visibility, scope) of the
        State's `RetractedIndex` it sees, as of the index's entries now."""
        index = self.state.derived(retracted_index)
        roles = self.lens.roles
        seen = frozenset(
            label
            for label in index.labels
            if (not label[0] or not roles.isdisjoint(label[0])) and self.sees_scope(label[1])
        )
        return RetractedValues(index, index.count, seen, self.lens.now) if seen else None

    def _conflict(self, p: _Conflict) -> None:
        if self.sees(p.visibility, p.scope, len(p.ids), p.ids):
            inp = ResolverInput._checked_by_caller(p.shown, p.claims, p.groups, self.lens)
            self._settle(p.key, p.conflict, inp, p.policy, p.values, "")

    def _key(self, key: Key, claims: tuple[ClaimAdded, ...]) -> None:
        """Any other key: filter each claim, shadow wider scopes, then select or resolve."""
        shown = [c for c in claims if self.shows(c)]
        if not shown:
            return
        top = max(scope_rank(c.scope) for c in shown)
        here = tuple(c for c in shown if scope_rank(c.scope) == top)
        shadowed = len(shown) - len(here)
        if shadowed:
            self.out.shadowed.extend(c.op_id for c in shown if scope_rank(c.scope) < top)
        contract = self.state.registry.contract_for(key[0], key[2])
        conflict = None
        beside: tuple[ClaimAdded, ...] = ()
        if contract.functional and len(here) > 1:
            conflict = self.state.conflict_of(*key, here[0].scope)
            if conflict is not None and any(c.situated for c in here):
                # A conflict is visible only among the shown claims that conflict with each
                # other (SEMANTICS §5); the other shown values hold beside it.
                ids = set(conflicting(here, self.state._ix.gkey))
                beside = tuple(c for c in here if c.op_id not in ids)
                here = tuple(c for c in here if c.op_id in ids)
                if not here:
                    conflict, here, beside = None, beside, ()
        groups = _visible_groups(conflict, here)
        if conflict is None and len(here) > 1 and contract.functional:
            side_by_side = _side_by_side(key, here, self.state._ix.gkey, _note(shadowed))
            if side_by_side is not None:
                self.out.selected, self.out.explanation = side_by_side
                return
        if len(groups) == 1:
            if contract.functional and len(here) == 1 and not shadowed:
                self.out.selected = self.out.explanation = here[0]
            else:
                selection, line = _selection(key, groups[0], contract.functional, _note(shadowed))
                self.out.selected = selection
                self.out.explanation = line
            return
        assert conflict is not None
        values = " | ".join(_fmt(g[0]) for g in groups)
        as_shown = ShownConflict.of(conflict, len(here))
        inp = ResolverInput._checked_by_caller(as_shown, here, groups, self.lens)
        note = _note(shadowed)
        if beside:
            note += "; also holds: " + ", ".join(_fmt(c) for c in beside)
        self._settle(key, conflict, inp, contract.policy, values, note)

    def _settle(
        self,
        key: Key,
        conflict: ConflictSet,
        inp: ResolverInput,
        policy: Policy,
        values: str,
        note: str,
    ) -> None:
        """Resolve one visible conflict (rule 4): select a candidate, or surface them all.
        ``conflict`` is the whole conflict, for finding its decisions; a resolver is handed
        only ``inp``, which names no candidate the lens may not see."""
        here, groups = inp.candidates, inp.groups
        scope = conflict.scope
        name = "/".join(key)
        decided = self._decision(conflict, here)
        deferral: Deferral | None = None
        if decided is not None and decided[0].outcome is Outcome.PRESERVE:
            self._preserve(key, conflict, here, groups, decided[0], values, note)
            return
        if decided is not None and decided[0].outcome is Outcome.DEFER:
            d = decided[0]
            deferral = Deferral(d.op_id, d.author, d.reason, d.lamport)
            answer: Select | Abstain = Abstain(f"deferred: {d.reason}")
            how, error = How.DECISION, None
        else:
            answer, how, error = self._resolve(conflict, inp, policy, decided)
        if isinstance(answer, Select):
            pick = next(c for c in here if c.op_id == answer.claim_id)
            group = next(g for g in groups if pick in g)
            self.out.selected = Selection(key, scope, pick, group, how, answer.reason)
            self.out.contested = Contest(
                key,
                scope,
                conflict.locus,
                conflict.conflict_id,
                how,
                self._settled_by(how, policy),
                tuple(g for g in groups if g is not group),
                "merge"
                if how is How.DECISION and decided and decided[0].outcome is Outcome.MERGE
                else "",
            )
            self.out.explanation = (
                f"{name} [{scope}]: {_fmt(pick)} ({how.value}: {answer.reason};"
                f" {len(groups)} candidate values){note}"
            )
            return
        self.out.surfaced = SurfacedConflict(
            key,
            scope,
            conflict.locus,
            conflict.conflict_id,
            here,
            groups,
            answer.reason,
            error,
            len(conflict.candidates) - len(here),
            deferral,
        )
        self.out.explanation = (
            f"{name} [{scope}]: UNRESOLVED between {values} ({answer.reason}){note}"
        )

    def _preserve(
        self,
        key: Key,
        conflict: ConflictSet,
        here: tuple[ClaimAdded, ...],
        groups: tuple[tuple[ClaimAdded, ...], ...],
        d: DecisionAdded,
        values: str,
        note: str,
    ) -> None:
        """A ``preserve`` decision applies: the conflict is settled without a winner. Every
        visible value is an accepted alternative: the key's selection lists all of them (as
        a multi-valued key's does) and ``preserved`` says which decision kept them."""
        reason = d.reason or "preserved"
        rep = _representative(groups[0])
        self.out.selected = Selection(key, conflict.scope, rep, here, How.PRESERVED, reason)
        self.out.preserved = Preserved(
            key,
            conflict.scope,
            conflict.locus,
            conflict.conflict_id,
            groups,
            d.op_id,
            d.author,
            d.reason,
        )
        self.out.explanation = (
            f"{'/'.join(key)} [{conflict.scope}]: PRESERVED {values} (preserve: {reason};"
            f" {len(groups)} accepted values){note}"
        )

    def _settled_by(self, how: How, policy: Policy) -> str:
        """What `Contest.by` names: the decision, the registry policy, or the resolver."""
        if how is How.DECISION:
            return "decision"
        if how is How.POLICY:
            return policy.value
        return type(self.resolver).__name__

    def _resolve(
        self,
        conflict: ConflictSet,
        inp: ResolverInput,
        policy: Policy,
        decided: tuple[DecisionAdded, bytes | None] | None,
    ) -> tuple[Select | Abstain, How, str | None]:
        if decided is not None and decided[1] is not None:
            decision, pick = decided[0], decided[1]
            reason = decision.reason or "decided"
            if pick != decision.selected_claim_id:
                reason += self._stand_in_note(decision.selected_claim_id)
            return Select(pick, reason), How.DECISION, None
        if policy is not Policy.SURFACE:
            by_policy = LatestWins() if policy is Policy.LATEST else self.authority
            answer = run_resolver(by_policy, inp)
            if isinstance(answer, Select):
                return answer, How.POLICY, None
        answer = run_resolver(self.resolver, inp)
        if isinstance(answer, Select):
            return answer, How.RESOLVER, None
        return answer, How.RESOLVER, answer.error

    def _decision(
        self, conflict: ConflictSet, shown: tuple[ClaimAdded, ...]
    ) -> tuple[DecisionAdded, bytes | None] | None:
        """The applicable decision with the highest (lamport, op_id) in a scope the lens sees
        and, for one that selects (``select``, ``merge``), whose choice the lens sees, and the
        claim it selects here (None for ``preserve`` and ``defer``, which select none)."""
        state = self.state
        best: tuple[DecisionAdded, bytes | None] | None = None
        for d in state.decisions_at(conflict.locus):
            if (
                (best is None or (d.lamport, d.op_id) > (best[0].lamport, best[0].op_id))
                and self.sees_scope(d.scope)
                and state.why_stale(d) is None
            ):
                if not d.outcome.selects:
                    best = (d, None)
                    continue
                pick = _decided_claim(state, d, shown)
                if pick is not None:
                    best = (d, pick)
        return best

    def _stand_in_note(self, decided: bytes) -> str:
        """Why another claim of the decided value is selected, hinting at no claim the lens may
        not see (SEMANTICS §7.1: hidden claims appear only as counts): "retracted" or "not
        shown" (out of scope, expired) only when the lens has the roles to see the decided
        claim; else nothing, and the decision's own reason stands alone."""
        c = self.state.claims.get(decided)
        if c is None or not self.lens.sees_roles(c.visibility):
            return ""
        if not self.state.is_active(decided):
            return " (the decided claim was retracted; another claim of its value is selected)"
        return " (the decided claim is not shown; another claim of its value is selected)"

    def _stale_notes(self) -> dict[bytes, tuple[StaleNote, ...]]:
        """Repair notes for stale claims that pass rules 1-3 (shadowed ones included), naming
        only claims the lens may see."""
        state, lens = self.state, self.lens
        claims = state.claims
        now = lens.now

        def seen(cid: bytes) -> bool:
            c = claims.get(cid)
            return c is not None and lens.sees_roles(c.visibility) and self.sees_scope(c.scope)

        out: dict[bytes, tuple[StaleNote, ...]] = {}
        for cid, causes in state.stale.items():
            expires = claims[cid].expires
            if not seen(cid) or (now is not None and expires is not None and expires < now):
                continue
            notes = []
            for cause in causes:
                dep = cause.dependency
                named = [r for r in cause.retracted if r in claims]
                if dep in claims:
                    dep_shown: bytes | None = dep if seen(dep) else None
                elif named:
                    dep_shown = dep if all(seen(r) for r in named) else None
                else:
                    dep_shown = dep
                repl = tuple(r for r in (*cause.superseded_by, *cause.current) if seen(r))
                notes.append(
                    StaleNote(
                        dep_shown, tuple(sorted(set(repl))), tuple(v for v in cause.via if seen(v))
                    )
                )
            out[cid] = tuple(notes)
        return out
