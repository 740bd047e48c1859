"""The context guide's examples run as written (STYLE practice 11): every ```python block of
docs/guides/context.md is executed, each in a fresh namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "context.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_example_of_the_context_guide_runs_and_its_assertions_hold(code):
    exec(compile(code, str(GUIDE), "exec"), {"__name__": "guide"})
