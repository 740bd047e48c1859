"""The ``statefuse`` command line: a thin layer over `Replica`.

Each command opens the store (``--store``, else ``$STATEFUSE_STORE``, else ``./statefuse.db``),
calls one library function and shows the result: an aligned table for people, or with ``--json``
one JSON document with stable keys (ids and other bytes in hex, values spelled as in
`statefuse.reading.view.json_value`). docs/reference/cli.md documents every command and option, and
a
test checks that it does.

Syntax of the arguments:

- KEY is ``namespace/subject/predicate``: exactly three non-empty parts; a ``/`` or ``%`` inside a
  part is written ``%2F`` / ``%25`` (percent-escapes are decoded, and keys are shown that way).
- VALUE is read as JSON when it parses as JSON (``42``, ``1.5``, ``true``, ``null``, ``"42"``,
  ``[1, 2]``, ``{"a": 1}``), else taken as the string it is (``2026-03-25``, ``Dana Smith``).
  ``NaN`` and ``Infinity`` are not JSON here, so they stay strings; ``{"$bytes": "<hex>"}`` is a
  bytes value (the spelling ``--json`` output uses for bytes).
- CLAIM is a claim id, whole or as a unique prefix of at least 8 hex digits.

Exit statuses: 0 success; 1 a user error (``Error: …`` on stderr, never a traceback: any
`StateFuseError`, an `OSError` on a file, a failed ``verify`` or ``sync``); 2 a usage error;
130 interrupted (Ctrl-C).

Adding a command: write ``_cmd_<name>(session) -> int`` and one `Command` entry in `COMMANDS`.
``context`` assembles the token-budgeted context one viewer's LLM reads
(`statefuse.reading.context`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO
from urllib.parse import urlsplit

from statefuse.core.authorname import AuthorNames
from statefuse.core.error import InputError, StateFuseError
from statefuse.core.keytext import format_key
from statefuse.core.op import ClaimAdded, ClaimRetracted, DecisionAdded, Layer, Outcome
from statefuse.core.state import ConflictSet, State
from statefuse.core.wording import plural
from statefuse.entry.argument import (
    CliError,
    parse_author,
    parse_key,
    parse_key_prefix,
    parse_value,
    resolve_claim,
    resolve_id,
)
from statefuse.entry.clitable import (
    REDACTED_CELL,
    byte_size,
    claim_notes,
    fields,
    short_id,
    table,
    utc_time,
    value_cell,
)
from statefuse.reading.history import HistoryEvent
from statefuse.reading.view import json_value
from statefuse.registry import PredicateContract, Registry
from statefuse.registry.value import Value
from statefuse.storage.store import DEFAULT_WAIT, QuarantineRecord, StoreError

if TYPE_CHECKING:
    from statefuse.sync.pending import Bounds
    from statefuse.sync.replica import MergeReport, Replica
    from statefuse.sync.version import Version

Key = tuple[str, str, str]

#: The store used when neither ``--store`` nor ``$STATEFUSE_STORE`` names one.
DEFAULT_STORE = "statefuse.db"
#: Exit statuses.
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def parse_name(text: str, *, field: str = "--name") -> str:
    """An author name (`statefuse.sync.author.check_author_name`); raises CliError naming
    ``field`` and the rule it breaks."""
    from statefuse.core.error import OpRuleError
    from statefuse.sync.author import check_author_name

    try:
        return check_author_name(field, text)
    except OpRuleError as exc:
        raise CliError(field, exc.rule, f"{field}: {exc.message}") from None


# --- one run of a command -------------------------------------------------------------------------


class Progress:
    """A progress bar on stderr: ``label [#####.....] done/total``, redrawn in place at most
    ten times a second, and always at the end."""

    WIDTH = 30

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label = label
        self.stream = stream
        self._drawn = False
        self._last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.1:
            return
        self._last = now
        filled = self.WIDTH * done // total if total else self.WIDTH
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        self.stream.flush()
        self._drawn = True

    def finish(self) -> None:
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False


class Session:
    """One run of one command: its arguments, its store (opened on first use, closed at the
    end) and where its output goes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.path = Path(args.store or os.environ.get("STATEFUSE_STORE") or DEFAULT_STORE)
        self.json: bool = args.json
        self._replica: Replica | None = None

    def open(self, *, quiet: bool = False, **options: Any) -> Replica:
        """Open the store (``options`` go to `Replica.open`); a missing store and a store
        busy past its wait are user errors with a hint. Opened read-only, a damaged
        store says so in one ``Warning:`` line, unless ``quiet`` (the command reports the
        damage itself)."""
        from statefuse.sync.replica import Replica

        create = options.pop("create", False)
        if not create and not self.path.exists():
            raise CliError(
                "--store",
                "no-such-store",
                f"no store at {self.path} (create one with: statefuse init --space NAME)",
            )
        options.setdefault("adopt_key", self.args.adopt_key)
        options.setdefault("bounds", self.bounds())
        # a store of an earlier release builds its derived state on its first writable open
        bar = None if options.get("readonly") or create else self.progress("indexing the store")
        options.setdefault("progress", bar)
        try:
            rep = Replica.open(self.path, create=create, wait=self.args.wait, **options)
        except StoreError as exc:
            hint = exc.message.replace("open with wait=SECONDS", "pass --wait SECONDS")
            hint = hint.replace("adopt_key=True / --adopt-key", "--adopt-key")
            hint = hint.replace(
                "open with readonly=True to read the store", "commands that only read still work"
            )
            hint = hint.replace(
                "open it without registry= to use the space's, or declare yours with"
                " Replica.declare_registry() (CLI: statefuse registry declare FILE)",
                "leave out --registry to use the space's, or declare yours: statefuse registry"
                " declare FILE",
            )
            raise CliError("--store", exc.rule, hint) from None
        finally:
            if bar is not None:
                bar.finish()
        self._replica = rep
        if options.get("readonly") and not quiet:
            self.warn_damage()
        return rep

    def bounds(self) -> Bounds:
        """`DEFAULT_BOUNDS` with what the ``--max-pending`` / ``--max-quarantine`` options
        change."""
        from statefuse.sync.pending import DEFAULT_BOUNDS, Bounds, BoundsConfigError

        given = {
            name: getattr(self.args, name, None)
            for name, _ in _BOUND_OPTIONS
            if getattr(self.args, name, None) is not None
        }
        try:
            return Bounds(**{**_bounds_fields(DEFAULT_BOUNDS), **given})
        except BoundsConfigError as exc:
            option = dict(_BOUND_OPTIONS)[exc.field]
            raise CliError(option, exc.rule, f"{option} is an integer >= 1") from None

    def warn_damage(self) -> None:
        """One ``Warning:`` line when the open store is damaged (commands that go on reading
        it; a write is refused with the same text as its error)."""
        if self._replica is not None and self._replica.damage is not None:
            warnings.warn(self._replica.damage.describe(), stacklevel=2)

    def replica(self, *, readonly: bool = False) -> Replica:
        """The store's replica, opened on first use; ``readonly`` for commands that only read
        (they take no lock, so they work beside a running writer or ``serve``)."""
        return self._replica if self._replica is not None else self.open(readonly=readonly)

    def emit(self, data: Any, text: str, *, compact: bool = False) -> None:
        """Print ``data`` as JSON with ``--json``, else ``text``. ``compact``: the JSON on one
        line (a command that goes on printing writes one document per line)."""
        if self.json:
            indent = None if compact else 2
            print(json.dumps(data, indent=indent, sort_keys=True, ensure_ascii=False), flush=True)
        elif text:
            print(text, flush=True)

    def progress(self, label: str) -> Progress | None:
        """A progress bar, when stderr is a terminal or ``--progress`` asks for one."""
        if self.args.progress or sys.stderr.isatty():
            return Progress(label, sys.stderr)
        return None

    def close(self) -> None:
        if self._replica is not None:
            rep, self._replica = self._replica, None
            rep.close()

    def close_status(self) -> int:
        self.close()
        return EXIT_OK


# --- what commands show -------------------------------------------------------------------------


def _hex(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def _author_json(author: bytes | str) -> str:
    return author.hex() if isinstance(author, bytes) else author


def _authored(author: bytes | str, names: AuthorNames) -> dict[str, Any]:
    """``author`` (its id in hex) and ``author_name`` (the name it declared, or null)."""
    name = names.get(author) if isinstance(author, bytes) else None
    return {"author": _author_json(author), "author_name": name}


def _claim_json(c: ClaimAdded, state: State, names: AuthorNames) -> dict[str, Any]:
    return {
        "claim_id": c.claim_id.hex(),
        "claim_ref": c.claim_ref.hex(),
        "key": [c.namespace, c.subject, c.predicate],
        "scope": c.scope,
        "value": json_value(c.value),
        **_authored(c.author, names),
        "lamport": c.lamport,
        "wall_ms": c.wall_ms,
        "confidence": c.confidence,
        "provenance": c.provenance,
        "authority": c.authority,
        "layer": c.layer.value,
        "kind": c.kind,
        "constraint": c.constraint,
        "visibility": list(c.visibility),
        "evidence": [e.hex() for e in c.evidence],
        "depends_on": [d.hex() for d in c.depends_on],
        "expires": c.expires,
        "active": state.is_active(c.claim_id),
        **_situated_json(c),
    }


def _situated_json(c: ClaimAdded) -> dict[str, Any]:
    """A claim's interval and context (present only when it has one of them)."""
    if not c.situated:
        return {}
    return {
        "valid_from": c.valid_from,
        "valid_until": c.valid_until,
        "context": dict(c.context) if c.context else {},
    }


def _state_at(rep: Replica, c: ClaimAdded) -> State:
    """What the memory holds at ``c``'s key and scope (indexed rows only, on a store opened
    on its derived state: `Replica.state_for`)."""
    return rep.state_for((c.namespace, c.subject, c.predicate), scope=c.scope)


def _key_of(c: ClaimAdded) -> Key:
    return c.namespace, c.subject, c.predicate


def _where(c: ClaimAdded) -> str:
    """``key [scope] = value``, the way one-line confirmations name a claim."""
    return f"{format_key(_key_of(c))} [{c.scope}] = {_claim_value_cell(c)}"


def _claim_value_cell(c: ClaimAdded) -> str:
    """A claim's value as a table cell, with its interval and context when it has them."""
    if not c.situated:
        return value_cell(c.value)
    from statefuse.core.validity import situation

    return value_cell(c.value) + situation(c)


def _report_json(report: MergeReport) -> dict[str, Any]:
    return report.to_json()


def _report_text(report: MergeReport) -> str:
    """One line of counts, then one line per fork and per clock jump the changes revealed (and
    one for what was evicted to keep the pending area and the quarantine within their bounds)."""
    text = (
        f"{report.accepted} accepted, {report.duplicate} already known, {report.pending} pending,"
        f" {report.quarantined} quarantined; {plural(report.new_ops, 'new op')}"
    )
    lines = [text, *(f.describe() for f in report.forks)]
    lines += [j.describe() for j in report.clock_jumps]
    if report.evicted:
        lines.append(_evicted_text(report.evicted, "here"))
    if report.registry_changed is not None:
        old, new = (fp.hex()[:16] for fp in report.registry_changed)
        lines.append(
            f"the space's registry changed ({old}… -> {new}…): memory recomputed under it"
            " (statefuse registry show)"
        )
    if report.refused_declarations:
        lines.append(_refused_text(report) + " (statefuse registry show)")
    return "\n".join(lines)


def _refused_text(report: MergeReport) -> str:
    """One line for the registry declarations a receive refused (`sync.creator`)."""
    refused = report.refused_declarations
    authors = ", ".join(sorted({f"{r.author.hex()[:12]}…" for r in refused}))
    return (
        f"{plural(len(refused), 'registry declaration')} refused ({refused[0].rule}) by"
        f" {authors}: {refused[0].reason}"
    )


def _adopted_text(rep: Replica, report: MergeReport) -> str:
    """The line that says this store adopted its source's creator (empty: it did not)."""
    from statefuse.sync.creator import adoption

    creator = report.adopted_creator
    if creator is None:
        return ""
    return adoption(rep.space, creator, rep.author_label(creator)) + "\n"


# --- commands -------------------------------------------------------------------------------------


def _cmd_init(s: Session) -> int:
    from statefuse.sync.key import PublicKey, SigningKey
    from statefuse.sync.replica import key_path

    a = s.args
    name = parse_name(a.name) if a.name is not None else None
    if s.path.exists():
        # with --registry, a store of the same space whose registry differs is refused
        # (registry-mismatch), so a re-run init never hides a contract it did not declare
        known = _registry_file(a.registry) if a.registry is not None else None
        rep = s.open(space=a.space, registry=known)
        if rep.key_missing:
            raise CliError(
                "--store",
                "no-key",
                f"store {s.path} holds space {rep.space!r} but its key file"
                f" {key_path(s.path)} is missing, so it is read-only: restore the key file from a"
                " backup, or give the store a new author key with: statefuse keys new",
            )
        pinned = a.creator is not None and rep.pin_creator(_creator_arg(rep, a.creator))
        named = name is not None and rep.declare_name(name) is not None
        news = [f"its creator is now {_creator_who(rep)}"] if pinned else []
        news += [f"its author is now called {name!r}"] if named else []
        done = " and ".join(news) or "nothing changed"
        s.emit(
            _init_json(rep, s.path, created=False),
            f"Store {s.path} already holds space {rep.space!r} ({rep.mode.value} mode); {done}",
        )
        return EXIT_OK
    if a.key is not None and key_path(s.path).exists():
        raise CliError(
            "--key",
            "new-key-file",
            f"{key_path(s.path)} already exists; remove it or leave out --key",
        )
    key = SigningKey.load(a.key) if a.key is not None else None
    root = PublicKey(parse_author(a.root)).author if a.root is not None else None
    registry = _registry_file(a.registry) if a.registry is not None else None
    if a.creator is not None and a.creator != "me":
        creator: bytes | None = PublicKey(parse_author(a.creator)).author
    elif a.creator == "me":
        key = key or SigningKey.generate()
        creator = key.author
    else:
        creator = None
    # a refused init (a bad space name, a key bound elsewhere) leaves nothing behind
    rep = s.open(
        create=True,
        space=a.space,
        key=key,
        mode=a.mode,
        root=root,
        registry=registry,
        name=name,
        creator=creator,
    )
    lines = [("author", rep.author.hex())]
    if name is not None:
        lines.append(("name", name))
    lines.append(("key file", f"{key_path(s.path)} (private: never share it)"))
    if rep.root is not None:
        lines.append(("root", rep.root.hex() + (" (you)" if rep.root == rep.author else "")))
    if rep.creator is not None:
        you = " (you)" if rep.creator == rep.author else ""
        lines.append(("creator", rep.creator.hex() + you))
    if rep.declaration is not None:
        lines.append(
            ("registry", f"{rep.registry.fingerprint.hex()[:16]}… declared from {a.registry}")
        )
    s.emit(
        _init_json(rep, s.path, created=True),
        f"Created store {s.path} for space {rep.space!r} ({rep.mode.value} mode)\n" + fields(lines),
    )
    return EXIT_OK


def _init_json(rep: Replica, path: Path, *, created: bool) -> dict[str, Any]:
    from statefuse.sync.replica import key_path

    return {
        "created": created,
        "store": str(path),
        "space": rep.space,
        "mode": rep.mode.value,
        "root": _hex(rep.root),
        "creator": _hex(rep.creator),
        "author": rep.author.hex(),
        "name": rep.author_name(rep.author),
        "key_file": str(key_path(path)),
    }


def _cmd_name(s: Session) -> int:
    a = s.args
    if a.name is None:
        rep = s.replica(readonly=True)
        name = rep.author_name(rep.author)
        text = (
            f"You are {name!r} (author {rep.author.hex()})"
            if name is not None
            else f"No name declared for author {rep.author.hex()} (set one: statefuse name NAME)"
        )
        s.emit({"author": rep.author.hex(), "name": name, "changed": False}, text)
        return EXIT_OK
    name = parse_name(a.name, field="NAME")
    rep = s.replica()
    changed = rep.declare_name(name) is not None
    text = (
        f"You are now {name!r} (author {rep.author.hex()})"
        if changed
        else f"You are {name!r} already; nothing changed"
    )
    s.emit({"author": rep.author.hex(), "name": name, "changed": changed}, text)
    return EXIT_OK


def _cmd_claim(s: Session) -> int:
    rep, c = _assert(s, update=False)
    s.emit(
        _claim_json(c, _state_at(rep, c), rep.author_names()),
        f"Added claim {c.claim_id.hex()}: {_where(c)}",
    )
    return EXIT_OK


def _cmd_update(s: Session) -> int:
    rep, c = _assert(s, update=True)
    state = _state_at(rep, c)
    replaced = sorted(
        cid
        for cid, rets in state.retracted.items()
        if any(r.superseded_by == c.claim_id for r in rets)
    )
    data = {
        **_claim_json(c, state, rep.author_names()),
        "replaced": [cid.hex() for cid in replaced],
    }
    text = f"Updated {_where(c)}: claim {c.claim_id.hex()}"
    if replaced:
        text += f" replaces {', '.join(short_id(cid) for cid in replaced)}"
    s.emit(data, text)
    return EXIT_OK


def _assert(s: Session, *, update: bool) -> tuple[Replica, ClaimAdded]:
    """``claim`` and ``update``: the same arguments, `Replica.add_claim` or `Replica.update`."""
    a = s.args
    key = parse_key(a.key)
    value = parse_value(a.value, as_string=a.string)
    rep = s.replica()
    near = rep.near_key(key)
    if near is not None:
        what = "namespace" if len(near) == 1 else "subject"
        typed = key[len(near) - 1]
        if unicodedata.normalize("NFC", typed) == unicodedata.normalize("NFC", near[-1]):
            how = "the same text in another Unicode form as"  # keys are not normalized
        else:
            how = "one edit away from"
        warnings.warn(
            f"{format_key(key)} starts a new {what}, {how} the existing"
            f" `{format_key(near)}`: check the spelling",
            stacklevel=2,
        )
    # only a dependency named by a hex prefix needs the whole memory to resolve it
    state = rep.state() if a.depends_on else None
    depends = [resolve_claim(state, d).claim_id for d in a.depends_on] if state else []
    write = rep.update if update else rep.add_claim
    c = write(
        *key,
        value,
        scope=a.scope,
        confidence=a.confidence,
        provenance=a.provenance,
        authority=a.authority,
        layer=a.layer,
        kind=a.kind,
        constraint=a.constraint,
        visibility=a.visibility,
        depends_on=depends,
        expires=a.expires,
        valid_from=_instant_option(a.valid_from, "--valid-from"),
        valid_until=_instant_option(a.valid_until, "--valid-until"),
        context=_context_option(a.context),
    )
    return rep, c


def _retraction_json(r: ClaimRetracted, state: State, names: AuthorNames) -> dict[str, Any]:
    hit = sorted(cid for cid, rets in state.retracted.items() if r in rets)
    return {
        "op_id": r.op_id.hex(),
        **_authored(r.author, names),
        "lamport": r.lamport,
        "target_claim_id": _hex(r.target_claim_id),
        "target_claim_ref": _hex(r.target_claim_ref),
        "reason": r.reason,
        "superseded_by": _hex(r.superseded_by),
        "retracted": [cid.hex() for cid in hit],
    }


def _cmd_retract(s: Session) -> int:
    a = s.args
    rep = s.replica()
    claim = resolve_claim(rep.claim_state(a.claim), a.claim)
    if a.semantic:
        r = rep.retract(claim_ref=claim.claim_ref, reason=a.reason)
        data = _retraction_json(r, _state_at(rep, claim), rep.author_names())
        text = (
            f"Retracted every claim like {claim.claim_id.hex()}"
            f" ({plural(len(data['retracted']), 'claim')} now): {_where(claim)}"
        )
    else:
        r = rep.retract(claim, reason=a.reason)
        data = _retraction_json(r, _state_at(rep, claim), rep.author_names())
        text = f"Retracted claim {claim.claim_id.hex()}: {_where(claim)}"
    s.emit(data, text)
    return EXIT_OK


def _cmd_supersede(s: Session) -> int:
    a = s.args
    value = parse_value(a.value, as_string=a.string)
    rep = s.replica()
    old = resolve_claim(rep.state(), a.claim)
    new, r = rep.supersede(old, value, a.reason)
    state, names = rep.state(), rep.author_names()
    s.emit(
        {"claim": _claim_json(new, state, names), "retraction": _retraction_json(r, state, names)},
        f"Superseded claim {old.claim_id.hex()} with {new.claim_id.hex()}: {_where(new)}",
    )
    return EXIT_OK


def _cmd_decide(s: Session) -> int:
    a = s.args
    rep = s.replica()
    claim = resolve_claim(rep.claim_state(a.claim), a.claim)
    state = _state_at(rep, claim)
    conflict = state.conflict_of(*_key_of(claim), claim.scope)
    if conflict is None or claim.claim_id not in conflict.candidates:
        conflict = _finding_with(rep, claim.claim_id)
    if conflict is None:
        raise CliError(
            "CLAIM",
            "candidate",
            f"claim {short_id(claim.claim_id)} is not a candidate of a current conflict"
            f" ({format_key(_key_of(claim))} [{claim.scope}])",
        )
    outcome = _outcome_arg(a)
    chosen = claim.claim_id if outcome.selects else None
    d = rep.decide(conflict, chosen, scope=a.scope, reason=a.reason, outcome=outcome)
    s.emit(_decision_json(d, rep.author_names()), _decided_text(d, conflict, claim))
    return EXIT_OK


def _outcome_arg(a: argparse.Namespace) -> Outcome:
    """``--outcome`` -> the Outcome (``select`` when not given); ``defer`` needs ``--reason``."""
    outcome = Outcome(getattr(a, "outcome", None) or "select")
    if outcome is Outcome.DEFER and not a.reason.strip():
        raise CliError("--reason", "defer-reason", "--outcome defer needs --reason (say why)")
    return outcome


def _decided_text(d: DecisionAdded, conflict: ConflictSet, claim: ClaimAdded) -> str:
    where = f"{format_key(conflict.key)} [{conflict.scope}]"
    if d.outcome is Outcome.PRESERVE:
        return f"Preserved {where}: its {plural(len(d.groups), 'value')} are accepted alternatives"
    if d.outcome is Outcome.DEFER:
        return f"Deferred {where}: still open ({d.reason})"
    verb = "Merged" if d.outcome is Outcome.MERGE else "Decided"
    return f"{verb} {where} for claim {claim.claim_id.hex()}: {value_cell(claim.value)}"


def _finding_with(rep: Replica, claim_id: bytes) -> ConflictSet | None:
    """The first finding (by locus) that names ``claim_id``, when no same-key conflict does:
    deciding a finding for one of its claims settles it (SEMANTICS §5)."""
    if not rep.registry.detectors:
        return None
    state = rep.conflicts().state
    return next((f for f in state.findings if claim_id in f.candidates), None)


def _decision_json(d: DecisionAdded, names: AuthorNames) -> dict[str, Any]:
    return {
        "op_id": d.op_id.hex(),
        **_authored(d.author, names),
        "lamport": d.lamport,
        "locus": d.locus.hex(),
        "conflict_id": d.conflict_id.hex(),
        "selected_claim_id": d.selected_claim_id.hex(),
        "scope": d.scope,
        "reason": d.reason,
        "groups": [g.hex() for g in d.groups],
        "selected_group": None if d.selected_group is None else d.selected_group.hex(),
        "outcome": d.outcome.value,
        "made_at": _made_at_text(d),
    }


def _made_at_text(d: DecisionAdded) -> str | None:
    """The version a decision recorded (``statefuse version``'s form), or None."""
    from statefuse.sync.version import decision_version

    v = decision_version(d)
    return None if v is None else str(v)


#: The order ``show`` lists claims in: by key, then scope, then claim id.
_SHOW_ORDER = attrgetter("namespace", "subject", "predicate", "scope", "op_id")


def _cmd_show(s: Session) -> int:
    a = s.args
    prefix = parse_key_prefix(a.prefix) if a.prefix is not None else ()
    rep = s.replica(readonly=True)
    at = _at(a, rep)
    state = rep.state_for(prefix, scope=a.scope) if at is None else rep.state(at=at)
    names = rep.author_names()
    claims = state.active_claims()
    if prefix or a.scope is not None:
        claims = [
            c for c in claims if _key_of(c)[: len(prefix)] == prefix and a.scope in (None, c.scope)
        ]
    claims = _situated_filter(a, claims)
    claims = sorted(claims, key=_SHOW_ORDER)
    limit = _list_limit(a)
    more = 0 if limit is None else max(0, len(claims) - limit)
    claims = claims if limit is None else claims[:limit]
    notes = {c.op_id: _situated_note(c) + claim_notes(c, state) for c in claims}
    if s.json:  # build only the form asked for: a memory may hold many claims
        claims_json = [{**_claim_json(c, state, names), "notes": notes[c.op_id]} for c in claims]
        data: dict[str, Any] = {"claims": claims_json, "more": more}
        if not claims and prefix and at is None:
            near = rep.nearest_prefix(prefix)
            if near is not None:
                data["did_you_mean"] = format_key(near)
        s.emit(data, "")
        return EXIT_OK
    cell = _memo_cell()
    authors: dict[bytes | str, str] = {}
    rows = [
        [
            short_id(c.op_id),
            format_key(_key_of(c)),
            c.scope,
            cell(c.value),
            authors.get(c.author) or authors.setdefault(c.author, names.label(c.author)),
            ", ".join(notes[c.op_id]),
        ]
        for c in claims
    ]
    header = ["ID", "KEY", "SCOPE", "VALUE", "AUTHOR", "NOTE"]
    text = table(header, rows) if rows else _no_claims(rep, a.prefix, prefix, at)
    if more:
        text += "\n" + _not_shown(plural(more, "more claim"), len(claims) + more)
    s.emit(None, text)
    return EXIT_OK


def _no_claims(rep: Replica, text: str | None, prefix: tuple[str, ...], at: object) -> str:
    """What ``show`` says when it lists nothing: under a prefix that names no key, the
    nearest one that does (a typo), read from the key index."""
    near = rep.nearest_prefix(prefix) if prefix and at is None else None
    if near is None:
        return "No active claims."
    return f"No claims under `{text}` (did you mean `{format_key(near)}`?)"


def _memo_cell() -> Callable[[Value], str]:
    """`value_cell`, remembered per distinct str or int value (a large memory repeats its
    values; the type is part of the memo key, as 1, 1.0 and True are equal but spelled
    apart)."""
    memo: dict[tuple[type, object], str] = {}

    def cell(v: Value) -> str:
        t = type(v)
        if t is not str and t is not int:
            return value_cell(v)
        found = memo.get((t, v))
        if found is None:
            found = memo[(t, v)] = value_cell(v)
        return found

    return cell


def _finding_text(conflict: ConflictSet, state: State, names: AuthorNames) -> str:
    """A detector's finding: its type, anchor, detector, status, reason and witness, then one
    row per claim with its key."""
    decision = state.decision_for(conflict)
    status = (
        "undecided" if decision is None else f"decided for {short_id(decision.selected_claim_id)}"
    )
    if decision is not None and decision.reason:
        status += f" ({decision.reason})"
    head = (
        f"{conflict.finding} at {format_key(conflict.key)} [{conflict.scope}]"
        f" ({conflict.detector}): {plural(len(conflict.candidates), 'claim')}, {status}"
    )
    lines = [head, f"  {conflict.reason}"]
    if conflict.witness:
        shown = ", ".join(f"{k}={value_cell(v)}" for k, v in conflict.witness.items())
        lines.append(f"  witness: {shown}")
    rows = [
        [
            short_id(cid),
            format_key(((c := state.claims[cid]).namespace, c.subject, c.predicate)),
            value_cell(c.value),
            names.label(c.author),
        ]
        for cid in conflict.candidates
    ]
    if rows:
        lines.append(table(["ID", "KEY", "VALUE", "AUTHOR"], rows, indent="  "))
    return "\n".join(lines)


def _conflict_text(conflict: ConflictSet, state: State, names: AuthorNames) -> str:
    if conflict.finding:
        return _finding_text(conflict, state, names)
    decision = state.decision_for(conflict)
    if decision is None:
        status = "undecided"
    elif decision.outcome is Outcome.PRESERVE:
        status = "preserved: every value accepted"
    elif decision.outcome is Outcome.DEFER:
        status = f"deferred by {names.label(decision.author)}"
    else:
        verb = "merged into" if decision.outcome is Outcome.MERGE else "decided for"
        status = f"{verb} {short_id(decision.selected_claim_id)}"
    if decision is not None and decision.reason:
        status += f" ({decision.reason})"
    group_of = {cid: i for i, g in enumerate(conflict.groups, 1) for cid in g.claim_ids}
    rows = []
    for cid in sorted(conflict.candidates, key=lambda c: (group_of[c], c)):
        c = state.claims[cid]
        rows.append(
            [
                str(group_of[cid]),
                short_id(cid),
                _claim_value_cell(c),
                names.label(c.author),
                c.provenance,
            ]
        )
    head = (
        f"{format_key(conflict.key)} [{conflict.scope}]:"
        f" {plural(len(conflict.candidates), 'candidate')}"
        f" in {plural(len(conflict.groups), 'group')}, {status}"
    )
    body = table(["GROUP", "ID", "VALUE", "AUTHOR", "PROVENANCE"], rows, indent="  ")
    return head + "\n" + body


def _conflict_json(conflict: ConflictSet, state: State, names: AuthorNames) -> dict[str, Any]:
    decision = state.decision_for(conflict)
    return {
        "key": list(conflict.key),
        "scope": conflict.scope,
        "locus": conflict.locus.hex(),
        "conflict_id": conflict.conflict_id.hex(),
        "groups": [[cid.hex() for cid in g.claim_ids] for g in conflict.groups],
        "candidates": [_claim_json(state.claims[cid], state, names) for cid in conflict.candidates],
        "decision": None if decision is None else _decision_json(decision, names),
        **_finding_json(conflict),
    }


def _finding_json(conflict: ConflictSet) -> dict[str, Any]:
    """The fields a detector's finding adds to a conflict's JSON (none for a same-key one)."""
    if not conflict.finding:
        return {}
    return {
        "finding": conflict.finding,
        "detector": conflict.detector,
        "reason": conflict.reason,
        "witness": None if conflict.witness is None else json_value(dict(conflict.witness)),
        "keys": [format_key(k) for k in conflict.keys],
    }


def _cmd_conflicts(s: Session) -> int:
    if s.args.history is not None:
        return _conflict_history(s)
    rep = s.replica(readonly=True)
    limit = _list_limit(s.args)
    page, names = rep.conflicts(limit=limit, at=_at(s.args, rep)), rep.author_names()
    state, shown = page.state, page.conflicts
    more = page.total - len(shown)
    text = "\n\n".join(_conflict_text(c, state, names) for c in shown) or "No conflicts."
    if more:
        text += "\n\n" + _not_shown(plural(more, "more conflict"), page.total)
    data = {"conflicts": [_conflict_json(c, state, names) for c in shown], "more": more}
    s.emit(data, text)
    return EXIT_OK


def _conflict_history(s: Session) -> int:
    """``conflicts --history LOCUS|KEY``: the lifecycle of one conflict (`conflict_history`)."""
    a = s.args
    rep = s.replica(readonly=True)
    target = a.history
    if "/" in target:
        key = parse_key(target)
        of: bytes | Key = key
        shown = f"{format_key(key)} [{a.scope or 'global'}]"
    else:
        try:
            of = bytes.fromhex(target)
        except ValueError:
            of = b""
        if len(of) != 32:
            raise CliError(
                "--history",
                "locus-or-key",
                f"--history takes a KEY (namespace/subject/predicate) or a locus"
                f" (64 hex digits, as `conflicts --json` prints it), not {target!r}",
            )
        shown = f"locus {target[:12]}…"
    names = rep.author_names()
    events = rep.conflict_history(of, scope=a.scope or "global", at=_at(a, rep))
    rows = [
        [
            str(e.lamport),
            e.event.value,
            "" if e.outcome is None else e.outcome.value,
            names.label(e.author),
            str(e.values),
            e.reason
            + (f" (did not apply: {e.stale.value})" if e.stale else "")
            + ("" if e.claim_id is None else f" (claim {short_id(e.claim_id)})"),
        ]
        for e in events
    ]
    text = (
        table(["LAMPORT", "EVENT", "OUTCOME", "AUTHOR", "VALUES", "WHY"], rows)
        if rows
        else f"No conflict history for {shown}."
    )
    data = {"events": [{**e.to_dict(), **_authored(e.author, names)} for e in events]}
    s.emit(data, text)
    return EXIT_OK


#: How many rows ``show``, ``conflicts``, ``history`` and ``quarantine`` list when neither
#: ``--limit`` nor ``--all`` is given: a large memory would otherwise print it all.
DEFAULT_LIST_LIMIT = 100


def _list_limit(a: argparse.Namespace) -> int | None:
    """How many rows a listing command shows: ``--limit N``, every one with ``--all`` (None),
    else `DEFAULT_LIST_LIMIT`. Raises CliError for both, or for a bad N."""
    if getattr(a, "all", False):
        if a.limit is not None:
            raise CliError("--all", "limit-or-all", "give --limit N or --all, not both")
        return None
    return DEFAULT_LIST_LIMIT if a.limit is None else _conflict_limit(a.limit)


def _not_shown(more: str, total: int) -> str:
    """The line that ends a cut listing."""
    return f"{more} not shown ({total} in all; --all lists every one)."


def _conflict_limit(text: str | None) -> int | None:
    """``--limit N`` -> N (a positive whole number), or None (every conflict) when not given."""
    if text is None:
        return None
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if limit < 1:
        message = f"--limit takes a positive whole number, not {text!r}"
        raise CliError("--limit", "positive", message)
    return limit


def _event_json(e: HistoryEvent, names: AuthorNames) -> dict[str, Any]:
    return {
        "lamport": e.lamport,
        "op_id": e.op_id.hex(),
        "event": e.event,
        **_authored(e.author, names),
        "claim_id": e.claim_id.hex(),
        "scope": e.scope,
        "value": None if e.claim is None else json_value(e.claim.value),
        "redacted": e.redacted is not None,
        "why": e.why,
        "superseded_by": _hex(e.superseded_by),
    }


def _key_read(s: Session) -> tuple[Key, State, AuthorNames]:
    """What ``history`` and ``timeline`` read for ``KEY``: the key, a State holding it (the
    memory at ``--at`` when given, else just that key's claims) and the author names."""
    a = s.args
    key = parse_key(a.key)
    rep = s.replica(readonly=True)
    at = _at(a, rep)
    state = rep.state_for(key, scope=a.scope) if at is None else rep.state(at=at)
    return key, state, rep.author_names()


def _cmd_history(s: Session) -> int:
    a = s.args
    key = parse_key(a.key)
    rep = s.replica(readonly=True)
    every, names = rep.history(key, scope=a.scope, at=_at(a, rep)), rep.author_names()
    limit = _list_limit(a)
    left_out = 0 if limit is None else max(0, len(every) - limit)
    events = every[left_out:]  # the latest: what happened last matters most
    rows = [
        [
            str(e.lamport),
            e.event,
            short_id(e.claim_id),
            "?" if e.scope is None else e.scope,
            REDACTED_CELL if e.claim is None else _claim_value_cell(e.claim),
            names.label(e.author),
            e.why.strip(),
        ]
        for e in events
    ]
    text = (
        table(["LAMPORT", "EVENT", "CLAIM", "SCOPE", "VALUE", "AUTHOR", "WHY"], rows)
        if rows
        else f"No history for {format_key(key)}."
    )
    if left_out:
        text = _not_shown(plural(left_out, "earlier event"), len(every)) + "\n" + text
    data = {"key": list(key), "events": [_event_json(e, names) for e in events]}
    s.emit({**data, "more": left_out}, text)
    return EXIT_OK


def _situated_filter(a: argparse.Namespace, claims: list[ClaimAdded]) -> list[ClaimAdded]:
    """``show --valid-at`` / ``--context``: the claims that hold then and agree."""
    from statefuse.core.validity import contexts_agree, holds_at

    at = _instant_option(a.valid_at, "--valid-at")
    ctx = _context_option(a.context)
    if at is not None:
        claims = [c for c in claims if holds_at(c, at)]
    if ctx:
        claims = [c for c in claims if contexts_agree(c.context, ctx)]
    return claims


def _situated_note(c: ClaimAdded) -> list[str]:
    """A claim's interval and context as a note of ``show`` (none for most claims)."""
    if not c.situated:
        return []
    from statefuse.core.validity import situation

    return [situation(c).strip()]


def _cmd_timeline(s: Session) -> int:
    from statefuse.core.validity import format_context, format_instant
    from statefuse.reading.timeline import timeline

    a = s.args
    key, state, names = _key_read(s)
    entries = timeline(
        state,
        key,
        scope=a.scope,
        context=_context_option(a.context),
        valid_at=_instant_option(a.valid_at, "--valid-at"),
        retracted=a.retracted,
    )

    def when(ms: int | None) -> str:
        return "" if ms is None else format_instant(ms)

    def note(e: Any) -> str:
        return ", ".join(
            n for n, on in (("retracted", e.retracted), ("conflict", e.in_conflict)) if on
        )

    rows = [
        [
            when(e.valid_from) or "..",
            when(e.valid_until) or "..",
            short_id(e.claim.claim_id),
            e.claim.scope,
            value_cell(e.claim.value),
            format_context(e.claim.context),
            names.label(e.claim.author),
            note(e),
        ]
        for e in entries
    ]
    header = ["FROM", "UNTIL", "CLAIM", "SCOPE", "VALUE", "CONTEXT", "AUTHOR", "NOTE"]
    text = table(header, rows) if rows else f"No values for {format_key(key)}."
    data = {
        "key": list(key),
        "values": [
            {
                "claim_id": e.claim.claim_id.hex(),
                "scope": e.claim.scope,
                "value": json_value(e.claim.value),
                "valid_from": e.valid_from,
                "valid_until": e.valid_until,
                "context": dict(e.claim.context) if e.claim.context else {},
                **_authored(e.claim.author, names),
                "retracted": e.retracted,
                "in_conflict": e.in_conflict,
            }
            for e in entries
        ],
    }
    s.emit(data, text)
    return EXIT_OK


def _at(a: argparse.Namespace, rep: Replica) -> Version | None:
    """``--at VERSION`` or ``--at TIME`` -> the Version (None: not given). A time (ISO 8601
    with a zone, or a date) names the changes this store had received by then
    (`Replica.version_received_by`): a local fact, not a shared one."""
    from statefuse.sync.version import Version, parse_time

    text = getattr(a, "at", None)
    if text is None:
        return None
    if not text.startswith("v1:") and text[:4].isdigit():
        return rep.version_received_by(parse_time(text, field="--at"))
    return Version.parse(text, field="--at")


def _cmd_version(s: Session) -> int:
    rep = s.replica(readonly=True)
    version = rep.version()
    s.emit({"version": str(version), **version.to_json()}, str(version))
    return EXIT_OK


def _cmd_diff(s: Session) -> int:
    from statefuse.sync.version import Version

    a = s.args
    before = Version.parse(a.before, field="V1")
    after = None if a.after is None else Version.parse(a.after, field="V2")
    rep = s.replica(readonly=True)
    diff = rep.diff(before, after)
    later = str(rep.version()) if after is None else str(after)
    s.emit(
        {"from": str(before), "to": later, **diff.to_json()},
        "\n".join(diff.lines()) or "No changes.",
    )
    return EXIT_OK


def _cmd_export(s: Session) -> int:
    # read-only: no lock, so it works beside a writer and on a read-only file system; a
    # damaged store says so once (what verifies is exported; the rest is the damage)
    rep = s.replica(readonly=True)
    n = rep.export(s.args.file)
    s.emit({"path": s.args.file, "changes": n}, f"Exported {plural(n, 'change')} to {s.args.file}")
    return EXIT_OK


def _cmd_import(s: Session) -> int:
    rep = s.replica()
    bar = s.progress("import")
    try:
        report = rep.import_(s.args.file, progress=bar)
    finally:
        if bar is not None:
            bar.finish()
    s.emit(
        {"path": s.args.file, **_report_json(report)},
        f"{_adopted_text(rep, report)}Imported {s.args.file}: {_report_text(report)}",
    )
    return EXIT_OK


def _stop_on_sigterm(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt  # the server shuts down on it as on Ctrl-C


#: URL schemes that name a NATS broker (the JetStream transport); any other is an HTTP peer.
BROKER_SCHEMES = ("nats", "tls")


def _is_broker(url: str) -> bool:
    try:
        return urlsplit(url).scheme.lower() in BROKER_SCHEMES
    except ValueError:
        return False


def _jetstream() -> Any:
    """`statefuse.sync.jetstream`, or a CliError saying which extra it needs."""
    try:
        import statefuse.sync.jetstream as jetstream
    except ImportError:
        raise CliError(
            "URL", "transport-missing", "NATS needs nats-py: pip install 'statefuse[nats]'"
        ) from None
    return jetstream


def _shown(url: str) -> str:
    from statefuse.sync.protocol import masked_url

    return masked_url(url)


def _nats_login(jetstream: Any, a: argparse.Namespace) -> Any:
    """The broker login of ``--nats-creds`` / ``--nats-nkey``, else of the environment
    (`jetstream.environment_login`, which checks the file): a `BrokerLogin`. A file that
    cannot serve is an error naming the option, or the variable, that gave it."""
    try:
        return jetstream.environment_login(a.nats_creds, a.nats_nkey)
    except jetstream.JetStreamError as exc:
        if a.nats_creds is None and a.nats_nkey is None:
            raise CliError(exc.field, exc.rule, exc.message) from None  # names the variable
        option = "--nats-nkey" if exc.field == "nkey_seed" else "--nats-creds"
        raise CliError(option, exc.rule, f"{option}: {exc.message}") from None


@contextlib.contextmanager
def _login_environment(jetstream: Any, login: Any) -> Iterator[None]:
    """``login`` in the environment the follower's broker links read it from (a followed URL
    is made into a link by its transport, from the URL alone), the environment as it was
    after: options beat the environment without changing it for the rest of the process."""
    names = {jetstream.CREDS_ENV: login.credentials, jetstream.NKEY_ENV: login.nkey_seed}
    before = {name: os.environ.get(name) for name in names}
    try:
        for name, value in names.items():
            _set_environment(name, value)
        yield
    finally:
        for name, value in before.items():
            _set_environment(name, value)


def _set_environment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _cmd_serve(s: Session) -> int:
    from statefuse.sync.http import SyncApp, serve

    a = s.args
    if (a.tls_cert is None) != (a.tls_key is None):
        given, missing = (
            ("--tls-cert", "--tls-key") if a.tls_key is None else ("--tls-key", "--tls-cert")
        )
        raise CliError(given, "tls-pair", f"{given} needs {missing} too (the pair serves HTTPS)")
    for option, path in (("--tls-cert", a.tls_cert), ("--tls-key", a.tls_key)):
        if path is not None and not os.path.isfile(path):
            raise CliError(option, "tls-file", f"{option}: no such file: {path}")
    limits = _server_limits(a)
    for url in a.nats:
        if not _is_broker(url):
            raise CliError("--nats", "url-scheme", f"--nats takes a nats:// URL, got {_shown(url)}")
    followed = [*a.nats, *a.peers]
    if a.interval is not None and not 0 < a.interval <= 86_400:
        raise CliError("--interval", "seconds", "--interval is seconds in (0, 86400]")
    login = _nats_login(_jetstream(), a) if a.nats else None
    rep = _served_replica(s, following=bool(followed))
    server = (
        serve(
            rep,
            host=a.host,
            port=a.port,
            auth=a.auth,
            window=a.clock_window,
            tls=None if a.tls_cert is None else (a.tls_cert, a.tls_key),
            limits=limits,
        )
        if a.http or not followed
        else None
    )
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if main_thread else None
    try:
        if not followed:
            assert server is not None
            auth = server.app.auth.value if isinstance(server.app, SyncApp) else "open"
            s.emit(
                {"url": server.url, "space": rep.space, "store": str(s.path), "auth": auth},
                f"Serving space {rep.space!r} from {s.path} at {server.url}, auth {auth}"
                " (Ctrl-C to stop)",
            )
            server.serve_forever()  # returns on Ctrl-C or SIGTERM: stopping is not a failure
        else:
            if server is not None:
                server.start()
            with (
                _login_environment(_jetstream(), login)
                if login is not None
                else contextlib.nullcontext()
            ):
                _follow_until_stopped(s, rep, followed, server.url if server else None)
    except KeyboardInterrupt:
        pass  # Ctrl-C or SIGTERM while following: stopping is not a failure
    finally:
        if server is not None:
            server.close()
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    print("Stopped.", file=sys.stderr)
    return EXIT_OK


def _server_limits(a: argparse.Namespace) -> Any:
    """The `ServerLimits` of serve's options; a bad value is an error naming its option."""
    from statefuse.sync.guard import ServerLimits
    from statefuse.sync.protocol import SyncError

    options = {
        "max_connections_per_client": "--max-connections-per-client",
        "max_connections": "--max-connections",
        "header_timeout": "--header-timeout",
        "body_timeout": "--body-timeout",
    }
    given = {name: getattr(a, name) for name in options if getattr(a, name) is not None}
    try:
        return ServerLimits(**given)
    except SyncError as exc:
        option = options.get(exc.field, "--max-connections")
        raise CliError(option, exc.rule, f"{option}: {exc.message}") from None


def _served_replica(s: Session, *, following: bool) -> Replica:
    """The store ``serve`` answers from: opened for writing, else, where the file system (or
    the file) is read-only to this process and nothing is followed, opened read-only with one
    ``Warning:`` line: reconcile, fetch and info are answered, pushes refused."""
    try:
        rep = s.replica()
    except CliError as exc:
        if exc.rule != "readonly" or following:
            raise
        rep = s.replica(readonly=True)
        warnings.warn(
            f"{s.path} is read-only to this process (a read-only file system or directory):"
            " serving it read-only; pushes are refused",
            stacklevel=2,
        )
        return rep
    s.warn_damage()  # served read-only: pushes are refused until `statefuse repair`
    return rep


def _follow_until_stopped(s: Session, rep: Replica, urls: list[str], http: str | None) -> None:
    """Follow ``urls`` until Ctrl-C / SIGTERM (KeyboardInterrupt): one line for each round that
    moved something, one ``Error:`` line when a peer starts failing (or fails another way), one
    line when it answers again."""
    interval = s.args.interval if s.args.interval is not None else 1.0
    shown = [_shown(u) for u in urls]
    s.emit(
        {
            "event": "following",
            "peers": shown,
            "url": http,
            "space": rep.space,
            "store": str(s.path),
        },
        f"Following {', '.join(shown)} for space {rep.space!r} from {s.path}"
        + (f", serving at {http}" if http else "")
        + " (Ctrl-C to stop)",
        compact=True,
    )
    follower = rep.follow(urls, interval=interval, timeout=s.args.timeout)
    seen = {p.url: type(p)(p.url) for p in follower.status.peers}  # nothing moved yet

    def look() -> None:
        for p in follower.status.peers:
            before = seen[p.url]
            seen[p.url] = p
            if p.attempts != before.attempts:
                _tell_round(s, before, p)

    with _stop_signals() as stop:
        try:
            while follower.running and not stop.requested:
                time.sleep(min(interval, 0.5))
                look()
        finally:
            follower.stop()
            look()  # what the last rounds moved, told before "Stopped."


@dataclass(slots=True)
class _Stop:
    """Whether Ctrl-C or SIGTERM asked the following to stop."""

    requested: bool = False


@contextlib.contextmanager
def _stop_signals() -> Iterator[_Stop]:
    """Ctrl-C and SIGTERM set a flag while following, instead of raising KeyboardInterrupt
    wherever the main thread is: raised inside ``with lock:`` (reading the follower's status),
    it would leave the lock held, and the stop would wait for the follower's thread forever.
    The handler only sets a flag (a lock taken there could be the one the interrupted code
    holds). A second Ctrl-C interrupts as usual. A process started with Ctrl-C ignored (in the
    background of a script) keeps ignoring it, as Python does. Outside the main thread nothing
    sets the flag (the caller stops the follower another way)."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    taken = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        taken.append(signal.SIGINT)

    def handle(signum: int, frame: object) -> None:
        stop.requested = True
        if signal.SIGINT in taken:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {n: signal.signal(n, handle) for n in taken}
    try:
        yield stop
    finally:
        for n, handler in previous.items():
            signal.signal(n, handler)


def _chunk_text(dropped: int, given_up: int) -> str:
    """The line a follower's dropped chunk assemblies earn (`sync.jetstream.ChunkBounds`)."""
    held = plural(dropped, "chunk assembly", "chunk assemblies")
    text = f"{held} dropped past the chunk bounds (read again later)"
    if given_up:
        text += f", {plural(given_up, 'change')} given up on (looked for in the stream again)"
    return text


def _tell_round(s: Session, before: Any, now: Any) -> None:
    """What changed for one peer between two looks at its `PeerStatus`."""
    url = _shown(now.url)
    queue = "" if now.outbox is None else f"; outbox {now.outbox}, lag {_count(now.lag)}"
    if now.failures:
        if before.failures and before.last_error == now.last_error:
            return  # still down the same way: said once
        print(f"Error: {_about(url, now.last_error)} (retrying)", file=sys.stderr, flush=True)
        if s.json:
            s.emit({"event": "error", "url": url, "error": now.last_error}, "", compact=True)
        return
    received, pushed = now.received - before.received, now.pushed - before.pushed
    back = before.failures > 0
    dropped = (now.evicted - before.evicted, now.abandoned - before.abandoned)
    if not (received or pushed or back or now.quarantined != before.quarantined or any(dropped)):
        return
    data = {
        "event": "synced",
        "url": url,
        "received": received,
        "pushed": pushed,
        "quarantined": now.quarantined - before.quarantined,
        "outbox": now.outbox,
        "lag": now.lag,
    }
    text = f"{url}: received {received}, sent {pushed}{queue}"
    if now.quarantined != before.quarantined:
        text += f"; {now.quarantined - before.quarantined} quarantined"
    if any(dropped):  # a chunk flood, or a broker losing chunks: the change is read again
        data["chunks_dropped"], data["chunks_given_up"] = dropped
        text += f"; {_chunk_text(*dropped)}"
    if back:
        text += " (reachable again)"
    s.emit(data, text, compact=True)


def _about(url: str, message: str | None) -> str:
    """``message`` naming ``url`` (shown masked), unless it names it already."""
    text = message or "failed"
    return text if url in text else f"{url}: {text}"


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def _cmd_sync(s: Session) -> int:
    from statefuse.sync.http import SyncError, sync_all

    urls = s.args.peers
    web = [u for u in urls if not _is_broker(u)]
    brokers = [u for u in urls if _is_broker(u)]
    jetstream = _jetstream() if brokers else None
    login = _nats_login(jetstream, s.args) if brokers else None
    rep = s.replica()
    results: dict[str, dict[str, Any]] = {}
    texts: dict[str, str] = {}
    # the stream first: what it brings then goes on to the HTTP peers
    for url in brokers:
        results[url], texts[url] = _sync_broker(jetstream, rep, url, web, s.args.timeout, login)
    bar = s.progress("sync")
    try:
        outcomes = sync_all(rep, web, timeout=s.args.timeout, progress=bar, cafile=s.args.cafile)
    finally:
        if bar is not None:
            bar.finish()
    for url, outcome in zip(web, outcomes, strict=True):
        if isinstance(outcome, SyncError):
            results[url] = {
                "url": _shown(url),
                "ok": False,
                "error": outcome.message,
                "rule": outcome.rule,
            }
            continue
        results[url] = {
            "url": _shown(url),
            "ok": True,
            "error": None,
            "rule": None,
            "round_trips": outcome.round_trips,
            "bytes_sent": outcome.bytes_sent,
            "bytes_received": outcome.bytes_received,
            "fetched": outcome.fetched,
            "pushed": outcome.pushed,
            "merge": _report_json(outcome.merge),
            "server_author": None if outcome.server_author is None else outcome.server_author.hex(),
        }
        texts[url] = (
            f"{_adopted_text(rep, outcome.merge)}Synced with {_shown(url)}:"
            f" fetched {outcome.fetched}, pushed {outcome.pushed}"
            f" in {plural(outcome.round_trips, 'round trip')}"
            f" ({byte_size(outcome.bytes_sent)} sent, {byte_size(outcome.bytes_received)}"
            f" received); {_report_text(outcome.merge)}"
        )
        if outcome.peer_merge.refused_declarations:  # what we pushed that the peer does not count
            texts[url] += f"\n{_shown(url)}: {_refused_text(outcome.peer_merge)}"
        if outcome.peer_merge.evicted:
            texts[url] += "\n" + _evicted_text(outcome.peer_merge.evicted, "at the peer")
    peers = [results[u] for u in urls]
    for p in peers:
        if not p["ok"]:
            print(f"Error: {p['error']}", file=sys.stderr)
    s.emit({"peers": peers}, "\n".join(texts[u] for u in urls if u in texts))
    return EXIT_OK if all(p["ok"] for p in peers) else EXIT_ERROR


def _sync_broker(
    jetstream: Any, rep: Replica, url: str, web: list[str], timeout: float, login: Any
) -> tuple[dict[str, Any], str]:
    """One round with the broker at ``url`` (gaps filled from the HTTP peers ``web``), logged
    in with ``login`` (a `BrokerLogin`): its JSON entry and its line of text."""
    link = jetstream.JetStreamLink(
        rep,
        url,
        peers=web,
        connect_timeout=min(2.0, timeout),
        credentials=login.credentials,
        nkey_seed=login.nkey_seed,
    )
    try:
        round_ = link.sync_once(timeout=timeout)
    except jetstream.JetStreamError as exc:
        status = link.status()
        data = {
            "url": status.url,
            "ok": False,
            "error": _about(status.url, status.last_error or exc.message),
            "rule": exc.rule,
            "outbox": status.outbox,
        }
        return data, ""
    finally:
        link.stop()
    status = link.status()
    merge = round_.merge
    for report in round_.reconciled:
        merge = merge + report.merge
    data = {
        "url": status.url,
        "ok": True,
        "error": status.last_error,
        "rule": None,
        "published": round_.published,
        "fetched": round_.fetched,
        "reconciled": [r.fetched for r in round_.reconciled],
        "outbox": status.outbox,
        "lag": status.lag,
        "gap": list(status.gap) if status.gap else None,
        "merge": _report_json(merge),
    }
    text = (
        f"Synced with {status.url}: published {round_.published}, fetched {round_.fetched}"
        f"; outbox {status.outbox}, lag {_count(status.lag)}; {_report_text(merge)}"
    )
    dropped = (status.evicted + status.expired, status.abandoned)
    data["chunks_dropped"], data["chunks_given_up"] = dropped
    if any(dropped):
        text += f"\n  {_chunk_text(*dropped)}"
    if round_.reconciled:
        filled = sum(r.fetched for r in round_.reconciled)
        text += f"\n  a gap in the stream: {plural(filled, 'change')} fetched from HTTP peers"
    elif status.gap:
        text += f"\n  Warning: the stream dropped messages {status.gap[0]}..{status.gap[1] - 1}"
        text += " before this store took them in; give an HTTP peer to fill the gap"
    return data, text


def _cmd_status(s: Session) -> int:
    a = s.args
    for url in a.nats:
        if not _is_broker(url):
            raise CliError("--nats", "url-scheme", f"--nats takes a nats:// URL, got {_shown(url)}")
    rep = s.replica(readonly=True)
    jetstream: Any = None
    try:
        import statefuse.sync.jetstream as jetstream
    except ImportError:
        if a.nats:
            _jetstream()  # the error that says which extra it needs
    own = sum(1 for c in rep.log.changes() if c.author == rep.author)
    counts = {
        "accepted": len(rep),
        "own": own,
        "pending": rep.pending_count(),
        "quarantined": len(rep.quarantine()),
    }
    outbox: dict[str, int] = {}
    if jetstream is not None:
        outbox[jetstream.stream_name(rep.space)] = len(jetstream.unpublished(rep))
    brokers = []
    if a.nats:
        login = _nats_login(jetstream, a)
        brokers = [
            jetstream.probe(
                rep,
                url,
                timeout=a.timeout,
                credentials=login.credentials,
                nkey_seed=login.nkey_seed,
            )
            for url in a.nats
        ]
    data = {
        "store": str(s.path),
        "space": rep.space,
        "changes": counts,
        "outbox": outbox,
        "brokers": [
            {
                "url": b.url,
                "connected": b.connected,
                "stream": b.stream,
                "consumer": b.consumer,
                "outbox": b.outbox,
                "lag": b.lag,
                "last_error": b.last_error,
            }
            for b in brokers
        ],
    }
    lines = [
        ("store", str(s.path)),
        ("space", rep.space),
        (
            "changes",
            f"{counts['accepted']} accepted ({own} yours), {counts['pending']} pending,"
            f" {counts['quarantined']} quarantined",
        ),
    ]
    for target, n in outbox.items():
        lines.append(("outbox", f"{target}: {plural(n, 'own change')} to publish"))
    for b in brokers:
        if b.connected:
            lag = "no stream yet" if b.lag is None else f"lag {b.lag}"
            lines.append((b.url, f"reachable; {lag} (consumer {b.consumer})"))
        else:
            lines.append((b.url, f"unreachable: {b.last_error}"))
    s.emit(data, fields(lines))
    for b in brokers:
        if not b.connected:
            print(f"Error: {_about(b.url, b.last_error)}", file=sys.stderr)
    return EXIT_OK if all(b.connected for b in brokers) else EXIT_ERROR


def _cmd_mcp(s: Session) -> int:
    a = s.args
    try:
        from statefuse.entry.mcp import run
    except ModuleNotFoundError as exc:  # the extra is not installed (or only in part)
        raise CliError(
            "mcp",
            "mcp-extra",
            f"the MCP server needs the mcp extra (no module {exc.name!r}):"
            ' pip install "statefuse[mcp]"',
        ) from None
    for url in a.peers:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise CliError(
                "--peer", "http-url", f"--peer {url!r} is not a `statefuse serve` URL (http://…)"
            )
    embedder = load_embedder(a.embedder) if a.embedder else None
    rep = s.open(name=parse_name(a.name)) if a.name is not None else s.replica()
    s.warn_damage()  # served read-only: writes answer with the damage until `statefuse repair`
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm) if main_thread else None
    try:
        run(
            rep,
            transport=a.transport,
            host=a.host,
            port=a.port,
            peers=a.peers,
            embedder=embedder,
            allow_redact=a.allow_redact,
        )
    except KeyboardInterrupt:
        pass  # Ctrl-C or SIGTERM: stopping is not a failure
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    print("Stopped.", file=sys.stderr)
    return EXIT_OK


def _known_author(rep: Replica, text: str) -> bytes:
    """A whole author id, or a unique prefix of an author this replica knows of."""
    if len(text.strip()) == 64:
        return parse_author(text)
    trust = rep.trust()
    known = {c.author for c in rep.log.changes()} | set(trust.admitted) | {rep.author}
    return resolve_id(text, known, what="author")


def _registry_file(path: str) -> Registry:
    from statefuse.registry.file import load_registry

    return load_registry(path)


def _cmd_registry(s: Session) -> int:
    sub = s.args.registry_command or "show"
    if sub == "declare":
        return _registry_declare(s)
    if sub == "creator":
        return _registry_creator(s)
    return _registry_show(s)


def _registry_json(rep: Replica) -> dict[str, Any]:
    d = rep.declaration
    return {
        "space": rep.space,
        "declared": d is not None,
        "declared_by": None if d is None else d.author.hex(),
        "lamport": None if d is None else d.lamport,
        "fingerprint": rep.registry.fingerprint.hex(),
        "registry": rep.registry.to_document(),
        "creator": _hex(rep.creator),
        "refused": [r.to_json() for r in rep.refused_declarations()],
    }


def _creator_arg(rep: Replica, text: str) -> bytes:
    """``--creator`` / ``registry creator KEY``: ``me`` (this store's author), a whole author
    id, or a unique prefix of an author this replica knows of."""
    from statefuse.sync.key import PublicKey

    if text == "me":
        return rep.author
    return PublicKey(_known_author(rep, text)).author


def _creator_text(rep: Replica) -> str:
    """Whom the open space's registry authority is, as `registry show` says it."""
    if rep.mode.value == "closed":
        return f"the root ({rep.author_label(rep.root or b'')}) declares the registry"
    if rep.creator is None:
        return (
            "no creator pinned: no declaration counts until one is (statefuse registry creator"
            " KEY, or sync/import from a store that has one)"
        )
    return f"creator {_creator_who(rep)}"


def _creator_who(rep: Replica) -> str:
    """The creator as ``alice (1a2b3c4d5e6f7a8b…)``, ``(…, you)`` when it is this store's key."""
    creator = rep.creator
    assert creator is not None
    label = rep.author_label(creator)
    shown = f"{creator.hex()[:16]}…" + (", you" if creator == rep.author else "")
    return shown if label.startswith(creator.hex()[:8]) else f"{label} ({shown})"


def _registry_creator(s: Session) -> int:
    a = s.args
    if a.creator_key is None:
        rep = s.replica(readonly=True)
        s.emit({"space": rep.space, "creator": _hex(rep.creator)}, _creator_text(rep))
        return EXIT_OK
    rep = s.replica()
    before = rep.creator
    changed = rep.pin_creator(_creator_arg(rep, a.creator_key), force=a.force)
    if not changed:
        text = f"Already pinned: {_creator_text(rep)}; nothing written"
    elif before is None:
        text = f"Pinned space {rep.space!r} to {_creator_text(rep)}"
    else:
        text = f"Re-pinned space {rep.space!r} (was {before.hex()[:16]}…) to {_creator_text(rep)}"
    s.emit({**_registry_json(rep), "written": changed}, text)
    return EXIT_OK


def _contract_text(c: PredicateContract, *, default: bool = False) -> tuple[str, str]:
    name = "(every other predicate)" if default else c.predicate
    if c.namespace is not None:
        name = f"{c.namespace}/{name}"
    normalizer = str(c.normalizer)
    if c.normalizer_version != 1:
        normalizer += f"@{c.normalizer_version}"
    if c.params:
        normalizer += " {" + ", ".join(f"{k}={v!r}" for k, v in c.param_items) + "}"
    parts = [normalizer, c.cardinality.value, c.policy.value]
    if not c.ref_uses_normal_form:
        parts.append("ref: value")
    return name, " · ".join(parts)


def _registry_show(s: Session) -> int:
    rep = s.replica(readonly=True)
    if s.args.toml:
        print(rep.registry.to_toml(), end="", flush=True)
        return EXIT_OK
    d = rep.declaration
    fp = rep.registry.fingerprint.hex()[:16]
    if d is None:
        head = f"Space {rep.space!r} declares no registry: the built-in default ({fp}…) applies"
    else:
        head = (
            f"Space {rep.space!r}: registry {fp}…, declared by {d.author.hex()[:12]}…"
            f" at lamport {d.lamport}"
        )
    rows = [_contract_text(c) for c in rep.registry.contracts]
    rows.append(_contract_text(rep.registry.default, default=True))
    lines = [head, fields(rows), "authority order: " + " > ".join(rep.registry.authority_order)]
    if rep.mode.value == "open" and (rep.creator is not None or d is not None):
        lines.append(_creator_text(rep))
    refused = rep.refused_declarations()
    if refused:
        lines.append(f"refused ({refused[0].rule}): {refused[0].reason}")
        lines += [
            f"  {r.author.hex()[:12]}…  lamport {r.lamport}  op {r.op_id.hex()[:12]}…"
            for r in refused
        ]
    s.emit(_registry_json(rep), "\n".join(lines))
    return EXIT_OK


def _registry_declare(s: Session) -> int:
    rep = s.replica()
    registry = _registry_file(s.args.file)
    before = len(rep.state().conflicts)
    op = rep.declare_registry(registry)
    fp = rep.registry.fingerprint.hex()[:16]
    if op is None:
        text = f"Registry {fp}… from {s.args.file} is in force already; nothing written"
    else:
        after = len(rep.state().conflicts)
        text = (
            f"Declared registry {fp}… from {s.args.file} for space {rep.space!r};"
            f" memory recomputed under it: {plural(after, 'conflict')} (was {before})"
        )
    s.emit({**_registry_json(rep), "written": op is not None}, text)
    return EXIT_OK


def _registry_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="registry_command", metavar="{show,declare,creator}")
    show = sub.add_parser("show", help="the registry in force and who declared it")
    show.add_argument(
        "--toml", action="store_true", help="print it as a registry file (to edit and declare)"
    )
    declare = sub.add_parser(
        "declare", help="make a registry file the space's contract (root / creator only)"
    )
    declare.add_argument("file", metavar="FILE", help="a registry file (TOML, or JSON by suffix)")
    creator = sub.add_parser(
        "creator", help="show or pin the open space's creator (whose declarations count)"
    )
    creator.add_argument(
        "creator_key",
        metavar="KEY",
        nargs="?",
        help="the creator's author id (or a prefix, or 'me')",
    )
    creator.add_argument(
        "--force",
        action="store_true",
        help="re-pin a store pinned to another creator (only to correct an old store's pin)",
    )
    p.set_defaults(toml=False, force=False, creator_key=None)
    for each in (show, declare, creator):
        _global_options(each, suppress=True)


def _cmd_keys(s: Session) -> int:
    sub = s.args.keys_command or "show"
    if sub == "admit":
        return _keys_admit(s)
    if sub == "revoke":
        return _keys_revoke(s)
    if sub == "new":
        return _keys_new(s)
    return _keys_show(s)


def _keys_new(s: Session) -> int:
    """``keys new``: the way back from a lost key file (docs/operations.md, "I lost my key
    file")."""
    from statefuse.sync.replica import key_path, new_author_key

    if not s.path.exists():
        raise CliError("--store", "no-such-store", f"no store at {s.path}")
    rep = s.open(readonly=True)
    old, mode, root, creator = rep.author, rep.mode.value, rep.root, rep.creator
    s.close()
    key = new_author_key(s.path, wait=s.args.wait)
    lines = [
        ("author", key.author.hex()),
        ("key file", f"{key_path(s.path)} (private: never share it)"),
        ("old author", f"{old.hex()} (its changes stay; it writes here no more)"),
    ]
    notes = []
    if mode == "closed":
        if root == old:
            notes.append(
                "the lost key was this closed space's root: nobody can admit the new author;"
                " restore the old key file from a backup if you can"
            )
        else:
            notes.append(
                f"closed space: the root must admit the new author before its writes count"
                f" (on the root's store: statefuse keys admit {key.author.hex()})"
            )
    elif creator == old:
        notes.append(
            "the lost key was the space's creator: registry declarations by the new author"
            " do not count"
        )
    s.emit(
        {
            "author": key.author.hex(),
            "key_file": str(key_path(s.path)),
            "old_author": old.hex(),
            "notes": notes,
        },
        f"New author key for {s.path}: it writes again\n"
        + fields(lines)
        + "".join(f"\nNote: {n}" for n in notes),
    )
    return EXIT_OK


def _keys_show(s: Session) -> int:
    rep = s.replica(readonly=True)
    trust = rep.trust()
    changes: dict[bytes, list[int]] = {}
    for c in rep.log.changes():
        changes.setdefault(c.author, []).append(c.seq)
    forked: dict[bytes, list[int]] = {}
    for f in rep.forks():
        forked.setdefault(f.author, []).append(f.seq)
    jumped: dict[bytes, list[int]] = {}
    for j in rep.clock_jumps():
        jumped.setdefault(j.author, []).append(j.lamport)
    authors = set(changes) | set(trust.admitted) | set(trust.cutoffs) | set(trust.roles)
    authors |= {rep.author} | ({rep.root} if rep.root is not None else set())
    names = rep.author_names()
    entries, rows = [], []
    for author in sorted(authors):
        status = []
        if author == rep.author:
            status.append("you")
        if author == rep.root:
            status.append("root")
        if author in trust.admitted:
            status.append("admitted")
        cut = trust.cutoffs.get(author)
        if cut is not None:
            status.append(f"revoked after seq {cut.through_seq}")
        if author in trust.keeps:
            status.append("revoked (named changes kept)")
        if author in forked:
            seqs_text = ", ".join(map(str, forked[author]))
            status.append(f"forked at seq {seqs_text} (all branches kept)")
        if author in jumped:
            to = ", ".join(map(str, sorted(set(jumped[author]))))
            status.append(f"clock jump to lamport {to} (kept and counted; revoke if unintended)")
        if not trust.may_write(author):
            status.append("not admitted")
        seqs = changes.get(author, [])
        roles = sorted(trust.roles.get(author, ()))
        entries.append(
            {
                "author": author.hex(),
                "name": names.get(author),
                "changes": len(seqs),
                "last_seq": max(seqs, default=0),
                "status": status,
                "roles": roles,
                "forks": forked.get(author, []),
                "clock_jumps": sorted(set(jumped.get(author, []))),
            }
        )
        rows.append(
            [
                author.hex(),
                names.get(author, ""),
                str(len(seqs)),
                ", ".join(status),
                ", ".join(roles),
            ]
        )
    me = names.get(rep.author)
    head = [
        ("space", f"{rep.space} ({rep.mode.value} mode)"),
        ("store", str(s.path)),
        ("you", rep.author.hex() + (f" ({me})" if me is not None else "")),
        ("root", rep.root.hex() if rep.root is not None else "none"),
    ]
    data = {
        "space": rep.space,
        "mode": rep.mode.value,
        "you": rep.author.hex(),
        "root": _hex(rep.root),
        "authors": entries,
    }
    header = ["AUTHOR", "NAME", "CHANGES", "STATUS", "ROLES"]
    s.emit(data, fields(head) + "\n\n" + table(header, rows))
    return EXIT_OK


def _keys_admit(s: Session) -> int:
    from statefuse.sync.key import PublicKey

    rep = s.replica()
    author = PublicKey(_known_author(rep, s.args.author)).author
    roles = sorted(set(s.args.role))
    rep.admit(author, roles)
    s.emit(
        {"author": author.hex(), "roles": roles},
        f"Admitted {author.hex()} ({'roles: ' + ', '.join(roles) if roles else 'no roles'})",
    )
    return EXIT_OK


def _keys_revoke(s: Session) -> int:
    rep = s.replica()
    author = _known_author(rep, s.args.author)
    if s.args.through_seq is not None:
        seq = s.args.through_seq
        ids = [c.change_id for c in rep.log.changes() if c.author == author and c.seq == seq]
        through = ids[0] if len(ids) == 1 else None
        rep.revoke(author, through_seq=seq, through_change=through, reason=s.args.reason)
        kept = f"changes after seq {seq} no longer count" if seq else "none of its changes count"
        s.emit(
            {"author": author.hex(), "through_seq": seq, "through_change": _hex(through)},
            f"Revoked {author.hex()}: {kept}",
        )
        return EXIT_OK
    heads = rep.heads(author)
    rep.revoke(author, keep=heads, reason=s.args.reason)
    kept = (
        f"its changes up to {', '.join(short_id(h) for h in heads)} still count, nothing"
        " it signs later does"
        if heads
        else "none of its changes count"
    )
    s.emit(
        {"author": author.hex(), "keep": [h.hex() for h in heads]},
        f"Revoked {author.hex()}: {kept}",
    )
    return EXIT_OK


def _cmd_quarantine(s: Session) -> int:
    records = s.replica(readonly=True).quarantine()
    if s.args.show is not None:
        key = resolve_id(s.args.show, (r.key for r in records), what="quarantine entry")
        (r,) = [r for r in records if r.key == key]
        data = r.data.hex()
        text = fields(
            [
                ("id", r.key.hex()),
                ("reason", r.reason),
                ("message", r.message),
                ("first seen", utc_time(r.first_seen_ms)),
                ("last seen", utc_time(r.last_seen_ms)),
                ("count", str(r.count)),
                ("size", plural(len(r.data), "byte")),
            ]
        )
        text += "\ndata\n" + "\n".join("  " + data[i : i + 64] for i in range(0, len(data), 64))
        s.emit({**_quarantine_json(r), "data": data}, text)
        return EXIT_OK
    limit = _list_limit(s.args)
    more = 0 if limit is None else max(0, len(records) - limit)
    records = records if limit is None else records[:limit]
    rows = [
        [
            short_id(r.key),
            r.reason,
            utc_time(r.first_seen_ms),
            utc_time(r.last_seen_ms),
            str(r.count),
            r.message,
        ]
        for r in records
    ]
    text = (
        table(["ID", "REASON", "FIRST SEEN", "LAST SEEN", "COUNT", "MESSAGE"], rows)
        if rows
        else "Quarantine is empty."
    )
    if more:
        shown = plural(more, "more entry", "more entries")
        text += "\n" + _not_shown(shown, len(records) + more)
    listed: dict[str, Any] = {"quarantine": [_quarantine_json(r) for r in records]}
    listed["more"] = more
    s.emit(listed, text)
    return EXIT_OK


def _quarantine_json(r: QuarantineRecord) -> dict[str, Any]:
    return {
        "id": r.key.hex(),
        "reason": r.reason,
        "message": r.message,
        "first_seen_ms": r.first_seen_ms,
        "last_seen_ms": r.last_seen_ms,
        "count": r.count,
        "size": len(r.data),
    }


def _evicted_text(n: int, where: str) -> str:
    """The one line that says evictions happened (`sync.pending`)."""
    return (
        f"evicted {where}: {n} (pending changes or quarantine entries past the bounds; a peer"
        " sends an evicted change again on its next sync; statefuse verify lists the evictions)"
    )


def _cmd_verify(s: Session) -> int:
    from statefuse.core.materializer import materialize
    from statefuse.sync.change import UnverifiedChange
    from statefuse.sync.verify import VerificationError, verify_change

    # every stored change is verified again into a fresh change log: the snapshot is not used
    rep = s.open(load="verify", readonly=True, quiet=True)
    problems = []
    stored = 0
    for pos, raw in rep.store.accepted():
        stored += 1
        try:
            c = verify_change(UnverifiedChange(raw), space=rep.space)
        except VerificationError as exc:
            problems.append(f"stored change {pos} fails verification: {exc}")
            continue
        if rep.log.get(c.change_id) is None:
            problems.append(
                f"stored change {pos} ({short_id(c.change_id)}) is not accepted on reload:"
                " its chain of predecessors is broken"
            )
    pending = rep.store.pending()
    for raw in pending:
        try:
            verify_change(UnverifiedChange(raw), space=rep.space)
        except VerificationError as exc:
            problems.append(f"a pending change fails verification: {exc}")
    state = rep.state()
    fresh = materialize(rep.log.ops(), registry=rep.registry)
    if state.digest() != fresh.digest():
        problems.append(
            f"the state digest {state.digest().hex()} differs from a fresh materialization"
            f" ({fresh.digest().hex()})"
        )
    problems += _sqlite_problems(rep)
    forks = rep.forks()
    for f in forks:
        print(f"Warning: {f.describe()}", file=sys.stderr)
    jumps = rep.clock_jumps()
    for j in jumps:
        print(f"Warning: {j.describe()}", file=sys.stderr)
    ignored = len(rep.verdicts())
    n_claims = len(state.claims)
    active = len(state.active_claims())
    counts = {
        "accepted": stored,
        "pending": len(pending),
        "quarantined": len(rep.quarantine()),
        "ignored": ignored,
    }
    data = {
        "ok": not problems,
        "store": str(s.path),
        "space": rep.space,
        "changes": counts,
        "ops": sum(len(c.ops) for c in rep.log.changes()),
        "claims": {"active": active, "retracted": n_claims - active},
        "conflicts": len(state.conflicts),
        "digest": state.digest().hex(),
        "problems": problems,
        "forks": [
            {"author": f.author.hex(), "seq": f.seq, "change_ids": [c.hex() for c in f.change_ids]}
            for f in forks
        ],
        "clock_jumps": [j.to_json() for j in jumps],
    }
    lines = [
        (
            "changes",
            f"{stored} accepted, {len(pending)} pending, {counts['quarantined']} quarantined"
            f" (kept for audit), {ignored} not counted (trust)",
        ),
        ("ops", str(data["ops"])),
        (
            "claims",
            f"{active} active, {n_claims - active} retracted;"
            f" {plural(len(state.conflicts), 'conflict')}",
        ),
        ("digest", state.digest().hex()),
    ]
    if forks:
        lines.append(("forks", f"{plural(len(forks), 'fork')} (every branch kept and counted)"))
    if jumps:
        by = sorted({rep.author_label(j.author) for j in jumps})
        lines.append(
            (
                "clock jumps",
                f"{plural(len(jumps), 'change')} by {', '.join(by)} (kept and counted)",
            )
        )
    evictions = rep.store.evictions()
    data["evicted"] = [
        {
            "area": t.area,
            "author": t.author.hex() or None,
            "changes": t.changes,
            "bytes": t.nbytes,
            "first_ms": t.first_ms,
            "last_ms": t.last_ms,
        }
        for t in evictions
    ]
    if evictions:
        by_area = {
            area: (
                sum(t.changes for t in evictions if t.area == area),
                len({t.author for t in evictions if t.area == area and t.author}),
            )
            for area in sorted({t.area for t in evictions})
        }
        lines.append(
            (
                "evicted",
                "; ".join(
                    f"{area} {n}" + (f" (of {plural(k, 'author')} named)" if k else "")
                    for area, (n, k) in by_area.items()
                )
                + " (to stay within the bounds: docs/operations.md#bounds-and-eviction)",
            )
        )
    verdict = (
        "OK: every stored change verifies and the state equals a fresh materialization"
        if not problems
        else f"FAILED: {plural(len(problems), 'problem')}\n"
        + "\n".join(f"  - {p}" for p in problems)
        + "\nFix: `statefuse repair` keeps every change that verifies and quarantines the rest"
        " (add --from URL to fetch lost changes back from a peer)"
    )
    s.emit(data, f"Verified {s.path} (space {rep.space!r})\n" + fields(lines) + "\n" + verdict)
    return EXIT_OK if not problems else EXIT_ERROR


def _sqlite_problems(rep: Replica) -> list[str]:
    """SQLite's own page-level check of the file, on the store's read-only connection (no lock
    needed), which reads the file as it is where no -wal can be made: a read-only file system
    holds a sound store, not a damaged one."""
    return [f"sqlite integrity check: {r}" for r in rep.store.integrity_problems(100, full=True)]


def _cmd_repair(s: Session) -> int:
    rep = s.replica()
    report = rep.repair()
    lines = []
    if report.original is not None:
        lines.append(
            f"SQLite could not read the whole file: rebuilt it; the damaged file is kept"
            f" at {report.original}"
        )
    if report.quarantined or report.parked:
        lines.append(
            f"Repaired {s.path}: {plural(report.quarantined, 'damaged change')} moved to"
            f" quarantine, {plural(report.parked, 'change')} waiting for a lost predecessor"
            " (moved to pending); nothing deleted"
        )
    elif report.original is None:
        lines.append(f"Nothing to repair: every change in {s.path} verifies")
    merged = []
    if s.args.peers:
        from statefuse.sync.http import SyncError, sync_all

        for url, outcome in zip(
            s.args.peers, sync_all(rep, s.args.peers, timeout=s.args.timeout), strict=True
        ):
            if isinstance(outcome, SyncError):
                print(f"Error: {outcome.message}", file=sys.stderr)
                continue
            merged.append(url)
            lines.append(
                f"Synced with {url}: fetched {outcome.fetched}; {_report_text(outcome.merge)}"
            )
    own_waiting = sum(1 for c in rep.pending() if c.author == rep.author)
    if own_waiting:
        print(
            f"Warning: {plural(own_waiting, 'change')} of this store's own feed still wait for a"
            " damaged predecessor: sync from a peer that has it (statefuse repair --from URL)"
            " before writing, or the next write forks the feed (both branches are kept)",
            file=sys.stderr,
        )
    data = {
        "store": str(s.path),
        "quarantined": report.quarantined,
        "parked": report.parked,
        "original": None if report.original is None else str(report.original),
        "synced": merged,
        "own_waiting": own_waiting,
    }
    s.emit(data, "\n".join(lines))
    return EXIT_OK if len(merged) == len(s.args.peers) else EXIT_ERROR


def _cmd_demo(s: Session) -> int:
    from statefuse.entry.demo import run

    if s.args.store is not None:
        raise CliError(
            "--store", "demo-dir", "demo makes its own stores: --dir DIR keeps them in DIR"
        )
    workdir = None if s.args.dir is None else Path(s.args.dir).expanduser().resolve()
    if s.json:
        lines: list[str] = []
        run(lines.append, workdir=workdir)
        s.emit({"lines": lines, "dir": None if workdir is None else str(workdir)}, "")
    else:
        run(workdir=workdir)
    return EXIT_OK


# --- the parser -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its name, one-line help, its arguments and what runs it."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[Session], int]


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors in the ``Error: …`` form of every other error."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"Error: {message}\n")


def _no_arguments(p: argparse.ArgumentParser) -> None:
    del p


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dir",
        metavar="DIR",
        help="keep the demo's stores in DIR (new or empty; default: a temporary directory)",
    )


