"""A pytest plugin that runs LangGraph's own store tests against `StateFuseStore`.

Loaded with ``-p upstreamstore`` into a pytest run over a LangGraph sdist's tests (see
tests/test_langgraph_upstream.py). Before pytest reads a test module's fixtures, it swaps the
module's store for ours, and nothing else: the ``store`` fixture (LangGraph's SQLite store suite)
becomes a `StateFuseStore`, and the name ``InMemoryStore`` (langgraph-checkpoint's suite builds
its stores with ``InMemoryStore(...)`` and ``InMemoryStore(index=...)``) becomes a `StateFuseStore`
subclass that takes the same arguments. In a module whose ``store`` fixture is swapped, the tests
that do not take it build LangGraph's own store (``SqliteStore(...)``) and test that: they are
deselected (pytest's summary counts them).

``STATEFUSE_UPSTREAM_BACKEND`` says which replica the store runs over: ``memory``
(`Replica.memory`) or ``sqlite`` (`Replica.open` on a new file in ``STATEFUSE_UPSTREAM_DIR``);
``langgraph`` puts LangGraph's own ``InMemoryStore`` in the ``store`` fixture instead, the
reference run. Every store made is closed when its test ends.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from statefuse.langgraph import StateFuseStore
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
    # ``langgraph``: LangGraph's own InMemoryStore, the reference run
    yield InMemoryStore() if BACKEND == "langgraph" else UpstreamStore()


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    if isinstance(collector, pytest.Module):
        module = collector.obj
        if hasattr(module, "store"):
            module.store = store
            _swapped.add(module.__name__)
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
        uses = "store" in getattr(item, "fixturenames", ())
        (dropped if swapped and not uses else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
