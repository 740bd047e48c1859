"""The registry is data of the space (SEMANTICS §2): declarations travel as ops, the declaration
in force decides the memory, and a process registry never does.

The convergence property: replicas of one space whose processes were started with random
registries (or none), after random partial syncs and a full sync, show equal digests, conflicts
and views. The stories: who may declare, what a new declaration does to memory, a declaration
naming a normalizer this process lacks, stores of the first release, and the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse import Lens, StoreError, project
from statefuse.entry.cli import main
from statefuse.reading.resolver import Conservative
from statefuse.registry import (
    DEFAULT_REGISTRY,
    EXACT_REGISTRY,
    Cardinality,
    Policy,
    PredicateContract,
    Registry,
    RegistryError,
)
from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import StoreInfo, StoreWrite
from statefuse.storage.writer import Writer
from statefuse.sync.change import sign_change
from statefuse.sync.declaration import RegistryDeclared
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica, ReplicaError, key_path

SPACE = "deals"

# --- registries and values that make the choice of registry matter ----------------------------

MONEY = Registry([PredicateContract("price", normalizer="money", params={"currency": "USD"})])
EXACT_NAMES = Registry([PredicateContract("owner", normalizer="exact")])
LATEST = Registry([PredicateContract("status", policy=Policy.LATEST)])
TAGS = Registry([PredicateContract("status", cardinality=Cardinality.MANY)])
REGISTRIES = [None, DEFAULT_REGISTRY, EXACT_REGISTRY, MONEY, EXACT_NAMES, LATEST, TAGS]

#: Values that agree under some registries and not under others.
VALUES = {
    "price": ["USD 1,150", "$1150.00", 1150, "1150", "EUR 1150"],
    "owner": ["Dana Smith", "dana  smith", "DANA SMITH", "Lee"],
    "status": ["running", "Running", "done", 1, 1.0],
}

registries = st.sampled_from(range(len(REGISTRIES)))
writes = st.tuples(
    st.integers(0, 2),  # which replica
    st.sampled_from(sorted(VALUES)),
    st.integers(0, 4),  # which value
    st.sampled_from(["acme", "globex"]),
)
steps = st.lists(
    st.one_of(
        writes.map(lambda w: ("write", *w)),
        st.tuples(st.integers(0, 2), st.integers(0, 2)).map(lambda p: ("sync", *p)),
        st.tuples(st.integers(0, 2), registries).map(lambda d: ("declare", *d)),
    ),
    max_size=14,
)


def _view_json(rep: Replica) -> str:
    state = rep.state()
    return project(state, Lens(roles=("planner",)), resolver=Conservative()).to_json()


def _full_sync(reps: list[Replica]) -> None:
    for _ in range(2):
        for a in reps:
            for b in reps:
                if a is not b:
                    a.merge(b)


@settings(max_examples=60, deadline=None)
@given(start=registries, schedule=steps)
def test_replicas_with_the_same_changes_show_the_same_memory_whatever_their_registries(
    start: int, schedule: list[tuple[object, ...]]
) -> None:
    # one space: replica 0 is its creator (declaring from the start, or later, or never),
    # replica 1 is pinned to it, replica 2 has no creator until it syncs with one that has
    creator = SigningKey.generate()
    reps = [
        Replica.memory(space=SPACE, registry=REGISTRIES[start], key=creator),
        Replica.memory(space=SPACE, creator=creator.author),
        Replica.memory(space=SPACE),
    ]
    for step in schedule:
        kind = step[0]
        if kind == "write":
            _, who, predicate, which, subject = step
            values = VALUES[str(predicate)]
            reps[int(who)].add_claim(  # type: ignore[call-overload]
                "vendor", subject, predicate, values[int(which) % len(values)]
            )
        elif kind == "sync":
            _, a, b = step
            if a != b:
                reps[int(a)].merge(reps[int(b)])  # type: ignore[call-overload]
        else:
            _, who, which = step
            chosen = REGISTRIES[int(which)]  # type: ignore[call-overload]
            rep = reps[int(who)]  # type: ignore[call-overload]
            if chosen is None:
                continue
            if rep.author == creator.author:
                rep.declare_registry(chosen)
            elif rep.creator is not None:  # the others may not (and nobody else's counts)
                assert rep._may_declare() is not None
    _full_sync(reps)
    first = reps[0]
    for rep in reps[1:]:
        assert rep.registry == first.registry
        assert rep.state().digest() == first.state().digest()
        assert [c.conflict_id for c in rep.state().conflicts] == [
            c.conflict_id for c in first.state().conflicts
        ]
        assert _view_json(rep) == _view_json(first)
    # the memory is the one the declaration in force gives, computed from scratch
    fresh = first.log.materialize(registry=first.registry)
    assert fresh.digest() == first.state().digest()


# --- opening with a registry --------------------------------------------------------------------


def test_a_process_registry_that_disagrees_with_the_space_is_refused_naming_both(tmp_path):
    Replica.open(tmp_path / "a.db", create=True, space=SPACE, registry=MONEY).close()
    with pytest.raises(StoreError) as caught:
        Replica.open(tmp_path / "a.db", registry=DEFAULT_REGISTRY)
    err = caught.value
    assert err.rule == "registry-mismatch"
    assert MONEY.fingerprint.hex()[:16] in err.message
    assert DEFAULT_REGISTRY.fingerprint.hex()[:16] in err.message
    assert "without registry=" in err.message
    # the same registry, or none, opens; the registry in force is the space's
    for asked in (MONEY, None):
        with Replica.open(tmp_path / "a.db", registry=asked) as rep:
            assert rep.registry == MONEY and rep.declaration is not None


def test_creating_with_a_registry_declares_it_in_the_first_change_and_a_fork_inherits_it():
    rep = Replica.memory(space=SPACE, registry=MONEY)
    [change] = rep.log.changes()
    [op] = change.ops
    assert isinstance(op, RegistryDeclared) and op.author == rep.author
    assert Registry.from_document(op.registry) == MONEY
    child = rep.fork()
    assert child.registry == MONEY and child.declaration == rep.declaration
    assert not any(c.author == child.author for c in child.log.changes())  # declared nothing


def test_creating_without_a_registry_declares_nothing_and_uses_the_default():
    rep = Replica.memory(space=SPACE)
    assert len(rep) == 0 and rep.declaration is None and rep.registry == DEFAULT_REGISTRY
    rep.add_claim("vendor", "acme", "owner", "Acme Corp")
    rep.add_claim("vendor", "acme", "owner", "acme  corp")
    assert rep.state().conflicts == ()  # the natural default: trivially equal text agrees


# --- who declares, and what a declaration does ---------------------------------------------------


def test_in_an_open_space_only_the_creator_declares_and_the_latest_declaration_wins():
    creator = Replica.memory(space=SPACE, registry=MONEY)
    member = creator.fork()
    with pytest.raises(ReplicaError) as caught:
        member.declare_registry(EXACT_REGISTRY)
    assert caught.value.rule == "not-registry-authority"
    assert creator.author.hex()[:12] in caught.value.message
    member.add_claim("vendor", "acme", "price", "USD 1,150")
    member.add_claim("vendor", "acme", "price", "1,150.00")  # a bare amount: USD by the param
    assert member.state().conflicts == ()
    creator.declare_registry(EXACT_REGISTRY)
    report = member.merge(creator)
    assert report.registry_changed == (MONEY.fingerprint, EXACT_REGISTRY.fingerprint)
    assert member.registry == EXACT_REGISTRY
    assert len(member.state().conflicts) == 1  # the same claims, now compared exactly
    assert creator.declare_registry(EXACT_REGISTRY) is None  # in force already: nothing written


def test_in_a_closed_space_only_the_root_declares_and_a_members_declaration_never_counts():
    root = Replica.memory(space=SPACE, mode="closed", registry=MONEY)
    member = Replica.memory(space=SPACE, mode="closed", root=root.author)
    root.admit(member.author)
    member.merge(root)
    with pytest.raises(ReplicaError) as caught:
        member.declare_registry(EXACT_REGISTRY)
    assert caught.value.rule == "not-registry-authority"
    # a declaration the member signs anyway (by hand) is held but never in force
    own = RegistryDeclared(member.author, 99, 0, EXACT_REGISTRY.to_document())
    member._emit(own)
    root.merge(member)
    assert root.registry == MONEY and member.registry == MONEY


def test_a_declaration_naming_a_normalizer_this_process_lacks_is_refused_and_nothing_stored(
    tmp_path,
):
    def sku(value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    custom = Registry([PredicateContract("sku", normalizer="sku")], normalizers={"sku": sku})
    creator = Replica.memory(space=SPACE, registry=custom)
    creator.add_claim("parts", "p1", "sku", "ab-1")
    other = Replica.open(tmp_path / "o.db", create=True, space=SPACE)
    other.add_claim("parts", "p2", "sku", "cd-2")
    before = (other.change_ids(), other.state().digest())
    with pytest.raises(RegistryError) as caught:
        other.merge(creator)
    assert caught.value.rule == "unknown-normalizer" and "sku@1" in caught.value.message
    assert (other.change_ids(), other.state().digest()) == before
    other.close()
    with Replica.open(tmp_path / "o.db") as again:  # nothing of the refused call was stored
        assert again.change_ids() == before[0]
    # with the code (a registry holding it), the same changes go in and mean the same
    helped = Replica.memory(space=SPACE, registry=None)
    helped._custom["sku"] = sku
    helped.merge(creator)
    assert helped.registry == custom


# --- stores of the first release ------------------------------------------------------------


def _first_release_store(path: Path, registry: Registry) -> SigningKey:
    """A store as the first release wrote it: no declaration, the registry's fingerprint in the
    store's meta, claims whose refs were derived under that registry."""
    key = SigningKey.generate()
    store = SQLiteStore(path, create=True)
    store.initialize(StoreInfo(space=SPACE, registry=registry.fingerprint, author=key.author))
    writer = Writer(key.author, registry=registry, clock=lambda: 0)
    ops = [
        writer.claim("vendor", "acme", "owner", "Acme Corp"),
        writer.claim("vendor", "acme", "owner", "acme corp"),
    ]
    change = sign_change(key, space=SPACE, seq=1, prev=None, registry=registry.fingerprint, ops=ops)
    store.write(StoreWrite(accepted=((change.change_id, change.data),)))
    info = store.info()
    assert info is not None
    key.bound(info.store_id).save(key_path(path))
    store.close()
    return key


