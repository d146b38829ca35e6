"""Closing a run from outside its code: terminate, run and execution timeouts.

Workflow code closes its run through an activation (``Effects``); these paths close it
without running any more of its code. Either way the closing record, the next run of
the chain (a retry or a cron run, when the close allows one) and the removal of the old
run's pending work commit in one transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from roost import _telemetry as telemetry
from roost._errors import Error
from roost.actors._events import Exit
from roost.actors._node import ExitResult
from roost.storage import WriteTxn, key
from roost.workflow._history import TimerFired
from roost.workflow._local._forwarding import Moved, move_inbox
from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._plan import run_state
from roost.workflow._local._records import PROGRESS_TABLE, RunStatus, TimerTask, timer_key
from roost.workflow._local._run import Run
from roost.workflow._local._successors import apply_close_policies, follow, hand_over
from roost.workflow._plan_close import plan_announce, plan_timer, records_event
from roost.workflow._planner import CloseOutcome, ClosePlan, plan_close

if TYPE_CHECKING:
    from roost.workflow._local._host import RunHost

__all__ = ["announce_closed", "close_from_outside", "fire_timer"]

# Results that decode as themselves: no need to round-trip them through the codec.
_AS_RECORDED: frozenset[type] = frozenset({type(None), bool, int, float, str, bytes})


async def fire_timer(m: RunHost, timer: TimerTask) -> None:
    """A stored timer fell due: act on ``plan_timer`` for its kind."""
    row = timer_key(timer.due, timer.run_id, timer.seq)
    if records_event(timer.kind):  # the step recording its event deletes the row
        await m.settle("timers", row, (timer.workflow_id, timer.run_id), TimerFired(seq=timer.seq))
        return
    if not await m.commit_retrying(lambda txn: txn.delete("timers", row), "deleting a timer"):
        return
    run = m.runs.get(timer.workflow_id)
    current = run is not None and run.record.run_id == timer.run_id
    options = run.record.options if run is not None else {}
    plan = plan_timer(timer.kind, workflow_id=timer.workflow_id, current=current, options=options)
    if run is None or plan.action == "none":
        return  # the run has closed or moved on since
    if plan.action == "release":
        if run.phase is RunPhase.HELD:
            m.runs.move(run, PhaseEvent.RELEASE)
            m.ready(run)
    elif plan.action == "close" and plan.error is not None:
        await close_from_outside(m, run, RunStatus.TIMED_OUT, plan.error)


async def close_from_outside(m: RunHost, run: Run, status: RunStatus, error: Error) -> None:
    """Close ``run`` (after an activation in flight finishes) without running its code."""
    try:
        await _close(m, run, status, error)
    finally:
        m.runs.done_closing(run)
        run.mark_closed()


async def _close(m: RunHost, run: Run, status: RunStatus, error: Error) -> None:
    m.runs.move(run, PhaseEvent.CLOSE)  # no activation after the one in flight
    while True:
        await m.runs.wait_drained(run)
        current = m.runs.get(run.record.workflow_id)
        if current is None or current is run or status is not RunStatus.TERMINATED:
            break
        # It continued as new meanwhile: terminate stops the new run, once the activation
        # an executor may have begun on it is over (its timers and tasks are stored then,
        # and this close deletes them); that one may have continued as new again.
        run = current
        m.runs.move(run, PhaseEvent.CLOSE)
    if run.record.status is not RunStatus.RUNNING:
        return  # its own last activation closed it meanwhile
    at = m.node.now()
    plan = plan_close(run_state(run.record, run.pending), CloseOutcome.outside(status, error), at)
    assert plan.status is not None  # only a continue-as-new plans no closing record
    closing = attrs.evolve(
        run.record, status=plan.status, error=plan.error, closed_at=plan.closed_at
    )
    nxt = None if plan.next is None else follow(m, run, at, closing, plan.next)
    what = f"closing workflow {run.pid.id!r} ({status.value})"
    forwarded: list[Moved] = []
    # The rows ``follow`` carried over (restaged): those arriving during the commit are
    # handed on after it (hand_over), moved by the commit or not.
    carried = {k for k, _ in run.pending if isinstance(k, bytes)}
    writer = _close_writer(m, run, plan, closing, nxt, carried=carried, out=forwarded)
    if not await m.commit_retrying(writer, what):
        return  # the node stops: the run is still open in the store, as recovery finds it
    m.timers.drop(run)  # their rows went with the close
    run.record = closing
    if nxt is None:
        m.runs.remove(run)
        m.closed(run)
    else:
        # Inbox rows moved to the next run; settled task and timer rows are late events of
        # this run, which hand_over drops (deleting their rows).
        m.forwarding.record(forwarded)
        hand_over(m, run, *nxt, moved=set(carried))


def _close_writer(
    m: RunHost,
    run: Run,
    plan: ClosePlan,
    closing: Any,
    nxt: tuple[Run, list[tuple[bytes, bytes, Any]]] | None,
    *,
    carried: set[bytes],
    out: list[Moved],
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
    inbox_of = m.forwarding.after(run_id) if nxt is not None else None

    def write(txn: WriteTxn) -> None:
        if inbox_of is not None:  # before the purge: rows still stored move with the id
            out.clear()
            move_inbox(txn, codec, run_id, inbox_of, keep=carried, out=out)
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
    m.forwarding.forget(run)  # rows for it are not written any more (_forwarding)
    if telemetry.tracing:
        telemetry.run_closed(run.record)
    m.runs.remove(run)
    m.runs.move(run, PhaseEvent.CLOSED)
    m.drop_settled(run.pending)  # finished after the run's last step began
    record = run.record
    m.counters.run_closed(record.workflow_type, record.status.value)
    error = record.error
    # As recorded (a tuple comes back a list, an enum its value), the same as a watcher
    # that arrives after the close, or after a restart, reads from the store.
    value = record.result
    if type(value) not in _AS_RECORDED:
        value = m.codec.decode(m.codec.encode(value))
    result = ExitResult(value, error)
    at = m.node.now()
    procs = m.node.procs
    plan = plan_announce(
        watchers=run.watchers,
        links=run.links,
        error=error,
        live={pid for pid in (*run.watchers, *run.links) if pid in procs},
        workflow_host=m.host,
    )
    for watcher in plan.exit_processes:
        m.node.post_event(procs[watcher], Exit(run.pid, value, error, at))
    for watcher in plan.exit_workflows:  # a parent workflow: into its history
        m.process_exited(watcher, Exit(run.pid, value, error, at))
    apply_close_policies(m, run)
    m.node.registry.release(run.pid)
    for linked in plan.link_downs:  # only with an error
        proc = procs.get(linked)
        if proc is not None and error is not None:  # the close policies may have ended it
            m.node.link_down(proc, run.pid, error, at)
    for chan in run.exit_chans:
        chan._try_send(result)
    m.runs.forget_driver(run)
