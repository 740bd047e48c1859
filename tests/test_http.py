"""Sync over HTTP: the protocol's framing, the server (`sync.server`) and the client
(`sync.client`), on real sockets on loopback with ports chosen by the OS."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import pickle
import signal
import socket
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.sync.http import (
    MAX_BODY_BYTES,
    MalformedResponseError,
    PeerRejectedError,
    PeerTimeoutError,
    PeerUnreachableError,
    SyncApp,
    SyncError,
    SyncReport,
    SyncServer,
    serve,
    sync_all,
    sync_with,
)
from statefuse.sync.protocol import (
    MAGIC,
    MAX_CHANGE_FRAME_BYTES,
    decode_frames,
    decode_space,
    encode_frames,
)
from statefuse.sync.reconcile import Reconciler
from statefuse.sync.replica import MergeReport, Replica

SPACE = "team"
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Any]


# --- helpers ------------------------------------------------------------------------------------


def _replica(space: str = SPACE) -> Replica:
    return Replica.memory(space=space)


def _write(replica: Replica, prefix: str, count: int) -> None:
    for i in range(count):
        replica.add_claim("project", f"{prefix}-{i}", "status", i)


def _ids(replica: Replica) -> set[bytes]:
    return set(replica.change_ids())


def _post(server: SyncServer, path: str, body: bytes, method: str = "POST") -> tuple[int, Any]:
    """One raw request; the status and the JSON body (or the raw body if it is not JSON)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.request(method, path, body)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.getheader("Content-Type", "").startswith("application/json"):
        return response.status, json.loads(data)
    return response.status, data


def _request(space: str, *frames: bytes) -> bytes:
    return encode_frames([space.encode(), *frames])


