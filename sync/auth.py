"""Who is asking: signed sync requests, and which requests a server lets through.

A client proves it holds an author key by signing every request it sends. The signature covers
the space, the server it was meant for, the endpoint, the body and a time and a nonce, so a
captured request cannot be sent again (to this server within the window: the nonce was seen; to
another server, for another space or endpoint, or with another body: the signature no longer
verifies; later: its time left the window).

Request headers (all five, or none for an unsigned request)::

    StateFuse-Author     64 hex digits: the author id (the Ed25519 public key)
    StateFuse-Server     32 hex digits: the id of the server it is meant for (every answer of
                         a server carries it in its own StateFuse-Server header)
    StateFuse-Time       the client's clock, unix milliseconds, decimal
    StateFuse-Nonce      32 hex digits: 16 random bytes, never used twice
    StateFuse-Signature  128 hex digits: Ed25519 over the message below

Signed message, the sync framing (`sync.protocol.encode_frames`) of eight frames::

    b"statefuse/request/v1", space (UTF-8), server id (16 bytes), method (b"POST"),
    endpoint path (b"/v1/push"; without any proxy prefix), blake3(body) (32 bytes),
    time (decimal ASCII), nonce (16 bytes)

A server accepts a signature when the headers are well formed (else 401 rule ``auth-header``),
name this server (401 ``server-identity``: the client learns the right id from the answer and
signs again), carry a time within ``window`` of the server's clock (401 ``clock-window``), and
verify (401 ``signature``); then, if the request is allowed at all (`AuthMode`; 403
``not-a-member``), its (author, nonce) must be new (401 ``replay``).

Nonces, per signing key. A nonce is remembered until its request's time leaves the window (up
to twice the window for a request dated ahead). Each author key has its own bucket of at most
``max_nonces_per_key`` (`MAX_NONCES_PER_KEY`) live nonces: a key that sends more is answered
429 (rule ``key-busy``) until its own nonces expire, and no other key notices. One shared table
(the old design) let a single self-made key fill it and lock out every honest peer.

How many keys are tracked, and what a flood of self-made keys costs, depends on the mode:

- ``members``: only the root and admitted authors reach `consume` (the server checks membership
  first), so a stranger's valid signature spends nothing and the keys are as many as the
  members. At most ``max_keys`` (`MAX_KEYS`) are tracked at once; a new one takes the place of
  a bucket whose every nonce has expired, never of a live one, so replays stay refused for every
  member. Only when ``max_keys`` members all hold live nonces is a new one answered 503
  ``busy``.
- ``open`` and ``signed``: anyone can make keys, so no bound on keys can both keep every nonce
  and never refuse an honest newcomer. Here a replay grants nothing: the mode lets any key (in
  ``open`` even no key) send the same request, and changes carry their own signatures. So the
  gate never refuses a key for others' sake: past ``max_nonces`` (`MAX_NONCES`) in all, or
  ``max_keys`` keys, it forgets the buckets of the least recently active keys (their nonces
  could then be replayed, which these modes allow anyway in another form). Memory stays bounded
  by ``max_nonces`` and ``max_keys``; a key's own flood still hits only its own budget.

Invariant: in ``members`` mode (the gate's ``auth``), `RequestGate.consume` refuses every
(author, nonce) it has accepted before, for as long as a request carrying it could pass the
time check; in every mode a key is refused for being busy only by its own nonces, or (members
mode only) when ``max_keys`` members are all busy at once.

Server proof (every answer, of every endpoint and status, of a server whose replica holds its
author key; a server opened without its key sends neither header)::

    StateFuse-Server-Author     64 hex digits: the served replica's author id
    StateFuse-Server-Signature  128 hex digits: Ed25519 over the message below

Signed response message, the sync framing of seven frames::

    b"statefuse/response/v1", space (UTF-8), server id (16 bytes, the StateFuse-Server
    header of the same answer), endpoint path (b"/v1/reconcile"), status (decimal ASCII,
    b"200"), challenge (16 bytes, or empty), blake3(body) (32 bytes)

The challenge is the request's StateFuse-Nonce (a signed request), else its
``StateFuse-Challenge`` header (32 hex digits: 16 random bytes an unsigned client may send),
else empty. A client that sent a fresh challenge and gets a signature that verifies for it
knows the answer was made now, for this request, by a holder of that author key: a recorded
answer or one made for another space, server, endpoint or body does not verify. The server id
is a store id and proves nothing by itself; the author is what a client checks
(`verify_response`; `sync.client` pushes a closed space's changes only to a server whose proven
author its replica admits).
"""

