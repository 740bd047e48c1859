"""The materialized index: the data a State reads, and the one-op update rules that keep it.

Invariant: after any sequence of ``apply`` calls, and after `build` on any set of ops, the index
holds exactly what SEMANTICS §4–§5 say for the set of ops applied, whatever their order:

- ``killed[c]``: the retractions that retract claim ``c`` (exact target, or ref target not in
  ``c.reasserts``); a claim is active iff it is not in ``killed``.
- ``members[locus_key]``: the active claims of one (namespace, subject, predicate, scope).
- ``conflicted``: the locus keys of functional predicates whose active claims have more than one
  normal form.

Every value stored in the dicts is immutable (tuples, bytes, ops), so a snapshot is a shallow copy
(`copy`). Group keys and loci are pure caches of functions of a claim, so they may be shared.
"""

from __future__ import annotations

from collections.abc import Iterable

from registry import Registry
from statefuse.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Op

LocusKey = tuple[str, str, str, str]


class Index:
    __slots__ = (
        "_by_ref",
        "_functional",
        "claims",
        "conflicted",
        "decisions",
        "evidence",
        "gkeys",
        "killed",
        "members",
        "registry",
        "ret_by_id",
        "ret_by_ref",
        "retractions",
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
        self.members: dict[LocusKey, tuple[bytes, ...]] = {}
        self.conflicted: set[LocusKey] = set()
        self.gkeys: dict[bytes, bytes] = {}
        self._functional: dict[tuple[str, str], bool] = {}
        self._by_ref: dict[bytes, tuple[bytes, ...]] | None = None

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
        out.gkeys = self.gkeys  # pure cache of claim -> group key
        out._functional = self._functional  # pure cache of the registry
        out._by_ref = None if self._by_ref is None else self._by_ref.copy()
        return out

    # --- derived helpers -------------------------------------------------------------------------

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
            g = self.registry.group_key(contract, c.value)
            self.gkeys[cid] = g
        return g

    def by_ref(self) -> dict[bytes, tuple[bytes, ...]]:
        """claim_ref -> ids of every claim carrying it (built on first use, then maintained)."""
        if self._by_ref is None:
            acc: dict[bytes, list[bytes]] = {}
            for cid, c in self.claims.items():
                acc.setdefault(c.claim_ref, []).append(cid)
            self._by_ref = {r: tuple(v) for r, v in acc.items()}
        return self._by_ref

    def has_conflict(self, members: Iterable[bytes]) -> bool:
        it = iter(members)
        first = next(it, None)
        if first is None:
            return False
        g0 = self.gkey(first)
        return any(self.gkey(m) != g0 for m in it)

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
        if self._by_ref is not None:
            self._by_ref[c.claim_ref] = (*self._by_ref.get(c.claim_ref, ()), cid)
        killers = self.ret_by_id.get(cid, ())
        by_ref = self.ret_by_ref.get(c.claim_ref)
        if by_ref:
            reasserts = c.reasserts
            killers = killers + tuple(r for r in by_ref if r not in reasserts and r not in killers)
        if killers:
            self.killed[cid] = killers
            return True
        self._activate(cid, c)
        return True

    def _activate(self, cid: bytes, c: ClaimAdded) -> None:
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        current = self.members.get(lk)
        if current is None:
            self.members[lk] = (cid,)
            return
        self.members[lk] = (*current, cid)
        if (
            lk not in self.conflicted
            and self.functional(c.namespace, c.predicate)
            and self.gkey(current[0]) != self.gkey(cid)
        ):
            self.conflicted.add(lk)

    def _deactivate(self, cid: bytes) -> None:
        c = self.claims[cid]
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        rest = tuple(m for m in self.members[lk] if m != cid)
        if rest:
            self.members[lk] = rest
        else:
            del self.members[lk]
        if lk in self.conflicted and not self.has_conflict(rest):
            self.conflicted.discard(lk)

    def _kill(self, cid: bytes, rid: bytes) -> None:
        was = self.killed.get(cid)
        if was is None:
            self._deactivate(cid)
            self.killed[cid] = (rid,)
        elif rid not in was:
            self.killed[cid] = (*was, rid)

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


def build(ops: Iterable[Op], registry: Registry) -> Index:
    """The index of a whole op-set, built in bulk (same result as applying ops one by one).

    Two passes: retractions first, so every claim is judged once against the complete set of
    retractions, then claims; group keys are computed only for loci with several active claims.
    """
    ix = Index(registry)
    claims = ix.claims
    retractions = ix.retractions
    for op in ops:
        t = type(op)
        if t is ClaimAdded:
            claims[op.op_id] = op  # type: ignore[assignment]
        elif t is ClaimRetracted:
            retractions[op.op_id] = op  # type: ignore[assignment]
        elif t is EvidenceAdded:
            ix.evidence[op.op_id] = op  # type: ignore[assignment]
        elif t is DecisionAdded:
            ix.decisions[op.op_id] = op  # type: ignore[assignment]
        else:
            raise TypeError(f"not an op: {type(op).__name__}")

    by_id: dict[bytes, list[bytes]] = {}
    by_ref: dict[bytes, list[bytes]] = {}
    for rid, ret in retractions.items():
        if ret.target_claim_id is not None:
            by_id.setdefault(ret.target_claim_id, []).append(rid)
        if ret.target_claim_ref is not None:
            by_ref.setdefault(ret.target_claim_ref, []).append(rid)
    ix.ret_by_id = {k: tuple(v) for k, v in by_id.items()}
    ix.ret_by_ref = {k: tuple(v) for k, v in by_ref.items()}

    killed = ix.killed
    members: dict[LocusKey, list[bytes]] = {}
    get_id = ix.ret_by_id.get
    get_ref = ix.ret_by_ref.get
    for cid, c in claims.items():
        k = get_id(cid)
        r = get_ref(c.claim_ref)
        if r:
            k = k or ()
            reasserts = c.reasserts
            k = k + tuple(x for x in r if x not in reasserts and x not in k)
        if k:
            killed[cid] = k
            continue
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        m = members.get(lk)
        if m is None:
            members[lk] = [cid]
        else:
            m.append(cid)
    ix.members = {lk: tuple(m) for lk, m in members.items()}
    for lk, m in members.items():
        if len(m) > 1 and ix.functional(lk[0], lk[2]) and ix.has_conflict(m):
            ix.conflicted.add(lk)
    return ix
