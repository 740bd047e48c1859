"""Serving the sync app over HTTPS: `TLSSyncServer`, the TLS twin of `sync.server.SyncServer`.

waitress has no TLS, and wrapping its listening socket does not work: its event loop reads
non-blocking sockets whose TLS layer may hold decrypted bytes the loop never sees, and a
handshake done on accept would stall every connection behind one slow client. So HTTPS is
served by the standard library (`http.server` with `wsgiref`'s WSGI handler), one thread per
connection: the TLS handshake runs in that thread, with the connection's timeout, never in the
accepting loop. It answers one request per connection (HTTP/1.0); the client reconnects.

The same `ServerLimits` (`sync.guard`) as the plain server: a connection over its client's
limit, or the total, is closed at accept, before any handshake (so before it costs a thread);
the handshake and the request's headers must be done within ``header_timeout`` of the accept,
the body within `ServerLimits.body_seconds` after them. The accepting loop checks those fixed
deadlines several times a second (`socketserver`'s ``service_actions``) and shuts down the
socket of a connection past one, which ends its thread's blocked read.

Invariants: a connection that fails its handshake, stalls or breaks costs one thread for at most
its deadline (or ``timeout`` while the app works) and is logged at debug level as one line,
without its bytes and never as a traceback (a client hanging up is not a server fault); the app
(a `SyncApp`) bounds bodies itself, by their Content-Length, before reading them; nothing that
reaches the log holds a header value (signatures stay out of it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any, cast
from wsgiref.handlers import BaseHandler
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer

from statefuse.sync.guard import ClientSlots, ServerLimits, refuse
from statefuse.sync.protocol import SyncError, check_seconds

__all__ = ["TLSSyncServer", "server_context"]

log = logging.getLogger("statefuse.sync.server")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def server_context(
    certfile: str | os.PathLike[str], keyfile: str | os.PathLike[str]
) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) with the PEM certificate chain and key.

    Raises SyncError (rule ``tls``) naming the file that does not load, never echoing its
    content: field ``certfile`` or ``keyfile`` for a file that is not there, ``tls`` for a pair
    that does not load.
    """
    for field, path, what in (("certfile", certfile, "certificate"), ("keyfile", keyfile, "key")):
        if not os.path.isfile(path):
            raise SyncError(field, "tls", f"no such {what} file: {os.fspath(path)}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
    except FileNotFoundError as e:  # removed since the check above
        name = e.filename if e.filename is not None else f"{certfile} or {keyfile}"
        raise SyncError("tls", "tls", f"no such certificate or key file: {name}") from None
    except (ssl.SSLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or type(e).__name__
        raise SyncError(
            "tls", "tls", f"cannot load the certificate {certfile} with key {keyfile}: {reason}"
        ) from None
    return context


class _Handler(WSGIRequestHandler):
    """One connection: the handshake, one request's line and headers, then the app, with the
    body read through `_Body` (which tells the server when the body is in)."""

    server: _Server

    def setup(self) -> None:
        self.request.settimeout(self.server.timeout_seconds)
        super().setup()

    def handle(self) -> None:
        try:
            self.request.do_handshake()
        except OSError as e:  # ssl.SSLError is an OSError
            self._gone("the TLS handshake", e)
            return
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline:
                return  # hung up before sending a request
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(414)
                return
            if not self.parse_request():  # an error answer was sent
                return
        except OSError as e:
            self._gone("the request headers", e)
            return
        length = _content_length(self.headers.get("Content-Length"), self.command)
        body = _Body(self.rfile, length, lambda: self.server.settle(self.request))
        if length == 0:
            self.server.settle(self.request)
        else:
            self.server.extend(self.request, self.server.limits.body_seconds(length))
        app = self.server.get_app()
        assert app is not None  # set when the server was made
        handler = _Answer(
            body, cast(Any, self.wfile), self.get_stderr(), self.get_environ(), multithread=False
        )
        handler.request_handler = self
        handler.run(app)

    def _gone(self, during: str, error: BaseException) -> None:
        log.debug("%s ended during %s: %s", self.client_address[0], during, type(error).__name__)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.client_address[0], format % args)

    def get_stderr(self) -> Any:
        return _LogStream()


def _content_length(value: str | None, method: str) -> int | None:
    """The body length a request announces: 0 for none on a GET, None when unknown."""
    if value is None:
        return 0 if method in ("GET", "HEAD") else None
    try:
        length = int(value)
    except ValueError:
        return None
    return length if length >= 0 else None


class _Body:
    """The request body the app reads (``wsgi.input``): at most the announced length; a
    connection that breaks reads as the end of the body (the app then refuses it as
    truncated) instead of raising into the app; ``done`` is called once the body is in."""

    def __init__(self, raw: Any, length: int | None, done: Callable[[], None]) -> None:
        self._raw = raw
        self._left = length
        self._done: Callable[[], None] | None = done

    def read(self, size: int = -1) -> bytes:
        return self._take(self._raw.read, size)

    def readline(self, size: int = -1) -> bytes:
        return self._take(self._raw.readline, size)

    def readlines(self, hint: int = -1) -> list[bytes]:
        return list(iter(self.readline, b""))

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")

    def _take(self, reader: Callable[[int], bytes], size: int) -> bytes:
        if self._left is not None:
            size = self._left if size < 0 else min(size, self._left)
        try:
            data = bytes(reader(size)) if size != 0 else b""
        except OSError as e:
            log.debug("the connection broke while its body was read: %s", type(e).__name__)
            data = b""
            self._left = 0
        if self._left is not None:
            self._left = max(0, self._left - len(data))
        if (not data or self._left == 0) and self._done is not None:
            done, self._done = self._done, None
            done()
        return data


class _Answer(ServerHandler):
    """wsgiref's handler, with a client that hangs up while it is answered logged as one
    debug line rather than a traceback."""

    request_handler: WSGIRequestHandler

    def handle_error(self) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # ssl.SSLEOFError and kin: the client is gone
            handler = getattr(self, "request_handler", None)
            client = handler.client_address[0] if handler is not None else "?"
            log.debug("%s hung up before its answer was sent: %s", client, type(error).__name__)
            BaseHandler.close(self)
            return
        super().handle_error()


class _LogStream:
    """Where wsgiref writes its own tracebacks: our log."""

    def write(self, text: str) -> None:
        if text.strip():
            log.error("%s", text.rstrip())

    def flush(self) -> None:
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    # `close` waits for running requests (each bounded by the timeout) before returning.
    block_on_close = True

    def __init__(
        self,
        address: tuple[str, int],
        context: ssl.SSLContext,
        timeout: float,
        app: WSGIApp,
        limits: ServerLimits,
    ) -> None:
        self.context = context
        self.timeout_seconds = timeout
        self.limits = limits
        self.slots = ClientSlots(limits)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        # socket id -> [socket, client address, deadline (None: the app has the request)]
        self._held: dict[int, list[Any]] = {}
        self._held_lock = threading.Lock()
        self._next_reap = 0.0
        super().__init__(address, _Handler)
        self.set_app(app)

    def get_request(self) -> tuple[Any, Any]:
        conn, address = self.socket.accept()
        client = str(address[0])
        why = self.slots.take(client)
        if why is not None:
            if self.slots.report(client):
                log.warning("refused connections from %s: %s", client, why)
            refuse(conn, None)  # no answer: that would need a handshake, a thread's work
            raise ConnectionRefusedError  # the accepting loop skips it
        try:
            conn.settimeout(self.timeout_seconds)
            wrapped = self.context.wrap_socket(
                conn, server_side=True, do_handshake_on_connect=False
            )
        except OSError:
            self.slots.give(client)
            conn.close()
            raise
        deadline = time.monotonic() + self.limits.header_timeout
        with self._held_lock:
            self._held[id(wrapped)] = [wrapped, client, deadline]
        return wrapped, address

    def extend(self, request: Any, seconds: float) -> None:
        """The request's headers are in: its body has ``seconds`` from now."""
        with self._held_lock:
            held = self._held.get(id(request))
            if held is not None:
                held[2] = time.monotonic() + seconds

    def settle(self, request: Any) -> None:
        """The request is read whole: no deadline while the app answers it."""
        with self._held_lock:
            held = self._held.get(id(request))
            if held is not None:
                held[2] = None

    def service_actions(self) -> None:
        """Between accepts (at least every poll interval): shut down the connections whose
        handshake, headers or body are past their deadline."""
        now = time.monotonic()
        if now < self._next_reap:
            return
        self._next_reap = now + self.limits.tick()
        with self._held_lock:
            late = [h for h in self._held.values() if h[2] is not None and now > h[2]]
            for held in late:
                held[2] = None
        for sock, client, _ in late:
            if self.slots.report(client):
                log.warning(
                    "closed a connection from %s: its request did not arrive in time", client
                )
            with contextlib.suppress(OSError):  # the raw socket: its TLS layer is the thread's
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def server_close(self) -> None:
        """Stop listening, end the connections still sending their request (they would hold
        the close up to their deadline), then wait for the requests being answered."""
        self.socket.close()
        with self._held_lock:
            reading = [h[0] for h in self._held.values() if h[2] is not None]
        for sock in reading:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
        super().server_close()

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)
        finally:
            with self._held_lock:
                held = self._held.pop(id(request), None)
            if held is not None:
                self.slots.give(held[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)


class TLSSyncServer:
    """A bound HTTPS server around a WSGI app, usually a `SyncApp` made by `serve` with
    ``tls=``. The same life cycle as `SyncServer`: `serve_forever`, `start` or ``with``, then
    `close` (stops accepting, waits up to ``timeout`` for running requests, frees the port).

    ``limits`` (`ServerLimits`) bounds the connections per client and the time a handshake,
    headers and body may take, as for `SyncServer`.

    Raises SyncError for a bad argument, a certificate or key that does not load (rule ``tls``)
    or a port that cannot be bound (rule ``bind``).
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        certfile: str | os.PathLike[str],
        keyfile: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        timeout: float = 30.0,
        limits: ServerLimits | None = None,
    ) -> None:
        if not isinstance(host, str) or not host:
            raise SyncError("host", "host", "expected a host name or address")
        if type(port) is not int or not 0 <= port <= 65535:
            raise SyncError("port", "range", "expected an int in [0, 65535] (0: any free port)")
        self.timeout = check_seconds("timeout", timeout)
        if limits is not None and not isinstance(limits, ServerLimits):
            raise SyncError("limits", "limits-type", f"expected ServerLimits, got {limits!r}")
        self.limits = limits if limits is not None else ServerLimits()
        context = server_context(Path(certfile), Path(keyfile))
        self.app = app
        try:
            self._server = _Server((host, port), context, self.timeout, app, self.limits)
        except OSError as e:
            raise SyncError(
                "port", "bind", f"cannot listen on {host}:{port}: {e.strerror or e}"
            ) from None
        bound_host, bound_port = self._server.server_address[:2]
        self.host = str(bound_host)
        self.port = int(bound_port)
        self._lock = threading.Lock()
        self._state = "bound"
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients sync with (``https://host:port``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def _begin(self) -> None:
        with self._lock:
            if self._state != "bound":
                raise SyncError("server", "startable", f"the server is {self._state}")
            self._state = "running"

    def serve_forever(self) -> None:
        """Serve in this thread until `close` (from another thread) or Ctrl-C; then return."""
        self._begin()
        try:
            self._server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass  # Ctrl-C: shut down as `close` does
        finally:
            self._server.server_close()

    def start(self) -> TLSSyncServer:
        """Serve in a background (daemon) thread; returns the server."""
        self._begin()
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"statefuse-sync-tls-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        with self._lock:
            state, self._state = self._state, "closed"
        if state == "running":
            self._server.shutdown()
        if state != "closed":
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(self.timeout + 2)

    def __enter__(self) -> TLSSyncServer:
        if self._state == "bound":
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
        return f"TLSSyncServer({self.url}, {self._state})"
