"""Trust as data: who may write to a space, decided by ops signed by the space's root key.

Trust ops travel inside changes like any other op. Only the root author's trust ops count;
anyone else's are kept but ignored (and reported). The trust state is a pure function of the set
of root trust ops, so every replica that holds the same changes reaches the same decisions,
whatever order they arrived in:

- ``AuthorAdmitted``: the author may write (in closed mode) and holds the given roles.
- ``AuthorCutOff``: revocation by named changes (SEMANTICS §8). The root names the author's
  changes that stay valid (``keep``, usually the heads it has seen); the author's changes that are
  ancestors of, or equal to, a kept change count, every other one is ignored. That reads only the
  set of changes (the ``prev`` links), so it holds whatever the arrival order and however the
  author's feed forked. Several revocations of one author intersect.
- ``AuthorRevoked``: the shorthand of the first release, still read: the author's changes after
  ``through_seq`` are ignored; if ``through_change`` is given, the author's change at
  ``through_seq`` must be that one. It cannot say which branch of a forked feed stays valid, so
  new revocations are written as ``AuthorCutOff``. Several revocations: the earliest cutoff wins.
- Revocation is final: a revoked author needs a new key.
- ``RolesGranted`` / ``RolesWithdrawn``: per (author, role), the op with the highest
  (lamport, op_id) decides.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar

from statefuse.core.error import OpRuleError
from statefuse.core.op import (
    MAX_LAMPORT,
    _author,
    _id,
    _ids,
    _lamport,
    _ms,
    _OpBase,
    _opt_id,
    _roles,
    _text,
    register_op_type,
)
from statefuse.sync.key import PublicKey, PublicKeyError


class TrustMode(Enum):
    """``open``: any author with a valid signature may write (the single-user default).
    ``closed``: only the root and admitted authors may write."""

    OPEN = "open"
    CLOSED = "closed"


def _subject(name: str, v: object) -> bytes:
    """An author key that may be admitted: raises PublicKeyError (rule ``small-order``,
    ``not-on-curve``...) for a degenerate key, which could otherwise sign anything."""
    try:
        return PublicKey(v).author  # type: ignore[arg-type]
    except PublicKeyError as exc:
        raise PublicKeyError(name, exc.rule, exc.message) from None


@dataclass(frozen=True, slots=True, eq=False)
class _SubjectRoles(_OpBase):
    """The shape shared by the ops that give or take roles: who, and which roles."""

    KIND: ClassVar[str] = ""
    author: bytes
    lamport: int
    wall_ms: int
    subject: bytes
    roles: tuple[str, ...] = ()
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("subject", _subject),
        ("roles", _roles),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()


@dataclass(frozen=True, slots=True, eq=False)
class AuthorAdmitted(_SubjectRoles):
    """The root admits ``subject`` as a writer with ``roles``."""

    KIND: ClassVar[str] = "AuthorAdmitted"


@dataclass(frozen=True, slots=True, eq=False)
class RolesGranted(_SubjectRoles):
    """The root grants ``roles`` to ``subject``."""

    KIND: ClassVar[str] = "RolesGranted"


@dataclass(frozen=True, slots=True, eq=False)
class RolesWithdrawn(_SubjectRoles):
    """The root withdraws ``roles`` from ``subject``."""

    KIND: ClassVar[str] = "RolesWithdrawn"


@dataclass(frozen=True, slots=True, eq=False)
class AuthorRevoked(_OpBase):
    """The root revokes ``subject``: its changes after ``through_seq`` no longer count."""

    KIND: ClassVar[str] = "AuthorRevoked"
    author: bytes
    lamport: int
    wall_ms: int
    subject: bytes
    through_seq: int
    through_change: bytes | None = None
    reason: str = ""
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("subject", _subject),
        ("through_seq", _ms),
        ("through_change", _opt_id),
        ("reason", _text),
    )

    def __post_init__(self) -> None:
        if self.through_change is not None and self.through_seq == 0:
            raise OpRuleError(
                "through_change", "revocation-cutoff", "seq 0 keeps no change to name"
            )
        self._validate_and_seal()


@dataclass(frozen=True, slots=True, eq=False)
class AuthorCutOff(_OpBase):
    """The root revokes ``subject``, keeping the changes named in ``keep`` and their ancestors:
    every other change of ``subject`` stops counting, on every replica, whatever arrives when."""

    KIND: ClassVar[str] = "AuthorCutOff"
    author: bytes
    lamport: int
    wall_ms: int
    subject: bytes
    keep: tuple[bytes, ...] = ()
    reason: str = ""
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("subject", _subject),
        ("keep", _ids),
        ("reason", _text),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()


TRUST_OP_TYPES: tuple[type[_OpBase], ...] = (
    AuthorAdmitted,
    AuthorRevoked,
    AuthorCutOff,
    RolesGranted,
    RolesWithdrawn,
)
for _t in TRUST_OP_TYPES:
    register_op_type(_t)

TrustOp = AuthorAdmitted | AuthorRevoked | AuthorCutOff | RolesGranted | RolesWithdrawn


@dataclass(frozen=True, slots=True)
class Cutoff:
    """The last change of a revoked author that still counts."""

    through_seq: int
    through_change: bytes | None


@dataclass(frozen=True, slots=True)
class TrustState:
    """What the root's trust ops decide (a pure function of them; see the module docstring)."""

    root: bytes
    mode: TrustMode
    admitted: frozenset[bytes]
    cutoffs: dict[bytes, Cutoff]
    roles: dict[bytes, frozenset[str]]
    #: author -> the ``keep`` sets of its `AuthorCutOff` revocations, sorted (each set is
    #: closed over ancestors by the change log, which holds the ``prev`` links).
    keeps: dict[bytes, tuple[frozenset[bytes], ...]] = field(default_factory=dict)

    def is_member(self, author: bytes) -> bool:
        """Whether ``author`` is the root, or admitted and not revoked (by either form): whom a
        closed space's server answers (``members`` auth) and a client pushes to."""
        if author == self.root:
            return True
        return author in self.admitted and author not in self.cutoffs and author not in self.keeps

    def may_write(self, author: bytes) -> bool:
        return self.mode is TrustMode.OPEN or author == self.root or author in self.admitted

    def counts(self, author: bytes, seq: int, change_id: bytes) -> bool:
        """Whether the author's change ``seq`` / ``change_id`` survives the ``through_seq``
        shorthand (`AuthorCutOff` needs the change graph: `ChangeLog.verdicts` applies it)."""
        cut = self.cutoffs.get(author)
        if cut is None or seq < cut.through_seq:
            return True
        if seq > cut.through_seq:
            return False
        return cut.through_change is None or cut.through_change == change_id


