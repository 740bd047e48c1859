"""Whom a client pushes to: a server proves its author key in every answer, and a client of a
closed space pushes only to a server whose proven author its replica admits now.

Real processes on 127.0.0.1: stores made with the CLI (``init``, ``keys admit``, ``keys
revoke``, ``claim``), served by ``statefuse serve`` in a subprocess (plain HTTP and HTTPS with a
certificate made here), synced by ``statefuse sync`` in another. The forged-proof server is a
real waitress server in this process around a real `SyncApp`, with its proof headers removed or
altered on the way out.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from statefuse.sync.auth import (
    request_challenge,
    response_message,
    sign_response,
    verify_response,
)
from statefuse.sync.http import ServerIdentityError, SyncApp, SyncServer, serve, sync_with
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica
from tests.serving import served

ROOT = Path(__file__).resolve().parents[1]
SECRET = "s3cret-after-the-revocation"


def run(path: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``statefuse --store PATH ARGV...`` in a new process."""
    done = subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(path), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if check:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def author(path: Path) -> str:
    return SigningKey.load(f"{path}.key").author.hex()


def change_ids(path: Path) -> list[bytes]:
    replica = Replica.open(path)
    try:
        return replica.change_ids()
    finally:
        replica.close()


@dataclass(frozen=True)
class Team:
    """A closed space: ``root`` admitted ``m1`` and ``m2``, both synced with it, then revoked
    ``m2`` and wrote `SECRET`; ``m1`` has synced since (it holds the revocation and the secret),
    ``m2`` has not."""

    root: Path
    m1: Path
    m2: Path


@pytest.fixture
def team(tmp_path: Path) -> Team:
    t = Team(tmp_path / "root.db", tmp_path / "m1.db", tmp_path / "m2.db")
    run(t.root, "init", "--space", "team", "--mode", "closed")
    for member in (t.m1, t.m2):
        run(member, "init", "--space", "team", "--mode", "closed", "--root", author(t.root))
        run(t.root, "keys", "admit", author(member))
    run(t.m1, "claim", "team/m1/note", '"from m1"')
    with served(t.root) as url:
        run(t.m1, "sync", url)
        run(t.m2, "sync", url)
    run(t.root, "keys", "revoke", author(t.m2))
    run(t.root, "claim", "team/plan/secret", json.dumps(SECRET))
    with served(t.root) as url:
        run(t.m1, "sync", url)
    assert SECRET in run(t.m1, "show").stdout
    assert SECRET not in run(t.m2, "show").stdout
    return t


def refused(done: subprocess.CompletedProcess[str], url: str, *words: str) -> None:
    """A sync that failed with one ``Error:`` line naming ``url`` and ``words``, nothing else."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {url} "), done.stderr
    assert "nothing was pushed" in lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])


# --- a closed space ------------------------------------------------------------------------------


def test_a_revoked_members_server_gets_nothing(team: Team):
    before = change_ids(team.m2)
    with served(team.m2) as url:
        done = run(team.m1, "sync", url, check=False)
        refused(done, url, author(team.m2)[:16], "revoked", "'team'")
    assert SECRET not in run(team.m2, "show").stdout
    assert change_ids(team.m2) == before  # nothing was pushed


def test_a_revoked_members_server_over_https_gets_nothing(team: Team, tmp_path: Path):
    cert, key = certificate(tmp_path)
    before = change_ids(team.m2)
    with served(team.m2, "--tls-cert", str(cert), "--tls-key", str(key)) as url:
        assert url.startswith("https://")
        done = run(team.m1, "sync", url, "--cafile", str(cert), check=False)
        refused(done, url, author(team.m2)[:16], "revoked")
    assert SECRET not in run(team.m2, "show").stdout
    assert change_ids(team.m2) == before


def test_a_never_admitted_stranger_serving_with_auth_open_gets_nothing(team: Team, tmp_path: Path):
    stranger = tmp_path / "stranger.db"
    run(stranger, "init", "--space", "team", "--mode", "closed", "--root", author(team.root))
    with served(stranger, "--auth", "open") as url:
        done = run(team.m1, "sync", url, check=False)
        refused(done, url, author(stranger)[:16], "never admitted")
    assert SECRET not in run(stranger, "show").stdout
    assert change_ids(stranger) == []


def test_an_admitted_members_server_still_syncs_both_ways_and_names_its_author(team: Team):
    run(team.root, "claim", "team/plan/next", '"from root"')
    run(team.m1, "claim", "team/m1/later", '"m1 again"')
    with served(team.m1) as url:
        done = run(team.root, "--json", "sync", url)
    (peer,) = json.loads(done.stdout)["peers"]
    assert (peer["ok"], peer["fetched"], peer["pushed"]) == (True, 1, 1)
    assert peer["server_author"] == author(team.m1)
    assert "from root" in run(team.m1, "show").stdout
    assert "m1 again" in run(team.root, "show").stdout


def test_the_root_revoking_a_server_between_two_syncs_stops_the_second_push(team: Team):
    """The check reads the client's trust now: the same server, fine before, gets nothing once
    the client has seen its author's revocation."""
    run(team.root, "claim", "team/plan/first", '"one"')
    with served(team.m1) as url:
        assert json.loads(run(team.root, "--json", "sync", url).stdout)["peers"][0]["ok"]
        run(team.root, "keys", "revoke", author(team.m1))
        run(team.root, "claim", "team/plan/second", json.dumps("two after m1 left"))
        done = run(team.root, "sync", url, check=False)
        refused(done, url, "revoked")
    shown = run(team.m1, "show").stdout
    assert '"one"' in shown and "two after m1 left" not in shown


