"""The README: a newcomer's first page. Its examples run (as tests/docblocks.py says), it stays
short, its links resolve, and its quick start is the two commands CI runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from docblocks import blocks, run_page

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 250


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    assert f"\n## {title}\n" in text, f"the README has no '{title}' section"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_is_short_enough_to_read():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move detail to docs/"


def test_the_readme_has_examples_of_python_and_a_session_that_runs():
    found = blocks(README.read_text(encoding="utf-8"))
    assert sum(b.lang == "python" for b in found) >= 3
    assert any(b.marker == "run" for b in found)


def test_every_readme_example_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFUSE_STORE", raising=False)
    run_page(README)


def test_the_quick_start_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    (block,) = re.findall(r"```sh\n(.*?)```", _section("Quick start"), re.S)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["python3 dev.py demo", "python3 dev.py test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "\npython3 dev.py test\n" in ci


def test_the_readme_says_how_to_install_into_a_project_with_each_extra():
    install = _section("Install")
    for command in ("pip install statefuse", 'pip install "statefuse[mcp]"'):
        assert command in install
    assert 'pip install "statefuse[langgraph]"' in install
    # true today: from a checkout, with extras, and from a wheel built there (test_packaging.py
    # installs one so); the index's name is what it will be once published, and says so
    assert "not on PyPI yet" in install and "Once published" in install
    for command in ("pip install .", "pip install '.[mcp,langgraph,nats]'", "python -m build"):
        assert f"\n{command} " in install, command
    assert "pip install dist/statefuse-" in install


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository():
    text = README.read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert len(links) >= 10
    assert [t for t in links if not (ROOT / t).is_file()] == []


def test_the_readmes_decide_script_decides_for_the_scouts_date_in_a_real_shell(
    tmp_path, monkeypatch
):
    """The README's session leaves planner.db with the conflict; its ``sh`` block that decides
    takes the id from ``conflicts``' table (ids differ per run) and must work as written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFUSE_STORE", raising=False)
    run_page(README)
    tour = blocks(_section("A five-minute tour"))
    (script,) = [b.code for b in tour if b.lang == "sh" and "statefuse decide" in b.code]
    assert script.startswith("id=$(statefuse conflicts"), script
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "statefuse"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m statefuse "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "statefuse", "conflicts", "--store", "planner.db", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (conflict,) = json.loads(shown.stdout)["conflicts"]
    chosen = conflict["decision"]["selected_claim_id"]
    (scout,) = [c for c in conflict["candidates"] if c["author_name"] == "scout"]
    assert chosen == scout["claim_id"] and conflict["decision"]["reason"] == "vendor confirmed"


def test_the_readme_and_the_docs_index_list_every_guide():
    guides = {p.name for p in (ROOT / "docs" / "guides").glob("*.md")}
    readme = set(re.findall(r"\(docs/guides/([\w-]+\.md)[)#]", README.read_text(encoding="utf-8")))
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\(guides/([\w-]+\.md)[)#]", index))
    assert guides - readme == set(), "guides missing from README.md"
    assert guides - listed == set(), "guides missing from docs/index.md"
