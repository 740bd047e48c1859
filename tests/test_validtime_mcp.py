"""Valid time and context dimensions through the MCP server, driven by the real MCP SDK client
(the in-memory transport with the initialize handshake, as tests/test_mcp.py does)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import mcp  # noqa: F401 - CI installs the SDK: never skip
else:
    pytest.importorskip("mcp", reason='the MCP SDK is not installed: pip install "statefuse[mcp]"')

from test_mcp import Session, connected

from statefuse.entry.mcp import build_server
from statefuse.sync.replica import Replica

MAR = 1_772_323_200_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Replica]:
    replica = Replica.open(tmp_path / "team.db", space="team", create=True)
    yield replica
    replica.close()


@pytest.fixture
def session(store: Replica) -> Iterator[Session]:
    with connected(build_server(store)) as s:
        yield s


def test_a_price_that_changed_on_a_date_then_a_point_in_time_question(session, store):
    old = session.ok("remember", key="shop/tea/price", value=12, valid_until="2026-03-01")
    new = session.ok("remember", key="shop/tea/price", value=15, valid_from="2026-03-01T00:00Z")
    # an update for another interval replaces nothing of mine, and is no conflict
    assert new["replaced"] == [] and new["conflict"] is False
    values = store.timeline("shop/tea/price")
    assert [(e.claim.value, e.valid_from, e.valid_until) for e in values] == [
        (12, None, MAR),
        (15, MAR, None),
    ]
    assert values[0].claim.claim_id.hex() == old["claim_id"]
    feb = session.text("recall", query="tea price", valid_at="2026-02-14")
    assert "shop/tea/price: 12 [.. 2026-03-01)" in feb and "15 [" not in feb
    april = session.text("recall", query="tea price", valid_at="2026-04-01")
    assert "shop/tea/price: 15 [2026-03-01 ..)" in april and "12 [" not in april
    # a second value for March on overlaps the 15: an update of mine replaces it
    newer = session.ok("remember", key="shop/tea/price", value=16, valid_from="2026-03-15")
    assert newer["replaced"] == [new["claim_id"]]


def test_values_by_location_and_a_lens_context(session):
    session.ok("remember", key="shop/s1/status", value="open", context={"location": "London"})
    r = session.ok("remember", key="shop/s1/status", value="closed", context={"location": "Paris"})
    assert r["conflict"] is False and r["replaced"] == []
    paris = session.text("recall", query="status", context={"location": "Paris"})
    assert "closed {location=Paris}" in paris and "London" not in paris
    session.ok(
        "remember",
        key="shop/s1/status",
        value="closed",
        context={"location": "London"},
        update=False,
    )
    (conflict,) = session.ok("conflicts")["conflicts"]
    assert [c["holds"] for c in conflict["candidates"]] == ["{location=London}"] * 2
    assert '"open" {location=London}' in session.text("conflicts")


def test_bad_instants_and_contexts_are_refused_naming_the_argument(session, store):
    line = session.refused("remember", key="shop/tea/price", value=1, valid_from="soon")
    assert "valid_from" in line and "iso-8601" in line
    line = session.refused("remember", key="shop/tea/price", value=1, valid_from="2026-03-01T10:00")
    assert "valid_from" in line
    line = session.refused(
        "remember",
        key="shop/tea/price",
        value=1,
        valid_from="2026-03-01",
        valid_until="2026-01-01",
    )
    assert "valid_until" in line
    line = session.refused("recall", query="x", valid_at="yesterday")
    assert "valid_at" in line
    assert store.state().all_claims() == []
