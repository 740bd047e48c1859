"""Detectors: pure functions from the active claims of some predicates to findings (SEMANTICS §5).

A same-key conflict is found by grouping one key's values. A *domain* conflict (three purchases
that together exceed a budget, two bookings of one room whose slots overlap) spans keys, so only
code that knows the domain can see it. A detector is that code: registered in a process catalog
by ``name@version`` (`register_detector`, as normalizers are) and declared in the space's
registry with the predicates it reads, so every replica runs the same detectors on the same
claims and finds the same conflicts.

Invariant: `run_detector` is a pure function of the declaration and the input. The input is a
`DetectorInput`: the active claims of the declared predicates, sorted by claim id, each as a
`DetectorClaim` (its id, key, scope, value, author and lamport), whatever order they arrived in.
The output is sorted by locus, so a detector's own output order does not matter. A detector that
raises, returns something that is not a list or tuple of well-formed `Finding` s (a set, whose
order depends on the hash seed, is refused too), or names a claim it was not given, yields one
``detector-failed`` finding naming it and the error: never a crash of materialization
and never a silent gap.

This module is pure and sits in the bottom layer: it knows claims only through `DetectorClaim`
(``statefuse.core.op`` is a layer above).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple, Protocol

from statefuse.registry.error import ContractError, InputError
from statefuse.registry.normalizer import NAME_PATTERN
from statefuse.registry.value import FrozenMap, Value, encode_frozen, frozen_value

#: The finding type a failed detector run yields.
DETECTOR_FAILED = "detector-failed"
#: Most findings one detector run may return (more is a malformed answer).
MAX_FINDINGS = 10_000
#: Longest reason, in characters.
MAX_REASON_CHARS = 500
#: Most bytes a witness may encode to: a witness shows the numbers, it is not a report.
MAX_WITNESS_BYTES = 4096
#: Longest error text a detector-failed finding keeps.
MAX_ERROR_CHARS = 300

Key3 = tuple[str, str, str]
#: What a detector declaration reads: (namespace or None for every namespace, predicate).
Read = tuple[str | None, str]


class ClaimView(Protocol):
    """What a detector reads of a claim: every field read-only. The claims a replica hands a
    detector are its own immutable claim ops (`statefuse.core.op.ClaimAdded`), not copies: a
    detector reading a common predicate is handed every active claim of it, and copying each
    claim's fields costs a random walk over memory at a million claims (several microseconds
    a claim). `DetectorClaim` is the same shape built by hand (checks, tests)."""

    @property
    def claim_id(self) -> bytes: ...
    @property
    def namespace(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def value(self) -> Value: ...
    #: The writer's author id (a public key; a str only in tests that name writers).
    @property
    def author(self) -> bytes | str: ...
    @property
    def lamport(self) -> int: ...
    @property
    def key(self) -> Key3: ...


class DetectorClaim(NamedTuple):
    """One claim as a detector sees it (read-only, deeply immutable values), built by hand:
    a `ClaimView`."""

    claim_id: bytes
    namespace: str
    subject: str
    predicate: str
    scope: str
    value: Value
    #: The writer's author id (a public key; a str only in tests that name writers).
    author: bytes | str
    lamport: int

    @property
    def key(self) -> Key3:
        return (self.namespace, self.subject, self.predicate)


@dataclass(frozen=True, slots=True)
class DetectorInput:
    """The active claims of a detector's declared predicates, sorted by claim id.

    ``claims`` is the whole input; `by_key` groups it by key (keys sorted, each key's claims by
    id); `of` keeps one predicate. Everything is ordered, so a detector that iterates it in
    order is deterministic without sorting anything itself."""

    claims: tuple[ClaimView, ...]

    def by_key(self) -> Mapping[Key3, tuple[ClaimView, ...]]:
        out: dict[Key3, list[ClaimView]] = {}
        for c in self.claims:
            out.setdefault(c.key, []).append(c)
        return MappingProxyType({k: tuple(out[k]) for k in sorted(out)})

    def of(self, predicate: str, namespace: str | None = None) -> tuple[ClaimView, ...]:
        """The claims of ``predicate`` (in ``namespace`` if given), by claim id."""
        return tuple(
            c
            for c in self.claims
            if c.predicate == predicate and (namespace is None or c.namespace == namespace)
        )

    def __len__(self) -> int:
        return len(self.claims)

    def __iter__(self) -> Iterator[ClaimView]:
        return iter(self.claims)


@dataclass(frozen=True, slots=True)
class Finding:
    """A conflict a detector found: claims of one or several keys that cannot all hold.

    ``type`` names the kind (``"over-budget"``); ``anchor`` is the key that makes the finding's
    locus stable across snapshots (the budget's limit key, the first booking's key), with
    ``scope``; ``claim_ids`` the claims involved (each is one candidate of the conflict);
    ``reason`` one human line; ``witness`` a small map of the numbers that show it
    (``{"required": 120000, "available": 100000}``)."""

    type: str
    anchor: Key3
    claim_ids: tuple[bytes, ...]
    reason: str
    witness: Mapping[str, Value] = field(default_factory=dict)
    scope: str = "global"


@dataclass(frozen=True, slots=True)
class DetectorSpec:
    """A detector as a registry declares it: ``name@version`` and the predicates it reads."""

    name: str
    version: int
    reads: tuple[Read, ...]

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"

    def reads_predicate(self, namespace: str, predicate: str) -> bool:
        return any(p == predicate and (n is None or n == namespace) for n, p in self.reads)

    def declaration(self) -> dict[str, Value]:
        return {"detector": self.label, "reads": [_read_text(r) for r in self.reads]}


def _read_text(read: Read) -> str:
    return read[1] if read[0] is None else f"{read[0]}/{read[1]}"


Detector = Callable[[DetectorInput], Sequence[Finding]]


@dataclass(frozen=True, slots=True)
class CheckedFinding:
    """A finding that passed every rule (`run_detector`), its witness canonical."""

    detector: str
    type: str
    anchor: Key3
    scope: str
    claim_ids: tuple[bytes, ...]
    reason: str
    witness: FrozenMap
    keys: tuple[Key3, ...]


class _Malformed(Exception):
    """Why a detector's answer was refused (kept in the detector-failed finding's reason);
    never leaves `run_detector`."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.message = message


