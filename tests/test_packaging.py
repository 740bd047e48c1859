"""The built wheel claims one import name, ``statefuse``: the repository's top-level ``registry/``
and ``sync/`` folders install as ``statefuse.registry`` and ``statefuse.sync``, so a user's own
``sync.py`` or ``registry.py`` cannot shadow them.

The wheel is built from a copy of the source tree (``pip wheel --no-build-isolation``, with the
setuptools the test extra installs: nothing is downloaded) and installed into a directory of its
own; the checks import it from there in a fresh interpreter.

The README's install from a built wheel is checked as a user would do it: ``python -m build``
(without isolation, with the setuptools of the test extra) makes the sdist and, from it, the wheel;
the wheel installs into a fresh venv (no system site-packages) with its core dependencies, from
the wheels dev.py's install step keeps in ``.wheels/`` (``--no-index``: nothing downloads here),
and that venv's ``statefuse`` command answers ``--version`` and stores one claim and shows it.
Under ``CI=true`` a missing ``.wheels/`` fails; elsewhere it skips, naming the command that fills
it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PIP = (sys.executable, "-m", "pip", "--disable-pip-version-check")
#: Where dev.py's install step keeps wheels of the core dependencies.
WHEELS = Path(os.environ.get("STATEFUSE_CORE_WHEELS", ROOT / ".wheels"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def _source_copy(into: Path) -> Path:
    """The files a build reads, copied: a build writes ``build/`` and ``*.egg-info`` beside them."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, into / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("statefuse", "registry", "sync"):
        shutil.copytree(ROOT / folder, into / folder, symlinks=True, ignore=ignore)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = _source_copy(tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
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
        [*PIP, "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
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
        "import statefuse, statefuse.entry.cli\n"
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


def test_the_built_wheel_installs_into_a_fresh_venv_and_its_command_stores_a_claim(
    tmp_path: Path,
) -> None:
    if not (WHEELS / "requirements.txt").is_file():
        message = f"no core dependency wheels in {WHEELS}: run `python3 dev.py test` once"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    (tmp_path / "src").mkdir()
    src = _source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = dist.glob("statefuse-*.tar.gz")
    (wheel,) = dist.glob("statefuse-*.whl")  # built from the sdist: the sdist holds everything
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    for folder in ("registry", "sync"):
        assert any(n.endswith(f"/{folder}/__init__.py") for n in names), folder

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    offline = ("--no-index", "--find-links", str(WHEELS))
    installed = subprocess.run(
        [*PIP, "--python", str(python), "install", "-q", *offline, str(wheel)],
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    clean = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    work = tmp_path / "work"
    work.mkdir()

    def statefuse(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(env_dir / "bin" / "statefuse"), *argv],
            cwd=work,
            env=clean,
            capture_output=True,
            text=True,
            timeout=120,
        )

    version = statefuse("--version")
    assert version.returncode == 0, version.stderr
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (release,) = re.findall(r'^version = "([^"]+)"$', pyproject, re.M)
    assert version.stdout == f"statefuse {release}\n"
    assert statefuse("init", "--space", "team").returncode == 0
    claimed = statefuse("claim", "project/launch/owner", "Dana Smith")
    assert claimed.returncode == 0, claimed.stderr
    shown = statefuse("show", "project")
    assert shown.returncode == 0, shown.stderr
    assert "project/launch/owner" in shown.stdout and '"Dana Smith"' in shown.stdout
    # it ran the installed copy, not the checkout
    where = subprocess.run(
        [str(python), "-c", "import statefuse; print(statefuse.__file__)"],
        cwd=work,
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout + where.stderr
