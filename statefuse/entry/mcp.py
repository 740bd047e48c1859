"""The MCP server (``statefuse mcp``): one replica's memory as tools an LLM client calls.

An agent in an MCP client (Claude Desktop, an IDE, an agent framework) gets the shared,
conflict-preserving memory as eight tools — ``remember``, ``recall``, ``search``, ``retract``,
``conflicts``, ``decide``, ``history``, ``sync`` — and the resource ``statefuse://context``, over
stdio or streamable HTTP. The server is built on the official SDK (``pip install
"statefuse[mcp]"``); its arguments and structured results are JSON-schema'd from the type hints
below (results are TypedDicts: the SDK 2.3 derives no output schema from a slotted dataclass,
whose slot descriptors it takes for defaults). docs/guides/mcp.md documents every tool and
argument, and a test checks that it does.

Invariants:

- One replica, one lock. Every session writes as the server's replica (its author key), like
  ``statefuse`` commands on the same store. The SDK runs tools in worker threads; each tool
  holds ``lock`` (by default the replica's own, `Replica.lock`) while it uses the replica, so
  what a tool reads is still true when it writes, even with the replica also served or
  followed; ``sync`` holds it only while it touches the replica, never across the network
  (`sync.client`).
- A write is committed to the store before its tool returns (the replica's write-ahead rule).
- Bad input never escapes as a traceback: arguments that break the JSON schema, and every
  `InputError` a tool meets (a malformed key, an unknown or ambiguous claim id, a value outside
  the value model, a read-only store), become an error result (``isError``) of one line naming
  the field and the rule, ``Error: <field>: <message> [rule: <rule>]``. A bug becomes the SDK's
  generic error result; its traceback goes to the server's log only.

The SDK is imported here at module level, so ``import statefuse`` never needs it: only the
``mcp`` command imports this module (and says how to install the extra when it is missing).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from operator import attrgetter
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context as McpContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolResult,
    GetPromptResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import Field, ValidationError
from typing_extensions import NotRequired, TypedDict

from statefuse import __version__
from statefuse.core.authorname import AuthorNames
from statefuse.core.error import InputError
from statefuse.core.keytext import format_key
from statefuse.core.op import ClaimAdded, Outcome, claim_ref_for
from statefuse.core.state import ConflictSet, State, locus_of
from statefuse.core.validity import instant_ms, replaces, situation
from statefuse.core.wording import plural
from statefuse.entry.argument import (
    CliError,
    parse_key,
    parse_key_prefix,
    resolve_id,
    value_from_json,
)
from statefuse.entry.clitable import REDACTED_CELL, claim_notes, short_id, value_cell
from statefuse.reading.context import SYSTEM_PROMPT
from statefuse.reading.lens import Lens
from statefuse.reading.ranker import LexicalRanker, Ranker, words
from statefuse.reading.resolver import Conservative
from statefuse.reading.view import Contest, json_value
from statefuse.storage.storeindex import StoreIndex

if TYPE_CHECKING:
    from statefuse.sync.replica import Replica

__all__ = [
    "CONTEXT_URI",
    "TOOL_NAMES",
    "ToolArgumentError",
    "Transport",
    "build_server",
    "run",
]

#: The tools, in the order the server lists them.
TOOL_NAMES = (
    "remember",
    "recall",
    "search",
    "retract",
    "conflicts",
    "decide",
    "history",
    "conflict_history",
    "sync",
)
#: The resource that holds the current context (``recall`` with an empty query).
CONTEXT_URI = "statefuse://context"
#: Token budget of ``recall`` and of the context resource when none is given.
DEFAULT_BUDGET = 2000
#: Claims ``search`` returns when no ``limit`` is given, and the most it returns.
DEFAULT_LIMIT, MAX_LIMIT = 20, 500
#: Seconds each sync request may take.
SYNC_TIMEOUT = 10.0
#: Seconds an HTTP server waits for open connections when asked to stop.
SHUTDOWN_GRACE_S = 3


class Transport(Enum):
    """How clients reach the server: a client that starts it (stdio) or a URL (HTTP)."""

    STDIO = "stdio"
    HTTP = "http"


class ToolArgumentError(InputError, ValueError):
    """A tool argument that breaks a rule (a malformed key, an unknown claim id, a semantic
    retraction that names no claim, a missing conflict, no peers to sync with). Sent to the
    client as a one-line error result, never raised out of the server."""


@contextlib.contextmanager
def _argument(name: str) -> Iterator[None]:
    """Errors the command-line parsers raise inside are about tool argument ``name`` (they name
    the CLI's spelling, KEY or CLAIM)."""
    try:
        yield
    except CliError as exc:
        raise ToolArgumentError(name, exc.rule, exc.message) from None


# --- what the tools answer (each one's structured result; the text is one line for people) -----


class ClaimInfo(TypedDict):
    """One claim: what it says, who asserted it and from where."""

    claim_id: Annotated[str, Field(description="claim id, 64 hex digits")]
    key: Annotated[str, Field(description="namespace/subject/predicate (% escapes / and %)")]
    scope: Annotated[str, Field(description="global, task:ID, session:ID, hypothetical, draft")]
    value: Annotated[Any, Field(description='the value as JSON; bytes as {"$bytes": "<hex>"}')]
    author: Annotated[str, Field(description="id (hex) of the replica key that asserted it")]
    author_name: Annotated[
        str | None, Field(description="the name its author declared for itself (null: none)")
    ]
    provenance: Annotated[str, Field(description="where its author says the value came from")]
    confidence: Annotated[
        float | None, Field(description="0 to 1; null when its author stated none")
    ]
    authority: Annotated[str, Field(description="its author's authority label, if any")]
    lamport: Annotated[int, Field(description="logical time of the assertion")]
    notes: Annotated[
        list[str],
        Field(
            description="conflict (disagreement nobody decided), chosen / overruled (a decision"
            " applies), stale (it rests on a retracted claim); first, when the value holds only"
            " for a time or in a context, that interval and context, e.g."
            ' "[2026-01-01 .. 2026-03-01) {location=London}"'
        ),
    ]


class Remembered(TypedDict):
    """What ``remember`` stored."""

    claim_id: Annotated[str, Field(description="id of the new claim")]
    key: str
    scope: str
    value: Any
    replaced: Annotated[
        list[str], Field(description="ids of this server's earlier claims the update retracted")
    ]
    conflict: Annotated[
        bool, Field(description="true if another active claim at the key now disagrees")
    ]
    conflicts_with: Annotated[
        list[ClaimInfo], Field(description="the active claims that disagree with it")
    ]


class SectionInfo(TypedDict):
    """One section of a context."""

    name: Annotated[str, Field(description="identity, constraints, facts, conflicts, …")]
    title: str
    lines: list[str]
    claim_ids: Annotated[list[str], Field(description="the claims shown in it")]


class OtherValue(TypedDict):
    """One other candidate value of a contested key, with the claims holding it."""

    value: Annotated[Any, Field(description='the value as JSON; bytes as {"$bytes": "<hex>"}')]
    claim_ids: list[str]
    authors: Annotated[list[str], Field(description="ids (hex) of the keys that asserted it")]
    author_names: Annotated[
        list[str | None], Field(description="the names those authors declared (null: none)")
    ]


class ContestInfo(TypedDict):
    """A claim shown for a key whose sources disagree: how the choice was made and what else
    was claimed (only claims the reader may see)."""

    claim_id: Annotated[str, Field(description="the claim shown (the chosen value)")]
    key: str
    scope: str
    conflict_id: Annotated[str, Field(description="the conflict (hex), as `decide` names it")]
    how: Annotated[
        str,
        Field(
            description="decision, registry policy or resolver (recall: what chose it);"
            " search: decision when one applies, else conflict (nobody decided)"
        ),
    ]
    by: Annotated[str, Field(description="decision, the policy, or the resolver's name")]
    handle: Annotated[
        str | None,
        Field(
            description="recall: the expand handle of the other values when the text only"
            " counts them"
        ),
    ]
    others: list[OtherValue]
    outcome: NotRequired[
        Annotated[str, Field(description="merge: a merge decision chose the claim shown")]
    ]


class Recalled(TypedDict):
    """The token-budgeted context of ``recall``: ``text`` is what a model reads."""

    text: str
    token_count: Annotated[int, Field(description="tokens of text, never over budget")]
    budget: int
    sections: list[SectionInfo]
    excluded: Annotated[
        dict[str, int], Field(description="claims kept out of the context, counted by reason")
    ]
    contested: Annotated[
        list[ContestInfo],
        Field(description="every fact line shown whose value was chosen over other values"),
    ]


class Found(TypedDict):
    """Active claims that match, most relevant first (by key without a query)."""

    total: Annotated[int, Field(description="how many active claims match, shown or not")]
    claims: list[ClaimInfo]
    contested: Annotated[
        list[ContestInfo],
        Field(description="each claim shown whose key and scope hold other values too"),
    ]


class Retracted(TypedDict):
    """What ``retract`` withdrew."""

    retraction_id: str
    semantic: Annotated[
        bool, Field(description="true: by key, scope and value, also copies that arrive later")
    ]
    reason: str
    retracted: Annotated[list[ClaimInfo], Field(description="the claims it retracted")]


class RedactedResult(TypedDict):
    """What ``redact`` ordered deleted (ids only: never the values)."""

    redacted: Annotated[list[str], Field(description="ids of the claims whose bodies go")]
    already: Annotated[int, Field(description="of those, how many were redacted already")]
    reason: str


class Candidate(TypedDict):
    """A candidate value of a conflict."""

    claim_id: str
    group: Annotated[int, Field(description="candidates with equal group numbers agree")]
    value: Any
    author: Annotated[str, Field(description="id (hex) of the replica key that asserted it")]
    author_name: Annotated[
        str | None, Field(description="the name its author declared for itself (null: none)")
    ]
    provenance: Annotated[str, Field(description="where its author says the value came from")]
    confidence: float | None
    authority: str
    lamport: int
    holds: Annotated[
        str,
        Field(
            description='when and where the value holds, e.g. "[2026-01-01 .. 2026-03-01)'
            ' {location=London}"; empty: always and everywhere'
        ),
    ]


class DecisionInfo(TypedDict):
    """The decision that applies to a conflict."""

    decision_id: str
    claim_id: Annotated[
        str,
        Field(description="the candidate decided for (preserve, defer: a candidate it names)"),
    ]
    outcome: Annotated[str, Field(description="select, preserve, merge or defer")]
    reason: str
    author: str
    author_name: Annotated[
        str | None, Field(description="the name its author declared for itself (null: none)")
    ]


class FindingInfo(TypedDict):
    """What a detector found across keys (a budget exceeded by several costs, two bookings of
    one room that overlap): the conflict's key is the finding's anchor."""

    type: Annotated[str, Field(description="e.g. over-budget, double-booking, detector-failed")]
    detector: Annotated[str, Field(description="the detector, name@version")]
    reason: str
    witness: Annotated[Any, Field(description="the numbers that show it")]
    keys: Annotated[list[str], Field(description="every key its claims are at")]


class ConflictInfo(TypedDict):
    """Active claims of one key and scope that disagree, or a detector's finding (``finding``)
    over claims of several keys, each claim a candidate of its own."""

    key: str
    scope: str
    conflict_id: str
    candidates: list[Candidate]
    decision: Annotated[
        DecisionInfo | None, Field(description="null: undecided (every candidate stands)")
    ]
    finding: NotRequired[FindingInfo]


class Conflicts(TypedDict):
    """The conflicts of the memory."""

    conflicts: list[ConflictInfo]
    total: Annotated[int, Field(description="how many conflicts match, shown or not")]
    left_out: Annotated[int, Field(description="how many matching conflicts limit left out")]


class Decided(TypedDict):
    """The decision ``decide`` recorded."""

    decision_id: str
    key: str
    scope: str
    claim_id: Annotated[str, Field(description="the candidate decided for")]
    value: Any
    reason: str
    outcome: Annotated[str, Field(description="select, preserve, merge or defer")]


class LifecycleInfo(TypedDict):
    """One event of a conflict's lifecycle."""

    event: Annotated[
        str, Field(description="opened, decided, deferred, reopened, closed or redacted")
    ]
    lamport: int
    op_id: Annotated[str, Field(description="the op that caused it")]
    author: str
    author_name: Annotated[
        str | None, Field(description="the name its author declared for itself (null: none)")
    ]
    values: Annotated[int, Field(description="value groups held just after it")]
    outcome: Annotated[str | None, Field(description="the decision's outcome, if any")]
    decision_id: str | None
    reason: Annotated[
        str,
        Field(description="the decision's reason; why it reopened, closed or was redacted"),
    ]
    claim_id: Annotated[
        str | None,
        Field(description="redacted: the claim whose body was deleted (never its value)"),
    ]


class Lifecycle(TypedDict):
    """A conflict's lifecycle, oldest event first."""

    key: str
    scope: str
    events: list[LifecycleInfo]


class Event(TypedDict):
    """One assertion, retraction or decision of a key's claims."""

    lamport: int
    event: Annotated[
        str,
        Field(
            description="claim, retract (exact), retract-ref (semantic), decide or redact"
            " (the claim's body was deleted: by whom, when, why)"
        ),
    ]
    op_id: str
    claim_id: Annotated[str, Field(description="the claim asserted, retracted or decided for")]
    scope: Annotated[str | None, Field(description="null: a redacted claim's, not known here")]
    value: Any
    redacted: Annotated[
        bool, Field(description="the claim was redacted: value is null, never shown again")
    ]
    author: str
    author_name: Annotated[
        str | None, Field(description="the name its author declared for itself (null: none)")
    ]
    why: Annotated[str, Field(description="provenance of a claim, reason of the others")]


class History(TypedDict):
    """Everything that happened to a key's claims, in lamport order."""

    key: str
    events: list[Event]
    left_out: Annotated[int, Field(description="how many earlier events limit left out")]


class PeerSync(TypedDict):
    """One peer's sync."""

    url: str
    ok: bool
    error: Annotated[str | None, Field(description="why the sync failed (ok is false)")]
    rule: Annotated[str | None, Field(description="the rule of the failure")]
    fetched: Annotated[int, Field(description="changes fetched from the peer")]
    pushed: Annotated[int, Field(description="changes pushed to the peer")]
    new_ops: Annotated[int, Field(description="ops the memory gained")]
    quarantined: Annotated[int, Field(description="fetched changes refused (kept with why)")]
    round_trips: int
    forks: Annotated[list[str], Field(description="forks the changes revealed (both kept)")]


class Synced(TypedDict):
    """The sync with each peer, in the order the server was given them."""

    peers: list[PeerSync]


# --- turning memory into answers -----------------------------------------------------------------


def _author(author: bytes | str) -> str:
    return author.hex() if isinstance(author, bytes) else author


def _name(author: bytes | str, names: AuthorNames) -> str | None:
    return names.get(author) if isinstance(author, bytes) else None


def _key_text(c: ClaimAdded) -> str:
    return format_key((c.namespace, c.subject, c.predicate))


def _where(c: ClaimAdded) -> str:
    return f"{_key_text(c)} [{c.scope}] = {value_cell(c.value)}"


def _claim_info(c: ClaimAdded, state: State, names: AuthorNames) -> ClaimInfo:
    return ClaimInfo(
        claim_id=c.claim_id.hex(),
        key=_key_text(c),
        scope=c.scope,
        value=json_value(c.value),
        author=_author(c.author),
        author_name=_name(c.author, names),
        provenance=c.provenance,
        confidence=c.confidence,
        authority=c.authority,
        lamport=c.lamport,
        notes=([situation(c).strip()] if c.situated else []) + claim_notes(c, state),
    )


def _other_value(claims: Sequence[ClaimAdded], names: AuthorNames) -> OtherValue:
    authors = sorted({_author(c.author): c.author for c in claims}.items())
    return OtherValue(
        value=json_value(claims[0].value),
        claim_ids=[c.claim_id.hex() for c in claims],
        authors=[a for a, _ in authors],
        author_names=[_name(a, names) for _, a in authors],
    )


def _contest_info(
    claim_id: bytes, contest: Contest, handle: str | None, names: AuthorNames
) -> ContestInfo:
    """A contested line of a context (`Context.contested`), as ``recall`` returns it."""
    info = ContestInfo(
        claim_id=claim_id.hex(),
        key=format_key(contest.key),
        scope=contest.scope,
        conflict_id=contest.conflict_id.hex(),
        how=contest.how.value,
        by=contest.by,
        handle=handle,
        others=[_other_value(g, names) for g in contest.others],
    )
    if contest.outcome:
        info["outcome"] = contest.outcome
    return info


def _search_contest(c: ClaimAdded, state: State, names: AuthorNames) -> ContestInfo | None:
    """``search``'s mark of a claim whose key and scope hold other values (search shows every
    active claim, so every other value is listed)."""
    key = (c.namespace, c.subject, c.predicate)
    if not state.in_conflict(*key, c.scope):
        return None
    conflict = state.conflict_of(*key, c.scope)
    if conflict is None:
        return None
    decided = _settled(state, conflict)  # a defer leaves it a conflict
    others = [
        [state.claims[cid] for cid in g.claim_ids]
        for g in conflict.groups
        if c.claim_id not in g.claim_ids
    ]
    return ContestInfo(
        claim_id=c.claim_id.hex(),
        key=_key_text(c),
        scope=c.scope,
        conflict_id=conflict.conflict_id.hex(),
        how="decision" if decided else "conflict",
        by="decision" if decided else "",
        handle=None,
        others=[_other_value(g, names) for g in others],
    )


def _conflict_info(conflict: ConflictSet, state: State, names: AuthorNames) -> ConflictInfo:
    group_of = {cid: i for i, g in enumerate(conflict.groups, 1) for cid in g.claim_ids}
    candidates = []
    for cid in sorted(conflict.candidates, key=lambda c: (group_of[c], c)):
        c = state.claims[cid]
        candidates.append(
            Candidate(
                claim_id=cid.hex(),
                group=group_of[cid],
                value=json_value(c.value),
                author=_author(c.author),
                author_name=_name(c.author, names),
                provenance=c.provenance,
                confidence=c.confidence,
                authority=c.authority,
                lamport=c.lamport,
                holds=situation(c).strip() if c.situated else "",
            )
        )
    d = state.decision_for(conflict)
    decision = None
    if d is not None:
        decision = DecisionInfo(
            decision_id=d.op_id.hex(),
            claim_id=d.selected_claim_id.hex(),
            outcome=d.outcome.value,
            reason=d.reason,
            author=_author(d.author),
            author_name=_name(d.author, names),
        )
    info = ConflictInfo(
        key=format_key(conflict.key),
        scope=conflict.scope,
        conflict_id=conflict.conflict_id.hex(),
        candidates=candidates,
        decision=decision,
    )
    if conflict.finding:
        info["finding"] = FindingInfo(
            type=conflict.finding,
            detector=conflict.detector,
            reason=conflict.reason,
            witness=None if conflict.witness is None else json_value(dict(conflict.witness)),
            keys=[format_key(k) for k in conflict.keys],
        )
    return info


def _settled(state: State, conflict: ConflictSet) -> bool:
    """Whether a decision settles ``conflict`` (a ``defer`` leaves it open)."""
    d = state.decision_for(conflict)
    return d is not None and d.outcome.settles


def _conflict_line(conflict: ConflictSet, state: State, names: AuthorNames) -> str:
    """``key [scope]: value (claim, author, provenance) | …`` for the text of ``conflicts``;
    a finding: ``type at key [scope] (detector): reason [witness]; keys``."""
    if conflict.finding:
        line = (
            f"{conflict.finding} at {format_key(conflict.key)} [{conflict.scope}]"
            f" ({conflict.detector}): {conflict.reason}"
        )
        if conflict.witness:
            line += " [" + ", ".join(f"{k}={value_cell(v)}" for k, v in conflict.witness.items())
            line += "]"
        return line + "; " + ", ".join(format_key(k) for k in conflict.keys)
    shown = []
    for cid in conflict.candidates:
        c = state.claims[cid]
        where = ", ".join(filter(None, (short_id(cid), names.label(c.author), c.provenance)))
        holds = situation(c) if c.situated else ""
        shown.append(f"{value_cell(c.value)}{holds} ({where})")
    return f"{format_key(conflict.key)} [{conflict.scope}]: " + " | ".join(shown)


def _answer(text: str, structured: Any) -> CallToolResult:
    """A tool's result: one line (or the context) for the model, the data for programs."""
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _refusal(line: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=f"Error: {line}")], is_error=True)


