"""sync.key: Ed25519 signing keys, key files, and the refusal of degenerate public keys.

The small-order points of edwards25519 are derived here from the curve equation with a reference
implementation written differently from the library on purpose (affine coordinates with modular
inverses, square roots through the Euler criterion, orders by repeated addition), and the shipped
vectors (tests/vectors/ed25519_edge_cases.json) must equal what is derived. The library's verdict
on any 32 bytes must then agree with the reference.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import event, example, given
from hypothesis import strategies as st

import statefuse.sync.key as key_module
from statefuse.core.error import InputError, StateFuseError
from statefuse.sync.key import (
    KEY_FILE_MAGIC,
    KEY_FILE_VERSION,
    KeyFileError,
    PublicKey,
    PublicKeyError,
    SignatureError,
    SigningKey,
    SigningKeyError,
    verify_signature,
)

VECTORS = json.loads(
    (Path(__file__).parent / "vectors" / "ed25519_edge_cases.json").read_text(encoding="utf-8")
)
SMALL_ORDER = VECTORS["small_order_points"]
ALTERNATIVE = VECTORS["alternative_encodings"]
EDGE_CASES = SMALL_ORDER + ALTERNATIVE
RFC8032 = VECTORS["rfc8032_section_7_1"]

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")

# --- reference edwards25519 (independent of sync.key) ---------------------------------------------

P = 2**255 - 19
D = -121665 * pow(121666, P - 2, P) % P
IDENTITY = (0, 1)


def inverse(a: int) -> int:
    return pow(a, P - 2, P)


def sqrt_or_none(a: int) -> int | None:
    """A square root of ``a`` mod p (p = 5 mod 8), or None if ``a`` is not a square."""
    a %= P
    if a == 0:
        return 0
    if pow(a, (P - 1) // 2, P) != 1:
        return None
    root = pow(a, (P + 3) // 8, P)
    if root * root % P != a:
        root = root * pow(2, (P - 1) // 4, P) % P
    assert root * root % P == a
    return root


def on_curve(x: int, y: int) -> bool:
    return (-x * x + y * y - 1 - D * x * x * y * y) % P == 0


def add(p1: tuple[int, int], p2: tuple[int, int]) -> tuple[int, int]:
    (x1, y1), (x2, y2) = p1, p2
    t = D * x1 * x2 * y1 * y2 % P
    return (x1 * y2 + y1 * x2) * inverse(1 + t) % P, (y1 * y2 + x1 * x2) * inverse(1 - t) % P


def order_up_to_8(point: tuple[int, int]) -> int | None:
    """The order of ``point`` if it divides 8, else None (a point of large order)."""
    multiple = point
    for n in range(1, 9):
        if multiple == IDENTITY:
            return n
        multiple = add(multiple, point)
    return None


def encode(point: tuple[int, int]) -> bytes:
    x, y = point
    return (y | (x & 1) << 255).to_bytes(32, "little")


def reference_verdict(raw: bytes) -> str:
    """``"accept"`` or the rule a strict RFC 8032 decoder plus a small-order check refuses with."""
    if len(raw) != 32:
        return "key-length"
    number = int.from_bytes(raw, "little")
    sign, y = number >> 255, number & ((1 << 255) - 1)
    if y >= P:
        return "non-canonical"
    x = sqrt_or_none((y * y - 1) * inverse(D * y * y + 1))
    if x is None:
        return "not-on-curve"
    if x == 0 and sign:
        return "non-canonical"
    if x & 1 != sign:
        x = P - x
    assert on_curve(x, y)
    return "accept" if order_up_to_8((x, y)) is None else "small-order"


def derive_small_order_points() -> set[tuple[int, int]]:
    """All points whose order divides 8, from the curve equation -x² + y² = 1 + d x² y².

    Order 1 and 2: x = 0, so y² = 1. Order 4: doubling (x, y) gives y' = (x² + y²)/(2 - y² + x²),
    which is -1 iff y = 0, so x² = -1. Order 8: the double has y' = 0, i.e. x² = -y², and on the
    curve that is d y⁴ + 2 y² - 1 = 0, so y² = (-1 ± sqrt(1 + d)) / d.
    """
    i = sqrt_or_none(-1)
    assert i is not None
    points = {(0, 1), (0, P - 1), (i, 0), (P - i, 0)}
    root = sqrt_or_none(1 + D)
    assert root is not None
    for y2 in ((-1 + root) * inverse(D) % P, (-1 - root) * inverse(D) % P):
        y = sqrt_or_none(y2)
        if y is None:
            continue
        x = sqrt_or_none(-y2)
        assert x is not None
        points |= {(x, y), (P - x, y), (x, P - y), (P - x, P - y)}
    return points


SMALL_ORDER_POINTS = derive_small_order_points()


def derive_alternative_encodings() -> set[bytes]:
    """Other 32-byte strings that name a small-order point to a lenient decoder: the sign bit set
    when x = 0, and y + p for the points whose y + p still fits in 255 bits."""
    found = set()
    for x, y in SMALL_ORDER_POINTS:
        if x == 0:
            found.add((y | 1 << 255).to_bytes(32, "little"))
        if y + P < 2**255:
            found.add((y + P | (x & 1) << 255).to_bytes(32, "little"))
            if x == 0:
                found.add((y + P | 1 << 255).to_bytes(32, "little"))
    return found


# --- the vectors ----------------------------------------------------------------------------------


def test_the_derived_small_order_points_are_exactly_the_8_torsion_subgroup():
    assert len(SMALL_ORDER_POINTS) == 8
    assert all(on_curve(x, y) for x, y in SMALL_ORDER_POINTS)
    orders = sorted(order_up_to_8(point) or 0 for point in SMALL_ORDER_POINTS)
    assert orders == [1, 2, 4, 4, 8, 8, 8, 8]
    assert all(
        add(a, b) in SMALL_ORDER_POINTS for a in SMALL_ORDER_POINTS for b in SMALL_ORDER_POINTS
    )


def test_the_shipped_small_order_vectors_are_the_derived_points_with_their_orders():
    shipped = {bytes.fromhex(v["encoding"]): v["order"] for v in SMALL_ORDER}
    derived = {encode(point): order_up_to_8(point) for point in SMALL_ORDER_POINTS}
    assert shipped == derived


def test_the_shipped_alternative_encodings_are_the_derived_ones():
    assert {bytes.fromhex(v["encoding"]) for v in ALTERNATIVE} == derive_alternative_encodings()
    assert len(ALTERNATIVE) == 6


@pytest.mark.parametrize("vector", EDGE_CASES, ids=lambda v: v["name"])
def test_every_edge_case_key_is_refused_with_its_rule(vector):
    raw = bytes.fromhex(vector["encoding"])
    assert reference_verdict(raw) == vector["rule"]
    with pytest.raises(PublicKeyError) as caught:
        PublicKey(raw)
    assert (caught.value.field, caught.value.rule) == ("author", vector["rule"])


@pytest.mark.parametrize("vector", EDGE_CASES, ids=lambda v: v["name"])
def test_verify_signature_refuses_an_edge_case_author_before_checking_any_signature(vector):
    raw = bytes.fromhex(vector["encoding"])
    for message in (b"", b"any message", bytes(100)):
        for signature in (bytes(64), bytes.fromhex("01" + "00" * 63), raw + bytes(32)):
            with pytest.raises(PublicKeyError) as caught:
                verify_signature(raw, signature, message)
            assert caught.value.rule == vector["rule"]


def test_the_signature_library_alone_accepts_a_forgery_under_the_identity_key():
    # Why the check exists (the module docstring relies on this): R = identity, S = 0 satisfies
    # [S]B = R + [k]A for every message when A is the identity.
    identity = bytes.fromhex(SMALL_ORDER[0]["encoding"])
    forged = identity + bytes(32)
    raw_key = Ed25519PublicKey.from_public_bytes(identity)
    for message in (b"", b"transfer everything", b"\xff" * 1000):
        raw_key.verify(forged, message)  # no InvalidSignature: the library accepts it
        with pytest.raises(PublicKeyError, match="small-order"):
            verify_signature(identity, forged, message)


def test_every_encoding_with_y_at_least_p_is_refused_as_non_canonical():
    for y in range(P, 2**255):
        for sign in (0, 1):
            raw = (y | sign << 255).to_bytes(32, "little")
            with pytest.raises(PublicKeyError) as caught:
                PublicKey(raw)
            assert caught.value.rule == "non-canonical", raw.hex()


@pytest.mark.parametrize("vector", RFC8032, ids=lambda v: v["name"])
def test_rfc8032_vectors_sign_to_the_published_bytes_and_verify(vector):
    key = SigningKey.from_seed(bytes.fromhex(vector["secret_key"]))
    message = bytes.fromhex(vector["message"])
    signature = bytes.fromhex(vector["signature"])
    assert key.author == bytes.fromhex(vector["public_key"])
    assert key.sign(message) == signature
    assert key.public_key().verify(signature, message)
    assert verify_signature(key.author, signature, message)
    assert not verify_signature(key.author, signature, message + b"\x00")


# --- public keys from any bytes -------------------------------------------------------------------

edge_encodings = st.sampled_from([bytes.fromhex(v["encoding"]) for v in EDGE_CASES])
near_p = st.builds(
    lambda y, sign: (y | sign << 255).to_bytes(32, "little"),
    st.one_of(st.integers(0, 40), st.integers(P - 20, 2**255 - 1)),
    st.integers(0, 1),
)
key_candidates = st.one_of(st.binary(min_size=32, max_size=32), edge_encodings, near_p)


@given(key_candidates)
@example(bytes(32))
@example(b"\xff" * 32)
def test_any_32_bytes_are_a_large_order_point_or_refused_as_the_reference_says(raw):
    verdict = reference_verdict(raw)
    event(verdict)
    try:
        key = PublicKey(raw)
    except PublicKeyError as error:
        assert error.rule == verdict
    else:
        assert verdict == "accept"
        assert key.author == raw
        assert not key.verify(bytes(64), b"")


@given(st.binary(max_size=80).filter(lambda b: len(b) != 32))
def test_a_public_key_of_the_wrong_length_is_refused_by_length(raw):
    with pytest.raises(PublicKeyError) as caught:
        PublicKey(raw)
    assert caught.value.rule == "key-length"
    with pytest.raises(PublicKeyError) as caught:
        verify_signature(raw, bytes(64), b"")
    assert caught.value.rule == "key-length"


@pytest.mark.parametrize("value", ["ab" * 16, 7, None, [0] * 32])
def test_a_public_key_that_is_not_bytes_is_refused_by_type(value):
    with pytest.raises(PublicKeyError) as caught:
        PublicKey(value)
    assert caught.value.rule == "key-type"
    with pytest.raises(PublicKeyError) as caught:
        verify_signature(value, bytes(64), b"")
    assert caught.value.rule == "key-type"


def test_bytearray_and_memoryview_keys_become_bytes():
    author = SigningKey.from_seed(bytes(32)).author
    assert PublicKey(bytearray(author)).author == author
    assert type(PublicKey(memoryview(author)).author) is bytes


# --- signing and verifying ------------------------------------------------------------------------


@given(seed=st.binary(min_size=32, max_size=32), message=st.binary(max_size=300), data=st.data())
def test_a_signature_verifies_and_any_flipped_bit_breaks_it(seed, message, data):
    key = SigningKey.from_seed(seed)
    signature = key.sign(message)
    public = key.public_key()
    assert public.verify(signature, message)
    assert verify_signature(key.author, signature, message)

    bit = data.draw(st.integers(0, 8 * len(signature) - 1), label="signature bit")
    bad_signature = flip(signature, bit)
    assert not public.verify(bad_signature, message)
    assert not verify_signature(key.author, bad_signature, message)

    longer = message or b"\x00"
    if not message:
        assert not public.verify(signature, longer)
    else:
        bit = data.draw(st.integers(0, 8 * len(message) - 1), label="message bit")
        assert not public.verify(signature, flip(message, bit))


def flip(data: bytes, bit: int) -> bytes:
    changed = bytearray(data)
    changed[bit // 8] ^= 1 << (bit % 8)
    return bytes(changed)


def test_a_signature_from_another_key_does_not_verify():
    alice, bob = SigningKey.from_seed(b"a" * 32), SigningKey.from_seed(b"b" * 32)
    assert not verify_signature(bob.author, alice.sign(b"m"), b"m")


@given(st.binary(max_size=100).filter(lambda b: len(b) != 64))
def test_a_signature_of_the_wrong_length_is_an_error_not_false(signature):
    key = SigningKey.from_seed(bytes(32))
    for check in (
        lambda: key.public_key().verify(signature, b"m"),
        lambda: verify_signature(key.author, signature, b"m"),
    ):
        with pytest.raises(SignatureError) as caught:
            check()
        assert (caught.value.field, caught.value.rule) == ("signature", "signature-length")


def test_a_message_or_signature_that_is_not_bytes_is_a_typed_error():
    key = SigningKey.from_seed(bytes(32))
    with pytest.raises(SignatureError, match="message-type"):
        key.sign("text")  # type: ignore[arg-type]
    with pytest.raises(SignatureError, match="message-type"):
        key.public_key().verify(bytes(64), "text")  # type: ignore[arg-type]
    with pytest.raises(SignatureError, match="signature-type"):
        key.public_key().verify("x" * 64, b"m")  # type: ignore[arg-type]


def test_a_generated_key_signs_as_its_own_author():
    key = SigningKey.generate()
    assert len(key.author) == 32
    assert PublicKey(key.author) == key.public_key()
    assert verify_signature(key.author, key.sign(b"hello"), b"hello")
    assert SigningKey.generate().author != key.author


@pytest.mark.parametrize("seed", [b"", bytes(31), bytes(33), bytes(64)], ids=len)
def test_a_seed_of_the_wrong_length_is_refused(seed):
    with pytest.raises(SigningKeyError) as caught:
        SigningKey.from_seed(seed)
    assert (caught.value.field, caught.value.rule) == ("seed", "seed-length")


def test_public_keys_compare_hash_and_pickle_by_their_bytes():
    author = SigningKey.from_seed(bytes(32)).author
    key = PublicKey(author)
    assert key == PublicKey(author) and hash(key) == hash(PublicKey(author))
    assert bytes(key) == author and author.hex() in repr(key)
    copy = pickle.loads(pickle.dumps(key))
    assert copy == key and copy.verify(SigningKey.from_seed(bytes(32)).sign(b"m"), b"m")


def test_a_signing_key_hides_its_seed_and_refuses_to_be_pickled():
    seed = bytes(range(32))
    key = SigningKey.from_seed(seed)
    assert seed.hex() not in repr(key) and key.author.hex() in repr(key)
    with pytest.raises(TypeError):
        pickle.dumps(key)


def test_keys_are_frozen():
    key = SigningKey.from_seed(bytes(32))
    with pytest.raises(AttributeError):
        key.public_key().author = bytes(32)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        key._public = key.public_key()  # type: ignore[misc]


def test_key_errors_are_input_errors_and_value_errors_and_survive_pickling():
    for error_type in (PublicKeyError, SignatureError, SigningKeyError, KeyFileError):
        assert issubclass(error_type, InputError)
        assert issubclass(error_type, StateFuseError)
        assert issubclass(error_type, ValueError)
    error = pickle.loads(pickle.dumps(PublicKeyError("author", "small-order", "why")))
    assert (type(error), error.field, error.rule, error.message) == (
        PublicKeyError,
        "author",
        "small-order",
        "why",
    )


# --- key files ------------------------------------------------------------------------------------


@pytest.fixture
def key() -> SigningKey:
    return SigningKey.from_seed(bytes.fromhex(RFC8032[0]["secret_key"]))


def test_a_saved_key_loads_as_the_same_author_and_signs_the_same(tmp_path, key):
    path = tmp_path / "alice.key"
    key.save(path)
    loaded = SigningKey.load(path)
    assert loaded.author == key.author
    assert loaded.sign(b"m") == key.sign(b"m")
    assert SigningKey.load(str(path)).author == key.author


def test_the_key_file_format_is_magic_version_seed_author_store(tmp_path, key):
    path = tmp_path / "alice.key"
    key.save(path)
    data = path.read_bytes()
    seed = bytes.fromhex(RFC8032[0]["secret_key"])
    assert data == KEY_FILE_MAGIC + bytes([KEY_FILE_VERSION]) + seed + key.author + bytes(16)
    assert (KEY_FILE_MAGIC, KEY_FILE_VERSION, len(data)) == (b"SFKEY", 2, 86)
    assert SigningKey.load(path).bound_to is None
    key.bound(b"S" * 16).save(path, overwrite=True)
    assert path.read_bytes()[70:] == b"S" * 16
    assert SigningKey.load(path).bound_to == b"S" * 16


def test_a_version_1_key_file_of_the_first_release_is_still_read_unbound(tmp_path, key):
    seed = bytes.fromhex(RFC8032[0]["secret_key"])
    path = write_private(tmp_path / "old.key", KEY_FILE_MAGIC + b"\x01" + seed + key.author)
    loaded = SigningKey.load(path)
    assert (loaded.author, loaded.bound_to) == (key.author, None)


@posix_only
def test_a_saved_key_has_mode_0600_whatever_the_umask(tmp_path, key):
    old = os.umask(0)
    try:
        key.save(tmp_path / "a.key")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.key").stat().st_mode) == 0o600


def test_saving_leaves_no_temporary_file_behind(tmp_path, key):
    key.save(tmp_path / "a.key")
    with pytest.raises(KeyFileError):
        key.save(tmp_path / "a.key")
    key.save(tmp_path / "a.key", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key"]


def test_saving_over_an_existing_file_is_refused_and_leaves_it_unchanged(tmp_path, key):
    path = tmp_path / "a.key"
    path.write_bytes(b"precious")
    with pytest.raises(KeyFileError) as caught:
        key.save(path)
    assert (caught.value.field, caught.value.rule) == ("path", "key-file-exists")
    assert str(path) in str(caught.value) and "overwrite=True" in str(caught.value)
    assert path.read_bytes() == b"precious"


def test_saving_over_a_dangling_symlink_is_refused(tmp_path, key):
    (tmp_path / "a.key").symlink_to(tmp_path / "nowhere")
    with pytest.raises(KeyFileError, match="key-file-exists"):
        key.save(tmp_path / "a.key")
    assert not (tmp_path / "nowhere").exists()


@posix_only
def test_overwrite_replaces_a_key_atomically_with_a_private_file(tmp_path, key):
    path = tmp_path / "a.key"
    SigningKey.from_seed(bytes(32)).save(path)
    path.chmod(0o644)
    key.save(path, overwrite=True)
    assert SigningKey.load(path).author == key.author
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_file_created_between_the_check_and_the_link_is_not_replaced(tmp_path, key, monkeypatch):
    path = tmp_path / "a.key"
    real_link = os.link

    def racing_link(src, dst):
        Path(dst).write_bytes(b"the other writer won")
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    with pytest.raises(KeyFileError, match="key-file-exists"):
        key.save(path)
    assert path.read_bytes() == b"the other writer won"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.key"]


def test_saving_works_on_file_systems_without_hard_links(tmp_path, key, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "hard links not supported")

    monkeypatch.setattr(os, "link", no_links)
    key.save(tmp_path / "a.key")
    assert SigningKey.load(tmp_path / "a.key").author == key.author
    with pytest.raises(KeyFileError, match="key-file-exists"):
        key.save(tmp_path / "a.key")


def test_a_failed_write_leaves_nothing_behind(tmp_path, key, monkeypatch):
    def failing_fsync(fd):
        raise OSError(errno.EIO, "disk on fire")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk on fire"):
        key.save(tmp_path / "a.key")
    assert list(tmp_path.iterdir()) == []


@posix_only
@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606, 0o610, 0o601, 0o777])
def test_loading_a_key_that_group_or_others_may_access_is_refused(tmp_path, key, mode):
    path = tmp_path / "a.key"
    key.save(path)
    path.chmod(mode)
    with pytest.raises(KeyFileError) as caught:
        SigningKey.load(path)
    assert (caught.value.field, caught.value.rule) == ("path", "key-file-permissions")
    message = str(caught.value)
    assert str(path) in message and f"{mode:04o}" in message and f"chmod 600 {path}" in message


@posix_only
@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700])
def test_loading_a_key_only_its_owner_may_access_is_allowed(tmp_path, key, mode):
    path = tmp_path / "a.key"
    key.save(path)
    path.chmod(mode)
    assert SigningKey.load(path).author == key.author


@posix_only
def test_permissions_are_checked_before_the_contents(tmp_path):
    path = tmp_path / "a.key"
    path.write_bytes(b"not a key")
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="key-file-permissions"):
        SigningKey.load(path)


def write_private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def test_every_truncation_of_a_key_file_is_refused_as_malformed(tmp_path, key):
    key.save(tmp_path / "a.key")
    data = (tmp_path / "a.key").read_bytes()
    for size in range(len(data)):
        path = write_private(tmp_path / f"cut{size}.key", data[:size])
        with pytest.raises(KeyFileError) as caught:
            SigningKey.load(path)
        assert caught.value.rule == "key-file-format", size


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"-----BEGIN OPENSSH PRIVATE KEY-----\n", "key-file-format"),
        (bytes(70), "key-file-format"),
        (b"sfkey" + bytes(65), "key-file-format"),
        (KEY_FILE_MAGIC + b"\x01" + bytes(65), "key-file-format"),
        (KEY_FILE_MAGIC + b"\x01" + bytes(2000), "key-file-format"),
        (KEY_FILE_MAGIC + b"\x02" + bytes(64), "key-file-format"),
        (KEY_FILE_MAGIC + b"\x03" + bytes(80), "key-file-version"),
        (KEY_FILE_MAGIC + b"\x00" + bytes(64), "key-file-version"),
    ],
    ids=[
        "pem",
        "zeros",
        "lowercase-magic",
        "one-byte-long",
        "huge",
        "version-2-short",
        "version-3",
        "version-0",
    ],
)
def test_a_file_that_is_not_a_version_1_key_file_is_refused(tmp_path, data, rule):
    path = write_private(tmp_path / "a.key", data)
    with pytest.raises(KeyFileError) as caught:
        SigningKey.load(path)
    assert (caught.value.field, caught.value.rule) == ("path", rule)
    assert str(path) in str(caught.value)


def test_a_key_file_whose_stored_author_is_small_order_is_refused(tmp_path, key):
    header_and_seed = KEY_FILE_MAGIC + b"\x01" + bytes.fromhex(RFC8032[0]["secret_key"])
    for vector in EDGE_CASES:
        path = write_private(
            tmp_path / "a.key", header_and_seed + bytes.fromhex(vector["encoding"])
        )
        with pytest.raises(KeyFileError) as caught:
            SigningKey.load(path)
        assert caught.value.rule == "key-file-public-key"
        assert isinstance(caught.value.__cause__, PublicKeyError)
        assert caught.value.__cause__.rule == vector["rule"]


def test_a_key_file_with_a_damaged_seed_is_refused_instead_of_signing_as_someone_else(
    tmp_path, key
):
    key.save(tmp_path / "a.key")
    data = bytearray((tmp_path / "a.key").read_bytes())
    data[10] ^= 0x01
    path = write_private(tmp_path / "b.key", bytes(data))
    with pytest.raises(KeyFileError) as caught:
        SigningKey.load(path)
    assert caught.value.rule == "key-file-author-mismatch"
    assert key.author.hex() in str(caught.value)


def test_loading_a_missing_file_or_a_directory_is_a_key_file_error(tmp_path):
    with pytest.raises(KeyFileError, match="key-file-missing"):
        SigningKey.load(tmp_path / "absent.key")
    with pytest.raises(KeyFileError, match="key-file-format"):
        SigningKey.load(tmp_path)


def test_refused_authors_are_refused_every_time_and_never_cached():
    identity = bytes.fromhex(SMALL_ORDER[0]["encoding"])
    before = key_module._accepted_author.cache_info().currsize
    for _ in range(3):
        with pytest.raises(PublicKeyError):
            verify_signature(identity, bytes(64), b"")
    assert key_module._accepted_author.cache_info().currsize == before
