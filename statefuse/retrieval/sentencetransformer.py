"""An `Embedder` over a ``sentence-transformers`` model: `SentenceTransformerEmbedder`.

Needs the extra: ``pip install "statefuse[sentence-transformers]"``. Nothing is imported or
downloaded when this module is imported or the embedder is made: the package is imported, and
the model loaded (downloaded by ``sentence-transformers`` on its first use, into its own
cache), by the first call that needs it (`embed`, `aembed`, `dimension`). Without the package
that call raises `EmbedderError` (rule ``not-installed``) saying what to install.

Vectors are normalized to unit length by default (cosine similarity is then what the model's
authors compare), and stored under ``name``: the model name unless given.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from statefuse.retrieval.embedder import EmbedderError, Vector, check_name, checked_vectors

__all__ = ["EXTRA", "SentenceTransformerEmbedder"]

#: What to install for this adapter.
EXTRA = 'pip install "statefuse[sentence-transformers]"'


class SentenceTransformerEmbedder:
    """``model``: a model name (``"all-MiniLM-L6-v2"``) or a local path, handed to
    ``SentenceTransformer`` on first use with ``device``; ``batch_size`` and ``normalize`` go
    to its ``encode``. Thread-safe: the model is loaded once."""

    __slots__ = ("_lock", "_model", "_name", "batch_size", "device", "model", "normalize")

    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        device: str | None = None,
        batch_size: int = 32,
        normalize: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise EmbedderError("model", "str", f"a model name is a non-empty str, got {model!r}")
        if type(batch_size) is not int or batch_size < 1:
            raise EmbedderError("batch_size", "positive-int", f"{batch_size!r} is not an int >= 1")
        self.model = model
        self._name = check_name(model if name is None else name)
        self.device = device
        self.batch_size = batch_size
        self.normalize = bool(normalize)
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    def _loaded(self) -> Any:
        with self._lock:
            if self._model is None:
                try:
                    import sentence_transformers  # type: ignore[import-not-found]
                except ImportError:
                    raise EmbedderError(
                        "embedder",
                        "not-installed",
                        f"the sentence-transformers package is not installed: {EXTRA}",
                    ) from None
                self._model = sentence_transformers.SentenceTransformer(
                    self.model, device=self.device
                )
            return self._model

    @property
    def dimension(self) -> int:
        got = self._loaded().get_sentence_embedding_dimension()
        if type(got) is not int or got < 1:
            raise EmbedderError(
                "dimension", "positive-int", f"model {self.model!r} reports dimension {got!r}"
            )
        return got

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        raw = self._loaded().encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        rows = raw.tolist() if hasattr(raw, "tolist") else raw
        return checked_vectors(rows, count=len(texts), dimension=self.dimension, name=self._name)

    async def aembed(self, texts: Sequence[str]) -> list[Vector]:
        return await asyncio.to_thread(self.embed, texts)

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder({self.model!r})"
