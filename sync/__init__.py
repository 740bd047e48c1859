"""The merge boundary: keys, signed changes, verification, quarantine and the change log.

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
    "MAX_OPS_PER_CHANGE",
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
    "sign_change",
    "trust_state",
    "verify_change",
    "verify_signature",
]
