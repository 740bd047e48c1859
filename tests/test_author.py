"""Author names (`statefuse.sync.author`): an author names only itself, its latest name wins
whatever order the changes arrive in, names follow trust like every other op, and a replica
declares, keeps and shows them (`Replica.declare_name`, ``name=``, `Replica.names`)."""

from __future__ import annotations

import itertools

import blake3
import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from statefuse import Replica
from statefuse.core.error import OpRuleError
from statefuse.registry import DEFAULT_REGISTRY
from statefuse.registry.value import encode_value
from statefuse.storage.writer import Writer
from statefuse.sync.author import (
    MAX_AUTHOR_NAME_CHARS,
    AuthorNamed,
    author_names,
    check_author_name,
)
from statefuse.sync.change import (
    VerifiedChange,
    change_id_of,
    sign_change,
    signed_message,
    wire,
)
from statefuse.sync.changelog import ChangeLog, Status
from statefuse.sync.http import serve, sync_with
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import ReadOnlyError
from statefuse.sync.verify import QuarantineReason

SPACE = "team"
FP = DEFAULT_REGISTRY.fingerprint
KEYS = [SigningKey.from_seed(bytes([i]) * 32) for i in (1, 2, 3)]


def _chain(key: SigningKey, ops_per_change: list[list[object]]) -> list[VerifiedChange]:
    """``key``'s feed: one change per entry, each holding its ops."""
    out: list[VerifiedChange] = []
    prev = None
    for seq, ops in enumerate(ops_per_change, 1):
        c = sign_change(key, space=SPACE, seq=seq, prev=prev, registry=FP, ops=ops)
        out.append(c)
        prev = c.change_id
    return out


def _named(key: SigningKey, lamport: int, name: str) -> AuthorNamed:
    return AuthorNamed(key.author, lamport, 0, name)


# --- the op and its rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "name-length"),
        ("x" * (MAX_AUTHOR_NAME_CHARS + 1), "name-length"),
        (" scout", "name-whitespace"),
        ("scout\n", "name-whitespace"),
        ("\u3000scout", "name-whitespace"),
        ("sc\x00out", "name-control"),
        ("sc\x1bout", "name-control"),
        ("sc\u0085out", "name-control"),
        ("scout\u202egnp", "name-control"),
        ("sc\u2028out", "name-control"),
        (b"scout", "str"),
        (None, "str"),
        ("sc\ud800out", "utf8"),
    ],
)
def test_a_name_that_breaks_the_rule_is_refused_naming_the_field_and_the_rule(name, rule):
    with pytest.raises(OpRuleError) as err:
        AuthorNamed(KEYS[0].author, 1, 0, name)
    assert (err.value.field, err.value.rule) == ("name", rule)
    assert isinstance(err.value, ValueError)


def test_names_up_to_the_limit_with_inner_spaces_and_any_script_are_kept_as_written():
    for name in (
        "scout",
        "Dana Smith",
        "東京エージェント",
        "x" * MAX_AUTHOR_NAME_CHARS,
        "a\tb"[:1],
    ):
        assert check_author_name("name", name) == name
        assert AuthorNamed(KEYS[0].author, 1, 0, name).name == name


def test_the_latest_name_of_each_author_wins_by_lamport_then_op_id():
    a, b = KEYS[0], KEYS[1]
    ops = [_named(a, 3, "late"), _named(a, 1, "early"), _named(b, 2, "bee")]
    assert author_names(ops) == {a.author: "late", b.author: "bee"}
    tie = [_named(a, 5, "one"), _named(a, 5, "two")]
    winner = max(tie, key=lambda op: op.op_id)
    assert author_names(tie) == author_names(reversed(tie)) == {a.author: winner.name}


def _wire(key: SigningKey, seq: int, prev: bytes | None, items: list[list[bytes]]) -> bytes:
    """A change signed by ``key`` holding ``items`` ([op id, op bytes]) as given, unchecked."""
    head = {"author": key.author, "ops": items, "prev": prev, "registry": FP, "seq": seq}
    body = encode_value({**head, "space": SPACE, "v": 1}, "change")
    return wire(body, key.sign(signed_message(change_id_of(body))))


