"""Versions (SEMANTICS §9, known time): what memory said when, the same on every replica.

The oracle of ``state(at=v)`` is independent of the code under test: when a version is taken,
the test notes the change ids the replica held, and the expected State is `materialize` of
those changes' ops. Histories are drawn by Hypothesis: three authors plus a second store with
the first author's key (so feeds fork), writes, retractions, decisions and merges in any order;
two hub replicas then receive every change in two different orders.
"""

from __future__ import annotations

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import materialize
from statefuse.core.op import Op
from statefuse.reading.statediff import state_diff
from statefuse.registry import EXACT_REGISTRY, PredicateContract, Registry
from statefuse.sync.change import VerifiedChange
from statefuse.sync.changelog import ChangeLog
from statefuse.sync.declaration import SPACE_OP_TYPES
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import OwnFeedWarning, Replica
from statefuse.sync.trust import TrustMode
from statefuse.sync.version import UnknownVersionError, Version, VersionError

SPACE = "team"
KEYS = [SigningKey.from_seed(bytes([i + 1]) * 32) for i in range(3)]
AUTHORS = sorted(k.author for k in KEYS)
KEYS_OF = [0, 1, 2, 0]  # replica 3 shares replica 0's key: its writes fork that feed
VALUES = ["red", "blue", "green"]
SUBJECTS = ["x", "y"]

# --- histories ----------------------------------------------------------------------------------

claim = st.tuples(
    st.just("claim"), st.integers(0, 3), st.sampled_from(SUBJECTS), st.sampled_from(VALUES)
)
step = st.one_of(
    claim,
    claim,
    st.tuples(st.just("retract"), st.integers(0, 3), st.integers(0, 20)),
    st.tuples(st.just("decide"), st.integers(0, 3), st.integers(0, 20)),
    st.tuples(st.just("merge"), st.integers(0, 3), st.integers(0, 3)),
    st.tuples(st.just("mark"), st.integers(0, 3)),
)


class Mark:
    """A version taken on a replica, with the change ids it held then (the oracle)."""

    def __init__(self, replica: Replica) -> None:
        self.version = replica.version()
        self.held = set(replica.change_ids())
        self.digest = replica.state().digest()


def _replicas() -> list[Replica]:
    return [Replica.memory(space=SPACE, key=KEYS[k], clock=lambda: 1000) for k in KEYS_OF]


def _run(steps: list[tuple]) -> tuple[list[Replica], list[Mark]]:
    reps = _replicas()
    marks: list[Mark] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OwnFeedWarning)
        for s in steps:
            kind, i = s[0], s[1]
            r = reps[i]
            if kind == "claim":
                r.add_claim("p", s[2], "colour", s[3])
            elif kind == "retract":
                active = r.state().active_claims()
                if active:
                    r.retract(active[s[2] % len(active)], reason="wrong")
            elif kind == "decide":  # after a merge, so that conflicts are common
                r.merge(reps[(i + 1) % len(reps)])
                conflicts = r.state().conflicts
                if conflicts:
                    c = conflicts[s[2] % len(conflicts)]
                    r.decide(c, c.candidates[s[2] % len(c.candidates)], reason="picked")
            elif kind == "merge":
                if i != s[2]:
                    r.merge(reps[s[2]])
            else:
                marks.append(Mark(r))
        for r in reps:
            marks.append(Mark(r))
    return reps, marks


