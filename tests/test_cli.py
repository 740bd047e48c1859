"""The command line: exact output and exit status of every command, for success and for each
user error, and a reference (docs/reference/cli.md) that documents every command and option.

Expected texts are written out by hand from the documented formats (columns two spaces apart,
ids shortened to 12 hex digits, authors without a name to 8, values spelled as JSON); the ids in
them are read through the library, never from the output under test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import blake3
import pytest

from statefuse import DEFAULT_REGISTRY, Lens, Writer, context_for
from statefuse.entry.cli import COMMANDS, main, parser
from statefuse.registry import same_value
from statefuse.sync.bundle import write_bundle
from statefuse.sync.change import sign_change
from statefuse.sync.key import SigningKey
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
SEED = bytes(range(32))
#: 2026-01-01 00:00:00 UTC, the clock of replicas written through the library here.
WALL = 1_767_225_600_000


class Run(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    def run(*argv: str) -> Run:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli) -> Path:
    """A new store of space ``team``, named by ``$STATEFUSE_STORE``."""
    path = tmp_path / "team.db"
    monkeypatch.setenv("STATEFUSE_STORE", str(path))
    assert cli("init", "--space", "team").code == 0
    return path


@contextmanager
def opened(path: Path, **options: object) -> Iterator[Replica]:
    """The store through the library (closed again before the next command runs)."""
    replica = Replica.open(path, create="space" in options, **options)  # type: ignore[arg-type]
    try:
        yield replica
    finally:
        replica.close()


def short(ident: bytes) -> str:
    return ident.hex()[:12]


def unnamed(author: bytes) -> str:
    """How a table shows an author that declared no name."""
    return author.hex()[:8]


def utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


# --- init -----------------------------------------------------------------------------------------


def test_init_creates_the_store_and_a_private_key_and_prints_the_author(tmp_path, cli):
    path = tmp_path / "team.db"
    result = cli("--store", str(path), "init", "--space", "team")
    author = SigningKey.load(f"{path}.key").author.hex()
    assert result == Run(
        0,
        f"Created store {path} for space 'team' (open mode)\n"
        f"author    {author}\n"
        f"key file  {path}.key (private: never share it)\n",
        "",
    )
    assert os.stat(f"{path}.key").st_mode & 0o777 == 0o600


def test_init_in_closed_mode_makes_you_the_root(tmp_path, cli):
    path = tmp_path / "team.db"
    result = cli("--store", str(path), "init", "--space", "team", "--mode", "closed")
    me = SigningKey.load(f"{path}.key").author.hex()
    assert result.out.splitlines()[1:] == [
        f"author    {me}",
        f"key file  {path}.key (private: never share it)",
        f"root      {me} (you)",
    ]
    with opened(path) as r:
        assert r.root == r.author and r.mode.value == "closed"


def test_init_with_an_existing_key_file_uses_that_key(tmp_path, cli):
    key = SigningKey.from_seed(SEED)
    key.save(tmp_path / "me.key")
    path = tmp_path / "team.db"
    assert (
        cli("--store", str(path), "init", "--space", "team", "--key", str(tmp_path / "me.key"))[0]
        == 0
    )
    with opened(path) as r:
        assert r.author == key.author


def test_init_again_with_the_same_space_changes_nothing(store, cli):
    assert cli("init", "--space", "team") == Run(
        0, f"Store {store} already holds space 'team' (open mode); nothing changed\n", ""
    )


def test_init_with_another_space_on_an_existing_store_is_refused(store, cli):
    assert cli("init", "--space", "other") == Run(
        1, "", f"Error: {store} holds space 'team', not 'other'\n"
    )


# --- claim and its syntax -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("42", 42),
        ("1.5", 1.5),
        ("true", True),
        ("null", None),
        ('"42"', "42"),
        ("2026-03-25", "2026-03-25"),
        ("Dana Smith", "Dana Smith"),
        ('[1, "a"]', [1, "a"]),
        ('{"b": 2, "a": [true]}', {"a": [True], "b": 2}),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ('{"$bytes": "00ff"}', b"\x00\xff"),
    ],
)
def test_a_value_is_read_as_json_when_it_parses_and_as_a_string_otherwise(
    store, cli, typed, stored
):
    code, out, err = cli("claim", "team/plan/note", typed)
    with opened(store) as r:
        (claim,) = r.state().active_claims()
    # Value equality as SEMANTICS §1 defines it (kind and canonical bytes: 1, 1.0 and True
    # differ, as do "42" and 42); a list or map is read back frozen, equal to the one written.
    assert claim.value == stored and same_value(claim.value, stored)
    shown = {
        '{"b": 2, "a": [true]}': '{"a": [true], "b": 2}',
        "2026-03-25": '"2026-03-25"',
        "Dana Smith": '"Dana Smith"',
        "NaN": '"NaN"',
        "Infinity": '"Infinity"',
        '{"$bytes": "00ff"}': '{"$bytes": "00ff"}',
    }.get(typed, typed)
    assert (code, err) == (0, "")
    assert out == f"Added claim {claim.claim_id.hex()}: team/plan/note [global] = {shown}\n"


def test_claim_options_become_the_claims_metadata(store, cli):
    assert cli("claim", "project/launch/deadline", "2026-03-25").code == 0
    with opened(store) as r:
        (base,) = r.state().active_claims()
    assert base.confidence is None  # no --confidence: recorded as unset, not 1.0
    code, _, _ = cli(
        "claim",
        "project/launch/budget",
        "50000",
        "--scope",
        "task:release",
        "--confidence",
        "0.5",
        "--provenance",
        "finance sheet",
        "--authority",
        "owner",
        "--layer",
        "working",
        "--kind",
        "commitment",
        "--constraint",
        "budget",
        "--visibility",
        "finance",
        "--visibility",
        "exec",
        "--depends-on",
        base.claim_id.hex()[:10],
        "--expires",
        "1800000000000",
    )
    assert code == 0
    with opened(store) as r:
        (c,) = r.state().active_at("project", "launch", "budget", "task:release")
    assert (c.value, c.confidence, c.provenance, c.authority) == (
        50000,
        0.5,
        "finance sheet",
        "owner",
    )
    assert (c.layer.value, c.kind, c.constraint) == ("working", "commitment", "budget")
    assert c.visibility == ("exec", "finance") and c.depends_on == (base.claim_id,)
    assert c.expires == 1_800_000_000_000


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("99999999999999999999", "value: integer 99999999999999999999 outside signed 64-bit range"),
        ("1e400", "value: float inf is not finite"),
        ('{"$bytes": "zz"}', 'a {"$bytes": …} value needs hex digits'),
    ],
)
def test_a_value_outside_the_value_model_is_a_user_error(store, cli, typed, message):
    assert cli("claim", "team/plan/note", typed) == Run(1, "", f"Error: {message}\n")
    with opened(store) as r:
        assert len(r) == 0


@pytest.mark.parametrize("key", ["a/b", "a/b/c/d", "a//c", "/b/c", "abc", "a/b/c/"])
def test_a_key_that_is_not_three_parts_is_a_user_error(store, cli, key):
    assert cli("claim", key, "1") == Run(
        1, "", f"Error: {key!r} is not a key: write namespace/subject/predicate\n"
    )


def test_a_bad_scope_is_a_user_error_naming_the_field(store, cli):
    code, out, err = cli("claim", "a/b/c", "1", "--scope", "team")
    assert (code, out) == (1, "")
    assert err == (
        "Error: scope: 'team' is not one of global, hypothetical, draft, task:<id>, session:<id>\n"
    )


def test_slash_and_percent_inside_a_key_part_are_percent_escaped_both_ways(store, cli):
    assert cli("claim", "docs/a%2Fb/100%25", "1").code == 0
    with opened(store) as r:
        (c,) = r.state().active_claims()
    assert (c.namespace, c.subject, c.predicate) == ("docs", "a/b", "100%")
    assert "docs/a%2Fb/100%25" in cli("show").out
    (event,) = cli("history", "docs/a%2Fb/100%25").out.splitlines()[1:]
    assert event.split()[1:3] == ["claim", short(c.claim_id)]


# --- show, conflicts, decide ----------------------------------------------------------------------


def _seed_launch(store: Path):
    with opened(store) as r:
        a = r.add_claim("project", "launch", "deadline", "2026-03-25", provenance="kickoff")
        b = r.add_claim("project", "launch", "deadline", "2026-04-01", provenance="vendor email")
        t = r.add_claim("project", "launch", "deadline", "2026-05-01", scope="task:t1")
        p = r.add_claim("vendor", "acme", "price", 1150)
        return a, b, t, p, unnamed(r.author)


def test_show_lists_active_claims_by_key_and_scope_with_conflict_notes(store, cli):
    a, b, t, p, me = _seed_launch(store)
    first, second = sorted([a, b], key=lambda c: c.claim_id)
    assert cli("show") == Run(
        0,
        "ID            KEY                      SCOPE    VALUE         AUTHOR    NOTE\n"
        f"{short(first.claim_id)}  project/launch/deadline  global   {json.dumps(first.value)}"
        f"  {me}  conflict\n"
        f"{short(second.claim_id)}  project/launch/deadline  global   {json.dumps(second.value)}"
        f"  {me}  conflict\n"
        f'{short(t.claim_id)}  project/launch/deadline  task:t1  "2026-05-01"  {me}\n'
        f"{short(p.claim_id)}  vendor/acme/price        global   1150          {me}\n",
        "",
    )


def test_show_filters_by_key_prefix_and_scope(store, cli):
    _, _, t, p, me = _seed_launch(store)
    assert cli("show", "vendor").out == (
        "ID            KEY                SCOPE   VALUE  AUTHOR    NOTE\n"
        f"{short(p.claim_id)}  vendor/acme/price  global  1150   {me}\n"
    )
    assert cli("show", "project/launch", "--scope", "task:t1").out == (
        "ID            KEY                      SCOPE    VALUE         AUTHOR    NOTE\n"
        f'{short(t.claim_id)}  project/launch/deadline  task:t1  "2026-05-01"  {me}\n'
    )
    assert cli("show", "nothing/here") == Run(0, "No active claims.\n", "")


def test_conflicts_shows_each_conflict_with_its_groups_and_then_its_decision(store, cli):
    a, b, _, _, me = _seed_launch(store)
    by_value = f'{short(a.claim_id)}  "2026-03-25"  {me}  kickoff\n'
    other = f'{short(b.claim_id)}  "2026-04-01"  {me}  vendor email\n'
    # groups are ordered by the canonical bytes of their values: 2026-03-25 first
    body = (
        "  GROUP  ID            VALUE         AUTHOR    PROVENANCE\n"
        f"  1      {by_value}"
        f"  2      {other}"
    )
    assert cli("conflicts") == Run(
        0,
        "project/launch/deadline [global]: 2 candidates in 2 groups, undecided\n" + body,
        "",
    )
    assert cli("decide", b.claim_id.hex()[:8], "--reason", "vendor confirmed") == Run(
        0,
        f'Decided project/launch/deadline [global] for claim {b.claim_id.hex()}: "2026-04-01"\n',
        "",
    )
    assert cli("conflicts").out == (
        "project/launch/deadline [global]: 2 candidates in 2 groups,"
        f" decided for {short(b.claim_id)} (vendor confirmed)\n" + body
    )
    notes = [
        line.rsplit("  ", 1)[1]
        for line in cli("show", "project/launch/deadline").out.splitlines()[1:3]
    ]
    assert sorted(notes) == ["chosen", "overruled"]


def test_conflicts_on_a_memory_without_any_says_so(store, cli):
    assert cli("conflicts") == Run(0, "No conflicts.\n", "")


def _seed_conflicts(store: Path, n: int) -> None:
    """``n`` conflicts, on keys ``project/p<i>/owner``, two candidates each."""
    with opened(store) as r:
        for i in range(n):
            r.add_claim("project", f"p{i}", "owner", "ana")
            r.add_claim("project", f"p{i}", "owner", "bo")


def test_conflicts_limit_shows_the_first_n_in_key_order_and_says_how_many_more(store, cli):
    _seed_conflicts(store, 5)
    every = cli("conflicts").out.rstrip("\n").split("\n\n")
    assert [block.split(" ", 1)[0] for block in every] == [f"project/p{i}/owner" for i in range(5)]
    left = "3 more conflicts not shown (5 in all; --all lists every one)."
    assert cli("conflicts", "--limit", "2") == Run(
        0, "\n\n".join(every[:2]) + "\n\n" + left + "\n", ""
    )
    assert cli("conflicts", "--limit", "4").out.endswith(
        every[3] + "\n\n1 more conflict not shown (5 in all; --all lists every one).\n"
    )
    # a limit at or above the count shows them all, with no line about more
    assert cli("conflicts", "--limit", "5") == cli("conflicts") == cli("conflicts", "--limit", "9")
    full = json.loads(cli("--json", "conflicts").out)
    assert full["more"] == 0 and len(full["conflicts"]) == 5
    part = json.loads(cli("--json", "conflicts", "--limit", "2").out)
    assert part == {"conflicts": full["conflicts"][:2], "more": 3}


def test_conflicts_limit_on_a_memory_without_any_says_so(store, cli):
    assert cli("conflicts", "--limit", "3") == Run(0, "No conflicts.\n", "")
    empty = json.loads(cli("--json", "conflicts", "--limit", "3").out)
    assert empty == {"conflicts": [], "more": 0}


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5", ""])
def test_a_bad_conflicts_limit_is_one_error_line_naming_the_option(store, cli, bad):
    _seed_conflicts(store, 1)
    assert cli("conflicts", "--limit", bad) == Run(
        1, "", f"Error: --limit takes a positive whole number, not {bad!r}\n"
    )


def test_deciding_for_a_claim_that_is_in_no_conflict_is_a_user_error(store, cli):
    *_, p, _ = _seed_launch(store)
    assert cli("decide", p.claim_id.hex()) == Run(
        1,
        "",
        f"Error: claim {short(p.claim_id)} is not a candidate of a current conflict"
        " (vendor/acme/price [global])\n",
    )


# --- retract, supersede, history ------------------------------------------------------------------


def test_retract_removes_exactly_one_claim(store, cli):
    a, b, _, _, _ = _seed_launch(store)
    assert cli("retract", a.claim_id.hex()[:9], "--reason", "typo") == Run(
        0,
        f'Retracted claim {a.claim_id.hex()}: project/launch/deadline [global] = "2026-03-25"\n',
        "",
    )
    with opened(store) as r:
        state = r.state()
        assert not state.is_active(a.claim_id) and state.is_active(b.claim_id)
        (retraction,) = state.retracted[a.claim_id]
    assert retraction.reason == "typo" and retraction.target_claim_id == a.claim_id
    assert cli("conflicts").out == "No conflicts.\n"


def test_a_semantic_retraction_also_kills_copies_written_later(store, cli):
    with opened(store) as r:
        old = r.add_claim("vendor", "acme", "price", 1200)
        twin = r.add_claim("vendor", "acme", "price", 1200, provenance="another source")
        stale = r.fork()  # a branch (in memory) that will never see the retraction
    assert cli("retract", "--semantic", old.claim_id.hex(), "--reason", "quote expired") == Run(
        0,
        f"Retracted every claim like {old.claim_id.hex()} (2 claims now):"
        " vendor/acme/price [global] = 1200\n",
        "",
    )
    copy = stale.add_claim("vendor", "acme", "price", 1200)
    with opened(store) as r:
        r.merge(stale)
        r.add_claim("vendor", "acme", "price", 1150)
        state = r.state()
        assert copy.claim_id in state.claims and not state.is_active(copy.claim_id)
        assert not state.is_active(twin.claim_id)
    assert [line.split()[3] for line in cli("show").out.splitlines()[1:]] == ["1150"]


def test_supersede_replaces_a_value_and_history_tells_the_story_in_lamport_order(store, cli):
    a, b, _, _, me = _seed_launch(store)
    code, out, _ = cli("supersede", a.claim_id.hex()[:8], "2026-03-28", "--reason", "typo")
    with opened(store) as r:
        (new,) = [
            c
            for c in r.state().active_at("project", "launch", "deadline")
            if c.value == "2026-03-28"
        ]
    assert (code, out) == (
        0,
        f"Superseded claim {a.claim_id.hex()} with {new.claim_id.hex()}:"
        ' project/launch/deadline [global] = "2026-03-28"\n',
    )
    assert cli("decide", new.claim_id.hex()[:12], "--reason", "user said so").code == 0
    with opened(store) as r:
        t = r.state().active_at("project", "launch", "deadline", "task:t1")[0]
    ids = {c: short(c.claim_id) for c in (a, b, new, t)}
    assert cli("history", "project/launch/deadline") == Run(
        0,
        "LAMPORT  EVENT    CLAIM         SCOPE    VALUE         AUTHOR    WHY\n"
        f'1        claim    {ids[a]}  global   "2026-03-25"  {me}  kickoff\n'
        f'2        claim    {ids[b]}  global   "2026-04-01"  {me}  vendor email\n'
        f'3        claim    {ids[t]}  task:t1  "2026-05-01"  {me}\n'
        f'5        claim    {ids[new]}  global   "2026-03-28"  {me}  kickoff\n'  # metadata kept
        f'6        retract  {ids[a]}  global   "2026-03-25"  {me}  typo; superseded by {ids[new]}\n'
        f'7        decide   {ids[new]}  global   "2026-03-28"  {me}  user said so\n',
        "",
    )
    assert cli("history", "project/launch/deadline", "--scope", "task:t1").out == (
        "LAMPORT  EVENT  CLAIM         SCOPE    VALUE         AUTHOR    WHY\n"
        f'3        claim  {ids[t]}  task:t1  "2026-05-01"  {me}\n'
    )


def test_history_of_a_key_nobody_wrote_says_so(store, cli):
    assert cli("history", "a/b/c") == Run(0, "No history for a/b/c.\n", "")


# --- claim ids ------------------------------------------------------------------------------------

#: Two claims whose ids share 9 hex digits: found once by searching values under this seed and
#: clock (claim ids hash the op, so they stay put unless the op encoding changes).
TWINS = ("a15755", "b20195")


def test_a_claim_id_prefix_must_be_long_enough_known_and_unique(tmp_path, monkeypatch, cli):
    path = tmp_path / "team.db"
    monkeypatch.setenv("STATEFUSE_STORE", str(path))
    with opened(path, space="team", key=SigningKey.from_seed(SEED), clock=lambda: WALL) as r:
        one = r.add_claim("team", "twins", "note", TWINS[0], confidence=1.0).claim_id.hex()
        two = r.add_claim("team", "twins", "note", TWINS[1], confidence=1.0).claim_id.hex()
    assert one[:9] == two[:9] == "b96a1f2fb", "the pinned twins no longer share a prefix"
    assert cli("retract", "b96a1f2f") == Run(
        1,
        "",
        "Error: claim id b96a1f2f is ambiguous: it starts 2 claim ids"
        " (b96a1f2fb362, b96a1f2fbe06); give more digits\n",
    )
    assert cli("retract", "b96a1f2") == Run(
        1, "", "Error: claim id 'b96a1f2' is not 8 to 64 hex digits\n"
    )
    assert cli("retract", "b96a1f2g") == Run(
        1, "", "Error: claim id 'b96a1f2g' is not 8 to 64 hex digits\n"
    )
    assert cli("retract", "0123456789") == Run(
        1, "", "Error: no claim has an id starting with 0123456789\n"
    )
    assert cli("retract", "B96A1F2FB3").code == 0  # case does not matter; odd lengths work
    with opened(path) as r:
        assert [c.claim_id.hex() for c in r.state().active_claims()] == [one]


# --- bundles and quarantine -----------------------------------------------------------------------


def test_export_and_import_move_every_change_and_a_second_import_finds_them_known(
    store, tmp_path, cli
):
    _seed_launch(store)
    bundle = tmp_path / "team.bundle"
    assert cli("export", str(bundle)) == Run(0, f"Exported 4 changes to {bundle}\n", "")
    other = tmp_path / "other.db"
    assert cli("--store", str(other), "init", "--space", "team").code == 0
    assert cli("--store", str(other), "import", str(bundle)) == Run(
        0,
        f"Imported {bundle}: 4 accepted, 0 already known, 0 pending, 0 quarantined; 4 new ops\n",
        "",
    )
    assert cli("--store", str(other), "import", str(bundle)).out == (
        f"Imported {bundle}: 0 accepted, 4 already known, 0 pending, 0 quarantined; 0 new ops\n"
    )
    with opened(store) as a, opened(other) as b:
        assert a.state().digest() == b.state().digest()


def test_import_draws_a_progress_bar_on_stderr_when_asked(store, tmp_path, cli):
    _seed_launch(store)
    bundle = tmp_path / "team.bundle"
    cli("export", str(bundle))
    other = tmp_path / "other.db"
    cli("--store", str(other), "init", "--space", "team")
    result = cli("--store", str(other), "import", str(bundle), "--progress")
    assert result.err == "\rimport [" + "#" * 30 + "] 4/4\n"
    assert cli("--store", str(other), "import", str(bundle)).err == ""  # not a terminal


def test_a_missing_or_unreadable_bundle_is_a_user_error(store, tmp_path, cli):
    missing = tmp_path / "nope.bundle"
    assert cli("import", str(missing)) == Run(
        1, "", f"Error: cannot read bundle {missing}: No such file or directory\n"
    )
    junk = tmp_path / "junk.bundle"
    junk.write_bytes(b"hello, not a bundle")
    assert cli("import", str(junk)) == Run(
        1, "", "Error: not a StateFuse bundle (bad magic or version)\n"
    )


def test_a_bundle_with_a_bad_signature_is_refused_whole(store, tmp_path, cli):
    _seed_launch(store)
    bundle = tmp_path / "team.bundle"
    cli("export", str(bundle))
    data = bytearray(bundle.read_bytes())
    data[-1] ^= 1
    bundle.write_bytes(bytes(data))
    other = tmp_path / "other.db"
    cli("--store", str(other), "init", "--space", "team")
    assert cli("--store", str(other), "import", str(bundle)) == Run(
        1, "", "Error: the bundle is not signed by its exporter\n"
    )
    with opened(other) as r:
        assert len(r) == 0 and r.quarantine() == []


def test_a_bundle_for_another_space_is_refused(store, tmp_path, cli):
    bundle = tmp_path / "team.bundle"
    cli("export", str(bundle))
    other = tmp_path / "other.db"
    cli("--store", str(other), "init", "--space", "elsewhere")
    assert cli("--store", str(other), "import", str(bundle)) == Run(
        1, "", "Error: bundle is for space 'team', not 'elsewhere'\n"
    )


def _forged_bundle(path: Path) -> bytes:
    """A bundle, validly signed by its exporter, holding one change with a flipped signature."""
    key = SigningKey.from_seed(SEED)
    ops = [Writer(key.author, clock=lambda: WALL).claim("vendor", "acme", "price", 1)]
    good = sign_change(
        key, space="team", seq=1, prev=None, registry=DEFAULT_REGISTRY.fingerprint, ops=ops
    )
    forged = bytearray(good.data)
    forged[good.data.rindex(good.signature)] ^= 1
    write_bundle(path, SigningKey.generate(), "team", [bytes(forged)])
    return bytes(forged)


def test_a_forged_change_is_quarantined_and_listed_with_its_reason(store, tmp_path, cli):
    forged = _forged_bundle(tmp_path / "forged.bundle")
    assert cli("quarantine") == Run(0, "Quarantine is empty.\n", "")
    assert cli("import", str(tmp_path / "forged.bundle")).out == (
        f"Imported {tmp_path / 'forged.bundle'}: 0 accepted, 0 already known, 0 pending,"
        " 1 quarantined; 0 new ops\n"
    )
    cli("import", str(tmp_path / "forged.bundle"))  # seen twice
    with opened(store) as r:
        (record,) = r.quarantine()
    key = blake3.blake3(forged).digest()
    assert record.key == key and record.reason == "bad-signature" and record.count == 2
    first, last = utc(record.first_seen_ms), utc(record.last_seen_ms)
    message = record.message
    assert cli("quarantine") == Run(
        0,
        "ID            REASON         FIRST SEEN            LAST SEEN             COUNT  MESSAGE\n"
        f"{short(key)}  bad-signature  {first}  {last}  2      {message}\n",
        "",
    )
    hex_data = forged.hex()
    rows = "".join(f"  {hex_data[i : i + 64]}\n" for i in range(0, len(hex_data), 64))
    assert cli("quarantine", "--show", key.hex()[:8]) == Run(
        0,
        f"id          {key.hex()}\n"
        "reason      bad-signature\n"
        f"message     {message}\n"
        f"first seen  {first}\n"
        f"last seen   {last}\n"
        "count       2\n"
        f"size        {len(forged)} bytes\n"
        "data\n" + rows,
        "",
    )
    assert cli("quarantine", "--show", "00000000").code == 1


# --- names ----------------------------------------------------------------------------------------


def test_init_with_a_name_and_history_conflicts_and_keys_show_each_author_by_name(tmp_path, cli):
    scout_db, planner_db = tmp_path / "scout.db", tmp_path / "planner.db"
    made = cli("--store", str(scout_db), "init", "--space", "team", "--name", "scout")
    scout = SigningKey.load(f"{scout_db}.key").author
    assert made.out.splitlines()[1:3] == [f"author    {scout.hex()}", "name      scout"]
    assert cli("--store", str(planner_db), "init", "--space", "team", "--name", "planner").code == 0
    planner = SigningKey.load(f"{planner_db}.key").author
    for db, value in ((scout_db, "2026-04-01"), (planner_db, "2026-04-08")):
        assert cli("--store", str(db), "claim", "project/launch/deadline", value).code == 0
    cli("--store", str(scout_db), "export", str(tmp_path / "scout.bundle"))
    assert cli("--store", str(planner_db), "import", str(tmp_path / "scout.bundle")).code == 0

    history = cli("--store", str(planner_db), "history", "project/launch/deadline").out
    rows = [line.split() for line in history.splitlines()[1:]]
    assert {(r[1], r[4], r[5]) for r in rows} == {
        ("claim", '"2026-04-01"', "scout"),
        ("claim", '"2026-04-08"', "planner"),
    }
    conflicts = cli("--store", str(planner_db), "conflicts").out
    assert "scout" in conflicts and "planner" in conflicts and scout.hex()[:8] not in conflicts
    events = json.loads(
        cli("--store", str(planner_db), "--json", "history", "project/launch/deadline").out
    )["events"]
    assert {(e["author"], e["author_name"]) for e in events} == {
        (scout.hex(), "scout"),
        (planner.hex(), "planner"),
    }
    keys = cli("--store", str(planner_db), "keys", "show").out.splitlines()
    assert f"you    {planner.hex()} (planner)" in keys
    assert f"{scout.hex()}  scout    2" in keys  # two changes: its name, its claim


def test_name_shows_and_sets_the_name_and_refuses_a_bad_one_naming_the_rule(store, cli):
    with opened(store) as r:
        me = r.author.hex()
    assert cli("name") == Run(
        0, f"No name declared for author {me} (set one: statefuse name NAME)\n", ""
    )
    assert cli("name", "scout") == Run(0, f"You are now 'scout' (author {me})\n", "")
    assert cli("name", "scout") == Run(0, "You are 'scout' already; nothing changed\n", "")
    assert cli("name") == Run(0, f"You are 'scout' (author {me})\n", "")
    assert cli("--json", "name").out == (
        json.dumps({"author": me, "changed": False, "name": "scout"}, indent=2) + "\n"
    )
    assert cli("name", " scout") == Run(
        1, "", "Error: NAME: an author name has no leading or trailing whitespace\n"
    )
    assert cli("init", "--space", "team", "--name", "x" * 65) == Run(
        1, "", "Error: --name: an author name is 1 to 64 characters\n"
    )
    assert cli("init", "--space", "team", "--name", "ranger") == Run(
        0,
        f"Store {store} already holds space 'team' (open mode); its author is now called"
        " 'ranger'\n",
        "",
    )
    with opened(store) as r:
        assert r.names() == {r.author: "ranger"}


# --- keys -----------------------------------------------------------------------------------------


def test_keys_admit_and_revoke_decide_which_authors_count_in_a_closed_space(tmp_path, cli):
    root_db, alice_db = tmp_path / "root.db", tmp_path / "alice.db"
    cli("--store", str(root_db), "init", "--space", "team", "--mode", "closed")
    root = SigningKey.load(f"{root_db}.key").author.hex()
    cli("--store", str(alice_db), "init", "--space", "team", "--mode", "closed", "--root", root)
    alice = SigningKey.load(f"{alice_db}.key").author.hex()
    for value in ("1150", "1200", "1250"):
        assert cli("--store", str(alice_db), "claim", "vendor/acme/price", value).code == 0
    cli("--store", str(alice_db), "export", str(tmp_path / "alice.bundle"))
    cli("--store", str(root_db), "import", str(tmp_path / "alice.bundle"))
    assert cli("--store", str(root_db), "show").out == "No active claims.\n"  # not admitted

    rows = sorted([f"{root}        0        you, root", f"{alice}        3        not admitted"])
    head = "AUTHOR" + " " * 60 + "NAME  CHANGES  STATUS        ROLES"
    assert cli("--store", str(root_db), "keys", "show") == Run(
        0,
        "space  team (closed mode)\n"
        f"store  {root_db}\n"
        f"you    {root}\n"
        f"root   {root}\n"
        "\n" + "\n".join([head, *rows]) + "\n",
        "",
    )
    assert cli("--store", str(root_db), "keys", "admit", alice, "--role", "editor") == Run(
        0, f"Admitted {alice} (roles: editor)\n", ""
    )
    assert len(cli("--store", str(root_db), "show").out.splitlines()) == 4
    assert cli("--store", str(root_db), "keys", "revoke", alice[:8], "--through-seq", "1") == Run(
        0, f"Revoked {alice}: changes after seq 1 no longer count\n", ""
    )
    shown = cli("--store", str(root_db), "show").out.splitlines()
    assert len(shown) == 2 and " 1150 " in shown[1]
    line = [x for x in cli("--store", str(root_db), "keys").out.splitlines() if x.startswith(alice)]
    assert line == [f"{alice}        3        admitted, revoked after seq 1  editor"]


def test_only_the_root_key_may_admit_or_revoke(tmp_path, cli):
    root_db, alice_db = tmp_path / "root.db", tmp_path / "alice.db"
    cli("--store", str(root_db), "init", "--space", "team", "--mode", "closed")
    root = SigningKey.load(f"{root_db}.key").author.hex()
    cli("--store", str(alice_db), "init", "--space", "team", "--mode", "closed", "--root", root)
    someone = SigningKey.generate().author.hex()
    assert cli("--store", str(alice_db), "keys", "admit", someone) == Run(
        1, "", "Error: only the space's root key signs trust ops\n"
    )
    assert cli("--store", str(root_db), "keys", "admit", "abcd") == Run(
        1, "", "Error: author id 'abcd' is not 8 to 64 hex digits\n"
    )
    assert cli("--store", str(root_db), "keys", "revoke", "abcdabcd") == Run(
        1, "", "Error: no author has an id starting with abcdabcd\n"
    )


# --- verify ---------------------------------------------------------------------------------------


def test_verify_reports_a_healthy_store(store, cli):
    a, *_ = _seed_launch(store)
    cli("retract", a.claim_id.hex())
    with opened(store) as r:
        digest = r.state().digest().hex()
    assert cli("verify") == Run(
        0,
        f"Verified {store} (space 'team')\n"
        "changes  5 accepted, 0 pending, 0 quarantined (kept for audit), 0 not counted (trust)\n"
        "ops      5\n"
        "claims   3 active, 1 retracted; 0 conflicts\n"
        f"digest   {digest}\n"
        "OK: every stored change verifies and the state equals a fresh materialization\n",
        "",
    )


def test_verify_fails_on_a_store_whose_bytes_were_altered(store, cli):
    _seed_launch(store)
    db = sqlite3.connect(store)
    (data,) = db.execute("SELECT data FROM changes WHERE pos = 2").fetchone()
    tampered = bytearray(data)
    tampered[-10] ^= 1  # inside the signature, the last field of the encoding
    with db:
        db.execute("UPDATE changes SET data = ? WHERE pos = 2", (bytes(tampered),))
    db.close()
    code, out, err = cli("verify")
    assert (code, err) == (1, "")
    lines = out.splitlines()
    assert lines[-5] == "FAILED: 3 problems"
    assert lines[-4].startswith("  - stored change 2 fails verification: bad-signature: ")
    assert lines[-1].startswith("Fix: `statefuse repair` keeps every change that verifies")
    for seq, line in zip((3, 4), lines[-3:-1], strict=True):  # their predecessor is gone
        assert re.fullmatch(
            rf"  - stored change {seq} \([0-9a-f]{{12}}\) is not accepted on reload: its chain"
            r" of predecessors is broken",
            line,
        )


# --- the store and the process --------------------------------------------------------------------


def test_a_missing_store_is_a_user_error_with_a_hint(tmp_path, cli):
    path = tmp_path / "nowhere.db"
    assert cli("--store", str(path), "show") == Run(
        1, "", f"Error: no store at {path} (create one with: statefuse init --space NAME)\n"
    )
    assert not path.exists()


def test_a_store_without_its_key_file_reads_but_refuses_writes_saying_why(store, cli):
    _seed_launch(store)
    Path(f"{store}.key").unlink()
    shown = cli("show")
    assert shown.code == 0 and "project/launch/deadline" in shown.out
    assert cli("verify").code == 0
    assert cli("claim", "a/b/c", "1") == Run(
        1,
        "",
        f"Error: no author key for this store (expected at {store}.key): it opened read-only;"
        " restore the key file to write, or give the store a new author key (CLI: statefuse"
        " keys new)\n",
    )


def test_a_writer_writes_beside_an_open_replica_and_past_its_wait_names_the_holder(store, cli):
    with opened(store) as other:
        assert cli("claim", "a/b/c", "1").code == 0  # beside a replica open for writing
        with other.batch():  # holds the store's write lock until the block ends
            other.add_claim("a/b/d", 2)
            assert cli("show").code == 0  # readers take no lock (SQLite WAL)
            assert cli("--wait", "0", "claim", "a/b/e", "3") == Run(
                1,
                "",
                f"Error: {store} is busy: process {os.getpid()} held its write lock past the"
                " 0 s wait (pass --wait SECONDS to wait longer)\n",
            )
        assert sorted(c.value for c in other.state().active_claims()) == [1, 2]
    assert cli("claim", "a/b/e", "3").code == 0


def test_the_store_defaults_to_statefuse_db_in_the_working_directory(tmp_path, monkeypatch, cli):
    monkeypatch.delenv("STATEFUSE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli("init", "--space", "here").out.startswith(
        "Created store statefuse.db for space 'here'"
    )
    assert (tmp_path / "statefuse.db").exists() and (tmp_path / "statefuse.db.key").exists()


def test_global_options_work_before_and_after_the_command(store, tmp_path, cli):
    other = tmp_path / "other.db"
    cli("--store", str(other), "init", "--space", "x")
    before = cli("--json", "--store", str(other), "keys", "show")
    after = cli("keys", "show", "--store", str(other), "--json")
    assert before == after and json.loads(before.out)["space"] == "x"
    assert json.loads(cli("show", "--json").out) == {"claims": [], "more": 0}


def test_an_interrupt_exits_130_without_a_traceback(store, cli, monkeypatch):
    def interrupted(self, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr("statefuse.entry.cli.Session.replica", interrupted)
    assert cli("show") == Run(130, "", "Interrupted\n")


def test_a_file_that_cannot_be_written_is_a_user_error(store, tmp_path, cli):
    code, out, err = cli("export", str(tmp_path / "no" / "such" / "dir" / "x.bundle"))
    assert (code, out) == (1, "")
    assert err.startswith("Error: No such file or directory: ") and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["claim", "a/b/c"], "the following arguments are required: VALUE"),
        (
            ["claim", "a/b/c", "1", "--confidence", "high"],
            "argument --confidence: invalid float value: 'high'",
        ),
        (["init"], "the following arguments are required: --space"),
        (["nonsense"], "argument COMMAND: invalid choice: 'nonsense'"),
    ],
)
def test_usage_errors_exit_2_and_say_what_is_wrong(store, cli, argv, message):
    code, out, err = cli(*argv)
    assert (code, out) == (2, "")
    assert err.startswith("usage: statefuse") and f"Error: {message}" in err


def test_a_refused_init_leaves_no_files_behind(tmp_path, cli):
    path = tmp_path / "team.db"
    assert cli("--store", str(path), "init", "--space", "") == Run(
        1, "", "Error: a space is a non-empty name of up to 256 chars\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_wait_gives_a_store_another_replica_holds_time_to_free_up(store, cli):
    holder = Replica.open(store)
    timer = threading.Timer(0.3, holder.close)
    timer.start()
    try:
        assert cli("--wait", "120", "show") == Run(0, "No active claims.\n", "")
    finally:
        timer.join()


def test_tables_line_up_wide_characters_and_clip_long_values(store, cli):
    with opened(store) as r:
        tokyo = r.add_claim("a", "b", "tokyo", "東京")
        long = r.add_claim("a", "b", "long", "x" * 100)
        me = unnamed(r.author)
    assert cli("show").out == (
        "ID            KEY        SCOPE   VALUE" + " " * 57 + "AUTHOR    NOTE\n"
        f'{short(long.claim_id)}  a/b/long   global  "{"x" * 58}…  {me}\n'
        f'{short(tokyo.claim_id)}  a/b/tokyo  global  "東京"{" " * 56}{me}\n'
    )


# --- --json ---------------------------------------------------------------------------------------


def test_json_output_has_stable_keys_and_whole_ids(store, tmp_path, cli):
    a, b, _, _, _ = _seed_launch(store)
    claim_keys = {
        "active", "author", "author_name", "authority", "claim_id", "claim_ref", "confidence",
        "constraint",
        "depends_on", "evidence", "expires", "key", "kind", "lamport", "layer", "provenance",
        "scope", "value", "visibility", "wall_ms",
    }  # fmt: skip

    def doc(*argv: str) -> dict:
        result = cli("--json", *argv)
        assert result.code == 0, result.err
        return json.loads(result.out)

    shown = doc("show")["claims"]
    assert {tuple(c["key"]) for c in shown} == {
        ("project", "launch", "deadline"),
        ("vendor", "acme", "price"),
    }
    assert all(set(c) == claim_keys | {"notes"} for c in shown)
    (conflict,) = doc("conflicts")["conflicts"]
    assert set(conflict) == {
        "candidates", "conflict_id", "decision", "groups", "key", "locus", "scope",
    }  # fmt: skip
    assert sorted(c["claim_id"] for c in conflict["candidates"]) == sorted(
        [a.claim_id.hex(), b.claim_id.hex()]
    )
    decision = doc("decide", a.claim_id.hex())
    assert decision["selected_claim_id"] == a.claim_id.hex() and len(decision["op_id"]) == 64
    retraction = doc("retract", b.claim_id.hex(), "--reason", "no")
    assert retraction["retracted"] == [b.claim_id.hex()] and retraction["reason"] == "no"
    events = doc("history", "project/launch/deadline")["events"]
    assert [e["event"] for e in events] == ["claim", "claim", "claim", "decide", "retract"]
    assert all(
        set(e)
        == {
            "author",
            "author_name",
            "claim_id",
            "event",
            "lamport",
            "op_id",
            "redacted",
            "scope",
            "superseded_by",
            "value",
            "why",
        }
        for e in events
    )
    added = doc("claim", "a/b/c", '{"$bytes": "0a"}')
    assert set(added) == claim_keys and added["value"] == {"$bytes": "0a"}
    sup = doc("supersede", added["claim_id"][:8], "2")
    assert set(sup) == {"claim", "retraction"} and sup["claim"]["value"] == 2
    assert doc("export", str(tmp_path / "b.bundle")) == {
        "path": str(tmp_path / "b.bundle"),
        "changes": 8,
    }
    imported = doc("import", str(tmp_path / "b.bundle"))
    assert imported == {
        "path": str(tmp_path / "b.bundle"),
        "accepted": 0,
        "duplicate": 8,
        "pending": 0,
        "quarantined": 0,
        "new_ops": 0,
        "forks": [],
        "own_from_elsewhere": 0,
        "clock_jumps": [],
        "evicted": 0,
    }
    keys = doc("keys")
    assert set(keys) == {"authors", "mode", "root", "space", "you"}
    assert keys["authors"] == [
        {
            "author": keys["you"],
            "name": None,
            "changes": 8,
            "last_seq": 8,
            "roles": [],
            "status": ["you"],
            "forks": [],
            "clock_jumps": [],
        }
    ]
    assert doc("quarantine") == {"quarantine": [], "more": 0}
    verified = doc("verify")
    assert verified["ok"] is True and verified["problems"] == []
    assert verified["changes"] == {"accepted": 8, "pending": 0, "quarantined": 0, "ignored": 0}
    created = doc("--store", str(tmp_path / "new.db"), "init", "--space", "s")
    assert set(created) == {
        "author", "created", "creator", "key_file", "mode", "name", "root", "space", "store",
    }  # fmt: skip
    assert created["created"] is True and created["root"] is None
    assert created["creator"] is None  # nothing declared, no --creator: none pinned


# --- serve and sync -------------------------------------------------------------------------------


@contextmanager
def served(path: Path, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``statefuse serve`` on ``path`` in a real process; yields its URL and the process."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "statefuse", "--store", str(path), "serve", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        match = re.fullmatch(
            rf"Serving space 'team' from {re.escape(str(path))} at (https?://127\.0\.0\.1:\d+),"
            r" auth (open|signed|members) \(Ctrl-C to stop\)\n",
            first,
        )
        assert match, (first, proc.stderr.read() if proc.poll() is not None else "")
        yield match.group(1), proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_sync_with_a_served_store_moves_changes_both_ways_and_serve_stops_on_sigterm(tmp_path, cli):
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    for path, value in ((ours, "1150"), (theirs, "1200")):
        cli("--store", str(path), "init", "--space", "team")
        cli("--store", str(path), "claim", "vendor/acme/price", value)
    with served(theirs) as (url, proc):
        code, out, err = cli("--store", str(ours), "sync", url)
        assert (code, err) == (0, "")
        assert re.fullmatch(
            rf"Synced with {re.escape(url)}: fetched 1, pushed 1 in \d+ round trips"
            r" \(\d+ B sent, \d+ B received\); 1 accepted, 0 already known, 0 pending,"
            r" 0 quarantined; 1 new op\n",
            out,
        ), out
        again = json.loads(cli("--store", str(ours), "--json", "sync", url).out)
        (peer,) = again["peers"]
        assert (peer["url"], peer["ok"], peer["fetched"], peer["pushed"]) == (url, True, 0, 0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None and proc.stderr.read() == "Stopped.\n"
    with opened(ours) as a, opened(theirs) as b:
        assert a.state().digest() == b.state().digest()
        assert len(a.state().conflicts) == 1


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_peer_is_a_user_error_and_the_other_peers_still_sync(store, tmp_path, cli):
    dead = f"http://127.0.0.1:{_closed_port()}"
    assert cli("sync", dead) == Run(1, "", f"Error: cannot reach {dead}: Connection refused\n")
    theirs = tmp_path / "theirs.db"
    cli("--store", str(theirs), "init", "--space", "team")
    cli("--store", str(theirs), "claim", "a/b/c", "1")
    with served(theirs) as (url, _):
        code, out, err = cli("--json", "sync", dead, url)
    assert code == 1 and err == f"Error: cannot reach {dead}: Connection refused\n"
    first, second = json.loads(out)["peers"]
    assert first == {
        "url": dead,
        "ok": False,
        "error": f"cannot reach {dead}: Connection refused",
        "rule": "unreachable",
    }
    assert second["ok"] is True and second["fetched"] == 1


def test_sync_with_a_peer_of_another_space_is_refused(store, tmp_path, cli):
    theirs = tmp_path / "theirs.db"
    cli("--store", str(theirs), "init", "--space", "team")
    with served(theirs) as (url, _):
        cli("--store", str(tmp_path / "x.db"), "init", "--space", "elsewhere")
        code, out, err = cli("--store", str(tmp_path / "x.db"), "sync", url)
    assert (code, out) == (1, "")
    assert err.startswith(f"Error: {url} answered ")
    assert err.endswith(": this server holds space 'team', not 'elsewhere'\n")


# --- the demo and real processes ------------------------------------------------------------------


def test_statefuse_demo_runs_the_story_and_exits_zero(cli):
    code, out, err = cli("demo")
    assert code == 0 and "deadline" in out and "Traceback" not in err


def _statefuse(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statefuse", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def test_the_module_entry_point_runs_commands_in_a_fresh_process(tmp_path):
    env = {"STATEFUSE_STORE": str(tmp_path / "p.db")}
    assert _statefuse("init", "--space", "team", env=env).returncode == 0
    added = _statefuse("claim", "project/launch/owner", "Dana Smith", env=env)
    assert added.returncode == 0 and added.stderr == ""
    shown = _statefuse("show", env=env)
    assert shown.returncode == 0 and '"Dana Smith"' in shown.stdout
    failed = _statefuse("retract", "deadbeef", env=env)
    assert (failed.returncode, failed.stdout) == (1, "")
    assert failed.stderr == "Error: no claim has an id starting with deadbeef\n"


def test_an_unknown_command_exits_2_without_a_traceback():
    proc = _statefuse("nonsense")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Error: argument COMMAND: invalid choice: 'nonsense'" in proc.stderr


def test_the_demo_runs_in_a_fresh_process():
    proc = _statefuse("demo")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "deadline" in proc.stdout


# --- the reference --------------------------------------------------------------------------------


def _cli_reference() -> str:
    return (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")


def _subcommands(p) -> dict[str, object]:
    import argparse

    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_and_option_is_documented_in_the_cli_reference():
    section = _cli_reference()
    missing = []
    top = parser()
    commands = _subcommands(top)
    assert sorted(commands) == sorted(c.name for c in COMMANDS)
    for option in (o for a in top._actions for o in a.option_strings):
        if option not in ("-h", "--help") and option not in section:
            missing.append(option)
    for name, sub in commands.items():
        nested = _subcommands(sub)
        for full, p in [(name, sub)] + [(f"{name} {n}", q) for n, q in nested.items()]:
            if f"statefuse {full}" not in section:
                missing.append(f"statefuse {full}")
            for action in p._actions:
                for option in action.option_strings:
                    if option not in ("-h", "--help") and option not in section:
                        missing.append(f"{full} {option}")
    assert not missing, f"undocumented in docs/reference/cli.md: {missing}"


def test_the_cli_reference_documents_the_exit_statuses_and_the_key_and_value_syntax():
    section = _cli_reference()
    for needle in ("namespace/subject/predicate", "%2F", "JSON", "$bytes", "130", "--json"):
        assert needle in section, needle


# --- context --------------------------------------------------------------------------------------


def test_context_prints_the_facts_with_the_most_relevant_last(cli, store):
    assert cli("claim", "vendor/acme/price", "120").code == 0
    assert cli("claim", "project/launch/deadline", '"2026-04-01"').code == 0
    run = cli("context", "--query", "launch deadline", "--budget", "300")
    assert run.code == 0 and run.err == ""
    facts = run.out.split("Facts:\n")[1].split("\n\n")[0].splitlines()
    assert facts == ["vendor/acme/price: 120", "project/launch/deadline: 2026-04-01"]


def test_context_hides_claims_for_a_role_the_viewer_lacks(cli, store):
    assert cli("claim", "hr/dana/salary", '"secret-figure"', "--visibility", "hr").code == 0
    assert cli("claim", "project/launch/owner", '"dana"').code == 0
    hidden = cli("context", "--query", "dana")
    assert hidden.code == 0 and "secret-figure" not in hidden.out and "owner: dana" in hidden.out
    shown = cli("context", "--query", "dana", "--role", "hr")
    assert "secret-figure" in shown.out


def test_context_json_is_the_contexts_json_and_bad_budgets_are_user_errors(cli, store):
    assert cli("claim", "project/launch/owner", '"dana"').code == 0
    run = cli("--json", "context", "--query", "owner", "--budget", "100")
    data = json.loads(run.out)
    assert data["budget"] == 100 and "owner: dana" in data["text"]
    assert data["token_count"] <= 100
    bad = cli("context", "--query", "owner", "--budget", "0")
    assert (bad.code, bad.out) == (1, "")
    assert bad.err == "Error: the budget is a positive number of tokens\n"


def test_an_unusable_snapshot_is_one_warning_line_and_the_command_still_answers(store, cli):
    _seed_launch(store)
    with opened(store) as r:
        r.snapshot()
    expected = cli("--json", "show")
    assert expected.err == ""
    db = sqlite3.connect(store)
    db.execute("UPDATE snapshot SET data = substr(data, 1, 100)")
    db.commit()
    db.close()
    got = cli("--json", "show")
    assert (got.code, got.out) == (expected.code, expected.out)
    lines = got.err.splitlines()
    assert len(lines) == 1, got.err
    assert lines[0].startswith("Warning: snapshot ignored") and "(snapshot-checksum)" in lines[0]
    assert "replica.py" not in got.err


def test_the_context_command_and_the_library_give_the_same_text_by_default(store, cli):
    """One default everywhere: `statefuse context --query Q`, `Replica.context(Q)` and
    `context_for(state, Lens(), query=Q)` use the same budget and resolver, so a conflict the
    default resolver settles (two sources, more confidence and more authority against one) is
    settled alike."""
    with opened(store) as r:
        r.add_claim(
            "vendor", "acme", "price", 100, confidence=0.9, provenance="invoice", authority="user"
        )
        second, third = r.fork(), r.fork()
        second.add_claim(
            "vendor", "acme", "price", 100, confidence=0.9, provenance="quote", authority="user"
        )
        third.add_claim(
            "vendor", "acme", "price", 120, confidence=0.5, provenance="rumour", authority="agent"
        )
        r.merge(second)
        r.merge(third)
        assert len(r.state().conflicts) == 1
        library = r.context("price of acme").text
        pure = context_for(r.state(), Lens(), query="price of acme").text
    assert "acme/price: 100" in library and "UNRESOLVED" not in library
    assert pure == library
    assert cli("context", "--query", "price of acme") == Run(0, library + "\n", "")


def test_the_demo_keeps_its_stores_in_the_directory_given_and_says_where(tmp_path):
    home = tmp_path / "demo"
    proc = _statefuse("demo", "--dir", str(home))
    assert proc.returncode == 0, proc.stderr
    assert f"SQLite stores in {home} (kept)" in proc.stdout
    assert f"statefuse conflicts --store {home / 'planner.db'}" in proc.stdout
    assert sorted(p.name for p in home.glob("*.db")) == [
        "analyst.db",
        "archivist.db",
        "planner.db",
        "scout.db",
    ]
    # the kept store is a real one: another process reads the demo's deadline conflict from it
    shown = _statefuse("conflicts", "--store", str(home / "planner.db"))
    assert shown.returncode == 0, shown.stderr
    assert "project/launch/deadline" in shown.stdout and '"2026-04-08"' in shown.stdout
    # a second run into the same directory is refused, the first run's stores untouched
    before = (home / "planner.db").read_bytes()
    again = _statefuse("demo", "--dir", str(home))
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr.startswith("Error: --dir: ") and "already holds" in again.stderr
    assert again.stderr.count("\n") == 1
    assert (home / "planner.db").read_bytes() == before


def test_the_demo_without_a_directory_says_its_temporary_one_is_removed():
    proc = _statefuse("demo")
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "a temporary directory" in first and "--dir DIR keeps them" in first
    where = first.split("a temporary directory, ", 1)[1].split(", removed", 1)[0]
    assert not Path(where).exists()


def test_the_demo_refuses_store_rather_than_ignoring_it(tmp_path):
    proc = _statefuse("demo", "--store", str(tmp_path / "mine.db"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("Error: ") and "--dir DIR" in proc.stderr
    assert not (tmp_path / "mine.db").exists()
