"""The trio shell under channels: park a trio task, wake it with ``reschedule``."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import trio

from roost.mailbox._backend import Waiter, set_default_backend

__all__ = ["TRIO_BACKEND", "TrioBackend"]

_reschedule = trio.lowlevel.reschedule
_current_task = trio.lowlevel.current_task
_wait = trio.lowlevel.wait_task_rescheduled
_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class _TrioWaiter(Waiter):
    __slots__ = ("task",)

    def __init__(self) -> None:
        super().__init__()
        self.task: trio.lowlevel.Task | None = None

    def wake(self) -> None:
        assert self.task is not None
        _reschedule(self.task)

    def abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        # Completion and wake happen in one synchronous step, so a waiter being aborted
        # was not completed: mark it done so channels skip its queue entries.
        self.done = True
        return _SUCCEEDED


class TrioBackend:
    """Channels' backend for code running as trio tasks (every plain process)."""

    checkpoint_if_cancelled = staticmethod(trio.lowlevel.checkpoint_if_cancelled)
    cancel_shielded_checkpoint = staticmethod(trio.lowlevel.cancel_shielded_checkpoint)

    def new_waiter(self) -> Waiter:
        """Return a waiter that remembers the trio task to reschedule."""
        return _TrioWaiter()

    def park(self, waiter: Waiter) -> Awaitable[Any]:
        """Return trio's own park awaitable for the current task."""
        assert isinstance(waiter, _TrioWaiter)
        waiter.task = _current_task()
        return _wait(waiter.abort)


TRIO_BACKEND = TrioBackend()
set_default_backend(TRIO_BACKEND)
