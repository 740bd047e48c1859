"""Following a NATS broker against a real ``nats-server -js``: `Replica.follow` with a nats://
URL, the command line (``statefuse sync nats://…``, ``serve --nats``, ``status --nats``) and the
convergence property of replicas that only meet through the broker.

Waits are deadlines on a condition, never sleeps of a fixed length.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from natsserver import IN_CI, NatsServer, free_port, running

from statefuse.entry.cli import main
from statefuse.sync.replica import Replica

if not IN_CI:
    pytest.importorskip("nats", reason="the JetStream transport needs nats-py (statefuse[nats])")

from statefuse.sync.jetstream import BrokerUnavailableError, JetStreamLink

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    yield from running(tmp_path)


#: Seconds after which a wait for an event fails: a hang guard, however slow the machine.
HANG = 60.0


def eventually(check: Callable[[], object], seconds: float = HANG) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


# --- Replica.follow -------------------------------------------------------------------------------


def test_following_a_broker_carries_a_claim_between_two_replicas_with_its_url_as_the_source(
    server,
):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    sources = []
    b.observe(lambda ops: sources.append(ops.source))
    with a.follow(server.url, interval=0.05) as fa, b.follow(server.url, interval=0.05) as fb:
        claim = a.add_claim("user/ada/city", "Paris")
        eventually(lambda: claim.claim_id in b.state().claims)
        eventually(lambda: fa.status.peer(server.url).outbox == 0)
        mine = fa.status.peer(server.url)
        assert mine.ok and mine.pushed == 1 and mine.last_error is None
        # the claim is in b while fb's round still runs: its status counts it when it ends
        eventually(lambda: fb.status.peer(server.url).received == 1)
        theirs = fb.status.peer(server.url)
        assert theirs.received == 1 and theirs.lag == 0
    assert sources == [server.url]
    assert not fa.running and not fb.running


def test_a_broker_that_is_down_shows_the_outbox_and_the_error_and_it_drains_after_a_restart(
    server,
):
    a = Replica.memory(space="team")
    # a round's 1 s is for the rounds while the broker is down (each is meant to fail); one that
    # ran out of time while it is up is retried: the test waits for a round that ended well
    with a.follow(server.url, interval=0.05, timeout=1) as follower:
        assert follower.sync_now(timeout=HANG).peer(server.url).outbox == 0
        server.kill()
        a.add_claim("user/ada/city", "Paris")
        a.add_claim("user/bob/city", "Rome")
        down = follower.sync_now(timeout=HANG).peer(server.url)
        assert not down.ok and down.outbox == 2 and down.last_error
        server.start()  # same port, same store folder
        eventually(lambda: follower.status.peer(server.url).outbox == 0)
        eventually(lambda: follower.status.peer(server.url).ok)
    b = Replica.memory(space="team")
    with JetStreamLink(b, server.url) as link:
        link.sync_once(timeout=HANG)
    assert b.change_ids() == a.change_ids()


def test_http_and_nats_peers_mix_and_a_broker_link_fills_gaps_from_the_http_ones(server):
    from statefuse.sync.http import serve

    hub = Replica.memory(space="team")
    hub.add_claim("user/ada/city", "Paris")
    a = Replica.memory(space="team")
    with serve(hub) as web, a.follow([server.url, web.url], interval=0.05) as follower:
        eventually(lambda: len(a) == 1)
        link = follower._peers[0].link
        assert link._peers == (web.url,)  # the HTTP peers of the same call
        status = follower.sync_now(timeout=HANG)
        assert status.peer(web.url).outbox is None and status.peer(server.url).outbox == 0


def test_followers_long_poll_a_broker_so_a_burst_of_writes_arrives_long_before_the_interval(
    server,
):
    """With an hour's interval, only the long-poll (news) and the local-write wake can move the
    changes: every claim of a burst (written while the writer's follower is mid-publish) must
    arrive long before it, an idle follower runs no rounds, and a stop ends both waits."""
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    with a.follow(server.url, interval=3600) as fa, b.follow(server.url, interval=3600) as fb:
        fa.sync_now(timeout=HANG)
        fb.sync_now(timeout=HANG)
        idle = fb.status.rounds
        time.sleep(0.3)  # a window in which a polling follower would have run rounds
        assert fb.status.rounds == idle
        claims = [a.add_claim(f"user/u{k}/city", f"town-{k}") for k in range(40)]
        eventually(lambda: all(c.claim_id in b.state().claims for c in claims))
        eventually(lambda: fa.status.peer(server.url).outbox == 0)
        stopper = threading.Thread(target=lambda: (fa.stop(), fb.stop()), daemon=True)
        stopper.start()
        stopper.join(HANG)
        assert not stopper.is_alive()  # the stop ended both waits, not the hour running out
    assert not fa.running and not fb.running


def test_a_poll_cut_by_a_broker_restart_resumes_and_loses_nothing(server):
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    with a.follow(server.url, interval=0.5) as fa, b.follow(server.url, interval=0.5):
        fa.sync_now(timeout=HANG)
        first = a.add_claim("user/ada/city", "Paris")
        eventually(lambda: first.claim_id in b.state().claims)
        server.kill()
        server.start()  # same port, same store: the stream and the consumers survive
        second = a.add_claim("user/bob/city", "Rome")
        eventually(lambda: second.claim_id in b.state().claims)


def test_a_password_in_a_broker_url_is_never_shown():
    url = f"nats://scout:s3cret-pw@127.0.0.1:{free_port()}"
    a = Replica.memory(space="team")
    with a.follow(url, interval=0.05, timeout=1) as follower:
        status = follower.sync_now(timeout=HANG).peer(url)
    assert status.last_error and "s3cret-pw" not in status.last_error
    assert "s3cret-pw" not in repr(follower._peers[0].link)


# --- the command line -----------------------------------------------------------------------------


def _init(path: Path) -> str:
    assert main(["--store", str(path), "init", "--space", "team"]) == 0
    return str(path)


def test_cli_sync_and_status_through_a_broker(tmp_path, server, capsys):
    a, b = _init(tmp_path / "a.db"), _init(tmp_path / "b.db")
    assert main(["--store", a, "claim", "user/ada/city", "Paris"]) == 0
    capsys.readouterr()
    assert main(["--store", a, "status"]) == 0
    assert "SF_team: 1 own change to publish" in capsys.readouterr().out

    assert main(["--store", a, "sync", server.url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Synced with {server.url}: published 1, fetched 1; outbox 0, lag 0;")
    assert main(["--store", b, "--json", "sync", server.url]) == 0
    (peer,) = json.loads(capsys.readouterr().out)["peers"]
    assert (peer["ok"], peer["published"], peer["fetched"], peer["outbox"], peer["lag"]) == (
        True,
        0,
        1,
        0,
        0,
    )
    assert peer["merge"]["accepted"] == 1
    assert main(["--store", b, "--json", "show"]) == 0
    (claim,) = json.loads(capsys.readouterr().out)["claims"]
    assert claim["value"] == "Paris"

    assert main(["--store", b, "--json", "status", "--nats", server.url]) == 0
    status = json.loads(capsys.readouterr().out)
    (broker,) = status["brokers"]
    assert (broker["connected"], broker["lag"], broker["last_error"]) == (True, 0, None)
    assert status["outbox"] == {"SF_team": 0} and status["changes"]["accepted"] == 1

    secret = f"nats://scout:s3cret-pw@127.0.0.1:{free_port()}"
    assert main(["--store", b, "status", "--nats", secret]) == 1
    out, err = capsys.readouterr()
    assert "unreachable" in out and err.startswith("Error: ")
    assert main(["--store", b, "sync", secret, "--timeout", "1"]) == 1
    out2, err2 = capsys.readouterr()
    assert "scout:***@" in err2
    assert "s3cret-pw" not in out + err + out2 + err2


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_serve_nats_follows_until_sigint_and_exits_zero(tmp_path, server):
    a, b = _init(tmp_path / "a.db"), _init(tmp_path / "b.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--store", b, "serve", "--nats", server.url, "--interval", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "statefuse", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it, whatever the test runner's disposition: a process
        # started with SIGINT ignored (a suite run in a script's background) keeps ignoring it
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(f"Following {server.url} for space 'team'")
        assert main(["--store", a, "claim", "user/ada/city", "Paris"]) == 0
        assert main(["--store", a, "sync", server.url]) == 0

        def arrived() -> bool:
            with Replica.open(b, readonly=True) as reader:
                return len(reader.state().claims) == 1

        eventually(arrived)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert f"{server.url}: received 1, sent 0; outbox 0" in out
    assert err.strip().endswith("Stopped.") and "Traceback" not in err


def test_stopping_serve_nats_while_the_broker_is_down_prints_no_traceback(tmp_path, server):
    a, b = _init(tmp_path / "a.db"), _init(tmp_path / "b.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["--store", b, "serve", "--nats", server.url, "--interval", "0.05"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "statefuse", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it, whatever the test runner's disposition: a process
        # started with SIGINT ignored (a suite run in a script's background) keeps ignoring it
        preexec_fn=_default_sigint,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(f"Following {server.url} for space 'team'")
        assert main(["--store", a, "claim", "user/ada/city", "Paris"]) == 0
        assert main(["--store", a, "sync", server.url]) == 0
        received = proc.stdout.readline()  # connected, subscribed, and one change taken in
        assert received.startswith(f"{server.url}: received 1"), received
        server.kill()
        said = proc.stderr.readline()  # the broker going away is told before we stop
        assert said.startswith("Error: ") and server.url in said, said
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert err == "Stopped.\n"


# --- convergence ----------------------------------------------------------------------------------

N = 3
_spaces = itertools.count()

steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, N - 1), st.integers(0, 3), st.integers(0, 9)),
        st.tuples(st.sampled_from(["sync", "disconnect", "restart"]), st.integers(0, N - 1)),
        st.tuples(st.just("broker"), st.just(0)),
    ),
    max_size=20,
)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    yield from running(tmp_path_factory.mktemp("nats"))


@settings(
    max_examples=min(settings.default.max_examples, 10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(program=steps)
def test_replicas_linked_through_a_broker_converge_whatever_the_writes_disconnects_and_restarts(
    shared_server, program
):
    broker = shared_server
    if broker.proc is None or broker.proc.poll() is not None:
        broker.start()
    space = f"conv{next(_spaces)}"  # a stream of its own for each example
    replicas = [Replica.memory(space=space) for _ in range(N)]

    def link(r: Replica) -> JetStreamLink:
        return JetStreamLink(r, broker.url, connect_timeout=HANG)

    links = [link(r) for r in replicas]
    written: set[bytes] = set()
    try:
        for step, who, *rest in program:
            if step == "write":
                key, value = rest
                replicas[who].add_claim(f"user/u{key}/city", value)
                written.update(replicas[who].change_ids())
            elif step == "sync":
                up = broker.proc is not None and broker.proc.poll() is None
                try:
                    # up: a hang guard; down: the round is meant to fail, and soon
                    links[who].sync_once(timeout=HANG if up else 0.3)
                except BrokerUnavailableError:
                    assert not up
            elif step == "disconnect":
                links[who].stop()  # the next sync reconnects
            elif step == "restart":
                links[who].stop()
                links[who] = link(replicas[who])  # the store's marks and consumer remain
            elif broker.proc is not None and broker.proc.poll() is None:
                broker.kill()
            else:
                broker.start()
        if broker.proc is None or broker.proc.poll() is not None:
            broker.start()
        for _ in range(2):  # everyone publishes, then everyone takes in the rest
            for each in links:
                each.sync_once(timeout=HANG)
        expected = sorted(written)
        for r, each in zip(replicas, links, strict=True):
            assert sorted(r.change_ids()) == expected
            assert r.state().digest() == replicas[0].state().digest()
            assert each.status().outbox == 0
    finally:
        for each in links:
            each.stop()


def test_a_redaction_is_published_at_once_like_a_claim_not_at_the_next_round(server):
    """A redaction holds no memory op, so no observer hears of it: the follower is woken for it
    all the same (rounds an hour apart: only that wake can carry it within the hang guard)."""
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    with a.follow(server.url, interval=3600), b.follow(server.url, interval=3600):
        claim = a.add_claim("svc/billing/api_key", "sk-live-0000")
        eventually(lambda: claim.claim_id in b.state().claims)
        a.redact(claim=claim.op_id, reason="leaked")
        eventually(lambda: claim.op_id in b.redactions().redacted)
        assert claim.claim_id not in b.state().claims
        assert all(op.op_id != claim.op_id for c in b.log.changes() for op in c.ops)
