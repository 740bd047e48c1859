"""The ``statefuse demo`` story: a planner and two research agents on the embedded SQLite store.

Everything runs on real replicas: forks, conflicting findings, an exact and a semantic
correction, a stale branch whose re-assertion is suppressed, a forged change that is quarantined,
sync over HTTP on loopback and by a bundle file, and the merged memory a planner reads. It prints
each step and takes a few seconds.

The stores live in a temporary directory removed at the end (the demo says so), or, given a
directory (``statefuse demo --dir DIR``), are kept there for the user to open with the other
commands: a demo that calls its stores durable and then deletes them shows nothing to look at.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from statefuse.core.error import InputError
from statefuse.core.op import ClaimAdded
from statefuse.core.state import State
from statefuse.reading.lens import Lens
from statefuse.reading.projection import project
from statefuse.reading.resolver import Conservative

#: The space's contract, as a user writes it: one line per predicate whose values are not plain
#: text or numbers (those agree by the default's natural normal form already).
DEMO_REGISTRY_TOML = """\
[predicates]
deadline = "date"
price = "money"
"""
SPACE = "launch-plan"
#: The files the story writes into its directory; a directory already holding one is refused, so
#: that a second run never mixes with (or overwrites) the stores of the first.
STORES = ("planner.db", "scout.db", "analyst.db", "archivist.db")


class DemoDirError(InputError, ValueError):
    """The directory given to keep the demo's stores in cannot take them."""


@contextlib.contextmanager
def _home(workdir: Path | None) -> Iterator[Path]:
    """``workdir`` (made if missing, kept), else a temporary directory removed on the way out."""
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="statefuse-demo-") as tmp:
            yield Path(tmp)
        return
    if workdir.exists() and not workdir.is_dir():
        raise DemoDirError("--dir", "directory", f"{workdir} is not a directory")
    taken = [name for name in STORES if (workdir / name).exists()]
    if taken:
        raise DemoDirError(
            "--dir",
            "new-directory",
            f"{workdir} already holds {taken[0]} (a store of an earlier demo):"
            " choose a new or empty directory",
        )
    workdir.mkdir(parents=True, exist_ok=True)
    yield workdir


def _value(c: ClaimAdded) -> str:
    return f"{c.subject}.{c.predicate} = {c.value!r}"


