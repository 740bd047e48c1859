"""Context quality on the StateBench dev split, the targets, and the floor of what leaks.

``python -m benchmarks.statebench`` runs the measuring kit (``../shared/statebench/run.py``
beside the project, or ``--kit DIR``) on this checkout, prints its scores against the targets
of the context-hygiene work, then sorts every query whose context still shows a
must-not-mention phrase by where the phrase sits:

- **in a current claim** (a fact, constraint, identity claim or signal line): the op-set holds
  the phrase as valid. Only a judge of content could hide it, and no rule here reads content.
- **only in the working set** (turns, scratch items): the text is not a value of any
  retraction the lens sees (every such value is scrubbed, a property the tests check), so
  nothing in the op-set says it is wrong. A `TurnInterpreter` that turns the correction into a
  retraction is what moves it.

Together they are the floor of MNM_reach for an engine that shows current claims and keeps
turns unless a retraction names their text: a benchmark row, as a target out of reach is
reported. The JSON (``benchmarks/results/statebench-<UTC>.json``) keeps the kit's whole output.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.report import ROOT, load_average, machine_info, utc_stamp, write_document

RESULTS = Path(__file__).resolve().parent / "results"
KIT = ROOT.parent / "shared" / "statebench"

#: The context-hygiene targets on dev: metric -> (target, True when higher is better).
TARGETS: dict[str, tuple[float, bool]] = {
    "MM_reach": (95.0, True),
    "MNM_reach": (62.0, False),
    "supval": (2.0, False),
    "tokens": (200.0, False),
}
_SHOWN_ORDER = ("MM_reach", "MNM_reach", "supval", "restricted", "scoped", "tokens")


def run_kit(kit: Path, budget: int | None) -> dict[str, Any]:
    """The kit's JSON document for this checkout (the kit measures ``./statefuse``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "statebench.json"
        cmd = [sys.executable, str(kit / "run.py"), "dev", "--json", str(out)]
        if budget is not None:
            cmd += ["--budget", str(budget)]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the kit failed (exit {done.returncode}): {tail[0]}")
        document: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return document


def leak_floor(queries: list[dict[str, Any]]) -> dict[str, Any]:
    """Leaking queries sorted by where their phrases sit (see the module docstring)."""
    current: list[str] = []
    working: list[str] = []
    for q in queries:
        if not q.get("mnm_leak"):
            continue
        channels = {c for leak in q["leaks"].get("mnm", ()) for c in leak["where"]}
        name = f"{q['id']} {q['q']}"
        if any(not c.startswith("working/") for c in channels):
            current.append(name)
        else:
            working.append(name)
    applies = sum(1 for q in queries if q.get("mnm_present"))
    return {
        "applies": applies,
        "in_current_claim": len(current),
        "only_in_working_set": len(working),
        "floor": 100.0 * (len(current) + len(working)) / applies if applies else None,
        "queries": {"in_current_claim": current, "only_in_working_set": working},
    }


def _verdict(metric: str, value: float | None) -> str:
    target = TARGETS.get(metric)
    if target is None or value is None:
        return ""
    bound, higher = target
    met = value >= bound if higher else value <= bound
    return f"{'>=' if higher else '<='} {bound:g}  {'met' if met else 'MISS'}"


def format_report(document: dict[str, Any], floor: dict[str, Any]) -> str:
    summary = document["summary"]
    lines = [
        f"StateBench v1.0 dev, context level: {summary['queries']} queries,"
        f" tokens by {document.get('tokenizer', '?')}",
        "",
        f"{'metric':<52}{'value':>8}  {'applies to':>10}  target",
        "-" * 88,
    ]
    for metric in _SHOWN_ORDER:
        value = summary.get(metric)
        n = summary.get(f"{metric}_n", summary["queries"])
        shown = "nan" if value is None else f"{value:.1f}"
        lines.append(f"{metric:<52}{shown:>8}  {n:>10}  {_verdict(metric, value)}")
    lines += [
        "",
        "[MNM_reach floor: leaking queries by where the phrase sits]",
        f"{'  in a current claim (fact, constraint, identity, signal)':<52}"
        f"{floor['in_current_claim']:>8}  {floor['applies']:>10}",
        f"{'  only in the working set, text no retraction names':<52}"
        f"{floor['only_in_working_set']:>8}  {floor['applies']:>10}",
        f"{'  floor without a turn interpreter (MNM_reach)':<52}"
        f"{floor['floor'] if floor['floor'] is not None else float('nan'):>8.1f}"
        f"  {floor['applies']:>10}  {_verdict('MNM_reach', floor['floor'])}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.statebench", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--kit", type=Path, default=KIT, help=f"the kit's folder (default {KIT})")
    parser.add_argument("--budget", type=int, default=None, help="context budget (kit default)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.kit / "run.py").is_file():
        print(f"Error: no StateBench kit at {args.kit} (pass --kit DIR)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    print(f"running {args.kit / 'run.py'} dev ...", file=sys.stderr, flush=True)
    try:
        document = run_kit(args.kit, args.budget)
    except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    floor = leak_floor(document["queries"])
    print(format_report(document, floor))
    path: Path = args.json if args.json is not None else RESULTS / f"statebench-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_document(
        path,
        {
            "machine": machine_info(),
            "benchmark": "statebench",
            "options": {"kit": str(args.kit), "budget": args.budget},
            "targets": {k: {"bound": b, "higher_is_better": h} for k, (b, h) in TARGETS.items()},
            "floor": floor,
            "kit": document,
            "total_s": time.perf_counter() - start,
            "load_average_at_end": load_average(),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
