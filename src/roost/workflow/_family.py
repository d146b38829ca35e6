"""A workflow's lineage: the runs of one id (continue-as-new, retries, cron) and children."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

from roost._errors import Error
from roost._pid import Pid
from roost.actors._app import Entry
from roost.mailbox._mailbox import EVENTS
from roost.workflow._history import MessageArrived, StartChild, Started
from roost.workflow._options import CHAIN_OPTIONS
from roost.workflow._phases import PhaseEvent, RunPhase
from roost.workflow._planner import (
    NextRun,
    OpenChild,
    RunState,
    plan_child_start,
    plan_children,
    plan_first_start,
    plan_run_timers,
)
from roost.workflow._records import RunRecord, RunStatus, TimerTask
from roost.workflow._run import Run, Settled

if TYPE_CHECKING:
    from roost.workflow._host import RunHost

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

# Seqs of the runtime's own timers, far above any seq workflow code reaches.
SYSTEM_SEQ = {"start": 1 << 62, "run_timeout": (1 << 62) + 1, "execution_timeout": (1 << 62) + 2}

# What every run of a workflow id takes over from the run before it.
_INHERITED = (
    "parent",
    "task_queue",
    "search",
    "memo",
    "name",
    "options",
    "execution_deadline",
    "summary",
    "details",
)


def record_for_start(
    options: dict[str, Any], *, parent: Pid | None, at: dt.datetime
) -> dict[str, Any]:
    """RunRecord fields for a workflow starting now with these (checked) start options."""
    first = plan_first_start(options, at)
    return {
        "parent": parent,
        "task_queue": options.get("task_queue", "default"),
        "search": dict(options.get("search_attributes") or {}),
        "memo": dict(options.get("memo") or {}),
        "name": options.get("name"),
        "options": {k: v for k, v in options.items() if k in CHAIN_OPTIONS},
        "execution_deadline": first.execution_deadline,
        "summary": options.get("summary"),
        "details": options.get("details"),
        "not_before": first.not_before,
    }


def new_run(
    *,
    entry: Entry,
    pid: Pid,
    args: list[Any],
    context: dict[str, Any],
    at: dt.datetime,
    inherit: RunRecord | None = None,
    **fields: Any,
) -> tuple[Run, Started]:
    """A run about to begin (not yet stored) and the ``Started`` event that begins it.

    Every way a run begins goes through here: a start, continue-as-new, a retry, a cron
    run, a child workflow. ``inherit`` is the previous run of the same id, whose lasting
    settings carry over; ``fields`` set ``RunRecord`` fields.
    """
    base: dict[str, Any] = {}
    if inherit is not None:
        base = {name: getattr(inherit, name) for name in _INHERITED}
    record = RunRecord(
        **{
            **base,
            **fields,
            "workflow_id": pid.id,
            "run_id": os.urandom(8).hex(),
            "workflow_type": entry.id,
            "status": RunStatus.RUNNING,
            "started_at": at,
        }
    )
    started = Started(
        workflow_id=pid.id,
        run_id=record.run_id,
        workflow_type=entry.id,
        args=list(args),
        seed=int.from_bytes(os.urandom(8), "big"),
        context=dict(context),
        task_queue=record.task_queue,
        parent=record.parent,
        attempt=record.attempt,
    )
    run = Run(record=record, entry=entry, pid=pid, context=dict(context))
    run.timers = _run_timers(record, at)
    if record.not_before is not None and record.not_before > at:
        run.phase = RunPhase.HELD  # before it enters the table
    return run, started


def _run_timers(record: RunRecord, at: dt.datetime) -> list[TimerTask]:
    planned = plan_run_timers(
        not_before=record.not_before,
        options=record.options,
        execution_deadline=record.execution_deadline,
        now=at,
    )
    return [
        TimerTask(
            workflow_id=record.workflow_id,
            run_id=record.run_id,
            seq=SYSTEM_SEQ[t.kind],
            due=t.due,
            kind=t.kind,
        )
        for t in planned
    ]


def run_state(record: RunRecord) -> RunState:
    """What the planner's close rules read of a run, as of ``record``."""
    return RunState(
        workflow_id=record.workflow_id,
        attempt=record.attempt,
        options=record.options,
        execution_deadline=record.execution_deadline,
        cancel_requested=record.cancel_requested,
    )


def follow(
    m: RunHost, run: Run, at: dt.datetime, old: RunRecord, nxt: NextRun
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
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
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
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
    carried: list[Any] = [started]
    carried += [
        MessageArrived(topic=msg.topic, payload=msg.payload, sender=msg.sender)
        for msg in unread
        if msg.topic != EVENTS
    ]
    carried += [e for _, e in run.pending if isinstance(e, MessageArrived) and e.call is None]
    staged = [(*m.stage(new, event), event) for event in carried]
    return new, staged


def hand_over(
    m: RunHost,
    old: Run,
    new: Run,
    staged: list[tuple[bytes, bytes, Any]],
    *,
    moved: set[bytes | Settled],
) -> None:
    """After the commit: the new run takes the id, PID, watchers, links and waiters."""
    new.watchers, new.links, new.exit_chans = old.watchers, old.links, old.exit_chans
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

    ``taken`` holds the ids of children started earlier in the same step (not yet running).
    """
    pid = Pid.trusted(m.node.name, m.host, command.workflow_id)
    refused = plan_child_start(
        command.workflow_id,
        taken=command.workflow_id in m.runs or command.workflow_id in taken,
        quarantined=command.workflow_id in m.quarantined,
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
    child.watch(parent.pid)
    child.pending_start = [(*m.stage(child, started), started)]
    return child
