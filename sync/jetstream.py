"""Sync through a NATS JetStream broker: a space is one stream, a replica publishes its own
changes to it and follows it with a durable consumer (`JetStreamLink`).

Naming (see `space_token`): space ``team`` is stream ``SF_team`` with subjects
``sf.team.<author hex>``, one subject per author; a space name that is not plain ASCII letters,
digits and ``-`` (at most 64) is named by a hash instead, ``_`` + 32 hex digits of its blake3.
Each replica's durable pull consumer is ``sf-<store id hex>``: it remembers, in the broker, how
far this store has taken the stream in.

Messages: a whole signed change, with header ``Nats-Msg-Id`` = its change id in hex (the
broker's dedupe window drops a second publish of it). A change larger than the server's
``max_payload`` travels as chunks, each with ``Nats-Msg-Id`` = ``<change id hex>.<index>``,
``StateFuse-Change`` = the change id in hex and ``StateFuse-Chunk`` = ``<index>/<count>``
(chunk format 1; another format would use another header name); the receiver joins them,
holding what it joins within `ChunkBounds` (per publishing subject, overall, an expiry): a
chunk dropped to keep within them is handed back to the broker and its change read again from
the stream by sequence, so chunks that never complete cannot cost an honest change.

Invariants:

- The broker is untrusted transport. What arrives goes through `Replica.receive` like any outside
  bytes: a forged or damaged change is quarantined with its reason and never counts. A broker
  can delay, withhold, repeat or reorder messages; it cannot forge a change.
- A message is acknowledged to the broker only after `Replica.receive` returned, i.e. after
  what it carried is durable in the store (or quarantined there); an unacknowledged message is
  delivered again, and receiving is idempotent, so a crash between the two costs a duplicate.
- A write is acknowledged by the store, never by the broker. The outbox is derived: this
  replica's own accepted changes that carry no publish mark for the stream (`Store.published`);
  a change is marked only after the broker's PubAck. So a broker outage, a crash between the
  write and the publish, or a lost PubAck delays a change and never loses it (it is published
  again; the broker's dedupe window or the receivers' idempotence absorb the repeat).
- The replica is touched only in the caller's thread, holding the replica's own lock (and
  ``lock`` first, when given): the event loop thread that the link owns does network I/O only.
- A URL's secret (password, or a token given as its user name) never shows: statuses, errors
  and the ``source`` of what is received carry the URL masked (`sync.protocol.masked_url`).
- A login file's secret never shows either. A link is given the *paths* of a NATS ``.creds``
  file or an NKey seed file (``credentials=`` / ``nkey_seed=``; `environment_login` reads them
  from ``STATEFUSE_NATS_CREDS`` / ``STATEFUSE_NATS_NKEY``), checked before any connect; nats-py
  reads the secret itself while connecting, and every message that leaves this module has
  anything shaped like an NKey seed (``S…``) or a JWT (``eyJ…``) masked as ``***``.

Following: `FollowedBroker` is the ``nats`` / ``tls`` transport of `sync.follower`, so
`Replica.follow` takes broker URLs; `probe` and `unpublished` read where a store stands with a
broker without changing anything (``statefuse status``).

Catch-up: a new or long-offline replica's consumer replays the stream from where it left off.
When the stream's retention dropped messages the consumer had not taken in yet, `LinkStatus.gap`
says so, and a link given ``peers`` (HTTP sync URLs) fills it by set reconciliation
(`sync.client.sync_with`) with them; it does the same when changes stay parked for a missing
predecessor after a round.

Errors, all carrying ``field`` and ``rule``::

    SyncError (InputError, RuntimeError)
    └── JetStreamError                 a link that cannot do what was asked (a bad argument,
        │                              a login file that is missing or malformed: ``file``,
        │                              ``creds-format``, ``nkey-seed``, ``one-credential``,
        │                              ``nkeys-missing``)
        ├── BrokerUnavailableError     no connection, or no answer in time (rule
        │                              ``broker-unreachable`` / ``broker-timeout``)
        └── BrokerRefusedError         the broker answered an error (``broker-refused``), or
                                       refused the login (``broker-auth``)
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import operator
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import blake3

try:
    import nats
    import nats.errors
    import nats.js.errors
    from nats.aio.client import Client
    from nats.aio.msg import Msg
    from nats.js import JetStreamContext
    from nats.js.api import (
        AckPolicy,
        ConsumerConfig,
        DeliverPolicy,
        StorageType,
        StreamConfig,
    )
except ImportError as exc:  # pragma: no cover - the extra is part of the test install
    raise ImportError(
        "the JetStream transport needs nats-py: pip install 'statefuse[nats]'"
    ) from exc

from statefuse.sync.change import MAX_CHANGE_BYTES, claimed_change_id
from statefuse.sync.client import SyncReport, sync_with
from statefuse.sync.follower import Backlog, Exchange
from statefuse.sync.protocol import Lock, SyncError, check_seconds, masked_url
from statefuse.sync.replica import MergeReport, Replica

__all__ = [
    "CREDS_ENV",
    "NKEY_ENV",
    "BrokerLogin",
    "BrokerRefusedError",
    "BrokerUnavailableError",
    "ChunkBounds",
    "FollowedBroker",
    "JetStreamError",
    "JetStreamLink",
    "LinkRound",
    "LinkStatus",
    "consumer_name",
    "environment_login",
    "probe",
    "space_token",
    "stream_name",
    "subject_of",
    "unpublished",
]

#: Header naming the change a chunk belongs to (hex change id).
CHANGE_HEADER = "StateFuse-Change"
#: Header of a chunk: ``<index>/<count>`` (chunk format 1).
CHUNK_HEADER = "StateFuse-Chunk"
#: Room kept in each message for headers and protocol framing when a change is chunked.
_HEADER_ROOM = 512
#: Most chunks one change may claim (a change of `MAX_CHANGE_BYTES` in chunks of 1 KiB).
_MAX_CHUNKS = MAX_CHANGE_BYTES // 1024 + 1
#: Ids of the changes given up on, kept for the status (the most recent).
_ABANDONED_SHOWN = 16
#: Changes whose assembly was dropped, remembered (subject, count, the stream sequence of each
#: chunk seen, at most `_SEQS_KEPT`) so that they can be read again from the stream: when a
#: later chunk of one arrives, or a pending change follows one. The oldest are forgotten.
_LOST_KEPT = 4096
_SEQS_KEPT = 32
#: Changes joined from chunks lately: a copy of one of their chunks delivered again is done with.
_JOINED_KEPT = 4096
#: Other bytes kept for an index already held, per assembly (see `_Assembly.others`).
_OTHERS_KEPT = 8
#: Changes read again from the stream in one batch (their chunks by known sequence), and in
#: one round for a pending change (by their subject too), at most.
_REREADS_PER_BATCH = 16
_REREADS_PER_ROUND = 4
#: Missing predecessors searched for at once (see `_Search`).
_SEARCHES = 16
#: Messages of an author's subject read in one round when searching for a missing change.
_REREAD_READS = 256
#: Messages asked of the broker per fetch.
_FETCH_BATCH = 256
#: Publishes awaiting their PubAck at once.
_PUBLISH_WINDOW = 64
#: Longest the broker is asked to hold one long-poll (`JetStreamLink.wait` asks again after).
_POLL_SECONDS = 2.0
#: A round that took a long-poll's messages still asks the broker for the stream's state (to
#: see a retention gap) when this many seconds passed since it last asked.
_CHECK_SECONDS = 1.0
#: Longest a round waits for a long-poll in flight when the broker says messages wait.
_HARVEST_SECONDS = 0.5
#: A space name used as it is in stream and subject names.
_PLAIN = re.compile(r"[A-Za-z0-9-]{1,64}")
#: The environment variables naming a NATS ``.creds`` file and an NKey seed file, read by the
#: links that are given neither (`environment_login`: the follower's, the CLI's).
CREDS_ENV = "STATEFUSE_NATS_CREDS"
NKEY_ENV = "STATEFUSE_NATS_NKEY"
#: Largest login file read (a ``.creds`` file is about 1 KiB, a seed file 58 bytes).
_MAX_LOGIN_BYTES = 64 * 1024
#: Text shaped like a NATS secret: an NKey seed (``S``, its role, 56 base32 digits) or a JWT.
_SECRET_TEXT = re.compile(r"S[A-Z][A-Z2-7]{56}|eyJ[A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]*){0,2}")

#: A path given for a login file.
StrPath: TypeAlias = "str | os.PathLike[str]"

log = logging.getLogger("statefuse.sync.jetstream")


class JetStreamError(SyncError):
    """A JetStream link that cannot do what was asked (``field``, ``rule``)."""


class BrokerUnavailableError(JetStreamError):
    """No connection to the broker, or no answer within the timeout: nothing was lost (the
    outbox keeps what was not published; unacknowledged messages are delivered again)."""


class BrokerRefusedError(JetStreamError):
    """The broker answered with an error (a stream of another configuration, say)."""


def space_token(space: str) -> str:
    """The space as one token of a NATS name: itself when it is plain (ASCII letters, digits
    and ``-``, at most 64), else ``_`` + 32 hex digits of blake3 of its UTF-8 (a plain token
    never starts with ``_``, so the two kinds never collide)."""
    if _PLAIN.fullmatch(space):
        return space
    return "_" + blake3.blake3(space.encode()).hexdigest()[:32]


def stream_name(space: str) -> str:
    """The stream that carries ``space``: ``SF_<space token>``."""
    return f"SF_{space_token(space)}"


def subject_of(space: str, author: bytes) -> str:
    """The subject an author publishes its changes of ``space`` on: ``sf.<token>.<hex>``."""
    return f"sf.{space_token(space)}.{author.hex()}"


def consumer_name(store_id: bytes) -> str:
    """The durable consumer of the store with id ``store_id``: ``sf-<hex>``."""
    return f"sf-{store_id.hex()}"


@dataclass(frozen=True, slots=True)
class LinkStatus:
    """Where a link stands (`JetStreamLink.status`)."""

    url: str
    stream: str
    consumer: str
    connected: bool
    #: Own changes not yet acknowledged by the stream.
    outbox: int
    #: Messages of the stream this replica has not taken in, at the last look (None: not yet
    #: looked).
    lag: int | None
    #: Own changes the stream acknowledged, since the link started (duplicates included).
    published: int
    #: Changes taken from the stream since the link started, and what became of them.
    received: MergeReport
    #: Messages that were no change and no valid chunk (dropped from this consumer).
    rejected: int
    #: ``(wanted, first)``: the consumer needed stream sequence ``wanted`` but the stream only
    #: holds ``first`` on (retention dropped the rest); None once filled, or never seen.
    gap: tuple[int, int] | None
    #: The last error, one line (None: none since the last successful round).
    last_error: str | None
    #: Changes being joined from chunks now (see `ChunkBounds`).
    assemblies: int = 0
    #: Assemblies dropped to keep within `ChunkBounds` (per author, overall) since the link
    #: started: their chunks were handed back to the broker, which delivers them again.
    evicted: int = 0
    #: Assemblies dropped because they outlived `ChunkBounds.expiry` (handed back too).
    expired: int = 0
    #: Assemblies dropped with each chunk delivered `ChunkBounds.give_up_after` times: their
    #: chunks acknowledged (never delivered to this consumer again; the change can still be
    #: read again from the stream, see `reread`); the hex ids of the most recent ones in
    #: ``abandoned_ids``.
    abandoned: int = 0
    abandoned_ids: tuple[str, ...] = ()
    #: Changes whose dropped chunks were read again from the stream by sequence (a later
    #: chunk arrived, or a pending change follows them), and changes a pending change follows
    #: that could not be found there (each logged once as a warning).
    reread: int = 0
    unreadable: int = 0


@dataclass(frozen=True, slots=True)
class ChunkBounds:
    """How a link holds changes that arrive in chunks (`JetStreamLink` ``chunk_bounds``).

    A chunk names its change by id only; who wrote the change is known after the chunks are
    joined and the change verified. Until then an assembly is attributed to the subject it was
    published on (``sf.<space>.<author hex>``; a broker that lets each user publish only on its
    own subject, see the security guide, makes that the publisher), and bounded:

    - ``per_author``: assemblies held for one subject (default 8);
    - ``total``: assemblies held in all (default 64);
    - ``expiry``: seconds an incomplete assembly is held (default 60), counted from when this
      link first saw a chunk of its change, and also by the broker's clock: an assembly whose
      newest chunk was stored ``expiry`` seconds before the newest message first delivered since
      is stale too (a catch-up through hours of stream is not measured by the follower's clock).

    Past a bound the assembly touched longest ago (by stream sequence) goes first, from the
    newcomer's subject when that one is full, else from all: a newcomer older than every
    assembly it competes with is the one dropped. A
    dropped assembly is remembered (its subject and the stream sequence of each chunk seen):
    when a later chunk of its change arrives, or a pending change follows it, the missing
    chunks are read again from the stream by sequence, so a change that can still complete
    does, at once. Its chunks are not terminated either: they are handed back to the broker
    (negatively acknowledged), which delivers them again ``redeliver_after`` seconds later
    (default 30; a restart of the follower loses what it remembered, not these). A chunk that
    has been delivered ``give_up_after`` times (default 2) is acknowledged when dropped (a
    flood costs a follower at most that many deliveries of each chunk); an assembly all of
    whose chunks were is given up (`LinkStatus.abandoned`). Memory held is at most ``total``
    changes of `MAX_CHANGE_BYTES`. Raises JetStreamError (field ``chunk_bounds.<name>``, rule
    ``range``).
    """

    expiry: float = 60.0
    per_author: int = 8
    total: int = 64
    redeliver_after: float = 30.0
    give_up_after: int = 2

    def __post_init__(self) -> None:
        for name in ("per_author", "total", "give_up_after"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= 1_000_000:
                raise JetStreamError(
                    f"chunk_bounds.{name}", "range", f"expected an int in [1, 1e6], got {value!r}"
                )
        if self.per_author > self.total:
            raise JetStreamError(
                "chunk_bounds.per_author",
                "range",
                f"per_author ({self.per_author}) exceeds total ({self.total})",
            )
        for name in ("expiry", "redeliver_after"):
            try:
                check_seconds(f"chunk_bounds.{name}", getattr(self, name))
            except SyncError as exc:
                raise JetStreamError(exc.field, "range", exc.message) from None


@dataclass(frozen=True, slots=True)
class LinkRound:
    """What one `JetStreamLink.sync_once` did."""

    #: Own changes the stream acknowledged in this round.
    published: int = 0
    #: Changes taken from the stream (chunks joined), and what the replica made of them.
    fetched: int = 0
    merge: MergeReport = field(default_factory=MergeReport)
    #: HTTP syncs run with peers to fill a gap the stream could not.
    reconciled: tuple[SyncReport, ...] = ()


@dataclass(slots=True)
class _Assembly:
    """Chunks of one change, joined once all ``count`` arrived."""

    cid: bytes
    #: The subject its chunks came on (the author it is attributed to until verified).
    subject: str
    count: int
    #: When this link made the assembly (its clock).
    born: float
    parts: dict[int, bytes] = field(default_factory=dict)
    #: The stream sequence of each chunk joined.
    seqs: dict[int, int] = field(default_factory=dict)
    msgs: list[Msg] = field(default_factory=list)
    size: int = 0
    #: The highest stream sequence of its chunks (the order in which assemblies are dropped).
    touched: int = 0
    #: The broker's time (epoch seconds) of its newest chunk, and whether every chunk came
    #: on its first delivery (only then is the broker's clock a fair measure of its age).
    stamp: float = 0.0
    first: bool = True
    #: Chunks of its change were dropped before: what is missing is read from the stream.
    reread: bool = False
    #: Other bytes delivered for an index already held, (index, bytes): someone else's chunk
    #: of the same change id, or the author's after someone else's (at most `_OTHERS_KEPT`).
    others: list[tuple[int, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class _Search:
    """Reading an author's subject for the missing predecessor of a pending change: where to
    read on, what was found of it, whether the subject was read to its end (and when to
    start again), whether the remembered sequences were tried, whether failing was logged."""

    subject: str
    next_seq: int = 1
    count: int | None = None
    parts: dict[int, bytes] = field(default_factory=dict)
    done: bool = False
    idle_until: float | None = None
    by_seq: bool = False
    told: bool = False
    #: The subject holds messages (an author that publishes here: its missing change is news).
    seen: bool = False

    def restart(self, at: float) -> None:
        self.next_seq, self.count, self.done, self.idle_until = 1, None, False, at
        self.by_seq = False
        self.parts.clear()


@dataclass(slots=True)
class _Lost:
    """A change whose assembly was dropped: the subject its chunks came on, their count and
    the stream sequence of each chunk seen; when a pending change last had it looked for (the
    link's clock), and whether failing to find it was logged."""

    subject: str
    count: int
    seqs: dict[int, int] = field(default_factory=dict)
    tried: float | None = None
    told: bool = False


def _unsecret(text: str) -> str:
    """``text`` with anything shaped like an NKey seed or a JWT masked: a library's message, or
    a path that is really a secret pasted in its place, must not carry one into a log."""
    return _SECRET_TEXT.sub("***", text)


def _scrubbed(text: str, url: str) -> str:
    """``text`` without the secret of ``url`` (its password, or a token given as its user
    name) nor any seed or JWT: a library's message might quote the URL."""
    text = _unsecret(text)
    try:
        parts = urlsplit(url)
        secret = parts.password or parts.username
    except ValueError:
        return text
    return text.replace(secret, "***") if secret else text


@dataclass(frozen=True, slots=True)
class BrokerLogin:
    """How a link logs in besides its URL: the path of a NATS ``.creds`` file (a user JWT and
    its NKey seed, for decentralized auth) or of an NKey seed file (``SU…``), at most one;
    neither means the URL's user and password or token, if any. Holds paths, never secrets:
    nats-py reads the file itself each time it connects. Made by `environment_login` (or by
    a link from its ``credentials`` / ``nkey_seed``), which checks the file first."""

    credentials: str | None = None
    nkey_seed: str | None = None


def environment_login(
    credentials: StrPath | None = None, nkey_seed: StrPath | None = None
) -> BrokerLogin:
    """The login given, or, when neither file is, the one the environment names
    (``STATEFUSE_NATS_CREDS``, ``STATEFUSE_NATS_NKEY``): an option beats the environment as a
    whole, so a ``.creds`` file given never meets a seed file the environment names. Checked
    as a link checks it; raises JetStreamError (see `JetStreamLink`), naming the variable
    when the environment gave the file."""
    if credentials is not None or nkey_seed is not None:
        return _login(credentials, nkey_seed)
    try:
        return _login(
            os.environ.get(CREDS_ENV) or None,
            os.environ.get(NKEY_ENV) or None,
            fields=(CREDS_ENV, NKEY_ENV),
        )
    except JetStreamError as exc:
        # a caller may keep only the message (a follower's error names the peer instead)
        raise JetStreamError(exc.field, exc.rule, f"{exc.field}: {exc.message}") from None


def _login(
    credentials: StrPath | None,
    nkey_seed: StrPath | None,
    *,
    fields: tuple[str, str] = ("credentials", "nkey_seed"),
) -> BrokerLogin:
    """The login of these files, checked before any connect: nats-py reads them only while
    connecting, where a malformed one is a hang (it reads a ``.creds`` file without its JWT
    block forever) or a bare TypeError rather than an error about the file. ``fields``: how
    errors name the two. Raises JetStreamError: both given (``one-credential``), not a path
    (``path``), not a readable file (``file``), no ``.creds`` layout (``creds-format``), not a
    user's NKey seed (``nkey-seed``), the nkeys package missing (``nkeys-missing``). No error
    quotes what a file holds."""
    if credentials is not None and nkey_seed is not None:
        raise JetStreamError(
            fields[0],
            "one-credential",
            "give a .creds file or an NKey seed file, not both (the .creds file holds a seed)",
        )
    if credentials is not None:
        path, data = _read_login(fields[0], credentials)
        jwt, seed = _creds_blocks(data)
        if not jwt or not seed:
            raise JetStreamError(
                fields[0],
                "creds-format",
                _unsecret(
                    f"{path} is not a NATS .creds file (a USER JWT block, then a USER NKEY SEED"
                    " block)"
                ),
            )
        _check_seed(fields[0], path, seed)
        return BrokerLogin(credentials=path)
    if nkey_seed is not None:
        path, data = _read_login(fields[1], nkey_seed)
        _check_seed(fields[1], path, data.strip())
        return BrokerLogin(nkey_seed=path)
    return BrokerLogin()


def _read_login(field: str, given: object) -> tuple[str, bytes]:
    """The path ``given`` names and what the file holds. Raises JetStreamError (``path``,
    ``file``)."""
    name = os.fspath(given) if isinstance(given, (str, os.PathLike)) else None
    if not isinstance(name, str) or not name:
        raise JetStreamError(
            field, "path", f"expected the path of a file, got {type(given).__name__}"
        )
    if not os.path.isfile(name):
        raise JetStreamError(field, "file", _unsecret(f"{name} is not a file"))
    try:
        with open(name, "rb") as f:
            data = f.read(_MAX_LOGIN_BYTES + 1)
    except OSError as exc:
        raise JetStreamError(
            field, "file", _unsecret(f"cannot read {name}: {exc.strerror or type(exc).__name__}")
        ) from None
    if len(data) > _MAX_LOGIN_BYTES:
        raise JetStreamError(
            field, "file", _unsecret(f"{name} is over {_MAX_LOGIN_BYTES} bytes: no login file")
        )
    return name, data


def _creds_blocks(data: bytes) -> tuple[bytes, bytes]:
    """The user JWT and the seed of a ``.creds`` file: the line after each BEGIN marker, as
    nats-py reads them (empty when a marker is missing)."""
    lines = data.splitlines()
    found = {b"BEGIN NATS USER JWT": b"", b"BEGIN USER NKEY SEED": b""}
    for i, line in enumerate(lines[:-1]):
        for marker in found:
            if marker in line and not found[marker]:
                found[marker] = lines[i + 1].strip()
    return found[b"BEGIN NATS USER JWT"], found[b"BEGIN USER NKEY SEED"]


def _check_seed(field: str, path: str, seed: bytes) -> None:
    """Raise JetStreamError unless ``seed`` is a NATS user's NKey seed (``nkey-seed``), or
    when the nkeys package that signs with it is missing (``nkeys-missing``)."""
    try:
        import nkeys
    except ImportError:
        raise JetStreamError(
            field,
            "nkeys-missing",
            "NKey and .creds logins need the nkeys package: pip install 'statefuse[nats]'",
        ) from None
    try:
        pair = nkeys.from_seed(bytearray(seed))
        public = bytes(pair.public_key)
        pair.wipe()
    # nkeys raises its own errors, binascii's and PyNaCl's for a bad seed: any is "not a seed",
    # and none is chained, so no traceback can quote the seed
    except Exception:
        raise JetStreamError(
            field, "nkey-seed", _unsecret(f"{path} holds no valid NKey seed")
        ) from None
    if not public.startswith(b"U"):
        raise JetStreamError(
            field,
            "nkey-seed",
            _unsecret(f"{path} holds the NKey seed of an account or server, not of a user (SU…)"),
        )


@contextlib.contextmanager
def _holding(lock: Lock | None, replica: Replica) -> Iterator[None]:
    """The caller's lock (when given), then the replica's own: the link reads the replica's
    log and store directly, which its public methods would otherwise lock for it."""
    if lock is not None:
        lock.acquire()
    try:
        with replica.lock:
            yield
    finally:
        if lock is not None:
            lock.release()


class _Loop:
    """One asyncio event loop in a daemon thread; `run` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="statefuse-jetstream", daemon=True
        )
        self.thread.start()

    def run(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise BrokerUnavailableError(
                "url", "broker-timeout", f"the broker did not answer within {timeout:g} s"
            ) from None

    def close(self) -> None:
        # the client's own tasks (a subscription's reader, a reconnect) outlive a close that
        # could not reach the broker: end them on the loop first, or closing it leaves them
        # pending and Python prints their traceback at exit ("Event loop is closed")
        with contextlib.suppress(Exception):
            self.run(_cancel_the_rest(), 5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


async def _cancel_the_rest() -> None:
    """Cancel every other task on the running loop and wait (briefly) for them to end."""
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=2.0)


async def _open(
    url: str,
    shown: str,
    login: BrokerLogin,
    on_error: Callable[[Exception], Awaitable[None]],
    **options: Any,
) -> Client:
    """``nats.connect`` through the seam, where a refused login is a BrokerRefusedError (rule
    ``broker-auth``): nats-py tries the server again and ends with "no servers available",
    telling why only to its error callback (and, while connecting, only as the text of the
    server's ``-ERR 'Authorization Violation'``)."""
    refused: list[Exception] = []

    async def noted(exc: Exception) -> None:
        if isinstance(exc, nats.errors.AuthorizationError) or (
            "authorization violation" in str(exc).lower()
        ):
            refused.append(exc)
        await on_error(exc)

    try:
        async with _mapped(f"connecting to {shown}"):
            return await nats.connect(
                url,
                error_cb=noted,
                user_credentials=login.credentials,
                nkeys_seed=login.nkey_seed,
                **options,
            )
    except BrokerUnavailableError as exc:
        if not refused:
            raise
        raise BrokerRefusedError(
            "url",
            "broker-auth",
            _unsecret(f"the broker at {shown} refused the login: {refused[-1]}"),
        ) from exc


@contextlib.asynccontextmanager
async def _mapped(doing: str) -> AsyncIterator[None]:
    """The one seam for nats-py's errors: each becomes a `JetStreamError` subclass."""
    try:
        yield
    except JetStreamError:
        raise
    except nats.js.errors.APIError as exc:
        raise BrokerRefusedError(
            "broker", "broker-refused", _unsecret(f"the broker refused {doing}: {exc}")
        ) from exc
    except (asyncio.TimeoutError, nats.errors.TimeoutError) as exc:
        raise BrokerUnavailableError(
            "url", "broker-timeout", f"the broker did not answer while {doing}"
        ) from exc
    except (nats.errors.Error, OSError) as exc:
        said = str(exc) or type(exc).__name__
        raise BrokerUnavailableError(
            "url", "broker-unreachable", _unsecret(f"no broker while {doing}: {said}")
        ) from exc


class JetStreamLink:
    """A replica's link to one JetStream stream: publish its own changes, take in the rest.

    ``url``: the NATS server (``nats://host:port``). ``peers``: HTTP sync URLs asked to fill
    what the stream's retention dropped. ``lock``: a lock of the caller's, held (before the
    replica's own, `Replica.lock`) whenever the link uses the replica; not needed.
    ``max_msgs`` / ``duplicate_window`` (seconds) configure the stream when this link creates
    it (an existing stream is used as it is). ``credentials``: the path of a NATS ``.creds``
    file (user JWT and seed), or ``nkey_seed``: the path of a user's NKey seed file, to log in
    with besides what the URL carries (not both); the file is checked here, and its contents
    never show in an error or a status. Raises JetStreamError for a replica that cannot be
    linked (rule ``replica-type``, ``readonly``) and for a login file that cannot serve
    (``one-credential``, ``path``, ``file``, ``creds-format``, ``nkey-seed``,
    ``nkeys-missing``), before any connect. ``chunk_bounds``: how changes that arrive in
    chunks are held (`ChunkBounds`: expiry, per-author and overall bounds); ``clock``: the
    monotonic clock their age is read on (tests give a fake one).

    The API is synchronous; `start` connects, `sync_once` runs one round, `stop` disconnects.
    """

    def __init__(
        self,
        replica: Replica,
        url: str,
        *,
        peers: Sequence[str] = (),
        lock: Lock | None = None,
        max_msgs: int | None = None,
        duplicate_window: float = 120.0,
        connect_timeout: float = 2.0,
        credentials: StrPath | None = None,
        nkey_seed: StrPath | None = None,
        chunk_bounds: ChunkBounds | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not isinstance(replica, Replica):
            raise JetStreamError("replica", "replica-type", f"expected a Replica, got {replica!r}")
        if chunk_bounds is not None and not isinstance(chunk_bounds, ChunkBounds):
            raise JetStreamError(
                "chunk_bounds", "type", f"expected a ChunkBounds, got {chunk_bounds!r}"
            )
        if replica.readonly:
            raise JetStreamError(
                "replica", "readonly", "a read-only replica can neither publish nor receive"
            )
        if not isinstance(url, str) or not url:
            raise JetStreamError("url", "url", f"expected a nats:// URL, got {url!r}")
        if isinstance(peers, str):
            raise JetStreamError("peers", "url-list", "peers is a list of URLs, not one string")
        if max_msgs is not None and (type(max_msgs) is not int or max_msgs < 1):
            raise JetStreamError("max_msgs", "range", f"expected an int >= 1, got {max_msgs!r}")
        self.replica = replica
        self.url = url
        #: The URL as it may be shown: its password, if any, masked (`masked_url`).
        self.shown_url = masked_url(url)
        self.peers = tuple(peers)
        self.lock = lock
        self._duplicate_window = check_seconds("duplicate_window", duplicate_window)
        self._connect_timeout = check_seconds("connect_timeout", connect_timeout)
        self._max_msgs = max_msgs
        #: The login file, if any (its path: nats-py reads it at each connect).
        self.login = _login(credentials, nkey_seed)
        self.stream = stream_name(replica.space)
        self.subject = subject_of(replica.space, replica.author)
        info = replica.store.info()
        assert info is not None  # a replica's store is initialized
        self.consumer = consumer_name(info.store_id or replica.author)
        self._loop: _Loop | None = None
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._sub: JetStreamContext.PullSubscription | None = None
        #: Set when this link made the stream: every own change is published to it again.
        self._fresh_stream = False
        self._new_consumer = False
        #: Own changes not yet published, in the order they were accepted (id -> None).
        self._outbox: dict[bytes, None] = {}
        self._seen = 0
        self._marks: set[bytes] | None = None
        self._assemblies: dict[bytes, _Assembly] = {}
        #: Assemblies held per subject.
        self._held: dict[str, dict[bytes, _Assembly]] = {}
        #: How assemblies are bounded, and the clock their age is read on (monotonic seconds).
        self.chunk_bounds = chunk_bounds if chunk_bounds is not None else ChunkBounds()
        self._clock = clock if clock is not None else time.monotonic
        #: Changes joined from chunks lately (id -> None, the oldest forgotten first).
        self._joined: dict[bytes, None] = {}
        #: When each chunk handed back to the broker is due again (monotonic, in order; one
        #: leaves at each delivery again): a round does not wait for those not due yet.
        self._parked: collections.deque[float] = collections.deque()
        #: The broker's time of the newest message first delivered (epoch seconds).
        self._stream_now = 0.0
        self._evicted = 0
        self._expired = 0
        self._abandoned = 0
        self._abandoned_ids: collections.deque[str] = collections.deque(maxlen=_ABANDONED_SHOWN)
        self._lost: dict[bytes, _Lost] = {}
        self._searches: dict[bytes, _Search] = {}
        self._reread = 0
        self._unreadable = 0
        self._published = 0
        self._received = MergeReport()
        self._rejected = 0
        self._lag: int | None = None
        self._gap: tuple[int, int] | None = None
        self._last_error: str | None = None
        #: Why the last round could not fill a gap from ``peers`` (None: it could, or needn't).
        self._peer_error: str | None = None
        #: The long-poll fetch `wait` started (on the loop; never cancelled while connected,
        #: so no message it took is lost), and the loop-side event `wake` sets to end a wait.
        self._poll: asyncio.Future[list[Msg]] | None = None
        self._interrupt: asyncio.Event | None = None
        #: Set when the connection drops while publishes await their PubAck (armed by `_send`
        #: only on a live connection): those publishes end at once instead of waiting out
        #: the round, and the round reports the drop.
        self._dropped: asyncio.Event | None = None
        #: Set by `wake`, cleared by the `wait` it ends (a wake before a wait ends that wait).
        self._woken = threading.Event()
        #: When the last round asked the broker for the stream's state (monotonic), and the
        #: stream sequence of the last message taken in (a jump past it may be a gap).
        self._checked_at: float | None = None
        self._last_seq: int | None = None
        #: The first sequence a skip passed over, until `_check_gap` looked at it.
        self._suspect: int | None = None
        #: When a round stops taking in more batches (half its time): a long backlog is
        #: taken in over several rounds, each ending well, rather than one that times out.
        self._enough = 0.0

    # --- life ---------------------------------------------------------------------------------

    def start(self, *, timeout: float = 10.0) -> JetStreamLink:
        """Connect, make the stream and this replica's consumer if they are missing; returns
        the link. Raises BrokerUnavailableError / BrokerRefusedError."""
        seconds = check_seconds("timeout", timeout)
        if self._loop is None:
            self._loop = _Loop()
        try:
            self._loop.run(self._connect(), seconds)
        except JetStreamError as exc:
            self._last_error = self._scrub(exc.message)
            raise
        return self

    def stop(self) -> None:
        """Disconnect (the durable consumer stays in the broker) and end the loop thread."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        with contextlib.suppress(Exception):
            loop.run(self._close(), 5.0)
        loop.close()

    def __enter__(self) -> JetStreamLink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _connect(self) -> None:
        if self._nc is None or self._nc.is_closed:
            self._nc = await _open(
                self.url,
                self.shown_url,
                self.login,
                self._on_error,
                connect_timeout=self._connect_timeout,
                allow_reconnect=True,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.2,
                disconnected_cb=self._on_disconnect,
            )
            # nats-py applies one limit to the first connect and to reconnects: the first
            # connect fails fast (no broker is an error to report), a lost connection is
            # retried for as long as the link lives (an outage only delays)
            self._nc.options["max_reconnect_attempts"] = -1
            self._js = self._nc.jetstream(timeout=self._connect_timeout)
            self._sub = None
            self._drop_poll()
            self._checked_at = None
        if self._interrupt is None:
            self._interrupt = asyncio.Event()
        if self._sub is None:
            await self._ensure_stream()
            await self._ensure_consumer()

    async def _ensure_stream(self) -> None:
        assert self._js is not None
        async with _mapped(f"looking up stream {self.stream}"):
            try:
                await self._js.stream_info(self.stream)
                return
            except nats.js.errors.NotFoundError:
                pass
        config = StreamConfig(
            name=self.stream,
            subjects=[f"sf.{space_token(self.replica.space)}.*"],
            storage=StorageType.FILE,
            max_msgs=self._max_msgs if self._max_msgs is not None else -1,
            duplicate_window=self._duplicate_window,
        )
        async with _mapped(f"creating stream {self.stream}"):
            await self._js.add_stream(config)
        self._fresh_stream = True

    async def _ensure_consumer(self) -> None:
        assert self._js is not None
        async with _mapped(f"looking up consumer {self.consumer}"):
            try:
                await self._js.consumer_info(self.stream, self.consumer)
            except nats.js.errors.NotFoundError:
                self._new_consumer = True
            config = ConsumerConfig(
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=30.0,
                max_ack_pending=-1,
            )
            self._sub = await self._js.pull_subscribe(
                f"sf.{space_token(self.replica.space)}.*",
                durable=self.consumer,
                stream=self.stream,
                config=config,
            )

    async def _close(self) -> None:
        self._drop_poll()
        nc, self._nc, self._js, self._sub = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    async def _on_error(self, exc: Exception) -> None:
        self._last_error = self._scrub(f"{type(exc).__name__}: {exc}".strip())

    async def _on_disconnect(self) -> None:
        self._last_error = f"disconnected from {self.shown_url}"
        if self._dropped is not None:
            self._dropped.set()

    def _scrub(self, text: str) -> str:
        return _scrubbed(text, self.url)

    # --- one round ----------------------------------------------------------------------------

    def sync_once(
        self,
        *,
        timeout: float = 10.0,
        progress: Callable[[int, int], object] | None = None,
        publish_only: bool = False,
    ) -> LinkRound:
        """Publish the outbox, take in everything the stream holds for this consumer, and fill
        a gap from ``peers``; returns what moved. A backlog that takes longer than half of
        ``timeout`` to take in is left for the next round (`LinkStatus.lag` says how much):
        the round ends well rather than running out of time. ``progress(done, total)`` is
        called (in the link's loop thread) after each change the stream acknowledged.
        ``publish_only``: publish the outbox and nothing else (a writer that leaves reading to
        its follower, or to later rounds).

        Raises BrokerUnavailableError / BrokerRefusedError (what moved before it stays: marked
        published, or received and acknowledged), and what `Replica.receive` raises.
        """
        seconds = check_seconds("timeout", timeout)
        deadline = time.monotonic() + seconds
        self._enough = time.monotonic() + seconds / 2
        try:
            result = self._round(deadline, progress, publish_only)
        except JetStreamError as exc:
            self._last_error = self._scrub(exc.message)
            raise
        self._last_error = self._peer_error
        return result

    def _within(self, deadline: float, step: Callable[..., Any], *args: Any) -> Any:
        """Run ``step(*args)`` on the loop within what is left of the round (the time is
        checked first, so a round out of time makes no coroutine it would never run)."""
        assert self._loop is not None
        left = self._left(deadline)
        return self._loop.run(step(*args), left)

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise BrokerUnavailableError("timeout", "broker-timeout", "the round ran out of time")
        return left

    def _round(
        self,
        deadline: float,
        progress: Callable[[int, int], object] | None,
        publish_only: bool = False,
    ) -> LinkRound:
        if self._loop is None:
            self._loop = _Loop()
        self._within(deadline, self._connect)
        published = self._publish(deadline, progress)
        if publish_only:
            self._peer_error = None
            return LinkRound(published=published)
        fetched, merge = self._take_in(deadline)
        more, report = self._read_lost(deadline)
        fetched += more
        merge = merge + report
        reconciled: tuple[SyncReport, ...] = ()
        self._peer_error = None
        if self.peers and (self._gap is not None or self.replica.pending_count()):
            reconciled = self._reconcile()
        return LinkRound(published=published, fetched=fetched, merge=merge, reconciled=reconciled)

    # --- publishing ---------------------------------------------------------------------------

    def _own_unpublished(self) -> list[tuple[bytes, bytes]]:
        """The outbox: own accepted changes without a publish mark, oldest first, as (id,
        bytes). Kept incrementally; the log only grows (a reload that shrank it rescans)."""
        replica = self.replica
        log = replica.log
        if self._marks is None or len(log) < self._seen:
            self._marks = set() if self._fresh_stream else replica.store.published(self.stream)
            self._outbox.clear()
            self._seen = 0
        for cid in log.accepted_since(self._seen):
            change = log.get(cid)
            if change is not None and change.author == replica.author and cid not in self._marks:
                self._outbox[cid] = None
        self._seen = len(log)
        return [(cid, data) for cid in self._outbox for data in replica.change_bytes([cid])]

    def _publish(self, deadline: float, progress: Callable[[int, int], object] | None) -> int:
        assert self._loop is not None
        with _holding(self.lock, self.replica):
            outbox = self._own_unpublished()
        if not outbox:
            return 0
        done: list[bytes] = []
        error: JetStreamError | None = None
        try:
            self._within(deadline, self._send, outbox, done, progress)
        except JetStreamError as exc:
            error = exc
        done = list(done)  # the loop thread appends no more
        if done:
            with _holding(self.lock, self.replica):
                self.replica.store.mark_published(self.stream, done)
            assert self._marks is not None
            for cid in done:
                self._marks.add(cid)
                self._outbox.pop(cid, None)
            self._published += len(done)
        if error is not None:
            raise error
        return len(done)

    async def _send(
        self,
        outbox: list[tuple[bytes, bytes]],
        done: list[bytes],
        progress: Callable[[int, int], object] | None,
    ) -> None:
        assert self._nc is not None and self._js is not None
        room = self._nc.max_payload - _HEADER_ROOM
        if room < 1024:
            raise JetStreamError(
                "broker",
                "max-payload",
                f"the server's max_payload ({self._nc.max_payload} bytes) leaves no room for"
                " a chunk of 1 KiB",
            )
        # up to `_PUBLISH_WINDOW` publishes await their PubAck at once (sent in order); a
        # change counts as done, in outbox order, once its own PubAck came. On a live
        # connection, a drop ends the waiting at once (a connection that is already down may
        # come back within the round: then the publishes wait for it, as before)
        self._dropped = asyncio.Event() if self._nc.is_connected else None
        window: list[tuple[bytes, asyncio.Future[None]]] = []
        try:
            for cid, data in outbox:
                window.append((cid, asyncio.ensure_future(self._publish_one(cid, data, room))))
                if len(window) >= _PUBLISH_WINDOW:
                    await self._settle(window, done, progress, len(outbox))
            await self._settle(window, done, progress, len(outbox))
        finally:
            self._dropped = None
            for _, task in window:  # cancelled, or a failure ended the settling early
                task.cancel()

    async def _publish_one(self, cid: bytes, data: bytes, room: int) -> None:
        async with _mapped(f"publishing change {cid.hex()[:12]}…"):
            if len(data) <= room:
                await self._put(data, {"Nats-Msg-Id": cid.hex()})
                return
            count = -(-len(data) // room)
            for i in range(count):
                headers = {
                    "Nats-Msg-Id": f"{cid.hex()}.{i}",
                    CHANGE_HEADER: cid.hex(),
                    CHUNK_HEADER: f"{i}/{count}",
                }
                await self._put(data[i * room : (i + 1) * room], headers)

    async def _settle(
        self,
        window: list[tuple[bytes, asyncio.Future[None]]],
        done: list[bytes],
        progress: Callable[[int, int], object] | None,
        total: int,
    ) -> None:
        """Wait for every publish of ``window`` (emptied), or until the connection drops
        (`_dropped`: the unacknowledged ones are cancelled, left in the outbox for the next
        round); note the acknowledged ones in ``done``, then raise the first failure, if
        any."""
        batch = list(window)
        window.clear()
        if not batch:
            return
        tasks: set[asyncio.Future[Any]] = {task for _, task in batch}
        dropped = self._dropped
        watch = asyncio.ensure_future(dropped.wait()) if dropped is not None else None
        try:
            pending = set(tasks)
            while pending and not (dropped is not None and dropped.is_set()):
                _, pending = await asyncio.wait(
                    pending if watch is None else {*pending, watch},
                    return_when=asyncio.FIRST_COMPLETED,
                )
                pending.discard(watch)
        finally:
            if watch is not None:
                watch.cancel()
        for task in tasks:
            if not task.done():
                task.cancel()
        if any(not task.done() for task in tasks):
            await asyncio.wait(tasks)
        failure: BaseException | None = None
        if dropped is not None and dropped.is_set():
            failure = BrokerUnavailableError(
                "url",
                "broker-unreachable",
                f"disconnected from {self.shown_url} while publishing: the changes not"
                " acknowledged stay in the outbox",
            )
        for cid, task in batch:
            error = task.exception() if not task.cancelled() else asyncio.CancelledError()
            if error is None:
                done.append(cid)
                if progress is not None:
                    progress(len(done), total)
            elif failure is None:
                failure = error
        if failure is not None:
            raise failure

    async def _put(self, payload: bytes, headers: dict[str, str]) -> None:
        assert self._js is not None
        # a duplicate PubAck (the stream already holds this id) is success: that is the point
        await self._js.publish(self.subject, payload, stream=self.stream, headers=headers)

    # --- taking in ----------------------------------------------------------------------------

    def _take_in(self, deadline: float) -> tuple[int, MergeReport]:
        """Take in what the stream holds for this consumer. A long-poll that finished (see
        `wait`) is taken first; the broker is asked for the stream's state (retention gap,
        what is left) unless that poll brought messages in sequence and it was asked less than
        `_CHECK_SECONDS` ago: a follower woken by each change pays one round trip for it."""
        assert self._loop is not None
        fetched = 0
        merge = MergeReport()
        pending = 0
        taken = False
        if self._poll is not None and self._poll.done():
            msgs = self._within(deadline, self._harvest, 0.0)
            assert msgs is not None  # a finished poll
            pending, taken = self._pending_after(msgs), bool(msgs)
            fetched, merge = self._absorb(msgs, deadline)
        if not taken or self._suspect is not None or self._check_due():
            pending = self._within(deadline, self._check_gap)
        while pending > 0 and time.monotonic() < self._enough:
            if self._poll is not None:  # in flight: the broker hands it what waits first
                polled = self._within(deadline, self._harvest, _HARVEST_SECONDS)
                if polled is None:
                    break  # nothing came (what waits is delivered, not yet acknowledged)
                msgs, pending = polled, self._pending_after(polled)
            else:
                msgs, pending = self._within(deadline, self._fetch)
            more, report = self._absorb(msgs, deadline)
            fetched += more
            merge = merge + report
            if not msgs:
                break
        if self._suspect is not None:
            self._within(deadline, self._check_gap)
        if self._assemblies:  # a quiet stream still ages what it holds
            stale = _Verdicts()
            self._expire(self._clock(), stale)
            if stale.finished or stale.again:
                self._within(deadline, self._answer, stale)
        self._lag = pending + sum(len(a.msgs) for a in self._assemblies.values())
        return fetched, merge

    def _absorb(self, msgs: list[Msg], deadline: float) -> tuple[int, MergeReport]:
        """Receive the changes ``msgs`` carry, then acknowledge the messages done with."""
        assert self._loop is not None
        self._note_sequences(msgs)
        verdicts = self._decode(msgs)
        self._complete_from_stream(verdicts, deadline)
        report = MergeReport()
        datas = verdicts.datas
        if datas:
            with _holding(self.lock, self.replica):
                report = self.replica.receive(datas, source=self.shown_url)
            self._received = self._received + report
        if verdicts.finished or verdicts.again or verdicts.refused:
            self._within(deadline, self._answer, verdicts)
        return len(datas), report

    def _note_sequences(self, msgs: list[Msg]) -> None:
        """Remember the highest stream sequence taken in; a message past the next one may mean
        retention dropped what lies between (or only that it is delivered again later): the
        round then asks the broker (`_check_gap`), which tells the two apart."""
        for msg in msgs:
            seq = _stream_sequence(msg)
            if seq is None:
                continue
            last = self._last_seq
            if last is not None and seq > last + 1 and self._suspect is None:
                self._suspect = last + 1
            if last is None or seq > last:
                self._last_seq = seq

    def _check_due(self) -> bool:
        return self._checked_at is None or time.monotonic() - self._checked_at >= _CHECK_SECONDS

    @staticmethod
    def _pending_after(msgs: list[Msg]) -> int:
        """What the broker had not delivered yet when it sent the last of ``msgs``."""
        if not msgs:
            return 0
        try:
            return int(msgs[-1].metadata.num_pending or 0)
        except (ValueError, TypeError, AttributeError, nats.errors.Error):
            return 0

    async def _check_gap(self) -> int:
        """Note in `LinkStatus.gap` whether retention dropped messages this consumer had not
        taken in: its next sequence is below the stream's first, a consumer made in this
        run finds a stream that no longer starts at 1, or a message skipped sequences the
        stream no longer holds. Returns what the consumer has left to take in: messages not
        yet delivered, and delivered ones not yet acknowledged that this link does not hold
        (delivered again once their wait runs out)."""
        assert self._js is not None
        async with _mapped(f"reading the state of stream {self.stream}"):
            stream = await self._js.stream_info(self.stream)
            consumer = await self._js.consumer_info(self.stream, self.consumer)
        self._checked_at = time.monotonic()
        first = stream.state.first_seq
        delivered = consumer.delivered.stream_seq if consumer.delivered is not None else 0
        wanted = 1 if self._new_consumer else delivered + 1
        if self._suspect is not None:
            wanted = min(wanted, self._suspect)
            self._suspect = None
        self._new_consumer = False
        if wanted < first:
            self._gap = (wanted, first)
        held = sum(len(a.msgs) for a in self._assemblies.values()) + self._not_due()
        return (consumer.num_pending or 0) + max(0, (consumer.num_ack_pending or 0) - held)

    async def _fetch(self) -> tuple[list[Msg], int]:
        """Up to `_FETCH_BATCH` messages, and how many are not delivered yet."""
        assert self._sub is not None
        async with _mapped(f"fetching from stream {self.stream}"):
            try:
                msgs = await self._sub.fetch(_FETCH_BATCH, timeout=0.5)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                msgs = []
        return msgs, self._pending_after(msgs)

    # --- waiting --------------------------------------------------------------------------------

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds`` until the stream holds something for this replica (True: a
        `sync_once` now takes it in without a poll's delay), `wake` is called, or the time
        passes (False). A long-poll: the broker holds the request and answers the moment a
        message arrives, so a follower waiting this way takes a change in about a round trip
        after it is published and costs nothing while nothing happens. Not connected (before
        the first round, or while the broker is away) it only sleeps, until `wake`. Never
        raises for the broker: a poll that failed ends the wait (True) and the next round
        reports why. Call it from one thread at a time, between rounds."""
        seconds = check_seconds("seconds", seconds)
        loop = self._loop
        if loop is None or self._sub is None or self._interrupt is None:
            self._woken.wait(seconds)
            self._woken.clear()
            return False
        try:
            return bool(loop.run(self._await_news(seconds), seconds + self._connect_timeout + 1))
        except JetStreamError:
            return False

    def wake(self) -> None:
        """End a `wait` now (or the next one, when none runs); safe from any thread."""
        self._woken.set()
        loop, interrupt = self._loop, self._interrupt
        if loop is not None and interrupt is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.loop.call_soon_threadsafe(interrupt.set)

    async def _await_news(self, seconds: float) -> bool:
        interrupt = self._interrupt
        assert interrupt is not None
        interrupt.clear()
        clock = asyncio.get_running_loop()
        end = clock.time() + seconds
        while True:
            if self._woken.is_set():
                self._woken.clear()
                return False
            if self._sub is None:
                return False
            if self._poll is None:
                self._poll = asyncio.ensure_future(self._long_poll(self._sub))
                # its error is the next round's to report; a poll dropped unharvested (the
                # link closing) must not log "exception never retrieved" either
                self._poll.add_done_callback(_retrieved)
            poll = self._poll
            if poll.done():
                if poll.cancelled() or poll.exception() is not None or poll.result():
                    return True
                self._poll = None  # the broker held it to the end: nothing came, ask again
                continue
            left = end - clock.time()
            if left <= 0:
                return False
            waker: asyncio.Future[Any] = asyncio.ensure_future(interrupt.wait())
            waiting: set[asyncio.Future[Any]] = {poll, waker}
            try:
                await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waker.cancel()
            interrupt.clear()

    @staticmethod
    async def _long_poll(sub: JetStreamContext.PullSubscription) -> list[Msg]:
        try:
            return await sub.fetch(_FETCH_BATCH, timeout=_POLL_SECONDS)
        except (nats.errors.TimeoutError, asyncio.TimeoutError):
            return []

    async def _harvest(self, seconds: float) -> list[Msg] | None:
        """The messages of the long-poll in flight, waiting up to ``seconds`` for it to end;
        None when it has not."""
        poll = self._poll
        if poll is None:
            return []
        if not poll.done():
            await asyncio.wait({poll}, timeout=seconds)
            if not poll.done():
                return None
        self._poll = None
        async with _mapped(f"fetching from stream {self.stream}"):
            return poll.result()

    def _drop_poll(self) -> None:
        """Forget the long-poll (the connection it used is gone). Messages it held unacknowledged
        are delivered again once their acknowledgement wait runs out: delayed, never lost."""
        poll, self._poll = self._poll, None
        if poll is not None and not poll.done():
            poll.cancel()

    async def _answer(self, verdicts: _Verdicts) -> None:
        """Tell the broker what became of each message: done with (acknowledged, after what it
        carried was received), to deliver again later (a chunk dropped from its assembly), or
        never to deliver again (no chunk of any change)."""
        assert self._nc is not None
        bounds = self.chunk_bounds
        async with _mapped("acknowledging messages"):
            for msg in verdicts.finished:
                await msg.ack()
            for msg in verdicts.again:
                await msg.nak(delay=bounds.redeliver_after)
            for msg in verdicts.refused:
                await msg.term()
            await self._nc.flush()

    def _decode(self, msgs: list[Msg]) -> _Verdicts:
        """The changes ``msgs`` carry (chunks joined when their change is complete), and what
        to tell the broker of each message. Chunks of a change still incomplete stay
        unacknowledged with their assembly. An assembly dropped to keep within `ChunkBounds`,
        or stale, is remembered to be read again from the stream and its chunks are handed
        back to the broker (see `_lose`): a change that can still complete is never lost to
        one that cannot. Only a message that is no chunk of any change (malformed headers,
        more bytes than a change may have) is terminated."""
        out = _Verdicts()
        now = self._clock()
        for msg in msgs:
            headers = msg.headers or {}
            if CHUNK_HEADER not in headers:
                out.datas.append(msg.data)
                out.finished.append(msg)
                continue
            chunk = _chunk_of(headers)
            if chunk is None:
                self._refuse(msg, out)
                continue
            cid, index, count = chunk
            seq, stamp, deliveries = _delivery_of(msg)
            if deliveries <= 1:
                self._stream_now = max(self._stream_now, stamp)
            else:
                if self._parked:
                    self._parked.popleft()
            if cid in self._joined:  # a copy of a chunk handed back earlier: done with
                out.finished.append(msg)
                continue
            assembly = self._assemblies.get(cid)
            if assembly is None:
                assembly = _Assembly(cid, msg.subject, count, now, touched=seq, stamp=stamp)
                assembly.reread = cid in self._lost
                if not self._make_room(assembly, out):
                    assembly.parts[index], assembly.seqs[index] = msg.data, seq
                    assembly.msgs.append(msg)
                    self._lose(assembly, out)  # the newcomer is the one to drop
                    lost = self._lost.get(cid)
                    if lost is not None and len(lost.seqs) == count:
                        out.covered.append(cid)  # every chunk seen: read from the stream
                    continue
                self._hold(assembly)
            if assembly.count != count:
                # two counts for one change: one is not the author's (its signature tells
                # which, once joined), so this one is handed back to be delivered again
                self._evicted += 1
                self._park([msg], out)
                continue
            if index not in assembly.parts:
                assembly.parts[index] = msg.data
                assembly.size += len(msg.data)
                if seq:
                    assembly.seqs[index] = seq
            elif msg.data != assembly.parts[index] and len(assembly.others) < _OTHERS_KEPT:
                assembly.others.append((index, msg.data))
                assembly.size += len(msg.data)
            assembly.msgs.append(msg)
            assembly.touched = max(assembly.touched, seq)
            assembly.stamp = max(assembly.stamp, stamp)
            assembly.first = assembly.first and deliveries <= 1
            if assembly.size > MAX_CHANGE_BYTES + _MAX_CHUNKS:
                self._unhold(cid)
                for m in assembly.msgs:
                    self._refuse(m, out)
                continue
            if len(assembly.parts) == count:
                self._joined_from(assembly, out)
        self._expire(now, out)
        return out

    def _hold(self, assembly: _Assembly) -> None:
        self._assemblies[assembly.cid] = assembly
        self._held.setdefault(assembly.subject, {})[assembly.cid] = assembly

    def _unhold(self, cid: bytes) -> None:
        assembly = self._assemblies.pop(cid, None)
        if assembly is not None:
            mine = self._held[assembly.subject]
            del mine[cid]
            if not mine:
                del self._held[assembly.subject]

    def _joined_from(self, assembly: _Assembly, out: _Verdicts) -> None:
        """``assembly`` is complete: its change is to be received, its chunks are done with.
        When the bytes joined are not the change the chunks name (someone published a chunk
        of that change id before the author's own), they are received all the same (and
        quarantined there, with the reason), but the change is remembered as dropped: the
        author's chunks that arrive later are joined with the earlier ones read again from
        the stream by sequence."""
        cid = assembly.cid
        self._unhold(cid)
        data = b"".join(assembly.parts[i] for i in range(assembly.count))
        if assembly.others and _claimed_id(data) != cid:
            for index, other in assembly.others:  # the other bytes of one index, in turn
                parts = {**assembly.parts, index: other}
                joined = b"".join(parts[i] for i in range(assembly.count))
                if _claimed_id(joined) == cid:
                    data = joined
                    break
        out.datas.append(data)
        out.finished.extend(assembly.msgs)
        if assembly.count > 1 and _claimed_id(data) != cid:
            self._remember(assembly)
            return
        self._lost.pop(cid, None)
        self._joined[cid] = None
        while len(self._joined) > _JOINED_KEPT:
            del self._joined[next(iter(self._joined))]

    def _make_room(self, newcomer: _Assembly, out: _Verdicts) -> bool:
        """Drop assemblies until ``newcomer`` fits within the bounds (per subject, overall);
        False when the newcomer itself is the one to drop. The assembly touched longest ago
        (by stream sequence) goes first, from the newcomer's subject when that is full, else
        from all: a flood of chunks that never complete is dropped before an honest change,
        whose chunks follow each other closely in the stream."""
        bounds = self.chunk_bounds
        held = self._held
        subject = newcomer.subject
        while True:
            mine = held.get(subject, {})
            if len(mine) >= bounds.per_author:
                victim = min([*mine.values(), newcomer], key=_TOUCHED)
            elif len(self._assemblies) >= bounds.total:
                victim = min(newcomer, min(self._assemblies.values(), key=_TOUCHED), key=_TOUCHED)
            else:
                return True
            self._evicted += 1
            if victim is newcomer:
                return False
            self._unhold(victim.cid)
            self._lose(victim, out)

    def _expire(self, now: float, out: _Verdicts) -> None:
        """Drop the assemblies that outlived `ChunkBounds.expiry`, by this link's clock (since
        it made them) or by the broker's (their newest chunk against the newest message first
        delivered)."""
        expiry = self.chunk_bounds.expiry
        for assembly in list(self._assemblies.values()):
            stale = now - assembly.born > expiry or (
                assembly.first and self._stream_now - assembly.stamp > expiry
            )
            if stale:
                self._expired += 1
                self._unhold(assembly.cid)
                self._lose(assembly, out)

    def _lose(self, assembly: _Assembly, out: _Verdicts) -> None:
        """Remember a dropped assembly (to read its change again from the stream) and hand
        its chunks back to the broker (`_park`); counted as given up when every chunk was
        delivered `ChunkBounds.give_up_after` times (not remembered then: a flood's second
        delivery must not push out what the first remembered; a pending change that follows
        such a change has it searched for in the stream, see `_read_lost`)."""
        tries = self.chunk_bounds.give_up_after
        if any(_delivery_of(m)[2] < tries for m in assembly.msgs):
            self._remember(assembly)
        if not self._park(assembly.msgs, out):
            self._abandoned += 1
            self._abandoned_ids.append(assembly.cid.hex())

    def _remember(self, assembly: _Assembly) -> None:
        """Note where the chunks of ``assembly`` lay in the stream (see `_Lost`)."""
        lost = self._lost.pop(assembly.cid, None)
        if lost is None or lost.count != assembly.count:
            lost = _Lost(assembly.subject, assembly.count)
        for index, seq in assembly.seqs.items():
            if len(lost.seqs) < _SEQS_KEPT or index in lost.seqs:
                lost.seqs[index] = seq
        self._lost[assembly.cid] = lost
        while len(self._lost) > _LOST_KEPT:
            del self._lost[next(iter(self._lost))]

    def _park(self, msgs: list[Msg], out: _Verdicts) -> bool:
        """Hand ``msgs`` back to the broker to deliver again later, except those delivered
        `ChunkBounds.give_up_after` times already (acknowledged: done with). True when any
        was handed back."""
        tries = self.chunk_bounds.give_up_after
        again = False
        for msg in msgs:
            if _delivery_of(msg)[2] >= tries:
                out.finished.append(msg)
            else:
                out.again.append(msg)
                self._parked.append(time.monotonic() + self.chunk_bounds.redeliver_after)
                again = True
        return again

    # --- reading a dropped change again --------------------------------------------------------

    def _complete_from_stream(self, out: _Verdicts, deadline: float) -> None:
        """Complete, from the stream, the assemblies of changes dropped before (a later chunk
        arrived): their missing chunks that were seen here are read by their sequence (one
        request each, nothing when none was). At most `_REREADS_PER_BATCH`."""
        todo = [a for a in self._assemblies.values() if a.reread][:_REREADS_PER_BATCH]
        for cid in dict.fromkeys(out.covered[: _REREADS_PER_BATCH - len(todo)]):
            lost = self._lost.get(cid)
            if cid in self._assemblies or cid in self._joined or lost is None:
                continue
            parts = self._within(deadline, self._read_parts, cid, lost, ())
            if len(parts) == lost.count:
                self._reread += 1
                self._joined_from(_Assembly(cid, lost.subject, lost.count, 0.0, parts=parts), out)
        for assembly in todo:
            assembly.reread = False
            lost = self._lost.get(assembly.cid)
            if lost is None or not set(lost.seqs) - set(assembly.parts):
                continue
            parts = self._within(deadline, self._read_parts, assembly.cid, lost, assembly.parts)
            for index, data in parts.items():  # kept, even when the change is not complete
                assembly.parts.setdefault(index, data)
                assembly.size += len(data)
            if len(assembly.parts) == assembly.count:
                self._reread += 1
                self._joined_from(assembly, out)

    def _read_lost(self, deadline: float) -> tuple[int, MergeReport]:
        """Find in the stream the missing predecessor of each pending change (at most
        `_REREADS_PER_ROUND` a round): by the sequences of its chunks when this link dropped
        them and remembers where, else by reading its author's subject from the start of the
        stream, `_REREAD_READS` messages a round, on from where the last round stopped. So an
        author's later changes never wait for good on chunks dropped here (nor after a
        restart of the follower, which forgets what it dropped). A predecessor the whole
        subject does not hold is logged once as a warning and counted
        (`LinkStatus.unreadable`), and looked for again after `ChunkBounds.expiry`."""
        with _holding(self.lock, self.replica):
            pending = self.replica.pending()
        if not pending:
            self._searches.clear()
            return 0, MergeReport()
        waiting = {c.change_id for c in pending}
        wanted: dict[bytes, str] = {}
        for c in pending:
            if c.prev is not None and c.prev not in waiting:
                wanted.setdefault(c.prev, subject_of(self.replica.space, c.author))
        for cid in [cid for cid in self._searches if cid not in wanted]:
            del self._searches[cid]
        now = self._clock()
        out = _Verdicts()
        tried = 0
        # what this link dropped first, then searches under way, then the rest
        order = sorted(wanted, key=lambda c: (c not in self._lost, c not in self._searches))
        for cid in order:
            subject = wanted[cid]
            search = self._searches.get(cid)
            if search is None:
                if len(self._searches) >= _SEARCHES:
                    idle = [k for k, v in self._searches.items() if v.idle_until is not None]
                    if not idle:
                        continue
                    del self._searches[idle[0]]
                search = self._searches[cid] = _Search(subject)
            if search.idle_until is not None and now < search.idle_until:
                continue
            if tried >= _REREADS_PER_ROUND:
                break
            tried += 1
            search.idle_until = None
            held = self._assemblies.get(cid)
            have = dict(held.parts) if held is not None else {}
            data = None
            lost = self._lost.get(cid)
            if lost is not None and not search.by_seq:
                search.by_seq = True
                have.update(self._within(deadline, self._read_parts, cid, lost, have))
                if len(have) == lost.count:
                    data = b"".join(have[i] for i in range(lost.count))
                    if _claimed_id(data) != cid:
                        data = None
            if data is None:
                data = self._within(deadline, self._search_step, cid, search, have)
            if data is None:
                if search.done:  # the subject holds no such change (any more)
                    if not search.told and search.seen:
                        search.told = True
                        self._unreadable += 1
                        log.warning(
                            "change %s…, which a pending change from %s follows, is not in"
                            " stream %s",
                            cid.hex()[:12],
                            subject,
                            self.stream,
                        )
                    search.restart(now + self.chunk_bounds.expiry)
                continue
            del self._searches[cid]
            self._reread += 1
            msgs = held.msgs if held is not None else []
            self._joined_from(_Assembly(cid, subject, 1, 0.0, parts={0: data}, msgs=msgs), out)
        if not out.datas:
            return 0, MergeReport()
        with _holding(self.lock, self.replica):
            report = self.replica.receive(out.datas, source=self.shown_url)
        self._received = self._received + report
        if out.finished:
            self._within(deadline, self._answer, out)
        return len(out.datas), report

    async def _search_step(
        self, cid: bytes, search: _Search, have: dict[int, bytes]
    ) -> bytes | None:
        """Read on through ``search.subject`` (at most `_REREAD_READS` messages) for change
        ``cid``, whole or in chunks; its bytes once found (checked to be that change), else
        None (``search.done`` once the subject is read to its end)."""
        assert self._js is not None
        for index, data in have.items():
            search.parts.setdefault(index, data)
        async with _mapped(f"reading stream {self.stream} by subject"):
            for _ in range(_REREAD_READS):
                try:
                    raw = await self._js.get_msg(
                        self.stream, seq=search.next_seq, subject=search.subject, next=True
                    )
                except nats.js.errors.NotFoundError:
                    search.done = True
                    return None
                if raw.seq is None:
                    search.done = True
                    return None
                search.next_seq = raw.seq + 1
                search.seen = True
                headers = raw.headers or {}
                data = raw.data or b""
                if CHUNK_HEADER not in headers:
                    if _claimed_id(data) == cid:
                        return data
                    continue
                chunk = _chunk_of(headers)
                if chunk is None or chunk[0] != cid:
                    continue
                if search.count is None:
                    search.count = chunk[2]
                if chunk[2] != search.count:
                    continue
                search.parts.setdefault(chunk[1], data)
                if len(search.parts) == search.count:
                    joined = b"".join(search.parts[i] for i in range(search.count))
                    if _claimed_id(joined) == cid:
                        return joined
                    search.parts.clear()  # someone else's chunk among them: read on
        return None

    async def _read_parts(self, cid: bytes, lost: _Lost, have: Collection[int]) -> dict[int, bytes]:
        """The chunks of ``cid`` not in ``have`` whose stream sequence ``lost`` remembers,
        read by it (one request each): those still there, on the change's subject."""
        assert self._js is not None
        parts: dict[int, bytes] = {}
        async with _mapped(f"reading stream {self.stream} by sequence"):
            for index, seq in lost.seqs.items():
                if index in have:
                    continue
                try:
                    raw = await self._js.get_msg(self.stream, seq=seq)
                except nats.js.errors.NotFoundError:
                    continue
                chunk = _chunk_of(raw.headers or {})
                if chunk == (cid, index, lost.count) and raw.subject in (None, lost.subject):
                    parts[index] = raw.data or b""
        return parts

    def _not_due(self) -> int:
        """Chunks handed back to the broker that it will not deliver again yet."""
        now = time.monotonic()
        due = 0
        for when in self._parked:
            if when > now:
                break
            due += 1
        return len(self._parked) - due

    def _refuse(self, msg: Msg, out: _Verdicts) -> None:
        """A message that is no chunk of any change: terminated (never delivered again)."""
        self._rejected += 1
        out.refused.append(msg)

    # --- the fallback ---------------------------------------------------------------------------

    def _reconcile(self) -> tuple[SyncReport, ...]:
        reports = []
        errors = []
        for url in self.peers:
            try:
                reports.append(sync_with(self.replica, url, lock=self.lock))
            except SyncError as exc:
                errors.append(f"{masked_url(url)}: {exc.message}")
        if reports:
            self._gap = None
        if errors:
            self._peer_error = self._scrub("; ".join(errors))
        return tuple(reports)

    # --- reading ------------------------------------------------------------------------------

    def status(self) -> LinkStatus:
        """Where the link stands; cheap, asks the broker nothing (the lag is the last look)."""
        nc = self._nc
        with _holding(self.lock, self.replica):
            outbox = len(self._own_unpublished())
        return LinkStatus(
            url=self.shown_url,
            stream=self.stream,
            consumer=self.consumer,
            connected=nc is not None and nc.is_connected,
            outbox=outbox,
            lag=self._lag,
            published=self._published,
            received=self._received,
            rejected=self._rejected,
            gap=self._gap,
            last_error=self._last_error,
            assemblies=len(self._assemblies),
            evicted=self._evicted,
            expired=self._expired,
            abandoned=self._abandoned,
            abandoned_ids=tuple(self._abandoned_ids),
            reread=self._reread,
            unreadable=self._unreadable,
        )


def unpublished(replica: Replica) -> list[bytes]:
    """Ids of ``replica``'s own accepted changes that carry no publish mark for its space's
    stream, oldest first: the outbox any link of its store starts from. Works on a read-only
    replica (beside a live writer), so a status can show it."""
    stream = stream_name(replica.space)
    with replica.lock:
        marks = replica.store.published(stream)
        log = replica.log
        own = []
        for cid in log.accepted_since(0):
            change = log.get(cid)
            if change is not None and change.author == replica.author and cid not in marks:
                own.append(cid)
    return own


def probe(
    replica: Replica,
    url: str,
    *,
    timeout: float = 5.0,
    credentials: StrPath | None = None,
    nkey_seed: StrPath | None = None,
) -> LinkStatus:
    """Where ``replica``'s store stands with the broker at ``url``, asked once and changing
    nothing there (no stream or consumer is made): ``lag`` is what its consumer has not taken
    in yet (every message of the stream when it has no consumer yet; None when the broker
    could not be asked, or holds no stream for the space), ``outbox`` what `unpublished`
    counts, ``last_error`` why the broker could not be asked. Works on a read-only replica.
    ``credentials`` / ``nkey_seed``: a login file, as for `JetStreamLink`. Raises
    JetStreamError for a URL that is not a string (rule ``url``) and for a login file that
    cannot serve (as `JetStreamLink`), before any connect."""
    if not isinstance(url, str) or not url:
        raise JetStreamError("url", "url", f"expected a nats:// URL, got {url!r}")
    seconds = check_seconds("timeout", timeout)
    login = _login(credentials, nkey_seed)
    shown = masked_url(url)
    stream = stream_name(replica.space)
    info = replica.store.info()
    assert info is not None  # a replica's store is initialized
    consumer = consumer_name(info.store_id or replica.author)
    outbox = len(unpublished(replica))

    async def look() -> int | None:
        nc = await _open(
            url,
            shown,
            login,
            _quiet,
            connect_timeout=seconds,
            max_reconnect_attempts=1,
            reconnect_time_wait=0.2,
        )
        try:
            js = nc.jetstream(timeout=seconds)
            async with _mapped(f"reading the state of stream {stream}"):
                try:
                    state = (await js.stream_info(stream)).state
                except nats.js.errors.NotFoundError:
                    return None
                try:
                    mine = await js.consumer_info(stream, consumer)
                except nats.js.errors.NotFoundError:
                    return state.messages
                return (mine.num_pending or 0) + (mine.num_ack_pending or 0)
        finally:
            await nc.close()

    lag: int | None = None
    error: str | None = None
    try:
        lag = asyncio.run(asyncio.wait_for(look(), seconds * 2))
    except JetStreamError as exc:
        error = exc.message
    except asyncio.TimeoutError:
        error = f"the broker did not answer within {seconds * 2:g} s"
    if error is not None:
        error = _scrubbed(error, url)
    return LinkStatus(
        url=shown,
        stream=stream,
        consumer=consumer,
        connected=error is None,
        outbox=outbox,
        lag=lag,
        published=0,
        received=MergeReport(),
        rejected=0,
        gap=None,
        last_error=error,
    )


async def _quiet(exc: Exception) -> None:
    """nats-py logs every connection error with a traceback unless given a callback: the
    error that matters is the one `probe` returns."""


class FollowedBroker:
    """The follower's link to a NATS broker (the ``nats`` and ``tls`` transports of
    `sync.follower`): one `JetStreamLink`, kept open across rounds, whose `sync` is one
    `JetStreamLink.sync_once`. The follower gives it the HTTP peers of the same call
    (`use_peers`) to fill what the stream's retention dropped.

    It logs in with the file ``STATEFUSE_NATS_CREDS`` or ``STATEFUSE_NATS_NKEY`` names
    (`environment_login`, read and checked when it is made): a transport is made from a URL
    alone, so `Replica.follow` and ``statefuse serve --nats`` take an NKey or ``.creds`` login
    without a parameter of their own. Raises JetStreamError for a bad URL (``url``) or login
    file (see `JetStreamLink`)."""

    __slots__ = ("_idle", "_link", "_peers", "login", "timeout", "url")

    def __init__(self, url: str, timeout: float | None = None) -> None:
        if not isinstance(url, str) or not url:
            raise JetStreamError("url", "url", f"expected a nats:// URL, got {url!r}")
        self.login = environment_login()
        self.url = url
        self.timeout = 10.0 if timeout is None else check_seconds("timeout", timeout)
        self._link: JetStreamLink | None = None
        self._peers: tuple[str, ...] = ()
        #: What `wait` sleeps on before the first round made the link.
        self._idle = threading.Event()

    def use_peers(self, urls: Sequence[str]) -> None:
        """Fill gaps from these HTTP sync URLs."""
        self._peers = tuple(urls)
        if self._link is not None:
            self._link.peers = self._peers

    def sync(self, replica: Replica) -> Exchange:
        if self._link is None or self._link.replica is not replica:
            self.close()
            self._link = JetStreamLink(
                replica,
                self.url,
                peers=self._peers,
                connect_timeout=min(2.0, self.timeout),
                credentials=self.login.credentials,
                nkey_seed=self.login.nkey_seed,
            )
        round_ = self._link.sync_once(timeout=self.timeout)
        merge = round_.merge
        fetched = round_.fetched
        for report in round_.reconciled:
            merge = merge + report.merge
            fetched += report.fetched
        return Exchange(fetched=fetched, pushed=round_.published, merge=merge)

    def wait(self, seconds: float) -> bool:
        """`JetStreamLink.wait` (the follower waits between rounds this way)."""
        link = self._link
        if link is None:
            self._idle.wait(check_seconds("seconds", seconds))
            self._idle.clear()
            return False
        return link.wait(seconds)

    def wake(self) -> None:
        """`JetStreamLink.wake`: a local write to publish, a stop or a `sync_now`."""
        self._idle.set()
        link = self._link
        if link is not None:
            link.wake()

    def backlog(self) -> Backlog:
        if self._link is None:
            return Backlog()
        status = self._link.status()
        return Backlog(
            outbox=status.outbox,
            lag=status.lag,
            assemblies=status.assemblies,
            evicted=status.evicted + status.expired,
            abandoned=status.abandoned,
        )

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.stop()

    def __repr__(self) -> str:
        return f"FollowedBroker({masked_url(self.url)!r})"


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _stream_sequence(msg: Msg) -> int | None:
    """The stream sequence of a JetStream message (None for one without its metadata)."""
    try:
        return int(msg.metadata.sequence.stream)
    except (ValueError, TypeError, AttributeError, nats.errors.Error):
        return None


def _chunk_of(headers: dict[str, str]) -> tuple[bytes, int, int] | None:
    """(change id, index, count) of a chunk's headers, or None when they do not make one."""
    try:
        cid = bytes.fromhex(headers.get(CHANGE_HEADER, ""))
        index_text, _, count_text = headers[CHUNK_HEADER].partition("/")
        index, count = int(index_text), int(count_text)
    except (KeyError, ValueError):
        return None
    if len(cid) != 32 or not 2 <= count <= _MAX_CHUNKS or not 0 <= index < count:
        return None
    return cid, index, count


@dataclass(slots=True)
class _Verdicts:
    """What one batch of messages carried (``datas``) and what to tell the broker of each:
    ``finished`` (acknowledge after receiving), ``again`` (deliver again later), ``refused``
    (never deliver again)."""

    datas: list[bytes] = field(default_factory=list)
    finished: list[Msg] = field(default_factory=list)
    again: list[Msg] = field(default_factory=list)
    refused: list[Msg] = field(default_factory=list)
    #: Changes dropped whose every chunk was seen here: to join from the stream by sequence.
    covered: list[bytes] = field(default_factory=list)


def _claimed_id(data: bytes) -> bytes | None:
    """The id of the change a signed change's bytes carry, or None when they are no signed
    change or not that change's bytes (`sync.change.claimed_change_id`): `Replica.receive`
    verifies the rest."""
    return claimed_change_id(data)


#: The order in which assemblies are dropped: touched longest ago (by stream sequence) first.
_TOUCHED = operator.attrgetter("touched")


def _delivery_of(msg: Msg) -> tuple[int, float, int]:
    """(stream sequence, the broker's time it was stored in epoch seconds, how many times it
    was delivered) of a JetStream message; zeros (one delivery) when its metadata is missing."""
    try:
        meta = msg.metadata
        return int(meta.sequence.stream), float(meta.timestamp.timestamp()), int(meta.num_delivered)
    except (ValueError, TypeError, AttributeError, OverflowError, nats.errors.Error):
        return 0, 0.0, 1
