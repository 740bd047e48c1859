"""The materializer: op-set -> State, in full or incrementally (SEMANTICS §3–§6).

Invariant: ``materialize`` is a pure function of the set of ops and the registry (no I/O, no
clock, no randomness, no dependence on delivery order or duplicates), and a `Materializer` fed
any sequence of the same ops ends in a State equal to it (same digest, same answers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from statefuse.core.error import OpRuleError
from statefuse.core.index import Index, build, held_once
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Op
from statefuse.core.opset import OpSet
from statefuse.core.state import State
from statefuse.registry import DEFAULT_REGISTRY, Registry


def _check_registry(registry: object) -> Registry:
    if not isinstance(registry, Registry):
        raise OpRuleError(
            "registry", "registry-type", f"expected Registry, got {type(registry).__name__}"
        )
    return registry


def materialize(ops: OpSet | Iterable[Op], *, registry: Registry = DEFAULT_REGISTRY) -> State:
    """The State of an op-set.

    ``ops`` may be an OpSet or any iterable of ops (duplicates are ignored; each op is checked
    against its id first). Raises OpIdMismatch / OpRuleError for a bad op.
    """
    registry = _check_registry(registry)
    if not isinstance(ops, OpSet):
        ops = OpSet(ops)
    return State(_build(ops, registry))


def _build(ops: OpSet, registry: Registry) -> Index:
    # One C-level copy per op type: the index owns its dicts, the OpSet keeps growing.
    return build(
        ops.of_kind(ClaimAdded).copy(),  # type: ignore[attr-defined]
        ops.of_kind(ClaimRetracted).copy(),  # type: ignore[attr-defined]
        ops.of_kind(EvidenceAdded).copy(),  # type: ignore[attr-defined]
        ops.of_kind(DecisionAdded).copy(),  # type: ignore[attr-defined]
        registry,
    )


_op_id = attrgetter("op_id")


class Materializer:
    """Keeps a State up to date as ops arrive, one or many at a time.

    ``state()`` hands out an immutable snapshot without copying; the next ``apply`` after a
    snapshot copies the index once (copy-on-write), so a reader never sees later writes.
    """

    __slots__ = ("_carry", "_ix", "_shared", "_state")

    def __init__(
        self, ops: OpSet | Iterable[Op] = (), *, registry: Registry = DEFAULT_REGISTRY
    ) -> None:
        registry = _check_registry(registry)
        self._ix: Index = _build(ops if isinstance(ops, OpSet) else OpSet(ops), registry)
        self._shared = False
        self._state: State | None = None
        #: The memo of derived data (`State.derived`) of the last State handed out: the next
        #: State may carry it over (see `State.changes_since`).
        self._carry: dict[Callable[[State], object], object] | None = None

    @classmethod
    def from_state(cls, state: State) -> Materializer:
        """Continue from an existing State (which itself stays unchanged)."""
        m = cls.__new__(cls)
        m._ix = state._ix
        m._shared = True
        m._state = state
        m._carry = state._derived
        return m

    @classmethod
    def from_checked(
        cls,
        claims: dict[bytes, ClaimAdded],
        retractions: dict[bytes, ClaimRetracted],
        evidence: dict[bytes, EvidenceAdded],
        decisions: dict[bytes, DecisionAdded],
        *,
        registry: Registry = DEFAULT_REGISTRY,
    ) -> Materializer:
        """Start from ops already split by type (op id -> op) and known to hash to their ids,
        e.g. ops restored from an authenticated replica snapshot: nothing is re-checked, and
        the materializer takes ownership of the four dicts. The State is the one `materialize`
        gives for the same ops."""
        m = cls.__new__(cls)
        m._ix = build(claims, retractions, evidence, decisions, _check_registry(registry))
        m._shared = False
        m._state = None
        m._carry = None
        return m

    @property
    def registry(self) -> Registry:
        return self._ix.registry

    def ops(self) -> Iterator[Op]:
        """Every op the state is made of (claims, retractions, evidence, decisions): what a
        store's derived state is rebuilt from (`statefuse.storage.storeindex`)."""
        ix = self._ix
        yield from ix.claims.values()
        yield from ix.retractions.values()
        yield from ix.evidence.values()
        yield from ix.decisions.values()

    def apply(self, op: Op) -> bool:
        """Apply one op; False if it was already there. Raises OpIdMismatch for a tampered op."""
        return bool(self.apply_all((op,)))

    def apply_all(self, ops: Iterable[Op]) -> list[Op]:
        """Apply many ops (all are checked first; nothing is applied if one is bad).

        Returns the ops that were new.
        """
        batch = OpSet(ops) if not isinstance(ops, OpSet) else ops
        if self._shared:
            # A State is a snapshot, so its index is copied before the next write, unless
            # nobody holds that State or anything of its index any more (the agent loop's
            # case: read, drop, write): then no one can see the write, and copying a large
            # index (and freeing the old one) would cost more than the write itself.
            if not self._state_unheld():
                self._ix = self._ix.copy()
            self._shared = False
        # The index is order-independent; the result is in op_id order, as iterating the
        # batch would give it, sorted once at C speed instead of looked up id by id.
        applied = [op for op in batch.unordered() if self._ix.apply(op)]
        if applied:
            if self._state is not None:
                self._carry = self._state._derived
            self._state = None
            applied.sort(key=_op_id)
        return applied

    def _state_unheld(self) -> bool:
        """True when only this materializer holds its State, and only the index holds its
        containers (CPython's reference counts; elsewhere False)."""
        return held_once(self._state) and self._ix.exclusive()

    def active_at(
        self, namespace: str, subject: str, predicate: str, scope: str = "global"
    ) -> list[ClaimAdded]:
        """Active claims of one key and scope, sorted by claim_id, read from the index without
        making a State (so a writer asking between two writes copies nothing)."""
        claims = self._ix.claims
        ids = self._ix.members_at((namespace, subject, predicate, scope))
        return [claims[c] for c in sorted(ids)]

    def state(self) -> State:
        """The current State (an immutable snapshot). It knows the State before it (while that
        one lives) and which loci changed since, so derived data can carry over."""
        if self._state is None:
            touched = frozenset(self._ix.touched)
            self._ix.touched = set()
            self._state = State(self._ix, previous=self._carry, touched=touched)
            self._carry = None
        self._shared = True
        return self._state

    def __len__(self) -> int:
        ix = self._ix
        return len(ix.claims) + len(ix.retractions) + len(ix.evidence) + len(ix.decisions)
