"""The normalizer contract checker: what it rejects, what it accepts, and what it says."""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterator

import normalizers_for_tests as bad
import pytest

from statefuse.registry import (
    BUILTIN_NORMALIZERS,
    DEFAULT_REGISTRY,
    ContractError,
    PredicateContract,
    Registry,
    Value,
    checker,
)
from statefuse.registry.checker import NormalizerContractError, check_normalizer, check_registry

#: Samples every builtin is checked on: some it accepts, some it declines.
BUILTIN_SAMPLES: dict[str, list[Value]] = {
    "exact": [None, True, 1, 1.0, "x", b"x", [1, [2]], {"b": 1, "a": {"c": None}}],
    "natural": [" Acme  CORP ", 1.0, 2.5, 1e300, True, ["A ", {"k": "B"}], b"x", None],
    "text": [" Straße  Σίσυφος\tABC ", "Cafe\u0301", "", 5, None],
    "number": ["1,000.50", " 1_000 ", 1000.0, -0.0, 0.1, "1e-7", 2**63 - 1, "1,00", True],
    "date": ["2026-03-25", "2026-W13-3", "2026084", "2026-02-30", "2026-03-25T10:00"],
    "datetime": ["2026-03-25T10:00:00.5+05:30", "20260325T100000", "2026-03-25", 0],
    "money": ["USD 1,000.50", "$-3", "12 €", {"currency": "eur", "amount": 12}, "1000"],
    "boolean": [" Yes ", 0, "OFF", 2, "maybe"],
}
MANY_WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
)


def _closure() -> object:
    def inner(value: Value) -> Value:
        return value

    return inner


def _rejection(fn: object, samples: list[Value], **options: object) -> NormalizerContractError:
    with pytest.raises(NormalizerContractError) as caught:
        check_normalizer(fn, samples, **options)  # type: ignore[arg-type]
    return caught.value


@pytest.fixture(autouse=True)
def _fresh_call_counter() -> Iterator[None]:
    bad._calls = 0
    yield


# --- what it accepts ------------------------------------------------------------------------


def test_checker_accepts_every_builtin_normalizer_in_fresh_interpreters() -> None:
    assert set(BUILTIN_SAMPLES) == set(BUILTIN_NORMALIZERS)
    check_registry(DEFAULT_REGISTRY, BUILTIN_SAMPLES)


def test_checker_accepts_a_well_behaved_custom_normalizer_in_fresh_interpreters() -> None:
    check_normalizer(bad.strip_lower, [" A ", "b", 5])
    check_normalizer(bad.Nested.upper, ["a", None])


def test_checker_accepts_a_lambda_when_told_not_to_cross_interpreters() -> None:
    check_normalizer(lambda value: value, ["a", 1], across_interpreters=False)


def test_checker_accepts_a_normalizer_that_declines_every_sample() -> None:
    check_normalizer(BUILTIN_NORMALIZERS["number"], ["x", None, True], across_interpreters=False)


# --- what it rejects, in this process -------------------------------------------------------


def test_checker_rejects_a_normalizer_that_counts_its_calls() -> None:
    error = _rejection(bad.counting, ["stable", "sample"])
    assert error.rule == "deterministic"
    assert error.field == "samples[0]"
    assert "'stable'" in error.message


def test_checker_rejects_a_normalizer_that_declines_a_sample_only_sometimes() -> None:
    error = _rejection(bad.declines_every_other_call, ["sometimes"])
    assert error.rule == "deterministic"
    assert "'sometimes'" in error.message
    assert "declined" in error.message


def test_checker_rejects_a_normalizer_that_is_not_idempotent() -> None:
    error = _rejection(bad.shouting, [5, "hey"])
    assert (error.field, error.rule) == ("samples[1]", "idempotent")
    assert "'hey'" in error.message
    assert "'hey!!'" in error.message


@pytest.mark.parametrize(
    ("fn", "shown"),
    [(bad.returns_tuple, "('t',)"), (bad.returns_set, "{'t'}"), (bad.returns_nan, "nan")],
)
def test_checker_rejects_a_normalizer_returning_something_that_is_not_a_value(
    fn: object, shown: str
) -> None:
    error = _rejection(fn, ["t"])
    assert error.rule == "canonical-output"
    assert "sample 't'" in error.message
    assert shown in error.message


def test_checker_rejects_a_normalizer_that_fails_with_another_exception() -> None:
    error = _rejection(bad.raises_key_error, ["a", "zzz"])
    assert (error.field, error.rule) == ("samples[1]", "declines-with-normalization-error")
    assert "KeyError" in error.message
    assert "'zzz'" in error.message


def test_checker_rejects_a_normalizer_that_tries_to_change_its_argument() -> None:
    # the checker hands samples over frozen, as a writer does: the attempt itself fails
    error = _rejection(bad.sorts_in_place, [[3, 1, 2]])
    assert error.rule == "declines-with-normalization-error"
    assert "[3, 1, 2]" in error.message and "AttributeError" in error.message


def test_checker_names_the_normalizer_it_rejects() -> None:
    assert "normalizers_for_tests.shouting" in _rejection(bad.shouting, ["a"]).message
    assert "'loud'" in _rejection(bad.shouting, ["a"], name="loud").message


# --- what it rejects, across interpreters ---------------------------------------------------


