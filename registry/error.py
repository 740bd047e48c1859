"""The root of StateFuse's error tree, and the errors of the bottom layer.

These classes live in ``registry`` because it is the floor below all others;
``statefuse.core.error`` re-exports them and draws the whole tree.
Input errors carry the offending ``field`` and the ``rule`` it broke, and also subclass the
builtin (``ValueError``/``TypeError``) a caller would expect.
"""

from __future__ import annotations


class StateFuseError(Exception):
    """Base of every error StateFuse raises on purpose."""


class InputError(StateFuseError):
    """Input that breaks a named rule. ``field`` says where, ``rule`` says which rule."""

    def __init__(self, field: str, rule: str, message: str) -> None:
        self.field = field
        self.rule = rule
        self.message = message
        super().__init__(f"{field}: {message} [rule: {rule}]")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str, str]]:
        return (type(self), (self.field, self.rule, self.message))


class ValueRuleError(InputError, ValueError):
    """A value outside the StateFuse value model (SEMANTICS §1)."""


class ValueTypeError(InputError, TypeError):
    """A value of a type StateFuse does not store (sets, tuples, objects...)."""


class EncodingError(InputError, ValueError):
    """Bytes that are not the canonical encoding of a valid value or op."""


class NormalizationError(InputError, ValueError):
    """A value a predicate contract's normalizer cannot bring to normal form."""


class ContractError(InputError, ValueError):
    """A predicate contract or registry declaration that breaks a rule."""


class RegistryError(ContractError):
    """A registry declaration that cannot be read or used here: a malformed registry file or
    document, or one naming a normalizer this process has not registered (rule
    ``unknown-normalizer``)."""
