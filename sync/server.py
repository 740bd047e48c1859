"""The HTTP sync server: a WSGI app over one replica, served by waitress.

`serve` binds a `SyncServer` (loopback and an OS-chosen port by default) around a `SyncApp`;
run it with `SyncServer.serve_forever` (a CLI) or in a background thread with `start` / ``with``.
The endpoints and bodies are `sync.protocol`'s.

Invariants:

- A request uses the replica only while it holds the replica's own lock (`Replica.lock`, which
  every replica method takes too), so the serving process may use a served replica from any
  thread with no lock of its own. Bodies are read and decoded before the lock is taken; a
  request that cannot get it within ``lock_timeout`` gets 503, so a busy or stuck replica never
  piles up blocked threads forever. A ``lock`` passed to `serve` (the way before replicas
  locked themselves) is still honoured: a request holds it first, then the replica's.
- Nothing a client sends can crash the server or reach the replica unverified: bodies are
  bounded before they are read (waitress refuses a longer ``Content-Length`` with 413 before
  reading it, and the app checks again), framing is checked whole, reconcile messages go through
  the reconciler's strict decoder, and changes only through `Replica.receive`, which quarantines
  garbage with its reason. Any other fault becomes a JSON 500 and is logged.
- A request costs work bounded by the protocol's limits: a reconcile reply is at most one
  frame of `sync.reconcile.MAX_MESSAGE_BYTES`, a fetch answer at most `PAGE_BYTES`.
- No change id or change leaves, and nothing is received, before the request passed the
  server's `AuthMode` (`sync.auth`): in ``members`` mode (the default for closed spaces) only
  requests signed by the root or an admitted, unrevoked author, fresh and never seen before.
  A request for another space is told so (409) before it is authenticated.
- Every answer, of every status, is signed with the served replica's author key when it holds
  one (`sync.auth.sign_response`: the space, server id, endpoint, status, the request's
  challenge and the body), so a client can check whom it talks to before it pushes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from blake3 import blake3
from waitress import trigger, wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

from statefuse.registry.error import RegistryError
from statefuse.sync.auth import (
    CHALLENGE_HEADER,
    DEFAULT_WINDOW,
    HEADERS,
    AuthMode,
    RequestGate,
    request_challenge,
    sign_response,
)
from statefuse.sync.guard import ClientSlots, ServerLimits, refusal, refuse
from statefuse.sync.pending import AreaFullError
from statefuse.sync.protocol import (
    CONTENT_TYPE,
    MAX_BODY_BYTES,
    MAX_CHANGE_FRAME_BYTES,
    MAX_PAGE_CHANGES,
    MAX_SPACE_BYTES,
    PAGE_BYTES,
    PROTOCOL_VERSION,
    Lock,
    SyncError,
    check_seconds,
    decode_frames,
    decode_space,
    encode_frames,
    limits,
)
from statefuse.sync.reconcile import ID_BYTES, MAX_MESSAGE_BYTES, ReconcileError, Reconciler
from statefuse.sync.replica import ReadOnlyError, Replica
from statefuse.sync.tls import TLSSyncServer
from statefuse.sync.trust import TrustMode

__all__ = [
    "DEFAULT_TIMEOUT",
    "AuthMode",
    "ServerLimits",
    "SyncApp",
    "SyncServer",
    "TLSSyncServer",
    "serve",
]

log = logging.getLogger("statefuse.sync.server")

#: Seconds a request may wait for the replica, and an idle connection may stay open.
DEFAULT_TIMEOUT = 30.0
#: Ids a cached server reconciler may learn before it is rebuilt (a peer could otherwise grow
#: its learned-id sets without bound).
_RELEARN_LIMIT = 100_000
#: Reconcile errors that mean "your message contradicts my ids": the ids changed between two
#: rounds of an exchange (or the peer lies). The client starts the exchange again.
_CONTRADICTIONS = frozenset({"answer-length", "answer-id-known"})

#: HTTP status of a nonce the gate would not spend (other refusals of `RequestGate.consume`
#: are 401): one key over its own budget, or (members mode) every key slot busy.
_GATE_STATUS = {"key-busy": 429, "busy": 503}

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


#: Why a push to a store served read-only (a read-only file system, `statefuse serve` of a
#: file this process cannot write) is refused, in the words a peer's operator needs.
_READ_ONLY = (
    "this server serves its store read-only: it answers reconcile, fetch and info, and"
    " refuses pushes"
)


class _Reject(Exception):
    """An HTTP error answer: status, and the JSON error body's field, rule and message."""

    def __init__(self, status: int, field: str, rule: str, message: str, **extra: object) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.rule = rule
        self.message = message
        self.extra = extra


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class _Request:
    """What a handler gets: the endpoint it was routed by, the body and the auth headers."""

    method: str
    endpoint: str
    body: bytes
    headers: dict[str, str]


