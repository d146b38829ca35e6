"""A workflow's lineage: continue-as-new runs and child workflows."""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._app import Entry
from roost.actors._events import Exit
from roost.mailbox._mailbox import EVENTS
from roost.workflow._history import ContinueAsNew, MessageArrived, StartChild, Started
from roost.workflow._records import RunRecord, RunStatus
from roost.workflow._run import Run

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["apply_close_policies", "hand_over", "new_run", "start_child", "successor"]


def new_run(
    *,
    entry: Entry,
    pid: Pid,
    args: list[Any],
    context: dict[str, Any],
    parent: Pid | None,
    task_queue: str,
    at: dt.datetime,
    search: dict[str, Any] | None = None,
    memo: dict[str, Any] | None = None,
    name: str | None = None,
) -> tuple[Run, Started]:
    """A run about to begin (not yet stored) and the ``Started`` event that begins it.

    Every way a run begins goes through here: a start, continue-as-new, a child workflow.
    """
    started = Started(
        workflow_id=pid.id,
        run_id=os.urandom(8).hex(),
        workflow_type=entry.id,
        args=list(args),
        seed=int.from_bytes(os.urandom(8), "big"),
        context=dict(context),
        task_queue=task_queue,
        parent=parent,
    )
    record = RunRecord(
        workflow_id=pid.id,
        run_id=started.run_id,
        workflow_type=entry.id,
        status=RunStatus.RUNNING,
        started_at=at,
        task_queue=task_queue,
        parent=parent,
        search=dict(search or {}),
        memo=dict(memo or {}),
        name=name,
    )
    return Run(record=record, entry=entry, pid=pid, context=dict(context)), started


def successor(
    m: WorkflowManager, run: Run, command: ContinueAsNew, at: dt.datetime, old: RunRecord
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
    """The next run of a workflow that continues as new, and its staged inbox.

    ``old`` is the closing run's record as of this step (attributes set in the same
    step included).
    """
    new, started = new_run(
        entry=m.node.app.resolve(command.entry),
        pid=run.pid,
        args=command.args,
        context=run.context,
        parent=old.parent,
        task_queue=old.task_queue,
        at=at,
        search=old.search,
        memo=old.memo,
        name=old.name,
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
    child, started = new_run(
        entry=m.node.app.resolve(command.entry),
        pid=Pid.trusted(m.node.name, m.host, command.workflow_id),
        args=command.args,
        context=parent.context,
        parent=parent.pid,
        task_queue=parent.record.task_queue,
        at=at,
    )
    child.watchers.add(parent.pid)
    child.pending_start = [(*m.stage(child, started), started)]
    return child
