"""Detectors' findings wherever conflicts appear: a SQLite replica's derived state, the command
line (a real process), MCP (the SDK's client), LangGraph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from statefuse import Lens, SectionName
from statefuse.registry import DetectorInput, DetectorSpec, Finding, Registry, register_detector
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
REGISTRY_TOML = """\
[[detectors]]
detector = "budget@1"
reads = ["budget/cost", "budget/limit"]
"""
REGISTRY = Registry.from_toml(REGISTRY_TOML)
COST = {"budget": "q3", "amount": 40000}


def _agents(store: Replica, n: int) -> list[Replica]:
    """``n`` agents of ``store``'s space, each adding one 40k cost that ``store`` receives."""
    out = []
    for i in range(n):
        agent = Replica.memory(space=store.space, name=f"agent{i + 1}")
        agent.merge(store)
        agent.add_claim("budget", f"buy{i + 1}", "cost", COST, provenance=f"agent{i + 1}")
        store.merge(agent)
        out.append(agent)
    return out


def _space(path: Path, purchases: int) -> Replica:
    store = Replica.open(path, space="ops", create=True)
    store.declare_registry(REGISTRY)
    store.add_claim("budget", "q3", "limit", 100000)
    _agents(store, purchases)
    return store


# --- the derived state of a store (lazy open) ----------------------------------------------------


def test_a_reopened_store_lists_the_finding_from_its_derived_state_as_memory_does(tmp_path):
    path = tmp_path / "ops.db"
    store = _space(path, 3)
    want = store.state().findings
    assert len(want) == 1
    store.close()
    lazy = Replica.open(path)
    try:
        assert lazy._lazy  # reads the derived state, not the history
        page = lazy.conflicts()
        assert [c.locus for c in page.conflicts] == [want[0].locus]
        assert page.conflicts[0] == want[0] and page.total == 1
        # a slice at one cost's key holds the detector's whole input, so the same finding
        assert lazy.state_for("budget/buy1/cost").findings == want
        ctx = lazy.context(query="can we buy more?")
        assert "over-budget at budget/q3/limit" in ctx.text
        # a decision on the finding is read back from the derived state too
        lazy.decide(page.conflicts[0], page.conflicts[0].candidates[0], reason="fine")
        assert lazy.conflicts().state.decision_for(want[0]) is not None
    finally:
        lazy.close()


def test_a_store_with_two_purchases_lists_no_finding(tmp_path):
    store = _space(tmp_path / "ops.db", 2)
    store.close()
    lazy = Replica.open(tmp_path / "ops.db")
    try:
        assert lazy.conflicts().conflicts == ()
    finally:
        lazy.close()


# --- the command line ----------------------------------------------------------------------------


