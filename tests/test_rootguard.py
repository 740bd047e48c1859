"""The root guard fails a run that writes into the repository root, and only such a run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _project(tmp_path: Path, body: str) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "README.md").write_text("kept\n")
    (root / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from rootguard import pytest_sessionfinish, pytest_sessionstart\n"
    )
    (root / "test_it.py").write_text(textwrap.dedent(body))
    return root


def _run(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "test_it.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


LITTER = """
    from pathlib import Path

    def test_writes_a_bundle_where_it_runs():
        Path("plan.bundle").write_bytes(b"x")

    def test_passes():
        assert True
"""


@pytest.mark.parametrize("extra", [(), ("-n", "2")], ids=["one process", "xdist"])
def test_a_file_written_into_the_root_fails_the_run_and_is_named(tmp_path, extra):
    root = _project(tmp_path, LITTER)
    done = _run(root, *extra)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wrote into the repository root: plan.bundle (new)" in done.stdout
    assert "2 passed" in done.stdout  # every test passed: the guard alone failed the run


def test_a_rewritten_root_file_fails_the_run(tmp_path):
    root = _project(
        tmp_path,
        """
        from pathlib import Path

        def test_rewrites_the_readme():
            Path("README.md").write_text("changed, and longer than before\\n")
        """,
    )
    done = _run(root)
    assert done.returncode == 1 and "README.md (rewritten)" in done.stdout


def test_a_run_that_writes_only_in_its_temporary_folders_passes(tmp_path):
    root = _project(
        tmp_path,
        """
        from pathlib import Path

        def test_writes_in_tmp(tmp_path):
            (tmp_path / "plan.bundle").write_bytes(b"x")
            Path(".hypothesis").mkdir(exist_ok=True)  # a tool's cache, created by design
        """,
    )
    done = _run(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "repository root" not in done.stdout