class SyncApp:
    """The WSGI application that serves one replica over the sync protocol.

    A request holds the replica's own lock (`Replica.lock`) while it uses the replica; ``lock``,
    when given, is taken first and held too (it is not needed: the replica locks itself; it
    lets old callers keep serializing their own work with the server). ``lock_timeout`` is how
    long a request waits for the locks before a 503. ``page_bytes`` caps the change bytes in
    one fetch answer (at most the protocol's `PAGE_BYTES`; a lower value makes clients page
    sooner).

    ``auth`` says which requests are answered (`AuthMode`; default ``members`` for a closed
    space, ``open`` for an open one) and ``window`` how many seconds a signed request's time may
    be off the server's clock. The server's id, which signed requests name, is the served
    store's id (`server_id`).
    """

    def __init__(
        self,
        replica: Replica,
        *,
        lock: Lock | None = None,
        lock_timeout: float = DEFAULT_TIMEOUT,
        page_bytes: int = PAGE_BYTES,
        auth: AuthMode | str | None = None,
        window: float = DEFAULT_WINDOW,
    ) -> None:
        if not isinstance(replica, Replica):
            raise SyncError("replica", "replica-type", f"expected a Replica, got {replica!r}")
        check_seconds("lock_timeout", lock_timeout)
        if type(page_bytes) is not int or not MAX_CHANGE_FRAME_BYTES <= page_bytes <= PAGE_BYTES:
            raise SyncError(
                "page_bytes",
                "range",
                f"expected an int in [{MAX_CHANGE_FRAME_BYTES}, {PAGE_BYTES}]",
            )
        self.auth = _auth_mode(auth, replica)
        check_seconds("window", window)
        self.replica = replica
        self.space = replica.space
        #: The id signed requests must name: the served store's id.
        self.server_id = _server_id(replica)
        self.gate = RequestGate(
            space=replica.space, server=self.server_id, window=window, auth=self.auth
        )
        #: The locks a request holds, in the order taken: the caller's (if any), the replica's.
        self.locks: tuple[Lock, ...] = (replica.lock,) if lock is None else (lock, replica.lock)
        self.lock_timeout = float(lock_timeout)
        self.page_bytes = page_bytes
        # (accepted-change count it was built at, reconciler, ids it has learned since)
        self._reconciler: tuple[int, Reconciler, int] | None = None
        self._routes: dict[str, tuple[str, Callable[[_Request], tuple[int, str, bytes]]]] = {
            "/v1/reconcile": ("POST", self._reconcile),
            "/v1/fetch": ("POST", self._fetch),
            "/v1/push": ("POST", self._push),
            "/v1/info": ("GET", self._info),
        }

    # --- WSGI ------------------------------------------------------------------------------------

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        try:
            status, content_type, body = self._dispatch(environ)
        except _Reject as r:
            status, content_type, body = r.status, "application/json", _error_body(r)
        except Exception:  # the server stays up whatever a handler hits; the fault is logged
            log.exception(
                "sync request failed: %s %s", environ.get("REQUEST_METHOD"), _path(environ)
            )
            fault = _Reject(500, "server", "internal", "the server failed; see its log")
            status, content_type, body = 500, "application/json", _error_body(fault)
        headers = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            ("StateFuse-Server", self.server_id.hex()),
        ]
        headers += self._proof(environ, status, body)
        creator = self.replica.creator  # who the open space's creator is (`sync.creator`)
        if creator is not None:
            headers.append(("StateFuse-Creator", creator.hex()))
        if status == 401:
            headers.append(("WWW-Authenticate", f'StateFuse server="{self.server_id.hex()}"'))
        if status == 405:
            headers.append(("Allow", self._routes[_path(environ)][0]))
        start_response(f"{status} {_REASONS[status]}", headers)
        return [body]

    def _proof(self, environ: dict[str, Any], status: int, body: bytes) -> list[tuple[str, str]]:
        """The headers that prove this server's author key made this answer, for the request's
        challenge (`sync.auth.sign_response`); none when the replica has no key."""
        key = self.replica.key
        if key is None:
            return []
        asked = {
            name.lower(): str(environ[env])
            for name in ("StateFuse-Nonce", CHALLENGE_HEADER)
            if (env := "HTTP_" + name.upper().replace("-", "_")) in environ
        }
        proof = sign_response(
            key,
            space=self.space,
            server=self.server_id,
            endpoint=_path(environ),
            status=status,
            challenge=request_challenge(asked),
            body=body,
        )
        return list(proof.items())

    def _dispatch(self, environ: dict[str, Any]) -> tuple[int, str, bytes]:
        path = _path(environ)
        route = self._routes.get(path)
        if route is None:
            raise _Reject(404, "path", "endpoint", f"no endpoint {path!r} (protocol v1)")
        method, handler = route
        if environ.get("REQUEST_METHOD") != method:
            raise _Reject(405, "method", "method", f"{path} takes {method}")
        body = _read_body(environ) if method == "POST" else b""
        headers = {
            name.lower(): str(environ[key])
            for name in HEADERS
            if (key := "HTTP_" + name.upper().replace("-", "_")) in environ
        }
        return handler(_Request(method, path, body, headers))

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the locks, or answer 503 when they stay busy past ``lock_timeout``."""
        deadline = time.monotonic() + self.lock_timeout
        with contextlib.ExitStack() as held:
            for lock in self.locks:
                if not lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    raise _Reject(
                        503, "replica", "busy", "the replica stayed busy; try again later"
                    )
                held.callback(lock.release)
            yield

    # --- endpoints -------------------------------------------------------------------------------

    def _signer(self, request: _Request) -> bytes | None:
        """The author who signed ``request`` (None: unsigned), once this server's `auth` lets
        the request through and its nonce is spent; else 401, 403 or 503 (see `sync.auth`)."""
        try:
            signed = self.gate.authenticate(
                request.headers, method=request.method, endpoint=request.endpoint, body=request.body
            )
        except SyncError as e:
            log.info("refused %s: %s", request.endpoint, e.rule)
            raise _Reject(401, e.field, e.rule, e.message) from None
        if signed is None:
            if self.auth is not AuthMode.OPEN:
                log.info("refused %s: signature-required", request.endpoint)
                raise _Reject(
                    401,
                    "StateFuse-Signature",
                    "signature-required",
                    f"this server answers only signed requests (auth {self.auth.value})",
                )
            return None
        if self.auth is AuthMode.MEMBERS and not self._member(signed.author):
            log.info("refused %s: not-a-member %s", request.endpoint, signed.author.hex()[:16])
            raise _Reject(
                403,
                "StateFuse-Author",
                "not-a-member",
                f"author {signed.author.hex()[:16]}… is not the root or an admitted author of"
                f" space {self.space!r}",
            )
        try:
            self.gate.consume(signed)
        except SyncError as e:
            log.info("refused %s: %s", request.endpoint, e.rule)
            raise _Reject(_GATE_STATUS.get(e.rule, 401), e.field, e.rule, e.message) from None
        return signed.author

    def _member(self, author: bytes) -> bool:
        """Whether ``author`` is the root, or admitted and not revoked, as the replica's trust
        says now."""
        with self._locked():
            trust = self.replica.trust()
        return trust.is_member(author)

    def _request(self, request: _Request, *, max_frames: int, max_frame_bytes: int) -> list[bytes]:
        """The frames after the space frame, once the framing, the space and the signer are
        checked."""
        try:
            frames = decode_frames(
                request.body, max_frames=max_frames, max_frame_bytes=max_frame_bytes
            )
            if not frames:
                raise SyncError("body", "space-frame", "the first frame must name the space")
            if len(frames[0]) > MAX_SPACE_BYTES:
                raise SyncError("space", "space-name", "the space name is too long")
            space = decode_space(frames[0])
        except SyncError as e:
            raise _Reject(400, e.field, e.rule, e.message) from None
        if space != self.space:
            raise _Reject(
                409, "space", "same-space", f"this server holds space {self.space!r}, not {space!r}"
            )
        self._signer(request)
        return frames[1:]

    def _reconcile(self, body: _Request) -> tuple[int, str, bytes]:
        frames = self._request(body, max_frames=2, max_frame_bytes=MAX_MESSAGE_BYTES)
        if len(frames) != 1:
            raise _Reject(400, "body", "frame-count", "a reconcile request carries one message")
        with self._locked():
            count = len(self.replica)
            if self._reconciler is None or self._reconciler[0] != count:
                self._reconciler = (count, self.replica.reconciler(), 0)
            _, reconciler, learned = self._reconciler
            try:
                reply = reconciler.respond(frames[0])
            except ReconcileError as e:
                status = 409 if e.rule in _CONTRADICTIONS else 400
                raise _Reject(status, e.field, e.rule, e.message) from None
            learned += len(reply.fetch) + len(reply.send)
            self._reconciler = None if learned > _RELEARN_LIMIT else (count, reconciler, learned)
        answer = [] if reply.message is None else [reply.message]
        return 200, CONTENT_TYPE, encode_frames(answer)

    def _fetch(self, body: _Request) -> tuple[int, str, bytes]:
        ids = self._request(body, max_frames=1 + MAX_PAGE_CHANGES, max_frame_bytes=MAX_SPACE_BYTES)
        for k, cid in enumerate(ids):
            if len(cid) != ID_BYTES:
                raise _Reject(400, f"ids[{k}]", "id-length", f"an id is {ID_BYTES} bytes")
        out: list[bytes] = []
        used = 0
        with self._locked():
            for cid in ids:
                found = self.replica.change_bytes((cid,))
                data = found[0] if found else b""
                used += 4 + len(data)
                if out and used > self.page_bytes:
                    break
                out.append(data)
        return 200, CONTENT_TYPE, encode_frames(out)

    def _push(self, body: _Request) -> tuple[int, str, bytes]:
        changes = self._request(
            body, max_frames=1 + MAX_PAGE_CHANGES, max_frame_bytes=MAX_CHANGE_FRAME_BYTES
        )
        with self._locked():
            try:
                report = self.replica.receive(changes)
            except ReadOnlyError as exc:  # a damaged or read-only store still serves reads
                message = exc.message if self.replica.damage is not None else _READ_ONLY
                raise _Reject(503, exc.field, exc.rule, message) from None
            except AreaFullError as exc:
                raise _Reject(503, "changes", "area-full", str(exc)) from None
            except RegistryError as exc:  # a declaration this process has no code for
                raise _Reject(422, exc.field, exc.rule, exc.message) from None
        counts = report.to_json()
        if report.quarantined:
            raise _Reject(
                422,
                "changes",
                "quarantined",
                f"{report.quarantined} of {len(changes)} changes were refused and quarantined",
                report=counts,
            )
        return 200, "application/json", _json(counts)

    def _info(self, request: _Request) -> tuple[int, str, bytes]:
        """Anyone may ask (it names the space, the server and its auth mode); the change count
        only a request that may also read changes."""
        document: dict[str, object] = {
            "protocol": PROTOCOL_VERSION,
            "space": self.space,
            "server": self.server_id.hex(),
            "auth": self.auth.value,
            "creator": None if self.replica.creator is None else self.replica.creator.hex(),
            "limits": {**limits(), "page_bytes": self.page_bytes},
        }
        try:
            self._signer(request)
        except _Reject as r:
            if r.status in (429, 503):
                raise
        else:
            with self._locked():
                document["changes"] = len(self.replica)
        return 200, "application/json", _json(document)


def _auth_mode(auth: object, replica: Replica) -> AuthMode:
    if auth is None:
        return AuthMode.MEMBERS if replica.mode is TrustMode.CLOSED else AuthMode.OPEN
    try:
        return AuthMode(auth)
    except ValueError:
        raise SyncError(
            "auth", "auth-mode", f"auth is 'open', 'signed' or 'members', not {auth!r}"
        ) from None


def _server_id(replica: Replica) -> bytes:
    info = replica.store.info()
    store_id = info.store_id if info is not None else b""
    return store_id or blake3(b"statefuse/server-id:" + replica.author).digest(length=16)


def _path(environ: dict[str, Any]) -> str:
    path = environ.get("PATH_INFO") or "/"
    return str(path)


def _read_body(environ: dict[str, Any]) -> bytes:
    """The request body, refused with 413 before it is read when it is longer than allowed."""
    stream = environ["wsgi.input"]
    declared = environ.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            length = int(declared)
        except ValueError:
            raise _Reject(400, "Content-Length", "content-length", "not a number") from None
        if length < 0:
            raise _Reject(400, "Content-Length", "content-length", "negative length")
        if length > MAX_BODY_BYTES:
            raise _Reject(413, "body", "max-body-bytes", f"bodies are at most {MAX_BODY_BYTES} B")
        data = stream.read(length)
        if len(data) != length:
            raise _Reject(400, "body", "truncated", "the body is shorter than its Content-Length")
        return bytes(data)
    data = stream.read(MAX_BODY_BYTES + 1)
    if len(data) > MAX_BODY_BYTES:
        raise _Reject(413, "body", "max-body-bytes", f"bodies are at most {MAX_BODY_BYTES} B")
    return bytes(data)


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _error_body(r: _Reject) -> bytes:
    return _json({**r.extra, "error": r.message, "field": r.field, "rule": r.rule})


class _State(Enum):
    BOUND = "bound"
    RUNNING = "running"
    CLOSED = "closed"


class _Phase(Enum):
    """What a connection is waiting for from its client."""

    HEADERS = "headers"
    BODY = "body"


class _Channel(HTTPChannel):
    """A waitress connection that holds one of its client's slots (`ClientSlots`) and a fixed
    deadline for the request it is reading (`ServerLimits`): the headers within
    ``header_timeout`` of the accept (the first request) or of the request's first byte, then
    the body within `ServerLimits.body_seconds`. Bytes that trickle in do not move it."""

    server: _Server

    def __init__(self, server: _Server, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
        client = str(addr[0]) if isinstance(addr, tuple) and addr else "?"
        self._slot: str | None = None
        try:
            super().__init__(server, sock, addr, adj, map=map)
        except BaseException:
            server.slots.give(client)
            raise
        self._slot = client
        #: When the request being read must be complete (None: none is being read).
        self.deadline: float | None = time.monotonic() + server.limits.header_timeout
        self.phase = _Phase.HEADERS
        self._partial: object | None = None
        self._first = True

    def received(self, data: bytes) -> bool:
        done = bool(super().received(data))
        request = self.request
        now = time.monotonic()
        if request is None:  # nothing half-read: idle (or served); the idle timeout applies
            self._partial, self.deadline, self._first = None, None, False
            return done
        limits = self.server.limits
        if request is not self._partial:  # a new request began in these bytes
            self._partial, self.phase = request, _Phase.HEADERS
            if not self._first:  # the first one's deadline runs from the accept
                self.deadline = now + limits.header_timeout
            self._first = False
        if request.headers_finished and self.phase is _Phase.HEADERS:
            self.phase = _Phase.BODY
            length = None if request.chunked else int(request.content_length)
            self.deadline = now + limits.body_seconds(length)
        return done

    def overdue(self, now: float) -> bool:
        """Whether a request is half-read past its deadline (a running one never is)."""
        return (
            self.deadline is not None
            and now > self.deadline
            and not self.requests
            and not self.will_close
        )

    def del_channel(self, map: Any = None) -> None:
        super().del_channel(map)
        slot, self._slot = self._slot, None
        if slot is not None:
            self.server.slots.give(slot)


class _Server(TcpWSGIServer):
    """waitress's TCP server with `ServerLimits`: a connection over its client's limit (or the
    total) is answered 503 and closed at accept; a half-read request past its deadline is
    closed by the maintenance pass, which runs every second."""

    channel_class = _Channel

    def __init__(self, application: Any, *, limits: ServerLimits, **kw: Any) -> None:
        self.limits = limits
        self.slots = ClientSlots(limits)
        super().__init__(application, **kw)

    def handle_accept(self) -> None:
        try:
            pair = self.accept()
        except OSError:
            return
        if pair is None:
            return
        conn, addr = pair
        client = str(addr[0])
        why = self.slots.take(client)
        if why is not None:
            if self.slots.report(client):
                log.warning("refused connections from %s: %s", client, why)
            refuse(conn, refusal(why))
            return
        try:
            self.set_socket_options(conn)
            socket_map = cast(Any, self)._map  # wasyncore's; waitress's stubs omit it
            self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=socket_map)
        except OSError:  # the client is already gone; the channel gave its slot back
            conn.close()

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # type: ignore[arg-type]  # time.time(); stubs say int
        clock = time.monotonic()
        channels = cast(dict[int, Any], self.active_channels)  # stubs: a channel, wrongly
        for channel in list(channels.values()):
            if isinstance(channel, _Channel) and channel.overdue(clock):
                channel.will_close = True
                if self.slots.report(channel.addr[0]):
                    log.warning(
                        "closed a connection from %s: its request %s did not arrive in time",
                        channel.addr[0],
                        channel.phase.value,
                    )


class SyncServer:
    """A bound HTTP server (waitress) around a WSGI app, usually a `SyncApp` made by `serve`.

    Run it with `serve_forever` (blocks until `close` from another thread, or Ctrl-C), or in a
    background thread with `start` or ``with server:``. `close` shuts down cleanly: it stops
    accepting, lets running requests finish and their answers go out (up to ``timeout``
    seconds), closes every connection and releases the port. ``timeout`` is also how long an
    idle kept-alive connection may stay open between requests.

    ``limits`` (`ServerLimits`, `sync.guard`) bounds what one client may hold: connections per
    remote address and in all (one more is answered 503 and closed), and the time a request's
    headers and body may take to arrive (a connection past it is closed, however slowly bytes
    trickle in). waitress alone cannot: its connection limit is global (one client reaching it
    locks every other out) and its only timer is an idle one that every byte restarts; so the
    server is waitress's, with its accept and maintenance steps extended (`_Server`,
    `_Channel`). A server in another process (uvicorn, hypercorn) was not worth a dependency:
    none bounds connections per client either.
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = 4,
        timeout: float = DEFAULT_TIMEOUT,
        limits: ServerLimits | None = None,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise SyncError("host", "host", "expected a host name or address")
        if type(port) is not int or not 0 <= port <= 65535:
            raise SyncError("port", "range", "expected an int in [0, 65535] (0: any free port)")
        if type(threads) is not int or not 1 <= threads <= 256:
            raise SyncError("threads", "range", "expected an int in [1, 256]")
        check_seconds("timeout", timeout)
        self.limits = _limits(limits)
        self.app = app
        self.timeout = float(timeout)
        self._map: dict[Any, Any] = {}
        # Our own wake-up pipe in the loop's socket map: `close` pulls it so the loop thread,
        # which owns the sockets, does the closing at once.
        self._wake = trigger.trigger(self._map)
        try:
            adj = Adjustments(
                host=host,
                port=port,
                threads=threads,
                channel_timeout=_whole_seconds(timeout),
                # A backstop only: `ServerLimits` refuses first (the map also holds the
                # listener and two wake-up pipes).
                connection_limit=self.limits.max_connections + 8,
                cleanup_interval=1,  # the deadline checks run every second
                max_request_body_size=MAX_BODY_BYTES + 1,  # waitress refuses length >= this
                max_request_header_size=64 << 10,
                asyncore_use_poll=True,
                expose_tracebacks=False,
                ident="statefuse",
            )
            if len(adj.listen) != 1:  # one host name resolved to several sockets
                raise SyncError("host", "one-address", f"{host!r} resolves to several addresses")
            dispatcher = ThreadedTaskDispatcher()
            dispatcher.set_thread_count(threads)
            server = _Server(app, limits=self.limits, map=self._map, dispatcher=dispatcher, adj=adj)
        except OSError as e:
            wasyncore.close_all(self._map, ignore_all=True)
            raise SyncError(
                "port", "bind", f"cannot listen on {host}:{port}: {e.strerror or e}"
            ) from None
        except SyncError:
            wasyncore.close_all(self._map, ignore_all=True)
            raise
        self._server = server
        bound_host, bound_port = server.getsockname()
        self.host = str(bound_host)
        self.port = int(bound_port)
        self._state = _State.BOUND
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        """The base URL clients sync with (``http://host:port``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _begin(self) -> None:
        with self._state_lock:
            if self._state is not _State.BOUND:
                raise SyncError("server", "startable", f"the server is {self._state.value}")
            self._state = _State.RUNNING

    def serve_forever(self) -> None:
        """Serve in this thread until `close` (from another thread) or Ctrl-C; then return.

        Raises SyncError (rule ``startable``) if the server already runs or was closed.
        """
        self._begin()
        self._run()

    def start(self) -> SyncServer:
        """Serve in a background (daemon) thread; returns the server.

        Raises SyncError (rule ``startable``) if the server already runs or was closed.
        """
        self._begin()
        self._thread = threading.Thread(
            target=self._run, name=f"statefuse-sync-{self.port}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        """The socket loop; when `close` asks, it stops listening, then drains the connections."""
        sockets = self._map
        deadline = math.inf
        try:
            while sockets:
                wasyncore.loop(timeout=1.0, map=sockets, use_poll=True, count=1)
                if not self._stopping.is_set():
                    continue
                if self._server.accepting:
                    self._server.accepting = False
                    wasyncore.dispatcher.close(self._server)
                if not self._draining.is_set():
                    continue
                if deadline == math.inf:
                    deadline = time.monotonic() + self.timeout
                    for channel in list(sockets.values()):
                        if isinstance(channel, HTTPChannel):
                            channel.close_when_flushed = True
                drained = not any(isinstance(c, HTTPChannel) for c in sockets.values())
                if drained or time.monotonic() > deadline:
                    wasyncore.close_all(sockets, ignore_all=True)
        except KeyboardInterrupt:
            pass  # Ctrl-C in serve_forever: shut down below
        finally:
            self._server.task_dispatcher.shutdown(timeout=_whole_seconds(self.timeout))
            wasyncore.close_all(sockets, ignore_all=True)
            self._stopped.set()

    def close(self) -> None:
        """Stop serving and release the port. Idempotent; call it from any thread except the
        server's own (not from a request handler)."""
        with self._state_lock:
            state, self._state = self._state, _State.CLOSED
        if state is _State.BOUND:
            self._server.task_dispatcher.shutdown(timeout=_whole_seconds(self.timeout))
            wasyncore.close_all(self._map, ignore_all=True)
            return
        if state is _State.CLOSED or self._stopped.is_set():
            return
        self._stopping.set()
        self._wake_loop()
        # Running requests finish here, while the loop still sends their answers.
        self._server.task_dispatcher.shutdown(timeout=_whole_seconds(self.timeout))
        self._draining.set()
        self._wake_loop()
        self._stopped.wait(self.timeout + 2)
        if self._thread is not None:
            self._thread.join(self.timeout + 2)

    def _wake_loop(self) -> None:
        # The loop may have closed the pipe already (it drained on its own): nothing to wake.
        with contextlib.suppress(OSError):
            self._wake.pull_trigger()

    def __enter__(self) -> SyncServer:
        if self._state is _State.BOUND:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SyncServer({self.url}, {self._state.value})"


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def _limits(limits: object) -> ServerLimits:
    if limits is None:
        return ServerLimits()
    if not isinstance(limits, ServerLimits):
        raise SyncError("limits", "limits-type", f"expected ServerLimits, got {limits!r}")
    return limits


