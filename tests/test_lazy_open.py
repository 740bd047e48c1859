"""The store is the index: a replica opens on the store's derived state without loading its
history, answers `context`, `state_for` and `conflicts` from indexed rows, and writes claims,
updates, retractions and decisions lean; the first call that needs the history loads it.

Every answer is checked against a replica that loaded and verified the whole store
(``load="verify"``), which reads no derived state: the pure `materialize` stays the definition.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.core.state import State
from statefuse.reading.context import context_for
from statefuse.reading.lens import Lens
from statefuse.storage.testing import assert_index_agrees, state_summary
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica, StoreDamagedError, _totals

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
NOW = 1_800_000_000_000


def _clock() -> int:
    return NOW


def _full(path: Path) -> Replica:
    """A replica that verified every stored change and reads no derived state."""
    rep = Replica.open(path, readonly=True, load="verify")
    assert rep.loaded
    return rep


def _written(path: Path) -> None:
    """A small memory: two authors, a conflict, an update, a retraction by ref, a decision."""
    with Replica.open(path, create=True, space="team", clock=_clock) as a:
        a.add_constraint("project/launch/budget", 50_000, constraint="budget")
        a.add_claim("vendor/acme/price", 120, provenance="quote")
        a.add_claim("vendor/acme/city", "Lyon")
        a.add_claim("vendor/globex/price", 95)
        a.update("vendor/globex/price", 99)
        gone = a.add_claim("vendor/initech/status", "bankrupt")
        a.retract(claim_ref=gone.claim_ref, reason="wrong company")
        b = a.fork(name="bob")
        b.add_claim("vendor/acme/price", 135, provenance="invoice")
        a.merge(b)
        b.close()
        conflict = a.state().conflicts[0]
        a.decide(conflict, conflict.candidates[0], reason="first")


def _active(state: State, prefix: tuple[str, ...]) -> list[str]:
    return sorted(
        c.claim_id.hex()
        for c in state.active_claims()
        if (c.namespace, c.subject, c.predicate)[: len(prefix)] == prefix
    )


def test_open_reads_without_the_history(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _written(path)
    full = _full(path)
    rep = Replica.open(path, readonly=True)
    assert not rep.loaded
    assert rep.index is not None
    part = rep.state_for("vendor/acme")
    assert _active(part, ("vendor", "acme")) == _active(full.state(), ("vendor", "acme"))
    page = rep.conflicts(limit=1)
    want = sorted(full.state().conflicts, key=lambda c: (c.key, c.scope))
    assert [c.conflict_id for c in page.conflicts] == [want[0].conflict_id]
    assert page.total == len(want) == 1
    assert page.state.decision_for(page.conflicts[0]) == full.state().decision_for(want[0])
    assert dict(rep.author_names()) == dict(full.author_names())
    lens = Lens(now=NOW)
    got = rep.context("what does acme charge", lens=lens)
    assert got.text == full.context("what does acme charge", lens=lens).text
    assert not rep.loaded  # none of the above needed the history
    assert state_summary(rep.state()) == state_summary(full.state())
    assert rep.loaded  # the whole memory is the costly view: it loads
    rep.close()
    full.close()


def test_lean_writes_sign_one_feed_and_count(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _written(path)
    rep = Replica.open(path, clock=_clock)
    assert not rep.loaded
    first = rep.add_claim("vendor/hooli/price", 10)
    second = rep.update("vendor/hooli/price", 11)
    rep.retract(claim_ref=second.claim_ref, reason="no")
    again = rep.add_claim("vendor/hooli/price", 11)  # deliberate re-assertion escapes it
    assert not rep.loaded
    rep.close()
    full = _full(path)
    state = full.state()
    assert again.claim_id in {c.claim_id for c in state.active_claims()}
    assert first.claim_id not in {c.claim_id for c in state.active_claims()}
    assert second.claim_id not in {c.claim_id for c in state.active_claims()}
    assert full.forks() == [] and full.damage is None
    lamports = [op.lamport for op in state.all_claims()]
    assert again.lamport == max(lamports)  # after every op that counts
    assert again.reasserts  # it lists the retraction it escapes
    assert _active(full.state_for("vendor/hooli"), ("vendor", "hooli")) == [again.claim_id.hex()]
    full.close()


def test_lean_and_full_writers_share_one_store(tmp_path: Path) -> None:
    """A replica that loaded the history and one that did not, on one file, alternate writes:
    each sees the other's, one feed, no fork, and the derived state equals `materialize`."""
    path = tmp_path / "m.db"
    _written(path)
    loaded = Replica.open(path, load="verify")
    lean = Replica.open(path)
    assert loaded.loaded and not lean.loaded
    for i in range(6):
        loaded.add_claim(f"task/t{i}/owner", "ann")
        lean.add_claim(f"task/t{i}/owner", "bob")  # a conflict with the other's value
        assert len(lean.conflicts().conflicts) == len(loaded.conflicts().conflicts)
    assert not lean.loaded
    lean.close()
    loaded.close()
    full = _full(path)
    assert full.forks() == []
    reopened = Replica.open(path, readonly=True)
    assert not reopened.loaded
    every = reopened.state_for("task")
    assert _active(every, ("task",)) == _active(full.state(), ("task",))
    assert len(reopened.conflicts().conflicts) == len(full.state().conflicts)


