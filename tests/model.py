"""A deliberately naive reference materializer, written straight from SEMANTICS §4–§6.

Quadratic loops and fixed-point iteration on purpose: it is the oracle the fast materializer is
compared with, so it must be obviously right rather than fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from statefuse import ClaimAdded, ClaimRetracted, Op
from statefuse.registry import Registry, encode_value


@dataclass
class ModelState:
    active: set[bytes]
    retracted_by: dict[bytes, set[bytes]]
    conflicts: dict[tuple[str, str, str, str], list[set[bytes]]]
    stale: set[bytes]


def _same(registry: Registry, a: ClaimAdded, b: ClaimAdded) -> bool:
    contract = registry.contract_for(a.namespace, a.predicate)
    if contract.normalizer == "exact":
        return encode_value(a.value) == encode_value(b.value)
    try:
        na = registry.normal_form(contract, a.value)
    except ValueError:
        na = None
    try:
        nb = registry.normal_form(contract, b.value)
    except ValueError:
        nb = None
    if na is None or nb is None:
        return na is None and nb is None and encode_value(a.value) == encode_value(b.value)
    return encode_value(na) == encode_value(nb)


def model(ops: list[Op], registry: Registry) -> ModelState:
    uniq = {op.op_id: op for op in ops}
    claims = [op for op in uniq.values() if isinstance(op, ClaimAdded)]
    rets = [op for op in uniq.values() if isinstance(op, ClaimRetracted)]
    retracted_by: dict[bytes, set[bytes]] = {}
    for c in claims:
        for t in rets:
            if t.target_claim_id == c.claim_id or (
                t.target_claim_ref == c.claim_ref and t.op_id not in c.reasserts
            ):
                retracted_by.setdefault(c.claim_id, set()).add(t.op_id)
    active = {c.claim_id for c in claims} - set(retracted_by)

    conflicts: dict[tuple[str, str, str, str], list[set[bytes]]] = {}
    for c in claims:
        if c.claim_id not in active:
            continue
        if not registry.contract_for(c.namespace, c.predicate).functional:
            continue
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        groups = conflicts.setdefault(lk, [])
        for g in groups:
            rep = next(x for x in claims if x.claim_id in g)
            if _same(registry, rep, c):
                g.add(c.claim_id)
                break
        else:
            groups.append({c.claim_id})
    conflicts = {k: v for k, v in conflicts.items() if len(v) > 1}

    by_id = {c.claim_id: c for c in claims}

    def broken(dep: bytes) -> bool:
        if any(t.target_claim_id == dep for t in rets):
            return True
        if dep in by_id:
            return dep not in active
        holders = [c for c in claims if c.claim_ref == dep]
        if not holders and not any(t.target_claim_ref == dep for t in rets):
            return False
        return not any(c.claim_id in active for c in holders)

    stale: set[bytes] = set()
    changed = True
    while changed:
        changed = False
        for c in claims:
            if c.claim_id not in active or c.claim_id in stale:
                continue
            for dep in c.depends_on:
                holders = [
                    x.claim_id for x in claims if x.claim_ref == dep and x.claim_id in active
                ]
                if broken(dep) or dep in stale or (holders and all(h in stale for h in holders)):
                    stale.add(c.claim_id)
                    changed = True
                    break
    return ModelState(active, retracted_by, conflicts, stale)
