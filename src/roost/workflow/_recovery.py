"""A node starting on a data directory: resume every open run where it stopped."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from roost._errors import Error
from roost._pid import Pid
from roost.actors._events import Exit
from roost.workflow._effects import lost_error
from roost.workflow._history import ProcessExited
from roost.workflow._records import RunRecord, RunStatus, inbox_key
from roost.workflow._run import Run

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["recover"]

log = logging.getLogger("roost.workflow")


def recover(m: WorkflowManager) -> None:
    """Load open runs with their pending events, re-arm tasks and timers, report lost children."""
    with m.store.read() as txn:
        records = [m.codec.decode(v) for _, v in txn.range("runs")]
        for record in records:
            if record.status is not RunStatus.RUNNING:
                continue
            try:
                run = _load(m, record)
            except Error:
                log.exception(
                    "workflow %s of type %s cannot resume: this app has no such entry; "
                    "it stays stored, untouched, until a node with that entry opens",
                    record.workflow_id,
                    record.workflow_type,
                )
                continue
            for k, v in txn.prefix("inbox", inbox_key(record.run_id, 0)[:-8]):
                run.pending.append((k, m.codec.decode(v)))
                run.inbox_seq = max(run.inbox_seq, int.from_bytes(k[-8:], "big"))
        tasks = [m.codec.decode(v) for _, v in txn.range("tasks")]
        timers = [m.codec.decode(v) for _, v in txn.range("timers")]
    for run in list(m.runs.values()):
        m.ready(run)
        _report_children(m, run)
    for task in tasks:
        m.activities.submit(task)
    for timer in timers:
        m.timers.add(timer)


def _report_children(m: WorkflowManager, run: Run) -> None:
    reported = {e.pid for _, e in run.pending if isinstance(e, ProcessExited)}
    for pid in run.record.children:
        if pid in reported:
            continue
        if pid.host != m.host:  # plain processes do not survive a restart
            m.process_exited(run.pid, Exit(pid, None, lost_error(pid), m.node.now()))
            continue
        child = m.stored_record(pid.id)  # a child workflow that closed just before a crash
        if child is not None and child.status is not RunStatus.RUNNING:
            m.process_exited(run.pid, Exit(pid, child.result, child.error, m.node.now()))


def _load(m: WorkflowManager, record: RunRecord) -> Run:
    entry = m.node.app.resolve(record.workflow_type)
    pid = Pid.trusted(m.node.name, m.host, record.workflow_id)
    run = Run(record=record, entry=entry, pid=pid, context={})
    run.next_index = record.activations + 1
    run.held = record.not_before is not None and record.not_before > m.node.now()
    if record.parent is not None and record.parent.host == m.host:
        run.watch(record.parent)  # a child workflow reports to its parent
    m.runs[record.workflow_id] = run
    if record.name is not None:
        m.node.registry.register(record.name, pid)
    return run
