"""The HTTP sync client: bring a replica and a peer's server to the same set of changes.

`sync_with` runs one sync with one peer over `sync.protocol`, on one kept-alive connection
(stdlib `http.client`): a set-reconciliation exchange (the client drives it; the server answers
each message statelessly) tells it which changes each side lacks; it fetches what it lacks, a
page at a time, into `Replica.receive`, and pushes what the peer lacks, predecessors first.
`sync_all` does that with several peers, then once more with those that synced before a later
peer brought something new, so every reachable peer ends up with everything any of them had.

Invariants:

- Nothing from a response reaches the replica before the whole response has been read and its
  framing checked; fetched changes then go through `Replica.receive` like any outside bytes
  (a lying peer's changes are quarantined, never applied). A response that breaks the protocol
  raises MalformedResponseError and nothing of it is applied.
- Every failure is a `SyncError` (see `sync.protocol` for the tree), mapped from socket and
  HTTP errors at one seam (`_Connection.post`); pages fetched before a failure stay received.
- Every request is signed with the replica's author key when it has one (`sync.auth`), once
  the client knows the server's id: a server names itself in every answer, and a 401 that
  names another id than the one signed for (or a first, unsigned request) is sent once more,
  signed for the named id. Known ids are remembered per URL for the process.
- A closed space's changes go only to a server that proves, in its answers, an author the
  client's replica admits now (the root, or admitted and not revoked: `TrustState.is_member`).
  Every request carries a fresh challenge (the signed request's nonce, else a
  ``StateFuse-Challenge`` header) that the server signs into its answer (`sync.auth`); in a
  closed space each answer is checked before it is used, and again before each push page, so
  a server that proves nothing, a bad proof, or a revoked or never-admitted author ends the
  sync with `ServerIdentityError` after its first answer: nothing fetched from it, nothing
  pushed to it (the first reconcile message, change-id fingerprints, has gone out). Open
  spaces sync with any server; `SyncReport.server_author` tells whom the answers proved.
- ``https://`` peers are verified against the system's CAs, or only those of ``cafile`` (or
  the ``STATEFUSE_CAFILE`` environment variable); verification is never turned off.
- The replica is touched only in short calls that hold its own lock (and ``lock`` too, when
  given), never while waiting on the network, so a replica that is also being served, or
  followed, can sync out without blocking its server for long.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import SplitResult, urlsplit

from statefuse.sync.auth import (
    CHALLENGE_HEADER,
    NONCE_BYTES,
    RESPONSE_HEADERS,
    sign_request,
    verify_response,
)
from statefuse.sync.key import SigningKey
from statefuse.sync.protocol import (
    CONTENT_TYPE,
    MAX_BODY_BYTES,
    MAX_CHANGE_FRAME_BYTES,
    MAX_PAGE_CHANGES,
    MAX_ROUNDS,
    PAGE_BYTES,
    Lock,
    MalformedResponseError,
    PeerRejectedError,
    PeerTimeoutError,
    PeerUnreachableError,
    ServerIdentityError,
    SyncError,
    check_seconds,
    decode_frames,
    encode_frames,
)
from statefuse.sync.reconcile import ReconcileError, Reconciler
from statefuse.sync.replica import MergeReport, Replica
from statefuse.sync.trust import TrustMode

__all__ = [
    "CAFILE_ENV",
    "DEFAULT_TIMEOUT",
    "Progress",
    "SyncReport",
    "check_url",
    "client_context",
    "sync_all",
    "sync_with",
]

#: Seconds one request may take (connect, send, answer) before PeerTimeoutError.
DEFAULT_TIMEOUT = 10.0
#: Times an exchange starts again when the peer's changes moved under it (its 409 answers).
_RESTARTS = 3
#: Rules of a 409 to a reconcile message that mean "my ids changed since your last round".
_RESTART_RULES = frozenset({"answer-length", "answer-id-known"})
#: The environment variable that names a CA file when no ``cafile`` is given.
CAFILE_ENV = "STATEFUSE_CAFILE"
#: Server ids the process remembers, by URL (the oldest is forgotten first).
_MAX_SERVER_IDS = 1024
_server_ids: dict[str, bytes] = {}
_server_ids_lock = threading.Lock()

#: ``progress(done, total)``: changes fetched and pushed so far, of all to move in this sync.
Progress = Callable[[int, int], object]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync with one peer did.

    ``round_trips`` counts HTTP requests; ``bytes_sent`` / ``bytes_received`` count request and
    response bodies (headers add about 200 B per request). ``fetched`` changes came from the
    peer and ``merge`` is what this replica made of them (its ``pending``: those still waiting
    for a predecessor when the sync ended); ``pushed`` went to the peer and
    ``peer_merge`` is what the peer reported making of them. ``seconds`` is the wall time.
    ``server_author`` is the author key the peer's last answer proved (`sync.auth`), None when
    it proved none (an open space's server opened without its key, or one that does not sign).
    """

    url: str
    round_trips: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    fetched: int = 0
    pushed: int = 0
    merge: MergeReport = field(default_factory=MergeReport)
    peer_merge: MergeReport = field(default_factory=MergeReport)
    seconds: float = 0.0
    server_author: bytes | None = None

    def __add__(self, other: SyncReport) -> SyncReport:
        """Two syncs with the same peer, added up (the server author is the later one's)."""
        if other.url != self.url:
            raise SyncError("url", "same-peer", "only reports of one peer add up")
        summed = {
            f.name: getattr(self, f.name) + getattr(other, f.name)
            for f in fields(self)
            if f.name not in ("url", "server_author")
        }
        author = other.server_author if other.server_author is not None else self.server_author
        return SyncReport(self.url, **summed, server_author=author)


