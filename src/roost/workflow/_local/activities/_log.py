"""How failing activity attempts are logged: loud at first, then at growing intervals.

An activity under the default policy (unlimited attempts) can fail for days. Every attempt
logged at WARNING would flood the log; none would hide the failure. So attempt 1 and then
attempts 2, 4, 8, 16, ... (each power of two) log at WARNING, the attempts between at INFO,
and the last attempt (no retry follows) always at WARNING. Each record carries the
attempt's traceback (``exc_info``) and structured fields in ``extra``: ``workflow_id``,
``run_id``, ``entry``, ``attempt``, ``receipt_id`` (None), ``trace_id`` (the run's trace),
``error_kind``, ``retry_in`` (seconds, None for the last attempt).
"""

from __future__ import annotations

import logging

from roost import _telemetry as telemetry
from roost._errors import Error
from roost.workflow._local._records import ActivityTask

__all__ = ["KEPT_ERRORS", "log", "log_failure", "loud"]

log = logging.getLogger("roost.activity")

# How many of the latest attempt errors an activity task keeps (its stored row must not
# grow with every attempt of an activity that fails for ever).
KEPT_ERRORS = 10


def loud(attempt: int) -> bool:
    """Whether a failure of ``attempt`` (1-based) logs at WARNING: 1, 2, 4, 8, 16, ..."""
    return attempt >= 1 and attempt & (attempt - 1) == 0


def log_failure(
    task: ActivityTask, error: Error, retry_in: float | None, trace_id: str | None = None
) -> None:
    """Log that attempt ``task.attempt`` failed; ``retry_in`` None: no retry follows."""
    last = retry_in is None
    level = logging.WARNING if last or loud(task.attempt) else logging.INFO
    if not log.isEnabledFor(level):
        return
    extra = telemetry.fields(
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        entry=task.entry,
        attempt=task.attempt,
        trace_id=trace_id,
        error_kind=error.kind.value,
        retry_in=retry_in,
    )
    exc_info = telemetry.exc_info(error)
    if last:
        log.log(
            level,
            "activity %s of workflow %s failed on attempt %d, no retry follows: %s",
            task.entry,
            task.workflow_id,
            task.attempt,
            error,
            extra=extra,
            exc_info=exc_info,
        )
        return
    nxt = task.attempt * 2 if loud(task.attempt) else 1 << task.attempt.bit_length()
    log.log(
        level,
        "activity %s of workflow %s failed on attempt %d (retrying in %.3gs; the next "
        "warning comes at attempt %d if it keeps failing): %s",
        task.entry,
        task.workflow_id,
        task.attempt,
        retry_in,
        nxt,
        error,
        extra=extra,
        exc_info=exc_info,
    )
