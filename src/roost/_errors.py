"""roost's one error root, its kinds, and the conversion of foreign exceptions."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ChannelClosed",
    "Error",
    "ErrorKind",
    "NondeterminismError",
]


class ErrorKind(enum.StrEnum):
    """What went wrong, in Wippy's vocabulary (plus two of roost's own)."""

    UNKNOWN = "Unknown"
    NOT_FOUND = "NotFound"
    ALREADY_EXISTS = "AlreadyExists"
    INVALID = "Invalid"
    PERMISSION_DENIED = "PermissionDenied"
    UNAVAILABLE = "Unavailable"
    INTERNAL = "Internal"
    CANCELED = "Canceled"
    CONFLICT = "Conflict"
    TIMEOUT = "Timeout"
    RATE_LIMITED = "RateLimited"
    LIMIT_EXCEEDED = "LimitExceeded"
    INVALID_STATE = "InvalidState"


class Error(Exception):
    """The root of every error roost raises, and the error type processes exit with.

    Args:
        message: what was wrong, and how to fix it.
        kind: the category; decides retries and HTTP status codes.
        retryable: True / False, or None when the kind's default applies.
        details: structured fields (a mapping of plain values).
        pid: the process the error is about, when there is one.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind | str = ErrorKind.UNKNOWN,
        retryable: bool | None = None,
        details: Mapping[str, Any] | None = None,
        pid: object | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = ErrorKind(kind)
        self.retryable = retryable
        self.details: dict[str, Any] = dict(details or {})
        self.pid = pid

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, kind={self.kind.value})"

    def __str__(self) -> str:
        return f"[{self.kind.value}] {self.message}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Error):
            return NotImplemented
        return (
            type(self) is type(other)
            and self.kind == other.kind
            and self.message == other.message
            and self.retryable == other.retryable
            and self.details == other.details
        )

    def __hash__(self) -> int:
        return hash((type(self), self.kind, self.message))

    def clone(self) -> Error:
        """Return a fresh copy, so re-raising in another task keeps tracebacks apart."""
        copy = type(self).__new__(type(self))
        Error.__init__(
            copy,
            self.message,
            kind=self.kind,
            retryable=self.retryable,
            details=self.details,
            pid=self.pid,
        )
        copy.__cause__ = self.__cause__
        return copy

    @classmethod
    def from_exception(cls, exc: BaseException) -> Error:
        """Convert any exception into an Error; a plain exception becomes kind Internal."""
        if isinstance(exc, Error):
            return exc
        kind_name = type(exc).__qualname__
        module = type(exc).__module__
        qualified = kind_name if module == "builtins" else f"{module}.{kind_name}"
        text = str(exc)
        err = Error(
            f"{qualified}: {text}" if text else qualified,
            kind=ErrorKind.INTERNAL,
            details={"type": qualified, "message": text},
        )
        err.__cause__ = exc
        return err


class NondeterminismError(Error):
    """Replaying a workflow issued a command that its recorded history does not match."""

    def __init__(self, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, kind=ErrorKind.INTERNAL, retryable=False, details=details)


class ChannelClosed(Error):  # noqa: N818 - API name (mirrors trio.ClosedResourceError usage)
    """A send on a closed channel, or a receive on a closed and drained one."""

    def __init__(self, message: str = "channel is closed") -> None:
        super().__init__(message, kind=ErrorKind.INVALID_STATE, retryable=False)


def invalid(message: str, **details: Any) -> Error:
    """Build an Invalid error (bad input at the call site; nothing was changed).

    Strings in the message and details that hold lone surrogates (copied from the bad
    input) are escaped: the error itself must stay storable and printable.
    """
    return Error(
        _storable(message), kind=ErrorKind.INVALID, retryable=False, details=_clean(details)
    )


def not_found(message: str, **details: Any) -> Error:
    """Build a NotFound error (strings escaped as by ``invalid``)."""
    return Error(
        _storable(message), kind=ErrorKind.NOT_FOUND, retryable=False, details=_clean(details)
    )


def _storable(text: str) -> str:
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _clean(details: dict[str, Any]) -> dict[str, Any]:
    for name, value in details.items():
        if isinstance(value, str) and not value.isascii():
            details[name] = _storable(value)
    return details
