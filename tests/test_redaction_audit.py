"""The audit of a redaction (SEMANTICS §10): a key's history and a conflict's lifecycle say that
a claim was redacted, by whom, when and why, and never what it said.

Real SQLite stores; the command line through real processes (``python -m statefuse``); the
MCP tools through the SDK client. Every output (table and JSON) is searched for the secret.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from statefuse.core.lifecycle import LifecycleEvent
from statefuse.sync.replica import Replica

SPACE = "audit"
KEY = "svc/billing/api_key"
SECRET = "sk-live-7f3a9c1e5b2d"
REASON = "key leaked in a prompt"


def _files_hold(path: Path, needle: bytes) -> bool:
    return any(needle in p.read_bytes() for p in path.parent.glob(path.name + "*") if p.is_file())


def _seed(r: Replica) -> tuple[bytes, bytes]:
    """Two values at KEY (a conflict), one the secret; returns (kept id, secret id)."""
    kept = r.add_claim(KEY, "sk-rotated-placeholder", provenance="vault")
    leaked = r.add_claim(KEY, SECRET, provenance="pasted by hand")
    r.add_claim("svc/billing/owner", "ann")
    return kept.op_id, leaked.op_id


def test_history_and_lifecycle_name_the_redaction_by_whom_when_why_never_what(tmp_path):
    a_path, b_path, c_path = (tmp_path / f"{n}.sqlite" for n in "abc")
    with (
        Replica.open(a_path, space=SPACE, create=True) as a,
        Replica.open(b_path, space=SPACE, create=True) as b,
    ):
        kept, leaked = _seed(a)
        b.merge(a)  # b holds the body before the redaction
        assert a.state().conflict_of(*KEY.split("/"), "global") is not None
        done = a.redact(claim=leaked, reason=REASON)
        [op] = done.ops
        b.merge(a)
        for r in (a, b):
            events = r.history(KEY)
            assert SECRET not in repr(events)
            redacted = [e for e in events if e.redacted is not None]
            assert [(e.event, e.claim_id) for e in redacted] == [
                ("claim", leaked),
                ("redact", leaked),
            ]
            asserted, cut = redacted
            assert asserted.claim is None and asserted.author == a.author and asserted.why == ""
            assert asserted.scope == "global"
            assert (cut.author, cut.lamport, cut.op_id, cut.why) == (
                a.author,
                op.lamport,
                op.op_id,
                REASON,
            )
            assert cut.redacted is not None and cut.redacted.wall_ms == op.wall_ms
            assert [e.claim_id for e in events if e.redacted is None] == [kept]
            assert events[-1] is cut  # the latest: the redaction came last
            # the lifecycle: the redaction at the locus, stamped with its op
            lifecycle = r.conflict_history(KEY)
            assert SECRET not in repr(lifecycle)
            [red] = [e for e in lifecycle if e.event is LifecycleEvent.REDACTED]
            assert (red.op_id, red.author, red.lamport, red.reason, red.claim_id) == (
                op.op_id,
                a.author,
                op.lamport,
                REASON,
                leaked,
            )
            assert red.to_dict()["claim_id"] == leaked.hex() and red.values == 1
            # other keys and scopes know nothing of it
            assert all(e.redacted is None for e in r.history("svc/billing/owner"))
            assert all(e.redacted is None for e in r.history(KEY, scope="draft"))
            assert r.conflict_history(KEY, scope="draft") == []
            [entry] = r.redacted_claims()
            assert entry.held and entry.op_id == leaked and entry.reason == REASON
        assert not _files_hold(a_path, SECRET.encode())
        assert not _files_hold(b_path, SECRET.encode())
    with (
        Replica.open(a_path, space=SPACE) as a,
        Replica.open(c_path, space=SPACE, create=True) as c,
    ):
        assert [e.event for e in a.history(KEY) if e.redacted] == ["claim", "redact"]  # kept
        c.merge(a)  # c never held the body: it counts the redaction, cannot place it
        [entry] = c.redacted_claims()
        assert (entry.op_id, entry.held, entry.by) == (leaked, False, a.author)
        assert entry.reason == REASON
        assert c.redacted_claims(held=True) == []
        assert all(e.redacted is None for e in c.history(KEY))
        assert leaked in c.redactions().redacted


def test_a_redacted_claim_in_another_scope_is_placed_in_that_scope():
    r = Replica.memory(space=SPACE)
    r.add_claim(KEY, "public", scope="task:t1")
    leaked = r.add_claim(KEY, SECRET, scope="task:t1")
    r.redact(claim=leaked.op_id, reason=REASON)
    [asserted, cut] = [e for e in r.history(KEY) if e.redacted is not None]
    assert asserted.scope == cut.scope == "task:t1"
    assert [e.event for e in r.history(KEY, scope="task:t1") if e.redacted] == ["claim", "redact"]
    assert [e.event for e in r.history(KEY, scope="global") if e.redacted] == []
    [red] = [e for e in r.conflict_history(KEY, scope="task:t1") if e.event.value == "redacted"]
    assert red.claim_id == leaked.op_id


def test_a_retraction_before_the_redaction_stays_in_the_history_on_every_open(tmp_path):
    path = tmp_path / "r.sqlite"
    want = [("claim", ""), ("retract", "wrong key"), ("redact", REASON)]
    with Replica.open(path, space=SPACE, create=True) as r:
        leaked = r.add_claim(KEY, SECRET)
        r.add_claim("svc/billing/owner", "ann")
        r.retract(leaked, reason="wrong key")
        r.redact(claim=leaked.op_id, reason=REASON)
        assert [(e.event, e.why) for e in r.history(KEY)] == want
    with Replica.open(path) as r:  # opened on its derived state
        assert not r.loaded
        assert [e.event for e in r.history("svc/billing/owner")] == ["claim"]
        assert not r.loaded  # the audit records are read alone: other keys stay cheap
        assert [(e.event, e.why) for e in r.history(KEY)] == want


# --- the command line, through real processes --------------------------------------------------


def _cli(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _ok(store: Path, *argv: str) -> str:
    done = _cli(store, *argv)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert SECRET not in done.stdout and SECRET not in done.stderr
    return done.stdout


def test_statefuse_history_conflicts_history_and_redact_list_show_the_audit(tmp_path):
    store = tmp_path / "cli.sqlite"
    _ok(store, "init", "--space", SPACE)
    _ok(store, "claim", KEY, "sk-rotated-placeholder")
    assert _cli(store, "claim", KEY, SECRET).returncode == 0
    leaked = json.loads(_cli(store, "--json", "history", KEY).stdout)["events"][-1]["claim_id"]
    _ok(store, "redact", "--key", KEY, "--value", SECRET, "--reason", REASON)
    assert not _files_hold(store, SECRET.encode())

    table = _ok(store, "history", KEY)
    [cut] = [line for line in table.splitlines() if " redact " in line]
    assert "(redacted)" in cut and REASON in cut and leaked[:12] in cut
    data = json.loads(_ok(store, "--json", "history", KEY))
    redacted = [e for e in data["events"] if e["redacted"]]
    assert [(e["event"], e["claim_id"], e["value"]) for e in redacted] == [
        ("claim", leaked, None),
        ("redact", leaked, None),
    ]
    assert redacted[1]["why"] == REASON and redacted[1]["scope"] == "global"

    lifecycle = _ok(store, "conflicts", "--history", KEY)
    [line] = [x for x in lifecycle.splitlines() if "redacted" in x]
    assert REASON in line and leaked[:12] in line
    events = json.loads(_ok(store, "--json", "conflicts", "--history", KEY))["events"]
    [red] = [e for e in events if e["event"] == "redacted"]
    assert red["claim_id"] == leaked and red["reason"] == REASON

    listed = json.loads(_ok(store, "--json", "redact", "--list"))
    [row] = listed["redacted"]
    assert (row["op_id"], row["held"], row["reason"]) == (leaked, True, REASON)
    assert row["lamport"] == red["lamport"] and row["redaction"] == red["op_id"]
    assert "never held here" not in _ok(store, "redact", "--list")

    # a store that synced after the redaction: it lists the redaction and says it never held it
    later = tmp_path / "later.sqlite"
    with Replica.open(later, space=SPACE, create=True) as c, Replica.open(store) as a:
        c.merge(a)
    line = _ok(later, "redact", "--list").strip()
    assert REASON in line and "never held here" in line
    assert "redact" not in _ok(later, "history", KEY)
    assert not _files_hold(later, SECRET.encode())


# --- the MCP tools, through the SDK client ------------------------------------------------------


def test_the_mcp_history_and_conflict_history_tools_show_the_audit(tmp_path):
    pytest.importorskip("mcp")
    from statefuse.mcp import build_server
    from tests.test_mcp import connected

    with Replica.open(tmp_path / "mcp.sqlite", space=SPACE, create=True) as r:
        _, leaked = _seed(r)
        done = r.redact(claim=leaked, reason=REASON)
        with connected(build_server(r)) as s:
            history = s.ok("history", key=KEY)
            assert SECRET not in json.dumps(history)
            redacted = [e for e in history["events"] if e["redacted"]]
            assert [(e["event"], e["claim_id"], e["value"]) for e in redacted] == [
                ("claim", leaked.hex(), None),
                ("redact", leaked.hex(), None),
            ]
            assert redacted[1]["why"] == REASON and redacted[1]["author"] == r.author.hex()
            text = s.text("history", key=KEY)
            assert SECRET not in text and "(redacted)" in text and REASON in text
            lifecycle = s.ok("conflict_history", key=KEY)
            assert SECRET not in json.dumps(lifecycle)
            [red] = [e for e in lifecycle["events"] if e["event"] == "redacted"]
            assert (red["claim_id"], red["op_id"], red["reason"]) == (
                leaked.hex(),
                done.ops[0].op_id.hex(),
                REASON,
            )
            text = s.text("conflict_history", key=KEY)
            assert SECRET not in text and "redacted" in text and REASON in text


def test_the_history_of_a_redacted_claim_by_its_id_says_it_was_redacted(tmp_path):
    from statefuse.sync.replica import UnknownClaimError

    r = Replica.open(tmp_path / "s.sqlite", space="audit", create=True)
    c = r.add_claim("ns/a/p", "the api key is sk-1234")
    r.redact(claim=c.op_id, reason="leaked key")
    for ref in (c.op_id, c.op_id.hex()):
        with pytest.raises(UnknownClaimError) as exc:
            r.history(ref)
        assert exc.value.rule == "redacted-claim" and "leaked key" in str(exc.value)
        assert "sk-1234" not in str(exc.value)
    with pytest.raises(UnknownClaimError) as other:
        r.history(bytes(32))
    assert other.value.rule != "redacted-claim"
    r.close()
