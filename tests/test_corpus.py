"""The corpus of malformed op encodings (tests/corpus): every file is rejected by ``decode_op``
with a StateFuseError carrying the rule in its name, never with another exception."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from statefuse import StateFuseError, decode_op

CORPUS = Path(__file__).resolve().parent / "corpus"
FILES = sorted(CORPUS.glob("*.bin"))


def _load_script():
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


make_corpus = _load_script()


def _decode_error(path: Path) -> StateFuseError:
    try:
        op = decode_op(path.read_bytes())
    except StateFuseError as exc:
        return exc
    except Exception as exc:
        pytest.fail(f"{path.name}: raised {type(exc).__name__}, not a StateFuseError: {exc}")
    pytest.fail(f"{path.name}: accepted as {op!r}")


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_corpus_file_is_rejected_with_a_statefuse_error(path):
    _decode_error(path)


@pytest.mark.parametrize(
    "path",
    FILES,
    ids=[p.name for p in FILES],
)
def test_corpus_file_is_rejected_with_the_rule_in_its_name(path):
    expected = path.name.split("__")[0]
    error = _decode_error(path)
    assert getattr(error, "rule", None) == expected, str(error)


def test_corpus_on_disk_is_exactly_what_the_script_writes():
    cases = make_corpus.cases()
    assert len(cases) >= 30
    assert len({c.filename for c in cases}) == len(cases), "two cases share a file name"
    assert sorted(c.filename for c in cases) == [p.name for p in FILES]
    for case in cases:
        assert (CORPUS / case.filename).read_bytes() == case.data, case.filename
    readme = (CORPUS / "README.md").read_text(encoding="utf-8")
    assert readme == make_corpus.render_readme(cases)


@pytest.mark.parametrize("base", sorted(make_corpus.BASES))
def test_every_corpus_case_starts_from_a_valid_op(base):
    data = make_corpus.op_bytes(base)
    op = decode_op(data)
    assert make_corpus.BASES[base]["op"] == type(op).KIND
    assert op.encode() == data


def test_corpus_covers_every_kind_of_rejection():
    rules = {p.name.split("__")[0] for p in FILES}
    assert {
        "canonical",
        "trailing-bytes",
        "truncated",
        "msgpack",
        "max-depth",
        "no-ext-types",
        "finite-float",
        "int64",
        "str-map-keys",
        "op-is-map",
        "op-version",
        "op-type",
        "op-fields",
        "int",
        "lamport-range",
        "ms-range",
        "id-length",
        "id-type",
        "scope-format",
        "layer",
        "unit-interval",
        "list",
        "text-length",
        "retraction-target",
    } <= rules
