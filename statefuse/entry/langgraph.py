"""A LangGraph store over a StateFuse replica: `StateFuseStore` implements LangGraph's `BaseStore`.

An entry point (the top layer, like the CLI): it needs ``langgraph`` (``pip install
"statefuse[langgraph]"``), and ``import statefuse`` never imports it.

**Items are claims.** An item ``(namespace, key)`` is the claim key ``(claim_namespace(namespace),
key, "value")``: claim namespace ``"lg:"`` plus the labels joined by ``"."``, subject the item key,
predicate ``"value"``. LangGraph forbids ``"."`` (and NUL) in labels, so the join needs no escape
and reads back exactly (`item_namespace`); a claim namespace that does not read back as a valid
LangGraph namespace (written by other code) is not an item. ``put`` is `Replica.update` with the
value map as the claim value; ``delete`` retracts the key's active claims this store's lens sees
(from every author: a delete says the key holds nothing now). Nothing is ever removed from the
op-set. All writes of one `batch` become one signed change, stored atomically.

**Reads go through the projection.** ``get``, ``search`` and ``list_namespaces`` read
``project(replica.state(), lens)``: what the lens may not see (other roles, other tasks, drafts)
appears nowhere, not even as a namespace. On a replica opened on its store's derived state
(`Replica.loaded` False) they project only the keys they read from it (a get its key, a search the
items under its prefix, a listing the first items of each namespace until one is seen), with the
same answers; a query search with an embedding ``index`` loads the history. As in LangGraph's own
stores, the reads of a batch see the store as it was when the batch began, and its writes apply
after them (the last write to a key wins). The async methods called concurrently on one event loop
(``asyncio.gather`` of ``aput``, ``aget``...) are one such batch, as in LangGraph's own batched
stores (``AsyncBatchedBaseStore``): the calls waiting at the same moment run together when the loop
next runs, so a burst of N writes is one signed change, not N. An awaited call alone is a batch of
its own, so code that awaits each call in turn reads its own writes. ``created_at`` and
``updated_at`` are the wall time of the claim holding the value (LangGraph's ``InMemoryStore`` also
stamps both at every put); for a conflicted item, the earliest and the latest of its candidates'.

**Disagreement is never collapsed.** `Replica.update` replaces only this replica's own claim, so two
agents that wrote different values at one key are a conflict (SEMANTICS §5). While the projection
leaves it unresolved, ``get`` and ``search`` return the item with the value ``{"__conflict__":
{"namespace", "key", "conflict_id", "not_shown", "candidates": [{"value", "author", "author_name",
"claim_id", "provenance", "updated_at"}, ...]}}``, in the words a model reads: the item's namespace
and key as the graph wrote them (not the claim key they are stored under), ids cut to 12 hex digits
(a unique prefix, as the command line shows them), ``author`` the name the author declared for
itself (else its first 8 hex digits), ``author_name`` that name or None; candidates in claim id
order. Why this shape and not one candidate's value with a note beside it: with the default policy
nothing was selected, so any value we put first would be a silent choice, and code that reads
``item.value["theme"]`` must fail loudly (KeyError) rather than act on one side; an ``Item`` has no
other place for a note, and a field merged into the user's map could collide with theirs. A conflict
that a decision (`Replica.decide`), the space's registry policy or this store's ``resolver``
resolved is not marked: the item holds the selected value. ``"__conflict__"`` is therefore reserved:
a put whose value has that top-level field is refused.

**Search.** Namespace prefix, then filter, then ranking, then ``offset``/``limit``. Without a
query, items come in (namespace, key) order. With a query: by cosine similarity of embeddings
when the store has LangGraph's ``index`` config (items without a vector follow, in order), else
by `LexicalRanker` (BM25 over the claim's key and value words; items without a matching word
score 0 and follow). A conflicted item matches a filter when one of its candidates does, and
scores its best candidate's score.

Filters (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; a plain value means ``$eq``; a
plain map matches the fields it names inside a map field; a field name with dots, ``"user.level"``,
that is not itself a field of the map names a nested field, as in LangGraph's SQLite and Postgres
stores): numbers compare as numbers (``1 ==
1.0``), and ``bool`` is not a number (``True != 1``); the ordering operators compare two numbers,
or two strings (by code point), and any other pair does not match; a missing field never raises
and matches nothing except ``$ne`` (a missing field is not equal to anything, as in MongoDB and
LangGraph's ``InMemoryStore``; ``$eq: None`` does not match a missing field). An unknown
operator, or an ordering operator given something other than a number or a string, raises
`LangGraphStoreError`.

**Embeddings** are computed when an item is put (its ``index`` fields, else the store's
``fields``, default ``["$"]``: the whole value) and kept by claim id in the replica's vector
store (`Replica.vectors`: a table of its SQLite file, so a reopened store embeds nothing it
embedded before; memory for a replica in memory), never in the op-set: they belong to one
embedding model, and peers may use another. They are stored under a name made of the model's
(`embedder_name`) and the store's ``fields``, and ``dims``, so another model or another field
list never reads them. Claims without one (received from a peer, or put by another program)
are embedded, with the store's fields, by the first query search that meets them; a per-put
``index`` override (``False`` or a field list) is kept with the claim's vectors.
``index_config`` (the ``index`` given, or None) and ``embeddings`` (LangChain ``Embeddings``
made of its ``embed``, or None) are public, as on LangGraph's own stores.

Errors: `LangGraphStoreError` (`InputError`, ``ValueError``) names the field and rule of bad input
to a batch; `NamespaceError` is also LangGraph's ``InvalidNamespaceError``. A batch that raises
writes nothing. TTLs are not supported (``supports_ttl`` is False), as LangGraph's own
``put(ttl=...)`` check reports.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from heapq import merge
from operator import mul
from typing import Any, cast

try:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        ensure_embeddings,
        get_text_at_path,
        tokenize_path,
    )
except ModuleNotFoundError as exc:  # the extra is not installed (or only in part)
    if (exc.name or "").split(".")[0] not in ("langgraph", "langchain_core"):
        raise
    raise ModuleNotFoundError(
        f"statefuse.entry.langgraph needs the langgraph extra (no module {exc.name!r}):"
        " pip install 'statefuse[langgraph]'",
        name=exc.name,
    ) from None

from statefuse.core.authorname import AuthorNames
from statefuse.core.op import MAX_NAME_CHARS, ClaimAdded
from statefuse.core.state import State
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.ranker import LexicalRanker
from statefuse.reading.resolver import Resolver
from statefuse.reading.view import Contest, How, Key, Selection, SurfacedConflict, View
from statefuse.registry.error import InputError
from statefuse.registry.value import Value, frozen_value, plain_value
from statefuse.retrieval.embedder import float32
from statefuse.retrieval.vectorstore import VectorStore
from statefuse.storage.storeindex import StoreIndex
from statefuse.sync.replica import Replica

__all__ = [
    "CLAIM_PREFIX",
    "CONFLICT_FIELD",
    "PREDICATE",
    "LangGraphStoreError",
    "NamespaceError",
    "StateFuseStore",
    "claim_key",
    "claim_namespace",
    "embedder_name",
    "item_namespace",
]

#: What every item's claim namespace starts with (keeps items apart from other claims).
CLAIM_PREFIX = "lg:"
#: Joins namespace labels: LangGraph forbids it inside a label, so the join reads back exactly.
SEPARATOR = "."
#: The predicate of every item's claim.
PREDICATE = "value"
#: Items a namespace listing reads at a time from the derived state to find one the lens sees.
_LOOK_AHEAD = 16
#: The one field of the value of an item under an unresolved conflict.
CONFLICT_FIELD = "__conflict__"
#: The root label LangGraph reserves for itself: ``put`` refuses it (LangGraph's `BaseStore.put`
#: checks it), while a `PutOp` given to ``batch`` may write there, as in LangGraph's own stores.
RESERVED_ROOT = "langgraph"
#: Vectors of retracted claims a store may keep before it prunes (see `StateFuseStore._prune`).
PRUNE_MARGIN = 1024
#: Provenance of the claims a store writes, unless the store is given another.
DEFAULT_PROVENANCE = "langgraph"

_ORDERING = frozenset({"$gt", "$gte", "$lt", "$lte"})
_SCALARS = frozenset({str, int, float, bool, type(None)})
_OPERATORS = _ORDERING | {"$eq", "$ne"}


class LangGraphStoreError(InputError, ValueError):
    """Bad input to a `StateFuseStore` batch: ``field`` and ``rule`` say what and why."""


class NamespaceError(LangGraphStoreError, InvalidNamespaceError):
    """A namespace LangGraph does not allow (empty, a label that is empty, not a str or holds
    ``.`` or NUL, a put under the root ``langgraph``) or too long for a claim namespace."""


# --- the mapping --------------------------------------------------------------------------------

Namespace = tuple[str, ...]


def _check_labels(namespace: object, field: str) -> tuple[str, ...]:
    if isinstance(namespace, str) or not isinstance(namespace, (tuple, list)):
        raise NamespaceError(field, "tuple", f"expected a tuple of str, got {namespace!r}")
    for label in namespace:
        if not isinstance(label, str):
            raise NamespaceError(field, "label-str", f"label {label!r} is not a str")
        if not label:
            raise NamespaceError(field, "label-non-empty", f"empty label in {namespace!r}")
        if SEPARATOR in label or "\x00" in label:
            raise NamespaceError(
                field, "label-chars", f"label {label!r} holds '.' or NUL, which LangGraph forbids"
            )
        try:
            label.encode("utf-8")
        except UnicodeEncodeError:
            raise NamespaceError(field, "utf8", f"label {label!r} is not valid UTF-8") from None
    return tuple(namespace)


def claim_namespace(namespace: tuple[str, ...]) -> str:
    """The claim namespace of an item namespace: ``"lg:"`` + labels joined by ``"."``.

    Raises NamespaceError for a namespace LangGraph does not allow or that is too long."""
    labels = _check_labels(namespace, "namespace")
    if not labels:
        raise NamespaceError("namespace", "non-empty", "an item namespace has at least one label")
    out = CLAIM_PREFIX + SEPARATOR.join(labels)
    if len(out) > MAX_NAME_CHARS:
        raise NamespaceError(
            "namespace", "length", f"{out[:40]!r}... is longer than {MAX_NAME_CHARS} characters"
        )
    return out


def item_namespace(name: str) -> tuple[str, ...] | None:
    """The item namespace a claim namespace stands for (`claim_namespace` read back), or None
    when it stands for none (another prefix, an empty label)."""
    if not name.startswith(CLAIM_PREFIX):
        return None
    labels = tuple(name[len(CLAIM_PREFIX) :].split(SEPARATOR))
    if not all(labels) or any("\x00" in label for label in labels):
        return None
    return labels


def _name_of(namespace: Namespace) -> str:
    """`claim_namespace` of labels already checked, without the checks (a read of a namespace
    too long to store simply finds nothing)."""
    return CLAIM_PREFIX + SEPARATOR.join(namespace)


def claim_key(namespace: tuple[str, ...], key: str) -> tuple[str, str, str]:
    """The claim key (namespace, subject, predicate) of an item: what `State.conflict_of` and
    `State.active_at` take, e.g. to decide a conflict with `Replica.decide`."""
    return (claim_namespace(namespace), key, PREDICATE)


# --- the catalog: which items exist, per State --------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Catalog:
    """Every item key holding an active claim, whoever may see it (reads ask the View).

    ``keys``: (namespace, scope) -> sorted keys; ``scopes``: namespace -> sorted scopes in
    ``keys``; ``namespaces``: sorted. Made from the previous State's catalog and the loci that
    changed since when there is one (a write costs the namespaces it touches, not the store);
    a test holds it equal to the one made from scratch."""

    keys: Mapping[tuple[Namespace, str], tuple[str, ...]]
    scopes: Mapping[Namespace, tuple[str, ...]]
    namespaces: tuple[Namespace, ...]

    def keys_in(self, namespace: Namespace) -> Iterator[str]:
        """The keys of ``namespace`` in every scope, sorted, each once."""
        scopes = self.scopes.get(namespace, ())
        if len(scopes) == 1:
            return iter(self.keys[(namespace, scopes[0])])
        return _unique(merge(*(self.keys[(namespace, s)] for s in scopes)))

    def under(self, prefix: Namespace) -> Iterator[Namespace]:
        """Namespaces starting with ``prefix``, sorted (they are contiguous when sorted)."""
        spaces, n = self.namespaces, len(prefix)
        for i in range(bisect_left(spaces, prefix), len(spaces)):
            ns = spaces[i]
            if ns[:n] != prefix:
                return
            yield ns


def _unique(keys: Iterable[str]) -> Iterator[str]:
    last = None
    for k in keys:
        if k != last:
            yield k
            last = k


def _catalog_full(state: State) -> _Catalog:
    """The catalog of ``state`` from every active key."""
    keys: dict[tuple[Namespace, str], list[str]] = {}
    decoded: dict[str, Namespace | None] = {}
    for (name, subject, predicate), claims in state.active_by_key().items():
        if predicate != PREDICATE:
            continue
        if name not in decoded:
            decoded[name] = item_namespace(name)
        ns = decoded[name]
        if ns is None:
            continue
        for scope in sorted({c.scope for c in claims}):
            keys.setdefault((ns, scope), []).append(subject)  # subjects arrive in order
    return _made({k: tuple(v) for k, v in keys.items()})


def _made(keys: dict[tuple[Namespace, str], tuple[str, ...]]) -> _Catalog:
    scopes: dict[Namespace, list[str]] = {}
    for ns, scope in keys:
        scopes.setdefault(ns, []).append(scope)
    return _Catalog(
        keys=keys,
        scopes={ns: tuple(sorted(s)) for ns, s in scopes.items()},
        namespaces=tuple(sorted(scopes)),
    )


def _catalog(state: State) -> _Catalog:
    """`_catalog_full` of ``state``, from the previous State's catalog when there is one."""
    since = state.changes_since()
    if since is not None:
        made, touched = since
        prev = made.get(_catalog)
        if isinstance(prev, _Catalog):
            return _catalog_update(prev, state, touched)
    return _catalog_full(state)


