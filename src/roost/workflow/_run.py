"""An open workflow run, as the runtime keeps it in memory."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from roost._errors import Error
from roost._pid import Pid
from roost.actors._app import Entry
from roost.actors._node import ExitResult
from roost.mailbox._channel import Channel
from roost.workflow._driver import Driver
from roost.workflow._records import RunRecord, TimerTask

__all__ = ["Pending", "Run", "Settled"]


@attrs.frozen
class Settled:
    """A finished activity task or timer row: the activation recording its event deletes it.

    Until then the row stays stored, so a crash before that commit runs the activity (or
    fires the timer) again, and the event is recorded exactly once.
    """

    table: str
    row: bytes


# An event waiting for the run's next activation, keyed by where it is stored: its inbox
# row, or the task or timer row it settles.
Pending = tuple[bytes | Settled, Any]


@attrs.define(eq=False)
class Run:
    """An open run, loaded in memory (its driver is rebuilt by replay when missing)."""

    record: RunRecord
    entry: Entry
    pid: Pid
    context: dict[str, Any]
    driver: Driver | None = None
    pending: list[Pending] = attrs.field(factory=list)
    inbox_seq: int = 0
    next_index: int = 1
    queued: bool = False
    active: bool = False
    broken: Error | None = None
    exits_reported: set[Pid] = attrs.field(factory=set)
    pending_start: list[tuple[bytes, bytes, Any]] = attrs.field(factory=list)
    watchers: set[Pid] = attrs.field(factory=set)
    links: set[Pid] = attrs.field(factory=set)
    exit_chans: list[Channel[ExitResult]] = attrs.field(factory=list)
    timers: list[TimerTask] = attrs.field(factory=list)  # its own, stored with its start
    held: bool = False  # waiting for its start time (start_delay, retry backoff, cron)
    closing: bool = False  # closed from outside (terminate, a timeout): no activations
    idle: trio.Event | None = None  # set when an activation in flight has finished
    closed_event: trio.Event | None = None
    backoff: bool = False  # a failed workflow task waits before its retry
    task_failures: int = 0

    async def wait_closed(self) -> None:
        """Wait until a close from outside has committed (see ``mark_closed``)."""
        if self.closed_event is None:
            self.closed_event = trio.Event()
        await self.closed_event.wait()

    def mark_closed(self) -> None:
        """Wake whoever waits in ``wait_closed``."""
        if self.closed_event is None:
            self.closed_event = trio.Event()
        self.closed_event.set()
