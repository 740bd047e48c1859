"""Following peers (`sync.follower`): a background loop over real HTTP servers on loopback.

Waits are for a condition, never sleeps of a fixed length, and their deadlines are hang guards
that only a thing that never happens reaches, never budgets; intervals are 50 ms.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

import statefuse.sync.follower as follower_module
from statefuse import Follower, FollowError, Observed, Origin, Replica, ReplicaError
from statefuse.sync.follower import (
    MAX_BACKOFF_INTERVALS,
    TRANSPORTS,
    Exchange,
    PeerStatus,
    register_transport,
)
from statefuse.sync.http import SyncError, SyncServer, serve

SPACE = "team"
INTERVAL = 0.05
#: Seconds after which a wait for an event fails: a hang guard, however slow the machine.
HANG = 60.0


def eventually(check: Callable[[], object], seconds: float = HANG) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.005)


def _free_url() -> str:
    """A loopback URL nobody listens on (yet): the port is bound, read and released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _followers_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "statefuse-follower"]


@contextmanager
def served(replica: Replica, port: int = 0) -> Iterator[SyncServer]:
    with serve(replica, port=port) as server:
        yield server


class FakeLink:
    """A transport for tests: each sync calls ``step(replica)`` and records when it ran."""

    calls: list[float]

    def __init__(self, step: Callable[[Replica], Exchange]) -> None:
        self.step = step
        self.calls = []

    def sync(self, replica: Replica) -> Exchange:
        self.calls.append(time.monotonic())
        return self.step(replica)

    def close(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[Replica], Exchange]], FakeLink]:
    """Make ``fake://peer`` reach a `FakeLink` running the given step."""

    def install(step: Callable[[Replica], Exchange]) -> FakeLink:
        link = FakeLink(step)
        monkeypatch.setitem(TRANSPORTS, "fake", lambda url, timeout: link)
        return link

    return install


# --- following over HTTP ------------------------------------------------------------------------


def test_a_follower_receives_a_peers_new_claims_and_the_observers_hear_of_them():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    heard: list[Observed] = []
    agent.observe(heard.append)
    with served(hub) as server, agent.follow(server.url, interval=INTERVAL) as follower:
        claim = hub.add_claim("vendor/acme/price", 1150)
        eventually(lambda: claim.claim_id in agent.state().claims)
        (observed,) = [o for o in heard if claim in o]
        assert (observed.origin, observed.source) == (Origin.RECEIVED, server.url)
        mine = agent.add_claim("project/launch/owner", "dana")
        eventually(lambda: mine.claim_id in hub.state().claims)  # pushed too
        eventually(lambda: follower.status.peer(server.url).pushed)  # counted once it returns
        status = follower.status.peer(server.url)
        assert status.ok and status.received >= 1 and status.pushed >= 1
        assert status.last_error is None
    assert not follower.running and _followers_alive() == []
    assert [o.origin for o in heard if mine in o] == [Origin.LOCAL]


def test_stop_returns_at_once_from_the_wait_between_rounds_and_is_idempotent():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    with served(hub) as server:
        follower = agent.follow(server.url, interval=3600)
        eventually(lambda: follower.status.rounds == 1)  # now waiting an hour
        stopper = threading.Thread(target=follower.stop, daemon=True)
        stopper.start()
        stopper.join(HANG)
        assert not stopper.is_alive()  # the wait was ended, not sat out
        follower.stop()
    assert not follower.running and _followers_alive() == []
    with pytest.raises(FollowError) as err:
        follower.sync_now()
    assert err.value.rule == "stopped"


def test_sync_now_runs_a_round_at_once_and_returns_the_status_after_it():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    with served(hub) as server, agent.follow(server.url, interval=60) as follower:
        eventually(lambda: follower.status.rounds == 1)
        claim = hub.add_claim("vendor/acme/price", 1150)
        status = follower.sync_now(timeout=HANG)
        assert claim.claim_id in agent.state().claims
        assert status.rounds >= 2 and status.peer(server.url).ok


