"""Telling a real Ctrl-C from a ``KeyboardInterrupt`` that user code raised itself.

trio turns SIGINT into ``KeyboardInterrupt`` with its own signal handler: raised right in
whatever code runs (its ``handler`` frame is the innermost one of the traceback), or, in
KI-protected code, delivered to the main task at its next checkpoint (raised from trio's
run loop). Either way the innermost frame is trio's. A ``KeyboardInterrupt`` whose
innermost frame is anything else was raised by code (``raise KeyboardInterrupt`` in an
activity, a handler, workflow code): it is that code's failure, like ``SystemExit``, and
must not stop the node, or a replay or a redelivery raises it again at every start.

When trio's handler is not the one installed (the application set its own, or trio runs
outside the main thread), the origin cannot be told, and every ``KeyboardInterrupt``
counts as a real Ctrl-C. No trio import: the workflow driver uses this too.
"""

from __future__ import annotations

import signal

__all__ = ["is_ctrl_c"]


def _from_trio(module: object) -> bool:
    return isinstance(module, str) and (module == "trio" or module.startswith("trio."))


def is_ctrl_c(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``KeyboardInterrupt`` that a real SIGINT caused."""
    if not issubclass(type(exc), KeyboardInterrupt):
        return False
    if not _from_trio(getattr(signal.getsignal(signal.SIGINT), "__module__", None)):
        return True
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    return _from_trio(tb.tb_frame.f_globals.get("__name__"))
