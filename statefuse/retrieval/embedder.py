"""One embedding interface: `Embedder` (texts to vectors, sync and async), and `as_embedder`,
which makes one of a plain callable.

Why one interface: `Replica.context`, `Replica.search`, the CLI (``--embedder module:attr``),
``statefuse mcp`` and the LangGraph store all rank by meaning through the same object, and the
vectors it makes are stored under its ``name`` and ``dimension``
(`statefuse.retrieval.vectorstore`), so
two embedders never mix their vectors and a store reopened with the same embedder never embeds
a claim twice. ``name`` must therefore name the model, not the process: two embedders with one
name and one dimension are taken to give the same vectors.

What comes back from any embedder is checked by `checked_vectors` before it is used or stored:
one vector per text, each a sequence of ``dimension`` finite numbers, else `EmbedderError`
naming the field and the rule (``count``, ``vector``, ``dimension``, ``finite``). Vectors are
kept as 32-bit floats (what the store holds), so a vector read back ranks exactly as the one
just computed.

Errors::

    InputError
    └── EmbedderError (ValueError)      an embedder, or what it returned, that breaks a rule
    StateFuseError
    └── EmbeddingServiceError (RuntimeError)  an embedding service failed (`rule`, `status`):
        ├── EmbeddingRejectedError          it refused the request (HTTP 4xx)
        ├── EmbeddingUnavailableError       it could not answer (HTTP 5xx, no connection)
        ├── EmbeddingTimeoutError           it did not answer in time
        └── EmbeddingResponseError          its answer is not the embeddings asked for
"""

from __future__ import annotations

import asyncio
import inspect
import math
from array import array
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from statefuse.registry.error import InputError, StateFuseError

__all__ = [
    "MAX_NAME_CHARS",
    "CallableEmbedder",
    "Embedder",
    "EmbedderError",
    "EmbeddingRejectedError",
    "EmbeddingResponseError",
    "EmbeddingServiceError",
    "EmbeddingTimeoutError",
    "EmbeddingUnavailableError",
    "Vector",
    "as_embedder",
    "checked_vectors",
    "float32",
]

#: Longest embedder name (it is stored beside every vector).
MAX_NAME_CHARS = 200

#: A checked vector: 32-bit floats, as stored.
Vector = tuple[float, ...]


class EmbedderError(InputError, ValueError):
    """An embedder that breaks a rule of the interface, or vectors that do (``field`` names
    where: ``embedder``, ``name``, ``dimension``, ``vectors``; ``rule`` which rule)."""


class EmbeddingServiceError(StateFuseError, RuntimeError):
    """An embedding service failed. ``rule`` says how (``rejected``, ``unavailable``,
    ``timeout``, ``response``), ``status`` is the HTTP status when there was one."""

    def __init__(self, rule: str, message: str, *, status: int | None = None) -> None:
        self.rule = rule
        self.message = message
        self.status = status
        super().__init__(f"embedding service: {message} [rule: {rule}]")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.rule, self.message, self.status))


def _rebuild(
    cls: type[EmbeddingServiceError], rule: str, message: str, status: int | None
) -> EmbeddingServiceError:
    return cls(rule, message, status=status)


class EmbeddingRejectedError(EmbeddingServiceError):
    """The service refused the request (HTTP 4xx: a bad key, an unknown model, too long)."""


class EmbeddingUnavailableError(EmbeddingServiceError):
    """The service could not answer (HTTP 5xx, connection refused, name not resolved)."""


class EmbeddingTimeoutError(EmbeddingServiceError):
    """The service did not answer within the adapter's timeout."""


class EmbeddingResponseError(EmbeddingServiceError):
    """The service answered with something other than the embeddings asked for (not JSON,
    another count of vectors than texts, a vector that is not numbers)."""


