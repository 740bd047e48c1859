"""The View: what one lens sees of a State, resolved or surfaced (SEMANTICS §7.5).

Invariant: a View holds only what its lens may see. Hidden claims appear nowhere in it — not as
values, ids, candidates, repair notes or explanations — only as a count under
``excluded["hidden"]``. Every visible conflict is either in ``selected`` (with how it was
chosen, and a `Contest` in ``contested`` naming the other visible values) or in ``unresolved``
and ``surfaced_conflicts`` with all its visible candidates.

``selected`` and ``explanations`` are read-only mappings in key order (`SelectedMap`,
`ExplanationMap`) that make the entry of a sole-candidate key when it is first read, so a
projection over a large memory costs what its conflicts cost, not what its keys cost.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar, Union

from statefuse.core.op import ClaimAdded
from statefuse.registry.value import Value
from statefuse.registry.value import json_value as json_value  # served here as before

if TYPE_CHECKING:
    from statefuse.reading.scrub import RetractedValues

Key = tuple[str, str, str]
_V = TypeVar("_V")


class How(Enum):
    """How a key's value was chosen."""

    SOLE = "sole candidate"
    AGREEMENT = "agreement"
    MULTI = "multi-valued"
    DECISION = "decision"
    POLICY = "registry policy"
    RESOLVER = "resolver"
    #: A ``preserve`` decision settled a conflict without a winner: like a multi-valued key,
    #: the selection's ``claims`` are every visible candidate, each an accepted alternative.
    PRESERVED = "preserved"


@dataclass(frozen=True, slots=True)
class Selection:
    """The chosen value of one key: ``claim`` is the representative, ``claims`` every selected
    claim (the agreeing group, or all values of a multi-valued predicate), sorted by id."""

    key: Key
    scope: str
    claim: ClaimAdded
    claims: tuple[ClaimAdded, ...]
    how: How
    reason: str


@dataclass(frozen=True, slots=True)
class SurfacedConflict:
    """A conflict this view could not resolve, with every candidate it may see.

    ``candidates`` and ``groups`` hold visible claims only. ``locus`` and ``conflict_id`` are
    the State's (hashes of the key and scope, and of the whole candidate set); a hash names no
    hidden candidate. ``not_shown`` counts the candidates this view does not show (hidden or
    expired), never which they are: their values are not here, so `Writer.decide_on` needs
    the State of this snapshot to record every value group of the conflict when it is not 0.
    """

    key: Key
    scope: str
    locus: bytes
    conflict_id: bytes
    candidates: tuple[ClaimAdded, ...]
    groups: tuple[tuple[ClaimAdded, ...], ...]
    reason: str
    error: str | None = None
    not_shown: int = 0
    #: The ``defer`` decision that acknowledged this conflict and left it open (who deferred
    #: it and why), or None.
    deferred: Deferral | None = None


@dataclass(frozen=True, slots=True)
class Deferral:
    """Who deferred a conflict (a ``defer`` decision: SEMANTICS §6) and why."""

    decision_id: bytes
    author: str | bytes
    reason: str
    lamport: int


@dataclass(frozen=True, slots=True)
class Preserved:
    """A conflict a ``preserve`` decision settled without a winner: every visible value is an
    accepted alternative (``groups``, visible claims only, by normal form), not an open
    question. The key's `Selection` (how `How.PRESERVED`) lists the same claims."""

    key: Key
    scope: str
    locus: bytes
    conflict_id: bytes
    groups: tuple[tuple[ClaimAdded, ...], ...]
    decision_id: bytes
    author: str | bytes
    reason: str