def check_url(url: object) -> SplitResult:
    """The parts of a peer's URL, ``http://host[:port][/prefix]`` or ``https://...``. Raises
    SyncError (field ``url``; rule ``url`` for one that does not parse, ``http-url`` for
    another shape, ``credentials`` for one with a user or password, which this protocol never
    sends: signed requests say who asks) naming the URL without its credentials."""
    if not isinstance(url, str):
        raise SyncError("url", "url", f"a peer URL is a str, got {type(url).__name__}")
    shown = _redacted(url)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what may fail
    except ValueError:
        raise SyncError("url", "url", f"not a valid URL {shown!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SyncError(
            "url", "http-url", f"expected http(s)://host[:port][/prefix], got {shown!r}"
        )
    if "@" in parts.netloc:
        raise SyncError(
            "url", "credentials", f"a peer URL carries no user name or password: {shown!r}"
        )
    if parts.query or parts.fragment:
        raise SyncError("url", "http-url", f"a peer URL has no query or fragment: {shown!r}")
    return parts


def _redacted(url: str) -> str:
    """``url`` with whatever stands before an ``@`` in its authority masked."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{sep}{authority}{slash}{path}"


def client_context(cafile: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """The TLS context for ``https://`` peers: certificates and host names verified against
    ``cafile`` alone when given (else the file ``STATEFUSE_CAFILE`` names, else the system's
    CAs). Raises SyncError (field ``cafile``, rule ``cafile``) for a file that does not load."""
    chosen = cafile if cafile is not None else os.environ.get(CAFILE_ENV) or None
    try:
        return ssl.create_default_context(cafile=chosen)
    except (OSError, ssl.SSLError, ValueError) as e:
        raise SyncError(
            "cafile", "cafile", f"cannot load CA certificates from {chosen}: {type(e).__name__}"
        ) from None


def _known_server(url: str) -> bytes | None:
    with _server_ids_lock:
        return _server_ids.get(url)


def _learn_server(url: str, server: bytes) -> None:
    with _server_ids_lock:
        _server_ids.pop(url, None)
        _server_ids[url] = server
        while len(_server_ids) > _MAX_SERVER_IDS:
            del _server_ids[next(iter(_server_ids))]


def _server_header(value: str | None) -> bytes | None:
    if value is None or len(value) != 32:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def _creator_header(value: str | None) -> bytes | None:
    if value is None or len(value) != 64:
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


class _Connection:
    """One kept-alive HTTP(S) connection to a peer, counting requests and body bytes.

    `post` is the one seam where socket and HTTP errors become SyncErrors.
    """

    def __init__(
        self,
        url: str,
        timeout: float,
        *,
        space: str = "",
        key: SigningKey | None = None,
        cafile: str | os.PathLike[str] | None = None,
    ) -> None:
        parts = check_url(url)
        assert parts.hostname is not None  # `check_url` refuses a URL without one
        self.url = url
        self.prefix = parts.path.rstrip("/")
        self.space = space
        self.key = key
        self._http: http.client.HTTPConnection
        if parts.scheme == "https":
            self._http = http.client.HTTPSConnection(
                parts.hostname,
                parts.port or 443,
                timeout=timeout,
                context=client_context(cafile),
            )
        else:
            self._http = http.client.HTTPConnection(
                parts.hostname, parts.port or 80, timeout=timeout
            )
        self.requests = 0
        self.sent = 0
        self.received = 0
        #: The author key the last answer proved, or None; then `unproven` says why.
        self.server_author: bytes | None = None
        self.unproven: ServerIdentityError | None = None
        #: Called with this connection on every 200 answer before its body is used (a closed
        #: space's membership check); it raises to stop the sync there.
        self.check: Callable[[_Connection], None] | None = None
        #: The open space's creator the server named in its last answer (None: none).
        self.creator: bytes | None = None

    def close(self) -> None:
        self._http.close()

    def post(self, endpoint: str, body: bytes) -> bytes:
        """POST ``body`` to ``/v1/<endpoint>``; the body of the (200) answer.

        Raises PeerUnreachableError, PeerTimeoutError, PeerRejectedError (an HTTP error status)
        or MalformedResponseError (a broken HTTP answer, or one longer than the protocol allows).
        """
        path = f"{self.prefix}/v1/{endpoint}"
        signed_for = self._signed_for()
        status, data, content_type, server = self._send(endpoint, path, body, signed_for)
        if status == 401 and self.key is not None and server not in (None, signed_for):
            # The server named itself (a first request, or another server now at this URL):
            # the request changed nothing there, so it goes again, signed for that id.
            status, data, content_type, _ = self._send(endpoint, path, body, server)
        kind = content_type.split(";")[0].strip().lower()
        if server is None and kind not in (CONTENT_TYPE, "application/json"):
            # every answer of a StateFuse server names it: this is another web server (a page
            # of HTML is not worth showing line by line)
            shown = f"{status} ({kind})" if kind else str(status)
            message = f"{self.url} is not a StateFuse server: it answered {path} with {shown}"
            if status != 200:
                raise PeerRejectedError("response", "not-statefuse", message, status)
            raise MalformedResponseError(f"response.{endpoint}", "not-statefuse", message)
        if status != 200:
            raise _rejected(self.url, path, status, data, content_type)
        if self.check is not None:
            self.check(self)
        return data

    def _signed_for(self) -> bytes | None:
        return None if self.key is None else _known_server(self.url)

    def _send(
        self, endpoint: str, path: str, body: bytes, server: bytes | None
    ) -> tuple[int, bytes, str, bytes | None]:
        """One request (signed for ``server`` when it is given): the answer's status, body,
        content type and server id. The mapping seam of `post`."""
        headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        # A fresh challenge the server's proof must sign: a signed request's nonce, else its own
        # header.
        challenge = os.urandom(NONCE_BYTES)
        if self.key is not None and server is not None:
            headers.update(
                sign_request(
                    self.key,
                    space=self.space,
                    server=server,
                    method="POST",
                    endpoint=f"/v1/{endpoint}",
                    body=body,
                    nonce=challenge,
                )
            )
        else:
            headers[CHALLENGE_HEADER] = challenge.hex()
        self.requests += 1
        self.sent += len(body)
        try:
            self._http.request("POST", path, body, headers=headers)
            response = self._http.getresponse()
            declared = response.getheader("Content-Length")
            if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
                self._http.close()
                raise MalformedResponseError(
                    f"response.{endpoint}",
                    "max-body-bytes",
                    f"{self.url} announced a {declared}-byte answer (at most {MAX_BODY_BYTES})",
                )
            data = response.read(MAX_BODY_BYTES + 1)
            if not response.isclosed():
                self._http.close()  # unread bytes left: this connection cannot be reused
            content_type = response.getheader("Content-Type") or ""
            named = _server_header(response.getheader("StateFuse-Server"))
            proof = {name: response.getheader(name) for name in RESPONSE_HEADERS}
            self.creator = _creator_header(response.getheader("StateFuse-Creator"))
        except TimeoutError:
            self._http.close()
            raise PeerTimeoutError(
                "url", "timeout", f"{self.url} did not answer {path} in time"
            ) from None
        except http.client.HTTPException as e:
            self._http.close()
            raise MalformedResponseError(
                f"response.{endpoint}", "http", f"{self.url} sent a broken HTTP answer: {e!r}"
            ) from None
        except ssl.SSLCertVerificationError as e:
            self._http.close()
            raise PeerUnreachableError(
                "url",
                "tls-verify",
                f"TLS verification of {self.url} failed ({e.verify_message}); trust its"
                f" certificate with cafile= (statefuse sync --cafile, {CAFILE_ENV})",
            ) from None
        except ssl.SSLError as e:
            self._http.close()
            raise PeerUnreachableError(
                "url", "tls", f"no TLS connection to {self.url}: {e.reason or type(e).__name__}"
            ) from None
        except OSError as e:
            self._http.close()
            raise PeerUnreachableError(
                "url", "unreachable", f"cannot reach {self.url}: {e.strerror or repr(e)}"
            ) from None
        self.received += len(data)
        if len(data) > MAX_BODY_BYTES:
            raise MalformedResponseError(
                f"response.{endpoint}", "max-body-bytes", f"answer longer than {MAX_BODY_BYTES} B"
            )
        if named is not None and self.key is not None:
            _learn_server(self.url, named)
        self._prove(endpoint, response.status, named, challenge, data, proof)
        return response.status, data, content_type, named

    def _prove(
        self,
        endpoint: str,
        status: int,
        server: bytes | None,
        challenge: bytes,
        body: bytes,
        proof: dict[str, str | None],
    ) -> None:
        """Record the author this answer proves (`server_author`), or why it proves none."""
        try:
            if server is None:
                raise ServerIdentityError(
                    "StateFuse-Server", "server-identity-unproven", "the server names no id"
                )
            self.server_author = verify_response(
                proof,
                space=self.space,
                server=server,
                endpoint=f"/v1/{endpoint}",
                status=status,
                challenge=challenge,
                body=body,
            )
            self.unproven = None
        except ServerIdentityError as e:
            self.server_author, self.unproven = None, e

    def frames(self, endpoint: str, frames: Sequence[bytes], *, max_frames: int) -> list[bytes]:
        """POST a frame list, and check the framing of the answer (MalformedResponseError)."""
        data = self.post(endpoint, encode_frames(frames))
        try:
            return decode_frames(
                data,
                max_frames=max_frames,
                max_frame_bytes=MAX_CHANGE_FRAME_BYTES,
                field=f"response.{endpoint}",
            )
        except SyncError as e:
            raise MalformedResponseError(e.field, e.rule, f"from {self.url}: {e.message}") from None

    def document(self, endpoint: str, frames: Sequence[bytes]) -> dict[str, Any]:
        """POST a frame list; the JSON object that answers it (MalformedResponseError)."""
        data = self.post(endpoint, encode_frames(frames))
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            document = None
        if not isinstance(document, dict):
            raise MalformedResponseError(
                f"response.{endpoint}", "json", f"{self.url} did not answer with a JSON object"
            )
        return document


def _rejected(url: str, path: str, status: int, data: bytes, content_type: str) -> SyncError:
    """The error for an HTTP error answer: the peer's own field and rule when it named them."""
    field_, rule, detail = "response", f"http-{status}", ""
    if content_type.startswith("application/json"):
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            body = json.loads(data)
            if isinstance(body, dict):
                field_ = str(body.get("field", field_))[:200]
                rule = str(body.get("rule", rule))[:100]
                detail = str(body.get("error", ""))[:500]
    if not detail:
        detail = data[:200].decode("utf-8", "replace").strip()
    return PeerRejectedError(field_, rule, f"{url} answered {path} with {status}: {detail}", status)


