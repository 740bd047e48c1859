"""The registry: which contract governs a predicate, its fingerprint, and refs and group keys."""

from __future__ import annotations

import dataclasses

import normalizers_for_tests as custom
import pytest
from hypothesis import given
from hypothesis import strategies as st

from statefuse.registry import (
    DEFAULT_AUTHORITY_ORDER,
    DEFAULT_CONTRACT,
    DEFAULT_REGISTRY,
    EXACT_CONTRACT,
    Cardinality,
    ContractError,
    NormalizationError,
    Policy,
    PredicateContract,
    Registry,
    RegistryError,
    Value,
    ValueTypeError,
    encode_value,
)
from statefuse.registry.value import INT_MAX, INT_MIN

AMOUNT = PredicateContract("amount", normalizer="number")
NAME = PredicateContract("name", normalizer="text", cardinality=Cardinality.MANY)
HR_NAME = PredicateContract("name", namespace="hr", normalizer="exact", policy=Policy.LATEST)
CONTRACTS = [AMOUNT, NAME, HR_NAME, PredicateContract("born", normalizer="date")]

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(INT_MIN, INT_MAX)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=5,
)
#: Numbers written many ways, mixed with values the number normalizer declines.
number_like = (
    st.integers(-1000, 1000)
    | st.integers(-1000, 1000).map(float)
    | st.integers(-1000, 1000).map(lambda i: f"{i:,}")
    | st.integers(-1000, 1000).map(lambda i: f" {i}.00 ")
    | st.sampled_from(["1,00", "abc", "", "1000", "-0", True, None])
    | values
)


# --- which contract applies -----------------------------------------------------------------


def test_registry_finds_the_contract_of_a_predicate_in_any_namespace() -> None:
    registry = Registry(CONTRACTS)
    assert registry.contract_for("finance", "amount") == AMOUNT
    assert registry.contract_for("hr", "amount") == AMOUNT


def test_registry_prefers_a_namespace_specific_contract() -> None:
    registry = Registry(CONTRACTS)
    assert registry.contract_for("hr", "name") == HR_NAME
    assert registry.contract_for("sales", "name") == NAME


def test_registry_prefers_a_namespace_specific_contract_whatever_the_declaration_order() -> None:
    assert Registry([HR_NAME, NAME]).contract_for("hr", "name") == HR_NAME
    assert Registry([NAME, HR_NAME]).contract_for("hr", "name") == HR_NAME


def test_registry_gives_undeclared_predicates_the_default_contract() -> None:
    assert Registry(CONTRACTS).contract_for("hr", "salary") == DEFAULT_CONTRACT
    assert DEFAULT_CONTRACT.functional
    assert DEFAULT_CONTRACT.normalizer == "natural"
    assert DEFAULT_CONTRACT.policy is Policy.SURFACE


def test_registry_uses_a_custom_default_contract() -> None:
    default = PredicateContract("*", normalizer="text", cardinality=Cardinality.MANY)
    registry = Registry([AMOUNT], default=default)
    assert registry.contract_for("x", "anything") == default
    assert registry.contract_for("x", "amount") == AMOUNT


def test_registry_applies_a_namespace_only_contract_in_that_namespace_only() -> None:
    registry = Registry([HR_NAME])
    assert registry.contract_for("hr", "name") == HR_NAME
    assert registry.contract_for("sales", "name") == DEFAULT_CONTRACT


def test_registry_lists_its_contracts_in_a_fixed_order() -> None:
    assert Registry(CONTRACTS).contracts == Registry(CONTRACTS[::-1]).contracts
    assert [c.predicate for c in Registry(CONTRACTS).contracts] == [
        "amount",
        "born",
        "name",
        "name",
    ]


# --- what it rejects ------------------------------------------------------------------------


def test_registry_rejects_a_contract_naming_an_unknown_normalizer() -> None:
    with pytest.raises(ContractError) as caught:
        Registry([PredicateContract("amount", normalizer="numbr")])
    assert isinstance(caught.value, RegistryError)
    assert (caught.value.field, caught.value.rule) == ("normalizer", "unknown-normalizer")
    assert "numbr@1" in caught.value.message


