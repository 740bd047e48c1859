"""Following peers: a background loop that keeps one replica synced with its peers.

`Replica.follow(peers, interval=...)` starts a `Follower`: a daemon thread that syncs the
replica with every peer at once, then each peer again ``interval`` seconds after its last sync,
until `Follower.stop` (or leaving its ``with`` block) or until the replica closes. Changes that
arrive reach the replica's observers (`Replica.observe`) on the follower's thread, as
`Origin.RECEIVED` with the peer's URL as their ``source``. `Follower.sync_now` runs a round at
once and waits for it; `Follower.status` tells how each peer fares (`FollowStatus`).

How a peer is reached is the transport of its URL's scheme (`Transport`, looked up in
`TRANSPORTS`, extended with `register_transport`): ``http`` and ``https`` run the HTTP sync
protocol (`sync.client.sync_with`, both ways); ``nats`` and ``tls`` follow a NATS JetStream
broker (`sync.jetstream.FollowedBroker`: each sync publishes this replica's own changes and takes
in the stream; needs nats-py). A link that fills gaps from other peers (`GapFilling`, as the
NATS one) is given the HTTP peers of the same call; a link that queues (`Queued`) reports its
outbox and lag in its `PeerStatus`. A link that can wait for news (`Waiting`, as the NATS one:
a long-poll of the broker) is waited on between rounds instead of a sleep, so a change published
to the broker is taken in about a round trip later, and is woken by every local write, so this
replica's own changes are published at once rather than at the next round. A URL whose scheme
no transport handles is a `FollowError` naming it (rule ``url-scheme``) when the follower is
made, never a silent skip.

Invariants:

- The loop never dies of a peer's failure. A failure (any `StateFuseError`, such as a
  `SyncError` from a dead peer; any other exception too, logged with its traceback) is kept as
  that peer's last error, one line, and the peer is retried after a delay that doubles from
  ``interval`` up to `MAX_BACKOFF_INTERVALS` intervals; one success resets it. Other peers keep
  their own schedule.
- Changes enter the replica only through `Replica.receive` (in the transport), so a peer's bad
  changes are quarantined with their reason, as from any other source, and the replica is
  touched only in short calls that hold its lock, never across the network.
- When a later peer of a round brought news, the peers synced before it in that round are
  synced again, so every peer that answers ends a round with the union (as `sync_all` does).
- However quickly news arrives, each peer still gets a full round at least every ``interval``.
- `stop` ends the thread and joins it: at once while it waits between rounds, after the running
  sync (each request bounded by ``timeout``) otherwise. It is idempotent, and safe from the
  follower's own thread (an observer may stop it; the thread then ends after its round).
- `status` is a snapshot (frozen dataclasses), never a live view.

Errors: `FollowError` (a `SyncError`: an `InputError` with ``field`` and ``rule``) for a bad
argument (``peers``, ``interval``, ``timeout``), a URL no transport handles (``url-scheme``), a
`sync_now` on a follower that is not running (``stopped``) or whose round did not end in time
(``sync-timeout``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from statefuse.core.error import StateFuseError
from statefuse.registry.error import InputError
from statefuse.sync.client import DEFAULT_TIMEOUT, check_url, sync_with
from statefuse.sync.protocol import SyncError, check_seconds, masked_url
from statefuse.sync.replica import MergeReport, Observed, Origin, Replica

__all__ = [
    "MAX_BACKOFF_INTERVALS",
    "TRANSPORTS",
    "Backlog",
    "Exchange",
    "FollowError",
    "FollowStatus",
    "Follower",
    "GapFilling",
    "HttpLink",
    "Link",
    "PeerStatus",
    "Queued",
    "Transport",
    "Waiting",
    "register_transport",
]

log = logging.getLogger("statefuse.sync.follower")

#: A failing peer is retried after ``interval`` × 1, 2, 4... seconds, at most this many intervals.
MAX_BACKOFF_INTERVALS = 4
#: Longest error line kept in a peer's status.
MAX_ERROR_CHARS = 300


class FollowError(SyncError):
    """A follower asked to do what it cannot: a bad argument, a URL no transport handles, a
    `Follower.sync_now` on a stopped follower or whose round did not end in time."""


@dataclass(frozen=True, slots=True)
class Exchange:
    """What one sync with one peer moved: changes ``fetched`` from it (and what this replica
    made of them, ``merge``) and changes ``pushed`` to it."""

    fetched: int = 0
    pushed: int = 0
    merge: MergeReport = field(default_factory=MergeReport)


class Link(Protocol):
    """A follower's way to one peer, made by the transport of the peer's URL scheme."""

    def sync(self, replica: Replica) -> Exchange:
        """Bring ``replica`` and the peer to the same changes (as far as one call goes); raise
        a `StateFuseError` (a `SyncError` for network and protocol failures) when it fails."""
        ...

    def close(self) -> None:
        """Release what the link holds (the follower is stopping)."""
        ...


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waits between this replica and a peer that queues (a broker): ``outbox``, own
    changes it has not acknowledged; ``lag``, changes it holds that this replica has not taken
    in (at the last look). None: not known yet."""

    outbox: int | None = None
    lag: int | None = None
    #: Changes being joined from chunks, assemblies dropped (evicted for room or expired; their
    #: chunks are delivered again) and changes given up on, since the link started (see
    #: `sync.jetstream.ChunkBounds`). None: the link joins no chunks.
    assemblies: int | None = None
    evicted: int | None = None
    abandoned: int | None = None