# --- an open space -------------------------------------------------------------------------------


def test_an_open_space_syncs_with_any_server_as_before_and_names_its_author(tmp_path: Path):
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    for path, value in ((ours, "1150"), (theirs, "1200")):
        run(path, "init", "--space", "team")
        run(path, "claim", "vendor/acme/price", value)
    with served(theirs) as url:
        (peer,) = json.loads(run(ours, "--json", "sync", url).stdout)["peers"]
    assert (peer["ok"], peer["fetched"], peer["pushed"]) == (True, 1, 1)
    assert peer["server_author"] == author(theirs)
    assert "1150" in run(theirs, "show").stdout


# --- a server whose proof is missing or forged ---------------------------------------------------


Headers = list[tuple[str, str]]
#: ``change(status, headers, environ, body)`` -> the headers the client gets instead.
Change = Callable[[str, Headers, dict[str, Any], bytes], Headers]


def _tampered(app: SyncApp, change: Change, paths: list[str]) -> Callable[..., list[bytes]]:
    """``app`` with the headers of every answer passed through ``change``; the path of every
    request is appended to ``paths``."""

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        paths.append(environ["PATH_INFO"])
        caught: list[Any] = []
        body = b"".join(app(environ, lambda status, headers, *_: caught.extend((status, headers))))
        status, headers = caught
        start_response(status, change(status, headers, environ, body))
        return [body]

    return wsgi


def _untouched(status: str, headers: Headers, environ: dict[str, Any], body: bytes) -> Headers:
    return headers


def _without_proof(status: str, headers: Headers, environ: dict[str, Any], body: bytes) -> Headers:
    return [(k, v) for k, v in headers if not k.startswith("StateFuse-Server-")]


def _flipped_signature(
    status: str, headers: Headers, environ: dict[str, Any], body: bytes
) -> Headers:
    out = []
    for k, v in headers:
        if k == "StateFuse-Server-Signature":
            v = ("0" if v[0] != "0" else "1") + v[1:]
        out.append((k, v))
    return out


def _signed_by_another_key(
    status: str, headers: Headers, environ: dict[str, Any], body: bytes
) -> Headers:
    """Names the served (root) author, and signs the right message for this very request and
    answer with another key: what a server without the root's key could do at best."""
    named = dict(headers)
    message = response_message(
        space="team",
        server=bytes.fromhex(named["StateFuse-Server"]),
        endpoint=environ["PATH_INFO"],
        status=int(status.split()[0]),
        challenge=request_challenge(
            {
                k[5:].lower().replace("_", "-"): v
                for k, v in environ.items()
                if k in ("HTTP_STATEFUSE_NONCE", "HTTP_STATEFUSE_CHALLENGE")
            }
        ),
        body=body,
    )
    forged = SigningKey.generate().sign(message).hex()
    return [(k, forged if k == "StateFuse-Server-Signature" else v) for k, v in headers]