from __future__ import annotations

import heapq
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import blake3

from statefuse.sync.key import PublicKeyError, SigningKey, verify_signature
from statefuse.sync.protocol import ServerIdentityError, SyncError, encode_frames

__all__ = [
    "CHALLENGE_HEADER",
    "DEFAULT_WINDOW",
    "HEADERS",
    "MAX_KEYS",
    "MAX_NONCES",
    "MAX_NONCES_PER_KEY",
    "NONCE_BYTES",
    "REQUEST_DOMAIN",
    "RESPONSE_DOMAIN",
    "RESPONSE_HEADERS",
    "AuthMode",
    "RequestGate",
    "Signed",
    "request_challenge",
    "request_message",
    "response_message",
    "sign_request",
    "sign_response",
    "verify_response",
]

#: First frame of every signed request message.
REQUEST_DOMAIN = b"statefuse/request/v1"
#: First frame of every signed response message (a server's proof of its author key).
RESPONSE_DOMAIN = b"statefuse/response/v1"
#: The request header an unsigned client may send as the challenge a response signs.
CHALLENGE_HEADER = "StateFuse-Challenge"
#: The response headers of a server's proof, in the order of the module docstring.
RESPONSE_HEADERS = ("StateFuse-Server-Author", "StateFuse-Server-Signature")
#: Seconds a request's time may differ from the server's clock, either way.
DEFAULT_WINDOW = 120.0
#: Length of a request nonce.
NONCE_BYTES = 16
#: Length of a server id (a store id).
SERVER_ID_BYTES = 16
#: (author, nonce) pairs a server remembers at most, all keys together (``open`` and
#: ``signed`` mode; in ``members`` mode the bound is `MAX_KEYS` x `MAX_NONCES_PER_KEY`).
MAX_NONCES = 100_000
#: Live nonces one signing key may hold: about 17 requests a second for the whole window, far
#: above what a syncing peer sends (a sync is a few requests; a 300 MB first sync, ~100).
MAX_NONCES_PER_KEY = 2_048
#: Signing keys tracked at once.
MAX_KEYS = 1_024
#: The request headers, in the order of the module docstring.
HEADERS = (
    "StateFuse-Author",
    "StateFuse-Server",
    "StateFuse-Time",
    "StateFuse-Nonce",
    "StateFuse-Signature",
)

_HEX = {
    "StateFuse-Author": re.compile(r"[0-9a-f]{64}"),
    "StateFuse-Server": re.compile(r"[0-9a-f]{32}"),
    "StateFuse-Time": re.compile(r"[0-9]{1,16}"),
    "StateFuse-Nonce": re.compile(r"[0-9a-f]{32}"),
    "StateFuse-Signature": re.compile(r"[0-9a-f]{128}"),
}


class AuthMode(Enum):
    """Which requests a server answers.

    ``open``: every request, signed or not (a signature, when present, must still verify and
    not be replayed). ``signed``: requests signed by any author key. ``members``: requests
    signed by the space's root or an admitted author that is not revoked (as the served
    replica's trust decides when the request arrives); the default for closed spaces.
    """

    OPEN = "open"
    SIGNED = "signed"
    MEMBERS = "members"


