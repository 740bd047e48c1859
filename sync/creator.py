"""An open space's creator: the one author whose registry declarations count there.

SEMANTICS §2: who an open space's creator is must not be forgeable. Earlier releases took the
author of the lowest ``(lamport, op_id)`` declaration, and an author chooses its lamports, so a
stranger's declaration stamped lamport 1 became "the creator's". Now the creator is a property
of the store, like the root of a closed space (`StoreInfo.creator`), fixed by what the store's
user did, never by what a peer sends:

- a store that declares a registry is pinned to its own author at that moment (declaring is
  creating the space's contract); ``Replica.open(..., creator=KEY)`` / ``statefuse init
  --creator KEY`` and ``statefuse registry creator KEY`` pin explicitly; `Replica.fork` copies
  it;
- a store with no creator pinned adopts one only from a source its user chose to sync with as a
  client (`Replica.import_` from the bundle's header, `sync_with` from the server's answer,
  `Replica.merge` from the other replica); a push to a served store or a follower never does
  (a stranger could race the real creator there);
- a store of an earlier release is pinned once, at its first open by this release, by the old
  rule over the changes it holds then (`first_declarer`); one without declarations stays
  unpinned.

Only the creator's declarations count in an open space (`authority`). Everyone else's stay in
the log (the change is accepted and its other ops count, as with a non-root's trust ops) and
are listed with the reason (`refused_declarations`, rule `REFUSED_RULE`): by `statefuse registry
show`, and in the `MergeReport` of the receive that brought them. Two stores pinned to different
creators are two spaces that share a name: syncing, importing or merging them is refused before
anything moves (`two_spaces`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from statefuse.sync.declaration import RegistryDeclared
from statefuse.sync.key import PublicKey, PublicKeyError
from statefuse.sync.trust import TrustMode

#: The rule every refused declaration (and refused `declare_registry`) names.
REFUSED_RULE = "not-registry-authority"

#: How to pin a store's creator, as the reasons say it.
PIN_HINT = "statefuse registry creator KEY (Python: Replica.pin_creator)"


@dataclass(frozen=True, slots=True)
class RefusedDeclaration:
    """A registry declaration in a change that counts, which does not count itself: its
    author is not the space's authority (the root, or the open space's creator)."""

    author: bytes
    op_id: bytes
    lamport: int
    rule: str
    reason: str

    def describe(self) -> str:
        """The one line users see."""
        return (
            f"registry declaration by {self.author.hex()[:12]}… at lamport {self.lamport}"
            f" refused ({self.rule}): {self.reason}"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "author": self.author.hex(),
            "op_id": self.op_id.hex(),
            "lamport": self.lamport,
            "rule": self.rule,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, raw: object) -> RefusedDeclaration | None:
        """The entry `to_json` wrote, or None for anything else."""
        if not isinstance(raw, dict):
            return None
        try:
            author, op_id = bytes.fromhex(raw["author"]), bytes.fromhex(raw["op_id"])
            lamport, rule, reason = raw["lamport"], raw["rule"], raw["reason"]
        except (KeyError, TypeError, ValueError):
            return None
        if type(lamport) is not int or not isinstance(rule, str) or not isinstance(reason, str):
            return None
        return cls(author, op_id, lamport, rule[:100], reason[:500])


def check_creator(field: str, value: object) -> bytes:
    """An author id that can be a space's creator (32 bytes, a valid Ed25519 key). Raises
    PublicKeyError naming ``field`` and the rule."""
    if not isinstance(value, bytes | bytearray) or len(value) != 32:
        raise PublicKeyError(field, "author-id", f"a creator is a 32-byte author id, got {value!r}")
    try:
        return PublicKey(bytes(value)).author
    except PublicKeyError as exc:
        raise PublicKeyError(field, exc.rule, exc.message) from None


def authority(mode: TrustMode, root: bytes | None, creator: bytes | None) -> bytes | None:
    """The one author whose declarations count: the root of a closed space, the creator of an
    open one (None: nobody's, in an open space with no creator pinned)."""
    return root if mode is TrustMode.CLOSED else creator


def first_declarer(declarations: Iterable[RegistryDeclared]) -> bytes | None:
    """The rule of earlier releases: the author of the lowest ``(lamport, op_id)`` declaration.
    Used once, to pin the creator of a store those releases wrote (see the module doc); never
    to decide anything about changes received since."""
    ops = list(declarations)
    return min(ops, key=lambda op: (op.lamport, op.op_id)).author if ops else None


def refusal(mode: TrustMode, creator: bytes | None, space: str) -> str:
    """Why a declaration by someone other than the authority does not count."""
    if mode is TrustMode.CLOSED:
        return "in a closed space only the root key declares the registry"
    if creator is None:
        return (
            f"this store has no creator pinned for space {space!r}, so no declaration counts"
            f" yet: pin the space's creator with {PIN_HINT}, or sync/import from a store that"
            " has one"
        )
    return f"in an open space only its creator ({creator.hex()[:12]}…) declares the registry"


def refused_declarations(
    declarations: Iterable[RegistryDeclared],
    *,
    mode: TrustMode,
    root: bytes | None,
    creator: bytes | None,
    space: str,
) -> list[RefusedDeclaration]:
    """The declarations among ``declarations`` (those of counted changes) that do not count,
    with the reason, in ``(lamport, op_id)`` order."""
    who = authority(mode, root, creator)
    why = refusal(mode, creator, space)
    out = [
        RefusedDeclaration(op.author, op.op_id, op.lamport, REFUSED_RULE, why)
        for op in declarations
        if op.author != who
    ]
    return sorted(out, key=lambda r: (r.lamport, r.op_id))


def two_spaces(space: str, mine: bytes, theirs: bytes, source: str) -> str:
    """The message of `TwoSpacesError`: two stores created apart under one name."""
    return (
        f"two spaces share the name {space!r}: this store's was created by {mine.hex()[:16]}…,"
        f" {source}'s by {theirs.hex()[:16]}…; nothing was exchanged (they are different spaces:"
        " keep them apart, or start a new store and copy what you need)"
    )


def adoption(space: str, creator: bytes, label: str) -> str:
    """The one line printed when a store adopts its source's creator."""
    shown = creator.hex()[:16]
    who = label if label.startswith(shown[:8]) else f"{label} ({shown}…)"
    return f"this store now follows space {space!r} created by {who}"


__all__ = [
    "PIN_HINT",
    "REFUSED_RULE",
    "RefusedDeclaration",
    "adoption",
    "authority",
    "check_creator",
    "first_declarer",
    "refusal",
    "refused_declarations",
    "two_spaces",
]
