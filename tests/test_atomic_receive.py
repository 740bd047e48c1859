"""Receiving is atomic per call (SEMANTICS §8): a call that raises leaves log, state, store,
pending area and quarantine exactly as a replica that never saw the call.

The property test injects a failure at every position of a random batch — a typed input error,
a full quarantine, a failing store write — and compares everything with a twin replica.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.registry import DEFAULT_REGISTRY
from statefuse.storage.store import MemoryStore, StoreInfo, StoreWrite
from statefuse.sync.change import ChangeInputError
from statefuse.sync.changelog import AreaFullError, Bounds
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

SPACE = "team"


class _FailingStore(MemoryStore):
    """A memory store whose next write fails when asked (a full disk, a yanked USB stick)."""

    fail_next = False

    def write(self, batch: StoreWrite) -> None:
        if self.fail_next:
            self.fail_next = False
            raise OSError(28, "No space left on device")
        super().write(batch)


def _replica() -> Replica:
    store = _FailingStore()
    store.initialize(StoreInfo(space=SPACE, registry=DEFAULT_REGISTRY.fingerprint))
    return Replica(store, SigningKey.generate(), clock=lambda: 0)


def _pool() -> list[bytes]:
    """Changes of two authors (chains, so that a missing predecessor parks the rest) and
    garbage that is quarantined."""
    out: list[bytes] = []
    for who in range(2):
        w = Replica.memory(space=SPACE)
        for i in range(4):
            w.add_claim("p", f"a{who}", f"k{i}", i)
        out += w.all_change_bytes()
    out += [b"garbage %d" % i for i in range(3)]
    return out


POOL = _pool()


def _everything(r: Replica) -> tuple[object, ...]:
    store = r.store
    return (
        r.log.change_ids(),
        [c.change_id for c in r.log.pending()],
        r.log.quarantine.verdicts(),
        {e.key: e.count for e in r.log.quarantine},
        r.state().digest(),
        [d for _, d in store.accepted()],
        store.pending(),
        [(q.key, q.count) for q in store.quarantine()],
        r.forks(),
    )


items = st.lists(st.sampled_from(range(len(POOL))), max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    before=items,
    batch=items,
    failure=st.sampled_from(["typed", "store", "quarantine-full"]),
    where=st.integers(min_value=0, max_value=12),
)
def test_a_receive_that_raises_leaves_everything_as_a_replica_that_never_saw_it(
    before, batch, failure, where
):
    target, twin = _replica(), _replica()
    for r in (target, twin):
        r.receive([POOL[i] for i in before])
    expected = _everything(twin)
    call: list[object] = [POOL[i] for i in batch]
    if failure == "typed":
        call.insert(min(where, len(call)), None)
        with pytest.raises(ChangeInputError) as err:
            target.receive(call)  # type: ignore[arg-type]
        assert err.value.field.startswith("changes[")
    elif failure == "store":
        target.store.fail_next = True  # type: ignore[attr-defined]
        with pytest.raises(OSError):
            target.receive(call)  # type: ignore[arg-type]
    else:
        target.log.bounds = Bounds(quarantine_entries=len(target.log.quarantine) + 1)
        twin.log.bounds = target.log.bounds
        garbage = [b"more garbage", b"and more"]
        call[min(where, len(call)) : min(where, len(call))] = garbage
        with pytest.raises(AreaFullError):
            target.receive(call)  # type: ignore[arg-type]
    assert _everything(target) == expected
    # and the call succeeds afterwards exactly as on the twin
    good = [c for c in call if isinstance(c, bytes) and not c.startswith(b"more")]
    good = [c for c in good if not c.startswith(b"and more")]
    target.log.bounds = twin.log.bounds = Bounds()
    assert target.receive(good) == twin.receive(good)
    assert _everything(target) == _everything(twin)


def test_a_typed_error_after_a_good_change_takes_in_nothing():
    r = _replica()
    good = POOL[0]
    with pytest.raises(ChangeInputError) as err:
        r.receive([good, None])  # type: ignore[list-item]
    assert err.value.field == "changes[1]"
    assert len(r.log) == 0 and r.store.count() == 0 and r.change_ids() == []
