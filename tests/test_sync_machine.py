"""Replicas exchanging signed changes, beside a model set of every genuine change.

Rules write, sync pairs, inject forged and duplicated changes, revoke and equivocate; after every
step each replica's accepted changes are genuine (a subset of the model), and after a full sync
every replica holds the same changes, reaches the same trust verdicts and the same state digest
as a fresh replica fed everything in one fixed order — so no verdict depends on arrival order.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync import (
    ChangeLog,
    QuarantineReason,
    SigningKey,
    TrustMode,
    TrustWriter,
    UnverifiedChange,
    VerificationError,
    sign_change,
    verify_change,
)

SPACE = "machine"
FP = DEFAULT_REGISTRY.fingerprint
REPLICAS = 3
AUTHORS = 3


class _Feed:
    def __init__(self, seed: int) -> None:
        self.key = SigningKey.from_seed(bytes([seed]) * 32)
        self.writer = Writer(self.key.author, clock=lambda: 0)
        self.seq = 0
        self.prev: bytes | None = None
        self.history: list[tuple[int, bytes]] = []  # (seq, change_id) of the main line

    def change(self, ops):
        self.seq += 1
        c = sign_change(self.key, space=SPACE, seq=self.seq, prev=self.prev, registry=FP, ops=ops)
        self.prev = c.change_id
        self.history.append((c.seq, c.change_id))
        return c


class SyncMachine(RuleBasedStateMachine):
    @initialize(closed=st.booleans())
    def setup(self, closed: bool) -> None:
        self.root = _Feed(200)
        self.trust = TrustWriter(self.root.key.author)
        self.authors = [_Feed(i + 1) for i in range(AUTHORS)]
        mode = TrustMode.CLOSED if closed else TrustMode.OPEN
        self.logs = [
            ChangeLog(SPACE, root=self.root.key.author, mode=mode) for _ in range(REPLICAS)
        ]
        self.mode = mode
        self.genuine: dict[bytes, bytes] = {}  # change_id -> bytes
        self.received: list[set[bytes]] = [set() for _ in range(REPLICAS)]
        admit = self.root.change([self.trust.admit(a.key.author) for a in self.authors[:2]])
        self._deliver(0, admit)

    def _deliver(self, r: int, change) -> None:
        self.genuine[change.change_id] = change.data
        self._send(r, change.data)

    def _send(self, r: int, data: bytes) -> None:
        self.received[r].add(data)
        self.logs[r].receive(data, seen_ms=0)

    @rule(a=st.integers(0, AUTHORS - 1), r=st.integers(0, REPLICAS - 1), v=st.integers(0, 3))
    def write(self, a: int, r: int, v: int) -> None:
        feed = self.authors[a]
        self._deliver(r, feed.change([feed.writer.claim("p", "k", "v", v)]))

    @rule(a=st.integers(0, AUTHORS - 1), r=st.integers(0, REPLICAS - 1))
    def equivocate(self, a: int, r: int) -> None:
        feed = self.authors[a]
        if len(feed.history) < 1:
            return
        seq, _ = feed.history[-1]
        prev = feed.history[-2][1] if len(feed.history) > 1 else None
        fork = sign_change(
            feed.key,
            space=SPACE,
            seq=seq,
            prev=prev,
            registry=FP,
            ops=[feed.writer.claim("p", "fork", "v", seq)],
        )
        self._deliver(r, fork)

    @rule(a=st.integers(0, AUTHORS - 1), r=st.integers(0, REPLICAS - 1), back=st.integers(0, 2))
    def revoke(self, a: int, r: int, back: int) -> None:
        feed = self.authors[a]
        keep = feed.history[: max(len(feed.history) - back, 0)]
        seq, cid = keep[-1] if keep else (0, None)
        op = self.trust.revoke(feed.key.author, through_seq=seq, through_change=cid)
        self._deliver(r, self.root.change([op]))

    @rule(r=st.integers(0, REPLICAS - 1), pick=st.integers(0, 10_000), at=st.integers(0, 10_000))
    def forge(self, r: int, pick: int, at: int) -> None:
        if not self.genuine:
            return
        data = bytearray(sorted(self.genuine.values())[pick % len(self.genuine)])
        data[at % len(data)] ^= 0x40
        before = self.logs[r].change_ids()
        self._send(r, bytes(data))
        assert self.logs[r].change_ids() == before or bytes(data) in self.genuine.values()

    @rule(r=st.integers(0, REPLICAS - 1), pick=st.integers(0, 10_000))
    def duplicate(self, r: int, pick: int) -> None:
        if self.received[r]:
            data = sorted(self.received[r])[pick % len(self.received[r])]
            self._send(r, data)

    @rule(a=st.integers(0, REPLICAS - 1), b=st.integers(0, REPLICAS - 1))
    def sync_pair(self, a: int, b: int) -> None:
        for c in [*self.logs[a].changes(), *self.logs[a].pending()]:
            self._send(b, c.data)

    @invariant()
    def accepted_changes_are_genuine(self) -> None:
        for log in self.logs:
            assert set(log.change_ids()) <= set(self.genuine)

    def teardown(self) -> None:
        if not hasattr(self, "logs"):
            return
        for _ in range(2):
            for a in range(REPLICAS):
                for b in range(REPLICAS):
                    self.sync_pair(a, b)
        reference = ChangeLog(SPACE, root=self.root.key.author, mode=self.mode)
        for data in sorted(self.genuine.values()):
            reference.receive(data, seen_ms=0)
        for log in self.logs:
            assert log.change_ids() == reference.change_ids()
            assert log.verdicts() == reference.verdicts()
            assert log.equivocations() == reference.equivocations()
            assert log.materialize().digest() == reference.materialize().digest()
        for log in self.logs:
            for entry in log.quarantine:
                if entry.reason is QuarantineReason.BROKEN_CHAIN:
                    continue  # judged against the predecessor, checked by the equalities above
                with pytest.raises(VerificationError) as err:
                    verify_change(UnverifiedChange(entry.data), space=SPACE)
                assert err.value.reason is entry.reason


TestSyncMachine = SyncMachine.TestCase
# Each example signs and verifies dozens of changes (~0.2 s); 140 runs keep CI within budget.
TestSyncMachine.settings = settings(
    settings.default, max_examples=min(settings.default.max_examples, 140)
)