def _init_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--space", required=True, help="name of the shared memory (a new store)")
    p.add_argument(
        "--mode",
        choices=["open", "closed"],
        default="open",
        help="open: any valid signature counts; closed: only the root and admitted authors",
    )
    p.add_argument(
        "--root", metavar="AUTHOR", help="the space's root author id (default in closed mode: you)"
    )
    p.add_argument("--key", metavar="FILE", help="use this author key file instead of a new key")
    p.add_argument(
        "--registry",
        metavar="FILE",
        help="declare this registry file (TOML, or JSON by suffix) as the space's contract",
    )
    p.add_argument("--name", metavar="NAME", help="the name your author key goes by (e.g. scout)")
    p.add_argument(
        "--creator",
        metavar="AUTHOR",
        help="open mode: pin the space's creator, whose registry declarations alone count"
        " ('me': this store's key)",
    )


def _name_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "name", metavar="NAME", nargs="?", help="the name to go by (leave out to show yours)"
    )


def _claim_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="namespace/subject/predicate")
    p.add_argument("value", metavar="VALUE", help="JSON if it parses, else a string")
    _string_argument(p)
    p.add_argument("--scope", default="global", help="global, task:ID, session:ID, hypothetical")
    p.add_argument(
        "--confidence",
        type=float,
        default=None,
        help="0 to 1 (default: none stated, which ranks below any stated confidence)",
    )
    p.add_argument("--provenance", default="", help="where the value comes from")
    p.add_argument("--authority", default="", help="an authority label (e.g. owner)")
    p.add_argument(
        "--layer", choices=[m.value for m in Layer], default=Layer.FACT.value, help="memory layer"
    )
    p.add_argument("--kind", default="fact", help="fact, question, commitment, ...")
    p.add_argument("--constraint", default="", help="a constraint kind: budget, deadline, ...")
    p.add_argument(
        "--visibility", metavar="ROLE", action="append", default=[], help="only ROLE may see it"
    )
    p.add_argument(
        "--depends-on", metavar="CLAIM", action="append", default=[], help="a claim it rests on"
    )
    p.add_argument("--expires", metavar="MS", type=int, help="expiry, ms since the epoch")
    _situated_claim_arguments(p)