@dataclass(frozen=True, slots=True)
class SurfacedFinding:
    """A detector's finding (SEMANTICS §5) as one lens sees it.

    ``finding`` is its type (``"over-budget"``, or ``"detector-failed"``), ``detector`` the
    detector (``name@version``), ``key`` and ``scope`` its anchor; ``candidates`` the claims of
    it this lens may see, ``keys`` their keys, ``not_shown`` how many it may not (never which).
    A finding with a claim this lens may not see keeps its ``reason`` and ``witness`` back
    (``""`` and None, ``withheld`` True): they are worked out from every claim's value, so the
    numbers could tell a hidden value. A finding none of whose claims it may see is not here at
    all (`View.findings_not_shown` counts it). ``decided`` holds the reason of the decision
    that settles it (an applicable decision whose chosen claim this lens sees), else None:
    an open finding is unresolved, like a surfaced conflict."""

    finding: str
    detector: str
    key: Key
    scope: str
    locus: bytes
    conflict_id: bytes
    candidates: tuple[ClaimAdded, ...]
    keys: tuple[Key, ...]
    reason: str
    witness: Mapping[str, Value] | None
    not_shown: int = 0
    decided: str | None = None
    selected: ClaimAdded | None = None

    @property
    def withheld(self) -> bool:
        """True when the reason and witness are kept back (a claim of it is not shown)."""
        return self.not_shown > 0

    @property
    def open(self) -> bool:
        """True while no decision this lens sees settles it."""
        return self.decided is None


@dataclass(frozen=True, slots=True)
class Contest:
    """Why a selection is contested: a decision, the registry's policy or a resolver chose one
    value of a conflict this view sees, and the other values stay visible beside it.

    ``how`` is the selection's (`How.DECISION`, `How.POLICY` or `How.RESOLVER`) and ``by``
    names what settled it: ``"decision"``, the policy (``"latest"``, ``"authority"``) or the
    resolver (its class name). ``others`` holds the other candidate values as groups of
    agreeing claims (the View's order: by normal form, each by claim_id), visible claims only:
    a candidate the lens may not see is neither counted nor named here (SEMANTICS §7), so a
    conflict that only a hidden claim makes is no contest. ``conflict_id`` and ``locus`` are
    the State's hashes, as in `SurfacedConflict` (a hash names no hidden candidate).
    """

    key: Key
    scope: str
    locus: bytes
    conflict_id: bytes
    how: How
    by: str
    others: tuple[tuple[ClaimAdded, ...], ...]
    #: ``"merge"`` when a ``merge`` decision chose (the selected claim was written by the
    #: decider and combines the others it names), else ``""`` (a ``select`` decision, the
    #: policy or a resolver: ``how`` and ``by`` say which), so such a Contest reads as before.
    outcome: str = ""

    @property
    def values(self) -> tuple[Value, ...]:
        """The other candidate values, one per group (the value of its lowest claim id)."""
        return tuple(g[0].value for g in self.others)

    @property
    def authors(self) -> tuple[tuple[str | bytes, ...], ...]:
        """The authors of each other value, distinct and sorted, in the order of ``others``."""
        return tuple(tuple(sorted({c.author for c in g}, key=_author_order)) for g in self.others)


def _author_order(a: str | bytes) -> tuple[int, str]:
    return (0, a.hex()) if isinstance(a, bytes) else (1, a)


@dataclass(frozen=True, slots=True)
class StaleNote:
    """Why a visible claim needs review. Ids of claims the lens may not see are left out."""

    dependency: bytes | None
    replacements: tuple[bytes, ...]
    via: tuple[bytes, ...]


def sole_line(key: Key, claim: ClaimAdded) -> str:
    """The explanation of a key whose one visible claim is its only candidate."""
    return f"{'/'.join(key)} [{claim.scope}]: {claim.value!r} (only candidate)"


#: What a View's lazy mappings hold per key: a finished entry; a claim that is its key's only
#: candidate (the entry is made from it when read); or, in the projection's shared parts, the
#: key's finished `Selection` and explanation together.
_Entry = Union[_V, ClaimAdded, "tuple[Selection, str]"]


