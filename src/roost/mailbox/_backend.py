"""How a channel operation parks and wakes its caller, without importing a scheduler.

Channels and mailboxes are plain state machines. When an operation must wait, it asks the
*backend* of the running code to park: the trio backend parks a trio task; the workflow
driver (which steps coroutines itself, for deterministic replay) parks a workflow
coroutine. The backend in force is a context variable, with a process-wide default that the
trio shell installs on import.
"""

from __future__ import annotations

from collections.abc import Awaitable
from contextvars import ContextVar
from typing import Any, Protocol

from roost._errors import Error, ErrorKind

__all__ = ["Backend", "Waiter", "current_backend", "set_default_backend", "use_backend"]


class Waiter:
    """One parked operation (a receive, a send, or a whole select).

    A completer sets ``done`` and the result fields, then calls ``wake``. Channels skip
    waiters that are already done (completed through another case, or aborted).
    """

    __slots__ = ("done", "index", "ok", "value")

    def __init__(self) -> None:
        self.done = False
        self.index = 0
        self.value: Any = None
        self.ok = True

    def wake(self) -> None:
        """Make the parked code runnable again (implemented by each backend)."""
        raise Error(
            "this waiter belongs to no backend; channels must be used inside roost",
            kind=ErrorKind.INTERNAL,
        )


class Backend(Protocol):
    """What channels need from a scheduler."""

    async def checkpoint_if_cancelled(self) -> None:
        """Raise if the caller has been cancelled (a cancel point; yields only then)."""

    async def cancel_shielded_checkpoint(self) -> None:
        """Yield to the scheduler without being a cancel point."""

    def new_waiter(self) -> Waiter:
        """Return a waiter that this backend knows how to park and wake."""

    def park(self, waiter: Waiter) -> Awaitable[Any]:
        """An awaitable that suspends until ``waiter.wake()``.

        On cancellation it marks the waiter done and raises. A plain method returning the
        scheduler's own awaitable, so parking adds no coroutine frame of ours.
        """


_default: Backend | None = None
_override: ContextVar[Backend | None] = ContextVar("roost_backend", default=None)


def set_default_backend(backend: Backend) -> None:
    """Install the backend used where no override is in force (the trio shell's)."""
    global _default  # noqa: PLW0603 - one process-wide default, set once at import
    _default = backend


def use_backend(backend: Backend | None) -> object:
    """Override the backend in the current context; returns a token for ``reset``."""
    return _override.set(backend)


def current_backend() -> Backend:
    """Return the backend for the running code."""
    backend = _override.get() or _default
    if backend is None:
        raise Error(
            "no scheduler backend is installed: import roost (not only roost.mailbox) "
            "before using channels",
            kind=ErrorKind.INVALID_STATE,
        )
    return backend
