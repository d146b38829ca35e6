"""A workflow's lineage: the runs of one id (continue-as-new, retries, cron) and children."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

from roost import _telemetry as telemetry
from roost._errors import Error
from roost._pid import Pid
from roost.actors._app import Entry
from roost.mailbox._mailbox import EVENTS
from roost.workflow._history import CancelRequested, Event, MessageArrived, StartChild, Started
from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._records import InboxItem, RunRecord, TimerTask
from roost.workflow._local._run import Pending, Run, Settled
from roost.workflow._plan_start import SYSTEM_SEQ, plan_new_run, start_fields
from roost.workflow._planner import (
    NextRun,
    OpenChild,
    RunState,
    plan_child_start,
    plan_children,
    unloadable_error,
)

if TYPE_CHECKING:
    from roost.workflow._local._host import RunHost

__all__ = [
    "SYSTEM_SEQ",
    "apply_close_policies",
    "follow",
    "hand_over",
    "new_run",
    "record_for_start",
    "run_state",
    "start_child",
    "successor",
]


def record_for_start(
    options: dict[str, Any], *, parent: Pid | None, at: dt.datetime
) -> dict[str, Any]:
    """RunRecord fields for a workflow starting now with these (checked) start options."""
    return start_fields(options, parent=parent, at=at)


def new_run(
    *,
    entry: Entry,
    pid: Pid,
    args: Sequence[Any],
    context: dict[str, Any],
    at: dt.datetime,
    inherit: RunRecord | None = None,
    **fields: Any,
) -> tuple[Run, Started]:
    """A run about to begin (not yet stored) and the ``Started`` event that begins it.

    Every way a run begins goes through here: a start, continue-as-new, a retry, a cron
    run, a child workflow. ``plan_new_run`` decides its rows; this builds them.
    ``inherit`` is the previous run of the same id, whose lasting settings carry over;
    ``fields`` set ``RunRecord`` fields.
    """
    rand = os.urandom(16)  # one read for both: the run id's 8 bytes, then the seed's
    plan = plan_new_run(
        workflow_id=pid.id,
        workflow_type=entry.id,
        run_id=rand[:8].hex(),
        seed=int.from_bytes(rand[8:], "big"),
        args=args,
        context=context,
        at=at,
        inherit=inherit,
        fields=fields,
    )
    record = RunRecord(**plan.record)
    if telemetry.tracing:
        record = telemetry.traced_run(record, inherit)
    # The run and its Started event share one copy of the context values (nothing
    # changes them in place; the driver keeps the run's, see RunPorts.kept_start).
    started = plan.started
    run = Run(record=record, entry=entry, pid=pid, context=started["context"])
    if plan.timers:
        run.timers = [
            TimerTask(
                workflow_id=record.workflow_id,
                run_id=record.run_id,
                seq=t.seq,
                due=t.due,
                kind=t.kind,
            )
            for t in plan.timers
        ]
    if plan.held:
        run.phase = RunPhase.HELD  # before it enters the table
    if run.context is started["context"]:
        return run, Started(**started)
    # The event holds the run's mapping (the shared empty one if none).
    return run, Started(**{**started, "context": run.context})


def run_state(record: RunRecord, pending: Sequence[Pending] = ()) -> RunState:
    """What the planner's close rules read of a run, as of ``record``.

    ``pending`` are the run's stored events not yet recorded: a cancel among them was
    accepted (its sender was told so) and counts as requested for the chain.
    """
    return RunState(
        workflow_id=record.workflow_id,
        attempt=record.attempt,
        options=record.options,
        execution_deadline=record.execution_deadline,
        cancel_requested=record.cancel_requested,
        cancel_pending=any(type(event) is CancelRequested for _, event in pending),
    )


def follow(
    m: RunHost, run: Run, at: dt.datetime, old: RunRecord, nxt: NextRun
) -> tuple[Run, list[tuple[bytes, bytes, Event]]]:
    """The run the planner says follows ``run`` (closing as ``old``), and its staged inbox."""
    return successor(
        m,
        run,
        at,
        old,
        entry=nxt.entry if nxt.entry is not None else run.entry.id,
        args=nxt.args if nxt.args is not None else m.input_of(run),
        attempt=nxt.attempt,
        not_before=nxt.not_before,
    )


def successor(
    m: RunHost,
    run: Run,
    at: dt.datetime,
    old: RunRecord,
    *,
    entry: str,
    args: list[Any],
    attempt: int = 1,
    not_before: dt.datetime | None = None,
) -> tuple[Run, list[tuple[bytes, bytes, Event]]]:
    """The next run of a workflow id (continue-as-new, retry, cron) and its staged inbox.

    ``old`` is the closing run's record as of this step (attributes set in the same
    step included).
    """
    new, started = new_run(
        entry=m.node.app.resolve(entry),
        pid=run.pid,
        args=args,
        context=run.context,
        at=at,
        inherit=old,
        attempt=attempt,
        not_before=not_before,
    )
    # Unread messages follow the workflow into its new run: those delivered to the old
    # run's mailbox but not read yet, then those not even delivered. Nothing is lost.
    unread = run.driver.mailbox.take_unread() if run.driver is not None else []
    carried: list[Event] = [started]
    carried += [
        MessageArrived(topic=msg.topic, payload=msg.payload, sender=msg.sender)
        for msg in unread
        if msg.topic != EVENTS
    ]
    # A cancel stored but not yet read goes along too: it is addressed to the workflow,
    # not to one run (a retry or cron run never follows one, see plan_next).
    carried += [e for _, e in run.pending if _carried(e)]
    staged = [(*m.stage(new, event), event) for event in carried]
    m.forwarding.reserve(run, new)  # rows still stored for ``run`` move to ``new`` (_forwarding)
    return new, staged


def _carried(event: InboxItem) -> TypeGuard[CancelRequested | MessageArrived]:
    if type(event) is CancelRequested:
        return True
    return isinstance(event, MessageArrived) and event.call is None


def hand_over(
    m: RunHost,
    old: Run,
    new: Run,
    staged: list[tuple[bytes, bytes, Event]],
    *,
    moved: set[bytes | Settled],
) -> None:
    """After the commit: the new run takes the id, PID, watchers, links and waiters.

    Rows the commit moved from the old run's inbox (``Forwarding.record``, before this)
    reach the new run under their new keys as their committers hand them on.
    """
    if telemetry.tracing:
        telemetry.run_closed(old.record, new.record)
    new.watchers, new.links, new.exit_chans = old.watchers, old.links, old.exit_chans
    m.forwarding.forget(old)  # handed over: rows for it follow into ``new`` now
    m.runs.add(new)
    m.runs.forget_driver(old)
    m.runs.move(old, PhaseEvent.CLOSED)
    late = [(k, e) for k, e in old.pending if k not in moved]
    old.pending = []
    m.arm(new)
    m.accept(new, [(k, event) for k, _, event in staged])
    m.accept(old, late)  # arrived during the hand-over's commit: re-homed
    apply_close_policies(m, old)  # the old run's children, as at any close


def apply_close_policies(m: RunHost, run: Run) -> None:
    record = run.record
    open_runs = {
        child_id: OpenChild(run_id=child.record.run_id, parent=child.record.parent)
        for child_id in record.child_policies
        if (child := m.runs.get(child_id)) is not None
    }
    for action in plan_children(run.pid, record.child_policies, record.child_runs, open_runs):
        child = m.runs[action.child_id]
        if action.action == "terminate":
            m.terminate(child.pid)
        else:
            m.cancel(child.pid, f"parent {run.pid} closed")


def start_child(
    m: RunHost, parent: Run, command: StartChild, at: dt.datetime, taken: set[str]
) -> Run | Error:
    """A child run for ``command``, or the error that keeps it from starting.

    ``taken`` holds the ids of children started earlier in the same step (not yet running);
    ``m.runs.child_staged`` tells of those that other uncommitted steps start.
    """
    pid = Pid.trusted(m.node.name, m.host, command.workflow_id)
    cause = m.unloadable.get(command.workflow_id)
    if cause is not None:
        return unloadable_error(command.workflow_id, cause)
    refused = plan_child_start(
        command.workflow_id,
        taken=command.workflow_id in m.runs or command.workflow_id in taken,
        quarantined=command.workflow_id in m.quarantined,
        staged=m.runs.child_staged(command.workflow_id),
    )
    if refused is not None:
        return refused
    fields = record_for_start(
        {"task_queue": parent.record.task_queue, **command.options}, parent=parent.pid, at=at
    )
    fields["name"] = None  # a child's name option is its id, not a registered name
    child, started = new_run(
        entry=m.node.app.resolve(command.entry),
        pid=pid,
        args=command.args,
        context=parent.context,
        at=at,
        **fields,
    )
    if telemetry.tracing:
        child.record = telemetry.child_run(child.record, parent.record)
    child.watch(parent.pid)
    child.pending_start = [(*m.stage(child, started), started)]
    m.counters.run_started(child.record.workflow_type)
    return child
