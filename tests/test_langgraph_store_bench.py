"""Smoke test of the LangGraph store benchmark (`benchmarks/langgraph_store.py`) at a tiny size:
a run prints every row for every backend and writes the JSON the README describes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI must run it: a missing langgraph fails loudly
else:
    pytest.importorskip("langgraph")

# `benchmarks` is a folder of the checkout, not an installed package: importable when pytest
# runs from the root as `python -m pytest`, not always as a bare `pytest`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import langgraph_store as bench  # noqa: E402

BACKENDS = ("StateFuse, memory", "StateFuse, SQLite", "InMemoryStore")


def test_a_tiny_run_prints_every_row_for_every_backend_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert bench.main(["--items", "200", "--steps", "3", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    document = json.loads(out.read_text())
    rows = document["rows"]
    names = {r["name"] for r in rows}
    assert len(names) == 10 and len(rows) == 10 * len(BACKENDS)
    assert {r["backend"] for r in rows} == set(BACKENDS)
    assert all(len(r["samples_s"]) == 3 and r["median_s"] > 0 for r in rows)
    assert document["options"] == {"items": 200, "steps": 3, "warmup": 5, "seed": bench.SEED}
    for name in names:
        assert name in table


def test_the_workload_places_every_item_once_in_namespaces_of_a_hundred_keys():
    work = bench.Workload(1_000, seed=1)
    places = [work.place(i) for i in range(1_000)]
    assert len(set(places)) == 1_000
    assert len({ns for ns, _ in places}) == 10
    assert sum(len(ops) for ops in work.ops()) == 1_000