def test_registry_rejects_a_default_contract_naming_an_unknown_normalizer() -> None:
    with pytest.raises(ContractError) as caught:
        Registry(default=PredicateContract("*", normalizer="nope"))
    assert caught.value.rule == "unknown-normalizer"


def test_registry_rejects_two_different_contracts_for_one_predicate_and_namespace() -> None:
    with pytest.raises(ContractError) as caught:
        Registry([AMOUNT, dataclasses.replace(AMOUNT, policy=Policy.LATEST)])
    assert caught.value.rule == "one-contract-per-predicate"
    assert "'amount'" in caught.value.message


def test_registry_accepts_the_same_contract_declared_twice() -> None:
    assert Registry([AMOUNT, AMOUNT]) == Registry([AMOUNT])


def test_registry_rejects_a_custom_normalizer_that_overrides_a_builtin_name() -> None:
    with pytest.raises(ContractError) as caught:
        Registry(normalizers={"text": custom.strip_lower})
    assert caught.value.rule == "no-builtin-override"


def test_registry_rejects_things_that_are_not_contracts() -> None:
    with pytest.raises(ContractError) as caught:
        Registry([{"predicate": "amount"}])  # type: ignore[list-item]
    assert caught.value.rule == "type"


def test_registry_accepts_contracts_naming_its_custom_normalizers() -> None:
    contract = PredicateContract("status", normalizer="mine")
    registry = Registry([contract], normalizers={"mine": custom.strip_lower})
    assert registry.normalizer("mine") is custom.strip_lower
    assert registry.normal_form(contract, " OK ") == "ok"


# --- fingerprint ----------------------------------------------------------------------------


@given(st.permutations(CONTRACTS))
def test_registry_fingerprint_does_not_depend_on_contract_order(
    order: list[PredicateContract],
) -> None:
    assert Registry(order).fingerprint == Registry(CONTRACTS).fingerprint
    assert Registry(order) == Registry(CONTRACTS)
    assert hash(Registry(order)) == hash(Registry(CONTRACTS))


@pytest.mark.parametrize(
    "change",
    [
        {"predicate": "amount2"},
        {"namespace": "finance"},
        {"cardinality": Cardinality.MANY},
        {"normalizer": "money"},
        {"ref_uses_normal_form": False},
        {"policy": Policy.AUTHORITY},
    ],
    ids=lambda change: next(iter(change)),
)
def test_registry_fingerprint_changes_when_any_contract_field_changes(
    change: dict[str, object],
) -> None:
    changed = dataclasses.replace(AMOUNT, **change)  # type: ignore[arg-type]
    assert Registry([changed, NAME]).fingerprint != Registry([AMOUNT, NAME]).fingerprint
    assert Registry([changed, NAME]) != Registry([AMOUNT, NAME])


def test_registry_fingerprint_changes_with_the_default_contract() -> None:
    default = dataclasses.replace(DEFAULT_CONTRACT, policy=Policy.LATEST)
    assert Registry(default=default).fingerprint != DEFAULT_REGISTRY.fingerprint


def test_registry_fingerprint_changes_with_a_contract_added() -> None:
    assert Registry(CONTRACTS).fingerprint != Registry(CONTRACTS[1:]).fingerprint


def test_registry_fingerprint_names_custom_normalizers_but_cannot_see_their_code() -> None:
    plain = Registry()
    mine = Registry(normalizers={"mine": custom.strip_lower})
    same_name_other_code = Registry(normalizers={"mine": custom.Nested.upper})
    assert mine.fingerprint != plain.fingerprint
    assert mine.fingerprint == same_name_other_code.fingerprint


def test_registry_fingerprint_is_a_32_byte_digest_and_stable_across_instances() -> None:
    assert len(DEFAULT_REGISTRY.fingerprint) == 32
    assert Registry().fingerprint == DEFAULT_REGISTRY.fingerprint


# --- authority order ------------------------------------------------------------------------


def test_a_registry_ranks_authorities_system_user_operator_tool_agent_unless_told_otherwise() -> (
    None
):
    assert DEFAULT_AUTHORITY_ORDER == ("system", "user", "operator", "tool", "agent")
    assert Registry().authority_order == DEFAULT_AUTHORITY_ORDER
    assert Registry(authority_order=["lead", "bot"]).authority_order == ("lead", "bot")