@dataclass(frozen=True, slots=True)
class Signed:
    """A request whose signature verified: who signed it, and the nonce it spent."""

    author: bytes
    nonce: bytes
    time_ms: int


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def request_message(
    *,
    space: str,
    server: bytes,
    method: str,
    endpoint: str,
    body: bytes,
    time_ms: int,
    nonce: bytes,
) -> bytes:
    """The bytes a request's signature covers (see the module docstring)."""
    return encode_frames(
        [
            REQUEST_DOMAIN,
            space.encode(),
            server,
            method.encode("ascii"),
            endpoint.encode("ascii"),
            blake3.blake3(body).digest(),
            str(time_ms).encode("ascii"),
            nonce,
        ]
    )


def sign_request(
    key: SigningKey,
    *,
    space: str,
    server: bytes,
    method: str,
    endpoint: str,
    body: bytes,
    time_ms: int | None = None,
    nonce: bytes | None = None,
) -> dict[str, str]:
    """The headers that sign one request with ``key`` (now, a fresh random nonce, unless given)."""
    when = _wall_ms() if time_ms is None else time_ms
    once = os.urandom(NONCE_BYTES) if nonce is None else nonce
    message = request_message(
        space=space,
        server=server,
        method=method,
        endpoint=endpoint,
        body=body,
        time_ms=when,
        nonce=once,
    )
    return {
        "StateFuse-Author": key.author.hex(),
        "StateFuse-Server": server.hex(),
        "StateFuse-Time": str(when),
        "StateFuse-Nonce": once.hex(),
        "StateFuse-Signature": key.sign(message).hex(),
    }


@dataclass(slots=True)
class _Bucket:
    """One author key's live nonces, and when each expires (a heap)."""

    seen: set[bytes] = field(default_factory=set)
    expiry: list[tuple[int, bytes]] = field(default_factory=list)
    #: When its last nonce expires: the bucket holds nothing live after it.
    last: int = 0


