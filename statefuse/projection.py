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
`statefuse.view.SelectedMap`, which makes a sole candidate's `Selection` only when it is read.
Conflicts of that shape get their groups and text prepared once; the few other keys (claims
in several scopes or visibilities, or with an expiry) are worked out per call. Whether the lens
sees a scope is looked up once per scope and call. The tests compare every View with a
straightforward reference projection.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass, field

from registry.contract import Policy, PredicateContract
from registry.error import InputError
from registry.registry import DEFAULT_AUTHORITY_ORDER
from statefuse.index import LocusKey
from statefuse.lens import Lens, scope_rank
from statefuse.op import ClaimAdded, DecisionAdded
from statefuse.resolver import (
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
from statefuse.state import ConflictSet, State
from statefuse.view import (
    ExplanationMap,
    How,
    Key,
    SelectedMap,
    Selection,
    StaleNote,
    SurfacedConflict,
    View,
)

__all__ = ["DEFAULT_AUTHORITY_ORDER", "PUBLIC_REASONS", "ProjectionError", "project"]

#: Exclusion reasons whose claim ids a View may list (``hidden`` is only ever counted).
PUBLIC_REASONS = ("out-of-scope", "expired", "shadowed")


class ProjectionError(InputError, TypeError):
    """`project` called with something that is not a State / Lens / resolver."""


def _representative(claims: Sequence[ClaimAdded]) -> ClaimAdded:
    return max(claims, key=lambda c: (c.confidence, c.lamport, c.op_id))


def _fmt(c: ClaimAdded) -> str:
    return repr(c.value)


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
    entries: dict[Key, ClaimAdded | tuple[Selection, str]]  # sorted by key; never changed
    ids: tuple[bytes, ...]  # every claim of these keys, sorted


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
    ids: dict[tuple[tuple[str, ...], str], list[bytes]] = {}
    rest: list[_Conflict | tuple[Key, tuple[ClaimAdded, ...]]] = []
    for key, claims in state.active_by_key().items():
        placed = placer.place(key, claims)
        if _is_placed(placed):
            label, entry, claim_ids = placed  # type: ignore[misc]
            bucket = entries.get(label)
            if bucket is None:
                bucket = entries[label] = {}
                ids[label] = []
            bucket[key] = entry
            ids[label].extend(claim_ids)
        else:
            rest.append(placed)  # type: ignore[arg-type]
    buckets = (
        _Bucket(vis, scope, entries[(vis, scope)], tuple(sorted(ids[(vis, scope)])))
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
        entries = dict(b.entries) if b is not None else {}
        for key in gone:
            if key not in new:
                del entries[key]
        fresh = [k for k in new if k not in entries]
        for key, (entry, _) in new.items():
            entries[key] = entry
        if fresh:  # keep key order: the new keys go where a full plan puts them
            order = [k for k in entries if k not in new or k not in fresh]
            for key in fresh:
                insort(order, key)
            entries = {k: entries[k] for k in order}
        if not entries:
            continue
        claim_ids = list(b.ids) if b is not None else []
        for cid in gone_ids.get(label, ()):
            del claim_ids[bisect_left(claim_ids, cid)]
        for _, (_, cids) in new.items():
            for cid in cids:
                insort(claim_ids, cid)
        buckets.append(_Bucket(label[0], label[1], entries, tuple(claim_ids)))
    made = prev.made
    for key in scopes:  # what the touched keys made is remade when read (and never kept stale)
        made.pop(key, None)
    return _Plan(tuple(buckets), tuple(rest), tuple(rest_keys), made)


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
    """
    if not isinstance(state, State):
        raise ProjectionError("state", "state-type", f"expected State, got {type(state).__name__}")
    if not isinstance(lens, Lens):
        raise ProjectionError("lens", "lens-type", f"expected Lens, got {type(lens).__name__}")
    if authority_order is None:
        order = state.registry.authority_order
    else:
        order = _check_order("authority_order", authority_order, allow_empty=False)
    run = _Run(state, lens, resolver if resolver is not None else AbstainAll(), order)
    return run.view(state.derived(_plan))


class _Run:
    """One projection: the lens's memo tables and the parts of the View being built."""

    def __init__(
        self, state: State, lens: Lens, resolver: Resolver, authority_order: tuple[str, ...]
    ) -> None:
        self.state = state
        self.lens = lens
        self.resolver = resolver
        self.authority = AuthorityRank(authority_order)
        self.scope_seen: dict[str, bool] = {}
        self.hidden = 0
        self.out_of_scope: list[bytes] = []
        self.expired: list[bytes] = []
        self.shadowed: list[bytes] = []
        self.selected: dict[Key, Selection | ClaimAdded] = {}
        self.explanations: dict[Key, str | ClaimAdded] = {}
        self.unresolved: list[Key] = []
        self.surfaced: list[SurfacedConflict] = []

    def sees_scope(self, scope: str) -> bool:
        ok = self.scope_seen.get(scope)
        if ok is None:
            ok = self.scope_seen[scope] = self.lens.sees_scope(scope)
        return ok

    def sees(self, visibility: tuple[str, ...], scope: str, n: int, ids: Sequence[bytes]) -> bool:
        """Rules 1-2 for ``n`` claims sharing a visibility and a scope; counts them if unseen."""
        if visibility and self.lens.roles.isdisjoint(visibility):
            self.hidden += n
            return False
        if not self.sees_scope(scope):
            self.out_of_scope.extend(ids)
            return False
        return True

    def shows(self, c: ClaimAdded) -> bool:
        """Rules 1-3 for one claim: visible, in scope and not expired; counts it if not."""
        if not self.sees(c.visibility, c.scope, 1, (c.op_id,)):
            return False
        now = self.lens.now
        if now is not None and c.expires is not None and c.expires < now:
            self.expired.append(c.op_id)
            return False
        return True

    def view(self, plan: _Plan) -> View:
        seen = [b for b in plan.buckets if self.sees(b.visibility, b.scope, len(b.ids), b.ids)]
        for item in plan.rest:
            if isinstance(item, _Conflict):
                self._conflict(item)
            else:
                self._key(*item)
        ids = {
            "out-of-scope": tuple(sorted(self.out_of_scope)),
            "expired": tuple(sorted(self.expired)),
            "shadowed": tuple(sorted(self.shadowed)),
        }
        return View(
            selected=SelectedMap([b.entries for b in seen], self.selected, shared=plan.made),
            unresolved=tuple(self.unresolved),
            surfaced_conflicts=tuple(self.surfaced),
            stale=self._stale_notes(),
            excluded={"hidden": self.hidden, **{r: len(v) for r, v in ids.items()}},
            excluded_ids=ids,
            explanations=ExplanationMap([b.entries for b in seen], self.explanations),
        )

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
            self.shadowed.extend(c.op_id for c in shown if scope_rank(c.scope) < top)
        contract = self.state.registry.contract_for(key[0], key[2])
        conflict = None
        if contract.functional and len(here) > 1:
            conflict = self.state.conflict_of(*key, here[0].scope)
        groups = _visible_groups(conflict, here)
        if len(groups) == 1:
            if contract.functional and len(here) == 1 and not shadowed:
                self.selected[key] = self.explanations[key] = here[0]
            else:
                selection, line = _selection(key, groups[0], contract.functional, _note(shadowed))
                self.selected[key] = selection
                self.explanations[key] = line
            return
        assert conflict is not None
        values = " | ".join(_fmt(g[0]) for g in groups)
        as_shown = ShownConflict.of(conflict, len(here))
        inp = ResolverInput._checked_by_caller(as_shown, here, groups, self.lens)
        self._settle(key, conflict, inp, contract.policy, values, _note(shadowed))

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
        answer, how, error = self._resolve(conflict, inp, policy)
        scope = conflict.scope
        name = "/".join(key)
        if isinstance(answer, Select):
            pick = next(c for c in here if c.op_id == answer.claim_id)
            group = next(g for g in groups if pick in g)
            self.selected[key] = Selection(key, scope, pick, group, how, answer.reason)
            self.explanations[key] = (
                f"{name} [{scope}]: {_fmt(pick)} ({how.value}: {answer.reason};"
                f" {len(groups)} candidate values){note}"
            )
            return
        self.unresolved.append(key)
        self.surfaced.append(
            SurfacedConflict(
                key,
                scope,
                conflict.locus,
                conflict.conflict_id,
                here,
                groups,
                answer.reason,
                error,
                len(conflict.candidates) - len(here),
            )
        )
        self.explanations[key] = (
            f"{name} [{scope}]: UNRESOLVED between {values} ({answer.reason}){note}"
        )

    def _resolve(
        self, conflict: ConflictSet, inp: ResolverInput, policy: Policy
    ) -> tuple[Select | Abstain, How, str | None]:
        decided = self._decision(conflict, inp.candidates)
        if decided is not None:
            decision, pick = decided
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
    ) -> tuple[DecisionAdded, bytes] | None:
        """The applicable decision with the highest (lamport, op_id) in a scope the lens sees
        and whose choice the lens sees, and the claim it selects here."""
        state = self.state
        best: tuple[DecisionAdded, bytes] | None = None
        for d in state.decisions_at(conflict.locus):
            if (
                (best is None or (d.lamport, d.op_id) > (best[0].lamport, best[0].op_id))
                and self.sees_scope(d.scope)
                and state.why_stale(d) is None
            ):
                pick = _decided_claim(state, d, shown)
                if pick is not None:
                    best = (d, pick)
        return best

    def _stand_in_note(self, decided: bytes) -> str:
        """Why another claim of the decided value is selected, naming no claim the lens may
        not see: "retracted" only when the lens could see the decided claim."""
        c = self.state.claims.get(decided)
        if (
            c is not None
            and not self.state.is_active(decided)
            and self.lens.sees_roles(c.visibility)
        ):
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