def _fail(rule: str, message: str) -> _Malformed:
    return _Malformed(rule, message)


def _check_key(key: object, what: str) -> Key3:
    if not isinstance(key, tuple) or len(key) != 3 or not all(type(p) is str and p for p in key):
        raise _fail("anchor", f"{what} is a tuple of three non-empty strs, not {key!r}")
    return (key[0], key[1], key[2])


def _check(
    spec: DetectorSpec, f: object, index: int, given: Mapping[bytes, ClaimView]
) -> CheckedFinding:
    if not isinstance(f, Finding):
        raise _fail("finding-type", f"item {index} is a {type(f).__name__}, not a Finding")
    if type(f.type) is not str or not f.type or len(f.type) > 64 or f.type == DETECTOR_FAILED:
        raise _fail(
            "finding-type", f"item {index}: a type is a short non-empty str, not {f.type!r}"
        )
    anchor = _check_key(f.anchor, f"item {index}: the anchor")
    if type(f.scope) is not str or not f.scope:
        raise _fail("scope", f"item {index}: a scope is a non-empty str, not {f.scope!r}")
    if not isinstance(f.claim_ids, (tuple, list)) or not f.claim_ids:
        raise _fail("claim-ids", f"item {index}: a finding names at least one claim")
    ids = set()
    for cid in f.claim_ids:
        if type(cid) is not bytes or cid not in given:
            shown = cid.hex() if type(cid) is bytes else repr(cid)
            raise _fail("claim-ids", f"item {index} names {shown[:16]}, a claim not in its input")
        ids.add(cid)
    if type(f.reason) is not str or len(f.reason) > MAX_REASON_CHARS:
        raise _fail("reason", f"item {index}: a reason is a str of at most {MAX_REASON_CHARS}")
    if not isinstance(f.witness, Mapping):
        raise _fail("witness", f"item {index}: a witness is a map, not {type(f.witness).__name__}")
    try:
        witness = frozen_value(dict(f.witness), "witness")
        size = len(encode_frozen(witness))
    except InputError as exc:
        raise _fail("witness", f"item {index}: {exc.message}") from None
    if size > MAX_WITNESS_BYTES:
        raise _fail("witness", f"item {index}: a witness is at most {MAX_WITNESS_BYTES} bytes")
    assert isinstance(witness, FrozenMap)
    claim_ids = tuple(sorted(ids))
    keys = tuple(sorted({given[c].key for c in claim_ids}))
    return CheckedFinding(spec.label, f.type, anchor, f.scope, claim_ids, f.reason, witness, keys)


def run_detector(
    spec: DetectorSpec, fn: Detector, claims: DetectorInput
) -> tuple[list[CheckedFinding], str | None]:
    """(the findings of ``fn`` on ``claims``, None), or ([], why it failed): ``fn`` raised,
    or returned something malformed. Never raises for anything ``fn`` does (a BaseException
    such as KeyboardInterrupt still propagates)."""
    given = {c.claim_id: c for c in claims.claims}
    try:
        out = fn(claims)
    except Exception as exc:
        return [], _error_text(f"raised {type(exc).__name__}: {exc}")
    try:
        if not isinstance(out, (list, tuple)):
            raise _fail(
                "findings-type",
                f"returned a {type(out).__name__}; return a list or tuple of Finding",
            )
        if len(out) > MAX_FINDINGS:
            raise _fail("max-findings", f"returned {len(out)} findings (at most {MAX_FINDINGS})")
        checked = [_check(spec, f, i, given) for i, f in enumerate(out)]
        places = {(f.type, f.anchor, f.scope) for f in checked}
        if len(places) != len(checked):
            raise _fail(
                "one-finding-per-anchor",
                "returned two findings of one type at one anchor key and scope (their loci"
                " would be the same): merge them or anchor them apart",
            )
    except _Malformed as exc:
        return [], _error_text(f"returned something malformed: {exc.message}")
    except Exception as exc:  # a Finding whose fields misbehave (e.g. a hostile __eq__)
        return [], _error_text(f"returned something malformed: {type(exc).__name__}: {exc}")
    return checked, None


def _error_text(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def check_detector_name(name: object, field: str = "name") -> str:
    """``name`` if it is a valid detector name (as a normalizer name); raises ContractError."""
    if type(name) is not str or not NAME_PATTERN.fullmatch(name):
        raise ContractError(
            field,
            "detector-name",
            f"a detector name is a letter then up to 127 letters, digits, '.', '_' or '-',"
            f" not {name!r}",
        )
    return name