class Unordered(dict[Key, Any]):
    """A part of a `_Lazy` mapping whose insertion order is not key order (a projection
    carried from the View before patches a copy of its parts instead of rebuilding them in
    order): its items are sorted the first time the mapping is walked in order, then kept.
    Never changed once handed to a View."""

    __slots__ = ("_sorted",)

    def sorted_items(self) -> list[tuple[Key, Any]]:
        try:
            return self._sorted
        except AttributeError:
            # Keys are unique, so sorting (key, entry) pairs never compares entries.
            self._sorted: list[tuple[Key, Any]] = sorted(self.items())
            return self._sorted


class Layered(Mapping[Key, Any]):
    """A part of a `_Lazy` mapping made of a large ``base`` (shared with the parts it was made
    from, never changed) under a small ``top`` of entries set since, less the keys in
    ``gone``: a projection carried to the next State adds a key to a bucket of 100k without
    copying the bucket. Sorted when first walked in order, like `Unordered`; never changed."""

    __slots__ = ("_base", "_gone", "_len", "_sorted", "_top")

    def __init__(self, base: Mapping[Key, Any], top: dict[Key, Any], gone: frozenset[Key]) -> None:
        self._base = base
        self._top = top
        self._gone = gone
        self._len = len(base) - len(gone) + sum(1 for k in top if k not in base)
        self._sorted: list[tuple[Key, Any]] | None = None

    @classmethod
    def patched(
        cls, old: Mapping[Key, Any], new: Mapping[Key, Any], removed: Iterable[Key]
    ) -> Mapping[Key, Any]:
        """``old`` without the keys in ``removed``, then with ``new`` set: a `Layered` over
        ``old``'s base, or, once the layer on top grows past an eighth of it, one `Unordered`
        dict again (each entry is then copied once per many patches)."""
        if type(old) is Layered:
            base, top, gone = old._base, dict(old._top), set(old._gone)
        else:
            base, top, gone = old, {}, set()
        for key in removed:
            top.pop(key, None)
            if key in base:
                gone.add(key)
        for key, entry in new.items():
            top[key] = entry
            gone.discard(key)
        if len(top) + len(gone) <= len(base) // 8 + 32:
            return cls(base, top, frozenset(gone))
        merged = Unordered(base)
        for key in gone:
            del merged[key]
        merged.update(top)
        return merged

    def get(self, key: object, default: Any = None) -> Any:
        found = self._top.get(key)  # type: ignore[call-overload]
        if found is not None:
            return found
        if key in self._gone:
            return default
        return self._base.get(key, default)  # type: ignore[call-overload]

    def __getitem__(self, key: Key) -> Any:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __contains__(self, key: object) -> bool:
        return self.get(key) is not None

    def __iter__(self) -> Iterator[Key]:
        return (k for k, _ in self.sorted_items())

    def __len__(self) -> int:
        return self._len

    def sorted_items(self) -> list[tuple[Key, Any]]:
        if self._sorted is None:
            top, gone = self._top, self._gone
            below = [(k, v) for k, v in self._base.items() if k not in gone and k not in top]
            # Keys are unique, so sorting (key, entry) pairs never compares entries.
            self._sorted = sorted([*below, *top.items()])
        return self._sorted


def _in_order(source: Mapping[Key, Any]) -> Iterable[tuple[Key, Any]]:
    t = type(source)
    return source.sorted_items() if t is Unordered or t is Layered else source.items()  # type: ignore[attr-defined]


