"""Sync over HTTP: the server (`serve`, `SyncServer`, `SyncApp`) and the client (`sync_with`,
`sync_all`, `SyncReport`) of `sync.protocol`, in one import.

The pieces live in `sync.protocol` (endpoints, framing, limits, errors), `sync.auth` (signed
requests, `AuthMode`), `sync.server` (a WSGI app over one replica, served by waitress),
`sync.tls` (the same app over HTTPS) and `sync.client` (stdlib ``http.client``).
"""

from statefuse.sync.auth import AuthMode
from statefuse.sync.client import (
    CAFILE_ENV,
    DEFAULT_TIMEOUT,
    Progress,
    SyncReport,
    sync_all,
    sync_with,
)
from statefuse.sync.guard import ServerLimits
from statefuse.sync.protocol import (
    MAX_BODY_BYTES,
    MAX_PAGE_CHANGES,
    PAGE_BYTES,
    PROTOCOL_VERSION,
    MalformedResponseError,
    PeerRejectedError,
    PeerTimeoutError,
    PeerUnreachableError,
    ServerIdentityError,
    SyncError,
)
from statefuse.sync.server import SyncApp, SyncServer, serve
from statefuse.sync.tls import TLSSyncServer

__all__ = [
    "CAFILE_ENV",
    "DEFAULT_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_PAGE_CHANGES",
    "PAGE_BYTES",
    "PROTOCOL_VERSION",
    "AuthMode",
    "MalformedResponseError",
    "PeerRejectedError",
    "PeerTimeoutError",
    "PeerUnreachableError",
    "Progress",
    "ServerIdentityError",
    "ServerLimits",
    "SyncApp",
    "SyncError",
    "SyncReport",
    "SyncServer",
    "TLSSyncServer",
    "serve",
    "sync_all",
    "sync_with",
]