def _catalog_update(
    prev: _Catalog, state: State, touched: frozenset[tuple[str, str, str, str]]
) -> _Catalog:
    changed: dict[tuple[Namespace, str], dict[str, bool]] = {}
    for name, subject, predicate, scope in touched:
        if predicate != PREDICATE:
            continue
        ns = item_namespace(name)
        if ns is not None:
            there = bool(state.active_at(name, subject, predicate, scope))
            changed.setdefault((ns, scope), {})[subject] = there
    if not changed:
        return prev
    keys = dict(prev.keys)
    for place, held in changed.items():
        before = keys.get(place, ())
        if 8 * len(held) > len(before) + 64:  # many: one sort beats many list inserts
            kept = set(before)
            kept.update(k for k, there in held.items() if there)
            kept.difference_update(k for k, there in held.items() if not there)
            now = sorted(kept)
        else:
            now = list(before)
            for subject, there in held.items():
                i = bisect_left(now, subject)
                found = i < len(now) and now[i] == subject
                if there and not found:
                    now.insert(i, subject)
                elif found and not there:
                    del now[i]
        if now:
            keys[place] = tuple(now)
        else:
            keys.pop(place, None)
    if all(place in prev.keys for place in changed) and all(place in keys for place in changed):
        return _Catalog(keys, prev.scopes, prev.namespaces)  # no (namespace, scope) came or went
    return _made(keys)


