"""An open workflow run, as the runtime keeps it in memory.

Everything that can happen to a run is a method of ``Run`` below, and only those methods
change its fields: a grep for a field finds its one writer here.

- The fields every workflow's start, activations and close read (``record``, ``pid``,
  ``driver``, ``phase``, ``pending``, ...: ~125 reads per workflow) are plain slots, read
  directly: a property costs ~600 instructions a read on CPython 3.11 against ~50 for a
  slot, which made ~4 % of a workflow's instructions. Outside this module they are read,
  never assigned or changed in place.
- The rest are private (``_inbox_seq``, ``_task_failures``, ...), read elsewhere through
  read-only properties.

``tests/unit/test_run_fields.py`` holds ``workflow/_local`` and the tests to that: it fails
on an assignment to a run's field, or a call that changes one in place, anywhere else.

Its phase has an owner outside: ``RunTable.move`` (``_runs``) decides the transitions
(``next_phase``) and is the only caller of ``enter_phase``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs
import trio

from roost._errors import Error
from roost._pid import Pid
from roost.actors._app import Entry
from roost.actors._node import ExitResult
from roost.mailbox._channel import Channel
from roost.workflow._driver import Driver
from roost.workflow._history import Event
from roost.workflow._local._phases import IN_FLIGHT, RunPhase
from roost.workflow._local._records import InboxItem, RunRecord, TimerTask, with_step_counters

__all__ = ["NO_ROW", "Pending", "Run", "Settled", "StartRow"]

# The shared empty value of a Run's sets until one is needed: most runs never get a link or
# a reported exit, and an empty set costs 216 bytes (and a collector visit) per open run.
_NONE: frozenset[Pid] = frozenset()
# The context of every run started without context values (most): one shared dict, never
# written (context values are only read, ``roost.ctx``), instead of an empty one per run.
_NO_CONTEXT: dict[str, Any] = {}
_NO_CALLS: Mapping[int, Any] = MappingProxyType({})


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

# An inbox row committed with a run's start (key, bytes, the event): its Started event,
# then what the step starting it sent it.
StartRow = tuple[bytes, bytes, Event]


@attrs.define(eq=False)
class Run:
    """An open run, loaded in memory (its driver is rebuilt by replay when missing).

    Built with its record, entry, PID and context; a run not yet stored may come with the
    runtime timers stored with its start, and ``HELD`` when it waits for its start time.
    Its next activation follows those its record counts.
    """

    # Read directly (see the module's docstring), written only by the methods below.
    # As of its last committed step, but for the counters of steps that changed nothing
    # else (``progress``; ``current_record`` has them too).
    record: RunRecord
    entry: Entry  # the workflow function it runs
    pid: Pid  # the workflow id's: every run of the id has the same one
    context: dict[str, Any]  # its context values (read only: the dict is shared)
    timers: Sequence[TimerTask] = ()  # its own, stored with its start, until armed
    # What it is doing (see _runs): changed only by RunTable.move (``enter_phase``).
    phase: RunPhase = RunPhase.IDLE
    # None: the next activation rebuilds it by replay.
    driver: Driver | None = attrs.field(default=None, init=False)
    # The events waiting for its next activation, in arrival order.
    pending: list[Pending] = attrs.field(factory=list, init=False)
    next_index: int = attrs.field(default=1, init=False)  # of its next activation
    # It may have a progress row (see RunProgress), which its close deletes.
    progress_row: bool = attrs.field(default=False, init=False)
    # Sets and sequences start as shared empty immutables (see _NONE) and are replaced or
    # grown by the methods below.
    watchers: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)  # get its EXIT
    links: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)  # a LINK_DOWN
    # Where its result goes once it closes (``wait_exit``).
    exit_chans: Sequence[Channel[ExitResult]] = attrs.field(default=(), init=False)
    # Stored, armed and not yet fired (see DurableTimers): their rows go when the run closes.
    armed_timers: tuple[TimerTask, ...] = attrs.field(default=(), init=False)
    # Private, read (if at all) through the read-only properties below.
    _inbox_seq: int = attrs.field(default=0, init=False)  # the last inbox number drawn
    _exits_reported: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)
    _pending_start: Sequence[StartRow] = attrs.field(default=(), init=False)
    # Messages being committed to it, not yet in ``pending`` (_unread).
    _arriving: int = attrs.field(default=0, init=False)
    _task_failures: int = attrs.field(default=0, init=False)  # consecutive failed tasks
    # (activations, history_length, history_size, unread) of committed steps that did not
    # copy the record (see ``step_committed``); None when ``record`` has them.
    _progress: tuple[int, int, int, int] | None = attrs.field(default=None, init=False)
    _drained: trio.Event | None = attrs.field(default=None, init=False)  # see wait_drained
    _closed_event: trio.Event | None = attrs.field(default=None, init=False)
    # Its open calls' destinations (see call_destination) while its driver is dropped.
    _dropped_calls: Mapping[int, Any] = attrs.field(default=_NO_CALLS, init=False)

    def __attrs_post_init__(self) -> None:
        if not self.context:
            self.context = _NO_CONTEXT
        self.next_index = self.record.activations + 1

    @property
    def task_failures(self) -> int:
        """Its consecutive failed workflow tasks (the retry's backoff grows with them)."""
        return self._task_failures

    # -- its record ----------------------------------------------------------------------

    @property
    def progress(self) -> tuple[int, int, int, int]:
        """(activations, history_length, history_size, unread) as of its last committed step."""
        progress = self._progress
        if progress is not None:
            return progress
        record = self.record
        return record.activations, record.history_length, record.history_size, record.unread

    @property
    def current_record(self) -> RunRecord:
        """``record`` with the counters of every committed step (copied once, when asked)."""
        progress = self._progress
        if progress is not None:
            activations, length, size, unread = progress
            self.record = with_step_counters(
                self.record,
                activations=activations,
                history_length=length,
                history_size=size,
                unread=unread,
            )
            self._progress = None
        return self.record

    def step_committed(
        self,
        record: RunRecord,
        size: int,
        *,
        progress_row: bool,
        progress: tuple[int, int, int, int] | None = None,
    ) -> None:
        """A step of size ``size`` committed ``record``: the next activation follows it.

        ``progress``: the step's counters, when it changed nothing else of the record (then
        ``record`` is the one it had, not a copy: most steps).
        """
        self.next_index += 1
        self.record = record
        self._progress = progress
        self._task_failures = 0
        if progress_row:
            self.progress_row = True
        if self.driver is not None:
            self.driver.recorded(size)

    def task_failed(self, batch: list[Pending], error: Error) -> None:
        """A task failed with ``error``: its ``batch`` of events goes back to the front.

        The record carries the error until a task commits; the backoff grows.
        """
        self.pending = batch + self.pending
        self._task_failures += 1
        self.record = attrs.evolve(self.current_record, task_failure=error)

    def resume_at(self, record: RunRecord) -> None:
        """Recovery read its counters from the history: ``record`` replaces the stored one."""
        self.record, self._progress = record, None
        self.next_index = record.activations + 1

    def close_committed(self, record: RunRecord) -> None:
        """A close from outside committed ``record`` (its final status)."""
        self.record, self._progress = record, None

    def found_progress_row(self, stored: bool) -> None:
        """Whether the store holds a progress row for it (read at recovery)."""
        self.progress_row = stored

    # -- its driver ----------------------------------------------------------------------

    def attach_driver(self, driver: Driver) -> None:
        """``driver`` is its driver (new, or rebuilt by replay)."""
        self.driver = driver
        self._dropped_calls = _NO_CALLS

    def restore_context(self, context: dict[str, Any]) -> None:
        """A replay read its context values from its Started event (before replaying it)."""
        self.context = context

    def replayed(self, activations: int) -> None:
        """A replay rebuilt its driver from ``activations`` stored ones: the next follows."""
        self.next_index = activations + 1

    def drop_driver(self) -> None:
        """Close its driver, if any: the next activation rebuilds it by replay."""
        driver = self.driver
        if driver is not None:
            self._dropped_calls = driver.open_calls() or _NO_CALLS
            driver.close()
            self.driver = None

    def call_destination(self, seq: int) -> Any:
        """Where its open call ``seq`` went (a Pid or a name); None for no such open call."""
        driver = self.driver
        if driver is not None:
            return driver.open_calls().get(seq)
        return self._dropped_calls.get(seq)

    # -- its events ----------------------------------------------------------------------

    def queue(self, items: list[Pending]) -> None:
        """``items`` (committed) wait for its next activation."""
        self.pending.extend(items)

    def queue_one(self, item: Pending) -> None:
        """``item`` (committed, or a settled row) waits for its next activation."""
        self.pending.append(item)

    def take_pending(self) -> list[Pending]:
        """Its pending events, handed to an activation (or its successor): none wait now."""
        batch, self.pending = self.pending, []
        return batch

    def restore_pending(self, k: bytes, event: InboxItem) -> None:
        """The inbox row ``k`` of ``event`` is stored (recovery): pending, its number taken."""
        self.pending.append((k, event))
        self._inbox_seq = max(self._inbox_seq, int.from_bytes(k[-8:], "big"))

    @property
    def inbox_seq(self) -> int:
        """The last inbox number drawn (``draw_inbox_numbers``)."""
        return self._inbox_seq

    def draw_inbox_numbers(self, count: int) -> int:
        """Take the next ``count`` inbox numbers for rows of its inbox; return the first."""
        first = self._inbox_seq + 1
        self._inbox_seq += count
        return first

    @property
    def arriving(self) -> int:
        """Messages being committed to it, not yet pending (the unread limit counts them)."""
        return self._arriving

    def arrive(self, count: int) -> None:
        """``count`` messages to it are being committed."""
        self._arriving += count

    def arrived(self, count: int) -> None:
        """``count`` messages being committed are pending now (or were not stored)."""
        self._arriving -= count

    # -- its start (a run not yet stored) ------------------------------------------------

    @property
    def pending_start(self) -> Sequence[StartRow]:
        """The inbox rows committed with its start (a child's), in order."""
        return self._pending_start

    def add_start_row(self, row: StartRow) -> None:
        """``row`` is committed with its start, after those before it."""
        self._pending_start = [*self._pending_start, row]

    def take_start_rows(self) -> Sequence[StartRow]:
        """Its start committed: the rows stored with it, to accept as its first events."""
        rows, self._pending_start = self._pending_start, ()
        return rows

    def take_start_timers(self) -> Sequence[TimerTask]:
        """Its start committed: the timers stored with it, to arm."""
        timers, self.timers = self.timers, ()
        return timers

    # -- its armed timers ----------------------------------------------------------------

    def timer_armed(self, timer: TimerTask) -> None:
        """``timer`` (stored) is armed."""
        self.armed_timers = (*self.armed_timers, timer)

    def timer_fired(self, timer: TimerTask) -> None:
        """``timer`` fell due: it is armed no more."""
        self.armed_timers = tuple(t for t in self.armed_timers if t is not timer)

    def take_armed_timers(self) -> tuple[TimerTask, ...]:
        """It closed, its timer rows deleted: none of its armed timers fires."""
        armed, self.armed_timers = self.armed_timers, ()
        return armed

    # -- who waits for it ----------------------------------------------------------------

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

    def send_exit_to(self, chan: Channel[ExitResult]) -> None:
        """``chan`` gets its result once it closes."""
        self.exit_chans = [*self.exit_chans, chan]

    def take_over_waiters(self, old: Run) -> None:
        """It follows ``old``: whoever waits for ``old``'s close waits for its own."""
        self.watchers, self.links, self.exit_chans = old.watchers, old.links, old.exit_chans

    async def wait_closed(self) -> None:
        """Wait until a close from outside has committed (see ``mark_closed``)."""
        if self._closed_event is None:
            self._closed_event = trio.Event()
        await self._closed_event.wait()

    def mark_closed(self) -> None:
        """Wake whoever waits in ``wait_closed``."""
        if self._closed_event is None:
            self._closed_event = trio.Event()
        self._closed_event.set()

    # -- the processes it started --------------------------------------------------------

    @property
    def exits_reported(self) -> set[Pid] | frozenset[Pid]:
        """Processes it started whose EXIT is on its way into its history."""
        return self._exits_reported

    def exit_reported(self, pid: Pid) -> None:
        """The EXIT of ``pid`` (a process the run started) is on its way into the history."""
        self._exits_reported = _added(self._exits_reported, pid)

    def forget_exit(self, pid: Pid) -> None:
        """``pid`` is started again: its next EXIT is new."""
        if isinstance(self._exits_reported, set):
            self._exits_reported.discard(pid)

    # -- its phase (RunTable.move alone) -------------------------------------------------

    def enter_phase(self, phase: RunPhase) -> None:
        """Be in ``phase``; wake a closer waiting for the activation in flight if it is over.

        Only ``RunTable.move`` calls this: the table owns the transitions (``next_phase``).
        """
        drained = self._drained
        if drained is not None and self.phase in IN_FLIGHT and phase not in IN_FLIGHT:
            drained.set()
            self._drained = None
        self.phase = phase

    async def wait_drained(self) -> None:
        """Wait until no activation of it is in flight."""
        while self.phase in IN_FLIGHT:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()


def _added(pids: set[Pid] | frozenset[Pid], pid: Pid) -> set[Pid]:
    if isinstance(pids, set):
        pids.add(pid)
        return pids
    return {pid}
