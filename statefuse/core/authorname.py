"""Authors as people read them: the name an author declared for its key, else the key's first
hex digits.

Names come from the space (``AuthorNamed`` ops, `statefuse.sync.author`); this module only turns
a mapping of them into the labels every surface shows (tables, history, conflicts, MCP results,
the LLM context), so one author reads the same everywhere.

Invariant: a label never hides who wrote. A name is a label an author gave itself, not an
identity, so wherever it could pass for another author it carries the key's first
`SHORT_AUTHOR_CHARS` hex digits, ``scout (5b503a6b)``:

- when two authors declared the same name (compared after NFKC and case folding, so ``Scout``
  and ``scout`` count as one), both are shown that way;
- when the name looks like a label of a key itself (only hex digits, eight or more, or ending
  in hex digits in parentheses), since it could pass for an author without a name.

Pure: no I/O, same labels for the same mapping.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping

from statefuse.registry.error import InputError

#: Hex digits of an author key shown where it has no name (and after a name that needs them).
SHORT_AUTHOR_CHARS = 8

_KEY_LIKE = re.compile(r"(?:[0-9a-fA-F]{8,}|.*\([0-9a-fA-F]{8,}\))", re.S)


class AuthorNamesError(InputError, TypeError):
    """`AuthorNames` given something other than a mapping of author ids (bytes) to names
    (non-empty str); ``field`` names the entry."""


def short_author(author: bytes) -> str:
    """The first `SHORT_AUTHOR_CHARS` hex digits of an author key."""
    return author[: SHORT_AUTHOR_CHARS // 2].hex()


class AuthorNames(Mapping[bytes, str]):
    """An immutable mapping author id -> declared name, which also labels authors for display
    (`label`). Compares equal to any mapping with the same items.

    Raises AuthorNamesError (field ``authors[<hex>]``) for a key that is not bytes or a name that
    is not a non-empty str."""

    __slots__ = ("_labels", "_names")

    def __init__(self, names: Mapping[bytes, str] | None = None) -> None:
        items = dict(names) if names is not None else {}
        for author, name in items.items():
            if type(author) is not bytes or not author:
                raise AuthorNamesError(
                    "authors", "author-id", f"an author id is non-empty bytes, got {author!r}"
                )
            if type(name) is not str or not name:
                raise AuthorNamesError(
                    f"authors[{author.hex()}]", "name", f"a name is a non-empty str, got {name!r}"
                )
        self._names = {a: items[a] for a in sorted(items)}
        self._labels: dict[bytes, str] | None = None

    def __getitem__(self, author: bytes) -> str:
        return self._names[author]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AuthorNames):
            return self._names == other._names
        return super().__eq__(other)

    def __repr__(self) -> str:
        shown = ", ".join(f"{short_author(a)}: {n!r}" for a, n in self._names.items())
        return f"AuthorNames({{{shown}}})"

    def label(self, author: bytes | str) -> str:
        """How ``author`` is shown: its name; its name and first hex digits when the name
        alone could pass for another author (see the module doc); the first
        `SHORT_AUTHOR_CHARS` hex digits when it has no name. An author that is already a str
        (ops written in the pure core without a key) is shown as it is."""
        if not isinstance(author, bytes):
            return author
        labels = self._labels
        if labels is None:
            labels = self._labels = _labels(self._names)
        found = labels.get(author)
        return found if found is not None else short_author(author)


def _folded(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def _labels(names: Mapping[bytes, str]) -> dict[bytes, str]:
    holders: dict[str, int] = {}
    for name in names.values():
        folded = _folded(name)
        holders[folded] = holders.get(folded, 0) + 1
    out = {}
    for author, name in names.items():
        if holders[_folded(name)] > 1 or _KEY_LIKE.fullmatch(name):
            out[author] = f"{name} ({short_author(author)})"
        else:
            out[author] = name
    return out


__all__ = ["SHORT_AUTHOR_CHARS", "AuthorNames", "AuthorNamesError", "short_author"]
