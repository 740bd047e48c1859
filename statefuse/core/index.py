"""The materialized index: the data a State reads, and the one-op update rules that keep it.

Invariant: after any sequence of ``apply`` calls, and after `build` on any set of ops, the index
holds exactly what SEMANTICS §4–§5 say for the set of ops applied, whatever their order:

- ``killed[c]``: the retractions that retract claim ``c`` (exact target, or ref target not in
  ``c.reasserts``); a claim is active iff it is not in ``killed``.
- ``members[locus_key]``: the active claims of one (namespace, subject, predicate, scope): the
  claim id itself when there is one (most keys; saves a container per key), else a tuple.
- ``conflicted``: the locus keys of functional predicates where two active claims conflict: more
  than one normal form, with overlapping validity and agreeing contexts (`validity`).

Every value stored in the dicts is immutable (tuples, bytes, ops), so a snapshot is a shallow copy
(`copy`). Group keys and loci are pure caches of functions of a claim, so they may be shared.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from operator import attrgetter
from typing import Protocol, TypeVar, cast

from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Op
from statefuse.core.validity import conflicts_with
from statefuse.core.validity import has_conflict as _has_conflict
from statefuse.registry import Registry

LocusKey = tuple[str, str, str, str]


class KillWatch(Protocol):
    """Data an `Index` keeps up to date as it retracts claims (`Index.watch_kills`)."""

    def add(
        self,
        claim: ClaimAdded,
        killers: tuple[bytes, ...],
        retractions: Mapping[bytes, ClaimRetracted],
    ) -> None:
        """``claim`` is retracted by ``killers`` (for the first time, or by one more)."""
        ...

    def copy(self) -> KillWatch:
        """A copy for a copy of the index (later changes to either do not show in the
        other)."""
        ...


W = TypeVar("W", bound=KillWatch)

#: CPython's reference counts (None elsewhere, and on a free-threaded build, whose counts are
#: split between threads): whether an index may be written in place.
_REFS: Callable[[object], int] | None = getattr(sys, "getrefcount", None)
if not getattr(sys, "_is_gil_enabled", lambda: True)():
    _REFS = None


class _Probe:
    """Measures what a count reads for an object held by one slot, through the same call
    shapes `held_once` and `Index.exclusive` use (interpreters differ in the temporary
    references a call holds, so the baseline is measured, not assumed)."""

    __slots__ = ("item",)

    def __init__(self) -> None:
        self.item: object = object()

    def direct(self) -> int:
        refs = _REFS
        return refs(self.item) if refs is not None else 0


def _count(obj: object) -> int:
    """A count read in the call shape of `held_once` (an argument, one frame)."""
    return _REFS(obj) if _REFS is not None else 0


_probe = _Probe()
#: The count of an object held by one slot: read through a function, and in a method.
_ONCE_VIA_CALL, _ONCE_IN_METHOD = _count(_probe.item), _probe.direct()
del _probe


def held_once(obj: object) -> bool:
    """True when one slot is all that holds ``obj`` (CPython; False elsewhere)."""
    return _REFS is not None and _REFS(obj) == _ONCE_VIA_CALL


class Index:
    __slots__ = (
        "_by_ref",
        "_functional",
        "_gmemo",
        "claims",
        "conflicted",
        "decisions",
        "dependents",
        "evidence",
        "gkeys",
        "killed",
        "kills",
        "members",
        "registry",
        "ret_by_id",
        "ret_by_ref",
        "retractions",
        "touched",
    )

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.claims: dict[bytes, ClaimAdded] = {}
        self.retractions: dict[bytes, ClaimRetracted] = {}
        self.evidence: dict[bytes, EvidenceAdded] = {}
        self.decisions: dict[bytes, DecisionAdded] = {}
        self.ret_by_id: dict[bytes, tuple[bytes, ...]] = {}
        self.ret_by_ref: dict[bytes, tuple[bytes, ...]] = {}
        self.killed: dict[bytes, tuple[bytes, ...]] = {}
        self.members: dict[LocusKey, bytes | tuple[bytes, ...]] = {}
        self.conflicted: set[LocusKey] = set()
        #: Claims with ``depends_on`` (active or not): what staleness is worked out from.
        self.dependents: set[bytes] = set()
        self.gkeys: dict[bytes, bytes] = {}
        self._functional: dict[tuple[str, str], bool] = {}
        self._gmemo: dict[tuple[object, type, object], bytes] = {}
        self._by_ref: dict[bytes, tuple[bytes, ...]] | None = None
        #: Locus keys whose active claims changed since the last State was made of this index
        #: (what derived data carries over by: see `State.changes_since`).
        self.touched: set[LocusKey] = set()
        #: What `watch_kills` made: told of every retraction applied since (None: not asked).
        self.kills: KillWatch | None = None

    def copy(self) -> Index:
        """A snapshot: later updates to either copy do not show in the other."""
        out = Index.__new__(Index)
        out.registry = self.registry
        out.claims = self.claims.copy()
        out.retractions = self.retractions.copy()
        out.evidence = self.evidence.copy()
        out.decisions = self.decisions.copy()
        out.ret_by_id = self.ret_by_id.copy()
        out.ret_by_ref = self.ret_by_ref.copy()
        out.killed = self.killed.copy()
        out.members = self.members.copy()
        out.conflicted = self.conflicted.copy()
        out.dependents = self.dependents.copy()
        out.gkeys = self.gkeys  # pure cache of claim -> group key
        out._functional = self._functional  # pure cache of the registry
        out._gmemo = self._gmemo  # pure cache of the registry
        out._by_ref = None if self._by_ref is None else self._by_ref.copy()
        out.touched = set()
        out.kills = None if self.kills is None else self.kills.copy()
        return out

    def exclusive(self) -> bool:
        """True when nothing but this index holds any of its containers (no `State.claims`
        proxy, no iterator over one): then an index whose State nobody holds any more may be
        written in place instead of copied (`Materializer.apply_all`). CPython counts
        references; elsewhere this says False and the index is always copied."""
        refs = _REFS
        if refs is None:
            return False
        once = _ONCE_IN_METHOD
        return (
            refs(self.claims) == once
            and refs(self.retractions) == once
            and refs(self.evidence) == once
            and refs(self.decisions) == once
            and refs(self.ret_by_id) == once
            and refs(self.ret_by_ref) == once
            and refs(self.killed) == once
            and refs(self.members) == once
            and refs(self.conflicted) == once
            and refs(self.dependents) == once
            and (self._by_ref is None or refs(self._by_ref) == once)
        )

    def watch_kills(self, make: Callable[[], W]) -> W:
        """The `KillWatch` ``make`` builds from this index (on the first call), told from then
        on of each claim this index retracts, so derived data over every retracted claim (the
        values context assembly scrubs, `statefuse.reading.scrub`) is never built again after a
        write.
        One watch per index: every call must pass a maker of the same kind."""
        watch = self.kills
        if watch is None:
            watch = self.kills = make()
        return cast(W, watch)

    # --- derived helpers -------------------------------------------------------------------------

    def members_at(self, lk: LocusKey) -> tuple[bytes, ...]:
        """The active claim ids at one locus key (empty if none)."""
        m = self.members.get(lk)
        if m is None:
            return ()
        return (m,) if type(m) is bytes else m  # type: ignore[return-value]

    def functional(self, namespace: str, predicate: str) -> bool:
        f = self._functional.get((namespace, predicate))
        if f is None:
            f = self.registry.contract_for(namespace, predicate).functional
            self._functional[(namespace, predicate)] = f
        return f

    def gkey(self, cid: bytes) -> bytes:
        """The claim's group key: equal for claims whose values agree under the contract."""
        g = self.gkeys.get(cid)
        if g is None:
            c = self.claims[cid]
            contract = self.registry.contract_for(c.namespace, c.predicate)
            value = c.value
            t = type(value)
            # For str, int and bytes, equal values of one type have equal canonical bytes, so
            # the group key is a function of (normalizer, type, value): compute it once per
            # distinct value. Not for float (0.0 == -0.0) or containers (1 == 1.0 == True).
            if t is str or t is int or t is bytes:
                memo_key = (contract.normalizer_key, t, value)
                g = self._gmemo.get(memo_key)
                if g is None:
                    g = self._gmemo[memo_key] = self.registry.canonical_group_key(contract, value)
            else:
                g = self.registry.canonical_group_key(contract, value)
            self.gkeys[cid] = g
        return g

    def by_ref(self) -> dict[bytes, tuple[bytes, ...]]:
        """claim_ref -> ids of every claim carrying it (built on first use, then maintained)."""
        if self._by_ref is None:
            # Most refs have one claim: no list per ref (a million small lists cost a second
            # of allocation and garbage collection at 1M claims), tuples only for shared refs.
            out: dict[bytes, tuple[bytes, ...]] = {}
            shared: dict[bytes, list[bytes]] = {}
            for cid, c in self.claims.items():
                ref = c.claim_ref
                first = out.get(ref)
                if first is None:
                    out[ref] = (cid,)
                elif len(first) == 1 and ref not in shared:
                    shared[ref] = [first[0], cid]
                else:
                    shared[ref].append(cid)
            for ref, ids in shared.items():
                out[ref] = tuple(ids)
            self._by_ref = out
        return self._by_ref

    def has_conflict(self, members: Iterable[bytes]) -> bool:
        """Whether some two of these active claims (of one locus) conflict (`validity`).

        One value group is never a conflict, and is what most loci with several claims hold
        (agreement): that is checked first, by group keys alone, so intervals and contexts are
        looked at only where values differ."""
        ids = members if type(members) is tuple else tuple(members)
        if not ids:
            return False
        gkey = self.gkey
        g0 = gkey(ids[0])
        for m in ids:
            if gkey(m) != g0:
                break
        else:
            return False
        claims = self.claims
        for m in ids:
            c = claims[m]
            if c.valid_from is not None or c.valid_until is not None or c.context is not None:
                return _has_conflict([claims[m] for m in ids], gkey)
        return True  # two values, each held always and everywhere

    # --- one-op updates --------------------------------------------------------------------------

    def apply(self, op: Op) -> bool:
        """Apply one op; False if it was already applied."""
        t = type(op)
        if t is ClaimAdded:
            return self._add_claim(op)  # type: ignore[arg-type]
        if t is ClaimRetracted:
            return self._add_retraction(op)  # type: ignore[arg-type]
        if t is EvidenceAdded:
            if op.op_id in self.evidence:
                return False
            self.evidence[op.op_id] = op  # type: ignore[assignment]
            return True
        if t is DecisionAdded:
            if op.op_id in self.decisions:
                return False
            self.decisions[op.op_id] = op  # type: ignore[assignment]
            return True
        raise TypeError(f"not an op: {type(op).__name__}")

    def _add_claim(self, c: ClaimAdded) -> bool:
        cid = c.op_id
        if cid in self.claims:
            return False
        self.claims[cid] = c
        if c.depends_on:
            self.dependents.add(cid)
        if self._by_ref is not None:
            self._by_ref[c.claim_ref] = (*self._by_ref.get(c.claim_ref, ()), cid)
        killers = self.ret_by_id.get(cid, ())
        by_ref = self.ret_by_ref.get(c.claim_ref)
        if by_ref:
            reasserts = c.reasserts
            killers = killers + tuple(r for r in by_ref if r not in reasserts and r not in killers)
        if killers:
            self.killed[cid] = killers
            if self.kills is not None:
                self.kills.add(c, killers, self.retractions)
            return True
        self._activate(cid, c)
        return True

    def _activate(self, cid: bytes, c: ClaimAdded) -> None:
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        self.touched.add(lk)
        current = self.members_at(lk)
        if not current:
            self.members[lk] = cid
            return
        self.members[lk] = (*current, cid)
        if lk in self.conflicted or not self.functional(c.namespace, c.predicate):
            return
        # No conflict before: one is made iff the new claim conflicts with a claim held, which
        # needs a claim of another value (then, for a claim without interval or context, that
        # is enough: it holds always and everywhere).
        gkey = self.gkey
        g = gkey(cid)
        others = [m for m in current if gkey(m) != g]
        if not others:
            return
        if not c.situated:
            self.conflicted.add(lk)
            return
        claims = self.claims
        if conflicts_with(c, [claims[m] for m in others], gkey):
            self.conflicted.add(lk)

    def _deactivate(self, cid: bytes) -> None:
        c = self.claims[cid]
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        self.touched.add(lk)
        rest = tuple(m for m in self.members_at(lk) if m != cid)
        if len(rest) > 1:
            self.members[lk] = rest
        elif rest:
            self.members[lk] = rest[0]
        else:
            del self.members[lk]
        if lk in self.conflicted and not self.has_conflict(rest):
            self.conflicted.discard(lk)

    def _kill(self, cid: bytes, rid: bytes) -> None:
        was = self.killed.get(cid)
        if was is None:
            self._deactivate(cid)
            now: tuple[bytes, ...] = (rid,)
        elif rid not in was:
            now = (*was, rid)
        else:
            return
        self.killed[cid] = now
        if self.kills is not None:
            self.kills.add(self.claims[cid], now, self.retractions)

    def _add_retraction(self, t: ClaimRetracted) -> bool:
        rid = t.op_id
        if rid in self.retractions:
            return False
        self.retractions[rid] = t
        target = t.target_claim_id
        if target is not None:
            self.ret_by_id[target] = (*self.ret_by_id.get(target, ()), rid)
            if target in self.claims:
                self._kill(target, rid)
        ref = t.target_claim_ref
        if ref is not None:
            self.ret_by_ref[ref] = (*self.ret_by_ref.get(ref, ()), rid)
            for cid in self.by_ref().get(ref, ()):
                if rid not in self.claims[cid].reasserts:
                    self._kill(cid, rid)
        return True


