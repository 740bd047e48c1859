"""Projection: what one lens sees of a State, with every conflict resolved or surfaced (§7).

Invariant: `project` is pure and replayable — it reads the State and never changes it, and the
same state, lens and deterministic resolver give an identical View (everything is ordered by
ids or keys, never by hash order). Rules apply in SEMANTICS order: visibility, scope and
shadowing, expiry, then resolution. A hidden claim is dropped at the first rule, so it can never
reach a resolver, a conflict listing, a repair note or an explanation.

Resolution of a visible conflict: an applicable decision (its conflict snapshot is current, its
scope is one the lens sees, its choice is visible), else the predicate's registry policy
(``latest``: `LatestWins`; ``authority``: `AuthorityRank` over ``authority_order``), else the
given resolver (``surface``, the default policy, defers to it; the default resolver abstains).
A policy that abstains also defers to the resolver. An abstained conflict is unresolved and
surfaced with all its visible candidates.
"""

from __future__ import annotations

from collections.abc import Sequence

from registry.contract import Policy
from registry.error import InputError
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
    run_resolver,
)
from statefuse.state import ConflictSet, State, locus_of
from statefuse.view import How, Key, Selection, StaleNote, SurfacedConflict, View

#: Default authority labels, highest first, for predicates whose policy is ``authority``.
DEFAULT_AUTHORITY_ORDER: tuple[str, ...] = ("system", "user", "operator", "tool", "agent")

#: Exclusion reasons whose claim ids a View may list (``hidden`` is only ever counted).
PUBLIC_REASONS = ("out-of-scope", "expired", "shadowed")


class ProjectionError(InputError, TypeError):
    """`project` called with something that is not a State / Lens / resolver."""


def _representative(claims: Sequence[ClaimAdded]) -> ClaimAdded:
    return max(claims, key=lambda c: (c.confidence, c.lamport, c.claim_id))


def _fmt(c: ClaimAdded) -> str:
    return repr(c.value)


def project(
    state: State,
    lens: Lens,
    *,
    resolver: Resolver | None = None,
    authority_order: Sequence[str] = DEFAULT_AUTHORITY_ORDER,
) -> View:
    """The View of ``state`` through ``lens``. Raises ProjectionError for wrong argument types;
    never raises because of a resolver (see `run_resolver`)."""
    if not isinstance(state, State):
        raise ProjectionError("state", "state-type", f"expected State, got {type(state).__name__}")
    if not isinstance(lens, Lens):
        raise ProjectionError("lens", "lens-type", f"expected Lens, got {type(lens).__name__}")
    chosen_resolver: Resolver = resolver if resolver is not None else AbstainAll()
    authority = AuthorityRank(tuple(authority_order))

    hidden = 0
    ids: dict[str, list[bytes]] = {r: [] for r in PUBLIC_REASONS}
    visible: dict[bytes, ClaimAdded] = {}
    for c in state.active_claims():
        if not lens.sees_roles(c.visibility):
            hidden += 1
        elif not lens.sees_scope(c.scope):
            ids["out-of-scope"].append(c.claim_id)
        elif lens.now is not None and c.expires is not None and c.expires < lens.now:
            ids["expired"].append(c.claim_id)
        else:
            visible[c.claim_id] = c

    by_key: dict[Key, list[ClaimAdded]] = {}
    for c in visible.values():
        by_key.setdefault(c.key, []).append(c)

    selected: dict[Key, Selection] = {}
    unresolved: list[Key] = []
    surfaced: list[SurfacedConflict] = []
    explanations: dict[Key, str] = {}
    for key in sorted(by_key):
        claims = by_key[key]
        top = max(scope_rank(c.scope) for c in claims)
        here = sorted((c for c in claims if scope_rank(c.scope) == top), key=lambda c: c.claim_id)
        shadowed = sorted(c.claim_id for c in claims if scope_rank(c.scope) < top)
        ids["shadowed"].extend(shadowed)
        scope = here[0].scope
        note = f" (shadows {len(shadowed)} claim(s) of wider scope)" if shadowed else ""
        name = "/".join(key)
        contract = state.registry.contract_for(key[0], key[2])
        if not contract.functional:
            rep = _representative(here)
            selected[key] = Selection(key, scope, rep, tuple(here), How.MULTI, "all values hold")
            values = ", ".join(_fmt(c) for c in here)
            explanations[key] = f"{name} [{scope}]: {values} (multi-valued){note}"
            continue
        conflict = state.conflict_at(locus_of(key[0], key[1], key[2], scope))
        groups = _visible_groups(conflict, here)
        if len(groups) == 1:
            group = groups[0]
            how = How.SOLE if len(group) == 1 else How.AGREEMENT
            rep = _representative(group)
            why = "only candidate" if how is How.SOLE else f"{len(group)} claims agree"
            selected[key] = Selection(key, scope, rep, group, how, why)
            explanations[key] = f"{name} [{scope}]: {_fmt(rep)} ({why}){note}"
            continue
        assert conflict is not None
        inp = ResolverInput(conflict, tuple(here), lens)
        answer, how, error = _resolve(
            state, lens, conflict, inp, contract.policy, authority, chosen_resolver, visible
        )
        if isinstance(answer, Select):
            pick = visible[answer.claim_id]
            group = next(g for g in groups if pick in g)
            selected[key] = Selection(key, scope, pick, group, how, answer.reason)
            explanations[key] = (
                f"{name} [{scope}]: {_fmt(pick)} ({how.value}: {answer.reason};"
                f" {len(groups)} candidate values){note}"
            )
        else:
            unresolved.append(key)
            surfaced.append(
                SurfacedConflict(
                    key,
                    scope,
                    conflict.locus,
                    conflict.conflict_id,
                    inp.candidates,
                    inp.groups,
                    answer.reason,
                    error,
                )
            )
            values = " | ".join(_fmt(g[0]) for g in groups)
            explanations[key] = (
                f"{name} [{scope}]: UNRESOLVED between {values} ({answer.reason}){note}"
            )

    return View(
        selected=selected,
        unresolved=tuple(unresolved),
        surfaced_conflicts=tuple(surfaced),
        stale=_stale_notes(state, lens, visible),
        excluded={"hidden": hidden, **{r: len(v) for r, v in ids.items()}},
        excluded_ids={r: tuple(sorted(v)) for r, v in ids.items()},
        explanations=explanations,
    )


