"""MemoryAgentBench Conflict_Resolution (FactConsolidation single-hop): context and selection.

``python -m benchmarks.mab [--data FILE] [--store memory|sqlite] [--budget N] [--json PATH]``
reads ``../shared/mab/dev.jsonl`` beside the project (or ``--data FILE``: one sub-dataset a
line, ``{"source", "facts": [{"n", "subject", "relation", "object"}], "questions":
[{"question", "subject", "relation", "answers"}]}``) and measures the conflict-bearing questions
(their (subject, relation) has facts with two different objects).

How the facts become memory (`MEMORY`, printed with the table): per sub-dataset one replica
and one author (a key seeded by the sub-dataset's name and a fixed clock, so every run writes
the same claims); one claim per fact at key ``fact/<subject>/<relation>`` (the three-part
form, so no part needs escaping), value the object, written in order of ``n`` in one
`Replica.batch`, so the lamport order follows ``n`` (a newer fact has a larger lamport). No
confidence, authority or evidence is set. ``--store memory`` (default): `Replica.memory`.
``--store sqlite``: a SQLite store written so, closed, and opened again with
``load="index"`` as a user opening a large store would: each context then reads the rows its
query needs from the store's derived state (`StoreIndex.context_loci`), not the history.

Three runs, each read through the same public calls:

- **default**: what `Replica.context` does unless told (`default_resolver`, i.e.
  `Conservative`: equal claims stay a conflict for the planner to see).
- **latest-wins**: ``resolver=LatestWins()``.
- **decision**: the same memory plus one decision per conflicting key (`Replica.decide`, by
  the same author) for its newest value, as an agent that settles each conflict for the
  latest report would; read with the default resolver.

Rows, per sub-dataset and for all together:

- **context** (``replica.context(question)``, default budget `DEFAULT_BUDGET`): *conflict
  shown*: the Conflicts section lists the question's key (every candidate value under it), or
  the selected line of that key carries the contested mark; *gold shown*: a gold answer occurs
  in the text; *contested*: the key's line is marked contested (``Context.contested``, which
  the context's JSON carries with the other values and their authors); *values*: every value
  of the key occurs in the text (loose: another line may hold it); *ms/ctx*: median
  milliseconds per ``replica.context`` call.
  Matching is MAB's normalized substring match (lower-case, no punctuation, no a/an/the,
  single spaces).
- **selection** (`project` of the key's State through a `Lens` at the replica's now): *acc*:
  the selected value matches a gold answer (an abstention is not right); *false-c*: a value is
  selected and does not; *recall*: the View exposes the conflict (the key is ``unresolved``,
  or the View lists it as contested), whether or not a value was selected. With ``--store
  sqlite`` the State is `Replica.state_for` of the key on the lazily opened store.

The tables go to stdout, progress to stderr, the JSON (every question's outcome) to ``--json
PATH`` or ``benchmarks/results/mab-<UTC>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import statefuse
from benchmarks.report import ROOT, load_average, machine_info, utc_stamp, write_document
from statefuse.core.state import State
from statefuse.reading.context import (
    DEFAULT_BUDGET,
    Context,
    SectionName,
    default_resolver,
    render_key,
)
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.resolver import LatestWins, Resolver
from statefuse.reading.view import View
from statefuse.storage.testing import full_key_lines
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

RESULTS = Path(__file__).resolve().parent / "results"
#: Where the data is looked for: ``shared/`` beside the checkout, or beside its parent (a
#: worktree one level down).
_SHARED = [ROOT.parent / "shared", ROOT.parent.parent / "shared"]
DATA = next((p / "mab" / "dev.jsonl" for p in _SHARED if (p / "mab").is_dir()), _SHARED[0])
NAMESPACE = "fact"
#: The replica's clock (ms since the epoch): fixed, with a key seeded by the sub-dataset's name,
#: so a run writes the very same claims every time and its numbers repeat exactly.
NOW_MS = 1_767_225_600_000
MEMORY = (
    "per sub-dataset one replica, one author (key seeded by the sub-dataset's name, fixed"
    " clock); one claim per fact at key fact/<subject>/<relation>, value = object, no"
    " confidence/authority/evidence; written in order of n in one batch (lamport order"
    " follows n, so newer = larger lamport)"
)
DECISIONS = "one decision per conflicting key, by the same author, for its newest value (largest n)"


class Store(Enum):
    MEMORY = "memory"
    SQLITE = "sqlite"


#: Run name -> the resolver a context and a selection use (None: the default).
RUNS: dict[str, Callable[[], Resolver | None]] = {
    "default": lambda: None,
    "latest-wins": LatestWins,
    "decision": lambda: None,
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
    context: dict[str, dict[str, Any]]
    selection: dict[str, dict[str, Any]]


def load(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _key(source: str) -> SigningKey:
    return SigningKey.from_seed(hashlib.sha256(f"mab/{source}".encode()).digest())


def write(replica: Replica, facts: list[dict[str, Any]], *, decide: bool = False) -> None:
    """The facts as claims (`MEMORY`); with ``decide``, then a decision per conflict
    (`DECISIONS`)."""
    with replica.batch():
        for fact in sorted(facts, key=lambda f: f["n"]):
            replica.add_claim(NAMESPACE, fact["subject"], fact["relation"], fact["object"])
    if decide:
        state = replica.state()
        with replica.batch():
            for cs in state.conflicts:
                newest = max(cs.candidates, key=lambda cid: state.claims[cid].lamport)
                replica.decide(cs, newest, reason="newest report")


def build(facts: list[dict[str, Any]], source: str = "mab", *, decide: bool = False) -> Replica:
    replica = Replica.memory(space="mab", key=_key(source), clock=lambda: NOW_MS)
    write(replica, facts, decide=decide)
    return replica


@contextmanager
def opened(
    facts: list[dict[str, Any]], source: str, store: Store, *, decide: bool
) -> Iterator[Replica]:
    """The memory of ``facts`` as ``store`` holds it: a memory replica, or a SQLite store
    written, closed and opened again on its derived state (``load="index"``)."""
    if store is Store.MEMORY:
        yield build(facts, source, decide=decide)
        return
    with tempfile.TemporaryDirectory(prefix="mab-") as tmp:
        path = Path(tmp) / "memory.db"
        rep = Replica.open(path, space="mab", key=_key(source), create=True, clock=lambda: NOW_MS)
        try:
            write(rep, facts, decide=decide)
        finally:
            rep.close()
        rep = Replica.open(path, load="index", clock=lambda: NOW_MS)
        try:
            yield rep
        finally:
            rep.close()


def _json_contested(ctx: Context, key: tuple[str, str, str]) -> bool:
    """Whether the context shows ``key`` as a contested line (``Context.contested``, which
    its JSON carries with the other values and their authors)."""
    return any(contest.key == key for contest, _ in ctx.contested.values())


def _conflict_listed(ctx: Context, key: tuple[str, str, str]) -> bool:
    section = ctx.section(SectionName.CONFLICTS)
    if section is None:
        return False
    head = f"{render_key(key)}: UNRESOLVED"
    return any(line.startswith(head) for line in full_key_lines(section.lines))


def _selection(view: View, key: tuple[str, str, str], answers: list[str]) -> dict[str, Any]:
    chosen = view.selected.get(key)
    listed = key in view.unresolved
    value = None if chosen is None else str(chosen.claim.value)
    right = value is not None and any(occurs(a, value) for a in answers)
    contested = key in view.contested
    return {
        "value": value,
        "how": None if chosen is None else chosen.how.value,
        "right": right,
        "false_certain": value is not None and not right,
        "listed": listed,
        "contested": contested,
        "recall": listed or contested,
    }


def measure(dataset: dict[str, Any], budget: int, store: Store = Store.MEMORY) -> list[Outcome]:
    values: dict[tuple[str, str], list[str]] = {}
    for fact in sorted(dataset["facts"], key=lambda f: f["n"]):
        seen = values.setdefault((fact["subject"], fact["relation"]), [])
        if fact["object"] not in seen:
            seen.append(fact["object"])
    asked = [
        q for q in dataset["questions"] if len(values.get((q["subject"], q["relation"]), [])) >= 2
    ]
    context: dict[str, list[dict[str, Any]]] = {}
    selection: dict[str, list[dict[str, Any]]] = {}
    lens = Lens(now=NOW_MS)
    for run, make in RUNS.items():
        decide = run == "decision"
        with opened(dataset["facts"], dataset["source"], store, decide=decide) as replica:
            whole: tuple[State, View] | None = None
            if store is Store.MEMORY:  # one projection serves every question
                state = replica.state()
                resolver = make() or default_resolver(state.registry.authority_order)
                whole = (state, project(state, lens, resolver=resolver))
            rows_c, rows_s = [], []
            for q in asked:
                key = (NAMESPACE, q["subject"], q["relation"])
                t0 = time.perf_counter()
                ctx = replica.context(q["question"], budget=budget, resolver=make())
                ms = (time.perf_counter() - t0) * 1000
                if whole is not None:
                    state, view = whole
                else:  # the key's rows alone, as the lazily opened store reads them
                    state = replica.state_for(key)
                    resolver = make() or default_resolver(state.registry.authority_order)
                    view = project(state, lens, resolver=resolver)
                marked = _json_contested(ctx, key)
                objects = values[(q["subject"], q["relation"])]
                rows_c.append(
                    {
                        "conflict": _conflict_listed(ctx, key) or bool(marked),
                        "gold": any(occurs(a, ctx.text) for a in q["answers"]),
                        "contested": marked,
                        "values": all(occurs(v, ctx.text) for v in objects),
                        "ms": ms,
                        "tokens": ctx.token_count,
                    }
                )
                rows_s.append(_selection(view, key, q["answers"]))
            context[run], selection[run] = rows_c, rows_s
    return [
        Outcome(
            question=q["question"],
            key=[NAMESPACE, q["subject"], q["relation"]],
            values=values[(q["subject"], q["relation"])],
            answers=list(q["answers"]),
            context={run: context[run][i] for run in RUNS},
            selection={run: selection[run][i] for run in RUNS},
        )
        for i, q in enumerate(asked)
    ]


def _pct(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else float("nan")


def summarize(name: str, outcomes: list[Outcome]) -> list[dict[str, Any]]:
    n = len(outcomes)
    rows = []
    for r in RUNS:
        ctx = [o.context[r] for o in outcomes]
        marks = [c["contested"] for c in ctx]
        rows.append(
            {
                "dataset": name,
                "measure": "context",
                "run": r,
                "questions": n,
                "conflict_shown": _pct(sum(c["conflict"] for c in ctx), n),
                "gold_shown": _pct(sum(c["gold"] for c in ctx), n),
                "contested_shown": _pct(sum(marks), n),
                "values_shown": _pct(sum(c["values"] for c in ctx), n),
                "ms_per_context": statistics.median(c["ms"] for c in ctx) if ctx else float("nan"),
            }
        )
    for r in RUNS:
        sel = [o.selection[r] for o in outcomes]
        rows.append(
            {
                "dataset": name,
                "measure": "selection",
                "run": r,
                "questions": n,
                "accuracy": _pct(sum(s["right"] for s in sel), n),
                "false_certainty": _pct(sum(s["false_certain"] for s in sel), n),
                "conflict_recall": _pct(sum(s["recall"] for s in sel), n),
            }
        )
    return rows


def _cell(row: dict[str, Any], field: str, digits: int = 1) -> str:
    v = row.get(field)
    return "-" if v is None else f"{v:.{digits}f}"


def format_table(rows: list[dict[str, Any]], budget: int, store: Store) -> str:
    lines = [
        "MemoryAgentBench Conflict_Resolution, conflict-bearing questions"
        f" (context budget {budget} tokens, store: {store.value})",
        f"memory: {MEMORY}",
        f"decision run: {DECISIONS}",
        "",
        f"{'dataset':<26}{'context of':<13}{'n':>4}{'conflict%':>11}{'gold%':>8}"
        f"{'contested%':>12}{'values%':>9}{'ms/ctx':>9}",
        "-" * 92,
    ]
    for row in rows:
        if row["measure"] == "context":
            lines.append(
                f"{row['dataset']:<26}{row['run']:<13}{row['questions']:>4}"
                f"{_cell(row, 'conflict_shown'):>11}{_cell(row, 'gold_shown'):>8}"
                f"{_cell(row, 'contested_shown'):>12}{_cell(row, 'values_shown'):>9}"
                f"{_cell(row, 'ms_per_context', 2):>9}"
            )
    lines += [
        "",
        f"{'dataset':<26}{'selection':<13}{'n':>4}{'acc%':>11}{'false-c%':>10}{'recall%':>9}",
        "-" * 73,
    ]
    for row in rows:
        if row["measure"] == "selection":
            lines.append(
                f"{row['dataset']:<26}{row['run']:<13}{row['questions']:>4}"
                f"{_cell(row, 'accuracy'):>11}{_cell(row, 'false_certainty'):>10}"
                f"{_cell(row, 'conflict_recall'):>9}"
            )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.mab", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", type=Path, default=DATA, help=f"the JSONL (default {DATA})")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="context budget")
    parser.add_argument(
        "--store",
        type=Store,
        choices=list(Store),
        default=Store.MEMORY,
        help="memory (default) or sqlite: a SQLite store opened again with load='index'",
    )
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"Error: no data at {args.data} (pass --data FILE)", file=sys.stderr)
        return 2
    start = time.perf_counter()
    datasets = load(args.data)
    every: dict[str, list[Outcome]] = {}
    for d in datasets:
        print(f"{d['source']}: {len(d['facts'])} facts ...", file=sys.stderr, flush=True)
        every[d["source"]] = measure(d, args.budget, args.store)
        print(f"  done at {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    rows = [row for name, outs in every.items() for row in summarize(name, outs)]
    rows += summarize("ALL", [o for outs in every.values() for o in outs])
    print(format_table(rows, args.budget, args.store))
    path: Path = args.json if args.json is not None else RESULTS / f"mab-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_document(
        path,
        {
            "machine": machine_info(),
            "benchmark": "mab",
            "measured_code": str(Path(statefuse.__file__).resolve().parent),
            "options": {"data": str(args.data), "budget": args.budget, "store": args.store.value},
            "memory": MEMORY,
            "decisions": DECISIONS,
            "rows": rows,
            "questions": {name: [vars(o) for o in outs] for name, outs in every.items()},
            "total_s": time.perf_counter() - start,
            "load_average_at_end": load_average(),
        },
    )


if __name__ == "__main__":
    sys.exit(main())