def _situated_claim_arguments(p: argparse.ArgumentParser) -> None:
    """When and where a claimed value holds (SEMANTICS §9, §5)."""
    p.add_argument(
        "--valid-from",
        metavar="TIME",
        help="the value holds from TIME on (ISO 8601, e.g. 2026-03-01 or 2026-03-01T09:00Z)",
    )
    p.add_argument(
        "--valid-until", metavar="TIME", help="the value holds until TIME (excluded; ISO 8601)"
    )
    p.add_argument(
        "--context",
        metavar="DIM=VALUE",
        action="append",
        default=[],
        help="a dimension the value holds in, e.g. location=London (repeat)",
    )


def _lens_situation_arguments(p: argparse.ArgumentParser, *, context: bool = True) -> None:
    """A read's instant in the world and its context dimensions."""
    p.add_argument(
        "--valid-at",
        metavar="TIME",
        help="show the values that hold at TIME (ISO 8601; default: now)",
    )
    if context:
        p.add_argument(
            "--context",
            metavar="DIM=VALUE",
            action="append",
            default=[],
            help="show only values of this context, e.g. location=London (repeat)",
        )


def _instant_option(text: str | None, option: str) -> int | None:
    """``--valid-from`` and the like: ISO 8601 text (or whole ms) -> ms since the epoch."""
    from statefuse.core.validity import instant_ms

    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        return instant_ms(option, text)
    except StateFuseError as e:
        raise CliError(option, "iso-8601", str(getattr(e, "message", e))) from None


