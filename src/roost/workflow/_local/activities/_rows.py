"""An activity task's row in ``tasks``: written after a failed attempt, deleted when stale.

A scheduled activity has no row: the command in its history is its record. Only a failed
attempt writes one (the next attempt, its backoff and the latest errors), and only while
its run is open; a row whose run has closed is deleted when it is found. The same commit
records the failed attempt in ``attempts`` (its times and error, for the console), which
outlives the run; an activity that succeeds first time writes neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from roost._duration import deadline_after
from roost._errors import Error
from roost.workflow._local._records import (
    ATTEMPTS_TABLE,
    KEPT_ATTEMPTS,
    ActivityTask,
    AttemptRecord,
    RunRecord,
    RunStatus,
    attempt_key,
    task_key,
)
from roost.workflow._local.activities._log import KEPT_ERRORS

if TYPE_CHECKING:
    import datetime as dt

    from roost.storage import Codec, WriteTxn
    from roost.workflow._local._commits import Commits

__all__ = ["forget_if_orphan", "reschedule"]

RUNNING = RunStatus.RUNNING


async def reschedule(
    commits: Commits,
    codec: Codec,
    task: ActivityTask,
    error: Error,
    *,
    now: dt.datetime,
    delay: float,
    started_at: dt.datetime,
) -> ActivityTask:
    """Store the task's next attempt, ``delay`` seconds after ``now``; returns that task.

    The failed attempt (begun at ``started_at``, ended ``now``) is recorded in
    ``attempts`` in the same commit, and the one ``KEPT_ATTEMPTS`` before it deleted.
    """
    failed = task.attempt
    # The latest errors only: under an unlimited policy the row must not grow for ever.
    errors = [*task.errors[-(KEPT_ERRORS - 1) :], error]
    task = attrs.evolve(
        task,
        attempt=failed + 1,
        not_before=deadline_after(now, delay),
        errors=errors,
    )
    data = codec.encode(task)
    key = task_key(task.run_id, task.seq)
    run_key = task.workflow_id.encode()
    attempt = codec.encode(
        AttemptRecord(
            seq=task.seq,
            attempt=failed,
            started_at=min(started_at, now),
            ended_at=now,
            error=error,
            next_attempt_at=task.not_before,
        )
    )

    def write(txn: WriteTxn) -> None:
        # Only while its run is open: a close purges the run's rows, and a row written
        # after it would outlive it. (One the workflow cancelled meanwhile is not read:
        # its history says it is not pending; the run's close deletes it.)
        stored = txn.get("runs", run_key)
        if stored is not None and _open_run(codec, stored, task.run_id):
            txn.put("tasks", key, data)
            txn.put(ATTEMPTS_TABLE, attempt_key(task.run_id, task.seq, failed), attempt)
            if failed > KEPT_ATTEMPTS:
                old = attempt_key(task.run_id, task.seq, failed - KEPT_ATTEMPTS)
                txn.delete(ATTEMPTS_TABLE, old)

    await commits.transact(write)
    return task


async def forget_if_orphan(commits: Commits, task: ActivityTask) -> None:
    """Delete the task's row if its run has closed.

    A row whose run has closed (left by a version that did not delete it at the close)
    is deleted; one of a run that is open but cannot resume here stays.
    """
    record = commits.stored_record(task.workflow_id)
    if record is None or record.run_id != task.run_id or record.status.value != "running":
        key = task_key(task.run_id, task.seq)
        await commits.transact(lambda txn: txn.delete("tasks", key))


def _open_run(codec: Codec, data: bytes, run_id: str) -> bool:
    """Whether the stored run record ``data`` is the open run ``run_id``."""
    try:
        record = codec.decode(data)
    except Exception:  # noqa: BLE001 - a run recovery could not read: not resumed here
        return False
    return isinstance(record, RunRecord) and record.run_id == run_id and record.status is RUNNING
