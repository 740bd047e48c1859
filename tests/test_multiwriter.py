"""Many processes, one store: any number of processes (API, CLI, `serve`) open one SQLite store
and write; writes serialize on the store's write lock with a bounded wait, each process sees
the others' writes on its next call, and one author key still signs one feed with no fork.

Driven with real processes (``python -m statefuse`` and small ``python -c`` writers) on real
files, a real `statefuse serve` on 127.0.0.1, and kill -9; and, in one process, two replicas on
one file under interleavings Hypothesis draws and under two threads, checked against
`materialize`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.core.materializer import materialize
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
#: A hang guard only: every wait below ends on the event it waits for.
HANG = 240


def _statefuse(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=HANG,
        check=False,
    )


def _spawn(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _init(path: Path) -> None:
    made = _statefuse("--store", str(path), "init", "--space", "team")
    assert made.returncode == 0, made.stderr


def _values(path: Path) -> list[str]:
    """The values of the store's active claims, read by a fresh read-only process."""
    shown = _statefuse("--store", str(path), "--json", "show", "--all")
    assert shown.returncode == 0, shown.stderr
    return sorted(str(c["value"]) for c in json.loads(shown.stdout)["claims"])


def _assert_one_feed(path: Path) -> None:
    """`statefuse verify` passes with no fork, `keys show` lists none, and every author's seqs
    run 1, 2, 3, … with no gap and no repeat."""
    verified = _statefuse("--store", str(path), "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "fork" not in verified.stderr.lower(), verified.stderr
    keys = _statefuse("--store", str(path), "--json", "keys", "show")
    assert keys.returncode == 0, keys.stderr
    assert "fork" not in keys.stdout.replace('"forks": []', ""), keys.stdout
    with Replica.open(path, readonly=True, load="verify") as rep:
        assert rep.forks() == []
        seqs: dict[bytes, list[int]] = {}
        for c in rep.log.changes():
            seqs.setdefault(c.author, []).append(c.seq)
        for got in seqs.values():
            assert sorted(got) == list(range(1, len(got) + 1))


#: An API writer: opens the store once, writes ``N`` claims ``api<tag>-<i>``, printing one
#: ``Added claim`` line per acknowledged write, then waits for a line on stdin and prints how
#: many claims its same replica object shows then (what it sees of the others' writes).
_API_WRITER = textwrap.dedent(
    """
    import sys
    from statefuse.sync.replica import Replica
    path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rep = Replica.open(path)
    for i in range(n):
        rep.add_claim(f"p/s/{tag}-{i}", f"{tag}-{i}")
        print(f"Added claim {tag}-{i}", flush=True)
    print("wrote", flush=True)
    sys.stdin.readline()
    state = rep.state()
    print(len(state.active_claims()), len(rep.forks()), flush=True)
    rep.close()
    """
)


def test_eight_processes_cli_and_api_write_one_store_at_once_and_all_succeed(tmp_path):
    path = tmp_path / "team.db"
    _init(path)
    cli = [
        _spawn(
            sys.executable,
            "-m",
            "statefuse",
            "--store",
            str(path),
            "claim",
            f"p/s/cli{i}",
            f"cli{i}",
        )
        for i in range(6)
    ]
    api = [_spawn(sys.executable, "-c", _API_WRITER, str(path), f"api{k}", "10") for k in range(2)]
    for proc in cli:
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 0, err
        assert out.startswith("Added claim "), out
    for proc in api:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(11)]
        assert lines[-1] == "wrote\n", (lines, proc.stderr.read() if proc.stderr else "")
    expected = sorted(
        [f"cli{i}" for i in range(6)] + [f"api{k}-{i}" for k in range(2) for i in range(10)]
    )
    # each long-lived writer's next read shows every other process's writes
    for proc in api:
        out, err = proc.communicate("go\n", timeout=HANG)
        assert proc.returncode == 0, err
        assert out.split() == [str(len(expected)), "0"], out
    assert _values(path) == expected
    _assert_one_feed(path)


def _serve(path: Path) -> tuple[subprocess.Popen[str], str]:
    proc = _spawn(sys.executable, "-m", "statefuse", "--store", str(path), "serve", "--port", "0")
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert "Serving space 'team'" in first, (first, proc.poll())
    url = first.split(" at ", 1)[1].split(",", 1)[0].strip()
    return proc, url


@contextmanager
def _serving(path: Path) -> Iterator[str]:
    proc, url = _serve(path)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=HANG)


