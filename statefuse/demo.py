"""The ``statefuse demo`` story: two agent branches learn conflicting facts and merge.

Everything here is in memory for now; later work moves it onto the SQLite store and sync.
"""

from __future__ import annotations

from collections.abc import Callable

from registry import PredicateContract, Registry
from statefuse.materializer import materialize
from statefuse.op import ClaimAdded
from statefuse.opset import OpSet
from statefuse.state import State
from statefuse.writer import Writer

DEMO_REGISTRY = Registry(
    [
        PredicateContract("deadline", normalizer="date"),
        PredicateContract("price", normalizer="money"),
        PredicateContract("owner", normalizer="text"),
    ]
)


def _show(c: ClaimAdded) -> str:
    who = c.author if isinstance(c.author, str) else c.author.hex()[:12]
    return f"{c.subject}.{c.predicate} = {c.value!r}  (by {who}, id {c.claim_id.hex()[:10]})"


def run(out: Callable[[str], object] = print) -> State:
    """Run the demo story, printing each step through ``out``; return the merged State."""
    planner = Writer("planner", registry=DEMO_REGISTRY)
    base = OpSet(
        [
            planner.claim("project", "launch", "deadline", "2026-03-25"),
            planner.claim("project", "launch", "owner", "Dana  Smith"),
        ]
    )
    out("1. planner writes the shared memory:")
    for c in materialize(base, registry=DEMO_REGISTRY).active_claims():
        out(f"     {_show(c)}")

    out("2. planner forks two research branches, A and B")
    a, b = (
        Writer("research-a", registry=DEMO_REGISTRY),
        Writer("research-b", registry=DEMO_REGISTRY),
    )
    a.observe(base)
    b.observe(base)
    branch_a, branch_b = OpSet(base), OpSet(base)

    wrong = a.claim("vendor", "acme", "price", "USD 1,200", provenance="old quote")
    fixed = a.claim("vendor", "acme", "price", "$1,150.00", provenance="signed quote")
    branch_a.update([wrong, fixed])
    branch_a.add(
        a.retract(claim_id=wrong.claim_id, reason="quote expired", superseded_by=fixed.claim_id)
    )
    branch_a.add(a.claim("project", "launch", "owner", "dana smith"))
    out("   A: price 'USD 1,200', then corrects itself to '$1,150.00' (exact retraction)")
    out("   A: owner 'dana smith' (agrees with 'Dana  Smith' under the text contract)")

    branch_b.add(b.claim("project", "launch", "deadline", "2026-04-01", provenance="vendor email"))
    branch_b.add(b.claim("vendor", "acme", "price", "1150 usd"))
    out("   B: deadline '2026-04-01' (disagrees with the planner)")
    out("   B: price '1150 usd' (agrees with A's corrected price)")

    merged = branch_a | branch_b
    state = materialize(merged, registry=DEMO_REGISTRY)
    out(f"3. merge A and B: {len(merged)} ops, {len(state.active_claims())} active claims")
    for c in state.active_claims():
        out(f"     {_show(c)}")
    out(f"4. conflicts kept, not overwritten: {len(state.conflicts)}")
    for conflict in state.conflicts:
        ns, subj, pred = conflict.key
        out(
            f"     {ns}/{subj}.{pred} [{conflict.scope}]"
            f" conflict {conflict.conflict_id.hex()[:10]}:"
        )
        for group in conflict.groups:
            values = {repr(state.claims[cid].value) for cid in group.claim_ids}
            out(f"       - {', '.join(sorted(values))}  ({len(group.claim_ids)} claim(s))")
    other_way = materialize(branch_b | branch_a, registry=DEMO_REGISTRY)
    same = "same" if other_way.digest() == state.digest() else "DIFFERENT"
    out(f"5. state digest {state.digest().hex()[:16]}; merging B into A instead: {same} digest")
    return state
