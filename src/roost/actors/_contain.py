"""Which exceptions user code may fail with, and which must reach trio.

User code (a process body, an activity) fails with anything it raises, ``SystemExit`` and
``GeneratorExit`` included: that ends the process or the attempt, never the node. Two
kinds of exception are not the user code's to catch:

- ``trio.Cancelled`` from outside (the node is being torn down): trio needs it back;
- a real Ctrl-C: trio raises it wherever the main thread happens to be running, user code
  included, and it must stop the node. A ``KeyboardInterrupt`` that user code raised
  itself is told apart by where it was raised (``roost._interrupt``) and is that code's
  failure.

In a worker thread (a sync activity) no signal is ever delivered, so a
``KeyboardInterrupt`` there is user code like any other exception: ``in_worker_thread``
turns it into the attempt's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from roost._errors import Error
from roost._interrupt import is_ctrl_c

__all__ = ["in_worker_thread", "must_propagate"]


def must_propagate(exc: BaseException) -> bool:
    """Whether ``exc`` (or a member of a group) is a Cancelled or a real Ctrl-C."""
    # The type, not isinstance: user code may give its exception a __class__ property.
    tp = type(exc)
    if issubclass(tp, trio.Cancelled):
        return True
    if issubclass(tp, KeyboardInterrupt):
        return is_ctrl_c(exc)
    if issubclass(tp, BaseExceptionGroup):
        return any(must_propagate(e) for e in exc.exceptions)  # type: ignore[attr-defined]
    return False


def in_worker_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Call ``fn(*args)`` in a worker thread; what is not an Exception becomes an Error.

    ``trio.to_thread.run_sync`` re-raises a thread's exception in the trio task as it is,
    so a ``KeyboardInterrupt`` or ``SystemExit`` from the thread would look like a real
    Ctrl-C (or an exit request) there. Converted here, it is the call's error.
    """
    try:
        return fn(*args)
    except Exception:
        raise
    except BaseException as exc:  # user code's: no signal ever reaches a worker thread
        raise Error.from_exception(exc) from exc
