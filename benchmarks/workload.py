"""Benchmark workloads: reproducible, realistic op streams made through the public `Writer`.

Invariant: a workload is a pure function of its seed and size. Every random choice comes from one
``random.Random`` seeded from both, and writers read a deterministic logical clock instead of the
wall clock, so two runs build byte-identical ops (`ops_digest` lets a reader check that).

The mix, in a workload of ``n`` ops:

- about 10% retractions, half by exact ``claim_id`` and half by semantic ``claim_ref``; a third of
  them are corrections (a new claim on the same key, named in ``superseded_by``), and a few ref
  retractions are followed by a deliberate re-assertion of the same value (``reasserts``);
- keys (namespace, subject, predicate, scope): about 10% conflicting (2 to 4 claims with different
  values), 5% agreeing only under the ``number`` normalizer (``1200``, ``"1,200"``, ``1200.0``),
  the rest claimed once;
- 32 authors, 8 namespaces, mostly global scope with some task and session scopes.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import blake3

from statefuse import ClaimAdded, ClaimRetracted, Op, Writer
from statefuse.registry import ContractError, PredicateContract, Registry, Value

#: Share of ops that are retractions.
RETRACTION_SHARE = 0.10
#: Share of retractions that target a ``claim_ref`` (the others target a ``claim_id``).
REF_RETRACTION_SHARE = 0.5
#: Share of retractions that are corrections: a new claim plus ``superseded_by`` pointing at it.
CORRECTION_SHARE = 0.3
#: Share of ref retractions whose author later re-asserts the retracted value on purpose.
REASSERT_SHARE = 0.05
#: Share of keys with several disagreeing claims (functional predicates: a conflict).
CONFLICT_KEY_SHARE = 0.10
#: Share of keys whose claims spell one number differently (agreement under ``number``).
AGREE_KEY_SHARE = 0.05
AUTHORS = 32
NAMESPACES = 8
#: Predicates without a contract (exact, functional) and the one with the ``number`` contract.
EXACT_PREDICATES = ("status", "owner", "deadline", "region", "headcount", "tier")
NUMBER_PREDICATE = "price"
#: Claims in the hot-key workload (one key and scope, all values distinct).
HOT_KEY_CLAIMS = 2_000
#: Start of the logical clock writers read (a fixed instant, so ops do not depend on the date).
CLOCK_START_MS = 1_767_225_600_000
DAY_MS = 86_400_000

_STATUS_WORDS = ("open", "closed", "blocked", "in review", "done", "cancelled", "on hold")
_PEOPLE = ("dana", "ravi", "mei", "ola", "sam", "ines", "kofi", "yuki", "lena", "omar")


def bench_registry() -> tuple[Registry, str]:
    """The registry benchmarks use, and the name of the normalizer ``price`` got.

    ``price`` uses the ``number`` normalizer; if that normalizer is not available in this checkout,
    it falls back to ``exact`` (and the caller reports the fallback).
    """
    try:
        registry = Registry([PredicateContract(NUMBER_PREDICATE, normalizer="number")])
        registry.normal_form(registry.contract_for("ns0", NUMBER_PREDICATE), "1,200")
    except (ContractError, KeyError):
        return Registry(), "exact"
    return registry, "number"


def ops_digest(ops: list[Op]) -> str:
    """Hex blake3 of the op ids in generation order: equal digests mean identical workloads."""
    h = blake3.blake3(b"statefuse/bench/workload/v1")
    for op in ops:
        h.update(op.op_id)
    return h.hexdigest()


def _spell(rng: random.Random, amount: int) -> Value:
    """One of several spellings of the same number (they share a ``number`` normal form)."""
    choice = rng.randrange(4)
    if choice == 0:
        return amount
    if choice == 1:
        return float(amount)
    if choice == 2:
        return f"{amount:,}"
    return f"{amount}.00"


@dataclass(frozen=True, slots=True)
class _Key:
    namespace: str
    subject: str
    predicate: str
    scope: str


class WorkloadGenerator:
    """Makes ops for one seed; `ops` for the base op-set, then the ``next_*`` helpers for more.

    The generator remembers the claims it made, so later retractions and incremental ops target
    real claims and keys. Generated ops are realistic, not adversarial: authors observe what they
    retract (so lamports grow as they would between replicas), and values vary in type.
    """

    def __init__(
        self, seed: int, registry: Registry, *, label: str = "base", interval_share: float = 0.0
    ) -> None:
        self.rng = random.Random(f"statefuse-bench/{seed}/{label}")
        #: The share of claims given a validity interval (0: none, and no random draw for it,
        #: so the workload is exactly the plain one).
        self.interval_share = interval_share
        self.registry = registry
        self._clock: Callable[[], int] = itertools.count(CLOCK_START_MS, 3).__next__
        self.writers = [
            Writer(f"agent-{i:02d}", registry=registry, clock=self._clock) for i in range(AUTHORS)
        ]
        self.claims: list[ClaimAdded] = []
        self.keys: list[_Key] = []
        self._key_serial = itertools.count()
        self._pending: Iterator[ClaimAdded] = iter(())

    def _writer(self) -> Writer:
        return self.writers[self.rng.randrange(AUTHORS)]

    def _new_key(self, predicate: str | None = None) -> _Key:
        rng = self.rng
        n = next(self._key_serial)
        roll = rng.random()
        if roll < 0.85:
            scope = "global"
        elif roll < 0.95:
            scope = f"task:t{rng.randrange(1_000)}"
        else:
            scope = f"session:s{rng.randrange(5_000)}"
        if predicate is None:
            predicate = rng.choice((*EXACT_PREDICATES, NUMBER_PREDICATE))
        key = _Key(f"ns{rng.randrange(NAMESPACES)}", f"entity-{n:08d}", predicate, scope)
        self.keys.append(key)
        return key

    def _value(self, predicate: str, variant: int) -> Value:
        """A value for ``predicate``; different ``variant`` values give different values."""
        rng = self.rng
        if predicate == NUMBER_PREDICATE:
            return _spell(rng, 100 + 25 * variant)
        if predicate == "status":
            return _STATUS_WORDS[variant % len(_STATUS_WORDS)]
        if predicate == "owner":
            return _PEOPLE[variant % len(_PEOPLE)]
        if predicate == "deadline":
            return f"2026-{1 + variant % 12:02d}-{1 + variant // 12 % 28:02d}"
        if predicate == "headcount":
            return 3 + variant
        if predicate == "tier":
            return {"level": variant, "paid": variant % 2 == 0}
        return f"region-{variant}"

    def _claim(self, key: _Key, value: Value, writer: Writer | None = None) -> ClaimAdded:
        w = writer or self._writer()
        if self.interval_share and self.rng.random() < self.interval_share:
            # within a year, for 1 to 90 days: some intervals of one key overlap, some do not
            start = CLOCK_START_MS + self.rng.randrange(365) * DAY_MS
            until = start + self.rng.randrange(1, 91) * DAY_MS
            c = w.claim(
                key.namespace,
                key.subject,
                key.predicate,
                value,
                scope=key.scope,
                valid_from=start,
                valid_until=until,
            )
        else:
            c = w.claim(key.namespace, key.subject, key.predicate, value, scope=key.scope)
        self.claims.append(c)
        return c

    def _key_group(self) -> Iterator[ClaimAdded]:
        """The claims of one new key: one claim, or several that conflict or agree."""
        rng = self.rng
        roll = rng.random()
        if roll < CONFLICT_KEY_SHARE:
            key = self._new_key()
            variants = rng.sample(range(40), rng.randint(2, 4))
            for v in variants:
                yield self._claim(key, self._value(key.predicate, v))
        elif roll < CONFLICT_KEY_SHARE + AGREE_KEY_SHARE:
            key = self._new_key(NUMBER_PREDICATE)
            amount = 100 + 25 * rng.randrange(40)
            for _ in range(rng.randint(2, 3)):
                yield self._claim(key, _spell(rng, amount))
        else:
            key = self._new_key()
            yield self._claim(key, self._value(key.predicate, rng.randrange(40)))

    def next_claim(self) -> ClaimAdded:
        """The next claim of the key-group stream (starts a new key group when one is done)."""
        for c in self._pending:
            return c
        self._pending = self._key_group()
        return next(self._pending)

    def next_claim_on_existing_key(self) -> ClaimAdded:
        """A claim with a fresh value on a key claimed before (may start or widen a conflict)."""
        key = self.keys[self.rng.randrange(len(self.keys))]
        return self._claim(key, self._value(key.predicate, 40 + self.rng.randrange(1_000)))

    def next_retraction(self, *, by_ref: bool) -> ClaimRetracted:
        """A retraction of a random earlier claim, by its ref or by its id."""
        target = self.claims[self.rng.randrange(len(self.claims))]
        w = self._writer()
        w.observe((target,))
        if by_ref:
            return w.retract(claim_ref=target.claim_ref, reason="corrected")
        return w.retract(claim_id=target.claim_id, reason="wrong")

    def _retraction_ops(self) -> list[Op]:
        """One retraction, possibly with a correcting claim or a later re-assertion."""
        rng = self.rng
        target = self.claims[rng.randrange(len(self.claims))]
        w = self._writer()
        w.observe((target,))
        key = _Key(target.namespace, target.subject, target.predicate, target.scope)
        out: list[Op] = []
        superseded_by = None
        if rng.random() < CORRECTION_SHARE:
            fix = self._claim(key, self._value(key.predicate, 40 + rng.randrange(1_000)), w)
            out.append(fix)
            superseded_by = fix.claim_id
        if rng.random() < REF_RETRACTION_SHARE:
            out.append(
                w.retract(
                    claim_ref=target.claim_ref, reason="outdated", superseded_by=superseded_by
                )
            )
            if rng.random() < REASSERT_SHARE:
                out.append(self._claim(key, target.value, w))
        else:
            out.append(
                w.retract(claim_id=target.claim_id, reason="mistake", superseded_by=superseded_by)
            )
        return out

    def ops(self, n: int, progress: Callable[[int], None] | None = None) -> list[Op]:
        """``n`` ops of the mix described in the module docstring."""
        out: list[Op] = []
        rng = self.rng
        next_report = 100_000
        while len(out) < n:
            # A retraction brings up to three ops; near the end only claims fit exactly.
            if self.claims and len(out) + 3 <= n and rng.random() < RETRACTION_SHARE:
                out.extend(self._retraction_ops())
            else:
                out.append(self.next_claim())
            if progress is not None and len(out) >= next_report:
                progress(len(out))
                next_report += 100_000
        return out

    def hot_key_ops(self, n: int = HOT_KEY_CLAIMS) -> list[Op]:
        """``n`` claims on one (key, scope), each with a different number (``n`` groups)."""
        key = _Key("shop", "widget-1", NUMBER_PREDICATE, "global")
        return [self._claim(key, _spell(self.rng, 1_000 + 7 * i)) for i in range(n)]