def _every_change(reps: list[Replica]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for r in reps:
        for cid in r.change_ids():
            out.setdefault(cid, r.change_bytes([cid])[0])
    return out


def _hub(changes: dict[bytes, bytes], order: list[bytes]) -> Replica:
    hub = Replica.memory(space=SPACE, key=SigningKey.from_seed(b"\x09" * 32), clock=lambda: 1000)
    for cid in order:
        hub.receive([changes[cid]])
    assert hub.pending_count() == 0
    return hub


def _ops_of(hub: Replica, ids: set[bytes]) -> list[Op]:
    changes: list[VerifiedChange] = [hub.log.get(cid) for cid in ids]  # type: ignore[misc]
    return [op for c in changes for op in c.ops if not isinstance(op, SPACE_OP_TYPES)]


@settings(deadline=None)
@given(
    steps=st.lists(step, min_size=6, max_size=30),
    data=st.data(),
)
def test_state_at_a_version_is_materialize_of_the_changes_it_covers_on_every_replica(steps, data):
    reps, marks = _run(steps)
    changes = _every_change(reps)
    ids = sorted(changes)
    one = _hub(changes, data.draw(st.permutations(ids), label="order one"))
    two = _hub(changes, data.draw(st.permutations(ids), label="order two"))
    for m in marks:
        expected = materialize(_ops_of(one, m.held)).digest()
        assert m.digest == expected  # the state the replica showed when the version was taken
        assert one.state(at=m.version).digest() == expected
        assert two.state(at=m.version).digest() == expected
        assert one.state(at=str(m.version)).digest() == expected
    for r in (*reps, one, two):
        assert r.state(at=r.version()).digest() == r.state().digest()


@settings(deadline=None)
@given(steps=st.lists(step, min_size=6, max_size=30), data=st.data())
def test_a_diff_applied_to_the_earlier_state_gives_the_later_one(steps, data):
    reps, marks = _run(steps)
    hub = _hub(_every_change(reps), sorted(_every_change(reps)))
    a = data.draw(st.sampled_from(marks), label="from").version
    b = data.draw(st.sampled_from(marks), label="to").version
    before, after = hub.state(at=a), hub.state(at=b)
    d = hub.diff(a, b)
    assert d == state_diff(before, after)
    claims = (before.claims.keys() | {c.claim_id for c in d.added}) - {
        c.claim_id for c in d.removed
    }
    assert claims == after.claims.keys()
    retracted = (before.retracted.keys() | {r.claim.claim_id for r in d.retracted}) - {
        c.claim_id for c in d.unretracted
    }
    assert retracted == after.retracted.keys()
    for r in d.retracted:
        assert r.by and all(x.op_id not in before.retractions for x in r.by)
        assert {x.op_id for x in r.by} <= {x.op_id for x in after.retracted[r.claim.claim_id]}
    decisions = ({x.op_id for x in before.decisions} | {x.op_id for x in d.decisions}) - {
        x.op_id for x in d.decisions_dropped
    }
    assert decisions == {x.op_id for x in after.decisions}
    loci = ({k.locus for k in before.conflicts} | {k.locus for k in d.conflicts_opened}) - {
        k.locus for k in d.conflicts_closed
    }
    assert loci == {k.locus for k in after.conflicts}
    assert not hub.diff(a, a)
    assert not hub.diff(hub.version())
    if a <= b and not _forked(hub):
        assert not d.removed and not d.unretracted and not d.decisions_dropped


def _forked(r: Replica) -> bool:
    return bool(r.forks())


@settings(deadline=None)
@given(steps=st.lists(step, min_size=6, max_size=30))
def test_a_replica_version_only_grows_and_a_merge_joins_versions(steps):
    reps, marks = _run(steps)
    del marks
    a, b = reps[1], reps[2]  # their own feeds never fork (they may hold author 0's fork)
    va, vb = a.version(), b.version()
    a.merge(b)
    assert va <= a.version() and vb <= a.version()
    if not a.forks():  # the join reads feeds as lines: on a fork it keeps the top heads only
        assert a.version() == va | vb
        assert a.state(at=va | vb).digest() == a.state().digest()


# --- the value type -----------------------------------------------------------------------------

IDS = [bytes([i]) * 32 for i in range(1, 5)]


@st.composite
def versions(draw: st.DrawFn) -> Version:
    """Versions as the order reads them: per author, heads at one seq (a fork lists several)."""
    heads = {}
    for author in draw(st.sets(st.sampled_from(AUTHORS))):
        seq = draw(st.integers(1, 4))
        ids = draw(st.sets(st.sampled_from(IDS), min_size=1, max_size=2))
        heads[author] = [(seq, cid) for cid in ids]
    return Version.of(heads)


@given(versions(), versions(), versions())
def test_the_version_order_is_a_partial_order(a, b, c):
    assert a <= a
    if a <= b and b <= a:
        assert a == b
    if a <= b and b <= c:
        assert a <= c
    assert (a < b) == (a <= b and a != b)


@given(versions(), versions(), versions())
def test_join_is_the_least_upper_bound(a, b, c):
    j = a | b
    assert a <= j and b <= j
    if a <= c and b <= c:
        assert j <= c
    assert a | b == b | a
    assert (a | b) | c == a | (b | c)
    assert a | a == a
    assert a | Version() == a


@given(versions())
def test_a_version_reads_back_from_its_text_and_its_json(v):
    assert Version.parse(str(v)) == v
    assert Version.from_json(v.to_json()) == v
    assert Version.from_json(json.dumps(v.to_json())) == v


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "version-prefix"),
        ("v2:", "version-prefix"),
        ("v1:abc", "version-entry"),
        ("v1:" + "00" * 32 + "=x", "version-head"),
        ("v1:" + "00" * 32 + "=0." + "11" * 32, "seq"),
        ("v1:" + "zz" * 32 + "=1." + "11" * 32, "author-id"),
        ("v1:" + "00" * 32 + "=1." + "11" * 31, "change_id-id"),
        (
            "v1:" + "00" * 32 + "=1." + "11" * 32 + ";" + "00" * 32 + "=2." + "22" * 32,
            "version-entry",
        ),
    ],
)
def test_a_malformed_version_text_is_a_typed_error_naming_the_rule(text, rule):
    with pytest.raises(VersionError) as e:
        Version.parse(text, field="--at")
    assert e.value.field == "--at" and e.value.rule == rule
    assert isinstance(e.value, ValueError)