def _rewriting(app: WSGIApp, endpoint: str, rewrite: Callable[[bytes], bytes]) -> WSGIApp:
    """``app`` with the answers to ``/v1/<endpoint>`` rewritten (a peer that lies or breaks)."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ.get("PATH_INFO") != f"/v1/{endpoint}":
            return list(app(environ, start_response))
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            captured.update(status=status, headers=headers)

        body = rewrite(b"".join(app(environ, capture)))
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        start_response(captured["status"], [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return wrapped


@contextlib.contextmanager
def _serving(*replicas: Replica) -> Iterator[list[SyncServer]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(serve(r)) for r in replicas]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- framing ------------------------------------------------------------------------------------

frame_lists = st.lists(st.binary(max_size=40), max_size=6)


@given(frame_lists)
def test_frames_come_back_exactly_as_they_were_encoded(frames):
    body = encode_frames(frames)
    assert decode_frames(body, max_frames=6, max_frame_bytes=40) == frames


@given(frame_lists, st.data())
def test_every_cut_or_padded_body_is_refused_whole(frames, data):
    body = encode_frames(frames)
    cut = data.draw(st.integers(0, len(body) - 1), label="cut")
    with pytest.raises(SyncError) as err:
        decode_frames(body[:cut], max_frames=6, max_frame_bytes=40)
    assert err.value.rule in {"magic", "truncated"}
    with pytest.raises(SyncError) as err:
        decode_frames(body + b"\x00", max_frames=6, max_frame_bytes=40)
    assert err.value.rule in {"trailing-data", "truncated"}


def test_frame_limits_and_version_are_checked_before_any_frame_is_read():
    body = encode_frames([b"a", b"bb", b"ccc"])
    with pytest.raises(SyncError) as err:
        decode_frames(body, max_frames=2, max_frame_bytes=10)
    assert (err.value.field, err.value.rule) == ("body.count", "max-frames")
    with pytest.raises(SyncError) as err:
        decode_frames(body, max_frames=3, max_frame_bytes=2)
    assert (err.value.field, err.value.rule) == ("body.frame[2]", "max-frame-bytes")
    other_version = MAGIC + b"\x02" + body[len(MAGIC) + 1 :]
    with pytest.raises(SyncError) as err:
        decode_frames(other_version, max_frames=3, max_frame_bytes=10)
    assert err.value.rule == "version"
    # a count of 2^32 - 1 frames is refused from the header alone
    huge = MAGIC + b"\x01\xff\xff\xff\xff"
    with pytest.raises(SyncError) as err:
        decode_frames(huge, max_frames=4096, max_frame_bytes=10)
    assert err.value.rule == "max-frames"


@pytest.mark.parametrize("frame", [b"", b"\xff\xfe", ("x" * 257).encode()])
def test_a_space_frame_must_be_a_short_non_empty_utf8_name(frame):
    with pytest.raises(SyncError) as err:
        decode_space(frame)
    assert (err.value.field, err.value.rule) == ("space", "space-name")


def test_sync_errors_keep_field_rule_and_status_through_pickling():
    error = PeerRejectedError("space", "same-space", "another space", 409)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.field, copy.rule, copy.message, copy.status) == (
        "space",
        "same-space",
        "another space",
        409,
    )
    assert isinstance(copy, SyncError) and isinstance(copy, RuntimeError)


# --- convergence ----------------------------------------------------------------------------------

steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 2), st.integers(0, 5), st.integers(0, 3)),
        st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2), st.just(0)).filter(
            lambda s: s[1] != s[2]
        ),
    ),
    max_size=14,
)


@settings(max_examples=min(settings().max_examples, 100))  # three servers per example
@given(steps)
def test_three_replicas_on_three_servers_converge_after_any_writes_and_pairwise_syncs(program):
    replicas = [_replica() for _ in range(3)]
    written: set[bytes] = set()
    with _serving(*replicas) as servers:
        for kind, i, j, value in program:
            if kind == "write":
                replicas[i].add_claim("project", f"s{j}", "status", value)
                written.update(replicas[i].change_ids())
                continue
            before = _ids(replicas[i]) | _ids(replicas[j])
            report = sync_with(replicas[i], servers[j].url)
            # one sync leaves both sides with exactly the union, fetched and pushed once
            assert _ids(replicas[i]) == _ids(replicas[j]) == before
            assert report.fetched + report.pushed == report.merge.accepted + (
                report.peer_merge.accepted
            )
        for i, j in ((0, 1), (1, 2), (0, 1)):
            sync_with(replicas[i], servers[j].url)
    model = _replica()
    for r in replicas:
        model.merge(r)
    assert _ids(model) == written
    for r in replicas:
        assert _ids(r) == written
        assert r.state().digest() == model.state().digest()


def test_replicas_on_disk_converge_over_http(tmp_path):
    paths = [tmp_path / f"{name}.db" for name in "abc"]
    replicas = [Replica.open(p, create=True, space=SPACE) for p in paths]
    try:
        for k, r in enumerate(replicas):
            _write(r, f"r{k}", 5 + k)
        with _serving(*replicas[1:]) as servers:
            results = sync_all(replicas[0], [s.url for s in servers])
        assert all(isinstance(r, SyncReport) for r in results)
        assert len({frozenset(_ids(r)) for r in replicas}) == 1
        assert len({r.state().digest() for r in replicas}) == 1
        digest = replicas[2].state().digest()
    finally:
        for r in replicas:
            r.close()
    with Replica.open(paths[2]) as again:  # what the server received is durable
        assert again.state().digest() == digest


def test_sync_all_brings_every_reachable_peer_to_the_union_and_reports_a_dead_one():
    me, first, second = _replica(), _replica(), _replica()
    _write(first, "first", 3)
    _write(second, "second", 4)
    dead = f"http://127.0.0.1:{_free_port()}"
    with _serving(first, second) as servers:
        results = sync_all(me, [servers[0].url, dead, servers[1].url])
    ok_first, failed, ok_second = results
    assert isinstance(failed, PeerUnreachableError)
    assert isinstance(ok_first, SyncReport) and isinstance(ok_second, SyncReport)
    # the first peer was synced again after the second brought news, and got it
    assert _ids(first) == _ids(second) == _ids(me)
    assert len(me) == 7
    assert ok_first.fetched == 3 and ok_first.pushed == 4


def test_concurrent_clients_of_one_server_all_converge():
    hub = _replica()
    spokes = [_replica() for _ in range(4)]
    for k, r in enumerate(spokes):
        _write(r, f"spoke{k}", 20)
    errors: list[BaseException] = []
    with serve(hub) as server:

        def run(r: Replica) -> None:
            try:
                sync_with(r, server.url)
            except BaseException as e:  # surfaced by the assertion below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(r,)) for r in spokes]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for r in spokes:
            sync_with(r, server.url)
    assert len(hub) == 80
    assert all(_ids(r) == _ids(hub) for r in spokes)


# --- what a sync reports ------------------------------------------------------------------------


def test_the_report_counts_the_requests_and_body_bytes_the_server_saw():
    mine, theirs = _replica(), _replica()
    _write(mine, "mine", 12)
    _write(theirs, "theirs", 9)
    seen = {"requests": 0, "in": 0, "out": 0}

    def counting(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        seen["requests"] += 1
        seen["in"] += int(environ.get("CONTENT_LENGTH") or 0)
        body = b"".join(app(environ, start_response))
        seen["out"] += len(body)
        return [body]

    app = SyncApp(theirs)
    with SyncServer(counting) as server:
        report = sync_with(mine, server.url)
    assert (report.round_trips, report.bytes_sent, report.bytes_received) == (
        seen["requests"],
        seen["in"],
        seen["out"],
    )
    assert (report.fetched, report.pushed) == (9, 12)
    assert report.merge == MergeReport(accepted=9, new_ops=9)
    assert report.peer_merge == MergeReport(accepted=12, new_ops=12)
    assert report.seconds > 0


def test_a_sync_between_equal_replicas_is_one_round_trip_and_moves_nothing():
    mine = _replica()
    _write(mine, "x", 30)
    theirs = mine.fork()
    with serve(theirs) as server:
        report = sync_with(mine, server.url)
    assert (report.round_trips, report.fetched, report.pushed) == (1, 0, 0)


def test_small_pages_split_fetches_and_pushes_and_progress_reaches_the_total():
    mine, theirs = _replica(), _replica()
    _write(mine, "mine", 30)
    _write(theirs, "theirs", 23)
    calls: list[tuple[int, int]] = []
    with serve(theirs) as server:
        report = sync_with(
            mine, server.url, page_size=7, progress=lambda d, t: calls.append((d, t))
        )
    assert _ids(mine) == _ids(theirs)
    pages = -(-23 // 7) + -(-30 // 7)
    assert len(calls) == pages
    assert [d for d, _ in calls] == sorted({d for d, _ in calls})  # strictly increasing
    assert calls[-1] == (53, 53)
    assert report.round_trips > pages


def test_a_server_answers_big_fetches_in_several_pages_by_bytes():
    mine, theirs = _replica(), _replica()
    for i in range(6):
        theirs.add_claim("blob", f"b{i}", "data", "x" * 400_000)
    app = SyncApp(theirs, page_bytes=MAX_CHANGE_FRAME_BYTES)
    with SyncServer(app) as server:
        report = sync_with(mine, server.url)
    assert report.fetched == 6 and _ids(mine) == _ids(theirs)
    # two 400 kB changes fit in one answer of at most ~1 MB: at least 3 fetch requests
    assert report.round_trips >= 1 + 3


# --- errors the client raises ---------------------------------------------------------------------


def test_an_unreachable_peer_is_a_typed_error_without_waiting_for_the_timeout():
    url = f"http://127.0.0.1:{_free_port()}"
    # A client that waited the timeout out would raise PeerTimeoutError, after two minutes.
    with pytest.raises(PeerUnreachableError) as err:
        sync_with(_replica(), url, timeout=120)
    assert (err.value.field, err.value.rule) == ("url", "unreachable")
    assert url in str(err.value)


def test_a_peer_that_never_answers_is_a_timeout_error():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # accepts the connection in the kernel, never answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(PeerTimeoutError) as err:
            sync_with(_replica(), url, timeout=0.3)
    assert (err.value.field, err.value.rule) == ("url", "timeout")


def test_a_peer_of_another_space_is_a_typed_error_and_nothing_moves():
    mine, theirs = _replica("team"), _replica("elsewhere")
    _write(mine, "mine", 3)
    _write(theirs, "theirs", 3)
    with serve(theirs) as server, pytest.raises(PeerRejectedError) as err:
        sync_with(mine, server.url)
    assert (err.value.status, err.value.field, err.value.rule) == (409, "space", "same-space")
    assert len(mine) == 3 and len(theirs) == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"url": "ftp://127.0.0.1:1"}, "url"),
        ({"url": "http://"}, "url"),
        ({"url": "http://127.0.0.1:99999"}, "url"),
        ({"url": "http://127.0.0.1:1/?q=1"}, "url"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"page_size": 0}, "page_size"),
        ({"page_size": 5000}, "page_size"),
    ],
)
def test_bad_arguments_to_sync_with_name_the_argument(kwargs, field):
    arguments = {"url": "http://127.0.0.1:1", **kwargs}
    with pytest.raises(SyncError) as err:
        sync_with(_replica(), **arguments)
    assert err.value.field == field
    assert not isinstance(err.value, PeerUnreachableError)


def test_sync_all_wants_a_list_of_urls_not_one_string():
    with pytest.raises(SyncError) as err:
        sync_all(_replica(), "http://127.0.0.1:1")
    assert err.value.rule == "urls"


# --- a peer that lies or breaks: nothing malformed is applied -------------------------------------


def _flip_a_signature_bit_in_each_frame(body: bytes) -> bytes:
    # a signed change ends with its 64-byte signature, then b"\xa1v\x01" ("v": 1)
    frames = decode_frames(body, max_frames=10_000, max_frame_bytes=MAX_CHANGE_FRAME_BYTES)
    return encode_frames([f[:-4] + bytes([f[-4] ^ 1]) + f[-3:] for f in frames])


@pytest.mark.parametrize(
    ("endpoint", "rewrite", "rule"),
    [
        ("fetch", lambda body: body[:-1], "truncated"),
        ("fetch", lambda body: body + b"!", "trailing-data"),
        ("fetch", lambda body: encode_frames([]), "frame-count"),
        ("reconcile", lambda body: encode_frames([b"\x07"]), "version"),
        ("reconcile", lambda body: encode_frames([b"\x01", b"\x01"]), "max-frames"),
        ("reconcile", lambda body: b"<html>hello</html>", "magic"),
        ("push", lambda body: b'{"accepted": -1}', "merge-report"),
        ("push", lambda body: b"[]", "json"),
    ],
)
def test_a_malformed_answer_is_a_typed_error_and_nothing_of_it_is_applied(endpoint, rewrite, rule):
    mine, theirs = _replica(), _replica()
    _write(mine, "mine", 4)
    if endpoint != "push":  # (fetched pages are applied before the push answer comes)
        _write(theirs, "theirs", 5)
    before = _ids(mine)
    lying = _rewriting(SyncApp(theirs), endpoint, rewrite)
    with SyncServer(lying) as server, pytest.raises(MalformedResponseError) as err:
        sync_with(mine, server.url)
    assert err.value.rule == rule
    assert _ids(mine) == before and mine.quarantine() == []


def test_changes_a_lying_peer_altered_are_quarantined_by_the_client_never_applied():
    mine, theirs = _replica(), _replica()
    _write(theirs, "theirs", 5)
    with SyncServer(_rewriting(SyncApp(theirs), "fetch", _flip_a_signature_bit_in_each_frame)) as s:
        report = sync_with(mine, s.url)
    assert report.merge.quarantined == 5 and report.merge.accepted == 0
    assert len(mine) == 0
    assert {q.reason for q in mine.quarantine()} == {"bad-signature"}


def test_an_exchange_starts_again_when_the_peer_says_its_changes_moved():
    mine, theirs = _replica(), _replica()
    _write(mine, "mine", 3)
    _write(theirs, "theirs", 3)
    app = SyncApp(theirs)
    refusals = {"left": 2}

    def moving(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") == "/v1/reconcile" and refusals["left"]:
            refusals["left"] -= 1
            environ["wsgi.input"].read(int(environ["CONTENT_LENGTH"]))
            body = json.dumps({"error": "moved", "field": "m", "rule": "answer-length"}).encode()
            start_response("409 Conflict", [("Content-Type", "application/json")])
            return [body]
        return app(environ, start_response)

    # the same exchange with nothing refused, between copies holding the same changes: how
    # many rounds reconciliation takes depends on where the random ids fall
    plain_mine, plain_theirs = _replica(), _replica()
    plain_mine.receive(mine.all_change_bytes())
    plain_theirs.receive(theirs.all_change_bytes())
    with serve(plain_theirs) as plain:
        baseline = sync_with(plain_mine, plain.url).round_trips
    assert baseline >= 3  # at least one round, a fetch and a push
    with SyncServer(moving) as server:
        report = sync_with(mine, server.url)
        assert _ids(mine) == _ids(theirs)
        assert report.round_trips == 2 + baseline  # the two refused, then the same exchange
        refusals["left"] = 10
        with pytest.raises(PeerRejectedError) as err:
            sync_with(mine, server.url)
    assert (err.value.status, err.value.rule) == (409, "answer-length")


# --- what the server does with bad requests -------------------------------------------------------


def test_info_names_the_protocol_the_space_the_count_and_the_limits():
    replica = _replica()
    _write(replica, "x", 4)
    with serve(replica) as server:
        status, info = _post(server, "/v1/info", b"", method="GET")
    assert status == 200
    assert (info["protocol"], info["space"], info["changes"]) == (1, SPACE, 4)
    assert info["limits"]["max_body_bytes"] == MAX_BODY_BYTES


def _good_change() -> bytes:
    source = _replica()
    source.add_claim("project", "p", "status", "ok")
    return source.all_change_bytes()[0]


def _bad_requests() -> list[tuple[str, bytes, int, str]]:
    reconciler = Reconciler([bytes([k]) * 32 for k in range(3)])
    return [
        ("/v1/push", b"garbage", 400, "magic"),
        ("/v1/push", encode_frames([]), 400, "space-frame"),
        ("/v1/push", encode_frames([b"\xff"]), 400, "space-name"),
        ("/v1/push", _request(SPACE, b"x")[:-1], 400, "truncated"),
        (
            "/v1/push",
            _request(SPACE, b"\x00" * (MAX_CHANGE_FRAME_BYTES + 1)),
            400,
            "max-frame-bytes",
        ),
        ("/v1/reconcile", _request(SPACE), 400, "frame-count"),
        ("/v1/reconcile", _request(SPACE, b"\x01", b"\x01"), 400, "max-frames"),
        ("/v1/reconcile", _request(SPACE, b"\x09garbage"), 400, "version"),
        ("/v1/reconcile", _request(SPACE, reconciler.initiate()[:-3]), 400, "truncated"),
        ("/v1/reconcile", _request("other", reconciler.initiate()), 409, "same-space"),
        ("/v1/fetch", _request(SPACE, b"\x01" * 31), 400, "id-length"),
        ("/v1/fetch", _request(SPACE, *([b"\x01" * 32] * 4097)), 400, "max-frames"),
        ("/v1/push", _request("other", _good_change()), 409, "same-space"),
    ]


def test_malformed_requests_get_4xx_with_the_broken_rule_and_leave_the_replica_as_it_was():
    replica, peer = _replica(), _replica()
    _write(replica, "x", 5)
    _write(peer, "y", 2)
    before = (_ids(replica), replica.state().digest())
    with serve(replica) as server:
        for path, body, status, rule in _bad_requests():
            got_status, error = _post(server, path, body)
            assert (path, got_status, error["rule"]) == (path, status, rule)
            assert set(error) == {"error", "field", "rule"}
        assert (_ids(replica), replica.state().digest()) == before
        assert replica.quarantine() == []
        # still serving: a good sync works
        sync_with(peer, server.url)
    assert _ids(peer) == _ids(replica) and len(peer) == 7


def test_garbage_changes_get_422_and_land_in_the_quarantine_with_their_reason():
    replica = _replica()
    good = _good_change()
    tampered = bytearray(good)
    tampered[-4] ^= 1  # the last byte of the signature (b"\xa1v\x01" follows it)
    with serve(replica) as server:
        status, error = _post(server, "/v1/push", _request(SPACE, good, b"not a change", tampered))
        assert (status, error["rule"]) == (422, "quarantined")
        assert error["report"] == {
            "accepted": 1,
            "duplicate": 0,
            "new_ops": 1,
            "pending": 0,
            "quarantined": 2,
            "forks": [],
            "own_from_elsewhere": 0,
            "clock_jumps": [],
            "evicted": 0,
        }
        reasons = {q.data: q.reason for q in replica.quarantine()}
        assert reasons == {b"not a change": "malformed", bytes(tampered): "bad-signature"}
        assert replica.change_bytes(replica.change_ids()) == [good]
        other = _replica()
        sync_with(other, server.url)  # the server stays up and serves the good change
    assert _ids(other) == _ids(replica)


def test_a_body_longer_than_the_limit_is_refused_with_413_before_it_is_sent():
    with serve(_replica()) as server, socket.create_connection((server.host, server.port)) as s:
        s.sendall(
            b"POST /v1/push HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode()
        )
        s.settimeout(10)
        answer = s.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413")


def test_the_app_refuses_a_long_body_by_its_length_without_reading_it():
    class Unreadable(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise AssertionError("the body was read")

    statuses: list[str] = []
    body = SyncApp(_replica())(
        {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": "/v1/push",
            "CONTENT_LENGTH": str(MAX_BODY_BYTES + 1),
            "wsgi.input": Unreadable(),
        },
        lambda status, headers: statuses.append(status),
    )
    assert statuses == ["413 Content Too Large"]
    assert json.loads(b"".join(body))["rule"] == "max-body-bytes"


def test_unknown_endpoints_get_404_and_wrong_methods_405():
    with serve(_replica()) as server:
        assert _post(server, "/v2/reconcile", b"")[0] == 404
        assert _post(server, "/", b"", method="GET")[0] == 404
        status, error = _post(server, "/v1/reconcile", b"", method="GET")
        assert (status, error["rule"]) == (405, "method")
        assert _post(server, "/v1/info", b"x")[0] == 405


def test_a_fault_inside_a_handler_is_a_json_500_and_the_server_keeps_serving(monkeypatch):
    replica = _replica()
    with serve(replica) as server:
        with monkeypatch.context() as patch:
            patch.setattr(replica, "receive", lambda changes: 1 / 0)
            status, error = _post(server, "/v1/push", _request(SPACE, _good_change()))
        assert (status, error["rule"]) == (500, "internal")
        status, _ = _post(server, "/v1/push", _request(SPACE, _good_change()))
        assert status == 200


@pytest.mark.parametrize("given", [False, True], ids=["replica-lock", "lock-given-to-serve"])
def test_a_replica_held_busy_past_the_timeout_gets_503_not_a_hang(given):
    replica, peer = _replica(), _replica()
    lock = threading.RLock()
    held_lock = lock if given else replica.lock  # a lock given to serve is still honoured
    with serve(replica, lock=lock if given else None, timeout=0.2) as server:
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with held_lock:
                held.set()
                release.wait(120)  # a hang guard: the test sets it

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(60)
        try:
            with pytest.raises(PeerRejectedError) as err:
                sync_with(peer, server.url)
        finally:
            release.set()
            holder.join()
        assert (err.value.status, err.value.rule) == (503, "busy")
        sync_with(peer, server.url)  # free again


def test_a_served_replica_written_by_its_own_process_while_a_peer_syncs_loses_nothing():
    """No lock of the caller's: the replica locks itself and the server takes the same lock.
    Two threads of the serving process write while a peer syncs in a loop; an observer reads
    the replica on whichever thread made the change (a server thread for a push)."""
    hub, peer = _replica(), _replica()
    pushed_in: list[int] = []
    hub.observe(lambda ops: pushed_in.append(len(hub.state().claims)))
    failures: list[BaseException] = []
    done = threading.Event()
    rounds = 0

    def peer_loop() -> None:
        nonlocal rounds
        try:
            while not done.is_set() or rounds < 3:
                peer.add_claim("peer", f"s{rounds}", "status", rounds)
                rounds += 1
                try:
                    sync_with(peer, server.url)
                except PeerRejectedError as e:
                    # 409: the hub's changes moved under every restart of the exchange (it is
                    # written all the time); the next round syncs what this one did not
                    if e.status != 409:
                        raise
        except BaseException as exc:
            failures.append(exc)

    def write(who: str) -> None:
        try:
            for i in range(100):
                hub.add_claim(who, f"s{i}", "status", i)
                if i % 10 == 0:
                    hub.context("status")  # reads interleave with writes and requests
        except BaseException as exc:
            failures.append(exc)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: a missing lock shows up
    try:
        with serve(hub) as server:
            threads = [
                threading.Thread(target=peer_loop),
                threading.Thread(target=write, args=("app",)),
            ]
            for t in threads:
                t.start()
            write("main")
            done.set()
            for t in threads:
                t.join(120)  # a hang guard
            assert not any(t.is_alive() for t in threads) and not failures, failures
            sync_with(peer, server.url)
    finally:
        sys.setswitchinterval(switch)
    assert hub.forks() == []  # its two writers never signed the same seq
    assert hub.change_ids() == peer.change_ids()
    assert hub.state().digest() == peer.state().digest()
    assert len(hub.state().claims) == 200 + rounds
    assert pushed_in  # the peer's claims reached the observer through the server


def test_a_contradicting_answer_gets_409_so_the_client_can_start_again():
    server_side = _replica()
    _write(server_side, "s", 4)
    # an answer to a list of 2 ids the server never sent (it holds 4 in that range)
    pretend = Reconciler([bytes([k]) * 32 for k in (1, 2)])
    answer = Reconciler([bytes([9]) * 32]).respond(pretend.initiate()).message
    assert answer is not None
    with serve(server_side) as server:
        status, error = _post(server, "/v1/reconcile", _request(SPACE, answer))
    assert (status, error["rule"]) == (409, "answer-length")


# --- the server's life --------------------------------------------------------------------------


def test_close_releases_the_port_and_is_idempotent_and_a_closed_server_cannot_start():
    server = serve(_replica()).start()
    port = server.port
    assert _post(server, "/v1/info", b"", method="GET")[0] == 200
    server.close()
    server.close()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port)):
        pass
    with socket.socket() as again:  # the port is free to bind again
        again.bind(("127.0.0.1", port))
    with pytest.raises(SyncError) as err:
        server.start()
    assert err.value.rule == "startable"


def test_serve_forever_returns_when_closed_from_another_thread_after_answering():
    replica = _replica()
    server = serve(replica)
    loop = threading.Thread(target=server.serve_forever)
    loop.start()
    try:
        assert _post(server, "/v1/info", b"", method="GET")[0] == 200
        with pytest.raises(SyncError):
            server.start()  # already running
    finally:
        server.close()
        loop.join(60)
    assert not loop.is_alive()


def test_a_bound_server_that_never_ran_closes_cleanly():
    server = serve(_replica())
    port = server.port
    server.close()
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"port": -1}, "port"), ({"threads": 0}, "threads"), ({"timeout": 0}, "timeout")],
)
def test_bad_arguments_to_serve_name_the_argument(kwargs, field):
    with pytest.raises(SyncError) as err:
        serve(_replica(), **kwargs)
    assert err.value.field == field


def test_a_port_in_use_is_a_typed_error():
    with serve(_replica()) as first, pytest.raises(SyncError) as err:
        serve(_replica(), port=first.port)
    assert (err.value.field, err.value.rule) == ("port", "bind")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_serve_forever_cleanly_and_it_returns():
    script = (
        "from statefuse.sync.http import serve\n"
        "from statefuse.sync.replica import Replica\n"
        "server = serve(Replica.memory(space='team'))\n"
        "print(server.url, flush=True)\n"
        "server.serve_forever()\n"
        "print('returned', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        text=True,
        # A process started with SIGINT ignored keeps ignoring it (Python installs its Ctrl-C
        # handler only when SIGINT is at its default), and an ignored disposition is inherited:
        # start the server the way a terminal does, whatever the test runner's disposition is.
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stdout is not None
        host, port = proc.stdout.readline().strip().removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        conn.request("GET", "/v1/info")
        assert conn.getresponse().status == 200  # the loop runs: it answered
        conn.close()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, out.strip()) == (0, "returned")


def test_a_sync_that_reveals_a_fork_reports_it_on_both_sides_and_keeps_both_branches():
    from statefuse.sync.key import SigningKey
    from statefuse.sync.replica import OwnFeedWarning

    key = SigningKey.generate()
    served_side, ours = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    one, two = Replica.memory(space=SPACE, key=key), Replica.memory(space=SPACE, key=key)
    one.add_claim("p", "x", "v", "from one")
    two.add_claim("p", "x", "v", "from two")  # seq 1 signed twice: a key in two stores
    served_side.merge(one)
    ours.merge(two)
    with serve(served_side) as server, warnings.catch_warnings():
        warnings.simplefilter("ignore", OwnFeedWarning)
        report = sync_with(ours, server.url)
    assert [(f.author, f.seq) for f in report.merge.forks] == [(key.author, 1)]
    assert [(f.author, f.seq) for f in report.peer_merge.forks] == [(key.author, 1)]
    for r in (ours, served_side):
        assert {c.value for c in r.state().active_claims()} == {"from one", "from two"}
