"""Versions: a named point of a replica's history (SEMANTICS §9, "known time").

A `Version` says, for each author, which of its changes a replica had accepted: the *heads* of
the author's feed (the accepted changes no other accepted change names as ``prev``; one per
branch of a forked feed), each as ``(seq, change_id)``. The changes a version *covers* are its
heads and all their ancestors by ``prev``. A version names changes, never wall time, so
``state(at=version)`` is one answer on every replica that holds those changes.

"Counted so far" is read as *accepted*: a change that waits for its predecessor (pending) or
failed verification (quarantined) is never covered. A covered change that trust does not count
(an author a closed space has not admitted, a change outside a revocation's kept set) is
covered all the same, and the trust *in force at the version* (the root's trust ops among the
covered changes) decides whether it counts there, exactly as the whole log's trust decides
for the current state. So `counted` is a pure function of the covered set.

The value type is pure: ``str(v)`` / `Version.parse` and `Version.to_json` / `from_json` round
trip, ``v1 <= v2`` reads "v2 covers v1" and ``v1 | v2`` is their join. The order and the join
read each author's feed as a line, which it is in a healthy space: a head is covered by the
same head or by a head of the same author with a higher seq. On a forked feed (reported
everywhere, SEMANTICS §8) that is not always so, since a pure value cannot tell which branch a
change is on; `covered` (and so ``state(at=...)``) always follows the real ``prev`` links.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statefuse.registry.error import InputError
from statefuse.sync.change import VerifiedChange
from statefuse.sync.changelog import Ignored, verdict
from statefuse.sync.trust import TRUST_OP_TYPES, TrustMode, TrustState, trust_state

#: The text form's prefix (the layout's version: a later layout gets another).
PREFIX = "v1:"
#: The JSON form's layout number.
FORMAT = 1

_ID_LEN = 32

Head = tuple[int, bytes]


class VersionError(InputError, ValueError):
    """A version text, JSON document or value that breaks its format (``field`` and ``rule``
    say where and which rule)."""


class UnknownVersionError(VersionError, LookupError):
    """A version naming changes this replica does not hold (``missing`` lists them as
    ``(author, seq, change_id)``): sync from a replica that has them first."""

    def __init__(
        self, field: str, rule: str, message: str, missing: tuple[tuple[bytes, int, bytes], ...]
    ) -> None:
        super().__init__(field, rule, message)
        self.missing = missing

    def __reduce__(self) -> Any:
        return (type(self), (self.field, self.rule, self.message, self.missing))


def _dominated(head: Head, heads: Iterable[Head]) -> bool:
    """Whether another head (of the same author) covers ``head`` in the line reading."""
    return any(h[0] > head[0] for h in heads)


@dataclass(frozen=True, slots=True)
class Version:
    """For each author, the heads of its feed: ``((author, ((seq, change_id), ...)), ...)``,
    authors and heads sorted. Build one with `Version.of`, `Version.parse`, `from_json`, or
    `Replica.version`."""

    heads: tuple[tuple[bytes, tuple[Head, ...]], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.heads, tuple):
            raise VersionError("heads", "heads-type", "expected a tuple of (author, heads)")
        last = b""
        for entry in self.heads:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise VersionError("heads", "heads-type", "each entry is (author, heads)")
            author, hs = entry
            _check_id(author, "author")
            if author <= last:
                raise VersionError("heads", "sorted", "authors must be sorted and distinct")
            last = author
            if not isinstance(hs, tuple) or not hs:
                raise VersionError("heads", "heads-type", "each author names at least one head")
            prev: Head | None = None
            for h in hs:
                if not (isinstance(h, tuple) and len(h) == 2):
                    raise VersionError("heads", "heads-type", "a head is (seq, change_id)")
                _check_seq(h[0])
                _check_id(h[1], "change_id")
                if prev is not None and h <= prev:
                    raise VersionError("heads", "sorted", "heads must be sorted and distinct")
                prev = h

    @classmethod
    def of(cls, heads: Mapping[bytes, Iterable[Head]]) -> Version:
        """The version with these heads per author (sorted and de-duplicated here; an author
        with no heads is left out). Raises VersionError for an id or seq that is not one."""
        entries = []
        for author in sorted(heads):
            hs = tuple(sorted(set(heads[author])))
            if hs:
                entries.append((author, hs))
        return cls(tuple(entries))

    def authors(self) -> tuple[bytes, ...]:
        return tuple(a for a, _ in self.heads)

    def heads_of(self, author: bytes) -> tuple[Head, ...]:
        """The heads of ``author`` (empty: the version covers none of its changes)."""
        for a, hs in self.heads:
            if a == author:
                return hs
        return ()

    def __bool__(self) -> bool:
        return bool(self.heads)

    # --- order -----------------------------------------------------------------------------------

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        theirs = dict(other.heads)
        for author, hs in self.heads:
            them = theirs.get(author, ())
            for h in hs:
                if h not in them and not _dominated(h, them):
                    return False
        return True

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return other <= self

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self <= other and not other <= self

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return other < self

    def __or__(self, other: object) -> Version:
        """The join: every head of either version that no head of the same author with a
        higher seq covers (the least version covering both, in the line reading)."""
        if not isinstance(other, Version):
            return NotImplemented
        merged: dict[bytes, set[Head]] = {}
        for author, hs in (*self.heads, *other.heads):
            merged.setdefault(author, set()).update(hs)
        return Version.of({a: [h for h in hs if not _dominated(h, hs)] for a, hs in merged.items()})

    # --- text and JSON -------------------------------------------------------------------------

    def __str__(self) -> str:
        """``v1:`` then ``AUTHOR=SEQ.CHANGE[,SEQ.CHANGE]`` per author, joined by ``;`` (ids in
        hex): stable, one token on a command line."""
        return PREFIX + ";".join(
            f"{a.hex()}=" + ",".join(f"{s}.{c.hex()}" for s, c in hs) for a, hs in self.heads
        )

    @classmethod
    def parse(cls, text: str, *, field: str = "version") -> Version:
        """The version ``str(v)`` printed. Raises VersionError naming ``field`` and the rule."""
        if not isinstance(text, str):
            raise VersionError(field, "version-type", f"expected a str, got {type(text).__name__}")
        text = text.strip()
        if not text.startswith(PREFIX):
            raise VersionError(
                field, "version-prefix", f"a version starts with {PREFIX!r}, got {text[:20]!r}"
            )
        body = text[len(PREFIX) :]
        heads: dict[bytes, list[Head]] = {}
        for part in body.split(";") if body else ():
            author_hex, eq, rest = part.partition("=")
            if not eq or not rest:
                raise VersionError(field, "version-entry", f"{part[:30]!r} is not AUTHOR=SEQ.ID")
            author = _hex(author_hex, field, "author")
            if author in heads:
                raise VersionError(field, "version-entry", f"author {author_hex[:12]}… twice")
            hs = heads[author] = []
            for item in rest.split(","):
                seq_text, dot, id_hex = item.partition(".")
                if not dot or not seq_text.isdigit() or not seq_text.isascii():
                    raise VersionError(field, "version-head", f"{item[:30]!r} is not SEQ.ID")
                hs.append((int(seq_text), _hex(id_hex, field, "change_id")))
        try:
            return cls.of(heads)
        except VersionError as e:
            raise VersionError(field, e.rule, e.message) from None

    def to_json(self) -> dict[str, Any]:
        """``{"format": 1, "heads": {author_hex: [[seq, change_hex], ...]}}``."""
        return {
            "format": FORMAT,
            "heads": {a.hex(): [[s, c.hex()] for s, c in hs] for a, hs in self.heads},
        }

    @classmethod
    def from_json(cls, document: object, *, field: str = "version") -> Version:
        """The version `to_json` made (a dict, or its JSON text). Raises VersionError."""
        if isinstance(document, str):
            try:
                document = json.loads(document)
            except ValueError:
                raise VersionError(field, "version-json", "not JSON") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise VersionError(
                field, "version-format", f'expected {{"format": {FORMAT}, "heads": {{...}}}}'
            )
        raw = document.get("heads")
        if not isinstance(raw, dict):
            raise VersionError(field, "version-format", '"heads" maps author hex to heads')
        heads: dict[bytes, list[Head]] = {}
        for author_hex, hs in raw.items():
            author = _hex(author_hex, field, "author")
            if not isinstance(hs, list):
                raise VersionError(field, "version-head", "an author's heads are a list")
            out = heads[author] = []
            for h in hs:
                if not (isinstance(h, list) and len(h) == 2 and isinstance(h[1], str)):
                    raise VersionError(field, "version-head", "a head is [seq, change_hex]")
                if not isinstance(h[0], int) or isinstance(h[0], bool):
                    raise VersionError(field, "version-head", "a head's seq is an integer")
                out.append((h[0], _hex(h[1], field, "change_id")))
        try:
            return cls.of(heads)
        except VersionError as e:
            raise VersionError(field, e.rule, e.message) from None


def _check_id(value: object, what: str) -> None:
    if not isinstance(value, bytes) or len(value) != _ID_LEN:
        raise VersionError("heads", f"{what}-id", f"a {what} is {_ID_LEN} bytes")


def _check_seq(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise VersionError("heads", "seq", "a seq is an integer >= 1")


def _hex(text: str, field: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raw = b""
    if len(raw) != _ID_LEN or len(text) != 2 * _ID_LEN:
        raise VersionError(field, f"{what}-id", f"{what} {text[:16]!r} is not {_ID_LEN} bytes hex")
    return raw


# --- a time as a version: the changes this replica had received by then (local) ---------------


def parse_time(text: str, *, field: str = "at") -> int:
    """An ISO 8601 instant (``2026-11-27T10:00:00Z``, an offset, or a date alone, read as
    midnight UTC) -> ms since the epoch. A time without a zone is refused: it names no one
    instant. Raises VersionError naming ``field`` (rule ``time``)."""
    from datetime import datetime, timedelta, timezone

    raw = text.strip()
    try:
        when = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith(("Z", "z")) else raw)
    except ValueError:
        raise VersionError(
            field, "time", f"{text!r} is neither a version nor an ISO 8601 time"
        ) from None
    if len(raw) == 10:  # a date alone
        when = when.replace(tzinfo=timezone.utc)
    if when.tzinfo is None:
        raise VersionError(
            field, "time-zone", f"{text!r} has no time zone: add Z (UTC) or an offset"
        )
    return (when - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)


def received_by(
    ms: int, marks: Sequence[tuple[int, int]], positions: Iterable[tuple[int, bytes]]
) -> set[bytes]:
    """The ids of the accepted changes (``positions``: ``(position, change_id)`` in append
    order) received at or before ``ms``, by the store's receive ``marks`` (`ReceiveMarks`):
    every change up to the last mark at or before ``ms``. Changes past the last mark (none
    recorded yet) are never counted."""
    upto = 0
    for pos, at in marks:
        if at <= ms:
            upto = max(upto, pos)
    return {cid for pos, cid in positions if pos <= upto}


# --- a version recorded in an op (decisions: ``DecisionAdded.made_at``) ------------------------


def made_at_of(version: Version) -> tuple[tuple[bytes, int, bytes], ...]:
    """``version`` as the plain canonical data an op records: its heads as ``(author, seq,
    change_id)``, sorted (the core op layer does not import this module)."""
    return tuple((a, s, c) for a, hs in version.heads for s, c in hs)


def version_from_made_at(heads: Iterable[Sequence[object]]) -> Version | None:
    """The `Version` an op recorded with `made_at_of` (None when it recorded none). Raises
    VersionError for heads that are not one (a well-formed op never holds such)."""
    out: dict[bytes, list[Head]] = {}
    for h in heads:
        author, seq, change = h
        if not isinstance(author, bytes) or not isinstance(change, bytes):
            raise VersionError("made_at", "heads-type", "a head is (author, seq, change_id)")
        if not isinstance(seq, int):
            raise VersionError("made_at", "seq", "a seq is an integer >= 1")
        out.setdefault(author, []).append((seq, change))
    return Version.of(out) if out else None


def decision_version(decision: object) -> Version | None:
    """The version a decision was made at (``made_at``), or None when it recorded none."""
    return version_from_made_at(getattr(decision, "made_at", ()))


# --- what a version covers (needs the changes) -------------------------------------------------


def version_of(tips: Iterable[VerifiedChange]) -> Version:
    """The version whose heads are ``tips`` (changes no other names as ``prev``)."""
    heads: dict[bytes, list[Head]] = {}
    for c in tips:
        heads.setdefault(c.author, []).append((c.seq, c.change_id))
    return Version.of(heads)


def covered(
    version: Version, get: Callable[[bytes], VerifiedChange | None], *, field: str = "at"
) -> dict[bytes, VerifiedChange]:
    """change_id -> change, for every change ``version`` covers: its heads and their ancestors
    by ``prev``, looked up with ``get``. Raises UnknownVersionError naming the heads that
    ``get`` does not have, VersionError for a head whose author or seq differ from the
    change's."""
    missing: list[tuple[bytes, int, bytes]] = []
    out: dict[bytes, VerifiedChange] = {}
    for author, hs in version.heads:
        for seq, cid in hs:
            c = get(cid)
            if c is None:
                missing.append((author, seq, cid))
                continue
            if c.author != author or c.seq != seq:
                raise VersionError(
                    field,
                    "head-matches-change",
                    f"change {cid.hex()[:12]}… is seq {c.seq} of author {c.author.hex()[:12]}…,"
                    f" the version says seq {seq} of {author.hex()[:12]}…",
                )
            while c is not None and c.change_id not in out:
                out[c.change_id] = c
                c = get(c.prev) if c.prev is not None else None
    if missing:
        named = ", ".join(f"{a.hex()[:12]}… seq {s} ({cid.hex()[:12]}…)" for a, s, cid in missing)
        raise UnknownVersionError(
            field,
            "known-changes",
            f"this replica lacks {len(missing)} change(s) the version names: {named};"
            " sync from a replica that holds them",
            tuple(missing),
        )
    return out