def test_the_empty_version_prints_and_reads_back_and_covers_nothing():
    r = Replica.memory(space=SPACE)
    assert str(Version()) == "v1:"
    assert Version.parse("v1:") == Version()
    r.add_claim("p", "x", "colour", "red")
    assert r.state(at=Version()).claims == {}
    assert Version() <= r.version()


# --- what a replica holds -----------------------------------------------------------------------


def test_a_version_naming_changes_this_replica_lacks_names_them_and_changes_nothing():
    a, b = Replica.memory(space=SPACE, key=KEYS[0]), Replica.memory(space=SPACE, key=KEYS[1])
    a.add_claim("p", "x", "colour", "red")
    b.add_claim("p", "x", "colour", "blue")
    before = a.state().digest()
    with pytest.raises(UnknownVersionError) as e:
        a.state(at=b.version())
    assert e.value.field == "at" and e.value.rule == "known-changes"
    with pytest.raises(UnknownVersionError) as e:
        a.diff(a.version(), b.version())
    assert e.value.field == "after"
    assert e.value.missing == ((KEYS[1].author, 1, b.version().heads[0][1][0][1]),)
    assert KEYS[1].author.hex()[:12] in str(e.value)
    assert a.state().digest() == before
    a.merge(b)
    assert a.state(at=b.version()).digest() == b.state().digest()


def test_a_version_whose_head_seq_disagrees_with_the_change_is_refused():
    a = Replica.memory(space=SPACE, key=KEYS[0])
    a.add_claim("p", "x", "colour", "red")
    ((author, ((seq, cid),)),) = a.version().heads
    with pytest.raises(VersionError) as e:
        a.state(at=Version.of({author: [(seq + 1, cid)]}))
    assert e.value.rule == "head-matches-change"


def test_a_forked_feed_lists_both_branch_heads_and_each_branch_reads_alone():
    one, two = (Replica.memory(space=SPACE, key=KEYS[0]) for _ in range(2))
    one.add_claim("p", "x", "colour", "red")
    one.add_claim("p", "y", "colour", "red")
    two.add_claim("p", "x", "colour", "blue")
    hub = Replica.memory(space=SPACE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OwnFeedWarning)
        hub.merge(one)
        hub.merge(two)
    assert hub.forks()
    heads = hub.version().heads_of(KEYS[0].author)
    assert [s for s, _ in heads] == [1, 2]
    assert hub.state(at=hub.version()).digest() == hub.state().digest()
    assert hub.state(at=one.version()).digest() == one.state().digest()
    assert hub.state(at=two.version()).digest() == two.state().digest()
    # the pure order reads the feed as a line (seq 2 above seq 1); the replica follows prev
    assert two.version() <= one.version()
    assert not hub.covers(one.version(), two.version())
    assert hub.covers(hub.version(), two.version()) and hub.covers(hub.version(), one.version())


def test_the_trust_in_force_at_a_version_decides_what_counts_there():
    root = SigningKey.from_seed(b"\x07" * 32)
    hub = Replica.memory(space=SPACE, key=root, mode=TrustMode.CLOSED, root=root.author)
    writer = Replica.memory(space=SPACE, key=KEYS[1], mode=TrustMode.CLOSED, root=root.author)
    writer.add_claim("p", "x", "colour", "blue")
    hub.merge(writer)
    unadmitted = hub.version()
    assert hub.state(at=unadmitted).claims == {}  # covered, not counted: not admitted then
    hub.admit(KEYS[1].author)
    admitted = hub.version()
    assert unadmitted <= admitted
    assert [c.value for c in hub.state(at=admitted).active_claims()] == ["blue"]
    assert hub.state(at=unadmitted).claims == {}  # later trust does not reach back
    d = hub.diff(unadmitted, admitted)
    assert [c.value for c in d.added] == ["blue"]
    hub.revoke(KEYS[1].author, keep=[])
    assert hub.state().claims == {}
    assert [c.value for c in hub.state(at=admitted).active_claims()] == ["blue"]


