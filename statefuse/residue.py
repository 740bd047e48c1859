"""Scrub residue: what the clean-context scrub needs of a retracted claim whose body moved out.

Compaction (`sync.archive`) moves the bodies of retracted claims to an archive. The scrub
(`statefuse.scrub`) still has to find such a claim's value in the free text of a working set
and name the claim it scrubbed, for every lens, exactly as before the move. So each such claim
leaves a residue behind, kept in the live store and handed to the index (`Index.residue`):

- ``op_id``, ``claim_ref``, ``reasserts``: which retractions retract it (a retraction that
  arrives after the move still counts: it can name a replacing claim);
- ``visibility``, ``scope``, ``expires``: what a lens tests before it may see the claim;
- ``fingerprint`` (a 16-byte BLAKE2b of the folded value), ``length`` (its characters) and
  ``tag`` (a 16-bit checksum of its first characters, the anchor `find` slices text by): the
  scrub looks at the same slices of a text it looked at before (by length, under an anchor) and
  tells a value by its fingerprint instead of its text. Neither the value nor its anchor is
  kept: a residue says which claim was scrubbed, not what it said.
- ``locus``: the claim's place (`state.locus_of`), so a read of a few loci takes their residue.

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

from statefuse.error import EncodingError

#: Bytes of a folded value's fingerprint.
FINGERPRINT_BYTES = 16
#: The residue's stored form (`encode_residue`): a version, then one row per claim.
RESIDUE_FORMAT = 1


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

    __slots__ = ("_by_id", "_by_locus", "_by_ref")

    def __init__(self, entries: Iterable[ScrubResidue] = ()) -> None:
        self._by_id: dict[bytes, ScrubResidue] = {r.op_id: r for r in entries}
        self._by_ref: dict[bytes, tuple[ScrubResidue, ...]] | None = None
        self._by_locus: dict[bytes, tuple[ScrubResidue, ...]] | None = None

    def __getitem__(self, key: bytes) -> ScrubResidue:
        return self._by_id[key]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def by_ref(self, ref: bytes) -> tuple[ScrubResidue, ...]:
        """The residues of the claims carrying ``ref``."""
        if self._by_ref is None:
            out: dict[bytes, tuple[ScrubResidue, ...]] = {}
            for r in self._by_id.values():
                out[r.claim_ref] = (*out.get(r.claim_ref, ()), r)
            self._by_ref = out
        return self._by_ref.get(ref, ())

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
        return Residues(r for locus in set(loci) for r in by.get(locus, ()))


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
    try:
        version, rows = msgpack.unpackb(data, raw=False)
        if version != RESIDUE_FORMAT:
            raise ResidueFormatError(
                "residue", "format", f"residue format {version!r}, not {RESIDUE_FORMAT}"
            )
        return Residues(
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
        )
    except ResidueFormatError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise ResidueFormatError("residue", "format", f"not a stored residue: {exc}") from exc


__all__ = [
    "FINGERPRINT_BYTES",
    "NO_RESIDUES",
    "RESIDUE_FORMAT",
    "ResidueFormatError",
    "Residues",
    "ScrubResidue",
    "anchor_tag",
    "decode_residue",
    "encode_residue",
    "fingerprint",
]