def counted(
    changes: Mapping[bytes, VerifiedChange], *, root: bytes | None, mode: TrustMode
) -> Iterator[VerifiedChange]:
    """The changes of ``changes`` that count under the trust in force among them (the root's
    trust ops they hold; revocations keep the kept changes and their ancestors among them),
    in change-id order: what `ChangeLog.verdicts` says of a log holding exactly these."""
    trust = _trust_among(changes, root, mode)
    kept: dict[bytes, frozenset[bytes]] = {}
    for author, keeps in trust.keeps.items():
        sets = [_ancestry(changes, author, keep) for keep in keeps]
        kept[author] = frozenset.intersection(*sets)
    for cid in sorted(changes):
        c = changes[cid]
        why: Ignored | None = verdict(c, trust, kept)
        if why is None:
            yield c


def _trust_among(
    changes: Mapping[bytes, VerifiedChange], root: bytes | None, mode: TrustMode
) -> TrustState:
    key = root if root is not None else b""
    ops = [
        op
        for c in changes.values()
        if c.author == key
        for op in c.ops
        if isinstance(op, TRUST_OP_TYPES)
    ]
    return trust_state(key, mode, ops)


def _ancestry(
    changes: Mapping[bytes, VerifiedChange], author: bytes, keep: frozenset[bytes]
) -> frozenset[bytes]:
    seen: set[bytes] = set()
    for cid in keep:
        c = changes.get(cid)
        while c is not None and c.author == author and c.change_id not in seen:
            seen.add(c.change_id)
            c = changes.get(c.prev) if c.prev is not None else None
    return frozenset(seen)
