"""Clock jumps: counted ops that move the lamport clock far past everything counted before them.

A lamport is chosen by its author. An honest writer takes one more than the highest lamport it
has seen counted (SEMANTICS §2), so the lamports of a space's counted ops lie close together; an
author that stamps an op far above them (up to `MAX_LAMPORT`) pushes every writer's clock there
for good. The op is kept and counted (its author signed it and merge is union), and the jump is
reported like a fork, naming the author, so an operator can revoke it.

Rule (a function of the set of counted ops): sort the distinct lamports of the counted ops; a
lamport ``L`` is a *jump* when it exceeds the next lower one present (0 when there is none) by
more than `LAMPORT_JUMP`, the *gap*. Every counted op at a jump lamport below `MAX_LAMPORT` is
named: an honest writer never lands exactly there (it writes above the ops it has seen). At
`MAX_LAMPORT` itself every saturated writer's ops join the jump's, and a set cannot tell who came
first, so there the jump names the first change this replica accepted at that lamport (its store
order; the writers that followed are not named).

`LamportGaps` keeps the clusters of counted lamports (runs whose neighbours are at most
`LAMPORT_JUMP` apart), so a replica checks each newly counted op in ``O(log k)`` for ``k``
clusters, which is one more than the number of jumps.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass

from statefuse.core.op import MAX_LAMPORT
from statefuse.sync.change import VerifiedChange

#: How far above the next lower counted lamport an op's lamport may be before the op is reported
#: as a clock jump: 2**32, far more than any honest history (a billion ops a second for four
#: seconds stays below it only if written by one writer that saw all of them; honest writers
#: move one step past what they have seen) and far less than `MAX_LAMPORT`, so climbing to the
#: ceiling unreported takes more than two billion counted ops.
LAMPORT_JUMP = 2**32


@dataclass(frozen=True, slots=True)
class ClockJump:
    """One counted change that holds an op at a jump lamport (see the module docstring): kept
    and counted, reported so that an operator can revoke its author."""

    author: bytes
    change_id: bytes
    lamport: int
    #: How far above the next lower counted lamport (0 when there is none) it is.
    gap: int

    def describe(self) -> str:
        """The one line users see: ``clock jump by author 1a2b3c4d5e6f… to lamport …``."""
        return (
            f"clock jump by author {self.author.hex()[:12]}… to lamport {self.lamport}"
            f" ({self.gap} past the next lower counted lamport; change"
            f" {self.change_id.hex()[:12]}…): kept and counted; revoke the author if it"
            " should not move every writer's clock"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "author": self.author.hex(),
            "change_id": self.change_id.hex(),
            "lamport": self.lamport,
            "gap": self.gap,
        }


class LamportGaps:
    """The distinct lamports of a set of counted ops, as clusters: sorted, disjoint runs
    ``[start, end]`` whose lamports are at most `LAMPORT_JUMP` apart. A cluster's start is a
    jump when it lies more than `LAMPORT_JUMP` above the previous cluster's end (or above 0)."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, lamports: Iterable[int] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for lamport in sorted(set(lamports)):
            if self._ends and lamport - self._ends[-1] <= LAMPORT_JUMP:
                self._ends[-1] = lamport
            else:
                self._starts.append(lamport)
                self._ends.append(lamport)

    def _gap(self, i: int) -> int:
        return self._starts[i] - (self._ends[i - 1] if i else 0)

    def add(self, lamport: int) -> int | None:
        """Take in one counted op's lamport. Returns its gap when the op is a jump as the rule
        names it (a new jump, or another op at a jump lamport below `MAX_LAMPORT`), else None.
        A jump that a later op fills in stops being one (`jumps` says which remain)."""
        starts, ends = self._starts, self._ends
        i = bisect_right(starts, lamport) - 1
        if i >= 0 and lamport <= ends[i]:  # inside a cluster
            if lamport == starts[i] and lamport < MAX_LAMPORT:
                gap = self._gap(i)
                return gap if gap > LAMPORT_JUMP else None
            return None
        if i >= 0 and lamport - ends[i] <= LAMPORT_JUMP:  # extends cluster i
            ends[i] = lamport
            found = None
        else:
            gap = lamport - (ends[i] if i >= 0 else 0)
            i += 1
            starts.insert(i, lamport)
            ends.insert(i, lamport)
            found = gap if gap > LAMPORT_JUMP else None
        if i + 1 < len(starts) and starts[i + 1] - ends[i] <= LAMPORT_JUMP:  # joins the next
            ends[i] = ends[i + 1]
            del starts[i + 1], ends[i + 1]
        return found

    def jumps(self) -> dict[int, int]:
        """jump lamport -> its gap, for every cluster start that is a jump."""
        return {s: self._gap(i) for i, s in enumerate(self._starts) if self._gap(i) > LAMPORT_JUMP}

    def __len__(self) -> int:
        """How many clusters."""
        return len(self._starts)


def clock_jumps(counted: Iterable[VerifiedChange]) -> list[ClockJump]:
    """The clock jumps among ``counted`` (the changes that count, in the order this replica
    accepted them): one record per change holding an op at a jump lamport, by lamport, then
    change id (see the module docstring for the rule). ``O(n log n)`` in the ops."""
    changes = list(counted)
    jumps = LamportGaps(op.lamport for c in changes for op in c.ops).jumps()
    if not jumps:
        return []
    found: dict[tuple[int, bytes], ClockJump] = {}
    at_ceiling = False
    for c in changes:
        for lamport in sorted({op.lamport for op in c.ops if op.lamport in jumps}):
            if lamport == MAX_LAMPORT:
                if at_ceiling:
                    continue
                at_ceiling = True
            jump = ClockJump(c.author, c.change_id, lamport, jumps[lamport])
            found[(lamport, c.change_id)] = jump
    return [found[k] for k in sorted(found)]
