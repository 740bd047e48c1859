"""Words for counts in the lines people read (``1 change``, ``2 changes``).

Shared by the replica's status lines and the entry points' tables, so it sits on the floor both
build on. Pure.
"""

from __future__ import annotations


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 change``, ``2 changes``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"
