"""SEMANTICS §2: ops, their canonical encoding and their ids.

Ids and refs are recomputed here from the formulas in SEMANTICS with msgpack and blake3 directly
(`reference_encode` from test_value), never with the library's helpers. `ops()` is the strategy
for well-formed ops of every kind; test_opset reuses it.
"""

from __future__ import annotations

import math

import blake3
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_value import INT64_MAX, documented_limits, reference_encode, values

import statefuse.core.op
from statefuse import (
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    InputError,
    Layer,
    OpRuleError,
    Writer,
    compute_claim_ref,
    confidence_rank,
    decode_op,
)
from statefuse.core.op import decode_ops
from statefuse.registry import (
    BUILTIN_NORMALIZERS,
    DEFAULT_REGISTRY,
    EXACT_CONTRACT,
    EXACT_REGISTRY,
    MAX_DEPTH,
    MAX_STRING_BYTES,
    EncodingError,
    NormalizationError,
    PredicateContract,
    Registry,
    StateFuseError,
    ValueRuleError,
    ValueTypeError,
    decode_value,
    encode_value,
)

CLAIM_REF_DOMAIN = b"statefuse/claim_ref/v1"
MAX_NAME_CHARS = 1024
MAX_TEXT_CHARS = 16_384
MAX_LIST_ITEMS = 1024


def test_op_limits_are_the_documented_ones():
    documented = documented_limits()
    for name, value in [
        ("MAX_NAME_CHARS", MAX_NAME_CHARS),
        ("MAX_TEXT_CHARS", MAX_TEXT_CHARS),
        ("MAX_LIST_ITEMS", MAX_LIST_ITEMS),
        ("MAX_LAMPORT", 2**63 - 1),
    ]:
        assert getattr(statefuse.core.op, name) == value == documented.get(name), name


def expected_claim_ref(namespace, subject, predicate, scope, ref_value) -> bytes:
    """SEMANTICS §2, written out independently of the library."""
    body = reference_encode([namespace, subject, predicate, scope, ref_value])
    return blake3.blake3(CLAIM_REF_DOMAIN + body).digest()


def _id(tag: str) -> bytes:
    return blake3.blake3(tag.encode()).digest()


# --- strategies -----------------------------------------------------------------------------------

#: Ids drawn from a small pool, so that lists of ids often repeat one.
ID_POOL = tuple(blake3.blake3(b"id%d" % i).digest() for i in range(24))
ids = st.sampled_from(ID_POOL)
names = st.text(min_size=1, max_size=8)
authors = st.one_of(names, st.binary(min_size=1, max_size=40))
lamports = st.one_of(st.just(1), st.just(INT64_MAX), st.integers(1, INT64_MAX))
millis = st.one_of(st.just(0), st.integers(0, INT64_MAX))
scopes = st.one_of(
    st.sampled_from(["global", "hypothetical", "draft"]),
    st.builds(
        "{}:{}".format,
        st.sampled_from(["task", "session"]),
        st.text(min_size=1, max_size=10).filter(lambda s: not s[0].isspace()),
    ),
)
texts = st.text(max_size=12)
op_values = values(max_leaves=5)


def _claims() -> st.SearchStrategy[ClaimAdded]:
    return st.builds(
        ClaimAdded,
        author=authors,
        lamport=lamports,
        wall_ms=millis,
        namespace=names,
        subject=names,
        predicate=names,
        value=op_values,
        claim_ref=ids,
        scope=scopes,
        confidence=st.one_of(st.none(), st.floats(0.0, 1.0)),
        evidence=st.lists(ids, max_size=3),
        provenance=texts,
        authority=st.one_of(st.just(""), names),
        layer=st.one_of(st.sampled_from(Layer), st.sampled_from([m.value for m in Layer])),
        visibility=st.lists(names, max_size=3),
        constraint=st.one_of(st.just(""), names),
        depends_on=st.lists(ids, max_size=3),
        expires=st.one_of(st.none(), millis),
        kind=names,
        reasserts=st.lists(ids, max_size=2),
    )


def _retractions() -> st.SearchStrategy[ClaimRetracted]:
    targets = st.one_of(st.tuples(ids, st.none()), st.tuples(st.none(), ids), st.tuples(ids, ids))
    return st.builds(
        lambda t, **kw: ClaimRetracted(target_claim_id=t[0], target_claim_ref=t[1], **kw),
        targets,
        author=authors,
        lamport=lamports,
        wall_ms=millis,
        reason=texts,
        superseded_by=st.one_of(st.none(), ids),
    )


def ops() -> st.SearchStrategy[object]:
    """Well-formed ops of every kind, with every optional field exercised."""
    return st.one_of(
        st.builds(
            EvidenceAdded,
            author=authors,
            lamport=lamports,
            wall_ms=millis,
            source=texts,
            content=op_values,
        ),
        _claims(),
        _retractions(),
        st.builds(
            DecisionAdded,
            author=authors,
            lamport=lamports,
            wall_ms=millis,
            locus=ids,
            conflict_id=ids,
            selected_claim_id=ids,
            scope=scopes,
            reason=texts,
            payload=op_values,
        ),
    )


# --- ids and round trips --------------------------------------------------------------------------