def trust_state(root: bytes, mode: TrustMode, ops: Iterable[_OpBase]) -> TrustState:
    """The trust decisions of the root's trust ops among ``ops`` (others are ignored)."""
    admitted: set[bytes] = set()
    cutoffs: dict[bytes, Cutoff] = {}
    keeps: dict[bytes, set[frozenset[bytes]]] = {}
    latest: dict[tuple[bytes, str], tuple[int, bytes, bool]] = {}
    for op in ops:
        if op.author != root:  # type: ignore[attr-defined]
            continue
        if isinstance(op, AuthorAdmitted):
            admitted.add(op.subject)
            for role in op.roles:
                _vote(latest, op.subject, role, op, grant=True)
        elif isinstance(op, AuthorRevoked):
            if op.subject == root:
                continue
            new = Cutoff(op.through_seq, op.through_change)
            old = cutoffs.get(op.subject)
            if old is None or (new.through_seq, new.through_change or b"") < (
                old.through_seq,
                old.through_change or b"",
            ):
                cutoffs[op.subject] = new
        elif isinstance(op, AuthorCutOff):
            if op.subject != root:
                keeps.setdefault(op.subject, set()).add(frozenset(op.keep))
        elif isinstance(op, (RolesGranted, RolesWithdrawn)):
            for role in op.roles:
                _vote(latest, op.subject, role, op, grant=isinstance(op, RolesGranted))
    roles: dict[bytes, set[str]] = {}
    for (subject, role), (_, _, granted) in sorted(latest.items()):
        if granted:
            roles.setdefault(subject, set()).add(role)
    return TrustState(
        root=root,
        mode=mode,
        admitted=frozenset(admitted),
        cutoffs=cutoffs,
        roles={k: frozenset(v) for k, v in sorted(roles.items())},
        keeps={a: tuple(sorted(k, key=sorted)) for a, k in sorted(keeps.items())},
    )


def _vote(
    latest: dict[tuple[bytes, str], tuple[int, bytes, bool]],
    subject: bytes,
    role: str,
    op: _OpBase,
    *,
    grant: bool,
) -> None:
    stamp = (op.lamport, op.op_id, grant)  # type: ignore[attr-defined]
    current = latest.get((subject, role))
    if current is None or stamp[:2] > current[:2]:
        latest[(subject, role)] = stamp


class TrustWriter:
    """Makes trust ops for the root key, with its own lamport clock (saturating at
    `MAX_LAMPORT`, as a `Writer`'s does: a clock never makes a write fail)."""

    __slots__ = ("_lamport", "_saturated", "root")

    def __init__(self, root: bytes) -> None:
        self.root = root
        self._lamport = 0
        #: The last ``wall_ms`` of a trust op made at the ceiling (below it, trust ops carry 0).
        self._saturated = 0

    def _tick(self) -> int:
        self._lamport = min(self._lamport + 1, MAX_LAMPORT)
        return self._lamport

    def _wall(self) -> int:
        """0 below the ceiling; at it, the time in ms kept strictly increasing: every trust op
        there takes MAX_LAMPORT, and two equal ops must stay two ops (distinct ids)."""
        if self._lamport < MAX_LAMPORT:
            return 0
        self._saturated = max(time.time_ns() // 1_000_000, self._saturated + 1)
        return self._saturated

    def admit(self, author: bytes, roles: Iterable[str] = ()) -> AuthorAdmitted:
        return AuthorAdmitted(self.root, self._tick(), self._wall(), author, tuple(roles))

    def revoke(
        self,
        author: bytes,
        *,
        through_seq: int,
        through_change: bytes | None = None,
        reason: str = "",
    ) -> AuthorRevoked:
        return AuthorRevoked(
            self.root,
            self._tick(),
            self._wall(),
            _id("subject", author),
            through_seq,
            through_change,
            reason,
        )

    def cut_off(self, author: bytes, *, keep: Iterable[bytes], reason: str = "") -> AuthorCutOff:
        """Revoke ``author``, keeping the changes ``keep`` names and their ancestors."""
        return AuthorCutOff(self.root, self._tick(), self._wall(), author, tuple(keep), reason)

    def grant(self, author: bytes, roles: Iterable[str]) -> RolesGranted:
        return RolesGranted(self.root, self._tick(), self._wall(), author, tuple(roles))

    def withdraw(self, author: bytes, roles: Iterable[str]) -> RolesWithdrawn:
        return RolesWithdrawn(self.root, self._tick(), self._wall(), author, tuple(roles))