def serve(
    replica: Replica,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    threads: int = 4,
    timeout: float = DEFAULT_TIMEOUT,
    lock: Lock | None = None,
    auth: AuthMode | str | None = None,
    window: float = DEFAULT_WINDOW,
    tls: tuple[str | Path, str | Path] | None = None,
    limits: ServerLimits | None = None,
) -> SyncServer | TLSSyncServer:
    """A bound, not yet running server for ``replica`` (loopback, an OS-chosen port).

    ``auth`` says who may read and push (`AuthMode`): by default only the root and admitted
    authors in a closed space (``members``), anyone in an open one (``open``: whoever reaches
    the port reads every change, restricted claims included); ``signed`` asks any author key.
    ``window`` is how many seconds a signed request's time may be off this server's clock.
    ``tls=(certfile, keyfile)`` serves HTTPS with that PEM certificate (chain) and key (a
    `TLSSyncServer`); without it, plain HTTP (a `SyncServer`, on waitress): serve beyond
    loopback only with TLS or behind a TLS proxy, since signatures prove who asks but do not
    hide what moves.

    ``timeout`` bounds how long a request waits for the replica and how long an idle connection
    stays open. ``limits`` (`ServerLimits`) bounds the connections one client (remote address)
    may hold and how long a request's headers and body may take to arrive; the defaults hold
    16 connections per client, 512 in all, 10 s for the headers. The replica locks itself
    (`Replica.lock`), so the serving process may go on using it from any thread; ``lock`` is
    optional and, when given, held too by every request (see `SyncApp`). Raises SyncError for a
    bad argument, a certificate or key that does not load (rule ``tls``) or a port that cannot
    be bound.
    """
    check_seconds("timeout", timeout)
    app = SyncApp(replica, lock=lock, lock_timeout=timeout, auth=auth, window=window)
    if tls is not None:
        certfile, keyfile = tls
        return TLSSyncServer(
            app,
            certfile=certfile,
            keyfile=keyfile,
            host=host,
            port=port,
            timeout=timeout,
            limits=limits,
        )
    return SyncServer(app, host=host, port=port, threads=threads, timeout=timeout, limits=limits)