def _merge_report(document: dict[str, Any], url: str) -> MergeReport:
    report = MergeReport.from_json(document)
    if report is None:
        raise MalformedResponseError(
            "response.push", "merge-report", f"{url} answered a push without its counts"
        )
    return report


@contextlib.contextmanager
def _holding(lock: Lock | None) -> Iterator[None]:
    if lock is None:
        yield
        return
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _check_page_size(page_size: object) -> int:
    if type(page_size) is not int or not 1 <= page_size <= MAX_PAGE_CHANGES:
        raise SyncError("page_size", "range", f"expected an int in [1, {MAX_PAGE_CHANGES}]")
    return page_size


def _check_server(conn: _Connection, replica: Replica, lock: Lock | None) -> None:
    """Refuse, with ServerIdentityError, a closed space's server whose last answer did not
    prove an author ``replica`` admits now (its trust may have changed since the last check)."""
    author = conn.server_author
    if author is None:
        why = conn.unproven.message if conn.unproven is not None else "it proved nothing yet"
        raise ServerIdentityError(
            conn.unproven.field if conn.unproven is not None else "server",
            "server-identity-unproven",
            f"{conn.url} does not prove its author key ({why}); a closed space's changes go"
            " only to a server whose author the space admits: nothing was pushed to it",
        )
    with _holding(lock):
        trust = replica.trust()
    if trust.is_member(author):
        return
    status = "revoked" if author in trust.cutoffs or author in trust.keeps else "never admitted"
    raise ServerIdentityError(
        "server",
        "server-not-a-member",
        f"{conn.url} is served by author {author.hex()[:16]}…, {status} in space"
        f" {replica.space!r}; a closed space's changes go only to a server whose author the"
        " space admits: nothing was pushed to it",
    )