def _context_option(items: list[str], option: str = "--context") -> dict[str, Any] | None:
    """``--context k=v`` (repeated) -> the dimensions; a VALUE that reads as a JSON whole
    number or true/false is that, anything else is text."""
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name:
            raise CliError(option, "dim-value", f"expected DIM=VALUE, got {item!r}")
        value: Any = text
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if type(parsed) in (int, bool):
            value = parsed
        out[name] = value
    return out


def _string_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--string",
        action="store_true",
        help="store VALUE as a string as it is, even when it looks like JSON",
    )


def _retract_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("claim", metavar="CLAIM", help="claim id or a unique prefix (8+ hex digits)")
    p.add_argument("--reason", default="", help="why it is retracted")
    p.add_argument(
        "--semantic",
        action="store_true",
        help="retract every claim with this one's key, scope and value, also later copies",
    )


def _supersede_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("claim", metavar="CLAIM", help="the claim to replace")
    p.add_argument("value", metavar="VALUE", help="the new value")
    _string_argument(p)
    p.add_argument("--reason", default="", help="why it changed")


def _decide_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "claim",
        metavar="CLAIM",
        help="the candidate to decide for (merge: the merged claim; preserve, defer: any"
        " candidate of the conflict)",
    )
    p.add_argument(
        "--outcome",
        choices=[o.value for o in Outcome],
        default="select",
        help="select (default) one value; preserve every value as an accepted alternative;"
        " merge: select your claim that combines candidates it names in depends_on; defer:"
        " acknowledge, still open (needs --reason)",
    )
    p.add_argument("--reason", default="", help="why")
    p.add_argument("--scope", default="global", help="where the decision applies")