def test_an_author_names_only_itself_a_change_naming_another_key_is_quarantined():
    """The op has no field for whom it names: its author is the signer (the verifier checks
    every op's author against the change's). Mallory's name names Mallory; an op of hers that
    claims to be Alice's is refused with its change."""
    alice, mallory = KEYS[0], KEYS[1]
    log = ChangeLog(SPACE)
    own = sign_change(
        mallory, space=SPACE, seq=1, prev=None, registry=FP, ops=[_named(mallory, 1, "x")]
    )
    assert log.receive(own.data, seen_ms=0).status is Status.ACCEPTED
    assert log.names() == {mallory.author: "x"}
    lie = _named(alice, 9, "alice is a liar")
    forged = _wire(mallory, 2, own.change_id, [[lie.op_id, lie.encode()]])
    receipt = log.receive(forged, seen_ms=0)
    assert (receipt.status, receipt.reason) == (
        Status.QUARANTINED,
        QuarantineReason.OP_AUTHOR_MISMATCH,
    )
    assert log.names() == {mallory.author: "x"}


# --- order independence ---------------------------------------------------------------------------

NAMES = st.sampled_from(["scout", "planner", "Scout", "x"])
#: Per author: its feed, each change one name op (lamport drawn, so later changes may carry
#: lower lamports) and maybe a claim.
FEEDS = st.lists(
    st.lists(st.tuples(NAMES, st.integers(1, 6), st.booleans()), max_size=4),
    min_size=len(KEYS),
    max_size=len(KEYS),
)


def _feeds(drawn: list[list[tuple[str, int, bool]]]) -> list[VerifiedChange]:
    changes = []
    for key, feed in zip(KEYS, drawn, strict=True):
        writer = Writer(key.author, clock=lambda: 0)
        entries: list[list[object]] = []
        for name, lamport, claim in feed:
            ops: list[object] = [_named(key, lamport, name)]
            if claim:
                ops.append(writer.claim("p", "q", "r", name))
            entries.append(ops)
        changes += _chain(key, entries)
    return changes


@settings(max_examples=min(settings.default.max_examples, 200))
@given(feeds=FEEDS, data=st.data())
@example(feeds=[[("scout", 2, False), ("planner", 1, False)], [], []], data=None)
def test_two_replicas_given_the_same_changes_in_any_order_and_batches_show_the_same_names(
    feeds, data
):
    changes = _feeds(feeds)
    model = author_names(op for c in changes for op in c.ops if type(op) is AuthorNamed)
    if data is None:  # the pinned example: the later change holds the older name
        orders = [changes, list(reversed(changes))]
        cuts: list[list[int]] = [[1], []]
    else:
        orders = [data.draw(st.permutations(changes)) for _ in range(2)]
        cuts = [
            sorted(data.draw(st.sets(st.integers(1, max(1, len(changes) - 1)), max_size=3)))
            for _ in range(2)
        ]
    seen = []
    for order, cut in zip(orders, cuts, strict=True):
        replica = Replica.memory(space=SPACE)
        bounds = [0, *cut, len(order)]
        for lo, hi in itertools.pairwise(bounds):
            replica.receive([c.data for c in order[lo:hi]])
            replica.names()  # names worked out between batches are then followed incrementally
        seen.append(replica.names())
        replica.close()
    assert seen[0] == seen[1] == model


# --- trust ----------------------------------------------------------------------------------------


def test_in_a_closed_space_a_name_counts_once_its_author_is_admitted_and_stops_once_cut_off():
    root = Replica.memory(space=SPACE, mode="closed", name="root")
    alice = Replica.memory(space=SPACE, mode="closed", root=root.author, name="alice")
    root.merge(alice)
    assert root.names() == {root.author: "root"}  # alice is not admitted: her name is not shown
    assert alice.author_name(alice.author) is None  # not even to herself
    assert alice.declare_name("alice") is None  # but she declared it: nothing to write again
    root.admit(alice.author)
    assert root.names() == {root.author: "root", alice.author: "alice"}
    root.revoke(alice.author, keep=[])  # none of her changes count any more
    assert root.author_name(alice.author) is None


# --- the replica ----------------------------------------------------------------------------------


def test_declaring_writes_only_when_the_name_changes_and_the_latest_wins():
    r = Replica.memory(space=SPACE, name="scout")
    assert r.names() == {r.author: "scout"} and len(r) == 1
    assert r.declare_name("scout") is None and len(r) == 1
    op = r.declare_name("ranger")
    assert isinstance(op, AuthorNamed) and op.author == r.author and len(r) == 2
    assert r.author_name(r.author) == "ranger" and r.author_label(r.author) == "ranger"
    assert r.state().active_claims() == []  # a name is not memory