@given(ops())
def test_op_id_is_blake3_of_the_canonical_encoding_and_decoding_gives_back_the_same_op(op):
    data = op.encode()
    assert op.op_id == blake3.blake3(data).digest()
    as_map = decode_value(data)
    assert reference_encode(as_map) == data
    assert as_map["op"] == type(op).KIND
    assert as_map["v"] == op._version() and type(as_map["v"]) is int
    decoded = decode_op(data)
    assert type(decoded) is type(op)
    assert decoded == op and hash(decoded) == hash(op)
    assert decoded.op_id == op.op_id
    assert decoded.encode() == data


def test_claim_id_and_evidence_id_are_the_op_id():
    writer = Writer("w", clock=lambda: 0)
    evidence = writer.evidence("doc", [1])
    claim = writer.claim("ns", "s", "p", 1, evidence=[evidence.evidence_id])
    assert evidence.evidence_id == evidence.op_id == blake3.blake3(evidence.encode()).digest()
    assert claim.claim_id == claim.op_id == blake3.blake3(claim.encode()).digest()
    assert claim.evidence == (evidence.op_id,)


@given(names, names, names, scopes, op_values)
def test_writer_stores_the_claim_ref_of_the_semantics_formula(
    namespace, subject, predicate, scope, value
):
    writer = Writer("w", registry=EXACT_REGISTRY, clock=lambda: 0)
    claim = writer.claim(namespace, subject, predicate, value, scope=scope)
    expected = expected_claim_ref(namespace, subject, predicate, scope, value)
    assert claim.claim_ref == expected
    assert compute_claim_ref(namespace, subject, predicate, scope, value) == expected


def test_claim_ref_depends_on_every_part_of_the_key_scope_and_value():
    base = ("ns", "s", "p", "global", "v")
    refs = {compute_claim_ref(*base)}
    for i, other in enumerate(["ns2", "s2", "p2", "task:t", "v2"]):
        changed = list(base)
        changed[i] = other
        refs.add(compute_claim_ref(*changed))
    assert len(refs) == 6


def strip_lower(value):
    """A custom normalizer for the registry tests: strings agree up to case and outer space."""
    if type(value) is not str:
        raise NormalizationError("value", "normalizer:strip_lower", f"needs a str: {value!r}")
    return value.strip().lower()


def _normalizing_registry(normalizer: str, *, ref_uses_normal_form: bool = True) -> Registry:
    custom = {} if normalizer in BUILTIN_NORMALIZERS else {normalizer: strip_lower}
    contract = PredicateContract(
        "owner", normalizer=normalizer, ref_uses_normal_form=ref_uses_normal_form
    )
    return Registry([contract], normalizers=custom)


@pytest.mark.parametrize("normalizer", ["text", "strip_lower"])
def test_values_that_agree_under_the_contract_share_a_claim_ref_from_the_normal_form(normalizer):
    writer = Writer("w", registry=_normalizing_registry(normalizer), clock=lambda: 0)
    a = writer.claim("proj", "launch", "owner", "Dana")
    b = writer.claim("proj", "launch", "owner", "  DANA ")
    assert (
        a.claim_ref
        == b.claim_ref
        == expected_claim_ref("proj", "launch", "owner", "global", "dana")
    )
    assert a.claim_id != b.claim_id
    other = writer.claim("proj", "launch", "owner", "Lee")
    assert other.claim_ref != a.claim_ref


@pytest.mark.parametrize("normalizer", ["text", "strip_lower"])
def test_without_ref_uses_normal_form_agreeing_values_keep_their_own_refs(normalizer):
    registry = _normalizing_registry(normalizer, ref_uses_normal_form=False)
    writer = Writer("w", registry=registry, clock=lambda: 0)
    a = writer.claim("proj", "launch", "owner", "Dana")
    b = writer.claim("proj", "launch", "owner", "  DANA ")
    assert a.claim_ref == expected_claim_ref("proj", "launch", "owner", "global", "Dana")
    assert b.claim_ref == expected_claim_ref("proj", "launch", "owner", "global", "  DANA ")


@given(st.text(max_size=12), st.text(" \t", max_size=3), st.text(" \n", max_size=3))
def test_padding_that_a_normalizer_strips_never_changes_the_claim_ref(text, left, right):
    writer = Writer("w", registry=_normalizing_registry("strip_lower"), clock=lambda: 0)
    plain = writer.claim("ns", "s", "owner", text)
    padded = writer.claim("ns", "s", "owner", left + text + right)
    assert plain.claim_ref == padded.claim_ref
    assert plain.claim_ref == expected_claim_ref("ns", "s", "owner", "global", strip_lower(text))


def test_predicates_without_a_normalizing_contract_use_the_exact_value_for_the_ref():
    registry = _normalizing_registry("strip_lower").with_default(EXACT_CONTRACT)
    writer = Writer("w", registry=registry, clock=lambda: 0)
    claim = writer.claim("ns", "s", "other", " X ")
    assert claim.claim_ref == expected_claim_ref("ns", "s", "other", "global", " X ")


def _claim(**overrides) -> ClaimAdded:
    fields = {
        "author": "w",
        "lamport": 1,
        "wall_ms": 0,
        "namespace": "ns",
        "subject": "s",
        "predicate": "p",
        "value": 1,
        "claim_ref": _id("ref"),
    }
    fields.update(overrides)
    return ClaimAdded(**fields)


@pytest.mark.parametrize(
    "make",
    [lambda: _claim(value={"b": [1.5], "a": None}), lambda: _retraction(), lambda: _decision()],
)
def test_ops_built_twice_from_the_same_content_are_equal_and_hash_equal(make):
    a, b = make(), make()
    assert a is not b
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1


