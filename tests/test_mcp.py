"""The MCP server (`statefuse.entry.mcp`), driven by the real MCP SDK client: in process through the
SDK's in-memory transport (JSON-RPC messages, initialize handshake), then as ``statefuse mcp``
processes over stdio and streamable HTTP, and two servers that sync through an HTTP peer.

Under ``CI=true`` nothing here may skip: a missing SDK fails the collection loudly.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import mcp  # noqa: F401 - CI installs the test extra, which includes the SDK: never skip
else:
    pytest.importorskip("mcp", reason='the MCP SDK is not installed: pip install "statefuse[mcp]"')

import anyio
import anyio.from_thread
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from statefuse.entry.mcp import CONTEXT_URI, build_server
from statefuse.storage.testing import full_key_lines
from statefuse.sync.http import serve
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
SPACE = "team"
TOOLS = {
    "remember",
    "recall",
    "search",
    "retract",
    "conflicts",
    "decide",
    "history",
    "conflict_history",
    "sync",
}
#: Seconds a server process gets to start, answer or stop before the test fails: a hang guard,
#: never a budget (a loaded machine may be slow; only one that never answers fails).
PROCESS_TIMEOUT = 120.0
#: Two claims whose ids share 9 hex digits when written first by the key of SEED under the clock
#: WALL (pinned in tests/test_cli.py, where they were found).
SEED, WALL, TWINS = bytes(range(32)), 1_767_225_600_000, ("a15755", "b20195")


class Session:
    """A connected MCP client, called synchronously (the SDK's client runs in a portal)."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, client: Client) -> None:
        self.portal = portal
        self.client = client

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(self.client.call_tool, tool, arguments)

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        return result.structured_content

    def text(self, tool: str, **arguments: Any) -> str:
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content
        return result.content[0].text  # type: ignore[union-attr]

    def refused(self, tool: str, **arguments: Any) -> str:
        """The one error line of a call that must be refused."""
        result = self.call(tool, **arguments)
        assert result.is_error, result
        (content,) = result.content
        return content.text  # type: ignore[union-attr]


@contextlib.contextmanager
def connected(server: Any) -> Iterator[Session]:
    """A client session with ``server`` (an MCPServer in this process, a URL or a transport).
    In-process servers go through the in-memory transport with the initialize handshake
    (``mode="legacy"``): JSON-RPC messages, as over stdio."""
    mode = "auto" if isinstance(server, str) else "legacy"
    with anyio.from_thread.start_blocking_portal() as portal:
        client = Client(server, mode=mode, read_timeout_seconds=PROCESS_TIMEOUT)
        with portal.wrap_async_context_manager(client) as entered:
            yield Session(portal, entered)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Replica]:
    replica = Replica.open(tmp_path / "team.db", space=SPACE, create=True)
    yield replica
    replica.close()


@pytest.fixture
def session(store: Replica) -> Iterator[Session]:
    with connected(build_server(store)) as s:
        yield s


def _other(*claims: tuple[str, Any, str]) -> Replica:
    """Another agent's replica holding ``(key, value, provenance)`` claims."""
    other = Replica.memory(space=SPACE)
    for key, value, provenance in claims:
        other.add_claim(*key.split("/"), value, provenance=provenance)
    return other


# --- what the server offers ----------------------------------------------------------------------


