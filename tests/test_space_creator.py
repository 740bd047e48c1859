"""An open space's creator cannot be forged (SEMANTICS §2, `sync.creator`).

Earlier releases took "the creator" from the lowest-lamport declaration, and an author picks its
own lamports: a stranger's `RegistryDeclared` stamped lamport 1 took the space over (a functional
predicate turned multi-valued, its conflict vanished, the real creator got
``not-registry-authority``). The creator is now a property of the store. These tests drive the
CLI in real processes and a served store over 127.0.0.1: the forgery pushed anonymously or
brought in a bundle does not take effect and is reported with its reason; two stores created
apart refuse to meet; a store with no creator adopts one only from a source its user chose; a
store of an earlier release is pinned by the documented rule; and replicas with one creator and
the same changes agree, whatever order the declarations of the creator and of strangers come in.
"""

from __future__ import annotations

import http.client
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.registry import (
    DEFAULT_REGISTRY,
    EXACT_REGISTRY,
    Cardinality,
    PredicateContract,
    Registry,
)
from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import StoreInfo, StoreWrite
from statefuse.storage.writer import Writer
from statefuse.sync.bundle import open_bundle, write_bundle
from statefuse.sync.change import VerifiedChange, sign_change
from statefuse.sync.declaration import RegistryDeclared
from statefuse.sync.key import SigningKey
from statefuse.sync.protocol import CONTENT_TYPE, encode_frames
from statefuse.sync.replica import Replica, ReplicaError, TwoSpacesError, key_path
from tests.serving import served

ROOT = Path(__file__).resolve().parents[1]
SPACE = "deals"

#: What the stranger declares: ``owner`` many-valued, so a conflict over it disappears.
MANY_OWNERS = Registry([PredicateContract("owner", cardinality=Cardinality.MANY)])
MONEY = Registry([PredicateContract("price", normalizer="money", params={"currency": "USD"})])
#: The registry file the creator declares in the CLI tests.
MONEY_TEXT = '[predicates]\nprice = "money"\n'
MONEY_FILE = Registry.from_toml(MONEY_TEXT)


class Run(NamedTuple):
    code: int
    out: str
    err: str


