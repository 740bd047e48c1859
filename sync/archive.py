"""Archives: projection-equivalent compaction (SEMANTICS §10).

A replica may move the bodies of ops no projection can show any more out of its live store into
an archive file it can read back. The changes stay in the store with every id and signature (a
format-2 change verifies with bodies missing); the archive holds the same changes whole, so a
peer asking for one is served the whole change from the archive, never a partial one.

Which bodies move (`compactable`, a pure function of the State, chosen so that every View, for
every lens, is the same before and after):

- evidence no claim cites (active or not);
- retracted claims that nothing else reads: no claim cites, depends on or reasserts them (by id
  or by ref), no decision was ever made at their key, and their value is too short for the
  scrub (`statefuse.reading.scrub`) to look for in free text. The scrub reads the values of
  retracted
  claims to keep them out of contexts, so a retracted claim whose value it may look for
  stays: moving it would change what a context scrubs.

Decisions are never moved: which decision is in force is re-judged as claims change.

The archive is a bundle file (`sync.bundle`, signed by the replica's key) of whole signed
changes. Compacting again merges the new changes into it. A redaction that counts later cuts
its bodies out of the archive too (`without_redacted`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from statefuse.core.state import State, locus_of
from statefuse.reading.scrub import findable, folded, value_text
from statefuse.sync.bundle import open_bundle, write_bundle
from statefuse.sync.change import UnverifiedChange, without_bodies
from statefuse.sync.key import SigningKey
from statefuse.sync.verify import verify_change

#: The store note naming the archive of a compacted store (`Replica.compact`).
ARCHIVE_NOTE = "archive"


def compactable(state: State) -> frozenset[bytes]:
    """The ids of the ops whose bodies no projection reads (see the module doc)."""
    cited: set[bytes] = set()
    for c in state.claims.values():
        cited.update(c.evidence)
        cited.update(c.depends_on)
        cited.update(c.reasserts)
    decided = {d.locus for d in state.decisions}
    out: set[bytes] = {e for e in state.evidence if e not in cited}
    retracted = state.retracted
    for cid, c in state.claims.items():
        if cid not in retracted or state.is_active(cid):
            continue
        if cid in cited or c.claim_ref in cited:
            continue
        if locus_of(c.namespace, c.subject, c.predicate, c.scope) in decided:
            continue
        if findable(folded(value_text(c.value))):
            continue
        out.add(cid)
    return frozenset(out)


def read_archive(path: str | os.PathLike[str], *, space: str) -> dict[bytes, bytes]:
    """change id -> the whole signed change, from an archive file (each verified again).
    Raises BundleError for a file that is not a sound bundle of ``space``."""
    out: dict[bytes, bytes] = {}
    for data in open_bundle(path, space=space).changes:
        c = verify_change(UnverifiedChange(data), space=space)
        out[c.change_id] = data
    return out


def write_archive(
    path: str | os.PathLike[str],
    key: SigningKey,
    space: str,
    changes: Mapping[bytes, bytes],
    *,
    creator: bytes | None = None,
) -> None:
    """Write ``changes`` (change id -> whole signed change) as the archive, atomically."""
    write_bundle(Path(path), key, space, [changes[c] for c in sorted(changes)], creator=creator)


def without_redacted(
    changes: Mapping[bytes, bytes], redacted: Iterable[bytes], *, space: str
) -> dict[bytes, bytes]:
    """``changes`` with the bodies of ``redacted`` ops cut out (each change still verifies)."""
    gone = frozenset(redacted)
    out: dict[bytes, bytes] = {}
    for cid, data in changes.items():
        c = verify_change(UnverifiedChange(data), space=space)
        hit = gone.intersection(op.op_id for op in c.ops)
        out[cid] = without_bodies(c, hit) if hit and c.version == 2 else data
    return out


__all__ = ["ARCHIVE_NOTE", "compactable", "read_archive", "without_redacted", "write_archive"]
