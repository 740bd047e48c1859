"""A sync stopped half-way (Ctrl-C, a lost connection) resumes from what was already stored: the
changes it fetched stay, accepted or parked in the pending area, and the next sync asks only for
what is still missing. And a peer that is not a StateFuse server is one ``Error:`` line."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from statefuse.sync.http import serve, sync_with
from statefuse.sync.replica import Replica

SPACE = "team"


def test_a_sync_interrupted_after_one_page_fetches_only_the_rest_next_time(tmp_path: Path) -> None:
    theirs = Replica.memory(space=SPACE)
    for i in range(50):  # one author's feed: a page in change-id order mostly parks
        theirs.add_claim("project", f"item-{i}", "status", i)
    path = tmp_path / "mine.db"
    mine = Replica.open(path, create=True, space=SPACE)
    pages: list[int] = []

    def stop_after_first_page(done: int, total: int) -> None:
        pages.append(done)
        raise KeyboardInterrupt

    with serve(theirs) as server:
        with pytest.raises(KeyboardInterrupt):
            sync_with(mine, server.url, page_size=10, progress=stop_after_first_page)
        mine.close()
        assert pages == [10]
        mine = Replica.open(path)
        held = len(mine) + len(mine.pending())
        assert held == 10  # the first page is stored, accepted or parked
        report = sync_with(mine, server.url, page_size=10)
    assert report.fetched == 40
    assert set(mine.change_ids()) == set(theirs.change_ids())
    assert mine.pending() == []
    assert report.merge.pending == 0
    mine.close()


class _Html(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = (
            b"<!DOCTYPE html>\n<html>\n<head><title>404 Not Found</title></head>\n<body>\n"
            b"<h1>Not Found</h1>\n<p>The requested URL was not found on this server.</p>\n"
            b"<hr>\n<address>Apache Server</address>\n</body>\n</html>\n"
        )
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_page() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=60)


def test_sync_with_a_web_server_that_is_not_statefuse_is_one_error_line(
    tmp_path: Path, web_page: str
) -> None:
    store = tmp_path / "s.db"
    env = {k: v for k, v in os.environ.items() if k != "STATEFUSE_STORE"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )

    assert run("init", "--space", SPACE).returncode == 0
    synced = run("sync", web_page)
    assert synced.returncode == 1
    assert synced.stdout == ""
    assert synced.stderr == (
        f"Error: {web_page} is not a StateFuse server: it answered /v1/reconcile with 404"
        " (text/html)\n"
    )
