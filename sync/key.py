"""Ed25519 keys: an author's signing key, its public key (the author id), and signature checks.

Invariant: every public key this module accepts is the canonical encoding of a point of large order
on edwards25519. Keys that are not (wrong length, ``y >= p``, an ``x = 0`` point with the sign bit
set, bytes that decode to no point, and the eight points of small order) are refused with a
`PublicKeyError` when a `PublicKey` is built, a key file is loaded, or `verify_signature` is asked
about an author, i.e. before any signature is checked against them.

Why: the signature library does not refuse them. With the ``cryptography`` build we ship, the
identity key ``01 00…00`` (and its non-canonical twin ``ee ff…7f``) accepts the 64-byte signature
``01 00…00 ‖ 00…00`` for *every* message, and the other small-order keys accept it for a good share
of messages. Anyone could then "sign" changes as such an author. Non-canonical encodings are refused
because an author id is compared as bytes: one point must have exactly one id.

Checking is done here, in Python integers, by the book: decompress the point (RFC 8032 §5.1.3),
then multiply it by the cofactor 8 with three doublings and refuse it if the result is the identity.
It costs about 0.1 ms, nearly all of it the one modular exponentiation of the square root (the
doublings take a few µs); `verify_signature` keeps the keys it accepted in a small bounded cache, so
a known author costs only the library's verification. Points of mixed order (a large-order point
plus a small-order one) are accepted: only whoever knows the key's discrete logarithm can sign under
it, so it is just another author id, and every replica runs the same verification code, so all
reach the same verdict on every signature under it.

All signing and verifying goes through one library, ``cryptography``, so replicas agree on its edge
cases (non-canonical ``S``, non-canonical ``R``...). Nothing here reads the clock or uses randomness
except `SigningKey.generate`.

Key files (format version 2, 86 bytes)::

    offset  size  content
    0       5     magic b"SFKEY"
    5       1     format version, 2
    6       32    Ed25519 seed (RFC 8032 private key)
    38      32    author: the public key derived from the seed
    70      16    the id of the store the key is bound to (all zero: bound to none)

Version 1 (the first release) is the first 70 bytes with version 1 and no binding; it is still
read. The stored author lets `SigningKey.load` detect a damaged seed, which would otherwise
silently turn the writer into a different author. The binding lets a replica refuse to write
into a second store with a key that already writes in another: one key in two stores forks its
feed (`SigningKey.bound_to`). Files are created with mode 0600, atomically (temporary file in
the same directory, fsync, link or rename, fsync of the directory), and `SigningKey.load` refuses a
file that group or others may access, as OpenSSH does.

Errors (all `InputError` and `ValueError`): `PublicKeyError`, `SignatureError`, `SigningKeyError`,
`KeyFileError`.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from contextlib import suppress
from dataclasses import dataclass, field

import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from statefuse.core.error import InputError

#: Length of a public key, which is also the author id.
PUBLIC_KEY_BYTES = 32
#: Length of an Ed25519 signature (``R ‖ S``).
SIGNATURE_BYTES = 64
#: Length of a seed, the RFC 8032 private key.
SEED_BYTES = 32
#: First bytes of every key file.
KEY_FILE_MAGIC = b"SFKEY"
#: Version of the key file format `SigningKey.save` writes.
KEY_FILE_VERSION = 2
#: Length of the store id a key file binds the key to.
STORE_ID_BYTES = 16
#: How many accepted authors `verify_signature` remembers.
AUTHOR_CACHE_SIZE = 4096

_P = 2**255 - 19
_D = -121665 * pow(121666, -1, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)
_Y_MASK = (1 << 255) - 1
_KEY_FILE_V1_BYTES = len(KEY_FILE_MAGIC) + 1 + SEED_BYTES + PUBLIC_KEY_BYTES
_KEY_FILE_V2_BYTES = _KEY_FILE_V1_BYTES + STORE_ID_BYTES
#: Longest file `load` reads; anything longer is refused unread.
_MAX_KEY_FILE_BYTES = 1024
#: Permission bits a key file may not have: any access by group or others.
_SHARED_BITS = 0o077


class PublicKeyError(InputError, ValueError):
    """Bytes that are not an acceptable Ed25519 public key (author id).

    Rules: ``key-type`` (not bytes), ``key-length`` (not 32 bytes), ``non-canonical`` (``y >= p``,
    or ``x = 0`` with the sign bit set), ``not-on-curve`` (no point has this ``y``), ``small-order``
    (a point whose order divides 8: signatures under it can be forged without a private key).
    """


class SignatureError(InputError, ValueError):
    """A signature or message that cannot be checked: not bytes (``signature-type``,
    ``message-type``) or not 64 bytes (``signature-length``). A well-formed signature that does not
    verify is not an error: verification returns False."""


class SigningKeyError(InputError, ValueError):
    """A seed that cannot be a signing key: not bytes (``seed-type``) or not 32 bytes
    (``seed-length``)."""


class KeyFileError(InputError, ValueError):
    """A key file that cannot be saved or loaded. ``field`` is ``"path"``; the message names it.

    Rules: ``key-file-exists`` (save would replace a file; pass ``overwrite=True``),
    ``key-file-missing``, ``key-file-permissions`` (group or others may access it: ``chmod 600``),
    ``key-file-format`` (not a regular file, wrong size or magic), ``key-file-version`` (a format
    version this code does not read), ``key-file-public-key`` (the stored author is not an
    acceptable public key), ``key-file-author-mismatch`` (the seed does not give the stored author:
    the file is damaged).
    """


def _as_bytes(value: object, field_name: str, error: type[InputError], rule: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise error(field_name, rule, f"expected bytes, got {type(value).__name__}")


def _decompress(encoding: bytes, field_name: str) -> tuple[int, int]:
    """The affine point ``(x, y)`` that ``encoding`` names (RFC 8032 §5.1.3), or PublicKeyError
    with rule ``non-canonical`` or ``not-on-curve``."""
    number = int.from_bytes(encoding, "little")
    sign = number >> 255
    y = number & _Y_MASK
    if y >= _P:
        raise PublicKeyError(
            field_name, "non-canonical", f"y = p + {y - _P} is not reduced modulo p = 2^255 - 19"
        )
    yy = y * y % _P
    u = (yy - 1) % _P
    v = (_D * yy + 1) % _P
    # x = (u/v)^((p+3)/8) without an inversion: u v^3 (u v^7)^((p-5)/8).
    v3 = v * v % _P * v % _P
    x = u * v3 % _P * pow(u * v3 % _P * v3 % _P * v % _P, (_P - 5) // 8, _P) % _P
    vxx = v * x % _P * x % _P
    if vxx != u:
        if vxx != (-u) % _P:
            raise PublicKeyError(field_name, "not-on-curve", "no point of edwards25519 has this y")
        x = x * _SQRT_M1 % _P
    if x == 0 and sign:
        raise PublicKeyError(field_name, "non-canonical", "x = 0 but the sign bit of x is set")
    if x & 1 != sign:
        x = _P - x
    return x, y


def _has_small_order(x: int, y: int) -> bool:
    """Whether ``8·(x, y)`` is the identity, by three doublings in projective coordinates
    (``dbl-2008-bbjlp`` for ``a = -1``, complete on edwards25519: no exceptional points)."""
    big_x, big_y, big_z = x, y, 1
    for _ in range(3):
        b = (big_x + big_y) * (big_x + big_y) % _P
        c = big_x * big_x % _P
        d = big_y * big_y % _P
        e = -c
        f = (e + d) % _P
        j = (f - 2 * (big_z * big_z)) % _P
        big_x, big_y, big_z = (b - c - d) * j % _P, f * (e - d) % _P, f * j % _P
    return big_x == 0 and big_y == big_z


def _check_public_key(value: object, field_name: str) -> bytes:
    raw = _as_bytes(value, field_name, PublicKeyError, "key-type")
    if len(raw) != PUBLIC_KEY_BYTES:
        raise PublicKeyError(
            field_name, "key-length", f"a public key is {PUBLIC_KEY_BYTES} bytes, got {len(raw)}"
        )
    x, y = _decompress(raw, field_name)
    if _has_small_order(x, y):
        raise PublicKeyError(
            field_name,
            "small-order",
            f"{raw.hex()} is a point of order dividing 8; signatures under it can be forged",
        )
    return raw


def _check_signature(value: object) -> bytes:
    raw = _as_bytes(value, "signature", SignatureError, "signature-type")
    if len(raw) != SIGNATURE_BYTES:
        raise SignatureError(
            "signature",
            "signature-length",
            f"an Ed25519 signature is {SIGNATURE_BYTES} bytes, got {len(raw)}",
        )
    return raw


def _check_message(value: object) -> bytes | bytearray | memoryview:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise SignatureError("message", "message-type", f"expected bytes, got {type(value).__name__}")


@dataclass(frozen=True, slots=True, repr=False)
class PublicKey:
    """An Ed25519 public key that passed the checks of this module; ``author`` is its 32 bytes.

    ``PublicKey(raw)`` raises PublicKeyError if ``raw`` is not the canonical encoding of a point
    of large order. Equal and hashed by ``author``.
    """

    author: bytes
    _key: Ed25519PublicKey = field(init=False, compare=False)

    def __post_init__(self) -> None:
        raw = _check_public_key(self.author, "author")
        object.__setattr__(self, "author", raw)
        object.__setattr__(self, "_key", Ed25519PublicKey.from_public_bytes(raw))

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's signature of ``message``.

        A wrong signature gives False, never an error. Raises SignatureError only when the input
        cannot be a signature at all (not bytes, not 64 bytes) or the message is not bytes.
        """
        sig = _check_signature(signature)
        data = _check_message(message)
        try:
            self._key.verify(sig, data)
        except InvalidSignature:
            return False
        return True

    def __bytes__(self) -> bytes:
        return self.author

    def __repr__(self) -> str:
        return f"PublicKey({self.author.hex()})"

    def __reduce__(self) -> tuple[type[PublicKey], tuple[bytes]]:
        return (PublicKey, (self.author,))


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SigningKey:
    """An author's private Ed25519 key. Build one with `generate`, `from_seed` or `load`.

    Compared by identity and never pickled: the seed leaves the object only through `save`.
    """

    _private: Ed25519PrivateKey
    _public: PublicKey = field(init=False)
    _bound: bytes | None = None

    def __post_init__(self) -> None:
        raw = self._private.public_key().public_bytes_raw()
        object.__setattr__(self, "_public", PublicKey(raw))

    @classmethod
    def generate(cls) -> SigningKey:
        """A new key from the operating system's random generator (through ``cryptography``)."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """The key of a 32-byte seed (the RFC 8032 private key). Raises SigningKeyError."""
        raw = _as_bytes(seed, "seed", SigningKeyError, "seed-type")
        if len(raw) != SEED_BYTES:
            raise SigningKeyError(
                "seed", "seed-length", f"a seed is {SEED_BYTES} bytes, got {len(raw)}"
            )
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    @property
    def author(self) -> bytes:
        """The public key's 32 bytes: the id this key signs as."""
        return self._public.author

    def public_key(self) -> PublicKey:
        return self._public

    @property
    def bound_to(self) -> bytes | None:
        """The id of the store this key writes in, as its key file says (None: not bound)."""
        return self._bound

    def bound(self, store_id: bytes) -> SigningKey:
        """The same key, bound to the store ``store_id`` (what `save` then records)."""
        if type(store_id) is not bytes or len(store_id) != STORE_ID_BYTES:
            raise SigningKeyError("store_id", "store-id", f"a store id is {STORE_ID_BYTES} bytes")
        return SigningKey(self._private, store_id)

    def __repr__(self) -> str:
        return f"SigningKey(author={self.author.hex()})"

    def derive_secret(self, context: str) -> bytes:
        """A 32-byte secret derived from the seed for ``context`` (BLAKE3 key derivation).

        Lets another use of this key (authenticating the replica's local snapshot, say) have a
        secret of its own without the seed leaving the object. ``context`` is a hard-coded,
        application-unique string; different contexts give unrelated secrets.
        """
        if not isinstance(context, str) or not context:
            raise SigningKeyError("context", "context-type", "a context is a non-empty str")
        seed = self._private.private_bytes_raw()
        return blake3.blake3(seed, derive_key_context=context).digest()

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message`` (deterministic, RFC 8032).

        Raises SignatureError (rule ``message-type``) if ``message`` is not bytes.
        """
        return self._private.sign(_check_message(message))

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the key to ``path`` with mode 0600 (format in the module docstring).

        The file appears complete or not at all: it is written to a temporary file in the same
        directory and linked (or, with ``overwrite=True``, renamed) into place. Raises KeyFileError
        (rule ``key-file-exists``) if ``path`` exists and ``overwrite`` is false; OSError for I/O
        failures.
        """
        target = os.fspath(path)
        if not overwrite and os.path.lexists(target):
            raise _exists(target)
        directory = os.path.dirname(target) or "."
        seed = self._private.private_bytes_raw()
        bound = self._bound or bytes(STORE_ID_BYTES)
        payload = KEY_FILE_MAGIC + bytes([KEY_FILE_VERSION]) + seed + self.author + bound
        temp = _write_temp(directory, os.path.basename(target), payload)
        try:
            if overwrite:
                os.replace(temp, target)
            else:
                _link_new(temp, target)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temp)
        _fsync_directory(directory)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> SigningKey:
        """The key stored at ``path`` by `save`.

        Raises KeyFileError: ``key-file-missing``; ``key-file-permissions`` if group or others may
        access the file (fix: ``chmod 600 PATH``), checked before the contents are read;
        ``key-file-format``, ``key-file-version``, ``key-file-public-key`` or
        ``key-file-author-mismatch`` for a file that is not an intact key file. OSError for other
        I/O failures.
        """
        name = os.fspath(path)
        try:
            fd = os.open(name, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            raise KeyFileError("path", "key-file-missing", f"no key file at {name}") from None
        try:
            _check_key_file_mode(os.fstat(fd), name)
        except BaseException:
            os.close(fd)
            raise
        with os.fdopen(fd, "rb") as file:
            data = file.read(_MAX_KEY_FILE_BYTES + 1)
        return cls._decode_file(data, name)

    @classmethod
    def _decode_file(cls, data: bytes, name: str) -> SigningKey:
        if not data.startswith(KEY_FILE_MAGIC) or len(data) <= len(KEY_FILE_MAGIC):
            raise KeyFileError(
                "path", "key-file-format", f"{name} is not a StateFuse key file (bad magic)"
            )
        version = data[len(KEY_FILE_MAGIC)]
        decoder = _FILE_DECODERS.get(version)
        if decoder is None:
            raise KeyFileError(
                "path",
                "key-file-version",
                f"{name} is key file format version {version}; this code reads"
                f" {sorted(_FILE_DECODERS)}",
            )
        return decoder(data, name)


def _check_key_file_mode(info: os.stat_result, name: str) -> None:
    """Refuse anything but a regular file that only its owner may access (checked on the open
    descriptor, so the file checked is the file read)."""
    if not stat.S_ISREG(info.st_mode):
        raise KeyFileError("path", "key-file-format", f"{name} is not a regular file")
    mode = stat.S_IMODE(info.st_mode)
    if os.name == "posix" and mode & _SHARED_BITS:
        raise KeyFileError(
            "path",
            "key-file-permissions",
            f"key file {name} has mode {mode:04o}, so group or others may access it;"
            f" a signing key must be private to its owner: run `chmod 600 {name}`",
        )


def _decode_file_v1(data: bytes, name: str) -> SigningKey:
    if len(data) != _KEY_FILE_V1_BYTES:
        raise KeyFileError(
            "path",
            "key-file-format",
            f"{name} holds {len(data)} bytes; a version 1 key file holds {_KEY_FILE_V1_BYTES}",
        )
    return _decode_seed_and_author(data[len(KEY_FILE_MAGIC) + 1 :], name)


def _decode_file_v2(data: bytes, name: str) -> SigningKey:
    if len(data) != _KEY_FILE_V2_BYTES:
        raise KeyFileError(
            "path",
            "key-file-format",
            f"{name} holds {len(data)} bytes; a version 2 key file holds {_KEY_FILE_V2_BYTES}",
        )
    key = _decode_seed_and_author(data[len(KEY_FILE_MAGIC) + 1 : _KEY_FILE_V1_BYTES], name)
    bound = data[_KEY_FILE_V1_BYTES:]
    return key if bound == bytes(STORE_ID_BYTES) else key.bound(bound)


def _decode_seed_and_author(body: bytes, name: str) -> SigningKey:
    seed, stored = body[:SEED_BYTES], body[SEED_BYTES:]
    try:
        _check_public_key(stored, "author")
    except PublicKeyError as exc:
        raise KeyFileError(
            "path",
            "key-file-public-key",
            f"{name} stores an unacceptable author: {exc.message} [rule: {exc.rule}]",
        ) from exc
    key = SigningKey.from_seed(seed)
    if key.author != stored:
        raise KeyFileError(
            "path",
            "key-file-author-mismatch",
            f"{name} is damaged: its seed gives author {key.author.hex()},"
            f" but it stores {stored.hex()}",
        )
    return key


#: Key file decoders by format version; every released version keeps its decoder.
_FILE_DECODERS = {1: _decode_file_v1, 2: _decode_file_v2}


def _exists(target: str) -> KeyFileError:
    return KeyFileError(
        "path",
        "key-file-exists",
        f"{target} already exists; refusing to replace a key (pass overwrite=True to replace it)",
    )


def _write_temp(directory: str, base: str, payload: bytes) -> str:
    """A new file holding ``payload`` with mode 0600, fsynced; returns its path.

    Created with ``O_CREAT | O_EXCL`` (which also refuses symlinks) and mode 0600, then set to
    exactly 0600 whatever the umask, so no other user can ever open it.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for attempt in range(100):
        temp = os.path.join(directory, f".{base}.{os.getpid()}.{attempt}.tmp")
        try:
            fd = os.open(temp, flags, 0o600)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as file:
                if hasattr(os, "fchmod"):
                    os.fchmod(file.fileno(), 0o600)
                file.write(payload)
                file.flush()
                os.fsync(file.fileno())
        except BaseException:
            os.unlink(temp)
            raise
        return temp
    raise FileExistsError(errno.EEXIST, "no free temporary file name", directory)


def _link_new(temp: str, target: str) -> None:
    """Give ``temp`` the name ``target`` unless ``target`` exists, atomically where the file system
    has hard links. Without them, falls back to check-then-rename (a small race; documented)."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise _exists(target) from None
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK}:
            raise
        if os.path.lexists(target):
            raise _exists(target) from None
        os.replace(temp, target)


