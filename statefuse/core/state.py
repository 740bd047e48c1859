"""The materialized state: what memory says now (SEMANTICS §4–§6), read-only.

Invariant: every answer is a deterministic function of the op-set and the registry. Orders come
from sorting by ids (never from dict or set iteration), and `State.digest` hashes one canonical
rendering of everything, so equal op-sets give equal digests in any process and under any hash
seed. A State never changes after it is made: the incremental materializer copies its index
before writing to it again.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from itertools import chain, filterfalse
from operator import attrgetter
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar, cast

import blake3

from statefuse.core.error import ClaimLookupError
from statefuse.core.index import Index, LocusKey
from statefuse.core.keytext import Key, KeyTextError, parse_key
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, EvidenceAdded, Outcome
from statefuse.core.validity import conflicting
from statefuse.registry import Registry
from statefuse.registry.detector import (
    DETECTOR_FAILED,
    DetectorInput,
    DetectorSpec,
    run_detector,
)
from statefuse.registry.value import FrozenMap, encode_canonical, encode_value, frozen_value

if TYPE_CHECKING:
    from collections.abc import Iterable

    from statefuse.core.lifecycle import ConflictEvent
    from statefuse.core.redactedclaim import RedactedClaim

LOCUS_DOMAIN = b"statefuse/locus/v1"
CONFLICT_DOMAIN = b"statefuse/conflict/v1"
GROUP_DOMAIN = b"statefuse/group/v1"
DIGEST_DOMAIN = b"statefuse/state/v1"
FINDING_DOMAIN = b"statefuse/finding/v1"
#: The group key prefix of a finding's candidates: each claim is a group of its own.
FINDING_GROUP = b"#"

_T = TypeVar("_T")

#: Fewest hex digits of a claim id prefix `State.claim` accepts.
MIN_ID_PREFIX = 8
_HEX_PREFIX = re.compile(f"[0-9a-f]{{{MIN_ID_PREFIX},64}}")


def locus_of(namespace: str, subject: str, predicate: str, scope: str) -> bytes:
    """``blake3(key, scope)``: names the place of a conflict, stable across snapshots."""
    return blake3.blake3(
        LOCUS_DOMAIN + encode_value([namespace, subject, predicate, scope])
    ).digest()


def _locus_of_key(lk: LocusKey) -> bytes:
    """`locus_of` for a key taken from verified claims (its strs need no re-validation)."""
    return blake3.blake3(LOCUS_DOMAIN + encode_canonical(list(lk))).digest()


def finding_locus(detector: str, finding: str, anchor: Sequence[str], scope: str) -> bytes:
    """``blake3(detector name, finding type, anchor key, scope)`` in a domain of its own: the
    place of a detector's finding, stable across snapshots and across versions of the
    detector (a decision made on it goes on applying while its claims do)."""
    return blake3.blake3(
        FINDING_DOMAIN + encode_value([detector, finding, list(anchor), scope])
    ).digest()


def conflict_id_of(locus: bytes, claim_ids: tuple[bytes, ...]) -> bytes:
    """``blake3(locus, sorted claim ids)``: names one snapshot of a conflict's candidate set."""
    h = blake3.blake3(CONFLICT_DOMAIN)
    h.update(locus)
    for cid in sorted(claim_ids):
        h.update(cid)
    return h.digest()


def group_id_of(normal_key: bytes) -> bytes:
    """``blake3(normal key)``: names one candidate value (a group) in a decision, in 32 bytes
    whatever the value's size."""
    return blake3.blake3(GROUP_DOMAIN + normal_key).digest()


@dataclass(frozen=True, slots=True)
class CandidateGroup:
    """Candidates whose values agree under the predicate contract (corroboration).

    ``normal_key`` is the group key: ``b"~"`` + canonical normal form, or ``b"="`` + exact
    canonical bytes for exact predicates and values the normalizer declines.
    """

    normal_key: bytes
    claim_ids: tuple[bytes, ...]

    @property
    def group_id(self) -> bytes:
        """`group_id_of` the normal key: what a decision records for this value."""
        return group_id_of(self.normal_key)


class StaleReason(Enum):
    """Why a decision no longer applies (SEMANTICS §6)."""

    #: A value it did not choose among appeared at its locus.
    NEW_VALUE = "new value"
    #: No active candidate holds the value it chose any more (``select``, ``merge``).
    CHOSEN_VALUE_LOST = "chosen value lost"
    #: A value a ``preserve`` or ``defer`` decision kept (acknowledged) is no longer held by
    #: any active candidate: such a decision keeps every value group it recorded.
    KEPT_VALUE_LOST = "kept value lost"
    #: A first-release decision (no value groups): its candidate set is no longer the current
    #: one, or its conflict ended.
    CANDIDATES_CHANGED = "candidates changed"


