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
from statefuse.reading.scrub import findable
from statefuse.sync.http import serve, sync_with
from statefuse.sync.replica import ArchiveWarning, Replica

SPACE = "compact"
VALUES = ("ab", "zz", 7, "a long value here", "another long value", "ab")


def _view(r: Replica, lens: Lens) -> tuple[object, ...]:
    """What a View shows through ``lens``: its JSON, its exclusions, its repair notes, and the
    retracted values its scrub looks for."""
    v = project(r.state(), lens)
    scrubbed = sorted(k for k in v.retracted.index.values if findable(k)) if v.retracted else None
    return (
        v.to_json(),
        dict(v.excluded),
        {k: tuple(v.excluded_ids[k]) for k in ("out-of-scope", "expired", "shadowed")},
        repr(sorted(v.stale.items())),
        scrubbed,
    )


_LENSES = st.builds(
    Lens,
    roles=st.frozensets(st.sampled_from(["ops", "hr"]), max_size=2),
    task=st.sampled_from([None, "a", "b"]),
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
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(_CLAIMS, st.integers(0, 3), st.booleans(), st.lists(_LENSES, min_size=1, max_size=4))
def test_every_view_is_the_same_after_compaction(
    tmp_path_factory, claims, n_evidence, decide, lenses
):
    r = Replica.memory(space=SPACE)
    evidence = [r.add_evidence(f"src{i}", f"body {i} " * 20) for i in range(n_evidence)]
    made = []
    for key, value, scope, vis, retract, cite in claims:
        cited = [evidence[0].op_id] if cite and evidence else []
        c = r.add_claim(f"ns/s{key}/p", value, scope=scope, visibility=vis, evidence=cited)
        made.append((c, retract))
    if decide:
        conflicts = r.state().conflicts
        if conflicts:
            r.decide(conflicts[0], conflicts[0].candidates[0])
    for c, retract in made:
        if retract:
            r.retract(c)
    before = [_view(r, lens) for lens in lenses]
    archive = tmp_path_factory.mktemp("archive") / "a.bundle"
    done = r.compact(archive=archive)
    assert [_view(r, lens) for lens in lenses] == before
    if done.ops:
        assert archive.exists()
        # a peer gets the whole history from the archive, and sees the same
        peer = Replica.memory(space=SPACE)
        peer.merge(r)
        assert len(peer.log) == len(r.log)
        assert [_view(peer, lens) for lens in lenses] == before


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