def _reconcile(conn: _Connection, replica: Replica, lock: Lock | None) -> Reconciler:
    """Run the exchange to its end; the reconciler then knows what each side lacks."""
    space = replica.space.encode()
    restarts = 0
    while True:
        with _holding(lock):
            reconciler = replica.reconciler()
        try:
            if _exchange(conn, space, reconciler):
                return reconciler
        except PeerRejectedError as e:
            if e.status != 409 or e.rule not in _RESTART_RULES or restarts == _RESTARTS:
                raise
            restarts += 1
            continue
        raise MalformedResponseError(
            "response.reconcile", "max-rounds", f"no end with {conn.url} after {MAX_ROUNDS} rounds"
        )


def _exchange(conn: _Connection, space: bytes, reconciler: Reconciler) -> bool:
    """Drive one exchange; False if it has not ended after `MAX_ROUNDS` requests."""
    message = reconciler.initiate()
    for _ in range(MAX_ROUNDS):
        frames = conn.frames("reconcile", [space, message], max_frames=1)
        if len(frames) != 1:
            raise MalformedResponseError(
                "response.reconcile", "frame-count", f"{conn.url} answered without a message"
            )
        try:
            reply = reconciler.respond(frames[0])
        except ReconcileError as e:
            raise MalformedResponseError(
                f"response.reconcile.{e.field}", e.rule, f"from {conn.url}: {e.message}"
            ) from None
        if reply.done or reply.message is None:
            return True  # what we would still send only answers the peer: it needs none
        message = reply.message
    return False


