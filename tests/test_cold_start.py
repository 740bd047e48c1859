"""Cold start of the command line: what loads when, and that the fast paths give the old answers.

Performance is measured (see the issue notes), not asserted here. What is asserted:

- importing ``statefuse.entry.cli`` (or making a tokenizer) loads no BPE code, and a command that
  counts no tokens (``show``) never loads it;
- the first count loads ``bpe-openai``'s native extension only, never its Python wrapper;
- every count equals the wrapper's (kept here as the oracle: it was the count before);
- the table helpers equal the old character-by-character ones (kept here as references).
"""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from test_value import values

from statefuse import tokenizer as tokenizer_module
from statefuse.entry.cli import format_key
from statefuse.entry.clitable import clip, display_width, table, value_json
from statefuse.reading.tokenizer import BpeTokenizer
from statefuse.reading.view import json_value
from statefuse.sync.replica import Replica

ROOT = Path(__file__).resolve().parents[1]
#: Any code point, lone surrogates included (``st.characters()`` leaves them out by default).
_any_char = st.one_of(st.characters(), st.characters(categories=["Cs"]))


def _loaded_after(code: str) -> list[str]:
    """The ``bpe_openai`` modules loaded in a fresh interpreter after running ``code``."""
    probe = (
        f"{code}\nimport sys, json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'bpe_openai')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_importing_the_cli_and_making_tokenizers_loads_no_bpe_code():
    code = (
        "import statefuse.entry.cli\n"
        "from statefuse import ContextCache\n"
        "from statefuse.reading.tokenizer import BpeTokenizer, default_tokenizer\n"
        "default_tokenizer(); BpeTokenizer('cl100k_base'); ContextCache()"
    )
    assert _loaded_after(code) == []


def test_the_first_count_loads_the_native_extension_and_not_the_python_wrapper():
    code = (
        "from statefuse.reading.tokenizer import default_tokenizer\n"
        "assert default_tokenizer().count('hi')"
    )
    assert _loaded_after(code) == ["bpe_openai._bindings"]


def test_show_never_loads_the_tokenizer_and_context_does(tmp_path):
    store = tmp_path / "m.db"
    with Replica.open(store, create=True, space="s") as rep:
        rep.add_claim("deploy", "api", "owner", "dana")
    run = "from statefuse.entry.cli import main\nassert main(['--store', {store!r}, {args}]) == 0"
    assert _loaded_after(run.format(store=str(store), args="'show'")) == []
    context = run.format(store=str(store), args="'context', '--query', 'owner'")
    assert _loaded_after(context) == ["bpe_openai._bindings"]


# --- exact counts: the wrapper is the oracle ------------------------------------------------------


def _wrapper_encoding(name: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai  # type: ignore[import-untyped]  # ships no type information

        return bpe_openai.get_encoding(name)


@pytest.fixture(scope="module")
def wrappers() -> dict[str, Any]:
    return {name: _wrapper_encoding(name) for name in tokenizer_module.ENCODINGS}


_any_text = st.text(st.one_of(st.characters(max_codepoint=0x7F), _any_char), max_size=300)


@given(text=_any_text, encoding=st.sampled_from(tokenizer_module.ENCODINGS))
@example(text="", encoding="o200k_base")
@example(text="<|endoftext|> tiktoken is great!", encoding="cl100k_base")
@example(text="a\ud800b", encoding="o200k_base")  # a lone surrogate
@example(text="\ud83d\ude80 and \udfff\ud800", encoding="o200k_base")  # a pair, then two lone
@example(text="  \n\n\t x  ", encoding="cl100k_base")
def test_every_count_equals_the_bpe_openai_wrappers_count(wrappers, text, encoding):
    assert BpeTokenizer(encoding).count(text) == len(wrappers[encoding].encode_ordinary(text))


def test_a_package_without_the_expected_extension_counts_through_its_wrapper(monkeypatch, wrappers):
    monkeypatch.setattr(tokenizer_module, "_ENCODINGS", {})
    monkeypatch.setattr(tokenizer_module, "_extension_counter", lambda encoding: None)
    text = "ünïcode välue 東京 0x9f3a 7c1e <|endoftext|>"
    assert BpeTokenizer().count(text) == len(wrappers["o200k_base"].encode_ordinary(text))


# --- table helpers: the old character-by-character functions are the references ------------------


def reference_display_width(text: str) -> int:
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def reference_clip(text: str, limit: int) -> str:
    if reference_display_width(text) <= limit:
        return text
    out, width = [], 0
    for ch in text:
        w = reference_display_width(ch)
        if width + w > limit - 1:
            break
        out.append(ch)
        width += w
    return "".join(out) + "…"


def reference_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], *, indent: str = ""
) -> str:
    lines = [list(headers), *(list(r) for r in rows)]
    widths = [max(reference_display_width(line[i]) for line in lines) for i in range(len(headers))]
    out = []
    for line in lines:
        cells = [
            c + " " * (w - reference_display_width(c)) for c, w in zip(line, widths, strict=True)
        ]
        out.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(out)


#: Text that mixes ASCII, wide (CJK, emoji), combining marks, controls and surrogates.
_cell_text = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from("東京데이터ｶ🚀\u0301\u0308\u200b\u3000é…\t\x00"),
        _any_char,
    ),
    max_size=90,
)


@given(_cell_text)
@example("東京\u0301")
@example("\u0301" * 3)
def test_display_width_equals_the_character_by_character_reference(text):
    assert display_width(text) == reference_display_width(text)


@given(_cell_text, st.integers(min_value=-2, max_value=80))
@example("x" * 100, 60)
@example("東" * 40, 60)
@example("ab\u0301\u0301cd", 3)
@example("abc", 0)
@example("東京", 1)
def test_clip_equals_the_character_by_character_reference(text, limit):
    assert clip(text, limit) == reference_clip(text, limit)


@given(
    st.integers(min_value=1, max_value=5).flatmap(
        lambda n: st.tuples(
            st.lists(_cell_text, min_size=n, max_size=n),
            st.lists(st.lists(_cell_text, min_size=n, max_size=n), max_size=6),
        )
    ),
    st.sampled_from(["", "  "]),
)
@example((["KEY", "VALUE"], [["a/b", "東京 "], ["c", ""]]), "")
def test_table_equals_the_reference(headers_and_rows, indent):
    headers, rows = headers_and_rows
    assert table(headers, rows, indent=indent) == reference_table(headers, rows, indent=indent)


@given(
    st.lists(st.text(st.sampled_from("ab/%2F5é"), min_size=1, max_size=6), min_size=1, max_size=3)
)
@example(["a/b", "%2F", "c"])
def test_format_key_equals_escaping_every_part(parts):
    reference = "/".join(p.replace("%", "%25").replace("/", "%2F") for p in parts)
    assert format_key(parts) == reference


@given(values())
def test_value_json_equals_json_dumps_of_the_json_value(value):
    reference = json.dumps(json_value(value), ensure_ascii=False, sort_keys=True)
    assert value_json(value) == reference
