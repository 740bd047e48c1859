"""Detectors that break the detector contract, importable by module and name (the checker runs
them in fresh interpreters)."""

from __future__ import annotations

from statefuse.registry import DetectorInput, Finding

_calls = [0]


def by_set_order(claims: DetectorInput) -> list[Finding]:
    """Says the subjects in the order a set of str yields them: that order depends on the hash
    seed."""
    if len(claims) < 2:
        return []
    order = " ".join({c.subject for c in claims})
    return [Finding("odd", claims.claims[0].key, tuple(c.claim_id for c in claims), order)]


def counting(claims: DetectorInput) -> list[Finding]:
    """Says how often it was called: another answer on every call."""
    _calls[0] += 1
    if not claims:
        return []
    c = claims.claims[0]
    return [Finding("odd", c.key, (c.claim_id,), "calls", {"calls": _calls[0]})]


def raising(claims: DetectorInput) -> list[Finding]:
    raise RuntimeError("not implemented")