@runtime_checkable
class Queued(Protocol):
    """A `Link` that can tell its `Backlog` (asked after every sync, failed ones too)."""

    def backlog(self) -> Backlog:
        """The backlog now; cheap, no network."""
        ...


@runtime_checkable
class GapFilling(Protocol):
    """A `Link` that fills what its peer lost from other peers (a broker's retention)."""

    def use_peers(self, urls: Sequence[str]) -> None:
        """Fill gaps from these HTTP sync URLs (the HTTP peers of the same follow call)."""
        ...


@runtime_checkable
class Waiting(Protocol):
    """A `Link` the follower can wait on between rounds (a broker's long-poll): news from the
    peer ends the wait at once, and so does `wake` (a local write to publish, a stop)."""

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds``; True when the peer has news for the replica (sync now),
        False when woken or the time passed. Must not raise for the peer's failures (the next
        sync reports them) and must block, not return at once, when it cannot wait."""
        ...

    def wake(self) -> None:
        """End the running `wait`, or the next one when none runs; any thread, never blocks."""
        ...


#: ``transport(url, timeout)`` -> a `Link` to that peer; raises a `StateFuseError` naming the
#: URL when it cannot use it. ``timeout`` (seconds per request) is None for the default.
Transport = Callable[[str, float | None], Link]


class HttpLink:
    """The ``http`` / ``https`` transport: the HTTP sync protocol, one `sync_with` per sync
    (a short-lived connection each time, so a peer that restarts is simply reached again)."""

    __slots__ = ("timeout", "url")

    def __init__(self, url: str, timeout: float | None = None) -> None:
        check_url(url)
        self.url = url
        self.timeout = DEFAULT_TIMEOUT if timeout is None else check_seconds("timeout", timeout)

    def sync(self, replica: Replica) -> Exchange:
        report = sync_with(replica, self.url, timeout=self.timeout)
        return Exchange(fetched=report.fetched, pushed=report.pushed, merge=report.merge)

    def close(self) -> None:
        pass  # each sync closes its own connection

    def __repr__(self) -> str:
        return f"HttpLink({self.url!r})"


def _broker_link(url: str, timeout: float | None) -> Link:
    """The ``nats`` / ``tls`` transport, imported on first use (nats-py is an extra)."""
    try:
        from statefuse.sync.jetstream import FollowedBroker
    except ImportError:
        raise FollowError(
            "peers",
            "transport-missing",
            "following a NATS broker needs nats-py: pip install 'statefuse[nats]'",
        ) from None
    return FollowedBroker(url, timeout)


#: The transport of each URL scheme (lower case).
TRANSPORTS: dict[str, Transport] = {
    "http": HttpLink,
    "https": HttpLink,
    "nats": _broker_link,
    "tls": _broker_link,
}


def register_transport(scheme: str, transport: Transport) -> None:
    """Let followers reach URLs of ``scheme`` through ``transport``. Raises FollowError (rule
    ``scheme``) for a scheme that is not a URL scheme name."""
    if not isinstance(scheme, str) or not scheme.isascii() or not scheme[:1].isalpha():
        raise FollowError("scheme", "scheme", f"not a URL scheme: {scheme!r}")
    if not all(ch.isalnum() or ch in "+-." for ch in scheme):
        raise FollowError("scheme", "scheme", f"not a URL scheme: {scheme!r}")
    TRANSPORTS[scheme.lower()] = transport


def _link(url: object, timeout: float | None, where: str) -> Link:
    if not isinstance(url, str) or not url:
        raise FollowError(where, "url", f"a peer is a URL string, got {url!r}")
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as e:
        raise FollowError(where, "url", f"not a valid URL {url!r}: {e}") from None
    transport = TRANSPORTS.get(scheme)
    if transport is None:
        known = ", ".join(sorted(TRANSPORTS))
        raise FollowError(
            where,
            "url-scheme",
            f"no transport for {url!r}: scheme {scheme or '(none)'!r} (known: {known})",
        )
    try:
        return transport(url, timeout)
    except InputError as e:
        raise FollowError(where, e.rule, e.message) from None


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """How one peer fares. Times are wall-clock seconds since the epoch (`time.time`)."""

    url: str
    #: Syncs tried.
    attempts: int = 0
    #: Failures in a row since the last success (0: the last sync worked, or none was tried).
    failures: int = 0
    #: When a sync last worked (None: never).
    last_success: float | None = None
    #: The last failure, one line (kept after a later success; `failures` says whether it is
    #: current), and when it happened.
    last_error: str | None = None
    last_error_at: float | None = None
    #: Changes taken in from this peer (accepted), changes pushed to it, and changes from it
    #: that failed verification (kept in the replica's quarantine with their reason).
    received: int = 0
    pushed: int = 0
    quarantined: int = 0
    #: For a peer that queues (a NATS broker; None for HTTP peers): own changes it has not
    #: acknowledged yet, and changes it holds that this replica has not taken in, after the
    #: last sync (failed ones too: a broker that is down shows its outbox growing).
    outbox: int | None = None
    lag: int | None = None
    #: For a broker: changes being joined from chunks now, chunk assemblies dropped to stay
    #: within their bounds or because they expired (their chunks are delivered again, never
    #: lost), and changes given up on after that (logged as a warning each); 0 for HTTP peers.
    assemblies: int = 0
    evicted: int = 0
    abandoned: int = 0

    @property
    def ok(self) -> bool:
        """True when the last sync with this peer worked."""
        return self.last_success is not None and self.failures == 0


@dataclass(frozen=True, slots=True)
class FollowStatus:
    """A snapshot of a follower: whether it runs, how many rounds it has run, and each peer's
    `PeerStatus` in the order the peers were given."""

    running: bool
    rounds: int
    peers: tuple[PeerStatus, ...]

    def peer(self, url: str) -> PeerStatus:
        """The status of the peer at ``url``. Raises KeyError for a URL not followed."""
        for p in self.peers:
            if p.url == url:
                return p
        raise KeyError(url)


class _Peer:
    """One peer's link, its status so far and when it is next due (monotonic seconds)."""

    __slots__ = ("due", "link", "poked", "status")

    def __init__(self, url: str, link: Link) -> None:
        self.link = link
        self.status = PeerStatus(url)
        self.due = 0.0
        #: A local write asked for a sync since the last one began (due at once, whatever
        #: ``due`` says: a write during a sync must not wait for the next interval).
        self.poked = False