def run(out: Callable[[str], object] = print, *, workdir: Path | None = None) -> State:
    """Run the story, printing each step through ``out``; return the planner's merged State."""
    from statefuse.registry.file import load_registry
    from statefuse.storage.writer import Writer
    from statefuse.sync.bundle import BundleError  # noqa: F401  (imported here: the demo is an entry point)
    from statefuse.sync.change import change_body, change_id_of, signed_message, wire
    from statefuse.sync.key import SigningKey
    from statefuse.sync.replica import Replica

    with _home(workdir) as home:

        def who(author: bytes | str) -> str:
            return planner.author_label(author)  # the names the agents declared in the space

        def show(state: State, indent: str = "     ") -> None:
            for c in sorted(state.active_claims(), key=lambda c: (c.subject, c.predicate)):
                out(f"{indent}{_value(c):40} by {who(c.author)}")
            for conflict in state.conflicts:
                _, subject, predicate = conflict.key
                values = ", ".join(
                    f"{state.claims[cid].value!r} ({who(state.claims[cid].author)})"
                    for cid in conflict.candidates
                )
                out(f"{indent}CONFLICT {subject}.{predicate}: {values}")

        if workdir is None:
            where = f"a temporary directory, {home}, removed at the end (--dir DIR keeps them)"
        else:
            where = f"{home} (kept)"
        out(f"StateFuse demo: one shared memory, three agents, SQLite stores in {where}")
        out("")
        contract = home / "launch-plan.registry.toml"
        contract.write_text(DEMO_REGISTRY_TOML, encoding="utf-8")
        planner = Replica.open(
            home / "planner.db",
            create=True,
            space=SPACE,
            registry=load_registry(contract),
            name="planner",
        )
        out("0. The planner creates the space with its contract (a registry file; declared in")
        out("   the space, so every replica compares values the same way):")
        for line in DEMO_REGISTRY_TOML.splitlines():
            out(f"     {line}")
        out("")
        with planner.batch():
            planner.add_claim("project", "launch", "deadline", "2026-03-25", authority="user")
            planner.add_claim("project", "launch", "owner", "Dana  Smith")
            planner.add_identity("planner", "role", "launch coordinator", authority="system")
            planner.add_constraint(
                "vendor", "acme", "budget", "USD 130", constraint="budget", authority="user"
            )
        out("1. The planner writes the shared memory (one signed change, durably stored):")
        show(planner.state())

        scout = planner.fork(home / "scout.db")
        analyst = planner.fork(home / "analyst.db")
        archivist = planner.fork(home / "archivist.db")
        for agent, name in ((scout, "scout"), (analyst, "analyst"), (archivist, "archivist")):
            agent.declare_name(name)  # signed and replicated: every replica shows it
        out("")
        out("2. It forks three agents (each a new key, named, and a copy of the memory):")
        out("     scout and analyst go researching; archivist goes offline with this copy")

        out("")
        out("3. They learn conflicting facts:")
        scout.add_claim("project", "launch", "deadline", "2026-04-01", confidence=0.8)
        wrong = scout.add_claim("vendor", "acme", "price", "USD 135", confidence=0.6)
        analyst.add_claim("vendor", "acme", "price", "$120.00", confidence=0.9)
        analyst.add_claim("project", "launch", "deadline", "2026-04-08", confidence=0.8)
        out("     scout:   launch.deadline = '2026-04-01';  acme.price = 'USD 135'")
        out("     analyst: launch.deadline = '2026-04-08';  acme.price = '$120.00'")

        out("")
        out("4. The scout corrects itself exactly: it supersedes its own price claim")
        scout.supersede(wrong, "USD 120", "misread the quote; it is 120")
        out("     acme.price 'USD 135' -> 'USD 120' (one retraction naming the new claim)")

        old_deadline = next(
            c
            for c in analyst.state().active_claims()
            if c.predicate == "deadline" and c.value == "2026-03-25"
        )
        analyst.retract(claim_ref=old_deadline.claim_ref, reason="the launch moved")
        out("   The analyst retracts semantically: every copy of deadline = 2026-03-25 is void,")
        out("     including copies written later by anyone who has not seen this retraction")

        out("")
        out("5. The offline archivist, unaware, re-asserts the old deadline:")
        archivist.add_claim("project", "launch", "deadline", "2026-03-25", confidence=0.9)
        out("     archivist: launch.deadline = '2026-03-25' (the value that was just retracted)")

        out("")
        out("6. An impostor forges a change in the scout's name:")
        impostor = SigningKey.generate()
        forged_op = Writer(scout.author, registry=planner.registry).claim(
            "vendor", "acme", "price", "USD 9"
        )
        body = change_body(
            space=SPACE,
            author=scout.author,
            seq=1,
            prev=None,
            registry=planner.registry.fingerprint,
            ops=[forged_op],
        )
        forged = wire(body, impostor.sign(signed_message(change_id_of(body))))
        report = planner.receive([forged])
        [entry] = planner.quarantine()
        out(f"     planner: accepted {report.accepted}, quarantined {report.quarantined}")
        out(f"     quarantine: reason {entry.reason!r}: {entry.message}")

        out("")
        out("7. The branches sync:")
        from statefuse.sync.http import serve, sync_with

        with serve(planner, port=0) as server:
            for agent in (scout, analyst):
                r = sync_with(agent, server.url)
                out(
                    f"     {agent.author_label(agent.author)} <-> planner over HTTP ({server.url}):"
                    f" fetched {r.fetched}, pushed {r.pushed}, {r.round_trips} round trips,"
                    f" {r.bytes_sent + r.bytes_received} bytes"
                )
        bundle = home / "archivist.bundle"
        n = archivist.export(bundle)
        got = planner.import_(bundle)
        out(
            f"     archivist -> planner by bundle file ({n} changes):"
            f" {got.accepted} new, {got.duplicate} already known"
        )

        state = planner.state()
        out("")
        out("8. The merged memory (the archivist's stale re-assertion is suppressed;")
        out("   the price agrees once normalized; the deadline conflict stays explicit):")
        show(state)
        suppressed = [
            c
            for c in state.all_claims()
            if who(c.author) == "archivist" and not state.is_active(c.claim_id)
        ]
        out(f"     suppressed re-assertions: {len(suppressed)}")

        view = project(state, Lens(), resolver=Conservative())
        out("")
        out("9. What a planner's view makes of it (Conservative resolver):")
        for line in view.explanations.values():
            out(f"     {line}")
        from statefuse.reading.context import assemble_context

        query = "When is the launch and what does acme charge?"
        context = assemble_context(view, query=query, budget=400, authors=planner.names())
        out("")
        out(f"10. The context a planner's LLM reads ({context.token_count} of 400 tokens):")
        for line in context.text.splitlines():
            out(f"     | {line}")
        for agent in (planner, scout, analyst, archivist):
            agent.close()
        out("")
        out("Done: every step above is durable in the SQLite stores, signed, and verifiable.")
        if workdir is None:
            out(f"The stores in {home} are removed now; `statefuse demo --dir DIR` keeps them.")
        else:
            # the command as this process can run it (`dev.py demo` puts it in a venv of its own)
            command = "statefuse" if shutil.which("statefuse") else f"{sys.executable} -m statefuse"
            out(f"The stores are kept in {home}: look at the planner's with")
            out(f"     {command} conflicts --store {home / 'planner.db'}")
            out(f"     {command} history project/launch/deadline --store {home / 'planner.db'}")
        return state
