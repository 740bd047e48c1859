"""MemoryAgentBench Conflict_Resolution (FactConsolidation single-hop): context and selection.

``python -m benchmarks.mab`` reads ``../shared/mab/dev.jsonl`` beside the project (or ``--data
PATH``: one sub-dataset a line, ``{"source", "facts": [{"n", "subject", "relation", "object"}],
"questions": [{"question", "subject", "relation", "answers"}]}``) and measures the
conflict-bearing questions (their (subject, relation) has facts with two different objects).

How the facts become memory: one `Replica.memory` per sub-dataset, one author (a key seeded by
the sub-dataset's name and a fixed clock, so every run writes the same claims), one claim per
fact at key ``fact/<subject>/<relation>`` (the three-part form, so no part needs escaping), value
the object, written in order of ``n`` in one `Replica.batch` so the lamport order follows ``n``
(a newer fact has a larger lamport). No confidence, authority or evidence is set.

- **context**: ``replica.context(question)`` at the default budget (`DEFAULT_BUDGET` tokens),
  with the default resolver and with `LatestWins`. *conflict shown*: every distinct object of
  the question's key occurs in the context text; *gold shown*: a gold answer does. Matching is
  MAB's normalized substring match (lower-case, no punctuation, no a/an/the, single spaces), so
  a value that also occurs in another fact's line counts as shown.
- **selection**: `project` of the replica's State (a `Lens` at the replica's now) with the
  resolver, for the question's key. *accuracy*: the selected value matches a gold answer (an
  abstention is not right); *false certainty*: a value is selected and does not; *conflict
  recall*: the View lists the key (``unresolved`` / ``surfaced_conflicts``), or marks its
  selection as contested (``View.contested``: how it was chosen, the other values and their
  authors). *mark* (context): the question's key is shown as a contested line
  (``Context.contested``: ``contested: N other values``).

The table goes to stdout, progress to stderr, the JSON (every question's outcome) to ``--json
PATH`` or ``benchmarks/results/mab-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import statefuse
from benchmarks.report import ROOT, load_average, machine_info, utc_stamp, write_document
from statefuse.context import DEFAULT_BUDGET
from statefuse.lens import Lens
from statefuse.projection import project
from statefuse.resolver import Conservative, LatestWins, Resolver
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
DATA = ROOT.parent / "shared" / "mab" / "dev.jsonl"
NAMESPACE = "fact"
#: The replica's clock (ms since the epoch): fixed, with a key seeded by the sub-dataset's name,
#: so a run writes the very same claims every time and its numbers repeat exactly.
NOW_MS = 1_767_225_600_000
MEMORY = (
    "one Replica.memory per sub-dataset, one author (key seeded by the sub-dataset's name,"
    " fixed clock); one claim per fact at key"
    " fact/<subject>/<relation>, value = object; written in order of n in one batch"
    " (lamport order follows n)"
)

#: Resolver name -> a new resolver (None: what `Replica.context` uses unless told).
CONTEXT_RESOLVERS: dict[str, Callable[[], Resolver | None]] = {
    "default": lambda: None,
    "latest-wins": LatestWins,
}
SELECTION_RESOLVERS: dict[str, Callable[[], Resolver]] = {
    "conservative": Conservative,
    "latest-wins": LatestWins,
}

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """MAB's answer normalization: lower-case, strip punctuation, drop a/an/the, one space."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def occurs(value: str, text: str) -> bool:
    """``value`` occurs in ``text`` after normalization (an empty value never does)."""
    v = normalize(value)
    return bool(v) and v in normalize(text)


@dataclass
class Outcome:
    question: str
    key: list[str]
    values: list[str]
    answers: list[str]
    context: dict[str, dict[str, bool]]
    selection: dict[str, dict[str, Any]]


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def build(facts: list[dict[str, Any]], source: str = "mab") -> Replica:
    key = SigningKey.from_seed(hashlib.sha256(f"mab/{source}".encode()).digest())
    replica = Replica.memory(space="mab", key=key, clock=lambda: NOW_MS)
    with replica.batch():
        for fact in sorted(facts, key=lambda f: f["n"]):
            replica.add_claim(NAMESPACE, fact["subject"], fact["relation"], fact["object"])
    return replica


def _selection(view: Any, key: tuple[str, str, str], answers: list[str]) -> dict[str, Any]:
    chosen = view.selected.get(key)
    listed = key in view.unresolved or any(c.key == key for c in view.surfaced_conflicts)
    value = None if chosen is None else str(chosen.claim.value)
    right = value is not None and any(occurs(a, value) for a in answers)
    return {
        "value": value,
        "right": right,
        "false_certain": value is not None and not right,
        "listed": listed,
        # contested: the View marks the selection (`View.contested`), the other values kept
        "marked": key in view.contested,
    }


