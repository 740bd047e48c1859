"""The HTTP sync protocol, version 1: endpoints, body framing, limits and errors.

Shared by `sync.server` and `sync.client`, which only move these bodies over HTTP. A sync is
stateless on the server: the client runs a whole set-reconciliation exchange (`sync.reconcile`)
against it, one message per request, then fetches the changes it lacks and pushes the changes
the server lacks, a page at a time.

Endpoints (every POST body is a frame list whose first frame names the space)::

    GET  /v1/info       -> JSON {"protocol": 1, "space": str, "server": hex, "auth": mode,
                                 "limits": {...}, "changes": int (to a request that may read)}
    POST /v1/reconcile  [space, message]       -> [reply message]
    POST /v1/fetch      [space, id, id, ...]   -> [change, change, ...]   (a prefix of the ids;
                                                  an empty frame: the server lacks that id)
    POST /v1/push       [space, change, ...]   -> JSON MergeReport counts (422 if any change
                                                  was refused and quarantined)

Errors come back as JSON ``{"error": message, "field": field, "rule": rule}`` with a 4xx or 5xx
status: 400 malformed body or message, 401 / 403 a request the server's `sync.auth.AuthMode`
does not let through (rules in `sync.auth`), 404 unknown endpoint, 405 wrong method, 409
another space (rule ``same-space``) or a reconcile message that contradicts the server's
changes (they changed during the exchange: start it again), 413 body too large, 422 changes
quarantined, 503 the replica stayed busy past the server's timeout, 500 a fault of the server.

Body framing, version 1 (every length is checked against a limit before anything is read)::

    body  = magic b"SFSYNC", version:u8 (=1), count:u32 BE, frame * count
    frame = len:u32 BE, bytes[len]

Invariant: `decode_frames` accepts exactly one encoding of a frame list and reads all of it
before anything acts on it, so a truncated, padded or oversized body is refused as a whole.

Errors, all raised on purpose, all carrying ``field`` and ``rule``::

    SyncError (InputError, RuntimeError)   a body that breaks this protocol, or a bad argument
    ├── PeerUnreachableError               no connection (refused, reset, unknown host)
    ├── PeerTimeoutError                   the peer did not answer within the timeout
    ├── PeerRejectedError                  the peer answered with an HTTP error (``.status``;
    │                                      ``field`` and ``rule`` are the peer's, when it sent
    │                                      them, e.g. ``space`` / ``same-space``)
    ├── MalformedResponseError             a response that breaks the protocol; never applied
    ├── ServerIdentityError                a closed space's server that does not prove an
    │                                      author the space admits (rules
    │                                      ``server-identity-unproven``,
    │                                      ``server-not-a-member``); nothing was pushed
    └── FollowError                        a follower's bad argument, a URL scheme no transport
                                           handles, a round on demand that could not run
                                           (`sync.follower`)
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from statefuse.registry.error import InputError
from statefuse.sync.change import MAX_CHANGE_BYTES, MAX_SPACE_CHARS
from statefuse.sync.reconcile import ID_BYTES, MAX_EXCHANGE_MESSAGES, MAX_MESSAGE_BYTES

__all__ = [
    "CONTENT_TYPE",
    "MAGIC",
    "MAX_BODY_BYTES",
    "MAX_CHANGE_FRAME_BYTES",
    "MAX_PAGE_CHANGES",
    "MAX_ROUNDS",
    "PAGE_BYTES",
    "PROTOCOL_VERSION",
    "Lock",
    "MalformedResponseError",
    "PeerRejectedError",
    "PeerTimeoutError",
    "PeerUnreachableError",
    "ServerIdentityError",
    "SyncError",
    "check_seconds",
    "decode_frames",
    "decode_space",
    "encode_frames",
    "limits",
    "masked_url",
]

#: Version of the endpoints and of the body framing (the ``/v1/`` in every path).
PROTOCOL_VERSION = 1
#: First bytes of every framed body, before the version byte.
MAGIC = b"SFSYNC"
CONTENT_TYPE = "application/x-statefuse-frames"
#: Most change bytes (with their 4-byte frame headers) in one fetch answer or push request.
PAGE_BYTES = 4 << 20
#: Most changes in one push request, and ids in one fetch request.
MAX_PAGE_CHANGES = 4096
#: Largest frame that may carry one signed change (the change limit plus room for its wrapper).
MAX_CHANGE_FRAME_BYTES = MAX_CHANGE_BYTES + 1024
#: Largest body either side accepts: a page, the space frame and the framing around them.
MAX_BODY_BYTES = PAGE_BYTES + (64 << 10)
#: Most reconcile requests in one exchange (two messages per request).
MAX_ROUNDS = MAX_EXCHANGE_MESSAGES // 2
#: Longest space frame: a space name of MAX_SPACE_CHARS characters in UTF-8.
MAX_SPACE_BYTES = 4 * MAX_SPACE_CHARS

_HEADER = struct.Struct(">BI")
_LENGTH = struct.Struct(">I")
_PREFIX_BYTES = len(MAGIC) + _HEADER.size


class Lock(Protocol):
    """What a replica lock must do (`threading.Lock` and `threading.RLock` do)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...

    def release(self) -> None: ...


