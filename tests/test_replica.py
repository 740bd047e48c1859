"""The replica: open/reopen, writes as signed changes, batches, fork and merge, bundles, trust."""

from __future__ import annotations

import os
import stat
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import (
    ClaimAdded,
    ClaimLookupError,
    ClaimRetracted,
    InputError,
    format_key,
    materialize,
)
from statefuse.registry import PredicateContract, Registry
from statefuse.storage.store import StoreError
from statefuse.sync.bundle import BundleError, parse_bundle
from statefuse.sync.change import UnverifiedChange
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import (
    Observed,
    Origin,
    Replica,
    ReplicaError,
    UnknownClaimError,
    key_path,
)


def _value_of(replica: Replica, subject: str) -> list[object]:
    return sorted(repr(c.value) for c in replica.state().active_claims() if c.subject == subject)


def test_a_new_replica_saves_its_key_privately_and_reopens_as_the_same_author(tmp_path):
    path = tmp_path / "a.db"
    with Replica.open(path, create=True, space="team") as r:
        author = r.author
        r.add_claim("project", "launch", "deadline", "2026-03-25")
        digest = r.state().digest()
    assert stat.S_IMODE(os.stat(key_path(path)).st_mode) == 0o600
    with Replica.open(path) as again:
        assert again.author == author
        assert again.space == "team"
        assert again.state().digest() == digest
        # the author's feed continues where it stopped
        again.add_claim("project", "launch", "owner", "dana")
        assert again.last_change(author)[0] == 2


def test_opening_a_store_of_another_space_is_refused(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space="team").close()
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "a.db", create=True, space="elsewhere")
    assert (err.value.field, err.value.rule) == ("space", "same-space")


def test_a_new_store_needs_a_space(tmp_path):
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "a.db", create=True)
    assert err.value.rule == "required"
    assert not (tmp_path / "a.db").exists()


def test_a_store_written_under_another_registry_is_refused(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space="team").close()
    other = Registry([PredicateContract("price", normalizer="money")])
    with pytest.raises(StoreError) as err:
        Replica.open(tmp_path / "a.db", registry=other)
    assert err.value.rule == "registry-mismatch"


def test_a_second_open_of_a_live_store_writes_beside_it_and_each_sees_the_other(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space="team").close()
    with Replica.open(tmp_path / "a.db") as first, Replica.open(tmp_path / "a.db") as second:
        first.add_claim("ns", "s", "one", 1)
        second.add_claim("ns", "s", "two", 2)
        first.add_claim("ns", "s", "three", 3)
        for r in (first, second):
            assert sorted(c.value for c in r.state().active_claims()) == [1, 2, 3]
            assert r.forks() == [] and r.last_change(r.author)[0] == 3


def test_a_batch_is_one_signed_change_and_nothing_is_stored_if_it_raises(tmp_path):
    with Replica.open(tmp_path / "a.db", create=True, space="team") as r:
        with r.batch():
            for i in range(5):
                r.add_claim("ns", f"s{i}", "p", i)
        assert len(r) == 1 and len(r.state().active_claims()) == 5
        with pytest.raises(RuntimeError), r.batch():
            r.add_claim("ns", "lost", "p", 1)
            raise RuntimeError("boom")
        assert len(r) == 1
        assert r.store.count() == 1
        assert not any(c.subject == "lost" for c in r.state().active_claims())


def test_supersede_retracts_the_old_claim_exactly_and_names_the_new_one():
    r = Replica.memory(space="team")
    old = r.add_claim("project", "launch", "deadline", "2026-03-25", confidence=0.7)
    new, retraction = r.supersede(old.claim_id, "2026-03-30", "typo in the date")
    assert retraction.target_claim_id == old.claim_id
    assert retraction.superseded_by == new.claim_id
    assert (new.confidence, new.scope) == (0.7, "global")
    assert _value_of(r, "launch") == ["'2026-03-30'"]
    assert len(r) == 2  # the claim, then the new claim and its retraction as one change


def test_supersede_of_an_unknown_claim_is_a_clear_error():
    r = Replica.memory(space="team")
    with pytest.raises(ReplicaError) as err:
        r.supersede(b"\x00" * 32, "x")
    assert err.value.field == "old"


