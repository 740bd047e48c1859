"""Signed sync requests (`sync.auth`) and who a server lets read or push, on real servers on
loopback: members of closed spaces sync, strangers, unsigned, stale, replayed and re-targeted
requests are refused with their rule, and no signature or key reaches the log."""

from __future__ import annotations

import http.client
import json
import logging
import time
from typing import Any

import pytest

from statefuse.sync.auth import AuthMode, RequestGate, Signed, sign_request
from statefuse.sync.client import _learn_server
from statefuse.sync.http import PeerRejectedError, SyncError, SyncServer, serve, sync_with
from statefuse.sync.key import SigningKey
from statefuse.sync.protocol import encode_frames
from statefuse.sync.reconcile import Reconciler
from statefuse.sync.replica import Replica

SPACE = "team"


def _closed() -> tuple[Replica, Replica, Replica]:
    """The root (with one claim), an admitted member, and a stranger of one closed space."""
    root = Replica.memory(space=SPACE, mode="closed")
    member = Replica.memory(space=SPACE, mode="closed", root=root.author)
    stranger = Replica.memory(space=SPACE, mode="closed", root=root.author)
    root.add_claim("vendor", "acme", "price", 1150)
    root.admit(member.author)
    return root, member, stranger


def _server_id(server: SyncServer) -> bytes:
    return server.app.server_id  # type: ignore[attr-defined, no-any-return]


def _send(
    server: SyncServer,
    endpoint: str,
    body: bytes,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.request(method, endpoint, body, headers=headers or {})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, json.loads(data) if data.startswith(b"{") else {}


def _signed(
    key: SigningKey | None, to: SyncServer, at: str, payload: bytes, **overrides: Any
) -> dict[str, str]:
    """Signature headers for ``payload`` POSTed to ``at`` on ``to``; ``overrides`` sign for
    another space, server, endpoint, body or time."""
    assert key is not None
    fields: dict[str, Any] = {
        "space": SPACE,
        "server": _server_id(to),
        "method": "POST",
        "endpoint": at,
        "body": payload,
    }
    fields.update(overrides)
    return sign_request(key, **fields)


def _reconcile_body() -> bytes:
    return encode_frames([SPACE.encode(), Reconciler([]).initiate()])


def test_admitted_members_sync_both_ways_with_a_closed_space_and_the_root_with_them():
    root, member, _ = _closed()
    member_later = Replica.memory(space=SPACE, mode="closed", root=root.author)
    root.admit(member_later.author)
    with serve(root) as server:
        assert server.app.auth is AuthMode.MEMBERS  # type: ignore[attr-defined]
        first = sync_with(member, server.url)
        member.add_claim("vendor", "acme", "owner", "dana")
        again = sync_with(member, server.url)
        assert sync_with(member_later, server.url).fetched == 4
    assert (first.fetched, again.pushed) == (3, 1)
    assert again.round_trips == 2  # the server's id is known now: no unsigned first try
    assert root.state().digest() == member.state().digest() == member_later.state().digest()
    with serve(member) as server:  # a member's server lets the root in
        root.add_claim("vendor", "acme", "region", "eu")
        assert sync_with(root, server.url).pushed == 1


def test_a_strangers_valid_signature_is_refused_403_for_reading_and_pushing():
    root, _, stranger = _closed()
    stranger.add_claim("vendor", "acme", "price", 1)
    (change,) = stranger.change_bytes(stranger.change_ids())
    before = root.change_ids()
    with serve(root) as server:
        with pytest.raises(PeerRejectedError) as refused:
            sync_with(stranger, server.url)
        assert (refused.value.status, refused.value.rule) == (403, "not-a-member")
        ids = encode_frames([SPACE.encode(), *before])
        push = encode_frames([SPACE.encode(), change])
        for endpoint, body in (("/v1/fetch", ids), ("/v1/push", push)):
            status, error = _send(
                server, endpoint, body, _signed(stranger.key, server, endpoint, body)
            )
            assert (status, error["rule"]) == (403, "not-a-member"), endpoint
    assert root.change_ids() == before


def test_a_revoked_member_is_refused_like_a_stranger():
    root, member, _ = _closed()
    with serve(root) as server:
        sync_with(member, server.url)
        root.revoke(member.author)
        with pytest.raises(PeerRejectedError) as refused:
            sync_with(member, server.url)
    assert (refused.value.status, refused.value.rule) == (403, "not-a-member")


@pytest.mark.parametrize("auth", ["members", "signed"])
def test_an_unsigned_request_is_refused_401_unless_the_server_is_open(auth):
    root, _, _ = _closed()
    body = _reconcile_body()
    with serve(root, auth=auth) as server:
        status, error = _send(server, "/v1/reconcile", body)
        assert (status, error["rule"]) == (401, "signature-required")
        _, info = _send(server, "/v1/info", b"", method="GET")
    assert info["auth"] == auth and "changes" not in info  # the count only to a reader
    assert Replica.memory(space=SPACE).key is not None
    reader = Replica.memory(space=SPACE, mode="closed", root=root.author)
    reader.key = None  # opened without its key: it sends unsigned requests
    with serve(root, auth=auth) as server, pytest.raises(PeerRejectedError) as refused:
        sync_with(reader, server.url)
    assert (refused.value.status, refused.value.rule) == (401, "signature-required")


def test_a_signed_server_answers_any_author_key():
    root, _, stranger = _closed()
    with serve(root, auth="signed") as server:
        assert sync_with(stranger, server.url).fetched == 2


def test_a_replayed_request_is_refused_and_a_fresh_one_with_a_new_nonce_is_not():
    root, member, _ = _closed()
    body = _reconcile_body()
    with serve(root) as server:
        headers = _signed(member.key, server, "/v1/reconcile", body)
        assert _send(server, "/v1/reconcile", body, headers)[0] == 200
        status, error = _send(server, "/v1/reconcile", body, headers)
        assert (status, error["rule"]) == (401, "replay")
        fresh = _signed(member.key, server, "/v1/reconcile", body)
        assert _send(server, "/v1/reconcile", body, fresh)[0] == 200


def test_a_request_outside_the_clock_window_is_refused_naming_the_allowed_skew():
    root, member, _ = _closed()
    body = _reconcile_body()
    with serve(root, window=30) as server:
        for skew in (-31_000, 31_000):
            stale = _signed(
                member.key, server, "/v1/reconcile", body, time_ms=time.time_ns() // 10**6 + skew
            )
            status, error = _send(server, "/v1/reconcile", body, stale)
            assert (status, error["rule"]) == (401, "clock-window")
            assert "30 s" in error["error"]


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        ({"body": b"another body"}, "signature"),
        ({"endpoint": "/v1/push"}, "signature"),
        ({"space": "elsewhere"}, "signature"),
        ({"server": bytes(16)}, "server-identity"),
    ],
)
def test_a_signature_for_another_body_endpoint_space_or_server_is_refused(change, rule):
    root, member, _ = _closed()
    body = _reconcile_body()
    with serve(root) as server:
        headers = _signed(member.key, server, "/v1/reconcile", body, **change)
        status, error = _send(server, "/v1/reconcile", body, headers)
    assert (status, error["rule"]) == (401, rule)