class _Lazy(Mapping[Key, _V]):
    """A read-only mapping, in key order, whose sole-candidate entries are made when read.

    ``parts`` and ``extra`` are mappings, each sorted by key (or an `Unordered`, sorted when
    walked), no key in two of them, to an `_Entry`. A projection of 100k keys thus makes 100k
    entries only for a reader who asks for all of them; made entries are kept, so each read
    returns the same object. The projection shares ``parts`` between Views (never changing
    them), and hands a View only parts whose claims its lens may see.
    """

    __slots__ = ("_extra", "_len", "_made", "_parts", "_shared")

    def __init__(
        self,
        parts: Sequence[Mapping[Key, _Entry[_V]]],
        extra: Mapping[Key, _Entry[_V]],
        *,
        shared: dict[Key, _V] | None = None,
    ) -> None:
        self._parts = tuple(p for p in parts if p)
        self._extra = extra
        self._len = len(extra) + sum(len(p) for p in self._parts)
        self._made: dict[Key, _V] = {}
        #: Entries made by other Views of this projection's lineage, reused when made from
        #: the very same claim (`_fits`): a View of the next State makes only what changed.
        self._shared = shared

    def _fits(self, made: _V, claim: ClaimAdded) -> bool:
        return False

    def _make(self, key: Key, claim: ClaimAdded) -> _V:
        raise NotImplementedError

    def _pick(self, prepared: tuple[Selection, str]) -> _V:
        raise NotImplementedError

    def _find(self, key: object) -> _Entry[_V] | None:
        entry: _Entry[_V] | None = self._extra.get(key)  # type: ignore[call-overload]
        if entry is not None:
            return entry
        for part in self._parts:
            entry = part.get(key)  # type: ignore[call-overload]
            if entry is not None:
                return entry
        return None

    def _entry(self, key: Key, entry: _Entry[_V]) -> _V:
        if isinstance(entry, tuple):
            return self._pick(entry)
        if not isinstance(entry, ClaimAdded):
            return entry
        made = self._made.get(key)
        if made is None:
            shared = self._shared
            if shared is None:
                made = self._made.setdefault(key, self._make(key, entry))
            else:
                found = shared.get(key)
                if found is None or not self._fits(found, entry):
                    found = shared[key] = self._make(key, entry)
                made = self._made.setdefault(key, found)
        return made

    def __getitem__(self, key: Key) -> _V:
        entry = self._find(key)
        if entry is None:
            raise KeyError(key)
        return self._entry(key, entry)

    def __contains__(self, key: object) -> bool:
        return self._find(key) is not None

    def _sources(self) -> list[Mapping[Key, _Entry[_V]]]:
        return [p for p in (self._extra, *self._parts) if p]

    def __iter__(self) -> Iterator[Key]:
        sources = self._sources()
        if len(sources) == 1 and type(sources[0]) is dict:
            return iter(sources[0])
        return (k for k, _ in self._pairs(sources))

    @staticmethod
    def _pairs(sources: list[Mapping[Key, _Entry[_V]]]) -> Iterable[tuple[Key, _Entry[_V]]]:
        if len(sources) == 1:
            return _in_order(sources[0])
        # Keys are unique across sources, so merging (key, entry) pairs never compares entries.
        return heapq.merge(*(_in_order(s) for s in sources))

    def _items(self) -> Iterator[tuple[Key, _V]]:
        pairs = self._pairs(self._sources())
        entry = self._entry
        for key, e in pairs:
            yield key, entry(key, e)

    def items(self) -> ItemsView[Key, _V]:
        return _ItemsView(self)

    def values(self) -> ValuesView[_V]:
        return _ValuesView(self)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return repr(dict(self.items()))


class _ItemsView(ItemsView[Key, _V]):
    """Walks the parts of a `_Lazy` in order rather than looking each key up again."""

    _mapping: _Lazy[_V]

    def __iter__(self) -> Iterator[tuple[Key, _V]]:
        return self._mapping._items()


class _ValuesView(ValuesView[_V]):
    _mapping: _Lazy[_V]

    def __iter__(self) -> Iterator[_V]:
        return (v for _, v in self._mapping._items())


class SelectedMap(_Lazy[Selection]):
    """``View.selected``: key -> `Selection`, sole-candidate selections made on first access."""

    __slots__ = ()

    def _make(self, key: Key, claim: ClaimAdded) -> Selection:
        return Selection(key, claim.scope, claim, (claim,), How.SOLE, "only candidate")

    def _fits(self, made: Selection, claim: ClaimAdded) -> bool:
        return made.claim is claim

    def _pick(self, prepared: tuple[Selection, str]) -> Selection:
        return prepared[0]