def test_a_fork_is_a_new_author_with_the_same_memory_and_merging_back_converges(tmp_path):
    planner = Replica.open(tmp_path / "planner.db", create=True, space="team")
    planner.add_claim("project", "launch", "deadline", "2026-03-25")
    scout = planner.fork(tmp_path / "scout.db")
    assert scout.author != planner.author
    assert scout.state().digest() == planner.state().digest()
    scout.add_claim("project", "launch", "deadline", "2026-04-01")
    planner.add_claim("vendor", "acme", "price", "USD 120")
    planner.merge(scout)
    scout.merge(planner)
    assert planner.state().digest() == scout.state().digest()
    assert len(planner.state().conflicts) == 1
    planner.close()
    scout.close()


def test_forking_onto_an_existing_path_is_refused(tmp_path):
    r = Replica.open(tmp_path / "a.db", create=True, space="team")
    (tmp_path / "b.db").write_bytes(b"")
    with pytest.raises(StoreError):
        r.fork(tmp_path / "b.db")
    r.close()


def test_a_tampered_change_from_a_peer_is_quarantined_with_its_reason_and_changes_nothing():
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    a.add_claim("ns", "s", "p", "genuine")
    data = bytearray(a.change_bytes(a.change_ids())[0])
    i = data.index(b"genuine")
    data[i : i + 7] = b"forged!"
    before = b.state().digest()
    report = b.receive([bytes(data)])
    assert report.quarantined == 1 and report.accepted == 0
    assert b.state().digest() == before
    [entry] = b.quarantine()
    assert entry.data == bytes(data)
    assert entry.reason in {"bad-op-id", "bad-signature", "bad-change-id", "op-id-mismatch"}
    # the genuine copy still gets in afterwards
    assert b.merge(a).accepted == 1
    assert _value_of(b, "s") == ["'genuine'"]


def test_a_change_whose_predecessor_is_missing_waits_and_survives_a_reopen(tmp_path):
    a = Replica.memory(space="team")
    a.add_claim("ns", "s", "p", 1)
    a.add_claim("ns", "s", "p", 2)
    first, second = sorted(
        (a.log.get(cid) for cid in a.change_ids()),
        key=lambda c: c.seq,  # type: ignore[union-attr]
    )
    b = Replica.open(tmp_path / "b.db", create=True, space="team")
    assert b.receive([second.data]).pending == 1
    b.close()
    b = Replica.open(tmp_path / "b.db")
    assert [c.change_id for c in b.pending()] == [second.change_id]
    report = b.receive([first.data])
    assert report.accepted == 2 and b.pending() == []
    assert b.state().digest() == a.state().digest()
    b.close()


def test_export_and_import_of_a_bundle_carries_every_change(tmp_path):
    a = Replica.memory(space="team")
    for i in range(3):
        a.add_claim("ns", f"s{i}", "p", i)
    assert a.export(tmp_path / "x.bundle") == 3
    b = Replica.memory(space="team")
    seen = []
    report = b.import_(tmp_path / "x.bundle", progress=lambda done, total: seen.append(done))
    assert report.accepted == 3 and seen[-1] == 3
    assert b.state().digest() == a.state().digest()
    assert b.import_(tmp_path / "x.bundle").duplicate == 3


def test_a_bundle_altered_in_transit_is_refused_whole_and_imports_nothing(tmp_path):
    a = Replica.memory(space="team")
    a.add_claim("ns", "s", "p", "value")
    a.export(tmp_path / "x.bundle")
    data = bytearray((tmp_path / "x.bundle").read_bytes())
    data[40] ^= 1
    (tmp_path / "y.bundle").write_bytes(bytes(data))
    b = Replica.memory(space="team")
    with pytest.raises(BundleError):
        b.import_(tmp_path / "y.bundle")
    assert len(b) == 0 and b.quarantine() == []
    (tmp_path / "z.bundle").write_bytes(bytes(data[:-10]))
    with pytest.raises(BundleError):
        b.import_(tmp_path / "z.bundle")


def test_a_bundle_for_another_space_is_refused(tmp_path):
    a = Replica.memory(space="team")
    a.add_claim("ns", "s", "p", "value")
    a.export(tmp_path / "x.bundle")
    with pytest.raises(BundleError) as err:
        Replica.memory(space="other").import_(tmp_path / "x.bundle")
    assert err.value.rule == "same-space"
    with pytest.raises(BundleError) as err:
        parse_bundle(b"not a bundle")
    assert err.value.rule == "magic"