def test_ops_with_different_content_are_different():
    assert _claim() != _claim(lamport=2)
    assert _claim() != _claim(author=b"w")
    assert _claim() != _claim(layer=Layer.WORKING)
    assert _claim() != "not an op"


@pytest.mark.parametrize(("a", "b"), [(1, 1.0), (1, True), (1.0, True), (0, False), (0.0, -0.0)])
def test_values_equal_in_python_but_different_in_statefuse_give_different_claims(a, b):
    assert _claim(value=a).claim_id != _claim(value=b).claim_id
    assert _claim(value=[a]).claim_id != _claim(value=[b]).claim_id
    assert compute_claim_ref("ns", "s", "p", "global", a) != compute_claim_ref(
        "ns", "s", "p", "global", b
    )


@given(
    st.lists(ids, max_size=3),
    st.lists(ids, max_size=3),
    st.lists(ids, max_size=3),
    st.lists(names, max_size=3),
    st.data(),
)
def test_set_like_fields_are_stored_sorted_and_unique_so_input_order_does_not_matter(
    evidence, depends_on, reasserts, visibility, data
):
    def shuffled(items):
        with_dupes = (
            items + data.draw(st.lists(st.sampled_from(items), max_size=3)) if items else []
        )
        return data.draw(st.permutations(with_dupes))

    a = _claim(evidence=evidence, depends_on=depends_on, reasserts=reasserts, visibility=visibility)
    b = _claim(
        evidence=shuffled(evidence),
        depends_on=tuple(shuffled(depends_on)),
        reasserts=set(reasserts),
        visibility=shuffled(visibility),
    )
    assert a.op_id == b.op_id and a.encode() == b.encode()
    assert a.evidence == tuple(sorted(set(evidence)))
    assert a.depends_on == tuple(sorted(set(depends_on)))
    assert a.reasserts == tuple(sorted(set(reasserts)))
    assert b.visibility == tuple(sorted(set(visibility), key=lambda r: r.encode("utf-8")))


def test_confidence_given_as_int_zero_or_one_is_stored_as_a_float():
    assert _claim(confidence=1).confidence == 1.0 and type(_claim(confidence=1).confidence) is float
    assert _claim(confidence=1).op_id == _claim(confidence=1.0).op_id
    assert _claim(confidence=0).op_id == _claim(confidence=0.0).op_id


#: A claim the first release wrote (confidence 1.0, the default then), and its id: pinned, so
#: claims that state a confidence keep their bytes and ids now that unset exists.
FIRST_RELEASE_CLAIM = bytes.fromhex(
    "de0016a6617574686f72a177a9617574686f72697479a0a9636c61696d5f726566c420000102030405060708"
    "090a0b0c0d0e0f101112131415161718191a1b1c1d1e1faa636f6e666964656e6365cb3ff0000000000000aa"
    "636f6e73747261696e74a0aa646570656e64735f6f6e90a865766964656e636590a765787069726573c0a46b"
    "696e64a466616374a76c616d706f727401a56c61796572a466616374a96e616d657370616365a26e73a26f70"
    "aa436c61696d4164646564a9707265646963617465a170aa70726f76656e616e6365a0a97265617373657274"
    "7390a573636f7065a6676c6f62616ca77375626a656374a173a17601a576616c756501aa7669736962696c69"
    "747990a777616c6c5f6d7300"
)
FIRST_RELEASE_CLAIM_ID = "fc0b070e79e9e9c3cd30e1f5f6da0bd52bd650df0c75cef07efc18ef718065af"


def test_a_claim_stated_at_confidence_one_keeps_the_bytes_and_id_of_the_first_release():
    claim = _claim(claim_ref=bytes(range(32)), confidence=1.0)
    assert claim.encode() == FIRST_RELEASE_CLAIM
    assert claim.op_id.hex() == FIRST_RELEASE_CLAIM_ID
    decoded = decode_op(FIRST_RELEASE_CLAIM)
    assert decoded.confidence == 1.0 and decoded.op_id == claim.op_id


def test_a_claim_without_a_stated_confidence_is_unset_and_encodes_without_the_field():
    unset = _claim(claim_ref=bytes(range(32)))
    assert unset.confidence is None
    fields = unset.to_value()
    assert "confidence" not in fields and fields["v"] == 2
    assert unset.encode() == encode_value(fields)
    assert unset.op_id != _claim(claim_ref=bytes(range(32)), confidence=1.0).op_id
    back = decode_op(unset.encode())
    assert back.confidence is None and back.op_id == unset.op_id
    assert decode_ops([unset.encode()] * 4)[3].confidence is None  # the batch path agrees


def test_an_unset_confidence_ranks_below_every_stated_one():
    assert confidence_rank(None) < confidence_rank(0.0) < confidence_rank(0.5)
    assert confidence_rank(None) == confidence_rank(None)


def test_layer_may_be_given_as_the_enum_or_its_value():
    assert _claim(layer="working").op_id == _claim(layer=Layer.WORKING).op_id
    assert _claim(layer="working").layer is Layer.WORKING


def test_values_nested_one_level_under_the_depth_limit_round_trip_inside_an_op():
    value: object = None
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    op = _claim(value=value)
    assert decode_op(op.encode()) == op


def _nested(depth: int) -> object:
    value: object = None
    for _ in range(depth):
        value = {"k": value}
    return value


