"""Serving the sync app over HTTPS: `TLSSyncServer`, the TLS twin of `sync.server.SyncServer`.

waitress has no TLS, and wrapping its listening socket does not work: its event loop reads
non-blocking sockets whose TLS layer may hold decrypted bytes the loop never sees, and a
handshake done on accept would stall every connection behind one slow client. So HTTPS is
served by the standard library (`http.server` with `wsgiref`'s WSGI handler), one thread per
connection: the TLS handshake runs in that thread, with the connection's timeout, never in the
accepting loop. It answers one request per connection (HTTP/1.0); the client reconnects.

Invariants: a connection that fails its handshake, stalls or breaks costs one thread for at most
``timeout`` seconds and is logged at debug level without its bytes; the app (a `SyncApp`) bounds
bodies itself, by their Content-Length, before reading them; nothing that reaches the log holds a
header value (signatures stay out of it).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from statefuse.sync.protocol import SyncError, check_seconds

__all__ = ["TLSSyncServer", "server_context"]

log = logging.getLogger("statefuse.sync.server")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def server_context(
    certfile: str | os.PathLike[str], keyfile: str | os.PathLike[str]
) -> ssl.SSLContext:
    """A server TLS context (TLS 1.2 or later) with the PEM certificate chain and key.

    Raises SyncError (field ``tls``, rule ``tls``) naming the file that does not load, never
    echoing its content.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
    except FileNotFoundError as e:
        raise SyncError("tls", "tls", f"no such certificate or key file: {e.filename}") from None
    except (ssl.SSLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or type(e).__name__
        raise SyncError(
            "tls", "tls", f"cannot load the certificate {certfile} with key {keyfile}: {reason}"
        ) from None
    return context


class _Handler(WSGIRequestHandler):
    server: _Server

    def setup(self) -> None:
        self.request.settimeout(self.server.timeout_seconds)
        super().setup()

    def handle(self) -> None:
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError) as e:
            log.debug("TLS handshake with %s failed: %s", self.client_address[0], type(e).__name__)
            return
        super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.client_address[0], format % args)

    def get_stderr(self) -> Any:
        return _LogStream()


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
        self, address: tuple[str, int], context: ssl.SSLContext, timeout: float, app: WSGIApp
    ) -> None:
        self.context = context
        self.timeout_seconds = timeout
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self.set_app(app)

    def get_request(self) -> tuple[Any, Any]:
        conn, address = self.socket.accept()
        conn.settimeout(self.timeout_seconds)
        wrapped = self.context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)


class TLSSyncServer:
    """A bound HTTPS server around a WSGI app, usually a `SyncApp` made by `serve` with
    ``tls=``. The same life cycle as `SyncServer`: `serve_forever`, `start` or ``with``, then
    `close` (stops accepting, waits up to ``timeout`` for running requests, frees the port).

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
    ) -> None:
        if not isinstance(host, str) or not host:
            raise SyncError("host", "host", "expected a host name or address")
        if type(port) is not int or not 0 <= port <= 65535:
            raise SyncError("port", "range", "expected an int in [0, 65535] (0: any free port)")
        self.timeout = check_seconds("timeout", timeout)
        context = server_context(Path(certfile), Path(keyfile))
        self.app = app
        try:
            self._server = _Server((host, port), context, self.timeout, app)
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
