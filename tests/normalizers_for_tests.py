"""Custom normalizers for the checker and registry tests, one per way to break the contract.

They live at module level of an importable module because the checker imports them by
``__module__`` and ``__qualname__`` in fresh interpreters.
"""

from __future__ import annotations

import sys
import time

from statefuse.registry.error import NormalizationError
from statefuse.registry.value import Value

_calls = 0


def _needs_str(value: Value) -> str:
    if type(value) is not str:
        raise NormalizationError("value", "normalizer:test", f"needs a str: {value!r}")
    return value


def strip_lower(value: Value) -> str:
    """A well-behaved custom normalizer."""
    return _needs_str(value).strip().lower()


class Nested:
    """Holds a well-behaved normalizer under a dotted qualified name."""

    @staticmethod
    def upper(value: Value) -> str:
        return _needs_str(value).upper()


def counting(value: Value) -> Value:
    """Not deterministic: the result counts the calls made so far in this process."""
    global _calls
    _calls += 1
    return [value, _calls]


def declines_every_other_call(value: Value) -> Value:
    """Not deterministic: accepts and declines the same value in turn."""
    global _calls
    _calls += 1
    if _calls % 2:
        raise NormalizationError("value", "normalizer:test", f"declined: {value!r}")
    return value


def any_word(value: Value) -> str:
    """Seed-dependent: the first word in set order, which depends on PYTHONHASHSEED.

    In one process it is deterministic (the same set iterates the same way) and idempotent (one
    word maps to itself), so only a fresh interpreter with another hash seed can catch it.
    """
    words = _needs_str(value).split()
    if not words:
        raise NormalizationError("value", "normalizer:test", "no words")
    return next(iter(set(words)))


def shouting(value: Value) -> str:
    """Not idempotent: every application adds another "!"."""
    return _needs_str(value) + "!"


def returns_tuple(value: Value) -> object:
    return (value,)


def returns_set(value: Value) -> object:
    return {_needs_str(value)}


def returns_nan(value: Value) -> object:
    return float("nan")


def raises_key_error(value: Value) -> Value:
    """Declines by raising something other than NormalizationError."""
    return {"a": "a"}[_needs_str(value)]


def sorts_in_place(value: Value) -> Value:
    """Impure: sorts its argument instead of a copy (a frozen list refuses it)."""
    if not isinstance(value, (list, tuple)):
        raise NormalizationError("value", "normalizer:test", f"needs a list: {value!r}")
    value.sort(key=repr)  # type: ignore[union-attr]
    return value


def slow_in_child(value: Value) -> Value:
    """Hangs only in the checker's fresh interpreters (they run as ``python -c SCRIPT PATH``:
    a pytest-xdist worker runs as ``python -c`` too, without the argument)."""
    if sys.argv[0] == "-c" and len(sys.argv) > 1:
        time.sleep(30)
    return value


def with_options(
    value: Value, *, label: str = "", count: int = 0, weight: float = 0.0, flag: bool = False
) -> str:
    """A well-behaved normalizer taking one param of each scalar type, so that registry files can
    be round-tripped with every kind of param; the params do not change the result."""
    return strip_lower(value)
