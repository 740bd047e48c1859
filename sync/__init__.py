"""The merge boundary: keys, signed changes, verification, quarantine, trust, the change log
and set reconciliation.

Only `verify_change` turns outside bytes into a `VerifiedChange`; a `ChangeLog` accepts, parks
(pending a missing predecessor) or quarantines every change it receives, and never drops one.
"""

from sync.change import (
    CHANGE_FORMAT_VERSION,
    MAX_CHANGE_BYTES,
    MAX_OPS_PER_CHANGE,
    SIGNATURE_DOMAIN,
    UnverifiedChange,
    VerifiedChange,
    sign_change,
)
from sync.changelog import ChangeLog, Equivocation, Ignored, Receipt, Status, TrustConfigError
from sync.key import (
    KeyFileError,
    PublicKey,
    PublicKeyError,
    SignatureError,
    SigningKey,
    SigningKeyError,
    verify_signature,
)
from sync.quarantine import Quarantine, QuarantineEntry
from sync.reconcile import (
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
from sync.trust import (
    AuthorAdmitted,
    AuthorRevoked,
    RolesGranted,
    RolesWithdrawn,
    TrustMode,
    TrustState,
    TrustWriter,
    trust_state,
)
from sync.verify import QuarantineReason, VerificationError, verify_change

__all__ = [
    "CHANGE_FORMAT_VERSION",
    "MAX_CHANGE_BYTES",
    "MAX_EXCHANGE_MESSAGES",
    "MAX_LIST_IDS",
    "MAX_MESSAGE_BYTES",
    "MAX_OPS_PER_CHANGE",
    "MAX_RANGES_PER_MESSAGE",
    "SIGNATURE_DOMAIN",
    "AuthorAdmitted",
    "AuthorRevoked",
    "ChangeLog",
    "Equivocation",
    "Ignored",
    "KeyFileError",
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
    "Status",
    "TrustConfigError",
    "TrustMode",
    "TrustState",
    "TrustWriter",
    "UnverifiedChange",
    "VerificationError",
    "VerifiedChange",
    "reconcile_in_memory",
    "sign_change",
    "trust_state",
    "verify_change",
    "verify_signature",
]