@given(
    st.lists(
        st.sampled_from(["system", "user", "bot", "lead"]), min_size=1, max_size=4, unique=True
    ),
    st.lists(
        st.sampled_from(["system", "user", "bot", "lead"]), min_size=1, max_size=4, unique=True
    ),
)
def test_registries_share_a_fingerprint_only_if_they_rank_authorities_alike(
    a: list[str], b: list[str]
) -> None:
    same = (
        Registry(CONTRACTS, authority_order=a).fingerprint
        == Registry(CONTRACTS, authority_order=b).fingerprint
    )
    assert same == (a == b)


def test_registry_fingerprint_changes_with_the_authority_order_and_states_tell_them_apart() -> None:
    from statefuse import Writer, materialize

    flipped = Registry(authority_order=tuple(reversed(DEFAULT_AUTHORITY_ORDER)))
    assert flipped.fingerprint != DEFAULT_REGISTRY.fingerprint and flipped != DEFAULT_REGISTRY
    assert Registry(authority_order=list(DEFAULT_AUTHORITY_ORDER)) == DEFAULT_REGISTRY
    ops = [Writer("a", clock=lambda: 0).claim("p", "x", "owner", "dana", authority="user")]
    assert materialize(ops).digest() != materialize(ops, registry=flipped).digest()


@pytest.mark.parametrize(
    ("order", "field", "rule"),
    [
        ("system", "authority_order", "sequence-of-str"),
        (None, "authority_order", "sequence-of-str"),
        ({"user"}, "authority_order", "sequence-of-str"),
        ((), "authority_order", "non-empty"),
        (("user", ""), "authority_order[1]", "non-empty-str"),
        (("user", 3), "authority_order[1]", "non-empty-str"),
        (("user", "agent", "user"), "authority_order[2]", "unique"),
    ],
)
def test_a_bad_authority_order_is_refused_naming_the_field_and_the_rule(
    order: object, field: str, rule: str
) -> None:
    with pytest.raises(ContractError) as err:
        Registry(authority_order=order)  # type: ignore[arg-type]
    assert (err.value.field, err.value.rule) == (field, rule)
    assert isinstance(err.value, ValueError)


# --- ref_value and group_key ----------------------------------------------------------------


def test_ref_value_is_the_normal_form_so_equal_values_share_a_ref() -> None:
    assert DEFAULT_REGISTRY.ref_value(AMOUNT, "1,000") == DEFAULT_REGISTRY.ref_value(AMOUNT, 1000)
    assert DEFAULT_REGISTRY.ref_value(AMOUNT, 1000.0) == "1000"


def test_ref_value_is_the_value_itself_when_the_contract_says_so() -> None:
    exact_ref = dataclasses.replace(AMOUNT, ref_uses_normal_form=False)
    assert DEFAULT_REGISTRY.ref_value(exact_ref, "1,000") == "1,000"
    assert DEFAULT_REGISTRY.ref_value(DEFAULT_CONTRACT, [1, {"a": 2}]) == [1, {"a": 2}]


def test_ref_value_raises_for_a_value_the_normalizer_declines() -> None:
    with pytest.raises(NormalizationError) as caught:
        DEFAULT_REGISTRY.ref_value(AMOUNT, "lots")
    assert caught.value.rule == "normalizer:number"


@pytest.mark.parametrize(
    ("contract", "a", "b"),
    [
        (AMOUNT, "1,000", 1000),
        (AMOUNT, -0.0, "0"),
        (NAME, "Ada  LOVELACE", "ada lovelace"),
        (
            PredicateContract("at", normalizer="datetime"),
            "2026-03-25T11:00+01:00",
            "2026-03-25T10:00Z",
        ),
        (PredicateContract("price", normalizer="money"), "$5", {"amount": 5.0, "currency": "usd"}),
        (PredicateContract("ok", normalizer="boolean"), "yes", 1),
    ],
)
def test_group_key_makes_values_with_one_normal_form_agree(
    contract: PredicateContract, a: Value, b: Value
) -> None:
    assert DEFAULT_REGISTRY.group_key(contract, a) == DEFAULT_REGISTRY.group_key(contract, b)