def test_serve_answers_with_claims_cli_writers_wrote_after_it_started(tmp_path):
    served = tmp_path / "served.db"
    _init(served)
    assert _statefuse("--store", str(served), "claim", "p/s/before", "before").returncode == 0
    with _serving(served) as url:
        for i in range(3):
            written = _statefuse("--store", str(served), "claim", f"p/s/after{i}", f"after{i}")
            assert written.returncode == 0, written.stderr  # the server does not block it
        other = tmp_path / "other.db"
        _init(other)
        synced = _statefuse("--store", str(other), "sync", url)
        assert synced.returncode == 0, synced.stderr
        assert _values(other) == ["after0", "after1", "after2", "before"]
        # and the other way: what the server takes in, a CLI writer beside it builds on
        assert _statefuse("--store", str(other), "claim", "p/s/theirs", "theirs").returncode == 0
        assert _statefuse("--store", str(other), "sync", url).returncode == 0
        assert _statefuse("--store", str(served), "claim", "p/s/last", "last").returncode == 0
    assert _values(served) == ["after0", "after1", "after2", "before", "last", "theirs"]
    _assert_one_feed(served)


#: A writer that never stops on its own: ``Added claim <value>`` after each acknowledged write.
_BURST = textwrap.dedent(
    """
    import sys
    from statefuse.sync.replica import Replica
    path, tag = sys.argv[1], sys.argv[2]
    rep = Replica.open(path)
    i = 0
    while True:
        rep.add_claim(f"p/s/{tag}-{i}", f"{tag}-{i}")
        print(f"Added claim {tag}-{i}", flush=True)
        i += 1
    """
)


def _acknowledged(proc: subprocess.Popen[str], at_least: int) -> list[str]:
    """Read ``proc``'s ``Added claim`` lines until ``at_least`` of them came."""
    assert proc.stdout is not None
    seen = []
    while len(seen) < at_least:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "ended early"
        seen.append(line.split()[-1])
    return seen


def test_a_writer_killed_mid_burst_loses_no_acknowledged_claim_and_forks_nothing(tmp_path):
    path = tmp_path / "team.db"
    _init(path)
    writers = [_spawn(sys.executable, "-c", _BURST, str(path), f"w{k}") for k in range(3)]
    try:
        acked = {k: _acknowledged(p, 15) for k, p in enumerate(writers)}
        cli = _statefuse("--store", str(path), "claim", "p/s/cli", "cli")  # amid the burst
        assert cli.returncode == 0, cli.stderr
        writers[0].send_signal(signal.SIGKILL)  # mid-write, likely inside a transaction
        writers[0].wait(timeout=HANG)
        # the others go on writing after the kill: the lock died with its holder
        for k in (1, 2):
            acked[k] += _acknowledged(writers[k], 10)
    finally:
        for p in writers:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait(timeout=HANG)
    # every line a writer printed before it died is a claim in the store
    for k, p in enumerate(writers):
        assert p.stdout is not None
        acked[k] += [line.split()[-1] for line in p.stdout.read().splitlines() if line]
    stored = set(_values(path))
    assert {"cli"} | {v for vs in acked.values() for v in vs} <= stored
    after = _statefuse("--store", str(path), "claim", "p/s/after", "after")
    assert after.returncode == 0, after.stderr
    _assert_one_feed(path)


# --- two replicas in one process, on one file ---------------------------------------------------


def _check_agree(path: Path, replicas: list[Replica]) -> None:
    """No fork anywhere, and every replica's state is `materialize` of what the store holds."""
    with Replica.open(path, readonly=True, load="verify") as fresh:
        assert fresh.forks() == []
        want = materialize(fresh.log.ops(), registry=fresh.registry).digest()
        count = len(fresh)
    for r in replicas:
        assert r.forks() == []
        assert r.state().digest() == want
        assert len(r) == count


_STEP = st.tuples(
    st.integers(0, 1),
    st.sampled_from(["claim", "update", "retract", "batch", "read"]),
    st.integers(0, 3),
)


@settings(max_examples=25, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=14))
def test_two_replicas_on_one_file_interleaved_never_fork_and_equal_materialize(steps):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "team.db"
        Replica.open(path, create=True, space="team").close()
        replicas = [Replica.open(path), Replica.open(path)]
        try:
            for n, (who, kind, key) in enumerate(steps):
                r = replicas[who]
                if kind == "claim":
                    r.add_claim(f"p/s/k{key}", n)
                elif kind == "update":
                    r.update(f"p/s/k{key}", n)
                elif kind == "retract":
                    active = r.state().active_claims()
                    if active:
                        r.retract(active[key % len(active)])
                elif kind == "batch":
                    with r.batch():
                        r.add_claim(f"p/s/k{key}", n)
                        r.update(f"p/s/k{(key + 1) % 4}", -n)
                else:
                    assert r.forks() == []
                # the other replica's next read shows this write
                assert replicas[1 - who].state().digest() == r.state().digest()
            _check_agree(path, replicas)
        finally:
            for r in replicas:
                r.close()


