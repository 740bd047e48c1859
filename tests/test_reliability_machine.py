"""Replicas on real files living through the everyday accidents, beside a model of what was
acknowledged (SEMANTICS §8, docs/operations.md).

One closed-mode space: a root replica in memory that admits and revokes, two SQLite replicas and
one more in memory, and up to two extra stores that reuse an author's key. Rules write, sync
pairs, back a store up and restore it, flip bytes of a stored change, repair, reuse keys and
revoke authors. The model records every acknowledged claim by the change that carries it, which
claims a revocation no longer protects, and which were really destroyed (their only copy was the
one a flip or a restore overwrote).

After every step: every acknowledged claim that was not destroyed is still held (accepted or
pending) by some replica; a damaged replica never signs and its store does not grow; every
replica's incremental state equals a full materialize of what counts; verdicts only ever name
revoked or not-yet-admitted authors, never a forked one, and every fork is reported. After a
full sync the healthy replicas hold the same changes and state, and every protected claim is
active on each of them.
"""

from __future__ import annotations

import functools
import shutil
import sqlite3
import stat
import sys
import tempfile
import warnings
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from statefuse import materialize
from statefuse.storage.store import StoreError
from statefuse.sync.changelog import Ignored
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import OwnFeedWarning, Replica, StoreDamagedError, key_path
from statefuse.sync.snapshot import SnapshotWarning

SPACE = "reliability"
CLOSED = "closed"
#: Extra stores that reuse an author's key, at most, per run.
MAX_EXTRA = 2
#: Backups kept per store (the oldest goes first).
MAX_BACKUPS = 2
SUBJECTS = ("alpha", "beta", "gamma")
#: Files that make up a store on disk, by suffix of its path.
STORE_FILES = ("", ".key", "-wal", "-shm")
PICK = st.integers(0, 7)
CLAIM = st.tuples(st.sampled_from(SUBJECTS), st.integers(0, 3))
#: Claims one step writes on one replica: (subject, value) each.
WRITES = st.lists(CLAIM, max_size=3)

F = TypeVar("F", bound=Callable[..., Any])


def _quietly(f: F) -> F:
    """Run a step without the warnings these accidents are expected to raise: own changes from
    elsewhere (a restored backup, a reused key) and snapshots ignored on a damaged store."""

    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OwnFeedWarning)
            warnings.simplefilter("ignore", SnapshotWarning)
            return f(*args, **kwargs)

    return run  # type: ignore[return-value]


def _held(r: Replica) -> set[bytes]:
    """Ids of the changes a replica keeps: accepted or parked in its pending area."""
    return {*r.change_ids(), *(c.change_id for c in r.pending())}


def _own(r: Replica) -> tuple[int, frozenset[bytes]]:
    """The highest seq of a replica's own feed and every change of it the replica keeps.
    (`last_change` alone names one branch of a feed forked at its top, whichever was loaded
    first, so it may differ after a reopen.)"""
    mine = frozenset(c.change_id for c in [*r.log.changes(), *r.pending()] if c.author == r.author)
    return r.last_change(r.author)[0], mine


def _stored_rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        (count,) = db.execute("SELECT count(*) FROM changes").fetchone()
    return int(count)


@dataclass(frozen=True)
class Ack:
    """An acknowledged claim: what `add_claim` returned and the change that carries it."""

    claim_id: bytes
    author: bytes
    prev: bytes | None


@dataclass(frozen=True)
class Backup:
    """A copy of a closed store's files, and what the store held when it was taken."""

    folder: Path
    held: frozenset[bytes]
    digest: bytes
    damaged: bool


@dataclass
class Slot:
    replica: Replica
    path: Path | None  # None: in memory
    backups: list[Backup] = field(default_factory=list)
    #: While damaged: its own feed (`_own`) and the stored row count when damage was seen.
    frozen: tuple[tuple[int, frozenset[bytes]], int] | None = None


