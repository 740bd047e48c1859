"""Built-in normalizers: functions from a value to its normal form.

Every normalizer is pure, deterministic across processes and hash seeds, idempotent
(``n(n(x)) == n(x)`` by canonical bytes) and returns a canonical value; values it cannot bring to
normal form raise NormalizationError naming the normalizer as the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from registry.value import Value

Normalizer = Callable[[Value], Value]


def exact(value: Value) -> Value:
    """The value itself: equality is equality of canonical bytes."""
    return value


BUILTIN_NORMALIZERS: Mapping[str, Normalizer] = MappingProxyType({"exact": exact})
