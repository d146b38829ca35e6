"""What workflow code awaits on a driver: futures, activity handles, parked channel waits.

Each awaitable is its own iterator (``__await__`` returns it, ``__next__`` yields it once
to the driver, which records the waiting coroutine on it), so a wait costs one object.
"""

from __future__ import annotations

import contextvars
from collections.abc import Coroutine, Generator
from typing import Any, Protocol

from roost._errors import Error
from roost.actors._workflow_ops import WorkflowOps
from roost.mailbox._backend import Backend, Waiter

__all__ = ["PARKS", "DriverView", "DriverWaiter", "Future", "Task", "WorkflowActivity"]


class DriverView(WorkflowOps, Protocol):
    """The driver as its awaitables and its host's ports see it (``Driver`` implements it).

    Workflow code reaches the driver through ``WorkflowOps``; the awaitables requeue
    parked coroutines and cancel activities; a port installs the driver's channel backend.
    """

    @property
    def backend(self) -> Backend:
        """The channel backend of the driver's workflow code."""
        ...

    _ready: list[Task]

    def cancel_activity(self, seq: int, entry: str) -> None:
        """Stop waiting for activity ``seq``."""
        ...


class Task:
    """One coroutine of a run; ``throw``: the error to resume it with, when queued so."""

    __slots__ = ("coro", "ctx", "main", "name", "throw")

    def __init__(self, coro: Coroutine[Any, Any, Any], ctx: contextvars.Context, name: str) -> None:
        self.coro = coro
        self.ctx = ctx
        self.name = name
        self.main = False
        self.throw: BaseException | None = None


class DriverWaiter(Waiter):
    """A channel operation's parked coroutine; it is itself what the coroutine yields.

    Its own awaitable (``__await__`` returns it, ``__next__`` yields it once), so parking
    makes no ``Park`` object or generator: one object per wait, kept while a run is idle.
    """

    __slots__ = ("driver", "task")

    def __init__(self, driver: DriverView) -> None:
        super().__init__()
        self.driver = driver
        self.task: Task | None = None

    def wake(self) -> None:
        """Queue the parked coroutine on its driver."""
        assert self.task is not None
        self.driver._ready.append(self.task)

    def __await__(self) -> Generator[Any, None, None]:
        return self  # type: ignore[return-value]  # an iterator: all ``await`` needs

    def __next__(self) -> DriverWaiter:
        # Yielded once: the driver sets ``task`` on what it receives, and the next resume
        # (after ``wake``) ends the await.
        if self.task is None:
            return self
        raise StopIteration


class Future:
    """A command's result: parked on until the matching event arrives.

    Its own awaitable, like ``DriverWaiter``: awaiting yields the future itself to the
    driver, which records the waiting coroutine in ``task``.
    """

    __slots__ = ("driver", "error", "resolved", "task", "value")

    def __init__(self, driver: DriverView) -> None:
        self.driver = driver
        self.task: Task | None = None
        self.resolved = False
        self.value: Any = None
        self.error: Error | None = None

    def resolve(self, value: Any, error: Error | None) -> None:
        self.resolved = True
        self.value, self.error = value, error
        task = self.task
        if task is not None:
            self.task = None
            self.driver._ready.append(task)

    def __await__(self) -> Generator[Any, None, Any]:
        return self  # type: ignore[return-value]  # an iterator: all ``await`` needs

    def __next__(self) -> Future:
        if not self.resolved:
            return self
        if self.error is not None:
            raise self.error.clone()
        raise StopIteration(self.value)


class WorkflowActivity(Future):
    """``funcs.start`` inside a workflow: await it for the result, or ``cancel()`` it.

    The handle is the future the activity's result resolves (one object per activity).
    """

    __slots__ = ("_entry", "_seq")

    def __init__(self, driver: DriverView, seq: int, entry: str) -> None:
        # Future's fields set here: no chained ``__init__`` call on every activity.
        self.driver, self.task, self.resolved = driver, None, False
        self.value, self.error = None, None
        self._seq, self._entry = seq, entry

    @property
    def done(self) -> bool:
        """Whether the result (or the error) is in."""
        return self.resolved

    def cancel(self) -> None:
        """Stop waiting for it; awaiting the handle then raises Canceled.

        Its stored task is dropped and a running attempt is stopped. A no-op once the
        result is in.
        """
        self.driver.cancel_activity(self._seq, self._entry)


# What a workflow coroutine may yield to its driver (anything else is a foreign awaitable).
PARKS: frozenset[type] = frozenset({DriverWaiter, Future, WorkflowActivity})
