"""What one client may hold of a sync server (`sync.guard`, `sync.server`) and what one signing
key may spend of its nonce memory (`sync.auth.RequestGate`): real sockets on loopback, slow
clients on another loopback address (127.0.0.2) than the honest peer (127.0.0.1)."""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from statefuse.sync.auth import AuthMode, RequestGate, Signed, sign_request
from statefuse.sync.guard import ServerLimits
from statefuse.sync.http import PeerRejectedError, SyncServer, serve, sync_with
from statefuse.sync.key import SigningKey
from statefuse.sync.protocol import SyncError
from statefuse.sync.replica import Replica

SPACE = "team"
SLOW_HOST = "127.0.0.2"  # another client than the honest one, on the same machine
GUARD = 60.0  # hang guard only: every wait below ends on an event long before


def _slow(server: SyncServer, count: int) -> list[socket.socket]:
    """``count`` connections from `SLOW_HOST`, each with a request line and no more."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(
            (server.host, server.port), timeout=GUARD, source_address=(SLOW_HOST, 0)
        )
        with contextlib.suppress(OSError):
            sock.sendall(b"GET /v1/info HTTP/1.1\r\nHost: x\r\n")
        sockets.append(sock)
    return sockets


@contextlib.contextmanager
def _trickling(sockets: list[socket.socket], line: bytes = b"X-Slow: 1\r\n") -> Iterator[None]:
    """Send ``line`` on every socket every 0.3 s (a header that never ends) while inside."""
    stop = threading.Event()

    def trickle() -> None:
        while not stop.wait(0.3):
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.send(line)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(GUARD)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within the hang guard; what it sent
    before (a 503) is read away."""
    sock.settimeout(GUARD)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def _still_open(sock: socket.socket) -> bool:
    """Nothing to read, not even an EOF: the server holds the connection."""
    readable, _, _ = select.select([sock], [], [], 0)
    return not readable


def test_an_honest_sync_completes_while_one_client_holds_200_slow_connections():
    hub, member = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    member.add_claim("vendor", "acme", "price", 1150)
    hub.add_claim("vendor", "acme", "status", "active")
    limits = ServerLimits(header_timeout=GUARD)  # the slow ones outlive the sync
    with serve(hub, limits=limits) as server:
        slow = _slow(server, 200)
        try:
            with _trickling(slow):
                report = sync_with(member, server.url, timeout=GUARD)
                held = [sock for sock in slow if _still_open(sock)]
            assert (report.fetched, report.pushed) == (1, 1)
            assert hub.state().digest() == member.state().digest()
            # The client's first 16 are held (none closed for the honest one's sake); the other
            # 184 were refused at once, with a 503 that names the rule.
            assert len(held) == limits.max_connections_per_client == 16
            refused = next(sock for sock in slow if sock not in held)
            refused.settimeout(GUARD)
            answer = refused.recv(4096)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"too-many-connections" in answer
        finally:
            for sock in slow:
                sock.close()