def test_the_server_offers_the_eight_tools_with_schemas_and_the_context_resource(session):
    tools = {t.name: t for t in session.portal.call(session.client.list_tools).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and tool.input_schema["type"] == "object"
        assert tool.output_schema is not None and tool.output_schema["properties"]
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (
            tool.name in {"recall", "search", "conflicts", "history", "conflict_history"}
        )
    remember = tools["remember"].input_schema
    assert sorted(remember["required"]) == ["key", "value"]
    number, unset = remember["properties"]["confidence"]["anyOf"]
    assert (number["maximum"], unset["type"]) == (1, "null")
    assert remember["properties"]["confidence"]["default"] is None
    assert "description" in remember["properties"]["key"]
    assert set(tools["remember"].output_schema["required"]) >= {"claim_id", "conflict"}
    resources = session.portal.call(session.client.list_resources).resources
    assert [str(r.uri) for r in resources] == [CONTEXT_URI]
    assert "recall" in (session.client.instructions or "")


# --- remember -------------------------------------------------------------------------------------


def test_remember_stores_a_claim_signed_by_the_servers_key_before_it_returns(store, session):
    got = session.ok(
        "remember",
        key="project/launch/deadline",
        value="2026-03-25",
        provenance="kickoff notes",
        confidence=0.8,
    )
    assert got["key"] == "project/launch/deadline" and got["value"] == "2026-03-25"
    assert got["conflict"] is False and got["replaced"] == []
    assert store.path is not None
    with Replica.open(store.path, readonly=True) as reader:  # on disk, beside the live writer
        c = reader.state().claims[bytes.fromhex(got["claim_id"])]
    assert (c.namespace, c.subject, c.predicate, c.scope) == (
        "project",
        "launch",
        "deadline",
        "global",
    )
    assert (c.value, c.provenance, c.confidence, c.author) == (
        "2026-03-25",
        "kickoff notes",
        0.8,
        store.author,
    )


def test_remember_without_a_confidence_records_it_unset_and_search_shows_null(store, session):
    got = session.ok("remember", key="project/launch/owner", value="dana")
    assert store.path is not None
    with Replica.open(store.path, readonly=True) as reader:
        assert reader.state().claims[bytes.fromhex(got["claim_id"])].confidence is None
    (found,) = session.ok("search", query="owner")["claims"]
    assert found["confidence"] is None


def test_remember_replaces_its_own_value_unless_told_to_add_one_beside_it(store, session):
    first = session.ok("remember", key="svc/api/status", value="up")
    second = session.ok("remember", key="svc/api/status", value="down")
    assert second["replaced"] == [first["claim_id"]] and second["conflict"] is False
    assert [c.value for c in store.state().active_at("svc", "api", "status")] == ["down"]
    beside = session.ok("remember", key="svc/api/status", value="degraded", update=False)
    assert beside["replaced"] == [] and beside["conflict"] is True
    assert [c["claim_id"] for c in beside["conflicts_with"]] == [second["claim_id"]]
    assert sorted(c.value for c in store.state().active_at("svc", "api", "status")) == [
        "degraded",
        "down",
    ]


def test_remember_says_which_claims_of_other_authors_now_disagree(store, session):
    other = _other(("vendor/acme/price", 1200, "vendor email"))
    store.merge(other)
    got = session.ok("remember", key="vendor/acme/price", value=1150, provenance="quote")
    assert got["conflict"] is True
    (rival,) = got["conflicts_with"]
    assert (rival["value"], rival["author"], rival["provenance"]) == (
        1200,
        other.author.hex(),
        "vendor email",
    )
    agree = session.ok("remember", key="vendor/acme/price", value=1200, update=False)
    assert [c["value"] for c in agree["conflicts_with"]] == [1150]  # agreement is no conflict


def test_remember_takes_escaped_keys_scopes_and_every_kind_of_json_value(store, session):
    got = session.ok("remember", key="docs/a%2Fb/title", value="Guide", scope="task:t1")
    (c,) = store.state().active_at("docs", "a/b", "title", "task:t1")
    assert got["key"] == "docs/a%2Fb/title" and c.value == "Guide"
    for value in (None, True, 7, 1.5, [1, "two"], {"nested": {"ok": [True]}}):
        stored = session.ok("remember", key="values/kind/x", value=value, update=False)
        assert store.state().claims[bytes.fromhex(stored["claim_id"])].value == value
        assert stored["value"] == value
    raw = session.ok("remember", key="values/kind/raw", value={"$bytes": "00ff"})
    assert store.state().claims[bytes.fromhex(raw["claim_id"])].value == b"\x00\xff"


# --- bad input ------------------------------------------------------------------------------------


BAD_CALLS = [
    ("remember", {"key": "vendor/acme", "value": 1}, "key", "key-syntax"),
    ("remember", {"key": "a/b/c/d", "value": 1}, "key", "key-syntax"),
    ("remember", {"key": "a/b/c"}, "value", "missing"),
    ("remember", {"key": "a/b/c", "value": 1, "confidence": 2}, "confidence", "less_than_equal"),
    ("remember", {"key": "a/b/c", "value": 1, "scope": "team"}, "scope", "scope-format"),
    ("remember", {"key": "a/b/c", "value": 2**70}, "value", "int64"),
    ("remember", {"key": "a/b/c", "value": {"$bytes": "zz"}}, "value", "bytes-hex"),
    ("remember", {"key": "a/b/c", "value": 1, "update": "often"}, "update", "bool_parsing"),
    ("recall", {}, "query", "missing"),
    ("recall", {"query": "x", "budget": 0}, "budget", "greater_than_equal"),
    ("recall", {"query": "x", "role": [""]}, "role", "set-of-str"),
    ("recall", {"query": "x", "session": ""}, "session", "non-empty-str"),
    ("search", {"limit": 0}, "limit", "greater_than_equal"),
    ("search", {"prefix": "a//b"}, "prefix", "key-syntax"),
    ("retract", {}, "claim_id", "one-target"),
    ("retract", {"claim_id": "1234"}, "claim_id", "id-prefix"),
    ("retract", {"claim_id": "00000000"}, "claim_id", "known-id"),
    ("retract", {"claim_id": "00000000", "key": "a/b/c"}, "claim_id", "one-target"),
    ("retract", {"key": "a/b/c", "value": "never said"}, "value", "active-value"),
    ("conflicts", {"prefix": "a/b/c/d"}, "prefix", "key-syntax"),
    ("decide", {"key": "a/b/c", "claim_id": "00000000"}, "key", "conflict"),
    ("decide", {"key": "a/b/c", "outcome": "choose"}, "outcome", "outcome"),
    ("history", {"key": "nokey"}, "key", "key-syntax"),
    ("sync", {}, "peer", "peers-configured"),
]


@pytest.mark.parametrize(
    ("tool", "arguments", "field", "rule"),
    BAD_CALLS,
    ids=[f"{t}-{f}-{r}" for t, _, f, r in BAD_CALLS],
)
def test_bad_input_is_one_error_line_naming_the_field_and_the_rule(
    store, session, tool, arguments, field, rule
):
    before = store.state().digest(), len(store)
    line = session.refused(tool, **arguments)
    assert "\n" not in line and "Traceback" not in line, line
    assert re.fullmatch(rf"Error: {re.escape(field)}: .+ \[rule: {re.escape(rule)}\]", line), line
    assert (store.state().digest(), len(store)) == before  # nothing was written


def test_a_read_only_store_answers_writes_with_the_reason_and_still_reads(tmp_path):
    path = tmp_path / "team.db"
    with Replica.open(path, space=SPACE, create=True) as writer:
        writer.add_claim("svc", "api", "status", "up")
    with Replica.open(path, readonly=True) as reader, connected(build_server(reader)) as s:
        line = s.refused("remember", key="svc/api/status", value="down")
        assert line.startswith("Error: store: ") and line.endswith("[rule: readonly]"), line
        assert s.ok("search", query="api")["total"] == 1


# --- recall and the context resource --------------------------------------------------------------


def test_recall_is_the_token_budgeted_context_a_viewer_may_see(store, session):
    store.add_constraint("proj", "budget", "total", "$150,000", constraint="budget")
    store.add_claim("vendor", "vendor_a", "pricing", "$95,000/year")
    store.add_claim("vendor", "vendor_b", "pricing", "$140,000/year")
    store.add_claim("hr", "payroll", "total", "$2.1M", visibility=["hr"])
    store.add_claim("chat", "s1", "mood", "tense", scope="session:s1")
    for i in range(200):
        store.add_claim("ops", f"item{i}", "note", f"filler {i}")
    got = session.ok("recall", query="Can we sign vendor_a?", budget=2000)
    assert got["token_count"] <= got["budget"] == 2000
    names = [s["name"] for s in got["sections"]]
    assert names.index("constraints") < names.index("facts")
    (facts,) = [s for s in got["sections"] if s["name"] == "facts"]
    last = full_key_lines(facts["lines"])[-1]
    assert last == "vendor/vendor_a/pricing: $95,000/year"  # most relevant last
    shown = {cid for s in got["sections"] for cid in s["claim_ids"]}
    assert shown <= {c.claim_id.hex() for c in store.state().active_claims()}
    assert "$2.1M" not in got["text"] and "tense" not in got["text"]
    assert got["excluded"]  # the hidden claims are counted, never shown
    assert session.text("recall", query="Can we sign vendor_a?") == got["text"]
    opened = session.ok("recall", query="payroll mood", role="hr", session="s1")
    assert "$2.1M" in opened["text"] and "tense" in opened["text"]
    small = session.ok("recall", query="vendor_a", budget=150)
    assert small["token_count"] <= 150 < got["token_count"]


def test_the_context_resource_is_the_current_memory_every_time_it_is_read(session):
    def read() -> str:
        result = session.portal.call(session.client.read_resource, CONTEXT_URI)
        (content,) = result.contents
        return content.text  # type: ignore[union-attr]

    session.ok("remember", key="project/launch/owner", value="dana")
    assert "owner: dana" in read()
    session.ok("remember", key="project/launch/owner", value="eli")
    assert "owner: eli" in read() and "dana" not in read()


# --- search ---------------------------------------------------------------------------------------


def test_search_ranks_matches_filters_by_prefix_and_scope_and_marks_conflicts(store, session):
    store.merge(_other(("vendor/acme/price", 1200, "vendor email")))
    session.ok("remember", key="vendor/acme/price", value=1150)
    session.ok("remember", key="vendor/globex/price", value=900)
    session.ok("remember", key="project/launch/owner", value="dana smith")
    session.ok("remember", key="project/launch/owner", value="dana", scope="task:t1")

    acme = session.ok("search", query="acme price")
    assert acme["total"] == 3  # "price" matches globex too, ranked below both acme claims
    assert [c["key"] for c in acme["claims"]][:2] == ["vendor/acme/price"] * 2
    assert acme["claims"][2]["key"] == "vendor/globex/price"
    assert [c["notes"] for c in acme["claims"]] == [["conflict"], ["conflict"], []]
    assert session.ok("search", query="dana")["total"] == 2
    by_prefix = session.ok("search", prefix="project/launch")
    assert [(c["key"], c["scope"]) for c in by_prefix["claims"]] == [
        ("project/launch/owner", "global"),
        ("project/launch/owner", "task:t1"),
    ]
    assert session.ok("search", prefix="project", scope="task:t1")["claims"][0]["value"] == "dana"
    one = session.ok("search", prefix="vendor", limit=1)
    assert one["total"] == 3 and len(one["claims"]) == 1
    assert session.ok("search", query="nothing matches this")["total"] == 0


# --- retract --------------------------------------------------------------------------------------


def test_retract_takes_a_unique_id_prefix_and_refuses_an_ambiguous_one():
    replica = Replica.memory(space=SPACE, key=SigningKey.from_seed(SEED), clock=lambda: WALL)
    one, two = (
        replica.add_claim("team", "twins", "note", v, confidence=1.0).claim_id.hex() for v in TWINS
    )
    assert one[:9] == two[:9], "the pinned twins no longer share a prefix"
    with connected(build_server(replica)) as s:
        line = s.refused("retract", claim_id=one[:8])
        assert line.endswith("[rule: unique-prefix]") and one[:12] in line and two[:12] in line
        got = s.ok("retract", claim_id=one[:10], reason="typo")
        assert [c["claim_id"] for c in got["retracted"]] == [one]
        assert got["semantic"] is False and got["reason"] == "typo"
        assert not replica.state().is_active(bytes.fromhex(one))
        assert replica.state().is_active(bytes.fromhex(two))
        again = s.refused("retract", claim_id=one)
        assert again.endswith("[rule: active]")


def test_retract_by_key_and_value_withdraws_every_copy_even_those_that_arrive_later(store, session):
    stale = _other(("vendor/acme/price", 1150, "old list"))
    store.merge(stale)
    mine = session.ok("remember", key="vendor/acme/price", value=1150, update=False)
    kept = session.ok("remember", key="vendor/globex/price", value=1150)
    got = session.ok("retract", key="vendor/acme/price", value=1150, reason="withdrawn")
    assert got["semantic"] is True
    assert len(got["retracted"]) == 2 and mine["claim_id"] in {
        c["claim_id"] for c in got["retracted"]
    }
    stale.add_claim("vendor", "acme", "price", 1150, provenance="resent")  # never saw it
    store.merge(stale)
    assert store.state().active_at("vendor", "acme", "price") == []
    assert store.state().is_active(bytes.fromhex(kept["claim_id"]))


# --- conflicts and decide -------------------------------------------------------------------------


def test_conflicts_show_every_candidate_with_its_author_and_provenance_until_decided(
    store, session
):
    other = _other(("vendor/acme/price", 1200, "vendor email"))
    store.merge(other)
    mine = session.ok("remember", key="vendor/acme/price", value=1150, provenance="quote")
    session.ok("remember", key="project/launch/owner", value="dana")

    (conflict,) = session.ok("conflicts")["conflicts"]
    assert (conflict["key"], conflict["scope"], conflict["decision"]) == (
        "vendor/acme/price",
        "global",
        None,
    )
    got = {(c["value"], c["author"], c["provenance"]) for c in conflict["candidates"]}
    assert got == {(1150, store.author.hex(), "quote"), (1200, other.author.hex(), "vendor email")}
    assert len({c["group"] for c in conflict["candidates"]}) == 2
    assert session.ok("conflicts", prefix="project")["conflicts"] == []

    theirs = next(c["claim_id"] for c in conflict["candidates"] if c["value"] == 1200)
    not_a_candidate = session.ok("remember", key="vendor/globex/price", value=1)["claim_id"]
    line = session.refused("decide", key="vendor/acme/price", claim_id=not_a_candidate)
    assert line.endswith("[rule: known-id]")
    decided = session.ok(
        "decide", key="vendor/acme/price", claim_id=theirs[:10], reason="vendor confirmed"
    )
    assert (decided["claim_id"], decided["value"], decided["reason"]) == (
        theirs,
        1200,
        "vendor confirmed",
    )
    assert session.ok("conflicts")["conflicts"] == []
    (settled,) = session.ok("conflicts", include_decided=True)["conflicts"]
    assert settled["decision"]["claim_id"] == theirs
    assert settled["decision"]["decision_id"] == decided["decision_id"]
    state = store.state()
    (lib,) = state.conflicts
    decision = state.decision_for(lib)
    assert decision is not None and decision.selected_claim_id.hex() == theirs
    assert mine["claim_id"] in {c.claim_id.hex() for c in state.active_claims()}  # nothing lost
    text = session.text("search", query="acme")
    assert "chosen" in text and "overruled" in text


# --- history --------------------------------------------------------------------------------------


def test_history_lists_assertions_retractions_and_decisions_in_lamport_order(store, session):
    first = session.ok("remember", key="vendor/acme/price", value=1000, provenance="list")
    second = session.ok("remember", key="vendor/acme/price", value=1150, provenance="quote")
    other = _other(("vendor/acme/price", 1200, "vendor email"))
    store.merge(other)
    theirs = store.state().active_at("vendor", "acme", "price")
    (their_claim,) = [c for c in theirs if c.author == other.author]
    session.ok("decide", key="vendor/acme/price", claim_id=their_claim.claim_id.hex())
    session.ok("remember", key="vendor/globex/price", value=7)  # another key: not in it

    history = session.ok("history", key="vendor/acme/price")
    events = [(e["event"], e["claim_id"], e["author"]) for e in history["events"]]
    me, them = store.author.hex(), other.author.hex()
    assert sorted(events) == sorted(
        [
            ("claim", first["claim_id"], me),
            ("claim", second["claim_id"], me),
            ("retract", first["claim_id"], me),
            ("claim", their_claim.claim_id.hex(), them),
            ("decide", their_claim.claim_id.hex(), me),
        ]
    )
    lamports = [e["lamport"] for e in history["events"]]
    assert lamports == sorted(lamports)
    mine = [event for event, _, author in events if author == me]
    assert mine == ["claim", "claim", "retract", "decide"]  # my ops, in the order written
    assert session.ok("history", key="vendor/acme/price", scope="task:t1")["events"] == []


def test_history_conflicts_search_and_remember_name_each_author_by_its_declared_name(
    store, session
):
    store.declare_name("planner")
    other = Replica.memory(space=SPACE, name="scout")
    other.add_claim("vendor", "acme", "price", 1200, provenance="vendor email")
    store.merge(other)
    me, them = store.author.hex(), other.author.hex()
    remembered = session.ok("remember", key="vendor/acme/price", value=1150)
    (rival,) = remembered["conflicts_with"]
    assert (rival["author"], rival["author_name"]) == (them, "scout")
    events = session.ok("history", key="vendor/acme/price")["events"]
    assert {(e["author"], e["author_name"]) for e in events} == {(me, "planner"), (them, "scout")}
    assert " by scout" in session.text("history", key="vendor/acme/price")
    (conflict,) = session.ok("conflicts")["conflicts"]
    names = {c["author_name"] for c in conflict["candidates"]}
    assert names == {"planner", "scout"} and "scout" in session.text("conflicts")
    found = session.ok("search", query="acme")["claims"]
    assert {c["author_name"] for c in found} == {"planner", "scout"}
    stranger = Replica.memory(space=SPACE)  # no name: null, and its key's digits in text
    stranger.add_claim("vendor", "acme", "price", 900)
    store.merge(stranger)
    (conflict,) = session.ok("conflicts")["conflicts"]
    unnamed = [c for c in conflict["candidates"] if c["author"] == stranger.author.hex()]
    assert [c["author_name"] for c in unnamed] == [None]
    assert stranger.author.hex()[:8] in session.text("conflicts")


# --- two servers, one HTTP peer -------------------------------------------------------------------


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_two_servers_on_two_stores_sync_through_a_peer_and_see_each_others_conflict(tmp_path):
    hub = Replica.memory(space=SPACE)
    with (
        serve(hub) as peer,
        Replica.open(tmp_path / "a.db", space=SPACE, create=True) as a,
        Replica.open(tmp_path / "b.db", space=SPACE, create=True) as b,
        connected(build_server(a, peers=[peer.url])) as sa,
        connected(build_server(b, peers=[peer.url, _dead_url()], timeout=PROCESS_TIMEOUT)) as sb,
    ):
        sa.ok("remember", key="vendor/acme/price", value=1150, provenance="quote")
        sb.ok("remember", key="vendor/acme/price", value=1200, provenance="vendor email")
        assert sa.ok("conflicts")["conflicts"] == []

        (pushed,) = sa.ok("sync")["peers"]
        assert (pushed["ok"], pushed["fetched"], pushed["pushed"]) == (True, 0, 1)
        through, dead = sb.ok("sync")["peers"]
        assert (through["fetched"], through["pushed"], through["new_ops"]) == (1, 1, 1)
        assert (dead["ok"], dead["rule"]) == (False, "unreachable") and dead["error"]
        (fetched,) = sa.ok("sync")["peers"]
        assert (fetched["fetched"], fetched["pushed"]) == (1, 0)

        for s, replica in ((sa, a), (sb, b)):
            (conflict,) = s.ok("conflicts")["conflicts"]
            assert {(c["value"], c["author"]) for c in conflict["candidates"]} == {
                (1150, a.author.hex()),
                (1200, b.author.hex()),
            }
            assert replica.state().digest() == a.state().digest()
        assert hub.state().digest() == a.state().digest()  # the served replica locks itself


# --- statefuse mcp as a process -------------------------------------------------------------------


def _init(path: Path) -> None:
    with Replica.open(path, space=SPACE, create=True):
        pass


def test_statefuse_mcp_over_stdio_serves_the_store_and_leaves_it_closed(tmp_path):
    path = tmp_path / "team.db"
    _init(path)
    args = ["-m", "statefuse", "mcp", "--store", str(path), "--name", "watcher"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=ROOT)
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        with connected(stdio_client(params, errlog=errlog)) as s:
            got = s.ok("remember", key="svc/api/status", value="up", provenance="probe")
            (event,) = s.ok("history", key="svc/api/status")["events"]
            assert event["author_name"] == "watcher"
            assert "svc/api/status: up" in s.ok("recall", query="api status")["text"]
            assert s.refused("remember", key="svc/api", value=1).endswith("[rule: key-syntax]")
        errlog.seek(0)
        log = errlog.read()
    assert "Traceback" not in log and "MCP server for space 'team'" in log, log
    assert "(watcher)" in log
    with Replica.open(path) as reopened:  # the server closed it: the writer lock is free
        c = reopened.state().claims[bytes.fromhex(got["claim_id"])]
        assert (c.value, c.provenance) == ("up", "probe")
        assert reopened.names() == {reopened.author: "watcher"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _line(stream: Any, timeout: float) -> str:
    """The next line of a process's pipe, or AssertionError after ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        assert sel.select(timeout), f"no line within {timeout} s"
        return str(stream.readline())


def test_statefuse_mcp_over_streamable_http_on_a_free_port_stops_cleanly(tmp_path):
    path = tmp_path / "team.db"
    _init(path)
    port = _free_port()
    argv = ["-m", "statefuse", "mcp", "--store", str(path), "--transport", "http"]
    proc = subprocess.Popen(
        [sys.executable, *argv, "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        ready = _line(proc.stderr, PROCESS_TIMEOUT)
        url = f"http://127.0.0.1:{port}/mcp"
        assert url in ready, ready
        with connected(url) as s:
            got = s.ok("remember", key="svc/api/status", value="up")
            (claim,) = s.ok("search", query="api")["claims"]
            assert claim["claim_id"] == got["claim_id"]
            assert s.refused("recall", query="x", budget=0).endswith("[rule: greater_than_equal]")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        assert proc.returncode == 0 and "Stopped." in err and "Traceback" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with Replica.open(path) as reopened:
        assert reopened.state().is_active(bytes.fromhex(got["claim_id"]))


def test_the_sdk_is_needed_only_by_the_mcp_command_which_says_how_to_install_it(tmp_path):
    script = (
        "import sys\n"
        "import statefuse, statefuse.entry.cli\n"
        "assert 'mcp' not in sys.modules, 'import statefuse imported the MCP SDK'\n"
        "sys.modules['mcp'] = None  # as if the extra were not installed\n"
        "sys.exit(statefuse.entry.cli.main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, "mcp", "--store", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=ROOT,
    )
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("Error: "), proc.stderr
    assert 'pip install "statefuse[mcp]"' in proc.stderr
    assert not (tmp_path / "none.db").exists()


# --- the guide ------------------------------------------------------------------------------------


def test_every_tool_and_argument_is_documented_in_the_mcp_guide(session):
    section = (ROOT / "docs" / "guides" / "mcp.md").read_text(encoding="utf-8")
    missing = []
    for tool in session.portal.call(session.client.list_tools).tools:
        if f"`{tool.name}`" not in section:
            missing.append(tool.name)
        missing += [
            f"{tool.name}({arg})"
            for arg in tool.input_schema.get("properties", {})
            if f"`{arg}`" not in section
        ]
    for needle in (CONTEXT_URI, 'pip install "statefuse[mcp]"', "--transport", "--peer", "isError"):
        if needle not in section:
            missing.append(needle)
    assert not missing, f"undocumented in docs/guides/mcp.md: {missing}"


# --- a contested choice stays visible ------------------------------------------------------------


def test_recall_and_search_mark_a_decided_value_with_the_others_and_their_authors(store, session):
    store.merge(_other(("vendor/acme/price", 1200, "vendor email")))
    mine = session.ok("remember", key="vendor/acme/price", value=1150)
    store.add_claim("vendor", "acme", "price", 999, visibility=["finance"])  # hidden from recall
    session.ok("remember", key="vendor/globex/price", value=900)
    undecided = session.ok("recall", query="acme price")
    assert undecided["contested"] == []  # nobody chose: the conflict is surfaced instead
    session.ok("decide", key="vendor/acme/price", claim_id=mine["claim_id"], reason="invoice")
    got = session.ok("recall", query="acme price")
    (line,) = [ln for ln in got["text"].splitlines() if "acme" in ln and "1150" in ln]
    assert "chosen by decision; contested: 1 other value: 1200 by " in line
    assert "999" not in got["text"]
    (mark,) = got["contested"]
    assert (mark["claim_id"], mark["key"]) == (mine["claim_id"], "vendor/acme/price")
    assert (mark["how"], mark["by"], mark["handle"]) == ("decision", "decision", None)
    ((other,),) = [mark["others"]]
    assert other["value"] == 1200 and len(other["authors"]) == 1
    assert other["authors"][0] != store.author.hex()
    # the finance role sees the third value too
    wide = session.ok("recall", query="acme price", role="finance")
    assert {o["value"] for o in wide["contested"][0]["others"]} == {1200, 999}
    # search shows every active claim; each of the key's claims names the other values
    found = session.ok("search", query="acme price")
    marks = {m["claim_id"]: m for m in found["contested"]}
    assert {o["value"] for o in marks[mine["claim_id"]]["others"]} == {1200, 999}
    assert marks[mine["claim_id"]]["how"] == "decision"
    assert len(marks) == 3 and all(len(m["others"]) == 2 for m in marks.values())
