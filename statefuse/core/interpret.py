"""Turn interpretation: what a conversation turn says about memory, as write requests.

Corrections are often made only in conversation ("actually the budget is $50k"). The engine
never reads turns for meaning: context assembly scrubs the values of *retracted* claims from
them (`statefuse.reading.scrub`), and only a retraction makes a value retracted. A
`TurnInterpreter` is
the pluggable step that turns a turn into such writes — claims, retractions (of a claim by id,
or of every claim with a semantic ref) and open questions — which the replica then writes like
any other write (`Replica.add_turn(..., interpret=...)`): signed by the replica's key, in the same
change as the turn, citing the turn.

An interpreter is any callable ``(turn, state) -> Interpretation``: an LLM call, rules, a
lookup. None ships and none is the default; StateFuse does not guess meaning from wording.

Invariant: this module is pure. An interpreter receives the turn claim and a read-only
`State`; what it returns is checked by `check_interpretation` before anything is written, and
a bad answer raises `InterpretationError` naming the field, so nothing of it (nor the turn) is
written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from statefuse.core.op import ClaimAdded, Layer
from statefuse.core.state import State
from statefuse.registry.error import InputError
from statefuse.registry.value import Value

__all__ = [
    "ClaimRequest",
    "Interpretation",
    "InterpretationError",
    "QuestionRequest",
    "RetractionRequest",
    "TurnInterpreter",
    "check_interpretation",
]


class InterpretationError(InputError, TypeError):
    """A turn interpreter returned something that is not a well-formed `Interpretation`
    (``field`` names where, e.g. ``retractions[0].superseded_by``)."""


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """A claim to write: the arguments of `Writer.claim` an interpreter may choose. Its
    provenance defaults to the turn (``turn <claim id in hex>``)."""

    namespace: str
    subject: str
    predicate: str
    value: Value
    scope: str = "global"
    confidence: float = 1.0
    authority: str = ""
    provenance: str = ""
    layer: Layer = Layer.FACT
    kind: str = "fact"
    constraint: str = ""


@dataclass(frozen=True, slots=True)
class RetractionRequest:
    """A retraction to write: of one claim (``claim_id``, 32 bytes) or of every claim with a
    semantic ref (``claim_ref``), or both. ``superseded_by``: the claim replacing it, as its id
    or as the index of a claim of the same `Interpretation` (``claims[i]``). The reason
    defaults to ``corrected in turn <claim id in hex>``."""

    claim_id: bytes | None = None
    claim_ref: bytes | None = None
    reason: str = ""
    superseded_by: bytes | int | None = None


@dataclass(frozen=True, slots=True)
class QuestionRequest:
    """An open question about a key (`Writer.question`)."""

    namespace: str
    subject: str
    predicate: str
    text: str
    scope: str = "global"


@dataclass(frozen=True, slots=True)
class Interpretation:
    """What one turn says about memory; written after the turn in this order: claims,
    questions, retractions (a retraction may name a claim of ``claims`` as its replacement)."""

    claims: tuple[ClaimRequest, ...] = ()
    retractions: tuple[RetractionRequest, ...] = ()
    questions: tuple[QuestionRequest, ...] = ()


#: What an interpreter returns when the turn says nothing to write.
NOTHING = Interpretation()


@runtime_checkable
class TurnInterpreter(Protocol):
    """Reads one conversation turn (the claim `Writer.add_turn` made, not yet written) with
    the memory as it is before it, and says what to write."""

    def __call__(self, turn: ClaimAdded, state: State) -> Interpretation: ...


def _id(field: str, v: object) -> None:
    if v is not None and (type(v) is not bytes or len(v) != 32):
        raise InterpretationError(field, "id", f"expected 32 bytes or None, got {v!r:.60}")


def _str(field: str, v: object) -> None:
    if type(v) is not str:
        raise InterpretationError(field, "str", f"expected a str, got {type(v).__name__}")


def check_interpretation(answer: object) -> Interpretation:
    """``answer`` if it is a well-formed `Interpretation`; raises InterpretationError naming
    the first field that is not (the values themselves are checked when written, by the
    writer, like any write)."""
    if not isinstance(answer, Interpretation):
        raise InterpretationError(
            "interpretation",
            "interpretation-type",
            f"a turn interpreter returns an Interpretation, not {type(answer).__name__}",
        )
    parts: Mapping[str, tuple[type, tuple[object, ...]]] = {
        "claims": (ClaimRequest, answer.claims),
        "retractions": (RetractionRequest, answer.retractions),
        "questions": (QuestionRequest, answer.questions),
    }
    for name, (kind, items) in parts.items():
        if not isinstance(items, tuple):
            raise InterpretationError(name, "tuple", f"{name} must be a tuple")
        for i, item in enumerate(items):
            if not isinstance(item, kind):
                raise InterpretationError(
                    f"{name}[{i}]", "request-type", f"expected a {kind.__name__}"
                )
    for i, c in enumerate(answer.claims):
        for f in ("namespace", "subject", "predicate", "scope", "authority", "provenance"):
            _str(f"claims[{i}].{f}", getattr(c, f))
        if not isinstance(c.layer, Layer):
            raise InterpretationError(f"claims[{i}].layer", "enum", "layer must be a Layer")
    for i, r in enumerate(answer.retractions):
        where = f"retractions[{i}]"
        _id(f"{where}.claim_id", r.claim_id)
        _id(f"{where}.claim_ref", r.claim_ref)
        if r.claim_id is None and r.claim_ref is None:
            raise InterpretationError(where, "target", "name a claim_id, a claim_ref or both")
        _str(f"{where}.reason", r.reason)
        by = r.superseded_by
        if type(by) is int:
            if not 0 <= by < len(answer.claims):
                raise InterpretationError(
                    f"{where}.superseded_by",
                    "claim-index",
                    f"{by} is not the index of one of the {len(answer.claims)} claims",
                )
        else:
            _id(f"{where}.superseded_by", by)
    for i, q in enumerate(answer.questions):
        for f in ("namespace", "subject", "predicate", "text", "scope"):
            _str(f"questions[{i}].{f}", getattr(q, f))
    return answer
