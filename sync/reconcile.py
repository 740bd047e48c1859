"""Range-based set reconciliation of change ids: which ids does each of two replicas lack?

The idea is Aljoscha Meyer's "Range-Based Set Reconciliation", as the Negentropy protocol uses
it; this is an independent implementation. Each side holds a set of 32-byte ids (blake3 digests,
so uniformly spread) in sorted order. A message covers the id space with consecutive ranges
``[lower, upper)``, and for each range says one of four things. What the receiver answers:

- SKIP ("settled"): nothing.
- FINGERPRINT of the sender's ids in the range: SKIP if ours is equal; else our ids as an
  ID_LIST if we hold at most ``leaf_size`` there; else ``branching`` FINGERPRINT sub-ranges
  that split our ids in the range evenly.
- ID_LIST, all of the sender's ids in the range: an ID_ANSWER — our ids there that the list
  lacks, and a bitmap of the listed ids we lack (cut into several ranges when we hold more
  than ``answer_size`` ids there). Both sides now know the whole difference in the range.
- ID_ANSWER: nothing; we learn what we lack (its ids) and what the peer lacks (the bitmap).

The initiator starts with the whole space, split or listed. Only ranges that hold a difference
are ever split, so an exchange costs O(d · log n) bytes for d differences among n ids, in about
log_B(n / T) + 1 round trips (B = branching, T = leaf size; a round trip is one message each
way). A message that holds a FINGERPRINT or an ID_LIST always gets an answer, if only the empty
message ("everything is settled"); a message of answers gets none: that is the end.

Invariant: when the exchange ends (a side's `Reconciler.respond` returns no message), each side
has learned exactly the symmetric difference of the two sets: ``fetch`` holds the ids the peer
has and this side lacks, ``send`` the ids this side has and the peer lacks. Why it holds: every
range ends either with equal fingerprints (equal sets, up to a 2^-128 chance) or with a list and
its answer, which tell both sides the whole difference in that range; the ranges of a message
cover the space without gaps; and nothing is left open, because every range that asks for an
answer gets one (or is deferred, see Limits, and asked again).

The functions are pure: no I/O, no clock, no randomness. The same two sets and configs give the
same messages, byte for byte, whatever order the ids came in; a transport only carries bytes.

Fingerprints. ``fingerprint(S) = blake3(DOMAIN ‖ |S| as u64 LE ‖ (Σ_{x∈S} h(x) mod 2^256) as 32
bytes BE)[:16]`` where ``h(x)`` is blake3(x) read as a big-endian integer. The sum is additive,
so with prefix sums (32 bytes per id, built once) the fingerprint of any range costs two
bisections, two lookups and one hash, with no per-range state. Addition rather than XOR:
XOR is linear over GF(2), so any 257 ids hold a subset whose XOR is zero, found by Gaussian
elimination, and XOR cancels any id that appears twice; sets that differ could look equal. A sum
modulo 2^256 together with the count has no such shortcut (a collision is a modular subset-sum
problem), which is why Negentropy chose it too. Summing h(x) rather than x itself costs a hash
per id when the reconciler is built, and keeps the fingerprint sound for ids that are not
uniformly spread: with ids that share 31 bytes, {x+1, x+4} and {x+2, x+3} have equal plain sums.
It is not a defence against a peer that grinds ids to collide sums on purpose (a generalized
birthday search); the collision bound above assumes ids the peer did not choose that way.

Message format, version 1 (hand-rolled rather than msgpack: every byte counts on this wire)::

    message = version:u8 (=1), range*          (no range at all: "everything is settled")
    range   = upper-bound, mode:u8, payload
    bound   = len:u8 (1..32), prefix[len]  |  0xFF (+infinity)
    mode 0  SKIP         no payload
    mode 1  FINGERPRINT  fp[16]
    mode 2  ID_LIST      count:varint, id[32] * count               (all the sender's ids)
    mode 3  ID_ANSWER    count:varint, id[32] * count,              (ids the listing side lacks)
                         m:varint, bitmap[ceil(m / 8)]              (bit k, LSB first: we lack
                                                                     the k-th listed id here)

The first range starts at the empty bound (below every id), each next one where the previous
one ended; the space after the last range is settled. A bound is the shortest prefix of an id
that separates it from its predecessor, so it never ends in a zero byte (that would name the
same place as a shorter bound); ``varint`` is unsigned LEB128. The decoder accepts one encoding
per message and reads all of it before anything acts on it: it rejects truncation, a version
other than 1, an unknown mode, a non-minimal varint, bounds longer than 32 bytes, not strictly
increasing or ending in zero, ids outside their range or not strictly increasing, lists longer
than `MAX_LIST_IDS`, non-zero bitmap padding, two SKIP ranges in a row and a trailing SKIP.

Limits: a message is at most `MAX_MESSAGE_BYTES` and `MAX_RANGES_PER_MESSAGE` ranges; a list or
answer holds at most `MAX_LIST_IDS` ids. A side never writes more than its ``frame_limit``: when
the next answer does not fit, it sends one FINGERPRINT for the rest of the space instead (the
peer splits it again next round), and computes nothing past that point. So the work one message
can cost is O(its length + frame_limit) bisections and fingerprints, whatever the peer sends.

Errors: a malformed message, and one that contradicts our own ids (an answer to a list we cannot
have sent, an "id you lack" that we hold), raises `ReconcileError` with ``field`` and ``rule``;
nothing else escapes, and a message that raises leaves the reconciler as it was.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum

import blake3

from statefuse.registry.error import InputError

__all__ = [
    "FINGERPRINT_BYTES",
    "ID_BYTES",
    "MAX_EXCHANGE_MESSAGES",
    "MAX_LIST_IDS",
    "MAX_MESSAGE_BYTES",
    "MAX_RANGES_PER_MESSAGE",
    "PROTOCOL_VERSION",
    "ReconcileConfig",
    "ReconcileError",
    "ReconcileResult",
    "Reconciler",
    "Reply",
    "fingerprint",
    "reconcile_in_memory",
]

#: First byte of every message.
PROTOCOL_VERSION = 1
#: Length of every id (a blake3 digest).
ID_BYTES = 32
#: Length of a range fingerprint.
FINGERPRINT_BYTES = 16
#: Largest message accepted, and the most a side writes (the default ``frame_limit``).
MAX_MESSAGE_BYTES = 1 << 20
#: Most ranges in one message (bounds the per-range work a peer can ask for).
MAX_RANGES_PER_MESSAGE = 1 << 16
#: Most ids in one ID_LIST or ID_ANSWER range.
MAX_LIST_IDS = 1024
#: Most messages `reconcile_in_memory` exchanges before it gives up: a guard against a loop.
#: Two peers need about log_B(n / T) + 2, plus two for each frame of answers beyond the first.
MAX_EXCHANGE_MESSAGES = 1000

_FINGERPRINT_DOMAIN = b"statefuse/reconcile/fingerprint/v1"
_MASK = (1 << 256) - 1
#: Ids per block of fingerprint sums (see `Reconciler._prefix`).
_BLOCK = 64
_INFINITY = 0xFF
#: The message that says "everything is settled": the answer to a message whose ranges all
#: turned out equal (its sender waits for an answer, so silence would not do).
_SETTLED = bytes([PROTOCOL_VERSION])
#: Largest encoded bound: length byte + a whole id.
_MAX_BOUND_BYTES = 1 + ID_BYTES
_FINGERPRINT_RANGE_BYTES = _MAX_BOUND_BYTES + 1 + FINGERPRINT_BYTES
_SKIP_RANGE_BYTES = _MAX_BOUND_BYTES + 1
_MAX_VARINT_BYTES = 2  # MAX_LIST_IDS < 2**14


class ReconcileError(InputError, ValueError):
    """A reconciliation message or argument that breaks a rule of this protocol.

    ``field`` names where (``message.range[3].bound``, ``config.branching``, ``ids[7]``...),
    ``rule`` which rule (``version``, ``truncated``, ``bound-order``, ...).
    """


class _Mode(IntEnum):
    SKIP = 0
    FINGERPRINT = 1
    ID_LIST = 2
    ID_ANSWER = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileConfig:
    """Tuning of the messages one side writes (the peer may use another config).

    - ``branching``: how many sub-ranges a range with unequal fingerprints is split into.
    - ``leaf_size``: a range with unequal fingerprints and at most this many of our ids is
      sent as an explicit ID_LIST instead of being split.
    - ``answer_size``: most of our ids one ID_ANSWER range covers; the answer to a list whose
      range holds more of our ids is cut into several ranges (every id sent in an answer is a
      real difference, so answering never wastes bytes; cutting only keeps pieces small
      enough to fill frames).
    - ``frame_limit``: most bytes in one message we write.

    The defaults (20, 10) were measured (``python -m benchmarks --reconcile``): they keep an
    exchange within 3 round trips up to a million ids, and bytes growing by a near-constant
    step per tenfold n. A larger leaf saves a round trip at some sizes but lists more ids per
    difference (bytes then jump whenever n crosses a power of the branching).

    Raises ReconcileError (rule ``range``) when a field is out of its range; ``frame_limit``
    must be at least `min_frame_limit`.
    """

    branching: int = 20
    leaf_size: int = 10
    answer_size: int = 256
    frame_limit: int = MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        _check_int("config.branching", self.branching, 2, MAX_LIST_IDS)
        _check_int("config.leaf_size", self.leaf_size, 1, MAX_LIST_IDS)
        _check_int("config.answer_size", self.answer_size, 1, MAX_LIST_IDS)
        _check_int("config.frame_limit", self.frame_limit, self.min_frame_limit, MAX_MESSAGE_BYTES)

    @property
    def min_frame_limit(self) -> int:
        """The smallest ``frame_limit`` that always fits the first piece of an answer.

        That is: the version byte, one SKIP range (consecutive SKIPs merge), the largest single
        output range, and the fingerprint that defers the rest of the space.
        """
        listing = _SKIP_RANGE_BYTES + _MAX_VARINT_BYTES + ID_BYTES * self.leaf_size
        answer = (
            _SKIP_RANGE_BYTES
            + 2 * _MAX_VARINT_BYTES
            + ID_BYTES * self.answer_size
            + (MAX_LIST_IDS + 7) // 8
        )
        largest = max(_FINGERPRINT_RANGE_BYTES, listing, answer)
        return 1 + _SKIP_RANGE_BYTES + largest + _FINGERPRINT_RANGE_BYTES


def _check_int(field: str, value: object, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise ReconcileError(field, "range", f"expected an int in [{low}, {high}], got {value!r}")


@dataclass(frozen=True, slots=True)
class Reply:
    """What `Reconciler.respond` makes of one incoming message.

    - ``message``: the bytes to send to the peer, or None when the incoming message asked
      for no answer (it only answered us). A message that asked for one always gets one,
      if only the empty message (the version byte alone: "everything is settled").
    - ``fetch``: ids learned from this message that the peer has and we lack (fetch them).
    - ``send``: ids learned from this message that we have and the peer lacks (send them).
    - ``done``: True when the exchange is over on our side: ``message`` (if any) only answers
      the peer and needs no reply.
    """

    message: bytes | None
    fetch: tuple[bytes, ...]
    send: tuple[bytes, ...]
    done: bool


# A decoded range: (upper bound or None for +infinity, mode, payload). Payloads: SKIP None,
# FINGERPRINT bytes, ID_LIST list of ids, ID_ANSWER (ids, answered-list length, lacked indexes).
_Answer = tuple[list[bytes], int, list[int]]
_Payload = None | bytes | list[bytes] | _Answer
_Range = tuple[bytes | None, _Mode, _Payload]
# An output range: (upper bound, mode, encoded payload).
_Out = tuple[bytes | None, _Mode, bytes]
# One output range of an answer, with its lower bound and the ids sending it teaches us
# (what we lack, what the peer lacks).
_Piece = tuple[bytes, _Out, tuple[list[bytes], list[bytes]] | None]


class Reconciler:
    """One side of a reconciliation over a fixed set of 32-byte ids.

    Either side may start (`initiate`); after that both sides run the same code: each incoming
    message goes to `respond`, whose `Reply.message` goes back, until a side gets None. The set
    never changes during an exchange; build a new Reconciler for the next one.
    """

    __slots__ = ("_blocks", "_config", "_elements", "_fetch", "_ids", "_send")

    def __init__(self, ids: Iterable[bytes], *, config: ReconcileConfig | None = None) -> None:
        """Sort and deduplicate ``ids`` (O(n log n), O(n) when already sorted).

        Raises ReconcileError (``id-type``, ``id-length``) for an id that is not 32 bytes, and
        (``config-type``) when ``config`` is not a ReconcileConfig.
        """
        if config is None:
            config = ReconcileConfig()
        elif not isinstance(config, ReconcileConfig):
            raise ReconcileError(
                "config", "config-type", f"expected ReconcileConfig, got {type(config).__name__}"
            )
        self._config = config
        self._ids = _sorted_ids(ids)
        #: The fingerprint element of each id, in id order, and the sums of the elements
        #: before each block of `_BLOCK` ids: a prefix sum is one block sum plus at most
        #: `_BLOCK` - 1 elements, and adding ids re-sums only the blocks from the first change.
        self._elements: list[int] = list(map(_element, self._ids))
        self._blocks: list[int] = _block_sums(self._elements, 0, [0])
        self._fetch: set[bytes] = set()
        self._send: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def fresh(self) -> Reconciler:
        """A reconciler over the same ids and config, with nothing learned yet: the sorted ids
        and their prefix sums are shared (never changed once built), so a replica whose ids
        did not change starts its next exchange without building them again."""
        out = Reconciler.__new__(Reconciler)
        out._config = self._config
        out._ids = self._ids
        out._elements = self._elements
        out._blocks = self._blocks
        out._fetch = set()
        out._send = set()
        return out

    def with_ids(self, added: Iterable[bytes]) -> Reconciler:
        """A fresh reconciler over these ids plus ``added`` (ids already held are ignored),
        built from this one: only the new ids are hashed, and only the block sums from the
        first new id on are summed again. The same reconciler, message for message, as one
        built from the whole set. This one is unchanged.

        Raises ReconcileError (``id-type``, ``id-length``) for an added id that is not 32 bytes.
        """
        new = [x for x in _sorted_ids(added) if not self._holds(x)]
        if not new:
            return self.fresh()
        if len(new) * _BLOCK > len(self._ids):  # many new ids: a full build is cheaper
            return Reconciler([*self._ids, *new], config=self._config)
        ids, elements = list(self._ids), list(self._elements)
        for x in reversed(new):  # from the back, so earlier insertion points stay valid
            k = bisect.bisect_left(ids, x)
            ids.insert(k, x)
            elements.insert(k, _element(x))
        first = bisect.bisect_left(ids, new[0]) // _BLOCK
        out = self.fresh()
        out._ids = ids
        out._elements = elements
        out._blocks = _block_sums(elements, first, self._blocks[: first + 1])
        return out

    def _holds(self, x: bytes) -> bool:
        k = bisect.bisect_left(self._ids, x)
        return k < len(self._ids) and self._ids[k] == x

    @property
    def config(self) -> ReconcileConfig:
        return self._config

    @property
    def fetch(self) -> tuple[bytes, ...]:
        """Every id learned so far that the peer has and we lack, sorted."""
        return tuple(sorted(self._fetch))

    @property
    def send(self) -> tuple[bytes, ...]:
        """Every id learned so far that we have and the peer lacks, sorted."""
        return tuple(sorted(self._send))

    def initiate(self) -> bytes:
        """The first message of an exchange: the whole id space, split or listed.

        Raises nothing: the ids were checked when the reconciler was built.
        """
        n = len(self._ids)
        writer = _Writer(self._config.frame_limit)
        if n <= self._config.leaf_size:
            added = writer.offer((None, _Mode.ID_LIST, _encode_ids(self._ids)))
        else:
            added = all(writer.offer(child) for _, child in self._split(b"", None, 0, n))
        message = writer.finish()
        assert added and message is not None  # min_frame_limit leaves room for either
        return message

    def respond(self, message: bytes) -> Reply:
        """Read one message from the peer; return what to send back and what was learned.

        Raises ReconcileError when ``message`` is malformed (see the module docstring for the
        rules) or contradicts our ids (``answer-length``, ``answer-id-known``); the reconciler
        is then unchanged.
        """
        ranges = _decode(message)
        writer = _Writer(self._config.frame_limit)
        fetch: list[bytes] = []
        send: list[bytes] = []
        lower = b""
        deferred_from: bytes | None = None
        for index, (upper, mode, payload) in enumerate(ranges):
            if mode is _Mode.ID_ANSWER:
                assert isinstance(payload, tuple)
                self._learn_answer(index, lower, upper, payload, fetch, send)
            if deferred_from is None:
                for piece_lower, out, learned in self._answer(lower, upper, mode, payload):
                    if not writer.offer(out):
                        deferred_from = piece_lower
                        break
                    if learned is not None:
                        fetch += learned[0]
                        send += learned[1]
            lower = b"" if upper is None else upper
        if deferred_from is not None:
            last = ranges[-1][0]
            i, j = self._index(deferred_from), self._index(last)
            writer.offer_reserved((last, _Mode.FINGERPRINT, self._fingerprint(i, j)))
        new_fetch = tuple(sorted(set(fetch) - self._fetch))
        new_send = tuple(sorted(set(send) - self._send))
        self._fetch.update(new_fetch)
        self._send.update(new_send)
        done = not writer.expects_reply
        reply = writer.finish()
        if reply is None and any(
            m is _Mode.FINGERPRINT or m is _Mode.ID_LIST for _, m, _ in ranges
        ):
            reply = _SETTLED
        return Reply(reply, new_fetch, new_send, done)

    # --- answers ---------------------------------------------------------------------------

    def _answer(
        self, lower: bytes, upper: bytes | None, mode: _Mode, payload: _Payload
    ) -> Iterator[_Piece]:
        """Our answer to one incoming range, one output range at a time, lazily.

        The caller stops at the first piece that does not fit the frame and defers the rest of
        the space from that piece's lower bound, so only what is sent is ever computed.
        """
        if mode is _Mode.SKIP or mode is _Mode.ID_ANSWER:
            yield lower, (upper, _Mode.SKIP, b""), None
            return
        i, j = self._index(lower), self._index(upper)
        if mode is _Mode.ID_LIST:
            assert isinstance(payload, list)
            yield from self._answer_list(lower, upper, i, j, payload)
        elif self._fingerprint(i, j) == payload:
            yield lower, (upper, _Mode.SKIP, b""), None
        elif j - i <= self._config.leaf_size:
            yield lower, (upper, _Mode.ID_LIST, _encode_ids(self._ids[i:j])), None
        else:
            for child_lower, child in self._split(lower, upper, i, j):
                yield child_lower, child, None

    def _answer_list(
        self, lower: bytes, upper: bytes | None, i: int, j: int, theirs: list[bytes]
    ) -> Iterator[_Piece]:
        """ID_ANSWER ranges for the peer's list, each covering at most ``answer_size`` of ours."""
        ids = self._ids
        size = self._config.answer_size
        t = 0
        for start in range(i, max(j, i + 1), size):
            end = min(start + size, j)
            bound = upper if end == j else _separator(ids[end - 1], ids[end])
            stop = len(theirs) if bound is None else bisect.bisect_left(theirs, bound, t)
            listed = theirs[t:stop]
            ours = ids[start:end]
            our_set = set(ours)
            their_set = set(listed)
            they_lack = [x for x in ours if x not in their_set]
            we_lack = [k for k, x in enumerate(listed) if x not in our_set]
            bitmap = bytearray((len(listed) + 7) // 8)
            for k in we_lack:
                bitmap[k >> 3] |= 1 << (k & 7)
            payload = _encode_ids(they_lack) + _varint(len(listed)) + bytes(bitmap)
            learned = ([listed[k] for k in we_lack], they_lack)
            yield lower, (bound, _Mode.ID_ANSWER, payload), learned
            lower = b"" if bound is None else bound
            t = stop

    def _learn_answer(
        self,
        index: int,
        lower: bytes,
        upper: bytes | None,
        answer: _Answer,
        fetch: list[bytes],
        send: list[bytes],
    ) -> None:
        field = f"message.range[{index}]"
        they_have, listed, lacked = answer
        i, j = self._index(lower), self._index(upper)
        if j - i != listed or listed > self._config.leaf_size:
            raise ReconcileError(
                field,
                "answer-length",
                f"answers a list of {listed} ids, but we hold {j - i} ids in this range"
                + ("" if j - i <= self._config.leaf_size else " (too many to have listed)"),
            )
        ours = self._ids[i:j]
        our_set = set(ours)
        for x in they_have:
            if x in our_set:
                raise ReconcileError(
                    field, "answer-id-known", f"says we lack {x.hex()}, which we hold"
                )
        fetch += they_have
        send += [ours[k] for k in lacked]

    def _split(
        self, lower: bytes, upper: bytes | None, i: int, j: int
    ) -> Iterator[tuple[bytes, _Out]]:
        """``branching`` FINGERPRINT ranges over ids[i:j] (as even as can be), with lower bounds."""
        ids = self._ids
        count = j - i
        parts = min(self._config.branching, count)
        start = i
        for part in range(1, parts + 1):
            end = i + count * part // parts
            bound = upper if part == parts else _separator(ids[end - 1], ids[end])
            yield lower, (bound, _Mode.FINGERPRINT, self._fingerprint(start, end))
            lower = b"" if bound is None else bound
            start = end

    # --- ranges and fingerprints --------------------------------------------------------------

    def _index(self, bound: bytes | None) -> int:
        return len(self._ids) if bound is None else bisect.bisect_left(self._ids, bound)

    def _prefix(self, k: int) -> int:
        """The sum of the elements of ids[:k] (not reduced modulo 2^256)."""
        block = k // _BLOCK
        return self._blocks[block] + sum(self._elements[block * _BLOCK : k])

    def _fingerprint(self, i: int, j: int) -> bytes:
        return _hash_sum(j - i, (self._prefix(j) - self._prefix(i)) & _MASK)


def _element(x: bytes) -> int:
    """What a fingerprint adds up for one id (a hash, so structured ids do not cancel out)."""
    return int.from_bytes(blake3.blake3(x).digest(), "big")


def _hash_sum(count: int, total: int) -> bytes:
    data = _FINGERPRINT_DOMAIN + count.to_bytes(8, "little") + total.to_bytes(32, "big")
    return blake3.blake3(data).digest(length=FINGERPRINT_BYTES)


def fingerprint(ids: Iterable[bytes]) -> bytes:
    """The 16-byte fingerprint of a set of ids (duplicates count once), as messages carry it.

    Raises ReconcileError (``id-type``, ``id-length``) for an id that is not 32 bytes.
    """
    unique = _sorted_ids(ids)
    return _hash_sum(len(unique), sum(map(_element, unique)) & _MASK)


def _sorted_ids(ids: Iterable[bytes]) -> list[bytes]:
    """``ids`` validated, sorted and deduplicated (the checks run at C speed when all is well)."""
    if isinstance(ids, (bytes, bytearray, memoryview, str)):
        raise ReconcileError("ids", "id-type", "expected an iterable of ids, got one bytes/str")
    items = list(ids)
    if set(map(type, items)) - {bytes} or set(map(len, items)) - {ID_BYTES}:
        for k, x in enumerate(items):
            if type(x) is not bytes:
                raise ReconcileError(
                    f"ids[{k}]", "id-type", f"expected bytes, got {type(x).__name__}"
                )
            if len(x) != ID_BYTES:
                raise ReconcileError(
                    f"ids[{k}]", "id-length", f"expected {ID_BYTES} bytes, got {len(x)}"
                )
    items.sort()
    if any(map(operator.eq, items, itertools.islice(items, 1, None))):
        items = sorted(set(items))
    return items


def _block_sums(elements: Sequence[int], first: int, head: list[int]) -> list[int]:
    """``head`` (the sums before blocks ``0..first``) extended with the sums before each later
    block of `_BLOCK` elements, up to the block holding the last element."""
    total = head[-1]
    out = head
    for start in range(first * _BLOCK, len(elements), _BLOCK):
        total += sum(elements[start : start + _BLOCK])
        out.append(total)
    return out


def _separator(before: bytes, after: bytes) -> bytes:
    """The shortest prefix ``p`` of ``after`` with ``before < p <= after`` (``before < after``)."""
    k = 0
    while before[k] == after[k]:
        k += 1
    return after[: k + 1]


# --- encoding --------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_ids(ids: Sequence[bytes]) -> bytes:
    return _varint(len(ids)) + b"".join(ids)


def _bound_size(bound: bytes | None) -> int:
    return 1 if bound is None else 1 + len(bound)


def _bound_bytes(bound: bytes | None) -> bytes:
    return bytes([_INFINITY]) if bound is None else bytes([len(bound)]) + bound


class _Writer:
    """Collects output ranges within a byte and range budget, merging adjacent SKIPs.

    `offer` keeps room for one more FINGERPRINT range, so when it refuses a range the caller
    can still defer the rest of the space with one fingerprint.
    """

    __slots__ = ("_limit", "_ranges", "_size", "expects_reply")

    def __init__(self, limit: int) -> None:
        self._limit = limit - _FINGERPRINT_RANGE_BYTES
        self._ranges: list[_Out] = []
        self._size = 1
        #: Whether a range asks the peer for an answer (FINGERPRINT or ID_LIST).
        self.expects_reply = False

    def offer(self, out: _Out) -> bool:
        """Add ``out`` if it fits (leaving room for one FINGERPRINT range); say whether it did."""
        bound, mode, payload = out
        ranges = self._ranges
        size = _bound_size(bound)
        merges = mode is _Mode.SKIP and bool(ranges) and ranges[-1][1] is _Mode.SKIP
        if merges:
            size -= _bound_size(ranges[-1][0])
        else:
            size += 1 + len(payload)
        if self._size + size > self._limit or len(ranges) + 2 > MAX_RANGES_PER_MESSAGE:
            return False
        self._size += size
        if merges:
            ranges[-1] = out
        else:
            ranges.append(out)
            self.expects_reply |= mode is _Mode.FINGERPRINT or mode is _Mode.ID_LIST
        return True

    def offer_reserved(self, out: _Out) -> None:
        """Add the FINGERPRINT range that `offer` kept room for."""
        bound, mode, payload = out
        assert mode is _Mode.FINGERPRINT
        self._size += _bound_size(bound) + 1 + len(payload)
        self._ranges.append(out)
        self.expects_reply = True

    def finish(self) -> bytes | None:
        ranges = self._ranges
        if ranges and ranges[-1][1] is _Mode.SKIP:
            ranges.pop()
        if not ranges:
            return None
        parts = [bytes([PROTOCOL_VERSION])]
        for bound, mode, payload in ranges:
            parts += (_bound_bytes(bound), bytes([mode]), payload)
        return b"".join(parts)


# --- decoding --------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 1

    def take(self, size: int, field: str) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise ReconcileError(field, "truncated", f"message ends inside {field}")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def byte(self, field: str) -> int:
        return self.take(1, field)[0]

    def varint(self, field: str, limit: int) -> int:
        value = 0
        for shift in range(0, 7 * _MAX_VARINT_BYTES, 7):
            b = self.byte(field)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                if b == 0 and shift:
                    raise ReconcileError(field, "varint", "varint is not in its shortest form")
                break
        else:
            raise ReconcileError(field, "varint", f"varint longer than {_MAX_VARINT_BYTES} bytes")
        if value > limit:
            raise ReconcileError(field, "max-list-ids", f"{value} exceeds the limit {limit}")
        return value

    def ids(self, field: str, lower: bytes, upper: bytes | None) -> list[bytes]:
        count = self.varint(f"{field}.count", MAX_LIST_IDS)
        raw = self.take(count * ID_BYTES, f"{field}.ids")
        ids = [raw[k : k + ID_BYTES] for k in range(0, len(raw), ID_BYTES)]
        previous = None
        for k, x in enumerate(ids):
            if previous is not None and x <= previous:
                raise ReconcileError(f"{field}.ids[{k}]", "id-order", "ids not strictly increasing")
            if x < lower or (upper is not None and x >= upper):
                raise ReconcileError(f"{field}.ids[{k}]", "id-out-of-range", "id outside its range")
            previous = x
        return ids


def _decode(message: object) -> list[_Range]:
    """Parse and validate a whole message before anything acts on it."""
    if not isinstance(message, (bytes, bytearray, memoryview)):
        raise ReconcileError(
            "message", "bytes-input", f"expected bytes, got {type(message).__name__}"
        )
    data = bytes(message)
    if len(data) > MAX_MESSAGE_BYTES:
        raise ReconcileError(
            "message", "max-message-bytes", f"{len(data)} bytes exceeds {MAX_MESSAGE_BYTES}"
        )
    if not data:
        raise ReconcileError("message", "truncated", "empty message")
    if data[0] != PROTOCOL_VERSION:
        raise ReconcileError(
            "message.version",
            "version",
            f"protocol version {data[0]} is not supported (expected {PROTOCOL_VERSION})",
        )
    reader = _Reader(data)
    ranges: list[_Range] = []
    lower: bytes | None = b""
    while reader.pos < len(data):
        field = f"message.range[{len(ranges)}]"
        if len(ranges) == MAX_RANGES_PER_MESSAGE:
            raise ReconcileError(
                field, "max-ranges", f"more than {MAX_RANGES_PER_MESSAGE} ranges in one message"
            )
        if lower is None:
            raise ReconcileError(field, "bound-order", "a range after the one ending at +infinity")
        upper = _read_bound(reader, f"{field}.bound", lower)
        code = reader.byte(f"{field}.mode")
        if code > _Mode.ID_ANSWER:
            raise ReconcileError(f"{field}.mode", "mode", f"unknown range mode {code}")
        mode = _Mode(code)
        payload: _Payload = None
        if mode is _Mode.SKIP:
            if ranges and ranges[-1][1] is _Mode.SKIP:
                raise ReconcileError(field, "adjacent-skips", "two SKIP ranges in a row")
        elif mode is _Mode.FINGERPRINT:
            payload = reader.take(FINGERPRINT_BYTES, f"{field}.fingerprint")
        elif mode is _Mode.ID_LIST:
            payload = reader.ids(field, lower, upper)
        else:
            payload = _read_answer(reader, field, lower, upper)
        ranges.append((upper, mode, payload))
        lower = upper
    if ranges and ranges[-1][1] is _Mode.SKIP:
        raise ReconcileError(
            f"message.range[{len(ranges) - 1}]", "trailing-skip", "the last range is a SKIP"
        )
    return ranges


def _read_bound(reader: _Reader, field: str, lower: bytes) -> bytes | None:
    size = reader.byte(field)
    if size == _INFINITY:
        return None
    if size > ID_BYTES:
        raise ReconcileError(field, "bound-length", f"bound of {size} bytes (at most {ID_BYTES})")
    bound = reader.take(size, field)
    if bound <= lower:
        raise ReconcileError(field, "bound-order", "bounds are not strictly increasing")
    if bound[-1] == 0:
        raise ReconcileError(field, "bound-trailing-zero", "bound ends in a zero byte")
    return bound


def _read_answer(reader: _Reader, field: str, lower: bytes, upper: bytes | None) -> _Answer:
    ids = reader.ids(field, lower, upper)
    listed = reader.varint(f"{field}.listed", MAX_LIST_IDS)
    bitmap = reader.take((listed + 7) // 8, f"{field}.bitmap")
    if listed & 7 and bitmap[-1] >> (listed & 7):
        raise ReconcileError(f"{field}.bitmap", "bitmap-padding", "padding bits are not zero")
    lacked = [k for k in range(listed) if bitmap[k >> 3] >> (k & 7) & 1]
    return ids, listed, lacked


@dataclass(frozen=True, slots=True)
class ReconcileResult:
    """What `reconcile_in_memory` measured.

    ``a_lacks`` / ``b_lacks``: the ids each side must fetch (sorted). A round trip is one
    message each way, so ``round_trips = ceil(messages / 2)``; bytes count whole messages.
    """

    a_lacks: tuple[bytes, ...]
    b_lacks: tuple[bytes, ...]
    messages: int
    round_trips: int
    bytes_a_to_b: int
    bytes_b_to_a: int

    @property
    def total_bytes(self) -> int:
        return self.bytes_a_to_b + self.bytes_b_to_a


def reconcile_in_memory(
    a_ids: Iterable[bytes],
    b_ids: Iterable[bytes],
    *,
    config: ReconcileConfig | None = None,
) -> ReconcileResult:
    """Run the whole exchange between two in-memory peers (A initiates) and measure it.

    Raises ReconcileError for ids that are not 32 bytes, and (rule ``max-messages``) if the
    exchange has not ended after `MAX_EXCHANGE_MESSAGES` messages.
    """
    peers = (Reconciler(a_ids, config=config), Reconciler(b_ids, config=config))
    sent = [0, 0]
    messages = 0
    sender = 0
    message: bytes | None = peers[0].initiate()
    while message is not None:
        if messages == MAX_EXCHANGE_MESSAGES:
            raise ReconcileError(
                "messages", "max-messages", f"no end after {MAX_EXCHANGE_MESSAGES} messages"
            )
        messages += 1
        sent[sender] += len(message)
        sender = 1 - sender
        message = peers[sender].respond(message).message
    return ReconcileResult(
        a_lacks=peers[0].fetch,
        b_lacks=peers[1].fetch,
        messages=messages,
        round_trips=(messages + 1) // 2,
        bytes_a_to_b=sent[0],
        bytes_b_to_a=sent[1],
    )
