"""What a new user meets in the first hour, through the real command line (each command its
own process, in a temporary directory): typos pointed out rather than taken in silence, a
value that looks like JSON but does not parse refused, a lost key file with one way back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from statefuse.core.typo import edit_distance, nearest, typo_of
from statefuse.sync.replica import Replica


def _statefuse(store: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env.pop("STATEFUSE_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "statefuse", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        cwd=store.parent,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "team.db"
    assert _statefuse(path, "init", "--space", "team").returncode == 0
    made = _statefuse(path, "claim", "project/launch/deadline", '"2026-05-01"')
    assert made.returncode == 0, made.stderr
    return path


# --- typos ----------------------------------------------------------------------------------------


def test_edit_distance_counts_one_edit_each_and_stops_past_the_bound() -> None:
    assert edit_distance("project", "projct", most=2) == 1
    assert edit_distance("project", "porject", most=2) == 1  # two neighbours swapped
    assert edit_distance("launch", "lunch", most=2) == 1
    assert edit_distance("abc", "xyz", most=1) == 2
    assert nearest("projct", ["alpha", "project", "projects"]) == "project"
    assert nearest("ab", ["zz"]) is None
    assert nearest("x", ["y"]) is None  # a one-letter name is never "near" another
    assert typo_of("projct", ["project"]) == "project"
    assert typo_of("item2", ["item1"]) is None and typo_of("t10", ["t9"]) is None
    assert typo_of("dew", ["dev"]) is None


def test_show_under_a_misspelt_prefix_names_the_nearest_existing_one(store: Path) -> None:
    shown = _statefuse(store, "show", "projct")
    assert (shown.returncode, shown.stdout, shown.stderr) == (
        0,
        "No claims under `projct` (did you mean `project`?)\n",
        "",
    )
    shown = _statefuse(store, "show", "project/lanch")
    assert shown.stdout == "No claims under `project/lanch` (did you mean `project/launch`?)\n"
    as_json = json.loads(_statefuse(store, "--json", "show", "projct").stdout)
    assert as_json == {"claims": [], "did_you_mean": "project", "more": 0}
    assert _statefuse(store, "show", "elsewhere").stdout == "No active claims.\n"


def test_the_suggestion_reads_the_key_index_not_the_history(store: Path) -> None:
    rep = Replica.open(store, readonly=True)
    try:
        assert not rep.loaded
        assert rep.nearest_prefix("projct") == ("project",)
        assert rep.nearest_prefix("project/launch/deadlin") == ("project", "launch", "deadline")
        assert rep.nearest_prefix("project") is None
        assert rep.key_names() == ["project"]
        assert not rep.loaded
    finally:
        rep.close()


def test_a_write_next_to_a_near_identical_key_warns_once(store: Path) -> None:
    made = _statefuse(store, "claim", "projct/launch/owner", "ann")
    assert made.returncode == 0
    warnings = [line for line in made.stderr.splitlines() if line]
    assert warnings == [
        "Warning: projct/launch/owner starts a new namespace, one edit away from the existing"
        " `project`: check the spelling"
    ]
    made = _statefuse(store, "claim", "project/lunch/owner", "ann")
    assert made.stderr.splitlines() == [
        "Warning: project/lunch/owner starts a new subject, one edit away from the existing"
        " `project/launch`: check the spelling"
    ]
    again = _statefuse(store, "claim", "project/launch/owner", "bob")  # an existing subject
    assert (again.returncode, again.stderr) == (0, "")
    # a numbered series and short names are not typos of each other
    for key in ("project/item1/x", "project/item2/x", "project/u1/x", "project/u2/x"):
        quiet = _statefuse(store, "claim", key, "1")
        assert (quiet.returncode, quiet.stderr) == (0, ""), key


@pytest.mark.parametrize("value", ['{"a": 1', "[1,", '"open', "{a: 1}", "[1, 2,]"])
def test_a_value_that_looks_like_json_but_does_not_parse_is_refused(
    store: Path, value: str
) -> None:
    refused = _statefuse(store, "claim", "project/launch/note", value)
    assert refused.returncode == 1
    assert refused.stdout == ""
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"Error: VALUE {value!r} looks like JSON but does not parse")
    assert line.endswith("fix it, or pass --string to store it as a string")
    assert _statefuse(store, "show", "project/launch/note").stdout == "No active claims.\n"
    kept = _statefuse(store, "claim", "project/launch/note", value, "--string")
    assert kept.returncode == 0, kept.stderr
    shown = json.loads(_statefuse(store, "--json", "show", "project/launch/note").stdout)
    assert [c["value"] for c in shown["claims"]] == [value]


@pytest.mark.parametrize("value", ["ship it", "[WIP] fix login", "{draft} plan", '"quoted" word'])
def test_a_plain_string_value_is_still_a_string(store: Path, value: str) -> None:
    made = _statefuse(store, "claim", "project/launch/note", value)
    assert (made.returncode, made.stderr) == (0, "")
    shown = json.loads(_statefuse(store, "--json", "show", "project/launch/note").stdout)
    assert [c["value"] for c in shown["claims"]] == [value]


# --- a lost key file ------------------------------------------------------------------------------


def test_init_on_a_store_whose_key_is_lost_says_so_and_the_way_back(store: Path) -> None:
    Path(f"{store}.key").unlink()
    again = _statefuse(store, "init", "--space", "team")
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == (
        f"Error: store {store} holds space 'team' but its key file {store}.key is missing, so it"
        " is read-only: restore the key file from a backup, or give the store a new author key"
        " with: statefuse keys new\n"
    )


def test_keys_new_gives_a_store_whose_key_is_lost_a_new_author_that_writes(store: Path) -> None:
    old = json.loads(_statefuse(store, "--json", "show").stdout)["claims"][0]["author"]
    Path(f"{store}.key").unlink()
    refused = _statefuse(store, "claim", "project/launch/owner", "ann")
    assert refused.returncode == 1 and "statefuse keys new" in refused.stderr
    made = _statefuse(store, "--json", "keys", "new")
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["old_author"] == old and report["author"] != old
    assert (Path(f"{store}.key").stat().st_mode & 0o777) == 0o600
    wrote = _statefuse(store, "claim", "project/launch/owner", "ann")
    assert wrote.returncode == 0, wrote.stderr
    shown = json.loads(_statefuse(store, "--json", "show").stdout)["claims"]
    assert {("/".join(c["key"]), c["author"]) for c in shown} == {
        ("project/launch/deadline", old),
        ("project/launch/owner", report["author"]),
    }
    assert _statefuse(store, "verify").returncode == 0
    ok = _statefuse(store, "init", "--space", "team")
    assert ok.returncode == 0 and "nothing changed" in ok.stdout
    kept = _statefuse(store, "keys", "new")  # a store that has its key keeps it
    assert kept.returncode == 1
    assert kept.stderr == (
        f"Error: {store}.key exists: this store has its key, and keeps it (to write with another"
        " key, remove that file first)\n"
    )
    assert (
        json.loads(_statefuse(store, "--json", "keys", "show").stdout)["you"] == (report["author"])
    )


# --- an extra that is not installed ---------------------------------------------------------------

_WITHOUT_LANGGRAPH = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("langgraph", "langchain_core"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Missing())
for name in [m for m in sys.modules if m.split(".")[0] in ("langgraph", "langchain_core")]:
    del sys.modules[name]
try:
    import statefuse.entry.langgraph
except ModuleNotFoundError as exc:
    print(exc.name)
    print(exc)
"""


