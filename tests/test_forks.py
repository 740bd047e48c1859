"""Forks count and are reported; a replica never forks itself (SEMANTICS §8).

The loss stories of the reliability issue, through the library: a restored backup, one key in
two stores, a replica's own changes coming back from a peer. On every replica, every claim an
honest write ever acknowledged stays active, and the fork is reported.
"""

from __future__ import annotations

import shutil
import warnings
from itertools import permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Writer
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.storage.store import StoreError
from statefuse.sync.change import sign_change
from statefuse.sync.changelog import ChangeLog, Ignored
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import OwnFeedWarning, Replica, ReplicaError, key_path
from statefuse.sync.trust import TrustMode, TrustWriter

SPACE = "team"


def _claims(r: Replica) -> set[object]:
    return {c.value for c in r.state().active_claims()}


def _sync(*replicas: Replica) -> None:
    """Full sync: every replica merges every other, twice (changes relayed once)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OwnFeedWarning)
        for _ in range(2):
            for a in replicas:
                for b in replicas:
                    if a is not b:
                        a.merge(b)


def test_a_restored_backup_that_writes_forks_its_feed_and_every_peer_keeps_both_branches(tmp_path):
    path, backup = tmp_path / "a.db", tmp_path / "backup"
    backup.mkdir()
    peer = Replica.memory(space=SPACE)
    a = Replica.open(path, create=True, space=SPACE)
    a.add_claim("p", "x", "v", "one")
    a.add_claim("p", "x", "w", "two")
    a.close()
    for f in (path, key_path(path)):
        shutil.copy2(f, backup / f.name)
    a = Replica.open(path)
    a.add_claim("p", "y", "v", "three")  # acknowledged, then the disk dies
    a.add_claim("p", "y", "w", "four")
    peer.merge(a)
    a.close()
    for f in (path, key_path(path)):
        shutil.copy2(backup / f.name, f)
    for end in ("-wal", "-shm"):
        (tmp_path / f"a.db{end}").unlink(missing_ok=True)

    restored = Replica.open(path)
    assert _claims(restored) == {"one", "two"}
    restored.add_claim("p", "z", "v", "five")  # seq 3 again: it cannot know
    report = restored.merge(peer)
    peer.merge(restored)
    everything = {"one", "two", "three", "four", "five"}
    assert _claims(restored) == _claims(peer) == everything
    assert restored.state().digest() == peer.state().digest()
    (fork,) = report.forks
    assert (fork.author, fork.seq, len(fork.change_ids)) == (restored.author, 3, 2)
    assert restored.forks() == peer.forks() == [fork]
    assert "both branches kept" in fork.describe()
    assert restored.verdicts() == {}
    # and it writes on after its highest head, never forking again
    restored.add_claim("p", "z", "w", "six")
    assert restored.last_change(restored.author)[0] == 5
    peer.merge(restored)
    assert len(peer.forks()) == 1 and "six" in _claims(peer)
    restored.close()


def test_a_replica_given_its_own_changes_by_a_peer_signs_after_them_and_says_so_once():
    k = SigningKey.generate()
    a = Replica.memory(space=SPACE, key=k)
    a.add_claim("p", "x", "v", 1)
    a.add_claim("p", "x", "w", 2)
    b = Replica.memory(space=SPACE, key=k)
    with pytest.warns(OwnFeedWarning) as caught:
        report = b.merge(a)
    assert len(caught) == 1 and "writing continues after seq 2" in str(caught[0].message)
    assert report.own_from_elsewhere == 2 and report.forks == ()
    b.add_claim("p", "x", "u", 3)
    assert b.last_change(k.author)[0] == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", OwnFeedWarning)  # a's own feed advanced by b? it says so
        with pytest.raises(OwnFeedWarning):
            a.merge(b)
    a2 = Replica.memory(space=SPACE, key=k)
    _sync(a, a2, b)
    assert a.forks() == [] and b.forks() == []  # b followed a's head: no fork at all
    assert _claims(a) == _claims(b) == {1, 2, 3}


def test_one_key_in_two_memory_stores_that_both_write_keeps_both_branches_everywhere():
    k = SigningKey.generate()
    a = Replica.memory(space=SPACE, key=k)
    b = Replica.memory(space=SPACE, key=k)
    a.add_claim("p", "a", "v", "from a")
    b.add_claim("p", "b", "v", "from b")  # seq 1 twice: neither knew
    peer = Replica.memory(space=SPACE)
    _sync(a, b, peer)
    for r in (a, b, peer):
        assert _claims(r) == {"from a", "from b"}
        assert [(f.author, f.seq) for f in r.forks()] == [(k.author, 1)]
    a.add_claim("p", "a", "w", "later")
    _sync(a, b, peer)
    assert [(f.seq) for f in peer.forks()] == [1]  # a wrote after its highest head
    assert "later" in _claims(peer)


def test_a_key_file_bound_to_one_store_is_refused_for_another_unless_adopted(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space=SPACE).close()
    shutil.copy2(key_path(tmp_path / "a.db"), key_path(tmp_path / "b.db"))
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "b.db", create=True, space=SPACE)
    assert (err.value.field, err.value.rule) == ("key", "key-bound-elsewhere")
    assert "adopt_key=True" in err.value.message
    key = SigningKey.load(key_path(tmp_path / "a.db"))
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "c.db", create=True, space=SPACE, key=key)
    assert err.value.rule == "key-bound-elsewhere"
    with Replica.open(tmp_path / "b.db", create=True, space=SPACE, adopt_key=True) as b:
        assert b.author == key.author
        b.add_claim("p", "x", "v", 1)
    with Replica.open(tmp_path / "b.db") as b:  # its key file is now bound to b
        assert b.author == key.author and not b.readonly
    with Replica.open(tmp_path / "a.db") as a:  # and a's to a
        assert not a.readonly


def test_a_key_of_another_author_is_refused_for_an_existing_store(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space=SPACE).close()
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "a.db", key=SigningKey.generate())
    assert err.value.rule == "key-author"


def test_a_store_of_the_first_release_binds_its_key_file_on_the_first_writable_open(tmp_path):
    path = tmp_path / "a.db"
    with Replica.open(path, create=True, space=SPACE) as r:
        author = r.author
    old = key_path(path).read_bytes()[:70]  # the version 1 layout: no binding
    key_path(path).write_bytes(old[:5] + b"\x01" + old[6:70])
    assert SigningKey.load(key_path(path)).bound_to is None
    with Replica.open(path) as r:
        assert r.author == author and not r.readonly
    assert SigningKey.load(key_path(path)).bound_to is not None


# --- revocation by named changes ----------------------------------------------------------------


def _closed_pair() -> tuple[Replica, Replica]:
    root = SigningKey.generate()
    hub = Replica.memory(space=SPACE, key=root, mode="closed", root=root.author)
    alice = Replica.memory(space=SPACE, mode="closed", root=root.author)
    hub.admit(alice.author)
    alice.merge(hub)
    return hub, alice


def test_revoke_keeps_every_head_the_root_knows_and_nothing_signed_later():
    hub, alice = _closed_pair()
    alice.add_claim("p", "x", "v", "kept")
    hub.merge(alice)
    hub.revoke(alice.author)
    alice.add_claim("p", "x", "w", "after")
    hub.merge(alice)
    alice.merge(hub)
    for r in (hub, alice):
        assert _claims(r) == {"kept"}
        assert set(r.verdicts().values()) == {Ignored.REVOKED}


def test_the_through_seq_shorthand_is_refused_once_the_feed_forked_at_that_seq():
    hub, alice = _closed_pair()
    twin = Replica.memory(space=SPACE, key=alice.key, mode="closed", root=hub.root)
    twin.merge(hub)
    alice.add_claim("p", "x", "v", 1)
    twin.add_claim("p", "x", "v", 2)
    hub.merge(alice)
    hub.merge(twin)
    with pytest.raises(ReplicaError) as err:
        hub.revoke(alice.author, through_seq=1)
    assert err.value.rule == "revocation-ambiguous"
    hub.revoke(alice.author)  # keep both heads
    assert _claims(hub) == {1, 2}


def _change(key: SigningKey, seq: int, prev: bytes | None, tag: str):
    op = Writer(key.author, clock=lambda: 0).claim("p", tag, "v", tag)
    fp = DEFAULT_REGISTRY.fingerprint
    return sign_change(key, space=SPACE, seq=seq, prev=prev, registry=fp, ops=[op])


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_every_arrival_order_of_a_forked_feed_and_a_revocation_gives_the_same_verdicts(data):
    root, alice = SigningKey.generate(), SigningKey.generate()
    a1 = _change(alice, 1, None, "a1")
    a2 = _change(alice, 2, a1.change_id, "a2")
    f2 = _change(alice, 2, a1.change_id, "f2")
    f3 = _change(alice, 3, f2.change_id, "f3")
    keep = data.draw(
        st.sampled_from([[a2.change_id], [f2.change_id], [a2.change_id, f3.change_id], []])
    )
    cut_op = TrustWriter(root.author).cut_off(alice.author, keep=keep)
    fp = DEFAULT_REGISTRY.fingerprint
    cut = sign_change(root, space=SPACE, seq=1, prev=None, registry=fp, ops=[cut_op])
    changes = [a1, a2, f2, f3, cut]
    reference = ChangeLog(SPACE, root=root.author, mode=TrustMode.OPEN)
    for c in changes:
        reference.receive(c.data, seen_ms=0)
    log = ChangeLog(SPACE, root=root.author, mode=TrustMode.OPEN)
    for c in data.draw(st.permutations(changes)):
        log.receive(c.data, seen_ms=0)
    assert log.verdicts() == reference.verdicts()
    assert log.materialize().digest() == reference.materialize().digest()
    assert [f.seq for f in log.forks()] == [2]
    counted = {c.change_id for c in changes[:4]} - set(log.verdicts())
    expected = {a1.change_id, *keep} if keep else set()
    if f3.change_id in keep:
        expected.add(f2.change_id)
    assert counted == expected


def test_all_arrival_orders_of_a_forked_feed_through_replicas_converge():
    k = SigningKey.generate()
    a = Replica.memory(space=SPACE, key=k)
    b = Replica.memory(space=SPACE, key=k)
    a.add_claim("p", "x", "v", 1)
    a.add_claim("p", "x", "v", 2)
    b.add_claim("p", "y", "v", 3)
    b.add_claim("p", "y", "v", 4)
    changes = a.all_change_bytes() + b.all_change_bytes()
    digests = set()
    for order in permutations(changes):
        r = Replica.memory(space=SPACE)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OwnFeedWarning)
            for c in order:
                r.receive([c])
        assert r.verdicts() == {} and len(r.forks()) == 2
        digests.add(r.state().digest())
    assert len(digests) == 1


def test_a_refused_create_leaves_no_store_behind(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space=SPACE).close()
    key = SigningKey.load(key_path(tmp_path / "a.db"))
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "c.db", create=True, space=SPACE, key=key)
    assert err.value.rule == "key-bound-elsewhere"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.db",
        "a.db.clean",  # a.db's clean mark (statefuse.storage.filemark): nothing of c.db
        "a.db.key",
        "a.db.lock",
    ]
    with Replica.open(tmp_path / "c.db", create=True, space=SPACE) as c:
        assert not c.readonly and c.author != key.author


def test_last_change_of_a_feed_forked_at_its_top_is_the_same_after_a_reopen(tmp_path):
    path = tmp_path / "a.db"
    a = Replica.open(path, create=True, space=SPACE)
    twin = Replica.memory(space=SPACE, key=a.key)
    for i in range(3):
        a.add_claim("ns", "x", "p", i)
        twin.add_claim("ns", "y", "p", i)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OwnFeedWarning)
        a.merge(twin)
    before = a.last_change(a.author)
    assert before == max((3, c) for c in a.heads(a.author))
    a.close()
    for load in ("snapshot", "verify"):
        with Replica.open(path, load=load) as again:
            assert again.last_change(again.author) == before
