"""The embedding interface (`statefuse.retrieval.embedder`): plain callables (sync or async) and
LangChain
embeddings become `Embedder`s, and what any embedder returns is checked before it is used or
stored: a typed error naming the field and the rule."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence

import pytest

from statefuse.retrieval.embedder import (
    CallableEmbedder,
    EmbedderError,
    EmbeddingRejectedError,
    EmbeddingServiceError,
    as_embedder,
    checked_vectors,
)


def two_d(texts: list[str]) -> list[list[float]]:
    return [[float(len(t)), 1.0] for t in texts]


async def two_d_async(texts: list[str]) -> list[list[float]]:
    await asyncio.sleep(0)
    return two_d(texts)


def test_a_sync_callable_is_an_embedder_named_after_it_that_learns_its_dimension() -> None:
    e = as_embedder(two_d)
    assert e.name == f"{__name__}:two_d"
    assert e.embed(["abc"]) == [(3.0, 1.0)]
    assert e.dimension == 2
    assert asyncio.run(e.aembed(["ab", "c"])) == [(2.0, 1.0), (1.0, 1.0)]
    assert e.embed([]) == []


def test_an_async_callable_serves_sync_callers_inside_and_outside_an_event_loop() -> None:
    e = as_embedder(two_d_async, name="async-2d", dimension=2)
    assert e.embed(["abcd"]) == [(4.0, 1.0)]

    async def inside() -> object:
        return e.embed(["ab"])  # a sync call from a coroutine: runs on a loop of its own

    assert asyncio.run(inside()) == [(2.0, 1.0)]
    assert asyncio.run(e.aembed(["a"])) == [(1.0, 1.0)]


def test_langchain_embeddings_are_embedders() -> None:
    class Fake:
        model = "fake-1"

        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return two_d(texts)

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            return two_d(texts)

    e = as_embedder(Fake())
    assert e.name.endswith(":fake-1")
    assert e.embed(["ab"]) == asyncio.run(e.aembed(["ab"])) == [(2.0, 1.0)]


def test_an_embedder_object_is_taken_as_it_is_without_calling_it() -> None:
    class Model:
        name = "m"

        @property
        def dimension(self) -> int:
            raise AssertionError("read only when needed")

        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            return two_d(list(texts))

        async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
            return two_d(list(texts))

    m = Model()
    assert as_embedder(m) is m


@pytest.mark.parametrize(
    ("raw", "rule"),
    [
        ("not vectors", "count"),
        ([[1.0, 2.0]], "count"),  # one vector for two texts
        ([[1.0, 2.0], [1.0]], "dimension"),
        ([[1.0, 2.0], [1.0, math.nan]], "finite"),
        ([[1.0, 2.0], [1.0, math.inf]], "finite"),
        ([[1.0, 2.0], [1.0, 1e300]], "finite"),  # too big for 32 bits
        ([[1.0, 2.0], [1.0, "2"]], "vector"),
        ([[1.0, 2.0], [True, 2.0]], "vector"),
        ([[1.0, 2.0], 3.0], "vector"),
        ([[], []], "dimension"),
    ],
)
def test_vectors_that_break_a_rule_are_refused_naming_it(raw: object, rule: str) -> None:
    with pytest.raises(EmbedderError) as info:
        checked_vectors(raw, count=2, dimension=None, name="m")
    assert (info.value.field, info.value.rule) == ("vectors", rule)
    assert isinstance(info.value, ValueError)


def test_a_wrapped_callable_checks_its_answers_against_its_dimension() -> None:
    e = CallableEmbedder(two_d, name="m", dimension=3)
    with pytest.raises(EmbedderError) as info:
        e.embed(["a"])
    assert (info.value.field, info.value.rule) == ("vectors", "dimension")
    assert "expected 3" in str(info.value)


@pytest.mark.parametrize(
    ("obj", "kw", "field", "rule"),
    [
        (42, {}, "embedder", "callable"),
        (two_d, {"name": ""}, "name", "name"),
        (two_d, {"name": "x" * 201}, "name", "name"),
        (two_d, {"dimension": 0}, "dimension", "positive-int"),
        (two_d, {"dimension": 2.0}, "dimension", "positive-int"),
    ],
)
def test_a_bad_embedder_is_refused_naming_the_field(
    obj: object, kw: dict[str, object], field: str, rule: str
) -> None:
    with pytest.raises(EmbedderError) as info:
        as_embedder(obj, **kw)  # type: ignore[arg-type]
    assert (info.value.field, info.value.rule) == (field, rule)


def test_service_errors_keep_their_rule_and_status_through_pickling() -> None:
    import pickle

    err = EmbeddingRejectedError("rejected", "HTTP 401: bad key", status=401)
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, EmbeddingServiceError) and isinstance(back, RuntimeError)
    assert (type(back), back.rule, back.status, str(back)) == (
        EmbeddingRejectedError,
        "rejected",
        401,
        str(err),
    )