# --- filters ------------------------------------------------------------------------------------


def _is_number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _equal(a: object, b: object) -> bool:
    """Equality of JSON-like values where numbers are numbers and ``bool`` is not one."""
    t = type(a)
    if t is type(b) and t in _SCALARS:
        return a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, Mapping)) or isinstance(b, (list, tuple, Mapping)):
        return False
    return a is b or (type(a) is type(b) and a == b)  # None, bool, bytes


def _order(a: object, b: object) -> int | None:
    """-1, 0 or 1 when ``a`` and ``b`` are both numbers or both strings, else None."""
    if (_is_number(a) and _is_number(b)) or (isinstance(a, str) and isinstance(b, str)):
        less: bool = a < b  # type: ignore[operator]
        more: bool = a > b  # type: ignore[operator]
        return more - less
    return None


def _is_operators(cond: object) -> bool:
    return isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond)


def _check_filter(cond: object, field: str) -> None:
    """Refuse a malformed filter before anything runs (naming the field it sits at)."""
    if not isinstance(cond, Mapping):
        return
    if _is_operators(cond):
        for op, arg in cond.items():
            if op not in _OPERATORS:
                raise LangGraphStoreError(
                    field,
                    "filter-operator",
                    f"unknown operator {op!r}; allowed: {', '.join(sorted(_OPERATORS))}",
                )
            if op in _ORDERING and not (_is_number(arg) or isinstance(arg, str)):
                raise LangGraphStoreError(
                    field, "filter-comparable", f"{op} compares numbers or strings, not {arg!r}"
                )
        return
    for name, sub in cond.items():
        if not isinstance(name, str):
            raise LangGraphStoreError(field, "filter-field", f"field {name!r} is not a str")
        _check_filter(sub, f"{field}.{name}")


def _apply(op: str, present: bool, value: object, arg: object) -> bool:
    if op == "$ne":
        return not present or not _equal(value, arg)
    if not present:
        return False
    if op == "$eq":
        return _equal(value, arg)
    order = _order(value, arg)
    if order is None:
        return False
    if op == "$gt":
        return order > 0
    if op == "$gte":
        return order >= 0
    if op == "$lt":
        return order < 0
    return order <= 0  # $lte


_MISSING = object()
#: A field test: (whether the field is there, its value) -> matches.
_FieldTest = Callable[[bool, object], bool]


def _compile(cond: Mapping[str, Any]) -> Callable[[object], bool]:
    """The test a (checked) filter map stands for, made once per search and run per item."""
    tests = [(name, tuple(name.split(".")), _compile_field(sub)) for name, sub in cond.items()]

    def test(value: object) -> bool:
        if not isinstance(value, Mapping):
            return False
        for name, path, field_test in tests:
            v = value.get(name, _MISSING)
            if v is _MISSING and len(path) > 1:
                v = _at_path(value, path)
            if not field_test(v is not _MISSING, v):
                return False
        return True

    return test


def _at_path(value: Mapping[str, Any], path: tuple[str, ...]) -> object:
    """The field a dotted filter name (``"user.level"``) reaches through nested maps, as in
    LangGraph's SQLite and Postgres stores; `_MISSING` if a step is absent or not a map."""
    at: object = value
    for step in path:
        if not isinstance(at, Mapping):
            return _MISSING
        at = at.get(step, _MISSING)
        if at is _MISSING:
            return _MISSING
    return at


def _compile_field(cond: object) -> _FieldTest:
    if _is_operators(cond):
        assert isinstance(cond, Mapping)
        ops = list(cond.items())
        return lambda present, v: all(_apply(op, present, v, arg) for op, arg in ops)
    if isinstance(cond, Mapping):
        inner = _compile(cond)
        return lambda present, v: present and inner(v)
    return lambda present, v: present and _equal(v, cond)


# --- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Found:
    """One item as the View shows it: its selected claim, or its unresolved conflict."""

    namespace: Namespace
    key: str
    selected: ClaimAdded | None
    conflict: SurfacedConflict | None
    #: The names the space's authors declared (a conflict's candidates carry them).
    names: AuthorNames
    #: How the selected value was chosen over other values the lens sees (None: no contest).
    contest: Contest | None = None

    @property
    def claims(self) -> tuple[ClaimAdded, ...]:
        if self.conflict is not None:
            return self.conflict.candidates
        assert self.selected is not None
        return (self.selected,)


@dataclass(frozen=True, slots=True)
class _Seen:
    """One State through the store's lens: its View and the View's conflicts by key, and the
    names authors declared when it was seen."""

    state: State
    view: View
    conflicts: Mapping[Key, SurfacedConflict]
    names: AuthorNames

    def find(self, namespace: Namespace, key: str) -> _Found | None:
        """The item at ``namespace`` (labels already checked) and ``key``, if the lens sees it."""
        return self.find_at(_name_of(namespace), namespace, key)

    def find_at(self, name: str, namespace: Namespace, key: str) -> _Found | None:
        k = (name, key, PREDICATE)
        conflict = self.conflicts.get(k)
        if conflict is not None:
            return _Found(namespace, key, None, conflict, self.names)
        selection = self.view.selected.get(k)
        if selection is None:
            return None
        contest = self.view.contested.get(k) or _preserved_contest(self.view, k, selection)
        return _Found(namespace, key, selection.claim, None, self.names, contest)


def _preserved_contest(view: View, k: Key, selection: Selection) -> Contest | None:
    """A key a ``preserve`` decision settled, as the contest its item carries: the value shown
    is one accepted alternative, ``others`` the rest (``how`` ``preserved``, ``outcome``
    ``preserve``), so a graph reading the item sees every value kept."""
    kept = view.preserved.get(k) if view.preserved else None
    if kept is None:
        return None
    others = tuple(g for g in kept.groups if selection.claim not in g)
    return Contest(
        k, kept.scope, kept.locus, kept.conflict_id, How.PRESERVED, "decision", others, "preserve"
    )


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _item_value(v: Value) -> dict[str, Any]:
    plain = plain_value(v)
    # A map at an item key unless other code wrote something else there: shown, not hidden.
    return plain if isinstance(plain, dict) else {"__value__": plain}


def _author_name(c: ClaimAdded, names: AuthorNames) -> str | None:
    return names.get(c.author) if isinstance(c.author, bytes) else None


#: Hex digits of the ids a conflicted item shows (as the command line's tables do): enough to
#: name a claim (`State.claim` and ``statefuse decide`` take a unique prefix of 8 or more), and
#: no 64-digit string for the model to read.
SHORT_ID_CHARS = 12


def _short(ident: bytes) -> str:
    return ident.hex()[:SHORT_ID_CHARS]


