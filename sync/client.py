"""The HTTP sync client: bring a replica and a peer's server to the same set of changes.

`sync_with` runs one sync with one peer over `sync.protocol`, on one kept-alive connection
(stdlib `http.client`): a set-reconciliation exchange (the client drives it; the server answers
each message statelessly) tells it which changes each side lacks; it fetches what it lacks, a
page at a time, into `Replica.receive`, and pushes what the peer lacks, predecessors first.
`sync_all` does that with several peers, then once more with those that synced before a later
peer brought something new, so every reachable peer ends up with everything any of them had.

Invariants:

- Nothing from a response reaches the replica before the whole response has been read and its
  framing checked; fetched changes then go through `Replica.receive` like any outside bytes
  (a lying peer's changes are quarantined, never applied). A response that breaks the protocol
  raises MalformedResponseError and nothing of it is applied.
- Every failure is a `SyncError` (see `sync.protocol` for the tree), mapped from socket and
  HTTP errors at one seam (`_Connection.post`); pages fetched before a failure stay received.
- The replica is touched only in short calls that hold its own lock (and ``lock`` too, when
  given), never while waiting on the network, so a replica that is also being served, or
  followed, can sync out without blocking its server for long.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import ssl
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import SplitResult, urlsplit

from statefuse.sync.protocol import (
    CONTENT_TYPE,
    MAX_BODY_BYTES,
    MAX_CHANGE_FRAME_BYTES,
    MAX_PAGE_CHANGES,
    MAX_ROUNDS,
    PAGE_BYTES,
    Lock,
    MalformedResponseError,
    PeerRejectedError,
    PeerTimeoutError,
    PeerUnreachableError,
    SyncError,
    check_seconds,
    decode_frames,
    encode_frames,
)
from statefuse.sync.reconcile import ReconcileError, Reconciler
from statefuse.sync.replica import MergeReport, Replica

__all__ = ["DEFAULT_TIMEOUT", "Progress", "SyncReport", "check_url", "sync_all", "sync_with"]

#: Seconds one request may take (connect, send, answer) before PeerTimeoutError.
DEFAULT_TIMEOUT = 10.0
#: Times an exchange starts again when the peer's changes moved under it (its 409 answers).
_RESTARTS = 3
#: Rules of a 409 to a reconcile message that mean "my ids changed since your last round".
_RESTART_RULES = frozenset({"answer-length", "answer-id-known"})

#: ``progress(done, total)``: changes fetched and pushed so far, of all to move in this sync.
Progress = Callable[[int, int], object]


@dataclass(frozen=True, slots=True)
class SyncReport:
    """What one sync with one peer did.

    ``round_trips`` counts HTTP requests; ``bytes_sent`` / ``bytes_received`` count request and
    response bodies (headers add about 200 B per request). ``fetched`` changes came from the
    peer and ``merge`` is what this replica made of them; ``pushed`` went to the peer and
    ``peer_merge`` is what the peer reported making of them. ``seconds`` is the wall time.
    """

    url: str
    round_trips: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    fetched: int = 0
    pushed: int = 0
    merge: MergeReport = field(default_factory=MergeReport)
    peer_merge: MergeReport = field(default_factory=MergeReport)
    seconds: float = 0.0

    def __add__(self, other: SyncReport) -> SyncReport:
        """Two syncs with the same peer, added up."""
        if other.url != self.url:
            raise SyncError("url", "same-peer", "only reports of one peer add up")
        return SyncReport(
            self.url,
            *(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)[1:]),
        )


def check_url(url: object) -> SplitResult:
    """The parts of a peer's URL, ``http://host[:port][/prefix]`` or ``https://...`` (a
    server behind a TLS proxy). Raises SyncError (field ``url``; rule ``url`` for one that
    does not parse, ``http-url`` for another shape) naming the URL."""
    if not isinstance(url, str):
        raise SyncError("url", "url", f"a peer URL is a str, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what may fail
    except ValueError as e:
        raise SyncError("url", "url", f"not a valid URL {url!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SyncError("url", "http-url", f"expected http(s)://host[:port][/prefix], got {url!r}")
    if parts.query or parts.fragment:
        raise SyncError("url", "http-url", f"a peer URL has no query or fragment: {url!r}")
    return parts


class _Connection:
    """One kept-alive HTTP(S) connection to a peer, counting requests and body bytes.

    `post` is the one seam where socket and HTTP errors become SyncErrors.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = check_url(url)
        assert parts.hostname is not None  # `check_url` refuses a URL without one
        self.url = url
        self.prefix = parts.path.rstrip("/")
        self._http: http.client.HTTPConnection
        if parts.scheme == "https":
            self._http = http.client.HTTPSConnection(
                parts.hostname,
                parts.port or 443,
                timeout=timeout,
                context=ssl.create_default_context(),
            )
        else:
            self._http = http.client.HTTPConnection(
                parts.hostname, parts.port or 80, timeout=timeout
            )
        self.requests = 0
        self.sent = 0
        self.received = 0

    def close(self) -> None:
        self._http.close()

    def post(self, endpoint: str, body: bytes) -> bytes:
        """POST ``body`` to ``/v1/<endpoint>``; the body of the (200) answer.

        Raises PeerUnreachableError, PeerTimeoutError, PeerRejectedError (an HTTP error status)
        or MalformedResponseError (a broken HTTP answer, or one longer than the protocol allows).
        """
        path = f"{self.prefix}/v1/{endpoint}"
        self.requests += 1
        self.sent += len(body)
        try:
            self._http.request(
                "POST",
                path,
                body,
                headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE},
            )
            response = self._http.getresponse()
            declared = response.getheader("Content-Length")
            if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
                self._http.close()
                raise MalformedResponseError(
                    f"response.{endpoint}",
                    "max-body-bytes",
                    f"{self.url} announced a {declared}-byte answer (at most {MAX_BODY_BYTES})",
                )
            data = response.read(MAX_BODY_BYTES + 1)
            if not response.isclosed():
                self._http.close()  # unread bytes left: this connection cannot be reused
            content_type = response.getheader("Content-Type") or ""
        except TimeoutError:
            self._http.close()
            raise PeerTimeoutError(
                "url", "timeout", f"{self.url} did not answer {path} in time"
            ) from None
        except http.client.HTTPException as e:
            self._http.close()
            raise MalformedResponseError(
                f"response.{endpoint}", "http", f"{self.url} sent a broken HTTP answer: {e!r}"
            ) from None
        except OSError as e:
            self._http.close()
            raise PeerUnreachableError(
                "url", "unreachable", f"cannot reach {self.url}: {e.strerror or repr(e)}"
            ) from None
        self.received += len(data)
        if len(data) > MAX_BODY_BYTES:
            raise MalformedResponseError(
                f"response.{endpoint}", "max-body-bytes", f"answer longer than {MAX_BODY_BYTES} B"
            )
        if response.status != 200:
            raise _rejected(self.url, path, response.status, data, content_type)
        return data

    def frames(self, endpoint: str, frames: Sequence[bytes], *, max_frames: int) -> list[bytes]:
        """POST a frame list, and check the framing of the answer (MalformedResponseError)."""
        data = self.post(endpoint, encode_frames(frames))
        try:
            return decode_frames(
                data,
                max_frames=max_frames,
                max_frame_bytes=MAX_CHANGE_FRAME_BYTES,
                field=f"response.{endpoint}",
            )
        except SyncError as e:
            raise MalformedResponseError(e.field, e.rule, f"from {self.url}: {e.message}") from None

    def document(self, endpoint: str, frames: Sequence[bytes]) -> dict[str, Any]:
        """POST a frame list; the JSON object that answers it (MalformedResponseError)."""
        data = self.post(endpoint, encode_frames(frames))
        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            document = None
        if not isinstance(document, dict):
            raise MalformedResponseError(
                f"response.{endpoint}", "json", f"{self.url} did not answer with a JSON object"
            )
        return document