def test_a_bad_name_is_refused_before_anything_is_written_or_created(tmp_path):
    r = Replica.memory(space=SPACE)
    for bad in ("", " scout", "a\x07b", 42):
        with pytest.raises(OpRuleError) as err:
            r.declare_name(bad)  # type: ignore[arg-type]
        assert err.value.field == "name"
    assert len(r) == 0 and r.names() == {}
    with pytest.raises(OpRuleError):
        Replica.memory(space=SPACE, name="\n")
    path = tmp_path / "new.db"
    with pytest.raises(OpRuleError):
        Replica.open(path, create=True, space=SPACE, name="x" * 65)
    assert list(tmp_path.iterdir()) == []


def test_opening_with_a_name_declares_it_once_and_a_read_only_open_cannot_change_it(tmp_path):
    path = tmp_path / "a.db"
    with Replica.open(path, create=True, space=SPACE, name="scout") as r:
        assert r.names() == {r.author: "scout"}
    with Replica.open(path, name="scout") as r:
        assert len(r) == 1  # the same name: nothing written
    with Replica.open(path, readonly=True, name="scout") as r:
        assert r.author_name(r.author) == "scout"
    with pytest.raises(ReadOnlyError) as err:
        Replica.open(path, readonly=True, name="ranger")
    assert (err.value.field, err.value.rule) == ("name", "readonly")
    assert "cannot declare the name 'ranger'" in err.value.message
    with Replica.open(path, name="ranger") as r:
        assert r.names() == {r.author: "ranger"} and len(r) == 2
    with Replica.open(path, readonly=True) as r:  # and the name is durable
        assert r.names() == {r.author: "ranger"}


def test_two_named_replicas_that_sync_over_http_each_show_the_other_by_name():
    scout = Replica.memory(space=SPACE, name="scout")
    planner = Replica.memory(space=SPACE, name="planner")
    scout.add_claim("project/launch/deadline", "2026-04-01")
    planner.add_claim("project/launch/deadline", "2026-04-08")
    with serve(planner) as server:
        sync_with(scout, server.url)
    both = {scout.author: "scout", planner.author: "planner"}
    assert scout.names() == planner.names() == both
    for r in (scout, planner):
        text = r.context("deadline").text
        assert "by scout" in text and "by planner" in text
        assert scout.author.hex()[:8] not in text and planner.author.hex()[:8] not in text


def test_a_name_declared_between_two_context_calls_shows_in_the_second():
    me = Replica.memory(space=SPACE)
    other = Replica.memory(space=SPACE)
    me.add_claim("vendor/acme/price", 100)
    other.add_claim("vendor/acme/price", 120)
    me.merge(other)
    first = me.context("price").text
    assert f"by {other.author.hex()[:8]}" in first
    other.declare_name("analyst")
    me.merge(other)  # only the name arrives: the memory is unchanged
    second = me.context("price").text
    assert "by analyst" in second and other.author.hex()[:8] not in second
    me.declare_name("planner")
    assert "by planner" in me.context("price").text


def test_the_latest_name_wins_on_every_replica_when_the_renaming_arrives_before_the_first():
    a = Replica.memory(space=SPACE, name="first")
    a.declare_name("second")
    b = Replica.memory(space=SPACE)
    first, second = a.all_change_bytes()
    assert b.receive([second]).pending == 1  # waits for its predecessor
    assert b.names() == {}
    b.receive([first])
    assert b.names() == a.names() == {a.author: "second"}


def test_a_malformed_name_from_a_peer_is_quarantined_with_its_change_and_names_nobody():
    key = KEYS[0]
    bad = {**_named(key, 1, "ok").to_value(), "name": "evil\u202e"}  # keys stay in order
    data = msgpack.packb(bad, use_bin_type=True)
    forged = _wire(key, 1, None, [[blake3.blake3(data).digest(), data]])  # its true id
    r = Replica.memory(space=SPACE)
    report = r.receive([forged])
    assert (report.accepted, report.quarantined) == (0, 1)
    (entry,) = r.quarantine()
    assert entry.reason == QuarantineReason.BAD_OP.value and "name" in entry.message
    assert r.names() == {} and len(r) == 0
