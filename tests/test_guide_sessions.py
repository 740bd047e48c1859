"""The shell sessions the guides show, run for real: each ``$ statefuse ...`` line of the CLI
guide's sessions runs as its own process (``sys.executable -m statefuse``) in a temporary
directory, and what it prints must be what the page shows.

Ids and keys are new in every run, so outputs are compared with every run of 8 or more hex digits
masked, as tests/docblocks.py does, and byte counts too (a change holds its writer's clock); rows
that tables order by id (and number by that order) are compared in any order. An id the page's
command line names by a prefix (``decide fc0d3ea2``) is mapped to this run's id of the same place
in an earlier output. ``export VAR=VALUE``
sets a variable for the lines after it; ``statefuse serve`` starts in the background (its first
line is compared) and stays up until the test ends, on a port chosen free here in place of the
page's.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from docblocks import HEX, blocks
from docblocks import masked as masked_ids

ROOT = Path(__file__).resolve().parents[1]
#: Seconds any one command may take: a hang guard, not a budget.
HANG = 120


#: Byte counts: a change's encoding holds its writer's clock, so sizes move by a byte or two.
SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:B|kB|MB)\b")


#: A conflict table's row: its group number follows the order of the (new) ids.
GROUP_ROW = re.compile(r"^(\s+)\d+(\s+<hex>)", re.M)


def masked(text: str) -> list[str]:
    return sorted(GROUP_ROW.sub(r"\1#\2", SIZE.sub("<size>", masked_ids(text))).splitlines())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Session:
    """Runs a page's console lines one by one, keeping the variables, the background servers
    and the page's ids mapped to this run's."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
        self.env.pop("STATEFUSE_STORE", None)
        self.ids: dict[str, str] = {}  # the page's full id -> this run's
        self.ports: dict[str, str] = {}  # the page's port -> this run's
        self.servers: list[subprocess.Popen[str]] = []

    def _learn(self, expected: str, printed: str) -> None:
        for shown, real in zip(HEX.findall(expected), HEX.findall(printed), strict=False):
            self.ids.setdefault(shown, real)

    def _translate(self, word: str) -> str:
        for port, mine in self.ports.items():
            word = word.replace(f":{port}", f":{mine}")
        if HEX.fullmatch(word):
            for shown, real in self.ids.items():
                if shown.startswith(word):
                    return real[: len(word)]
        return word

    def _expected(self, text: str) -> str:
        for port, mine in self.ports.items():
            text = text.replace(f":{port}", f":{mine}")
        return text

    def step(self, command: str, expected: str, where: str) -> None:
        argv = [self._translate(w) for w in shlex.split(command, comments=True)]
        if not argv:
            return
        if argv[0] == "export":
            name, _, value = argv[1].partition("=")
            self.env[name] = value
            assert expected.strip() == "", f"{where}: `{command}` prints nothing"
            return
        assert argv[0] == "statefuse", f"{where}: only statefuse commands run: {command}"
        if argv[1] == "serve":
            self._serve(argv, expected, where)
            return
        done = subprocess.run(
            [sys.executable, "-m", "statefuse", *argv[1:]],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
        printed = done.stdout + done.stderr
        want = self._expected(expected)
        assert masked(printed) == masked(want), f"{where}: `{command}` printed\n{printed}"
        failed = printed.startswith("Error:")
        assert (done.returncode != 0) == failed, f"{where}: `{command}` exited {done.returncode}"
        self._learn(want, printed)

    def _serve(self, argv: list[str], expected: str, where: str) -> None:
        if "--port" in argv:
            at = argv.index("--port") + 1
            self.ports[argv[at]] = str(_free_port())
            argv[at] = self.ports[argv[at]]
        proc = subprocess.Popen(
            [sys.executable, "-m", "statefuse", *argv[1:]],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.servers.append(proc)
        assert proc.stdout is not None
        first = proc.stdout.readline()  # it prints this line once it listens
        assert masked(first) == masked(self._expected(expected)), f"{where}: serve printed {first}"

    def close(self) -> None:
        for proc in self.servers:
            proc.terminate()
            proc.wait(timeout=HANG)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    s = Session(tmp_path)
    yield s
    s.close()


def _steps(code: str) -> Iterator[tuple[str, str]]:
    for step in re.split(r"^\$ ", code, flags=re.M)[1:]:
        command, _, expected = step.partition("\n")
        yield command, expected.rstrip("\n") + "\n" if expected.strip() else ""


def test_the_cli_guides_session_prints_what_the_page_shows(session: Session) -> None:
    page = ROOT / "docs" / "guides" / "cli.md"
    sessions = [b for b in blocks(page.read_text(encoding="utf-8")) if b.lang == "console"]
    assert len(sessions) >= 2
    for block in sessions:  # each a shell of its own: a variable exported lasts to its end
        session.env.pop("STATEFUSE_STORE", None)
        for command, expected in _steps(block.code):
            session.step(command, expected, f"{page.name}, the block at line {block.line}")


def _quoted(page: Path, start: str) -> list[str]:
    """The backticked spans of the paragraph of ``page`` that starts with ``start``, each on one
    line (a span may wrap)."""
    text = page.read_text(encoding="utf-8")
    paragraph = text[text.index(start) :].split("\n\n", 1)[0]
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", paragraph)]


def test_the_nats_guides_follower_and_sync_print_what_the_page_says(tmp_path: Path) -> None:
    import queue
    import threading

    from natsserver import NatsServer

    page = ROOT / "docs" / "guides" / "nats.md"
    said = [s for s in _quoted(page, "The follower prints") if "nats://" in s]
    following, own, theirs, synced = said[:4]
    broker = NatsServer(tmp_path).start()
    try:
        here = f"nats://127.0.0.1:{broker.port}"

        def ours(line: str) -> str:
            return line.replace("nats://127.0.0.1:4222", here)

        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}

        def statefuse(*argv: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "statefuse", *argv],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=HANG,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout + done.stderr

        statefuse("--store", "planner.db", "init", "--space", "launch-plan", "--name", "planner")
        statefuse("--store", "scout.db", "init", "--space", "launch-plan", "--name", "scout")
        follow = ("--store", "scout.db", "serve", "--nats", here, "--interval", "2")
        serve = subprocess.Popen(
            [sys.executable, "-m", "statefuse", *follow],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        assert serve.stdout is not None
        reader = threading.Thread(target=lambda: [lines.put(x) for x in serve.stdout], daemon=True)
        reader.start()
        try:
            assert lines.get(timeout=HANG) == ours(following) + "\n"
            assert lines.get(timeout=HANG) == ours(own) + "\n"  # its name, published
            statefuse("--store", "planner.db", "claim", "project/launch/owner", "dana")
            assert statefuse("--store", "planner.db", "sync", here) == ours(synced) + "\n"
            # the planner's two changes arrive in one round (the page's line) or in two
            line = lines.get(timeout=HANG)
            if line != ours(theirs) + "\n":
                one = ours(theirs).replace("received 2", "received 1") + "\n"
                assert line == one and lines.get(timeout=HANG) == one, line
            shown = statefuse("--store", "scout.db", "show")
            assert '"dana"' in shown and "planner" in shown
        finally:
            serve.terminate()
            serve.wait(timeout=HANG)
    finally:
        broker.kill()
