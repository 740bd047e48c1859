"""Change format 2: the signature covers the op ids, the bodies travel beside them
(SEMANTICS §8, §10).

A format-2 change verifies with any of its bodies missing, and a body present must hash to the id
the header lists; format-1 changes (every earlier release) stay readable and verifiable; a peer
of the release before this one refuses a format-2 change cleanly (quarantined with reason
``unsupported-version``), which is checked against that release's own code, taken from git.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statefuse.registry.value import decode_value
from statefuse.storage.writer import Writer
from statefuse.sync.change import (
    CHANGE_FORMAT_VERSION,
    LEGACY_CHANGE_FORMAT,
    ChangeInputError,
    UnverifiedChange,
    sign_change,
    without_bodies,
)
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica
from statefuse.sync.verify import (
    QuarantineReason,
    VerificationError,
    verify_change,
    verify_change_reference,
)

SPACE = "format"
FP = bytes(32)
ROOT = Path(__file__).resolve().parent.parent
#: The last commit whose code reads change format 1 only (the release before format 2).
FORMAT_1_RELEASE = "b6d42f6b0e35f73a27012bff58041ebf5dedb5ba"


def _change(n: int = 4):  # type: ignore[no-untyped-def]
    key = SigningKey.from_seed(bytes([7]) * 32)
    writer = Writer(key.author, clock=lambda: 0)
    ops = [writer.claim("ns", f"s{i}", "p", f"secret-{i}") for i in range(n)]
    return sign_change(key, space=SPACE, seq=1, prev=None, registry=FP, ops=ops)


def test_a_replica_writes_format_2_and_reads_back_what_it_wrote(tmp_path):
    path = tmp_path / "s.sqlite"
    with Replica.open(path, space=SPACE, create=True) as r:
        r.add_claim("ns", "s", "p", "v")
        [data] = r.change_bytes(r.change_ids())
        assert decode_value(data)["v"] == CHANGE_FORMAT_VERSION == 2
    with Replica.open(path, space=SPACE) as r:
        assert [c.value for c in r.state().claims.values()] == ["v"]


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 5)))
def test_a_format_2_change_verifies_with_any_of_its_bodies_missing(dropped):
    change = _change(6)
    drop = {change.op_ids[i] for i in dropped}
    data = without_bodies(change, drop)
    for verify in (verify_change, verify_change_reference):
        got = verify(UnverifiedChange(data), space=SPACE)
        assert got.change_id == change.change_id and got.signature == change.signature
        assert got.op_ids == change.op_ids
        assert [op.op_id for op in got.ops] == [i for i in change.op_ids if i not in drop]
        assert got.missing == frozenset(drop)
    for op in change.ops:
        if op.op_id in drop:
            assert op.encode() not in data


def test_a_body_present_must_hash_to_its_listed_id():
    change = _change(3)
    outer = msgpack.unpackb(change.data)
    outer["ops"][0], outer["ops"][1] = outer["ops"][1], outer["ops"][0]
    swapped = msgpack.packb(outer, use_bin_type=True)
    for verify in (verify_change, verify_change_reference):
        with pytest.raises(VerificationError) as exc:
            verify(UnverifiedChange(swapped), space=SPACE)
        assert exc.value.reason is QuarantineReason.OP_ID_MISMATCH
    outer = msgpack.unpackb(change.data)
    outer["ops"] = outer["ops"][:2]
    short = msgpack.packb(outer, use_bin_type=True)
    for verify in (verify_change, verify_change_reference):
        with pytest.raises(VerificationError) as exc:
            verify(UnverifiedChange(short), space=SPACE)
        assert exc.value.reason is QuarantineReason.MALFORMED


def test_an_op_id_list_cannot_be_edited_without_breaking_the_signature():
    change = _change(3)
    outer = msgpack.unpackb(change.data)
    header = msgpack.unpackb(outer["change"])
    header["ops"] = header["ops"][:2]
    outer["change"] = msgpack.packb(header, use_bin_type=True)
    outer["ops"] = outer["ops"][:2]
    with pytest.raises(VerificationError) as exc:
        verify_change(UnverifiedChange(msgpack.packb(outer, use_bin_type=True)), space=SPACE)
    assert exc.value.reason is QuarantineReason.BAD_SIGNATURE


def test_format_1_changes_are_still_read_verified_and_merged():
    key = SigningKey.from_seed(bytes([9]) * 32)
    writer = Writer(key.author, clock=lambda: 0)
    old = sign_change(
        key,
        space=SPACE,
        seq=1,
        prev=None,
        registry=Replica.memory(space=SPACE).registry.fingerprint,
        ops=[writer.claim("ns", "s", "p", "from an earlier release")],
        version=LEGACY_CHANGE_FORMAT,
    )
    assert decode_value(old.data)["v"] == 1 and old.version == 1
    with pytest.raises(ChangeInputError):
        without_bodies(old, set(old.op_ids))
    r = Replica.memory(space=SPACE)
    assert r.receive([old.data]).accepted == 1
    assert [c.value for c in r.state().claims.values()] == ["from an earlier release"]


def _previous_release(tmp_path: Path) -> Path:
    """The code of the release before format 2, unpacked from this repository's history."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", FORMAT_1_RELEASE, "statefuse", "sync", "registry"],
        capture_output=True,
        check=True,
    ).stdout
    out = tmp_path / "release"
    out.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="tar")
    return out


def test_a_peer_of_the_previous_release_quarantines_a_format_2_change_with_a_version_reason(
    tmp_path,
):
    """What an older peer sees of a new change: refused at its door, quarantined (kept, with
    the reason ``unsupported-version``), nothing merged; run with that release's own code."""
    new = Replica.memory(space=SPACE)
    new.add_claim("ns", "s", "p", "new format")
    [data] = new.change_bytes(new.change_ids())
    (tmp_path / "change.bin").write_bytes(data)
    script = (
        "import sys, statefuse\n"
        "from statefuse.sync.replica import Replica\n"
        "r = Replica.memory(space=sys.argv[1])\n"
        "report = r.receive([open(sys.argv[2], 'rb').read()])\n"
        "[q] = r.quarantine()\n"
        "print(statefuse.__file__)\n"
        "print(report.accepted, report.quarantined, q.reason, q.message)\n"
        "print(len(r.state().claims))\n"
    )
    release = _previous_release(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(release)}
    run = subprocess.run(
        [sys.executable, "-c", script, SPACE, str(tmp_path / "change.bin")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    out = run.stdout.splitlines()
    assert out[0].startswith(str(release))
    assert out[1] == "0 1 unsupported-version signed change has unsupported version 2"
    assert out[2] == "0"
