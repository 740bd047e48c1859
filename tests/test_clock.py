"""Clocks (SEMANTICS §2): only counted ops advance a replica's clocks, a clock saturates at
MAX_LAMPORT instead of making a write fail, and a counted op that jumps the clock far ahead is
kept, counted and reported like a fork, naming its author.

A stranger's change stamped with the highest lamport once stopped every replica that received it
from ever writing again (``Error: lamport: must be >= 1 (got 9223372036854775808)``).
"""

from __future__ import annotations

import http.client
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import DEFAULT_REGISTRY, MAX_LAMPORT, Writer
from statefuse.core.op import MAX_LAMPORT as OP_MAX_LAMPORT
from statefuse.core.op import Op
from statefuse.sync.author import AuthorNamed
from statefuse.sync.bundle import write_bundle
from statefuse.sync.change import VerifiedChange, sign_change
from statefuse.sync.changelog import Ignored
from statefuse.sync.clock import LAMPORT_JUMP, ClockJump, LamportGaps, clock_jumps
from statefuse.sync.key import SigningKey
from statefuse.sync.protocol import encode_frames
from statefuse.sync.replica import MergeReport, Replica
from tests.serving import served

ROOT = Path(__file__).resolve().parents[1]
#: 2026-01-01 00:00:00 UTC: the wall clock of every op written here.
WALL = 1_767_225_600_000


def _clock() -> int:
    return WALL


def _at(key: SigningKey, lamport: int, make: str = "claim", value: object = 1) -> Op:
    """One op of ``key``'s author stamped with ``lamport`` (whatever its writer saw)."""
    w = Writer(key.author, clock=_clock)
    w.advance(lamport - 1)
    if make == "retract":
        ref = Writer(key.author).claim("vendor", "acme", "price", value).claim_ref
        return w.retract(claim_ref=ref, reason="hostile")
    if make == "name":
        return AuthorNamed(key.author, lamport, WALL, f"root{value}")
    return w.claim("vendor", "acme", "price", value)  # type: ignore[arg-type]


def _change(
    key: SigningKey, ops: list[Op], *, seq: int = 1, prev: bytes | None = None, space: str = "team"
) -> VerifiedChange:
    return sign_change(
        key, space=space, seq=seq, prev=prev, registry=DEFAULT_REGISTRY.fingerprint, ops=ops
    )


def _feed(key: SigningKey, lamports: list[int], space: str = "team") -> list[VerifiedChange]:
    """A chain of changes of ``key``, one op at each lamport."""
    out: list[VerifiedChange] = []
    for i, lamport in enumerate(lamports):
        prev = out[-1].change_id if out else None
        out.append(_change(key, [_at(key, lamport, value=i)], seq=i + 1, prev=prev, space=space))
    return out


def test_max_lamport_is_the_signed_64_bit_limit_and_public():
    assert MAX_LAMPORT == OP_MAX_LAMPORT == 2**63 - 1
    assert LAMPORT_JUMP == 2**32


# --- a served open store: one anonymous push of the highest lamport -------------------------------