def test_checker_rejects_a_normalizer_whose_result_depends_on_the_hash_seed() -> None:
    check_normalizer(bad.any_word, [MANY_WORDS], across_interpreters=False)
    error = _rejection(bad.any_word, ["single", MANY_WORDS])
    assert (error.field, error.rule) == ("samples[1]", "same-in-every-interpreter")
    assert "alpha bravo" in error.message
    assert "PYTHONHASHSEED=" in error.message


@pytest.mark.parametrize(
    "fn",
    [
        lambda value: value,
        functools.partial(bad.strip_lower),
        _closure(),
    ],
    ids=["lambda", "partial", "closure"],
)
def test_checker_asks_for_a_module_level_function_when_it_cannot_import_one(fn: object) -> None:
    error = _rejection(fn, ["a"])
    assert (error.field, error.rule) == ("fn", "importable")
    assert "module level" in error.message
    assert "across_interpreters=False" in error.message


def test_checker_rejects_a_function_that_its_module_name_does_not_hold() -> None:
    def impostor(value: Value) -> Value:
        return value

    impostor.__qualname__ = "strip_lower"
    impostor.__module__ = bad.__name__
    error = _rejection(impostor, ["a"])
    assert error.rule == "importable"
    assert "another object" in error.message


def test_checker_reports_a_fresh_interpreter_that_cannot_import_the_normalizer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ghost = types.ModuleType("ghost_normalizers")
    exec("def same(value):\n    return value\n", ghost.__dict__)
    monkeypatch.setitem(sys.modules, "ghost_normalizers", ghost)
    error = _rejection(ghost.same, ["a"])
    assert error.rule == "child-failed"
    assert "ghost_normalizers" in error.message
    assert "PYTHONHASHSEED=" in error.message


def test_checker_gives_up_on_a_fresh_interpreter_that_takes_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checker, "CHILD_TIMEOUT_SECONDS", 0.5)
    error = _rejection(bad.slow_in_child, ["a"])
    assert error.rule == "child-timeout"
    assert "0.5 s" in error.message


# --- arguments ------------------------------------------------------------------------------


def test_checker_rejects_samples_that_are_not_values() -> None:
    with pytest.raises(ContractError) as caught:
        check_normalizer(bad.strip_lower, ["a", {1, 2}])  # type: ignore[list-item]
    assert (caught.value.field, caught.value.rule) == ("samples[1]", "canonical-sample")
    assert not isinstance(caught.value, NormalizerContractError)


@pytest.mark.parametrize("samples", ["one string", b"bytes", {"a": 1}, 5])
def test_checker_rejects_a_single_value_given_as_samples(samples: object) -> None:
    with pytest.raises(ContractError) as caught:
        check_normalizer(bad.strip_lower, samples)  # type: ignore[arg-type]
    assert caught.value.rule == "iterable"


def test_checker_rejects_something_that_is_not_callable() -> None:
    with pytest.raises(ContractError) as caught:
        check_normalizer("text", ["a"])  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.rule) == ("fn", "callable")


def test_checker_errors_are_value_errors_naming_field_and_rule() -> None:
    error = _rejection(bad.shouting, ["a"])
    assert isinstance(error, ValueError)
    assert isinstance(error, ContractError)
    assert str(error).startswith("samples[0]: ")
    assert str(error).endswith("[rule: idempotent]")


# --- check_registry -------------------------------------------------------------------------


def test_registry_check_covers_custom_normalizers_by_their_registry_name() -> None:
    registry = Registry(
        [PredicateContract("status", normalizer="loud")], normalizers={"loud": bad.shouting}
    )
    with pytest.raises(NormalizerContractError) as caught:
        check_registry(registry, {"loud": ["ok"]}, across_interpreters=False)
    assert caught.value.rule == "idempotent"
    assert "'loud'" in caught.value.message


def test_registry_check_requires_samples_for_every_custom_normalizer_in_use() -> None:
    registry = Registry(
        [PredicateContract("status", normalizer="mine")], normalizers={"mine": bad.strip_lower}
    )
    with pytest.raises(ContractError) as caught:
        check_registry(registry, {"text": ["a"]})
    assert caught.value.rule == "samples-for-custom-normalizers"
    assert "'mine'" in caught.value.message


def test_registry_check_rejects_samples_for_an_unknown_normalizer() -> None:
    with pytest.raises(ContractError) as caught:
        check_registry(DEFAULT_REGISTRY, {"nope": ["a"]})
    assert caught.value.rule == "known-normalizer"


def test_registry_check_passes_a_registry_of_well_behaved_normalizers() -> None:
    registry = Registry(
        [PredicateContract("status", normalizer="mine")], normalizers={"mine": bad.strip_lower}
    )
    check_registry(registry, {"mine": [" A ", 5], "text": ["B"]})


def test_check_registry_wants_samples_for_a_custom_normalizer_used_only_by_the_default() -> None:
    from statefuse.registry import PredicateContract

    reg = Registry(
        normalizers={"sku": bad.strip_lower},
        default=PredicateContract("*", normalizer="sku"),
    )
    with pytest.raises(ContractError) as err:
        check_registry(reg, {}, across_interpreters=False)
    assert err.value.rule == "samples-for-custom-normalizers" and "sku" in str(err.value)
