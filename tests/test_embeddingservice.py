"""The adapters: `OpenAIEmbedder` against a server on 127.0.0.1 that speaks the OpenAI
``/v1/embeddings`` protocol (answers, and its errors: 4xx, 5xx, a wrong count, no answer in
time), and `SentenceTransformerEmbedder`, which imports and downloads nothing until used."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from statefuse.retrieval.embedder import (
    EmbedderError,
    EmbeddingRejectedError,
    EmbeddingResponseError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
)
from statefuse.retrieval.embeddingservice import OpenAIEmbedder
from statefuse.retrieval.sentencetransformer import SentenceTransformerEmbedder
from statefuse.sync.replica import Replica


@dataclass
class Service:
    """What the fake service answers (``mode``) and what it was asked (``requests``)."""

    url: str
    mode: str = "ok"
    requests: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


def _vector(text: str) -> list[float]:
    return [float(len(text)), 1.0, 0.5]


def _handler(service: Service) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, doc: object) -> None:
            body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            service.requests.append((dict(self.headers), body))
            if self.path != "/v1/embeddings":
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            mode = service.mode
            if mode == "slow":
                service.release.wait(60)  # held until the test has seen the client give up
                return
            if mode == "401":
                self._send(401, {"error": {"message": "Incorrect API key provided"}})
            elif mode == "500":
                self._send(500, {"error": {"message": "model overloaded"}})
            elif mode == "garbage":
                self._send(200, b"<html>not json</html>")
            elif mode == "nodata":
                self._send(200, {"object": "list"})
            else:
                texts = body["input"]
                data = [
                    {"object": "embedding", "index": i, "embedding": _vector(t)}
                    for i, t in enumerate(texts)
                ]
                if mode == "short":
                    data = data[:-1]
                if mode == "nan":
                    data[0]["embedding"] = [1.0, None, 2.0]
                self._send(200, {"object": "list", "data": data[::-1], "model": body["model"]})

    return Handler


@pytest.fixture
def service() -> Iterator[Service]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    svc = Service(url=f"http://127.0.0.1:{server.server_address[1]}/v1")
    server.RequestHandlerClass = _handler(svc)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield svc
    finally:
        svc.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def test_it_speaks_the_protocol_and_puts_vectors_back_in_index_order(service: Service) -> None:
    e = OpenAIEmbedder("text-embedding-3-small", base_url=service.url, api_key="sk-test")
    assert e.embed(["a", "bbb"]) == [(1.0, 1.0, 0.5), (3.0, 1.0, 0.5)]
    headers, body = service.requests[0]
    assert body == {"model": "text-embedding-3-small", "input": ["a", "bbb"]}
    assert headers["Authorization"] == "Bearer sk-test"
    assert e.name == "text-embedding-3-small" and e.dimension == 3
    assert asyncio.run(e.aembed(["cc"])) == [(2.0, 1.0, 0.5)]


def test_it_asks_for_a_dimension_when_told_to(service: Service) -> None:
    e = OpenAIEmbedder("m", base_url=service.url, api_key="", dimension=3, send_dimensions=True)
    e.embed(["x"])
    headers, body = service.requests[0]
    assert body["dimensions"] == 3 and "Authorization" not in headers
    assert e.name == "m@3"


@pytest.mark.parametrize(
    ("mode", "error", "rule", "says"),
    [
        ("401", EmbeddingRejectedError, "rejected", "HTTP 401: Incorrect API key provided"),
        ("500", EmbeddingUnavailableError, "unavailable", "HTTP 500: model overloaded"),
        ("short", EmbeddingResponseError, "count", "1 vectors for 2 texts"),
        ("garbage", EmbeddingResponseError, "response", "other than JSON"),
        ("nodata", EmbeddingResponseError, "response", "without a 'data' list"),
    ],
)
def test_service_failures_are_typed_errors(
    service: Service, mode: str, error: type[Exception], rule: str, says: str
) -> None:
    service.mode = mode
    e = OpenAIEmbedder("m", base_url=service.url, api_key="k")
    with pytest.raises(error) as info:
        e.embed(["a", "b"])
    assert info.value.rule == rule  # type: ignore[attr-defined]
    assert says in str(info.value)


def test_a_vector_that_is_not_numbers_is_refused(service: Service) -> None:
    service.mode = "nan"
    with pytest.raises(EmbedderError) as info:
        OpenAIEmbedder("m", base_url=service.url).embed(["a"])
    assert (info.value.field, info.value.rule) == ("vectors", "vector")


def test_a_service_that_does_not_answer_in_time_is_a_timeout(service: Service) -> None:
    service.mode = "slow"
    e = OpenAIEmbedder("m", base_url=service.url, timeout=0.2)
    with pytest.raises(EmbeddingTimeoutError) as info:
        e.embed(["a"])
    assert info.value.rule == "timeout" and "0.2 s" in str(info.value)


def test_no_service_at_the_address_is_unavailable(service: Service) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(EmbeddingUnavailableError) as info:
            OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1").embed(["a"])
    assert info.value.rule == "unavailable" and info.value.status is None


@pytest.mark.parametrize(
    ("kw", "fld"),
    [
        ({"base_url": "ftp://x/v1"}, "base_url"),
        ({"base_url": "not a url"}, "base_url"),
        ({"timeout": 0}, "timeout"),
        ({"send_dimensions": True}, "dimension"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(kw: dict[str, Any], fld: str) -> None:
    with pytest.raises(EmbedderError) as info:
        OpenAIEmbedder("m", **kw)
    assert info.value.field == fld


def test_a_replica_ranks_with_the_service_and_stores_its_vectors(
    service: Service, tmp_path: Path
) -> None:
    e = OpenAIEmbedder("m", base_url=service.url)
    with Replica.open(tmp_path / "m.db", create=True, space="team") as replica:
        replica.add_claim("notes/a/text", "hello")
        assert [h.claim.value for h in replica.search("hello", embedder=e)] == ["hello"]
    with Replica.open(tmp_path / "m.db") as replica:
        replica.search("again", embedder=e)
        assert replica.vectors().embedders() == [("m", 3, 1)]
    texts = [t for _, body in service.requests for t in body["input"]]
    assert texts == ["hello", "notes a text: hello", "again"]


# --- sentence-transformers ------------------------------------------------------------------------


def test_importing_and_making_the_adapter_loads_nothing() -> None:
    code = (
        "import sys, statefuse.retrieval.sentencetransformer as m\n"
        "e = m.SentenceTransformerEmbedder('all-MiniLM-L6-v2')\n"
        "assert e.name == 'all-MiniLM-L6-v2'\n"
        "assert 'sentence_transformers' not in sys.modules and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_the_package_the_first_use_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    e = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
    with pytest.raises(EmbedderError) as info:
        e.embed(["a"])
    assert (info.value.field, info.value.rule) == ("embedder", "not-installed")
    assert 'pip install "statefuse[sentence-transformers]"' in str(info.value)


def test_the_adapter_drives_the_package_api(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[str, object]] = []
    calls: list[dict[str, object]] = []

    class Model:
        def __init__(self, name: str, device: object = None) -> None:
            made.append((name, device))

        def get_sentence_embedding_dimension(self) -> int:
            return 2

        def encode(self, texts: list[str], **kw: object) -> list[list[float]]:
            calls.append(kw)
            return [[float(len(t)), 0.0] for t in texts]

    fake = ModuleType("sentence_transformers")
    fake.SentenceTransformer = Model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    e = SentenceTransformerEmbedder("local/model", device="cpu", batch_size=4)
    assert e.embed(["ab", "c"]) == [(2.0, 0.0), (1.0, 0.0)]
    assert asyncio.run(e.aembed(["abc"])) == [(3.0, 0.0)]
    assert made == [("local/model", "cpu")]  # loaded once
    assert calls[0]["normalize_embeddings"] is True and calls[0]["batch_size"] == 4
    assert e.dimension == 2
