"""One workflow task: activation → commands → plan → commit → effects → announce.

One activation = one set of writes in one transaction: the activation record, the removal
of the inbox events it consumed, its activity tasks, timers, messages to other workflows
and the run's new status; effects (running activities, arming timers, messages to plain
processes, EXIT events) are dispatched only after that commit. Whatever keeps an
activation from being committed fails that workflow task (``_task_failure``): nothing of
it is stored, and it is retried.

The task is three calls, the same for every caller: ``prepare`` (synchronous: rebuild or
reuse the driver, run the activation, turn its commands into planned writes), the commit
(``commit_steps``: the executors commit a whole pass of prepared steps in one group
transaction, an eager start commits its one step with the run's start), and ``finish``
(synchronous: adopt the new state, dispatch the effects, announce a close).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from roost._errors import Error, ErrorKind
from roost._interrupt import is_ctrl_c
from roost.storage import WriteTxn
from roost.workflow._driver import Driver
from roost.workflow._history import Activation, Event, new_activation
from roost.workflow._local._effects import Effects
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._quarantine import RunQuarantined
from roost.workflow._local._records import TerminateRequest
from roost.workflow._local._replay import ReplayFailed, Stored, rebuild, touch
from roost.workflow._local._run import Pending, Run, Settled
from roost.workflow._local._task_failure import (
    DEFAULT_TASK_TIMEOUT,
    fail_task,
    task_failure_error,
    timeout_failure_error,
)
from roost.workflow._local._watchdog import TaskTimeout, guard

if TYPE_CHECKING:
    from roost.workflow._local._host import RunHost

__all__ = [
    "EXECUTORS",
    "PASS_LIMIT",
    "Step",
    "StepFailed",
    "commit_steps",
    "finish",
    "prepare",
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


class StepFailed(Exception):  # noqa: N818 - carries the task failure, is not one itself
    """An activation failed before its commit; ``error`` is the task failure to record."""

    def __init__(self, error: Error, cause: BaseException | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.cause = cause


class Step:
    """A prepared activation: its planned effects and the writes that commit it."""

    __slots__ = ("act", "batch", "driver", "effects", "run", "write")

    def __init__(
        self,
        run: Run,
        driver: Driver,
        act: Activation,
        batch: list[Pending],
        *,
        effects: Effects,
        write: Callable[[WriteTxn], None],
    ) -> None:
        self.run, self.driver, self.act, self.batch = run, driver, act, batch
        self.effects, self.write = effects, write


def prepare(
    m: RunHost,
    run: Run,
    driver: Driver,
    batch: list[Pending],
    at: dt.datetime,
    *,
    events: list[Event] | None = None,
) -> Step:
    """Run one activation of ``run`` on ``driver`` with ``batch`` and plan its commit.

    ``events``: what the workflow sees, when not the events of ``batch`` (an eager start
    hands in the events it has not stored as rows).

    Raises:
        StepFailed: the activation failed or its writes cannot be built (a value that no
            longer encodes, say); nothing of it is staged.
    """
    keys: list[bytes | Settled] = []
    if events is None:
        events = []
        for k, event in batch:  # one walk for both (most batches hold one event)
            # A run with a terminate request pending is terminated, never activated.
            assert not isinstance(event, TerminateRequest)
            keys.append(k)
            events.append(event)
    else:
        for k, _ in batch:
            keys.append(k)
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
        raise StepFailed(task_failure_error(run, index, exc, stage="activation"), exc) from exc
    act = new_activation(index, at, events, commands)
    effects = Effects(m, run, at, events)
    try:
        for command in commands:
            effects.add(command)
        write = effects.writer(act, keys)
    except (Exception, SystemExit, GeneratorExit) as exc:  # nothing committed: a task failure
        effects.discard()
        raise StepFailed(task_failure_error(run, index, exc, stage="commit"), exc) from exc
    return Step(run, driver, act, batch, effects=effects, write=write)


def begin(m: RunHost, run: Run, stored: Stored | None = None) -> Step | RunQuarantined | None:
    """An executor's start of a task of ``run``: its driver, its pending events, ``prepare``.

    ``stored``: the run's history rows, if its pass read them ahead (``read_histories``).

    Returns the prepared step; the ``RunQuarantined`` to act on when a stored row of the
    run is unreadable; or None when the task failed (already handed to ``fail_task``).
    """
    driver = run.driver
    if driver is None:
        try:
            driver = run.driver = rebuild(m, run, stored)
        except RunQuarantined as exc:  # a stored row is unreadable: set aside, not retried
            return exc
        except ReplayFailed as exc:
            error = task_failure_error(run, exc.activation, exc.cause, stage="replay")
            fail_task(m, run, [], error, exc.cause)
            return None
    touch(m, run)
    batch, run.pending = run.pending, []
    try:
        return prepare(m, run, driver, batch, m.node.now())
    except StepFailed as failed:
        fail_task(m, run, batch, failed.error, failed.cause)
        return None


async def commit_steps(m: RunHost, steps: list[Step]) -> list[Step]:
    """Commit ``steps`` in one group transaction; return those that committed.

    A step whose writes the store refuses fails only its own task: when the group's
    function raises (a key too long for the store, say), each step is committed alone.
    A commit the store itself fails (a full disk) fails every step of the group, as it
    fails every request of a group commit.
    """
    if not steps:
        return []
    if len(steps) == 1:
        writes = steps[0].write
    else:
        fns = [step.write for step in steps]

        def writes(txn: WriteTxn) -> None:
            for fn in fns:
                fn(txn)

    try:
        await m.transact(writes)
    except Error as exc:
        if exc.kind in _STORE_KINDS or len(steps) == 1:
            _fail_all(m, steps, exc)
            return []
    except Exception as exc:  # noqa: BLE001 - a step's own writes raised: isolate it
        if len(steps) == 1:
            _fail_all(m, steps, exc)
            return []
    except BaseException:  # cancelled (the node stops): nothing of the pass is kept
        for step in steps:
            step.effects.discard()
        raise
    else:
        return steps
    committed: list[Step] = []
    for step in steps:
        committed += await commit_steps(m, [step])
    return committed


def _fail_all(m: RunHost, steps: list[Step], exc: Exception) -> None:
    for step in steps:
        step.effects.discard()
        error = task_failure_error(step.run, step.act.index, exc, stage="commit")
        fail_task(m, step.run, step.batch, error, exc)


def finish(m: RunHost, step: Step) -> None:
    """After ``step``'s commit: adopt its state, dispatch its effects, announce a close.

    Nothing raises from here: a failure dispatching the effects is a bug, logged, and the
    run's state is rebuilt from the store when it is next activated.
    """
    run, driver, effects = step.run, step.driver, step.effects
    if run.phase is RunPhase.CLOSED:
        # A close commits only once no activation of the run is in flight: a closed run
        # here is a bug. Its closing record stays what it is; nothing of the step is run.
        log.error("workflow %r: activation %d finished on a closed run", run.pid.id, step.act.index)
        effects.discard()
        return
    run.next_index += 1
    run.record = effects.record
    run.task_failures = 0
    driver.recorded(effects.size)
    m.stats["activations"] += 1
    try:
        effects.dispatch()
    except Exception:
        log.exception(
            "workflow %r: activation %d is committed, but dispatching its effects failed",
            run.pid.id,
            step.act.index,
        )
        if run.driver is driver:
            m.runs.forget_driver(run)
        for child in effects.children:  # whatever of the dispatch ran, free their ids
            m.runs.unstage_child(child.record.workflow_id)
