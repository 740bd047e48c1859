"""Smoke test of the MemoryAgentBench conflict benchmark (`benchmarks/mab.py`) on a handcrafted
three-fact sub-dataset: a run prints every row and writes the JSON the README describes."""

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

from benchmarks import mab as bench  # noqa: E402

DATASET = {
    "source": "tiny",
    "facts": [
        {"n": 0, "subject": "Ada", "relation": "city", "object": "London", "text": ""},
        {"n": 1, "subject": "Bob", "relation": "city", "object": "Paris", "text": ""},
        {"n": 2, "subject": "Ada", "relation": "city", "object": "Rome", "text": ""},
    ],
    "questions": [
        {
            "question": "Where does Ada live?",
            "subject": "Ada",
            "relation": "city",
            "answers": ["Rome"],
        },
        {
            "question": "Where does Bob live?",
            "subject": "Bob",
            "relation": "city",
            "answers": ["Paris"],
        },
    ],
}


def test_normalize_is_mabs() -> None:
    assert bench.normalize("The  Hague, (NL)!") == "hague nl"
    assert bench.occurs("the Hague", "Capital: Hague.")


RUNS = ("default", "latest-wins", "decision")


def run(tmp_path: Path, *args: str) -> tuple[list[dict], str, dict]:
    data = tmp_path / "dev.jsonl"
    data.write_text(json.dumps(DATASET) + "\n", encoding="utf-8")
    out = tmp_path / "run.json"
    assert bench.main(["--data", str(data), "--json", str(out), *args]) == 0
    doc = json.loads(out.read_text())
    return doc["rows"], doc["memory"], doc


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_tiny_run_prints_every_row_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str
) -> None:
    rows, memory, doc = run(tmp_path, "--store", store)
    table = capsys.readouterr().out
    assert doc["options"]["store"] == store
    assert [(r["dataset"], r["measure"], r["run"]) for r in rows] == [
        (d, m, r) for d in ("tiny", "ALL") for m in ("context", "selection") for r in RUNS
    ]
    assert all(r["questions"] == 1 for r in rows)  # Bob's key holds no conflict
    by = {(r["measure"], r["run"]): r for r in rows[:6]}
    # the default policy leaves Ada's conflict for the planner: listed, and both cities shown
    assert by["context", "default"]["conflict_shown"] == 100.0
    assert by["context", "default"]["gold_shown"] == 100.0
    assert by["context", "default"]["ms_per_context"] > 0
    default = by["selection", "default"]
    assert (default["accuracy"], default["false_certainty"], default["conflict_recall"]) == (
        0.0,
        0.0,
        100.0,
    )
    # latest-wins and the decision select the newer city; the View says it was contested
    recall = 100.0
    for name in ("latest-wins", "decision"):
        sel = by["selection", name]
        assert (sel["accuracy"], sel["false_certainty"], sel["conflict_recall"]) == (
            100.0,
            0.0,
            recall,
        )
        assert by["context", name]["gold_shown"] == 100.0
    assert f"memory: {memory}" in table and "fact/<subject>/<relation>" in memory
    for r in rows:
        assert f"{r['dataset']:<26}{r['run']:<13}" in table
    # latest-wins and the decision chose Rome: the context's line says it was contested,
    # London beside it; the default policy surfaced the conflict instead of marking a choice
    for name in ("latest-wins", "decision"):
        assert by["context", name]["contested_shown"] == 100.0
        assert by["context", name]["conflict_shown"] == 100.0
    assert by["context", "default"]["contested_shown"] == 0.0
    (q,) = doc["questions"]["tiny"]
    assert q["selection"]["latest-wins"]["contested"] is True
