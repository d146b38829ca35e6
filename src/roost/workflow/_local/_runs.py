"""Where a run lives: the table of open runs, their phases, and the driver cache.

The ``RunTable`` alone adds, evicts and closes runs; everyone else reads it (``get``,
``in``, ``values``) and asks it for a change. A run's phase says what may happen to it
next, and changes only through ``RunTable.move`` by the pure ``next_phase`` (which calls
``Run.enter_phase``; nothing else does).

The phases, their diagram and ``next_phase`` are in ``_phases``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, ValuesView
from types import MappingProxyType
from typing import TYPE_CHECKING

import trio

from roost.workflow._local._phases import IN_FLIGHT, TRANSITIONS, PhaseEvent, RunPhase, next_phase

if TYPE_CHECKING:
    from roost.workflow._local._run import Run

__all__ = ["RunTable"]


class RunTable:
    """The open runs of one node, the runs being closed from outside, and the driver cache."""

    __slots__ = ("_cached", "_closing", "_open", "_staged_children", "cache_size", "get")

    def __init__(self, cache_size: int) -> None:
        self._open: dict[str, Run] = {}
        # Closed from outside and out of ``_open`` at once, stored as closed only after its
        # commit: until then watchers attach to it, so they get its real EXIT.
        self._closing: dict[str, Run] = {}
        # Runs whose driver is in memory, least recently activated first. Past the limit
        # the oldest idle one is evicted and rebuilt by replay when its next event comes.
        self._cached: OrderedDict[str, Run] = OrderedDict()
        self.cache_size = cache_size
        # Ids of children that prepared steps start, until those steps commit or are
        # discarded: another step of the same pass, or a start from outside, must not take
        # the id meanwhile (the event, once made, wakes whoever waits for the id).
        self._staged_children: dict[str, trio.Event | None] = {}
        # The open run of a workflow id, if any (the dict's own method: the hottest read).
        self.get: Callable[[str], Run | None] = self._open.get

    # -- reading -------------------------------------------------------------------------

    def __getitem__(self, workflow_id: str) -> Run:
        return self._open[workflow_id]

    def __contains__(self, workflow_id: object) -> bool:
        return workflow_id in self._open

    def __iter__(self) -> Iterator[str]:
        return iter(self._open)

    def __len__(self) -> int:
        return len(self._open)

    def values(self) -> ValuesView[Run]:
        """The open runs."""
        return self._open.values()

    def closing(self, workflow_id: str) -> Run | None:
        """The run of ``workflow_id`` being closed from outside, if any."""
        return self._closing.get(workflow_id)

    def open_or_closing(self, workflow_id: str) -> Run | None:
        """The open run of ``workflow_id``, else the one whose close is committing."""
        return self._open.get(workflow_id) or self._closing.get(workflow_id)

    def is_current(self, run: Run) -> bool:
        """Whether ``run`` is the open run of its workflow id."""
        return self._open.get(run.record.workflow_id) is run

    # -- changing ------------------------------------------------------------------------

    def add(self, run: Run) -> None:
        """``run`` is the open run of its workflow id (a start, a successor, a recovery)."""
        self._open[run.record.workflow_id] = run

    def remove(self, run: Run) -> None:
        """``run`` is open no more (closed, quarantined, or never stored)."""
        workflow_id = run.record.workflow_id
        if self._open.get(workflow_id) is run:
            del self._open[workflow_id]

    def start_closing(self, run: Run) -> None:
        """``run`` is closed from outside: out of the open runs, its close committing."""
        self.remove(run)
        self._closing[run.record.workflow_id] = run

    def done_closing(self, run: Run) -> None:
        """``run``'s close from outside is over (committed, or the node stops)."""
        if self._closing.get(run.record.workflow_id) is run:
            del self._closing[run.record.workflow_id]

    def move(self, run: Run, event: PhaseEvent) -> RunPhase:
        """Change ``run``'s phase by ``event`` (see ``next_phase``); wake a waiting closer.

        The one caller of ``Run.enter_phase``: every phase change is a transition here.
        """
        old = run.phase
        # The table's own lookup (the hot path: three moves per activation); a missing
        # transition goes to ``next_phase``, which raises for it.
        new = _TRANSITION((old, event))
        if new is None:
            new = next_phase(old, event)
        run.enter_phase(new)
        return new

    # -- children of steps not yet committed ---------------------------------------------

    def child_staged(self, workflow_id: str) -> bool:
        """Whether a prepared, uncommitted step starts a child under ``workflow_id``."""
        return workflow_id in self._staged_children

    def stage_child(self, workflow_id: str) -> None:
        """A prepared step starts a child under ``workflow_id`` when it commits."""
        self._staged_children[workflow_id] = None

    def unstage_child(self, workflow_id: str) -> None:
        """The step starting that child committed (the child is open) or was discarded."""
        if workflow_id in self._staged_children:
            event = self._staged_children.pop(workflow_id)
            if event is not None:
                event.set()

    async def wait_unstaged(self, workflow_id: str) -> None:
        """Wait until no uncommitted step starts a child under ``workflow_id``."""
        while workflow_id in self._staged_children:
            event = self._staged_children[workflow_id]
            if event is None:
                event = self._staged_children[workflow_id] = trio.Event()
            await event.wait()

    # -- the driver cache ----------------------------------------------------------------

    def cache(self) -> Mapping[str, Run]:
        """The runs whose driver is in memory, least recently activated first (read only)."""
        return MappingProxyType(self._cached)

    def touch(self, run: Run) -> int:
        """``run`` was just activated: most recently used; evict the oldest idle ones.

        Returns how many drivers were evicted.
        """
        evicted = 0
        cached = self._cached
        workflow_id = run.record.workflow_id
        try:
            cached.move_to_end(workflow_id)  # cached already: most steps
        except KeyError:
            cached[workflow_id] = run
        else:
            if cached[workflow_id] is not run:  # a newer run of the id
                cached[workflow_id] = run
            if len(cached) <= self.cache_size:
                return 0
        while len(cached) > self.cache_size:
            oldest = next(iter(cached.values()))
            if oldest.phase in IN_FLIGHT or oldest is run:
                break
            del cached[oldest.record.workflow_id]
            oldest.drop_driver()
            evicted += 1
        return evicted

    def forget_driver(self, run: Run) -> None:
        """Drop ``run``'s driver: its next activation rebuilds it by replay."""
        if self._cached.get(run.record.workflow_id) is run:
            del self._cached[run.record.workflow_id]
        run.drop_driver()


_TRANSITION = TRANSITIONS.get
