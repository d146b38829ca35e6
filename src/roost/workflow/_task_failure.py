"""A workflow task (one activation) that failed to finish: discard it, retry it later."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import attrs
import trio

from roost._backoff import capped_backoff
from roost._errors import Error, ErrorKind
from roost.workflow._run import Pending, Run
from roost.workflow._watchdog import Guard

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["DEFAULT_TASK_TIMEOUT", "hold_after_task_timeout", "task_timed_out"]

log = logging.getLogger("roost.workflow")

DEFAULT_TASK_TIMEOUT = 10.0  # Temporal's default workflow task timeout
_MAX_BACKOFF = 60.0


def hold_after_task_timeout(m: WorkflowManager, run: Run, batch: list[Pending]) -> None:
    """The in-memory part, done at once: nothing of the activation is kept.

    Its events go back to the front of the run's queue and its driver (whose coroutines the
    timeout interrupted) is dropped, so the retry rebuilds the run by replay; the run is
    held (``backoff``) until ``task_timed_out`` releases it.
    """
    if run.driver is not None:
        run.driver.close()
        run.driver = None
    m.cached.pop(run.record.workflow_id, None)
    run.pending = batch + run.pending
    run.task_failures += 1
    run.backoff = True


async def task_timed_out(m: WorkflowManager, run: Run, guard: Guard) -> None:
    """An activation ran past its task_timeout: log it, record it, retry after a backoff.

    The failure is kept in the run record (``describe`` shows it) until a task succeeds.
    """
    index = run.next_index
    error = Error(
        f"workflow {run.pid.id!r}: activation {index} ran longer than its task_timeout of "
        f"{guard.seconds:g}s without yielding; it was at {guard.location}. Workflow code "
        "must not block or compute for long: move that work into an activity",
        kind=ErrorKind.TIMEOUT,
        details={
            "timeout_type": "task",
            "workflow_id": run.pid.id,
            "activation": index,
            "location": guard.location,
        },
    )
    log.error("%s", error.message)
    if not run.closing and m.runs.get(run.record.workflow_id) is run:
        record = attrs.evolve(run.record, task_failure=error)
        data = m.codec.encode(record)
        await m.transact(lambda txn: txn.put("runs", record.workflow_id.encode(), data))
        if not run.closing:  # a close from outside may have begun during the commit
            run.record = record
    await trio.sleep(capped_backoff(1.0, 2.0, run.task_failures - 1, _MAX_BACKOFF))
    run.backoff = False
    m.ready(run)