def sync_with(
    replica: Replica,
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    lock: Lock | None = None,
    page_size: int = MAX_PAGE_CHANGES,
    cafile: str | os.PathLike[str] | None = None,
) -> SyncReport:
    """Sync ``replica`` with the peer served at ``url`` (both ways); returns what moved.

    ``timeout`` bounds each request (connect, send, answer), in seconds. ``progress(done,
    total)`` is called after each page of changes fetched or pushed. ``lock``, when given, is
    held too whenever the replica is used (the replica holds its own lock for each call, so
    none is needed; it serves callers that serialize other work with one). ``page_size`` caps
    the changes per fetch or push request. Fetched changes reach the replica's observers with
    ``url`` as their source. Requests are signed with the replica's key (`Replica.key`; none
    for a replica opened without it), which servers of closed spaces require. ``cafile``: the
    CA certificates (PEM) an ``https://`` peer's certificate must chain to, instead of the
    system's (default: the file ``STATEFUSE_CAFILE`` names, if set).

    In a closed space (`TrustMode.CLOSED`) the peer's answers must prove an author this
    replica admits now (the root, or admitted and not revoked): else ServerIdentityError (rule
    ``server-identity-unproven`` or ``server-not-a-member``) after its first answer, before
    anything is fetched from it or pushed to it. The report names the proven author
    (``server_author``) in either mode.

    Raises SyncError for a bad argument, and its subclasses (see `sync.protocol`) when the peer
    is unreachable (a certificate that does not verify: PeerUnreachableError rule
    ``tls-verify``), too slow, answers with an error (another space: PeerRejectedError with
    rule ``same-space``; a server that does not let this author in: status 401 or 403, with
    the rule of `sync.auth`) or breaks the protocol. Pages fetched before an error (or an
    interrupt) stay received, accepted or parked in the pending area, and the next sync asks
    only for what is still missing.
    """
    if not isinstance(replica, Replica):
        raise SyncError("replica", "replica-type", f"expected a Replica, got {replica!r}")
    seconds = check_seconds("timeout", timeout)
    page_size = _check_page_size(page_size)
    start = time.perf_counter()
    conn = _Connection(url, seconds, space=replica.space, key=replica.key, cafile=cafile)
    closed = replica.mode is TrustMode.CLOSED
    if closed:
        conn.check = lambda c: _check_server(c, replica, lock)
    merge = peer_merge = MergeReport()
    try:
        reconciler = _reconcile(conn, replica, lock)
        with _holding(lock), replica.lock:
            # two spaces that share a name are refused before anything moves; a store with no
            # creator follows the server's (its user chose to sync with it: `sync.creator`)
            adopted = replica._meet(conn.creator, conn.url)
        if adopted is not None:
            merge = MergeReport(adopted_creator=adopted)
        # The reconciler compares accepted changes; what an earlier sync fetched and parked
        # (waiting for a predecessor, kept in the store's pending area) is not asked for again,
        # so a sync stopped half-way (Ctrl-C, a lost connection) resumes from what is stored
        wanted, give = reconciler.fetch, reconciler.send
        with _holding(lock):
            want = _lacking(replica, wanted)
        total = len(want) + len(give)
        space = replica.space.encode()
        fetch = _Fetch(conn, replica, space, page_size, lock, progress, total)
        merge = merge + fetch.pages(want)
        fetched = fetch.fetched  # distinct changes: what is fetched again is not counted twice
        # Pages come in change-id order, so one author's long feed parks much of itself until
        # its predecessors arrive, and the pending bounds may evict some of it (`sync.pending`).
        # What was evicted is fetched again while that admits more: a sync ends complete.
        for _ in range(_REFETCH_ROUNDS):
            if not merge.evicted:
                break
            with _holding(lock):
                lost = _lacking(replica, want)
            if not lost:
                break
            again = fetch.pages(lost)
            with _holding(lock):
                healed = len(lost) - len(_lacking(replica, lost))
            merge = merge + again
            merge = replace(merge, evicted=max(0, merge.evicted - healed))
            if not again.accepted:
                break
        done = fetch.done
        # pages come in change-id order: a later page admits what one parked
        if merge.pending or len(want) != len(wanted):
            with _holding(lock):
                merge = replace(merge, pending=_still_pending(replica, wanted))
        with _holding(lock):
            outgoing = _predecessors_first(replica, give)
        for page_changes in _pages(outgoing, page_size):
            if closed:  # the trust may have changed since the last answer (fetched changes)
                _check_server(conn, replica, lock)
            document = conn.document("push", [space, *page_changes])
            peer_merge = peer_merge + _merge_report(document, conn.url)
            done += len(page_changes)
            if progress is not None:
                progress(done, total)
    finally:
        conn.close()
    return SyncReport(
        conn.url,
        round_trips=conn.requests,
        bytes_sent=conn.sent,
        bytes_received=conn.received,
        fetched=fetched,
        pushed=len(outgoing),
        merge=merge,
        peer_merge=peer_merge,
        seconds=time.perf_counter() - start,
        server_author=conn.server_author,
    )