def _big() -> list[bytes]:
    return [b"\x00" * MAX_STRING_BYTES] * 4


@pytest.mark.parametrize(
    "make",
    [
        lambda: _claim(value=_nested(MAX_DEPTH)),
        lambda: Writer("w").evidence("doc", _nested(MAX_DEPTH)),
        lambda: Writer("w").decide(
            locus=_id("l"),
            conflict_id=_id("c"),
            selected_claim_id=_id("s"),
            payload=_nested(MAX_DEPTH),
        ),
        lambda: Writer("w").evidence("doc", _big()),
        lambda: _claim(value=_big()),
    ],
    ids=["claim-deep", "evidence-deep", "decision-deep", "evidence-big", "claim-big"],
)
def test_every_op_a_constructor_accepts_can_be_decoded_from_its_own_encoding(make):
    try:
        op = make()
    except InputError:
        return
    assert decode_op(op.encode()) == op


# --- field validation -----------------------------------------------------------------------------


def _evidence(**overrides) -> EvidenceAdded:
    fields = {"author": "w", "lamport": 1, "wall_ms": 0, "source": "doc", "content": None}
    fields.update(overrides)
    return EvidenceAdded(**fields)


def _retraction(**overrides) -> ClaimRetracted:
    fields = {"author": "w", "lamport": 1, "wall_ms": 0, "target_claim_id": _id("c")}
    fields.update(overrides)
    return ClaimRetracted(**fields)


def _decision(**overrides) -> DecisionAdded:
    fields = {
        "author": "w",
        "lamport": 1,
        "wall_ms": 0,
        "locus": _id("l"),
        "conflict_id": _id("c"),
        "selected_claim_id": _id("s"),
    }
    fields.update(overrides)
    return DecisionAdded(**fields)


_LONG_NAME = "x" * (MAX_NAME_CHARS + 1)
_LONG_TEXT = "x" * (MAX_TEXT_CHARS + 1)
_MANY_IDS = [_id(str(i)) for i in range(MAX_LIST_ITEMS + 1)]

