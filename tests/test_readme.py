"""The README's Python examples run, top to bottom, in one namespace (so they never drift)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_the_readme_has_python_examples():
    assert len(python_blocks()) >= 5


def test_every_readme_example_runs_and_its_assertions_hold():
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, block in enumerate(python_blocks()):
        code = compile(block, f"README.md block {i + 1}", "exec")
        exec(code, namespace)


def test_the_quick_start_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("##", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", quick, re.S)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npython3 dev.py test\n" in ci