def _backlog(link: Link) -> Backlog:
    if not isinstance(link, Queued):
        return Backlog()
    try:
        return link.backlog()
    except Exception:  # a status must not end the loop either
        log.exception("reading the backlog of %r failed", link)
        return Backlog()


def _with_backlog(s: PeerStatus, backlog: Backlog) -> PeerStatus:
    """``s`` with what ``backlog`` tells (counts it does not know stay as they were)."""
    return replace(
        s,
        outbox=backlog.outbox,
        lag=backlog.lag,
        assemblies=s.assemblies if backlog.assemblies is None else backlog.assemblies,
        evicted=s.evicted if backlog.evicted is None else backlog.evicted,
        abandoned=s.abandoned if backlog.abandoned is None else backlog.abandoned,
    )


def _one_line(exc: BaseException) -> str:
    message = getattr(exc, "message", None) if isinstance(exc, StateFuseError) else None
    text = str(message) if message else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


class Follower:
    """Keeps ``replica`` synced with ``peers`` from a background thread (see the module
    docstring). Usually made and started by `Replica.follow`; ``Follower(...).start()`` does
    the same. A context manager: leaving the ``with`` block stops it.

    Raises FollowError for peers that are not a non-empty list of distinct URLs (one string is
    one peer), a URL no transport handles, an ``interval`` that is not a positive number of
    seconds, or a bad ``timeout``.
    """

    def __init__(
        self,
        replica: Replica,
        peers: str | Sequence[str],
        *,
        interval: float = 5.0,
        timeout: float | None = None,
    ) -> None:
        if not isinstance(replica, Replica):
            raise FollowError("replica", "replica-type", f"expected a Replica, got {replica!r}")
        if (
            type(interval) not in (int, float)
            or not math.isfinite(interval)
            or not 0 < interval <= 86_400
        ):
            raise FollowError(
                "interval", "seconds", f"expected seconds in (0, 86400], got {interval!r}"
            )
        if timeout is not None:
            check_seconds("timeout", timeout)
        urls = [peers] if isinstance(peers, str) else peers
        if not isinstance(urls, Sequence) or not urls:
            raise FollowError("peers", "peers", "give one peer URL or a non-empty list of them")
        if len(set(map(str, urls))) != len(urls):
            raise FollowError("peers", "distinct", "a peer is listed twice")
        self.replica = replica
        self.interval = float(interval)
        links = [_link(url, timeout, f"peers[{k}]") for k, url in enumerate(urls)]
        self._peers = [_Peer(str(url), link) for url, link in zip(urls, links, strict=True)]
        web = [
            str(url) for url, link in zip(urls, links, strict=True) if isinstance(link, HttpLink)
        ]
        for link in links:
            if isinstance(link, GapFilling):
                link.use_peers(web)
        self._cond = threading.Condition()
        self._stopping = False
        self._finished = False
        self._rounds = 0
        #: Rounds asked for by `sync_now` (a counter) and the last one a finished round served.
        self._wanted = 0
        self._served = 0
        #: The peer whose link the loop waits on now (outside ``_cond``), to wake it.
        self._waiting: _Peer | None = None
        self._unobserve: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._run, name="statefuse-follower", daemon=True)

    # --- lifetime --------------------------------------------------------------------------------

    def start(self) -> Follower:
        """Start the thread (the first round runs at once); returns the follower. Raises
        FollowError (rule ``startable``) when it was started before."""
        if self._thread.ident is not None:
            raise FollowError("follower", "startable", "a follower starts once")
        if any(isinstance(p.link, Waiting) for p in self._peers):
            self._unobserve = self.replica.observe(self._on_change)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """True from `start` until the thread ends (`stop`, or the replica closed)."""
        return self._thread.is_alive() and not self._stopping

    def stop(self, timeout: float | None = None) -> None:
        """Stop following and wait (up to ``timeout`` seconds, default: as long as the running
        sync takes) for the thread to end. Idempotent; from the follower's own thread (an
        observer) it only asks, and the thread ends after its round."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            self._wake_waiting()
        thread = self._thread
        if thread.ident is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> Follower:
        if self._thread.ident is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- status and rounds on demand -------------------------------------------------------------

    @property
    def status(self) -> FollowStatus:
        """How the follower and each peer fare, now (a snapshot)."""
        with self._cond:
            return FollowStatus(self.running, self._rounds, tuple(p.status for p in self._peers))

    def sync_now(self, *, timeout: float | None = None) -> FollowStatus:
        """Sync with every peer now (failing peers too, whatever their backoff), wait for that
        round to end, and return the status after it. Raises FollowError: rule ``stopped``
        when the follower does not run, ``sync-timeout`` when the round has not ended within
        ``timeout`` seconds (it goes on)."""
        if timeout is not None:
            check_seconds("timeout", timeout)
        if threading.current_thread() is self._thread:
            raise FollowError(
                "follower",
                "own-thread",
                "sync_now from the follower's own thread would wait for itself",
            )
        with self._cond:
            if not self.running:
                raise FollowError("follower", "stopped", "the follower is not running")
            self._wanted += 1
            wanted = self._wanted
            self._cond.notify_all()
            self._wake_waiting()
            if not self._cond.wait_for(lambda: self._served >= wanted or self._finished, timeout):
                raise FollowError(
                    "timeout", "sync-timeout", f"the round did not end within {timeout} s"
                )
            if self._served < wanted:
                raise FollowError("follower", "stopped", "the follower stopped before the round")
        return self.status

    # --- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    due, serving = self._wait_for_work()
                if due is None:
                    return
                self._round(due)
                with self._cond:
                    self._rounds += 1
                    self._served = max(self._served, serving)
                    self._cond.notify_all()
        finally:
            unobserve, self._unobserve = self._unobserve, None
            if unobserve is not None:
                with contextlib.suppress(Exception):
                    unobserve()
            for p in self._peers:
                with contextlib.suppress(Exception):
                    p.link.close()
            with self._cond:
                self._finished = True
                self._stopping = True
                self._cond.notify_all()

    def _wait_for_work(self) -> tuple[list[_Peer] | None, int]:
        """(the peers due, the `sync_now` count this round serves); None when it is time to
        stop. Called holding ``_cond``; waits on a healthy `Waiting` link (releasing it) when
        there is one, else on ``_cond``."""
        while True:
            if self._stopping or self.replica.closed:
                return None, 0
            if self._wanted > self._served:
                return list(self._peers), self._wanted
            now = time.monotonic()
            due = [p for p in self._peers if p.due <= now or p.poked]
            if due:
                return due, self._served
            pause = min(p.due for p in self._peers) - now
            waiter = self._waiter()
            if waiter is None:
                self._cond.wait(pause)
                continue
            self._waiting = waiter
            self._cond.release()
            try:
                news = self._wait_on(waiter, pause)
            finally:
                self._cond.acquire()
                self._waiting = None
            if news:
                waiter.due = 0.0

    def _waiter(self) -> _Peer | None:
        """A peer to wait on: its link can wait and its last sync succeeded (a failing peer
        keeps its backoff, so the loop sleeps instead)."""
        for p in self._peers:
            s = p.status
            if isinstance(p.link, Waiting) and s.failures == 0 and s.last_success is not None:
                return p
        return None

    @staticmethod
    def _wait_on(p: _Peer, seconds: float) -> bool:
        link = p.link
        assert isinstance(link, Waiting)
        try:
            return link.wait(seconds)
        except Exception:  # a transport's bug must not end the loop, nor make it spin
            log.exception("waiting on %s failed", masked_url(p.status.url))
            time.sleep(min(seconds, 1.0))
            return False

    def _wake_waiting(self) -> None:
        """Wake the link the loop waits on, if any. Called holding ``_cond``."""
        p = self._waiting
        if p is not None:
            link = p.link
            assert isinstance(link, Waiting)
            link.wake()

    def _on_change(self, observed: Observed) -> None:
        """An observer of the replica: a local write makes every healthy waiting link due, so
        the change is published now rather than at the next round."""
        if observed.origin is not Origin.LOCAL:
            return
        self.written()

    def written(self) -> None:
        """The replica wrote a change of its own that no observer is told of (only space ops:
        a redaction, a trust op, a name): due to be published now too, like any local write
        (`Replica` calls it)."""
        with self._cond:
            if self._stopping:
                return
            for p in self._peers:
                if isinstance(p.link, Waiting) and p.status.failures == 0:
                    p.poked = True
            self._cond.notify_all()
            self._wake_waiting()

    def _round(self, due: list[_Peer]) -> None:
        synced: list[_Peer] = []
        news_at = -1
        for p in due:
            if self._stopping:
                return
            exchange = self._sync(p)
            if exchange is not None:
                synced.append(p)
                if exchange.fetched:
                    news_at = len(synced) - 1
        for p in synced[:news_at]:  # they lack what a later peer brought
            if self._stopping:
                return
            self._sync(p)

    def _sync(self, p: _Peer) -> Exchange | None:
        """One sync with ``p``, its status updated; None when it failed."""
        with self._cond:
            p.poked = False  # what is written from now on is for the next sync
        try:
            exchange = p.link.sync(self.replica)
        except StateFuseError as exc:
            self._failed(p, exc)
            return None
        except Exception as exc:  # a transport's bug must not end the loop
            log.exception("following %s failed", masked_url(p.status.url))
            self._failed(p, exc)
            return None
        backlog = _backlog(p.link)
        with self._cond:
            s = p.status
            p.status = replace(
                _with_backlog(s, backlog),
                attempts=s.attempts + 1,
                failures=0,
                last_success=time.time(),
                received=s.received + exchange.merge.accepted,
                pushed=s.pushed + exchange.pushed,
                quarantined=s.quarantined + exchange.merge.quarantined,
            )
            p.due = time.monotonic() + self.interval
        return exchange

    def _failed(self, p: _Peer, exc: BaseException) -> None:
        backlog = _backlog(p.link)
        with self._cond:
            s = p.status
            failures = s.failures + 1
            p.status = replace(
                _with_backlog(s, backlog),
                attempts=s.attempts + 1,
                failures=failures,
                last_error=_one_line(exc),
                last_error_at=time.time(),
            )
            backoff = min(2 ** (failures - 1), MAX_BACKOFF_INTERVALS)
            p.due = time.monotonic() + self.interval * backoff

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Follower({[p.status.url for p in self._peers]!r}, {state})"