def _rejected(url: str, path: str, status: int, data: bytes, content_type: str) -> SyncError:
    """The error for an HTTP error answer: the peer's own field and rule when it named them."""
    field_, rule, detail = "response", f"http-{status}", ""
    if content_type.startswith("application/json"):
        with contextlib.suppress(UnicodeDecodeError, ValueError):
            body = json.loads(data)
            if isinstance(body, dict):
                field_ = str(body.get("field", field_))[:200]
                rule = str(body.get("rule", rule))[:100]
                detail = str(body.get("error", ""))[:500]
    if not detail:
        detail = data[:200].decode("utf-8", "replace").strip()
    return PeerRejectedError(field_, rule, f"{url} answered {path} with {status}: {detail}", status)


def _merge_report(document: dict[str, Any], url: str) -> MergeReport:
    report = MergeReport.from_json(document)
    if report is None:
        raise MalformedResponseError(
            "response.push", "merge-report", f"{url} answered a push without its counts"
        )
    return report


@contextlib.contextmanager
def _holding(lock: Lock | None) -> Iterator[None]:
    if lock is None:
        yield
        return
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _check_page_size(page_size: object) -> int:
    if type(page_size) is not int or not 1 <= page_size <= MAX_PAGE_CHANGES:
        raise SyncError("page_size", "range", f"expected an int in [1, {MAX_PAGE_CHANGES}]")
    return page_size


