"""Eager start: a new run's first activation commits with its start, in one transaction.

Without it a start is two commits in a row: the run record with its ``Started`` event in the
inbox, then the first activation, which records that event and deletes its row. When the
run may begin at once, the caller's task runs the first activation right away (as
Temporal's eager workflow start hands the first workflow task to the starter) and one
transaction stores the run record, its runtime timers and that activation. The history is
the same either way: activation 1 holds ``Started`` (and the start messages) and the
commands the workflow issued; a crash before the commit leaves nothing (the start was
never acknowledged), after it the run is recovered as any other.

The normal path remains for a run that must wait (a start delay or a retry's backoff), for
a first activation whose task fails (``_task_failure``: it runs past its task_timeout, its
code raises ``SystemExit``, its commit fails, ...: that activation is discarded, the start
is stored the normal way, and the executor's retry takes it from there; only if the store
refuses the start too does the starter get the error, with nothing stored), and for starts
beyond ``EAGER_LIMIT`` in flight at once: each holds its step's state until its commit,
and a burst of thousands of starts would otherwise hold them all at the same time (the
executors bound ordinary activations the same way).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost._errors import Error
from roost.storage import WriteTxn
from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._plan import Step
from roost.workflow._local._records import timer_key
from roost.workflow._local._task import EXECUTORS, PASS_LIMIT, StepFailed, Tasks
from roost.workflow._local._task_failure import task_failure_error
from roost.workflow._recorded import recorded

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable

    from roost.storage import Codec
    from roost.workflow._local._replay import Drivers
    from roost.workflow._local._run import Run
    from roost.workflow._local._runs import RunTable
    from roost.workflow._local._task_failure import TaskFailures

__all__ = ["EAGER_LIMIT", "EagerStarts", "Start"]

# At most this many first activations run eagerly at once: as many as the executors hold
# in flight (each holds its step's state until its commit).
EAGER_LIMIT = EXECUTORS * PASS_LIMIT


class Start:
    """What a run's beginning adds to its first activation's transaction: its timers."""

    __slots__ = ("rows",)

    def __init__(self, codec: Codec, run: Run) -> None:
        self.rows = [(timer_key(t.due, t.run_id, t.seq), codec.encode(t)) for t in run.timers]

    def write(self, txn: WriteTxn) -> None:
        """The start's own rows (its runtime timers), before its first activation's."""
        for k, v in self.rows:
            txn.put("timers", k, v)


class EagerStarts:
    """Runs new runs' first activations in their starters' tasks, ``EAGER_LIMIT`` at a time."""

    __slots__ = (
        "_arm",
        "_codec",
        "_commit_start",
        "_drivers",
        "_failures",
        "_now",
        "_ready",
        "_runs",
        "_stopping",
        "_tasks",
        "in_flight",
    )

    def __init__(
        self,
        *,
        codec: Codec,
        runs: RunTable,
        tasks: Tasks,
        drivers: Drivers,
        failures: TaskFailures,
        now: Callable[[], dt.datetime],
        stopping: Callable[[], bool],
        ready: Callable[[Run], None],
        commit_start: Callable[[Run, list[Any]], Awaitable[None]],
        arm: Callable[[Run], None],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            codec: encodes the start's rows and what the workflow will see.
            runs: the run table (the run's phase).
            tasks: prepares, commits and applies the first step.
            drivers: builds the run's driver.
            failures: fails a first step that cannot commit.
            now: the node's clock.
            stopping: whether the node is stopping (then nothing starts eagerly).
            ready: queues the run for events that arrived meanwhile.
            commit_start: stores a start the normal way.
            arm: arms the timers stored with the start.
        """
        self._codec, self._runs, self._tasks, self._drivers = codec, runs, tasks, drivers
        self._failures, self._now, self._stopping, self._ready = failures, now, stopping, ready
        self._commit_start, self._arm = commit_start, arm
        self.in_flight = 0  # first activations running in their starters

    def ok(self, run: Run) -> bool:
        """Whether ``run`` (new, not stored yet) may take its first activation now."""
        return run.phase is RunPhase.IDLE and not self._stopping() and self.in_flight < EAGER_LIMIT

    async def start(self, run: Run, events: list[Any]) -> None:
        """Run and commit ``run``'s first activation together with its start.

        Raises:
            roost.Error: the store refused the start (after a failed first activation, the
                start alone is tried too); then nothing is stored and the run is gone from
                memory.
        """
        # The workflow sees what will be recorded (a tuple comes back a list), as on replay.
        events_in = [recorded(self._codec, event) for event in events]
        driver = self._drivers.new(run)
        run.attach_driver(driver)
        self._drivers.touch(run)
        self._runs.move(run, PhaseEvent.TAKE)  # no executor takes it; events that arrive wait
        self.in_flight += 1
        tasks = self._tasks
        try:
            try:
                step = tasks.prepare(run, driver, [], self._now(), events=events_in)
            except StepFailed as failed:
                await self._store_start_then_fail(run, events, failed.error, failed.cause)
                return
            refused: list[Exception] = []

            def refuse(step: Step, exc: Exception) -> None:  # nothing of it was committed
                tasks.release(step)
                refused.append(exc)

            # Most runs arm no runtime timer: their first activation's writes are the start.
            before = Start(self._codec, run).write if run.timers else None
            committed = await tasks.commit([step], before=before, failed=refuse)
            if not committed:
                error = task_failure_error(run, 1, refused[0], stage="commit")
                await self._store_start_then_fail(run, events, error, refused[0])
                return
            self._arm(run)
            tasks.apply(*committed[0])
        finally:
            self.in_flight -= 1
            self._runs.move(run, PhaseEvent.DONE)  # a close from outside waits for this
        self._ready(run)  # events that arrived during the commit

    async def _store_start_then_fail(
        self, run: Run, events: list[Any], error: Error, cause: BaseException | None
    ) -> None:
        """The first activation failed: store the start the normal way, then fail the task.

        As for any activation, nothing of it is kept, the failure is recorded and the task
        retried after a backoff. If the start cannot be stored either, that error goes to
        the starter and nothing of the run is stored.
        """
        self._runs.forget_driver(run)
        await self._commit_start(run, events)
        self._failures.fail(run, [], error, cause)
