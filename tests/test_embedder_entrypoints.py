"""An embedder through the entry points: ``statefuse context --embedder MODULE:ATTR`` and
``statefuse mcp --embedder MODULE:ATTR`` as real processes, and the MCP server's ``recall`` and
``search`` through the SDK's client. The embedder is the test suite's `ConceptEmbedder`
(``benchmarks/search.py``), wrapped in a module written per test that logs every text it embeds
to a file, so a test sees what a process embedded."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.search import ConceptEmbedder, load  # noqa: E402
from statefuse.sync.replica import Replica  # noqa: E402

#: A hang guard for each process, never a budget.
PROCESS_TIMEOUT = 120
QUESTION = "Is the espresso maker working?"

LOGGED = """
import os
from benchmarks.search import ConceptEmbedder

class Logged(ConceptEmbedder):
    def embed(self, texts):
        with open(os.environ["EMBED_LOG"], "a", encoding="utf-8") as f:
            f.writelines(t.replace("\\n", " ") + "\\n" for t in texts)
        return super().embed(texts)
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "logged_embedder.py").write_text(LOGGED, encoding="utf-8")
    out = dict(os.environ)
    paths = [str(tmp_path), str(ROOT), out.get("PYTHONPATH", "")]
    out["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    out["EMBED_LOG"] = str(tmp_path / "embedded.txt")
    out.pop("CI", None)  # the CLI's own behaviour does not depend on it
    return out


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "team.db"
    with Replica.open(path, create=True, space="team") as replica:
        load(replica)
    return path


def _context(path: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["context", "--store", str(path), "--query", QUESTION, "--budget", "60", *extra]
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        cwd=ROOT,
    )


def _embedded(env: dict[str, str]) -> list[str]:
    log = Path(env["EMBED_LOG"])
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_context_with_an_embedder_finds_the_meant_memory_and_embeds_each_claim_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    path = _store(tmp_path)
    plain = _context(path, env)
    assert plain.returncode == 0, plain.stderr
    assert "broken since Monday" not in plain.stdout
    first = _context(path, env, "--embedder", "logged_embedder:Logged")
    assert first.returncode == 0, first.stderr
    assert "broken since Monday" in first.stdout
    assert len(_embedded(env)) == 200 + 1  # every claim, and the question
    again = _context(path, env, "--embedder", "logged_embedder:Logged")
    assert again.stdout == first.stdout
    assert _embedded(env)[201:] == [QUESTION]  # another process: the question alone
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM vec_embedding").fetchone() == (200,)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon", "expected MODULE:ATTR"),
        ("no_such_module_here:x", "cannot import embedder module 'no_such_module_here'"),
        ("logged_embedder:Missing", "'logged_embedder' has no 'Missing'"),
        ("os:sep", "expected an Embedder or a callable"),
    ],
)
def test_a_bad_embedder_is_one_error_line(
    tmp_path: Path, env: dict[str, str], spec: str, says: str
) -> None:
    path = _store(tmp_path)
    got = _context(path, env, "--embedder", spec)
    assert got.returncode == 1 and got.stdout == ""
    (line,) = got.stderr.splitlines()
    assert line.startswith("Error: ") and says in line, line


# --- MCP ------------------------------------------------------------------------------------------

try:
    import mcp
except ImportError:  # pragma: no cover - CI installs the test extra, which includes the SDK
    if os.environ.get("CI"):
        raise
    mcp = None  # type: ignore[assignment]

needs_mcp = pytest.mark.skipif(
    mcp is None, reason='needs the MCP SDK: pip install "statefuse[mcp]"'
)


@needs_mcp
def test_mcp_recall_and_search_rank_by_meaning_with_an_embedder(tmp_path: Path) -> None:
    from statefuse.entry.mcp import build_server
    from tests.test_mcp import connected

    path = _store(tmp_path)
    with Replica.open(path) as replica:
        with connected(build_server(replica)) as s:
            plain = s.ok("search", query=QUESTION)["claims"]
            assert all(c["key"] != "kitchen/coffee_machine/status" for c in plain[:1])
        embedder = ConceptEmbedder()
        with connected(build_server(replica, embedder=embedder)) as s:
            found = s.ok("search", query=QUESTION, limit=3)["claims"]
            assert found[0]["key"] == "kitchen/coffee_machine/status"
            recalled = s.ok("recall", query=QUESTION, budget=60)["text"]
            assert "broken since Monday" in recalled
        assert embedder.texts == 200 + 1  # the claims once, the question once


@needs_mcp
def test_statefuse_mcp_takes_an_embedder(tmp_path: Path, env: dict[str, str]) -> None:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from tests.test_mcp import connected

    path = _store(tmp_path)
    args = ["-m", "statefuse", "mcp", "--store", str(path), "--embedder", "logged_embedder:Logged"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=ROOT, env=env)
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        with connected(stdio_client(params, errlog=errlog)) as s:
            found = s.ok("search", query=QUESTION, limit=1)["claims"]
            assert found[0]["key"] == "kitchen/coffee_machine/status"
        errlog.seek(0)
        assert "Traceback" not in errlog.read()
    assert len(_embedded(env)) == 200 + 1
