"""Where a run lives: the table of open runs, their phases, and the driver cache.

The ``RunTable`` alone adds, evicts and closes runs; everyone else reads it (``get``,
``in``, ``values``) and asks it for a change. A run's phase says what may happen to it
next, and changes only through ``RunTable.move`` by the pure ``next_phase``:

    HELD ──release──▶ IDLE ◀──retry── BACKOFF
                    │  ▲                 ▲
               queue│  │done         fail│
                    ▼  │                 │
                  QUEUED ──take──▶ ACTIVE ┘      (an eager start: IDLE ──take──▶ ACTIVE)
                                    │ close
                                    ▼
    any open phase ──close──▶ CLOSING ◀──done── DRAINING      ──closed──▶ CLOSED

An activation in flight is never cut short: a close from outside turns ACTIVE into
DRAINING, and the close waits (``wait_drained``) until it has finished.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, ValuesView
from types import MappingProxyType
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from roost.workflow._run import Run

__all__ = ["IllegalTransition", "PhaseEvent", "RunPhase", "RunTable", "next_phase"]


class RunPhase(enum.Enum):
    """What an open run is doing, as the executors and the closers see it."""

    IDLE = "idle"  # waiting for events
    QUEUED = "queued"  # has events, waits for an executor's pass
    ACTIVE = "active"  # an activation is in flight (a pass, or an eager start)
    HELD = "held"  # waiting for its start time (start_delay, a retry's backoff, cron)
    BACKOFF = "backoff"  # a failed workflow task waits for its retry
    DRAINING = "draining"  # closed from outside while active: the activation finishes
    CLOSING = "closing"  # closed from outside: no more activations, the close commits
    CLOSED = "closed"  # its final status is committed


class PhaseEvent(enum.Enum):
    """What happens to a run (the input of ``next_phase``)."""

    QUEUE = "queue"  # events are pending: an executor should take it
    TAKE = "take"  # an executor (or an eager start) runs its activation
    DONE = "done"  # the activation is over (committed or not)
    FAIL = "fail"  # the task failed: retry after a backoff
    RETRY = "retry"  # the backoff is over
    RELEASE = "release"  # its start time came
    CLOSE = "close"  # closed from outside (terminate, a timeout)
    CLOSED = "closed"  # the close is committed


class IllegalTransition(AssertionError):  # noqa: N818 - a bug, asserted in tests
    """``next_phase`` was asked for a transition the phases do not allow."""


_P, _E = RunPhase, PhaseEvent
_OPEN = (_P.IDLE, _P.QUEUED, _P.HELD, _P.BACKOFF)
_TRANSITIONS: dict[tuple[RunPhase, PhaseEvent], RunPhase] = {
    (_P.IDLE, _E.QUEUE): _P.QUEUED,
    (_P.IDLE, _E.TAKE): _P.ACTIVE,  # an eager start
    (_P.QUEUED, _E.TAKE): _P.ACTIVE,
    (_P.HELD, _E.RELEASE): _P.IDLE,
    (_P.BACKOFF, _E.RETRY): _P.IDLE,
    (_P.ACTIVE, _E.DONE): _P.IDLE,
    (_P.ACTIVE, _E.FAIL): _P.BACKOFF,
    (_P.ACTIVE, _E.CLOSE): _P.DRAINING,
    (_P.DRAINING, _E.DONE): _P.CLOSING,
    (_P.DRAINING, _E.FAIL): _P.CLOSING,
    (_P.DRAINING, _E.CLOSE): _P.DRAINING,
    (_P.CLOSING, _E.CLOSE): _P.CLOSING,
    # The task that failed or closed the run has left ACTIVE already: its end changes nothing.
    (_P.BACKOFF, _E.DONE): _P.BACKOFF,
    (_P.CLOSING, _E.DONE): _P.CLOSING,
    (_P.CLOSED, _E.DONE): _P.CLOSED,
    (_P.CLOSED, _E.CLOSE): _P.CLOSED,  # closed by its own last activation meanwhile
    # Its own last activation closed it (ACTIVE), or a close from outside did.
    **{(phase, _E.CLOSED): _P.CLOSED for phase in (*_OPEN, _P.ACTIVE, _P.DRAINING)},
    (_P.CLOSING, _E.CLOSED): _P.CLOSED,
    **{(phase, _E.CLOSE): _P.CLOSING for phase in _OPEN},
}


def next_phase(phase: RunPhase, event: PhaseEvent) -> RunPhase:
    """The phase a run in ``phase`` moves to on ``event``.

    Raises:
        IllegalTransition: the phases do not allow ``event`` in ``phase`` (a bug).
    """
    try:
        return _TRANSITIONS[phase, event]
    except KeyError:
        raise IllegalTransition(f"a run in phase {phase.name} cannot {event.value}") from None


class RunTable:
    """The open runs of one node, the runs being closed from outside, and the driver cache."""

    __slots__ = ("_cached", "_closing", "_open", "cache_size", "get")

    def __init__(self, cache_size: int) -> None:
        self._open: dict[str, Run] = {}
        # Closed from outside and out of ``_open`` at once, stored as closed only after its
        # commit: until then watchers attach to it, so they get its real EXIT.
        self._closing: dict[str, Run] = {}
        # Runs whose driver is in memory, least recently activated first. Past the limit
        # the oldest idle one is evicted and rebuilt by replay when its next event comes.
        self._cached: OrderedDict[str, Run] = OrderedDict()
        self.cache_size = cache_size
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
        """Change ``run``'s phase by ``event`` (see ``next_phase``); wake a waiting closer."""
        old = run.phase
        new = run.phase = next_phase(old, event)
        if old in _IN_FLIGHT and new not in _IN_FLIGHT and run.drained is not None:
            run.drained.set()
            run.drained = None
        return new

    async def wait_drained(self, run: Run) -> None:
        """Wait until no activation of ``run`` is in flight."""
        while run.phase in _IN_FLIGHT:
            if run.drained is None:
                run.drained = trio.Event()
            await run.drained.wait()

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
        cached[workflow_id] = run
        cached.move_to_end(workflow_id)
        while len(cached) > self.cache_size:
            oldest = next(iter(cached.values()))
            if oldest.phase in _IN_FLIGHT or oldest is run:
                break
            del cached[oldest.record.workflow_id]
            if oldest.driver is not None:
                oldest.driver.close()
                oldest.driver = None
            evicted += 1
        return evicted

    def forget_driver(self, run: Run) -> None:
        """Drop ``run``'s driver: its next activation rebuilds it by replay."""
        if self._cached.get(run.record.workflow_id) is run:
            del self._cached[run.record.workflow_id]
        if run.driver is not None:
            run.driver.close()
            run.driver = None


_IN_FLIGHT = frozenset({RunPhase.ACTIVE, RunPhase.DRAINING})
