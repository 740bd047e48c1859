"""sync.reconcile: range-based set reconciliation of change ids.

Both sides must end knowing exactly the symmetric difference, within the promised bandwidth,
with the same bytes for the same sets, and every malformed message must raise ReconcileError
and nothing else. Malformed messages are built byte by byte here (`_message`), from the format
in the module docstring, never with the module's own encoder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import blake3
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statefuse.registry.error import InputError, StateFuseError
from statefuse.sync.reconcile import (
    FINGERPRINT_BYTES,
    MAX_EXCHANGE_MESSAGES,
    MAX_LIST_IDS,
    MAX_MESSAGE_BYTES,
    MAX_RANGES_PER_MESSAGE,
    PROTOCOL_VERSION,
    ReconcileConfig,
    ReconcileError,
    Reconciler,
    fingerprint,
    reconcile_in_memory,
)

INF = None
SKIP, FINGERPRINT, ID_LIST, ID_ANSWER = 0, 1, 2, 3


def _ids(tag: str, n: int) -> list[bytes]:
    """``n`` deterministic ids: blake3 of ``tag:counter``."""
    return [blake3.blake3(f"{tag}:{i}".encode()).digest() for i in range(n)]


def _id(*prefix: int) -> bytes:
    """An id that starts with ``prefix`` and continues with 0x55 bytes."""
    return bytes(prefix) + b"\x55" * (32 - len(prefix))


# --- a hand-written encoder for test messages --------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out) + bytes([n])


def _bound(b: bytes | None) -> bytes:
    return b"\xff" if b is None else bytes([len(b)]) + b


def _list(ids: Sequence[bytes]) -> bytes:
    return _varint(len(ids)) + b"".join(ids)


def _answer(ids: Sequence[bytes], listed: int, lacked: Sequence[int]) -> bytes:
    bitmap = bytearray((listed + 7) // 8)
    for k in lacked:
        bitmap[k // 8] |= 1 << (k % 8)
    return _list(ids) + _varint(listed) + bytes(bitmap)


def _message(*ranges: tuple[bytes | None, int, bytes], version: int = PROTOCOL_VERSION) -> bytes:
    return bytes([version]) + b"".join(_bound(b) + bytes([m]) + p for b, m, p in ranges)


def _fingerprint_ranges(message: bytes) -> list[tuple[bytes | None, bytes]]:
    """(upper bound, fingerprint) of a message made only of FINGERPRINT ranges."""
    assert message[0] == PROTOCOL_VERSION
    out = []
    pos = 1
    while pos < len(message):
        size = message[pos]
        bound = None if size == 0xFF else message[pos + 1 : pos + 1 + size]
        pos += 1 if bound is None else 1 + size
        assert message[pos] == FINGERPRINT
        out.append((bound, message[pos + 1 : pos + 1 + FINGERPRINT_BYTES]))
        pos += 1 + FINGERPRINT_BYTES
    return out


# --- driving two peers -------------------------------------------------------------------------


@dataclasses.dataclass
class Exchange:
    transcript: list[bytes]
    a: Reconciler
    b: Reconciler
    fetched: tuple[list[bytes], list[bytes]]
    sent: tuple[list[bytes], list[bytes]]


def _exchange(a: Reconciler, b: Reconciler) -> Exchange:
    """Run a full exchange (A starts), checking every message against the protocol's promises:
    each message fits its writer's frame, and `Reply.done` says exactly when the answer is None.
    """
    sides = (a, b)
    ex = Exchange([], a, b, ([], []), ([], []))
    message: bytes | None = a.initiate()
    sender = 0
    expect_silence = False
    while message is not None:
        assert len(ex.transcript) < MAX_EXCHANGE_MESSAGES
        assert len(message) <= sides[sender].config.frame_limit
        ex.transcript.append(message)
        receiver = 1 - sender
        reply = sides[receiver].respond(message)
        assert (reply.message is None) == expect_silence
        ex.fetched[receiver].extend(reply.fetch)
        ex.sent[receiver].extend(reply.send)
        expect_silence = reply.done
        message = reply.message
        sender = receiver
    return ex


def _assert_learned_the_difference(ex: Exchange, a_ids: set[bytes], b_ids: set[bytes]) -> None:
    a_lacks = sorted(b_ids - a_ids)
    b_lacks = sorted(a_ids - b_ids)
    assert list(ex.a.fetch) == a_lacks and list(ex.a.send) == b_lacks
    assert list(ex.b.fetch) == b_lacks and list(ex.b.send) == a_lacks
    # Each id is reported once, in the reply of the message that taught it.
    assert sorted(ex.fetched[0]) == a_lacks and sorted(ex.sent[0]) == b_lacks
    assert sorted(ex.fetched[1]) == b_lacks and sorted(ex.sent[1]) == a_lacks
    # Fetching what one lacks gives both sides the union.
    assert a_ids | set(ex.a.fetch) == b_ids | set(ex.b.fetch) == a_ids | b_ids


# --- strategies --------------------------------------------------------------------------------

# Ids drawn at random, and ids that share long prefixes (runs of 0x00, 0x7F or 0xFF), which
# need bounds up to 32 bytes long.
_any_id = st.binary(min_size=32, max_size=32)
_clustered_id = st.builds(
    lambda byte, k, tail: bytes([byte]) * k + tail[k:],
    st.sampled_from([0x00, 0x7F, 0xFF]),
    st.integers(0, 32),
    _any_id,
)
_ids_strategy = st.one_of(_any_id, _clustered_id)


@st.composite
def _set_pairs(draw: st.DrawFn, max_size: int = 48) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """(shared, only in A, only in B): every id is drawn once, then given to one of the three."""
    owned = draw(
        st.lists(
            st.tuples(_ids_strategy, st.sampled_from("sab")),
            unique_by=lambda t: t[0],
            max_size=max_size,
        )
    )
    shared, only_a, only_b = ([x for x, w in owned if w == who] for who in "sab")
    return shared, only_a, only_b


@st.composite
def _configs(draw: st.DrawFn) -> ReconcileConfig:
    """The default, or a tiny config so small sets still split, chunk and defer."""
    if draw(st.booleans()):
        return ReconcileConfig()
    small = ReconcileConfig(
        branching=draw(st.integers(2, 5)),
        leaf_size=draw(st.integers(1, 6)),
        answer_size=draw(st.integers(1, 6)),
    )
    extra = draw(st.integers(0, 400))
    return dataclasses.replace(small, frame_limit=small.min_frame_limit + extra)


# --- both sides learn exactly the symmetric difference -----------------------------------------


@given(_set_pairs(), _configs(), _configs())
@example(([], [], []), ReconcileConfig(), ReconcileConfig())
@example((_ids("s", 40), [], []), ReconcileConfig(leaf_size=2), ReconcileConfig())
@example(([], _ids("a", 40), _ids("b", 40)), ReconcileConfig(), ReconcileConfig(leaf_size=1))
@example(([], _ids("a", 40), []), ReconcileConfig(leaf_size=3), ReconcileConfig())
@example(([], [], _ids("b", 40)), ReconcileConfig(leaf_size=3), ReconcileConfig())
@example(
    ([_id(0), _id(0, 0, 0, 1)], [_id(0, 0, 0, 2)], [_id(0, 0, 0, 1, 7)]),
    ReconcileConfig(branching=2, leaf_size=1),
    ReconcileConfig(branching=2, leaf_size=1),
)
def test_both_sides_learn_exactly_the_symmetric_difference(
    sets: tuple[list[bytes], list[bytes], list[bytes]],
    config_a: ReconcileConfig,
    config_b: ReconcileConfig,
) -> None:
    shared, only_a, only_b = sets
    a_ids, b_ids = set(shared + only_a), set(shared + only_b)
    ex = _exchange(
        Reconciler(shared + only_a, config=config_a), Reconciler(shared + only_b, config=config_b)
    )
    _assert_learned_the_difference(ex, a_ids, b_ids)


def test_ids_sharing_31_bytes_are_told_apart() -> None:
    # Plain sums of such ids collide ({x+2, x+4} and {x+0, x+6}); fingerprints sum a hash of
    # each id instead, and bounds grow to 32 bytes.
    prefix = b"\xab" * 31
    a = [prefix + bytes([i]) for i in range(0, 200, 2)]
    b = [prefix + bytes([i]) for i in range(0, 200, 3)]
    config = ReconcileConfig(branching=3, leaf_size=2)
    ex = _exchange(Reconciler(a, config=config), Reconciler(b, config=config))
    _assert_learned_the_difference(ex, set(a), set(b))


def test_identical_sets_settle_in_one_round_trip() -> None:
    ids = _ids("same", 5000)
    ex = _exchange(Reconciler(ids), Reconciler(reversed(ids)))
    assert ex.transcript[1:] == [bytes([PROTOCOL_VERSION])]  # "everything is settled"
    assert ex.a.fetch == ex.a.send == ex.b.fetch == ex.b.send == ()


def test_two_empty_sets_settle_in_one_round_trip() -> None:
    result = reconcile_in_memory([], [])
    assert (result.messages, result.round_trips) == (2, 1)
    assert result.a_lacks == result.b_lacks == ()


def test_a_side_with_nothing_receives_every_id_over_several_full_frames() -> None:
    ids = _ids("all", 3000)
    config = ReconcileConfig(
        answer_size=64, frame_limit=ReconcileConfig(answer_size=64).min_frame_limit
    )
    for a, b in (([], ids), (ids, [])):
        ex = _exchange(Reconciler(a, config=config), Reconciler(b, config=config))
        _assert_learned_the_difference(ex, set(a), set(b))
        assert all(len(m) <= config.frame_limit for m in ex.transcript)
        assert len(ex.transcript) > 10  # 96 kB of ids in frames of about 2.5 kB


def test_peers_with_different_configs_still_agree() -> None:
    shared = _ids("s", 3000)
    a = shared + _ids("a", 40)
    b = shared[:2900] + _ids("b", 70)
    ex = _exchange(
        Reconciler(a, config=ReconcileConfig(branching=2, leaf_size=1, answer_size=1)),
        Reconciler(b, config=ReconcileConfig(branching=64, leaf_size=200)),
    )
    _assert_learned_the_difference(ex, set(a), set(b))


def test_reconcile_in_memory_reports_what_each_side_lacks_and_the_traffic() -> None:
    shared = _ids("s", 1000)
    only_a, only_b = _ids("a", 3), _ids("b", 4)
    result = reconcile_in_memory(shared + only_a, shared + only_b)
    assert result.a_lacks == tuple(sorted(only_b))
    assert result.b_lacks == tuple(sorted(only_a))
    assert result.round_trips == (result.messages + 1) // 2
    assert result.total_bytes == result.bytes_a_to_b + result.bytes_b_to_a > 7 * 32


# --- the wire format ----------------------------------------------------------------------------


def test_the_version_1_messages_are_pinned_byte_for_byte() -> None:
    one, two = _id(1), _id(2)
    a, b = Reconciler([one]), Reconciler([two])
    first = a.initiate()
    # version 1; range to +infinity, ID_LIST of one id
    assert first == b"\x01" + b"\xff" + b"\x02" + b"\x01" + one
    reply = b.respond(first)
    # version 1; range to +infinity, ID_ANSWER: one id you lack; your list had 1 id, I lack #0
    assert reply.message == b"\x01" + b"\xff" + b"\x03" + b"\x01" + two + b"\x01" + b"\x01"
    assert (reply.fetch, reply.send, reply.done) == ((one,), (two,), True)
    last = a.respond(reply.message)
    assert (last.message, last.fetch, last.send, last.done) == (None, (two,), (one,), True)


def test_a_larger_version_1_exchange_is_pinned_by_its_digest() -> None:
    # If this changes, the wire format changed: bump PROTOCOL_VERSION and keep a decoder for 1.
    shared = _ids("pinned", 2000)
    ex = _exchange(
        Reconciler(shared + _ids("pinned-a", 7)), Reconciler(shared[3:] + _ids("pinned-b", 5))
    )
    framed = b"".join(len(m).to_bytes(4, "big") + m for m in ex.transcript)
    assert [len(m) for m in ex.transcript] == [395, 4794, 2694, 324]
    assert blake3.blake3(framed).hexdigest() == (
        "e5cbe363c1f40bf35a66067a1a685d00c4727d4cff664541b2577a7c695cbe8a"
    )


# --- bandwidth and round trips -----------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_ids() -> list[bytes]:
    return _ids("shared", 100_000)


def _run(shared: list[bytes], n: int, d: int) -> tuple[int, int]:
    only_a, only_b = _ids("only-a", d // 2), _ids("only-b", d - d // 2)
    result = reconcile_in_memory(shared[:n] + only_a, shared[:n] + only_b)
    assert set(result.a_lacks) == set(only_b) and set(result.b_lacks) == set(only_a)
    return result.round_trips, result.total_bytes


def test_100k_ids_with_100_differences_take_3_round_trips_and_under_150_kb(
    shared_ids: list[bytes],
) -> None:
    round_trips, total = _run(shared_ids, 100_000, 100)
    assert round_trips <= 3
    assert total <= 150_000


def test_bytes_grow_linearly_with_the_number_of_differences(shared_ids: list[bytes]) -> None:
    sizes = {d: _run(shared_ids, 100_000, d)[1] for d in (10, 100, 1000)}
    # Tenfold differences cost four to ten times the bytes: upper levels of the range tree are
    # shared between differences, so the cost per difference falls slowly as d grows.
    assert 4 <= sizes[100] / sizes[10] <= 10
    assert 4 <= sizes[1000] / sizes[100] <= 10
    assert sizes[1000] / 1000 <= 1000  # bytes per difference


def test_bytes_grow_only_logarithmically_with_the_set_size(shared_ids: list[bytes]) -> None:
    small = _run(shared_ids, 10_000, 100)[1]
    large = _run(shared_ids, 100_000, 100)[1]
    # log(100k) / log(10k) = 1.25; one extra level of the range tree costs well under 1x more.
    assert small < large <= 1.8 * small


# --- determinism -------------------------------------------------------------------------------


@given(_set_pairs(max_size=30), _configs())
def test_the_same_sets_give_the_same_messages(
    sets: tuple[list[bytes], list[bytes], list[bytes]], config: ReconcileConfig
) -> None:
    shared, only_a, only_b = sets
    a, b = shared + only_a, shared + only_b
    first = _exchange(Reconciler(a, config=config), Reconciler(b, config=config)).transcript
    again = _exchange(Reconciler(a, config=config), Reconciler(b, config=config)).transcript
    assert first == again


@given(
    st.lists(_ids_strategy, unique=True, max_size=40).flatmap(
        lambda ids: st.tuples(st.just(ids), st.permutations(ids), st.permutations(ids))
    )
)
def test_the_messages_do_not_depend_on_the_order_of_the_ids(
    orders: tuple[list[bytes], list[bytes], list[bytes]],
) -> None:
    ids, shuffled_a, shuffled_b = orders
    other = ids[::2]
    config = ReconcileConfig(branching=3, leaf_size=2)
    first = _exchange(Reconciler(ids, config=config), Reconciler(other, config=config))
    second = _exchange(
        Reconciler(shuffled_a, config=config), Reconciler(reversed(other), config=config)
    )
    third = _exchange(
        Reconciler(shuffled_b + shuffled_a, config=config), Reconciler(other, config=config)
    )
    assert first.transcript == second.transcript == third.transcript


# --- fingerprints ------------------------------------------------------------------------------


@given(
    st.lists(_ids_strategy, unique=True, min_size=2, max_size=120),
    st.integers(2, 9),
)
def test_range_fingerprints_equal_the_fingerprint_of_the_ids_in_the_range(
    ids: list[bytes], branching: int
) -> None:
    config = ReconcileConfig(branching=branching, leaf_size=1)
    ranges = _fingerprint_ranges(Reconciler(ids, config=config).initiate())
    ordered = sorted(ids)
    lower = b""
    for upper, fp in ranges:
        inside = [x for x in ordered if lower <= x and (upper is None or x < upper)]
        assert inside and fp == fingerprint(inside)
        lower = b"" if upper is None else upper
    assert ranges[-1][0] is None


def test_fingerprint_counts_duplicates_once_and_ignores_order() -> None:
    ids = _ids("fp", 50)
    assert fingerprint(ids) == fingerprint(list(reversed(ids)) + ids[:7])
    assert len(fingerprint(ids)) == FINGERPRINT_BYTES
    assert fingerprint([]) != fingerprint(ids[:1])


def test_fingerprints_tell_apart_sets_with_equal_xor() -> None:
    a, b, c = _ids("xor", 3)
    d = bytes(x ^ y ^ z for x, y, z in zip(a, b, c, strict=True))
    # {a, b} and {c, d} have the same XOR and the same count.
    assert fingerprint([a, b]) != fingerprint([c, d])


def test_bounds_are_the_shortest_separating_prefixes() -> None:
    ids = [_id(1), _id(2, 7), _id(2, 9), _id(3)]
    ranges = _fingerprint_ranges(
        Reconciler(ids, config=ReconcileConfig(branching=4, leaf_size=1)).initiate()
    )
    assert [bound for bound, _ in ranges] == [b"\x02", b"\x02\x09", b"\x03", None]


# --- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "field", "rule"),
    [
        ([b"\x00" * 31], "ids[0]", "id-length"),
        ([_id(1), b"\x00" * 33], "ids[1]", "id-length"),
        ([_id(1), bytearray(32)], "ids[1]", "id-type"),
        ([_id(1), "x" * 32], "ids[1]", "id-type"),
        (b"\x00" * 32, "ids", "id-type"),
    ],
)
def test_ids_that_are_not_32_bytes_are_refused(ids: object, field: str, rule: str) -> None:
    with pytest.raises(ReconcileError) as err:
        Reconciler(ids)  # type: ignore[arg-type]
    assert (err.value.field, err.value.rule) == (field, rule)


def test_duplicate_ids_count_once() -> None:
    ids = _ids("dup", 30)
    assert len(Reconciler(ids + ids[:10])) == 30
    result = reconcile_in_memory(ids + ids, ids[:20] + ids[:20])
    assert result.b_lacks == tuple(sorted(ids[20:]))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"branching": 1}, "config.branching"),
        ({"branching": True}, "config.branching"),
        ({"leaf_size": 0}, "config.leaf_size"),
        ({"leaf_size": MAX_LIST_IDS + 1}, "config.leaf_size"),
        ({"answer_size": 0}, "config.answer_size"),
        ({"frame_limit": 1000}, "config.frame_limit"),
        ({"frame_limit": MAX_MESSAGE_BYTES + 1}, "config.frame_limit"),
    ],
)
def test_a_config_out_of_range_names_its_field(options: dict[str, int], field: str) -> None:
    with pytest.raises(ReconcileError) as err:
        ReconcileConfig(**options)
    assert (err.value.field, err.value.rule) == (field, "range")


def test_a_config_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ReconcileError) as err:
        Reconciler([], config={"branching": 4})  # type: ignore[arg-type]
    assert err.value.rule == "config-type"


# --- malformed messages ------------------------------------------------------------------------

A, B, C = _id(0x10), _id(0x20), _id(0x30)
FP = bytes(FINGERPRINT_BYTES)


def _too_many_ranges() -> bytes:
    bounds = [i.to_bytes(3, "big") for i in range(1, 3 * MAX_RANGES_PER_MESSAGE) if i % 256]
    ranges = [
        (bounds[k], SKIP if k % 2 else ID_LIST, b"" if k % 2 else b"\x00")
        for k in range(MAX_RANGES_PER_MESSAGE + 1)
    ]
    return _message(*ranges)


MALFORMED: list[tuple[str, bytes, str]] = [
    ("empty input", b"", "truncated"),
    ("version 0", _message((INF, FINGERPRINT, FP), version=0), "version"),
    ("version 2", _message((INF, FINGERPRINT, FP), version=2), "version"),
    ("oversized", bytes([PROTOCOL_VERSION]) + bytes(MAX_MESSAGE_BYTES), "max-message-bytes"),
    ("too many ranges", _too_many_ranges(), "max-ranges"),
    ("truncated bound", b"\x01\x05\x10\x20", "truncated"),
    ("truncated mode", b"\x01\xff", "truncated"),
    ("truncated fingerprint", _message((INF, FINGERPRINT, FP[:15])), "truncated"),
    ("unknown mode", _message((INF, 4, b"")), "mode"),
    (
        "bound of 33 bytes",
        _message((b"\x01" * 33, SKIP, b""), (INF, FINGERPRINT, FP)),
        "bound-length",
    ),
    ("empty bound", _message((b"", FINGERPRINT, FP), (INF, FINGERPRINT, FP)), "bound-order"),
    (
        "decreasing bounds",
        _message((b"\x20", FINGERPRINT, FP), (b"\x10", FINGERPRINT, FP)),
        "bound-order",
    ),
    (
        "repeated bound",
        _message((b"\x20", FINGERPRINT, FP), (b"\x20", FINGERPRINT, FP)),
        "bound-order",
    ),
    (
        "range after +infinity",
        _message((INF, FINGERPRINT, FP), (INF, FINGERPRINT, FP)),
        "bound-order",
    ),
    (
        "bound ending in zero",
        _message((b"\x20\x00", FINGERPRINT, FP), (INF, SKIP, b"")),
        "bound-trailing-zero",
    ),
    (
        "two skips in a row",
        _message((b"\x10", SKIP, b""), (b"\x20", SKIP, b""), (INF, FINGERPRINT, FP)),
        "adjacent-skips",
    ),
    ("trailing skip", _message((b"\x10", FINGERPRINT, FP), (INF, SKIP, b"")), "trailing-skip"),
    ("a skip alone", _message((INF, SKIP, b"")), "trailing-skip"),
    ("ids out of order", _message((INF, ID_LIST, _list([B, A]))), "id-order"),
    ("repeated id", _message((INF, ID_LIST, _list([A, A]))), "id-order"),
    (
        "id below its range",
        _message((b"\x05", SKIP, b""), (INF, ID_LIST, _list([_id(1)]))),
        "id-out-of-range",
    ),
    (
        "id above its range",
        _message((b"\x15", ID_LIST, _list([B])), (INF, FINGERPRINT, FP)),
        "id-out-of-range",
    ),
    ("id of 31 bytes", _message((INF, ID_LIST, b"\x01" + A[:31])), "truncated"),
    ("list too long", _message((INF, ID_LIST, _varint(MAX_LIST_IDS + 1))), "max-list-ids"),
    ("non-minimal varint", _message((INF, ID_LIST, b"\x80\x00")), "varint"),
    ("varint of 3 bytes", _message((INF, ID_LIST, b"\x80\x80\x01")), "varint"),
    ("truncated varint", _message((INF, ID_LIST, b"\x80")), "truncated"),
    ("truncated bitmap", _message((INF, ID_ANSWER, _list([A]) + b"\x09\x01")), "truncated"),
    ("bitmap padding set", _message((INF, ID_ANSWER, _list([]) + b"\x03\x08")), "bitmap-padding"),
    (
        "answer listing too many",
        _message((INF, ID_ANSWER, _list([]) + _varint(MAX_LIST_IDS + 1))),
        "max-list-ids",
    ),
    ("trailing garbage", _message((INF, FINGERPRINT, FP)) + b"\x00", "bound-order"),
]


@pytest.mark.parametrize(("name", "message", "rule"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_message_raises_a_typed_error_and_changes_nothing(
    name: str, message: bytes, rule: str
) -> None:
    ids = [A, C]
    side = Reconciler(ids)
    with pytest.raises(ReconcileError) as err:
        side.respond(message)
    assert err.value.rule == rule, err.value
    assert isinstance(err.value, InputError) and isinstance(err.value, StateFuseError)
    assert isinstance(err.value, ValueError)
    assert err.value.field.startswith("message")
    assert side.fetch == side.send == ()
    # The side still works.
    assert side.respond(Reconciler([B]).initiate()).fetch == (B,)


def test_a_message_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(ReconcileError) as err:
        Reconciler([]).respond("\x01")  # type: ignore[arg-type]
    assert err.value.rule == "bytes-input"


def test_the_empty_message_means_everything_is_settled() -> None:
    reply = Reconciler([A]).respond(bytes([PROTOCOL_VERSION]))
    assert (reply.message, reply.fetch, reply.send, reply.done) == (None, (), (), True)


def test_an_answer_to_a_list_we_could_not_have_sent_is_refused() -> None:
    side = Reconciler([A, C])
    # We hold two ids in the range, the answer says it answers a list of one.
    with pytest.raises(ReconcileError) as err:
        side.respond(_message((INF, ID_ANSWER, _answer([B], 1, []))))
    assert err.value.rule == "answer-length"
    many = Reconciler(_ids("many", 40), config=ReconcileConfig(leaf_size=10))
    with pytest.raises(ReconcileError) as err:
        many.respond(_message((INF, ID_ANSWER, _answer([], 40, []))))
    assert err.value.rule == "answer-length"


def test_an_answer_saying_we_lack_an_id_we_hold_is_refused() -> None:
    side = Reconciler([A, C])
    with pytest.raises(ReconcileError) as err:
        side.respond(_message((INF, ID_ANSWER, _answer([A, B], 2, []))))
    assert err.value.rule == "answer-id-known"
    assert side.fetch == side.send == ()


def test_an_answer_teaches_what_each_side_lacks() -> None:
    side = Reconciler([A, C])
    reply = side.respond(_message((INF, ID_ANSWER, _answer([B], 2, [1]))))
    assert (reply.message, reply.fetch, reply.send, reply.done) == (None, (B,), (C,), True)


def _valid_messages() -> list[bytes]:
    shared = _ids("v", 60)
    a, b = shared + _ids("va", 5), shared[5:] + _ids("vb", 5)
    config = ReconcileConfig(branching=3, leaf_size=4)
    return _exchange(Reconciler(a, config=config), Reconciler(b, config=config)).transcript


VALID = _valid_messages()


@given(
    st.one_of(
        st.binary(max_size=400),
        st.binary(max_size=400).map(lambda b: bytes([PROTOCOL_VERSION]) + b),
        st.builds(
            lambda m, at, junk, cut: m[:at] + junk + m[at + cut :],
            st.sampled_from(VALID),
            st.integers(0, 400),
            st.binary(max_size=8),
            st.integers(0, 40),
        ),
    ),
    st.sampled_from([ReconcileConfig(), ReconcileConfig(branching=3, leaf_size=4)]),
)
def test_random_bytes_are_handled_or_raise_the_typed_error(
    message: bytes, config: ReconcileConfig
) -> None:
    side = Reconciler(_ids("v", 60), config=config)
    try:
        reply = side.respond(message)
    except ReconcileError as err:
        assert err.rule and err.field
        assert side.fetch == side.send == ()
        return
    assert reply.message is None or len(reply.message) <= config.frame_limit


# --- growing a reconciler (with_ids) --------------------------------------------------------------


def _prefixes(r: Reconciler) -> list[int]:
    return [r._prefix(k) for k in range(len(r) + 1)]


@settings(max_examples=60)  # sets of hundreds of ids per example; the laws hold at any size
@given(
    size=st.integers(0, 600),
    drawn=st.lists(_ids_strategy, max_size=20),
    added=st.lists(_ids_strategy, max_size=6),  # up to n/64 new ids are added in place
    overlap=st.integers(0, 4),
    peer=st.lists(_ids_strategy, max_size=60, unique=True),
    config=_configs(),
)
def test_a_grown_reconciler_is_the_one_built_from_the_whole_set_message_for_message(
    size, drawn, added, overlap, peer, config
):
    base = sorted(set(_ids("base", size)) | set(drawn))  # many ids, cheaply drawn
    added = added + base[:overlap]  # ids it holds already are ignored
    original = Reconciler(base, config=config)
    before = _prefixes(original)
    grown = original.with_ids(added)
    whole = Reconciler([*base, *added], config=config)
    assert len(grown) == len(whole) == len(set(base) | set(added))
    assert _prefixes(grown) == _prefixes(whole)
    a = _exchange(grown, Reconciler(peer + base[:5], config=config))
    b = _exchange(whole, Reconciler(peer + base[:5], config=config))
    assert a.transcript == b.transcript
    assert _prefixes(original) == before and len(original) == len(set(base))  # unchanged


def test_a_few_ids_added_to_many_hash_only_the_new_ids(monkeypatch):
    import statefuse.sync.reconcile as reconcile_module

    base = _ids("base", 2000)
    original = Reconciler(base)
    new = _ids("new", 3)
    hashed: list[bytes] = []
    element = reconcile_module._element
    monkeypatch.setattr(reconcile_module, "_element", lambda x: hashed.append(x) or element(x))
    grown = original.with_ids([*new, base[0]])
    assert sorted(hashed) == sorted(new)  # the 2000 held ids were not hashed again
    monkeypatch.undo()
    assert grown._blocks == Reconciler([*base, *new])._blocks
    assert original.with_ids(base[:10])._ids is original._ids  # nothing new: shared as is