def measure(dataset: dict[str, Any], budget: int) -> list[Outcome]:
    values: dict[tuple[str, str], list[str]] = {}
    for fact in sorted(dataset["facts"], key=lambda f: f["n"]):
        seen = values.setdefault((fact["subject"], fact["relation"]), [])
        if fact["object"] not in seen:
            seen.append(fact["object"])
    replica = build(dataset["facts"], dataset["source"])
    state = replica.state()
    lens = Lens(now=NOW_MS)
    views = {
        name: project(state, lens, resolver=make()) for name, make in SELECTION_RESOLVERS.items()
    }
    out = []
    for q in dataset["questions"]:
        objects = values.get((q["subject"], q["relation"]), [])
        if len(objects) < 2:
            continue
        key = (NAMESPACE, q["subject"], q["relation"])
        shown = {}
        for name, make in CONTEXT_RESOLVERS.items():
            ctx = replica.context(q["question"], budget=budget, resolver=make())
            text = ctx.text
            shown[name] = {
                "conflict": all(occurs(v, text) for v in objects),
                "gold": any(occurs(a, text) for a in q["answers"]),
                # the question's key is shown as a contested line (`Context.contested`)
                "mark": any(c.key == key for c, _ in ctx.contested.values()),
            }
        out.append(
            Outcome(
                question=q["question"],
                key=list(key),
                values=objects,
                answers=list(q["answers"]),
                context=shown,
                selection={n: _selection(v, key, q["answers"]) for n, v in views.items()},
            )
        )
    return out


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else float("nan")


def summarize(name: str, outcomes: list[Outcome]) -> list[dict[str, Any]]:
    n = len(outcomes)
    rows = []
    for r in CONTEXT_RESOLVERS:
        rows.append(
            {
                "dataset": name,
                "measure": "context",
                "resolver": r,
                "questions": n,
                "conflict_shown": _pct(sum(o.context[r]["conflict"] for o in outcomes), n),
                "gold_shown": _pct(sum(o.context[r]["gold"] for o in outcomes), n),
                "mark_shown": _pct(sum(o.context[r].get("mark", False) for o in outcomes), n),
            }
        )
    for r in SELECTION_RESOLVERS:
        sel = [o.selection[r] for o in outcomes]
        rows.append(
            {
                "dataset": name,
                "measure": "selection",
                "resolver": r,
                "questions": n,
                "accuracy": _pct(sum(s["right"] for s in sel), n),
                "false_certainty": _pct(sum(s["false_certain"] for s in sel), n),
                "conflict_recall": _pct(sum(s["listed"] or s["marked"] for s in sel), n),
                "conflict_listed": _pct(sum(s["listed"] for s in sel), n),
            }
        )
    return rows


def _cell(row: dict[str, Any], field: str) -> str:
    return f"{row[field]:.1f}" if field in row else "-"


def format_table(rows: list[dict[str, Any]], budget: int) -> str:
    fields = (
        "conflict_shown",
        "gold_shown",
        "mark_shown",
        "accuracy",
        "false_certainty",
        "conflict_recall",
    )
    heads = ("conflict", "gold", "mark", "acc", "false-c", "recall")
    lines = [
        "MemoryAgentBench Conflict_Resolution, conflict-bearing questions"
        f" (context budget {budget})",
        f"memory: {MEMORY}",
        "",
        f"{'dataset':<26}{'measure':<11}{'resolver':<14}{'n':>4}"
        + "".join(f"{h:>9}" for h in heads),
        "-" * 109,
    ]
    for row in rows:
        lines.append(
            f"{row['dataset']:<26}{row['measure']:<11}{row['resolver']:<14}{row['questions']:>4}"
            + "".join(f"{_cell(row, f):>9}" for f in fields)
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mab", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", type=Path, default=DATA, help=f"the JSONL (default {DATA})")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="context budget")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"Error: no data at {args.data} (pass --data PATH)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    datasets = load(args.data)
    every: dict[str, list[Outcome]] = {}
    for d in datasets:
        print(f"{d['source']}: {len(d['facts'])} facts ...", file=sys.stderr, flush=True)
        every[d["source"]] = measure(d, args.budget)
        print(f"  done at {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    rows = [row for name, outs in every.items() for row in summarize(name, outs)]
    rows += summarize("ALL", [o for outs in every.values() for o in outs])
    print(format_table(rows, args.budget))
    path: Path = args.json if args.json is not None else RESULTS / f"mab-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_document(
        path,
        {
            "machine": machine_info(),
            "benchmark": "mab",
            "measured_code": str(Path(statefuse.__file__).resolve().parent),
            "options": {"data": str(args.data), "budget": args.budget},
            "memory": MEMORY,
            "rows": rows,
            "questions": {name: [vars(o) for o in outs] for name, outs in every.items()},
            "total_s": time.perf_counter() - start,
            "load_average_at_end": load_average(),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
