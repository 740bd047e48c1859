"""The documentation site (docs/, mkdocs.yml): every example runs, the site builds with
``mkdocs build --strict`` (every page in the nav, every link and anchor resolves), and the API
reference names every public name. How examples run: tests/docblocks.py."""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docblocks import blocks, run_page

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _name(page: Path) -> str:
    return page.relative_to(DOCS).as_posix()


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_example_of_the_page_runs_and_its_output_is_what_it_shows(
    page, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STATEFUSE_STORE", raising=False)
    run_page(page)


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_fence_starts_a_line_so_no_example_is_skipped(page):
    text = page.read_text(encoding="utf-8")
    assert len(blocks(text)) * 2 == len(re.findall(r"^```", text, re.M)), page
    assert not re.search(r"^[ \t]+```", text, re.M), f"{page}: an indented fence"


def test_the_docs_hold_examples_of_every_kind():
    found = [b for page in PAGES for b in blocks(page.read_text(encoding="utf-8"))]
    assert sum(b.lang == "python" for b in found) >= 25
    assert sum(b.marker == "output" for b in found) >= 3


def test_every_page_is_in_the_nav_and_the_nav_names_no_missing_page():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = config.split("\nnav:\n", 1)[1]
    listed = re.findall(r":\s*(\S+\.md)\s*$", nav, re.M)
    assert sorted(listed) == sorted(_name(p) for p in PAGES)


_SITES: dict[str, Path] = {}


def _build_site(tmp_path: Path) -> Path:
    """The site, built once per test process with ``mkdocs build --strict``."""
    if "site" in _SITES:
        return _SITES["site"]
    needed = ("mkdocs", "material", "mkdocstrings_handlers.python")
    missing = [m for m in needed if importlib.util.find_spec(m.split(".")[0]) is None]
    if missing:
        message = f"{', '.join(missing)} not installed: pip install -e '.[docs]' (the docs extra)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    site = tmp_path / "site"
    config = ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)]
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", *config],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" not in proc.stderr, proc.stderr
    _SITES["site"] = site
    return site


def test_the_site_builds_with_strict_checks(tmp_path):
    site = _build_site(tmp_path)
    for page in PAGES:
        html = "index.html" if page.name == "index.md" else f"{page.stem}/index.html"
        assert (site / page.relative_to(DOCS).parent / html).is_file(), page


PUBLIC_MODULES = (
    "statefuse",
    "statefuse.sync",
    "statefuse.registry",
    "statefuse.entry.mcp",
    "statefuse.entry.langgraph",
)


def _exported_code() -> set[str]:
    """The dotted paths (defining module + qualified name) of every class and function the
    public modules export."""
    out = set()
    for module in PUBLIC_MODULES:
        pkg = importlib.import_module(module)
        for name in pkg.__all__:
            obj = getattr(pkg, name)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__.startswith(
                "statefuse"
            ):
                out.add(f"{obj.__module__}.{obj.__qualname__}")
    return out


def test_the_page_from_the_docstrings_has_an_entry_for_each_exported_class_and_function():
    page = (DOCS / "reference" / "python.md").read_text(encoding="utf-8")
    listed = re.findall(r"^::: (\S+)$", page, re.M)
    assert len(listed) == len(set(listed))
    want = _exported_code()
    missing = sorted(want - set(listed))
    assert not missing, "add to docs/reference/python.md:\n" + "\n".join(
        f"::: {m}" for m in missing
    )
    assert sorted(set(listed) - want) == []  # nothing listed that is not exported


def test_the_page_from_the_docstrings_shows_signatures_and_docstrings(tmp_path):
    site = _build_site(tmp_path)
    text = html.unescape(
        re.sub(r"<[^>]+>", "", (site / "reference" / "python" / "index.html").read_text())
    )
    text = re.sub(r"\s+", " ", text)
    from statefuse.sync.replica import Replica

    first = " ".join((Replica.add_claim.__doc__ or "").split("\n\n")[0].split())
    assert first and first.replace("``", "").replace("`", "") in text.replace("`", "")
    assert "add_claim( namespace: str, subject: str, predicate: str, value: Value," in text


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_the_api_reference_names_every_public_name(module):
    reference = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    names = importlib.import_module(module).__all__
    assert [n for n in names if f"`{n}`" not in reference] == []


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_no_page_calls_the_project_unfinished(page):
    text = page.read_text(encoding="utf-8").lower()
    for stale in ("work in progress", "come next", "not yet", "will bring", "planned fix"):
        assert stale not in text, f"{page.name}: {stale!r}"
