"""Replica snapshots: a replica's accepted changes, already decoded, kept in its store so that
reopening a large store neither verifies nor decodes every stored change again.

A snapshot is a cache of what the replica verified before, never a source of truth: the changes
stay in the store, ``statefuse verify`` (and `Load.VERIFY`) re-check all of them without reading
it, and a snapshot that does not check out is ignored in favour of the full reload (the replica
reports why with a `SnapshotWarning`; nothing is raised to the user).

Invariant: restoring a snapshot and then receiving the stored changes it does not cover gives
the change log and state that verifying every stored change gives. That holds because a snapshot
only ever holds changes the replica had accepted, in store order, bound to the exact stored
bytes it covers, and because everything the replica derives from them (trust verdicts, the
materialized state, the writers' clocks) is recomputed from the restored changes.

What a snapshot must pass to be used, in the order checked (`SnapshotError.rule`):

- ``snapshot-format``: the magic and a header that fits; ``snapshot-version``: the format
  version is `SNAPSHOT_VERSION`;
- ``snapshot-checksum``: blake3 of the payload matches (a damaged or truncated blob);
- ``snapshot-key``: blake3 keyed with a secret derived from the replica's author key
  (`SigningKey.derive_secret` with `KEY_CONTEXT`) matches, so a blob this key did not write is
  never unpickled;
- ``snapshot-identity``: space, author, registry fingerprint, trust mode, root and the layout
  of the op types (their field lists) are those of the replica opening it;
- ``snapshot-stale``: the store holds exactly the changes it covers: as many at positions
  ``<= upto``, with the same bytes (blake3 over them), so a store rolled back or altered since
  the snapshot was written is noticed.

Format (version 1)::

    MAGIC (8 bytes) ‖ version (u16, big endian) ‖ checksum (32) ‖ mac (32) ‖ payload

``checksum`` is blake3(payload); ``mac`` is keyed blake3 over ``MAGIC ‖ version ‖ payload``. The
payload is a pickle (protocol 5) of builtins only (ints, floats, strs, bytes, None, bools, lists,
tuples, dicts): ops travel as one column per field and type, rebuilt with C-level passes. It is
read after the mac checks, by an unpickler that resolves no global at all, so even a payload
forged by someone holding the key cannot name a class or a function to call.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import accumulate, chain, compress, repeat
from operator import attrgetter
from typing import Any

import blake3

from statefuse.core.op import (
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Layer,
    Op,
    _context,
    _value,
    decode_op,
)
from statefuse.registry.error import StateFuseError
from statefuse.registry.value import FrozenList, FrozenMap, frozen_canonical, plain_value
from statefuse.sync.change import VerifiedChange
from statefuse.sync.key import SigningKey

#: Version of the snapshot format; a snapshot of another version is ignored (and rewritten).
SNAPSHOT_VERSION = 1
#: First bytes of every snapshot.
MAGIC = b"SFSNAPSH"
#: BLAKE3 key-derivation context of the secret that authenticates snapshots.
KEY_CONTEXT = "statefuse 2026-01 replica snapshot authentication v1"

_HEADER = len(MAGIC) + 2 + 32 + 32
#: Op types stored as columns, by their one-byte code; any other op (trust ops, registered
#: extras) is stored as its canonical bytes under `_OTHER` and decoded again.
_CORE: tuple[type[Any], ...] = (EvidenceAdded, ClaimAdded, ClaimRetracted, DecisionAdded)
_OTHER = len(_CORE)
_CODE: dict[type[Any], int] = {t: i for i, t in enumerate(_CORE)}
#: Enum-valued fields travel as their values.
_ENUMS: dict[str, type[Enum]] = {"layer": Layer}
_PLAIN = frozenset({type(None), bool, int, float, str, bytes, tuple, list, dict})
#: Value fields travel as plain lists and dicts (the reader names no class) and are frozen again
#: on the way back, as every op holds them (SEMANTICS §1).
_FROZEN = frozenset({FrozenList, FrozenMap})
_CONTAINERS = frozenset({list, dict})
_CHANGE_FIELDS = (
    "author",
    "seq",
    "prev",
    "registry",
    "change_id",
    "signature",
    "op_ids",
    "version",
)


def _value_fields(t: type[Any]) -> frozenset[str]:
    """Fields holding frozen maps or lists: values, and a claim's context dimensions."""
    return frozenset(name for name, check in t._SCHEMA if check is _value or check is _context)