#: (constructor, field, bad input, error class, expected .field, expected .rule)
FIELD_CASES = [
    (_claim, "author", 1, OpRuleError, "author", "author-type"),
    (_claim, "author", None, OpRuleError, "author", "author-type"),
    (_claim, "author", "", OpRuleError, "author", "name-length"),
    (_claim, "author", _LONG_NAME, OpRuleError, "author", "name-length"),
    (_claim, "author", b"", OpRuleError, "author", "author-length"),
    (_claim, "author", b"x" * (MAX_NAME_CHARS + 1), OpRuleError, "author", "author-length"),
    (_claim, "author", "\ud800", OpRuleError, "author", "utf8"),
    (_claim, "lamport", 0, OpRuleError, "lamport", "lamport-range"),
    (_claim, "lamport", -1, OpRuleError, "lamport", "lamport-range"),
    (_claim, "lamport", INT64_MAX + 1, OpRuleError, "lamport", "lamport-range"),
    (_claim, "lamport", True, OpRuleError, "lamport", "int"),
    (_claim, "lamport", 1.0, OpRuleError, "lamport", "int"),
    (_claim, "lamport", "1", OpRuleError, "lamport", "int"),
    (_claim, "wall_ms", -1, OpRuleError, "wall_ms", "ms-range"),
    (_claim, "wall_ms", INT64_MAX + 1, OpRuleError, "wall_ms", "ms-range"),
    (_claim, "wall_ms", 1.5, OpRuleError, "wall_ms", "int"),
    (_claim, "wall_ms", None, OpRuleError, "wall_ms", "int"),
    (_claim, "namespace", "", OpRuleError, "namespace", "name-length"),
    (_claim, "namespace", _LONG_NAME, OpRuleError, "namespace", "name-length"),
    (_claim, "namespace", b"ns", OpRuleError, "namespace", "str"),
    (_claim, "subject", 1, OpRuleError, "subject", "str"),
    (_claim, "subject", "\udc80", OpRuleError, "subject", "utf8"),
    (_claim, "predicate", None, OpRuleError, "predicate", "str"),
    (_claim, "kind", "", OpRuleError, "kind", "name-length"),
    (_claim, "value", math.nan, ValueRuleError, "value", "finite-float"),
    (_claim, "value", [1, math.inf], ValueRuleError, "value[1]", "finite-float"),
    (_claim, "value", 1 << 64, ValueRuleError, "value", "int64"),
    (_claim, "value", {1}, ValueTypeError, "value", "value-type"),
    (_claim, "value", (1, 2), ValueTypeError, "value", "value-type"),
    (_claim, "value", {1: "a"}, ValueTypeError, "value", "str-map-keys"),
    (_claim, "value", "\ud800", ValueRuleError, "value", "utf8"),
    (_claim, "claim_ref", b"\x00" * 31, OpRuleError, "claim_ref", "id-length"),
    (_claim, "claim_ref", b"\x00" * 33, OpRuleError, "claim_ref", "id-length"),
    (_claim, "claim_ref", "x" * 32, OpRuleError, "claim_ref", "id-type"),
    (_claim, "claim_ref", bytearray(32), OpRuleError, "claim_ref", "id-type"),
    (_claim, "claim_ref", None, OpRuleError, "claim_ref", "id-type"),
    (_claim, "scope", "", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "task:", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "tasks:x", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "Global", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "global ", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "task: x", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "session:", OpRuleError, "scope", "scope-format"),
    (_claim, "scope", "task:" + "x" * 1025, OpRuleError, "scope", "scope-format"),
    (_claim, "scope", 1, OpRuleError, "scope", "str"),
    (_claim, "confidence", -0.1, OpRuleError, "confidence", "unit-interval"),
    (_claim, "confidence", 1.0000001, OpRuleError, "confidence", "unit-interval"),
    (_claim, "confidence", math.nan, OpRuleError, "confidence", "unit-interval"),
    (_claim, "confidence", math.inf, OpRuleError, "confidence", "unit-interval"),
    (_claim, "confidence", 2, OpRuleError, "confidence", "float"),
    (_claim, "confidence", True, OpRuleError, "confidence", "float"),
    (_claim, "confidence", "0.5", OpRuleError, "confidence", "float"),
    (_claim, "evidence", "abc", OpRuleError, "evidence", "list"),
    (_claim, "evidence", _id("e"), OpRuleError, "evidence", "list"),
    (_claim, "evidence", [b"\x00" * 31], OpRuleError, "evidence[]", "id-length"),
    (_claim, "evidence", [1], OpRuleError, "evidence[]", "id-type"),
    (_claim, "evidence", _MANY_IDS, OpRuleError, "evidence", "list-length"),
    (_claim, "depends_on", None, OpRuleError, "depends_on", "list"),
    (_claim, "depends_on", [_id("d"), b""], OpRuleError, "depends_on[]", "id-length"),
    (_claim, "reasserts", {"a": 1}, OpRuleError, "reasserts", "list"),
    (_claim, "reasserts", ["x" * 32], OpRuleError, "reasserts[]", "id-type"),
    (_claim, "visibility", "admin", OpRuleError, "visibility", "list"),
    (_claim, "visibility", [""], OpRuleError, "visibility[]", "name-length"),
    (_claim, "visibility", [1], OpRuleError, "visibility[]", "str"),
    (_claim, "visibility", ["r"] * (MAX_LIST_ITEMS + 1), OpRuleError, "visibility", "list-length"),
    (_claim, "provenance", 1, OpRuleError, "provenance", "str"),
    (_claim, "provenance", _LONG_TEXT, OpRuleError, "provenance", "text-length"),
    (_claim, "provenance", "\ud800", OpRuleError, "provenance", "utf8"),
    (_claim, "authority", None, OpRuleError, "authority", "str"),
    (_claim, "authority", _LONG_NAME, OpRuleError, "authority", "name-length"),
    (_claim, "constraint", 0, OpRuleError, "constraint", "str"),
    (_claim, "layer", "FACT", OpRuleError, "layer", "layer"),
    (_claim, "layer", "unknown", OpRuleError, "layer", "layer"),
    (_claim, "layer", 1, OpRuleError, "layer", "layer"),
    (_claim, "layer", None, OpRuleError, "layer", "layer"),
    (_claim, "layer", ["fact"], OpRuleError, "layer", "layer"),
    (_claim, "expires", -1, OpRuleError, "expires", "ms-range"),
    (_claim, "expires", 1.5, OpRuleError, "expires", "int"),
    (_claim, "expires", True, OpRuleError, "expires", "int"),
    (_evidence, "source", None, OpRuleError, "source", "str"),
    (_evidence, "source", _LONG_TEXT, OpRuleError, "source", "text-length"),
    (_evidence, "content", math.inf, ValueRuleError, "content", "finite-float"),
    (_evidence, "content", object(), ValueTypeError, "content", "value-type"),
    (_evidence, "lamport", 0, OpRuleError, "lamport", "lamport-range"),
    (_retraction, "target_claim_id", b"\x00" * 5, OpRuleError, "target_claim_id", "id-length"),
    (_retraction, "target_claim_ref", "x", OpRuleError, "target_claim_ref", "id-type"),
    (_retraction, "superseded_by", b"\x00" * 31, OpRuleError, "superseded_by", "id-length"),
    (_retraction, "reason", _LONG_TEXT, OpRuleError, "reason", "text-length"),
    (_retraction, "wall_ms", -5, OpRuleError, "wall_ms", "ms-range"),
    (_decision, "locus", b"", OpRuleError, "locus", "id-length"),
    (_decision, "conflict_id", None, OpRuleError, "conflict_id", "id-type"),
    (_decision, "selected_claim_id", b"\x00" * 64, OpRuleError, "selected_claim_id", "id-length"),
    (_decision, "scope", "tasks:x", OpRuleError, "scope", "scope-format"),
    (_decision, "reason", 1, OpRuleError, "reason", "str"),
    (_decision, "payload", {1, 2}, ValueTypeError, "payload", "value-type"),
    (_decision, "payload", -math.inf, ValueRuleError, "payload", "finite-float"),
]


@pytest.mark.parametrize(
    ("make", "name", "bad", "error", "field", "rule"),
    FIELD_CASES,
    ids=[f"{c[0].__name__[1:]}-{c[1]}-{c[5]}-{i}" for i, c in enumerate(FIELD_CASES)],
)
def test_constructors_reject_each_bad_field_naming_the_field_and_the_rule(
    make, name, bad, error, field, rule
):
    with pytest.raises(error) as info:
        make(**{name: bad})
    assert isinstance(info.value, StateFuseError) and isinstance(info.value, InputError)
    assert (info.value.field, info.value.rule) == (field, rule), str(info.value)
    assert isinstance(info.value, TypeError if error is ValueTypeError else ValueError)