class RequestGate:
    """A server's check of request signatures, and its memory of the nonces they spent, per
    signing key (module docstring).

    ``auth`` is the server's mode: in ``members`` mode (the default, the strict one) a live
    nonce is never forgotten; in ``open`` and ``signed`` mode the least recently active keys'
    buckets are, past ``max_nonces`` in all or ``max_keys`` keys. ``headers`` maps header names
    (any case) to values. Thread-safe.
    """

    def __init__(
        self,
        *,
        space: str,
        server: bytes,
        window: float = DEFAULT_WINDOW,
        max_nonces: int = MAX_NONCES,
        max_nonces_per_key: int = MAX_NONCES_PER_KEY,
        max_keys: int = MAX_KEYS,
        auth: AuthMode = AuthMode.MEMBERS,
        clock: Callable[[], int] = _wall_ms,
    ) -> None:
        for name, value in (
            ("max_nonces", max_nonces),
            ("max_nonces_per_key", max_nonces_per_key),
            ("max_keys", max_keys),
        ):
            if type(value) is not int or value < 1:
                raise SyncError(name, "range", f"{name} is an int >= 1, not {value!r}")
        self.space = space
        self.server = server
        self.window_ms = round(window * 1000)
        self.max_nonces = max_nonces
        self.max_nonces_per_key = max_nonces_per_key
        self.max_keys = max_keys
        self.auth = AuthMode(auth)
        self._clock = clock
        self._lock = threading.Lock()
        #: Author -> bucket, least recently active first.
        self._buckets: OrderedDict[bytes, _Bucket] = OrderedDict()
        self._total = 0

    @property
    def keys(self) -> int:
        """Signing keys whose nonces the gate holds now."""
        with self._lock:
            return len(self._buckets)

    @property
    def nonces(self) -> int:
        """Nonces the gate holds now (some may have expired and wait to be dropped)."""
        with self._lock:
            return self._total

    def authenticate(
        self, headers: Mapping[str, str], *, method: str, endpoint: str, body: bytes
    ) -> Signed | None:
        """The signer of a request, or None when it carries no signature headers at all.

        Raises SyncError (the server answers 401) with rule ``auth-header``,
        ``server-identity``, ``clock-window`` or ``signature``; see the module docstring.
        """
        found = {name: headers.get(name.lower()) for name in HEADERS}
        if all(v is None for v in found.values()):
            return None
        values: dict[str, str] = {}
        for name, value in found.items():
            if value is None or not _HEX[name].fullmatch(value):
                raise SyncError(name, "auth-header", f"{name} is missing or malformed")
            values[name] = value
        if bytes.fromhex(values["StateFuse-Server"]) != self.server:
            raise SyncError(
                "StateFuse-Server",
                "server-identity",
                f"the request was signed for another server; this is {self.server.hex()}",
            )
        sent = int(values["StateFuse-Time"])
        self._check_time(sent, self._clock())
        author = bytes.fromhex(values["StateFuse-Author"])
        nonce = bytes.fromhex(values["StateFuse-Nonce"])
        message = request_message(
            space=self.space,
            server=self.server,
            method=method,
            endpoint=endpoint,
            body=body,
            time_ms=sent,
            nonce=nonce,
        )
        try:
            good = verify_signature(author, bytes.fromhex(values["StateFuse-Signature"]), message)
        except PublicKeyError:
            good = False
        if not good:
            raise SyncError(
                "StateFuse-Signature",
                "signature",
                "the request signature does not verify for this space, server and request",
            )
        return Signed(author, nonce, sent)

    def consume(self, signed: Signed) -> None:
        """Spend the request's nonce in its author's bucket.

        Raises SyncError rule ``replay`` if it was spent before, ``key-busy`` if this author
        holds `max_nonces_per_key` live nonces already (its own doing: no other key is
        affected), ``busy`` (``members`` mode only) if `max_keys` other keys all hold live
        nonces.
        """
        with self._lock:
            now = self._clock()
            # Checked again under the lock: a nonce is forgotten only once its time is out.
            self._check_time(signed.time_ms, now)
            bucket = self._buckets.get(signed.author)
            if bucket is not None:
                self._expire(bucket, now)
                if signed.nonce in bucket.seen:
                    raise SyncError("StateFuse-Nonce", "replay", "this request was sent before")
                if len(bucket.seen) >= self.max_nonces_per_key:
                    raise SyncError(
                        "StateFuse-Author",
                        "key-busy",
                        f"this key sent more than {self.max_nonces_per_key} requests within"
                        f" {self.window_ms / 1000:g} s; try again later",
                    )
            else:
                self._make_room(now)
                bucket = self._buckets[signed.author] = _Bucket()
            expires = signed.time_ms + self.window_ms
            bucket.seen.add(signed.nonce)
            heapq.heappush(bucket.expiry, (expires, signed.nonce))
            bucket.last = max(bucket.last, expires)
            self._buckets.move_to_end(signed.author)
            self._total += 1
            if self.auth is not AuthMode.MEMBERS:
                while self._total > self.max_nonces and len(self._buckets) > 1:
                    self._forget_oldest()

    def _expire(self, bucket: _Bucket, now: int) -> None:
        while bucket.expiry and bucket.expiry[0][0] < now:
            _, nonce = heapq.heappop(bucket.expiry)
            bucket.seen.discard(nonce)
            self._total -= 1

    def _make_room(self, now: int) -> None:
        """Room for one more key: in ``members`` mode by dropping buckets that hold nothing
        live (else ``busy``), in the other modes by forgetting the least recently active."""
        if len(self._buckets) < self.max_keys:
            return
        if self.auth is not AuthMode.MEMBERS:
            self._forget_oldest()
            return
        for author, bucket in list(self._buckets.items()):
            if bucket.last < now:
                self._total -= len(bucket.seen)
                del self._buckets[author]
        if len(self._buckets) >= self.max_keys:
            raise SyncError(
                "server",
                "busy",
                f"{len(self._buckets)} keys sent requests within the last"
                f" {self.window_ms / 1000:g} s, this server's limit; try again later",
            )

    def _forget_oldest(self) -> None:
        _, bucket = self._buckets.popitem(last=False)
        self._total -= len(bucket.seen)

    def _check_time(self, sent: int, now: int) -> None:
        if abs(now - sent) > self.window_ms:
            raise SyncError(
                "StateFuse-Time",
                "clock-window",
                f"the request time is more than {self.window_ms / 1000:g} s from the server's"
                " clock (check both clocks)",
            )