def test_a_first_release_store_keeps_its_exact_meaning_and_declares_it_on_first_open(tmp_path):
    path = tmp_path / "old.db"
    _first_release_store(path, EXACT_REGISTRY)
    with Replica.open(path, readonly=True) as reader:  # reading declares nothing
        assert reader.registry == EXACT_REGISTRY and reader.declaration is None
        assert len(reader.state().conflicts) == 1  # "Acme Corp" vs "acme corp", as before
    with Replica.open(path) as rep:
        assert rep.declaration is not None and rep.registry == EXACT_REGISTRY
        assert len(rep.state().conflicts) == 1
    joiner = Replica.memory(space=SPACE)  # a new replica learns the old meaning by syncing
    with Replica.open(path) as rep:
        joiner.merge(rep)
    assert joiner.registry == EXACT_REGISTRY and len(joiner.state().conflicts) == 1


def test_a_first_release_store_of_a_custom_registry_tells_the_cli_how_to_fix_it(tmp_path, capsys):
    path = tmp_path / "old.db"
    # as its user wrote it then: contracts without a normalizer meant `exact` by default
    legacy = Registry([PredicateContract("price", normalizer="money")])
    written_under = legacy.with_default(PredicateContract("*", normalizer="exact"))
    _first_release_store(path, written_under)
    assert main(["--store", str(path), "show"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: ")
    assert "never declared" in err and "registry=" in err
    with Replica.open(path, registry=legacy) as rep:  # the first release's code, unchanged
        assert rep.registry == written_under and rep.declaration is not None
    with Replica.open(path, registry=legacy) as rep:  # and again, now that it is declared
        assert rep.registry == written_under
    assert main(["--store", str(path), "registry", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["declared"] is True and shown["fingerprint"] == written_under.fingerprint.hex()


# --- the command line ----------------------------------------------------------------------------


def test_the_cli_creates_shows_and_declares_a_registry_from_files(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    money_file = tmp_path / "money.toml"
    money_file.write_text('[predicates]\nprice = "money"\n', encoding="utf-8")
    assert main(["--store", store, "init", "--space", SPACE, "--registry", str(money_file)]) == 0
    capsys.readouterr()
    for value in ('"USD 1,150"', '"$1150.00"'):
        assert main(["--store", store, "claim", "vendor/acme/price", value]) == 0
    capsys.readouterr()
    assert main(["--store", store, "--json", "registry", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["declared"] and shown["registry"]["contracts"] == [
        {"predicate": "price", "normalizer": "money"}
    ]
    exact_file = tmp_path / "exact.json"
    exact_file.write_text(json.dumps({"default": {"normalizer": "exact"}}), encoding="utf-8")
    assert main(["--store", store, "registry", "declare", str(exact_file)]) == 0
    out = capsys.readouterr().out
    assert "1 conflict (was 0)" in out
    assert main(["--store", store, "registry", "declare", str(exact_file)]) == 0
    assert "nothing written" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text('[[contracts]]\npredicate = "x"\npolcy = "latest"\n', encoding="utf-8")
    assert main(["--store", store, "registry", "declare", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "contracts[0].polcy" in err and "unknown field" in err


def _shout(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def test_a_peer_without_the_normalizer_code_refuses_a_push_and_keeps_its_memory():
    from statefuse.sync.client import PeerRejectedError, sync_with
    from statefuse.sync.server import serve

    custom = Registry([PredicateContract("sku", normalizer="shout")], normalizers={"shout": _shout})
    mine = Replica.memory(space=SPACE, registry=custom)
    mine.add_claim("parts", "p1", "sku", "ab-1")
    # the served store follows the same creator (a push never pins one: `sync.creator`)
    theirs = Replica.memory(space=SPACE, creator=mine.author)
    theirs.add_claim("parts", "p2", "sku", "cd-2")
    before = (theirs.change_ids(), theirs.state().digest())
    with serve(theirs) as server, pytest.raises(PeerRejectedError) as caught:
        sync_with(mine, server.url)
    assert (caught.value.status, caught.value.rule) == (422, "unknown-normalizer")
    assert "shout@1" in caught.value.message
    assert (theirs.change_ids(), theirs.state().digest()) == before


def test_init_again_with_another_registry_file_is_refused_and_changes_nothing(tmp_path, capsys):
    store = str(tmp_path / "s.db")
    money_file, number_file = tmp_path / "money.toml", tmp_path / "number.toml"
    money_file.write_text('[predicates]\nprice = "money"\n', encoding="utf-8")
    number_file.write_text('[predicates]\nprice = "number"\n', encoding="utf-8")
    assert main(["--store", store, "init", "--space", SPACE, "--registry", str(money_file)]) == 0
    assert main(["--store", store, "init", "--space", SPACE, "--registry", str(money_file)]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert main(["--store", store, "init", "--space", SPACE, "--registry", str(number_file)]) == 1
    err = capsys.readouterr().err
    assert "leave out --registry" in err and "statefuse registry declare FILE" in err
    with Replica.open(store, readonly=True) as rep:
        assert rep.registry == Registry([PredicateContract("price", normalizer="money")])
        assert len(rep) == 1


# --- whose declarations count: the creator the store follows (`sync.creator`) -------------------


def test_a_received_declaration_counts_only_once_its_author_is_the_pinned_creator():
    creator = Replica.memory(space=SPACE, registry=MONEY)
    served = Replica.memory(space=SPACE)  # no creator: what a push brings cannot pin it
    report = served.receive(c.data for c in creator.log.changes())
    assert report.accepted == 1 and served.registry == DEFAULT_REGISTRY
    [refused] = report.refused_declarations
    assert refused.author == creator.author and refused.rule == "not-registry-authority"
    assert "statefuse registry creator" in refused.reason
    assert served.pin_creator(creator.author) is True
    assert served.registry == MONEY and served.refused_declarations() == []
    assert served.pin_creator(creator.author) is False  # pinned already: nothing written


def test_pinning_a_creator_whose_declaration_this_process_cannot_build_changes_nothing(tmp_path):
    def sku(value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    custom = Registry([PredicateContract("sku", normalizer="sku")], normalizers={"sku": sku})
    creator = Replica.memory(space=SPACE, registry=custom)
    with Replica.open(tmp_path / "s.db", create=True, space=SPACE) as served:
        served.receive(c.data for c in creator.log.changes())  # refused: nothing in force
        with pytest.raises(RegistryError) as caught:
            served.pin_creator(creator.author)
        assert caught.value.rule == "unknown-normalizer"
        assert served.creator is None and served.registry == DEFAULT_REGISTRY
    with Replica.open(tmp_path / "s.db") as again:
        assert again.creator is None
