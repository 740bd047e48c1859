#!/usr/bin/env python3
"""Developer entry point: the README's two quick-start commands.

    python3 dev.py demo     # runs the StateFuse demo
    python3 dev.py test     # runs the whole test suite, on every core

Each command makes ``.venv`` next to this file on first use and installs the project into it in
editable mode, so a fresh machine needs nothing but Python >= 3.10; ``test`` also fetches the
sdists that hold LangGraph's store tests into ``.upstream/`` (`_ensure_upstream_tests`). It only
uses the standard library so that it runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".statefuse-installed"
#: LangGraph's store tests (tests/test_langgraph_upstream.py runs them against StateFuseStore)
#: ship in these distributions' sdists, fetched here for the versions the venv has: the install
#: step is the only one that downloads, never a test.
UPSTREAM = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite")
UPSTREAM_DIR = ROOT / ".upstream"


def _python() -> Path:
    return BIN / ("python.exe" if os.name == "nt" else "python")


def _ensure_venv() -> None:
    """Create the venv and (re)install when pyproject.toml changed since the last install."""
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == wanted and _python().exists():
        return
    if not _python().exists():
        print("creating virtual environment in .venv ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("installing statefuse and its test tools into .venv ...", file=sys.stderr)
    subprocess.run(
        [
            str(_python()),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-e",
            f"{ROOT}[test,lint]",
        ],
        check=True,
    )
    STAMP.write_text(wanted)


def _ensure_upstream_tests() -> None:
    """Download the sdist of each `UPSTREAM` distribution at its installed version, once."""
    probe = (
        "import importlib.metadata as m, sys\n"
        "for d in sys.argv[1:]:\n"
        "    try: print(m.version(d))\n"
        "    except m.PackageNotFoundError: print('-')\n"
    )
    found = subprocess.run(
        [str(_python()), "-c", probe, *UPSTREAM], capture_output=True, text=True, check=True
    )
    for dist, version in zip(UPSTREAM, found.stdout.split(), strict=True):
        sdist = UPSTREAM_DIR / f"{dist.replace('-', '_')}-{version}.tar.gz"
        if version == "-" or sdist.is_file():
            continue  # not installed: the tests that need it say so (and fail under CI=true)
        print(
            f"downloading the {dist} {version} sdist (LangGraph's store tests) ...", file=sys.stderr
        )
        done = subprocess.run(
            [
                str(_python()),
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{dist}=={version}",
                "-d",
                str(UPSTREAM_DIR),
            ],
            check=False,
        )
        if done.returncode != 0 or not sdist.is_file():
            # the tests that need it say so (and fail under CI=true)
            print(f"Warning: could not download {sdist.name}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 - must run, and explain, on an old Python
        print("Error: StateFuse needs Python 3.10 or newer", file=sys.stderr)
        return 1
    if not argv or argv[0] not in {"demo", "test", "lint", "bench"}:
        print(__doc__)
        return 2
    _ensure_venv()
    cmd, rest = argv[0], argv[1:]
    py = str(_python())
    if cmd == "demo":
        return subprocess.call([py, "-m", "statefuse", "demo", *rest], cwd=ROOT)
    if cmd == "test":
        _ensure_upstream_tests()
        # the whole suite runs on every core (pytest-xdist); a chosen test runs in one process
        spread = [] if rest else ["-n", "auto"]
        return subprocess.call([py, "-m", "pytest", *spread, *rest], cwd=ROOT)
    if cmd == "bench":
        return subprocess.call([py, "-m", "benchmarks", *rest], cwd=ROOT)
    rc = subprocess.call(
        [py, "-m", "ruff", "check", "registry", "statefuse", "sync", "tests", "benchmarks"],
        cwd=ROOT,
    )
    return rc or subprocess.call([py, "-m", "mypy"], cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
