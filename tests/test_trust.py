"""Trust as data: admission, revocation with a causal cutoff, roles, closed mode (SEMANTICS §8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse import Writer, decode_op
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.sync.change import sign_change
from statefuse.sync.changelog import ChangeLog, Ignored, TrustConfigError
from statefuse.sync.key import PublicKeyError, SigningKey
from statefuse.sync.trust import AuthorRevoked, TrustMode, TrustWriter

SPACE = "team"
FP = DEFAULT_REGISTRY.fingerprint


class Feed:
    def __init__(self, key: SigningKey | None = None) -> None:
        self.key = key or SigningKey.generate()
        self.author = self.key.author
        self.writer = Writer(self.author, clock=lambda: 0)
        self.seq, self.prev = 0, None

    def change(self, ops=None):
        ops = ops or [self.writer.claim("p", f"x{self.seq}", "v", self.seq)]
        self.seq += 1
        c = sign_change(self.key, space=SPACE, seq=self.seq, prev=self.prev, registry=FP, ops=ops)
        self.prev = c.change_id
        return c


def counted_authors(log: ChangeLog) -> set[bytes]:
    return {op.author for op in log.ops()}


def test_trust_ops_encode_and_decode_like_any_op():
    root, who = SigningKey.generate().author, SigningKey.generate().author
    t = TrustWriter(root)
    ops = [t.admit(who, ["editor"]), t.revoke(who, through_seq=3), t.grant(who, ["admin"])]
    for op in [*ops, t.withdraw(who, ["admin"])]:
        assert decode_op(op.encode()) == op


def test_admitting_a_small_order_key_is_refused():
    t = TrustWriter(SigningKey.generate().author)
    with pytest.raises(PublicKeyError) as err:
        t.admit(bytes([1]) + bytes(31))  # the identity point: verifies forged signatures
    assert err.value.rule == "small-order"


def test_closed_mode_needs_a_root_key():
    with pytest.raises(TrustConfigError) as err:
        ChangeLog(SPACE, mode=TrustMode.CLOSED)
    assert err.value.rule == "closed-needs-root"


@given(st.permutations(range(3)))
def test_an_unknown_author_counts_in_closed_mode_once_admitted_in_any_order(order):
    root, alice = Feed(), Feed()
    admit = root.change([TrustWriter(root.author).admit(alice.author, ["editor"])])
    work = alice.change()
    stranger = Feed().change()
    log = ChangeLog(SPACE, root=root.author, mode=TrustMode.CLOSED)
    for i in order:
        log.receive((admit, work, stranger)[i].data, seen_ms=0)
    assert counted_authors(log) == {alice.author}
    assert log.verdicts() == {stranger.change_id: Ignored.UNKNOWN_AUTHOR}
    assert log.trust().roles[alice.author] == {"editor"}


def test_in_open_mode_any_valid_signature_counts():
    log = ChangeLog(SPACE)
    a, b = Feed(), Feed()
    for c in (a.change(), b.change()):
        log.receive(c.data, seen_ms=0)
    assert counted_authors(log) == {a.author, b.author}


@given(st.permutations(range(5)))
def test_revocation_ignores_later_changes_whatever_the_arrival_order(order):
    root, mallory = Feed(), Feed()
    t = TrustWriter(root.author)
    kept = mallory.change()
    admit = root.change([t.admit(mallory.author)])
    revoke = root.change([t.revoke(mallory.author, through_seq=1, through_change=kept.change_id)])
    late1, late2 = mallory.change(), mallory.change()
    items = (kept, admit, revoke, late1, late2)
    log = ChangeLog(SPACE, root=root.author, mode=TrustMode.CLOSED)
    for i in order:
        log.receive(items[i].data, seen_ms=0)
    assert {op.op_id for op in log.ops()} == {op.op_id for op in kept.ops}
    assert log.verdicts() == {late1.change_id: Ignored.REVOKED, late2.change_id: Ignored.REVOKED}


def test_trust_ops_by_anyone_but_the_root_are_ignored():
    root, mallory = Feed(), Feed()
    self_admit = mallory.change([TrustWriter(mallory.author).admit(mallory.author)])
    log = ChangeLog(SPACE, root=root.author, mode=TrustMode.CLOSED)
    log.receive(self_admit.data, seen_ms=0)
    assert mallory.author not in log.trust().admitted
    assert log.verdicts() == {self_admit.change_id: Ignored.UNKNOWN_AUTHOR}


def test_the_latest_role_grant_or_withdrawal_decides():
    root, bob = Feed(), Feed()
    t = TrustWriter(root.author)
    log = ChangeLog(SPACE, root=root.author, mode=TrustMode.CLOSED)
    for ops in (
        [t.admit(bob.author, ["reader"])],
        [t.grant(bob.author, ["admin"])],
        [t.withdraw(bob.author, ["reader"])],
    ):
        log.receive(root.change(ops).data, seen_ms=0)
    assert log.trust().roles[bob.author] == {"admin"}


def test_the_earliest_of_several_revocations_wins():
    root, eve = Feed(), Feed()
    t = TrustWriter(root.author)
    c1, c2, c3 = eve.change(), eve.change(), eve.change()
    log = ChangeLog(SPACE, root=root.author)
    for c in (
        c1,
        c2,
        c3,
        root.change([t.revoke(eve.author, through_seq=2)]),
        root.change([t.revoke(eve.author, through_seq=1)]),
    ):
        log.receive(c.data, seen_ms=0)
    assert set(log.verdicts()) == {c2.change_id, c3.change_id}


def test_a_revocation_cannot_name_a_change_with_seq_zero():
    who = SigningKey.generate().author
    with pytest.raises(ValueError):
        AuthorRevoked(who, 1, 0, who, 0, b"\x03" * 32)
