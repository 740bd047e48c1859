"""Smoke test of the store-as-index benchmark (`benchmarks/storeindex.py`) at a tiny size: a run
prints every row beside its target and writes the JSON the module describes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# `benchmarks` is a folder of the checkout, not an installed package: importable when pytest
# runs from the root as `python -m pytest`, not always as a bare `pytest`.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import storeindex as bench  # noqa: E402

NAMES = [
    "statefuse --version (floor)",
    "statefuse claim KEY VALUE",
    "statefuse show KEY",
    "statefuse conflicts --limit 20",
    "statefuse context --query Q",
    "Replica.open + first context()",
    "  of which Replica.open",
    "  of which first context()",
    "peak RSS after them",
    "agent step (write 1 claim + context)",
    "  floor: the write (add_claim)",
    "  floor: the slice's reads",
    "  floor: assembly over the slice",
    "peak RSS after open + 3 steps",
    "current RSS after open + 3 steps",
    "MCP search QUERY (no prefix)",
    "MCP search (no query, no prefix)",
    "LangGraph search, query, under a prefix",
    "LangGraph list_namespaces(prefix)",
]


def test_a_tiny_run_prints_every_row_and_writes_the_json(tmp_path, capsys):
    out, store = tmp_path / "run.json", tmp_path / "kept.db"
    argv = ["--claims", "1000", "--repeat", "2", "--steps", "3", "--keep", str(store)]
    assert bench.main([*argv, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    document = json.loads(out.read_text())
    rows = document["rows"]
    assert [r["name"] for r in rows] == NAMES
    assert document["options"]["claims"] == 1000 and document["build"]["claims"] > 0
    for r in rows:
        assert r["median"] > 0 and r["name"].strip() in table
        steps = r["name"] == "agent step (write 1 claim + context)" or "floor:" in r["name"]
        assert len(r["samples"]) == (3 if steps else 1 if "RSS after open" in r["name"] else 2)
    by_name = {r["name"]: r for r in rows}
    assert by_name["statefuse conflicts --limit 20"]["target_text"] == "<= 0.3 s (1M)"
    assert by_name["agent step (write 1 claim + context)"]["target_text"] == "<= 5 ms (100k)"
    assert "<= 200 MB (1M)" in table and "<= 0.5 s (1M)" in table
    # the kept store is measured again without a build
    again = tmp_path / "again.json"
    argv = ["--store", str(store), "--repeat", "1", "--steps", "1", "--json", str(again)]
    assert bench.main(argv) == 0
    assert json.loads(again.read_text())["build"] is None


def test_options_refuse_non_positive_sizes_and_a_missing_store(tmp_path):
    assert bench.parse_args([]).claims == 100_000
    for bad in (["--claims", "0"], ["--repeat", "-1"], ["--store", str(tmp_path / "no.db")]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