def test_malformed_signature_headers_are_refused_401():
    root, member, _ = _closed()
    body = _reconcile_body()
    with serve(root) as server:
        headers = _signed(member.key, server, "/v1/reconcile", body)
        del headers["StateFuse-Nonce"]
        status, error = _send(server, "/v1/reconcile", body, headers)
    assert (status, error["rule"], error["field"]) == (401, "auth-header", "StateFuse-Nonce")


def test_the_client_signs_again_for_the_server_a_url_now_names():
    root, member, _ = _closed()
    with serve(root) as server:
        _learn_server(server.url, bytes(16))  # another server answered at this URL before
        report = sync_with(member, server.url)
    assert report.fetched == 2 and report.round_trips == 3  # one 401 server-identity, then on


def test_an_open_space_is_served_to_unsigned_requests_and_to_strangers_by_default():
    hub = Replica.memory(space=SPACE)
    hub.add_claim("vendor", "acme", "price", 1150)
    stranger = Replica.memory(space=SPACE)
    body = _reconcile_body()
    with serve(hub) as server:
        assert _send(server, "/v1/reconcile", body)[0] == 200
        assert sync_with(stranger, server.url).fetched == 1
        bad = _signed(stranger.key, server, "/v1/reconcile", b"other")
        assert _send(server, "/v1/reconcile", body, bad)[1]["rule"] == "signature"


def test_bad_auth_arguments_name_the_argument():
    with pytest.raises(SyncError) as bad:
        serve(Replica.memory(space=SPACE), auth="everyone")
    assert (bad.value.field, bad.value.rule) == ("auth", "auth-mode")
    with pytest.raises(SyncError) as bad:
        serve(Replica.memory(space=SPACE), window=0)
    assert bad.value.field == "window"


def test_a_peer_url_with_a_password_is_refused_and_the_password_masked():
    with pytest.raises(SyncError) as refused:
        sync_with(Replica.memory(space=SPACE), "http://user:s3cret@127.0.0.1:1/")
    assert refused.value.rule == "credentials" and "s3cret" not in str(refused.value)


def test_the_gate_forgets_a_nonce_only_once_its_time_is_out_and_bounds_what_it_keeps():
    now = [1_000_000]
    gate = RequestGate(
        space=SPACE, server=bytes(16), window=1, max_nonces_per_key=2, clock=lambda: now[0]
    )
    first = Signed(b"a" * 32, b"n" * 16, now[0])
    gate.consume(first)
    with pytest.raises(SyncError, match="sent before"):
        gate.consume(first)
    gate.consume(Signed(b"a" * 32, b"m" * 16, now[0]))
    with pytest.raises(SyncError) as full:
        gate.consume(Signed(b"a" * 32, b"o" * 16, now[0]))
    assert full.value.rule == "key-busy"  # a's own budget; b is not affected
    gate.consume(Signed(b"b" * 32, b"n" * 16, now[0]))
    now[0] += 1001
    with pytest.raises(SyncError) as stale:
        gate.consume(first)
    assert stale.value.rule == "clock-window"
    gate.consume(Signed(b"a" * 32, b"p" * 16, now[0]))  # the old ones were forgotten
    assert gate.nonces == 2  # a's new one, and b's (expired, dropped when b comes back)


def test_no_signature_or_key_reaches_the_server_log(caplog):
    root, member, stranger = _closed()
    caplog.set_level(logging.DEBUG, logger="statefuse")
    body = _reconcile_body()
    with serve(root) as server:
        sync_with(member, server.url)
        with pytest.raises(PeerRejectedError):
            sync_with(stranger, server.url)
        headers = _signed(member.key, server, "/v1/reconcile", body)
        _send(server, "/v1/reconcile", body, headers)
        _send(server, "/v1/reconcile", body, headers)  # a replay, logged as refused
    text = caplog.text
    assert "refused /v1/reconcile: replay" in text
    assert "not-a-member" in text
    assert headers["StateFuse-Signature"] not in text and headers["StateFuse-Nonce"] not in text
    for replica in (root, member, stranger):
        assert replica.key is not None
        assert replica.key._private.private_bytes_raw().hex() not in text
