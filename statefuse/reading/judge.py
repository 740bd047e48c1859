"""External judges: a resolver that asks something outside the process (an LLM, a person behind
an API) to choose, under a time limit.

Invariant: whatever the judge does — answer garbage, name a claim it was not shown, raise, hang —
the answer is a `Select` of a shown candidate or an `Abstain` with the error recorded (fail
closed, through `run_resolver`'s rules). The time limit is kept by a worker thread rather than a
signal, so it works off the main thread; a hung judge keeps its daemon thread until it returns.
This module is outside the pure core because it starts threads; the built-in resolvers in
`statefuse.reading.resolver` stay pure.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from statefuse.reading.resolver import (
    MAX_ERROR_CHARS,
    Abstain,
    ResolverConfigError,
    ResolverInput,
    Select,
    _describe,
    _no_candidates,
)
from statefuse.reading.view import json_value

#: Names the shape of the JSON a judge receives.
JUDGE_INPUT_FORMAT = "statefuse/resolver-input/v1"

_HEX_RE = re.compile(r"\A(?:[0-9a-fA-F]{2})+\Z")


def judge_payload(inp: ResolverInput) -> dict[str, Any]:
    """The JSON-ready description of ``inp`` that `CallableResolver` hands its judge.

    ``{"format", "key": {"namespace", "subject", "predicate"}, "scope", "conflict_id" (hex),
    "candidates": [{"claim_id" (hex), "group" (index of its agreement group), "value",
    "confidence" (null when its author stated none), "authority", "author" (hex if bytes),
    "lamport", "provenance"}, ...]}``, with
    candidates sorted by claim_id. Every part is a fresh copy (bytes inside values become
    ``{"$bytes": hex}``), so a judge that mutates it touches nothing else.
    """
    group_index = {c.claim_id: i for i, g in enumerate(inp.groups) for c in g}
    ns, subject, predicate = inp.conflict.key
    return {
        "format": JUDGE_INPUT_FORMAT,
        "key": {"namespace": ns, "subject": subject, "predicate": predicate},
        "scope": inp.conflict.scope,
        "conflict_id": inp.conflict.conflict_id.hex(),
        "candidates": [
            {
                "claim_id": c.claim_id.hex(),
                "group": group_index[c.claim_id],
                "value": json_value(c.value),
                "confidence": c.confidence,
                "authority": c.authority,
                "author": c.author.hex() if isinstance(c.author, bytes) else c.author,
                "lamport": c.lamport,
                "provenance": c.provenance,
            }
            for c in inp.candidates
        ],
    }


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What became of one call to a judge: its answer, the exception it raised, or neither."""

    answer: object = None
    raised: BaseException | None = None
    timed_out: bool = False


def _call_with_timeout(
    fn: Callable[[dict[str, Any]], object], payload: dict[str, Any], timeout_s: float
) -> _Outcome:
    """Run ``fn(payload)`` in a daemon thread and wait for it at most ``timeout_s`` seconds."""
    box: list[_Outcome] = []

    def work() -> None:
        try:
            box.append(_Outcome(answer=fn(payload)))
        except BaseException as exc:  # a worker has nobody to raise to: hand it to the caller
            box.append(_Outcome(raised=exc))

    worker = threading.Thread(target=work, name="statefuse-judge", daemon=True)
    try:
        worker.start()
    except RuntimeError as exc:  # no thread to spare, e.g. too many hung judges
        return _Outcome(raised=exc)
    worker.join(timeout_s)
    if worker.is_alive() or not box:
        return _Outcome(timed_out=True)
    return box[0]


class CallableResolver:
    """Asks an external judge, ``fn(payload) -> answer``, under a time limit.

    ``payload`` is `judge_payload` of the input. The answer must be a dict, either
    ``{"select": "<claim_id hex>", "reason": "..."}`` (``reason`` optional) or
    ``{"abstain": "<reason>"}``. Everything else fails closed, as `Abstain` with ``error`` set:
    a non-dict, missing, unknown or mixed keys, a non-str reason, bad hex, an id that is not a
    shown candidate, an exception from ``fn``, and no answer within ``timeout_s`` seconds.

    The time limit uses a daemon worker thread per call, not a signal, so it works from any
    thread. Python cannot stop a thread: a judge that hangs keeps its worker thread (and whatever
    it holds) until ``fn`` returns; being a daemon, it does not keep the process alive. Its late
    answer is discarded.

    Raises ResolverConfigError if ``fn`` is not callable or ``timeout_s`` is not a positive
    finite number.
    """

    __slots__ = ("fn", "timeout_s")

    def __init__(self, fn: Callable[[dict[str, Any]], object], *, timeout_s: float = 5.0) -> None:
        if not callable(fn):
            raise ResolverConfigError("fn", "callable", f"expected a callable, got {fn!r}")
        if type(timeout_s) not in (int, float) or not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ResolverConfigError(
                "timeout_s", "positive-finite", f"expected a number > 0, got {timeout_s!r}"
            )
        self.fn = fn
        self.timeout_s = timeout_s

    def _fail(self, error: str) -> Abstain:
        return Abstain("judge failed; conflict surfaced", error[:MAX_ERROR_CHARS])

    def resolve(self, inp: ResolverInput) -> Select | Abstain:
        if not inp.candidates:
            return _no_candidates("judge")
        outcome = _call_with_timeout(self.fn, judge_payload(inp), self.timeout_s)
        if outcome.timed_out:
            return self._fail(f"timeout after {self.timeout_s:g}s")
        if outcome.raised is not None:
            return self._fail(f"judge raised {_describe(outcome.raised)}")
        try:
            return self._parse(outcome.answer, inp)
        except Exception as exc:  # e.g. a key whose __repr__ or __eq__ raises
            return self._fail(f"malformed answer: {_describe(exc)}")

    def _parse(self, answer: object, inp: ResolverInput) -> Select | Abstain:
        if type(answer) is not dict:
            return self._fail(f"malformed answer: expected a dict, got {type(answer).__name__}")
        keys = set(answer)
        if keys == {"abstain"}:
            reason = answer["abstain"]
            if type(reason) is not str:
                return self._fail("malformed answer: 'abstain' must be a str reason")
            return Abstain(f"judge: {reason}")
        if "select" not in keys or not keys <= {"select", "reason"}:
            shown = sorted(repr(k)[:40] for k in keys)
            return self._fail(
                "malformed answer: expected keys {'select', 'reason'} or {'abstain'},"
                f" got {{{', '.join(shown)}}}"
            )
        hex_id, reason = answer["select"], answer.get("reason", "")
        if type(reason) is not str:
            return self._fail("malformed answer: 'reason' must be a str")
        if type(hex_id) is not str or not _HEX_RE.match(hex_id):
            return self._fail("malformed answer: 'select' must be a claim_id in hex")
        cid = bytes.fromhex(hex_id)
        if not any(c.claim_id == cid for c in inp.candidates):
            return self._fail(f"malformed answer: {hex_id[:64]} is not the id of a shown candidate")
        return Select(cid, f"judge: {reason}" if reason else "judge: selected")

    def __repr__(self) -> str:
        return f"CallableResolver({self.fn!r}, timeout_s={self.timeout_s!r})"