def test_a_dead_peer_shows_in_the_status_and_the_loop_recovers_when_it_comes_back():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    url = _free_url()
    with agent.follow([url], interval=INTERVAL) as follower:
        eventually(lambda: follower.status.peer(url).failures >= 2)
        down = follower.status.peer(url)
        assert not down.ok and down.last_success is None and down.last_error_at is not None
        assert down.last_error is not None and url in down.last_error
        assert "\n" not in down.last_error
        claim = hub.add_claim("vendor/acme/price", 1150)
        with served(hub, port=int(url.rsplit(":", 1)[1])):
            eventually(lambda: claim.claim_id in agent.state().claims)
            eventually(lambda: follower.status.peer(url).ok)
        back = follower.status.peer(url)
        assert back.failures == 0 and back.last_error == down.last_error  # kept, not current
    assert _followers_alive() == []


def test_one_dead_peer_does_not_hold_back_the_others_and_news_reaches_every_live_peer():
    a, b, agent = (Replica.memory(space=SPACE) for _ in range(3))
    dead = _free_url()
    with served(a) as sa, served(b) as sb:
        from_b = b.add_claim("vendor/acme/price", 1200)
        with agent.follow([sa.url, dead, sb.url], interval=INTERVAL) as follower:
            eventually(lambda: from_b.claim_id in a.state().claims)  # via agent, same round
            status = follower.status
            assert status.peer(sa.url).ok and status.peer(sb.url).ok
            assert not status.peer(dead).ok


def test_an_https_url_is_followed_and_a_peer_without_tls_is_an_error_in_the_status():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    with served(hub) as server:
        url = server.url.replace("http://", "https://")
        # the server reads the TLS hello as the start of a request and waits for the rest
        with agent.follow(url, interval=INTERVAL, timeout=0.3) as follower:
            eventually(lambda: follower.status.peer(url).failures >= 1)
            assert follower.running  # the loop lives on
            assert url in (follower.status.peer(url).last_error or "")


def test_closing_the_replica_stops_its_followers():
    hub, agent = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    with served(hub) as server:
        follower = agent.follow(server.url, interval=INTERVAL)
        eventually(lambda: follower.status.rounds >= 1)
        agent.close()
        assert not follower.running and _followers_alive() == []


# --- the loop, with a transport of the test's own -----------------------------------------------


def test_a_failing_peer_is_retried_with_a_backoff_that_doubles_up_to_a_cap(fake):
    def refuse(replica: Replica) -> Exchange:
        raise SyncError("url", "unreachable", "cannot reach fake://peer: down")

    link = fake(refuse)
    with Follower(Replica.memory(space=SPACE), "fake://peer", interval=INTERVAL) as follower:
        eventually(lambda: len(link.calls) >= 5)
    gaps = [later - earlier for earlier, later in zip(link.calls, link.calls[1:], strict=False)]
    for k, gap in enumerate(gaps[:4]):
        assert gap >= INTERVAL * min(2**k, MAX_BACKOFF_INTERVALS) * 0.9, gaps
    status = follower.status.peer("fake://peer")
    assert status.failures == status.attempts == len(link.calls)
    assert status.last_error == "cannot reach fake://peer: down"


def test_an_unexpected_exception_of_a_transport_is_kept_as_one_line_and_the_loop_lives_on(
    fake, caplog
):
    def broken(replica: Replica) -> Exchange:
        raise RuntimeError("boom\nsecond line")

    link = fake(broken)
    with Replica.memory(space=SPACE).follow("fake://peer", interval=INTERVAL) as follower:
        eventually(lambda: len(link.calls) >= 2)
        assert follower.running
        assert follower.status.peer("fake://peer").last_error == "RuntimeError: boom second line"
    assert "following fake://peer failed" in caplog.text  # with its traceback, in the log