def _reconcile(conn: _Connection, replica: Replica, lock: Lock | None) -> Reconciler:
    """Run the exchange to its end; the reconciler then knows what each side lacks."""
    space = replica.space.encode()
    restarts = 0
    while True:
        with _holding(lock):
            reconciler = replica.reconciler()
        try:
            if _exchange(conn, space, reconciler):
                return reconciler
        except PeerRejectedError as e:
            if e.status != 409 or e.rule not in _RESTART_RULES or restarts == _RESTARTS:
                raise
            restarts += 1
            continue
        raise MalformedResponseError(
            "response.reconcile", "max-rounds", f"no end with {conn.url} after {MAX_ROUNDS} rounds"
        )


def _exchange(conn: _Connection, space: bytes, reconciler: Reconciler) -> bool:
    """Drive one exchange; False if it has not ended after `MAX_ROUNDS` requests."""
    message = reconciler.initiate()
    for _ in range(MAX_ROUNDS):
        frames = conn.frames("reconcile", [space, message], max_frames=1)
        if len(frames) != 1:
            raise MalformedResponseError(
                "response.reconcile", "frame-count", f"{conn.url} answered without a message"
            )
        try:
            reply = reconciler.respond(frames[0])
        except ReconcileError as e:
            raise MalformedResponseError(
                f"response.reconcile.{e.field}", e.rule, f"from {conn.url}: {e.message}"
            ) from None
        if reply.done or reply.message is None:
            return True  # what we would still send only answers the peer: it needs none
        message = reply.message
    return False