# --- the server's proof of its author key ------------------------------------------------------

_NONCE_HEX = re.compile(r"[0-9a-f]{32}")
_AUTHOR_HEX = re.compile(r"[0-9a-f]{64}")
_SIGNATURE_HEX = re.compile(r"[0-9a-f]{128}")


def request_challenge(headers: Mapping[str, str]) -> bytes:
    """The challenge a server's answer to a request signs: its StateFuse-Nonce when well formed,
    else its StateFuse-Challenge when well formed, else empty. ``headers`` are keyed by
    lower-case name."""
    for name in ("statefuse-nonce", CHALLENGE_HEADER.lower()):
        value = headers.get(name)
        if value is not None and _NONCE_HEX.fullmatch(value):
            return bytes.fromhex(value)
    return b""


def response_message(
    *,
    space: str,
    server: bytes,
    endpoint: str,
    status: int,
    challenge: bytes,
    body: bytes,
) -> bytes:
    """The bytes a server's proof signs (see the module docstring)."""
    return encode_frames(
        [
            RESPONSE_DOMAIN,
            space.encode(),
            server,
            endpoint.encode("ascii", "replace"),
            str(status).encode("ascii"),
            challenge,
            blake3.blake3(body).digest(),
        ]
    )


def sign_response(
    key: SigningKey,
    *,
    space: str,
    server: bytes,
    endpoint: str,
    status: int,
    challenge: bytes,
    body: bytes,
) -> dict[str, str]:
    """The headers that prove ``key``'s author made this answer to the request that carried
    ``challenge``."""
    message = response_message(
        space=space,
        server=server,
        endpoint=endpoint,
        status=status,
        challenge=challenge,
        body=body,
    )
    return {
        "StateFuse-Server-Author": key.author.hex(),
        "StateFuse-Server-Signature": key.sign(message).hex(),
    }


def verify_response(
    headers: Mapping[str, str | None],
    *,
    space: str,
    server: bytes,
    endpoint: str,
    status: int,
    challenge: bytes,
    body: bytes,
) -> bytes:
    """The author an answer proves (``headers`` keyed by the names of `RESPONSE_HEADERS`).

    Raises ServerIdentityError (field ``StateFuse-Server-Author`` or
    ``StateFuse-Server-Signature``, rule ``server-identity-unproven``) when the answer carries
    no proof, a malformed one, or one that does not verify for this space, server, endpoint,
    status, challenge and body.
    """
    author_hex = headers.get("StateFuse-Server-Author")
    signature_hex = headers.get("StateFuse-Server-Signature")
    if author_hex is None and signature_hex is None:
        raise ServerIdentityError(
            "StateFuse-Server-Author",
            "server-identity-unproven",
            "the answer carries no proof (no StateFuse-Server-Author or"
            " StateFuse-Server-Signature header)",
        )
    if author_hex is None or not _AUTHOR_HEX.fullmatch(author_hex):
        raise ServerIdentityError(
            "StateFuse-Server-Author",
            "server-identity-unproven",
            "the server's StateFuse-Server-Author header is missing or malformed",
        )
    if signature_hex is None or not _SIGNATURE_HEX.fullmatch(signature_hex):
        raise ServerIdentityError(
            "StateFuse-Server-Signature",
            "server-identity-unproven",
            "the server's StateFuse-Server-Signature header is missing or malformed",
        )
    author = bytes.fromhex(author_hex)
    message = response_message(
        space=space,
        server=server,
        endpoint=endpoint,
        status=status,
        challenge=challenge,
        body=body,
    )
    try:
        good = verify_signature(author, bytes.fromhex(signature_hex), message)
    except PublicKeyError:
        good = False
    if not good:
        raise ServerIdentityError(
            "StateFuse-Server-Signature",
            "server-identity-unproven",
            f"the server's proof of author {author_hex[:16]}… does not verify for this space,"
            " server, request and answer",
        )
    return author