#: How often a sync fetches again what the pending bounds evicted during its own fetch (each
#: round admits at least one change, or the sync stops: the evictions are then reported).
_REFETCH_ROUNDS = 8


class _Fetch:
    """A sync's fetching: pages of wanted change ids, each answer received by the replica,
    counting what came and reporting progress."""

    def __init__(
        self,
        conn: _Connection,
        replica: Replica,
        space: bytes,
        page_size: int,
        lock: Lock | None,
        progress: Progress | None,
        total: int,
    ) -> None:
        self.conn, self.replica, self.space = conn, replica, space
        self.page_size, self.lock, self.progress, self.total = page_size, lock, progress, total
        self.fetched = self.done = 0

    def pages(self, ids: Sequence[bytes]) -> MergeReport:
        """Fetch ``ids`` page by page; what the replica made of them."""
        merge = MergeReport()
        pos = 0
        while pos < len(ids):
            page = ids[pos : pos + self.page_size]
            answer = self.conn.frames("fetch", [self.space, *page], max_frames=len(page))
            if not answer:
                raise MalformedResponseError(
                    "response.fetch",
                    "frame-count",
                    f"{self.conn.url} answered a fetch with nothing",
                )
            found = [data for data in answer if data]
            with _holding(self.lock):
                merge = merge + self.replica.receive(found, source=self.conn.url)
            self.fetched += len(found)
            pos += len(answer)
            self.done = min(self.total, self.done + len(answer))
            if self.progress is not None:
                self.progress(self.done, self.total)
        return merge


