"""The writer: makes well-formed ops with correct lamport clocks and re-assertion markers.

Invariant: every op a Writer makes has ``lamport`` one more than the highest lamport the writer
has made or observed, saturating at `MAX_LAMPORT` (a clock never makes a write fail: at the
ceiling new ops take it, and equal lamports are ordered by op id as everywhere), and a claim it
makes lists in ``reasserts`` every ref retraction it has observed for that claim's ref, so a
deliberate re-assertion escapes an old correction while a stale replica's copy cannot
(SEMANTICS §4). Reading the clock happens here, at the edge; the
ops themselves only carry ``wall_ms`` as information.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import blake3

from statefuse.core.error import OpRuleError
from statefuse.core.op import (
    _NO_DEFAULT,
    MAX_LAMPORT,
    Author,
    ClaimAdded,
    ClaimRetracted,
    DecisionAdded,
    EvidenceAdded,
    Layer,
    MadeAtHead,
    Op,
    Outcome,
    _author,
    _build_plan,
    _check_interval,
    _checked_claim_ref,
    _label,
    _made_at,
    _name,
    _opt_ms,
    _outcome,
    _scope,
    as_ops,
)
from statefuse.core.state import FINDING_GROUP, ConflictSet, State, group_id_of
from statefuse.core.validity import instant_ms
from statefuse.reading.view import SurfacedConflict, SurfacedFinding
from statefuse.registry import DEFAULT_REGISTRY, Registry
from statefuse.registry.value import Value, frozen_value

#: The ClaimAdded fields `Writer.claim` validates itself, with the checks ClaimAdded names
#: (``author`` when the writer is made, ``claim_ref`` because the writer computes it).
_CLAIM_CHECKED = frozenset(
    ("author", "namespace", "subject", "predicate", "value", "claim_ref", "scope")
)


def _compile_builder(cls: type[Any], checked: frozenset[str]) -> Callable[[Sequence[Any]], Any]:
    """A function that does what ``cls._from_checked(checked, values)`` does up to sealing:
    make an unsealed ``cls`` from its field values in ``_SCHEMA`` order, skipping the checks of
    the fields in ``checked`` and of fields left at their default object (when the check would
    store that default unchanged). Compiled to one straight-line statement per field, as
    dataclasses compile ``__init__``: a loop over the fields costs about as much as the checks
    it runs, and claims are what a writer makes most. It lives here, at the edge, because the
    pure core runs no ``exec``; tests check it against ``_from_checked``.
    """
    env: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["def build(values):", "    op = new(cls)"]
    # The plan `_from_checked` runs: which check each field needs, and its skippable default.
    for k, (name, check, setter, default) in enumerate(_build_plan(cls, checked)):
        env[f"set{k}"], env[f"check{k}"], env[f"default{k}"] = setter, check, default
        if check is None:
            lines.append(f"    set{k}(op, values[{k}])")
        elif default is _NO_DEFAULT:
            lines.append(f"    set{k}(op, check{k}({name!r}, values[{k}]))")
        else:
            lines.append(f"    v = values[{k}]")
            lines.append(f"    set{k}(op, v if v is default{k} else check{k}({name!r}, v))")
    lines.append("    return op")
    exec("\n".join(lines), env)  # the source is built above from the schema's own names
    build: Callable[[Sequence[Any]], Any] = env["build"]
    return build


#: `ClaimAdded` from the values `Writer.claim` passes (in ``_SCHEMA`` order), not yet sealed.
_build_claim = _compile_builder(ClaimAdded, _CLAIM_CHECKED)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Writer:
    """Creates ops for one author. Not thread-safe; use one writer per thread or lock around it."""

    __slots__ = (
        "_clock",
        "_lamport",
        "_ref_lookup",
        "_ref_retractions",
        "_wall",
        "author",
        "registry",
    )

    def __init__(
        self,
        author: Author,
        *,
        registry: Registry = DEFAULT_REGISTRY,
        clock: Callable[[], int] = _wall_ms,
    ) -> None:
        self.author = _author("author", author)
        if not isinstance(registry, Registry):
            raise OpRuleError("registry", "registry-type", f"expected Registry, got {registry!r}")
        self.registry = registry
        self._clock = clock
        self._lamport = 0
        #: The last ``wall_ms`` given to an op made at the ceiling (see `_tick`).
        self._wall = 0
        self._ref_retractions: dict[bytes, set[bytes]] = {}
        #: Where the ref retractions this writer has not observed are looked up (a store's
        #: derived state, for a writer that has not read the history: `Replica`'s lazy open).
        self._ref_lookup: Callable[[bytes], Iterable[bytes]] | None = None

    @property
    def lamport(self) -> int:
        """The highest lamport this writer has made or observed."""
        return self._lamport

    def advance(self, lamport: int) -> None:
        """Move the clock to at least ``lamport`` (an op of another writer of this replica,
        such as its trust writer, whose ops this writer does not see)."""
        if lamport > self._lamport:
            self._lamport = min(lamport, MAX_LAMPORT)

    def observe(self, ops: Iterable[Op]) -> None:
        """Advance the clock past ``ops`` and remember the ref retractions among them."""
        for op in as_ops(ops):
            self._note(op)

    def _note(self, op: Op) -> None:
        if op.lamport > self._lamport:
            self._lamport = op.lamport
        if type(op) is ClaimRetracted and op.target_claim_ref is not None:
            self._ref_retractions.setdefault(op.target_claim_ref, set()).add(op.op_id)

    def _tick(self) -> tuple[int, int]:
        wall = self._clock()
        if self._lamport < MAX_LAMPORT:
            return self._lamport + 1, wall
        # Saturated: every op takes MAX_LAMPORT, so ``wall_ms`` (informational) is kept strictly
        # increasing instead, or two equal ops made in one millisecond would be one op (same
        # id), and a value asserted again after its retraction would stay retracted.
        self._wall = wall = max(wall, self._wall + 1)
        return MAX_LAMPORT, wall

    @property
    def next_lamport(self) -> int:
        """The lamport of the next op: one more than `lamport`, at most `MAX_LAMPORT`."""
        return min(self._lamport + 1, MAX_LAMPORT)

    def evidence(self, source: str, content: Value = None) -> EvidenceAdded:
        """Record evidence; cite it from claims by ``evidence_id``."""
        lamport, wall = self._tick()
        op = EvidenceAdded(self.author, lamport, wall, source, content)
        self._note(op)
        return op

    def decide_on(
        self,
        conflict: ConflictSet | SurfacedConflict | SurfacedFinding,
        claim_id: bytes | None = None,
        *,
        state: State | None = None,
        scope: str = "global",
        reason: str = "",
        payload: Value = None,
        outcome: Outcome | str = Outcome.SELECT,
        made_at: Sequence[MadeAtHead] = (),
    ) -> DecisionAdded:
        """Decide a conflict (from ``state.conflicts`` or ``view.surfaced_conflicts``) for the
        value of one of its candidates. The decision records every value group of the
        conflict and the chosen one, and applies while that value is held and no other value
        appears (SEMANTICS §6), whoever else agrees or withdraws.

        ``outcome`` (`Outcome`, or its value) says what the decision does: ``select`` (the
        default) the value of ``claim_id``; ``merge`` the value of ``claim_id``, a claim this
        writer wrote at the conflict's key whose ``depends_on`` names (by id or ref) at least
        two of the other candidates it combines; ``preserve`` keeps every current value as an
        accepted alternative and ``defer`` acknowledges the conflict and leaves it open (both
        take no ``claim_id``; ``defer`` needs a ``reason``). ``made_at`` is the version the
        decision was made at (heads as ``(author, seq, change_id)``; the replica fills it in).

        A `SurfacedConflict` shows only what its lens may see, so the value groups come from
        ``state``, the State it was projected from, when that still holds the same snapshot
        (``conflict_id``). Without it they are the groups shown, which are all of them when
        the view showed every candidate (``not_shown == 0``). When ``state`` has moved on, only
        the values shown are recorded: a value the viewer never saw must not count as decided
        on, so a hidden one makes the decision stale until decided again.

        Raises OpRuleError if ``claim_id`` is not one of the conflict's candidates (rule
        ``candidate``), is missing for ``select``/``merge`` or given for ``preserve``/``defer``
        (rule ``outcome-claim``), if a merged claim was written by another author (rule
        ``merge-author``) or names too few candidates in ``depends_on`` (field
        ``depends_on``, rule ``merge-depends-on``), or if a surfaced conflict with candidates
        not shown comes without ``state`` (field ``state``, rule ``full-conflict``).
        """
        kind = _outcome("outcome", outcome)
        if isinstance(conflict, (SurfacedConflict, SurfacedFinding)):
            ids = tuple(c.claim_id for c in conflict.candidates)
        elif isinstance(conflict, ConflictSet):
            ids = conflict.candidates
        else:
            raise OpRuleError(
                "conflict", "conflict-type", f"expected a conflict, got {type(conflict).__name__}"
            )
        if kind.selects and claim_id is None:
            raise OpRuleError(
                "claim_id", "outcome-claim", f"a {kind.value} decision names the claim it selects"
            )
        if not kind.selects:
            if claim_id is not None:
                raise OpRuleError(
                    "claim_id",
                    "outcome-claim",
                    f"a {kind.value} decision selects no claim; leave claim_id out",
                )
            claim_id = min(ids)  # the anchor: a candidate through which readers find the key
        assert claim_id is not None
        if claim_id not in ids:
            raise OpRuleError(
                "claim_id", "candidate", "a decision selects one of the conflict's candidates"
            )
        if state is not None and not isinstance(state, State):
            raise OpRuleError("state", "state-type", f"expected State, got {type(state).__name__}")
        if kind is Outcome.MERGE:
            self._check_merged(conflict, claim_id, state)
        groups, chosen = self._decided_groups(conflict, claim_id, state)
        return self.decide(
            locus=conflict.locus,
            conflict_id=conflict.conflict_id,
            selected_claim_id=claim_id,
            scope=scope,
            reason=reason,
            payload=payload,
            groups=groups,
            selected_group=chosen if kind.selects else None,
            outcome=kind,
            made_at=made_at,
        )

    def _check_merged(
        self,
        conflict: ConflictSet | SurfacedConflict | SurfacedFinding,
        claim_id: bytes,
        state: State | None,
    ) -> None:
        """A merged claim is this writer's, and its ``depends_on`` names at least two of the
        conflict's other candidates (by claim id or claim ref): StateFuse never makes up a
        merged value, it records which candidates the decider combined."""
        if isinstance(conflict, (SurfacedConflict, SurfacedFinding)):
            claims = {c.claim_id: c for c in conflict.candidates}
        elif state is not None:
            claims = {cid: state.claims[cid] for cid in conflict.candidates if cid in state.claims}
        else:
            raise OpRuleError(
                "state", "merge-claims", "a merge decision on a ConflictSet needs its State"
            )
        merged = claims.get(claim_id)
        if merged is None:
            raise OpRuleError("claim_id", "candidate", "the merged claim is not a candidate")
        if merged.author != self.author:
            raise OpRuleError(
                "claim_id",
                "merge-author",
                "a merge selects a claim the decider wrote (write the merged value first)",
            )
        named = set(merged.depends_on)
        combined = [
            c
            for cid, c in claims.items()
            if cid != claim_id and (cid in named or c.claim_ref in named)
        ]
        if len(combined) < 2:
            raise OpRuleError(
                "depends_on",
                "merge-depends-on",
                "the merged claim's depends_on must name at least two of the candidates it"
                f" combines (it names {len(combined)})",
            )

    def _decided_groups(
        self,
        conflict: ConflictSet | SurfacedConflict | SurfacedFinding,
        claim_id: bytes,
        state: State | None,
    ) -> tuple[list[bytes], bytes]:
        """The group ids a decision on ``conflict`` records, and the one of ``claim_id``."""
        if isinstance(conflict, SurfacedFinding):
            # each claim of a finding is a group of its own
            full = state.conflict_at(conflict.locus) if state is not None else None
            if full is not None and full.conflict_id == conflict.conflict_id:
                return self._decided_groups(full, claim_id, None)
            if conflict.not_shown:
                raise OpRuleError(
                    "state",
                    "full-conflict",
                    f"the view did not show {conflict.not_shown} claim(s) of this finding;"
                    " pass the State it was projected from (state=)",
                )
            ids = sorted(c.claim_id for c in conflict.candidates)
            return [group_id_of(FINDING_GROUP + c) for c in ids], group_id_of(
                FINDING_GROUP + claim_id
            )
        if isinstance(conflict, SurfacedConflict) and state is not None:
            full = state.conflict_at(conflict.locus)
            if full is not None and full.conflict_id == conflict.conflict_id:
                conflict = full
        if isinstance(conflict, ConflictSet):
            groups = [g.group_id for g in conflict.groups]
            chosen = next(g.group_id for g in conflict.groups if claim_id in g.claim_ids)
            return groups, chosen
        if state is None and conflict.not_shown:
            raise OpRuleError(
                "state",
                "full-conflict",
                f"the view did not show {conflict.not_shown} candidate(s) of this conflict;"
                " pass the State it was projected from (state=) so that their values are"
                " recorded too",
            )
        by_claim = {
            c.claim_id: state.group_id(c.claim_id) if state is not None else self._group_id(c)
            for c in conflict.candidates
        }
        return sorted(set(by_claim.values())), by_claim[claim_id]

    def _group_id(self, c: ClaimAdded) -> bytes:
        contract = self.registry.contract_for(c.namespace, c.predicate)
        return group_id_of(self.registry.canonical_group_key(contract, c.value))

    def claim(
        self,
        namespace: str,
        subject: str,
        predicate: str,
        value: Value,
        *,
        scope: str = "global",
        confidence: float | None = None,
        evidence: Sequence[bytes] = (),
        provenance: str = "",
        authority: str = "",
        layer: Layer | str = Layer.FACT,
        visibility: Sequence[str] = (),
        constraint: str = "",
        depends_on: Sequence[bytes] = (),
        expires: int | None = None,
        kind: str = "fact",
        valid_from: int | datetime | str | None = None,
        valid_until: int | datetime | str | None = None,
        context: Mapping[str, str | int | bool] | None = None,
    ) -> ClaimAdded:
        """Assert ``value`` for (namespace, subject, predicate) in ``scope``.

        ``confidence`` is a float in [0, 1], or None (the default) when you state none: an
        unset confidence is recorded as unset and ranks below every stated one.

        ``valid_from`` / ``valid_until`` say when the value holds in the world, half-open
        ``[from, until)``: ms since the epoch, an aware ``datetime`` or ISO 8601 text (a bare
        date is its midnight UTC; a naive time is refused). ``context`` names the dimensions
        it holds in (``{"location": "London"}``). Both narrow conflicts (SEMANTICS §5, §9).

        Raises OpRuleError / ValueRuleError / ValueTypeError naming the bad field, and
        NormalizationError when the predicate's contract cannot normalize ``value``.
        """
        namespace, subject = _label("namespace", namespace), _name("subject", subject)
        predicate, scope = _label("predicate", predicate), _scope("scope", scope)
        # Frozen first, in the form the op stores: normalizers (user code) get that value, so
        # they can neither change what is stored nor see another type than readers give them.
        value = frozen_value(value, "value", depth=2)
        contract = self.registry.contract_for(namespace, predicate)
        ref_value = self.registry.ref_value(contract, value)
        if not contract.ref_uses_normal_form and contract.normalizer != "exact":
            # the ref did not normalize the value: the contract must accept it all the same
            self.registry.normal_form(contract, value)
        ref = _checked_claim_ref(
            namespace, subject, predicate, scope, ref_value, canonical=ref_value is value
        )
        if valid_from is not None or valid_until is not None:
            valid_from = instant_ms("valid_from", valid_from)
            valid_until = instant_ms("valid_until", valid_until)
            # checked here because the builder below runs the field checks only
            _check_interval(_opt_ms("valid_from", valid_from), _opt_ms("valid_until", valid_until))
        lamport, wall = self._tick()
        # In ClaimAdded._SCHEMA order; the fields validated above are not checked again.
        op: ClaimAdded = _build_claim(
            (
                self.author,
                lamport,
                wall,
                namespace,
                subject,
                predicate,
                value,
                ref,
                scope,
                confidence,
                evidence,
                provenance,
                authority,
                layer,
                visibility,
                constraint,
                depends_on,
                expires,
                kind,
                self._reasserts(ref),
                valid_from,
                valid_until,
                context,
            )
        )
        op._seal()
        self._note(op)
        return op

    def _reasserts(self, ref: bytes) -> tuple[bytes, ...]:
        known = self._ref_retractions.get(ref, ())
        if self._ref_lookup is not None:
            return tuple({*known, *self._ref_lookup(ref)})
        return tuple(known)

    def retract(
        self,
        *,
        claim_id: bytes | None = None,
        claim_ref: bytes | None = None,
        reason: str = "",
        superseded_by: bytes | None = None,
    ) -> ClaimRetracted:
        """Retract one claim (``claim_id``), every claim with a ref (``claim_ref``), or both."""
        lamport, wall = self._tick()
        op = ClaimRetracted(
            self.author,
            lamport,
            wall,
            target_claim_id=claim_id,
            target_claim_ref=claim_ref,
            reason=reason,
            superseded_by=superseded_by,
        )
        self._note(op)
        return op

    def decide(
        self,
        *,
        locus: bytes,
        conflict_id: bytes,
        selected_claim_id: bytes,
        scope: str = "global",
        reason: str = "",
        payload: Value = None,
        groups: Sequence[bytes] = (),
        selected_group: bytes | None = None,
        outcome: Outcome | str = Outcome.SELECT,
        made_at: Sequence[MadeAtHead] = (),
    ) -> DecisionAdded:
        """Record a planner's choice among the candidates of one conflict snapshot.

        ``groups`` (the group ids of the values chosen among) and ``selected_group`` (the
        chosen one) make a decision that survives agreement (`decide_on` fills them in);
        without them it is the first release's form, which applies only while the candidate
        set ``conflict_id`` is current. ``outcome`` and ``made_at``: see `decide_on` and
        `DecisionAdded`. Raises OpRuleError naming a bad field."""
        lamport, wall = self._tick()
        op = DecisionAdded(
            self.author,
            lamport,
            wall,
            locus=locus,
            conflict_id=conflict_id,
            selected_claim_id=selected_claim_id,
            scope=scope,
            reason=reason,
            payload=payload,
            groups=groups,  # type: ignore[arg-type]  # validated into a sorted tuple
            selected_group=selected_group,
            outcome=_outcome("outcome", outcome),
            made_at=_made_at("made_at", made_at),
        )
        self._note(op)
        return op

    # --- the context layers (conveniences over `claim`) -----------------------------------------

    def identity(
        self,
        subject: str,
        predicate: str,
        value: Value,
        *,
        namespace: str = "identity",
        authority: str = "",
        scope: str = "global",
        visibility: Sequence[str] = (),
        provenance: str = "",
    ) -> ClaimAdded:
        """Who is asking and with what standing: ``identity("alice", "role", "manager")``.

        A claim in the identity layer (kind ``identity``); context assembly shows it first.
        """
        return self.claim(
            namespace,
            subject,
            predicate,
            value,
            scope=scope,
            authority=authority,
            visibility=visibility,
            provenance=provenance,
            layer=Layer.IDENTITY,
            kind="identity",
        )

    def constraint(
        self,
        namespace: str,
        subject: str,
        predicate: str,
        value: Value,
        *,
        constraint: str = "policy",
        authority: str = "",
        scope: str = "global",
        visibility: Sequence[str] = (),
        confidence: float | None = None,
        evidence: Sequence[bytes] = (),
        provenance: str = "",
        depends_on: Sequence[bytes] = (),
        expires: int | None = None,
    ) -> ClaimAdded:
        """A rule every answer must satisfy; ``constraint`` says which sort (budget, deadline,
        policy, capacity...). Context assembly shows constraints before any fact."""
        return self.claim(
            namespace,
            subject,
            predicate,
            value,
            scope=scope,
            confidence=confidence,
            evidence=evidence,
            provenance=provenance,
            authority=authority,
            visibility=visibility,
            constraint=_name("constraint", constraint),
            depends_on=depends_on,
            expires=expires,
            kind="constraint",
        )

    def add_turn(
        self,
        speaker: str,
        text: str,
        *,
        session: str,
        namespace: str = "turn",
        expires: int | None = None,
    ) -> ClaimAdded:
        """One conversation turn in the working set of ``session`` (scope ``session:<id>``).

        Each turn gets its own key — subject ``speaker``, predicate ``<lamport>/<writer tag>``
        — so turns never conflict with each other; context assembly orders them by lamport.
        Raises OpRuleError if ``text`` is not a str.
        """
        if type(text) is not str:
            raise OpRuleError("text", "str", f"expected str, got {type(text).__name__}")
        return self.claim(
            namespace,
            speaker,
            f"{self.next_lamport}/{self._tag()}",
            text,
            scope=_scope("session", f"session:{_name('session', session)}"),
            layer=Layer.WORKING,
            kind="turn",
            expires=expires,
        )

    def _tag(self) -> str:
        author = self.author.encode("utf-8") if isinstance(self.author, str) else self.author
        return blake3.blake3(author).hexdigest()[:8]

    def signal(
        self,
        subject: str,
        predicate: str,
        value: Value,
        *,
        expires: int | None,
        namespace: str = "env",
        provenance: str = "",
        authority: str = "",
        visibility: Sequence[str] = (),
    ) -> ClaimAdded:
        """An environment signal (a price, the time, a system's state) that stops being shown
        after ``expires`` (ms since the epoch, compared with the lens's ``now``; ``None``:
        never). A newer reading of the same key conflicts with an unexpired older one unless
        the predicate's registry policy is ``latest``, or the old one is retracted."""
        return self.claim(
            namespace,
            subject,
            predicate,
            value,
            provenance=provenance,
            authority=authority,
            visibility=visibility,
            layer=Layer.ENVIRONMENT,
            expires=expires,
            kind="signal",
        )

    def question(
        self,
        namespace: str,
        subject: str,
        predicate: str,
        text: str,
        *,
        scope: str = "global",
        visibility: Sequence[str] = (),
    ) -> ClaimAdded:
        """An open question about the key (namespace, subject, predicate), stored at predicate
        ``predicate + "?"`` so it never conflicts with the answer. Context assembly lists it
        under known unknowns until a claim for the key itself is visible."""
        if type(text) is not str:
            raise OpRuleError("text", "str", f"expected str, got {type(text).__name__}")
        return self.claim(
            namespace,
            subject,
            _name("predicate", predicate) + "?",
            text,
            scope=scope,
            visibility=visibility,
            kind="question",
        )
