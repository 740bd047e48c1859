"""The ``statefuse`` command line: a thin layer over the library.

Each command calls one library function and turns StateFuse errors into ``Error: ...`` on
stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from statefuse.error import StateFuseError


def _parser() -> argparse.ArgumentParser:
    from statefuse import __version__

    p = argparse.ArgumentParser(prog="statefuse", description="Conflict-preserving agent memory")
    p.add_argument("--version", action="version", version=f"statefuse {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="two agent branches learn conflicting facts and merge")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "demo":
            from statefuse.demo import run

            run()
            return 0
    except StateFuseError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 2
