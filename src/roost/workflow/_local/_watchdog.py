"""``task_timeout``: an activation that does not yield in time is stopped and retried.

Workflow code runs on the node's trio thread, so an activation stuck in a loop would
stall every process of the node. One daemon thread per interpreter watches the
activations in flight; when one passes its deadline it records where the workflow code
is (file:line) and raises ``TaskTimeout`` in the stuck thread (CPython's
``PyThreadState_SetAsyncExc``; like a KeyboardInterrupt, it lands at the next bytecode,
so code blocked inside a C call is stopped when that call returns). The runtime then
discards the activation: nothing of it is committed, and the task is retried later by
replay, as Temporal retries a failed workflow task.
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
import threading
import time
import types
from pathlib import Path

__all__ = ["TaskTimeout", "guard"]

_ROOST_DIR = str(Path(__file__).resolve().parents[1])
_STDLIB_DIR = sysconfig.get_paths()["stdlib"]
_POLL = 0.05


class TaskTimeout(BaseException):
    """Raised inside an activation that ran past its task_timeout.

    A BaseException, so that workflow code catching ``Exception`` does not swallow it.
    """


class Guard:
    """The watch over one thread's activations: the deadline of the one in flight, if any.

    One per thread, armed at each activation's start and disarmed at its end: an
    activation costs two attribute writes and one lock, no object or registration.
    """

    __slots__ = ("armed", "deadline", "fired", "location", "seconds", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.seconds = 0.0
        self.deadline = 0.0
        self.fired = False
        self.armed = False
        self.location = "<unknown>"

    def __enter__(self) -> Guard:
        self.fired = False
        self.location = "<unknown>"
        self.deadline = time.monotonic() + self.seconds
        # Last: the watchdog looks at an armed guard only, so it never sees a deadline
        # of the activation before.
        self.armed = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        with _LOCK:
            self.armed = False
            fired = self.fired
            if fired and exc_type is not TaskTimeout:
                # The activation finished (or swallowed the exception) as the watchdog
                # fired: withdraw an exception still pending, and report the timeout.
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.thread), None)
        if fired and exc_type is not TaskTimeout:
            raise TaskTimeout


def guard(seconds: float) -> Guard:
    """A context manager that raises ``TaskTimeout`` if its body runs over ``seconds``."""
    try:
        mine: Guard = _LOCAL.guard
    except AttributeError:
        mine = _LOCAL.guard = Guard()
        with _LOCK:
            _GUARDS[mine.thread] = mine  # a thread id reused by a new thread: replaced
    if not _THREAD:  # none yet, it ended, or this is a forked child: start one
        _ensure_thread()
    mine.seconds = seconds
    return mine


_LOCK = threading.Lock()
_LOCAL = threading.local()
_GUARDS: dict[int, Guard] = {}
_THREAD: list[threading.Thread] = []


def _ensure_thread() -> None:
    with _LOCK:
        if _THREAD:
            return
        thread = threading.Thread(target=_watch, name="roost.workflow.watchdog", daemon=True)
        _THREAD[:] = [thread]
        try:
            thread.start()
        except BaseException:
            _THREAD.clear()  # not started: the next activation tries again
            raise


def _forked() -> None:
    # A forked child has only the forking thread: no watchdog thread (the next activation
    # starts one), a lock that some thread of the parent may have held at the fork, and
    # the guards of threads that do not exist here.
    global _LOCK  # noqa: PLW0603 - the inherited lock may be held forever: replace it
    _LOCK = threading.Lock()
    _THREAD.clear()
    mine: Guard | None = getattr(_LOCAL, "guard", None)
    _GUARDS.clear()
    if mine is not None:
        mine.armed = mine.fired = False  # no activation of the parent's runs here
        mine.thread = threading.get_ident()
        _GUARDS[mine.thread] = mine


os.register_at_fork(after_in_child=_forked)


def _watch() -> None:
    # ``_THREAD`` holds the thread while it runs: an activation's guard checks that list,
    # not the thread's liveness (several calls each time).
    try:
        _watch_forever()
    finally:
        with _LOCK:
            if _THREAD and _THREAD[0] is threading.current_thread():
                _THREAD.clear()  # the next guard starts another


def _watch_forever() -> None:
    while True:
        time.sleep(_POLL)
        now = time.monotonic()
        with _LOCK:
            for ident, active in _GUARDS.items():
                if not active.armed or active.fired or now < active.deadline:
                    continue
                active.fired = True
                active.location = _where(ident)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(ident), ctypes.py_object(TaskTimeout)
                )


def _where(ident: int) -> str:
    """file:line in function of the innermost frame of user code in thread ``ident``."""
    frame: types.FrameType | None = sys._current_frames().get(ident)
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        here = f"{filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        fallback = fallback or here
        if not filename.startswith((_ROOST_DIR, _STDLIB_DIR)):
            return here
        frame = frame.f_back
    return fallback or "<unknown>"
