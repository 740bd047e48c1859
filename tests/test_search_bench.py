"""The search-by-meaning benchmark (`benchmarks/search.py`) runs and prints its two rows."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import search as bench  # noqa: E402


def test_the_benchmark_prints_lexical_and_hybrid_hits(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main([]) == 0
    out = capsys.readouterr().out
    rows = dict(re.findall(r"^(lexical|hybrid)\b.*?(\d+)/20\s+\d+/20$", out, re.M))
    assert int(rows["hybrid"]) >= 18 and int(rows["lexical"]) < int(rows["hybrid"]), out


def test_no_question_shares_a_word_with_the_memory_it_asks_about() -> None:
    from statefuse.reading.ranker import words

    for key, value, question in bench.TARGETS:
        shared = set(words(question)) & set(words(f"{key} {value}"))
        # two name a person or a company, as a user would
        assert shared <= {"alice", "globex"}, (question, shared)