def test_importing_the_langgraph_store_without_the_extra_names_the_install_command() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_LANGGRAPH],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.splitlines()
    assert name == "langchain_core"
    assert message == (
        "statefuse.entry.langgraph needs the langgraph extra (no module 'langchain_core'):"
        " pip install 'statefuse[langgraph]'"
    )


# --- Unicode forms of one key ---------------------------------------------------------------------

CAFE_NFC = "caf\u00e9"  # é as one code point
CAFE_NFD = "cafe\u0301"  # e and a combining acute accent


def test_keys_are_not_normalized_and_a_key_in_another_unicode_form_is_pointed_out(
    store: Path,
) -> None:
    """Keys are taken code point by code point (docs/operations.md: Keys and Unicode): the
    two forms of "café" are two keys, and the command line says so when it meets the second."""
    assert _statefuse(store, "claim", f"menu/{CAFE_NFC}/price", "3").returncode == 0
    other = _statefuse(store, "claim", f"menu/{CAFE_NFD}/price", "4")
    assert other.returncode == 0
    assert other.stderr == (
        f"Warning: menu/{CAFE_NFD}/price starts a new subject, the same text in another Unicode"
        f" form as the existing `menu/{CAFE_NFC}`: check the spelling\n"
    )
    shown = json.loads(_statefuse(store, "--json", "show", "menu").stdout)["claims"]
    assert sorted(c["key"][1] for c in shown) == sorted([CAFE_NFC, CAFE_NFD])
    empty = _statefuse(store, "show", f"{CAFE_NFD}")
    assert empty.stdout == "No active claims.\n"  # no namespace near it
    assert _statefuse(store, "show", f"mnu/{CAFE_NFD}").stdout == (
        f"No claims under `mnu/{CAFE_NFD}` (did you mean `menu/{CAFE_NFD}`?)\n"
    )
