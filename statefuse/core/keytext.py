"""Keys written as one string: ``namespace/subject/predicate``, as the command line, the MCP
tools and the Python API all accept them.

A part holding ``/`` or ``%`` is written with ``%2F`` / ``%25`` (and any other ``%XX`` escape
of UTF-8 is read back), so every key of three non-empty strings has exactly one spelling that
`parse_key` reads back to it (`format_key` writes it). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from statefuse.registry.error import InputError

Key = tuple[str, str, str]


class KeyTextError(InputError, ValueError):
    """A string that is not a key (``rule``: ``key-syntax``)."""


#: A run of %-escapes: the UTF-8 bytes of what they spell.
_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def _unquote(part: str) -> str:
    """``part`` with each run of ``%XX`` escapes read as UTF-8 (what ``urllib.parse.unquote``
    with ``errors="strict"`` does, without importing it: the pure core reads keys too).
    Raises UnicodeDecodeError for escapes that are not UTF-8."""
    if "%" not in part:
        return part
    return _ESCAPES.sub(lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode(), part)


def format_key(key: Sequence[str]) -> str:
    """A key as one string (the inverse of `parse_key`)."""
    text = "/".join(key)
    if "%" not in text and text.count("/") == len(key) - 1:
        return text  # no part holds a "/" or a "%": nothing to escape
    return "/".join([part.replace("%", "%25").replace("/", "%2F") for part in key])


def key_parts(text: str, counts: range, spelled: str, *, field: str = "key") -> tuple[str, ...]:
    """The parts of ``text`` when their number is in ``counts``; raises KeyTextError naming
    ``field`` and what to write (``spelled``) otherwise."""
    parts = text.split("/")
    if len(parts) not in counts or not all(parts):
        raise KeyTextError(field, "key-syntax", f"{text!r} is not a key: write {spelled}")
    try:
        return tuple(map(_unquote, parts))
    except UnicodeDecodeError:
        raise KeyTextError(
            field, "key-syntax", f"{text!r} is not a key: a %-escape is not UTF-8"
        ) from None


def parse_key(text: str, *, field: str = "key") -> Key:
    """``namespace/subject/predicate`` -> its three parts; raises KeyTextError otherwise."""
    ns, subject, predicate = key_parts(
        text, range(3, 4), "namespace/subject/predicate", field=field
    )
    return ns, subject, predicate
