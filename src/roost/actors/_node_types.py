"""The node's value types (split from _node for size)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._events import ExitResult

__all__ = [
    "ExitResult",
    "SpawnRequest",
    "is_cancelled",
    "is_mock_clock",
    "noproc_error",
    "shutdown_error",
    "terminated_error",
]


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


def shutdown_error(pid: Pid, by: str) -> Error:
    """The error of a process stopped at once by a shutdown it could not hear.

    Its exit reason is ``shutdown``, as OTP gives a process that does not trap exits when
    its supervisor shuts it down: an orderly stop, not a crash (kind Canceled).
    """
    return Error(
        f"shutdown: stopped at once by the {by}, as it never opened process.events() to "
        "hear the Cancel",
        kind=ErrorKind.CANCELED,
        retryable=False,
        details={"reason": "shutdown", "by": by},
        pid=pid,
    )


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