class ExplanationMap(_Lazy[str]):
    """``View.explanations``: key -> line, sole-candidate lines made on first access."""

    __slots__ = ()

    def _make(self, key: Key, claim: ClaimAdded) -> str:
        return sole_line(key, claim)

    def _pick(self, prepared: tuple[Selection, str]) -> str:
        return prepared[1]


@dataclass(frozen=True, slots=True)
class View:
    """The projection of a State through a Lens. Serialise with `to_json`."""

    selected: Mapping[Key, Selection]
    unresolved: tuple[Key, ...]
    surfaced_conflicts: tuple[SurfacedConflict, ...]
    stale: Mapping[bytes, tuple[StaleNote, ...]]
    excluded: Mapping[str, int]
    excluded_ids: Mapping[str, tuple[bytes, ...]]
    explanations: Mapping[Key, str]
    #: Key -> `Contest`, in key order, for each selected key whose value a decision, the
    #: registry's policy or a resolver chose among values this lens sees; a selection that
    #: no visible conflict preceded (sole candidate, agreement, multi-valued) has none.
    contested: Mapping[Key, Contest] = field(default_factory=dict)
    #: Key -> `Preserved`, in key order, for each key a ``preserve`` decision settled with
    #: every visible value accepted (its `Selection` lists them all, how `How.PRESERVED`).
    preserved: Mapping[Key, Preserved] = field(default_factory=dict)
    #: (this View's serial, the serial of the View it was carried over from or 0, the keys
    #: projected again since that one): lets context assembly carry its work over too.
    _lineage: tuple[int, int, frozenset[Key]] | None = field(
        default=None, compare=False, repr=False
    )
    #: The retracted claims this lens may see (roles, scope, not expired) whose values context
    #: assembly looks for in free text to scrub them (`statefuse.reading.scrub`); None: none.
    retracted: RetractedValues | None = field(default=None, compare=False, repr=False)
    #: The detectors' findings this lens sees (SEMANTICS §5), by locus: open ones are
    #: unresolved; see `SurfacedFinding`.
    findings: tuple[SurfacedFinding, ...] = ()
    #: How many findings this lens sees none of the claims of (counted only).
    findings_not_shown: int = 0

    @property
    def open_findings(self) -> tuple[SurfacedFinding, ...]:
        """The findings no decision this lens sees settles."""
        return tuple(f for f in self.findings if f.open)

    def to_json(self) -> str:
        """Deterministic JSON (sorted keys; ids in hex; bytes values as ``{"$bytes": hex}``)."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        out = self._to_dict()
        if self.preserved:  # left out when empty, so Views without outcomes read as before
            out["preserved"] = {"/".join(k): preserved_dict(p) for k, p in self.preserved.items()}
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {
            "selected": [_selection(s) for _, s in sorted(self.selected.items())],
            "unresolved": ["/".join(k) for k in self.unresolved],
            "surfaced_conflicts": [_conflict(c) for c in self.surfaced_conflicts],
            "stale": {
                cid.hex(): [
                    {
                        "dependency": n.dependency.hex() if n.dependency else None,
                        "replacements": [r.hex() for r in n.replacements],
                        "via": [v.hex() for v in n.via],
                    }
                    for n in notes
                ]
                for cid, notes in sorted(self.stale.items())
            },
            "excluded": dict(sorted(self.excluded.items())),
            "excluded_ids": {k: [i.hex() for i in v] for k, v in sorted(self.excluded_ids.items())},
            "explanations": {"/".join(k): v for k, v in sorted(self.explanations.items())},
            "contested": {"/".join(k): contest_dict(c) for k, c in sorted(self.contested.items())},
            **(
                {
                    "findings": [finding_dict(f) for f in self.findings],
                    "findings_not_shown": self.findings_not_shown,
                }
                if self.findings or self.findings_not_shown
                else {}
            ),
        }


def _claim(c: ClaimAdded) -> dict[str, Any]:
    return {
        "claim_id": c.claim_id.hex(),
        "value": json_value(c.value),
        "scope": c.scope,
        "confidence": c.confidence,
        "authority": c.authority,
        "provenance": c.provenance,
        "author": _author_text(c.author),
        "lamport": c.lamport,
        "layer": c.layer.value,
        "kind": c.kind,
        "constraint": c.constraint,
    }


def _selection(s: Selection) -> dict[str, Any]:
    return {
        "key": list(s.key),
        "scope": s.scope,
        "claim": _claim(s.claim),
        "claims": [c.claim_id.hex() for c in s.claims],
        "how": s.how.value,
        "reason": s.reason,
    }


def _author_text(a: str | bytes) -> str:
    return a.hex() if isinstance(a, bytes) else a


def deferral_dict(d: Deferral) -> dict[str, Any]:
    """A `Deferral` as JSON-ready data."""
    return {
        "decision_id": d.decision_id.hex(),
        "author": _author_text(d.author),
        "reason": d.reason,
        "lamport": d.lamport,
    }


def preserved_dict(p: Preserved) -> dict[str, Any]:
    """A `Preserved` as JSON-ready data (the View's JSON, MCP and LangGraph spell it so)."""
    return {
        "key": list(p.key),
        "scope": p.scope,
        "locus": p.locus.hex(),
        "conflict_id": p.conflict_id.hex(),
        "outcome": "preserve",
        "values": [
            {
                "value": json_value(g[0].value),
                "claims": [x.claim_id.hex() for x in g],
                "authors": sorted({_author_text(x.author) for x in g}),
            }
            for g in p.groups
        ],
        "decision_id": p.decision_id.hex(),
        "author": _author_text(p.author),
        "reason": p.reason,
    }


def _conflict(c: SurfacedConflict) -> dict[str, Any]:
    out = _conflict_fields(c)
    if c.deferred is not None:
        out["deferred"] = deferral_dict(c.deferred)
    return out


def _conflict_fields(c: SurfacedConflict) -> dict[str, Any]:
    return {
        "key": list(c.key),
        "scope": c.scope,
        "locus": c.locus.hex(),
        "conflict_id": c.conflict_id.hex(),
        "candidates": [_claim(x) for x in c.candidates],
        "groups": [[x.claim_id.hex() for x in g] for g in c.groups],
        "reason": c.reason,
        "error": c.error,
    }


def finding_dict(f: SurfacedFinding) -> dict[str, Any]:
    """A `SurfacedFinding` as JSON-ready data (the View's JSON and MCP spell it the same way)."""
    return {
        "finding": f.finding,
        "detector": f.detector,
        "key": list(f.key),
        "scope": f.scope,
        "locus": f.locus.hex(),
        "conflict_id": f.conflict_id.hex(),
        "candidates": [_claim(x) for x in f.candidates],
        "keys": ["/".join(k) for k in f.keys],
        "reason": f.reason,
        "witness": None if f.witness is None else json_value(dict(f.witness)),
        "not_shown": f.not_shown,
        "decided": f.decided,
        "selected": None if f.selected is None else f.selected.claim_id.hex(),
    }


def contest_dict(c: Contest) -> dict[str, Any]:
    """A `Contest` as JSON-ready data (the View's JSON, MCP and the LangGraph store's item
    metadata spell it the same way): each other value with its claims and their authors."""
    out = _contest_fields(c)
    if c.outcome:
        out["outcome"] = c.outcome
    return out


def _contest_fields(c: Contest) -> dict[str, Any]:
    return {
        "key": list(c.key),
        "scope": c.scope,
        "locus": c.locus.hex(),
        "conflict_id": c.conflict_id.hex(),
        "how": c.how.value,
        "by": c.by,
        "others": [
            {
                "value": json_value(g[0].value),
                "claims": [x.claim_id.hex() for x in g],
                "authors": [a.hex() if isinstance(a, bytes) else a for a in authors],
            }
            for g, authors in zip(c.others, c.authors, strict=True)
        ],
    }