def _lacking(replica: Replica, ids: Sequence[bytes]) -> list[bytes]:
    """Those of ``ids`` the replica holds neither accepted nor pending (evicted)."""
    with replica.lock:
        log = replica.log
        return [cid for cid in ids if cid not in log and not log.is_pending(cid)]


def _still_pending(replica: Replica, ids: Sequence[bytes]) -> int:
    """How many of ``ids`` wait in the replica's pending area now: what a sync's report calls
    pending, however many a page parked before a later page brought their predecessors."""
    waiting = {c.change_id for c in replica.pending()}
    return sum(1 for cid in ids if cid in waiting)


def _predecessors_first(replica: Replica, ids: Sequence[bytes]) -> list[bytes]:
    """The wire bytes of ``ids`` ordered by author and seq, so the peer parks none of them."""
    with replica.lock:
        changes = [c for c in (replica.log.get(cid) for cid in ids) if c is not None]
    changes.sort(key=lambda c: (c.author, c.seq, c.change_id))
    return [c.data for c in changes]


def _pages(changes: list[bytes], page_size: int) -> Iterator[list[bytes]]:
    """Runs of at most ``page_size`` changes and `PAGE_BYTES` (each holds at least one)."""
    page: list[bytes] = []
    used = 0
    for data in changes:
        if page and (len(page) == page_size or used + 4 + len(data) > PAGE_BYTES):
            yield page
            page, used = [], 0
        page.append(data)
        used += 4 + len(data)
    if page:
        yield page


def sync_all(
    replica: Replica,
    urls: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    lock: Lock | None = None,
    cafile: str | os.PathLike[str] | None = None,
) -> list[SyncReport | SyncError]:
    """Sync with every peer in ``urls``; one entry per URL, in order: its report, or the
    SyncError that ended its sync (one dead peer does not stop the others).

    Peers that synced before a later peer brought new changes are synced once more (their
    report adds up both), so every peer that answered ends with the union of all changes.
    ``cafile`` is `sync_with`'s. Raises SyncError (rule ``urls``) when ``urls`` is a single
    string.
    """
    if isinstance(urls, str):
        raise SyncError("urls", "urls", "expected a list of URLs, got one string")
    results: list[SyncReport | SyncError] = []
    last_news = -1
    for k, url in enumerate(urls):
        try:
            report = sync_with(
                replica, url, timeout=timeout, progress=progress, lock=lock, cafile=cafile
            )
        except SyncError as e:
            results.append(e)
            continue
        results.append(report)
        if report.fetched:
            last_news = k
    for k in range(last_news):
        first = results[k]
        if isinstance(first, SyncReport):
            try:
                again = sync_with(
                    replica, urls[k], timeout=timeout, progress=progress, lock=lock, cafile=cafile
                )
            except SyncError as e:
                results[k] = e
                continue
            results[k] = first + again
    return results
