"""The op-set: a grow-only set of ops keyed by ``op_id`` (SEMANTICS §3).

Invariant: every op in an OpSet hashed to its id when it was added, so union is plain set union
of ids and needs no re-verification; an op that was tampered with after it was built (its
content no longer hashes to its ``op_id``) is refused at the door.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import TypeVar

from statefuse.core.error import OpIdMismatch, OpRuleError
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Op, _OpBase

_O = TypeVar("_O")


def verify_op(op: object, where: str = "op") -> Op:
    """Return ``op`` if it is an op whose content hashes to its ``op_id``.

    Raises OpRuleError for a non-op and OpIdMismatch for a tampered op.
    """
    if not isinstance(op, _OpBase):
        raise OpRuleError(where, "op-type", f"expected an op, got {type(op).__name__}")
    try:
        actual = op.recompute_id()
    except (TypeError, ValueError, OverflowError) as exc:
        raise OpRuleError(where, "op-encodable", f"op content cannot be encoded: {exc}") from None
    if actual != op.op_id:
        raise OpIdMismatch(op.op_id, actual)
    return op  # type: ignore[return-value]


_KINDS: tuple[type, ...] = (ClaimAdded, ClaimRetracted, EvidenceAdded, DecisionAdded)


class OpSet:
    """A grow-only set of ops. ``a | b`` and ``a.merge(b)`` are set union; iteration is by op_id.

    Ops are kept in one dict per op type, so a materializer can take all claims (or all
    retractions) with one C-level dict copy instead of a Python loop over every op.
    """

    __slots__ = ("_kinds", "_order")

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self._kinds: dict[type, dict[bytes, Op]] = {k: {} for k in _KINDS}
        self._order: list[bytes] | None = None
        self.update(ops)

    @classmethod
    def of_sealed(cls, ops: Iterable[Op]) -> OpSet:
        """An OpSet of ops that hashed to their ids a moment ago: each was just decoded from
        bytes whose hash is its id, or sealed by its constructor. Skips the re-hash `update`
        does (the cost of encoding every op again); duplicates are still dropped."""
        out = cls()
        kinds = out._kinds
        for op in ops:
            kinds[type(op)].setdefault(op.op_id, op)
        return out

    def _has(self, op_id: bytes) -> bool:
        return any(op_id in d for d in self._kinds.values())

    def add(self, op: Op) -> bool:
        """Add one op; True if it was new. Raises OpIdMismatch / OpRuleError for a bad op."""
        op = verify_op(op)
        d = self._kinds[type(op)]
        if op.op_id in d:
            return False
        d[op.op_id] = op
        self._order = None
        return True

    def update(self, ops: Iterable[Op]) -> list[Op]:
        """Add many ops (all-or-nothing); return the ones that were new, in input order.

        If any op is bad, nothing is added and the error names its position.
        """
        kinds = self._kinds
        if isinstance(ops, OpSet):
            new = [
                op for k, d in ops._kinds.items() for oid, op in d.items() if oid not in kinds[k]
            ]
        else:
            new = []
            seen: set[bytes] = set()
            for i, op in enumerate(ops):
                op = verify_op(op, f"ops[{i}]")
                if op.op_id not in kinds[type(op)] and op.op_id not in seen:
                    seen.add(op.op_id)
                    new.append(op)
        for op in new:
            kinds[type(op)][op.op_id] = op
        if new:
            self._order = None
        return new

    def merge(self, other: OpSet) -> OpSet:
        """A new OpSet holding the union of both (neither operand changes)."""
        if not isinstance(other, OpSet):
            raise OpRuleError("other", "opset-type", f"expected OpSet, got {type(other).__name__}")
        out = OpSet()
        out._kinds = {k: {**self._kinds[k], **other._kinds[k]} for k in _KINDS}
        return out

    def __or__(self, other: OpSet) -> OpSet:
        if not isinstance(other, OpSet):
            return NotImplemented
        return self.merge(other)

    def __ior__(self, other: OpSet) -> OpSet:
        if not isinstance(other, OpSet):
            return NotImplemented
        self.update(other)
        return self

    def unordered(self) -> Iterable[Op]:
        """The ops in no particular order: for bulk consumers whose result ignores order."""
        return itertools.chain.from_iterable(d.values() for d in self._kinds.values())

    def of_kind(self, kind: type[_O]) -> Mapping[bytes, _O]:
        """op_id -> op for every op of one type (a read-only view; copy it to keep it)."""
        return MappingProxyType(self._kinds[kind])  # type: ignore[arg-type]

    def get(self, op_id: bytes) -> Op | None:
        for d in self._kinds.values():
            op = d.get(op_id)
            if op is not None:
                return op
        return None

    def _all_ids(self) -> list[bytes]:
        return [oid for d in self._kinds.values() for oid in d]

    def ids(self) -> list[bytes]:
        """All op ids, sorted."""
        if self._order is None:
            self._order = sorted(self._all_ids())
        return list(self._order)

    def __iter__(self) -> Iterator[Op]:
        if self._order is None:
            self._order = sorted(self._all_ids())
        get = self.get
        return (get(i) for i in self._order)  # type: ignore[misc]

    def __contains__(self, item: object) -> bool:
        if isinstance(item, bytes):
            return self._has(item)
        if isinstance(item, _OpBase):
            return item.op_id in self._kinds.get(type(item), {})
        return False

    def __len__(self) -> int:
        return sum(len(d) for d in self._kinds.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OpSet):
            return NotImplemented
        return all(self._kinds[k].keys() == other._kinds[k].keys() for k in _KINDS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpSet({len(self)} ops)"
