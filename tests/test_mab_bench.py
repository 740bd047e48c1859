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


def test_a_tiny_run_prints_every_row_and_writes_the_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "dev.jsonl"
    data.write_text(json.dumps(DATASET) + "\n", encoding="utf-8")
    out = tmp_path / "run.json"
    assert bench.main(["--data", str(data), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert [(r["dataset"], r["measure"], r["resolver"]) for r in rows] == [
        (d, m, r)
        for d in ("tiny", "ALL")
        for m, r in [
            ("context", "default"),
            ("context", "latest-wins"),
            ("selection", "conservative"),
            ("selection", "latest-wins"),
        ]
    ]
    assert all(r["questions"] == 1 for r in rows)  # Bob's key holds no conflict
    latest = rows[3]
    assert (latest["accuracy"], latest["false_certainty"], latest["conflict_recall"]) == (
        100.0,
        0.0,
        100.0,
    )
    assert rows[2]["accuracy"] == 0.0 and rows[2]["conflict_listed"] == 100.0
    assert rows[0]["conflict_shown"] == 100.0  # both of Ada's cities are in the context
    for r in rows:
        assert f"{r['dataset']:<26}{r['measure']:<11}{r['resolver']}" in table
    # LatestWins chose Rome: the context's line says it was contested, London beside it
    assert rows[1]["mark_shown"] == 100.0 and rows[1]["conflict_shown"] == 100.0
    assert rows[0]["mark_shown"] == 0.0  # the default resolver surfaced the conflict instead
    (q,) = json.loads(out.read_text())["questions"]["tiny"]
    assert q["selection"]["latest-wins"]["marked"] is True
