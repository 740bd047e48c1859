"""Author names: the human name an author declares for its own key, as an op in the space.

An author key is 32 bytes; people and planners read names. ``AuthorNamed`` holds one name and
travels in the author's signed changes like any other op, so the name is replicated, verified
and kept with the history. The rule:

- An op names its own author (the key that signed the change holding it, which the verifier
  checks against every op's ``author``); there is no field naming anyone else, so nobody can
  name another author.
- The name of author ``A`` is the ``name`` of ``A``'s ``AuthorNamed`` op with the highest
  ``(lamport, op_id)`` among the changes that count (`sync.changelog.ChangeLog.verdicts`: in a
  closed space an author the root has not admitted, or a revoked change, names nobody, as its
  claims and registry declarations count for nothing). A pure function of that set
  (`author_names`), so replicas holding the same changes show the same names, whatever order
  the changes arrived in.
- A name is a label, not an identity: two authors may declare the same one (surfaces then add
  each key's first hex digits, see `statefuse.core.authorname.AuthorNames`), and the key id stays
  what trust, revocation and signatures speak of.

A name is validated when the op is built, by a writer or by the decoder (`check_author_name`):
a str of 1 to `MAX_AUTHOR_NAME_CHARS` characters with no leading or trailing whitespace and no
control characters (C0, DEL, C1, Unicode's line and paragraph separators and bidirectional
controls, which could break or reorder a line where the name is shown). The set of refused
characters is spelled out here rather than read from ``unicodedata``, whose categories change
with the Unicode version: every replica, on any Python, must accept and refuse the same ops. A
peer's malformed name is quarantined with its change (reason ``bad-op``), like any bad op.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from statefuse.core.error import OpRuleError
from statefuse.core.op import _author, _lamport, _ms, _OpBase, _utf8, register_op_type

#: Longest author name, in characters.
MAX_AUTHOR_NAME_CHARS = 64

#: What a name may not hold: C0 controls, DEL and C1 controls, the line and paragraph
#: separators, and the bidirectional marks, embeddings, overrides and isolates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def check_author_name(name: str, v: object) -> str:
    """``v`` as an author name, or OpRuleError naming field ``name`` and the rule it breaks:
    ``str``, ``name-length`` (1 to `MAX_AUTHOR_NAME_CHARS` characters), ``name-whitespace``
    (leading or trailing whitespace: refused, never stripped), ``name-control`` (a control
    character) or ``utf8``."""
    if type(v) is not str:
        raise OpRuleError(name, "str", f"an author name is a str, got {type(v).__name__}")
    text = v
    if text != text.strip():
        raise OpRuleError(
            name, "name-whitespace", "an author name has no leading or trailing whitespace"
        )
    if not 1 <= len(text) <= MAX_AUTHOR_NAME_CHARS:
        raise OpRuleError(
            name, "name-length", f"an author name is 1 to {MAX_AUTHOR_NAME_CHARS} characters"
        )
    found = _CONTROL.search(text)
    if found is not None:
        raise OpRuleError(
            name,
            "name-control",
            f"an author name holds no control characters (U+{ord(found.group()):04X} at"
            f" {found.start()})",
        )
    _utf8(name, text)
    return text


@dataclass(frozen=True, slots=True, eq=False)
class AuthorNamed(_OpBase):
    """``author`` calls itself ``name`` from now on (see the module doc for which op wins)."""

    KIND: ClassVar[str] = "AuthorNamed"
    author: bytes
    lamport: int
    wall_ms: int
    name: str
    op_id: bytes = field(init=False, repr=False)

    _SCHEMA: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("author", _author),
        ("lamport", _lamport),
        ("wall_ms", _ms),
        ("name", check_author_name),
    )

    def __post_init__(self) -> None:
        self._validate_and_seal()


register_op_type(AuthorNamed)


def names_among(ops: Iterable[object]) -> Iterator[AuthorNamed]:
    """The `AuthorNamed` ops among ``ops`` (the ops of changes, say), in order."""
    for op in ops:
        if type(op) is AuthorNamed:
            yield op


def latest_names(ops: Iterable[AuthorNamed]) -> dict[bytes, AuthorNamed]:
    """Each author's op in force among ``ops`` (those of counted changes): its highest
    ``(lamport, op_id)``."""
    latest: dict[bytes, AuthorNamed] = {}
    for op in ops:
        name_latest(latest, op)
    return latest


def name_latest(latest: dict[bytes, AuthorNamed], op: AuthorNamed) -> bool:
    """Put ``op`` in ``latest`` if it is its author's highest ``(lamport, op_id)`` so far;
    returns whether it was."""
    current = latest.get(op.author)
    if current is not None and (current.lamport, current.op_id) >= (op.lamport, op.op_id):
        return False
    latest[op.author] = op
    return True


def author_names(ops: Iterable[AuthorNamed]) -> dict[bytes, str]:
    """author -> name under the rule of the module doc, sorted by author id."""
    latest = latest_names(ops)
    return {a: latest[a].name for a in sorted(latest)}


__all__ = [
    "MAX_AUTHOR_NAME_CHARS",
    "AuthorNamed",
    "author_names",
    "check_author_name",
    "latest_names",
    "name_latest",
    "names_among",
]
