"""Scrub residue: what the clean-context scrub needs of a retracted claim whose body moved out.

Compaction (`sync.archive`) moves the bodies of retracted claims to an archive. The scrub
(`statefuse.reading.scrub`) still has to find such a claim's value in the free text of a working set
and name the claim it scrubbed, for every lens, exactly as before the move. So each such claim
leaves a residue behind, kept in the live store and handed to the index (`Index.residue`):

- ``op_id``, ``claim_ref``, ``reasserts``: which retractions retract it (a retraction that
  arrives after the move still counts: it can name a replacing claim); ``claim_ref`` is kept
  as its first `TAG_BYTES` bytes (a BLAKE3 output: as unique as the fingerprint);
- ``visibility``, ``scope``, ``expires``: what a lens tests before it may see the claim;
- ``fingerprint`` (a 16-byte BLAKE2b of the folded value), ``length`` (its characters) and
  ``tag`` (a 16-bit checksum of its first characters, the anchor `find` slices text by): the
  scrub looks at the same slices of a text it looked at before (by length, under an anchor) and
  tells a value by its fingerprint instead of its text. Neither the value nor its anchor is
  kept: a residue says which claim was scrubbed, not what it said.
- ``locus``: the claim's place (`state.locus_of`, its first `TAG_BYTES` bytes), so a read of
  a few loci takes their residue.

Invariant: the residue of a claim is a pure function of the claim (`scrub.residue_of`); two
folded values match the same slices of every text iff their fingerprints agree (up to a
BLAKE2b collision).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import msgpack

from statefuse.core.error import EncodingError

#: Bytes of a folded value's fingerprint.
FINGERPRINT_BYTES = 16
#: Bytes kept of a claim ref and of a locus (both BLAKE3 outputs, so their prefixes are as
#: unlikely to collide as a fingerprint): a residue costs what the scrub needs, no more.
TAG_BYTES = 16


def ref_tag(claim_ref: bytes) -> bytes:
    """What a residue keeps of a claim ref (and what a retraction's target ref is matched by)."""
    return claim_ref[:TAG_BYTES]


def locus_tag(locus: bytes) -> bytes:
    """What a residue keeps of a locus (and what a read's loci are matched by)."""
    return locus[:TAG_BYTES]


#: The residue's stored form (`encode_residue`): a version, then one row per claim.
RESIDUE_FORMAT = 1
#: How a stored residue of this format starts (msgpack: a pair, then the format).
_HEAD = bytes([0x92, RESIDUE_FORMAT])


def fingerprint(folded_value: str) -> bytes:
    """The fingerprint of a folded value (`scrub.folded`)."""
    data = folded_value.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=FINGERPRINT_BYTES).digest()


def anchor_tag(anchor: str) -> int:
    """The 16-bit tag of a value's first characters: which lengths a text's slice at one
    position is looked up with (a shared tag only costs a lookup that finds nothing)."""
    return zlib.crc32(anchor.encode("utf-8", "surrogatepass")) & 0xFFFF


@dataclass(frozen=True, slots=True)
class ScrubResidue:
    """What the scrub reads of one retracted claim whose body is not held (see module doc)."""

    op_id: bytes
    fingerprint: bytes
    length: int
    tag: int
    visibility: tuple[str, ...]
    scope: str
    expires: int | None
    claim_ref: bytes
    reasserts: tuple[bytes, ...]
    locus: bytes


