#!/usr/bin/env python3
"""Developer entry point: the README's two quick-start commands.

    python3 dev.py demo     # runs the StateFuse demo
    python3 dev.py test     # runs the whole test suite, on every core

``demo`` makes ``.venv-demo`` next to this file on first use and installs the project with its
core dependencies alone (no test, lint, docs, NATS, MCP or LangGraph packages), so that a new
user's first command is quick. ``test``, ``lint`` and ``bench`` make ``.venv`` and install the
project into it in editable mode with its test and lint tools; ``test`` also fetches the sdists
that hold LangGraph's store tests into ``.upstream/`` (`_ensure_upstream_tests`) and the wheels of
the core dependencies into ``.wheels/`` (`_ensure_core_wheels`: the packaging test installs the
built wheel into a fresh venv from them, with no index). So a fresh machine needs nothing but
Python >= 3.10. It only uses the standard library so that it runs before anything is installed.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
#: LangGraph's store tests (tests/test_langgraph_upstream.py runs them against StateFuseStore)
#: ship in these distributions' sdists, fetched here for the versions the venv has: the install
#: step is the only one that downloads, never a test.
UPSTREAM = ("langgraph-checkpoint", "langgraph-checkpoint-sqlite")
UPSTREAM_DIR = ROOT / ".upstream"
#: The demo's own venv: the core alone.
DEMO_VENV = ROOT / ".venv-demo"
#: Wheels of the core dependencies (and theirs), for tests/test_packaging.py's fresh venv.
WHEELS_DIR = ROOT / ".wheels"


def _python(venv_dir: Path = VENV) -> Path:
    bin_dir = venv_dir / ("Scripts" if os.name == "nt" else "bin")
    return bin_dir / ("python.exe" if os.name == "nt" else "python")


def _ensure_venv(venv_dir: Path = VENV, target: str = "[test,lint]") -> None:
    """Create the venv and (re)install when pyproject.toml changed since the last install."""
    stamp = venv_dir / ".statefuse-installed"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted and _python(venv_dir).exists():
        return
    if not _python(venv_dir).exists():
        print(f"creating virtual environment in {venv_dir.name} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    what = "and its test tools " if target else "(the core alone) "
    print(f"installing statefuse {what}into {venv_dir.name} ...", file=sys.stderr)
    subprocess.run(
        [
            str(_python(venv_dir)),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-e",
            f"{ROOT}{target}",
        ],
        check=True,
    )
    stamp.write_text(wanted)


def _core_requirements() -> list[str]:
    """The ``dependencies`` of pyproject.toml (read without tomllib, which 3.10 lacks)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml has no dependencies list"
    return re.findall(r'^\s*"([^"]+)",?\s*$', block.group(1), re.M)


def _pip_download(*args: str) -> bool:
    """``pip download ARGS`` in the test venv, quietly; whether it succeeded (the install
    step's downloads are wanted, not required: the tests that need them say so)."""
    cmd = [str(_python()), "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
    return subprocess.run([*cmd, *args], check=False).returncode == 0


def _ensure_core_wheels() -> None:
    """Download wheels of the core dependencies (and theirs) into `WHEELS_DIR`, once per list."""
    wanted = "\n".join(_core_requirements())
    stamp = WHEELS_DIR / "requirements.txt"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted:
        return
    print("downloading the core dependencies' wheels into .wheels ...", file=sys.stderr)
    WHEELS_DIR.mkdir(exist_ok=True)
    if not _pip_download("--only-binary", ":all:", "-d", str(WHEELS_DIR), *_core_requirements()):
        # the packaging test that needs them says so (and fails under CI=true)
        print("Warning: could not download the core dependencies' wheels", file=sys.stderr)
        return
    stamp.write_text(wanted, encoding="utf-8")


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
        fetched = _pip_download(
            "--no-deps", "--no-binary", ":all:", f"{dist}=={version}", "-d", str(UPSTREAM_DIR)
        )
        if not fetched or not sdist.is_file():
            # the tests that need it say so (and fail under CI=true)
            print(f"Warning: could not download {sdist.name}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 10):  # noqa: UP036 - must run, and explain, on an old Python
        print("Error: StateFuse needs Python 3.10 or newer", file=sys.stderr)
        return 1
    if not argv or argv[0] not in {"demo", "test", "lint", "bench"}:
        print(__doc__)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "demo":
        # the core alone (editable: a change to the checkout shows), run from the user's directory
        # (a relative `--dir` is theirs)
        _ensure_venv(DEMO_VENV, "")
        return subprocess.call([str(_python(DEMO_VENV)), "-m", "statefuse", "demo", *rest])
    _ensure_venv()
    py = str(_python())
    if cmd == "test":
        _ensure_upstream_tests()
        _ensure_core_wheels()
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
