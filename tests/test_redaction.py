"""Redaction (SEMANTICS §10): a redacted op's body leaves every replica and every file, for good.

Real files are searched for the secret's bytes after each step (the database, its -wal, every
file beside it, bundles written since); replicas are real SQLite stores unless the test is
about the algebra (Hypothesis over arrival orders, against `materialize` of the op-set without
the redacted claims).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.core.materializer import materialize
from statefuse.core.opset import OpSet
from statefuse.sync.declaration import SPACE_OP_TYPES
from statefuse.sync.key import SigningKey
from statefuse.sync.redaction import REDACTOR_ROLE, OpsRedacted, RefusedWhy
from statefuse.sync.replica import Replica, ReplicaError
from statefuse.sync.trust import TrustMode

SPACE = "forget"
SECRET = b"sk-live-7f3a9c1e5b2d"


def _files(path: Path) -> dict[str, bytes]:
    """Every file of the store: the database and whatever sits beside it with its name."""
    return {p.name: p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file()}


def _holding(path: Path, needle: bytes = SECRET) -> list[str]:
    return sorted(name for name, data in _files(path).items() if needle in data)


def _values(r: Replica) -> list[object]:
    return sorted(str(c.value) for c in r.state().claims.values())


def test_after_a_redaction_the_secret_is_in_no_file_of_the_store(tmp_path):
    path = tmp_path / "a.sqlite"
    with Replica.open(path, space=SPACE, create=True) as r:
        leaked = r.add_claim("svc/billing/api_key", SECRET.decode())
        r.add_claim("svc/billing/owner", "ann")
        r.snapshot()
        assert _holding(path), "the secret was written"
        done = r.redact(claim=leaked.op_id, reason="key leaked in a prompt")
        assert done.claims == (leaked.op_id,) and len(done.ops) == 1
        assert _values(r) == ["ann"]
        assert _holding(path) == []
        bundle = tmp_path / "out.bundle"
        r.export(bundle)
        assert SECRET not in bundle.read_bytes()
        assert all(SECRET not in d for d in r.all_change_bytes())
    assert _holding(path) == []  # after close (a new snapshot) too
    with Replica.open(path, space=SPACE) as r:
        assert _values(r) == ["ann"]
        assert r.get("svc/billing/api_key") is None
        [entry] = r.redactions().redacted.values()
        assert entry.reason == "key leaked in a prompt" and entry.by == r.author


def test_a_peer_that_had_the_body_deletes_it_and_a_later_peer_never_receives_it(tmp_path):
    a_path, b_path, c_path = (tmp_path / f"{n}.sqlite" for n in "abc")
    with (
        Replica.open(a_path, space=SPACE, create=True) as a,
        Replica.open(b_path, space=SPACE, create=True) as b,
    ):
        leaked = a.add_claim("svc/billing/api_key", SECRET.decode())
        a.add_claim("svc/billing/owner", "ann")
        b.merge(a)
        assert _holding(b_path)
        a.redact(claim=leaked.op_id, reason="rotated")
        b.merge(a)
        assert _values(b) == ["ann"]
        assert _holding(b_path) == []
        assert leaked.op_id in b.redactions().redacted
    with (
        Replica.open(a_path, space=SPACE) as a,
        Replica.open(c_path, space=SPACE, create=True) as c,
    ):
        c.merge(a)
        assert _values(c) == ["ann"]
        assert leaked.op_id in c.redactions().redacted
    assert _holding(c_path) == []


def test_a_body_from_a_stale_peer_after_the_redaction_is_dropped_on_receipt(tmp_path):
    stale = Replica.memory(space=SPACE)
    path = tmp_path / "a.sqlite"
    with Replica.open(path, space=SPACE, create=True) as a:
        leaked = a.add_claim("svc/billing/api_key", SECRET.decode())
        stale.merge(a)  # a stale copy that will never hear of the redaction
        a.redact(claim=leaked.op_id, reason="rotated")
        assert _holding(path) == []
        report = a.receive(stale.all_change_bytes())
        assert report.quarantined == 0
        assert _values(a) == []
    assert _holding(path) == []
    fresh = tmp_path / "fresh.sqlite"
    with Replica.open(fresh, space=SPACE, create=True) as f:
        f.merge(stale)  # the body first, from the stale peer
        assert _holding(fresh)
        with Replica.open(path, space=SPACE) as a:
            f.merge(a)  # then the redaction
        assert _values(f) == []
    assert _holding(fresh) == []


def test_redact_by_key_and_value_and_by_author_and_time_range():
    r = Replica.memory(space=SPACE)
    r.add_claim("ns/a/p", "keep")
    gone = r.add_claim("ns/a/p", "drop me")
    r.add_claim("ns/b/p", "other")
    done = r.redact(key="ns/a/p", value="drop me", reason="personal data")
    assert done.claims == (gone.op_id,)
    assert _values(r) == ["keep", "other"]
    with pytest.raises(ReplicaError) as exc:  # gone: not a claim here any more
        r.redact(claim=gone.op_id.hex(), reason="again")
    assert exc.value.rule == "known-claim"


def test_redact_by_author_and_range():
    clock = iter(range(1_000, 100_000, 1_000))
    r = Replica.memory(space=SPACE, clock=lambda: next(clock))
    early = r.add_claim("ns/a/p", "early")
    late = r.add_claim("ns/b/p", "late")
    done = r.redact(author=r.author, since=early.wall_ms, until=late.wall_ms, reason="gdpr")
    assert done.claims == (early.op_id,)
    assert _values(r) == ["late"]


def test_bad_redaction_requests_are_typed_errors_and_write_nothing():
    r = Replica.memory(space=SPACE)
    r.add_claim("ns/a/p", "v")
    before = r.change_ids()
    for kwargs, rule in (
        ({"reason": "x"}, "choose"),
        ({"key": "ns/a/p", "value": "nope", "reason": "x"}, "nothing-to-redact"),
        ({"key": "ns/a/p", "reason": " "}, "non-empty"),
        ({"value": "v", "reason": "x"}, "with-key"),
        ({"claim": "zz", "reason": "x"}, "id"),
    ):
        with pytest.raises(ReplicaError) as exc:
            r.redact(**kwargs)
        assert exc.value.rule == rule
    assert r.change_ids() == before


def test_in_an_open_space_only_the_author_or_the_creator_may_redact_and_others_are_reported():
    creator = Replica.memory(space=SPACE)
    creator.add_claim("ns/c/p", "by the creator")
    bob, eve = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    for r in (bob, eve):
        r.merge(creator)
    bobs = bob.add_claim("ns/b/p", "bob's secret")
    eve.merge(bob)
    with pytest.raises(ReplicaError) as exc:
        eve.redact(claim=bobs.op_id, reason="mischief")
    assert exc.value.rule == "not-authorized"
    # a hand-made redaction by eve still travels: refused everywhere, reported
    eve._write_redactions([bobs.op_id], "mischief", [])
    creator.merge(eve)
    creator.merge(bob)
    assert "bob's secret" in _values(creator)
    [refusal] = creator.redactions().refused
    assert (refusal.author, refusal.op_id, refusal.why) == (
        eve.author,
        bobs.op_id,
        RefusedWhy.NOT_AUTHORIZED,
    )
    bob.redact(claim=bobs.op_id, reason="mine to forget")  # the author may
    creator.merge(bob)
    assert "bob's secret" not in _values(creator)
    other = creator.add_claim("ns/x/p", "x")
    bob.merge(creator)
    creator.redact(claim=other.op_id, reason="creator's call")  # the creator may
    bob.merge(creator)
    assert "x" not in _values(bob)


def test_in_a_closed_space_the_root_or_a_granted_redactor_may_redact():
    root_key, ann_key, joe_key = (SigningKey.generate() for _ in range(3))
    root = Replica.memory(space=SPACE, key=root_key, root=root_key.author, mode=TrustMode.CLOSED)
    root.admit(ann_key.author)
    root.admit(joe_key.author)
    ann = Replica.memory(space=SPACE, key=ann_key, root=root_key.author, mode=TrustMode.CLOSED)
    joe = Replica.memory(space=SPACE, key=joe_key, root=root_key.author, mode=TrustMode.CLOSED)
    for r in (ann, joe):
        r.merge(root)
    secret = ann.add_claim("ns/a/p", "ann's secret")
    joe.merge(ann)
    with pytest.raises(ReplicaError) as exc:
        ann.redact(claim=secret.op_id, reason="own claim is not enough in a closed space")
    assert exc.value.rule == "not-authorized"
    root.grant(joe_key.author, [REDACTOR_ROLE])
    joe.merge(root)
    joe.redact(claim=secret.op_id, reason="redactor")
    ann.merge(joe)
    assert "ann's secret" not in _values(ann)


# --- the algebra: whatever the arrival order --------------------------------------------------


def _reference(changes: list[bytes], redacted: set[bytes]):  # type: ignore[no-untyped-def]
    """materialize of the op-set of ``changes`` without the redacted claims."""
    r = Replica.memory(space=SPACE)
    r.receive(changes)
    ops = [
        op
        for c in r.log.changes()
        for op in c.ops
        if not isinstance(op, SPACE_OP_TYPES) and op.op_id not in redacted
    ]
    return materialize(OpSet(ops), registry=r.registry)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.text(max_size=3)), max_size=8),
    st.sets(st.integers(0, 9)),
    st.randoms(use_true_random=False),
)
def test_every_replica_converges_on_the_op_set_without_the_redacted_claims(writes, pick, rnd):
    authors = [Replica.memory(space=SPACE) for _ in range(3)]
    for a in authors[1:]:
        a.merge(authors[0])
    claims = []
    for who, key, value in writes:
        claims.append((who, authors[who].add_claim(f"ns/s{key}/p", value)))
    stale = Replica.memory(space=SPACE)  # a peer holding every body, never told of redactions
    for a in authors:
        stale.receive(a.all_change_bytes())
    redacted: set[bytes] = set()
    for i in sorted(pick):
        if i < len(claims):
            who, claim = claims[i]
            authors[who].redact(claim=claim.op_id, reason="test")
            redacted.add(claim.op_id)
    # every change ever written: the stale full-body copies and the redacting authors' copies
    everything = stale.all_change_bytes()
    for a in authors:
        everything.extend(a.all_change_bytes())
    reference = _reference(everything, redacted)
    order = list(everything)
    rnd.shuffle(order)
    fresh = Replica.memory(space=SPACE)
    for i in range(0, len(order), 3):
        fresh.receive(order[i : i + 3])
    assert fresh.state().digest() == reference.digest()
    assert all(op.op_id not in redacted for c in fresh.log.changes() for op in c.ops), (
        "a redacted body stayed"
    )
    assert set(fresh.redactions().redacted) == redacted
    if redacted:
        assert any(type(op) is OpsRedacted for c in fresh.log.changes() for op in c.ops)


# --- the command line, through real processes --------------------------------------------------


def _cli(store: Path, *argv: str):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_statefuse_redact_deletes_the_secret_lists_the_audit_and_refuses_bad_input(tmp_path):
    import json

    store = tmp_path / "cli.sqlite"
    assert _cli(store, "init", "--space", SPACE).returncode == 0
    assert _cli(store, "claim", "svc/billing/api_key", SECRET.decode()).returncode == 0
    assert _cli(store, "claim", "svc/billing/owner", "ann").returncode == 0
    assert _holding(store)
    no_reason = _cli(store, "redact", "--key", "svc/billing/api_key")
    assert no_reason.returncode != 0
    assert no_reason.stderr.strip().startswith("Error:") and "--reason" in no_reason.stderr
    assert "Traceback" not in no_reason.stderr
    done = _cli(store, "redact", "--key", "svc/billing/api_key", "--reason", "leaked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Redacted 1 claim") and len(done.stdout.splitlines()) == 1
    assert _holding(store) == []
    listed = json.loads(_cli(store, "--json", "redact", "--list").stdout)
    [row] = listed["redacted"]
    assert row["reason"] == "leaked" and SECRET.decode() not in json.dumps(listed)
    again = _cli(store, "redact", "--key", "svc/billing/api_key", "--reason", "leaked")
    assert again.returncode != 0 and again.stderr.startswith("Error:")
    shown = _cli(store, "--json", "show")
    assert SECRET.decode() not in shown.stdout and "ann" in shown.stdout


# --- the MCP tool, through the SDK client ------------------------------------------------------


def test_the_mcp_redact_tool_is_offered_only_when_the_server_allows_it(tmp_path):
    pytest.importorskip("mcp")
    from statefuse.entry.mcp import build_server
    from tests.test_mcp import connected

    path = tmp_path / "mcp.sqlite"
    with Replica.open(path, space=SPACE, create=True) as r:
        leaked = r.add_claim("svc/billing/api_key", SECRET.decode())
        with connected(build_server(r)) as s:
            names = {t.name for t in s.portal.call(s.client.list_tools).tools}
            assert "redact" not in names and "retract" in names
        with connected(build_server(r, allow_redact=True)) as s:
            tools = {t.name: t for t in s.portal.call(s.client.list_tools).tools}
            assert tools["redact"].annotations.destructive_hint is True
            line = s.refused("redact", reason="x", key="svc/none/here")
            assert line.startswith("Error: ") and "nothing-to-redact" in line
            out = s.ok("redact", reason="leaked", claim_ids=[leaked.op_id.hex()])
            assert out["redacted"] == [leaked.op_id.hex()] and out["reason"] == "leaked"
            assert SECRET.decode() not in s.text("recall", query="billing api key")
        assert _holding(path) == []


_REDACTING = """
import sys
from statefuse.sync.replica import Replica
path, n = sys.argv[1], int(sys.argv[2])
with Replica.open(path) as r:
    ids = sorted(c.op_id for c in r.state().active_claims() if c.subject.startswith("key"))
    for cid in ids[:n]:
        r.redact(claim=cid, reason="rotated")
        print(cid.hex(), flush=True)
