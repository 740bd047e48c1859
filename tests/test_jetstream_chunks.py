"""Chunk assemblies under a flood, against a real ``nats-server -js`` with ``max_payload 4096``.

Anyone allowed to publish into a space's subjects can send chunks that never complete (header
``StateFuse-Chunk: 0/2`` with a random change id). A follower holds them as assemblies; these
tests check that assemblies are bounded per author (publishing subject) and overall, that stale
ones expire, that a chunk dropped to make room is delivered again rather than terminated, and
that an honest chunked change and its successor reach a follower whatever came before them.

Waits are deadlines on a condition (hang guards), never budgets.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from natsserver import IN_CI, NatsServer

from statefuse.sync.replica import Replica

if not IN_CI:
    pytest.importorskip("nats", reason="the JetStream transport needs nats-py (statefuse[nats])")

import nats

from statefuse.sync.jetstream import (
    CHANGE_HEADER,
    CHUNK_HEADER,
    ChunkBounds,
    JetStreamError,
    JetStreamLink,
    subject_of,
    unpublished,
)


@pytest.fixture
def small(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path, max_payload=4096).start()
    try:
        yield server
    finally:
        server.kill()


#: How long a link waits for the broker to connect or answer one request, and a round to end:
#: a hang guard, never a budget (a broker that is down refuses at once; a round meant to fail
#: is given a short time of its own).
GUARD = 30.0


@pytest.fixture
def links() -> Iterator[list[JetStreamLink]]:
    made: list[JetStreamLink] = []
    yield made
    for link in made:
        link.stop()


def _link(made: list[JetStreamLink], replica: Replica, url: str, **kw: object) -> JetStreamLink:
    link = JetStreamLink(replica, url, connect_timeout=GUARD, **kw)  # type: ignore[arg-type]
    made.append(link)
    return link.start()


def eventually(check: Callable[[], object], seconds: float = 60.0) -> None:
    """Wait for ``check()``; the deadline is a hang guard, not a budget."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.02)


def bogus(subject: str, n: int) -> list[tuple[str, bytes, dict[str, str]]]:
    """``n`` first halves of changes that do not exist: ``0/2`` chunks with random ids."""
    out = []
    for _ in range(n):
        cid = os.urandom(32).hex()
        headers = {"Nats-Msg-Id": f"{cid}.0", CHANGE_HEADER: cid, CHUNK_HEADER: "0/2"}
        out.append((subject, os.urandom(200), headers))
    return out


def publish(url: str, messages: list[tuple[str, bytes, dict[str, str]]]) -> None:
    """Publish straight into the stream, as anyone allowed to publish could."""

    async def run() -> None:
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            for subject, data, headers in messages:
                await js.publish(subject, data, headers=headers)
        finally:
            await nc.close()

    asyncio.run(run())


def stranger() -> bytes:
    return os.urandom(32)


def make_stream(url: str, links: list[JetStreamLink]) -> None:
    """The space's stream, made by a link (its consumer reads nothing here)."""
    _link(links, Replica.memory(space="team"), url).sync_once(timeout=GUARD)


def test_a_chunk_flood_before_an_honest_change_costs_a_follower_neither_it_nor_its_successor(
    small, links
):
    make_stream(small.url, links)
    flood = bogus(subject_of("team", stranger()), 64)
    for _ in range(64):  # a stranger allowed to publish anywhere: one subject per chunk
        flood += bogus(subject_of("team", stranger()), 1)
    publish(small.url, flood)

    a = Replica.memory(space="team")
    la = _link(links, a, small.url)
    big = a.add_claim("doc/spec/text", "x" * 10_000)  # three chunks under max_payload 4096
    assert la.sync_once(timeout=GUARD).published == 1
    publish(small.url, bogus(subject_of("team", stranger()), 64))  # and more, between the two
    after = a.add_claim("doc/spec/title", "Spec")
    assert la.sync_once(timeout=GUARD).published == 1

    b = Replica.memory(space="team")
    with b.follow(small.url, interval=0.05) as fb:
        eventually(lambda: {big.claim_id, after.claim_id} <= set(b.state().claims))
        assert b.change_ids() == a.change_ids() and not b.pending()
        # said, never silent: assemblies were evicted to make room (the status follows the
        # round that took the changes in)
        eventually(lambda: fb.status.peer(small.url).evicted > 0)
        assert fb.status.peer(small.url).quarantined == 0