def _fsync_directory(directory: str) -> None:
    """Make the new directory entry durable (POSIX; other systems have no directory fsync)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=AUTHOR_CACHE_SIZE)
def _accepted_author(author: bytes) -> PublicKey:
    # Only accepted keys are cached (a raising call stores nothing), so refused authors cannot
    # push good ones out of the cache.
    return PublicKey(author)


def verify_signature(author: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``author``'s signature of ``message``.

    ``author`` is checked first (it is an author id from outside, so it may be crafted): raises
    PublicKeyError if it is not an acceptable public key (rules of `PublicKeyError`, e.g.
    ``small-order``), SignatureError if the signature is not 64 bytes or the message not bytes.
    A well-formed signature that does not verify gives False.
    """
    raw = _as_bytes(author, "author", PublicKeyError, "key-type")
    return _accepted_author(raw).verify(signature, message)


__all__ = [
    "AUTHOR_CACHE_SIZE",
    "KEY_FILE_MAGIC",
    "KEY_FILE_VERSION",
    "PUBLIC_KEY_BYTES",
    "SEED_BYTES",
    "SIGNATURE_BYTES",
    "KeyFileError",
    "PublicKey",
    "PublicKeyError",
    "SignatureError",
    "SigningKey",
    "SigningKeyError",
    "verify_signature",
]
