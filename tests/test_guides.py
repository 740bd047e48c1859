"""The guides' Python examples (docs/guides/*.md) run as they are written, each block on its own,
so they never drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDES = sorted((Path(__file__).resolve().parent.parent / "docs" / "guides").glob("*.md"))


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M)


BLOCKS = [(path, i, block) for path in GUIDES for i, block in enumerate(python_blocks(path), 1)]


def test_the_follow_and_confidence_guides_have_examples():
    names = {path.name for path, _, _ in BLOCKS}
    assert {"follow.md", "confidence.md"} <= names


@pytest.mark.parametrize(
    ("path", "number", "block"), BLOCKS, ids=[f"{p.stem}-{i}" for p, i, _ in BLOCKS]
)
def test_every_guide_example_runs_on_its_own_and_its_assertions_hold(path, number, block):
    code = compile(block, f"{path.name} block {number}", "exec")
    exec(code, {"__name__": "guide"})
