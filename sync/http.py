"""Sync over HTTP: the server (`serve`, `SyncServer`, `SyncApp`) and the client (`sync_with`,
`sync_all`, `SyncReport`) of `sync.protocol`, in one import.

The pieces live in `sync.protocol` (endpoints, framing, limits, errors), `sync.server` (a WSGI
app over one replica, served by waitress) and `sync.client` (stdlib ``http.client``).
"""

from statefuse.sync.client import DEFAULT_TIMEOUT, Progress, SyncReport, sync_all, sync_with
from statefuse.sync.protocol import (
    MAX_BODY_BYTES,
    MAX_PAGE_CHANGES,
    PAGE_BYTES,
    PROTOCOL_VERSION,
    MalformedResponseError,
    PeerRejectedError,
    PeerTimeoutError,
    PeerUnreachableError,
    SyncError,
)
from statefuse.sync.server import SyncApp, SyncServer, serve

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_BODY_BYTES",
    "MAX_PAGE_CHANGES",
    "PAGE_BYTES",
    "PROTOCOL_VERSION",
    "MalformedResponseError",
    "PeerRejectedError",
    "PeerTimeoutError",
    "PeerUnreachableError",
    "Progress",
    "SyncApp",
    "SyncError",
    "SyncReport",
    "SyncServer",
    "serve",
    "sync_all",
    "sync_with",
]