def _schema_line(exc: ValidationError) -> str:
    """Every broken schema rule of a call, on one line: ``field: message [rule: type]``."""
    parts = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{field}: {err['msg']} [rule: {err['type']}]")
    return "; ".join(parts)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


#: Search results without a query: by key, then scope, then claim id (as ``statefuse show``).
_KEY_ORDER = attrgetter("namespace", "subject", "predicate", "scope", "claim_id")


# --- the tools -----------------------------------------------------------------------------------


_Key = Annotated[
    str,
    Field(
        description="namespace/subject/predicate: three non-empty parts; a / or % inside a part"
        " is written %2F / %25"
    ),
]
_Scope = Annotated[
    str, Field(description="global (default), task:ID, session:ID, hypothetical or draft")
]
_Reason = Annotated[str, Field(description="why, kept with the op for everyone to read")]
_Instant = Annotated[
    str | int | None,
    Field(
        description="an instant: ISO 8601 with a UTC offset or Z (a bare date is its midnight"
        " UTC), or ms since the epoch; the value holds from valid_from (included) until"
        " valid_until (excluded); leave out for no bound"
    ),
]
_Dimensions = Annotated[
    dict[str, str | int | bool] | None,
    Field(
        description='the context the value holds in, e.g. {"location": "London"}; a'
        " dimension left out applies to every value of it"
    ),
]