def _statefuse(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_an_anonymous_push_of_the_highest_lamport_stops_no_writer_and_is_reported(tmp_path):
    store = tmp_path / "team.db"
    assert _statefuse("--store", str(store), "init", "--space", "team").returncode == 0
    done = _statefuse("--store", str(store), "claim", "vendor/acme/price", "1150")
    assert done.returncode == 0, done.stderr
    stranger = SigningKey.generate()
    hostile = _change(stranger, [_at(stranger, MAX_LAMPORT, value=9)])
    with served(store, "--auth", "open") as url:
        where = urlsplit(url)
        assert where.hostname is not None and where.port is not None
        conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
        try:  # no signature: anyone may push to an open space
            conn.request("POST", "/v1/push", encode_frames([b"team", hostile.data]))
            response = conn.getresponse()
            receipt = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == 200, receipt
        assert receipt["accepted"] == 1
        # the push's receipt names the jump and its author
        (jump,) = receipt["clock_jumps"]
        assert jump == {
            "author": stranger.author.hex(),
            "change_id": hostile.change_id.hex(),
            "lamport": MAX_LAMPORT,
            "gap": MAX_LAMPORT - 1,
        }
        # a peer that syncs with the store takes the jump in and names its author too
        peer = tmp_path / "peer.db"
        assert _statefuse("--store", str(peer), "init", "--space", "team").returncode == 0
        synced = _statefuse("--store", str(peer), "sync", url)
        assert synced.returncode == 0, synced.stderr
        assert f"clock jump by author {stranger.author.hex()[:12]}…" in synced.stdout
        done = _statefuse("--store", str(peer), "claim", "vendor/acme/price", "1300")
        assert done.returncode == 0, done.stderr
    for value in ("1200", "1250"):  # saturated: each write takes MAX_LAMPORT and succeeds
        done = _statefuse("--store", str(store), "claim", "vendor/acme/price", value)
        assert done.returncode == 0, done.stderr
        assert "Error" not in done.stderr
    with Replica.open(store, readonly=True) as rep:
        mine = [op for op in rep.log.ops().unordered() if op.author == rep.author]
        assert sorted(op.lamport for op in mine) == [1, MAX_LAMPORT, MAX_LAMPORT]
        me = rep.author
    # `keys show` and `verify` name the author that jumped, and only it
    shown = _statefuse("--store", str(store), "--json", "keys", "show")
    assert shown.returncode == 0, shown.stderr
    entries = {e["author"]: e for e in json.loads(shown.stdout)["authors"]}
    assert entries[stranger.author.hex()]["clock_jumps"] == [MAX_LAMPORT]
    assert entries[me.hex()]["clock_jumps"] == []
    assert any("clock jump" in s for s in entries[stranger.author.hex()]["status"])
    text = _statefuse("--store", str(store), "keys", "show")
    assert f"clock jump to lamport {MAX_LAMPORT}" in text.stdout
    verified = _statefuse("--store", str(store), "--json", "verify")
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["ok"] is True
    assert [j["author"] for j in report["clock_jumps"]] == [stranger.author.hex()]
    assert f"Warning: clock jump by author {stranger.author.hex()[:12]}…" in verified.stderr
    plain = _statefuse("--store", str(store), "verify")
    assert re.search(r"clock jumps\s+1 change by ", plain.stdout), plain.stdout


def test_import_of_a_bundle_with_a_jump_names_its_author_and_writing_goes_on(tmp_path):
    store, bundle = tmp_path / "team.db", tmp_path / "in.bundle"
    assert _statefuse("--store", str(store), "init", "--space", "team").returncode == 0
    jumper = SigningKey.generate()
    (far,) = _feed(jumper, [2**60])
    write_bundle(bundle, jumper, "team", [far.data])
    done = _statefuse("--store", str(store), "import", str(bundle))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        f"clock jump by author {jumper.author.hex()[:12]}… to lamport {2**60} ({2**60} past the"
        f" next lower counted lamport; change {far.change_id.hex()[:12]}…): kept and counted;"
        " revoke the author if it should not move every writer's clock"
    ]
    done = _statefuse("--store", str(store), "claim", "vendor/acme/price", "1")
    assert done.returncode == 0, done.stderr
    with Replica.open(store, readonly=True) as rep:
        (mine,) = [op for op in rep.log.ops().unordered() if op.author == rep.author]
        assert mine.lamport == 2**60 + 1


# --- closed spaces: what does not count moves no clock --------------------------------------------


def _closed(root: SigningKey, path: Path | None = None) -> Replica:
    if path is None:
        return Replica.memory(space="team", mode="closed", key=root, clock=_clock)
    return Replica.open(path, create=True, space="team", mode="closed", key=root, clock=_clock)