def _statefuse(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_three_agents_exceed_a_budget_and_the_cli_shows_the_finding(tmp_path):
    (tmp_path / "registry.toml").write_text(REGISTRY_TOML)
    run = lambda *a: _statefuse(*a, cwd=tmp_path)  # noqa: E731
    run(
        "--store",
        "lead.db",
        "init",
        "--space",
        "ops",
        "--registry",
        "registry.toml",
        "--name",
        "lead",
    )
    run("--store", "lead.db", "claim", "budget/q3/limit", "100000")
    run("--store", "lead.db", "export", "space.bundle")
    creator = json.loads(run("--store", "lead.db", "--json", "keys").stdout)["you"]
    for i in (1, 2, 3):
        store = f"agent{i}.db"
        run("--store", store, "init", "--space", "ops", "--creator", creator, "--name", f"agent{i}")
        run("--store", store, "import", "space.bundle")
        run("--store", store, "claim", f"budget/buy{i}/cost", json.dumps(COST))
        run("--store", store, "export", f"agent{i}.bundle")
        run("--store", "lead.db", "import", f"agent{i}.bundle")
        listed = run("--store", "lead.db", "conflicts").stdout
        assert ("over-budget" in listed) is (i == 3), listed
    assert "over-budget at budget/q3/limit [global] (budget@1): 4 claims, undecided" in listed
    assert "3 costs of budget q3 sum to 120000, over its limit 100000" in listed
    assert 'witness: available=100000, budget="q3", required=120000' in listed
    for name in ("agent1", "agent2", "agent3"):
        assert name in listed
    data = json.loads(run("--store", "lead.db", "--json", "conflicts").stdout)
    (finding,) = data["conflicts"]
    assert finding["finding"] == "over-budget"
    assert finding["witness"] == {"available": 100000, "budget": "q3", "required": 120000}
    context = run("--store", "lead.db", "context", "--query", "can agent4 buy more?").stdout
    assert "Findings:" in context
    assert "over-budget at budget/q3/limit (budget@1): 3 costs of budget q3" in context
    assert "required=120000" in context
    # deciding for one of its claims settles it
    claim = finding["candidates"][0]["claim_id"]
    run("--store", "lead.db", "decide", claim[:12], "--reason", "approved by finance")
    listed = run("--store", "lead.db", "conflicts").stdout
    assert "decided for" in listed and "approved by finance" in listed


# --- MCP -----------------------------------------------------------------------------------------


def test_three_agents_exceed_a_budget_and_mcp_lists_and_decides_the_finding(tmp_path):
    from statefuse.entry.mcp import build_server
    from tests.test_mcp import connected  # the SDK's client, as the MCP tests connect

    store = _space(tmp_path / "ops.db", 3)
    try:
        with connected(build_server(store)) as s:
            listed = s.ok("conflicts")
            (info,) = listed["conflicts"]
            finding: dict[str, Any] = info["finding"]
            assert finding["type"] == "over-budget" and finding["detector"] == "budget@1"
            assert finding["witness"] == {"available": 100000, "budget": "q3", "required": 120000}
            assert info["key"] == "budget/q3/limit" and len(info["candidates"]) == 4
            text = s.text("conflicts")
            assert "over-budget at budget/q3/limit [global] (budget@1)" in text
            chosen = info["candidates"][0]["claim_id"]
            s.ok("decide", key="budget/q3/limit", claim_id=chosen[:12], reason="approved")
            assert s.ok("conflicts")["conflicts"] == []
            assert s.ok("conflicts", include_decided=True)["conflicts"][0]["decision"]
    finally:
        store.close()


# --- the context of a replica in memory ----------------------------------------------------------


def test_replica_context_shows_the_finding_and_hides_it_from_nobody_who_sees_its_claims():
    store = Replica.memory(space="ops")
    store.declare_registry(REGISTRY)
    store.add_claim("budget", "q3", "limit", 100000)
    _agents(store, 3)
    ctx = store.context(query="budget", lens=Lens())
    section = ctx.section(SectionName.FINDINGS)
    assert section is not None and "required=120000" in section.lines[0]


# --- LangGraph -----------------------------------------------------------------------------------


def _items_over_budget(claims: DetectorInput) -> list[Finding]:
    """A detector over LangGraph items: items in ("budgets",) hold {"limit": N}, items in
    ("costs",) hold {"budget": key, "amount": N}; costs over their budget's limit."""
    limits = {c.subject: c for c in claims if "limit" in c.value}
    spent: dict[str, list[Any]] = {}
    for c in claims:
        if "amount" in c.value:
            spent.setdefault(c.value["budget"], []).append(c)
    out = []
    for name, limit in sorted(limits.items()):
        costs = spent.get(name, [])
        total = sum(c.value["amount"] for c in costs)
        if total > limit.value["limit"]:
            out.append(
                Finding(
                    "over-budget",
                    limit.key,
                    (limit.claim_id, *(c.claim_id for c in costs)),
                    f"costs sum to {total}",
                    {"required": total, "available": limit.value["limit"]},
                )
            )
    return out


register_detector("tests.items-budget", 1, _items_over_budget)


def test_the_langgraph_store_lists_the_findings_over_its_items():
    try:
        from statefuse.entry.langgraph import StateFuseStore
    except ImportError:
        if os.environ.get("CI"):
            raise
        import pytest

        pytest.skip("langgraph is not installed")
    store = StateFuseStore.memory(space="graph")
    registry = Registry(
        detectors=[
            DetectorSpec("tests.items-budget", 1, (("lg:budgets", "value"), ("lg:costs", "value")))
        ]
    )
    store.replica.declare_registry(registry)
    store.put(("budgets",), "q3", {"limit": 100})
    store.put(("costs",), "a", {"budget": "q3", "amount": 60})
    assert store.findings() == []
    store.put(("costs",), "b", {"budget": "q3", "amount": 60})
    (found,) = store.findings()
    assert found["type"] == "over-budget" and found["open"]
    assert found["witness"] == {"required": 120, "available": 100}
    assert {"namespace": ["costs"], "key": "b"} in found["items"]
    assert {"namespace": ["budgets"], "key": "q3"} in found["items"]
    assert found["keys"] == []


def test_a_store_declaring_a_detector_this_process_lacks_is_one_error_line_naming_it(tmp_path):
    (tmp_path / "capacity.py").write_text(
        "from statefuse import register_detector\n"
        "register_detector('acme.capacity', 2, lambda claims: [])\n"
    )
    (tmp_path / "registry.toml").write_text(
        '[[detectors]]\ndetector = "acme.capacity@2"\nreads = ["seats"]\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", "s.db", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )

    made = run("--normalizers", "capacity", "init", "--space", "ops", "--registry", "registry.toml")
    assert made.returncode == 0, made.stderr
    assert run("--normalizers", "capacity", "conflicts").returncode == 0
    refused = run("conflicts")
    assert refused.returncode != 0
    (line,) = refused.stderr.strip().splitlines()
    assert line.startswith("Error:") and "acme.capacity@2" in line and "register_detector" in line


def test_a_failing_detector_is_listed_by_statefuse_conflicts_with_its_error(tmp_path):
    (tmp_path / "broken.py").write_text(
        "from statefuse import register_detector\n"
        "def broken(claims):\n"
        "    raise ValueError('no limit for ' + claims.claims[0].subject)\n"
        "register_detector('acme.broken', 1, broken)\n"
    )
    (tmp_path / "registry.toml").write_text(
        '[[detectors]]\ndetector = "acme.broken@1"\nreads = ["seats"]\n'
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}

    def run(*argv: str) -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "statefuse",
                "--store",
                "s.db",
                "--normalizers",
                "broken",
                *argv,
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("init", "--space", "ops", "--registry", "registry.toml")
    run("claim", "rooms/r4/seats", "12")
    run("claim", "rooms/r4/name", "Blue room")
    listed = run("conflicts")
    assert "detector-failed at detector/acme.broken@1/failed [global] (acme.broken@1)" in listed
    assert "raised ValueError: no limit for r4" in listed
    assert "Blue room" in run("show")  # the rest of memory reads as ever