def _instant(name: str, v: str | int | None) -> int | None:
    """A tool's instant argument as ms, or a ToolArgumentError naming it."""
    try:
        return instant_ms(name, v)
    except InputError as exc:
        raise ToolArgumentError(name, exc.rule, exc.message) from None


class _Tools:
    """The tools over one replica. Every method holds ``lock`` while it uses the replica."""

    def __init__(
        self,
        replica: Replica,
        lock: threading.Lock | threading.RLock,
        peers: Sequence[str],
        timeout: float,
        embedder: object | None = None,
    ) -> None:
        self.replica = replica
        self.lock = lock
        self.peers = tuple(peers)
        self.timeout = timeout
        self.embedder = embedder
        # keeps the words of each claim between searches (and, with an embedder, its vectors)
        self.ranker: Ranker = LexicalRanker() if embedder is None else replica.ranker(embedder)
        #: The text index made in memory for a replica without a store index, and its State.
        self._text: tuple[State, StoreIndex] | None = None

    def remember(
        self,
        key: _Key,
        value: Annotated[
            Any,
            Field(
                description='the value: any JSON value; bytes as {"$bytes": "<hex>"}; a string'
                " holding a JSON array or object is read as that array or object"
            ),
        ],
        scope: _Scope = "global",
        confidence: Annotated[
            float | None,
            Field(
                ge=0,
                le=1,
                description="0 to 1; leave it out when you cannot say (an unstated confidence"
                " ranks below any stated one)",
            ),
        ] = None,
        provenance: Annotated[str, Field(description="where the value comes from")] = "",
        update: Annotated[
            bool,
            Field(
                description="true (default): this replaces my own earlier values of the key"
                " (others' claims stay, so a real disagreement still shows); false: a new,"
                " independent assertion that stands beside my earlier ones"
            ),
        ] = True,
        valid_from: _Instant = None,
        valid_until: _Instant = None,
        context: _Dimensions = None,
    ) -> Annotated[CallToolResult, Remembered]:
        """Assert a claim: the value of a key, signed by this memory's key and stored before
        the call returns. Another agent's different value at the key is kept too, as a
        conflict (the result says so); nothing is overwritten. A value that holds only for a
        time (valid_from / valid_until) or in one context (e.g. {"location": "London"})
        conflicts only with values of overlapping times and agreeing contexts, and an update
        replaces only such values of yours."""
        with _argument("key"):
            ns, subject, predicate = parse_key(key)
        with _argument("value"):
            stored = value_from_json(value)
        situated = {
            "valid_from": _instant("valid_from", valid_from),
            "valid_until": _instant("valid_until", valid_until),
            "context": context,
        }
        with self.lock:
            rep = self.replica
            meta: dict[str, Any] = {
                "scope": scope,
                "confidence": confidence,
                "provenance": provenance,
                **{k: v for k, v in situated.items() if v is not None},
            }
            replaced: list[bytes] = []
            if update:
                own = {
                    c.claim_id: c
                    for c in rep.state_for((ns, subject, predicate), scope=scope).active_at(
                        ns, subject, predicate, scope
                    )
                    if c.author == rep.author
                }
                replaced = list(own)
                c = rep.update(ns, subject, predicate, stored, **meta)
                replaced = [r for r in replaced if replaces(c, own[r])]
            else:
                c = rep.add_claim(ns, subject, predicate, stored, **meta)
            # the key's rows only, on a store opened on its derived state
            state = rep.state_for((ns, subject, predicate), scope=c.scope)
            rivals: list[ClaimInfo] = []
            conflict = state.conflict_of(ns, subject, predicate, c.scope)
            if conflict is not None:
                (mine,) = [g for g in conflict.groups if c.claim_id in g.claim_ids]
                names = rep.author_names()
                rivals = [
                    _claim_info(state.claims[cid], state, names)
                    for cid in conflict.candidates
                    if cid not in mine.claim_ids
                ]
        result = Remembered(
            claim_id=c.claim_id.hex(),
            key=_key_text(c),
            scope=c.scope,
            value=json_value(c.value),
            replaced=[r.hex() for r in replaced],
            conflict=bool(rivals),
            conflicts_with=rivals,
        )
        text = f"Remembered {_where(c)}: claim {c.claim_id.hex()}"
        if replaced:
            text += f" (replaces {', '.join(short_id(r) for r in replaced)})"
        if rivals:
            text += f"; it conflicts with {plural(len(rivals), 'other claim')}"
        return _answer(text, result)

    def recall(
        self,
        query: Annotated[str, Field(description="what you are about to answer (ranks facts)")],
        budget: Annotated[int, Field(ge=1, description="most tokens the context may take")] = (
            DEFAULT_BUDGET
        ),
        role: Annotated[
            list[str] | str | None,
            Field(description="your role(s): claims restricted to a role show only to it"),
        ] = None,
        task: Annotated[str | None, Field(description="your task: opens task:TASK claims")] = None,
        session: Annotated[
            str | None, Field(description="your session: opens session:SESSION claims")
        ] = None,
        valid_at: Annotated[
            str | int | None,
            Field(
                description="the instant you ask about (ISO 8601, e.g. 2026-02-14, or ms since"
                " the epoch): only values that hold then are shown (default: now)"
            ),
        ] = None,
        context: _Dimensions = None,
    ) -> Annotated[CallToolResult, Recalled]:
        """The memory as a model should read it: constraints first, facts ranked for the query
        (the most relevant last), corrections applied, unresolved conflicts and unknowns
        marked, within a token budget. Read it before answering from memory. A value that
        holds only for a time or in one context shows it, e.g. "[2026-01-01 .. 2026-03-01)"
        or "{location=London}"."""
        roles = [role] if isinstance(role, str) else list(role or [])
        at = _instant("valid_at", valid_at)
        try:
            lens = Lens(
                roles=frozenset(roles),
                task=task,
                session=session,
                now=_now_ms(),
                valid_at=at,
                context=context,
            )
        except InputError as exc:
            field = "role" if exc.field == "roles" else exc.field
            raise ToolArgumentError(field, exc.rule, exc.message) from None
        with self.lock:
            rep = self.replica
            resolver = Conservative(authority_order=rep.registry.authority_order)
            ctx = rep.context(
                query, lens=lens, budget=budget, resolver=resolver, embedder=self.embedder
            )
            names = rep.author_names()
        sections = [
            SectionInfo(
                name=s.name.value,
                title=s.title,
                lines=list(s.lines),
                claim_ids=[cid.hex() for cid in s.claim_ids],
            )
            for s in ctx.sections
        ]
        result = Recalled(
            text=ctx.text,
            token_count=ctx.token_count,
            budget=ctx.budget,
            sections=sections,
            excluded=dict(ctx.excluded),
            contested=[
                _contest_info(cid, contest, handle, names)
                for cid, (contest, handle) in ctx.contested.items()
            ],
        )
        return _answer(ctx.text, result)

    def search(
        self,
        query: Annotated[str, Field(description="words to look for in keys and values")] = "",
        prefix: Annotated[
            str, Field(description="namespace, namespace/subject or a whole key to look in")
        ] = "",
        scope: Annotated[str | None, Field(description="only claims in this scope")] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIMIT, description="most claims to return")
        ] = DEFAULT_LIMIT,
    ) -> Annotated[CallToolResult, Found]:
        """Active claims whose key or value matches the query or under a key prefix, with
        their ids and conflict markers. Ranked by BM25: under a prefix over its claims (an
        exact identifier such as a subject name counts most), without one by the store's text
        index over every claim. Every active claim is searched, whoever may see it: recall is
        the viewer-filtered path."""
        parts: tuple[str, ...] = ()
        if prefix:
            with _argument("prefix"):
                parts = parse_key_prefix(prefix)
        with self.lock:
            if parts or (self.embedder is not None and query.strip()):
                # under a prefix, those keys' rows alone on a store opened on its derived
                # state; with an embedder, ranked by meaning too, over the whole memory
                rep = self.replica
                state = rep.state_for(parts, scope=scope) if parts else rep.state()
                n = len(parts)
                claims = [
                    c
                    for c in state.active_claims()
                    if (c.namespace, c.subject, c.predicate)[:n] == parts
                    and scope in (None, c.scope)
                ]
                if query.strip():
                    scores = self.ranker.scores(query, claims)
                    ranked = sorted(scores, key=lambda cid: (-scores[cid], cid))
                    total = len(ranked)
                    shown = [state.claims[cid] for cid in ranked[:limit]]
                else:
                    total = len(claims)
                    shown = sorted(claims, key=_KEY_ORDER)[:limit]
            else:
                state, shown, total = self._search_all(query, scope, limit)
            names = self.replica.author_names()
            infos = [_claim_info(c, state, names) for c in shown]
            contested = [m for c in shown if (m := _search_contest(c, state, names)) is not None]
        text = f"{plural(total, 'matching claim')}" + (
            f", {len(infos)} shown" if len(infos) < total else ""
        )
        lines = [
            f"{i['claim_id'][:12]}  {i['key']} [{i['scope']}] = {value_cell(c.value)}"
            + (f"  ({', '.join(i['notes'])})" if i["notes"] else "")
            for i, c in zip(infos, shown, strict=True)
        ]
        found = Found(total=total, claims=infos, contested=contested)
        return _answer("\n".join([text, *lines]), found)

    def _search_all(
        self, query: str, scope: str | None, limit: int
    ) -> tuple[State, list[ClaimAdded], int]:
        """`search` without a prefix: a State holding the claims shown, the claims, and how
        many match. With a query the text index ranks (`StoreIndex.text_matches`): the
        store's own, read alone on a replica opened on it, and for a replica without one an
        index made in memory from its State, so the answer never depends on how the replica
        was opened. Without a query: the first claims by key, from the derived state when
        the replica was opened on it."""
        rep = self.replica
        lazy = not rep.loaded
        ix = rep.index if lazy else None
        if ix is not None:
            with rep.store.read_transaction():
                if words(query):
                    found, total = ix.text_matches(query, limit=limit, scope=scope)
                    state = ix.state_of([lc for _, lc in found], registry=rep.registry)
                    return state, [state.claims[cid] for cid, _ in found], total
                loci = ix.loci(scope=scope, limit=limit)
                total = ix.active_count() if scope is None else ix.scope_count(scope)
                state = ix.state_of(loci, registry=rep.registry)
            wanted = set(loci)  # the State may hold more: what their claims depend on
            claims = [
                c
                for c in state.active_claims()
                if locus_of(c.namespace, c.subject, c.predicate, c.scope) in wanted
            ]
            return state, sorted(claims, key=_KEY_ORDER)[:limit], total
        state = rep.state()
        if words(query):
            found, total = self._text_index(state).text_matches(query, limit=limit, scope=scope)
            return state, [state.claims[cid] for cid, _ in found], total
        claims = [c for c in state.active_claims() if scope in (None, c.scope)]
        return state, sorted(claims, key=_KEY_ORDER)[:limit], len(claims)

    def _text_index(self, state: State) -> StoreIndex:
        """The text index `_search_all` ranks with for a replica holding ``state``: the
        store's when it is current, else one made in memory (kept while the State is)."""
        ix = self.replica.index
        if ix is not None:
            return ix
        made = self._text
        if made is None or made[0] is not state:
            made = self._text = (state, StoreIndex.text_only(state.active_claims()))
        return made[1]

    def retract(
        self,
        claim_id: Annotated[
            str | None,
            Field(description="retract this one claim (an id or a unique 8+ hex digit prefix)"),
        ] = None,
        key: Annotated[
            str | None,
            Field(
                description="or retract semantically: every claim with this key, scope and"
                " (normalized) value, also copies that arrive later"
            ),
        ] = None,
        value: Annotated[Any, Field(description="the value to retract (with key)")] = None,
        scope: _Scope = "global",
        reason: _Reason = "",
    ) -> Annotated[CallToolResult, Retracted]:
        """Withdraw a claim: exactly, by its id, or semantically, by key and value (then
        every claim saying it, including copies a stale replica sends later). The claim stays
        in the history; it is no longer active."""
        if (claim_id is None) == (key is None):
            raise ToolArgumentError(
                "claim_id", "one-target", "give either claim_id, or key and value, not both"
            )
        with self.lock:
            rep = self.replica
            if claim_id is not None:
                state = rep.claim_state(claim_id)
                with _argument("claim_id"):
                    target = state.claims[resolve_id(claim_id, state.claims, what="claim")]
                if not state.is_active(target.claim_id):
                    raise ToolArgumentError(
                        "claim_id",
                        "active",
                        f"claim {target.claim_id.hex()} is retracted already",
                    )
                r = rep.retract(target, reason=reason)
            else:
                assert key is not None
                with _argument("key"):
                    ns, subject, predicate = parse_key(key)
                with _argument("value"):
                    stored = value_from_json(value)
                state = rep.state_for((ns, subject, predicate), scope=scope)
                ref = claim_ref_for(rep.registry, ns, subject, predicate, scope, stored)
                if not any(
                    c.claim_ref == ref for c in state.active_at(ns, subject, predicate, scope)
                ):
                    raise ToolArgumentError(
                        "value",
                        "active-value",
                        f"no active claim says {format_key((ns, subject, predicate))} [{scope}]"
                        f" = {value_cell(stored)}",
                    )
                r = rep.retract(claim_ref=ref, reason=reason)
            # what it retracted is at one key and scope (an id's, or the ref's)
            if claim_id is not None:
                at = (target.namespace, target.subject, target.predicate)
                state = rep.state_for(at, scope=target.scope)
            else:
                state = rep.state_for((ns, subject, predicate), scope=scope)
            hit = state.retracted_by(r)
            names = rep.author_names()
            infos = [_claim_info(state.claims[cid], state, names) for cid in hit]
        result = Retracted(
            retraction_id=r.op_id.hex(),
            semantic=claim_id is None,
            reason=reason,
            retracted=infos,
        )
        shown = ", ".join(f"{i['key']} [{i['scope']}] {i['claim_id'][:12]}" for i in infos)
        return _answer(f"Retracted {plural(len(infos), 'claim')}: {shown}", result)

    def redact(
        self,
        reason: Annotated[
            str, Field(description="why (kept for the audit: never repeat the secret here)")
        ],
        claim_ids: Annotated[
            list[str] | None, Field(description="redact these claims (full 64-digit ids)")
        ] = None,
        key: Annotated[
            str | None, Field(description="or every claim at this key (with value: only those)")
        ] = None,
        value: Annotated[Any, Field(description="with key: only claims holding this value")] = None,
    ) -> Annotated[CallToolResult, RedactedResult]:
        """Delete the bodies of claims on every replica (a secret, personal data): unlike
        retract, the value leaves memory, exports and peers for good. Only offered when the
        server was started with redaction allowed."""
        if not claim_ids and key is None:
            raise ToolArgumentError("claim_ids", "one-target", "give claim_ids, or a key")
        with self.lock:
            kwargs: dict[str, Any] = {}
            if key is not None and value is not None:
                with _argument("value"):
                    kwargs["value"] = value_from_json(value)
            try:
                done = self.replica.redact(
                    claim=claim_ids or None, key=key, reason=reason, **kwargs
                )
            except InputError as exc:
                raise ToolArgumentError(exc.field, exc.rule, exc.message) from None
        result = RedactedResult(
            redacted=[c.hex() for c in done.claims], already=done.already, reason=reason
        )
        fresh = len(done.claims) - done.already
        return _answer(f"Redacted {plural(fresh, 'claim')}: {reason}", result)

    def conflicts(
        self,
        prefix: Annotated[
            str, Field(description="only keys under this namespace[/subject[/predicate]]")
        ] = "",
        include_decided: Annotated[
            bool, Field(description="also list conflicts a decision settles")
        ] = False,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIMIT, description="most conflicts to return")
        ] = DEFAULT_LIMIT,
    ) -> Annotated[CallToolResult, Conflicts]:
        """Where sources disagree: the unresolved conflicts (the first ``limit``, by key), each
        with its candidate values, who asserted them (author id and declared name) and from
        where (provenance); says how many were left out. Decide one with `decide`."""
        parts: tuple[str, ...] = ()
        if prefix:
            with _argument("prefix"):
                parts = parse_key_prefix(prefix)
        with self.lock:
            page = self.replica.conflicts()  # reads the conflicts alone on a derived state
            state, names = page.state, self.replica.author_names()
            found = sorted(
                (
                    c
                    for c in page.conflicts
                    if c.key[: len(parts)] == parts and (include_decided or not _settled(state, c))
                ),
                key=lambda c: (c.key, c.scope),
            )
            total, found = len(found), found[:limit]
            infos = [_conflict_info(c, state, names) for c in found]
            lines = [plural(total, "conflict") + ("" if include_decided else " undecided")]
            if total > len(found):
                lines[0] += (
                    f", {len(found)} shown ({total - len(found)} left out: pass a larger limit"
                    " or a prefix)"
                )
            lines += [_conflict_line(c, state, names) for c in found]
        result = Conflicts(conflicts=infos, total=total, left_out=total - len(found))
        return _answer("\n".join(lines), result)

    def decide(
        self,
        key: _Key,
        claim_id: Annotated[
            str,
            Field(
                description="the candidate to decide for: its id or a unique 8+ prefix (merge:"
                " your claim that combines candidates it names in depends_on; preserve, defer:"
                " leave empty, or name any candidate when the key has conflicts in several"
                " scopes)"
            ),
        ] = "",
        reason: _Reason = "",
        scope: Annotated[str, Field(description="where the decision applies")] = "global",
        outcome: Annotated[
            str,
            Field(
                description="select (default): one value; preserve: every value is right in"
                " its own way (settled, all kept); merge: select your combining claim; defer:"
                " acknowledged, still open (give a reason)"
            ),
        ] = "select",
    ) -> Annotated[CallToolResult, Decided]:
        """Settle a conflict (see `conflicts`): select one candidate, preserve all of them as
        accepted alternatives, merge (select a claim you wrote that combines candidates) or
        defer it with a reason. The decision is recorded for every replica; no claim is
        removed, and it stops applying if a new value appears or a value it kept is
        withdrawn."""
        with _argument("key"):
            ns, subject, predicate = parse_key(key)
        with _argument("outcome"):
            kind = Outcome(outcome) if outcome in {o.value for o in Outcome} else None
            if kind is None:
                raise ToolArgumentError(
                    "outcome", "outcome", "outcome is one of select, preserve, merge, defer"
                )
        with self.lock:
            rep = self.replica
            state = rep.state_for((ns, subject, predicate))
            at_key = [c for c in state.conflicts if c.key == (ns, subject, predicate)]
            if not at_key:
                raise ToolArgumentError(
                    "key", "conflict", f"{format_key((ns, subject, predicate))} has no conflict"
                )
            candidates = {cid: c for c in at_key for cid in c.candidates}
            if not claim_id and not kind.selects and len(at_key) == 1:
                chosen = min(at_key[0].candidates)
            else:
                with _argument("claim_id"):
                    chosen = resolve_id(claim_id, candidates, what="candidate")
            conflict = candidates[chosen]
            d = rep.decide(
                conflict,
                chosen if kind.selects else None,
                scope=scope,
                reason=reason,
                outcome=kind,
            )
            value = state.claims[chosen].value if kind.selects else None
        result = Decided(
            decision_id=d.op_id.hex(),
            key=format_key(conflict.key),
            scope=conflict.scope,
            claim_id=d.selected_claim_id.hex(),
            value=json_value(value),
            reason=reason,
            outcome=kind.value,
        )
        where = f"{format_key(conflict.key)} [{conflict.scope}]"
        if kind is Outcome.PRESERVE:
            line = f"Preserved {where}: every value is an accepted alternative"
        elif kind is Outcome.DEFER:
            line = f"Deferred {where}: still open ({reason})"
        else:
            verb = "Merged" if kind is Outcome.MERGE else "Decided"
            line = f"{verb} {where} for claim {chosen.hex()}: {value_cell(value)}"
        return _answer(line, result)

    def conflict_history(
        self,
        key: _Key,
        scope: Annotated[str, Field(description="the conflict's scope")] = "global",
    ) -> Annotated[CallToolResult, Lifecycle]:
        """How a conflict got where it is: opened, decided (with its outcome), deferred,
        reopened (a new value, or a value the decision kept was withdrawn) and closed
        (candidates retracted), oldest first, with who and why."""
        with _argument("key"):
            parsed = parse_key(key)
        with self.lock, _argument("scope"):
            events = self.replica.conflict_history(parsed, scope=scope)
            names = self.replica.author_names()
        infos = [
            LifecycleInfo(
                event=e.event.value,
                lamport=e.lamport,
                op_id=e.op_id.hex(),
                author=_author(e.author),
                author_name=_name(e.author, names),
                values=e.values,
                outcome=None if e.outcome is None else e.outcome.value,
                decision_id=None if e.decision_id is None else e.decision_id.hex(),
                reason=e.reason,
                claim_id=None if e.claim_id is None else e.claim_id.hex(),
            )
            for e in events
        ]
        lines = [f"{plural(len(events), 'event')} for {format_key(parsed)} [{scope}]"]
        lines += [
            f"{e.lamport} {e.event.value}"
            + (f" ({e.outcome.value})" if e.outcome is not None else "")
            + f" by {names.label(e.author)}"
            + (f": {_one_line(e.reason)}" if e.reason.strip() else "")
            for e in events
        ]
        return _answer(
            "\n".join(lines), Lifecycle(key=format_key(parsed), scope=scope, events=infos)
        )

    def history(
        self,
        key: _Key,
        scope: Annotated[str | None, Field(description="only this scope")] = None,
        limit: Annotated[
            int, Field(ge=1, le=MAX_LIMIT, description="most events to return (the latest)")
        ] = DEFAULT_LIMIT,
    ) -> Annotated[CallToolResult, History]:
        """The assertions, retractions and decisions of a key's claims, in lamport order (the
        latest ``limit``; says how many earlier ones were left out), with who (author id and
        declared name) and why."""
        with _argument("key"):
            parsed = parse_key(key)
        with self.lock:
            every = self.replica.history(parsed, scope=scope)
            names = self.replica.author_names()
        left_out = max(0, len(every) - limit)
        events = every[left_out:]
        infos = [
            Event(
                lamport=e.lamport,
                event=e.event,
                op_id=e.op_id.hex(),
                claim_id=e.claim_id.hex(),
                scope=e.scope,
                value=None if e.claim is None else json_value(e.claim.value),
                redacted=e.redacted is not None,
                author=_author(e.author),
                author_name=_name(e.author, names),
                why=e.why,
            )
            for e in events
        ]
        lines = [f"{plural(len(every), 'event')} for {format_key(parsed)}"]
        if left_out:
            lines[0] += f", the latest {len(infos)} shown ({left_out} earlier left out)"
        lines += [
            f"{e.lamport} {e.event} {short_id(e.claim_id)} [{e.scope or '?'}]"
            f" {REDACTED_CELL if e.claim is None else value_cell(e.claim.value)}"
            f" by {names.label(e.author)}" + (f": {_one_line(e.why)}" if e.why.strip() else "")
            for e in events
        ]
        result = History(key=format_key(parsed), events=infos, left_out=left_out)
        return _answer("\n".join(lines), result)

    def sync(self) -> Annotated[CallToolResult, Synced]:
        """Exchange changes with the peers this server was started with (``--peer`` URLs of
        ``statefuse serve``): fetch what they have, push what they lack. Reports what moved;
        an unreachable peer is reported and the others still sync."""
        from statefuse.sync.http import SyncError, sync_all

        if not self.peers:
            raise ToolArgumentError(
                "peer",
                "peers-configured",
                "this server was started without peers: restart it with --peer URL",
            )
        outcomes = sync_all(self.replica, self.peers, timeout=self.timeout, lock=self.lock)
        peers: list[PeerSync] = []
        lines = []
        for url, got in zip(self.peers, outcomes, strict=True):
            if isinstance(got, SyncError):
                peers.append(
                    PeerSync(
                        url=url,
                        ok=False,
                        error=got.message,
                        rule=got.rule,
                        fetched=0,
                        pushed=0,
                        new_ops=0,
                        quarantined=0,
                        round_trips=0,
                        forks=[],
                    )
                )
                lines.append(f"Could not sync with {url}: {got.message}")
                continue
            forks = [f.describe() for f in got.merge.forks]
            peers.append(
                PeerSync(
                    url=url,
                    ok=True,
                    error=None,
                    rule=None,
                    fetched=got.fetched,
                    pushed=got.pushed,
                    new_ops=got.merge.new_ops,
                    quarantined=got.merge.quarantined,
                    round_trips=got.round_trips,
                    forks=forks,
                )
            )
            lines.append(
                f"Synced with {url}: fetched {got.fetched}, pushed {got.pushed};"
                f" {plural(got.merge.new_ops, 'new op')}, {got.merge.quarantined} quarantined"
            )
            lines += forks
            lines += [j.describe() for j in got.merge.clock_jumps]
        return _answer("\n".join(lines), Synced(peers=peers))

    def context_text(self) -> str:
        """The current context (``recall`` with an empty query and the default budget)."""
        with self.lock:
            rep = self.replica
            resolver = Conservative(authority_order=rep.registry.authority_order)
            return rep.context(
                "", lens=Lens(now=_now_ms()), budget=DEFAULT_BUDGET, resolver=resolver
            ).text


