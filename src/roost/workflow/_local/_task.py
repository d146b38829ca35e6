"""One workflow task: activate → plan → reserve → commit → apply, for every caller.

A task runs one activation of a run on its driver, and ``plan_activation`` (``_plan``, pure)
turns its commands into a ``Step``: the rows to write, the run's new record, the effects
to carry out after the commit. ``Tasks`` is the thin shell around it, the same for the
executors (many steps, one group transaction) and the eager start (one step, committed with
the run's start):

- ``prepare``: the activation (under the task timeout) and its plan, then ``reserve``: the
  inbox numbers the step drew, its staged events, the ids of the children it starts and
  the hand-over to its successor are taken from their owners before anything else plans;
- ``commit``: the steps' rows in one transaction (``write_step`` interprets them); a step
  whose rows the store refuses fails alone, a failed commit fails them all;
- ``apply``: adopt the record, then each effect, one ``match``; or, for a step that did
  not commit, ``release`` gives its reservations back.

Whatever keeps an activation from being committed fails that workflow task
(``_task_failure``): nothing of it is stored, and it is retried.

Between a step's commit and its effects, ``after_commit`` (None unless a test sets it) sees
the committed step; returning False leaves its effects undone, as a crash at that point
would (crash tests kill the process from it).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from roost._errors import Error, ErrorKind
from roost._interrupt import is_ctrl_c
from roost.workflow._history import SpawnProcess, StopProcess
from roost.workflow._local._delivery import deliver_local, spawn_child, stop_process
from roost.workflow._local._forwarding import Moved, move_inbox, put_rows
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._plan import (
    DELETE,
    INBOX,
    PURGE,
    PUT,
    AcceptSends,
    ArmTimer,
    Closed,
    DropTimers,
    Effect,
    HandOver,
    Routes,
    RunActivity,
    SendLocal,
    StartChildRun,
    Step,
    StopActivity,
    plan_activation,
)
from roost.workflow._local._task_failure import (
    DEFAULT_TASK_TIMEOUT,
    task_failure_error,
    timeout_failure_error,
)
from roost.workflow._local._watchdog import TaskTimeout, guard

if TYPE_CHECKING:
    from roost._counters import RuntimeCounters
    from roost._pid import Pid
    from roost.actors._events import Exit
    from roost.actors._process import NodeOps
    from roost.storage import Codec, WriteTxn
    from roost.workflow._driver import Driver
    from roost.workflow._local._forwarding import Forwarding
    from roost.workflow._local._run import Pending, Run
    from roost.workflow._local._runs import RunTable
    from roost.workflow._local._timers import DurableTimers
    from roost.workflow._local.activities._worker import ActivityWorker

__all__ = [
    "EXECUTORS",
    "PASS_LIMIT",
    "StepFailed",
    "Tasks",
    "after_commit",
    "write_step",
]

log = logging.getLogger("roost.workflow")

# Each executor takes every ready run per pass (up to PASS_LIMIT), runs their activations
# and commits the pass in one group transaction. While one waits for its commit the next
# takes the runs that became ready meanwhile, so the disk is kept busy by a few of them.
EXECUTORS = 4
PASS_LIMIT = 512

# Commit failures that are the store's, not one step's: every step of the group fails
# with it (as any request of a failed group commit does).
_STORE_KINDS = frozenset({ErrorKind.UNAVAILABLE})


class HandOverFn(Protocol):
    """Gives a workflow id to the run that follows (``Closing.hand_over``)."""

    def __call__(
        self, old: Run, new: Run, staged: list[tuple[bytes, bytes, Any]], *, moved: set[Any]
    ) -> None: ...


# The one hook between a step's commit and its effects (see the module docstring).
after_commit: Callable[[Step], bool] | None = None


class StepFailed(Exception):  # noqa: N818 - carries the task failure, is not one itself
    """An activation failed before its commit; ``error`` is the task failure to record."""

    def __init__(self, error: Error, cause: BaseException | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.cause = cause


def write_step(txn: WriteTxn, step: Step, codec: Codec, forwarding: Forwarding) -> list[Moved]:
    """Write ``step``'s rows in ``txn``; return the rows the commit stored under other keys.

    Rows for other runs' inboxes are keyed by the run the store holds as they are written,
    and a hand-over moves the old run's stored rows (see ``_forwarding``).
    """
    moved: list[Moved] = []
    for kind, table, k, value in step.writes:
        if kind == PUT:
            txn.put(table, k, value)
        elif kind == DELETE:
            txn.delete(table, k)
        elif kind == PURGE:
            for row, _ in list(txn.prefix(table, k)):
                txn.delete(table, row)
        elif kind == INBOX:
            if value.rows:
                put_rows(txn, codec, forwarding, value.rows, moved)
            if value.handing_over is not None:
                succ = forwarding.after(value.handing_over)
                if succ is not None:
                    move_inbox(txn, codec, value.handing_over, succ, keep=(), out=moved)
    return moved


class Tasks:
    """The shell around ``plan_activation``: reservations, the group commit, the effects."""

    __slots__ = (
        "_accept",
        "_activities",
        "_arm",
        "_closed",
        "_counters",
        "_drop_staged",
        "_fail",
        "_forwarding",
        "_hand_over",
        "_hold_staged",
        "_node",
        "_process_exited",
        "_routes",
        "_runs",
        "_stats",
        "_timers",
        "_transact",
    )

    def __init__(
        self,
        *,
        routes: Routes,
        runs: RunTable,
        forwarding: Forwarding,
        hold_staged: Callable[[Iterable[tuple[bytes, bytes]]], None],
        drop_staged: Callable[[Iterable[bytes]], None],
        transact: Callable[[Callable[[WriteTxn], Any]], Any],
        activities: ActivityWorker,
        timers: DurableTimers,
        node: NodeOps,
        accept: Callable[[Run, list[Pending]], None],
        arm: Callable[[Run], None],
        closed: Callable[[Run], None],
        hand_over: HandOverFn,
        process_exited: Callable[[Pid, Exit], None],
        fail: Callable[[Run, list[Pending], Error, BaseException | None], None],
        counters: RuntimeCounters,
        stats: dict[str, int],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            routes: what plans read of the host.
            runs: the run table (children's ids are staged there).
            forwarding: hand-overs in progress (a successor's rows follow into it).
            hold_staged: keeps a step's encoded events until their runs accept them
                (``Incoming``, their one owner).
            drop_staged: forgets them when the step does not commit.
            transact: commits a write function in the next group transaction.
            activities: ``submit(task)`` / ``cancel(run_id, seq)``.
            timers: ``add(timer)`` / ``drop(run)``.
            node: delivery to plain processes.
            accept: hands committed events to a run.
            arm: arms the timers stored with a run's start.
            closed: announces a run's committed close.
            hand_over: moves a workflow id to the run that follows (``Closing.hand_over``).
            process_exited: records the EXIT of a process a run started.
            fail: fails a task (``_task_failure.fail_task``).
            counters: runs started, for the metrics.
            stats: the host's activation count.
        """
        self._routes, self._runs, self._forwarding = routes, runs, forwarding
        self._hold_staged, self._drop_staged = hold_staged, drop_staged
        self._transact = transact
        self._activities, self._timers = activities, timers
        self._node, self._accept, self._arm, self._closed = node, accept, arm, closed
        self._hand_over, self._process_exited, self._fail = hand_over, process_exited, fail
        self._counters, self._stats = counters, stats

    # -- before the commit ---------------------------------------------------------------

    def prepare(
        self,
        run: Run,
        driver: Driver,
        batch: list[Pending],
        at: dt.datetime,
        *,
        events: list[Any] | None = None,
    ) -> Step:
        """Run one activation of ``run`` on ``driver`` with ``batch``, plan it, reserve.

        ``events``: what the workflow sees, when not the events of ``batch`` (an eager
        start hands in the events it has not stored as rows).

        Raises:
            StepFailed: the activation failed or its rows cannot be built (a value that
                no longer encodes, say); nothing of it is reserved.
        """
        if events is None:
            events = [event for _, event in batch]
        # roost.now() never goes back within a run: after the wall clock jumps back, the
        # activation keeps the last one's time (recorded so, replay sees the same).
        at = max(at, driver.now)
        index = run.next_index
        seconds = run.record.options.get("task_timeout", DEFAULT_TASK_TIMEOUT)
        try:
            with guard(seconds) as watch:
                commands = driver.activate(at, events)
        except TaskTimeout:
            raise StepFailed(timeout_failure_error(run, watch), None) from None
        except BaseException as exc:
            if is_ctrl_c(exc):
                raise
            error = task_failure_error(run, index, exc, stage="activation")
            raise StepFailed(error, exc) from exc
        try:
            step = plan_activation(run, events, commands, at, self._routes, batch=batch)
        except (Exception, SystemExit, GeneratorExit) as exc:  # nothing committed: a task failure
            raise StepFailed(task_failure_error(run, index, exc, stage="commit"), exc) from exc
        self._reserve(step)
        return step

    def _reserve(self, step: Step) -> None:
        """Take from their owners what ``step`` drew while it was planned."""
        if step.numbers:
            for target, count in step.numbers:
                target.draw_inbox_numbers(count)
        if step.arriving:  # counted by the unread-message limit until accepted
            for target, count in step.arriving:
                target.arrive(count)
        if step.staged:
            self._hold_staged(step.staged)
        if step.children:
            for child in step.children:
                self._runs.stage_child(child.record.workflow_id)  # until committed or released
        if step.successor is not None:
            # Rows still stored for the run move to its successor (_forwarding).
            self._forwarding.reserve(step.run, step.successor)
        if step.exits_reported:
            for pid in step.exits_reported:
                step.run.exit_reported(pid)

    def release(self, step: Step) -> None:
        """``step`` was not committed: give back what it reserved."""
        for target, count in step.arriving:
            target.arrived(count)
        if step.staged:
            self._drop_staged(k for k, _ in step.staged)
        for child in step.children:
            self._runs.unstage_child(child.record.workflow_id)
        if step.successor is not None:
            self._forwarding.forget(step.successor)
        for pid in step.exits_reported:
            step.run.forget_exit(pid)

    # -- the commit ----------------------------------------------------------------------

    async def commit(
        self,
        steps: list[Step],
        *,
        before: Callable[[WriteTxn], None] | None = None,
        failed: Callable[[Step, Exception], None] | None = None,
    ) -> list[tuple[Step, list[Moved]]]:
        """Commit ``steps`` in one group transaction; return those that committed.

        ``before``: writes that go first in the same transaction (an eager start's own).
        ``failed``: what is done with a step that did not commit (by default it is
        released and its task failed).

        A step whose writes the store refuses fails only its own task: when the group's
        function raises (a key too long for the store, say), each step is committed alone.
        A commit the store itself fails (a full disk) fails every step of the group, as it
        fails every request of a group commit.
        """
        if not steps:
            return []
        on_failure = self._failed if failed is None else failed
        codec, forwarding = self._routes.codec, self._forwarding

        def writes(txn: WriteTxn) -> list[list[Moved]]:
            if before is not None:
                before(txn)
            return [write_step(txn, step, codec, forwarding) for step in steps]

        try:
            moved: list[list[Moved]] = await self._transact(writes)
        except Error as exc:
            if exc.kind in _STORE_KINDS or len(steps) == 1:
                for step in steps:
                    on_failure(step, exc)
                return []
        except Exception as exc:  # noqa: BLE001 - a step's own writes raised: isolate it
            if len(steps) == 1:
                on_failure(steps[0], exc)
                return []
        except BaseException:  # cancelled (the node stops): nothing of the pass is kept
            for step in steps:
                self.release(step)
            raise
        else:
            return list(zip(steps, moved, strict=True))
        committed: list[tuple[Step, list[Moved]]] = []
        for i, step in enumerate(steps):
            try:
                committed += await self.commit([step], before=before, failed=failed)
            except BaseException:  # cancelled (the node stops): the rest were not tried
                for rest in steps[i + 1 :]:
                    self.release(rest)
                raise
        return committed

    def _failed(self, step: Step, exc: Exception) -> None:
        self.release(step)
        error = task_failure_error(step.run, step.activation, exc, stage="commit")
        self._fail(step.run, step.batch, error, exc)

    # -- after the commit ----------------------------------------------------------------

    def apply(self, step: Step, moved: list[Moved]) -> None:
        """After ``step``'s commit: adopt its record, then carry out its effects.

        Nothing raises from here: a failure carrying out the effects is a bug, logged, and
        the run's state is rebuilt from the store when it is next activated.
        """
        run = step.run
        if run.phase is RunPhase.CLOSED:
            # A close commits only once no activation of the run is in flight: a closed run
            # here is a bug. Its closing record stays what it is; nothing of the step is run.
            log.error(
                "workflow %r: activation %d finished on a closed run", run.pid.id, step.activation
            )
            self.release(step)
            return
        for target, count in step.arriving:  # stored: the accepts below make them pending
            target.arrived(count)
        driver = run.driver
        run.step_committed(
            step.record, step.size, progress_row=step.progress_row, progress=step.progress
        )
        self._stats["activations"] += 1
        if after_commit is not None and not after_commit(step):
            return
        try:
            submit = self._activities.submit
            for effect in step.effects:
                if type(effect) is RunActivity:  # most effects: no match to walk
                    submit(effect.task)
                else:
                    self._carry_out(run, effect, moved)
        except Exception:
            log.exception(
                "workflow %r: activation %d is committed, but carrying out its effects failed",
                run.pid.id,
                step.activation,
            )
            if run.driver is driver:
                self._runs.forget_driver(run)
            for child in step.children:  # whatever of the effects ran, free their ids
                self._runs.unstage_child(child.record.workflow_id)

    def _carry_out(self, run: Run, effect: Effect, moved: list[Moved]) -> None:
        match effect:
            case RunActivity(task=task):
                self._activities.submit(task)
            case StopActivity(run_id=run_id, seq=seq):
                self._activities.cancel(run_id, seq)
            case ArmTimer(timer=timer):
                self._timers.add(timer)
            case DropTimers():
                self._timers.drop(run)
            case AcceptSends(sends=sends):
                self._forwarding.record(moved)  # before any accept: the commit moved these
                for target, k, event in sends:
                    self._accept(target, [(k, event)])
            case SpawnProcess():
                spawn_child(self._node, self._process_exited, run, effect)
            case SendLocal(sender=sender, send=send):
                deliver_local(self._node, sender, send)
            case StartChildRun(child=child):
                run.forget_exit(child.pid)  # an id may be run again
                self._runs.add(child)
                self._runs.unstage_child(child.record.workflow_id)  # open now: the id is taken
                self._counters.run_started(child.record.workflow_type)
                self._arm(child)
                start = child.take_start_rows()
                self._accept(child, [(k, event) for k, _, event in start])
            case StopProcess():
                stop_process(self._node, run.pid, effect)
            case HandOver(new=new, staged=staged, moved=moved_keys):
                self._hand_over(run, new, list(staged), moved=set(moved_keys))
            case Closed():
                self._closed(run)