def _at_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--at",
        metavar="VERSION",
        help="read the memory at this version (`statefuse version`; loads the whole history)",
    )


def _show_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "prefix", metavar="PREFIX", nargs="?", help="namespace[/subject[/predicate]] to show"
    )
    p.add_argument("--scope", help="only claims in this scope")
    p.add_argument("--limit", metavar="N", help="show at most N claims (default: 100)")
    p.add_argument("--all", action="store_true", help="show every claim")
    _at_argument(p)
    p.add_argument(
        "--valid-at", metavar="TIME", help="only claims that hold at TIME (ISO 8601; default: all)"
    )
    p.add_argument(
        "--context",
        metavar="DIM=VALUE",
        action="append",
        default=[],
        help="only claims whose context agrees, e.g. location=London (repeat)",
    )


def _conflicts_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", metavar="N", help="show at most N conflicts (default: 100)")
    p.add_argument("--all", action="store_true", help="show every conflict")
    p.add_argument(
        "--history",
        metavar="LOCUS|KEY",
        help="the lifecycle of one conflict (opened, decided, deferred, reopened, closed)",
    )
    p.add_argument("--scope", help="with --history KEY: the conflict's scope (default global)")
    _at_argument(p)


def _history_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="namespace/subject/predicate")
    p.add_argument("--scope", help="only this scope")
    p.add_argument("--limit", metavar="N", help="show the latest N events (default: 100)")
    p.add_argument("--all", action="store_true", help="show every event")
    _at_argument(p)