"""


@pytest.mark.parametrize("acknowledged", [1, 4, 9])
def test_a_redacting_process_killed_mid_call_leaves_a_sound_store_and_no_acknowledged_secret(
    tmp_path, acknowledged
):
    import signal
    import subprocess
    import sys

    path = tmp_path / "a.sqlite"
    secrets = {}
    with Replica.open(path, space=SPACE, create=True) as r, r.batch():
        for i in range(40):
            c = r.add_claim(f"svc/key{i:02d}/value", f"{SECRET.decode()}-{i:02d}")
            secrets[c.op_id] = f"{SECRET.decode()}-{i:02d}".encode()
        r.add_claim("svc/billing/owner", "ann")
    proc = subprocess.Popen(
        [sys.executable, "-c", _REDACTING, str(path), "40"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    done = []
    for _ in range(acknowledged):  # wait for the event: that many redactions returned
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "ended early"
        done.append(bytes.fromhex(line.strip()))
    proc.send_signal(signal.SIGKILL)  # most likely inside the next redact call
    proc.wait(timeout=120)
    done += [bytes.fromhex(line) for line in proc.stdout.read().split() if line]
    with Replica.open(path, space=SPACE, load="verify") as r:
        assert r.damage is None
        redacted = r.redactions().redacted
        assert set(done) <= set(redacted)
        left = {c.op_id for c in r.state().active_claims()}
        # each secret is either still a claim (its redaction never returned) or redacted
        assert all((cid in left) != (cid in redacted) for cid in secrets)
        assert [c.value for c in r.state().active_claims() if c.subject == "billing"] == ["ann"]
        r.add_claim("svc/billing/note", "after")  # writable, on its own feed
        assert r.forks() == []
    # what returned as redacted is in no file of the store
    held = _files(path)
    assert not [cid for cid in done if any(secrets[cid] in data for data in held.values())]