def test_changes_a_peer_sends_that_fail_verification_are_quarantined_and_counted(fake):
    def garbage(replica: Replica) -> Exchange:
        report = replica.receive([b"not a change"], source="fake://peer")
        return Exchange(fetched=1, merge=report)

    replica = Replica.memory(space=SPACE)
    fake(garbage)
    with replica.follow("fake://peer", interval=INTERVAL) as follower:
        eventually(lambda: follower.status.peer("fake://peer").quarantined >= 1)
        assert follower.status.peer("fake://peer").ok  # the sync itself worked
    assert replica.quarantine() and len(replica) == 0


def test_an_observer_on_the_follower_thread_may_read_write_and_stop_the_follower(fake):
    peer = Replica.memory(space=SPACE)
    peer.add_claim("vendor/acme/price", 1150)

    def fetch(replica: Replica) -> Exchange:
        return Exchange(fetched=1, merge=replica.merge(peer))

    fake(fetch)
    agent = Replica.memory(space=SPACE)
    follower = Follower(agent, "fake://peer", interval=INTERVAL)

    def react(ops: Observed) -> None:
        if ops.origin is Origin.RECEIVED:
            assert agent.state().claims  # the state as of these ops
            agent.add_claim("project/launch/seen", len(ops))  # a write, on the same thread
            follower.stop()  # asks; the thread ends after its round

    agent.observe(react)
    follower.start()
    eventually(lambda: not follower.running)
    follower.stop()
    assert len(agent.state().claims) == 2 and _followers_alive() == []


# --- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("peers", "kwargs", "field", "rule"),
    [
        ("mqtt://127.0.0.1:1883", {}, "peers[0]", "url-scheme"),
        (["http://127.0.0.1:1", "ftp://x"], {}, "peers[1]", "url-scheme"),
        ("127.0.0.1:1", {}, "peers[0]", "url-scheme"),
        ("http://", {}, "peers[0]", "http-url"),
        ([], {}, "peers", "peers"),
        (["http://127.0.0.1:1"] * 2, {}, "peers", "distinct"),
        ("http://127.0.0.1:1", {"interval": 0}, "interval", "seconds"),
        ("http://127.0.0.1:1", {"interval": float("nan")}, "interval", "seconds"),
        ("http://127.0.0.1:1", {"interval": "5"}, "interval", "seconds"),
        ("http://127.0.0.1:1", {"timeout": -1}, "timeout", None),
    ],
)
def test_follow_refuses_bad_arguments_with_a_typed_error_naming_them(peers, kwargs, field, rule):
    replica = Replica.memory(space=SPACE)
    with pytest.raises(SyncError) as err:
        replica.follow(peers, **kwargs)
    assert err.value.field == field
    assert rule is None or err.value.rule == rule
    if rule == "url-scheme":  # the URL is named
        assert isinstance(err.value, FollowError)
        assert (peers if isinstance(peers, str) else peers[-1]) in err.value.message
    assert _followers_alive() == []


def test_a_transport_registered_for_a_scheme_is_used_for_its_urls(monkeypatch):
    monkeypatch.setattr(follower_module, "TRANSPORTS", dict(TRANSPORTS))
    link = FakeLink(lambda replica: Exchange())
    register_transport("Mem", lambda url, timeout: link)
    with Replica.memory(space=SPACE).follow("mem://x", interval=INTERVAL):
        eventually(lambda: link.calls)
    with pytest.raises(FollowError) as err:
        register_transport("1http", lambda url, timeout: link)
    assert err.value.rule == "scheme"


def test_a_closed_replica_cannot_be_followed_and_status_names_unknown_peers():
    replica = Replica.memory(space=SPACE)
    assert PeerStatus("x").ok is False
    with pytest.raises(KeyError):
        Follower(replica, "http://127.0.0.1:1").status.peer("http://elsewhere")
    replica.close()
    with pytest.raises(ReplicaError):
        replica.follow("http://127.0.0.1:1")