def _visible_groups(
    conflict: ConflictSet | None, here: list[ClaimAdded]
) -> list[tuple[ClaimAdded, ...]]:
    """The candidate groups restricted to visible claims (one group when there is no conflict)."""
    if conflict is None:
        return [tuple(here)]
    shown = {c.claim_id: c for c in here}
    groups = [tuple(shown[i] for i in g.claim_ids if i in shown) for g in conflict.groups]
    return [g for g in groups if g]


def _resolve(
    state: State,
    lens: Lens,
    conflict: ConflictSet,
    inp: ResolverInput,
    policy: Policy,
    authority: AuthorityRank,
    resolver: Resolver,
    visible: dict[bytes, ClaimAdded],
) -> tuple[Select | Abstain, How, str | None]:
    decision = _decision(state, lens, conflict, visible)
    if decision is not None:
        return Select(decision.selected_claim_id, decision.reason or "decided"), How.DECISION, None
    if policy is not Policy.SURFACE:
        by_policy = LatestWins() if policy is Policy.LATEST else authority
        answer = run_resolver(by_policy, inp)
        if isinstance(answer, Select):
            return answer, How.POLICY, None
    answer = run_resolver(resolver, inp)
    if isinstance(answer, Select):
        return answer, How.RESOLVER, None
    return answer, How.RESOLVER, answer.error


def _decision(
    state: State, lens: Lens, conflict: ConflictSet, visible: dict[bytes, ClaimAdded]
) -> DecisionAdded | None:
    best: DecisionAdded | None = None
    for d in state.decisions:
        if (
            d.locus == conflict.locus
            and d.conflict_id == conflict.conflict_id
            and d.selected_claim_id in visible
            and d.selected_claim_id in conflict.candidates
            and lens.sees_scope(d.scope)
            and (best is None or (d.lamport, d.op_id) > (best.lamport, best.op_id))
        ):
            best = d
    return best


def _stale_notes(
    state: State, lens: Lens, visible: dict[bytes, ClaimAdded]
) -> dict[bytes, tuple[StaleNote, ...]]:
    """Repair notes for visible stale claims, naming only claims the lens may see."""
    claims = state.claims

    def seen(cid: bytes) -> bool:
        c = claims.get(cid)
        return c is not None and lens.sees_roles(c.visibility) and lens.sees_scope(c.scope)

    out: dict[bytes, tuple[StaleNote, ...]] = {}
    for cid, causes in state.stale.items():
        if cid not in visible:
            continue
        notes = []
        for cause in causes:
            dep = cause.dependency
            named = [claims[c] for c in cause.retracted if c in claims]
            if dep in claims:
                dep_shown: bytes | None = dep if seen(dep) else None
            elif named:
                dep_shown = dep if all(seen(c.claim_id) for c in named) else None
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