def test_two_threads_with_a_replica_each_on_one_file_write_one_feed(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    replicas = [Replica.open(path), Replica.open(path)]
    errors: list[BaseException] = []

    def write(k: int) -> None:
        r = replicas[k]
        try:
            for i in range(40):
                if i % 5 == 4:
                    r.update(f"p/s/shared{i % 3}", f"t{k}-{i}")
                else:
                    r.add_claim(f"p/s/t{k}-{i}", i)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(HANG)
        assert errors == []
        _check_agree(path, replicas)
        assert replicas[0].last_change(replicas[0].author)[0] == 80
    finally:
        for r in replicas:
            r.close()


def test_a_snapshot_saved_by_one_writer_serves_the_others_and_never_goes_back(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    a, b = Replica.open(path), Replica.open(path)
    try:
        for i in range(5):
            a.add_claim(f"p/s/a{i}", i)
        covered = b.snapshot()  # b takes in a's writes first: the snapshot covers them
        assert covered == 5
        a.add_claim("p/s/a5", 5)
        assert a.snapshot() == 6
        assert b.snapshot() == 6
        assert a.store.snapshot_position() == b.store.snapshot_position()
    finally:
        a.close()
        b.close()
    with Replica.open(path, load="snapshot") as again:
        assert again.restored == 6 and len(again) == 6
        assert sorted(c.value for c in again.state().active_claims()) == list(range(6))


def test_a_write_waits_for_a_long_writer_then_goes_on(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    holder = _spawn(
        sys.executable,
        "-c",
        textwrap.dedent(
            """
            import sys, time
            from statefuse.sync.replica import Replica
            rep = Replica.open(sys.argv[1])
            with rep.batch():
                rep.add_claim("p/s/long", "long")
                print("holding", flush=True)
                time.sleep(1.0)
            rep.close()
            """
        ),
        str(path),
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "holding\n"
        started = time.monotonic()
        written = _statefuse("--store", str(path), "claim", "p/s/short", "short")
        assert written.returncode == 0, written.stderr
        assert time.monotonic() - started > 0.5  # it waited for the holder, then wrote
    finally:
        holder.wait(timeout=HANG)
    assert _values(path) == ["long", "short"]
    _assert_one_feed(path)
    assert os.path.exists(f"{path}.lock")


def test_pending_changes_parked_by_one_process_are_taken_in_by_another(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    peer = Replica.memory(space="team")
    peer.add_claim("p/s/one", 1)
    peer.add_claim("p/s/two", 2)
    by_seq = sorted(peer.log.changes(), key=lambda c: c.seq)
    a, b = Replica.open(path), Replica.open(path)
    try:
        report = a.receive([by_seq[1].data])  # its predecessor is missing: parked
        assert report.pending == 1
        assert b.pending_count() == 1  # b sees what a parked
        report = b.receive([by_seq[0].data])  # the predecessor: both count now
        assert report.accepted == 2
        for r in (a, b):
            assert r.pending_count() == 0 and len(r) == 2
            assert sorted(c.value for c in r.state().active_claims()) == [1, 2]
        assert a.store.pending() == []
    finally:
        a.close()
        b.close()


def test_a_creator_pinned_by_one_process_is_followed_by_another(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    creator = Replica.memory(space="team")
    a, b = Replica.open(path), Replica.open(path)
    try:
        assert a.creator is None and b.creator is None
        assert a.pin_creator(creator.author)
        b.add_claim("p/s/x", 1)  # b's next call takes in the pin
        assert b.creator == creator.author
    finally:
        a.close()
        b.close()


def test_own_changes_another_process_of_the_store_wrote_are_no_own_feed_warning(tmp_path):
    path = tmp_path / "team.db"
    Replica.open(path, create=True, space="team").close()
    a, b = Replica.open(path), Replica.open(path)
    try:
        a.add_claim("p/s/one", 1)
        a.add_claim("p/s/two", 2)
        mine = a.change_bytes(a.change_ids())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an OwnFeedWarning would raise here
            report = b.receive(mine)  # e.g. a peer hands back what a wrote
        assert report.own_from_elsewhere == 0 and report.duplicate == 2
        assert b.add_claim("p/s/three", 3) and b.last_change(b.author)[0] == 3
    finally:
        a.close()
        b.close()
