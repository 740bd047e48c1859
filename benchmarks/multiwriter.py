"""Many processes writing one store: 4 API and 4 CLI writers, default options.

``python -m benchmarks.multiwriter`` (``--claims N``: claims per writer, default 200;
``--quick``: 50; ``--code PATH``: the checkout whose StateFuse is measured, default this one,
e.g. a ``git worktree`` of an earlier commit; ``--json PATH``, default
``benchmarks/results/multiwriter-<UTC>.json``).

One new store (``statefuse init``); then eight writer processes start together. An API writer
opens the store once with `Replica.open` (default options) and calls ``add_claim`` N times; a
CLI writer runs ``statefuse claim`` N times, one process per claim, one after the other. Every
call is made once, never retried: a call that raises (or a ``statefuse`` run that exits
non-zero) is a refused call, and an API writer whose open is refused makes no further calls
(its N claims are refused with it). A read-only watcher opened before the burst (it holds no
lock in any release) is asked after the burst how many claims it shows: whether a long-lived
replica sees the others' writes.

Counted afterwards by a fresh read-only open (with the measured code): claims in the store,
acknowledged claims missing from it (lost), forks. Every subprocess runs the measured code
(``PYTHONPATH`` and working directory ``--code``), so one harness measures two releases.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from benchmarks.report import load_average, machine_info, utc_stamp, write_document

API_WRITERS = 4
CLI_WRITERS = 4
CLAIMS = 200
QUICK_CLAIMS = 50
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]

#: An API writer: prints one JSON line {"ok": [...values...], "refused": n, "errors": [...]}.
_API = textwrap.dedent(
    """
    import json, sys
    from statefuse.sync.replica import Replica
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ok, refused, errors = [], 0, []
    try:
        rep = Replica.open(path)
    except Exception as exc:
        print(json.dumps({"ok": [], "refused": n, "opened": False, "errors": [str(exc)]}))
        sys.exit(0)
    for i in range(n):
        value = f"{tag}-{i}"
        try:
            rep.add_claim(f"bench/{value}/v", value)
            ok.append(value)
        except Exception as exc:
            refused += 1
            errors.append(str(exc))
    rep.close()
    print(json.dumps({"ok": ok, "refused": refused, "opened": True, "errors": errors[:3]}))
    """
)

#: A CLI writer: runs ``statefuse claim`` n times, one after the other.
_CLI = textwrap.dedent(
    """
    import json, subprocess, sys
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ok, refused, errors = [], 0, []
    for i in range(n):
        value = f"{tag}-{i}"
        run = subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", path, "claim", f"bench/{value}/v",
             value],
            capture_output=True, text=True,
        )
        if run.returncode == 0 and run.stdout.startswith("Added claim"):
            ok.append(value)
        else:
            refused += 1
            errors.append(run.stderr.strip())
    print(json.dumps({"ok": ok, "refused": refused, "opened": True, "errors": errors[:3]}))
    """
)

#: A read-only replica opened before the burst: after a line on stdin, how many claims it shows.
_WATCHER = textwrap.dedent(
    """
    import sys
    from statefuse.sync.replica import Replica
    rep = Replica.open(sys.argv[1], readonly=True)
    print("ready", flush=True)
    sys.stdin.readline()
    print(len(rep.state().active_claims()), flush=True)
    rep.close()
    """
)

#: Counts with a fresh read-only open: claim values and forks.
_COUNT = textwrap.dedent(
    """
    import json, sys
    from statefuse.sync.replica import Replica
    with Replica.open(sys.argv[1], readonly=True, load="verify") as rep:
        values = sorted(str(c.value) for c in rep.state().active_claims())
        print(json.dumps({"values": values, "forks": len(rep.forks())}))
    """
)


def _env(code: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}


def _popen(code: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=code,
        env=_env(code),
    )


def run_once(code: Path, claims: int) -> dict[str, object]:
    """One burst on a new store with the StateFuse at ``code``; the counts of the run."""
    with tempfile.TemporaryDirectory(prefix="sf-multiwriter-") as tmp:
        path = str(Path(tmp) / "team.db")
        init = subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", path, "init", "--space", "team"],
            capture_output=True,
            text=True,
            cwd=code,
            env=_env(code),
            check=False,
        )
        if init.returncode != 0:
            raise RuntimeError(f"init failed: {init.stderr}")
        watcher = _popen(code, "-c", _WATCHER, path)
        assert watcher.stdout is not None
        if watcher.stdout.readline() != "ready\n":
            raise RuntimeError("the watcher did not open")
        start = time.perf_counter()
        writers = [
            _popen(code, "-c", _API, path, f"api{k}", str(claims)) for k in range(API_WRITERS)
        ]
        writers += [
            _popen(code, "-c", _CLI, path, f"cli{k}", str(claims)) for k in range(CLI_WRITERS)
        ]
        results = []
        for w in writers:
            out, err = w.communicate()
            if w.returncode != 0 or not out.strip():
                raise RuntimeError(f"a writer failed: {err}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        wall = time.perf_counter() - start
        seen_out, _ = watcher.communicate("go\n")
        count = subprocess.run(
            [sys.executable, "-c", _COUNT, path],
            capture_output=True,
            text=True,
            cwd=code,
            env=_env(code),
            check=False,
        )
        if count.returncode != 0:
            raise RuntimeError(f"counting failed: {count.stderr}")
    counted = json.loads(count.stdout)
    stored = set(counted["values"])
    acknowledged = {v for r in results for v in r["ok"]}
    total = (API_WRITERS + CLI_WRITERS) * claims
    seen = int(seen_out.strip() or 0)
    return {
        "claims_asked": total,
        "refused_calls": sum(int(r["refused"]) for r in results),
        "api_opens_refused": sum(1 for r in results if not r["opened"]),
        "acknowledged": len(acknowledged),
        "written": len(stored),
        "lost": len(acknowledged - stored),
        "forks": counted["forks"],
        "watcher_sees": seen,
        "watcher_sees_all": seen == len(stored),
        "wall_s": round(wall, 2),
        "sample_errors": sorted({e for r in results for e in r["errors"]})[:3],
    }


def format_result(name: str, r: dict[str, object]) -> str:
    rows = [
        ("refused calls", f"{r['refused_calls']:,}"),
        ("claims written (of asked)", f"{r['written']:,} of {r['claims_asked']:,}"),
        ("acknowledged claims lost", f"{r['lost']:,}"),
        ("forks", f"{r['forks']}"),
        ("a replica open before sees the others' writes", "yes" if r["watcher_sees_all"] else "no"),
        ("wall time", f"{r['wall_s']} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [name] + [f"  {k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.multiwriter",
        description="StateFuse: 4 API and 4 CLI processes writing one store.",
    )
    parser.add_argument("--claims", type=int, default=None, help=f"per writer (default {CLAIMS})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_CLAIMS} claims per writer")
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="the checkout to measure (default: this one)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the JSON result here")
    args = parser.parse_args(argv)
    if args.claims is not None and args.claims < 1:
        parser.error("--claims must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    claims = args.claims or (QUICK_CLAIMS if args.quick else CLAIMS)
    code = args.code.resolve()
    machine = machine_info()
    result = run_once(code, claims)
    title = (
        f"StateFuse, {API_WRITERS} API + {CLI_WRITERS} CLI processes x {claims} claims on one"
        f" store, default options; code: {code}; Python {machine['python']};"
        f" {machine['cpu_count']} CPUs"
    )
    print(format_result(title, result))
    path: Path = args.json or RESULTS / f"multiwriter-{utc_stamp()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "benchmark": "multiwriter",
        "options": {"claims": claims, "api": API_WRITERS, "cli": CLI_WRITERS, "code": str(code)},
        "load_average_at_end": load_average(),
        "result": result,
    }
    return write_document(path, document)


if __name__ == "__main__":
    sys.exit(main())