def test_a_request_whose_headers_or_body_trickle_in_is_closed_at_its_deadline():
    hub = Replica.memory(space=SPACE)
    limits = ServerLimits(header_timeout=1.5, body_timeout=1.5, min_body_rate=1 << 20)
    # The idle timeout (30 s) is far away and every byte would restart it: only the fixed
    # deadlines can close these.
    with serve(hub, limits=limits, timeout=30) as server:
        heads = _slow(server, 8)
        bodies = [
            socket.create_connection(
                (server.host, server.port), timeout=GUARD, source_address=(SLOW_HOST, 0)
            )
            for _ in range(8)
        ]
        for sock in bodies:
            sock.sendall(b"POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        try:
            with _trickling(heads), _trickling(bodies, b"x"):
                assert all(_closed_by_server(sock) for sock in heads + bodies)
            # the server is as good as new: an honest request is answered
            conn = http.client.HTTPConnection(server.host, server.port, timeout=GUARD)
            conn.request("GET", "/v1/info")
            assert conn.getresponse().status == 200
            conn.close()
        finally:
            for sock in heads + bodies:
                sock.close()


def test_limits_are_checked_when_a_server_is_made():
    with pytest.raises(SyncError) as bad:
        ServerLimits(max_connections_per_client=0)
    assert bad.value.field == "max_connections_per_client"
    with pytest.raises(SyncError) as above:
        ServerLimits(max_connections_per_client=20, max_connections=10)
    assert above.value.rule == "range"
    assert ServerLimits().body_seconds(4 << 20) == 64.0  # 4 MiB at 64 KiB/s
    assert ServerLimits().body_seconds(10) == 10.0


# --- nonces per signing key -------------------------------------------------------------------


def _signed(author: bytes, k: int, time_ms: int) -> Signed:
    return Signed(author, k.to_bytes(16, "big"), time_ms)


def test_a_key_that_exhausts_its_nonce_budget_is_refused_alone():
    now = [1_000_000_000]
    gate = RequestGate(
        space=SPACE, server=bytes(16), window=120, max_nonces=100, clock=lambda: now[0]
    )
    gate.max_nonces_per_key = 10
    flood, honest = b"f" * 32, b"h" * 32
    ahead = now[0] + 119_000  # dated as far ahead as the window allows: kept longest
    refused = []
    for k in range(200):
        try:
            gate.consume(_signed(flood, k, ahead))
        except SyncError as e:
            refused.append(e.rule)
    assert len(refused) == 190 and set(refused) == {"key-busy"}
    for k in range(10):  # the honest key spends its own budget, untouched by the flood
        gate.consume(_signed(honest, k, now[0]))
    now[0] += 240_001  # every nonce is out of the window now
    for k in range(10):
        gate.consume(_signed(flood, 1000 + k, now[0]))


def test_in_open_mode_a_flood_of_self_made_keys_never_refuses_an_honest_key():
    now = [1_000_000_000]
    gate = RequestGate(
        space=SPACE,
        server=bytes(16),
        max_nonces=500,
        max_nonces_per_key=8,
        max_keys=50,
        auth=AuthMode.OPEN,
        clock=lambda: now[0],
    )
    honest = b"h" * 32
    for k in range(5_000):  # 5,000 keys, each a request dated 119 s ahead
        gate.consume(_signed(k.to_bytes(32, "big"), 0, now[0] + 119_000))
        if k % 100 == 0:
            gate.consume(_signed(honest, k, now[0]))  # never refused
    assert gate.keys <= 50 and gate.nonces <= 500


def test_in_members_mode_a_live_nonce_is_never_forgotten_for_room():
    now = [1_000_000_000]
    gate = RequestGate(space=SPACE, server=bytes(16), max_keys=3, clock=lambda: now[0])
    members = [bytes([m]) * 32 for m in range(4)]
    for m in members[:3]:
        gate.consume(_signed(m, 0, now[0]))
    with pytest.raises(SyncError) as full:
        gate.consume(_signed(members[3], 0, now[0]))
    assert full.value.rule == "busy"
    with pytest.raises(SyncError) as replay:  # every live nonce is still known
        gate.consume(_signed(members[0], 0, now[0]))
    assert replay.value.rule == "replay"
    now[0] += 120_001  # their nonces expired: their buckets make room
    gate.consume(_signed(members[3], 0, now[0]))


def _info(server: SyncServer, key: SigningKey, *, ahead_ms: int = 0) -> int:
    """GET /v1/info signed by ``key`` (its time ``ahead_ms`` in the future): the status."""
    app = server.app
    headers = sign_request(
        key,
        space=SPACE,
        server=app.server_id,  # type: ignore[attr-defined]
        method="GET",
        endpoint="/v1/info",
        body=b"",
        time_ms=time.time_ns() // 1_000_000 + ahead_ms,
    )
    conn = http.client.HTTPConnection(server.host, server.port, timeout=GUARD)
    try:
        conn.request("GET", "/v1/info", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_over_http_a_flooding_key_gets_busy_and_an_honest_sync_still_goes_through():
    hub = Replica.memory(space=SPACE)
    member = Replica.memory(space=SPACE)
    member.add_claim("vendor", "acme", "price", 1150)
    with serve(hub, auth="signed") as server:
        gate = server.app.gate  # type: ignore[attr-defined]
        gate.max_nonces = 64  # small budgets, so that the flood is short
        gate.max_nonces_per_key = 32
        flood = SigningKey.generate()
        statuses = [_info(server, flood, ahead_ms=110_000) for _ in range(80)]
        report = sync_with(member, server.url, timeout=GUARD)  # 64 nonces held: no matter
        assert report.pushed == 1 and hub.state().digest() == member.state().digest()
        assert statuses[:32] == [200] * 32 and set(statuses[32:]) == {429}  # its own budget


def test_in_a_closed_space_a_strangers_valid_signature_spends_no_nonce():
    root = Replica.memory(space=SPACE, mode="closed")
    with serve(root) as server:
        stranger = SigningKey.generate()
        assert [_info(server, stranger) for _ in range(5)] == [200] * 5  # info, not changes
        with pytest.raises(PeerRejectedError) as refused:
            sync_with(Replica.memory(space=SPACE, mode="closed", root=root.author), server.url)
        gate = server.app.gate  # type: ignore[attr-defined]
        assert (gate.keys, gate.nonces) == (0, 0)
    assert refused.value.rule == "not-a-member"
