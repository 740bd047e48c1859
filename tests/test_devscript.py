"""dev.py, the README's two quick-start commands: ``demo`` installs the core alone into a venv of
its own, and ``test`` keeps the core dependencies' wheels for the packaging test. The commands it
would run are recorded here, not run (they install from the package index)."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: the core dependency tomli
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("dev_under_test", ROOT / "dev.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the venvs and the wheel cache go to a temporary folder
    monkeypatch.setattr(module, "VENV", tmp_path / ".venv")
    monkeypatch.setattr(module, "DEMO_VENV", tmp_path / ".venv-demo")
    monkeypatch.setattr(module, "WHEELS_DIR", tmp_path / ".wheels")
    return module


def _record(monkeypatch: pytest.MonkeyPatch, dev: ModuleType) -> list[list[str]]:
    ran: list[list[str]] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        ran.append([str(a) for a in argv])
        return subprocess.CompletedProcess(argv, 0, "", "")

    def create(self: object, env_dir: Path) -> None:
        bin_dir = Path(env_dir) / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "python").write_text("")

    monkeypatch.setattr(dev.subprocess, "run", run)
    monkeypatch.setattr(dev.subprocess, "call", lambda argv, **kw: run(argv).returncode)
    monkeypatch.setattr(dev.venv.EnvBuilder, "create", create)
    return ran


def test_the_demo_installs_the_core_alone_into_its_own_venv(dev, monkeypatch, tmp_path):
    ran = _record(monkeypatch, dev)
    assert dev.main(["demo", "--dir", "kept"]) == 0
    install, demo = ran
    assert install[0] == str(tmp_path / ".venv-demo" / "bin" / "python")
    assert install[-2:] == ["-e", str(ROOT)]  # no extras: no test, lint, docs, NATS, MCP, LangGraph
    assert demo[1:] == ["-m", "statefuse", "demo", "--dir", "kept"]
    assert not (tmp_path / ".venv").exists()  # the test venv is not made
    ran.clear()
    assert dev.main(["demo"]) == 0
    assert len(ran) == 1  # installed once: the second run goes straight to the demo


def test_the_core_requirements_dev_py_reads_are_pyprojects_dependencies(dev):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert dev._core_requirements() == pyproject["project"]["dependencies"]


def test_the_test_command_keeps_the_core_wheels_once(dev, monkeypatch, tmp_path):
    ran = _record(monkeypatch, dev)
    dev._ensure_core_wheels()
    (download,) = ran
    assert download[1:4] == ["-m", "pip", "download"]
    assert "--only-binary" in download and str(tmp_path / ".wheels") in download
    assert download[-len(dev._core_requirements()) :] == dev._core_requirements()
    ran.clear()
    dev._ensure_core_wheels()
    assert ran == []  # the list is unchanged: nothing downloads again
