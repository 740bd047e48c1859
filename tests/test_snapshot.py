"""Replica snapshots (`sync.snapshot`): reopening from a snapshot gives exactly what verifying
every stored change gives, and a snapshot that does not check out is ignored, with its reason."""

from __future__ import annotations

import copy
import io
import os
import pickle
import sqlite3
import warnings
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from statefuse import ClaimAdded
from statefuse.entry.cli import main
from statefuse.storage.sqlitestore import SQLiteStore
from statefuse.storage.store import MemoryStore, StoreInfo, StoreWrite
from statefuse.sync.key import SigningKey, SigningKeyError
from statefuse.sync.replica import CLOSE_SNAPSHOT_SHARE, Replica, ReplicaError
from statefuse.sync.snapshot import (
    KEY_CONTEXT,
    MAGIC,
    SNAPSHOT_VERSION,
    Identity,
    SnapshotError,
    SnapshotWarning,
    encode_snapshot,
    stored_digest,
)

WALL = 1_767_225_600_000


def _clock() -> int:
    return WALL


def _fingerprint(r: Replica) -> dict[str, object]:
    """Everything a reload builds that later behaviour depends on."""
    state = r.state()
    return {
        "digest": state.digest(),
        "active": sorted(c.claim_id for c in state.active_claims()),
        "conflicts": len(state.conflicts),
        "change_ids": r.change_ids(),
        "verdicts": r.verdicts(),
        "pending": [c.change_id for c in r.pending()],
        "log_quarantine": sorted(e.key for e in r.log.quarantine),
        "quarantine": [(q.key, q.reason) for q in r.quarantine()],
        "equivocations": r.log.equivocations(),
        "head": r._head,
        "by_seq": r._by_seq,
        "counted": r._counted,
        "lamport": r.writer.lamport,
        "ref_retractions": r.writer._ref_retractions,
        "trust_lamport": r.trust_writer._lamport,
        "trust": (r.trust().mode, sorted(r.trust().admitted) if r.trust().admitted else None),
    }


