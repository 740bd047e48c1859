"""The op-set: a grow-only set of ops keyed by ``op_id`` (SEMANTICS §3).

Invariant: every op in an OpSet hashed to its id when it was added, so union is plain set union
of ids and needs no re-verification; an op that was tampered with after it was built (its
content no longer hashes to its ``op_id``) is refused at the door.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from statefuse.error import OpIdMismatch, OpRuleError
from statefuse.op import Op, _OpBase


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


class OpSet:
    """A grow-only set of ops. ``a | b`` and ``a.merge(b)`` are set union; iteration is by op_id."""

    __slots__ = ("_ops", "_order")

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self._ops: dict[bytes, Op] = {}
        self._order: list[bytes] | None = None
        self.update(ops)

    def add(self, op: Op) -> bool:
        """Add one op; True if it was new. Raises OpIdMismatch / OpRuleError for a bad op."""
        op = verify_op(op)
        if op.op_id in self._ops:
            return False
        self._ops[op.op_id] = op
        self._order = None
        return True

    def update(self, ops: Iterable[Op]) -> list[Op]:
        """Add many ops (all-or-nothing); return the ones that were new, in input order.

        If any op is bad, nothing is added and the error names its position.
        """
        if isinstance(ops, OpSet):
            new = [op for oid, op in ops._ops.items() if oid not in self._ops]
        else:
            new = []
            seen: set[bytes] = set()
            for i, op in enumerate(ops):
                op = verify_op(op, f"ops[{i}]")
                if op.op_id not in self._ops and op.op_id not in seen:
                    seen.add(op.op_id)
                    new.append(op)
        for op in new:
            self._ops[op.op_id] = op
        if new:
            self._order = None
        return new

    def merge(self, other: OpSet) -> OpSet:
        """A new OpSet holding the union of both (neither operand changes)."""
        if not isinstance(other, OpSet):
            raise OpRuleError("other", "opset-type", f"expected OpSet, got {type(other).__name__}")
        out = OpSet()
        out._ops = {**self._ops, **other._ops}
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
        return self._ops.values()

    def get(self, op_id: bytes) -> Op | None:
        return self._ops.get(op_id)

    def ids(self) -> list[bytes]:
        """All op ids, sorted."""
        if self._order is None:
            self._order = sorted(self._ops)
        return list(self._order)

    def __iter__(self) -> Iterator[Op]:
        if self._order is None:
            self._order = sorted(self._ops)
        ops = self._ops
        return (ops[i] for i in self._order)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, bytes):
            return item in self._ops
        if isinstance(item, _OpBase):
            return item.op_id in self._ops
        return False

    def __len__(self) -> int:
        return len(self._ops)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OpSet):
            return NotImplemented
        return self._ops.keys() == other._ops.keys()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpSet({len(self._ops)} ops)"
