"""The lens: who is looking at memory, in which task and session, and when (SEMANTICS §7).

Invariant: a Lens is an immutable value, validated when it is built, so a projection is a pure
function of (state, lens, resolver) and can be replayed exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from statefuse.core.error import OpRuleError
from statefuse.core.op import _context
from statefuse.registry.error import InputError


class LensError(InputError, ValueError):
    """A lens built with a bad argument (named in ``field``)."""


class Include(Enum):
    """Speculative scopes a lens must ask for to see."""

    HYPOTHETICAL = "hypothetical"
    DRAFT = "draft"


def _names(field: str, value: object) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise LensError(field, "set-of-str", f"expected a collection of str, got {value!r}")
    out = set()
    for item in value:
        if not isinstance(item, str) or not item:
            raise LensError(field, "set-of-str", f"{item!r} is not a non-empty str")
        out.add(item)
    return frozenset(out)


@dataclass(frozen=True, slots=True, eq=False)
class Lens:
    """What one viewer may see.

    ``roles`` open claims whose ``visibility`` names one of them; ``task`` / ``session`` open
    claims scoped ``task:<task>`` / ``session:<session>``; ``include`` opens hypothetical and
    draft claims; ``now`` (ms since the epoch) hides claims that expired before it (``None``:
    no expiry filtering); ``query`` is for ranking in context assembly.

    ``valid_at`` (ms) is the instant in the world the viewer asks about: only claims whose
    ``[valid_from, valid_until)`` holds it are shown (SEMANTICS §9). None means ``now``; when
    both are None every interval is shown (as before valid time existed). ``context`` (a map
    of dimensions to str, int or bool) shows only claims whose context agrees with it on
    every dimension both name; claims naming no dimension are always shown. Raises LensError.
    """

    roles: frozenset[str] = frozenset()
    task: str | None = None
    session: str | None = None
    include: frozenset[Include] = frozenset()
    now: int | None = None
    query: str = ""
    valid_at: int | None = None
    context: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", _names("roles", self.roles))
        for field in ("task", "session"):
            v = getattr(self, field)
            if v is not None and (not isinstance(v, str) or not v):
                raise LensError(field, "non-empty-str", f"{field} must be a non-empty str or None")
        if isinstance(self.include, (str, Include)) or not isinstance(self.include, Iterable):
            raise LensError("include", "set-of-include", "include is a collection of Include")
        try:
            include = frozenset(Include(i) for i in self.include)
        except ValueError:
            raise LensError(
                "include", "set-of-include", f"{self.include!r}: allowed are hypothetical, draft"
            ) from None
        object.__setattr__(self, "include", include)
        if self.now is not None and (type(self.now) is not int or self.now < 0):
            raise LensError("now", "ms", "now is ms since the epoch (a non-negative int) or None")
        if not isinstance(self.query, str):
            raise LensError("query", "str", "query must be a str")
        if self.valid_at is not None and (type(self.valid_at) is not int or self.valid_at < 0):
            raise LensError(
                "valid_at", "ms", "valid_at is ms since the epoch (a non-negative int) or None"
            )
        try:
            object.__setattr__(self, "context", _context("context", self.context))
        except OpRuleError as e:
            raise LensError(e.field, e.rule, e.message) from None

    def _identity(self) -> tuple[object, ...]:
        """What equality and hashing compare: every field, the context by typed entries (a
        `FrozenMap` has no hash, and ``1 == True`` would make two contexts equal)."""
        ctx = typed_context(self.context)
        return (
            self.roles,
            self.task,
            self.session,
            self.include,
            self.now,
            self.query,
            self.valid_at,
            ctx,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Lens):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def instant(self) -> int | None:
        """The instant claims must hold at to be shown: ``valid_at``, else ``now``."""
        return self.valid_at if self.valid_at is not None else self.now

    def sees_scope(self, scope: str) -> bool:
        if scope == "global":
            return True
        if scope.startswith("task:"):
            return self.task is not None and scope == f"task:{self.task}"
        if scope.startswith("session:"):
            return self.session is not None and scope == f"session:{self.session}"
        if scope == "hypothetical":
            return Include.HYPOTHETICAL in self.include
        if scope == "draft":
            return Include.DRAFT in self.include
        return False

    def sees_roles(self, visibility: tuple[str, ...]) -> bool:
        return not visibility or not self.roles.isdisjoint(visibility)


def typed_context(ctx: Mapping[str, Any] | None) -> tuple[tuple[str, str, Any], ...]:
    """A context's entries with each value's type, so that ``1`` and ``True`` differ."""
    return tuple((k, type(v).__name__, v) for k, v in ctx.items()) if ctx else ()


def scope_rank(scope: str) -> int:
    """How narrow a scope is: for one key, the narrowest visible scope shadows the wider ones
    (session over task over global). Speculative scopes are narrowest — a viewer who asked to
    see a draft or a hypothesis sees it in place of the fact it questions — and a hypothesis
    is narrower than a draft."""
    if scope == "global":
        return 0
    if scope.startswith("task:"):
        return 1
    if scope.startswith("session:"):
        return 2
    return 3 if scope == "draft" else 4
