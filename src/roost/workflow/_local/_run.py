"""An open workflow run, as the runtime keeps it in memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

from roost._pid import Pid
from roost.actors._app import Entry
from roost.actors._node import ExitResult
from roost.mailbox._channel import Channel
from roost.workflow._driver import Driver
from roost.workflow._history import Event
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._records import InboxItem, RunRecord, TimerTask

__all__ = ["NO_ROW", "Pending", "Run", "Settled"]

# The shared empty value of a Run's sets until one is needed: most runs never get a link or
# a reported exit, and an empty set costs 216 bytes (and a collector visit) per open run.
_NONE: frozenset[Pid] = frozenset()
# The context of every run started without context values (most): one shared dict, never
# written (context values are only read, ``roost.ctx``), instead of an empty one per run.
_NO_CONTEXT: dict[str, Any] = {}


@attrs.frozen
class Settled:
    """A finished activity task or timer row: the activation recording its event deletes it.

    Until then the row stays stored, so a crash before that commit runs the activity (or
    fires the timer) again, and the event is recorded exactly once.
    """

    table: str  # NO_ROW: nothing stored to delete (see NO_ROW)
    row: bytes


# The table of a Settled event with no row of its own: an activity whose first attempt
# succeeded is recorded only by the command that scheduled it (see _pending).
NO_ROW = ""

# An event waiting for the run's next activation, keyed by where it is stored: its inbox
# row, or the task or timer row it settles.
Pending = tuple[bytes | Settled, InboxItem]


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
    # What it is doing (see _runs): changed only through RunTable.move, or set before
    # the run enters the table (HELD for a run waiting for its start time).
    phase: RunPhase = RunPhase.IDLE
    # Sets and sequences start as shared empty immutables (see _NONE); change them through
    # the methods below, or by assigning a new value.
    exits_reported: set[Pid] | frozenset[Pid] = _NONE
    pending_start: Sequence[tuple[bytes, bytes, Event]] = ()
    watchers: set[Pid] | frozenset[Pid] = _NONE
    links: set[Pid] | frozenset[Pid] = _NONE
    exit_chans: Sequence[Channel[ExitResult]] = ()
    timers: Sequence[TimerTask] = ()  # its own, stored with its start
    # Stored, armed and not yet fired (see DurableTimers): their rows go when the run closes.
    armed_timers: tuple[TimerTask, ...] = ()
    drained: trio.Event | None = None  # set when an activation in flight has finished
    closed_event: trio.Event | None = None
    arriving: int = 0  # messages being committed to it, not yet in ``pending`` (_unread)
    task_failures: int = 0  # consecutive failed tasks (the backoff grows with them)
    # It may have a progress row (see RunProgress), which its close deletes.
    progress_row: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.context:
            self.context = _NO_CONTEXT

    def watch(self, pid: Pid) -> None:
        """``pid`` gets the run's EXIT."""
        self.watchers = _added(self.watchers, pid)

    def link(self, pid: Pid) -> None:
        """``pid`` gets a LINK_DOWN if the run fails."""
        self.links = _added(self.links, pid)

    def unwatch(self, pid: Pid) -> None:
        """Drop ``pid``'s monitor and link."""
        if isinstance(self.watchers, set):
            self.watchers.discard(pid)
        if isinstance(self.links, set):
            self.links.discard(pid)

    def exit_reported(self, pid: Pid) -> None:
        """The EXIT of ``pid`` (a process the run started) is on its way into the history."""
        self.exits_reported = _added(self.exits_reported, pid)

    def forget_exit(self, pid: Pid) -> None:
        """``pid`` is started again: its next EXIT is new."""
        if isinstance(self.exits_reported, set):
            self.exits_reported.discard(pid)

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


def _added(pids: set[Pid] | frozenset[Pid], pid: Pid) -> set[Pid]:
    if isinstance(pids, set):
        pids.add(pid)
        return pids
    return {pid}
