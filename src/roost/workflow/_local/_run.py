"""An open workflow run, as the runtime keeps it in memory.

Everything that can happen to a run is a method of ``Run`` below: its fields are private,
other modules read them through read-only properties and change them only by calling
those methods. A grep for a field finds its one writer here; ``tests/unit/test_run_fields.py``
fails on an assignment to a run's field anywhere else in ``workflow/_local``.

Its phase has an owner outside: ``RunTable.move`` (``_runs``) decides the transitions
(``next_phase``) and is the only caller of ``enter_phase``.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from roost.workflow._local._records import InboxItem, RunRecord, TimerTask

__all__ = ["NO_ROW", "Pending", "Run", "Settled", "StartRow"]

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

# An inbox row committed with a run's start (key, bytes, the event): its Started event,
# then what the step starting it sent it.
StartRow = tuple[bytes, bytes, Event]


@attrs.define(eq=False)
class Run:
    """An open run, loaded in memory (its driver is rebuilt by replay when missing).

    Built with its record, entry, PID and context; a run not yet stored may come with the
    runtime timers stored with its start, and ``HELD`` when it waits for its start time.
    """

    _record: RunRecord
    _entry: Entry
    _pid: Pid
    _context: dict[str, Any]
    _timers: Sequence[TimerTask] = ()  # its own, stored with its start
    # What it is doing (see _runs): changed only by RunTable.move (``enter_phase``).
    _phase: RunPhase = RunPhase.IDLE
    _driver: Driver | None = attrs.field(default=None, init=False)
    _pending: list[Pending] = attrs.field(factory=list, init=False)
    _inbox_seq: int = attrs.field(default=0, init=False)  # the last inbox number drawn
    _next_index: int = attrs.field(default=1, init=False)  # of its next activation
    # Sets and sequences start as shared empty immutables (see _NONE) and are replaced or
    # grown by the methods below.
    _exits_reported: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)
    _pending_start: Sequence[StartRow] = attrs.field(default=(), init=False)
    _watchers: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)
    _links: set[Pid] | frozenset[Pid] = attrs.field(default=_NONE, init=False)
    _exit_chans: Sequence[Channel[ExitResult]] = attrs.field(default=(), init=False)
    # Stored, armed and not yet fired (see DurableTimers): their rows go when the run closes.
    _armed_timers: tuple[TimerTask, ...] = attrs.field(default=(), init=False)
    _drained: trio.Event | None = attrs.field(default=None, init=False)  # see wait_drained
    _closed_event: trio.Event | None = attrs.field(default=None, init=False)
    # Messages being committed to it, not yet in ``pending`` (_unread).
    _arriving: int = attrs.field(default=0, init=False)
    _task_failures: int = attrs.field(default=0, init=False)  # consecutive failed tasks
    # It may have a progress row (see RunProgress), which its close deletes.
    _progress_row: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        if not self._context:
            self._context = _NO_CONTEXT
        self._next_index = self._record.activations + 1

    # -- what it is ----------------------------------------------------------------------

    @property
    def record(self) -> RunRecord:
        """Its record as of its last committed step (what is stored, or about to be)."""
        return self._record

    @property
    def entry(self) -> Entry:
        """The workflow function it runs."""
        return self._entry

    @property
    def pid(self) -> Pid:
        """Its PID (the workflow id's: every run of the id has the same one)."""
        return self._pid

    @property
    def context(self) -> dict[str, Any]:
        """Its context values (read only: the dict is shared)."""
        return self._context

    @property
    def driver(self) -> Driver | None:
        """Its driver, if in memory (else the next activation rebuilds it by replay)."""
        return self._driver

    @property
    def phase(self) -> RunPhase:
        """What it is doing (see ``_phases``)."""
        return self._phase

    @property
    def next_index(self) -> int:
        """The index of its next activation (1 for a run that has had none)."""
        return self._next_index

    @property
    def task_failures(self) -> int:
        """Its consecutive failed workflow tasks (the retry's backoff grows with them)."""
        return self._task_failures

    @property
    def progress_row(self) -> bool:
        """Whether it may have a progress row (see ``RunProgress``), which its close deletes."""
        return self._progress_row

    # -- its record ----------------------------------------------------------------------

    def step_committed(self, record: RunRecord, size: int, *, progress_row: bool) -> None:
        """A step of size ``size`` committed ``record``: the next activation follows it."""
        self._next_index += 1
        self._record = record
        self._task_failures = 0
        if progress_row:
            self._progress_row = True
        if self._driver is not None:
            self._driver.recorded(size)

    def task_failed(self, batch: list[Pending], error: Error) -> None:
        """A task failed with ``error``: its ``batch`` of events goes back to the front.

        The record carries the error until a task commits; the backoff grows.
        """
        self._pending = batch + self._pending
        self._task_failures += 1
        self._record = attrs.evolve(self._record, task_failure=error)

    def resume_at(self, record: RunRecord) -> None:
        """``record`` counts steps stored after its stored counters: the history's (recovery)."""
        self._record = record
        self._next_index = record.activations + 1

    def close_committed(self, record: RunRecord) -> None:
        """A close from outside committed ``record`` (its final status)."""
        self._record = record

    def found_progress_row(self, stored: bool) -> None:
        """Whether the store holds a progress row for it (read at recovery)."""
        self._progress_row = stored

    # -- its driver ----------------------------------------------------------------------

    def attach_driver(self, driver: Driver) -> None:
        """``driver`` is its driver (new, or rebuilt by replay)."""
        self._driver = driver

    def restore_context(self, context: dict[str, Any]) -> None:
        """A replay read its context values from its Started event (before replaying it)."""
        self._context = context

    def replayed(self, activations: int) -> None:
        """A replay rebuilt its driver from ``activations`` stored ones: the next follows."""
        self._next_index = activations + 1

    def drop_driver(self) -> None:
        """Close its driver, if any: the next activation rebuilds it by replay."""
        driver = self._driver
        if driver is not None:
            driver.close()
            self._driver = None

    # -- its events ----------------------------------------------------------------------

    @property
    def pending(self) -> Sequence[Pending]:
        """The events waiting for its next activation, in arrival order."""
        return self._pending

    def queue(self, items: list[Pending]) -> None:
        """``items`` (committed) wait for its next activation."""
        self._pending.extend(items)

    def queue_one(self, item: Pending) -> None:
        """``item`` (committed, or a settled row) waits for its next activation."""
        self._pending.append(item)

    def take_pending(self) -> list[Pending]:
        """Its pending events, handed to an activation (or its successor): none wait now."""
        batch, self._pending = self._pending, []
        return batch

    def restore_pending(self, k: bytes, event: InboxItem) -> None:
        """The inbox row ``k`` of ``event`` is stored (recovery): pending, its number taken."""
        self._pending.append((k, event))
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

    @property
    def timers(self) -> Sequence[TimerTask]:
        """The runtime timers stored with its start, until they are armed."""
        return self._timers

    def take_start_timers(self) -> Sequence[TimerTask]:
        """Its start committed: the timers stored with it, to arm."""
        timers, self._timers = self._timers, ()
        return timers

    # -- its armed timers ----------------------------------------------------------------

    @property
    def armed_timers(self) -> tuple[TimerTask, ...]:
        """Its timers stored, armed and not yet fired (their rows go when it closes)."""
        return self._armed_timers

    def timer_armed(self, timer: TimerTask) -> None:
        """``timer`` (stored) is armed."""
        self._armed_timers = (*self._armed_timers, timer)

    def timer_fired(self, timer: TimerTask) -> None:
        """``timer`` fell due: it is armed no more."""
        self._armed_timers = tuple(t for t in self._armed_timers if t is not timer)

    def take_armed_timers(self) -> tuple[TimerTask, ...]:
        """It closed, its timer rows deleted: none of its armed timers fires."""
        armed, self._armed_timers = self._armed_timers, ()
        return armed

    # -- who waits for it ----------------------------------------------------------------

    @property
    def watchers(self) -> set[Pid] | frozenset[Pid]:
        """Who gets its EXIT."""
        return self._watchers

    @property
    def links(self) -> set[Pid] | frozenset[Pid]:
        """Who gets a LINK_DOWN if it fails."""
        return self._links

    @property
    def exit_chans(self) -> Sequence[Channel[ExitResult]]:
        """Where its result goes once it closes (``wait_exit``)."""
        return self._exit_chans

    def watch(self, pid: Pid) -> None:
        """``pid`` gets the run's EXIT."""
        self._watchers = _added(self._watchers, pid)

    def link(self, pid: Pid) -> None:
        """``pid`` gets a LINK_DOWN if the run fails."""
        self._links = _added(self._links, pid)

    def unwatch(self, pid: Pid) -> None:
        """Drop ``pid``'s monitor and link."""
        if isinstance(self._watchers, set):
            self._watchers.discard(pid)
        if isinstance(self._links, set):
            self._links.discard(pid)

    def send_exit_to(self, chan: Channel[ExitResult]) -> None:
        """``chan`` gets its result once it closes."""
        self._exit_chans = [*self._exit_chans, chan]

    def take_over_waiters(self, old: Run) -> None:
        """It follows ``old``: whoever waits for ``old``'s close waits for its own."""
        self._watchers, self._links, self._exit_chans = old.watchers, old.links, old.exit_chans

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
        was, self._phase = self._phase, phase
        drained = self._drained
        if drained is not None and was in IN_FLIGHT and phase not in IN_FLIGHT:
            drained.set()
            self._drained = None

    async def wait_drained(self) -> None:
        """Wait until no activation of it is in flight."""
        while self._phase in IN_FLIGHT:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()


def _added(pids: set[Pid] | frozenset[Pid], pid: Pid) -> set[Pid]:
    if isinstance(pids, set):
        pids.add(pid)
        return pids
    return {pid}