def test_observers_see_exactly_the_ops_the_state_gains():
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    got: list[object] = []
    stop = b.observe(lambda ops: got.extend(ops))
    claim = a.add_claim("ns", "s", "p", 1)
    b.merge(a)
    b.merge(a)  # nothing new: no call
    assert got == [claim]
    stop()
    a.add_claim("ns", "s", "p", 2)
    b.merge(a)
    assert got == [claim]


def test_observers_are_told_whether_ops_were_written_here_or_taken_in_and_from_where(tmp_path):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    heard: list[Observed] = []
    b.observe(heard.append)
    mine = b.add_claim("ns", "s", "p", 1)
    theirs = a.add_claim("ns", "s", "q", 2)
    b.merge(a)
    bundled = a.add_claim("ns", "s", "r", 3)
    a.export(tmp_path / "a.bundle")
    b.import_(tmp_path / "a.bundle")
    b.receive(a.all_change_bytes(), source="http://peer")  # nothing new: no call
    assert [(tuple(o), o.origin, o.source) for o in heard] == [
        ((mine,), Origin.LOCAL, None),
        ((theirs,), Origin.RECEIVED, None),
        ((bundled,), Origin.RECEIVED, str(tmp_path / "a.bundle")),
    ]
    assert heard[0] == (mine,) and isinstance(heard[0], tuple)  # still the tuple it was


