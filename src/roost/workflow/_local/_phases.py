"""A run's phases and the one pure function that moves a run between them.

``RunTable.move`` (``_runs``) applies ``next_phase``; nothing else changes a run's phase.

    HELD ──release──▶ IDLE ◀──retry── BACKOFF
                    │  ▲                 ▲
               queue│  │done         fail│
                    ▼  │                 │
                  QUEUED ──take──▶ ACTIVE ┘      (an eager start: IDLE ──take──▶ ACTIVE)
                                    │ close
                                    ▼
    any open phase ──close──▶ CLOSING ◀──done── DRAINING      ──closed──▶ CLOSED

An activation in flight is never cut short: a close from outside turns ACTIVE into
DRAINING, and the close waits (``Run.wait_drained``) until it has finished.
"""

from __future__ import annotations

import enum

__all__ = ["IN_FLIGHT", "TRANSITIONS", "IllegalTransition", "PhaseEvent", "RunPhase", "next_phase"]


class RunPhase(enum.Enum):
    """What an open run is doing, as the executors and the closers see it."""

    # Members are singletons compared by identity: hashing them by identity (C) instead of
    # by name (``Enum.__hash__``, Python) makes each transition lookup one dict probe.
    __hash__ = object.__hash__

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

    __hash__ = object.__hash__  # see RunPhase

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
# Every allowed transition: ``next_phase`` is a lookup in it (``RunTable.move`` probes it
# directly, and calls ``next_phase`` only to raise for a transition that is missing).
TRANSITIONS: dict[tuple[RunPhase, PhaseEvent], RunPhase] = {
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
    (_P.CLOSED, _E.CLOSED): _P.CLOSED,  # announced twice (its own close and one from outside)
    # Its own last activation closed it (ACTIVE), or a close from outside did.
    **{(phase, _E.CLOSED): _P.CLOSED for phase in (*_OPEN, _P.ACTIVE, _P.DRAINING)},
    (_P.CLOSING, _E.CLOSED): _P.CLOSED,
    **{(phase, _E.CLOSE): _P.CLOSING for phase in _OPEN},
}


# An activation is in flight: a close from outside waits for it (``Run.wait_drained``).
IN_FLIGHT = frozenset({_P.ACTIVE, _P.DRAINING})


def next_phase(phase: RunPhase, event: PhaseEvent) -> RunPhase:
    """The phase a run in ``phase`` moves to on ``event``.

    Raises:
        IllegalTransition: the phases do not allow ``event`` in ``phase`` (a bug).
    """
    try:
        return TRANSITIONS[phase, event]
    except KeyError:
        raise IllegalTransition(f"a run in phase {phase.name} cannot {event.value}") from None
