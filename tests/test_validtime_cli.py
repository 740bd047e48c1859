"""Valid time and context dimensions through the CLI, as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sf(tmp_path: Path):
    store = tmp_path / "team.db"
    env = {**os.environ, "STATEFUSE_STORE": str(store)}

    def run(*argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "statefuse", *argv],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )
        if ok:
            assert proc.returncode == 0, proc.stderr
        return proc

    run("init", "--space", "team")
    return run


def test_a_price_that_changed_on_a_date_and_a_point_in_time_question(sf):
    sf("claim", "shop/tea/price", "12", "--valid-until", "2026-03-01")
    sf("claim", "shop/tea/price", "15", "--valid-from", "2026-03-01")
    # a timeline, not a conflict
    assert json.loads(sf("conflicts", "--json").stdout)["conflicts"] == []
    table = sf("timeline", "shop/tea/price").stdout.splitlines()
    assert table[0].split()[:5] == ["FROM", "UNTIL", "CLAIM", "SCOPE", "VALUE"]
    assert table[1].split()[:2] == ["..", "2026-03-01"] and " 12 " in table[1]
    assert table[2].split()[:2] == ["2026-03-01", ".."] and " 15 " in table[2]
    values = json.loads(sf("timeline", "shop/tea/price", "--json").stdout)["values"]
    assert [(v["value"], v["valid_from"], v["valid_until"]) for v in values] == [
        (12, None, 1_772_323_200_000),
        (15, 1_772_323_200_000, None),
    ]
    # what held on a date
    feb = sf("context", "--query", "tea price", "--valid-at", "2026-02-14", "--json").stdout
    assert "shop/tea/price: 12 [.. 2026-03-01)" in json.loads(feb)["text"]
    assert "15" not in json.loads(feb)["text"].split("shop/tea/price")[1].splitlines()[0]
    april = sf("context", "--query", "tea price", "--valid-at", "2026-04-01T12:00Z").stdout
    assert "shop/tea/price: 15 [2026-03-01 ..)" in april
    at = sf("timeline", "shop/tea/price", "--valid-at", "2026-02-14", "--json").stdout
    assert [v["value"] for v in json.loads(at)["values"]] == [12]


def test_values_by_location_are_two_facts_and_a_second_london_value_is_a_conflict(sf):
    sf("claim", "shop/s1/status", "open", "--context", "location=London")
    sf("claim", "shop/s1/status", "closed", "--context", "location=Paris")
    assert json.loads(sf("conflicts", "--json").stdout)["conflicts"] == []
    added = sf("claim", "shop/s1/status", "closed", "--context", "location=London").stdout
    assert added.rstrip().endswith('shop/s1/status [global] = "closed" {location=London}')
    (conflict,) = json.loads(sf("conflicts", "--json").stdout)["conflicts"]
    assert sorted(c["context"]["location"] for c in conflict["candidates"]) == ["London"] * 2
    listed = sf("conflicts").stdout
    assert '"open" {location=London}' in listed and '"closed" {location=London}' in listed
    assert "Paris" not in listed
    paris = sf("context", "--query", "status", "--context", "location=Paris").stdout
    assert "UNRESOLVED" not in paris and "closed {location=Paris}" in paris
    london = sf("context", "--query", "status", "--context", "location=London").stdout
    assert "UNRESOLVED" in london and "{location=London}" in london
    shown = json.loads(sf("timeline", "shop/s1/status", "--json").stdout)["values"]
    assert sorted((v["context"]["location"], v["in_conflict"]) for v in shown) == [
        ("London", True),
        ("London", True),
        ("Paris", False),
    ]
    assert conflict


def test_bad_times_and_dimensions_are_one_error_line(sf):
    for argv in (
        ("claim", "shop/tea/price", "12", "--valid-from", "next week"),
        ("claim", "shop/tea/price", "12", "--valid-from", "2026-03-01T10:00"),
        (
            "claim",
            "shop/tea/price",
            "12",
            "--valid-from",
            "2026-03-01",
            "--valid-until",
            "2026-01-01",
        ),
        ("claim", "shop/tea/price", "12", "--context", "London"),
        ("timeline", "shop/tea/price", "--valid-at", "soon"),
    ):
        proc = sf(*argv, ok=False)
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:"), proc.stderr
    assert json.loads(sf("show", "--json").stdout)["claims"] == []


def test_show_filters_by_instant_and_context_and_notes_them(sf):
    sf("claim", "shop/tea/price", "12", "--valid-until", "2026-03-01")
    sf("claim", "shop/tea/price", "15", "--valid-from", "2026-03-01")
    sf("claim", "shop/s1/status", "open", "--context", "location=London")
    table = sf("show").stdout
    assert "[.. 2026-03-01)" in table and "{location=London}" in table
    feb = json.loads(sf("show", "--valid-at", "2026-02-01", "--json").stdout)["claims"]
    assert sorted(json.dumps(c["value"]) for c in feb) == ['"open"', "12"]
    assert [c["valid_until"] for c in feb if c["value"] == 12] == [1_772_323_200_000]
    paris = json.loads(sf("show", "--context", "location=Paris", "--json").stdout)["claims"]
    assert sorted(json.dumps(c["value"]) for c in paris) == ["12", "15"]