def test_an_honest_chunked_change_reaches_a_follower_while_a_flood_goes_on(small, links):
    make_stream(small.url, links)
    a, b = Replica.memory(space="team"), Replica.memory(space="team")
    la = _link(links, a, small.url)
    lb = _link(links, b, small.url)
    subjects = [subject_of("team", stranger()) for _ in range(4)]
    for round_ in range(3):
        publish(small.url, [m for s in subjects for m in bogus(s, 40)])
        claim = a.add_claim(f"doc/spec/part{round_}", "y" * 10_000)
        assert la.sync_once(timeout=GUARD).published == 1
        publish(small.url, [m for s in subjects for m in bogus(s, 40)])

        def arrived(claim_id: str = claim.claim_id) -> bool:
            lb.sync_once(timeout=GUARD)
            return claim_id in b.state().claims

        eventually(arrived)
    status = lb.status()
    assert status.assemblies <= 4 * ChunkBounds().per_author
    assert status.evicted > 0 and not b.pending()


def test_assemblies_are_bounded_per_author_and_overall(small, links):
    make_stream(small.url, links)
    bounds = ChunkBounds(per_author=3, total=5, redeliver_after=30.0)
    b = Replica.memory(space="team")
    lb = _link(links, b, small.url, chunk_bounds=bounds)
    one, two, three = (subject_of("team", stranger()) for _ in range(3))
    publish(small.url, bogus(one, 10))
    lb.sync_once(timeout=GUARD)
    status = lb.status()
    assert status.assemblies == 3 and status.evicted == 7  # one author holds at most 3
    publish(small.url, bogus(two, 2) + bogus(three, 2))
    lb.sync_once(timeout=GUARD)
    status = lb.status()
    assert status.assemblies == 5  # and all of them at most 5
    assert status.rejected == 0  # nothing terminated: what was evicted is delivered again


def test_stale_assemblies_expire_and_what_never_completes_is_given_up(small, links):
    make_stream(small.url, links)
    now = [1000.0]
    bounds = ChunkBounds(expiry=30.0, redeliver_after=0.2, give_up_after=2)
    b = Replica.memory(space="team")
    lb = _link(links, b, small.url, chunk_bounds=bounds, clock=lambda: now[0])
    publish(small.url, bogus(subject_of("team", stranger()), 4))
    lb.sync_once(timeout=GUARD)
    assert lb.status().assemblies == 4 and lb.status().expired == 0
    now[0] += 29.0
    lb.sync_once(timeout=GUARD)
    assert lb.status().assemblies == 4 and lb.status().expired == 0
    now[0] += 2.0  # past the expiry: dropped and handed back (their halves might still come)
    lb.sync_once(timeout=GUARD)
    status = lb.status()
    assert status.expired == 4 and status.abandoned == 0 and status.rejected == 0

    def given_up() -> bool:  # delivered again, expired again: given up
        lb.sync_once(timeout=GUARD)
        now[0] += 31.0
        return lb.status().abandoned == 4

    eventually(given_up)
    status = lb.status()
    assert status.assemblies == 0 and status.expired == 8 and status.lag == 0
    assert len(status.abandoned_ids) == 4


def test_chunk_bounds_are_checked(small):
    for bad in (
        {"expiry": 0},
        {"per_author": 0},
        {"total": 0},
        {"per_author": 9, "total": 8},
        {"give_up_after": 0},
        {"redeliver_after": -1},
    ):
        with pytest.raises(JetStreamError) as err:
            ChunkBounds(**bad)  # type: ignore[arg-type]
        assert err.value.field.startswith("chunk_bounds")