@dataclass(frozen=True, slots=True)
class StaleDecision:
    """A decision that no longer applies, and why."""

    decision: DecisionAdded
    reason: StaleReason


@dataclass(frozen=True, slots=True)
class ConflictSet:
    """Active claims of one functional (key, scope) that disagree, or a detector's finding over
    claims of one or several keys (SEMANTICS §5). Never resolved here.

    A finding (``finding`` is its type, non-empty) is anchored at ``key`` (its anchor key) and
    ``scope``; its ``locus`` is `finding_locus` (stable across snapshots), each candidate claim
    is a group of its own (so a decision selects one claim), ``detector`` names the detector
    (``name@version``), ``reason`` and ``witness`` say why, ``keys`` lists every key its claims
    touch. A ``detector-failed`` finding (`DETECTOR_FAILED`) has no candidates; its reason
    names the error. A same-key conflict leaves the trailing fields at their defaults, so its
    shape and ids are those of every earlier release."""

    locus: bytes
    conflict_id: bytes
    key: tuple[str, str, str]
    scope: str
    candidates: tuple[bytes, ...]
    groups: tuple[CandidateGroup, ...]
    finding: str = ""
    detector: str = ""
    reason: str = ""
    witness: FrozenMap | None = field(default=None, hash=False)
    keys: tuple[tuple[str, str, str], ...] = ()

    @property
    def is_finding(self) -> bool:
        """True for a detector's finding, False for a same-key conflict."""
        return bool(self.finding)


def key_of(key: str | Sequence[str]) -> Key:
    """A key given as one string (``namespace/subject/predicate``, escaped as `format_key`
    writes it) or as its three parts -> the three parts. Raises KeyTextError (field
    ``key``) otherwise."""
    if isinstance(key, str):
        return parse_key(key)
    parts = tuple(key)
    if len(parts) != 3 or not all(isinstance(p, str) and p for p in parts):
        raise KeyTextError("key", "key-syntax", f"a key is three non-empty strings, not {key!r}")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True, slots=True)
class StaleCause:
    """Why a claim is stale: one of its ``depends_on`` entries no longer holds.

    Direct cause: ``retracted`` lists the retracted claims the dependency names, with the
    ``superseded_by`` claims their retractions point to and the ``current`` active claims of the
    same key and scope. Transitive cause: ``via`` lists the stale claims the dependency resolves to.
    """

    dependency: bytes
    retracted: tuple[bytes, ...] = ()
    superseded_by: tuple[bytes, ...] = ()
    current: tuple[bytes, ...] = ()
    via: tuple[bytes, ...] = ()