class _Server(MCPServer[Any]):
    """`MCPServer` whose bad-input results are one line, ``Error: field: message [rule: r]``.

    The SDK reports arguments that break the schema with pydantic's multi-line text, prefixed
    by the tool name, and anything a tool raises as a generic failure; a model corrects a call
    best from one line naming the field and the rule, so those two cases are rewritten here,
    at the one seam every tool call passes (`MCPServer.call_tool` raises ToolError with the
    cause attached)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: McpContext[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                return _refusal(_schema_line(cause))
            if isinstance(cause, InputError):
                return _refusal(f"{cause.field}: {_one_line(cause.message)} [rule: {cause.rule}]")
            raise

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: McpContext[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        """An unknown prompt is the JSON-RPC error invalid params (-32602) naming it: the SDK
        raises a bare ValueError, which reaches the client as code 0 and logs a traceback."""
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name!r} (this server has none)")
        return await super().get_prompt(name, arguments, context)

    async def run_stdio_async(self) -> None:
        """`MCPServer.run_stdio_async` with every line checked at our seam first: a line the
        SDK's parser refuses (not JSON, nested deeper than it reads, not a JSON-RPC message)
        is answered with a JSON-RPC error (parse error -32700 or invalid request -32600, with
        the request's id when it can be read) instead of being dropped without a reply."""
        from io import TextIOWrapper

        from mcp.server.stdio import stdio_server

        lines = _CheckedLines(
            anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        )
        async with stdio_server(stdin=lines) as (read_stream, write_stream):  # type: ignore[arg-type]
            lines.answer_to(write_stream)
            await self._lowlevel_server.run(
                read_stream, write_stream, self._lowlevel_server.create_initialization_options()
            )


class _CheckedLines:
    """The lines of stdin that are JSON-RPC messages the SDK reads; every other line is
    answered here, through the server's own write stream, with a JSON-RPC error."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self._write: Any = None
        self._ready = anyio.Event()

    def answer_to(self, write_stream: Any) -> None:
        self._write = write_stream
        self._ready.set()

    def __aiter__(self) -> Any:
        return self._lines()

    async def _lines(self) -> Any:
        from mcp.types import jsonrpc_message_adapter

        async for line in self.source:
            if not line.strip():
                continue
            try:
                jsonrpc_message_adapter.validate_json(line, by_name=False)
            except Exception:
                await self._refuse(line)
                continue
            yield line

    async def _refuse(self, line: str) -> None:
        import json

        from mcp.shared.message import SessionMessage
        from mcp.types import ErrorData, JSONRPCError

        ident: str | int | None = None
        try:
            parsed = json.loads(line)
        except RecursionError:
            code, message = PARSE_ERROR, "Parse error: the message is nested too deeply to read"
        except ValueError:
            code, message = PARSE_ERROR, "Parse error: the line is not JSON"
        else:
            code = INVALID_REQUEST
            message = "Invalid request: not a JSON-RPC message this server reads"
            found = parsed.get("id") if isinstance(parsed, dict) else None
            if type(found) in (str, int):
                ident = found
            if _depth(parsed) > _MAX_DEPTH:
                message = "Invalid request: the message is nested too deeply to read"
        await self._ready.wait()
        error = JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(code=code, message=message))
        await self._write.send(SessionMessage(error))


#: How deep the SDK's JSON parser reads (pydantic's limit): a deeper request is refused.
_MAX_DEPTH = 128


def _depth(value: object) -> int:
    """How deeply ``value`` (parsed JSON) nests, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        deepest = max(deepest, d)
        if isinstance(v, dict):
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            stack.extend((x, d + 1) for x in v)
    return deepest


_INSTRUCTIONS = (
    "StateFuse: a shared memory for a team of agents. Several agents (and people) write to it;"
    " when they disagree, both values are kept as a conflict instead of one overwriting the"
    " other. Use `recall` with your question before answering from memory, `remember` to store"
    " what you learned (with provenance), `search` to find claims and their ids, `conflicts`"
    " and `decide` to settle disagreements, `retract` to withdraw what is wrong, `history` to"
    " see who said what when, and `sync` to exchange changes with peer replicas. How to read"
    " what `recall` returns:\n\n" + SYSTEM_PROMPT
)

_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_DESTROYS = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


def build_server(
    replica: Replica,
    *,
    peers: Sequence[str] = (),
    lock: threading.Lock | None = None,
    timeout: float = SYNC_TIMEOUT,
    embedder: object | None = None,
    allow_redact: bool = False,
) -> MCPServer[Any]:
    """The MCP server over ``replica``: the tools of `TOOL_NAMES` and the `CONTEXT_URI`
    resource. ``peers`` are the HTTP peers ``sync`` syncs with. Every tool holds ``lock`` while
    it uses the replica: by default the replica's own (`Replica.lock`), which every other use
    of the replica takes too, so nothing else is needed to serve or follow it beside the MCP
    server. ``embedder``: `recall` and `search` rank by meaning too (`Replica.context` with
    it), its vectors kept in the replica's store. ``allow_redact``: also offer the ``redact``
    tool (off by default: it deletes bodies on every replica)."""
    tools = _Tools(replica, lock if lock is not None else replica.lock, peers, timeout, embedder)
    server = _Server(
        "statefuse",
        title="StateFuse memory",
        instructions=_INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
        # the context changes with every write: a client must never serve a cached read
        cache_hints={"resources/read": CacheHint(ttl_ms=0)},
    )
    reads = {"recall", "search", "conflicts", "history", "conflict_history"}
    for name in TOOL_NAMES:
        fn: Callable[..., Any] = getattr(tools, name)
        server.add_tool(fn, name=name, annotations=_READ_ONLY if name in reads else _WRITES)
    if allow_redact:  # deletes bodies on every replica: only when the operator asks for it
        server.add_tool(tools.redact, name="redact", annotations=_DESTROYS)
    server.resource(
        CONTEXT_URI,
        name="context",
        title="Current memory context",
        description="The memory as a model reads it (recall with an empty query, 2,000 tokens).",
        mime_type="text/plain",
    )(tools.context_text)
    return server


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(
    replica: Replica,
    *,
    transport: Transport | str = Transport.STDIO,
    host: str = "127.0.0.1",
    port: int = 0,
    peers: Sequence[str] = (),
    announce: Callable[[str], object] = _to_stderr,
    embedder: object | None = None,
    allow_redact: bool = False,
) -> None:
    """Serve ``replica`` until the client closes stdin (stdio) or Ctrl-C / SIGTERM (HTTP).

    Over HTTP the server binds ``host``:``port`` first (port 0: one the OS picks) and then
    calls ``announce`` with the URL clients use (``http://host:port/mcp``), so a caller that
    waits for that line knows the port and that connections are accepted. Over stdio nothing
    but protocol goes to stdout; ``announce`` is called before serving (send it to stderr).
    Raises OSError when the address cannot be bound."""
    mode = Transport(transport)
    server = build_server(replica, peers=peers, embedder=embedder, allow_redact=allow_redact)
    name = replica.author_name(replica.author)
    who = f"space {replica.space!r}, author {replica.author.hex()[:12]}"
    if name is not None:
        who += f" ({name})"
    if mode is Transport.STDIO:
        announce(f"MCP server for {who} on stdio")
        anyio.run(server.run_stdio_async)
        return
    listener = socket.create_server((host, port))
    try:
        bound = listener.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        announce(f"MCP server for {who} at http://{shown}:{bound}/mcp (Ctrl-C to stop)")
        anyio.run(_serve_http, server, listener, host)
    finally:
        listener.close()


async def _serve_http(server: MCPServer[Any], listener: socket.socket, host: str) -> None:
    import uvicorn

    # ``host`` picks the SDK's DNS-rebinding protection (on for loopback hosts)
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(
        app, log_level="warning", timeout_graceful_shutdown=SHUTDOWN_GRACE_S, lifespan="on"
    )
    await uvicorn.Server(config).serve(sockets=[listener])