@runtime_checkable
class Embedder(Protocol):
    """Texts to vectors. ``name`` names the model (vectors are stored under it), ``dimension``
    is the length of every vector; `embed` and `aembed` return one vector per text, in order.
    Callers check what comes back with `checked_vectors`."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...

    async def aembed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def float32(values: Sequence[float]) -> Vector:
    """``values`` rounded to 32-bit floats (what the vector store keeps)."""
    return tuple(array("f", values))


def checked_vectors(raw: object, *, count: int, dimension: int | None, name: str) -> list[Vector]:
    """``raw`` (an embedder's answer for ``count`` texts) as checked 32-bit vectors.

    Raises `EmbedderError`: ``vectors``/``count`` (not a sequence of ``count`` vectors),
    ``vectors``/``vector`` (an entry that is not a sequence of numbers), ``vectors``/
    ``dimension`` (a vector of another length than ``dimension``, or than the others when it
    is None), ``vectors``/``finite`` (NaN or an infinity, also once rounded to 32 bits). An all-zero
    vector is allowed: it is similar to nothing."""
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise EmbedderError(
            "vectors", "count", f"embedder {name!r} returned {type(raw).__name__}, not vectors"
        )
    if len(raw) != count:
        raise EmbedderError(
            "vectors", "count", f"embedder {name!r} returned {len(raw)} vectors for {count} texts"
        )
    out: list[Vector] = []
    want = dimension
    for i, v in enumerate(raw):
        if isinstance(v, (str, bytes)) or not hasattr(v, "__len__") or not hasattr(v, "__iter__"):
            raise EmbedderError(
                "vectors", "vector", f"vector {i} of embedder {name!r} is {type(v).__name__}"
            )
        items = list(v)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            items = [_number(x, i, name) for x in items]
        if want is None:
            want = len(items)
        if len(items) != want or not items:
            raise EmbedderError(
                "vectors",
                "dimension",
                f"vector {i} of embedder {name!r} has {len(items)} numbers, expected {want}",
            )
        if not all(math.isfinite(x) for x in items):
            raise EmbedderError(
                "vectors", "finite", f"vector {i} of embedder {name!r} holds NaN or an infinity"
            )
        vec = float32(items)
        if not all(math.isfinite(x) for x in vec):  # finite as a double, too big as a float
            raise EmbedderError(
                "vectors", "finite", f"vector {i} of embedder {name!r} overflows 32-bit floats"
            )
        out.append(vec)
    return out


def _number(x: object, i: int, name: str) -> float:
    try:
        if isinstance(x, (bool, str, bytes)):
            raise TypeError
        return float(x)  # type: ignore[arg-type]  # numpy scalars and the like
    except (TypeError, ValueError):
        raise EmbedderError(
            "vectors", "vector", f"vector {i} of embedder {name!r} holds {x!r}, not a number"
        ) from None


def check_name(name: object) -> str:
    """An embedder name: a non-empty str of at most `MAX_NAME_CHARS` characters."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise EmbedderError(
            "name", "name", f"an embedder name is 1..{MAX_NAME_CHARS} characters, got {name!r}"
        )
    return name


def check_dimension(dimension: object) -> int:
    """A vector length: an int >= 1."""
    if type(dimension) is not int or dimension < 1:
        raise EmbedderError("dimension", "positive-int", f"{dimension!r} is not an int >= 1")
    return dimension


#: One worker runs an async embedder's coroutine for a sync caller that is inside an event
#: loop already (an MCP tool, a LangGraph node): its own loop, so neither blocks the other's.
_RUNNER: ThreadPoolExecutor | None = None


def _run(coro: Awaitable[Any]) -> Any:
    global _RUNNER
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(coro))
    if _RUNNER is None:
        _RUNNER = ThreadPoolExecutor(1, thread_name_prefix="statefuse-embed")
    return _RUNNER.submit(asyncio.run, _awaited(coro)).result()


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


class LearntDimension:
    """What an embedder whose vector length may be learnt from its first answer shares: its
    ``name``, its ``dimension`` (read before any call, it embeds one probe text to learn it)
    and the check of each answer (`checked_vectors`) that learns it."""

    __slots__ = ("_dimension", "_name")

    _dimension: int | None
    _name: str

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self.embed(["dimension"])
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        raise NotImplementedError

    def _checked(self, raw: object, count: int) -> list[Vector]:
        out = checked_vectors(raw, count=count, dimension=self._dimension, name=self._name)
        if out and self._dimension is None:
            self._dimension = len(out[0])
        return out


