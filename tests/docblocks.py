"""The code blocks of a Markdown page, and how the doc tests run them (so examples never drift).

What a page may hold, and what the tests do with it (README.md and every page under docs/):

- Every ```` ```python ```` block runs. The blocks of one page run top to bottom in one namespace,
  so a later block may use what an earlier one made; the page runs in a fresh temporary working
  directory, so an example may write files beside it.
- A ```` ```text ```` block right after the line ``<!-- output -->`` is what the python block
  before it prints: its standard output must equal the block.
- A ```` ```console ```` block right after the line ``<!-- run -->`` is a shell session: each
  ``$ statefuse ...`` line runs (through ``statefuse.entry.cli.main``, in the page's directory) and
  what it prints, standard output then standard error, must equal the lines up to the next
  ``$``. It must exit 0, unless what it prints is an ``Error:`` line.
- Outputs are compared with every run of 8 or more hex digits masked: author keys and claim ids
  are new in every run.
- Every other block (``sh``, ``toml``, ``json``, a console session without the marker, a plain
  fence) is shown, not run.

Fences must start at the beginning of a line (not inside a list item), so that none is missed.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"^<!-- (output|run) -->[ \t]*\n\s*\Z", re.M)
HEX = re.compile(r"[0-9a-f]{8,}")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    marker: str | None  # "output" or "run": the marker line right before the fence


def blocks(text: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()]
        marker = MARKER.search(before[-200:])
        found.append(
            Block(
                lang=match.group(1),
                code=match.group(2),
                line=before.count("\n") + 1,
                marker=marker.group(1) if marker else None,
            )
        )
    return found


def masked(text: str) -> str:
    return HEX.sub("<hex>", text)


def run_page(path: Path) -> None:
    """Run the examples of the page at ``path`` in the current working directory."""
    namespace: dict[str, object] = {"__name__": f"docs:{path.name}"}
    printed: str | None = None
    for block in blocks(path.read_text(encoding="utf-8")):
        where = f"{path.name}, the block at line {block.line}"
        if block.marker == "output":
            assert block.lang == "text", f"{where}: an output block is ```text"
            assert printed is not None, f"{where}: no python block before this output"
            assert masked(printed) == masked(block.code), f"{where}: the example printed\n{printed}"
        elif block.marker == "run":
            assert block.lang == "console", f"{where}: a session to run is ```console"
            run_session(block.code, where)
        if block.lang == "python":
            # Line numbers of a traceback are the page's own.
            code = compile("\n" * block.line + block.code, str(path), "exec")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
            printed = out.getvalue()


def run_session(session: str, where: str) -> None:
    from statefuse.entry.cli import main

    steps = re.split(r"^\$ ", session, flags=re.M)
    assert steps[0] == "", f"{where}: a session starts with a '$ ' line"
    for step in steps[1:]:
        command, _, expected = step.partition("\n")
        argv = shlex.split(command, comments=True)
        assert argv[0] == "statefuse", f"{where}: only statefuse commands run: {command}"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv[1:])
        printed = out.getvalue() + err.getvalue()
        assert masked(printed) == masked(expected), f"{where}: `{command}` printed\n{printed}"
        failed = printed.startswith("Error:")
        assert (code != 0) == failed, f"{where}: `{command}` exited {code}"