def _timeline_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("key", metavar="KEY", help="namespace/subject/predicate")
    p.add_argument("--scope", help="only this scope")
    p.add_argument("--retracted", action="store_true", help="list retracted values too (marked)")
    _lens_situation_arguments(p)
    _at_argument(p)


def _diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", metavar="V1", help="the earlier version (`statefuse version`)")
    p.add_argument("after", metavar="V2", nargs="?", help="the later version (default: now)")


def _file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="a bundle file")


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    p.add_argument(
        "--auth",
        choices=["open", "signed", "members"],
        help="who may read and push: anyone, any signed request, or the root and admitted"
        " authors (default: members in a closed space, open in an open one)",
    )
    p.add_argument(
        "--clock-window",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how far a signed request's time may be off this clock (default 120)",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this PEM certificate")
    p.add_argument("--tls-key", metavar="FILE", help="the PEM private key of --tls-cert")
    p.add_argument(
        "--max-connections-per-client",
        type=int,
        metavar="N",
        help="open connections one remote address may hold; more are refused (default 16)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="open connections in all (default 512)",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        help="a request's headers (and TLS handshake) must arrive within this, however slowly"
        " bytes trickle in (default 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        metavar="SECONDS",
        help="a body must arrive within this, or at 64 KiB/s if that allows longer (default 10)",
    )
    p.add_argument(
        "--nats",
        action="append",
        default=[],
        metavar="URL",
        help="follow this NATS JetStream broker: publish and take in (repeatable)",
    )
    p.add_argument(
        "--peer",
        dest="peers",
        action="append",
        default=[],
        metavar="URL",
        help="follow this `statefuse serve` peer over HTTP too; it fills gaps (repeatable)",
    )
    _nats_login_arguments(p)
    p.add_argument(
        "--http",
        action="store_true",
        help="serve over HTTP as well while following (the default without --nats / --peer)",
    )
    p.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help="seconds between rounds with each followed peer (default 1)",
    )
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per round or request (default 10)"
    )


