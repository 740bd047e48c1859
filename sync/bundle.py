"""Bundle files: signed changes in one file, the offline (air-gapped) way to sync.

A bundle says who exported it and for which space, and carries signed changes verbatim. The
exporter signs the whole file, so a bundle truncated or altered in transit is refused as a whole
with a `BundleError` (nothing is imported); the changes inside are then verified one by one like
any network data, so a bundle can never smuggle in what a peer could not send.

Format, version 1 (framed, so a bundle of any size streams in bounded memory per change)::

    magic      b"SFBUNDLE" + version:u8 (=1)
    header     len:u32 BE + canonical msgpack {"count": int, "exporter": <32 bytes>,
                                               "space": str, "v": 1,
                                               "creator": <32 bytes>}   (optional)
    frame*     len:u32 BE + signed change bytes                  (exactly ``count`` frames)
    trailer    signature[64] over BUNDLE_DOMAIN ‖ blake3(everything before the trailer)

``creator`` is the open space's creator the exporter's store follows (`sync.creator`): an
importing store with none pinned adopts it, one pinned to another refuses the bundle. It is
written only when the exporter has one, so a bundle without it is byte for byte what earlier
releases wrote and read, and their bundles import as before.
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import blake3

from statefuse.registry.error import EncodingError, InputError
from statefuse.registry.value import decode_value, encode_value
from statefuse.sync.change import MAX_CHANGE_BYTES
from statefuse.sync.key import PublicKeyError, SigningKey, verify_signature

MAGIC = b"SFBUNDLE\x01"
BUNDLE_DOMAIN = b"statefuse/bundle-signature/v1:"
#: Most changes one bundle may hold.
MAX_BUNDLE_CHANGES = 10_000_000
_MAX_HEADER = 4096
_FRAME_LIMIT = MAX_CHANGE_BYTES + 1024


#: Header keys every bundle has, and those it may have.
_HEADER_KEYS = frozenset({"count", "exporter", "space", "v"})
_OPTIONAL_KEYS = frozenset({"creator"})


class BundleError(InputError, ValueError):
    """A bundle file that is unreadable, for another space, truncated or not signed by its
    exporter. Nothing from it is imported."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle's header and its signed-change bytes, once its framing and signature check."""

    exporter: bytes
    space: str
    creator: bytes | None
    changes: list[bytes]


def write_bundle(
    path: str | os.PathLike[str],
    key: SigningKey,
    space: str,
    changes: Sequence[bytes],
    *,
    creator: bytes | None = None,
) -> None:
    """Write ``changes`` (signed-change bytes) as a bundle signed by ``key``, atomically (a
    temporary file renamed into place, so a reader never sees half a bundle). ``creator``: the
    open space's creator the exporting store follows (None: none, and no header field)."""
    fields: dict[str, object] = {
        "count": len(changes),
        "exporter": key.author,
        "space": space,
        "v": 1,
    }
    if creator is not None:
        fields["creator"] = creator
    header = encode_value(fields, "bundle")
    hasher = blake3.blake3()
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=".bundle-", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as out:

            def put(data: bytes) -> None:
                hasher.update(data)
                out.write(data)

            put(MAGIC)
            put(struct.pack(">I", len(header)) + header)
            for change in changes:
                put(struct.pack(">I", len(change)) + change)
            out.write(key.sign(BUNDLE_DOMAIN + hasher.digest()))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def read_bundle(path: str | os.PathLike[str], *, space: str | None = None) -> list[bytes]:
    """The signed-change bytes of a bundle, after checking its framing and the exporter's
    signature (and, if given, that it was made for ``space``). Raises BundleError."""
    return open_bundle(path, space=space).changes


def open_bundle(path: str | os.PathLike[str], *, space: str | None = None) -> Bundle:
    """`read_bundle`, with the header: who exported it, and the creator it follows."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BundleError(
            "path", "readable", f"cannot read bundle {path}: {exc.strerror}"
        ) from None
    return parse_bundle_whole(data, space=space)


def parse_bundle(data: bytes, *, space: str | None = None) -> list[bytes]:
    """`read_bundle` on bytes already in memory."""
    return parse_bundle_whole(data, space=space).changes


def parse_bundle_whole(data: bytes, *, space: str | None = None) -> Bundle:
    """`open_bundle` on bytes already in memory."""
    if not data.startswith(MAGIC):
        raise BundleError("bundle", "magic", "not a StateFuse bundle (bad magic or version)")
    if len(data) < len(MAGIC) + 4 + 64:
        raise BundleError("bundle", "truncated", "the bundle is truncated")
    body, signature = data[:-64], data[-64:]
    pos = len(MAGIC)

    def frame(limit: int, what: str) -> bytes:
        nonlocal pos
        if pos + 4 > len(body):
            raise BundleError("bundle", "truncated", f"the bundle ends inside {what}")
        (size,) = struct.unpack_from(">I", body, pos)
        if size > limit:
            raise BundleError("bundle", "frame-size", f"{what} of {size} bytes exceeds {limit}")
        if pos + 4 + size > len(body):
            raise BundleError("bundle", "truncated", f"the bundle ends inside {what}")
        out = body[pos + 4 : pos + 4 + size]
        pos += 4 + size
        return out

    try:
        header = decode_value(frame(_MAX_HEADER, "the header"), "bundle.header")
    except EncodingError as exc:
        raise BundleError("bundle.header", exc.rule, str(exc)) from None
    if (
        not isinstance(header, dict)
        or not _HEADER_KEYS <= set(header) <= _HEADER_KEYS | _OPTIONAL_KEYS
        or header["v"] != 1
        or not isinstance(header["count"], int)
        or not 0 <= header["count"] <= MAX_BUNDLE_CHANGES
        or not isinstance(header["exporter"], bytes)
        or not isinstance(header["space"], str)
    ):
        raise BundleError("bundle.header", "bundle-header", "malformed bundle header")
    creator = header.get("creator")
    if creator is not None and (not isinstance(creator, bytes) or len(creator) != 32):
        raise BundleError("bundle.header", "bundle-header", "malformed bundle header")
    try:
        signed = verify_signature(
            header["exporter"], signature, BUNDLE_DOMAIN + blake3.blake3(body).digest()
        )
    except (PublicKeyError, InputError):
        signed = False
    if not signed:
        raise BundleError(
            "bundle.sig", "exporter-signature", "the bundle is not signed by its exporter"
        )
    if space is not None and header["space"] != space:
        raise BundleError(
            "bundle.space", "same-space", f"bundle is for space {header['space']!r}, not {space!r}"
        )
    changes = [frame(_FRAME_LIMIT, f"change {i + 1}") for i in range(header["count"])]
    if pos != len(body):
        raise BundleError("bundle", "trailing-data", "bytes after the last change")
    return Bundle(header["exporter"], header["space"], creator, changes)
