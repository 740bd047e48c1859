"""The built wheel claims one import name, ``statefuse``: the repository's top-level ``registry/``
and ``sync/`` folders install as ``statefuse.registry`` and ``statefuse.sync``, so a user's own
``sync.py`` or ``registry.py`` cannot shadow them.

The wheel is built from a copy of the source tree (``pip wheel --no-build-isolation``, with the
setuptools the test extra installs: nothing is downloaded) and installed into a directory of its
own; the checks import it from there in a fresh interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("statefuse", "registry", "sync"):
        shutil.copytree(ROOT / folder, src / folder, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--disable-pip-version-check", "-w", str(out), str(src)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("statefuse-*.whl")
    return built


def test_the_wheel_installs_one_top_level_name_and_every_module_under_it(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"statefuse"}
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["statefuse"]
    for folder in ("registry", "sync"):
        sources = {p.name for p in (ROOT / folder).glob("*.py")}
        installed = {n.rpartition("/")[2] for n in names if n.startswith(f"statefuse/{folder}/")}
        assert sources and sources <= installed, sources - installed
    assert "statefuse/py.typed" in names


def test_a_users_own_sync_and_registry_modules_do_not_shadow_statefuse(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--no-deps", "-q"),
            *("--disable-pip-version-check", "--target", str(site), str(wheel)),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "project"
    work.mkdir()
    for name in ("sync", "registry"):
        (work / f"{name}.py").write_text(
            f"raise SystemExit('the user\\'s {name}.py was imported')\n"
        )
    script = (
        "import statefuse, statefuse.cli\n"
        "r = statefuse.Replica.memory(space='team')\n"
        "r.add_claim('user/ada/city', 'Paris')\n"
        "print(statefuse.__file__)\n"
        "(c,) = r.state().active_by_key()[('user', 'ada', 'city')]\n"
        "print(c.value)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script],
        cwd=work,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    where, value = run.stdout.split()
    assert Path(where).is_relative_to(site) and value == "Paris"


def test_the_repository_folders_refuse_their_bare_names() -> None:
    # imported as ``sync`` from the repository root, the folder would be a second copy of every
    # module (with classes that are not ours): it refuses, naming the right import
    for name in ("sync", "registry"):
        run = subprocess.run(
            [sys.executable, "-c", f"import {name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 1
        assert f"ImportError: import statefuse.{name}, not {name}" in run.stderr