def _status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nats",
        action="append",
        default=[],
        metavar="URL",
        help="also ask this NATS broker how far behind this store is (repeatable)",
    )
    _nats_login_arguments(p)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a broker")


def _mcp_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default: the client starts the server) or http (streamable HTTP)",
    )
    p.add_argument("--host", default="127.0.0.1", help="HTTP: address to listen on (loopback)")
    p.add_argument("--port", type=int, default=0, help="HTTP: port (default: any free port)")
    p.add_argument(
        "--peer",
        dest="peers",
        action="append",
        default=[],
        metavar="URL",
        help="a `statefuse serve` URL the sync tool syncs with (repeatable)",
    )
    p.add_argument("--name", metavar="NAME", help="the name the server's author key goes by")
    _embedder_argument(p)
    p.add_argument(
        "--allow-redact",
        action="store_true",
        help="also offer the redact tool (deletes claims' bodies on every replica; off by default)",
    )


def _repair_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="peers",
        action="append",
        default=[],
        metavar="URL",
        help="after repairing, sync with this peer to fetch lost changes back (repeatable)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")


def _sync_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "peers", metavar="URL", nargs="+", help="a `statefuse serve` URL, or a nats:// broker"
    )
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request (default 10)")
    p.add_argument(
        "--cafile",
        metavar="FILE",
        help="trust https:// peers whose certificate this PEM file vouches for"
        " (default: $STATEFUSE_CAFILE, else the system's CAs)",
    )
    _nats_login_arguments(p)


def _nats_login_arguments(p: argparse.ArgumentParser) -> None:
    """How a command logs in to NATS brokers besides the URL (one of the two; either beats
    both environment variables)."""
    p.add_argument(
        "--nats-creds",
        metavar="FILE",
        help="log in to NATS brokers with this .creds file (user JWT and NKey seed;"
        " default: $STATEFUSE_NATS_CREDS)",
    )
    p.add_argument(
        "--nats-nkey",
        metavar="FILE",
        help="log in to NATS brokers with this NKey seed file (SU…; default: $STATEFUSE_NATS_NKEY)",
    )


def _keys_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="keys_command", metavar="{show,admit,revoke,new}")
    show = sub.add_parser("show", help="this replica's key, the root and every known author")
    new = sub.add_parser(
        "new", help="give a store whose key file is lost a new author key, so it writes again"
    )
    admit = sub.add_parser("admit", help="admit an author (root key only)")
    admit.add_argument("author", metavar="AUTHOR", help="author id (64 hex digits)")
    admit.add_argument("--role", action="append", default=[], help="a role to grant (repeat)")
    revoke = sub.add_parser("revoke", help="revoke an author (root key only)")
    revoke.add_argument("author", metavar="AUTHOR", help="author id or a known author's prefix")
    revoke.add_argument(
        "--through-seq",
        type=int,
        metavar="N",
        help="keep its changes up to seq N (the first release's form; default: keep every head"
        " this store knows, on every branch of a forked feed)",
    )
    revoke.add_argument("--reason", default="", help="why")
    for each in (show, admit, revoke, new):
        _global_options(each, suppress=True)


def _quarantine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--show", metavar="ID", help="dump one entry (id or 8+ hex digit prefix)")
    p.add_argument("--limit", metavar="N", help="list at most N entries (default: 100)")
    p.add_argument("--all", action="store_true", help="list every entry")


def _context_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--query", required=True, help="what the planner is asking (ranks the facts)")
    # statefuse.reading.context.DEFAULT_BUDGET (not imported here: it would slow every command's
    # start)
    p.add_argument("--budget", type=int, default=2000, help="token budget (default 2000)")
    p.add_argument(
        "--limit",
        metavar="N",
        help="with --json, list at most N claim ids under each omission handle (default 20;"
        " the counts are given in full)",
    )
    p.add_argument("--role", action="append", default=[], help="a viewer role (repeat)")
    p.add_argument("--task", help="the viewer's task (opens task:TASK claims)")
    p.add_argument("--session", help="the viewer's session (opens session:SESSION claims)")
    p.add_argument(
        "--include",
        action="append",
        default=[],
        choices=["hypothetical", "draft"],
        help="also show this speculative scope (repeat)",
    )
    p.add_argument(
        "--resolver",
        default="conservative",
        choices=sorted(_RESOLVERS),
        help="how conflicts are resolved (default conservative)",
    )
    _embedder_argument(p)
    _at_argument(p)
    _lens_situation_arguments(p)


def _embedder_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--embedder",
        metavar="MODULE:ATTR",
        help="rank by meaning too: the embedder (or a class making one) at MODULE:ATTR;"
        " its vectors are kept in the store",
    )


