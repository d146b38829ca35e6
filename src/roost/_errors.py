"""roost's one error root, its kinds, and the conversion of foreign exceptions."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MAX_TEXT",
    "ChannelClosed",
    "Error",
    "ErrorKind",
    "NondeterminismError",
    "safe_text",
    "storable",
    "storable_leaf",
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
        """Convert any exception into an Error that the codec can always store.

        A plain exception (``SystemExit`` and ``GeneratorExit`` included) becomes kind
        Internal, keeping its qualified type name (``details["type"]``) and its text
        (``details["message"]``). Never raises: a ``__str__`` that raises or recurses falls
        back to ``repr``, then to the type name; lone surrogates are escaped as
        backslash sequences and a text longer than ``MAX_TEXT`` characters is cut. A
        ``roost.Error`` comes back as itself, or as a cleaned copy when its message or
        details hold something the codec refuses (see ``storable``).
        """
        # issubclass of the type, not isinstance: that would consult a __class__ property.
        if issubclass(type(exc), Error):
            return storable(exc)  # type: ignore[arg-type]
        return _foreign(exc)


# Longest text kept from a foreign exception (its message and any repr in details).
MAX_TEXT = 10_000
# Deepest details kept as they are; anything below becomes its (shortened) repr.
_MAX_DEPTH = 32


def safe_text(value: object, limit: int = MAX_TEXT) -> str:
    """``value`` as a plain str the codec accepts: lone surrogates escaped, at most ``limit``.

    Never raises (a ``__str__`` that does is replaced by a description of the failure).
    """
    try:
        text = value if type(value) is str else str.__str__(str(value))
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is described
        text = f"<{type_name(value)} object: str() raised {type(exc).__name__}>"
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text


def shown(value: object) -> str:
    """``repr(value)`` for a message, never raising (user objects may have a hostile repr)."""
    try:
        text = repr(value)
    except BaseException as exc:  # noqa: BLE001 - any failure of user code is described
        text = f"<{type_name(value)} object: repr() raised {type(exc).__name__}>"
    return safe_text(text, 1000)


def type_name(value: object) -> str:
    """The qualified type name of ``value`` (``module.Qualname``, builtins unqualified)."""
    tp = type(value)
    try:
        name: object = tp.__qualname__
        module: object = tp.__module__
    except BaseException:  # noqa: BLE001 - a metaclass may make these raise
        return "<unnamed type>"
    if not isinstance(name, str) or not isinstance(module, str):
        return "<unnamed type>"
    return safe_text(name if module == "builtins" else f"{module}.{name}", 300)


def _exception_text(exc: BaseException) -> str:
    """``str(exc)``, or when that fails its ``repr``, or an account of both failures."""
    try:
        # str.__str__: a plain copy of a str subclass (whose own methods might misbehave).
        return safe_text(str.__str__(str(exc)))
    except BaseException as failed:  # noqa: BLE001 - user code: whatever it raised
        try:
            shown = str.__str__(repr(exc))
        except BaseException as again:  # noqa: BLE001 - user code: whatever it raised
            return f"<str() raised {type(failed).__name__}, repr() raised {type(again).__name__}>"
        return safe_text(f"<str() raised {type(failed).__name__}; repr: {shown}>")


def _foreign(exc: BaseException) -> Error:
    qualified = type_name(exc)
    text = _exception_text(exc)
    err = Error(
        f"{qualified}: {text}" if text else qualified,
        kind=ErrorKind.INTERNAL,
        details={"type": qualified, "message": text},
    )
    err.__cause__ = exc
    return err


def storable(err: Error) -> Error:
    """``err`` itself when the codec can store it, else a copy with cleaned message and details.

    Cleaning escapes lone surrogates, turns a message that is not a str into one, and
    replaces detail values that are not plain data (None, bool, int, float, str, bytes,
    UUID, aware datetime, Pid, Error, and lists / tuples / dicts of those, at most 32 deep)
    by their repr. The copy keeps kind and retryable, has ``err`` as its cause, and is a
    plain ``Error`` unless ``err`` is one of roost's own subclasses.
    """
    try:
        message, details, retryable = err.message, err.details, err.retryable
        kind, pid = ErrorKind(err.kind), err.pid
    except BaseException:  # noqa: BLE001 - a subclass that skipped Error.__init__
        return _foreign(err)
    try:
        clean = (
            type(message) is str
            and _clean_text(message)
            and type(details) is dict
            and _clean(details, 0)
            and (retryable is None or type(retryable) is bool)
        )
    except BaseException:  # noqa: BLE001 - a hostile value (its __eq__, its __hash__)
        clean = False
    if clean:
        return err
    copy = Error.__new__(type(err) if type(err) in _OWN else Error)
    Error.__init__(
        copy,
        safe_text(message),
        kind=kind,
        retryable=retryable if retryable is None or type(retryable) is bool else None,
        details=_cleaned_details(details),
        pid=pid,
    )
    copy.__cause__ = err
    return copy


def _clean_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SCALARS = (type(None), bool, int, float, bytes)


def _clean(value: Any, depth: int) -> bool:
    """Whether ``value`` is plain data the codec stores as it is (see ``storable``)."""
    tp = type(value)
    if tp is str:
        return _clean_text(value)
    if tp in _SCALARS:
        return True
    if depth >= _MAX_DEPTH:
        return False
    if tp is list or tp is tuple:
        return all(_clean(v, depth + 1) for v in value)
    if tp is dict:
        return all(_clean(k, depth + 1) and _clean(v, depth + 1) for k, v in value.items())
    return storable(value) is value if isinstance(value, Error) else _other_ok(value)


# Value types stored as they are in error details. Modules above this one add theirs
# (roost._pid adds Pid): one with values to store is imported already.
_LEAF_TYPES: set[type] = {uuid.UUID}


def storable_leaf(tp: type) -> None:
    """Keep values of ``tp`` as they are in error details (the codec stores them)."""
    _LEAF_TYPES.add(tp)


def _other_ok(value: Any) -> bool:
    if type(value) in _LEAF_TYPES:
        return True
    if type(value) is dt.datetime:
        offset = value.utcoffset()
        return offset is not None and not offset.seconds % 60 and not offset.microseconds
    return False


def _cleaned_details(details: Any) -> dict[str, Any]:
    try:
        items = list(details.items()) if isinstance(details, Mapping) else []
    except BaseException:  # noqa: BLE001 - a hostile mapping: nothing of it is kept
        return {"details": shown(details)}
    return {safe_text(k, 300): _cleaned(v, 1) for k, v in items}


def _cleaned(value: Any, depth: int) -> Any:
    try:
        return _cleaned_or_repr(value, depth)
    except BaseException:  # noqa: BLE001 - a hostile value: its repr is kept instead
        return shown(value)


def _cleaned_or_repr(value: Any, depth: int) -> Any:
    if _clean(value, depth):
        return value
    tp = type(value)
    if tp is str:
        return safe_text(value)
    if isinstance(value, Error):
        return storable(value)
    if depth < _MAX_DEPTH and (tp is list or tp is tuple):
        return [_cleaned(v, depth + 1) for v in value]
    if depth < _MAX_DEPTH and tp is dict:
        return {_cleaned_key(k): _cleaned(v, depth + 1) for k, v in value.items()}
    return shown(value)


def _cleaned_key(key: Any) -> Any:
    tp = type(key)
    if tp is str:
        return safe_text(key, 300)
    if tp in _SCALARS:
        return key
    return shown(key)


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
        escaped(message),
        kind=ErrorKind.INVALID,
        retryable=False,
        details=_escaped_details(details),
    )


def not_found(message: str, **details: Any) -> Error:
    """Build a NotFound error (strings escaped as by ``invalid``)."""
    return Error(
        escaped(message),
        kind=ErrorKind.NOT_FOUND,
        retryable=False,
        details=_escaped_details(details),
    )


def escaped(text: str) -> str:
    r"""``text`` with lone surrogates escaped (U+D800 becomes the six characters ``\ud800``)."""
    return safe_text(text, len(text))


def _escaped_details(details: dict[str, Any]) -> dict[str, Any]:
    for name, value in details.items():
        if isinstance(value, str) and not value.isascii():
            details[name] = escaped(value)
    return details


_OWN: frozenset[type[Error]] = frozenset({NondeterminismError, ChannelClosed})