def test_a_reopened_store_reads_the_same_state_at_a_version(tmp_path):
    path = tmp_path / "m.db"
    r = Replica.open(path, create=True, space=SPACE)
    first = r.add_claim("p", "x", "colour", "red")
    v1 = r.version()
    r.retract(first, reason="wrong")
    r.add_claim("p", "x", "colour", "blue")
    old, now = r.state(at=v1).digest(), r.state().digest()
    r.close()
    with Replica.open(path) as again:
        assert again.state(at=v1).digest() == old
        assert again.state(at=again.version()).digest() == now
        events = again.history("p/x/colour", at=v1)
        assert [(e.event, e.claim.value) for e in events] == [("claim", "red")]
        page = again.conflicts(at=v1)
        assert page.total == 0
        ctx = again.context("colour", at=v1)
        assert "red" in ctx.text and "blue" not in ctx.text
        assert ctx.at == str(v1) and json.loads(ctx.to_json())["at"] == str(v1)
        now_ctx = again.context("colour")
        assert now_ctx.at is None and "at" not in json.loads(now_ctx.to_json())


def test_the_registry_declared_at_a_version_is_the_one_its_state_uses():
    money = Registry([PredicateContract("price", normalizer="money", params={"currency": "USD"})])
    creator = Replica.memory(space=SPACE, registry=money)
    creator.add_claim("vendor", "acme", "price", "USD 1,150")
    creator.add_claim("vendor", "acme", "price", "1,150.00")
    agreed = creator.version()
    creator.declare_registry(EXACT_REGISTRY)
    exact = creator.version()
    assert creator.state(at=agreed).registry.fingerprint == money.fingerprint
    assert creator.state(at=agreed).conflicts == ()  # one value in money's normal form
    assert creator.state(at=exact).registry.fingerprint == EXACT_REGISTRY.fingerprint
    assert len(creator.state(at=exact).conflicts) == 1
    assert creator.state(at=exact).digest() == creator.state().digest()
    assert [k.key for k in creator.diff(agreed).conflicts_opened] == [("vendor", "acme", "price")]


# --- closed spaces: the trust in force at a version, against the change log's own verdicts --------

ROOT = SigningKey.from_seed(b"\x05" * 32)
trust_claim = st.tuples(st.just("claim"), st.integers(0, 2), st.sampled_from(VALUES))
trust_pull = st.tuples(st.just("pull"), st.integers(0, 2))  # the root takes in a writer's changes
trust_step = st.one_of(
    trust_claim,
    trust_claim,
    trust_pull,
    trust_pull,
    st.tuples(st.just("admit"), st.integers(0, 2)),
    st.tuples(st.just("admit"), st.integers(0, 2)),
    st.tuples(st.just("revoke"), st.integers(0, 2)),
    st.tuples(st.just("push"), st.integers(0, 2)),  # a writer takes in the root's
    st.tuples(
        st.just("mark"),
    ),
)


@settings(deadline=None)
@given(steps=st.lists(trust_step, min_size=8, max_size=30), data=st.data())
def test_in_a_closed_space_state_at_a_version_counts_what_the_trust_then_counted(steps, data):
    def closed(key: SigningKey) -> Replica:
        return Replica.memory(
            space=SPACE, key=key, mode=TrustMode.CLOSED, root=ROOT.author, clock=lambda: 1000
        )

    root, writers = closed(ROOT), [closed(k) for k in KEYS]
    marks: list[Mark] = []
    for s in steps:
        kind = s[0]
        if kind == "claim":
            writers[s[1]].add_claim("p", "x", "colour", s[2])
        elif kind == "admit":
            root.admit(KEYS[s[1]].author)
        elif kind == "revoke":
            root.revoke(KEYS[s[1]].author)
        elif kind == "pull":
            root.merge(writers[s[1]])
        elif kind == "push":
            writers[s[1]].merge(root)
        else:
            marks.append(Mark(root))
    marks.append(Mark(root))
    changes = _every_change([root, *writers])
    hub = closed(SigningKey.from_seed(b"\x06" * 32))
    for cid in data.draw(st.permutations(sorted(changes)), label="order"):
        hub.receive([changes[cid]])
    for m in marks:
        log = ChangeLog(SPACE, root=ROOT.author, mode=TrustMode.CLOSED)
        for cid in sorted(m.held):  # the change log parks what comes early: any order does
            log.receive(changes[cid], seen_ms=0)
        expected = log.materialize(registry=root.registry).digest()
        assert m.digest == expected
        assert root.state(at=m.version).digest() == expected
        assert hub.state(at=m.version).digest() == expected