def load_embedder(spec: str) -> Any:
    """The embedder ``--embedder MODULE:ATTR`` names: ATTR (dotted) of the imported MODULE, an
    instance of it when it is a class, as `statefuse.retrieval.embedder.as_embedder` takes it.
    Raises
    CliError ``module-attr`` (the form, an import, a missing name) or what the embedder's
    constructor raises."""
    import importlib

    from statefuse.retrieval.embedder import as_embedder

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise CliError("--embedder", "module-attr", f"expected MODULE:ATTR, got {spec!r}")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise CliError(
            "--embedder", "module-attr", f"cannot import embedder module {module!r}: {exc}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError("--embedder", "module-attr", f"{module!r} has no {attr!r}")
        obj = getattr(obj, part)
    if isinstance(obj, type):
        obj = obj()
    return as_embedder(obj)


_RESOLVERS = ("abstain", "authority", "conservative", "latest")


def _cmd_context(s: Session) -> int:
    from statefuse.reading.context import default_resolver
    from statefuse.reading.lens import Lens
    from statefuse.reading.resolver import AbstainAll, AuthorityRank, LatestWins, Resolver

    a = s.args
    embedder = load_embedder(a.embedder) if a.embedder else None
    # with an embedder, opened writable: the vectors it makes are kept in the store
    replica = s.replica(readonly=embedder is None)
    lens = Lens(
        roles=frozenset(a.role),
        task=a.task,
        session=a.session,
        include=frozenset(a.include),
        now=time.time_ns() // 1_000_000,
        query=a.query,
        valid_at=_instant_option(a.valid_at, "--valid-at"),
        context=_context_option(a.context),
    )
    order = replica.registry.authority_order
    resolvers: dict[str, Resolver] = {
        "abstain": AbstainAll(),
        "authority": AuthorityRank(order),
        "conservative": default_resolver(order),
        "latest": LatestWins(),
    }
    resolver = resolvers[a.resolver]
    if a.budget < 1:
        raise CliError("--budget", "positive", "the budget is a positive number of tokens")
    context = replica.context(
        a.query,
        lens=lens,
        budget=a.budget,
        resolver=resolver,
        embedder=embedder,
        at=_at(a, replica),
        record_version=s.json,
    )
    s.emit(_context_json(context, _conflict_limit(a.limit) or 0) if s.json else None, context.text)
    return EXIT_OK


#: Claim ids ``context --json`` lists under each omission handle when ``--limit`` is not given.
CONTEXT_OMITTED_IDS = 20


def _context_json(context: Any, limit: int) -> dict[str, Any]:
    """`Context.to_dict` with each omission handle's claim ids cut to the first ``limit``
    (default `CONTEXT_OMITTED_IDS`): a large memory omits most of its claims, and their ids
    would make the document grow with the memory (4.5 MB at 60k claims). What is cut is counted:
    ``omitted_counts`` (per handle, in all) and ``omitted_left_out`` (ids not listed)."""
    data: dict[str, Any] = context.to_dict()
    most = limit or CONTEXT_OMITTED_IDS
    omitted: dict[str, list[str]] = data["omitted"]
    data["omitted_counts"] = {h: len(ids) for h, ids in omitted.items()}
    data["omitted_left_out"] = sum(max(0, len(ids) - most) for ids in omitted.values())
    data["omitted"] = {h: ids[:most] for h, ids in omitted.items()}
    return data


# --- forgetting on purpose: redact and compact (SEMANTICS §10) --------------------------------


def _redact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("claims", metavar="CLAIM", nargs="*", help="claim ids (64 hex digits)")
    p.add_argument("--key", default=None, help="every claim at this key (namespace/subject/pred)")
    p.add_argument("--value", default=None, help="with --key: only the claims holding this value")
    _string_argument(p)
    p.add_argument("--author", default=None, help="every claim of this author (key id, hex)")
    p.add_argument("--since", default=None, help="with --author: written at or after (ISO time)")
    p.add_argument("--until", default=None, help="with --author: written before (ISO time)")
    p.add_argument("--reason", default=None, help="why (kept for the audit; never the secret)")
    p.add_argument(
        "--list", action="store_true", help="list what was redacted here: by whom, when, why"
    )


def _iso_ms(text: str | None, name: str) -> int | None:
    if text is None:
        return None
    from datetime import datetime, timezone

    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(name, "iso-time", f"{name} is an ISO time, got {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def _ms_text(ms: int) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cmd_redact(s: Session) -> int:
    a = s.args
    rep = s.replica()
    if a.list:
        state = rep.redactions()
        rows: list[dict[str, Any]] = [
            {
                "op_id": r.op_id.hex(),
                "by": r.by.hex(),
                "by_name": rep.author_label(r.by),
                "at": _ms_text(r.wall_ms),
                "lamport": r.lamport,
                "redaction": r.redaction.hex(),
                "reason": r.reason,
                "held": r.held,
            }
            for r in sorted(rep.redacted_claims(), key=lambda r: (r.wall_ms, r.op_id))
        ]
        refused = [
            {"op_id": f.op_id.hex(), "by": f.author.hex(), "why": f.why.value, "message": f.message}
            for f in state.refused
        ]
        lines = [
            f"{r['op_id'][:16]}… redacted by {r['by_name']} at {r['at']}: {r['reason']}"
            + ("" if r["held"] else " (its body was never held here: where it was is not known)")
            for r in rows
        ] + [f"Warning: refused redaction of {f['op_id'][:16]}…: {f['message']}" for f in refused]
        s.emit({"redacted": rows, "refused": refused}, "\n".join(lines) or "Nothing redacted")
        return EXIT_OK
    if a.reason is None:
        raise CliError("--reason", "required", "say why with --reason (never the secret itself)")
    value: Any = _UNSET_VALUE if a.value is None else parse_value(a.value, as_string=a.string)
    kwargs: dict[str, Any] = {}
    if value is not _UNSET_VALUE:
        kwargs["value"] = value
    done = rep.redact(
        claim=list(a.claims) or None,
        key=a.key,
        author=a.author,
        since=_iso_ms(a.since, "--since"),
        until=_iso_ms(a.until, "--until"),
        reason=a.reason,
        **kwargs,
    )
    fresh = len(done.claims) - done.already
    s.emit(
        {
            "redacted": [c.hex() for c in done.claims],
            "already": done.already,
            "ops": [op.op_id.hex() for op in done.ops],
            "reason": a.reason,
        },
        f"Redacted {plural(fresh, 'claim')} (bodies deleted from this store;"
        f" peers delete them when they sync): {a.reason}",
    )
    return EXIT_OK


_UNSET_VALUE = object()


def _compact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--archive",
        required=True,
        metavar="PATH",
        help="the archive file the moved bodies go to (created, or merged into)",
    )


def _cmd_compact(s: Session) -> int:
    rep = s.replica()
    done = rep.compact(archive=s.args.archive)
    sizes = ""
    if done.store_before is not None and done.store_after is not None:
        sizes = f"; store {done.store_before:,} -> {done.store_after:,} bytes"
    s.emit(
        {
            "ops": done.ops,
            "changes": done.changes,
            "bytes": done.bytes,
            "archive": str(done.archive),
            "store_before": done.store_before,
            "store_after": done.store_after,
        },
        f"Moved {plural(done.ops, 'op body', 'op bodies')} ({done.bytes:,} bytes) of"
        f" {plural(done.changes, 'change')} to {done.archive}{sizes}",
    )
    return EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command("init", "create a store for a space", _init_arguments, _cmd_init),
    Command("claim", "assert a value for a key", _claim_arguments, _cmd_claim),
    Command("update", "replace your own value at a key", _claim_arguments, _cmd_update),
    Command("retract", "retract a claim", _retract_arguments, _cmd_retract),
    Command("supersede", "replace a claim with a new value", _supersede_arguments, _cmd_supersede),
    Command("show", "list active claims", _show_arguments, _cmd_show),
    Command(
        "conflicts", "list conflicts with their candidates", _conflicts_arguments, _cmd_conflicts
    ),
    Command("history", "every assertion and retraction of a key", _history_arguments, _cmd_history),
    Command("timeline", "a key's values by when they hold", _timeline_arguments, _cmd_timeline),
    Command("version", "this replica's version (its changes so far)", _no_arguments, _cmd_version),
    Command("diff", "what changed between two versions", _diff_arguments, _cmd_diff),
    Command("decide", "decide a conflict for one candidate", _decide_arguments, _cmd_decide),
    Command("redact", "delete claims' bodies on every replica", _redact_arguments, _cmd_redact),
    Command(
        "compact", "move bodies no view can show into an archive", _compact_arguments, _cmd_compact
    ),
    Command("export", "write every change to a signed bundle file", _file_argument, _cmd_export),
    Command("import", "verify and take in a bundle file", _file_argument, _cmd_import),
    Command(
        "serve",
        "serve this store over HTTP, or follow NATS brokers and peers",
        _serve_arguments,
        _cmd_serve,
    ),
    Command("sync", "sync with peers (HTTP) and NATS brokers once", _sync_arguments, _cmd_sync),
    Command(
        "status",
        "changes held, the outbox, how far behind a broker",
        _status_arguments,
        _cmd_status,
    ),
    Command("keys", "show, admit or revoke author keys", _keys_arguments, _cmd_keys),
    Command("name", "show or set the name your author key goes by", _name_arguments, _cmd_name),
    Command(
        "registry",
        "show or declare the space's predicate registry",
        _registry_arguments,
        _cmd_registry,
    ),
    Command("quarantine", "list refused changes", _quarantine_arguments, _cmd_quarantine),
    Command("verify", "re-check the store end to end", _no_arguments, _cmd_verify),
    Command(
        "repair", "make a damaged store writable, losing nothing", _repair_arguments, _cmd_repair
    ),
    Command("demo", "a multi-agent story, start to end", _demo_arguments, _cmd_demo),
    Command("context", "the context a planner's LLM reads", _context_arguments, _cmd_context),
    Command("mcp", "serve the memory to MCP clients (tools for LLMs)", _mcp_arguments, _cmd_mcp),
)


def _global_options(p: argparse.ArgumentParser, *, suppress: bool) -> None:
    """The options every command takes, before or after its name (after it, argparse must not
    overwrite a value given before it, hence ``SUPPRESS`` defaults in the subcommands)."""

    def default(v: object) -> object:
        return argparse.SUPPRESS if suppress else v

    p.add_argument(
        "--store",
        metavar="PATH",
        default=default(None),
        help=f"the store (default: $STATEFUSE_STORE, else ./{DEFAULT_STORE})",
    )
    p.add_argument(
        "--json", action="store_true", default=default(False), help="machine-readable output"
    )
    p.add_argument(
        "--progress",
        action="store_true",
        default=default(False),
        help="show a progress bar on stderr even when it is not a terminal",
    )
    p.add_argument(
        "--wait",
        metavar="SECONDS",
        type=float,
        default=default(DEFAULT_WAIT),
        help="most seconds a write waits for other processes writing to the store (default"
        f" {DEFAULT_WAIT:g})",
    )
    p.add_argument(
        "--adopt-key",
        action="store_true",
        default=default(False),
        help="write with a key that belongs to another store (its feed may fork; forks are"
        " kept and reported)",
    )
    p.add_argument(
        "--normalizers",
        metavar="MODULE",
        action="append",
        default=default([]),
        help="import this Python module first: it registers the custom normalizers the space's"
        " registry names (repeat; also $STATEFUSE_NORMALIZERS, comma-separated)",
    )
    helps = {
        "--max-pending": "most changes waiting for a predecessor (default 10000)",
        "--max-pending-bytes": "most bytes of them (default 64 MiB)",
        "--max-pending-per-author": "most of them by one author (default 1000)",
        "--max-quarantine": "most quarantine entries (default 10000)",
        "--max-quarantine-bytes": "most bytes of them (default 64 MiB)",
    }
    for name, option in _BOUND_OPTIONS:
        p.add_argument(
            option,
            dest=name,
            metavar="N",
            type=int,
            default=default(None),
            help=helps[option] + "; past it the least likely to count is evicted",
        )


#: The options that change `DEFAULT_BOUNDS`: (`Bounds` field, option).
_BOUND_OPTIONS = (
    ("pending_changes", "--max-pending"),
    ("pending_bytes", "--max-pending-bytes"),
    ("pending_per_author", "--max-pending-per-author"),
    ("quarantine_entries", "--max-quarantine"),
    ("quarantine_bytes", "--max-quarantine-bytes"),
)


def _bounds_fields(bounds: Any) -> dict[str, Any]:
    return {name: getattr(bounds, name) for name, _ in _BOUND_OPTIONS} | {
        "overflow": bounds.overflow
    }


def parser() -> argparse.ArgumentParser:
    """The ``statefuse`` argument parser."""
    from statefuse import __version__

    top = _Parser(prog="statefuse", description="Conflict-preserving memory for agent teams")
    top.add_argument("--version", action="version", version=f"statefuse {__version__}")
    _global_options(top, suppress=False)
    common = _Parser(add_help=False)
    _global_options(common, suppress=True)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        p = sub.add_parser(
            command.name, parents=[common], help=command.help, description=command.help
        )
        command.arguments(p)
    return top


def _describe(exc: BaseException) -> str:
    from statefuse.sync.bundle import BundleError
    from statefuse.sync.replica import ReplicaError

    if isinstance(exc, StoreError) and exc.rule == "busy":  # a write that waited its bound
        return exc.message.replace("open with wait=SECONDS", "pass --wait SECONDS")
    if isinstance(exc, (CliError, StoreError, BundleError, ReplicaError)):
        return exc.message  # their fields name internals, not what the user typed
    if isinstance(exc, InputError):
        return f"{exc.field}: {exc.message}"  # e.g. ``value.price: float nan is not finite``
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``statefuse`` with ``argv`` (default: the process's arguments); returns the exit
    status."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run = {c.name: c.run for c in COMMANDS}[args.command]
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(run, Session(args))


def _show_warning(message: Warning | str, *_: object, **__: object) -> None:
    """Warnings (a snapshot ignored, say) are news for the user, not for a developer: one line,
    without the source location."""
    print(f"Warning: {message}", file=sys.stderr)


def _run(run: Callable[[Session], int], session: Session) -> int:
    """Run one command; every failure ends as one ``Error: …`` line (or ``Interrupted``) and
    an exit status, never a traceback. The store is closed in every case."""

    def step() -> int:
        _import_normalizers(session.args)
        return run(session)

    status = _guarded(step)
    closed = _guarded(session.close_status)
    return status if status != EXIT_OK else closed


def _import_normalizers(args: argparse.Namespace) -> None:
    """Import the modules that register custom normalizers (``--normalizers``)."""
    import importlib

    names = list(getattr(args, "normalizers", []) or [])
    names += [n.strip() for n in os.environ.get("STATEFUSE_NORMALIZERS", "").split(",")]
    for name in filter(None, names):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise CliError(
                "--normalizers", "import", f"cannot import normalizer module {name!r}: {exc}"
            ) from None


def _guarded(step: Callable[[], int]) -> int:
    try:
        return step()
    except KeyboardInterrupt:
        print("Interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (``statefuse show | head``): stop quietly, as a filter does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except (StateFuseError, OSError) as exc:
        print(f"Error: {_describe(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except sqlite3.Error as exc:  # a path past the store's seam: still one line
        print(f"Error: the store file could not be read: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except RecursionError:
        print("Error: the input is nested too deeply", file=sys.stderr)
        return EXIT_ERROR
    except MemoryError:
        print("Error: the input is too large to hold in memory", file=sys.stderr)
        return EXIT_ERROR
