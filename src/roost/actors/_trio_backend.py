"""The trio shell under channels: park a trio task, wake it with ``reschedule``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from roost.mailbox._backend import Waiter, set_default_backend

__all__ = ["TRIO_BACKEND", "TrioBackend"]

_reschedule = trio.lowlevel.reschedule
_current_task = trio.lowlevel.current_task
_wait = trio.lowlevel.wait_task_rescheduled
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class _TrioWaiter(Waiter):
    """A parked trio task; the waiter is also trio's abort function for the park.

    Passing the waiter itself (rather than a bound method) to ``wait_task_rescheduled``
    saves an object per park, which every idle process would otherwise carry.
    """

    __slots__ = ("task",)

    def __init__(self) -> None:
        # Every field set here rather than through Waiter.__init__: one call less per park.
        self.done = False
        self.index = 0
        self.value: Any = None
        self.ok = True
        self.task = _current_task()

    def wake(self) -> None:
        _reschedule(self.task)

    def __call__(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        # Completion and wake happen in one synchronous step, so a waiter being aborted
        # was not completed: mark it done so channels skip its queue entries.
        self.done = True
        return _SUCCEEDED


class TrioBackend:
    """Channels' backend for code running as trio tasks (every plain process).

    Every member is trio's function (or the waiter class) itself rather than a method
    wrapping it: channel operations call them on every park, and each wrapper would be
    one more Python call per message.
    """

    checkpoint_if_cancelled = staticmethod(trio.lowlevel.checkpoint_if_cancelled)
    cancel_shielded_checkpoint = staticmethod(trio.lowlevel.cancel_shielded_checkpoint)
    # A waiter remembering the calling trio task, to reschedule it.
    new_waiter: Callable[[], Waiter] = _TrioWaiter
    # trio's own park awaitable for the current task; the waiter is its abort function.
    park: Callable[[Waiter], Awaitable[Any]] = staticmethod(_wait)  # type: ignore[assignment]


TRIO_BACKEND = TrioBackend()
set_default_backend(TRIO_BACKEND)
