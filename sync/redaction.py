"""Redaction: ops whose bodies every replica must delete (SEMANTICS §10).

An ``OpsRedacted`` op names op ids and says why. It is a space op (like the trust ops): it
travels in changes, never reaches the materializer, and which redactions count is a pure
function of the accepted changes and the trust in force, so every replica that holds the same
changes deletes the same bodies, whatever the arrival order.

Who may redact an op:

- in a **closed** space: the root, or an author the root granted the role ``redactor``
  (`REDACTOR_ROLE`, through ``AuthorAdmitted`` / ``RolesGranted``);
- in an **open** space: the author of the redacted op (known from the change that lists its id,
  so even when its body is gone), or the space's creator (`sync.creator`).

A redaction by anyone else does not count for that id: it is kept, and reported with its reason
(`Refusal`), never ignored in silence. An id no held change lists yet is redacted only by an
author who may redact any op (root, redactor, creator); a redaction by an op's own author counts
once the change listing that op arrives.

What counting a redaction does is the replica's business (`sync.replica`): the bodies are cut
out of the changes it holds (format 2 signs the op ids only, so each change still verifies),
the store rows are rewritten with SQLite's ``secure_delete`` on and the log checkpointed
(``TRUNCATE``), the snapshot and derived state are rebuilt, and a body arriving later is cut on
receipt. A redacted claim is then absent from every state, View, context, export and peer: it
counts as retracted with reason ``redacted``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from statefuse.core.error import OpRuleError
from statefuse.core.op import _author, _ids, _lamport, _ms, _OpBase, _text, register_op_type
from statefuse.sync.change import VerifiedChange
from statefuse.sync.trust import TrustMode, TrustState

#: The role the root grants an author of a closed space so that it may redact any op.
REDACTOR_ROLE = "redactor"
#: The reason a redacted claim counts as retracted for (Views, history).
REDACTED = "redacted"
#: Most op ids one redaction op names (the op schema's list limit): `Replica.redact` writes as
#: many ops as it needs.
MAX_REDACTED_PER_OP = 1024


def _reason(name: str, v: object) -> str:
    text = _text(name, v)
    if not text.strip():
        raise OpRuleError(name, "non-empty", "a redaction says why (reason must not be empty)")
    return text


@dataclass(frozen=True, slots=True, eq=False)
class OpsRedacted(_OpBase):
    """``author`` orders every replica to delete the bodies of the ops ``ops``, because
    ``reason`` (kept with the audit trail; it should never repeat the redacted value)."""

    KIND: ClassVar[str] = "OpsRedacted"
    author: bytes
    lamport: int
    wall_ms: int
    ops: tuple[bytes, ...]
    reason: str
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("ops", _ids),
        ("reason", _reason),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()


register_op_type(OpsRedacted)


class RefusedWhy(Enum):
    """Why a redaction does not count for an op id. The value is stable (reported)."""

    NOT_AUTHORIZED = "not-authorized"
    NOT_A_REDACTOR = "not-a-redactor"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A redaction of ``op_id`` by ``author`` that does not count, and why."""

    redaction: bytes
    author: bytes
    op_id: bytes
    why: RefusedWhy
    message: str


@dataclass(frozen=True, slots=True)
class Redacted:
    """One redacted op id, for the audit trail: who ordered it, when (the redaction's writer
    clock ``wall_ms`` and its ``lamport``) and why. Never the redacted value."""

    op_id: bytes
    by: bytes
    wall_ms: int
    reason: str
    redaction: bytes
    lamport: int = 0


@dataclass(frozen=True, slots=True)
class RedactionState:
    """Which op ids are redacted (each with the first redaction that counts for it, by
    ``(lamport, op_id)``) and which redactions were refused."""

    redacted: Mapping[bytes, Redacted]
    refused: tuple[Refusal, ...]

    @property
    def ids(self) -> frozenset[bytes]:
        return frozenset(self.redacted)


EMPTY = RedactionState({}, ())


def may_redact_any(author: bytes, *, trust: TrustState, creator: bytes | None) -> bool:
    """Whether ``author`` may redact any op of the space (root or redactor in a closed space,
    the creator in an open one)."""
    if trust.mode is TrustMode.CLOSED:
        return author == trust.root or REDACTOR_ROLE in trust.roles.get(author, frozenset())
    return author == creator


def redaction_state(
    changes: Iterable[VerifiedChange], *, trust: TrustState, creator: bytes | None
) -> RedactionState:
    """The redactions that count among the ops of ``changes`` (the accepted changes that count,
    any order), and the refused ones: a pure function of the set."""
    changes = list(changes)
    listed_by: dict[bytes, bytes] = {}
    redactions: list[OpsRedacted] = []
    for c in changes:
        for op_id in c.op_ids:
            listed_by[op_id] = c.author
        redactions.extend(op for op in c.ops if type(op) is OpsRedacted)  # type: ignore[misc,comparison-overlap]
    redactions.sort(key=lambda op: (op.lamport, op.op_id))
    out: dict[bytes, Redacted] = {}
    refused: list[Refusal] = []
    for r in redactions:
        anyone = may_redact_any(r.author, trust=trust, creator=creator)
        for op_id in r.ops:
            owner = listed_by.get(op_id)
            allowed = anyone or (trust.mode is TrustMode.OPEN and owner == r.author)
            if allowed:
                if op_id not in out:
                    out[op_id] = Redacted(op_id, r.author, r.wall_ms, r.reason, r.op_id, r.lamport)
                continue
            if trust.mode is TrustMode.CLOSED:
                why, msg = (
                    RefusedWhy.NOT_A_REDACTOR,
                    "in a closed space only the root or an author granted the role"
                    f" {REDACTOR_ROLE!r} may redact",
                )
            elif owner is None:
                why, msg = (
                    RefusedWhy.NOT_AUTHORIZED,
                    "the redacted op is not known here, and only the space's creator may"
                    " redact another author's op",
                )
            else:
                why, msg = (
                    RefusedWhy.NOT_AUTHORIZED,
                    "in an open space only the op's author or the space's creator may redact it",
                )
            refused.append(Refusal(r.op_id, r.author, op_id, why, msg))
    return RedactionState(out, tuple(refused))


__all__ = [
    "MAX_REDACTED_PER_OP",
    "REDACTED",
    "REDACTOR_ROLE",
    "OpsRedacted",
    "Redacted",
    "RedactionState",
    "Refusal",
    "RefusedWhy",
    "may_redact_any",
    "redaction_state",
]