@pytest.mark.parametrize(
    "change",
    [_without_proof, _flipped_signature, _signed_by_another_key],
    ids=["missing", "altered", "forged"],
)
def test_a_server_whose_proof_is_missing_or_forged_gets_nothing(team: Team, change):
    """The root's own store, served with its proof stripped or forged on the way out: the
    member refuses to push to it, however admitted the author it would name."""
    run(team.m1, "claim", "team/m1/unsent", json.dumps("never leaves m1"))
    root = Replica.open(team.root)
    paths: list[str] = []
    try:
        before = root.change_ids()
        with SyncServer(_tampered(SyncApp(root), change, paths)) as server:
            done = run(team.m1, "sync", server.url, check=False)
        refused(done, server.url, "does not prove its author key")
        assert root.change_ids() == before
    finally:
        root.close()
    # the first signed reconcile message went out, then nothing: no fetch, no push
    assert paths and set(paths) == {"/v1/reconcile"}
    assert "never leaves m1" not in run(team.root, "show").stdout


def test_the_same_server_with_its_proof_intact_gets_the_change(team: Team):
    """The control for the test above: the same in-process server, untouched, is pushed to."""
    run(team.m1, "claim", "team/m1/sent", json.dumps("reaches the root"))
    root = Replica.open(team.root)
    try:
        with SyncServer(_tampered(SyncApp(root), _untouched, [])) as server:
            (peer,) = json.loads(run(team.m1, "--json", "sync", server.url).stdout)["peers"]
    finally:
        root.close()
    assert (peer["ok"], peer["pushed"], peer["server_author"]) == (True, 1, author(team.root))
    assert "reaches the root" in run(team.root, "show").stdout


# --- followers and the library -------------------------------------------------------------------


def test_a_follower_of_a_revoked_members_server_pushes_nothing_and_keeps_the_error(team: Team):
    m1, m2 = Replica.open(team.m1), Replica.open(team.m2)
    try:
        before = m2.change_ids()
        with serve(m2) as server, m1.follow(server.url, interval=3600) as follower:
            status = follower.sync_now(timeout=60).peer(server.url)
        assert (status.ok, status.pushed, status.received) == (False, 0, 0)
        assert status.last_error is not None and "revoked in space 'team'" in status.last_error
        assert m2.change_ids() == before
        with serve(m2) as server, pytest.raises(ServerIdentityError) as caught:
            sync_with(m1, server.url)
        assert (caught.value.rule, caught.value.field) == ("server-not-a-member", "server")
    finally:
        m1.close()
        m2.close()


def test_a_proof_binds_the_space_server_endpoint_status_challenge_and_body():
    key = SigningKey.generate()
    asked = {
        "space": "team",
        "server": bytes(16),
        "endpoint": "/v1/reconcile",
        "status": 200,
        "challenge": bytes(range(16)),
        "body": b"answer",
    }
    proof: dict[str, str | None] = dict(sign_response(key, **asked))  # type: ignore[arg-type]
    assert verify_response(proof, **asked) == key.author  # type: ignore[arg-type]
    for name, other in [
        ("space", "elsewhere"),
        ("server", bytes([1]) * 16),
        ("endpoint", "/v1/push"),
        ("status", 401),
        ("challenge", bytes(16)),
        ("body", b"another answer"),
    ]:
        with pytest.raises(ServerIdentityError) as caught:
            verify_response(proof, **{**asked, name: other})  # type: ignore[arg-type]
        assert caught.value.rule == "server-identity-unproven"
    with pytest.raises(ServerIdentityError, match="carries no proof"):
        verify_response({}, **asked)  # type: ignore[arg-type]


# --- helpers -------------------------------------------------------------------------------------


def certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, and its key (PEM files in ``folder``)."""
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
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
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
