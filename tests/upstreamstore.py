"""A pytest plugin that runs LangGraph's own store tests against `StateFuseStore`.

Loaded with ``-p upstreamstore`` into a pytest run over a LangGraph sdist's tests (see
tests/test_langgraph_upstream.py). Before pytest reads a test module's fixtures, it swaps the
module's store for ours, and nothing else: the ``store`` fixture (LangGraph's SQLite store suite)
becomes a `StateFuseStore`, so does what its ``create_vector_store`` makes (a store with LangGraph's
``index`` config), and the name ``InMemoryStore`` (langgraph-checkpoint's suite builds
its stores with ``InMemoryStore(...)`` and ``InMemoryStore(index=...)``) becomes a `StateFuseStore`
subclass that takes the same arguments. In a module whose ``store`` fixture is swapped, the tests
that use neither it nor ``create_vector_store`` build LangGraph's own store (``SqliteStore(...)``)
or test its SQL helpers: they are deselected (pytest's summary counts them).

``STATEFUSE_UPSTREAM_BACKEND`` says which replica the store runs over: ``memory``
(`Replica.memory`) or ``sqlite`` (`Replica.open` on a new file in ``STATEFUSE_UPSTREAM_DIR``);
``langgraph`` puts LangGraph's own ``InMemoryStore`` in the ``store`` fixture and
``create_vector_store`` instead, the reference run. Every store made is closed when its test ends.
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from statefuse.entry.langgraph import StateFuseStore
from statefuse.sync.replica import Replica

BACKEND = os.environ.get("STATEFUSE_UPSTREAM_BACKEND", "memory")
SPACE = "upstream"
_made: list[StateFuseStore] = []
#: The modules whose ``store`` fixture was swapped.
_swapped: set[str] = set()


def _replica() -> Replica:
    if BACKEND == "memory":
        return Replica.memory(space=SPACE)
    if BACKEND == "sqlite":
        folder = Path(os.environ["STATEFUSE_UPSTREAM_DIR"])
        return Replica.open(folder / f"store-{uuid.uuid4().hex}.db", create=True, space=SPACE)
    raise ValueError(f"STATEFUSE_UPSTREAM_BACKEND: expected memory or sqlite, got {BACKEND!r}")


class UpstreamStore(StateFuseStore):
    """``InMemoryStore(index=..., ttl=...)``'s signature, as a `StateFuseStore` that owns a new
    replica of the backend under test."""

    def __init__(self, *, index: Any = None, ttl: Any = None) -> None:
        super().__init__(_replica(), index=index)
        self._owns = True
        # InMemoryStore takes a TTL config; ours has no expiry to configure (module docstring)
        self.ttl_config = ttl
        _made.append(self)


@pytest.fixture
def store() -> Iterator[BaseStore]:
    yield _make()


@contextmanager
def create_vector_store(
    fake_embeddings: Any, text_fields: list[str] | None = None, *args: Any, **kwargs: Any
) -> Iterator[StateFuseStore]:
    """LangGraph's SQLite suite's ``create_vector_store`` (its ``text_fields`` are LangGraph's
    ``fields``; the distance is cosine, the file is the backend's)."""
    yield _make(_index(fake_embeddings, text_fields))


@asynccontextmanager
async def acreate_vector_store(
    fake_embeddings: Any, conn_string: str = "", text_fields: list[str] | None = None
) -> AsyncIterator[StateFuseStore]:
    """The async suite's ``create_vector_store``, whose second argument is a connection string."""
    yield _make(_index(fake_embeddings, text_fields))


def _make(index: Any = None) -> BaseStore:
    # ``langgraph``: LangGraph's own InMemoryStore, the reference run
    return InMemoryStore(index=index) if BACKEND == "langgraph" else UpstreamStore(index=index)


def _index(embeddings: Any, fields: list[str] | None) -> dict[str, Any]:
    index: dict[str, Any] = {"dims": embeddings.dims, "embed": embeddings}
    if fields is not None:
        index["fields"] = fields
    return index


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    if isinstance(collector, pytest.Module):
        module = collector.obj
        if hasattr(module, "store"):
            module.store = store
            _swapped.add(module.__name__)
        made = getattr(module, "create_vector_store", None)
        if made is not None:
            is_async = inspect.isasyncgenfunction(inspect.unwrap(made))
            module.create_vector_store = acreate_vector_store if is_async else create_vector_store
        if hasattr(module, "InMemoryStore") and BACKEND != "langgraph":
            module.InMemoryStore = UpstreamStore
    return (yield)


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while _made:
        _made.pop().close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep, in a module whose ``store`` was swapped, only the tests that use it."""
    kept, dropped = [], []
    for item in items:
        module = getattr(item, "module", None)
        swapped = module is not None and module.__name__ in _swapped
        code = getattr(getattr(item, "obj", None), "__code__", None)
        uses = "store" in getattr(item, "fixturenames", ()) or (
            code is not None and "create_vector_store" in code.co_names
        )
        (dropped if swapped and not uses else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
