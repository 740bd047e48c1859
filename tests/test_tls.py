"""HTTPS sync (`sync.tls`): a server with a self-signed certificate made by ``cryptography``,
trusted explicitly by the client's CA file, refused with a clear error without it."""

from __future__ import annotations

import contextlib
import datetime
import http.client
import ipaddress
import json
import re
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from statefuse.entry.cli import main
from statefuse.sync.client import CAFILE_ENV
from statefuse.sync.guard import ServerLimits
from statefuse.sync.http import (
    PeerUnreachableError,
    SyncError,
    TLSSyncServer,
    serve,
    sync_with,
)
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key (PEM files)."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_closed_space_members_sync_over_https_with_the_servers_certificate_trusted(certificate):
    cert, key = certificate
    root = Replica.memory(space="team", mode="closed")
    member = Replica.memory(space="team", mode="closed", root=root.author)
    root.admit(member.author)
    member.add_claim("vendor", "acme", "price", 1150)
    with serve(root, tls=(cert, key)) as server:
        assert isinstance(server, TLSSyncServer) and server.url.startswith("https://127.0.0.1:")
        report = sync_with(member, server.url, cafile=cert)
    assert (report.fetched, report.pushed) == (1, 1)
    assert root.state().digest() == member.state().digest()


def test_without_the_ca_file_the_certificate_is_refused_naming_tls_verification(
    certificate, monkeypatch
):
    cert, key = certificate
    monkeypatch.delenv(CAFILE_ENV, raising=False)
    hub = Replica.memory(space="team")
    with serve(hub, tls=(cert, key)) as server:
        with pytest.raises(PeerUnreachableError) as refused:
            sync_with(Replica.memory(space="team"), server.url)
        monkeypatch.setenv(CAFILE_ENV, str(cert))
        assert sync_with(Replica.memory(space="team"), server.url).round_trips == 1
    assert refused.value.rule == "tls-verify"
    message = str(refused.value)
    assert "TLS verification" in message and "\n" not in message and "cafile" in message


def test_a_certificate_or_key_that_does_not_load_is_a_typed_error(certificate, tmp_path):
    cert, key = certificate
    with pytest.raises(SyncError) as missing:
        serve(Replica.memory(space="team"), tls=(tmp_path / "none.pem", key))
    with pytest.raises(SyncError) as mismatched:
        serve(Replica.memory(space="team"), tls=(key, cert))
    assert missing.value.rule == mismatched.value.rule == "tls"
    with pytest.raises(SyncError) as bad_ca:
        sync_with(Replica.memory(space="team"), "https://127.0.0.1:1", cafile=tmp_path / "x")
    assert bad_ca.value.rule == "cafile"