class Residues(Mapping[bytes, ScrubResidue]):
    """An immutable set of residues by claim id, and by claim ref (what a retraction by ref
    names). Shared between index copies: it changes only by being replaced."""

    __slots__ = ("_by_locus", "_by_ref", "_held", "_stored")

    def __init__(self, entries: Iterable[ScrubResidue] = ()) -> None:
        self._held: dict[bytes, ScrubResidue] | None = {r.op_id: r for r in entries}
        self._stored: bytes | None = None
        self._by_ref: dict[bytes, tuple[ScrubResidue, ...]] | None = None
        self._by_locus: dict[bytes, tuple[ScrubResidue, ...]] | None = None

    @classmethod
    def stored(cls, data: bytes) -> Residues:
        """The residues of `encode_residue`'s ``data``, decoded on first use (a store opens
        without reading them; the first clean context does). Raises ResidueFormatError then,
        for data that is not a residue."""
        if bytes(data[:2]) != _HEAD:
            raise ResidueFormatError("residue", "format", "not a stored residue of this release")
        out = cls()
        out._held, out._stored = None, bytes(data)
        return out

    @property
    def _by_id(self) -> dict[bytes, ScrubResidue]:
        held = self._held
        if held is None:
            assert self._stored is not None
            held = self._held = {r.op_id: r for r in _decode_rows(self._stored)}
            self._stored = None
        return held

    def __getitem__(self, key: bytes) -> ScrubResidue:
        return self._by_id[key]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def __bool__(self) -> bool:
        return self._stored is not None or bool(self._held)

    def by_ref(self, ref: bytes) -> tuple[ScrubResidue, ...]:
        """The residues of the claims carrying ``ref`` (a whole claim ref)."""
        if self._by_ref is None:
            out: dict[bytes, tuple[ScrubResidue, ...]] = {}
            for r in self._by_id.values():
                out[r.claim_ref] = (*out.get(r.claim_ref, ()), r)
            self._by_ref = out
        return self._by_ref.get(ref_tag(ref), ())

    def without(self, ids: Iterable[bytes]) -> Residues:
        """These residues but those of ``ids`` (a redaction takes a claim's residue too)."""
        gone = frozenset(ids)
        return Residues(r for cid, r in self._by_id.items() if cid not in gone)

    def with_(self, more: Iterable[ScrubResidue]) -> Residues:
        """These residues and ``more``."""
        return Residues([*self._by_id.values(), *more])

    def of_loci(self, loci: Iterable[bytes]) -> Residues:
        """The residues at ``loci``."""
        if self._by_locus is None:
            out: dict[bytes, tuple[ScrubResidue, ...]] = {}
            for r in self._by_id.values():
                out[r.locus] = (*out.get(r.locus, ()), r)
            self._by_locus = out
        by = self._by_locus
        return Residues(r for locus in {locus_tag(x) for x in loci} for r in by.get(locus, ()))


NO_RESIDUES = Residues()


def encode_residue(residues: Residues) -> bytes:
    """The stored form of ``residues`` (msgpack: the format, then one row per claim, by id)."""
    rows = [
        [
            r.op_id,
            r.fingerprint,
            r.length,
            r.tag,
            list(r.visibility),
            r.scope,
            r.expires,
            r.claim_ref,
            list(r.reasserts),
            r.locus,
        ]
        for _, r in sorted(residues.items())
    ]
    return bytes(msgpack.packb([RESIDUE_FORMAT, rows], use_bin_type=True))


class ResidueFormatError(EncodingError):
    """A stored residue this release cannot read (field ``residue``)."""


def decode_residue(data: bytes) -> Residues:
    """`encode_residue`'s inverse. Raises ResidueFormatError for anything else."""
    return Residues(_decode_rows(data))


def _decode_rows(data: bytes) -> list[ScrubResidue]:
    try:
        version, rows = msgpack.unpackb(data, raw=False)
        if version != RESIDUE_FORMAT:
            raise ResidueFormatError(
                "residue", "format", f"residue format {version!r}, not {RESIDUE_FORMAT}"
            )
        return [
            ScrubResidue(
                bytes(cid),
                bytes(fp),
                int(n),
                int(tag),
                tuple(vis),
                str(scope),
                None if exp is None else int(exp),
                bytes(ref),
                tuple(bytes(x) for x in reasserts),
                bytes(locus),
            )
            for cid, fp, n, tag, vis, scope, exp, ref, reasserts, locus in rows
        ]
    except ResidueFormatError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ResidueFormatError("residue", "format", f"not a stored residue: {exc}") from exc


__all__ = [
    "FINGERPRINT_BYTES",
    "NO_RESIDUES",
    "RESIDUE_FORMAT",
    "TAG_BYTES",
    "ResidueFormatError",
    "Residues",
    "ScrubResidue",
    "anchor_tag",
    "decode_residue",
    "encode_residue",
    "fingerprint",
    "locus_tag",
    "ref_tag",
]