def cli(*argv: object) -> Run:
    """``statefuse ARGV`` in a real process."""
    done = subprocess.run(
        [sys.executable, "-m", "statefuse", *map(str, argv)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def doc(*argv: object) -> Any:
    """``statefuse --json ARGV``, which must succeed, as JSON."""
    run = cli("--json", *argv)
    assert run.code == 0, run
    return json.loads(run.out)


def push_anonymously(url: str, changes: list[bytes]) -> tuple[int, dict[str, Any]]:
    """POST /v1/push with no signature (what any stranger may do to an open space)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        body = encode_frames([SPACE.encode(), *changes])
        conn.request("POST", "/v1/push", body, headers={"Content-Type": CONTENT_TYPE})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def forged(stranger: SigningKey, registry: Registry, *, lamport: int = 1) -> VerifiedChange:
    """A stranger's change holding one registry declaration stamped with ``lamport``."""
    op = RegistryDeclared(stranger.author, lamport, 0, registry.to_document())
    return sign_change(
        stranger, space=SPACE, seq=1, prev=None, registry=DEFAULT_REGISTRY.fingerprint, ops=[op]
    )


def registry_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def author_of(path: Path) -> str:
    return SigningKey.load(key_path(path)).author.hex()


def creators_store(tmp_path: Path, name: str = "alice") -> Path:
    """A store that created space ``deals``, with a conflict over ``vendor/acme/owner``: it
    declared a registry after its first claims (at lamport 4, so a stranger's lamport-1
    declaration sorts first), which pinned it to its own key."""
    path = tmp_path / f"{name}.db"
    money = registry_file(tmp_path, "money.toml", MONEY_TEXT)
    run = cli("--store", path, "init", "--space", SPACE, "--name", name)
    assert run.code == 0, run
    for value in ("Dana", "Lee"):
        assert cli("--store", path, "claim", "vendor/acme/owner", value).code == 0
    assert cli("--store", path, "registry", "declare", money).code == 0
    return path


def owner_conflicts(path: Path) -> int:
    return len(doc("--store", path, "conflicts")["conflicts"])


def change_count(path: Path) -> int:
    with Replica.open(path, readonly=True) as rep:
        return len(rep)


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


# --- the forgery ---------------------------------------------------------------------------------


def test_a_strangers_lamport_1_declaration_pushed_to_a_served_store_does_not_take_the_space(
    tmp_path,
):
    alice = creators_store(tmp_path)
    stranger = SigningKey.generate()
    assert owner_conflicts(alice) == 1
    with served(alice) as url:
        status, report = push_anonymously(url, [forged(stranger, MANY_OWNERS).data])
        assert status == 200 and report["accepted"] == 1  # a stranger may write here
        # read beside the running server: the memory is still the creator's
        assert owner_conflicts(alice) == 1  # `owner` is still functional: the conflict stays
        shown = doc("--store", alice, "registry", "show")
        assert shown["declared_by"] == author_of(alice) == shown["creator"]
        assert shown["fingerprint"] == MONEY_FILE.fingerprint.hex()
        # the declaration is refused with its reason: in the push's report, and listed
        [refused] = report["refused_declarations"]
        assert refused["author"] == stranger.author.hex()
        assert refused["rule"] == "not-registry-authority"
        assert "only its creator" in refused["reason"]
        assert [(r["author"], r["lamport"]) for r in shown["refused"]] == [
            (stranger.author.hex(), 1)
        ]
        text = cli("--store", alice, "registry", "show")
        assert text.code == 0
        assert "refused (not-registry-authority)" in text.out
        assert stranger.author.hex()[:12] in text.out
    # the real creator still declares
    exact = registry_file(tmp_path, "exact.toml", '[default]\nnormalizer = "exact"\n')
    run = cli("--store", alice, "registry", "declare", exact)
    assert run.code == 0, run
    assert doc("--store", alice, "registry", "show")["declared_by"] == author_of(alice)


def test_a_strangers_declaration_in_a_bundle_is_refused_with_its_reason_on_import(tmp_path):
    alice = creators_store(tmp_path)
    stranger = SigningKey.generate()
    bundle = tmp_path / "stranger.bundle"
    write_bundle(bundle, stranger, SPACE, [forged(stranger, MANY_OWNERS).data])
    run = cli("--store", alice, "import", bundle)
    assert run.code == 0, run
    assert owner_conflicts(alice) == 1
    assert "1 accepted" in run.out and "registry changed" not in run.out
    assert (
        f"1 registry declaration refused (not-registry-authority) by"
        f" {stranger.author.hex()[:12]}…" in run.out
    )
    assert owner_conflicts(alice) == 1
    shown = doc("--store", alice, "registry", "show")
    assert shown["declared_by"] == author_of(alice)
    assert [r["rule"] for r in shown["refused"]] == ["not-registry-authority"]


# --- two spaces that share a name ----------------------------------------------------------------


def test_two_stores_created_apart_refuse_to_import_each_other_with_one_error_line(tmp_path):
    alice = creators_store(tmp_path, "alice")
    bob = creators_store(tmp_path, "bob")
    bundle = tmp_path / "bob.bundle"
    assert cli("--store", bob, "export", bundle).code == 0
    assert open_bundle(bundle).creator == bytes.fromhex(author_of(bob))
    before = change_count(alice)
    run = cli("--store", alice, "import", bundle)
    assert run.code == 1 and run.out == ""
    [line] = error_lines(run.err)
    assert line.startswith("Error: ") and "two spaces share the name 'deals'" in line
    assert author_of(alice)[:16] in line and author_of(bob)[:16] in line
    assert change_count(alice) == before


def test_two_stores_created_apart_refuse_to_sync_before_anything_moves(tmp_path):
    alice = creators_store(tmp_path, "alice")
    bob = creators_store(tmp_path, "bob")
    counts = (change_count(alice), change_count(bob))
    with served(bob) as url:
        run = cli("--store", alice, "sync", url)
        assert run.code == 1
        [line] = error_lines(run.err)
        assert line.startswith("Error: ") and "two spaces share the name 'deals'" in line
        assert author_of(alice)[:16] in line and author_of(bob)[:16] in line
    assert (change_count(alice), change_count(bob)) == counts


def test_two_replicas_created_apart_refuse_to_merge_in_process():
    a = Replica.memory(space=SPACE, registry=MONEY)
    b = Replica.memory(space=SPACE, registry=MONEY)
    b.add_claim("vendor/acme/owner", "Dana")
    before = (a.change_ids(), a.state().digest())
    with pytest.raises(TwoSpacesError) as caught:
        a.merge(b)
    assert caught.value.rule == "two-spaces" and isinstance(caught.value, ReplicaError)
    assert a.author.hex()[:16] in caught.value.message
    assert b.author.hex()[:16] in caught.value.message
    assert (a.change_ids(), a.state().digest()) == before


# --- adopting a creator, and pinning one -------------------------------------------------------


def test_a_store_without_a_creator_adopts_the_one_of_a_bundle_it_imports(tmp_path):
    alice = creators_store(tmp_path)
    carol = tmp_path / "carol.db"
    assert cli("--store", carol, "init", "--space", SPACE).code == 0
    assert doc("--store", carol, "registry", "show")["creator"] is None
    bundle = tmp_path / "alice.bundle"
    assert cli("--store", alice, "export", bundle).code == 0
    run = cli("--store", carol, "import", bundle)
    assert run.code == 0, run
    first = run.out.splitlines()[0]
    assert first == (
        f"this store now follows space 'deals' created by alice ({author_of(alice)[:16]}…)"
    )
    shown = doc("--store", carol, "registry", "show")
    assert shown["creator"] == shown["declared_by"] == author_of(alice)
    assert shown["refused"] == []
    # later imports of the same space print no such line
    again = cli("--store", carol, "import", bundle)
    assert again.code == 0 and "now follows" not in again.out


def test_a_client_without_a_creator_adopts_the_servers_and_a_served_store_never_adopts(tmp_path):
    alice = creators_store(tmp_path)
    dave = tmp_path / "dave.db"
    assert cli("--store", dave, "init", "--space", SPACE).code == 0
    with served(alice) as url:
        run = cli("--store", dave, "sync", url)
    assert run.code == 0, run
    assert f"this store now follows space 'deals' created by alice ({author_of(alice)[:16]}…)" in (
        run.out
    )
    assert doc("--store", dave, "registry", "show")["declared_by"] == author_of(alice)
    assert owner_conflicts(dave) == 1

    # a push to a served store never pins it: whoever pushes first could be a stranger
    erin = tmp_path / "erin.db"
    assert cli("--store", erin, "init", "--space", SPACE).code == 0
    with served(erin) as url:
        pushed = cli("--store", alice, "sync", url)
    assert pushed.code == 0, pushed
    # the pusher is told the served store does not count its declaration, and why
    assert "1 registry declaration refused (not-registry-authority)" in pushed.out
    assert "statefuse registry creator KEY" in pushed.out
    shown = doc("--store", erin, "registry", "show")
    assert shown["creator"] is None and shown["declared"] is False
    assert {r["author"] for r in shown["refused"]} == {author_of(alice)}
    assert "statefuse registry creator KEY" in shown["refused"][0]["reason"]
    # its user pins it, and the creator's declaration comes into force
    run = cli("--store", erin, "registry", "creator", author_of(alice))
    assert run.code == 0, run
    shown = doc("--store", erin, "registry", "show")
    assert shown["creator"] == shown["declared_by"] == author_of(alice)
    # pinned to another key is another space: refused in one line, unless forced
    other = SigningKey.generate().author.hex()
    run = cli("--store", erin, "registry", "creator", other)
    assert run.code == 1 and len(error_lines(run.err)) == 1 and "--force" in run.err
    assert cli("--store", erin, "registry", "creator", other, "--force").code == 0
    assert doc("--store", erin, "registry", "creator")["creator"] == other


def test_init_creator_pins_it_and_a_fork_and_open_keep_it(tmp_path):
    key = SigningKey.generate()
    path = tmp_path / "f.db"
    run = cli("--store", path, "init", "--space", SPACE, "--creator", key.author.hex())
    assert run.code == 0, run
    assert re.search(rf"creator\s+{key.author.hex()}\n", run.out)
    with Replica.open(path) as rep:
        assert rep.creator == key.author
        with pytest.raises(ReplicaError) as caught:
            rep.declare_registry(MONEY)
        assert caught.value.rule == "not-registry-authority"
        child = rep.fork()
        assert child.creator == key.author
    mine = tmp_path / "me.db"
    run = cli("--store", mine, "init", "--space", SPACE, "--creator", "me")
    assert run.code == 0 and re.search(r"creator\s+[0-9a-f]{64} \(you\)", run.out)
    with pytest.raises(ReplicaError) as closed:
        Replica.memory(space=SPACE, mode="closed", creator=key.author)
    assert closed.value.rule == "closed-space"


def test_readme_flow_stores_without_a_creator_exchange_bundles_without_a_creator_line(tmp_path):
    planner, scout = tmp_path / "planner.db", tmp_path / "scout.db"
    for path in (planner, scout):
        assert cli("--store", path, "init", "--space", "launch-plan").code == 0
    assert cli("--store", scout, "claim", "project/launch/deadline", "2026-04-01").code == 0
    bundle = tmp_path / "scout.bundle"
    assert cli("--store", scout, "export", bundle).code == 0
    assert open_bundle(bundle).creator is None  # the header earlier releases wrote
    run = cli("--store", planner, "import", bundle)
    assert run.code == 0 and run.out.startswith("Imported ")


# --- stores of earlier releases ------------------------------------------------------------------


def _earlier_release_store(path: Path, *declarers: tuple[SigningKey, int]) -> SigningKey:
    """A store as the release before this one left it: schema 4, no ``creator`` meta row, and
    one change per ``(key, lamport)`` holding a declaration by that key at that lamport (the
    store's own author is the first key)."""
    owner = declarers[0][0]
    store = SQLiteStore(path, create=True)
    store.initialize(StoreInfo(space=SPACE, registry=DEFAULT_REGISTRY.fingerprint))
    rows = []
    for key, lamport in declarers:
        op = RegistryDeclared(
            key.author, lamport, 0, (MONEY if key is owner else EXACT_REGISTRY).to_document()
        )
        c = sign_change(
            key, space=SPACE, seq=1, prev=None, registry=DEFAULT_REGISTRY.fingerprint, ops=[op]
        )
        rows.append((c.change_id, c.data))
    store.write(StoreWrite(accepted=tuple(rows)))
    info = store.bind(owner.author)
    store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM meta WHERE key = 'creator'")  # earlier releases wrote none
    db.close()
    owner.bound(info.store_id).save(key_path(path))
    return owner


def _meta_creator(path: Path) -> bytes | None:
    db = sqlite3.connect(path)
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'creator'").fetchone()
    finally:
        db.close()
    return None if row is None else bytes(row[0])


def test_an_earlier_releases_store_is_pinned_once_by_the_old_rule_at_first_open(tmp_path):
    creator, member = SigningKey.generate(), SigningKey.generate()
    path = tmp_path / "old.db"
    _earlier_release_store(path, (creator, 1), (member, 3))
    assert _meta_creator(path) is None
    with Replica.open(path) as rep:
        assert rep.creator == creator.author  # the lowest-lamport declaration's author
        assert rep.registry == MONEY
        assert [r.author for r in rep.refused_declarations()] == [member.author]
    assert _meta_creator(path) == creator.author  # recorded: decided once
    # from then on the pin is the store's: a stranger's lamport-1 declaration changes nothing
    stranger = SigningKey.generate()
    with Replica.open(path) as rep:
        report = rep.receive([forged(stranger, MANY_OWNERS).data])
        assert [r.author for r in report.refused_declarations] == [stranger.author]
        assert rep.creator == creator.author and rep.registry == MONEY
    with Replica.open(path) as rep:
        assert rep.creator == creator.author and rep.registry == MONEY


def test_an_earlier_releases_store_without_declarations_stays_unpinned(tmp_path):
    path = tmp_path / "old.db"
    key = SigningKey.generate()
    store = SQLiteStore(path, create=True)
    store.initialize(
        StoreInfo(space=SPACE, registry=DEFAULT_REGISTRY.fingerprint, author=key.author)
    )
    writer = Writer(key.author, clock=lambda: 0)
    c = sign_change(
        key,
        space=SPACE,
        seq=1,
        prev=None,
        registry=DEFAULT_REGISTRY.fingerprint,
        ops=[writer.claim("vendor", "acme", "owner", "Dana")],
    )
    store.write(StoreWrite(accepted=((c.change_id, c.data),)))
    info = store.info()
    store.close()
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM meta WHERE key = 'creator'")
    db.close()
    assert info is not None
    key.bound(info.store_id).save(key_path(path))
    with Replica.open(path, readonly=True) as reader:  # a reader decides, records nothing
        assert reader.creator is None
    assert _meta_creator(path) is None
    with Replica.open(path) as rep:
        assert rep.creator is None and rep.declaration is None
    assert _meta_creator(path) == b""  # recorded as "none pinned"


# --- determinism ---------------------------------------------------------------------------------

CREATOR = SigningKey.from_seed(bytes(range(32)))
STRANGERS = [SigningKey.from_seed(bytes([7 + i]) * 32) for i in range(2)]
CHOICES = [MONEY, MANY_OWNERS, EXACT_REGISTRY]
#: The claims every replica holds: a conflict over ``owner`` and prices that agree under MONEY.
_W = Writer(CREATOR.author, clock=lambda: 0)
CLAIMS = sign_change(
    CREATOR,
    space=SPACE,
    seq=1,
    prev=None,
    registry=DEFAULT_REGISTRY.fingerprint,
    ops=[
        _W.claim("vendor", "acme", "owner", "Dana"),
        _W.claim("vendor", "acme", "owner", "Lee"),
        _W.claim("vendor", "acme", "price", "USD 1,150"),
        _W.claim("vendor", "acme", "price", 1150),
    ],
)

declarations = st.lists(
    st.tuples(
        st.integers(0, len(STRANGERS)),  # 0: the creator, else a stranger
        st.integers(1, 2**40),  # any lamport the author likes
        st.integers(0, len(CHOICES) - 1),
    ),
    max_size=6,
)


def _feeds(decls: list[tuple[int, int, int]]) -> dict[int, list[VerifiedChange]]:
    """Each author's declarations as a chain of changes (the creator's after its claims)."""
    keys = [CREATOR, *STRANGERS]
    feeds: dict[int, list[VerifiedChange]] = {0: [CLAIMS]}
    for who, lamport, which in decls:
        feed = feeds.setdefault(who, [])
        prev = feed[-1] if feed else None
        op = RegistryDeclared(keys[who].author, lamport, 0, CHOICES[which].to_document())
        feed.append(
            sign_change(
                keys[who],
                space=SPACE,
                seq=len(feed) + 1,
                prev=None if prev is None else prev.change_id,
                registry=DEFAULT_REGISTRY.fingerprint,
                ops=[op],
            )
        )
    return feeds


@settings(deadline=None)
@given(decls=declarations, order=st.randoms(use_true_random=False), cuts=st.integers(1, 4))
def test_replicas_with_one_creator_and_the_same_changes_agree_whatever_the_delivery_order(
    decls, order, cuts
):
    feeds = _feeds(decls)
    changes = [c.data for feed in feeds.values() for c in feed]
    shuffled = list(changes)
    order.shuffle(shuffled)
    first = Replica.memory(space=SPACE, creator=CREATOR.author)
    first.receive(changes)
    second = Replica.memory(space=SPACE, creator=CREATOR.author)
    step = max(1, len(shuffled) // cuts)
    for start in range(0, len(shuffled), step):  # out of order, in several calls
        second.receive(shuffled[start : start + step])
    # only the creator's changes: what strangers declared, at any lamport, counts for nothing
    honest = Replica.memory(space=SPACE, creator=CREATOR.author)
    honest.receive([c.data for c in feeds[0]])
    for rep in (second, honest):
        assert rep.registry == first.registry
        assert rep.declaration == first.declaration
        assert rep.state().digest() == first.state().digest()
    assert [r.op_id for r in second.refused_declarations()] == [
        r.op_id for r in first.refused_declarations()
    ]
    mine = [op for c in feeds[0] for op in c.ops if isinstance(op, RegistryDeclared)]
    expected = max(mine, key=lambda op: (op.lamport, op.op_id)) if mine else None
    assert first.declaration == expected
    strangers = sum(1 for who, _, _ in decls if who != 0)
    assert len(first.refused_declarations()) == strangers