@contextlib.contextmanager
def _serving_tls(
    store: Path, cert: Path, key: Path, log: list[str]
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``statefuse serve --tls-cert --tls-key`` on ``store`` in a real process: its URL; its
    stderr is appended to ``log`` once it stopped (SIGTERM, which waits for every request)."""
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "statefuse", "--store", str(store), "serve",
            "--tls-cert", str(cert), "--tls-key", str(key),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"at (https://127\.0\.0\.1:\d+), auth \w+ \(Ctrl-C", line)
        assert match, line
        yield match.group(1), proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        assert proc.stderr is not None
        log.append(proc.stderr.read())


@pytest.fixture
def served_tls(tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[tuple[str, Path]]:
    """``statefuse serve --tls-cert --tls-key`` on a closed store in a real process."""
    cert, key = certificate
    store = tmp_path / "root.db"
    assert main(["--store", str(store), "init", "--space", "team", "--mode", "closed"]) == 0
    log: list[str] = []
    try:
        with _serving_tls(store, cert, key, log) as (url, _):
            yield url, store
    finally:
        assert log and "Signature" not in log[0] and "Traceback" not in log[0], log


def test_the_cli_serves_https_and_syncs_with_a_ca_file_printing_no_secret(
    served_tls, tmp_path, capsys, certificate
):
    url, root_store = served_tls
    cert, _ = certificate
    member = tmp_path / "member.db"
    with Replica.open(root_store, readonly=True) as root:
        root_hex = root.author.hex()
    assert main(["--store", str(member), "init", "--space", "team", "--mode", "closed",
                 "--root", root_hex]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["--store", str(member), "sync", url]) == 1  # no CA file: refused
    refused = capsys.readouterr().err
    assert refused.startswith("Error: TLS verification of ") and refused.count("\n") == 1
    assert main(["--store", str(member), "--json", "sync", url, "--cafile", str(cert)]) == 1
    (peer,) = json.loads(capsys.readouterr().out)["peers"]
    assert (peer["ok"], peer["rule"]) == (False, "not-a-member")  # not admitted yet
    with Replica.open(member, readonly=True) as m:
        seed = m.key._private.private_bytes_raw().hex() if m.key is not None else "-"
        member_hex = m.author.hex()
    assert seed not in refused and seed not in peer["error"]
    assert member_hex[:16] in peer["error"]


GUARD = 60.0  # hang guard only: every wait ends on an event long before


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_clients_that_hang_up_during_the_handshake_or_a_request_leave_no_traceback(
    tmp_path, certificate
):
    cert, key = certificate
    store = tmp_path / "hub.db"
    assert main(["--store", str(store), "init", "--space", "team"]) == 0
    context = ssl.create_default_context(cafile=str(cert))
    log: list[str] = []
    with _serving_tls(store, cert, key, log) as (url, _):
        port = _port(url)
        for _ in range(10):
            with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as raw:
                raw.sendall(_client_hello()[:40])  # half a ClientHello, then gone
            for sent in (
                b"",  # the handshake done, nothing else
                b"POST /v1/push HTTP/1.1\r\nHost: x\r\n",  # half the headers
                b"POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 9000\r\n\r\nabc",
            ):
                tls = context.wrap_socket(
                    socket.create_connection(("127.0.0.1", port), timeout=GUARD),
                    server_hostname="127.0.0.1",
                )
                tls.sendall(sent)
                tls.close()  # no close_notify: an EOF "in violation of protocol"
        # an honest request still gets its answer, then the server stops (waiting for all)
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=GUARD, context=context)
        conn.request("GET", "/v1/info")
        assert conn.getresponse().status == 200
        conn.close()
    (stderr,) = log
    assert "Traceback" not in stderr and "SSLEOFError" not in stderr, stderr
    assert stderr.strip().splitlines() == ["Stopped."], stderr


def test_a_missing_tls_certificate_or_key_file_is_one_error_naming_the_option_and_path(
    tmp_path, certificate, capsys
):
    cert, key = certificate
    store = tmp_path / "hub.db"
    assert main(["--store", str(store), "init", "--space", "team"]) == 0
    capsys.readouterr()
    missing = tmp_path / "nowhere" / "cert.pem"
    assert main(["--store", str(store), "serve", "--tls-cert", str(missing),
                 "--tls-key", str(key)]) == 1  # fmt: skip
    assert capsys.readouterr().err == f"Error: --tls-cert: no such file: {missing}\n"
    assert main(["--store", str(store), "serve", "--tls-cert", str(cert),
                 "--tls-key", str(missing)]) == 1  # fmt: skip
    assert capsys.readouterr().err == f"Error: --tls-key: no such file: {missing}\n"
    assert main(["--store", str(store), "serve", "--tls-cert", str(cert)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: --tls-cert needs --tls-key") and err.count("\n") == 1


def _client_hello() -> bytes:
    """The first flight of a TLS client: a ClientHello record."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def test_https_ends_trickled_handshakes_headers_and_bodies_at_their_deadline(certificate):
    cert, key = certificate
    hub, member = Replica.memory(space="team"), Replica.memory(space="team")
    member.add_claim("vendor", "acme", "price", 1150)
    hello = _client_hello()
    context = ssl.create_default_context(cafile=str(cert))
    limits = ServerLimits(header_timeout=1.5, body_timeout=1.5, min_body_rate=1 << 20)
    # The socket timeout (which also ends a handshake) is far away: only the deadline can act.
    with serve(hub, tls=(cert, key), limits=limits, timeout=2 * GUARD) as server:
        # 20 handshakes from one client, one byte at a time (each byte would restart an idle
        # timer); 16 are let in, 4 refused at once.
        hellos = [
            socket.create_connection(
                ("127.0.0.1", server.port), timeout=GUARD, source_address=("127.0.0.2", 0)
            )
            for _ in range(20)
        ]
        heads = []
        for k in range(4):  # from another client: handshake done, headers or a body trickled
            tls = context.wrap_socket(
                socket.create_connection(
                    ("127.0.0.1", server.port), timeout=GUARD, source_address=("127.0.0.3", 0)
                ),
                server_hostname="127.0.0.1",
            )
            tls.sendall(
                b"GET /v1/info HTTP/1.1\r\nHost: x\r\n"
                if k % 2
                else b"POST /v1/push HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
            )
            heads.append(tls)
        sockets: list[socket.socket] = [*hellos, *heads]
        drips = [hello] * len(hellos) + [b"x", b"X-Slow: 1\r\n"] * 2
        closed: set[int] = set()
        all_closed = threading.Event()

        def trickle() -> None:  # the only thread using these sockets: TLS ones are not shared
            step = 0
            while not all_closed.wait(0.3):
                for k, sock in enumerate(sockets):
                    if k in closed:
                        continue
                    try:
                        drip = drips[k]
                        sock.send(drip[step : step + 1] if drip is hello else drip)
                    except OSError:  # reset, or a broken pipe: the server closed it
                        closed.add(k)
                step += 1
                if len(closed) == len(sockets):
                    all_closed.set()

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            assert all_closed.wait(GUARD), f"{len(sockets) - len(closed)} still open"
            report = sync_with(member, server.url, cafile=cert, timeout=GUARD)
        finally:
            all_closed.set()
            thread.join(GUARD)
            for sock in sockets:
                sock.close()
    assert report.pushed == 1 and hub.state().digest() == member.state().digest()
