"""Closing a run from outside its code: terminate, run and execution timeouts.

Workflow code closes its run through an activation (``Effects``); these paths close it
without running any more of its code. Either way the closing record, the next run of
the chain (a retry or a cron run, when the close allows one) and the removal of the old
run's pending work commit in one transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from roost._errors import Error
from roost.actors._events import Exit
from roost.actors._node import ExitResult
from roost.storage import WriteTxn, key
from roost.workflow._family import apply_close_policies, follow, hand_over, run_state
from roost.workflow._history import TimerFired
from roost.workflow._phases import PhaseEvent, RunPhase
from roost.workflow._planner import (
    CloseOutcome,
    ClosePlan,
    TimeoutKind,
    plan_close,
    timeout_error,
)
from roost.workflow._records import PROGRESS_TABLE, RunStatus, TimerTask, timer_key
from roost.workflow._run import Run

if TYPE_CHECKING:
    from roost.workflow._host import RunHost

__all__ = ["announce_closed", "close_from_outside", "fire_timer"]

# Results that decode as themselves: no need to round-trip them through the codec.
_AS_RECORDED: frozenset[type] = frozenset({type(None), bool, int, float, str, bytes})


async def fire_timer(m: RunHost, timer: TimerTask) -> None:
    """A stored timer fell due: a workflow timer, or one of the runtime's own."""
    row = timer_key(timer.due, timer.run_id, timer.seq)
    task = (timer.workflow_id, timer.run_id)
    if timer.kind == "timer":
        await m.settle("timers", row, task, TimerFired(seq=timer.seq))
        return
    if not await m.commit_retrying(lambda txn: txn.delete("timers", row), "deleting a timer"):
        return
    run = m.runs.get(timer.workflow_id)
    if run is None or run.record.run_id != timer.run_id:
        return  # the run has closed or moved on since
    match timer.kind:
        case "start":
            if run.phase is RunPhase.HELD:
                m.runs.move(run, PhaseEvent.RELEASE)
                m.ready(run)
        case "run_timeout" | "execution_timeout":
            kind: TimeoutKind = "run" if timer.kind == "run_timeout" else "execution"
            seconds = run.record.options.get(timer.kind, 0.0)
            error = timeout_error(run.record.workflow_id, kind, seconds)
            await close_from_outside(m, run, RunStatus.TIMED_OUT, error)


async def close_from_outside(m: RunHost, run: Run, status: RunStatus, error: Error) -> None:
    """Close ``run`` (after an activation in flight finishes) without running its code."""
    try:
        await _close(m, run, status, error)
    finally:
        m.runs.done_closing(run)
        run.mark_closed()


async def _close(m: RunHost, run: Run, status: RunStatus, error: Error) -> None:
    m.runs.move(run, PhaseEvent.CLOSE)  # no activation after the one in flight
    await m.runs.wait_drained(run)
    current = m.runs.get(run.record.workflow_id)
    if current is not None and current is not run and status is RunStatus.TERMINATED:
        run = current  # it continued as new meanwhile: terminate stops the new run
        m.runs.move(run, PhaseEvent.CLOSE)
    elif run.record.status is not RunStatus.RUNNING:
        return  # its own last activation closed it meanwhile
    at = m.node.now()
    plan = plan_close(run_state(run.record), CloseOutcome.outside(status, error), at)
    assert plan.status is not None  # only a continue-as-new plans no closing record
    closing = attrs.evolve(
        run.record, status=plan.status, error=plan.error, closed_at=plan.closed_at
    )
    nxt = None if plan.next is None else follow(m, run, at, closing, plan.next)
    what = f"closing workflow {run.pid.id!r} ({status.value})"
    if not await m.commit_retrying(_close_writer(m, run, plan, closing, nxt), what):
        return  # the node stops: the run is still open in the store, as recovery finds it
    m.timers.drop(run)  # their rows went with the close
    run.record = closing
    if nxt is None:
        m.runs.remove(run)
        m.closed(run)
    else:
        # Inbox rows moved to the next run; settled task and timer rows are late events of
        # this run, which hand_over drops (deleting their rows).
        hand_over(m, run, *nxt, moved={k for k, _ in run.pending if isinstance(k, bytes)})


def _close_writer(
    m: RunHost,
    run: Run,
    plan: ClosePlan,
    closing: Any,
    nxt: tuple[Run, list[tuple[bytes, bytes, Any]]] | None,
) -> Any:
    codec = m.codec
    record = nxt[0].record if nxt is not None else closing
    rows = [("runs", record.workflow_id.encode(), codec.encode(record))]
    if nxt is not None:
        new, staged = nxt
        rows += [("inbox", k, v) for k, v, _ in staged]
        rows += [("timers", timer_key(t.due, t.run_id, t.seq), codec.encode(t)) for t in new.timers]
    run_id, run_key = closing.run_id, closing.workflow_id.encode()
    timers = m.timers.rows(run) if plan.drop_timers else []  # none of them fires now
    purge = plan.purge

    def write(txn: WriteTxn) -> None:
        for table in purge:
            for k, _ in list(txn.prefix(table, key(run_id))):
                txn.delete(table, k)
        for k in timers:
            txn.delete("timers", k)
        txn.delete(PROGRESS_TABLE, run_key)  # the closing record holds the final counters
        for table, k, v in rows:
            txn.put(table, k, v)

    return write


def announce_closed(m: RunHost, run: Run) -> None:
    """A run ended (its final status is committed): tell whoever is waiting."""
    m.runs.remove(run)
    m.runs.move(run, PhaseEvent.CLOSED)
    m.drop_settled(run.pending)  # finished after the run's last step began
    record = run.record
    error = record.error
    # As recorded (a tuple comes back a list, an enum its value), the same as a watcher
    # that arrives after the close, or after a restart, reads from the store.
    value = record.result
    if type(value) not in _AS_RECORDED:
        value = m.codec.decode(m.codec.encode(value))
    result = ExitResult(value, error)
    at = m.node.now()
    for watcher in run.watchers:
        proc = m.node.procs.get(watcher)
        if proc is not None:
            m.node.post_event(proc, Exit(run.pid, value, error, at))
        elif watcher.host == m.host:  # a parent workflow: into its history
            m.process_exited(watcher, Exit(run.pid, value, error, at))
    apply_close_policies(m, run)
    m.node.registry.release(run.pid)
    if error is not None:
        for linked in run.links:
            proc = m.node.procs.get(linked)
            if proc is not None:
                m.node.link_down(proc, run.pid, error, at)
    for chan in run.exit_chans:
        chan._try_send(result)
    m.runs.forget_driver(run)
