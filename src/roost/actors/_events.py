"""The events a process receives on ``process.events()``, and how a process ended."""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any, ClassVar

import attrs

from roost._errors import Error
from roost._pid import Pid

__all__ = ["Cancel", "Event", "EventKind", "Exit", "ExitResult", "LinkDown"]


class EventKind(enum.StrEnum):
    """Event kinds, spelled as Wippy's wire kinds."""

    EXIT = "pid.exit"
    LINK_DOWN = "pid.link.down"
    CANCEL = "pid.cancel"


@attrs.frozen
class Exit:
    """A monitored process (or workflow) ended: ``value`` if it returned, else ``error``."""

    kind: ClassVar[EventKind] = EventKind.EXIT
    pid: Pid
    value: Any
    error: Error | None
    at: dt.datetime


@attrs.frozen
class LinkDown:
    """A linked process ended with an error (delivered only with ``trap_links``)."""

    kind: ClassVar[EventKind] = EventKind.LINK_DOWN
    pid: Pid
    error: Error
    at: dt.datetime


@attrs.frozen
class Cancel:
    """Someone asked this process to stop; cooperative, with an optional reason."""

    kind: ClassVar[EventKind] = EventKind.CANCEL
    reason: str | None
    at: dt.datetime


Event = Exit | LinkDown | Cancel


@attrs.frozen
class ExitResult:
    """How a process (or workflow) ended: ``value`` when it returned, else ``error``."""

    value: Any
    error: Error | None