class CallableEmbedder(LearntDimension):
    """An `Embedder` made of a callable from a list of texts to a list of vectors, sync or
    async (a coroutine function, or one that returns an awaitable). The sync `embed` of an
    async callable runs it on an event loop of its own; the async `aembed` of a sync one runs
    it in a worker thread. ``dimension`` is learnt from the first answer when not given (read
    before any call, it embeds one probe text to learn it)."""

    __slots__ = ("_fn",)

    def __init__(
        self,
        fn: Callable[[list[str]], Any],
        *,
        name: str | None = None,
        dimension: int | None = None,
    ) -> None:
        if not callable(fn):
            raise EmbedderError(
                "embedder", "callable", f"expected a callable from texts to vectors, got {fn!r}"
            )
        self._fn = fn
        self._name = check_name(name if name is not None else _callable_name(fn))
        self._dimension = None if dimension is None else check_dimension(dimension)

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        got = self._fn(texts)
        if inspect.isawaitable(got):
            got = _run(got)
        return self._checked(got, len(texts))

    async def aembed(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        if inspect.iscoroutinefunction(self._fn):
            got = await self._fn(texts)
        else:
            got = await asyncio.to_thread(self._fn, texts)
            if inspect.isawaitable(got):
                got = await got
        return self._checked(got, len(texts))

    def __repr__(self) -> str:
        return f"CallableEmbedder(name={self._name!r}, dimension={self._dimension!r})"


def _callable_name(fn: object) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    qual = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qual}"


class _LangChainEmbedder(CallableEmbedder):
    """A LangChain ``Embeddings`` object (``embed_documents``/``aembed_documents``)."""

    __slots__ = ("_lc",)

    def __init__(self, lc: Any, *, name: str | None, dimension: int | None) -> None:
        super().__init__(
            lc.embed_documents,
            name=name if name is not None else _lc_name(lc),
            dimension=dimension,
        )
        self._lc = lc

    async def aembed(self, texts: Sequence[str]) -> list[Vector]:
        texts = list(texts)
        if not texts:
            return []
        return self._checked(await self._lc.aembed_documents(texts), len(texts))


def _lc_name(lc: Any) -> str:
    model = getattr(lc, "model", None) or getattr(lc, "model_name", None)
    base = _callable_name(type(lc))
    return f"{base}:{model}" if isinstance(model, str) and model else base


def as_embedder(obj: object, *, name: str | None = None, dimension: int | None = None) -> Embedder:
    """``obj`` as an `Embedder`: an object with ``name``, ``dimension``, ``embed`` and
    ``aembed`` as it is; a LangChain ``Embeddings`` (``embed_documents``) or a callable from a
    list of texts to a list of vectors (sync or async) wrapped in a `CallableEmbedder` (named
    ``name``, default ``module:qualname``). Raises `EmbedderError` (``embedder``/``callable``,
    ``name``/``name``, ``dimension``/``positive-int``)."""
    if isinstance(obj, CallableEmbedder) and name is None and dimension is None:
        return obj
    # methods looked up, not ``isinstance(obj, Embedder)``: that reads ``dimension``, which
    # may call the model
    if (
        callable(getattr(obj, "embed", None))
        and callable(getattr(obj, "aembed", None))
        and name is None
        and dimension is None
    ):
        check_name(getattr(obj, "name", None))
        return obj  # type: ignore[return-value]
    if hasattr(obj, "embed_documents") and hasattr(obj, "aembed_documents"):
        return _LangChainEmbedder(obj, name=name, dimension=dimension)
    if not callable(obj):
        raise EmbedderError(
            "embedder",
            "callable",
            f"expected an Embedder or a callable from texts to vectors, got {type(obj).__name__}",
        )
    return CallableEmbedder(obj, name=name, dimension=dimension)
