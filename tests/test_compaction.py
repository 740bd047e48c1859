"""Projection-equivalent compaction (SEMANTICS §10): bodies move to an archive, Views do not move.

Every View, for random lenses, is compared before and after compaction (Hypothesis over random
memories); real stores are compacted and reopened, served over HTTP from the archive, and
opened without it; the CLI runs as a real process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.reading.lens import Include, Lens
from statefuse.reading.projection import project
from statefuse.sync.http import serve, sync_with
from statefuse.sync.replica import ArchiveWarning, Replica

SPACE = "compact"
VALUES = ("ab", "zz", 7, "a long value here", "another long value", "ab", "$40k", "Room 7b")
#: Free text for the working set, quoting the values above (and near misses: "$140k", "7bx").
QUOTES = (
    "we said a long value here",
    "the budget moved from $40K to $50k",
    "not $140k, and not room 7bx",
    "meet in room  7B, then ANOTHER long value",
    "7 or ab or zz",
)


def _view(r: Replica, lens: Lens) -> tuple[object, ...]:
    """What a View shows through ``lens``: its JSON, its exclusions, its repair notes, and the
    retracted claims its scrub may name (with the claims replacing them)."""
    v = project(r.state(), lens)
    rv = v.retracted
    scrubbed = None
    if rv is not None:
        scrubbed = sorted(
            (x.claim.op_id, x.superseded_by)
            for (label, _), xs in rv.index.entries(rv.upto).items()
            if label in rv.labels
            for x in xs
        )
    return (
        v.to_json(),
        dict(v.excluded),
        {k: tuple(v.excluded_ids[k]) for k in ("out-of-scope", "expired", "shadowed")},
        repr(sorted(v.stale.items())),
        scrubbed,
    )


def _contexts(r: Replica, lenses: list[Lens]) -> list[tuple[str, object]]:
    """The context assembled for each lens (a clean working set: retracted values scrubbed),
    as its JSON and the claims scrubbed from each working-set line."""
    out = []
    for lens in lenses:
        ctx = r.context("budget room value", lens=lens, budget=2000)
        out.append((ctx.to_json(), dict(ctx.scrubbed)))
    return out


_LENSES = st.builds(
    Lens,
    roles=st.frozensets(st.sampled_from(["ops", "hr"]), max_size=2),
    task=st.sampled_from([None, "a", "b"]),
    session=st.sampled_from(["s1", "s1", None]),
    include=st.frozensets(st.sampled_from(list(Include)), max_size=2),
    now=st.sampled_from([None, 10**13]),
)

_CLAIMS = st.lists(
    st.tuples(
        st.integers(0, 3),  # key
        st.sampled_from(VALUES),
        st.sampled_from(["global", "task:a"]),
        st.sampled_from([(), ("ops",)]),
        st.booleans(),  # retract it
        st.booleans(),  # cite the evidence
        st.sampled_from([None, "by-ref", "superseded"]),  # how it is retracted
        st.sampled_from([None, 10**12, 10**14]),  # expires
    ),
    max_size=12,
)


def _memory(claims, n_evidence, decide, quotes) -> Replica:
    r = Replica.memory(space=SPACE)
    evidence = [r.add_evidence(f"src{i}", f"body {i} " * 20) for i in range(n_evidence)]
    made = []
    for key, value, scope, vis, retract, cite, how, expires in claims:
        cited = [evidence[0].op_id] if cite and evidence else []
        c = r.add_claim(
            f"ns/s{key}/p", value, scope=scope, visibility=vis, evidence=cited, expires=expires
        )
        made.append((c, retract, how))
    for text in quotes:
        r.add_turn("user", text, session="s1")
    if decide:
        conflicts = r.state().conflicts
        if conflicts:
            r.decide(conflicts[0], conflicts[0].candidates[0])
    for i, (c, retract, how) in enumerate(made):
        if not retract:
            continue
        if how == "by-ref":
            r.retract(claim_ref=c.claim_ref)
        elif how == "superseded" and i + 1 < len(made):
            r.retract(c, superseded_by=made[i + 1][0])
        else:
            r.retract(c)
    return r


_QUOTES = st.lists(st.sampled_from(QUOTES), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    _CLAIMS,
    st.integers(0, 3),
    st.booleans(),
    _QUOTES,
    st.lists(_LENSES, min_size=1, max_size=4),
    st.booleans(),
)
def test_every_view_and_every_context_is_the_same_after_compaction(
    tmp_path_factory, claims, n_evidence, decide, quotes, lenses, retract_again
):
    r = _memory(claims, n_evidence, decide, quotes)
    before = [_view(r, lens) for lens in lenses]
    contexts = _contexts(r, lenses)
    archive = tmp_path_factory.mktemp("archive") / "a.bundle"
    twin = Replica.memory(space=SPACE)  # the same memory, never compacted
    twin.merge(r)
    done = r.compact(archive=archive)
    assert [_view(r, lens) for lens in lenses] == before
    assert _contexts(r, lenses) == contexts
    if done.ops:
        assert archive.exists()
        # a peer gets the whole history from the archive, and sees the same
        peer = Replica.memory(space=SPACE)
        peer.merge(r)
        assert len(peer.log) == len(r.log)
        assert [_view(peer, lens) for lens in lenses] == before
        assert _contexts(peer, lenses) == contexts
    if retract_again:  # a retraction arriving after the move still names its replacement
        state = twin.state()
        gone = sorted(state.retracted)
        live = state.active_claims()
        if gone and live:
            again = twin.retract(gone[0], superseded_by=live[0])
            r.merge(twin)
            assert again.op_id in r.state().retractions
            assert [_view(r, lens) for lens in lenses] == [_view(twin, lens) for lens in lenses]
            assert _contexts(r, lenses) == _contexts(twin, lenses)


def _memory_with_garbage(path: Path) -> Replica:
    r = Replica.open(path, space=SPACE, create=True)
    with r.batch():
        for i in range(300):
            r.add_evidence(f"log line {i}", "x" * 400)  # cited by nothing
        for i in range(100):
            c = r.add_claim(f"ns/s{i}/p", "ok" if i % 3 else "no")
            if i % 3 == 0:
                r.retract(c)
    return r


def test_a_compacted_store_is_smaller_shows_the_same_and_serves_whole_changes_from_its_archive(
    tmp_path,
):
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r = _memory_with_garbage(path)
    lens = Lens()
    before = _view(r, lens)
    ids = r.change_ids()
    done = r.compact(archive=archive)
    assert done.ops == 300 + 34 and done.bytes > 300 * 400
    assert done.store_after < done.store_before
    assert _view(r, lens) == before
    assert r.change_ids() == ids  # ids stay: nothing deleted
    r.close()
    with Replica.open(path, space=SPACE) as again:
        assert _view(again, lens) == before
        with serve(again) as server:
            fresh = Replica.memory(space=SPACE)
            sync_with(fresh, server.url)
            assert len(fresh.log) == len(again.log)
            assert sum(len(c.ops) for c in fresh.log.changes()) > sum(
                len(c.ops) for c in again.log.changes()
            )
            assert _view(fresh, lens) == before
    assert b"log line 7" not in path.read_bytes()
    assert b"log line 7" in archive.read_bytes()


def test_the_memory_at_an_earlier_version_reads_the_moved_bodies_from_the_archive(tmp_path):
    # a claim retracted now was active before its retraction: compaction moves its body (no
    # projection of the op-set shows it), but the memory at that version must still show it
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r = Replica.open(path, space=SPACE, create=True)
    old = r.add_claim("ns/budget/amount", "forty thousand dollars for the offsite in May")
    then = r.version()
    r.retract(old)
    r.add_claim("ns/budget/amount", "fifty thousand dollars")
    past = r.state(at=then)
    assert old.op_id in past.claims and past.is_active(old.op_id)
    assert r.compact(archive=archive).ops >= 1
    assert old.op_id not in r.state().claims  # its body moved
    assert r.state(at=then).claims == past.claims
    assert r.state(at=then).is_active(old.op_id)
    r.close()
    with Replica.open(path, space=SPACE, load="verify") as again:
        assert again.state(at=then).claims == past.claims
    archive.rename(tmp_path / "elsewhere")
    with Replica.open(path, space=SPACE, load="verify") as blind:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gone = blind.state(at=then)
        assert old.op_id not in gone.claims  # nothing to read it from: said, not hidden
        assert any(issubclass(w.category, ArchiveWarning) for w in caught)


def test_a_claim_whose_retraction_stops_counting_comes_back_from_the_archive(tmp_path):
    # compaction moved the body of a claim a member retracted; the root then revokes the member
    # before that retraction: the claim is active again and must show, in memory and on reopen
    from statefuse.sync.key import SigningKey
    from statefuse.sync.trust import TrustMode

    root_key, ann_key = SigningKey.generate(), SigningKey.generate()
    closed = {"space": SPACE, "root": root_key.author, "mode": TrustMode.CLOSED}
    path, archive = tmp_path / "root.sqlite", tmp_path / "root.archive"
    root = Replica.open(path, create=True, key=root_key, **closed)
    root.admit(ann_key.author)
    kept = root.add_claim("ns/office/city", "Lisbon, the office by the river")
    ann = Replica.memory(key=ann_key, **closed)
    ann.merge(root)
    ann.add_claim("ns/office/floor", "third")
    before_retraction = [c.change_id for c in ann.log.changes() if c.author == ann_key.author]
    ann.retract(kept)
    root.merge(ann)
    assert not root.state().is_active(kept.op_id)
    assert root.compact(archive=archive).ops >= 1
    assert kept.op_id not in root.state().claims  # its body moved

    root.revoke(ann_key.author, keep=before_retraction)
    assert root.state().is_active(kept.op_id)
    assert _view(root, Lens()) == _view(_fresh_copy(root), Lens())
    root.close()
    with Replica.open(path, **closed, load="verify") as again:
        assert again.state().is_active(kept.op_id)
        assert b"Lisbon, the office by the river" in path.read_bytes()


def _fresh_copy(r: Replica) -> Replica:
    """A replica that never compacted, holding every change of ``r`` whole."""
    fresh = Replica.memory(space=r.space, root=r.root, mode=r.mode)
    fresh.receive(r.all_change_bytes())
    return fresh


def test_a_compacted_store_without_its_archive_says_so_once_and_serves_no_partial_change(
    tmp_path,
):
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r = _memory_with_garbage(path)
    r.compact(archive=archive)
    r.close()
    archive.rename(tmp_path / "elsewhere")
    with Replica.open(path, space=SPACE) as again:
        assert _view(again, Lens())[0]  # reads do not need the archive
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            served = again.all_change_bytes()
            again.all_change_bytes()
        said = [w for w in caught if issubclass(w.category, ArchiveWarning)]
        assert len(said) == 1 and "s.archive" in str(said[0].message)
        assert len(served) < len(again.log)
        fresh = Replica.memory(space=SPACE)
        fresh.receive(served)
        assert all(len(c.ops) == len(c.op_ids) for c in fresh.log.changes())


def test_statefuse_compact_reports_what_moved_in_one_line(tmp_path):
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    _memory_with_garbage(path).close()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "statefuse",
            "--store",
            str(path),
            "compact",
            "--archive",
            str(archive),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    [line] = run.stdout.splitlines()
    assert line.startswith("Moved 334 op bodies (") and str(archive) in line
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "statefuse",
            "--store",
            str(path),
            "--json",
            "compact",
            "--archive",
            str(archive),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(again.stdout)["ops"] == 0


def _text_memory(path: Path) -> tuple[Replica, list[bytes]]:
    """A store of text values, three in ten retracted (some replaced), and turns quoting
    retracted values: what only a scrub residue lets compaction shrink."""
    r = Replica.open(path, space=SPACE, create=True)
    gone = []
    with r.batch():
        made = [r.add_claim(f"ns/s{i}/p", f"the value of item {i}") for i in range(60)]
        for i, c in enumerate(made):
            if i % 10 < 3:
                r.retract(c, superseded_by=made[i + 5] if i % 2 else None)
                gone.append(c.op_id)
        for i in range(0, 60, 10):
            r.add_turn("user", f"we had The Value of item {i + 1}, not item {i + 3}", session="s1")
    return r, gone


_TEXT_LENSES = [Lens(session="s1"), Lens(session="s1", roles=frozenset({"ops"})), Lens()]


def test_a_store_of_text_values_compacts_its_retracted_claims_and_every_context_stays(tmp_path):
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r, gone = _text_memory(path)
    r.close()
    with Replica.open(path, space=SPACE) as lazy:  # read on the store's derived state
        assert not lazy.loaded
        lazy_contexts = _contexts(lazy, _TEXT_LENSES)
    r = Replica.open(path, space=SPACE, load="verify")
    views = [_view(r, lens) for lens in _TEXT_LENSES]
    contexts = _contexts(r, _TEXT_LENSES)
    assert any(scrubbed for _, scrubbed in contexts)  # the turns do quote retracted values
    done = r.compact(archive=archive)
    assert done.ops == len(gone) and done.store_after < done.store_before
    assert not any(gone_id in r.state().claims for gone_id in gone)  # bodies moved
    assert [_view(r, lens) for lens in _TEXT_LENSES] == views
    assert _contexts(r, _TEXT_LENSES) == contexts
    r.close()
    with Replica.open(path, space=SPACE, load="verify") as again:
        assert [_view(again, lens) for lens in _TEXT_LENSES] == views
        assert _contexts(again, _TEXT_LENSES) == contexts
    with Replica.open(path, space=SPACE) as lazy:
        assert not lazy.loaded
        assert _contexts(lazy, _TEXT_LENSES) == lazy_contexts
        assert not lazy.loaded


def test_a_compacted_store_without_a_scrub_residue_builds_it_from_its_archive_once(tmp_path):
    """A store compacted before residues existed (its archive named, no residue kept): the
    residue is built from the archive on open and kept, so no scrub is lost."""
    from statefuse.sync.archive import RESIDUE_NOTE

    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r, _ = _text_memory(path)
    contexts = _contexts(r, _TEXT_LENSES)
    r.compact(archive=archive)
    with r.store.write_transaction():
        r.store.set_note(RESIDUE_NOTE, None)
    r.close()
    with Replica.open(path, space=SPACE) as lazy:  # on the derived state: built, kept
        assert not lazy.loaded
        assert lazy.store.note(RESIDUE_NOTE) is not None
    with Replica.open(path, space=SPACE) as r, r.store.write_transaction():
        r.store.set_note(RESIDUE_NOTE, None)
    with Replica.open(path, space=SPACE, load="verify") as again:
        assert _contexts(again, _TEXT_LENSES) == contexts
        assert again.store.note(RESIDUE_NOTE) is not None  # kept from now on
    archive.rename(tmp_path / "elsewhere")
    with Replica.open(path, space=SPACE, load="verify") as kept:
        assert _contexts(kept, _TEXT_LENSES) == contexts  # no longer needs the archive


def test_redacting_a_compacted_claim_cuts_its_residue_from_the_store(tmp_path):
    from statefuse.core.residue import fingerprint
    from statefuse.reading.scrub import folded

    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    r, gone = _text_memory(path)
    r.compact(archive=archive)
    secret = fingerprint(folded("the value of item 0"))
    assert b"the value of item 0" in archive.read_bytes()
    assert secret in path.read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("s.sqlite-wal")
    )
    r.redact(claim=[gone[0]], reason="erasure request")
    # the audit places it though its body was in the archive, not the store, when it was cut
    (audit,) = r.redacted_claims(held=True)
    assert audit.op_id == gone[0] and audit.reason == "erasure request"
    r.close()
    files = [p for p in tmp_path.iterdir() if p.name.startswith("s.sqlite")]
    assert all(secret not in p.read_bytes() for p in files)
    assert b"the value of item 0" not in archive.read_bytes()  # cut from the archive too
    with Replica.open(path, space=SPACE, load="verify") as again:
        ctx = again.context("value", lens=Lens(session="s1"), budget=2000)
        assert gone[0] not in {g for ids in ctx.scrubbed.values() for g in ids}


def _budget_memory(path: Path) -> Replica:
    """Keys updated twice (the old values retracted, replaced by the newest) and a turn
    quoting old values: a context read on the derived state reads those keys, so it scrubs."""
    r = Replica.open(path, space=SPACE, create=True)
    with r.batch():
        for i in range(20):
            old = r.add_claim(f"plan/p{i}/budget", f"budget of {i}0k dollars")
            mid = r.add_claim(f"plan/p{i}/budget", f"budget of {i}5k dollars")
            new = r.add_claim(f"plan/p{i}/budget", f"budget of {i}9k dollars")
            r.retract(old, superseded_by=new)
            r.retract(mid, superseded_by=new)
        r.add_turn("user", "so the budget of 30k dollars, no, Budget of 35K dollars", session="s1")
    return r


def test_a_context_read_on_the_derived_state_scrubs_the_same_after_compaction(tmp_path):
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    _budget_memory(path).close()
    lens = [Lens(session="s1")]
    with Replica.open(path, space=SPACE) as lazy:
        assert not lazy.loaded
        before = lazy.context("budget", lens=lens[0], budget=2000)
    assert before.scrubbed and "[corrected: now" in before.text
    with Replica.open(path, space=SPACE) as r:
        assert r.compact(archive=archive).ops == 40
    with Replica.open(path, space=SPACE) as lazy:
        after = lazy.context("budget", lens=lens[0], budget=2000)
        assert not lazy.loaded
    assert (after.to_json(), after.scrubbed) == (before.to_json(), before.scrubbed)


def test_statefuse_context_scrubs_the_same_values_after_statefuse_compact(tmp_path):
    """The command line, as real processes: the context of a store of text values is the same
    before and after `statefuse compact` moved its retracted claims."""
    path, archive = tmp_path / "s.sqlite", tmp_path / "s.archive"
    _budget_memory(path).close()
    gone = range(40)

    def cli(*args: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "statefuse", "--store", str(path), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        return run.stdout

    context = ("--json", "context", "--query", "budget", "--session", "s1")
    before = json.loads(cli(*context))
    assert before["scrubbed"] and "[corrected" in before["text"]
    moved = cli("compact", "--archive", str(archive))
    assert moved.startswith(f"Moved {len(gone)} op bodies (")
    assert json.loads(cli(*context)) == before


@settings(max_examples=25, deadline=None)
@given(_CLAIMS, _QUOTES, st.lists(_LENSES, min_size=1, max_size=3))
def test_every_context_read_on_the_derived_state_is_the_same_after_compaction(
    tmp_path_factory, claims, quotes, lenses
):
    """The same property on a real store, read on its derived state (`Replica.loaded` False):
    such a read lays out a slice of the keys, with the retracted claims there (`state_of`)."""
    home = tmp_path_factory.mktemp("lazy")
    path, archive = home / "s.sqlite", home / "s.archive"
    r = Replica.open(path, space=SPACE, create=True)
    memory = _memory(claims, 0, False, quotes)
    r.merge(memory)
    r.close()

    def lazy_contexts() -> list[tuple[str, object]]:
        with Replica.open(path, space=SPACE) as lazy:
            out = _contexts(lazy, lenses)
            assert not lazy.loaded
        return out

    before = lazy_contexts()
    with Replica.open(path, space=SPACE) as w:
        w.compact(archive=archive)
    assert lazy_contexts() == before