class State:
    """Read-only view of a materialized op-set. Build it with `materialize` or a `Materializer`."""

    __slots__ = ("__dict__", "_carried", "_ix")

    def __init__(
        self,
        ix: Index,
        *,
        previous: dict[Callable[[State], object], object] | None = None,
        touched: frozenset[LocusKey] = frozenset(),
    ) -> None:
        self._ix = ix
        #: What the State before this one derived (`derived`; its memo, by function), and the
        #: locus keys whose active claims changed since: derived data may be carried over.
        self._carried: tuple[dict[Callable[[State], object], object], frozenset[LocusKey]] | None
        self._carried = (dict(previous), touched) if previous else None

    def changes_since(
        self,
    ) -> tuple[dict[Callable[[State], object], object], frozenset[LocusKey]] | None:
        """What the previous State of the same materializer had derived (by function) and the
        locus keys whose active claims changed since it, or None (no previous State, or it
        derived nothing). For `derived` functions that update their previous answer instead of
        starting over; the answer must equal the one from scratch."""
        return self._carried

    @property
    def registry(self) -> Registry:
        return self._ix.registry

    def derived(self, fn: Callable[[State], _T]) -> _T:
        """``fn(self)``, computed on the first call with ``fn`` and kept for the State's life.

        For data a reader derives from the whole state on every call (projection keeps its
        per-state plan here). ``fn`` must be a pure function of the State, which never changes,
        and its answer must be treated as immutable.
        """
        memo = self._derived
        if fn not in memo:
            memo.setdefault(fn, fn(self))
            carried = self._carried
            if carried is not None and all(f in memo for f in carried[0]):
                self._carried = None  # everything carried over is made again: let it go
        return cast(_T, memo[fn])

    @cached_property
    def _derived(self) -> dict[Callable[[State], object], object]:
        return {}

    # --- claims ----------------------------------------------------------------------------------

    @property
    def claims(self) -> Mapping[bytes, ClaimAdded]:
        """Every claim ever added, active or not, by claim_id."""
        return MappingProxyType(self._ix.claims)

    def claim(self, ref: bytes | str | ClaimAdded, *, field: str = "claim") -> ClaimAdded:
        """The claim (active or retracted) ``ref`` names: the claim itself, its 32-byte id, the
        id in hex, or a unique hex prefix of at least `MIN_ID_PREFIX` digits (what the command
        line and the MCP tools accept). Raises ClaimLookupError naming ``field``: rule
        ``claim-ref`` (not such a reference), ``known-claim`` (no claim of this state has it)
        or ``unique-prefix`` (several ids start so)."""
        claims = self._ix.claims
        if isinstance(ref, ClaimAdded):
            found = claims.get(ref.op_id)
        elif isinstance(ref, bytes):
            if len(ref) != 32:
                raise ClaimLookupError(
                    field, "claim-ref", f"a claim id is 32 bytes, not {len(ref)}"
                )
            found = claims.get(ref)
        elif isinstance(ref, str):
            return claims[self._id_with_prefix(ref, field)]
        else:
            raise ClaimLookupError(
                field, "claim-ref", f"expected a claim, its id or hex, got {type(ref).__name__}"
            )
        if found is None:
            shown = ref.op_id.hex() if isinstance(ref, ClaimAdded) else ref.hex()
            raise ClaimLookupError(field, "known-claim", f"no claim has the id {shown}")
        return found

    def _id_with_prefix(self, text: str, field: str) -> bytes:
        prefix = text.strip().lower()
        if not _HEX_PREFIX.fullmatch(prefix):
            raise ClaimLookupError(
                field,
                "claim-ref",
                f"{text!r} is not a claim id: write {MIN_ID_PREFIX} to 64 hex digits",
            )
        head = bytes.fromhex(prefix[: len(prefix) // 2 * 2])
        ids = self._sorted_claim_ids
        found: list[bytes] = []
        for cid in ids[bisect_left(ids, head) :]:
            if not cid.startswith(head) or len(found) > 5:
                break
            if cid.hex().startswith(prefix):
                found.append(cid)
        if not found:
            raise ClaimLookupError(field, "known-claim", f"no claim has an id starting {prefix}")
        if len(found) > 1:
            shown = ", ".join(c.hex()[: len(prefix) + 4] for c in found[:5])
            raise ClaimLookupError(
                field,
                "unique-prefix",
                f"{prefix} starts several claim ids ({shown}); give more digits",
            )
        return found[0]

    @cached_property
    def _sorted_claim_ids(self) -> list[bytes]:
        return sorted(self._ix.claims)

    def all_claims(self) -> list[ClaimAdded]:
        """Every claim, sorted by claim_id."""
        claims = self._ix.claims
        return [claims[c] for c in sorted(claims)]

    @cached_property
    def _active_ids(self) -> tuple[bytes, ...]:
        killed = self._ix.killed
        return tuple(sorted(filterfalse(killed.__contains__, self._ix.claims)))

    def active_claims(self) -> list[ClaimAdded]:
        """Active claims (not retracted), sorted by claim_id."""
        claims = self._ix.claims
        return [claims[c] for c in self._active_ids]

    def is_active(self, claim_id: bytes) -> bool:
        return claim_id in self._ix.claims and claim_id not in self._ix.killed

    def active_at(
        self,
        namespace: str | Sequence[str],
        subject: str | None = None,
        predicate: str | None = None,
        scope: str = "global",
    ) -> list[ClaimAdded]:
        """Active claims of one key and scope, sorted by claim_id. The key is its three parts
        or, as every other call takes it, one string ``"namespace/subject/predicate"`` (or a
        sequence of the three parts) with ``scope=`` by keyword. Raises KeyTextError (field
        ``key``) for a string that is not a key."""
        if subject is None and predicate is None:
            namespace, subject, predicate = key_of(namespace)
        elif not (isinstance(namespace, str) and subject is not None and predicate is not None):
            raise KeyTextError(
                "key", "key-syntax", "give the key as one string or as its three parts"
            )
        claims = self._ix.claims
        ids = self._ix.members_at((namespace, subject, predicate, scope))
        return [claims[c] for c in sorted(ids)]

    @cached_property
    def retracted(self) -> Mapping[bytes, tuple[ClaimRetracted, ...]]:
        """Retracted claim_id -> the retractions that retract it (sorted by op_id)."""
        rets = self._ix.retractions
        return MappingProxyType(
            {c: tuple(rets[r] for r in sorted(ks)) for c, ks in sorted(self._ix.killed.items())}
        )

    def retracted_by(self, retraction: ClaimRetracted) -> tuple[bytes, ...]:
        """The claims ``retraction`` retracts in this state, sorted by id: its exact target
        and, for a semantic one, every claim with its ref that does not reassert past it. Reads
        the index (what `retracted` would say of it without building that map of every
        retracted claim)."""
        ix, rid = self._ix, retraction.op_id
        out = set()
        if retraction.target_claim_id is not None:
            out.add(retraction.target_claim_id)
        if retraction.target_claim_ref is not None:
            out.update(ix.by_ref().get(retraction.target_claim_ref, ()))
        return tuple(sorted(c for c in out if rid in ix.killed.get(c, ())))

    @property
    def retractions(self) -> Mapping[bytes, ClaimRetracted]:
        return MappingProxyType(self._ix.retractions)

    @property
    def evidence(self) -> Mapping[bytes, EvidenceAdded]:
        return MappingProxyType(self._ix.evidence)

    @cached_property
    def decisions(self) -> tuple[DecisionAdded, ...]:
        """Every decision, sorted by op_id."""
        d = self._ix.decisions
        return tuple(d[k] for k in sorted(d))

    # --- conflicts -------------------------------------------------------------------------------

    def _conflict(self, lk: LocusKey) -> ConflictSet:
        ix = self._ix
        claims = ix.claims
        # The candidates: the active claims that conflict with at least one other (all of them
        # unless some claim carries an interval or a context, SEMANTICS §5).
        ids = conflicting([claims[m] for m in ix.members_at(lk)], ix.gkey)
        groups: dict[bytes, list[bytes]] = {}
        for cid in ids:
            groups.setdefault(ix.gkey(cid), []).append(cid)
        locus = _locus_of_key(lk)
        return ConflictSet(
            locus=locus,
            conflict_id=conflict_id_of(locus, ids),
            key=(lk[0], lk[1], lk[2]),
            scope=lk[3],
            candidates=ids,
            groups=tuple(CandidateGroup(k, tuple(v)) for k, v in sorted(groups.items())),
        )

    def _conflict_memo(self) -> dict[LocusKey, ConflictSet]:
        return self.derived(_carried_conflicts)

    def _conflict_made(self, lk: LocusKey) -> ConflictSet:
        memo = self._conflict_memo()
        c = memo.get(lk)
        if c is None:
            c = memo[lk] = self._conflict(lk)
        return c

    @cached_property
    def conflicts(self) -> tuple[ConflictSet, ...]:
        """Every ConflictSet, same-key conflicts and detectors' findings, sorted by locus."""
        made = self._conflict_made
        out = [made(lk) for lk in self._ix.conflicted]
        out.extend(self.findings)
        out.sort(key=lambda c: c.locus)
        return tuple(out)

    @property
    def findings(self) -> tuple[ConflictSet, ...]:
        """The findings of the registry's detectors (SEMANTICS §5), sorted by locus: each
        detector run on the active claims of the predicates it declares (not run when there
        are none). Carried from the State before: only the detectors that read a predicate
        whose active claims changed since are run again."""
        if not self._ix.registry.detectors:
            return ()
        return self.derived(_carried_findings).all

    @cached_property
    def _conflicts_by_locus(self) -> Mapping[bytes, ConflictSet]:
        return MappingProxyType({c.locus: c for c in self.conflicts})

    def conflict_at(self, locus: bytes) -> ConflictSet | None:
        """The current conflict at ``locus``, if there is one."""
        return self._conflicts_by_locus.get(locus)

    def in_conflict(
        self, namespace: str, subject: str, predicate: str, scope: str = "global"
    ) -> bool:
        """True iff the key has a ConflictSet in ``scope`` (without making it)."""
        return (namespace, subject, predicate, scope) in self._ix.conflicted

    def conflict_of(
        self, namespace: str, subject: str, predicate: str, scope: str = "global"
    ) -> ConflictSet | None:
        """`conflict_at` by key and scope, without hashing a locus. Made on first use and
        carried from the State before while its locus is untouched, so asking about one key
        costs that key, not every conflict."""
        lk = (namespace, subject, predicate, scope)
        if lk not in self._ix.conflicted:
            return None
        return self._conflict_made(lk)

    def active_by_key(self) -> dict[tuple[str, str, str], tuple[ClaimAdded, ...]]:
        """Active claims grouped by key over every scope, keys sorted, each group by claim_id:
        a new dict on each call, linear in the active claims plus a sort of the keys (projection
        reads it once per State and keeps what it derives, see `derived`)."""
        claims = self._ix.claims
        ids_by_key: dict[tuple[str, str, str], tuple[bytes, ...]] = {}
        for lk, m in self._ix.members.items():
            key = (lk[0], lk[1], lk[2])
            ids: tuple[bytes, ...] = (m,) if isinstance(m, bytes) else m
            prev = ids_by_key.get(key)
            ids_by_key[key] = ids if prev is None else prev + ids
        out: dict[tuple[str, str, str], tuple[ClaimAdded, ...]] = {}
        for key in sorted(ids_by_key):
            at_key = ids_by_key[key]
            if len(at_key) == 1:
                out[key] = (claims[at_key[0]],)
            else:
                out[key] = tuple(claims[c] for c in sorted(at_key))
        return out

    # --- decisions (§6) --------------------------------------------------------------------------

    def group_id(self, claim_id: bytes) -> bytes:
        """The `group_id_of` the value of claim ``claim_id`` (any claim ever added, active or
        not): equal for claims that agree under their contract. Raises KeyError for an
        unknown claim."""
        g = self._group_ids.get(claim_id)
        if g is None:
            g = self._group_ids[claim_id] = group_id_of(self._ix.gkey(claim_id))
        return g

    @cached_property
    def _group_ids(self) -> dict[bytes, bytes]:
        return {}  # a pure cache of claim -> group id

    def _groups_held(self, d: DecisionAdded) -> frozenset[bytes]:
        """The value groups of the active candidates at ``d``'s locus: those of its conflict, or,
        when there is none, those of the claims at the decided claim's key and scope (a locus
        is a hash, so it is found through a claim the decision names; none found: empty)."""
        conflict = self.conflict_at(d.locus)
        if conflict is not None:
            return frozenset(g.group_id for g in conflict.groups)
        c = self._ix.claims.get(d.selected_claim_id)
        if c is None:
            return frozenset()
        lk = (c.namespace, c.subject, c.predicate, c.scope)
        if _locus_of_key(lk) != d.locus:
            return frozenset()
        return frozenset(map(self.group_id, self._ix.members_at(lk)))

    def _judge(self, d: DecisionAdded) -> StaleReason | None:
        if not d.groups:  # a first-release decision: its exact candidate set must be current
            conflict = self.conflict_at(d.locus)
            if conflict is None or conflict.conflict_id != d.conflict_id:
                return StaleReason.CANDIDATES_CHANGED
            if d.selected_claim_id not in conflict.candidates:
                return StaleReason.CHOSEN_VALUE_LOST
            return None
        held = self._groups_held(d)
        if d.outcome is Outcome.SELECT or d.outcome is Outcome.MERGE:
            if d.selected_group not in held:
                return StaleReason.CHOSEN_VALUE_LOST
        elif not held.issuperset(d.groups):
            return StaleReason.KEPT_VALUE_LOST
        if not held.issubset(d.groups):
            return StaleReason.NEW_VALUE
        return None

    @cached_property
    def _verdicts(self) -> Mapping[bytes, StaleReason | None]:
        return MappingProxyType({d.op_id: self._judge(d) for d in self.decisions})

    def why_stale(self, decision: DecisionAdded) -> StaleReason | None:
        """None if ``decision`` applies, else why not (SEMANTICS §6). A decision that records
        value groups applies while the value(s) it kept are held by an active candidate and
        every value held at its locus is one it chose among: agreement and retractions of
        other values never make it stale. What it kept depends on its outcome: ``select`` and
        ``merge`` keep the chosen value; ``preserve`` and ``defer`` keep every value group they
        recorded, so the loss of any one of them reopens the conflict (the set of accepted
        alternatives, or of acknowledged ones, is no longer the one decided on). When both
        rules break, the lost value is reported. A first-release decision applies only while
        its candidate set is current."""
        if decision.op_id in self._ix.decisions:
            return self._verdicts[decision.op_id]
        return self._judge(decision)

    def decision_applies(self, decision: DecisionAdded) -> bool:
        """True iff ``decision`` applies (`why_stale` is None)."""
        return self.why_stale(decision) is None

    def decision_selects(self, decision: DecisionAdded, claim_id: bytes) -> bool:
        """True iff ``decision`` chose the value of claim ``claim_id`` (a first-release
        decision: that very claim; ``preserve`` and ``defer`` choose none)."""
        if not decision.outcome.selects:
            return False
        if not decision.groups:
            return claim_id == decision.selected_claim_id
        return claim_id in self._ix.claims and self.group_id(claim_id) == decision.selected_group

    def decision_for(self, conflict: ConflictSet) -> DecisionAdded | None:
        """The applicable decision for ``conflict`` with the highest (lamport, op_id), if any.
        It may be a ``defer`` (the conflict is acknowledged but still open: check
        ``outcome.settles``) or a ``preserve`` (settled with no value selected)."""
        best: DecisionAdded | None = None
        for d in self.decisions_at(conflict.locus):
            if self.why_stale(d) is None and (
                best is None or (d.lamport, d.op_id) > (best.lamport, best.op_id)
            ):
                best = d
        return best

    def conflict_history(
        self, locus: bytes, *, redacted: Iterable[RedactedClaim] = ()
    ) -> list[ConflictEvent]:
        """The lifecycle of the conflict at ``locus``: opened, decided (with its outcome),
        deferred, reopened and why, closed, redacted
        (`statefuse.core.lifecycle.conflict_history`)."""
        from statefuse.core.lifecycle import conflict_history  # lifecycle replays States

        return conflict_history(self, locus, redacted=redacted)

    @cached_property
    def _decisions_by_locus(self) -> Mapping[bytes, tuple[DecisionAdded, ...]]:
        out: dict[bytes, list[DecisionAdded]] = {}
        for d in self.decisions:
            out.setdefault(d.locus, []).append(d)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    def decisions_at(self, locus: bytes) -> tuple[DecisionAdded, ...]:
        """Every decision made for conflict ``locus``, current or stale, sorted by op_id."""
        return self._decisions_by_locus.get(locus, ())

    @cached_property
    def stale_decisions(self) -> tuple[DecisionAdded, ...]:
        """Decisions that no longer apply, sorted by op_id (`stale_decision_reasons` says
        why)."""
        return tuple(s.decision for s in self.stale_decision_reasons)

    @cached_property
    def stale_decision_reasons(self) -> tuple[StaleDecision, ...]:
        """Every decision that no longer applies with the reason, sorted by op_id."""
        verdicts = self._verdicts
        return tuple(
            StaleDecision(d, r) for d in self.decisions if (r := verdicts[d.op_id]) is not None
        )

    # --- stale claims (§6) -----------------------------------------------------------------------

    @cached_property
    def stale(self) -> Mapping[bytes, tuple[StaleCause, ...]]:
        """Active claim_id -> why it is stale, for every active claim whose dependencies broke.

        Least fixed point: a claim is stale if a dependency is retracted, or resolves only to
        stale claims (an id of a stale claim; a ref whose active claims are all stale). Cycles of
        healthy claims stay healthy.
        """
        ix = self._ix
        claims, killed = ix.claims, ix.killed
        dependents = [claims[d] for d in sorted(ix.dependents) if d not in killed]
        if not dependents:
            return MappingProxyType({})
        by_ref = ix.by_ref()

        def active_with_ref(ref: bytes) -> list[bytes]:
            return [c for c in by_ref.get(ref, ()) if c not in killed]

        def broken(dep: bytes) -> bool:
            if dep in killed or dep in ix.ret_by_id:
                return True
            holders = by_ref.get(dep)
            if holders is None and dep not in ix.ret_by_ref:
                return False
            return not active_with_ref(dep)

        rev: dict[bytes, list[bytes]] = {}
        stale: set[bytes] = set()
        work: list[bytes] = []
        for c in dependents:
            for dep in c.depends_on:
                rev.setdefault(dep, []).append(c.op_id)
            if any(broken(dep) for dep in c.depends_on):
                stale.add(c.op_id)
                work.append(c.op_id)
        healthy_left: dict[bytes, int] = {}
        while work:
            x = work.pop()
            targets = list(rev.get(x, ()))
            ref = claims[x].claim_ref
            if ref in rev:
                left = healthy_left.get(ref)
                if left is None:
                    left = len(active_with_ref(ref))
                left -= 1
                healthy_left[ref] = left
                if left == 0:
                    targets.extend(rev[ref])
            for y in targets:
                if y not in stale:
                    stale.add(y)
                    work.append(y)

        out: dict[bytes, tuple[StaleCause, ...]] = {}
        for cid in sorted(stale):
            causes = []
            for dep in claims[cid].depends_on:
                if broken(dep):
                    causes.append(self._direct_cause(dep))
                    continue
                via = (dep,) if dep in stale else tuple(sorted(active_with_ref(dep)))
                if via and all(v in stale for v in via):
                    causes.append(StaleCause(dependency=dep, via=via))
            out[cid] = tuple(causes)
        return MappingProxyType(out)

    def _direct_cause(self, dep: bytes) -> StaleCause:
        ix = self._ix
        gone: tuple[bytes, ...]
        if dep in ix.claims or dep in ix.ret_by_id:
            gone = (dep,) if dep in ix.claims else ()
        else:
            gone = tuple(sorted(c for c in ix.by_ref().get(dep, ()) if c in ix.killed))
        superseded: set[bytes] = set()
        current: set[bytes] = set()
        rets = set(ix.ret_by_id.get(dep, ())) | set(ix.ret_by_ref.get(dep, ()))
        for cid in gone:
            rets.update(ix.killed.get(cid, ()))
            c = ix.claims[cid]
            current.update(ix.members_at((c.namespace, c.subject, c.predicate, c.scope)))
        for rid in rets:
            s = ix.retractions[rid].superseded_by
            if s is not None:
                superseded.add(s)
        return StaleCause(
            dependency=dep,
            retracted=gone,
            superseded_by=tuple(sorted(superseded)),
            current=tuple(sorted(current)),
        )

    # --- digest ----------------------------------------------------------------------------------

    def digest(self) -> bytes:
        """A canonical hash of the whole materialized state (equal states, equal digests)."""
        return self._digest

    @cached_property
    def _digest(self) -> bytes:
        ix = self._ix
        h = blake3.blake3(DIGEST_DOMAIN)
        h.update(self.registry.fingerprint)

        def section(name: str, items: Sequence[object]) -> None:
            h.update(encode_value([name, len(items)]))
            for item in items:
                h.update(encode_value(item))

        section("claims", list(self._active_ids))
        section("retracted", [[c, sorted(ks)] for c, ks in sorted(ix.killed.items())])
        section("retractions", sorted(ix.retractions))
        section("conflicts", [_digest_entry(c) for c in self.conflicts])
        section(
            "stale",
            [
                [
                    cid,
                    [
                        [
                            s.dependency,
                            list(s.retracted),
                            list(s.superseded_by),
                            list(s.current),
                            list(s.via),
                        ]
                        for s in causes
                    ],
                ]
                for cid, causes in self.stale.items()
            ],
        )
        section("decisions", [d.op_id for d in self.decisions])
        section("evidence", sorted(ix.evidence))
        return h.digest()

    def __repr__(self) -> str:
        ix = self._ix
        return (
            f"State({len(ix.claims)} claims, {len(ix.claims) - len(ix.killed)} active,"
            f" {len(ix.conflicted)} conflicts)"
        )


def _digest_entry(c: ConflictSet) -> list[object]:
    entry: list[object] = [
        c.locus,
        c.conflict_id,
        [[g.normal_key, list(g.claim_ids)] for g in c.groups],
    ]
    if c.finding:  # a same-key conflict keeps the entry of earlier releases
        entry += [c.finding, c.detector, c.reason, c.witness, [list(k) for k in c.keys]]
    return entry


# --- findings (SEMANTICS §5) ---------------------------------------------------------------------


@dataclass(slots=True)
class _Findings:
    """The findings of one State, by detector, and each detector's input by locus key (what
    the next State updates for the loci written since, instead of scanning every key)."""

    inputs: dict[str, dict[LocusKey, tuple[bytes, ...]]]
    found: dict[str, tuple[ConflictSet, ...]]
    all: tuple[ConflictSet, ...] = ()

    def settle(self) -> _Findings:
        out = [c for label in sorted(self.found) for c in self.found[label]]
        out.sort(key=lambda c: c.locus)
        self.all = tuple(out)
        return self


def _members(m: bytes | tuple[bytes, ...]) -> tuple[bytes, ...]:
    return (m,) if isinstance(m, bytes) else m


def _carried_findings(state: State) -> _Findings:
    """The findings of ``state``: those of the State before for every detector that reads no
    locus written since, each other detector run again on its (updated) input; from scratch
    when there is no State before. Either way the same findings (a detector is a pure
    function of its input, which is a function of the active claims)."""
    ix = state._ix
    specs = ix.registry.detectors
    since = state.changes_since()
    prev = since[0].get(_carried_findings) if since is not None else None
    if (
        since is not None
        and isinstance(prev, _Findings)
        and set(prev.found) == {s.label for s in specs}
    ):
        dirty: dict[str, dict[LocusKey, tuple[bytes, ...]]] = {}
        for lk in since[1]:
            for spec in ix.registry.detectors_reading(lk[0], lk[2]):
                inputs = dirty.get(spec.label)
                if inputs is None:
                    inputs = dirty[spec.label] = prev.inputs[spec.label].copy()
                m = ix.members.get(lk)
                if m is None:
                    inputs.pop(lk, None)
                else:
                    inputs[lk] = _members(m)
        if not dirty:
            return prev
        out = _Findings({**prev.inputs, **dirty}, dict(prev.found))
        for spec in specs:
            if spec.label in dirty:
                out.found[spec.label] = _run(state, spec, dirty[spec.label])
        return out.settle()
    any_namespace: dict[str, list[DetectorSpec]] = {}
    exact: dict[tuple[str, str], list[DetectorSpec]] = {}
    for spec in specs:
        for namespace, predicate in spec.reads:
            if namespace is None:
                any_namespace.setdefault(predicate, []).append(spec)
            else:
                exact.setdefault((namespace, predicate), []).append(spec)
    every: dict[str, dict[LocusKey, tuple[bytes, ...]]] = {s.label: {} for s in specs}
    for lk, m in ix.members.items():
        readers = any_namespace.get(lk[2], ())
        more = exact.get((lk[0], lk[2]), ()) if exact else ()
        for spec in (*readers, *more):
            every[spec.label][lk] = _members(m)
    found = {spec.label: _run(state, spec, every[spec.label]) for spec in specs}
    return _Findings(every, found).settle()


_OP_ID = attrgetter("op_id")


def _run(
    state: State, spec: DetectorSpec, inputs: Mapping[LocusKey, tuple[bytes, ...]]
) -> tuple[ConflictSet, ...]:
    """The findings of ``spec`` on the claims ``inputs`` holds (none when it holds none)."""
    if not inputs:
        return ()
    claims = state._ix.claims
    # the claim ops themselves, sorted by claim id (`ClaimView`: copying their fields would
    # cost a random walk over memory)
    held = map(claims.__getitem__, chain.from_iterable(inputs.values()))
    given = DetectorInput(tuple(sorted(held, key=_OP_ID)))
    found, error = run_detector(spec, state._ix.registry.detector_code(spec), given)
    if error is not None:
        anchor = ("detector", spec.label, "failed")
        locus = finding_locus(spec.name, DETECTOR_FAILED, anchor, "global")
        witness = frozen_value({"detector": spec.label, "claims": len(given)})
        assert isinstance(witness, FrozenMap)
        return (
            ConflictSet(
                locus=locus,
                conflict_id=conflict_id_of(locus, ()),
                key=anchor,
                scope="global",
                candidates=(),
                groups=(),
                finding=DETECTOR_FAILED,
                detector=spec.label,
                reason=f"detector {spec.label} {error}",
                witness=witness,
            ),
        )
    out = []
    for f in found:
        locus = finding_locus(spec.name, f.type, f.anchor, f.scope)
        out.append(
            ConflictSet(
                locus=locus,
                conflict_id=conflict_id_of(locus, f.claim_ids),
                key=f.anchor,
                scope=f.scope,
                candidates=f.claim_ids,
                groups=tuple(CandidateGroup(FINDING_GROUP + c, (c,)) for c in f.claim_ids),
                finding=f.type,
                detector=f.detector,
                reason=f.reason,
                witness=f.witness,
                keys=f.keys,
            )
        )
    return tuple(out)


def _carried_conflicts(state: State) -> dict[LocusKey, ConflictSet]:
    """The ConflictSets ``state`` has made so far, by locus key: those of the State before
    whose locus no write touched since (their candidates are the same claims), then each
    one made on first use. A ConflictSet is a function of its locus' active claims alone."""
    since = state.changes_since()
    if since is not None:
        prev = since[0].get(_carried_conflicts)
        if isinstance(prev, dict) and prev:
            out = prev.copy()
            for lk in since[1]:
                out.pop(lk, None)
            return out
    return {}
