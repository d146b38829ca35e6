"""Containment of trigger handlers: whatever one raises fails that delivery, never the node.

A queue, cron, HTTP or subscription handler is user code, and user code can raise anything:
``SystemExit``, ``GeneratorExit``, a ``BaseException`` subclass, an exception whose
``__str__`` raises, a ``roost.Error`` whose message has lone surrogates or whose details the
codec cannot store. ``contain`` turns all of it into one ``roost.Error`` that is safe to
print, to send as JSON and to store (it round-trips through the codec), so the delivery
fails with the real error and the node goes on. Two things pass through untouched:
``trio.Cancelled`` (a timeout or the node stopping: its cancel scope must see it) and
``KeyboardInterrupt`` (a real Ctrl-C still stops the node).
"""

from __future__ import annotations

from typing import Any, Final

import trio

from roost._errors import Error, ErrorKind
from roost.storage import Codec

__all__ = ["PASS_THROUGH", "clean_text", "contain", "describe", "safe_error"]

PASS_THROUGH: Final = (trio.Cancelled, KeyboardInterrupt)
_REPR_LIMIT: Final = 2000
_CODEC: Final = Codec()


def contain(exc: BaseException) -> Error:
    """The safe ``roost.Error`` for what a handler raised.

    Called in an ``except BaseException`` block; re-raises cancellation and Ctrl-C (or the
    part of an exception group that is either), which a handler must not swallow.

    Raises:
        trio.Cancelled | KeyboardInterrupt | BaseExceptionGroup: ``exc``'s pass-through part.
    """
    if isinstance(exc, PASS_THROUGH):
        raise exc
    if isinstance(exc, BaseExceptionGroup):
        passing, rest = exc.split(PASS_THROUGH)
        if passing is not None:
            raise passing
        assert rest is not None
        if len(rest.exceptions) == 1:  # one failure in a nursery: report that failure
            return contain(rest.exceptions[0])
    if isinstance(exc, Error):
        return safe_error(exc)
    qualified = _type_name(exc)
    text = clean_text(_text(exc))
    err = Error(
        f"{qualified}: {text}" if text else qualified,
        kind=ErrorKind.INTERNAL,
        details={"type": qualified, "message": text},
    )
    err.__cause__ = exc  # kept for the traceback in logs; never stored
    return err


def safe_error(err: Error) -> Error:
    """``err`` itself when the codec stores and reads it back, else a cleaned copy.

    The copy keeps the kind, the message (lone surrogates escaped, as ``clean_text`` does), the
    retryable flag and every detail the codec can store; a detail it cannot is kept as its
    ``repr``, so the stored error still says what it was.
    """
    if (
        _round_trips(err)
        and isinstance(err.message, str)
        and clean_text(err.message) == err.message
    ):
        return err
    message = clean_text(err.message if isinstance(err.message, str) else _repr(err.message))
    details: dict[str, Any] = {}
    raw = err.details if isinstance(err.details, dict) else {}
    for name, value in raw.items():
        key = clean_text(name if isinstance(name, str) else _repr(name))
        details[key] = value if _round_trips(value) else clean_text(_repr(value))
    retryable = err.retryable if isinstance(err.retryable, bool) else None
    try:
        kind = ErrorKind(err.kind)
    except ValueError:
        kind = ErrorKind.UNKNOWN
    copy = Error(message, kind=kind, retryable=retryable, details=details)
    copy.__cause__ = err.__cause__ if err.__cause__ is not None else err
    return copy


def describe(err: Error) -> str:
    """``err`` for a log line: ``[Kind] message``, safe to print.

    Not ``str(err)``: a subclass may override ``__str__``, and the message may hold surrogates.
    """
    message = err.message if isinstance(err.message, str) else _repr(err.message)
    return f"[{err.kind.value}] {clean_text(message)}"


def clean_text(text: str) -> str:
    r"""``text`` with lone surrogates escaped: U+D800 becomes the six characters ``\ud800``."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _round_trips(value: Any) -> bool:
    # Decoded again too: a value the encoder takes but the decoder refuses must not be stored.
    try:
        _CODEC.decode(_CODEC.encode(value))
    except Exception:  # noqa: BLE001 - any failure means "store something else instead"
        return False
    return True


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    try:
        name, module = str(cls.__qualname__), str(cls.__module__)
    except Exception:  # noqa: BLE001 - a hostile metaclass: fall back to the plain name
        return clean_text(getattr(cls, "__name__", "BaseException"))
    return clean_text(name if module == "builtins" else f"{module}.{name}")


def _text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except BaseException as inner:  # a __str__ that raises (even SystemExit)
        if isinstance(inner, PASS_THROUGH):
            raise
        return f"<str() of the exception raised {type(inner).__name__}>"
    return text if isinstance(text, str) else ""


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except BaseException as inner:  # a __repr__ that raises, or nests too deep
        if isinstance(inner, PASS_THROUGH):
            raise
        return f"<{type(value).__name__} object; repr() raised {type(inner).__name__}>"
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."