def _chunks_of(a: Replica, cid: bytes) -> list[tuple[str, bytes, dict[str, str]]]:
    """The chunks the link would publish for change ``cid`` of ``a`` under max_payload 4096."""
    data = a.change_bytes([cid])[0]
    room = 4096 - 512
    count = -(-len(data) // room)
    headers = {CHANGE_HEADER: cid.hex()}
    return [
        (
            subject_of("team", a.author),
            data[i * room : (i + 1) * room],
            {**headers, "Nats-Msg-Id": f"{cid.hex()}.{i}", CHUNK_HEADER: f"{i}/{count}"},
        )
        for i in range(count)
    ]


def test_a_dropped_change_is_read_again_from_the_stream_and_a_missing_one_is_reported(
    small, links, caplog
):
    make_stream(small.url, links)
    a = Replica.memory(space="team")
    big = a.add_claim("doc/spec/text", "z" * 10_000)
    after = a.add_claim("doc/spec/title", "Spec")
    first, second = unpublished(a)
    chunks = _chunks_of(a, first)
    assert len(chunks) == 3
    now = [1000.0]
    bounds = ChunkBounds(expiry=30.0, redeliver_after=0.2, give_up_after=1)
    b = Replica.memory(space="team")
    lb = _link(links, b, small.url, chunk_bounds=bounds, clock=lambda: now[0])
    publish(small.url, chunks[:1])  # the first chunk, then the author is away a long while
    lb.sync_once(timeout=GUARD)
    now[0] += 31.0
    lb.sync_once(timeout=GUARD)
    status = lb.status()
    assert status.abandoned == 1 and status.abandoned_ids == (first.hex(),)
    assert status.lag == 0  # acknowledged: the broker will not deliver it again
    subject = subject_of("team", a.author)
    publish(small.url, [(subject, a.change_bytes([second])[0], {"Nats-Msg-Id": second.hex()})])
    with caplog.at_level("WARNING", logger="statefuse.sync.jetstream"):
        # the next change waits for it, and its rest is not in the stream yet
        lb.sync_once(timeout=GUARD)
    assert len(b.pending()) == 1 and lb.status().unreadable == 1
    assert any(first.hex()[:12] in r.getMessage() for r in caplog.records)
    publish(small.url, chunks[1:])  # the rest arrives: the change is read from the stream

    def both() -> bool:
        now[0] += 31.0  # the search starts again after the expiry
        lb.sync_once(timeout=GUARD)
        return {big.claim_id, after.claim_id} <= set(b.state().claims)

    eventually(both)
    status = lb.status()
    assert status.reread == 1 and not b.pending() and status.assemblies == 0


def test_a_change_evicted_by_a_flood_on_its_own_subject_is_completed_from_the_stream(small, links):
    make_stream(small.url, links)
    a = Replica.memory(space="team")
    big = a.add_claim("doc/spec/text", "w" * 10_000)
    (first,) = unpublished(a)
    chunks = _chunks_of(a, first)
    subject = subject_of("team", a.author)
    bounds = ChunkBounds(per_author=2, total=4, redeliver_after=30.0)
    b = Replica.memory(space="team")
    lb = _link(links, b, small.url, chunk_bounds=bounds)
    # the author's first chunk, then a flood on the author's own subject pushes it out
    publish(small.url, chunks[:1] + bogus(subject, 6) + chunks[1:])
    round_ = lb.sync_once(timeout=GUARD)
    assert round_.merge.accepted == 1 and big.claim_id in b.state().claims
    status = lb.status()
    assert status.evicted >= 1 and status.reread == 1 and status.rejected == 0


def test_a_chunk_published_under_an_honest_change_id_before_the_authors_costs_nothing(small, links):
    make_stream(small.url, links)
    a = Replica.memory(space="team")
    big = a.add_claim("doc/spec/text", "v" * 10_000)
    (first,) = unpublished(a)
    chunks = _chunks_of(a, first)

    def forged(chunk: tuple[str, bytes, dict[str, str]]) -> tuple[str, bytes, dict[str, str]]:
        subject, data, headers = chunk
        return subject, os.urandom(len(data)), {**headers, "Nats-Msg-Id": os.urandom(8).hex()}

    b = Replica.memory(space="team")
    lb = _link(links, b, small.url)
    # someone who read the first chunk races the author with its own second chunk
    publish(small.url, [chunks[0], forged(chunks[1]), chunks[1], chunks[2]])
    lb.sync_once(timeout=GUARD)
    assert big.claim_id in b.state().claims and not b.quarantine()
    # and with its own last chunk, which completes the change before the author's comes
    bigger = a.add_claim("doc/spec/text", "u" * 10_000)
    second = unpublished(a)[1]
    more = _chunks_of(a, second)
    publish(small.url, [more[0], more[1], forged(more[2]), more[2]])
    c = Replica.memory(space="team")
    lc = _link(links, c, small.url)
    lc.sync_once(timeout=GUARD)
    assert {big.claim_id, bigger.claim_id} <= set(c.state().claims) and not c.pending()
    assert len(c.quarantine()) == 1  # the forged join: refused with its reason, reported
    assert lc.status().reread == 1


def test_a_follower_restarted_after_dropping_a_change_finds_it_in_the_stream(small, links):
    make_stream(small.url, links)
    a = Replica.memory(space="team")
    big = a.add_claim("doc/spec/text", "t" * 10_000)
    after = a.add_claim("doc/spec/title", "Spec")
    first, second = unpublished(a)
    chunks = _chunks_of(a, first)
    subject = subject_of("team", a.author)
    # a flood on the author's own subject between each of its chunks
    flood = [m for chunk in chunks for m in [chunk, *bogus(subject, 2)]]
    publish(small.url, flood)
    bounds = ChunkBounds(per_author=1, total=1, give_up_after=1)  # nothing delivered twice
    b = Replica.memory(space="team")
    lb = _link(links, b, small.url, chunk_bounds=bounds)
    lb.sync_once(timeout=GUARD)
    assert big.claim_id not in b.state().claims and lb.status().abandoned >= 1
    lb.stop()  # what the link remembered of the dropped change is gone with it
    publish(small.url, [(subject, a.change_bytes([second])[0], {"Nats-Msg-Id": second.hex()})])
    again = _link(links, b, small.url, chunk_bounds=bounds)

    def both() -> bool:
        again.sync_once(timeout=GUARD)
        return {big.claim_id, after.claim_id} <= set(b.state().claims)

    eventually(both)
    assert not b.pending() and again.status().reread == 1


def test_statefuse_sync_through_a_broker_says_how_many_chunk_assemblies_it_dropped(
    small, links, tmp_path, capsys
):
    from statefuse.entry.cli import main

    make_stream(small.url, links)
    publish(small.url, bogus(subject_of("team", stranger()), 64))
    store = str(tmp_path / "b.db")
    assert main(["--store", store, "init", "--space", "team"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "sync", small.url]) == 0
    out = capsys.readouterr().out
    # 64 never-ending assemblies on one subject, at most 8 held per subject (the default)
    dropped = re.search(r"(\d+) chunk assembl(?:y|ies) dropped past the chunk bounds", out)
    assert dropped is not None, out
    assert 1 <= int(dropped.group(1)) <= 64 - 8
    other = str(tmp_path / "c.db")
    assert main(["--store", other, "init", "--space", "team"]) == 0
    capsys.readouterr()
    assert main(["--store", other, "--json", "sync", small.url]) == 0
    (peer,) = json.loads(capsys.readouterr().out)["peers"]
    assert peer["ok"] is True
    assert 1 <= peer["chunks_dropped"] <= 64 - 8
