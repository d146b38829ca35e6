"""An activity attempt's time limits, and the errors of an attempt that overran one.

``start_to_close_timeout`` bounds one attempt, ``schedule_to_close_timeout`` all of them
from the task's scheduling, and ``heartbeat_timeout`` the gap between two beats. An
attempt keeps one deadline for all three: a beat pushes it on, never past the attempt's
own limit. Plain functions of the attempt and the clock readings they are handed.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from roost._errors import Error, ErrorKind
from roost.workflow._local._records import ActivityTask
from roost.workflow._local.activities._attempt import Attempt

__all__ = [
    "DEFAULT_START_TO_CLOSE",
    "began_at",
    "expired",
    "schedule_to_close_error",
    "schedule_to_close_left",
    "set_limits",
]

DEFAULT_START_TO_CLOSE = 600.0  # seconds, an attempt's limit when the options name none


def set_limits(work: Attempt, now: float, wall: dt.datetime | None) -> None:
    """Set the attempt's limits and its deadline, from ``now`` (trio's clock).

    ``wall`` is the node's wall clock, needed (and read by the caller) only for a task
    with a ``schedule_to_close_timeout``.
    """
    options = work.task.options
    start_to_close = float(options.get("start_to_close_timeout", DEFAULT_START_TO_CLOSE))
    if wall is not None:
        left = work.left = schedule_to_close_left(work.task, wall)
        timeout = min(start_to_close, max(left, 0.0))
    else:  # no overall limit (the common case): the attempt's own
        timeout = start_to_close
    work.timeout = timeout
    limit = work.limit = now + timeout
    every = options.get("heartbeat_timeout")
    if every:
        every = work.every = float(every)
        # One deadline for both limits: a beat never pushes past the attempt's timeout.
        work.deadline = min(now + every, limit)
    else:
        work.every = None
        work.deadline = limit


def began_at(work: Attempt, wall: dt.datetime, now: float) -> dt.datetime:
    """When the attempt began by the wall clock, from its limits (``set_limits``).

    ``wall`` and ``now`` are the wall and trio clocks read together, after the attempt
    ended. Its start is ``limit - timeout`` on trio's clock, so the start of an attempt
    costs no wall-clock read: only a failure (the cold path) asks. One that never started
    (no limit set) began when it ended.
    """
    if math.isinf(work.limit):
        return wall
    return wall - dt.timedelta(seconds=max(now - (work.limit - work.timeout), 0.0))


def expired(work: Attempt) -> Error:
    """The error of an attempt whose deadline passed."""
    task = work.task
    if work.deadline < work.limit:
        return _timeout(task, "heartbeat", float(work.every or 0))
    error = _timeout(task, "start_to_close", work.timeout)
    if work.left < float(task.options.get("start_to_close_timeout", DEFAULT_START_TO_CLOSE)):
        return schedule_to_close_error(task, error)
    return error


def _timeout(task: ActivityTask, kind: str, seconds: float) -> Error:
    return Error(
        f"activity {task.entry!r} attempt {task.attempt} exceeded its {kind}_timeout "
        f"of {seconds:g}s",
        kind=ErrorKind.TIMEOUT,
        details={"timeout_type": kind, "attempt": task.attempt},
    )


def schedule_to_close_left(task: ActivityTask, wall: dt.datetime) -> float:
    """Seconds left of the task's ``schedule_to_close_timeout`` at ``wall`` (inf: none)."""
    limit: Any = task.options.get("schedule_to_close_timeout")
    if limit is None:
        return math.inf
    return float(limit) - (wall - task.scheduled_at).total_seconds()


def schedule_to_close_error(task: ActivityTask, last: Error) -> Error:
    """The task's final error once its ``schedule_to_close_timeout`` is spent."""
    limit = task.options.get("schedule_to_close_timeout")
    return Error(
        f"activity {task.entry!r} did not complete within its schedule_to_close_timeout "
        f"of {limit:g}s (attempt {task.attempt}; last error: {last})",
        kind=ErrorKind.TIMEOUT,
        retryable=False,
        details={"timeout_type": "schedule_to_close", "attempt": task.attempt},
    )