def build(
    claims: dict[bytes, ClaimAdded],
    retractions: dict[bytes, ClaimRetracted],
    evidence: dict[bytes, EvidenceAdded],
    decisions: dict[bytes, DecisionAdded],
    registry: Registry,
) -> Index:
    """The index of ops already split by type; the index takes ownership of the four dicts.

    Retractions are indexed first, so every claim is judged once against all of them; group
    keys (normalizer calls) are computed only for loci with several active claims. This is the
    hot path of a full materialize, hence the local-variable style.
    """
    ix = Index(registry)
    ix.claims = claims
    ix.retractions = retractions
    ix.evidence = evidence
    ix.decisions = decisions

    by_id: dict[bytes, list[bytes]] = {}
    by_ref: dict[bytes, list[bytes]] = {}
    for rid, ret in retractions.items():
        if ret.target_claim_id is not None:
            by_id.setdefault(ret.target_claim_id, []).append(rid)
        if ret.target_claim_ref is not None:
            by_ref.setdefault(ret.target_claim_ref, []).append(rid)
    ret_by_id = ix.ret_by_id = {k: tuple(v) for k, v in by_id.items()}
    ret_by_ref = ix.ret_by_ref = {k: tuple(v) for k, v in by_ref.items()}

    killed = ix.killed
    ix.dependents = {cid for cid, c in claims.items() if c.depends_on}
    members: dict[LocusKey, bytes | tuple[bytes, ...]] = {}
    multi: dict[LocusKey, list[bytes]] = {}
    locus_key = attrgetter("namespace", "subject", "predicate", "scope")
    for cid, c in claims.items():
        if cid in ret_by_id or c.claim_ref in ret_by_ref:
            k = ret_by_id.get(cid, ())
            reasserts = c.reasserts
            k = k + tuple(
                x for x in ret_by_ref.get(c.claim_ref, ()) if x not in reasserts and x not in k
            )
            if k:
                killed[cid] = k
                continue
        lk = locus_key(c)
        first = members.get(lk)
        if first is None:
            members[lk] = cid
        else:
            more = multi.get(lk)
            if more is None:
                multi[lk] = [first, cid]  # type: ignore[list-item]
            else:
                more.append(cid)
    for lk, ids in multi.items():
        members[lk] = tuple(ids)
        if ix.functional(lk[0], lk[2]) and ix.has_conflict(ids):
            ix.conflicted.add(lk)
    ix.members = members
    return ix