def test_a_never_admitted_authors_huge_lamport_moves_no_clock_in_a_closed_space(tmp_path):
    root = SigningKey.generate()
    path = tmp_path / "hub.db"
    hub = _closed(root, path)
    hub.add_claim("vendor", "acme", "price", 1150)
    hub.add_claim("vendor", "acme", "name", "Acme")
    stranger = SigningKey.generate()
    report = hub.receive(
        [c.data for c in _feed(stranger, [MAX_LAMPORT, 2**62, MAX_LAMPORT - 1])]
        + [_change(stranger, [_at(stranger, 2**40, "retract")], seq=9, prev=bytes(32)).data]
    )
    assert report.accepted == 3 and report.pending == 1
    assert set(hub.verdicts().values()) == {Ignored.UNKNOWN_AUTHOR}
    assert report.clock_jumps == () and hub.clock_jumps() == []
    claim = hub.add_claim("vendor", "acme", "price", 1200)
    assert claim.lamport == 3  # one more than the highest counted lamport
    assert claim.reasserts == ()
    assert hub.admit(SigningKey.generate().author).lamport == 4  # the trust writer too
    hub.snapshot()
    hub.close()
    for top, load in ((4, "snapshot"), (5, "verify")):  # from the snapshot, or verifying all
        with Replica.open(path, key=root, clock=_clock, load=load) as again:
            assert (again.restored > 0) == (load == "snapshot")
            assert again.writer.lamport == again.trust_writer._lamport == top
            assert again.add_claim("vendor", "acme", "size", top).lamport == top + 1
            assert again.clock_jumps() == []


def test_a_revoked_authors_later_huge_lamport_moves_no_clock():
    root, member = SigningKey.generate(), SigningKey.generate()
    hub = _closed(root)
    hub.admit(member.author)
    honest = _feed(member, [2, 3])
    hub.receive([c.data for c in honest])
    hub.revoke(member.author)  # keeps what the hub has seen: seqs 1 and 2
    assert hub.writer.lamport == 4
    late = _change(member, [_at(member, MAX_LAMPORT)], seq=3, prev=honest[-1].change_id)
    report = hub.receive([late.data])
    assert report.accepted == 1 and hub.verdicts() == {late.change_id: Ignored.REVOKED}
    assert report.clock_jumps == ()
    assert hub.add_claim("vendor", "acme", "price", 1).lamport == 5


def test_an_admission_makes_a_jump_count_and_then_it_is_reported():
    root, member = SigningKey.generate(), SigningKey.generate()
    hub = _closed(root)
    hub.add_claim("vendor", "acme", "price", 1)
    (far,) = _feed(member, [2**40])
    hub.receive([far.data])
    assert hub.add_claim("vendor", "acme", "price", 2).lamport == 2
    hub.admit(member.author)  # now it counts: the clocks follow it, and it is a jump
    assert hub.writer.lamport == 2**40
    assert hub.add_claim("vendor", "acme", "price", 3).lamport == 2**40 + 1
    assert hub.clock_jumps() == [ClockJump(member.author, far.change_id, 2**40, 2**40 - 3)]


# --- open spaces: a jump counts and is named, writers saturate ------------------------------------


def test_a_received_jump_is_named_in_the_report_and_honest_writers_after_it_are_not():
    a = Replica.memory(space="team", clock=_clock)
    b = Replica.memory(space="team", clock=_clock)
    a.add_claim("vendor", "acme", "price", 1)
    jumper = SigningKey.generate()
    (far,) = _feed(jumper, [MAX_LAMPORT])
    report = a.receive([far.data])
    expected = ClockJump(jumper.author, far.change_id, MAX_LAMPORT, MAX_LAMPORT - 1)
    assert report.clock_jumps == (expected,)
    assert MergeReport.from_json(report.to_json()) == report
    assert "clock jump by author" in expected.describe()
    for v in range(3):
        assert a.add_claim("vendor", "acme", "size", v).lamport == MAX_LAMPORT
    assert a.clock_jumps() == [expected]  # the saturated writer after it is not named
    # a peer that takes in the jump with the saturated writes after it: one jump, at the
    # ceiling (where a set cannot tell who came first, the first change it accepted there)
    got = b.merge(a)
    assert [(j.lamport, j.gap) for j in got.clock_jumps] == [(MAX_LAMPORT, MAX_LAMPORT - 1)]
    assert len(b.clock_jumps()) == 1
    assert b.add_claim("vendor", "acme", "size", 9).lamport == MAX_LAMPORT


