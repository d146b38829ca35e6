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

from roost._errors import Error, safe_text, storable
from roost._interrupt import is_ctrl_c
from roost.actors._contain import must_propagate
from roost.storage import Codec

__all__ = ["contain", "describe", "safe_error"]

_REPR_LIMIT: Final = 2000
_CODEC: Final = Codec()


def contain(exc: BaseException) -> Error:
    """The safe ``roost.Error`` for what a handler raised.

    Called in an ``except BaseException`` block; re-raises cancellation and Ctrl-C (or the
    part of an exception group that is either), which a handler must not swallow.

    Raises:
        trio.Cancelled | KeyboardInterrupt | BaseExceptionGroup: ``exc``'s pass-through part.
    """
    if isinstance(exc, BaseExceptionGroup):
        passing, rest = exc.split(lambda e: isinstance(e, trio.Cancelled) or is_ctrl_c(e))
        if passing is not None:
            raise passing
        assert rest is not None
        exc = rest  # reported as the group, as activities and processes report it
    elif must_propagate(exc):
        raise exc
    return safe_error(Error.from_exception(exc))


def safe_error(err: Error) -> Error:
    """``err`` itself when the codec stores and reads it back, else a cleaned copy.

    The copy (see ``roost._errors.storable``) keeps the kind, the message (lone surrogates
    escaped), the retryable flag and every detail the codec can store; a detail it cannot is
    kept as its ``repr``, so the stored error still says what it was. Checked by a round
    trip through the codec: a value the encoder takes but the decoder refuses is not stored.
    """
    cleaned = storable(err)
    if _round_trips(cleaned):
        return cleaned
    details = {
        safe_text(name): value if _round_trips(value) else safe_text(_repr(value), _REPR_LIMIT)
        for name, value in cleaned.details.items()
    }
    copy = Error(cleaned.message, kind=cleaned.kind, retryable=cleaned.retryable, details=details)
    copy.__cause__ = err.__cause__ if err.__cause__ is not None else err
    return copy


def describe(err: Error) -> str:
    """``err`` for a log line: ``[Kind] message``, safe to print.

    Not ``str(err)``: a subclass may override ``__str__``, and the message may hold surrogates.
    """
    return f"[{err.kind.value}] {safe_text(err.message)}"


def _round_trips(value: Any) -> bool:
    try:
        _CODEC.decode(_CODEC.encode(value))
    except Exception:  # noqa: BLE001 - any failure means "store something else instead"
        return False
    return True


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception as inner:  # noqa: BLE001 - a __repr__ that raises, or nests too deep
        return f"<{type(value).__name__} object; repr() raised {type(inner).__name__}>"