def test_group_key_under_exact_tells_one_apart_from_one_point_zero_and_true() -> None:
    keys = {DEFAULT_REGISTRY.group_key(EXACT_CONTRACT, v) for v in (1, 1.0, True, "1")}
    assert len(keys) == 4


def test_group_key_under_the_natural_default_joins_one_and_one_point_zero_only() -> None:
    key = DEFAULT_REGISTRY.group_key
    assert key(DEFAULT_CONTRACT, 1) == key(DEFAULT_CONTRACT, 1.0)
    assert len({key(DEFAULT_CONTRACT, v) for v in (1, True, "1", 1.5)}) == 4
    assert key(DEFAULT_CONTRACT, "Acme  Corp ") == key(DEFAULT_CONTRACT, "acme corp")


def test_group_key_keys_a_declined_value_by_its_exact_bytes() -> None:
    key = DEFAULT_REGISTRY.group_key(AMOUNT, "lots")
    assert key == DEFAULT_REGISTRY.group_key(AMOUNT, "lots")
    assert key != DEFAULT_REGISTRY.group_key(AMOUNT, " lots")
    assert key == DEFAULT_REGISTRY.group_key(EXACT_CONTRACT, "lots")


def test_group_key_never_lets_a_declined_value_collide_with_a_normal_form() -> None:
    # "1,00" is declined; its exact bytes live in another tag space than any normal form.
    declined = DEFAULT_REGISTRY.group_key(AMOUNT, "1,00")
    assert declined != DEFAULT_REGISTRY.group_key(AMOUNT, "100")
    assert declined != DEFAULT_REGISTRY.group_key(AMOUNT, "1")
    assert declined[:1] != DEFAULT_REGISTRY.group_key(AMOUNT, "100")[:1]


@given(number_like, number_like)
def test_group_key_agrees_exactly_when_normal_forms_agree_or_declined_values_are_identical(
    a: Value, b: Value
) -> None:
    def normal(value: Value) -> bytes | None:
        try:
            return encode_value(DEFAULT_REGISTRY.normal_form(AMOUNT, value))
        except NormalizationError:
            return None

    same_key = DEFAULT_REGISTRY.group_key(AMOUNT, a) == DEFAULT_REGISTRY.group_key(AMOUNT, b)
    na, nb = normal(a), normal(b)
    if na is not None and nb is not None:
        assert same_key == (na == nb)
    elif na is None and nb is None:
        assert same_key == (encode_value(a) == encode_value(b))
    else:
        assert not same_key


def test_group_key_falls_back_to_exact_bytes_when_a_custom_normalizer_fails() -> None:
    contract = PredicateContract("k", normalizer="fails")
    registry = Registry([contract], normalizers={"fails": custom.raises_key_error})
    assert registry.group_key(contract, "b") == registry.group_key(EXACT_CONTRACT, "b")
    with pytest.raises(NormalizationError) as caught:
        registry.normal_form(contract, "b")
    assert caught.value.rule == "normalizer:fails"


def test_normal_form_rejects_a_custom_normalizer_result_that_is_not_a_value() -> None:
    contract = PredicateContract("k", normalizer="tuple")
    registry = Registry([contract], normalizers={"tuple": custom.returns_tuple})  # type: ignore[dict-item]
    with pytest.raises(ValueTypeError):
        registry.normal_form(contract, "a")
    assert registry.group_key(contract, "a") == registry.group_key(EXACT_CONTRACT, "a")


def test_registry_rejects_a_custom_normalizer_that_is_not_callable() -> None:
    with pytest.raises(ContractError) as err:
        Registry(normalizers={"sku": 42})  # type: ignore[dict-item]
    assert (err.value.field, err.value.rule) == ("normalizers", "callable")


def test_registry_names_an_unknown_normalizer_with_a_typed_error() -> None:
    with pytest.raises(ContractError) as err:
        Registry().normalizer("nope")
    assert err.value.rule == "unknown-normalizer"