def test_cli_commands_read_lazily(tmp_path: Path) -> None:
    """`show KEY`, `conflicts --limit` and `context --query` print what a full load prints."""
    path = tmp_path / "m.db"
    _written(path)

    def run(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", str(path), *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    full = _full(path)
    shown = run("show", "vendor/acme", "--json")
    assert '"vendor"' in shown and "acme" in shown
    assert shown.count('"claim_id"') == len(_active(full.state(), ("vendor", "acme")))
    conflicts = run("conflicts", "--limit", "1")
    assert "vendor/acme/price" in conflicts and "decided for" in conflicts
    context = run("context", "--query", "acme price")
    assert "acme" in context
    full.close()


_KEYS = [f"ns{i % 2}/s{i % 3}/p{i % 2}" for i in range(6)]


@st.composite
def _programs(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    steps = st.tuples(
        st.sampled_from(["claim", "update", "retract_ref", "retract_id", "fork", "decide"]),
        st.integers(0, len(_KEYS) - 1),
        st.integers(0, 3),
    )
    return draw(st.lists(steps, min_size=1, max_size=25))


@settings(max_examples=25, deadline=None)
@given(_programs(), st.booleans())
def test_derived_state_equals_materialize(
    tmp_path_factory: pytest.TempPathFactory, program: list[tuple[str, int, int]], lean: bool
) -> None:
    """Random writes (lean or loaded), merges of forked branches that conflict, retractions
    by id and by ref, decisions: the store's derived state answers as the full State does on
    every key."""
    path = tmp_path_factory.mktemp("prop") / "m.db"
    Replica.open(path, create=True, space="prop", clock=_clock).close()
    rep = Replica.open(path, clock=_clock, load="snapshot" if lean else "verify")
    branch: Replica | None = None
    for kind, k, v in program:
        key = _KEYS[k]
        if kind == "claim":
            rep.add_claim(key, v)
        elif kind == "update":
            rep.update(key, v)
        elif kind in ("retract_ref", "retract_id"):
            found = [c for c in rep.state_for(key).active_claims() if c.value == v]
            if found:
                c = found[0]
                if kind == "retract_ref":
                    rep.retract(claim_ref=c.claim_ref)
                else:
                    rep.retract(c.claim_id)
        elif kind == "fork":
            if branch is None:
                branch = rep.fork()
            branch.add_claim(key, v + 10)
            rep.merge(branch)
        else:
            page = rep.conflicts(limit=1)
            if page.conflicts:
                c = page.conflicts[0]
                rep.decide(c, c.candidates[0])
    rep.close()
    full = _full(path)
    reopened = Replica.open(path, readonly=True)
    assert not reopened.loaded
    whole = full.state()
    for key in sorted(set(_KEYS)):
        parts = tuple(key.split("/"))
        assert _active(reopened.state_for(key), parts) == _active(whole, parts)
    page = reopened.conflicts()
    want = sorted(whole.conflicts, key=lambda c: (c.key, c.scope))
    assert [c.conflict_id for c in page.conflicts] == [c.conflict_id for c in want]
    for c in page.conflicts:
        assert page.state.decision_for(c) == whole.decision_for(c)
    full.close()
    reopened.close()


def test_an_outside_write_makes_the_next_open_load_and_verify(tmp_path: Path) -> None:
    """The derived state is trusted only while nothing but StateFuse wrote the file."""
    path = tmp_path / "m.db"
    _written(path)
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded
    db = sqlite3.connect(path)  # another tool writes the file (a harmless row)
    db.execute("INSERT INTO published (target, change_id) VALUES ('elsewhere', x'00')")
    db.commit()
    db.close()
    with Replica.open(path, readonly=True) as rep:
        assert rep.loaded and rep.damage is None  # loaded and verified instead
    Replica.open(path).close()  # a writable open that found it sound marks it again
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded


def test_a_flipped_byte_in_a_stored_change_is_found_at_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    _written(path)
    db = sqlite3.connect(path)
    pos, data = db.execute("SELECT pos, data FROM changes ORDER BY pos LIMIT 1").fetchone()
    flipped = bytes([data[0], data[1] ^ 1]) + data[2:]
    db.execute("UPDATE changes SET data = ? WHERE pos = ?", (flipped, pos))
    db.commit()
    db.close()
    rep = Replica.open(path)
    assert rep.loaded and rep.damage is not None
    with pytest.raises(StoreDamagedError):
        rep.add_claim("vendor/acme/price", 1)
    rep.close()


@pytest.mark.parametrize("release", ["release-schema5", "release-schema6"])
def test_a_store_of_an_earlier_release_builds_its_derived_state_once(
    tmp_path: Path, release: str
) -> None:
    """The schema-5 release's store (tests/fixtures), which has no derived state, and the
    schema-6 release's, which has one in an earlier layout, build it on their first writable
    open, with progress, and then open on it and answer as the full State does."""
    path = tmp_path / "release.sqlite"
    shutil.copyfile(FIXTURES / f"{release}.sqlite", path)
    shutil.copyfile(FIXTURES / f"{release}.sqlite.key", f"{path}.key")
    os.chmod(f"{path}.key", 0o600)
    with Replica.open(path, readonly=True) as rep:
        assert rep.loaded and rep.index is None  # not migrated by a read: nothing to use
    calls: list[tuple[int, int]] = []
    with Replica.open(path, progress=lambda done, total: calls.append((done, total))) as rep:
        index = rep.index
        assert index is not None
        assert_index_agrees(index, rep.state())
    assert calls and calls[-1][0] == calls[-1][1] > 0
    full = _full(path)
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded
        page = rep.conflicts()
        want = sorted(full.state().conflicts, key=lambda c: (c.key, c.scope))
        assert [c.conflict_id for c in page.conflicts] == [c.conflict_id for c in want]
        assert len(want) == 2
        assert dict(rep.author_names()) == dict(full.author_names())
        for c in full.state().active_claims():
            key = f"{c.namespace}/{c.subject}/{c.predicate}"
            got = _active(rep.state_for(key), (c.namespace, c.subject, c.predicate))
            assert c.claim_id.hex() in got
    full.close()


def test_a_process_that_ends_without_closing_leaves_the_store_to_open_lazily(
    tmp_path: Path,
) -> None:
    """The last connection to close folds the -wal into the file: a process that never calls
    `close()` has its store closed at exit, and marked clean again, so the next open is cheap."""
    path = tmp_path / "m.db"
    _written(path)
    script = (
        "import sys\n"
        "from statefuse.sync.replica import Replica\n"
        "rep = Replica.open(sys.argv[1])\n"
        "assert not rep.loaded\n"
        "rep.add_claim('vendor/acme/price', 7)\n"
        "print(rep.loaded)\n"  # no close: the process ends with the store open
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded
        assert 7 in {c.value for c in rep.state_for("vendor/acme/price").active_claims()}


def test_a_revocation_takes_what_stopped_counting_out_of_the_derived_state(
    tmp_path: Path,
) -> None:
    """Trust changes what counts: the root's revocation, and a revoked author's change that
    arrives after it, leave the derived state equal to the State of what counts."""
    path = tmp_path / "hub.db"
    root = SigningKey.generate()
    hub = Replica.open(path, create=True, space="club", mode="closed", key=root, clock=_clock)
    bob = Replica.memory(space="club", mode="closed", root=root.author, clock=_clock)
    hub.admit(bob.author)
    bob.merge(hub)
    kept = bob.add_claim("vendor/acme/price", 99)
    hub.merge(bob)
    dropped = bob.add_claim("vendor/acme/city", "Lyon")
    hub.merge(bob)
    first = [c for c in bob.log.changes() if kept in c.ops]
    hub.revoke(bob.author, keep=[first[0].change_id])
    late = bob.add_claim("vendor/acme/owner", "bob")  # signed after: never counts
    hub.merge(bob)
    hub.close()
    full = _full(path)
    active = {c.claim_id for c in full.state().active_claims()}
    assert kept.claim_id in active
    assert dropped.claim_id not in active and late.claim_id not in active
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded
        index = rep.index
        assert index is not None
        assert_index_agrees(index, full.state())
        got = {c.claim_id for c in rep.state_for("vendor/acme").active_claims()}
        assert got == {kept.claim_id}
    full.close()


def test_a_langgraph_get_reads_the_derived_state_alone(tmp_path: Path) -> None:
    """`StateFuseStore.get` on a replica opened on its derived state reads the items' keys
    only, and answers as over a replica that loaded the history: values, a conflict, a miss."""
    from statefuse.entry.langgraph import StateFuseStore

    path = tmp_path / "m.db"
    with Replica.open(path, create=True, space="team", clock=_clock) as a:
        store = StateFuseStore(a)
        store.put(("users", "u1"), "prefs", {"theme": "dark"})
        store.put(("users", "u1"), "prefs", {"theme": "light"})  # an update
        store.put(("users", "u2"), "prefs", {"theme": "dark"})
        b = a.fork()
        StateFuseStore(b).put(("users", "u2"), "prefs", {"theme": "blue"})  # a conflict
        a.merge(b)
        b.close()
    lazy = Replica.open(path, readonly=True)
    full = _full(path)
    asked = [(("users", "u1"), "prefs"), (("users", "u2"), "prefs"), (("users", "u3"), "prefs")]
    got = [StateFuseStore(lazy).get(ns, key) for ns, key in asked]
    want = [StateFuseStore(full).get(ns, key) for ns, key in asked]
    assert not lazy.loaded
    assert [None if g is None else g.value for g in got] == [
        None if w is None else w.value for w in want
    ]
    assert got[0] is not None and got[0].value == {"theme": "light"}
    assert got[2] is None
    lazy.close()
    full.close()


def test_a_key_history_reads_that_key_alone(tmp_path: Path) -> None:
    """`Replica.history` (and the CLI's and MCP's) on a replica opened on its derived state
    lists what a loaded replica lists, and loads nothing."""
    path = tmp_path / "m.db"
    _written(path)
    lazy = Replica.open(path, readonly=True)
    full = _full(path)
    for key in ("vendor/acme/price", "vendor/globex/price", "vendor/initech/status"):
        got = [(e.event, e.op_id, e.claim.claim_id, e.why) for e in lazy.history(key)]
        want = [(e.event, e.op_id, e.claim.claim_id, e.why) for e in full.history(key)]
        assert got == want and got
    assert not lazy.loaded
    lazy.close()
    full.close()


def test_a_text_no_claim_can_hold_finds_nothing_and_raises_nothing(tmp_path: Path) -> None:
    """A lone surrogate (what a hostile command line or tool call can pass) names nothing
    stored: a read from the derived state answers as a loaded replica does, with nothing."""
    from statefuse.entry.langgraph import StateFuseStore

    path = tmp_path / "m.db"
    _written(path)
    with Replica.open(path, readonly=True) as rep:
        assert rep.state_for(("vendor", "\ud800")).active_claims() == []
        assert rep.state_for("vendor", scope="\udfff").active_claims() == []
        assert rep.history("vendor/acme/price", scope="\ud800") == []
        assert StateFuseStore(rep).get(("vendor",), "\ud800") is None
        assert "\ud800" not in rep.context("\ud800 acme").text
        assert not rep.loaded


def _sliced(rep: Replica, query: str, lens: Lens, budget: int) -> str:
    """The context of ``query`` read from the derived state with nothing kept from before:
    the slice `StoreIndex.context_loci` names, read and laid out afresh."""
    ix = rep.index
    assert ix is not None
    with rep.store.read_transaction():
        state = ix.state_of(ix.context_loci(query, budget=budget), registry=rep.registry)
        totals = _totals(ix, state)
    return context_for(
        state, lens, budget=budget, query=query, authors=rep.author_names(), totals=totals
    ).text


def test_an_agent_loop_reads_through_its_caches_what_a_fresh_read_gives(tmp_path: Path) -> None:
    """Write, then read a small context, in turn: the replica keeps decoded ops and the
    context's caches between calls (`OpMemo`, `ContextCache`); each context is the one read
    afresh from the derived state, for slices smaller than the memory too."""
    path = tmp_path / "m.db"
    _written(path)
    lens = Lens(now=NOW)
    with Replica.open(path, clock=_clock) as rep:
        for i in range(40):
            rep.add_claim(f"task/t{i % 13}/status", f"step {i} of the zeta rollout")
            if i % 5 == 0:
                rep.update("vendor/acme/city", f"city {i}")
            if i % 7 == 3:
                rep.retract(rep.state_for(f"task/t{i % 13}").active_claims()[0], reason="done")
            for query in (f"status of t{i % 13}", "acme price", "zeta rollout", ""):
                got = rep.context(query, lens=lens, budget=160)
                assert got.text == _sliced(rep, query, lens, 160)
        assert not rep.loaded
        assert len(rep._op_memo) > 0


def test_readers_beside_an_open_writer_open_on_the_derived_state_and_keep_it(
    tmp_path: Path,
) -> None:
    """Opening a connection beside a writer that holds the store open touches the -wal (run
    as root, SQLite hands the log to the database file's owner at each open, which moves its
    change time): that is no write, so a reader in this process or another still opens on the
    derived state, and so does every open after the writer closes."""
    path = tmp_path / "m.db"
    _written(path)
    script = (
        "import sys\n"
        "from statefuse.sync.replica import Replica\n"
        "for readonly in (True, False):\n"
        "    with Replica.open(sys.argv[1], readonly=readonly) as rep:\n"
        "        print(rep.loaded, len(rep.state_for('vendor/acme/price').active_claims()))\n"
    )
    writer = Replica.open(path)
    try:
        assert not writer.loaded
        writer.add_claim("vendor/acme/price", 7)  # the -wal now holds a commit
        with Replica.open(path, readonly=True) as here:
            assert not here.loaded
        done = subprocess.run(
            [sys.executable, "-c", script, str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, "False 3\nFalse 3\n"), done.stderr
        writer.add_claim("vendor/acme/city", "Lille")  # the writer goes on writing lean
    finally:
        writer.close()
    with Replica.open(path, readonly=True) as rep:
        assert not rep.loaded
        assert "Lille" in {c.value for c in rep.state_for("vendor/acme/city").active_claims()}
