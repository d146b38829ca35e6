"""The node's value types and the protocol of virtual hosts (split from _node for size)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from roost._errors import Error, ErrorKind
from roost._pid import Pid

if TYPE_CHECKING:
    from roost.actors._app import Entry
    from roost.actors._events import Exit
    from roost.actors._process import Process
    from roost.mailbox._channel import Channel

__all__ = [
    "ExitResult",
    "SpawnRequest",
    "VirtualHost",
    "exit_error",
    "is_cancelled",
    "is_mock_clock",
    "noproc_error",
    "stops_node",
    "terminated_error",
]


@attrs.frozen
class ExitResult:
    """How a process ended: ``value`` when it returned, else ``error``."""

    value: Any
    error: Error | None


@attrs.frozen(kw_only=True)
class SpawnRequest:
    """Everything a spawn needs besides the entry and its arguments."""

    host: str | None = None
    name: str | None = None
    messages: tuple[tuple[str, Any], ...] = ()
    context: Mapping[str, Any] = attrs.field(factory=dict)
    link: bool = False
    monitor: bool = False
    mailbox_limit: int | None = None
    trap_links: bool = False
    pid: Pid | None = None
    watcher: Pid | None = None


def noproc_error(pid: Pid) -> Error:
    """The error an EXIT or LINK_DOWN carries when its target never existed or is dead."""
    return Error(
        f"noproc: process {pid} is not alive",
        kind=ErrorKind.NOT_FOUND,
        retryable=False,
        details={"reason": "noproc", "pid": str(pid)},
        pid=pid,
    )


def terminated_error(pid: Pid, why: str = "terminated") -> Error:
    """The error a hard-stopped process exits with."""
    return Error(why, kind=ErrorKind.CANCELED, retryable=False, details={"reason": why}, pid=pid)


class VirtualHost(Protocol):
    """Processes that are not trio tasks of this node (workflows), reached by PID host."""

    host: str

    def signal(self, sender: Pid | None, pid: Pid, topic: str, payload: Any) -> trio.Event: ...
    def running(self, pid: Pid) -> bool: ...
    def cancel(self, pid: Pid, reason: str | None) -> trio.Event: ...
    def terminate(self, pid: Pid) -> None: ...
    def monitor(self, watcher: Process, pid: Pid) -> None: ...
    def link(self, proc: Process, pid: Pid) -> None: ...
    def unwatch(self, proc: Process, pid: Pid) -> None: ...
    def exit_channel(self, pid: Pid) -> Channel[ExitResult]: ...
    def process_exited(self, watcher: Pid, event: Exit) -> None: ...
    async def spawn(
        self,
        parent: Process,
        *,
        entry: Entry,
        args: tuple[Any, ...],
        options: dict[str, Any],
        messages: tuple[tuple[str, Any], ...],
        context: dict[str, Any],
    ) -> Pid: ...


def is_mock_clock(clock: object) -> bool:
    # A MockClock can only exist if trio.testing was imported; importing it ourselves
    # would pull pytest into every `import roost`.
    testing = sys.modules.get("trio.testing")
    return testing is not None and isinstance(clock, testing.MockClock)


def is_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancelled(e) for e in exc.exceptions)
    return False


def stops_node(exc: BaseException) -> bool:
    """Whether ``exc`` must go on up past a process: cancellation, or a real Ctrl-C.

    Anything else a process raises (``SystemExit``, ``GeneratorExit``, other
    ``BaseException`` subclasses too) is that process's failure, not the node's.
    """
    if isinstance(exc, BaseExceptionGroup):
        return exc.split((trio.Cancelled, KeyboardInterrupt))[0] is not None
    return isinstance(exc, trio.Cancelled | KeyboardInterrupt)


def exit_error(exc: BaseException) -> Error:
    """``Error.from_exception``, or (when that fails: a ``__str__`` that raises) the type alone."""
    try:
        return Error.from_exception(exc)
    except BaseException as inner:  # a hostile __str__ may raise anything
        if isinstance(inner, KeyboardInterrupt):
            raise
        name = type(exc).__qualname__
        return Error(
            f"{name}: <str() of the exception raised {type(inner).__name__}>",
            kind=ErrorKind.INTERNAL,
            details={"type": name},
        )
