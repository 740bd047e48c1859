"""Author labels (`statefuse.core.authorname`): a name where one is declared, the key's first hex
digits where none is, and both wherever a name alone could pass for another author."""

from __future__ import annotations

import pytest

from statefuse import SHORT_AUTHOR_CHARS, AuthorNames, AuthorNamesError

A, B, C = bytes([0xAA]) * 32, bytes([0xBB]) * 32, bytes([0xCC]) * 32


def test_an_author_without_a_name_shows_as_the_first_hex_digits_of_its_key():
    names = AuthorNames({A: "scout"})
    assert names.label(A) == "scout"
    assert names.label(B) == "bb" * (SHORT_AUTHOR_CHARS // 2) == "bbbbbbbb"
    assert names.label("plain") == "plain"  # an author written as a str is its own label


def test_authors_sharing_a_name_both_show_their_key_digits_whatever_the_case_or_width():
    names = AuthorNames({A: "scout", B: "Scout", C: "ｓｃｏｕｔ"})  # fullwidth folds to "scout"
    assert [names.label(x) for x in (A, B, C)] == [
        "scout (aaaaaaaa)",
        "Scout (bbbbbbbb)",
        "ｓｃｏｕｔ (cccccccc)",
    ]
    assert AuthorNames({A: "scout", B: "planner"}).label(A) == "scout"


@pytest.mark.parametrize("name", ["bbbbbbbb", "DEADBEEF00", "scout (bbbbbbbb)"])
def test_a_name_that_looks_like_a_key_label_shows_its_own_key_digits(name):
    assert AuthorNames({A: name}).label(A) == f"{name} (aaaaaaaa)"


def test_names_are_an_immutable_mapping_equal_to_a_dict_of_the_same_items():
    given = {B: "planner", A: "scout"}
    names = AuthorNames(given)
    given[C] = "late"
    assert names == {A: "scout", B: "planner"} and list(names) == [A, B]
    assert names == AuthorNames({A: "scout", B: "planner"}) != AuthorNames({A: "scout"})
    with pytest.raises(TypeError):
        names[C] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    ("given", "field"),
    [({"scout": "x"}, "authors"), ({b"": "x"}, "authors"), ({A: ""}, f"authors[{A.hex()}]")],
)
def test_a_mapping_of_other_things_is_refused_naming_the_entry(given, field):
    with pytest.raises(AuthorNamesError) as err:
        AuthorNames(given)
    assert err.value.field == field
