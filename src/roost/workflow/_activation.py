"""One activation of a run: run its code, commit what it did, dispatch the effects.

One activation = one transaction: the activation record, the removal of the inbox events
it consumed, its activity tasks, timers, messages to other workflows and the run's new
status commit together; effects (running activities, arming timers, messages to plain
processes, EXIT events) are dispatched only after that commit. Whatever keeps an
activation from being committed fails that workflow task (``_task_failure``): nothing of
it is stored, and it is retried.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from roost._interrupt import is_ctrl_c
from roost.workflow._driver import Driver
from roost.workflow._drivers import ReplayFailed, rebuild, touch
from roost.workflow._effects import Effects
from roost.workflow._history import Activation
from roost.workflow._quarantine import RunQuarantined, quarantine_run
from roost.workflow._run import Run, Settled
from roost.workflow._task_failure import (
    DEFAULT_TASK_TIMEOUT,
    fail_task,
    task_failure_error,
    timeout_failure_error,
)
from roost.workflow._watchdog import TaskTimeout, guard

if TYPE_CHECKING:
    from roost.workflow._host import RunHost, StartWrites

__all__ = ["activate", "record_activation"]

log = logging.getLogger("roost.workflow")


async def activate(m: RunHost, run: Run) -> None:
    """Run and commit one activation of ``run``; a failure fails only this task.

    See ``_task_failure`` for what fails the task rather than the workflow.
    """
    try:
        driver = run.driver or rebuild(m, run)
    except RunQuarantined as exc:  # a stored row is unreadable: set aside, not retried
        await quarantine_run(m, run, exc)
        return
    except ReplayFailed as exc:
        error = task_failure_error(run, exc.activation, exc.cause, stage="replay")
        fail_task(m, run, [], error, exc.cause)
        return
    run.driver = driver
    touch(m, run)
    batch, run.pending = run.pending, []
    at = m.node.now()
    seconds = run.record.options.get("task_timeout", DEFAULT_TASK_TIMEOUT)
    try:
        with guard(seconds) as watch:
            commands = driver.activate(at, [event for _, event in batch])
    except TaskTimeout:
        fail_task(m, run, batch, timeout_failure_error(run, watch), None)
        return
    except BaseException as exc:
        if is_ctrl_c(exc):
            raise
        error = task_failure_error(run, run.next_index, exc, stage="activation")
        fail_task(m, run, batch, error, exc)
        return
    events = [e for _, e in batch]
    consumed = [k for k, _ in batch]
    try:
        await record_activation(
            m, run, driver, at, events=events, commands=commands, consumed=consumed
        )
    except Exception as exc:  # noqa: BLE001 - nothing of it was committed: a task failure
        error = task_failure_error(run, run.next_index, exc, stage="commit")
        fail_task(m, run, batch, error, exc)


async def record_activation(
    m: RunHost,
    run: Run,
    driver: Driver,
    at: dt.datetime,
    *,
    events: list[Any],
    commands: list[Any],
    consumed: list[bytes | Settled],
    start: StartWrites | None = None,
) -> None:
    """Commit an activation of ``run`` (its driver has run it), then dispatch its effects.

    ``start``: a run's beginning, committed with its first activation (``_eager``).

    Raises:
        Whatever kept the activation from being committed (a value that does not
        encode, a key that does not fit, a store error); then nothing of it is stored.
        Once it is committed nothing is raised: a failure dispatching its effects is
        logged.
    """
    act = Activation(index=run.next_index, at=at, events=events, commands=commands)
    effects = Effects(m, run, at, events)
    try:
        for command in commands:
            effects.add(command)
        write = effects.writer(act, consumed)
        await m.transact(write if start is None else start.before(write))
    except BaseException:
        effects.discard()
        raise
    run.next_index += 1
    run.record = effects.record
    run.task_failures = 0
    driver.recorded(effects.size)
    m.stats["activations"] += 1
    if start is not None:
        m.arm(run)
    try:
        effects.dispatch()
    except Exception:
        # A bug, not a task failure (the activation is stored): the node goes on, and
        # the run's state is rebuilt from the store when it is next activated.
        log.exception(
            "workflow %r: activation %d is committed, but dispatching its effects failed",
            run.pid.id,
            act.index,
        )
        if run.driver is driver:
            driver.close()
            run.driver = None
            m.cached.pop(run.record.workflow_id, None)