class Load(Enum):
    """How a replica builds its memory when it opens a store."""

    #: Open on the store's derived state, loading no history, when it covers every stored
    #: change (`statefuse.storage.storeindex`); else, and whenever a call needs the history later,
    #: as `SNAPSHOT` (the default).
    INDEX = "index"
    #: Load the history now: restore from a valid snapshot and verify only the changes stored
    #: after it.
    SNAPSHOT = "snapshot"
    #: Ignore any snapshot and verify every stored change again.
    VERIFY = "verify"


class SnapshotError(StateFuseError):
    """A snapshot that cannot be used (``rule`` says which check failed). The replica never
    lets it escape: it reports it as a `SnapshotWarning` and reloads in full."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        self.message = message
        super().__init__(f"{message} ({rule})")


class SnapshotWarning(UserWarning):
    """A snapshot was ignored (``rule`` says why) or could not be saved; the replica is right
    either way, only slower to open."""

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"{message} ({rule})")


@dataclass(frozen=True, slots=True)
class Identity:
    """What a snapshot belongs to: it is used only by a replica with all of these."""

    space: str
    author: bytes
    registry: bytes
    mode: str
    root: bytes | None


@dataclass(frozen=True, slots=True)
class Restored:
    """The changes of a snapshot (in store order), their ops of the core types grouped by type,
    and their other ops (trust ops, registered extras)."""

    changes: list[VerifiedChange]
    by_type: dict[type[Any], list[Op]]
    others: list[Op]


def _layout() -> bytes:
    parts = [(t.KIND, tuple(name for name, _ in t._SCHEMA)) for t in _CORE]
    enums = [(name, tuple(m.value for m in e)) for name, e in sorted(_ENUMS.items())]
    return blake3.blake3(repr((parts, enums, _CHANGE_FIELDS)).encode()).digest()


#: Changes whenever an op type gains, loses or reorders a field: columns depend on it.
LAYOUT = _layout()


def stored_digest(datas: Sequence[bytes]) -> bytes:
    """blake3 over the stored bytes of the changes a snapshot covers, each length-prefixed."""
    h = blake3.blake3()
    for d in datas:
        h.update(len(d).to_bytes(8, "big"))
        h.update(d)
    return h.digest()


def _secret(key: SigningKey) -> bytes:
    return key.derive_secret(KEY_CONTEXT)


def _mac(secret: bytes, version: bytes, payload: bytes | memoryview) -> bytes:
    h = blake3.blake3(MAGIC, key=secret)
    h.update(version)
    h.update(payload)
    return h.digest()


# --- writing ------------------------------------------------------------------------------------


def encode_snapshot(
    changes: Sequence[VerifiedChange], *, key: SigningKey, identity: Identity, upto: int
) -> bytes:
    """The snapshot of ``changes`` (accepted, in store order, exactly the stored changes at
    positions ``<= upto``), authenticated with ``key``.

    Raises SnapshotError (rule ``snapshot-plain``) if an op holds something other than plain
    builtins, which the restricted reader would refuse.
    """
    ops: list[Op] = list(chain.from_iterable(c.ops for c in changes))
    kinds = bytes(map(_CODE.get, map(type, ops), repeat(_OTHER)))
    columns = []
    for code, t in enumerate(_CORE):
        group = list(compress(ops, map(code.__eq__, kinds)))
        cols = []
        for name in (*(n for n, _ in t._SCHEMA), "op_id"):
            col: list[Any] = list(map(attrgetter(name), group))
            enum = _ENUMS.get(name)
            if enum is not None:
                col = list(map({m: m.value for m in enum}.__getitem__, col))
            if name in _value_fields(t) and not _FROZEN.isdisjoint(map(type, col)):
                col = list(map(plain_value, col))
            if not set(map(type, col)) <= _PLAIN:
                raise SnapshotError("snapshot-plain", f"{t.KIND}.{name} holds a non-plain value")
            cols.append(_pack(col))
        columns.append(cols)
    others = [op.encode() for op in compress(ops, map(_OTHER.__eq__, kinds))]
    payload = pickle.dumps(
        {
            "space": identity.space,
            "author": identity.author,
            "registry": identity.registry,
            "mode": identity.mode,
            "root": identity.root,
            "layout": LAYOUT,
            "upto": upto,
            "count": len(changes),
            "digest": stored_digest([c.data for c in changes]),
            "changes": [[getattr(c, f) for c in changes] for f in _CHANGE_FIELDS],
            "nops": [len(c.ops) for c in changes],
            "kinds": kinds,
            "columns": columns,
            "others": others,
        },
        protocol=5,
    )
    version = SNAPSHOT_VERSION.to_bytes(2, "big")
    checksum = blake3.blake3(payload).digest()
    return MAGIC + version + checksum + _mac(_secret(key), version, payload) + payload


def _pack(col: list[Any]) -> list[Any] | tuple[Any, int]:
    """A column, or ``(value, n)`` for one value throughout (an author, a namespace, empty
    lists...): stored once, and shared again by every op on the way back."""
    if col and col.count(col[0]) == len(col) and len(set(map(type, col))) == 1:
        return (col[0], len(col))
    return col


def _unpack(col: Any) -> list[Any]:
    if type(col) is tuple and len(col) == 2 and type(col[1]) is int:
        return [col[0]] * col[1]
    if type(col) is not list:
        raise SnapshotError("snapshot-format", "a column is neither a list nor a constant")
    return col


# --- reading ------------------------------------------------------------------------------------


class _NoGlobals(pickle.Unpickler):
    """Plain containers and scalars need no global; anything that names one is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise SnapshotError("snapshot-format", f"the payload names {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise SnapshotError("snapshot-format", "the payload holds a persistent id")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An authenticated snapshot, not yet bound to the store's bytes (see `restore`)."""

    upto: int
    count: int
    digest: bytes
    _payload: dict[str, Any]

    def restore(self, space: str, datas: list[bytes]) -> Restored:
        """The changes, given the stored bytes at positions ``<= upto`` in order.

        Raises SnapshotError (``snapshot-stale``) if they are not the bytes the snapshot covers,
        or (``snapshot-format``) if the payload is inconsistent.
        """
        if len(datas) != self.count:
            raise SnapshotError(
                "snapshot-stale",
                f"it covers {self.count} changes up to position {self.upto}, the store holds"
                f" {len(datas)} there (rolled back or altered)",
            )
        if stored_digest(datas) != self.digest:
            raise SnapshotError(
                "snapshot-stale", "the stored changes differ from those it was written from"
            )
        p = self._payload
        kinds: bytes = p["kinds"]
        groups: list[list[Any]] = []
        for t, cols in zip(_CORE, p["columns"], strict=True):
            groups.append(_build(t, cols))
        groups.append([decode_op(b) for b in p["others"]])
        counts = [kinds.count(code) for code in range(len(groups))]
        if counts != list(map(len, groups)) or sum(counts) != len(kinds):
            raise SnapshotError("snapshot-format", "op kinds and columns disagree")
        if counts[_OTHER] == 0 and max(counts) == len(kinds):
            ops = groups[counts.index(len(kinds))]
        else:
            its = [iter(g) for g in groups]
            ops = list(map(next, map(its.__getitem__, kinds)))
        nops: list[int] = p["nops"]
        fields = p["changes"]
        if len(nops) != self.count or any(len(f) != self.count for f in fields):
            raise SnapshotError("snapshot-format", "change columns disagree")
        if sum(nops) != len(ops):
            raise SnapshotError("snapshot-format", "op counts disagree")
        ends = list(accumulate(nops))
        starts = [0, *ends[:-1]] if ends else []
        op_tuples = [tuple(ops[a:b]) for a, b in zip(starts, ends, strict=True)]
        changes = list(map(object.__new__, repeat(VerifiedChange, self.count)))
        columns = dict(zip(_CHANGE_FIELDS, fields, strict=True))
        columns["space"] = [space] * self.count
        columns["ops"] = op_tuples
        columns["data"] = datas
        for name, col in columns.items():
            any(map(_setter(VerifiedChange, name), changes, col))
        return Restored(changes, dict(zip(_CORE, groups, strict=False)), groups[_OTHER])


def _setter(t: type[Any], name: str) -> Any:
    return t.__dict__[name].__set__


def _build(t: type[Any], cols: list[list[Any]]) -> list[Any]:
    names = (*(n for n, _ in t._SCHEMA), "op_id")
    cols = [_unpack(c) for c in cols]
    if len(cols) != len(names):
        raise SnapshotError("snapshot-format", f"{t.KIND} has {len(cols)} columns")
    n = len(cols[-1])
    if any(len(c) != n for c in cols):
        raise SnapshotError("snapshot-format", f"{t.KIND} columns differ in length")
    ops = list(map(object.__new__, repeat(t, n)))
    for name, col in zip(names, cols, strict=True):
        enum = _ENUMS.get(name)
        if enum is not None:
            members = {m.value: m for m in enum}
            try:
                col = list(map(members.__getitem__, col))
            except (KeyError, TypeError):
                raise SnapshotError("snapshot-format", f"{t.KIND}.{name}: unknown value") from None
        if name in _value_fields(t) and not _CONTAINERS.isdisjoint(map(type, col)):
            col = list(map(frozen_canonical, col))
        any(map(_setter(t, name), ops, col))
    return ops


def open_snapshot(blob: bytes, *, key: SigningKey, identity: Identity, upto: int) -> Snapshot:
    """Check a stored snapshot's header, checksum, mac and identity (see the module docstring)
    and read its payload. ``upto`` is the position the store recorded next to it.

    Raises SnapshotError naming the first check that fails.
    """
    if len(blob) < _HEADER or blob[: len(MAGIC)] != MAGIC:
        raise SnapshotError("snapshot-format", "not a snapshot (magic or length)")
    at = len(MAGIC)
    version = blob[at : at + 2]
    if int.from_bytes(version, "big") != SNAPSHOT_VERSION:
        raise SnapshotError(
            "snapshot-version",
            f"format version {int.from_bytes(version, 'big')}, this release reads"
            f" {SNAPSHOT_VERSION}",
        )
    checksum = blob[at + 2 : at + 34]
    mac = blob[at + 34 : _HEADER]
    payload = memoryview(blob)[_HEADER:]
    if blake3.blake3(payload).digest() != checksum:
        raise SnapshotError("snapshot-checksum", "damaged or truncated")
    if _mac(_secret(key), version, payload) != mac:
        raise SnapshotError("snapshot-key", "not written with this replica's author key")
    try:
        p = _NoGlobals(io.BytesIO(payload)).load()
    except SnapshotError:
        raise
    except Exception as exc:  # a payload this release cannot read is just not usable
        raise SnapshotError("snapshot-format", f"unreadable payload: {exc}") from None
    if type(p) is not dict:
        raise SnapshotError("snapshot-format", "the payload is not a map")
    found = tuple(p.get(f) for f in ("space", "author", "registry", "mode", "root"))
    wanted = (identity.space, identity.author, identity.registry, identity.mode, identity.root)
    if found != wanted or p.get("layout") != LAYOUT:
        raise SnapshotError(
            "snapshot-identity",
            "written for another space, author, registry, trust setup or op layout",
        )
    if p.get("upto") != upto or type(p.get("count")) is not int:
        raise SnapshotError("snapshot-format", "its position differs from the store's record")
    return Snapshot(upto, p["count"], p["digest"], p)
