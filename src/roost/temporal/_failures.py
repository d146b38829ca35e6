"""``roost.Error`` across Temporal: an ``ApplicationError`` whose ``type`` is the kind.

The roost error itself travels as the failure's first detail (encoded by roost's codec),
so its kind, message, ``retryable`` and details come back exactly; a failure roost did not
write (a Temporal timeout, a terminate, an error from hand-written temporalio code) is
mapped to the roost kind that means the same.
"""

from __future__ import annotations

from typing import Any, Final

import temporalio.exceptions as tx
from temporalio.client import WorkflowFailureError

from roost._errors import Error, ErrorKind

__all__ = [
    "UNSUPPORTED",
    "application_error",
    "error_of",
    "terminated",
    "unsupported",
]

UNSUPPORTED: Final = "is not supported on the Temporal host yet"

_KINDS: Final = {kind.value: kind for kind in ErrorKind}


def unsupported(what: str, *, kind: ErrorKind = ErrorKind.INVALID_STATE) -> Error:
    """The error of a roost feature this host does not carry out yet (docs/temporal.md)."""
    return Error(
        f"{what} {UNSUPPORTED} (docs/temporal.md lists what is); run this workflow on the "
        "embedded host, or do without it",
        kind=kind,
        retryable=False,
    )


def application_error(error: Error) -> tx.ApplicationError:
    """``error`` as the ``ApplicationError`` Temporal records (``type`` = its kind).

    ``non_retryable`` is ``retryable is False``; a kind in a retry policy's
    ``non_retryable_error_kinds`` is matched by Temporal as a ``non_retryable_error_type``.
    """
    return tx.ApplicationError(
        error.message, error, type=error.kind.value, non_retryable=error.retryable is False
    )


def terminated() -> Error:
    """What a terminated workflow exits with (as on the embedded host)."""
    return Error(
        "terminated", kind=ErrorKind.CANCELED, retryable=False, details={"reason": "terminated"}
    )


def error_of(exc: BaseException) -> Error:  # noqa: PLR0911 - one arm per failure kind
    """The roost error a Temporal failure stands for (the cause of a wrapper error)."""
    while isinstance(exc, tx.ActivityError | tx.ChildWorkflowError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, WorkflowFailureError):
        return error_of(exc.cause)
    if isinstance(exc, Error):
        return exc
    if isinstance(exc, tx.ApplicationError):
        return _from_application(exc)
    if isinstance(exc, tx.TerminatedError):
        return terminated()
    if isinstance(exc, tx.CancelledError):
        return Error(exc.message or "canceled", kind=ErrorKind.CANCELED, retryable=False)
    if isinstance(exc, tx.TimeoutError):
        kind = exc.type.name.lower() if exc.type is not None else "timeout"
        return Error(
            f"timed out ({kind}): {exc.message}",
            kind=ErrorKind.TIMEOUT,
            details={"timeout_type": kind},
        )
    return Error.from_exception(exc)


def _from_application(exc: tx.ApplicationError) -> Error:
    details: Any = exc.details
    if details and isinstance(details[0], Error):
        return details[0]
    kind = _KINDS.get(exc.type or "", ErrorKind.UNKNOWN)
    return Error(
        exc.message,
        kind=kind,
        retryable=False if exc.non_retryable else None,
        details={"type": exc.type} if kind is ErrorKind.UNKNOWN and exc.type else None,
    )
