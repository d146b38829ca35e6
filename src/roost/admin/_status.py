"""The one ``roost.ErrorKind`` → HTTP status mapping of the admin server (API and console)."""

from __future__ import annotations

from typing import Final

from roost._errors import ErrorKind

__all__ = ["STATUS", "http_status"]

STATUS: Final = {
    ErrorKind.INVALID: 400,
    ErrorKind.PERMISSION_DENIED: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.INVALID_STATE: 409,
    ErrorKind.ALREADY_EXISTS: 409,
    ErrorKind.CONFLICT: 409,
    # A bound was hit (a request body, a mailbox, the node's process limit): retry smaller
    # or later.
    ErrorKind.LIMIT_EXCEEDED: 429,
    ErrorKind.RATE_LIMITED: 429,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.TIMEOUT: 504,
}


def http_status(kind: ErrorKind) -> int:
    """The HTTP status of an error of ``kind``: 500 for the kinds ``STATUS`` does not list."""
    return STATUS.get(kind, 500)