def test_a_jump_below_the_ceiling_names_only_its_author():
    rep = Replica.memory(space="team", clock=_clock)
    rep.add_claim("vendor", "acme", "price", 1)
    jumper = SigningKey.generate()
    (far,) = _feed(jumper, [2**50])
    rep.receive([far.data])
    for v in range(3):
        assert rep.add_claim("vendor", "acme", "price", v).lamport == 2**50 + 1 + v
    (jump,) = rep.clock_jumps()
    assert (jump.author, jump.lamport, jump.gap) == (jumper.author, 2**50, 2**50 - 1)
    # a later op that fills the gap from below ends the jump (the rule reads only the set)
    filler = SigningKey.generate()
    report = rep.receive([c.data for c in _feed(filler, [2**50 - LAMPORT_JUMP])])
    assert report.clock_jumps[0].author == filler.author
    assert jumper.author not in {j.author for j in rep.clock_jumps()}


# --- properties -----------------------------------------------------------------------------------

_lamports = st.one_of(
    st.integers(1, 64), st.integers(1, MAX_LAMPORT), st.integers(MAX_LAMPORT - 64, MAX_LAMPORT)
)
_hostile_op = st.tuples(st.sampled_from(["claim", "retract", "name"]), _lamports, st.integers(0, 3))
_keys = st.sampled_from(["price", "name", "size"])
#: (key, value, retract the key by ref first?) writes both replicas make after the hostile input.
_writes = st.lists(st.tuples(_keys, st.integers(0, 3), st.booleans()), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    honest=st.lists(st.tuples(_keys, st.integers(0, 3)), max_size=4),
    hostile=st.lists(
        st.tuples(st.lists(_hostile_op, min_size=1, max_size=3), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    admitted_jump=st.one_of(st.none(), _lamports),
    writes=_writes,
)
def test_uncounted_changes_of_any_lamport_leave_writing_and_state_as_if_never_seen(
    honest, hostile, admitted_jump, writes
):
    root, member = SigningKey.generate(), SigningKey.generate()
    seen, unseen = _closed(root), _closed(root)
    shared: list[bytes] = []
    if admitted_jump is not None:  # a member that counts, possibly jumping itself
        shared = [c.data for c in _feed(member, [admitted_jump])]
    for rep in (seen, unseen):
        rep.admit(member.author)
        rep.receive(shared)
        for key, value in honest:
            rep.add_claim("vendor", "acme", key, value)
    strangers = []
    for ops, dangling in hostile:  # one stranger's chain of changes, one op each; a dangling
        stranger = SigningKey.generate()  # chain waits for a predecessor that never comes
        chain: list[VerifiedChange] = []
        for i, (make, lamport, value) in enumerate(ops):
            prev = chain[-1].change_id if chain else (bytes(32) if dangling else None)
            op = _at(stranger, lamport, make, value)
            chain.append(_change(stranger, [op], seq=i + 1 + dangling, prev=prev))
        strangers.extend(c.data for c in chain)
    report = seen.receive(strangers)
    assert report.accepted + report.pending == len(strangers) and report.clock_jumps == ()
    for rep in (seen, unseen):
        for key, value, retract_first in writes:
            if retract_first:
                ref = rep.writer.claim("vendor", "acme", key, value).claim_ref
                rep.retract(claim_ref=ref)
            rep.add_claim("vendor", "acme", key, value)
    assert seen.writer.lamport == unseen.writer.lamport
    assert seen.state().digest() == unseen.state().digest()
    assert seen.log.ops() == unseen.log.ops()  # the very same ops were written
    assert seen.names() == unseen.names() and seen.clock_jumps() == unseen.clock_jumps()


@settings(max_examples=30, deadline=None)
@given(
    start=st.integers(MAX_LAMPORT - 8, MAX_LAMPORT),
    values=st.lists(st.integers(0, 5), min_size=1, max_size=12),
    closed=st.booleans(),
)
def test_writes_after_saturation_keep_succeeding(start, values, closed):
    root, other = SigningKey.generate(), SigningKey.generate()
    if closed:
        rep = _closed(root)
        rep.admit(other.author)
    else:
        rep = Replica.memory(space="team", key=root, clock=_clock)
    rep.receive([c.data for c in _feed(other, [start])])
    written = []
    for i, v in enumerate(values):
        written.append(rep.add_claim("vendor", "acme", f"k{i % 3}", v))
        if closed and i % 4 == 0:  # trust ops saturate too
            assert rep.grant(other.author, [f"r{i}"]).lamport <= MAX_LAMPORT
        if v == 5:
            assert rep.retract(written[-1]).lamport <= MAX_LAMPORT
    rep.declare_name("saturated")  # space ops saturate too
    assert rep.author_name(rep.author) == "saturated"
    for v in range(10):  # past the ceiling whatever came before
        written.append(rep.add_claim("vendor", "acme", "more", v))
    mine = [c.lamport for c in written]
    assert all(b > a or a == b == MAX_LAMPORT for a, b in itertools.pairwise(mine))
    assert mine[-2:] == [MAX_LAMPORT, MAX_LAMPORT]
    assert rep.writer.lamport == rep.trust_writer._lamport == MAX_LAMPORT
    assert len(rep.state().claims) == len(written) + 1  # and the other author's
    # latest is still (lamport, op id): of the saturated claims of one key the highest id wins
    shown = rep.state().active_claims()
    assert shown  # every claim is kept; resolution is the resolvers' (unchanged)


@settings(max_examples=200, deadline=None)
@given(st.lists(_lamports, min_size=1, max_size=40))
def test_lamport_gaps_follow_the_rule_for_the_set_whatever_the_order(lamports):
    gaps = LamportGaps()
    for i, lamport in enumerate(lamports):
        so_far = sorted(set(lamports[:i]))
        below = [x for x in so_far if x < lamport]
        gap = lamport - (below[-1] if below else 0)
        expected = gap if gap > LAMPORT_JUMP else None
        if lamport in so_far and lamport == MAX_LAMPORT:
            expected = None  # at the ceiling only the first change is named
        assert gaps.add(lamport) == expected
    distinct = sorted(set(lamports))
    want = {
        x: x - prev
        for prev, x in zip([0, *distinct], distinct, strict=False)
        if x - prev > LAMPORT_JUMP
    }
    assert gaps.jumps() == want
    assert LamportGaps(lamports).jumps() == want
    assert len(gaps) == len(want) + (0 if distinct[0] > LAMPORT_JUMP else 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(_lamports, min_size=1, max_size=3), min_size=1, max_size=5))
def test_clock_jumps_of_a_set_names_the_changes_at_each_jump(feeds):
    changes = []
    for lamports in feeds:
        key = SigningKey.generate()
        ops = [_at(key, x, value=i) for i, x in enumerate(lamports)]
        changes.append(_change(key, ops))
    found = clock_jumps(changes)
    jumps = LamportGaps(op.lamport for c in changes for op in c.ops).jumps()
    assert {j.lamport for j in found} == set(jumps)
    for j in found:
        assert j.gap == jumps[j.lamport]
    at_ceiling = [j for j in found if j.lamport == MAX_LAMPORT]
    assert len(at_ceiling) <= 1
    if at_ceiling:  # the first change at the ceiling in the given order
        first = next(c for c in changes if any(op.lamport == MAX_LAMPORT for op in c.ops))
        assert at_ceiling[0].change_id == first.change_id


def test_a_report_from_a_peer_with_bad_clock_jumps_is_not_a_report():
    good = MergeReport(accepted=1).to_json()
    assert MergeReport.from_json(good) == MergeReport(accepted=1)
    for bad in (
        "x",
        [{"author": "zz", "change_id": "00", "lamport": 1, "gap": 1}],
        [{"author": "00", "change_id": "00", "lamport": 0, "gap": 1}],
        [{"author": "00", "change_id": "00", "lamport": 1}],
    ):
        assert MergeReport.from_json({**good, "clock_jumps": bad}) is None
    older = dict(good)
    del older["clock_jumps"]  # a peer of an earlier release
    assert MergeReport.from_json(older) == MergeReport(accepted=1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
