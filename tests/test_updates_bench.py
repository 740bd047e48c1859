"""Smoke test of the reads-after-updates benchmark (`benchmarks/updates.py`) at a tiny size: a
run prints every row and writes the JSON the README describes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
    import langgraph  # noqa: F401 - CI must run it: a missing langgraph fails loudly
    import mcp  # noqa: F401
else:
    pytest.importorskip("langgraph")
    pytest.importorskip("mcp")

# `benchmarks` is a folder of the checkout, not an installed package: importable when pytest
# runs from the root as `python -m pytest`, not always as a bare `pytest`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import updates as bench  # noqa: E402


def test_a_tiny_run_prints_every_row_and_writes_the_json(tmp_path, capsys):
    out = tmp_path / "run.json"
    argv = ["--items", "50", "--steps", "2", "--updates", "0,20", "--mcp-updates", "0,20"]
    assert bench.main([*argv, "--rounds", "1", "--keys", "20", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["section"], r["backend"]) for r in rows] == [
        *[("put + get", "memory")] * 2,
        *[("put + get", "SQLite")] * 2,
        *[("remember + recall", "MCP tools")] * 2,
        *[("large workload", b) for b in ("InMemoryStore", "memory", "SQLite")] * 2,
    ]
    assert all(r["median_s"] > 0 for r in rows)
    assert rows[1]["note"].endswith("x fresh") and rows[6]["note"] == "1.0x InMemoryStore"
    for r in rows:
        assert r["name"] in table