@contextmanager
def _switching_often() -> Iterator[None]:
    """Threads take turns every microsecond, so a missing lock shows up at once."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _run_together(*targets) -> None:
    failures: list[BaseException] = []

    def guarded(target) -> None:
        try:
            target()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock?)"
    assert not failures, failures


def test_two_threads_writing_to_one_replica_never_fork_its_feed():
    r = Replica.memory(space="team")

    def write(who: str) -> None:
        for i in range(100):
            r.add_claim("ns", f"{who}{i}", "p", i)

    with _switching_often():
        _run_together(lambda: write("a"), lambda: write("b"))
    assert r.forks() == [] and len(r) == 200 and len(r.state().claims) == 200


def test_a_batch_holds_the_lock_so_another_threads_write_never_lands_in_it():
    r = Replica.memory(space="team")
    wrote = threading.Event()
    other = threading.Thread(target=lambda: (r.add_claim("ns", "other", "p", 0), wrote.set()))
    with r.batch():
        r.add_claim("ns", "first", "p", 1)
        other.start()
        assert not wrote.wait(0.05)  # it waits for the batch
        r.add_claim("ns", "second", "p", 2)
    other.join(60)  # a hang guard
    assert wrote.is_set()
    changes = sorted(r.log.changes(), key=lambda c: c.seq)
    assert [len(c.ops) for c in changes] == [2, 1]
    assert [op.subject for op in changes[0].ops] == ["first", "second"]


def test_two_replicas_merging_each_other_from_two_threads_do_not_deadlock():
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    a.add_claim("ns", "a", "p", 1)
    b.add_claim("ns", "b", "p", 2)

    def merge(into: Replica, other: Replica) -> None:
        for _ in range(30):
            into.merge(other)

    with _switching_often():
        _run_together(lambda: merge(a, b), lambda: merge(b, a))
    assert a.state().digest() == b.state().digest()


def test_the_lock_is_reentrant_and_makes_a_read_and_a_write_one_step():
    r = Replica.memory(space="team")
    r.observe(lambda ops: r.state())  # an observer reading the replica: same thread, no wait
    with r.lock:
        if not r.state().active_at("ns", "s", "p"):
            r.add_claim("ns", "s", "p", 1)
    assert len(r.state().claims) == 1


def test_closed_mode_counts_only_admitted_authors_and_revocation_rebuilds_the_state():
    root = SigningKey.generate()
    hub = Replica.memory(space="team", mode="closed", key=root)
    agent = Replica.memory(space="team", mode="closed", root=root.author)
    agent.add_claim("ns", "s", "p", "first")
    hub.merge(agent)
    assert hub.state().active_claims() == []  # not admitted yet: kept, but does not count
    hub.admit(agent.author)
    assert _value_of(hub, "s") == ["'first'"]
    agent.merge(hub)
    agent.add_claim("ns", "t", "p", "second")
    hub.merge(agent)
    assert len(hub.state().active_claims()) == 2
    seq, _ = hub.last_change(agent.author)
    hub.revoke(agent.author, through_seq=seq - 1, reason="key leaked")
    assert _value_of(hub, "t") == []
    assert _value_of(hub, "s") == ["'first'"]
    assert hub.state().digest() == materialize(hub.log.ops()).digest()


def test_trust_ops_need_the_root_key():
    agent = Replica.memory(space="team", mode="closed", root=SigningKey.generate().author)
    with pytest.raises(ReplicaError) as err:
        agent.admit(b"\x01" * 32)
    assert err.value.rule == "root-only"


def test_a_forked_author_keeps_counting_on_both_branches():
    key = SigningKey.generate()
    honest = Replica.memory(space="team", key=key)
    honest.add_claim("ns", "s", "p", "one")
    twin = Replica.memory(space="team", key=key)  # same key, separate feed: seq 1 signed twice
    twin.add_claim("ns", "s", "p", "two")
    observer = Replica.memory(space="team")
    observer.merge(honest)
    assert _value_of(observer, "s") == ["'one'"]
    report = observer.merge(twin)
    assert _value_of(observer, "s") == ["'one'", "'two'"]
    assert report.forks == tuple(observer.forks()) and len(report.forks) == 1


# --- the incremental state equals a fresh materialization ---------------------------------------

_writes = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2), st.booleans()),
    min_size=1,
    max_size=20,
)


@settings(deadline=None)
@given(_writes, st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), max_size=10))
def test_after_any_writes_and_merges_each_state_equals_materializing_its_log(writes, merges):
    replicas = [Replica.memory(space="team") for _ in range(3)]
    for who, subject, value, retract in writes:
        r = replicas[who]
        claim = r.add_claim("ns", f"s{subject}", "p", value)
        if retract:
            r.retract(claim, reason="changed mind")
    for dst, src in merges:
        if dst != src:
            replicas[dst].merge(replicas[src])
    for r in replicas:
        assert r.state().digest() == materialize(r.log.ops()).digest()
    for r in replicas:
        for other in replicas:
            r.merge(other)
    assert len({r.state().digest() for r in replicas}) == 1


def test_receive_refuses_non_bytes_with_a_typed_error():
    r = Replica.memory(space="team")
    with pytest.raises(TypeError):
        r.receive([12345])  # type: ignore[list-item]
    assert len(r) == 0


def test_unverified_change_copies_are_accepted_as_input():
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    a.add_claim("ns", "s", "p", 1)
    report = b.receive([UnverifiedChange(d) for d in a.change_bytes(a.change_ids())])
    assert report.accepted == 1
    assert isinstance(b.state().active_claims()[0], ClaimAdded)
    assert not isinstance(b.state().active_claims()[0], ClaimRetracted)


def _hold(path: str, ready, release) -> None:  # runs in a child process
    with Replica.open(path) as r, r.batch():  # a batch holds the store's write transaction
        r.add_claim("ns", "held", "p", 0)
        ready.set()
        release.wait(120)  # a hang guard: the test sets it


def test_two_processes_never_write_one_store_at_once_and_the_second_waits_its_bound(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    path = str(tmp_path / "a.db")
    Replica.open(path, create=True, space="team").close()
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(path, ready, release), daemon=True)
    holder.start()
    assert ready.wait(60)
    with Replica.open(path, wait=0.2) as r:  # opening needs no lock: only writing does
        with pytest.raises(StoreError) as err:
            r.add_claim("ns", "s", "p", 1)
        assert err.value.rule == "busy"
        assert str(holder.pid) in str(err.value) and "0.2 s" in str(err.value)
        assert len(r) == 0
    release.set()
    with Replica.open(path) as r:  # the default wait outlasts the holder's write
        r.add_claim("ns", "s", "p", 1)
        assert sorted(c.value for c in r.state().active_claims()) == [0, 1]
        assert r.last_change(r.author)[0] == 2
    holder.join(60)


def test_an_op_too_big_for_any_change_is_refused_before_anything_is_stored():
    r = Replica.memory(space="team")
    with pytest.raises(ReplicaError) as err:
        r.add_claim("ns", "s", "p", ["x" * 600_000, "y" * 600_000])
    assert err.value.rule == "change-size"
    assert len(r) == 0 and r.state().active_claims() == []
    r.add_claim("ns", "s", "p", "fits")  # the feed is intact: seq 1 is still free
    assert r.last_change(r.author)[0] == 1


def test_layer_conveniences_write_claims_of_their_layer_and_kind():
    from statefuse import Layer

    r = Replica.memory(space="team")
    me = r.add_identity("planner", "role", "coordinator", authority="system")
    budget = r.add_constraint("project", "launch", "budget", "USD 5000", constraint="budget")
    turn = r.add_turn("user", "When do we launch?", session="s1")
    signal = r.add_signal("ci", "status", "green", expires=None)
    question = r.add_question("project", "launch", "venue", "Where is the launch?")
    assert (me.layer, me.kind) == (Layer.IDENTITY, "identity")
    assert (budget.kind, budget.constraint) == ("constraint", "budget")
    assert (turn.layer, turn.scope) == (Layer.WORKING, "session:s1")
    assert (signal.layer, signal.kind) == (Layer.ENVIRONMENT, "signal")
    assert (question.kind, question.predicate) == ("question", "venue?")
    assert len(r) == 5 and len(r.state().active_claims()) == 5


def test_replicas_written_from_two_threads_at_once_sign_only_changes_that_verify():
    import sys
    import threading

    from statefuse.sync.verify import verify_change

    replicas = [Replica.memory(space="threads") for _ in range(2)]

    def write(rep: Replica, tag: str) -> None:
        for b in range(20):
            with rep.batch():
                for i in range(50):
                    rep.add_claim("ns", f"{tag}{b}-{i}", "p", i)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        threads = [
            threading.Thread(target=write, args=(rep, tag))
            for rep, tag in zip(replicas, "ab", strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    for rep in replicas:
        datas = rep.all_change_bytes()
        assert len(datas) == 20
        for data in datas:
            verify_change(UnverifiedChange(data), space="threads")  # raises if an op is off
        assert len(rep.state().active_claims()) == 1000


def test_reconcilers_share_the_built_ids_until_a_change_arrives_and_never_share_what_they_learn():
    from statefuse.sync.reconcile import Reconciler

    a, b = Replica.memory(space="rec"), Replica.memory(space="rec")
    for i in range(30):
        a.add_claim("ns", f"s{i}", "p", i)
    b.merge(a)
    b.add_claim("ns", "only-b", "p", 1)
    first, second = a.reconciler(), a.reconciler()
    assert first is not second and first._ids is second._ids  # built once, shared
    # an exchange by one of them leaves the other with nothing learned
    peer = b.reconciler()
    message: bytes | None = first.initiate()
    while message is not None:
        message = peer.respond(message).message
        if message is not None:
            message = first.respond(message).message
    lacking = set(b.change_ids()) - set(a.change_ids())
    assert lacking and set(first.fetch) == lacking
    assert second.fetch == () and second.send == ()
    # the same ids a reconciler built from scratch holds, before and after a new change
    assert list(second._ids) == list(Reconciler(a.change_ids())._ids)
    a.merge(b)
    third = a.reconciler()
    assert third._ids is not first._ids
    assert list(third._ids) == sorted(a.change_ids()) == sorted(b.change_ids())


# --- lamport clocks (SEMANTICS §2) ---------------------------------------------------------------


def _highest_lamport(r: Replica) -> int:
    return max((op.lamport for c in r.log.changes() for op in c.ops), default=0)


@settings(deadline=None, max_examples=40)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["write", "merge", "bundle"]), st.integers(0, 2), st.integers(0, 2)
        ),
        min_size=1,
        max_size=25,
    )
)
def test_every_write_is_one_more_than_the_highest_lamport_the_replica_holds(
    tmp_path_factory, steps
):
    home = tmp_path_factory.mktemp("lamport")
    root = SigningKey.generate()
    replicas = [
        Replica.memory(space="team", key=root, mode="closed", root=root.author),
        Replica.memory(space="team", mode="closed", root=root.author),
        Replica.memory(space="team", mode="closed", root=root.author),
    ]
    for r in replicas[1:]:
        replicas[0].admit(r.author)
    for r in replicas[1:]:
        r.merge(replicas[0])
    for n, (what, i, j) in enumerate(steps):
        a, b = replicas[i], replicas[j]
        if what == "write":
            expected = _highest_lamport(a) + 1
            assert a.add_claim("ns", f"s{n}", "p", n).lamport == expected
        elif what == "merge" and a is not b:
            a.merge(b)
        elif what == "bundle" and a is not b:
            b.export(home / f"{n}.bundle")
            a.import_(home / f"{n}.bundle")
    expected = _highest_lamport(replicas[0]) + 1
    assert replicas[0].grant(replicas[1].author, ["editor"]).lamport == expected


def test_a_reopened_replica_writes_past_every_lamport_in_its_store_and_snapshot(tmp_path):
    path = tmp_path / "a.db"
    other = Replica.memory(space="team")
    for i in range(5):
        other.add_claim("ns", "s", "p", i)
    with Replica.open(path, create=True, space="team") as r:
        r.merge(other)
        r.snapshot()
    for load in ("snapshot", "verify"):
        with Replica.open(path, load=load) as again:
            assert again.add_claim("ns", "t", "p", load).lamport == _highest_lamport(other) + 1 + (
                load == "verify"
            )


# --- claims named by id, hex or prefix ------------------------------------------------------------

#: Two claims whose ids share 9 hex digits under this key and clock (as in test_cli).
TWIN_SEED, TWIN_WALL, TWINS = bytes(range(32)), 1_767_225_600_000, ("a15755", "b20195")


def _twins() -> tuple[Replica, ClaimAdded, ClaimAdded]:
    r = Replica.memory(space="team", key=SigningKey.from_seed(TWIN_SEED), clock=lambda: TWIN_WALL)
    one, two = (r.add_claim("team", "twins", "note", v, confidence=1.0) for v in TWINS)
    assert one.claim_id.hex()[:9] == two.claim_id.hex()[:9], "the twins no longer share a prefix"
    return r, one, two


def test_a_claim_is_named_by_itself_its_id_its_hex_or_a_unique_prefix():
    r, one, _ = _twins()
    state = r.state()
    hexed = one.claim_id.hex()
    for ref in (one, one.claim_id, hexed, hexed.upper(), hexed[:10], f" {hexed[:11]} "):
        assert state.claim(ref) is state.claims[one.claim_id]
    cases = [
        (hexed[:9], "unique-prefix"),  # shared with the twin
        (hexed[:7], "claim-ref"),  # too short
        ("zz" + hexed[:8], "claim-ref"),
        (b"short", "claim-ref"),
        (12345, "claim-ref"),
        ("0" * 12 if not hexed.startswith("0" * 12) else "f" * 12, "known-claim"),
        (bytes(32), "known-claim"),
    ]
    for ref, rule in cases:
        with pytest.raises(ClaimLookupError) as err:
            state.claim(ref, field="old")  # type: ignore[arg-type]
        assert (err.value.field, err.value.rule) == ("old", rule)


def test_retract_supersede_and_decide_take_a_hex_prefix_or_the_claim_and_refuse_writing_nothing():
    r, one, two = _twins()
    before = len(r)
    with pytest.raises(ClaimLookupError):
        r.retract(one.claim_id.hex()[:9])  # ambiguous
    with pytest.raises(ClaimLookupError):
        r.supersede("ffffffffffff", "x")
    assert len(r) == before  # nothing written
    r.retract(one.claim_id.hex()[:12], reason="typo")
    assert not r.state().is_active(one.claim_id) and r.state().is_active(two.claim_id)
    new, ret = r.supersede(two.claim_id.hex(), "b20196")
    assert ret.target_claim_id == two.claim_id and ret.superseded_by == new.claim_id
    peer = r.fork()
    peer.add_claim("team", "twins", "note", "other")
    r.merge(peer)
    (conflict,) = r.state().conflicts
    picked = r.state().claims[conflict.candidates[0]]
    decision = r.decide(conflict, picked)  # the claim object
    assert decision.selected_claim_id == picked.claim_id
    again = r.decide(conflict, picked.claim_id.hex()[:12], reason="same, by prefix")
    assert again.selected_claim_id == picked.claim_id


def test_a_key_is_three_parts_or_one_string_with_the_command_lines_escapes():
    r = Replica.memory(space="team")
    a = r.add_claim("vendor/acme/price", 100, provenance="invoice")
    b = r.add_claim("vendor", "acme", "price", 100)
    c = r.add_claim(namespace="vendor", subject="acme", predicate="price", value=100)
    d = r.add_claim("vendor", "acme", "price", value=100)
    e = r.add_claim(key="vendor/acme/price", value=100)
    assert {x.key for x in (a, b, c, d, e)} == {("vendor", "acme", "price")}
    assert a.provenance == "invoice"
    odd = r.add_claim("docs/a%2Fb%25c/size", 3)  # a part holding "/" and "%"
    assert odd.key == ("docs", "a/b%c", "size") and format_key(odd.key) == "docs/a%2Fb%25c/size"
    updated = r.update("vendor/acme/price", 120)
    assert r.state().is_active(updated.claim_id) and not r.state().is_active(a.claim_id)
    before = len(r)
    for args, kwargs, rule in [
        (("vendor/acme", 1), {}, "key-syntax"),  # two parts
        (("vendor//price", 1), {}, "key-syntax"),  # an empty part
        (("vendor/acme/price",), {}, "key-parts"),  # no value
        (("vendor", "acme", 1), {}, "key-parts"),  # three positionals
        ((b"vendor/acme/price", 1), {}, "key-type"),
        (("vendor", "acme", "price", 1), {"value": 2}, "key-parts"),  # value twice
    ]:
        with pytest.raises(InputError) as err:
            r.add_claim(*args, **kwargs)
        assert (err.value.field, err.value.rule) == ("key", rule), args
    assert len(r) == before  # nothing written


def test_constraints_and_questions_take_a_key_string_too():
    r = Replica.memory(space="team")
    budget = r.add_constraint("project/apollo/budget", 40_000, provenance="kickoff")
    same = r.add_constraint("project", "apollo", "budget", 40_000)
    assert budget.key == same.key == ("project", "apollo", "budget")
    assert budget.constraint and budget.provenance == "kickoff"
    q1 = r.add_question("project/apollo/deadline", "when is the launch?")
    q2 = r.add_question("project", "apollo", "deadline", text="when is the launch?")
    assert q1.key == q2.key and q1.key[:2] == ("project", "apollo")
    assert q1.value == q2.value == "when is the launch?"
    before = len(r)
    with pytest.raises(InputError) as err:
        r.add_question("project/apollo/deadline")
    assert (err.value.field, err.value.rule) == ("key", "key-parts")
    assert "and text" in err.value.message
    assert len(r) == before


def test_history_of_a_key_string_parts_or_any_name_of_one_of_its_claims():
    r = Replica.memory(space="team")
    first = r.add_claim("vendor/acme/price", 100, provenance="invoice")
    r.add_claim("vendor/acme/price", 7, scope="task:eu")
    second = r.update("vendor/acme/price", 120)
    r.add_claim("vendor/other/price", 1)  # another key: never in its history
    whole = r.history("vendor/acme/price")
    assert [(e.event, e.claim.value) for e in whole] == [
        ("claim", 100),
        ("claim", 7),
        ("claim", 120),
        ("retract", 100),
    ]
    assert whole[0].why == "invoice" and whole[-1].superseded_by == second.claim_id
    assert [e.author for e in whole] == [r.author] * 4
    for of in (
        ("vendor", "acme", "price"),
        first,
        first.claim_id,
        first.claim_id.hex(),
        first.claim_id.hex()[:12],
    ):
        assert r.history(of) == whole, of
    assert [e.claim.value for e in r.history(second, scope="task:eu")] == [7]
    with pytest.raises(UnknownClaimError) as err:
        r.history("ffffffffffff" if not first.claim_id.hex().startswith("f" * 12) else "0" * 12)
    assert err.value.field == "of"
    with pytest.raises(InputError) as err2:
        r.history(("vendor", "acme"))  # type: ignore[arg-type]
    assert (err2.value.field, err2.value.rule) == ("of", "key-parts")