class ReliabilityMachine(RuleBasedStateMachine):
    @initialize(writes=st.lists(WRITES, min_size=4, max_size=4))
    @_quietly
    def setup(self, writes: list[list[tuple[str, int]]]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="statefuse-reliability-"))
        self.now = 1_700_000_000_000
        self.files = 0
        root_key = SigningKey.from_seed(b"\x01" * 32)
        self.root_author = root_key.author
        root = Replica.memory(
            space=SPACE, key=root_key, mode=CLOSED, root=root_key.author, clock=self._clock
        )
        self.slots = [Slot(root, None)]
        for seed in (2, 3):
            path = self._new_path()
            key = SigningKey.from_seed(bytes([seed]) * 32)
            self.slots.append(Slot(self._create(path, key=key), path))
        member = Replica.memory(
            space=SPACE,
            key=SigningKey.from_seed(b"\x04" * 32),
            mode=CLOSED,
            root=root_key.author,
            clock=self._clock,
        )
        self.slots.append(Slot(member, None))
        for s in self.slots[1:]:
            root.admit(s.replica.author)
        for s in self.slots[1:]:
            s.replica.merge(root)
        self.extras = 0
        self.refusal_seen = False
        #: change_id -> the claim it carries, for every claim `add_claim` acknowledged.
        self.acks: dict[bytes, Ack] = {}
        #: Acknowledged changes a revocation does not keep (signed after it, or unseen by the root).
        self.unprotected: set[bytes] = set()
        #: Acknowledged changes whose every copy a flip or a restore destroyed, and their
        #: descendants (they can never be accepted again).
        self.lost: set[bytes] = set()
        self.revoked: set[bytes] = set()
        #: author -> every change id a revocation of it named as kept.
        self.keeps: dict[bytes, set[bytes]] = {}
        for s, claims in zip(self.slots, writes, strict=True):
            self._write_all(s.replica, claims)

    # --- helpers ---------------------------------------------------------------------------------

    def _clock(self) -> int:
        """A clock of the run's own: every reading is new, so two stores with one key that
        write the same claim still sign different changes (a fork, not a duplicate)."""
        self.now += 1
        return self.now

    def _new_path(self) -> Path:
        self.files += 1
        return self.folder / f"store-{self.files}.db"

    def _create(self, path: Path, **options: Any) -> Replica:
        r = Replica.open(
            path,
            space=SPACE,
            create=True,
            mode=CLOSED,
            root=self.root_author,
            clock=self._clock,
            **options,
        )
        assert stat.S_IMODE(key_path(path).stat().st_mode) == 0o600
        return r

    def _reopen(self, s: Slot) -> Replica:
        assert s.path is not None
        s.replica = Replica.open(s.path, clock=self._clock)
        assert s.replica.damage is not None or not s.replica.readonly
        return s.replica

    def _stores(self) -> list[Slot]:
        return [s for s in self.slots if s.path is not None]

    def _healthy(self) -> list[Slot]:
        return [s for s in self.slots if s.replica.damage is None]

    def _freeze(self, s: Slot) -> None:
        """Note a damaged store's own head and size: neither may grow until it is repaired."""
        r = s.replica
        assert s.path is not None and r.damage is not None and r.readonly
        s.frozen = (_own(r), _stored_rows(s.path))

    def _count_losses(self) -> None:
        """After a flip or a restore: changes no replica keeps any more are destroyed, and so
        is every change that follows one of them in its author's feed."""
        held: set[bytes] = set()
        for s in self.slots:
            held |= _held(s.replica)
        self.lost |= {cid for cid in self.acks if cid not in held}
        grew = True
        while grew:
            follow = {cid for cid, a in self.acks.items() if a.prev in self.lost} - self.lost
            self.lost |= follow
            grew = bool(follow)

    def _merge(self, dst: Replica, src: Replica) -> None:
        before = set(dst.change_ids())
        if dst.damage is not None:
            with pytest.raises(StoreDamagedError) as err:
                dst.merge(src)
            assert err.value.rule == "store-damaged"
            assert set(dst.change_ids()) == before
            return
        dst.merge(src)
        after = set(dst.change_ids())
        assert before <= after and set(src.change_ids()) <= after

    def _full_sync(self) -> None:
        for _ in range(2):
            for a in self.slots:
                for b in self.slots:
                    if a is not b and a.replica.damage is None:
                        self._merge(a.replica, b.replica)

    def _repair(self, s: Slot) -> None:
        r = s.replica
        damage = r.damage
        assert damage is not None
        held, digest, accepted = _held(r), r.state().digest(), r.change_ids()
        report = r.repair()
        event(f"repair left own changes waiting: {report.own_waiting > 0}")
        assert r.damage is None and not r.readonly
        assert (report.quarantined, report.parked) == (
            damage.failed + damage.failed_pending,
            damage.orphaned,
        )
        assert report.quarantined >= 1 and len(r.quarantine()) >= 1
        # nothing deleted: what verified stays accepted, what followed the damage is parked
        assert _held(r) == held and r.change_ids() == accepted
        assert r.state().digest() == digest
        s.frozen = None

    def _check_converged(self, slots: list[Slot]) -> None:
        first = slots[0].replica
        for s in slots[1:]:
            assert s.replica.change_ids() == first.change_ids()
            assert s.replica.state().digest() == first.state().digest()
        for s in slots:
            r = s.replica
            verdicts = r.verdicts()
            for cid, ack in self.acks.items():
                if cid in self.lost:
                    continue
                if cid in self.unprotected:
                    # signed after a revocation (or unseen by the root when it revoked)
                    assert cid not in r.log or verdicts.get(cid) is Ignored.REVOKED
                else:
                    assert cid in r.log and cid not in verdicts
                    assert r.state().is_active(ack.claim_id)

    # --- rules -----------------------------------------------------------------------------------

    @rule(i=PICK, claims=st.lists(CLAIM, min_size=1, max_size=3))
    @_quietly
    def write(self, i: int, claims: list[tuple[str, int]]) -> None:
        s = self.slots[i % len(self.slots)]
        r = s.replica
        if r.damage is None:
            self._write_all(r, claims)
            return
        assert s.path is not None
        rows = _stored_rows(s.path)
        subject, value = claims[0]
        with pytest.raises(StoreDamagedError) as err:
            r.add_claim("ns", subject, "pred", value)
        assert err.value.rule == "store-damaged" and "statefuse repair" in err.value.message
        with pytest.raises(StoreDamagedError):
            r.receive(self.slots[0].replica.all_change_bytes())
        assert _stored_rows(s.path) == rows

    def _write_all(self, r: Replica, claims: list[tuple[str, int]]) -> None:
        for subject, value in claims:
            self._write(r, subject, value)

    def _write(self, r: Replica, subject: str, value: int) -> None:
        own = [c.seq for c in r.log.changes() if c.author == r.author]
        op = r.add_claim("ns", subject, "pred", value)
        change = next(c for c in r.log.heads(r.author) if any(o.op_id == op.op_id for o in c.ops))
        # signed after the highest head of its own feed it knows: it never forks itself
        assert change.seq == max(own, default=0) + 1
        assert change.change_id in r.verdicts() or r.state().is_active(op.claim_id)
        self.acks[change.change_id] = Ack(op.claim_id, r.author, change.prev)
        if r.author in self.revoked:
            self.unprotected.add(change.change_id)

    @rule(i=PICK, j=PICK)
    @_quietly
    def sync_pair(self, i: int, j: int) -> None:
        a, b = self.slots[i % len(self.slots)], self.slots[j % len(self.slots)]
        if a is not b:
            self._merge(a.replica, b.replica)
            self._merge(b.replica, a.replica)

    @rule()
    @_quietly
    def full_sync(self) -> None:
        self._full_sync()
        self._check_converged(self._healthy())

    @rule()
    @_quietly
    def heal(self) -> None:
        """`statefuse repair --from URL` everywhere: repair each damaged store, then sync."""
        for s in self.slots:
            if s.replica.damage is not None:
                self._repair(s)
        self._full_sync()
        self._check_converged(self.slots)
        r = self.slots[0].replica
        event(f"healed with forks: {bool(r.forks())}")
        event(f"healed with revoked changes: {Ignored.REVOKED in r.verdicts().values()}")
        event(f"healed after losses: {bool(self.lost)}")

    @rule(i=PICK)
    @_quietly
    def backup(self, i: int) -> None:
        s = self._stores()[i % len(self._stores())]
        assert s.path is not None
        r = s.replica
        held, digest, damaged = _held(r), r.state().digest(), r.damage is not None
        own = _own(r)
        r.close()
        self.files += 1
        folder = self.folder / f"backup-{self.files}"
        folder.mkdir()
        for end in STORE_FILES:
            f = Path(f"{s.path}{end}")
            if f.exists():
                shutil.copy2(f, folder / f.name)
        r = self._reopen(s)
        assert _held(r) == held and r.state().digest() == digest
        assert (r.damage is not None) == damaged and _own(r) == own
        s.backups = [
            *s.backups[-(MAX_BACKUPS - 1) :],
            Backup(folder, frozenset(held), digest, damaged),
        ]

    @rule(i=PICK, k=PICK, claims=WRITES)
    @_quietly
    def restore(self, i: int, k: int, claims: list[tuple[str, int]]) -> None:
        """Restore a backup, then write before syncing: its feed forks where it reuses a seq."""
        stores = [s for s in self._stores() if s.backups]
        if not stores:
            return
        s = stores[i % len(stores)]
        assert s.path is not None
        b = s.backups[k % len(s.backups)]
        s.replica.close()
        for end in ("-wal", "-shm"):
            Path(f"{s.path}{end}").unlink(missing_ok=True)
        for end in STORE_FILES:
            f = b.folder / f"{s.path.name}{end}"
            if f.exists():
                shutil.copy2(f, Path(f"{s.path}{end}"))
        r = self._reopen(s)
        assert _held(r) == b.held and r.state().digest() == b.digest
        assert (r.damage is not None) == b.damaged
        s.frozen = None
        if r.damage is not None:
            self._freeze(s)
        self._count_losses()
        if r.damage is None:
            self._write_all(r, claims)

    @rule(i=PICK, pick=st.integers(0, 1000), at=st.integers(0, 10_000), mask=st.integers(1, 255))
    @_quietly
    def flip_bytes(self, i: int, pick: int, at: int, mask: int) -> None:
        s = self._stores()[i % len(self._stores())]
        assert s.path is not None
        r = s.replica
        intact = {c.data: c.change_id for c in [*r.log.changes(), *r.pending()]}
        held = _held(r)
        r.close()
        with closing(sqlite3.connect(s.path)) as db:
            rows = [
                (pos, data)
                for pos, data in db.execute("SELECT pos, data FROM changes ORDER BY pos")
                if data in intact
            ]
            if rows:
                pos, data = rows[pick % len(rows)]
                bad = bytearray(data)
                bad[at % len(bad)] ^= mask
                db.execute("UPDATE changes SET data = ? WHERE pos = ?", (bytes(bad), pos))
                db.commit()
        r = self._reopen(s)
        if not rows:
            return
        assert r.damage is not None and r.readonly
        # only the flipped change is gone; what followed it in its feed waits in pending
        assert _held(r) == held - {intact[data]}
        self._freeze(s)
        self._count_losses()

    @rule(i=PICK)
    @_quietly
    def repair(self, i: int) -> None:
        damaged = [s for s in self.slots if s.replica.damage is not None]
        if damaged:
            self._repair(damaged[i % len(damaged)])

    @rule(i=PICK, on_disk=st.booleans(), claims=WRITES)
    @_quietly
    def reuse_key(self, i: int, on_disk: bool, claims: list[tuple[str, int]]) -> None:
        """A second store with an author's key, writing before it syncs: a fork at seq 1."""
        if self.extras >= MAX_EXTRA:
            return
        src = self.slots[1 + i % (len(self.slots) - 1)]
        key = src.replica.key
        assert key is not None
        if on_disk:
            if src.path is not None and not self.refusal_seen:
                with pytest.raises(StoreError) as err:
                    self._create(self._new_path(), key=SigningKey.load(key_path(src.path)))
                assert (err.value.field, err.value.rule) == ("key", "key-bound-elsewhere")
                self.refusal_seen = True
            path = self._new_path()
            twin = self._create(path, key=key, adopt_key=True)
        else:
            path = None
            twin = Replica.memory(
                space=SPACE, key=key, mode=CLOSED, root=self.root_author, clock=self._clock
            )
        assert twin.author == src.replica.author and not twin.readonly
        self.slots.append(Slot(twin, path))
        self.extras += 1
        self._write_all(twin, claims)

    @rule(i=PICK)
    @_quietly
    def revoke(self, i: int) -> None:
        root = self.slots[0].replica
        authors = sorted({s.replica.author for s in self.slots[1:]})
        author = authors[i % len(authors)]
        # the default keeps every head the root knows: what it has not seen stops counting
        self.unprotected |= {
            cid for cid, a in self.acks.items() if a.author == author and cid not in root.log
        }
        self.keeps.setdefault(author, set()).update(root.heads(author))
        root.revoke(author)
        self.revoked.add(author)

    # --- invariants ------------------------------------------------------------------------------

    @invariant()
    def every_acknowledged_claim_is_kept_by_some_replica(self) -> None:
        held: set[bytes] = set()
        for s in self.slots:
            held |= _held(s.replica)
        missing = set(self.acks) - held - self.lost
        assert not missing, f"{len(missing)} acknowledged changes held nowhere"

    @invariant()
    def a_damaged_replica_never_signs_and_its_store_never_grows(self) -> None:
        for s in self.slots:
            r = s.replica
            if s.frozen is None:
                assert r.damage is None
                continue
            assert s.path is not None and r.damage is not None and r.readonly
            own, rows = s.frozen
            assert _own(r) == own
            assert _stored_rows(s.path) == rows

    @invariant()
    def incremental_state_equals_a_full_materialize(self) -> None:
        for s in self.slots:
            r = s.replica
            assert r.state().digest() == materialize(r.log.ops(), registry=r.registry).digest()

    @invariant()
    def forks_are_reported_and_never_punished(self) -> None:
        for s in self.slots:
            r = s.replica
            trust = r.trust()
            verdicts = r.verdicts()
            for cid, why in verdicts.items():
                c = r.log.get(cid)
                assert c is not None
                if why is Ignored.REVOKED:
                    assert c.author in self.revoked
                else:
                    assert why is Ignored.UNKNOWN_AUTHOR
                    assert c.author not in trust.admitted and c.author != self.root_author
            # a protected claim counts wherever its author's admission and kept heads are
            for cid, ack in self.acks.items():
                if cid in self.unprotected or cid not in r.log:
                    continue
                if ack.author in trust.admitted and all(
                    k in r.log for k in self.keeps.get(ack.author, ())
                ):
                    assert cid not in verdicts
            seen: dict[tuple[bytes, int], int] = {}
            for c in r.log.changes():
                seen[(c.author, c.seq)] = seen.get((c.author, c.seq), 0) + 1
            forked = {k for k, n in seen.items() if n > 1}
            assert {(f.author, f.seq) for f in r.forks()} == forked

    def teardown(self) -> None:
        if not hasattr(self, "slots"):
            return
        try:
            if sys.exc_info()[1] is None:  # a failed step is reported as it is, not healed over
                self.heal()
        finally:
            for s in self.slots:
                s.replica.close()
            shutil.rmtree(self.folder, ignore_errors=True)


TestReliabilityMachine = ReliabilityMachine.TestCase
# An example opens, copies and verifies SQLite stores (~0.12 s of CPU): 30 runs by default and
# 120 under CI=true keep the machine within ~5 s and ~30 s on an idle machine.
TestReliabilityMachine.settings = settings(
    settings.default,
    max_examples=min(settings.default.max_examples, 20 + settings.default.max_examples // 10),
    stateful_step_count=30,
)