def _value_of(found: _Found) -> dict[str, Any]:
    conflict = found.conflict
    if conflict is None:
        assert found.selected is not None
        return _item_value(found.selected.value)
    names = found.names
    return {
        CONFLICT_FIELD: {
            "namespace": list(found.namespace),
            "key": found.key,
            "conflict_id": _short(conflict.conflict_id),
            "not_shown": conflict.not_shown,
            **_deferred_metadata(conflict, names),
            "candidates": [
                {
                    "value": plain_value(c.value),
                    "author": names.label(c.author),
                    "author_name": _author_name(c, names),
                    "claim_id": _short(c.claim_id),
                    "provenance": c.provenance,
                    "updated_at": _when(c.wall_ms).isoformat(),
                }
                for c in conflict.candidates
            ],
        }
    }


def _deferred_metadata(conflict: SurfacedConflict, names: AuthorNames) -> dict[str, Any]:
    """``{"deferred": {...}}`` for a conflict a ``defer`` decision left open, else nothing."""
    d = conflict.deferred
    if d is None:
        return {}
    return {
        "deferred": {
            "outcome": "defer",
            "author": names.label(d.author),
            "reason": d.reason,
            "decision_id": _short(d.decision_id),
        }
    }


class ContestedItem(Item):
    """An `Item` whose value a decision, the registry's policy or the store's resolver chose
    over other values the lens sees: ``contested`` says how and lists the other values with
    their authors (`contested_metadata`). The value is the chosen one, as for any item."""

    __slots__ = ("contested",)

    def __init__(self, *, contested: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.contested = contested

    def dict(self) -> dict[str, Any]:
        return _with_contest(super().dict(), self.contested)


class ContestedSearchItem(SearchItem):
    """A `SearchItem` with the ``contested`` metadata of `ContestedItem`."""

    __slots__ = ("contested",)

    def __init__(self, *, contested: dict[str, Any], **kw: Any) -> None:
        super().__init__(**kw)
        self.contested = contested

    def dict(self) -> dict[str, Any]:
        return _with_contest(super().dict(), self.contested)


def _with_contest(out: dict[str, Any], contested: dict[str, Any]) -> dict[str, Any]:
    out["contested"] = contested
    return out


def contested_metadata(found: _Found) -> dict[str, Any] | None:
    """The item's contest as data, in the graph's words: its ``namespace`` and ``key`` as the
    graph wrote them, how and by what it was settled (``how``, ``by``), the chosen claim's id
    and each other value with its claims and authors (ids cut to `SHORT_ID_CHARS` hex digits,
    authors by their declared name, else their first hex digits). None: no contest."""
    contest = found.contest
    if contest is None or found.selected is None:
        return None
    names = found.names
    return {
        "namespace": list(found.namespace),
        "key": found.key,
        "scope": contest.scope,
        "conflict_id": _short(contest.conflict_id),
        "how": contest.how.value,
        "by": contest.by,
        **({"outcome": contest.outcome} if contest.outcome else {}),
        "claim_id": _short(found.selected.claim_id),
        "others": [
            {
                "value": plain_value(group[0].value),
                "claims": [_short(c.claim_id) for c in group],
                "authors": [names.label(a) for a in authors],
                "author_names": [names.get(a) if isinstance(a, bytes) else None for a in authors],
            }
            for group, authors in zip(contest.others, contest.authors, strict=True)
        ],
    }


def _item(found: _Found) -> Item:
    walls = [c.wall_ms for c in found.claims]
    contested = contested_metadata(found)
    if contested is not None:
        return ContestedItem(
            contested=contested,
            value=_value_of(found),
            key=found.key,
            namespace=found.namespace,
            created_at=_when(min(walls)),
            updated_at=_when(max(walls)),
        )
    return Item(
        value=_value_of(found),
        key=found.key,
        namespace=found.namespace,
        created_at=_when(min(walls)),
        updated_at=_when(max(walls)),
    )


def _search_item(found: _Found, score: float | None) -> SearchItem:
    walls = [c.wall_ms for c in found.claims]
    contested = contested_metadata(found)
    if contested is not None:
        return ContestedSearchItem(
            contested=contested,
            namespace=found.namespace,
            key=found.key,
            value=_value_of(found),
            created_at=_when(min(walls)),
            updated_at=_when(max(walls)),
            score=score,
        )
    return SearchItem(
        namespace=found.namespace,
        key=found.key,
        value=_value_of(found),
        created_at=_when(min(walls)),
        updated_at=_when(max(walls)),
        score=score,
    )


def _namespace_matches(condition: MatchCondition, ns: Namespace) -> bool:
    path = condition.path
    if len(ns) < len(path):
        return False
    part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == label for p, label in zip(path, part, strict=True))


# --- embeddings ---------------------------------------------------------------------------------

Vector = tuple[tuple[float, ...], float]  # the vector and its norm


@dataclass(frozen=True, slots=True)
class _Index:
    """The store's embedding config, checked: LangGraph's ``IndexConfig`` made usable."""

    embeddings: Embeddings
    dims: int | None
    fields: tuple[tuple[str, str | list[str]], ...]
    #: What the vectors are stored under (`statefuse.retrieval.vectorstore`).
    name: str


def _index_config(index: IndexConfig | None) -> _Index | None:
    if index is None:
        return None
    if not isinstance(index, Mapping) or index.get("embed") is None:
        raise LangGraphStoreError("index", "embed", "an index config needs 'embed'")
    dims = index.get("dims")
    if dims is not None and (type(dims) is not int or dims < 1):
        raise LangGraphStoreError("index.dims", "positive-int", f"{dims!r} is not an int >= 1")
    fields = _fields(index.get("fields"), "index")
    paths = ",".join(p for p, _ in fields)
    name = f"langgraph:{embedder_name(index['embed'])}:{paths}"
    return _Index(ensure_embeddings(index["embed"]), dims, fields, name)


def embedder_name(embed: object) -> str:
    """A name for the model of LangGraph's ``index["embed"]``: the string itself
    (``"openai:text-embedding-3-small"``), ``module:qualname`` of a function, or of an
    ``Embeddings`` class plus its ``model`` (or ``model_name``) when it has one."""
    if isinstance(embed, str):
        return embed
    if callable(embed) and not hasattr(embed, "embed_documents"):
        module = getattr(embed, "__module__", None) or type(embed).__module__
        qual = getattr(embed, "__qualname__", None) or type(embed).__qualname__
        return f"{module}:{qual}"
    kind = type(embed)
    model = getattr(embed, "model", None) or getattr(embed, "model_name", None)
    base = f"{kind.__module__}:{kind.__qualname__}"
    return f"{base}:{model}" if isinstance(model, str) and model else base


def _fields(paths: object, field: str) -> tuple[tuple[str, str | list[str]], ...]:
    if paths is None:
        paths = ["$"]
    if isinstance(paths, str) or not isinstance(paths, (list, tuple)):
        raise LangGraphStoreError(field, "paths", f"expected a list of field paths, got {paths!r}")
    out: list[tuple[str, str | list[str]]] = []
    for p in paths:
        if not isinstance(p, str) or not p:
            raise LangGraphStoreError(field, "paths", f"{p!r} is not a field path")
        out.append((p, p if p == "$" else tokenize_path(p)))
    return tuple(out)


def _texts(value: Value, fields: Sequence[tuple[str, str | list[str]]]) -> list[str]:
    plain = plain_value(value)
    if not isinstance(plain, dict):
        return []
    return [t for _, tokens in fields for t in get_text_at_path(plain, tokens)]


def _cosine(q: Vector, v: Vector) -> float:
    if not q[1] or not v[1]:
        return 0.0
    dot: float = sum(map(mul, q[0], v[0]))
    return dot / (q[1] * v[1])