def test_closing_the_replica_while_holding_its_lock_does_not_wait_for_a_blocked_follower(fake):
    entered = threading.Event()

    def slow(replica: Replica) -> Exchange:
        entered.set()
        return Exchange(merge=replica.receive([]))  # waits for the lock the closer holds

    fake(slow)
    replica = Replica.memory(space=SPACE)
    with replica.lock:
        follower = replica.follow("fake://peer", interval=INTERVAL)
        assert entered.wait(HANG)
        replica.close()  # returns: it does not join a thread that waits for this lock
    eventually(lambda: not follower.running and _followers_alive() == [])


# --- links that wait (a broker's long-poll) ------------------------------------------------------


class WaitingLink(FakeLink):
    """A `Waiting` fake: ``wait`` blocks on an event that ``news()`` or ``wake()`` sets, and
    records how each wait ended."""

    def __init__(self, step: Callable[[Replica], Exchange]) -> None:
        super().__init__(step)
        self._cond = threading.Condition()
        self._news = False
        self._woken = False
        self.waits: list[str] = []

    def news(self) -> None:
        with self._cond:
            self._news = True
            self._cond.notify_all()

    def wait(self, seconds: float) -> bool:
        with self._cond:
            self._cond.wait_for(lambda: self._news or self._woken, seconds)
            news, woken = self._news, self._woken
            self._news = self._woken = False
        self.waits.append("news" if news else "woken" if woken else "time")
        return news

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify_all()


@pytest.fixture
def waiting(monkeypatch: pytest.MonkeyPatch) -> Callable[[WaitingLink], WaitingLink]:
    """Make ``fake://peer`` reach the given `WaitingLink`."""

    def install(link: WaitingLink) -> WaitingLink:
        monkeypatch.setitem(TRANSPORTS, "fake", lambda url, timeout: link)
        return link

    return install


def test_a_waiting_link_is_synced_when_it_has_news_not_at_the_interval(waiting):
    link = waiting(WaitingLink(lambda replica: Exchange()))
    agent = Replica.memory(space=SPACE)
    with agent.follow("fake://peer", interval=60) as follower:
        eventually(lambda: link.calls)  # the first round
        eventually(lambda: follower.status.rounds == 1)
        link.news()
        eventually(lambda: len(link.calls) == 2)
        link.news()
        eventually(lambda: len(link.calls) == 3)
        assert follower.status.peer("fake://peer").ok


def test_a_local_write_wakes_a_waiting_link_and_a_write_during_a_sync_is_not_left_for_later(
    waiting,
):
    in_sync, release = threading.Event(), threading.Event()

    def step(replica: Replica) -> Exchange:
        if len(link.calls) == 2:  # the sync the first write asked for: hold it
            in_sync.set()
            assert release.wait(HANG)
        return Exchange()

    link = waiting(WaitingLink(step))
    agent = Replica.memory(space=SPACE)
    with agent.follow("fake://peer", interval=60) as follower:
        eventually(lambda: follower.status.rounds == 1)
        agent.add_claim("project/launch/owner", "dana")  # wakes the wait: sync 2
        assert in_sync.wait(HANG)
        agent.add_claim("project/launch/date", "May")  # written while sync 2 runs
        release.set()
        eventually(lambda: len(link.calls) == 3)  # synced again for it, not in 60 s
        assert "woken" in link.waits


def test_a_received_change_does_not_wake_a_waiting_link_and_stop_ends_a_wait_at_once(waiting):
    link = waiting(WaitingLink(lambda replica: Exchange()))
    agent, other = Replica.memory(space=SPACE), Replica.memory(space=SPACE)
    follower = agent.follow("fake://peer", interval=60)
    eventually(lambda: follower.status.rounds == 1)
    other.add_claim("vendor/acme/price", 1150)
    agent.receive(other.change_bytes(other.change_ids()))  # RECEIVED: nothing to publish
    eventually(lambda: follower._waiting is not None)
    assert len(link.calls) == 1
    follower.stop()
    assert not follower.running
    assert link.waits[-1] == "woken"  # ended by the stop, not by its 60 s running out
