"""An `Embedder` over any OpenAI-compatible ``/v1/embeddings`` endpoint: `OpenAIEmbedder`.

Standard library only (``urllib``): OpenAI itself, and the many servers that speak its protocol
(vLLM, llama.cpp's server, Ollama, LM Studio, text-embeddings-inference, LiteLLM...). Nothing is
sent until the first `embed`.

The protocol: ``POST {base_url}/embeddings`` with JSON ``{"model": ..., "input": [texts]}``
(and ``"dimensions"`` when asked for), ``Authorization: Bearer <key>`` when there is a key; the
answer is ``{"data": [{"index": i, "embedding": [numbers]}, ...]}``, put back in ``index``
order. Texts go `BATCH` per request.

Every failure is mapped at one seam (`OpenAIEmbedder._post`) to an `EmbeddingServiceError`:
HTTP 4xx → `EmbeddingRejectedError` (the service's own error message quoted), HTTP 5xx or no
connection → `EmbeddingUnavailableError`, no answer within ``timeout`` seconds →
`EmbeddingTimeoutError`, an answer that is not JSON or holds another count of vectors than
texts → `EmbeddingResponseError` (rule ``response`` or ``count``). The vectors themselves are
checked by `checked_vectors` (dimension, finite numbers) as for any embedder.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from statefuse.retrieval.embedder import (
    EmbedderError,
    EmbeddingRejectedError,
    EmbeddingResponseError,
    EmbeddingTimeoutError,
    EmbeddingUnavailableError,
    LearntDimension,
    Vector,
    check_dimension,
    check_name,
)

__all__ = ["BATCH", "DEFAULT_BASE_URL", "DEFAULT_TIMEOUT", "OpenAIEmbedder"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Seconds a request may take before `EmbeddingTimeoutError`.
DEFAULT_TIMEOUT = 30.0
#: Most texts one request carries.
BATCH = 256
#: Most characters of a service's error message quoted in an error.
_QUOTED = 300


class OpenAIEmbedder(LearntDimension):
    """An `Embedder` calling ``{base_url}/embeddings`` for ``model``.

    ``api_key``: sent as a bearer token (default: the ``OPENAI_API_KEY`` environment variable,
    read now; none: no header, as local servers expect). ``dimension``: the vector length; when
    ``send_dimensions`` is true it is also asked of the service (OpenAI's ``dimensions``
    parameter, for models that shorten vectors), else it is learnt from the first answer.
    ``name``: what the vectors are stored under (default ``model``, plus ``@<dimension>`` when
    sent). Raises `EmbedderError` for a bad argument (``base_url``/``url``, ``model``,
    ``timeout``)."""

    __slots__ = (
        "api_key",
        "base_url",
        "model",
        "send_dimensions",
        "timeout",
    )

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        dimension: int | None = None,
        send_dimensions: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        name: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise EmbedderError("model", "str", f"a model name is a non-empty str, got {model!r}")
        parts = urlsplit(base_url) if isinstance(base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise EmbedderError("base_url", "url", f"expected an http(s) URL, got {base_url!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise EmbedderError("timeout", "positive", f"{timeout!r} is not a number > 0")
        if send_dimensions and dimension is None:
            raise EmbedderError(
                "dimension", "positive-int", "send_dimensions needs the dimension to send"
            )
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._dimension = None if dimension is None else check_dimension(dimension)
        self.send_dimensions = bool(send_dimensions)
        self.timeout = float(timeout)
        default = f"{model}@{dimension}" if send_dimensions else model
        self._name = check_name(default if name is None else name)

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        out: list[Vector] = []
        for at in range(0, len(texts), BATCH):
            part = texts[at : at + BATCH]
            out += self._checked(self._vectors(self._post(part), len(part)), len(part))
        return out

    async def aembed(self, texts: Sequence[str]) -> list[Vector]:
        return await asyncio.to_thread(self.embed, texts)

    def _post(self, texts: list[str]) -> object:
        """The decoded JSON answer to one request: the one seam for the service's failures."""
        body: dict[str, Any] = {"model": self.model, "input": texts}
        if self.send_dimensions:
            body["dimensions"] = self._dimension
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url}/embeddings"
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            said = _said(exc)
            status = exc.code
            if 400 <= status < 500:
                raise EmbeddingRejectedError(
                    "rejected", f"{url} refused the request: HTTP {status}{said}", status=status
                ) from None
            raise EmbeddingUnavailableError(
                "unavailable", f"{url} failed: HTTP {status}{said}", status=status
            ) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise _timeout(url, self.timeout) from None
            raise EmbeddingUnavailableError(
                "unavailable", f"{url} could not be reached: {exc.reason}"
            ) from None
        except TimeoutError:
            raise _timeout(url, self.timeout) from None
        except (OSError, ValueError) as exc:  # connection reset, a malformed status line
            raise EmbeddingUnavailableError("unavailable", f"{url} failed: {exc}") from None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise EmbeddingResponseError(
                "response", f"{url} answered with something other than JSON"
            ) from None

    def _vectors(self, answer: object, count: int) -> list[object]:
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or not all(
            isinstance(d, dict) and "embedding" in d for d in data
        ):
            raise EmbeddingResponseError(
                "response", f"{self.base_url}/embeddings answered without a 'data' list"
            )
        if len(data) != count:
            raise EmbeddingResponseError(
                "count", f"{self.base_url}/embeddings sent {len(data)} vectors for {count} texts"
            )
        indexes = [d.get("index") for d in data]
        if sorted(i for i in indexes if type(i) is int) == list(range(count)):
            data = sorted(data, key=lambda d: int(d["index"]))
        return [d["embedding"] for d in data]

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model!r}, base_url={self.base_url!r})"


def _timeout(url: str, seconds: float) -> EmbeddingTimeoutError:
    return EmbeddingTimeoutError("timeout", f"{url} did not answer within {seconds:g} s")


def _said(exc: urllib.error.HTTPError) -> str:
    """The service's own error message, if its body carries one (``{"error": {"message"}}``)."""
    try:
        doc = json.loads(exc.read() or b"null")
    except (ValueError, OSError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message:
        return f": {message[:_QUOTED]}"
    return ""
