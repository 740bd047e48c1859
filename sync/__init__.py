"""The merge boundary: keys, signed changes, verification, quarantine, trust, the change log
and set reconciliation.

Only `verify_change` turns outside bytes into a `VerifiedChange`; a `ChangeLog` accepts, parks
(pending a missing predecessor) or quarantines every change it receives, and never drops one.
"""

# This folder installs as ``statefuse.sync``; imported as ``sync`` (from the repository
# root) it would be a second copy of every module, whose classes are not ours.
if __name__ != "statefuse.sync":
    raise ImportError(f"import statefuse.sync, not {__name__}")


from typing import TYPE_CHECKING

from statefuse.sync.author import (
    MAX_AUTHOR_NAME_CHARS,
    AuthorNamed,
    author_names,
    check_author_name,
)
from statefuse.sync.change import (
    CHANGE_FORMAT_VERSION,
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    SIGNATURE_DOMAIN,
    UnverifiedChange,
    VerifiedChange,
    sign_change,
)
from statefuse.sync.changelog import (
    ChangeLog,
    Equivocation,
    Fork,
    Ignored,
    Receipt,
    Status,
    TrustConfigError,
)
from statefuse.sync.clock import LAMPORT_JUMP, ClockJump
from statefuse.sync.key import (
    KeyFileError,
    PublicKey,
    PublicKeyError,
    SignatureError,
    SigningKey,
    SigningKeyError,
    verify_signature,
)
from statefuse.sync.pending import (
    DEFAULT_BOUNDS,
    Area,
    AreaFullError,
    Bounds,
    BoundsConfigError,
    Eviction,
    Overflow,
    Standing,
)
from statefuse.sync.quarantine import Quarantine, QuarantineEntry
from statefuse.sync.reconcile import (
    MAX_EXCHANGE_MESSAGES,
    MAX_LIST_IDS,
    MAX_MESSAGE_BYTES,
    MAX_RANGES_PER_MESSAGE,
    ReconcileConfig,
    ReconcileError,
    Reconciler,
    ReconcileResult,
    Reply,
    reconcile_in_memory,
)
from statefuse.sync.trust import (
    AuthorAdmitted,
    AuthorCutOff,
    AuthorRevoked,
    RolesGranted,
    RolesWithdrawn,
    TrustMode,
    TrustState,
    TrustWriter,
    trust_state,
)
from statefuse.sync.verify import QuarantineReason, VerificationError, verify_change, verify_changes
from statefuse.sync.version import UnknownVersionError, Version, VersionError

if TYPE_CHECKING:
    from statefuse.sync.follower import Follower, FollowError, FollowStatus, PeerStatus
    from statefuse.sync.http import SyncError, SyncReport, SyncServer, serve, sync_all, sync_with

__all__ = [
    "CHANGE_FORMAT_VERSION",
    "DEFAULT_BOUNDS",
    "LAMPORT_JUMP",
    "MAX_AUTHOR_NAME_CHARS",
    "MAX_CHANGE_BYTES",
    "MAX_EXCHANGE_MESSAGES",
    "MAX_LIST_IDS",
    "MAX_MESSAGE_BYTES",
    "MAX_OPS_PER_CHANGE",
    "MAX_RANGES_PER_MESSAGE",
    "SIGNATURE_DOMAIN",
    "Area",
    "AreaFullError",
    "AuthorAdmitted",
    "AuthorCutOff",
    "AuthorNamed",
    "AuthorRevoked",
    "Bounds",
    "BoundsConfigError",
    "ChangeLog",
    "ClockJump",
    "Equivocation",
    "Eviction",
    "FollowError",
    "FollowStatus",
    "Follower",
    "Fork",
    "Ignored",
    "KeyFileError",
    "Overflow",
    "PeerStatus",
    "PublicKey",
    "PublicKeyError",
    "Quarantine",
    "QuarantineEntry",
    "QuarantineReason",
    "Receipt",
    "ReconcileConfig",
    "ReconcileError",
    "ReconcileResult",
    "Reconciler",
    "Reply",
    "RolesGranted",
    "RolesWithdrawn",
    "SignatureError",
    "SigningKey",
    "SigningKeyError",
    "Standing",
    "Status",
    "SyncError",
    "SyncReport",
    "SyncServer",
    "TrustConfigError",
    "TrustMode",
    "TrustState",
    "TrustWriter",
    "UnknownVersionError",
    "UnverifiedChange",
    "VerificationError",
    "VerifiedChange",
    "Version",
    "VersionError",
    "author_names",
    "check_author_name",
    "reconcile_in_memory",
    "serve",
    "sign_change",
    "sync_all",
    "sync_with",
    "trust_state",
    "verify_change",
    "verify_changes",
    "verify_signature",
]

#: Sync over HTTP and following peers, imported when first used (they load the HTTP stack:
#: waitress, http.client): name -> module.
_LAZY = {
    **{
        name: "statefuse.sync.http"
        for name in ("SyncError", "SyncReport", "SyncServer", "serve", "sync_all", "sync_with")
    },
    **{
        name: "statefuse.sync.follower"
        for name in ("FollowError", "FollowStatus", "Follower", "PeerStatus")
    },
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'statefuse.sync' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
