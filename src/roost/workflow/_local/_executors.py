"""The executors: a few tasks that drain the ready queue, one pass and one commit at a time.

A run with pending events is queued (``Executors.ready``). An idle executor takes
every queued run (up to ``PASS_LIMIT``), runs their activations back to back, commits them
in one group transaction (``Tasks.commit``) and then applies their effects. While it
waits for that commit, another executor takes the runs that became ready meanwhile.

The activity runner hands results on in passes of its own; the runs they make ready are
held until its pass ends (``hold``/``release``). If then no executor is in a pass, the
runner takes those runs' pass itself, as an executor would (same taking, commit and
release): the node is idle but for this chain of steps, and waking an executor would only
add a scheduler round trip between an activity's result and the activation it resumes.
"""

from __future__ import annotations

import gc
from collections import deque
from typing import TYPE_CHECKING

import trio

from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._plan import Step
from roost.workflow._local._quarantine import RunQuarantined
from roost.workflow._local._replay import Drivers, ReplayFailed, Stored, paused_gc
from roost.workflow._local._run import Run
from roost.workflow._local._task import EXECUTORS, PASS_LIMIT, StepFailed, Tasks
from roost.workflow._local._task_failure import TaskFailures, task_failure_error

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable

    from roost.workflow._local._runs import RunTable

__all__ = ["Executors", "freeze_startup_heap"]

_FROZEN: list[bool] = []


def freeze_startup_heap() -> None:
    """Move what is alive as the first node's workflow runtime starts out of the collector's view.

    It runs before any run is loaded or recovered. The modules, classes and functions
    imported by then live as long as the interpreter: every full collection walked them
    again (a third of the tracked heap of a node with few open runs). ``gc.freeze`` moves
    them to the permanent generation, once per interpreter. Runs, their drivers and what
    later nodes load stay collectable (frozen, their cycles would never be freed).
    """
    if not _FROZEN:
        _FROZEN.append(True)
        gc.collect()
        gc.freeze()