# --- one batch ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Hits:
    """What a search found, in (namespace, key) order, as parallel lists: a search that meets
    many items makes no object per item (each would be more work for the garbage collector),
    only per item of the page it returns (`found`)."""

    names: AuthorNames
    namespaces: list[Namespace] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    #: Per item: its selected claim, or its unresolved conflict.
    entries: list[ClaimAdded | SurfacedConflict] = field(default_factory=list)
    #: The View's contested selections (`View.contested`), for the items of the page.
    contested: Mapping[Key, Contest] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    def found(self, i: int) -> _Found:
        e = self.entries[i]
        if isinstance(e, ClaimAdded):
            ns, key = self.namespaces[i], self.keys[i]
            contest = self.contested.get((_name_of(ns), key, PREDICATE)) if self.contested else None
            return _Found(ns, key, e, None, self.names, contest)
        return _Found(self.namespaces[i], self.keys[i], None, e, self.names)

    def claims(self) -> Iterator[ClaimAdded]:
        for e in self.entries:
            if isinstance(e, ClaimAdded):
                yield e
            else:
                yield from e.candidates


@dataclass(slots=True)
class _Search:
    """A search op of the batch: the items it found."""

    at: int
    op: SearchOp
    hits: _Hits


@dataclass(slots=True)
class _Put:
    namespace: Namespace
    key: str
    #: The claim value (None: delete).
    value: Value
    #: Index into `_Work.texts` of this put's first text, and how many it has (None: the
    #: item has no vectors, as the put asked with ``index=False`` or the store has no index).
    texts: tuple[int, int] | None = None


@dataclass(slots=True)
class _Work:
    """A batch between its read and write halves (the embedding calls go between them)."""

    results: list[Result]
    searches: list[_Search] = field(default_factory=list)
    puts: dict[tuple[Namespace, str], _Put] = field(default_factory=dict)
    #: Texts to embed as documents, and for each claim id already stored the slice of them
    #: that is its vectors.
    texts: list[str] = field(default_factory=list)
    claim_texts: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)

    def add_texts(self, texts: list[str]) -> tuple[int, int]:
        start = len(self.texts)
        self.texts.extend(texts)
        return (start, len(texts))


def _check_page(op: SearchOp | ListNamespacesOp) -> None:
    for name in ("limit", "offset"):
        v = getattr(op, name)
        if type(v) is not int or v < 0:
            raise LangGraphStoreError(name, "non-negative-int", f"{v!r} is not an int >= 0")


def _check_key(key: object, field: str = "key") -> str:
    if not isinstance(key, str):
        raise LangGraphStoreError(field, "str", f"expected a str, got {type(key).__name__}")
    return key


def _listed(
    op: ListNamespacesOp, spaces: Iterable[Namespace], shown: Callable[[Namespace], bool]
) -> list[Namespace]:
    """The page of namespaces ``op`` lists, from ``spaces`` (sorted) and whether a namespace
    has an item the lens sees (asked only of those the answer depends on)."""
    conditions = op.match_conditions or ()
    out: list[Namespace] = []
    last: Namespace | None = None
    for ns in spaces:
        if not all(_namespace_matches(c, ns) for c in conditions):
            continue
        short = ns if op.max_depth is None else ns[: op.max_depth]
        if short == last:
            continue  # namespaces are sorted, so a truncated one repeats in a row
        if shown(ns):
            out.append(short)
            last = short
    if op.max_depth is not None:
        out = sorted(set(out))
    return out[op.offset : op.offset + op.limit]


def _after(text: str) -> str:
    """The least text past every text that starts with ``text`` (its last character moved on
    by one code point)."""
    return text[:-1] + chr(ord(text[-1]) + 1)


def _items_under(index: StoreIndex, prefix: Namespace) -> list[bytes]:
    """The loci of the items under the item namespace ``prefix`` (of every item for ``()``),
    read from the derived state: the claim namespace itself and those nested in it."""
    if not prefix:  # "lg" itself names no item (`item_namespace`): the catalog leaves it out
        return index.namespace_loci(CLAIM_PREFIX[:-1], nested=CLAIM_PREFIX[-1], predicate=PREDICATE)
    return index.namespace_loci(_name_of(prefix), nested=SEPARATOR, predicate=PREDICATE)


@dataclass(slots=True)
class _Queued:
    """One `StateFuseStore.abatch` call waiting for its loop's next batch."""

    ops: list[Op]
    future: asyncio.Future[list[Result]]