def _reopened(store: object, key: SigningKey, **options: object) -> Replica:
    """A second replica on the same store (in memory too), with warnings as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return Replica(store, key, clock=_clock, **options)  # type: ignore[arg-type]


def _next_change(store: MemoryStore, key: SigningKey, **options: object) -> bytes:
    """The bytes of the next change a replica opened on a copy of ``store`` writes."""
    r = _reopened(copy.deepcopy(store), key, **options)
    before = set(r.change_ids())
    r.add_claim("ns", "next", "p", "after reopening")
    [new] = [cid for cid in r.change_ids() if cid not in before]
    return r.change_bytes([new])[0]


# --- the store side -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_accepted_ids_come_in_append_order_with_the_positions_of_accepted(tmp_path, kind):
    store = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    store.initialize(StoreInfo(space="team"))
    store.write(StoreWrite(pending=((b"c2", b"d2"),)))
    store.write(StoreWrite(accepted=((b"c3", b"d3"), (b"c1", b"d1"))))
    store.write(StoreWrite(accepted=((b"c2", b"d2"), (b"c1", b"d1"))))
    ids = list(store.accepted_ids())
    assert [cid for _, cid in ids] == [b"c3", b"c1", b"c2"]
    assert [p for p, _ in ids] == [p for p, _ in store.accepted()]
    assert list(store.accepted_ids(after=ids[0][0])) == ids[1:]
    store.close()


def test_a_derived_secret_depends_on_the_key_and_the_context_and_never_is_the_seed():
    seed = bytes(range(32))
    key = SigningKey.from_seed(seed)
    one = key.derive_secret("context one")
    assert one == SigningKey.from_seed(seed).derive_secret("context one")
    assert one != key.derive_secret("context two")
    assert one != SigningKey.generate().derive_secret("context one")
    assert len(one) == 32 and one != seed
    with pytest.raises(SigningKeyError) as err:
        key.derive_secret("")
    assert err.value.rule == "context-type"


# --- reopening equals verifying everything ------------------------------------------------------


def _forged(source: Replica, claim: ClaimAdded) -> bytes:
    [change] = [c for c in source.log.changes() if claim in c.ops]
    data = bytearray(change.data)
    i = data.index(b"genuine")
    data[i : i + 7] = b"forged!"
    return bytes(data)


_steps = st.lists(
    st.one_of(
        st.tuples(st.just("claim"), st.integers(0, 1), st.integers(0, 3), st.integers(0, 2)),
        st.tuples(st.just("retract"), st.integers(0, 1), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("merge"), st.integers(0, 1), st.just(0), st.just(0)),
        st.tuples(st.just("forged"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("pending"), st.just(0), st.just(0), st.just(0)),
        st.tuples(st.just("snapshot"), st.just(0), st.just(0), st.just(0)),
    ),
    max_size=14,
)


#: Each example writes and reopens SQLite stores: CI runs 500 (1,000 took 10 s).
@settings(deadline=None, max_examples=min(settings.default.max_examples, 500))
@given(_steps, _steps)
def test_reopening_with_a_snapshot_equals_verifying_every_stored_change(before, after):
    key = SigningKey.generate()
    a = Replica(_initialized(), key, clock=_clock)
    b = Replica.memory(space="team", clock=_clock)
    twin = Replica.memory(space="team", key=b.key, clock=_clock)  # b's key, another feed
    replicas = (a, b)
    for step, who, subject, value in [*before, ("snapshot", 0, 0, 0), *after]:
        r = replicas[who]
        if step == "claim":
            r.add_claim("ns", f"s{subject}", "p", value)
        elif step == "retract":
            mine = [c for c in r.state().active_claims() if c.subject == f"s{subject}"]
            if mine and value:
                r.retract(mine[0], reason="wrong")
            elif mine:
                r.retract(claim_ref=mine[0].claim_ref, reason="all of them")
        elif step == "merge":
            replicas[who].merge(replicas[1 - who])
        elif step == "forged":
            a.receive([_forged(b, b.add_claim("ns", "f", "p", "genuine"))])
        elif step == "pending":
            twin.add_claim("ns", "t", "p", len(twin))
            twin.add_claim("ns", "t", "p", len(twin))
            a.receive(twin.change_bytes([twin.change_ids()[-1]])[-1:])
        else:
            a.snapshot()
    restored = _reopened(a.store, key)
    full = _reopened(a.store, key, load="verify")
    assert full.restored == 0
    event(f"restored {restored.restored > 0}, pending {bool(full.pending())}")
    event(f"quarantined {bool(full.quarantine())}, snapshot after {len(full) - restored.restored}")
    assert restored.restored == (a.store.load_snapshot() is not None) * a._snap_count
    assert _fingerprint(restored) == _fingerprint(full)
    assert _next_change(a.store, key) == _next_change(a.store, key, load="verify")


def _initialized() -> MemoryStore:
    store = MemoryStore()
    store.initialize(StoreInfo(space="team"))
    return store


def _fill(path: Path, n: int, **options: object) -> Replica:
    r = Replica.open(path, create=True, space="team", clock=_clock, **options)  # type: ignore[arg-type]
    for i in range(n):
        r.add_claim("ns", f"s{i % 7}", "p", i)
        if i % 5 == 4:
            r.retract(claim_ref=r.state().active_claims()[0].claim_ref)
    return r


def _open(path: Path, **options: object) -> Replica:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # what these tests are about: loading the history (a lazy open loads it from here too)
        options.setdefault("load", "snapshot")
        return Replica.open(path, clock=_clock, **options)  # type: ignore[arg-type]


def test_a_closed_store_reopens_from_its_snapshot_to_the_fully_verified_state(tmp_path):
    path = tmp_path / "a.db"
    _fill(path, 30).close()
    with _open(path) as fast:
        assert fast.restored == len(fast) > 0
        got = _fingerprint(fast)
    with _open(path, load="verify") as slow:
        assert slow.restored == 0
        assert _fingerprint(slow) == got


def test_changes_stored_after_the_snapshot_are_verified_and_replayed(tmp_path):
    path = tmp_path / "a.db"
    r = _fill(path, 2 * CLOSE_SNAPSHOT_SHARE)
    covered = r.snapshot()
    r.add_claim("ns", "late", "p", "after the snapshot")  # too little for close to save again
    r.close()
    with _open(path) as again:
        assert again.restored == covered == len(again) - 1
        assert [c.value for c in again.state().active_claims() if c.subject == "late"] == [
            "after the snapshot"
        ]
        got = _fingerprint(again)
    with _open(path, load="verify") as slow:
        assert _fingerprint(slow) == got


def test_close_saves_a_snapshot_only_when_enough_is_new(tmp_path):
    path = tmp_path / "a.db"
    _fill(path, 10).close()
    with _open(path) as r:
        assert r.restored == len(r)
        covered = r.restored
        for i in range(covered // CLOSE_SNAPSHOT_SHARE + 1):
            r.add_claim("ns", "more", "p", i)
    with _open(path) as r:
        assert r.restored == len(r)  # saved on close: the new changes were a large share
    big = tmp_path / "big.db"
    r = _fill(big, CLOSE_SNAPSHOT_SHARE + 8)
    r.close()
    with _open(big) as r:
        r.add_claim("ns", "one", "p", "more")
    with _open(big) as r:
        assert r.restored == len(r) - 1  # one change in ~80: not worth rewriting the snapshot


def test_new_writes_after_a_restored_open_continue_the_chain_and_the_clocks(tmp_path):
    path = tmp_path / "a.db"
    _fill(path, 12).close()
    copy_path = tmp_path / "copy.db"
    for suffix in ("", ".key"):
        Path(str(copy_path) + suffix).write_bytes(Path(str(path) + suffix).read_bytes())
    os.chmod(str(copy_path) + ".key", 0o600)
    written = []
    for p, load in ((path, "snapshot"), (copy_path, "verify")):
        with _open(p, load=load) as r:
            assert (r.restored > 0) == (load == "snapshot")
            seq, head = r.last_change(r.author)
            claim = r.add_claim("ns", "s1", "p", "new")
            assert claim.lamport == max(c.lamport for c in r.log.ops().unordered()) >= 2
            (new,) = [c for c in r.log.changes() if c.seq == seq + 1]
            assert new.prev == head
            written.append(r.change_bytes([new.change_id]))
    assert written[0] == written[1]  # same key, clock and memory: the very same signed change


def test_trust_ops_and_their_clock_survive_a_restored_open(tmp_path):
    root = SigningKey.generate()
    path = tmp_path / "hub.db"
    hub = Replica.open(path, create=True, space="team", mode="closed", key=root, clock=_clock)
    agent = Replica.memory(space="team", mode="closed", root=root.author, clock=_clock)
    agent.add_claim("ns", "s", "p", "first")
    agent.add_claim("ns", "t", "p", "second")
    hub.merge(agent)
    hub.admit(agent.author)
    hub.revoke(agent.author, through_seq=1, reason="key leaked")
    hub.close()
    with _open(path) as fast:
        assert fast.restored == len(fast)
        got = _fingerprint(fast)
        # the agent's claims (lamports 1 and 2) did not count when the root admitted it (1):
        # only counted ops move a clock (SEMANTICS §2); the revocation followed them (3) and
        # left the agent's seq 2 (lamport 2) uncounted
        assert got["trust_lamport"] == 3
        nxt = fast.grant(agent.author, ["editor"])
        assert nxt.lamport == 4
    with _open(path, load="verify") as slow:
        assert _fingerprint(slow)["digest"] == got["digest"]
        assert slow.verdicts() == got["verdicts"]
        assert slow.trust_writer._lamport == nxt.lamport


def test_an_unknown_load_mode_is_refused():
    with pytest.raises(ReplicaError) as err:
        Replica(_initialized(), SigningKey.generate(), load="trust-me")
    assert (err.value.field, err.value.rule) == ("load", "load-mode")


# --- snapshots that do not check out --------------------------------------------------------------


def _stored_snapshot(path: Path) -> tuple[int, bytes]:
    store = SQLiteStore(path)
    try:
        found = store.load_snapshot()
        assert found is not None
        return found
    finally:
        store.close()


def _replace_snapshot(path: Path, upto: int, blob: bytes) -> None:
    store = SQLiteStore(path)
    store.save_snapshot(upto, blob)
    store.close()


def _seal(payload: bytes, key: SigningKey, version: int = SNAPSHOT_VERSION) -> bytes:
    """A snapshot blob around ``payload``, authenticated as the format says."""
    import blake3

    v = version.to_bytes(2, "big")
    mac = blake3.blake3(MAGIC, key=key.derive_secret(KEY_CONTEXT))
    mac.update(v)
    mac.update(payload)
    return MAGIC + v + blake3.blake3(payload).digest() + mac.digest() + payload


def _payload(blob: bytes) -> dict[str, object]:
    header = len(MAGIC) + 2 + 64
    loaded: dict[str, object] = pickle.loads(blob[header:])  # our own test blob
    return loaded


def _falls_back(path: Path, rule: str) -> Replica:
    with pytest.warns(SnapshotWarning) as caught:
        r = Replica.open(path, clock=_clock, load="snapshot")
    ours = [w for w in caught.list if isinstance(w.message, SnapshotWarning)]
    assert [w.message.rule for w in ours] == [rule]
    assert [w.filename for w in ours] == [__file__]  # the warning names the caller's open()
    assert r.restored == 0
    return r


def _check_fallback(path: Path, rule: str) -> None:
    r = _falls_back(path, rule)
    got = _fingerprint(r)
    r.close()  # the close replaces the snapshot with a good one
    with _open(path, load="verify") as slow:
        expected = _fingerprint(slow)
    assert got == expected
    with _open(path) as again:
        assert again.restored == len(again)
        assert _fingerprint(again) == expected


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    path = tmp_path / "a.db"
    _fill(path, 20).close()
    return path


@pytest.mark.parametrize(
    ("damage", "rule"),
    [
        (lambda b: b[: len(b) // 2], "snapshot-checksum"),
        (lambda b: b[:20], "snapshot-format"),
        (lambda b: b"", "snapshot-format"),
        (lambda b: b"XX" + b[2:], "snapshot-format"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "snapshot-checksum"),
        (lambda b: b[: len(MAGIC) + 2] + bytes(32) + b[len(MAGIC) + 34 :], "snapshot-checksum"),
        (lambda b: b[: len(MAGIC) + 34] + bytes(32) + b[len(MAGIC) + 66 :], "snapshot-key"),
    ],
    ids=["truncated", "header-only", "empty", "magic", "payload-bit", "checksum", "mac"],
)
def test_a_damaged_snapshot_is_ignored_with_its_reason(saved, damage, rule):
    upto, blob = _stored_snapshot(saved)
    _replace_snapshot(saved, upto, damage(blob))
    _check_fallback(saved, rule)


def test_a_snapshot_written_with_another_key_is_ignored(saved):
    upto, blob = _stored_snapshot(saved)
    stranger = SigningKey.generate()
    _replace_snapshot(saved, upto, _seal(blob[len(MAGIC) + 66 :], stranger))
    _check_fallback(saved, "snapshot-key")


def test_a_snapshot_of_another_format_version_is_ignored(saved):
    upto, blob = _stored_snapshot(saved)
    key = SigningKey.load(str(saved) + ".key")
    _replace_snapshot(saved, upto, _seal(blob[len(MAGIC) + 66 :], key, SNAPSHOT_VERSION + 1))
    _check_fallback(saved, "snapshot-version")


def test_a_snapshot_for_another_space_or_layout_is_ignored(saved):
    upto, blob = _stored_snapshot(saved)
    key = SigningKey.load(str(saved) + ".key")
    for field, value in (("space", "elsewhere"), ("layout", b"\x00" * 32)):
        payload = _payload(blob)
        payload[field] = value
        _replace_snapshot(saved, upto, _seal(pickle.dumps(payload, protocol=5), key))
        with pytest.warns(SnapshotWarning) as caught:
            Replica.open(saved, clock=_clock, load="snapshot").close()
        assert [w.message.rule for w in caught.list] == ["snapshot-identity"]


def test_a_snapshot_whose_position_differs_from_the_store_record_is_ignored(saved):
    upto, blob = _stored_snapshot(saved)
    _replace_snapshot(saved, upto - 1, blob)
    _check_fallback(saved, "snapshot-format")


def test_a_store_rolled_back_below_its_snapshot_is_reloaded_in_full(saved):
    db = sqlite3.connect(saved)
    with db:
        db.execute("DELETE FROM changes WHERE pos = (SELECT max(pos) FROM changes)")
    db.close()
    _check_fallback(saved, "snapshot-stale")


def test_stored_bytes_altered_under_a_snapshot_are_noticed(saved):
    db = sqlite3.connect(saved)
    (data,) = db.execute("SELECT data FROM changes WHERE pos = 2").fetchone()
    tampered = bytearray(data)
    tampered[-10] ^= 1  # inside the signature
    with db:
        db.execute("UPDATE changes SET data = ? WHERE pos = 2", (bytes(tampered),))
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the damage is the news: no snapshot warning besides
        r = _open(saved)
    assert r.restored == 0 and r.damage is not None and r.damage.failed == 1
    got = _fingerprint(r)
    assert len(r) < 20  # the altered change and its successors are not accepted
    r.close()
    with _open(saved, load="verify") as slow:
        assert _fingerprint(slow) == got


class _Boom:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("signed", [True, False], ids=["with-the-key", "without-the-key"])
def test_a_malicious_pickle_is_refused_without_running_anything(saved, tmp_path, signed):
    marker = tmp_path / "pwned"
    upto, _ = _stored_snapshot(saved)
    payload = pickle.dumps({"evil": _Boom(marker)}, protocol=5)
    key = SigningKey.load(str(saved) + ".key") if signed else SigningKey.generate()
    _replace_snapshot(saved, upto, _seal(payload, key))
    _check_fallback(saved, "snapshot-format" if signed else "snapshot-key")
    assert not marker.exists()
    with pytest.raises(SnapshotError):  # the payload is live: only the reader stops it
        from statefuse.sync.snapshot import _NoGlobals

        _NoGlobals(io.BytesIO(payload)).load()
    assert not marker.exists()


def test_a_snapshot_holds_only_what_a_restricted_reader_accepts(saved):
    _, blob = _stored_snapshot(saved)
    payload = blob[len(MAGIC) + 66 :]
    import pickletools

    opcodes = {op.name for op, _, _ in pickletools.genops(payload)}
    assert not opcodes & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ"}


def test_encoding_refuses_ops_it_could_not_read_back():
    key = SigningKey.generate()
    r = Replica.memory(space="team", key=key)
    r.add_claim("ns", "s", "p", 1)
    identity = Identity("team", key.author, r.registry.fingerprint, "open", None)
    blob = encode_snapshot(r.log.changes(), key=key, identity=identity, upto=1)
    assert _payload(blob)["digest"] == stored_digest([c.data for c in r.log.changes()])


# --- verify never trusts the snapshot -------------------------------------------------------------


def test_statefuse_verify_rechecks_stored_changes_a_snapshot_vouches_for(saved, capsys):
    # Someone holding the key alters a stored change and rebinds the snapshot to the new bytes:
    # an ordinary open would restore it, the verify command must still find the bad change.
    db = sqlite3.connect(saved)
    (data,) = db.execute("SELECT data FROM changes WHERE pos = 2").fetchone()
    tampered = bytearray(data)
    tampered[-10] ^= 1
    with db:
        db.execute("UPDATE changes SET data = ? WHERE pos = 2", (bytes(tampered),))
    datas = [bytes(d) for (d,) in db.execute("SELECT data FROM changes ORDER BY pos")]
    db.close()
    upto, blob = _stored_snapshot(saved)
    payload = _payload(blob)
    payload["digest"] = stored_digest(datas)
    key = SigningKey.load(str(saved) + ".key")
    _replace_snapshot(saved, upto, _seal(pickle.dumps(payload, protocol=5), key))
    with _open(saved) as trusting:
        assert trusting.restored == len(trusting)
    code = main(["--store", str(saved), "verify"])
    out = capsys.readouterr().out
    assert code == 1
    assert "stored change 2 fails verification: bad-signature" in out