def test_a_retraction_needs_a_target_id_or_ref():
    with pytest.raises(OpRuleError) as info:
        _retraction(target_claim_id=None)
    assert (info.value.field, info.value.rule) == ("target_claim_id", "retraction-target")


@pytest.mark.parametrize(
    ("make", "name", "good"),
    [
        (_claim, "author", "x" * MAX_NAME_CHARS),
        (_claim, "author", b"x" * MAX_NAME_CHARS),
        (_claim, "lamport", INT64_MAX),
        (_claim, "wall_ms", 0),
        (_claim, "scope", "task:" + "x" * 1024),
        (_claim, "scope", "session:a b"),
        (_claim, "confidence", 0.0),
        (_claim, "provenance", "x" * MAX_TEXT_CHARS),
        (_claim, "evidence", _MANY_IDS[:MAX_LIST_ITEMS]),
        (_claim, "expires", 0),
        (_retraction, "target_claim_id", None),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 20 else None,
)
def test_constructors_accept_fields_at_their_limits(make, name, good):
    kwargs = {name: good}
    if make is _retraction:
        kwargs["target_claim_ref"] = _id("ref")
    op = make(**kwargs)
    assert decode_op(op.encode()) == op


def test_writer_errors_are_typed_and_name_the_field():
    writer = Writer("w")
    with pytest.raises(OpRuleError) as info:
        writer.claim("ns", "s", "p", 1, scope="Global")
    assert (info.value.field, info.value.rule) == ("scope", "scope-format")
    with pytest.raises(OpRuleError) as info:
        writer.claim(1, "s", "p", 1)
    assert (info.value.field, info.value.rule) == ("namespace", "str")
    for bad in (math.nan, {1}):
        with pytest.raises(StateFuseError):
            writer.claim("ns", "s", "p", bad)
    assert writer.lamport == 0


@pytest.mark.parametrize(
    ("kwargs", "error", "field", "rule"),
    [
        ({"value": math.nan}, ValueRuleError, "value", "finite-float"),
        ({"value": {1}}, ValueTypeError, "value", "value-type"),
        ({"value": [1 << 64]}, ValueRuleError, "value[0]", "int64"),
        ({"namespace": "n\ud800"}, OpRuleError, "namespace", "utf8"),
    ],
    ids=["nan", "set", "int64", "surrogate-namespace"],
)
def test_writer_names_the_bad_argument_not_the_claim_ref_it_derives(kwargs, error, field, rule):
    args = {"namespace": "ns", "subject": "s", "predicate": "p", "value": 1, **kwargs}
    with pytest.raises(error) as info:
        Writer("w").claim(**args)
    assert (info.value.field, info.value.rule) == (field, rule), str(info.value)


# --- decode_op rejections -------------------------------------------------------------------------


def _claim_map() -> dict:
    """A claim with a stated confidence (version 1)."""
    claim = _claim(confidence=1.0, evidence=[_id("e1"), _id("e2")], visibility=["a", "b"])
    return decode_value(claim.encode())


def _unset_claim_map() -> dict:
    """A claim whose author stated no confidence (version 2, without the field)."""
    return _without(_with(_claim_map(), v=2), "confidence")


def _without(raw: dict, key: str) -> dict:
    return {k: v for k, v in raw.items() if k != key}


def _with(raw: dict, **fields) -> dict:
    return {**raw, **fields}


def _rejected(data: bytes, error: type[Exception], field: str, rule: str) -> None:
    with pytest.raises(error) as info:
        decode_op(data)
    assert isinstance(info.value, StateFuseError)
    assert (info.value.field, info.value.rule) == (field, rule), str(info.value)


def _retraction_map() -> dict:
    return decode_value(_retraction().encode())


#: (bytes, error class, expected .field, expected .rule)
DECODE_CASES = {
    "unknown-op-type": (_with(_claim_map(), op="ClaimDeleted"), EncodingError, "op.op", "op-type"),
    "op-type-wrong-case": (_with(_claim_map(), op="claimadded"), EncodingError, "op.op", "op-type"),
    "op-type-not-str": (_with(_claim_map(), op=1), EncodingError, "op.op", "op-type"),
    "op-type-missing": (_without(_claim_map(), "op"), EncodingError, "op.op", "op-type"),
    "version-3": (_with(_claim_map(), v=3), EncodingError, "op.v", "op-version"),
    "unset-confidence-written-as-nil-in-version-1": (
        _with(_claim_map(), confidence=None),
        EncodingError,
        "op.v",
        "op-version",
    ),
    "unset-confidence-labelled-version-1": (
        _with(_unset_claim_map(), v=1),
        EncodingError,
        "op.v",
        "op-version",
    ),
    "stated-confidence-labelled-version-2": (
        _with(_claim_map(), v=2),
        EncodingError,
        "op.v",
        "op-version",
    ),
    "unset-confidence-as-nil-in-version-2": (
        _with(_unset_claim_map(), confidence=None),
        EncodingError,
        "op.v",
        "op-version",
    ),
    "version-0": (_with(_claim_map(), v=0), EncodingError, "op.v", "op-version"),
    "version-str": (_with(_claim_map(), v="1"), EncodingError, "op.v", "op-version"),
    "version-nil": (_with(_claim_map(), v=None), EncodingError, "op.v", "op-version"),
    "version-missing": (_without(_claim_map(), "v"), EncodingError, "op.v", "op-version"),
    "field-missing": (_without(_claim_map(), "scope"), EncodingError, "op", "op-fields"),
    "field-extra": (_with(_claim_map(), extra=1), EncodingError, "op", "op-fields"),
    "op-id-field": (_with(_claim_map(), op_id=_id("x")), EncodingError, "op", "op-fields"),
    "other-kinds-fields": (
        _with(_retraction_map(), op="EvidenceAdded"),
        EncodingError,
        "op",
        "op-fields",
    ),
    "lamport-str": (_with(_claim_map(), lamport="1"), OpRuleError, "lamport", "int"),
    "lamport-zero": (_with(_claim_map(), lamport=0), OpRuleError, "lamport", "lamport-range"),
    "lamport-negative": (_with(_claim_map(), lamport=-3), OpRuleError, "lamport", "lamport-range"),
    "claim-ref-short": (
        _with(_claim_map(), claim_ref=b"\x00" * 31),
        OpRuleError,
        "claim_ref",
        "id-length",
    ),
    "claim-ref-str": (_with(_claim_map(), claim_ref="x" * 32), OpRuleError, "claim_ref", "id-type"),
    "layer-unknown": (_with(_claim_map(), layer="FACT"), OpRuleError, "layer", "layer"),
    "scope-bad": (_with(_claim_map(), scope="Global"), OpRuleError, "scope", "scope-format"),
    "visibility-str": (_with(_claim_map(), visibility="a"), OpRuleError, "visibility", "list"),
    "confidence-above-one": (
        _with(_claim_map(), confidence=2.0),
        OpRuleError,
        "confidence",
        "unit-interval",
    ),
    "evidence-id-short": (
        _with(_claim_map(), evidence=[b"x"]),
        OpRuleError,
        "evidence[]",
        "id-length",
    ),
    "no-retraction-target": (
        _with(_retraction_map(), target_claim_id=None),
        OpRuleError,
        "target_claim_id",
        "retraction-target",
    ),
    "value-nan": (_with(_claim_map(), value=math.nan), EncodingError, "op.value", "finite-float"),
    "visibility-unsorted": (
        _with(_claim_map(), visibility=["b", "a"]),
        EncodingError,
        "op",
        "canonical",
    ),
    "visibility-duplicate": (
        _with(_claim_map(), visibility=["a", "a"]),
        EncodingError,
        "op",
        "canonical",
    ),
    "evidence-unsorted": (
        _with(_claim_map(), evidence=sorted([_id("e1"), _id("e2")])[::-1]),
        EncodingError,
        "op",
        "canonical",
    ),
    "confidence-as-int": (_with(_claim_map(), confidence=1), EncodingError, "op", "canonical"),
    "not-an-op-map": ({"a": 1}, EncodingError, "op.v", "op-version"),
    "header-only": ({"op": "ClaimAdded", "v": 1}, EncodingError, "op", "op-fields"),
    "list-not-map": (list(_claim_map().items()), EncodingError, "op", "op-is-map"),
    "str-not-map": ("ClaimAdded", EncodingError, "op", "op-is-map"),
    "nil-not-map": (None, EncodingError, "op", "op-is-map"),
}


@pytest.mark.parametrize(
    ("raw", "error", "field", "rule"), DECODE_CASES.values(), ids=DECODE_CASES.keys()
)
def test_decode_op_rejects_maps_that_are_not_well_formed_ops(raw, error, field, rule):
    _rejected(reference_encode(raw), error, field, rule)


def test_decode_op_rejects_an_op_map_with_unsorted_keys():
    raw = _claim_map()
    items = sorted(raw.items(), key=lambda kv: kv[0].encode("utf-8"), reverse=True)
    _rejected(msgpack.packb(dict(items), use_bin_type=True), EncodingError, "op", "canonical")


@pytest.mark.parametrize("version", [True, 1.0], ids=repr)
def test_decode_op_rejects_a_version_that_is_only_python_equal_to_one(version):
    _rejected(reference_encode(_with(_claim_map(), v=version)), EncodingError, "op.v", "op-version")


def test_decode_op_rejects_input_that_is_not_bytes():
    with pytest.raises(ValueTypeError) as info:
        decode_op(_claim().to_value())
    assert (info.value.field, info.value.rule) == ("op", "bytes-input")


def _one_op_of_each_kind() -> list:
    writer = Writer(b"\x00author", clock=lambda: 1_700_000_000_000)
    evidence = writer.evidence("doc", {"page": [1, 2.5, None]})
    claim = writer.claim(
        "ns", "s", "p", {"k": "v"}, evidence=[evidence.op_id], visibility=["r"], expires=5
    )
    return [
        evidence,
        claim,
        writer.retract(claim_ref=claim.claim_ref, reason="why", superseded_by=claim.claim_id),
        writer.decide(
            locus=claim.claim_ref, conflict_id=claim.op_id, selected_claim_id=claim.claim_id
        ),
    ]


ONE_OF_EACH = _one_op_of_each_kind()


@pytest.mark.parametrize("op", ONE_OF_EACH, ids=lambda op: op.KIND)
def test_decode_op_rejects_trailing_bytes(op):
    for extra in (b"\x00", b"\xc0", op.encode()):
        _rejected(op.encode() + extra, EncodingError, "op", "trailing-bytes")


@pytest.mark.parametrize("op", ONE_OF_EACH, ids=lambda op: op.KIND)
def test_decode_op_rejects_every_truncation_of_an_op(op):
    encoded = op.encode()
    for cut in range(len(encoded)):
        with pytest.raises(EncodingError) as info:
            decode_op(encoded[:cut])
        assert info.value.rule == ("truncated" if cut == 0 else "msgpack")


@given(ops(), st.data())
def test_a_flipped_byte_is_rejected_or_decodes_to_a_different_op(op, data):
    encoded = bytearray(op.encode())
    at = data.draw(st.integers(0, len(encoded) - 1))
    encoded[at] ^= data.draw(st.integers(1, 255))
    try:
        other = decode_op(bytes(encoded))
    except StateFuseError:
        return
    assert other.op_id != op.op_id
    assert other.encode() == bytes(encoded)


def test_default_registry_is_natural_so_writer_refs_use_the_natural_normal_form():
    contract = DEFAULT_REGISTRY.contract_for("ns", "p")
    assert contract.normalizer == "natural"
    claim = Writer("w").claim("ns", "s", "p", {"b": 1.0, "a": " Acme  CORP"})
    assert claim.value == {"a": " Acme  CORP", "b": 1.0}  # values stay as written
    want = expected_claim_ref("ns", "s", "p", "global", {"a": "acme corp", "b": 1})
    assert claim.claim_ref == want
    other = Writer("v").claim("ns", "s", "p", {"a": "acme corp", "b": 1})
    assert other.claim_ref == want


# --- the writer's pre-checked build path ---------------------------------------------------------


@given(
    namespace=names,
    subject=names,
    predicate=names,
    value=op_values,
    scope=scopes,
    meta=st.fixed_dictionaries(
        {},
        optional={
            "confidence": st.one_of(st.floats(0.0, 1.0), st.sampled_from([0, 1])),
            "evidence": st.lists(ids, max_size=3),
            "provenance": texts,
            "authority": st.one_of(st.just(""), names),
            "layer": st.one_of(st.sampled_from(Layer), st.sampled_from([m.value for m in Layer])),
            "visibility": st.lists(names, max_size=3),
            "constraint": st.one_of(st.just(""), names),
            "depends_on": st.lists(ids, max_size=3),
            "expires": st.one_of(st.none(), millis),
            "kind": names,
        },
    ),
)
def test_a_writer_claim_is_the_claim_the_checking_constructor_builds(
    namespace, subject, predicate, value, scope, meta
):
    claim = Writer("w", registry=EXACT_REGISTRY, clock=lambda: 7).claim(
        namespace, subject, predicate, value, scope=scope, **meta
    )
    expected = ClaimAdded(
        "w",
        1,
        7,
        namespace,
        subject,
        predicate,
        value,
        claim_ref=expected_claim_ref(namespace, subject, predicate, scope, value),
        scope=scope,
        **meta,
    )
    assert claim.op_id == expected.op_id
    for name, _ in ClaimAdded._SCHEMA:
        got, want = getattr(claim, name), getattr(expected, name)
        assert type(got) is type(want) and got == want, name


@pytest.mark.parametrize(
    ("meta", "field", "rule"),
    [
        ({"confidence": 1.5}, "confidence", "unit-interval"),
        ({"evidence": [b"short"]}, "evidence[]", "id-length"),
        ({"provenance": 3}, "provenance", "str"),
        ({"layer": "attic"}, "layer", "layer"),
        ({"visibility": [""]}, "visibility[]", "name-length"),
        ({"expires": -1}, "expires", "ms-range"),
        ({"kind": ""}, "kind", "name-length"),
    ],
)
def test_writer_metadata_is_checked_with_the_constructors_rules(meta, field, rule):
    writer = Writer("w", clock=lambda: 0)
    with pytest.raises(OpRuleError) as info:
        writer.claim("ns", "s", "p", 1, **meta)
    assert (info.value.field, info.value.rule) == (field, rule)
    assert writer.lamport == 0


def test_the_encoding_handed_over_after_sealing_is_the_ops_own():
    writer = Writer("w", clock=lambda: 0)
    first = writer.claim("ns", "s", "p", 1)
    second = writer.claim("ns", "s", "p", 2)
    assert statefuse.core.op.sealed_encoding(second) == second.encode()
    assert statefuse.core.op.sealed_encoding(first) == first.encode() != second.encode()


def test_the_pre_checked_build_refuses_a_value_list_of_the_wrong_length():
    claim = Writer("w", clock=lambda: 0).claim("ns", "s", "p", 1)
    values = [getattr(claim, name) for name, _ in ClaimAdded._SCHEMA]
    assert ClaimAdded._from_checked(frozenset(), values).op_id == claim.op_id
    with pytest.raises(OpRuleError) as info:
        ClaimAdded._from_checked(frozenset(), values[:-1])
    assert (info.value.field, info.value.rule) == ("values", "one-per-field")


@given(_claims())
def test_the_writers_compiled_claim_builder_builds_what_the_pre_checked_build_does(claim):
    from statefuse.storage.writer import _CLAIM_CHECKED, _build_claim

    values = [getattr(claim, name) for name, _ in ClaimAdded._SCHEMA]
    compiled = _build_claim(values)
    compiled._seal()
    plain = ClaimAdded._from_checked(_CLAIM_CHECKED, values)
    assert compiled.op_id == plain.op_id == claim.op_id
    for name, _ in ClaimAdded._SCHEMA:
        assert getattr(compiled, name) == getattr(plain, name), name
