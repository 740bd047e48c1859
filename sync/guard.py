"""What one client may hold of a sync server: connections, and time to send a request.

A server that waits for a client is a resource that client can spend. Without bounds, one
client that opens a hundred connections and sends a header byte every few seconds blocks every
honest peer (waitress stops accepting at its connection limit; its idle timer restarts on every
byte). `ServerLimits` says what a server grants, and both servers (`sync.server.SyncServer` on
waitress, `sync.tls.TLSSyncServer`) enforce it the same way:

- **Connections per client.** At most ``max_connections_per_client`` open connections from one
  remote address, ``max_connections`` in all. A connection over either limit is closed at once
  (plain HTTP answers ``503`` rule ``too-many-connections`` first); the connections already
  open, and every other client, are not affected.
- **Header deadline.** A request's line and headers (and, with TLS, the handshake before them)
  must arrive within ``header_timeout`` seconds of the connection being accepted, or, on a
  kept-alive connection, of the request's first byte. The deadline is a fixed time, not an
  idle timer: a trickle of bytes does not move it.
- **Body deadline.** The body must then arrive within ``body_timeout`` seconds or at
  ``min_body_rate`` bytes a second, whichever allows longer (`ServerLimits.body_seconds`), so a
  slow honest link can still push a full page while a trickle is cut off.

A connection past a deadline is closed; a request that is complete is served whatever it took.
Between requests an idle kept-alive connection stays open up to the server's ``timeout``.

Invariant: with these bounds, the connections one address can hold are at most
``max_connections_per_client``, each for at most ``header_timeout`` + the body allowance per
request (+ ``timeout`` idle between requests), so an honest client on another address always
finds a free slot while the server holds fewer than ``max_connections``.
"""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

from statefuse.sync.protocol import MAX_BODY_BYTES, SyncError, check_seconds

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_CLIENT",
    "DEFAULT_MIN_BODY_RATE",
    "ClientSlots",
    "ServerLimits",
]

#: Open connections one remote address may hold.
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 16
#: Open connections in all (well above what a team's peers need; each is a socket, and with
#: TLS a thread).
DEFAULT_MAX_CONNECTIONS = 512
#: Seconds from accept (or a request's first byte) to the end of its headers.
DEFAULT_HEADER_TIMEOUT = 10.0
#: Seconds a body may take, at least, whatever its length.
DEFAULT_BODY_TIMEOUT = 10.0
#: Bytes a second a longer body must arrive at, on average (64 KiB/s: a full 4 MiB page
#: in about 65 s).
DEFAULT_MIN_BODY_RATE = 64 << 10


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """The bounds a sync server enforces per connection and per client (module docstring)."""

    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    min_body_rate: int = DEFAULT_MIN_BODY_RATE

    def __post_init__(self) -> None:
        for name in ("max_connections_per_client", "max_connections"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= 65_536:
                raise SyncError(name, "range", f"{name} is an int in [1, 65536], not {value!r}")
        if self.max_connections_per_client > self.max_connections:
            raise SyncError(
                "max_connections_per_client",
                "range",
                "max_connections_per_client cannot exceed max_connections"
                f" ({self.max_connections})",
            )
        check_seconds("header_timeout", self.header_timeout)
        check_seconds("body_timeout", self.body_timeout)
        rate = self.min_body_rate
        if type(rate) is not int or rate < 1:
            raise SyncError("min_body_rate", "range", f"min_body_rate is an int >= 1, not {rate!r}")

    def body_seconds(self, length: int | None) -> float:
        """Seconds a body of ``length`` bytes may take (None: unknown, as long as allowed)."""
        size = MAX_BODY_BYTES if length is None else max(0, length)
        return max(float(self.body_timeout), size / self.min_body_rate)

    def tick(self) -> float:
        """How often a server looks for connections past a deadline, in seconds."""
        return min(1.0, max(0.05, min(self.header_timeout, self.body_timeout) / 4))


class ClientSlots:
    """The open connections per remote address, against a `ServerLimits`. Thread-safe.

    `take` answers whether one more connection from ``address`` may open (and counts it);
    every taken slot is given back exactly once with `give`.
    """

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()
        self._total = 0
        self._reported: dict[str, float] = {}
        self.refused = 0

    def take(self, address: str) -> str | None:
        """None when a connection from ``address`` may open (it is counted); else why not."""
        with self._lock:
            if self._total >= self.limits.max_connections:
                self.refused += 1
                return f"the server holds {self._total} connections, its limit"
            if self._open[address] >= self.limits.max_connections_per_client:
                self.refused += 1
                return f"{address} holds {self._open[address]} connections, the limit per client"
            self._open[address] += 1
            self._total += 1
            return None

    def give(self, address: str) -> None:
        with self._lock:
            if self._open[address] <= 1:
                del self._open[address]
            else:
                self._open[address] -= 1
            self._total = max(0, self._total - 1)

    def report(self, address: str) -> bool:
        """Whether a refusal or a closed connection from ``address`` should be logged now: once
        a minute per address, so a flood costs a few log lines, not one per connection."""
        now = time.monotonic()
        with self._lock:
            if len(self._reported) > 1024:
                self._reported = {a: t for a, t in self._reported.items() if t > now - 60}
            if self._reported.get(address, -math.inf) > now - 60:
                return False
            self._reported[address] = now
            return True

    def count(self, address: str | None = None) -> int:
        """Open connections from ``address`` (None: from everyone)."""
        with self._lock:
            return self._total if address is None else self._open.get(address, 0)


def refusal(reason: str) -> bytes:
    """The 503 a plain-HTTP server sends on a connection it will not keep."""
    body = json.dumps(
        {"error": f"too many connections: {reason}", "field": "connection",
         "rule": "too-many-connections"},
        sort_keys=True,
        separators=(",", ":"),
    ).encode()  # fmt: skip
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    return head.encode("ascii") + body


def refuse(conn: socket.socket, answer: bytes | None) -> None:
    """Close a connection just accepted, after ``answer`` if the socket takes it at once.

    Never blocks: what the client sent is read away without waiting (closing a socket with
    unread bytes resets the connection, and the client would lose the answer)."""
    try:
        conn.setblocking(False)
        if answer is not None:
            conn.send(answer)
            conn.shutdown(socket.SHUT_WR)
        for _ in range(4):
            if not conn.recv(65536):
                break
    except OSError:
        pass
    finally:
        conn.close()