class StateFuseStore(BaseStore):
    """LangGraph's `BaseStore` over a `Replica` (see the module docstring for the semantics).

    ``lens`` says who reads (roles, task, session; default: a viewer with no roles, global
    claims only); ``resolver`` may select a candidate of a conflict for reads (default: none,
    conflicts are shown); ``index`` is LangGraph's embedding config; ``provenance`` is written
    on every claim. Thread-safe (one lock around the replica, which is not). The replica stays
    the caller's: sync it (`Replica.merge`, `Replica.receive`, HTTP) and close it as usual;
    `open` and `memory` make a store that owns its replica (`close` closes it).
    """

    __slots__ = (
        "_corpus",
        "_dims",
        "_index",
        "_lock",
        "_owns",
        "_prune_at",
        "_queued",
        "_queued_lock",
        "_ranker",
        "_seen",
        "_stored",
        "_vectors",
        "embeddings",
        "index_config",
        "lens",
        "provenance",
        "replica",
        "resolver",
    )

    def __init__(
        self,
        replica: Replica,
        *,
        lens: Lens | None = None,
        index: IndexConfig | None = None,
        resolver: Resolver | None = None,
        provenance: str = DEFAULT_PROVENANCE,
    ) -> None:
        if not isinstance(replica, Replica):
            raise LangGraphStoreError(
                "replica", "replica", f"expected a Replica, got {type(replica).__name__}"
            )
        if lens is not None and not isinstance(lens, Lens):
            raise LangGraphStoreError("lens", "lens", f"expected a Lens, got {lens!r}")
        self.replica = replica
        self.lens = lens if lens is not None else Lens()
        self.resolver = resolver
        self.provenance = provenance
        self._index = _index_config(index)
        #: LangGraph's own stores expose the config they were given and its embeddings.
        self.index_config: IndexConfig | None = (
            None if index is None else cast("IndexConfig", dict(index))
        )
        self.embeddings: Embeddings | None = None if self._index is None else self._index.embeddings
        #: Where vectors persist (None: no index); the vector length once known.
        self._stored: VectorStore | None = None if self._index is None else replica.vectors()
        self._dims = None if self._index is None else self._index.dims
        self._lock = threading.Lock()
        self._owns = False
        self._ranker = LexicalRanker()
        #: The claims the last lexical search ranked (see `_page`).
        self._corpus: tuple[ClaimAdded, ...] = ()
        self._seen: _Seen | None = None
        #: Claim id -> its vectors (empty: kept without, by the put's choice).
        self._vectors: dict[bytes, tuple[Vector, ...]] = {}
        #: Prune `_vectors` of retracted claims when it grows past this many.
        self._prune_at = PRUNE_MARGIN
        #: Async calls waiting for their event loop's next batch (`abatch`), by loop.
        self._queued: dict[asyncio.AbstractEventLoop, list[_Queued]] = {}
        self._queued_lock = threading.Lock()

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        lens: Lens | None = None,
        index: IndexConfig | None = None,
        resolver: Resolver | None = None,
        provenance: str = DEFAULT_PROVENANCE,
        **replica: Any,
    ) -> StateFuseStore:
        """A store over the SQLite replica `Replica.open` opens with ``replica`` (e.g.
        ``create=True, space="team"``); `close` closes it."""
        store = cls(
            Replica.open(path, **replica),
            lens=lens,
            index=index,
            resolver=resolver,
            provenance=provenance,
        )
        store._owns = True
        return store

    @classmethod
    def memory(
        cls,
        *,
        space: str,
        lens: Lens | None = None,
        index: IndexConfig | None = None,
        resolver: Resolver | None = None,
        provenance: str = DEFAULT_PROVENANCE,
        **replica: Any,
    ) -> StateFuseStore:
        """A store over a new `Replica.memory` of ``space``."""
        store = cls(
            Replica.memory(space=space, **replica),
            lens=lens,
            index=index,
            resolver=resolver,
            provenance=provenance,
        )
        store._owns = True
        return store

    def findings(self) -> list[dict[str, Any]]:
        """The conflicts across items that the space's detectors found (SEMANTICS §5) and
        this store's lens sees, in the graph's words: ``type``, ``detector``, ``reason``,
        ``witness`` (the numbers; both None when it names a claim the lens may not see),
        ``open`` (no decision settles it), ``items`` (each claim that is an item: its
        ``namespace`` and ``key``) and ``keys`` (claim keys of the others, as
        ``namespace/subject/predicate``), ``not_shown`` (claims the lens may not see) and the
        ``conflict_id`` (cut to `SHORT_ID_CHARS` hex digits). Reads the conflicts alone on a
        replica opened on its derived state (`Replica.conflicts`)."""
        page = self.replica.conflicts()
        view = project(page.state, self.lens, resolver=self.resolver)
        out = []
        for f in view.findings:
            items, keys = [], []
            for c in f.candidates:
                ns = item_namespace(c.namespace) if c.predicate == PREDICATE else None
                if ns is None:
                    keys.append(f"{c.namespace}/{c.subject}/{c.predicate}")
                else:
                    items.append({"namespace": list(ns), "key": c.subject})
            out.append(
                {
                    "type": f.finding,
                    "detector": f.detector,
                    "reason": f.reason or None,
                    "witness": None if f.witness is None else plain_value(dict(f.witness)),
                    "open": f.open,
                    "items": items,
                    "keys": sorted(set(keys)),
                    "not_shown": f.not_shown,
                    "conflict_id": _short(f.conflict_id),
                }
            )
        return out

    def close(self) -> None:
        """Close the replica if this store opened it (`open`, `memory`)."""
        if self._owns:
            self.replica.close()

    def __enter__(self) -> StateFuseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- BaseStore -------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: reads see the store as it was before the batch, then every write
        becomes one signed change. Results in op order (None for puts)."""
        with self._lock:
            work = self._read(ops)
        docs, queries = self._embed(work)
        with self._lock:
            return self._write(work, docs, queries)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch`, awaiting the embedding calls (the replica's work itself is synchronous).

        Calls made concurrently on one event loop are joined: each is checked on its own (a
        bad op fails its call only), then every call waiting when the loop next runs becomes
        one batch (reads first, then one signed change), and each call gets its ops' results.
        A call cancelled while it waits is left out."""
        ops = list(ops)
        for op in ops:
            self._check(op)
        loop = asyncio.get_running_loop()
        waiting = _Queued(ops, loop.create_future())
        with self._queued_lock:
            queue = self._queued.setdefault(loop, [])
            queue.append(waiting)
            first = len(queue) == 1
        if first:
            loop.call_soon(self._start_joined, loop)
        return await waiting.future

    def _start_joined(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._queued_lock:
            calls = self._queued.pop(loop, [])
        calls = [c for c in calls if not c.future.done()]
        if calls:
            # a task keeps its own reference through the loop until it ends
            loop.create_task(self._joined(calls))

    async def _joined(self, calls: list[_Queued]) -> None:
        """Run ``calls`` as one batch and hand each its results (or the batch's error)."""
        try:
            with self._lock:
                work = self._read([op for c in calls for op in c.ops])
            docs, queries = await self._aembed(work)
            with self._lock:
                results = self._write(work, docs, queries)
        except BaseException as exc:  # every call of the batch learns why it failed
            for c in calls:
                if c.future.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    c.future.cancel()
                else:
                    c.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        at = 0
        for c in calls:
            if not c.future.done():
                c.future.set_result(results[at : at + len(c.ops)])
            at += len(c.ops)

    # --- the read half ---------------------------------------------------------------------------

    def _look(self) -> _Seen:
        """The current State through the lens (kept until the State changes)."""
        state, names = self.replica.state(), self.replica.author_names()
        seen = self._seen
        if seen is None or seen.state is not state:
            view = project(state, self.lens, resolver=self.resolver)
            conflicts = {c.key: c for c in view.surfaced_conflicts}
            seen = self._seen = _Seen(state, view, conflicts, names)
        elif seen.names is not names:  # a name declared since: the View still holds
            seen = self._seen = _Seen(state, seen.view, seen.conflicts, names)
        return seen

    def _look_lazily(self, ops: Sequence[Op]) -> tuple[_Seen, dict[int, list[Namespace]]] | None:
        """What the reads of ``ops`` see, read from the store's derived state alone (a replica
        opened on it: `Replica.loaded` False), so a read costs what it reads: a get its key, a
        search the items under its namespace prefix, a namespace listing a seek per namespace
        and the first items of each until one is seen. Returns the items through the lens and
        the listings' results by position; None when the replica holds its history (`_look`
        then projects the State it keeps), or for a query search with an embedding index
        (the vectors are kept in this process, by claim id, for the claims it has met)."""
        replica = self.replica
        if replica.loaded:
            return None
        if self._index is not None and any(isinstance(op, SearchOp) and op.query for op in ops):
            return None
        with replica.lock:
            index = replica.index
            if index is None:
                return None
            names = replica.author_names()
            registry = replica.registry
            with replica.store.read_transaction():
                loci: list[bytes] = []
                listed: dict[int, list[Namespace]] = {}
                for at, op in enumerate(ops):
                    if isinstance(op, GetOp):
                        if op.namespace and op.key:
                            prefix = (_name_of(op.namespace), op.key, PREDICATE)
                            loci += index.loci(prefix=prefix)
                    elif isinstance(op, SearchOp):
                        loci += _items_under(index, tuple(op.namespace_prefix))
                    elif isinstance(op, ListNamespacesOp):
                        listed[at] = self._namespaces_of(index, op, names)
                state = index.state_of(loci, registry=registry, retracted=False)
        return self._seen_in(state, names), listed

    def _seen_in(self, state: State, names: AuthorNames) -> _Seen:
        view = project(state, self.lens, resolver=self.resolver)
        conflicts = {c.key: c for c in view.surfaced_conflicts}
        return _Seen(state, view, conflicts, names)

    def _namespaces_of(
        self, index: StoreIndex, op: ListNamespacesOp, names: AuthorNames
    ) -> list[Namespace]:
        """`_namespaces` from the derived state: the namespaces holding items, each looked at
        (a few items at a time) only until one of its items is seen through the lens."""
        registry = self.replica.registry
        found = index.namespaces_between(CLAIM_PREFIX, _after(CLAIM_PREFIX), predicate=PREDICATE)
        spaces = sorted(ns for ns in map(item_namespace, found) if ns is not None)

        def shown(ns: Namespace) -> bool:
            name, offset = _name_of(ns), 0
            while True:
                loci = index.namespace_loci(
                    name, predicate=PREDICATE, limit=_LOOK_AHEAD, offset=offset
                )
                if not loci:
                    return False
                state = index.state_of(loci, registry=registry, retracted=False)
                seen = self._seen_in(state, names)
                catalog = state.derived(_catalog)
                if any(seen.find(ns, key) is not None for key in catalog.keys_in(ns)):
                    return True
                offset += len(loci)

        return _listed(op, spaces, shown)

    def _read(self, ops: Iterable[Op]) -> _Work:
        ops = list(ops)
        for op in ops:
            self._check(op)
        # a batch of writes only projects nothing (see `_apply`)
        reads = any(not isinstance(op, PutOp) for op in ops)
        seen = None
        listed: dict[int, list[Namespace]] | None = None
        if reads:
            lazily = self._look_lazily(ops)
            if lazily is not None:
                seen, listed = lazily
        if reads and seen is None:
            seen = self._look()
        work = _Work(results=[None] * len(ops))
        for at, op in enumerate(ops):
            if isinstance(op, PutOp):
                self._plan_put(work, op)
                continue
            assert seen is not None
            if isinstance(op, GetOp):
                found = seen.find(op.namespace, op.key) if op.namespace and op.key else None
                work.results[at] = _item(found) if found is not None else None
            elif isinstance(op, SearchOp):
                self._find(seen, work, at, op)
            else:
                assert isinstance(op, ListNamespacesOp)
                work.results[at] = listed[at] if listed is not None else self._namespaces(seen, op)
        return work

    def _check(self, op: object) -> None:
        """Refuse a malformed op before the batch does anything."""
        if isinstance(op, GetOp):
            _check_labels(op.namespace, "namespace")
            _check_key(op.key)
        elif isinstance(op, SearchOp):
            _check_labels(op.namespace_prefix, "namespace_prefix")
            _check_page(op)
            if op.filter is not None:
                if not isinstance(op.filter, Mapping) or _is_operators(op.filter):
                    raise LangGraphStoreError(
                        "filter", "fields", f"expected a map of field names, got {op.filter!r}"
                    )
                _check_filter(op.filter, "filter")
            if op.query is not None and not isinstance(op.query, str):
                raise LangGraphStoreError("query", "str", f"expected a str, got {op.query!r}")
        elif isinstance(op, ListNamespacesOp):
            _check_page(op)
            if op.max_depth is not None and (type(op.max_depth) is not int or op.max_depth < 1):
                raise LangGraphStoreError(
                    "max_depth", "positive-int", f"{op.max_depth!r} is not an int >= 1"
                )
            for condition in op.match_conditions or ():
                if condition.match_type not in ("prefix", "suffix"):
                    raise LangGraphStoreError(
                        "match_type", "prefix-or-suffix", f"{condition.match_type!r}"
                    )
                _check_labels(condition.path, f"{condition.match_type}")
        elif isinstance(op, PutOp):
            self._check_put(op)
        else:
            raise LangGraphStoreError(
                "ops", "op-type", f"not a LangGraph store op: {type(op).__name__}"
            )

    def _check_put(self, op: PutOp) -> None:
        key = _check_key(op.key)
        if op.value is None:  # a delete: of nothing, when the item cannot exist
            _check_labels(op.namespace, "namespace")
            return
        claim_namespace(op.namespace)
        if not key or len(key) > MAX_NAME_CHARS:
            raise LangGraphStoreError(
                "key", "name-length", f"an item key is 1..{MAX_NAME_CHARS} characters"
            )
        if not isinstance(op.value, Mapping):
            raise LangGraphStoreError(
                "value", "map", f"an item value is a map, not {type(op.value).__name__}"
            )
        if CONFLICT_FIELD in op.value:
            raise LangGraphStoreError(
                "value", "reserved-field", f"{CONFLICT_FIELD!r} marks conflicts on reading"
            )
        if op.ttl is not None:
            raise NotImplementedError(f"TTL is not supported by {type(self).__name__}")
        if op.index is not None and op.index is not False:
            _fields(op.index, "index")

    def _find(self, seen: _Seen, work: _Work, at: int, op: SearchOp) -> None:
        catalog = seen.state.derived(_catalog)
        ranked = bool(op.query)
        test = _compile(op.filter) if op.filter else None
        conflicts, selected = seen.conflicts, seen.view.selected
        # unranked results come in (namespace, key) order: the page ends the scan
        stop = None if ranked else op.offset + op.limit
        hits = _Hits(seen.names, contested=seen.view.contested)
        namespaces, keys, entries = hits.namespaces, hits.keys, hits.entries
        if stop != 0:
            for ns in catalog.under(tuple(op.namespace_prefix)):
                name = _name_of(ns)
                for key in catalog.keys_in(ns):  # `_Seen.find_at`, inlined: the hot loop
                    k = (name, key, PREDICATE)
                    conflict = conflicts.get(k)
                    entry: ClaimAdded | SurfacedConflict
                    if conflict is not None:
                        # a conflicted item matches when one of its candidates does
                        if test is not None and not any(test(c.value) for c in conflict.candidates):
                            continue
                        entry = conflict
                    else:
                        selection = selected.get(k)
                        if selection is None:
                            continue
                        entry = selection.claim
                        if test is not None and not test(entry.value):
                            continue
                    namespaces.append(ns)
                    keys.append(key)
                    entries.append(entry)
                    if len(keys) == stop:
                        break
                if len(keys) == stop:
                    break
        work.searches.append(_Search(at, op, hits))
        index = self._index
        if ranked and index is not None:
            self._prune(seen.state)
            assert op.query is not None
            if op.query not in work.queries:
                work.queries.append(op.query)
            self._load([c.claim_id for c in hits.claims() if c.claim_id not in self._vectors])
            for c in hits.claims():
                if c.claim_id not in self._vectors and c.claim_id not in work.claim_texts:
                    work.claim_texts[c.claim_id] = work.add_texts(_texts(c.value, index.fields))

    def _load(self, ids: list[bytes]) -> None:
        """Take the stored vectors of ``ids`` in (those the vector store holds)."""
        index, stored, dims = self._index, self._stored, self._dims
        if not ids or index is None or stored is None or dims is None:
            return
        for cid, vs in stored.get_all(index.name, dims, ids).items():
            self._vectors[cid] = tuple((v, math.sqrt(sum(map(mul, v, v)))) for v in vs)

    def _persist(self, rows: Mapping[bytes, tuple[Vector, ...]]) -> None:
        index, stored, dims = self._index, self._stored, self._dims
        if rows and index is not None and stored is not None and dims is not None:
            stored.put_all(
                index.name, dims, {cid: tuple(v for v, _ in vs) for cid, vs in rows.items()}
            )

    def _prune(self, state: State) -> None:
        """Drop the vectors of claims no longer active, once they are as many as those kept
        after the last pruning plus a margin (so pruning costs O(1) per write, amortized)."""
        if len(self._vectors) > self._prune_at:
            self._vectors = {c: v for c, v in self._vectors.items() if state.is_active(c)}
            self._prune_at = 2 * len(self._vectors) + PRUNE_MARGIN

    def _namespaces(self, seen: _Seen, op: ListNamespacesOp) -> list[Namespace]:
        catalog = seen.state.derived(_catalog)

        def shown(ns: Namespace) -> bool:
            return any(seen.find(ns, key) is not None for key in catalog.keys_in(ns))

        return _listed(op, catalog.namespaces, shown)

    def _plan_put(self, work: _Work, op: PutOp) -> None:
        ns = tuple(op.namespace)
        put = _Put(ns, op.key, None)
        if op.value is not None:
            put.value = frozen_value(dict(op.value), "value", depth=2)
            index = self._index
            if index is not None and op.index is not False:
                fields = index.fields if op.index is None else _fields(op.index, "index")
                put.texts = work.add_texts(_texts(put.value, fields))
        work.puts.pop((ns, op.key), None)  # the last write to a key wins, in its place
        work.puts[(ns, op.key)] = put

    # --- embedding (outside the lock) ------------------------------------------------------------

    def _embed(self, work: _Work) -> tuple[list[list[float]], dict[str, list[float]]]:
        index = self._index
        if index is None:
            return [], {}
        docs = index.embeddings.embed_documents(work.texts) if work.texts else []
        return docs, {q: index.embeddings.embed_query(q) for q in work.queries}

    async def _aembed(self, work: _Work) -> tuple[list[list[float]], dict[str, list[float]]]:
        index = self._index
        if index is None:
            return [], {}
        docs = await index.embeddings.aembed_documents(work.texts) if work.texts else []
        got = await asyncio.gather(*(index.embeddings.aembed_query(q) for q in work.queries))
        return docs, dict(zip(work.queries, got, strict=True))

    def _vector(self, raw: object) -> Vector:
        index = self._index
        assert index is not None
        if not isinstance(raw, (list, tuple)) or not all(_is_number(x) for x in raw):
            raise LangGraphStoreError(
                "embed", "vector", "the embedding function returned a non-vector"
            )
        if index.dims is not None and len(raw) != index.dims:
            raise LangGraphStoreError(
                "embed", "dims", f"a vector of {len(raw)} numbers, the index says {index.dims}"
            )
        if not all(math.isfinite(x) for x in raw):
            raise LangGraphStoreError("embed", "finite", "a vector holds NaN or an infinity")
        # 32-bit floats, as stored: a vector read back ranks as the one just computed
        v = float32([float(x) for x in raw])
        if self._dims is None:
            self._dims = len(v)
        return (v, math.sqrt(sum(map(mul, v, v))))

    # --- the write half --------------------------------------------------------------------------

    def _write(
        self, work: _Work, docs: list[list[float]], queries: dict[str, list[float]]
    ) -> list[Result]:
        if len(docs) != len(work.texts):
            raise LangGraphStoreError(
                "embed", "count", f"{len(docs)} vectors for {len(work.texts)} texts"
            )
        vectors = [self._vector(d) for d in docs]
        query_vectors = {q: self._vector(v) for q, v in queries.items()}

        def sliced(span: tuple[int, int]) -> tuple[Vector, ...]:
            return tuple(vectors[span[0] : span[0] + span[1]])

        fresh: dict[bytes, tuple[Vector, ...]] = {}
        for cid, span in work.claim_texts.items():
            self._vectors[cid] = fresh[cid] = sliced(span)
        for s in work.searches:
            work.results[s.at] = self._page(s, query_vectors)
        if work.puts:
            written = self._apply(work.puts)
            if self._index is not None:
                for put, claim in written:
                    spans = put.texts
                    got = sliced(spans) if spans is not None else ()
                    self._vectors[claim.claim_id] = fresh[claim.claim_id] = got
        self._persist(fresh)
        return work.results

    def _page(self, s: _Search, query_vectors: Mapping[str, Vector]) -> list[SearchItem]:
        op, hits = s.op, s.hits
        end = op.offset + op.limit
        if not op.query:
            return [
                _search_item(hits.found(i), None) for i in range(op.offset, min(end, len(hits)))
            ]
        # Per item ranked: its position in hits and its score (floats and ints in lists: no
        # object per item for the garbage collector to walk).
        ranked: list[int] = []
        scores: list[float] = []
        unranked: list[int] = []
        if self._index is not None:
            q, vectors = query_vectors[op.query], self._vectors
            for i, e in enumerate(hits.entries):
                cs = (e,) if isinstance(e, ClaimAdded) else e.candidates
                vs = [v for c in cs for v in vectors.get(c.claim_id, ())]
                if vs:
                    ranked.append(i)
                    scores.append(max(_cosine(q, v) for v in vs))
                else:
                    unranked.append(i)
        else:
            claims = tuple(hits.claims())
            if claims == self._corpus:  # compared by identity: claims have no __eq__
                claims = self._corpus  # the same tuple: the ranker keeps its postings
            self._corpus = claims
            get = self._ranker.scores(op.query, claims).get
            ranked = list(range(len(hits)))
            scores = [
                get(e.claim_id, 0.0)
                if isinstance(e, ClaimAdded)
                else max(get(c.claim_id, 0.0) for c in e.candidates)
                for e in hits.entries
            ]
        # best first; nlargest is a stable sort, so ties keep (namespace, key) order
        best = heapq.nlargest(end, range(len(ranked)), key=scores.__getitem__)
        page: list[tuple[float | None, int]] = [(scores[j], ranked[j]) for j in best]
        page += [(None, i) for i in unranked[: max(0, end - len(page))]]
        return [_search_item(hits.found(i), score) for score, i in page[op.offset : end]]

    def _apply(self, puts: Mapping[tuple[Namespace, str], _Put]) -> list[tuple[_Put, ClaimAdded]]:
        """Write the batch's puts and deletes as one signed change; the claims it added.

        Nothing of the State is held while writing: the replica's next State is then made by
        writing its index in place (copy-on-write copies only an index someone still reads), so
        a write costs what it adds, not what the store has ever held."""
        replica = self.replica
        self._seen = None  # projected again at the next read, carried from this one
        plan = self._deleted(puts) if any(put.value is None for put in puts.values()) else None
        written: list[tuple[_Put, ClaimAdded]] = []
        with replica.batch():
            for at, put in enumerate(puts.values()):
                if put.value is not None:
                    claim = replica.update(
                        claim_namespace(put.namespace),
                        put.key,
                        PREDICATE,
                        put.value,
                        provenance=self.provenance,
                    )
                    written.append((put, claim))
                    continue
                assert plan is not None
                for c in plan.get(at, ()):
                    replica.retract(c, reason="deleted through the LangGraph store")
                    self._vectors.pop(c.claim_id, None)
        return written

    def _keys_state(self, keys: Sequence[tuple[Namespace, str]]) -> State:
        """A State that agrees with the replica's at the item ``keys`` (every scope): read from
        the store's derived state on a replica opened on it, else the replica's State."""
        replica = self.replica
        if not replica.loaded:
            with replica.lock:
                index = replica.index
                if index is not None:
                    with replica.store.read_transaction():
                        loci = [
                            locus
                            for ns, key in keys
                            for locus in index.loci(prefix=(_name_of(ns), key, PREDICATE))
                        ]
                        return index.state_of(loci, registry=replica.registry, retracted=False)
        return replica.state()

    def _deleted(self, puts: Mapping[tuple[Namespace, str], _Put]) -> dict[int, list[ClaimAdded]]:
        """For each delete among ``puts`` (by position): the active claims it retracts, every
        author's that the lens sees. Only deletes read the State, and it is let go before the
        batch writes: on a replica opened on its derived state, the State of the deleted keys
        alone (`_keys_state`)."""
        keys = [(put.namespace, put.key) for put in puts.values() if put.value is None]
        state, lens = self._keys_state(keys), self.lens
        catalog = state.derived(_catalog)
        out: dict[int, list[ClaimAdded]] = {}
        for at, put in enumerate(puts.values()):
            if put.value is not None:
                continue
            name = claim_namespace(put.namespace)
            out[at] = [
                c
                for scope in catalog.scopes.get(put.namespace, ())
                if lens.sees_scope(scope)
                for c in state.active_at(name, put.key, PREDICATE, scope)
                if lens.sees_roles(c.visibility)
            ]
        return out
