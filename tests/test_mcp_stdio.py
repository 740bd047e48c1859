"""``statefuse mcp`` over stdio at the JSON-RPC level: a line the SDK's parser refuses (nested
~200 levels deep, not JSON) gets a JSON-RPC error reply rather than silence, an unknown prompt
is a proper JSON-RPC error code with no traceback on stderr, and keys are taken as NFC."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from queue import Empty, Queue
from typing import Any

import pytest

if os.environ.get("CI", "").lower() not in {"1", "true", "yes"}:
    pytest.importorskip("mcp", reason='the MCP SDK is not installed: pip install "statefuse[mcp]"')

from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from statefuse.sync.replica import Replica
from tests.test_mcp import PROCESS_TIMEOUT, ROOT, connected

SPACE = "team"


class _Wire:
    """The server process, spoken to line by line."""

    def __init__(self, store: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "statefuse", "mcp", "--store", str(store)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.answers: Queue[dict[str, Any]] = Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(json.loads(line))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        try:
            return self.answers.get(timeout=PROCESS_TIMEOUT)  # a hang guard, not a budget
        except Empty:
            raise AssertionError("the server never answered") from None

    def close(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=PROCESS_TIMEOUT)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.fixture
def wire(tmp_path: Path) -> Any:
    path = tmp_path / "team.db"
    with Replica.open(path, space=SPACE, create=True):
        pass
    w = _Wire(path)
    w.send(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test", "version": "1"},
                },
            }
        )
    )
    assert w.answer()["id"] == 1
    w.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    try:
        yield w
    finally:
        if w.proc.poll() is None:
            w.proc.kill()
            w.proc.wait()


def test_a_request_nested_200_levels_deep_gets_a_json_rpc_error_reply(wire: _Wire) -> None:
    deep: Any = "x"
    for _ in range(200):
        deep = {"a": deep}
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "search", "arguments": {"query": deep}},
    }
    wire.send(json.dumps(request))
    answer = wire.answer()
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32600
    assert "nested too deeply" in answer["error"]["message"]
    wire.send("{not json")
    answer = wire.answer()
    assert (answer["id"], answer["error"]["code"]) == (None, -32700)
    # the server goes on answering
    wire.send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}))
    tools = wire.answer()
    assert tools["id"] == 8 and "result" in tools
    err = wire.close()
    assert "Traceback" not in err, err


def test_an_unknown_prompt_is_invalid_params_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "team.db"
    with Replica.open(path, space=SPACE, create=True):
        pass
    args = ["-m", "statefuse", "mcp", "--store", str(path)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=ROOT)
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        with connected(stdio_client(params, errlog=errlog)) as s:
            with pytest.raises(MCPError) as refused:
                s.portal.call(s.client.get_prompt, "nope", None)
            assert refused.value.code == -32602
            assert "nope" in refused.value.message
        errlog.seek(0)
        log = errlog.read()
    assert "Traceback" not in log, log