class Executors:
    """The ready queue of one node's workflow runtime and the tasks that drain it."""

    __slots__ = (
        "_drivers",
        "_failures",
        "_held",
        "_idle",
        "_now",
        "_quarantine",
        "_ready",
        "_runs",
        "_tasks",
    )

    def __init__(self, runs: RunTable) -> None:
        """An empty ready queue over ``runs`` (its phases); ``start`` gives it its passes."""
        self._runs = runs
        self._ready: deque[Run] = deque()  # queued for an executor's next pass
        self._idle = trio.lowlevel.ParkingLot()  # executors waiting for a queued run
        self._held = False  # queued runs wait for ``run_held`` (no executor is woken)

    def start(
        self,
        nursery: trio.Nursery,
        *,
        tasks: Tasks,
        drivers: Drivers,
        failures: TaskFailures,
        now: Callable[[], dt.datetime],
        quarantine: Callable[[Run, RunQuarantined], Awaitable[None]],
    ) -> None:
        """Start the executor tasks in ``nursery``, with what their passes use.

        Args:
            nursery: where the executor tasks run.
            tasks: prepares, commits and applies the pass's steps.
            drivers: builds and rebuilds the runs' drivers.
            failures: fails a task that cannot be prepared.
            now: the node's clock.
            quarantine: sets aside a run whose stored rows cannot be read.
        """
        self._tasks, self._drivers, self._failures = tasks, drivers, failures
        self._now, self._quarantine = now, quarantine
        for _ in range(EXECUTORS):
            nursery.start_soon(self._executor, name="roost.workflow.executor")

    def ready(self, run: Run) -> None:
        """Queue ``run`` for an activation if it has events and may take one."""
        if run.phase is _IDLE and run.pending:
            self._runs.move(run, _QUEUE)
            self._ready.append(run)
            if self._idle and not self._held:
                self._idle.unpark()

    def hold(self) -> None:
        """Runs queued from now on wait for ``release`` (a caller's synchronous pass)."""
        self._held = True

    def release(self, *, take: bool) -> bool:
        """End ``hold``. Returns True if the caller is to run the held runs' pass itself.

        That is when ``take`` allows it, the queued runs fit in one pass and no executor is
        in a pass: the caller then calls ``take_pass`` at once. Otherwise as many executors
        are woken as the queued runs fill passes, all in this tick, so that their commits
        share one group transaction (one woken by another would commit on its own).
        """
        self._held = False
        queued = len(self._ready)
        if not queued:
            return False
        if take and queued <= PASS_LIMIT and len(self._idle) == EXECUTORS:
            return True
        self._idle.unpark(count=min(len(self._idle), -(-queued // PASS_LIMIT)))
        return False

    async def _executor(self) -> None:
        ready, idle = self._ready, self._idle
        while True:
            while not ready:
                await idle.park()
            await self.take_pass()

    async def take_pass(self) -> None:
        """Take the queued runs (up to PASS_LIMIT) and run their pass in this task."""
        ready, table = self._ready, self._runs
        current, move = table.get, table.move
        runs: list[Run] = []
        while ready and len(runs) < PASS_LIMIT:
            run = ready.popleft()
            if run.phase is not _QUEUED or current(run.record.workflow_id) is not run:
                continue  # closed or set aside since it was queued
            move(run, _TAKE)
            runs.append(run)
        if ready and self._idle:
            self._idle.unpark()  # more than one pass is ready
        try:
            await self._pass(runs)
        finally:
            for run in runs:
                move(run, _DONE)  # a close from outside waits for this
            again = self.ready
            for run in runs:
                if run.pending:  # most runs wait for an activity: no call to make
                    again(run)

    async def _pass(self, runs: list[Run]) -> None:
        """One pass: every run's activation, one group commit, their effects."""
        steps: list[Step] = []
        quarantined: list[tuple[Run, RunQuarantined]] | None = None
        # No collection in the middle of a pass: what a pass allocates lives until its
        # commit, so the young collections it would trigger find little to free, and each
        # one counts towards the full collections that walk every open run.
        with paused_gc():
            # After a restart, most runs replay first: their histories in one read (one run
            # alone reads its own, as ``read_histories`` would have it do anyway).
            histories = self._drivers.read_histories(runs) if len(runs) > 1 else None
            for run in runs:
                began = self._begin(run, histories.get(run.record.run_id) if histories else None)
                if isinstance(began, Step):
                    steps.append(began)
                elif began is not None:
                    if quarantined is None:
                        quarantined = []
                    quarantined.append((run, began))
        tasks = self._tasks
        committed = await tasks.commit(steps)
        with paused_gc():
            for step, moved in committed:
                tasks.apply(step, moved)
        if quarantined is not None:
            for run, exc in quarantined:
                await self._quarantine(run, exc)

    def _begin(self, run: Run, stored: Stored | None = None) -> Step | RunQuarantined | None:
        """A pass's start of a task of ``run``: its driver, its pending events, ``prepare``.

        ``stored``: the run's history rows, if its pass read them ahead (``read_histories``).

        Returns the prepared step; the ``RunQuarantined`` to act on when a stored row of the
        run is unreadable; or None when the task failed (already handed to ``fail``).
        """
        driver = run.driver
        if driver is None:
            try:
                driver = self._drivers.rebuild(run, stored)
            except RunQuarantined as exc:  # a stored row is unreadable: set aside, not retried
                return exc
            except ReplayFailed as exc:
                error = task_failure_error(run, exc.activation, exc.cause, stage="replay")
                self._failures.fail(run, [], error, exc.cause)
                return None
            run.attach_driver(driver)
        self._drivers.touch(run)
        batch = run.take_pending()
        try:
            return self._tasks.prepare(run, driver, batch, self._now())
        except StepFailed as failed:
            self._failures.fail(run, batch, failed.error, failed.cause)
            return None


_QUEUED, _TAKE, _DONE = RunPhase.QUEUED, PhaseEvent.TAKE, PhaseEvent.DONE
_IDLE, _QUEUE = RunPhase.IDLE, PhaseEvent.QUEUE
