"""HTTPS sync (`sync.tls`): a server with a self-signed certificate made by ``cryptography``,
trusted explicitly by the client's CA file, refused with a clear error without it."""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from statefuse.cli import main
from statefuse.sync.client import CAFILE_ENV
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


@pytest.fixture
def served_tls(tmp_path: Path, certificate: tuple[Path, Path]) -> Iterator[tuple[str, Path]]:
    """``statefuse serve --tls-cert --tls-key`` on a closed store in a real process."""
    cert, key = certificate
    store = tmp_path / "root.db"
    assert main(["--store", str(store), "init", "--space", "team", "--mode", "closed"]) == 0
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
        match = re.search(r"at (https://127\.0\.0\.1:\d+), auth members \(Ctrl-C", line)
        assert match, line
        yield match.group(1), store
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        log = proc.stderr.read()
        assert "Signature" not in log and "Traceback" not in log, log


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