class SyncError(InputError, RuntimeError):
    """A sync over HTTP that failed, or a body that breaks the protocol (``field``, ``rule``)."""


class PeerUnreachableError(SyncError):
    """No connection to the peer: refused, reset, or a host that does not resolve."""


class PeerTimeoutError(SyncError):
    """The peer accepted the connection but did not answer within the timeout."""


class PeerRejectedError(SyncError):
    """The peer answered with an HTTP error status (``status``); ``field`` and ``rule`` are the
    ones its JSON error body named, else ``response`` and ``http-<status>``."""

    def __init__(self, field: str, rule: str, message: str, status: int = 0) -> None:
        super().__init__(field, rule, message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.rule, self.message, self.status))


class MalformedResponseError(SyncError):
    """A response that breaks the protocol (framing, sizes, a reconcile message the reconciler
    refuses, a JSON body of the wrong shape). Nothing from it was applied."""


class ServerIdentityError(SyncError):
    """A server of a closed space that did not prove an author the client's replica admits:
    rule ``server-identity-unproven`` (no proof, or one that does not verify) or
    ``server-not-a-member`` (a proven author that is not the root, or not admitted, or
    revoked). Raised before any change is pushed to it (see `sync.client`)."""


def check_seconds(field: str, value: object) -> float:
    """``value`` as seconds, if it is a positive finite number; else SyncError (rule ``range``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise SyncError(field, "range", f"expected a positive number of seconds, got {value!r}")
    return float(value)


def masked_url(url: str) -> str:
    """``url`` fit to print: a password in it (``nats://user:secret@host``) becomes ``***``,
    and so does a NATS token (``nats://secret@host``, a user name without a password)."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:
        return url
    host = parts.netloc.rpartition("@")[2]
    if password:
        return urlunsplit(parts._replace(netloc=f"{user or ''}:***@{host}"))
    if user and parts.scheme.lower() in ("nats", "tls", "ws", "wss"):
        return urlunsplit(parts._replace(netloc=f"***@{host}"))
    return url


def limits() -> dict[str, int]:
    """The protocol's limits, as ``/v1/info`` reports them."""
    return {
        "max_body_bytes": MAX_BODY_BYTES,
        "page_bytes": PAGE_BYTES,
        "max_page_changes": MAX_PAGE_CHANGES,
        "max_change_frame_bytes": MAX_CHANGE_FRAME_BYTES,
        "max_message_bytes": MAX_MESSAGE_BYTES,
        "id_bytes": ID_BYTES,
    }


def encode_frames(frames: Sequence[bytes]) -> bytes:
    """The body that carries ``frames`` (no limits checked: the encoder's caller keeps them)."""
    parts = [MAGIC, _HEADER.pack(PROTOCOL_VERSION, len(frames))]
    for frame in frames:
        parts += (_LENGTH.pack(len(frame)), frame)
    return b"".join(parts)


def decode_frames(
    body: bytes,
    *,
    max_frames: int,
    max_frame_bytes: int,
    field: str = "body",
) -> list[bytes]:
    """The frames of ``body``, after checking the whole of it.

    Raises SyncError (``field`` names the place) with rule ``magic``, ``version``,
    ``max-frames``, ``truncated``, ``max-frame-bytes`` or ``trailing-data``.
    """
    if not body.startswith(MAGIC):
        raise SyncError(field, "magic", "not a StateFuse sync body (bad magic)")
    if len(body) < _PREFIX_BYTES:
        raise SyncError(field, "truncated", "the body ends inside its header")
    version, count = _HEADER.unpack_from(body, len(MAGIC))
    if version != PROTOCOL_VERSION:
        raise SyncError(
            f"{field}.version",
            "version",
            f"framing version {version} is not supported (expected {PROTOCOL_VERSION})",
        )
    if count > max_frames:
        raise SyncError(f"{field}.count", "max-frames", f"{count} frames exceed {max_frames}")
    frames = []
    pos = _PREFIX_BYTES
    end = len(body)
    for k in range(count):
        where = f"{field}.frame[{k}]"
        if pos + _LENGTH.size > end:
            raise SyncError(where, "truncated", "the body ends inside a frame header")
        (size,) = _LENGTH.unpack_from(body, pos)
        if size > max_frame_bytes:
            raise SyncError(
                where, "max-frame-bytes", f"a frame of {size} bytes exceeds {max_frame_bytes}"
            )
        pos += _LENGTH.size
        if pos + size > end:
            raise SyncError(where, "truncated", "the body ends inside a frame")
        frames.append(body[pos : pos + size])
        pos += size
    if pos != end:
        raise SyncError(field, "trailing-data", f"{end - pos} bytes after the last frame")
    return frames


def decode_space(frame: bytes, field: str = "space") -> str:
    """The space a request names (its first frame: a non-empty UTF-8 name).

    Raises SyncError (rule ``space-name``) for an empty, too long or non-UTF-8 name.
    """
    try:
        space = frame.decode("utf-8")
    except UnicodeDecodeError:
        raise SyncError(field, "space-name", "the space name is not UTF-8") from None
    if not space or len(space) > MAX_SPACE_CHARS:
        raise SyncError(
            field, "space-name", f"a space is a non-empty name of up to {MAX_SPACE_CHARS} chars"
        )
    return space
