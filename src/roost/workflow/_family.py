"""A workflow's lineage: continue-as-new runs and child workflows."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._events import Exit
from roost.mailbox._mailbox import EVENTS
from roost.workflow._history import ContinueAsNew, MessageArrived, StartChild, Started
from roost.workflow._records import RunRecord, RunStatus
from roost.workflow._run import Run

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["apply_close_policies", "hand_over", "start_child", "successor"]


def successor(
    m: WorkflowManager, run: Run, command: ContinueAsNew, at: dt.datetime, old: RunRecord
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
    """The next run of a workflow that continues as new, and its staged inbox.

    ``old`` is the closing run's record as of this step (attributes set in the same
    step included).
    """
    entry = m.node.app.resolve(command.entry)
    started = Started(
        workflow_id=old.workflow_id,
        run_id=os.urandom(8).hex(),
        workflow_type=entry.id,
        args=list(command.args),
        seed=int.from_bytes(os.urandom(8), "big"),
        context=dict(run.context),
        task_queue=old.task_queue,
        parent=old.parent,
    )
    record = RunRecord(
        workflow_id=old.workflow_id,
        run_id=started.run_id,
        workflow_type=entry.id,
        status=RunStatus.RUNNING,
        started_at=at,
        task_queue=old.task_queue,
        parent=old.parent,
        search=dict(old.search),
        memo=dict(old.memo),
    )
    new = Run(record=record, entry=entry, pid=run.pid, context=dict(run.context))
    # Unread messages follow the workflow into its new run: those delivered to the old
    # run's mailbox but not read yet, then those not even delivered. Nothing is lost.
    unread = run.driver.mailbox.take_unread() if run.driver is not None else []
    carried: list[Any] = [started]
    carried += [
        MessageArrived(topic=m.topic, payload=m.payload, sender=m.sender)
        for m in unread
        if m.topic != EVENTS
    ]
    carried += [e for _, e in run.pending if isinstance(e, MessageArrived)]
    staged = [(*m.stage(new, event), event) for event in carried]
    return new, staged


def hand_over(
    m: WorkflowManager,
    old: Run,
    new: Run,
    staged: list[tuple[bytes, bytes, Any]],
    *,
    moved: set[bytes],
) -> None:
    """After the commit: the new run takes the id, PID, watchers, links and waiters."""
    new.watchers, new.links, new.exit_chans = old.watchers, old.links, old.exit_chans
    m.runs[new.record.workflow_id] = new
    m.cached.pop(old.record.workflow_id, None)
    late = [(k, e) for k, e in old.pending if k not in moved]
    old.pending = []
    if old.driver is not None:
        old.driver.close()
        old.driver = None
    m.accept(new, [(k, event) for k, _, event in staged])
    m.accept(old, late)  # arrived during the hand-over's commit: re-homed


def apply_close_policies(m: WorkflowManager, run: Run) -> None:
    for child_id, policy in run.record.child_policies.items():
        child = m.runs.get(child_id)
        if child is None or policy == "abandon":
            continue
        if policy == "terminate":
            m.terminate(child.pid)
        else:
            m.cancel(child.pid, f"parent {run.pid} closed")


def start_child(
    m: WorkflowManager, parent: Run, command: StartChild, at: dt.datetime
) -> Run | None:
    """A child run for ``command``, or None (after telling the parent) if it cannot run."""
    if command.workflow_id in m.runs:
        error = Error(
            f"child workflow id {command.workflow_id!r} is already running",
            kind=ErrorKind.ALREADY_EXISTS,
            details={"workflow_id": command.workflow_id},
        )
        pid = Pid.trusted(m.node.name, m.host, command.workflow_id)
        m.process_exited(parent.pid, Exit(pid, None, error, at))
        return None
    entry = m.node.app.resolve(command.entry)
    started = Started(
        workflow_id=command.workflow_id,
        run_id=os.urandom(8).hex(),
        workflow_type=entry.id,
        args=list(command.args),
        seed=int.from_bytes(os.urandom(8), "big"),
        context=dict(parent.context),
        task_queue=parent.record.task_queue,
        parent=parent.pid,
    )
    record = RunRecord(
        workflow_id=command.workflow_id,
        run_id=started.run_id,
        workflow_type=entry.id,
        status=RunStatus.RUNNING,
        started_at=at,
        task_queue=started.task_queue,
        parent=parent.pid,
    )
    child = Run(
        record=record,
        entry=entry,
        pid=Pid.trusted(m.node.name, m.host, command.workflow_id),
        context=dict(parent.context),
    )
    child.watchers.add(parent.pid)
    child.pending_start = [(*m.stage(child, started), started)]
    return child