def sync_with(
    replica: Replica,
    url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    lock: Lock | None = None,
    page_size: int = MAX_PAGE_CHANGES,
) -> SyncReport:
    """Sync ``replica`` with the peer served at ``url`` (both ways); returns what moved.

    ``timeout`` bounds each request (connect, send, answer), in seconds. ``progress(done,
    total)`` is called after each page of changes fetched or pushed. ``lock``, when given, is
    held too whenever the replica is used (the replica holds its own lock for each call, so
    none is needed; it serves callers that serialize other work with one). ``page_size`` caps
    the changes per fetch or push request. Fetched changes reach the replica's observers with
    ``url`` as their source.

    Raises SyncError for a bad argument, and its subclasses (see `sync.protocol`) when the peer
    is unreachable, too slow, answers with an error (another space: PeerRejectedError with rule
    ``same-space``) or breaks the protocol. Pages fetched before an error stay received.
    """
    if not isinstance(replica, Replica):
        raise SyncError("replica", "replica-type", f"expected a Replica, got {replica!r}")
    seconds = check_seconds("timeout", timeout)
    page_size = _check_page_size(page_size)
    start = time.perf_counter()
    conn = _Connection(url, seconds)
    merge = peer_merge = MergeReport()
    try:
        reconciler = _reconcile(conn, replica, lock)
        want, give = reconciler.fetch, reconciler.send
        total = len(want) + len(give)
        done = 0
        space = replica.space.encode()
        pos = fetched = 0
        while pos < len(want):
            page = want[pos : pos + page_size]
            answer = conn.frames("fetch", [space, *page], max_frames=len(page))
            if not answer:
                raise MalformedResponseError(
                    "response.fetch", "frame-count", f"{conn.url} answered a fetch with nothing"
                )
            found = [data for data in answer if data]
            with _holding(lock):
                merge = merge + replica.receive(found, source=conn.url)
            fetched += len(found)
            pos += len(answer)
            done += len(answer)
            if progress is not None:
                progress(done, total)
        with _holding(lock):
            outgoing = _predecessors_first(replica, give)
        for page_changes in _pages(outgoing, page_size):
            document = conn.document("push", [space, *page_changes])
            peer_merge = peer_merge + _merge_report(document, conn.url)
            done += len(page_changes)
            if progress is not None:
                progress(done, total)
    finally:
        conn.close()
    return SyncReport(
        conn.url,
        round_trips=conn.requests,
        bytes_sent=conn.sent,
        bytes_received=conn.received,
        fetched=fetched,
        pushed=len(outgoing),
        merge=merge,
        peer_merge=peer_merge,
        seconds=time.perf_counter() - start,
    )


def _predecessors_first(replica: Replica, ids: Sequence[bytes]) -> list[bytes]:
    """The wire bytes of ``ids`` ordered by author and seq, so the peer parks none of them."""
    with replica.lock:
        changes = [c for c in (replica.log.get(cid) for cid in ids) if c is not None]
    changes.sort(key=lambda c: (c.author, c.seq, c.change_id))
    return [c.data for c in changes]


def _pages(changes: list[bytes], page_size: int) -> Iterator[list[bytes]]:
    """Runs of at most ``page_size`` changes and `PAGE_BYTES` (each holds at least one)."""
    page: list[bytes] = []
    used = 0
    for data in changes:
        if page and (len(page) == page_size or used + 4 + len(data) > PAGE_BYTES):
            yield page
            page, used = [], 0
        page.append(data)
        used += 4 + len(data)
    if page:
        yield page


def sync_all(
    replica: Replica,
    urls: Sequence[str],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    lock: Lock | None = None,
) -> list[SyncReport | SyncError]:
    """Sync with every peer in ``urls``; one entry per URL, in order: its report, or the
    SyncError that ended its sync (one dead peer does not stop the others).

    Peers that synced before a later peer brought new changes are synced once more (their
    report adds up both), so every peer that answered ends with the union of all changes.
    Raises SyncError (rule ``urls``) when ``urls`` is a single string.
    """
    if isinstance(urls, str):
        raise SyncError("urls", "urls", "expected a list of URLs, got one string")
    results: list[SyncReport | SyncError] = []
    last_news = -1
    for k, url in enumerate(urls):
        try:
            report = sync_with(replica, url, timeout=timeout, progress=progress, lock=lock)
        except SyncError as e:
            results.append(e)
            continue
        results.append(report)
        if report.fetched:
            last_news = k
    for k in range(last_news):
        first = results[k]
        if isinstance(first, SyncReport):
            try:
                again = sync_with(replica, urls[k], timeout=timeout, progress=progress, lock=lock)
            except SyncError as e:
                results[k] = e
                continue
            results[k] = first + again
    return results
