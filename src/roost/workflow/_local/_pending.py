"""What an open run's history says: the activities it waits for, and its counters.

A scheduled activity is pending from the activation whose ``ScheduleActivity`` command
scheduled it until one whose events hold its ``ActivityResolved`` or whose commands hold a
``CancelActivity`` of it. Its first attempt needs nothing else: the command holds its entry,
arguments and options, the activation its scheduling time. Only an attempt that failed
stores a row in ``tasks`` (the next attempt, its backoff and the latest errors; see
``_activities``), and such a row stands for the task it names. A data directory written
when every scheduled activity had a row reads the same way: each row is that activity's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from roost.storage import key
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    CancelActivity,
    ScheduleActivity,
)
from roost.workflow._history_format import decode_activation
from roost.workflow._local._records import ActivityTask, InboxItem, RunRecord, with_history

if TYPE_CHECKING:
    from roost.storage import Codec, ReadTxn

__all__ = ["pending_tasks", "read_open", "read_pending", "task_rows"]


def pending_tasks(
    workflow_id: str,
    run_id: str,
    activations: Iterable[Activation],
    rows: Mapping[int, ActivityTask],
    resolved: Iterable[InboxItem] = (),
) -> list[ActivityTask]:
    """The run's pending activity tasks, in the order it scheduled them.

    Args:
        workflow_id: the run's workflow id.
        run_id: the run's id.
        activations: its history, in order.
        rows: its stored ``tasks`` rows, by seq (attempts after a failure).
        resolved: events not yet in the history (its inbox): an ``ActivityResolved`` among
            them settles its activity too.
    """
    scheduled: dict[int, ActivityTask | None] = {}
    commands: dict[int, tuple[ScheduleActivity, Activation]] = {}
    for act in activations:
        for event in act.events:
            if type(event) is ActivityResolved:
                scheduled.pop(event.seq, None)
        for command in act.commands:
            if type(command) is ScheduleActivity:
                scheduled[command.seq] = rows.get(command.seq)
                commands[command.seq] = (command, act)
            elif type(command) is CancelActivity:
                scheduled.pop(command.activity, None)
    for item in resolved:
        if type(item) is ActivityResolved:
            scheduled.pop(item.seq, None)
    tasks = []
    for seq, row in scheduled.items():
        if row is not None:
            tasks.append(row)
            continue
        command, act = commands[seq]
        tasks.append(
            ActivityTask(
                workflow_id=workflow_id,
                run_id=run_id,
                seq=seq,
                entry=command.entry,
                args=command.args,
                options=command.options,
                scheduled_at=act.at,
            )
        )
    return tasks


def task_rows(codec: Codec, rows: Iterable[tuple[bytes, bytes]]) -> dict[int, ActivityTask]:
    """The decodable ``tasks`` rows of one run, by seq (an unreadable one is left out)."""
    found: dict[int, ActivityTask] = {}
    for _, data in rows:
        try:
            task = codec.decode(data)
        except Exception:  # noqa: BLE001 - recovery quarantines it; a reader skips it
            task = None
        if isinstance(task, ActivityTask):
            found[task.seq] = task
    return found


def read_open(
    txn: ReadTxn,
    codec: Codec,
    record: RunRecord,
    *,
    rows: Mapping[int, ActivityTask] | None = None,
    resolved: Iterable[InboxItem] = (),
) -> tuple[RunRecord, list[ActivityTask]]:
    """An open run's record with the counters its history gives, and its pending tasks.

    A step that changes nothing but the counters writes no run row (see ``_effects``): the
    history's rows are the count of activations, their sizes the history's size, their
    events and commands its length. The stored ``tasks`` rows are read here unless
    ``rows`` gives them. A run with a history row that cannot be decoded keeps its stored
    counters and has only its rows' tasks (what it waits for is not known): its next
    activation's replay quarantines it.
    """
    prefix = key(record.run_id)
    if rows is None:
        rows = task_rows(codec, txn.prefix("tasks", prefix))
    acts = []
    size = length = 0
    for _, data in txn.prefix("histories", prefix):
        try:
            act = decode_activation(codec, data)
        except Exception:  # noqa: BLE001 - whatever the decoder raises, replay reports it
            return record, list(rows.values())
        acts.append(act)
        size += len(data)
        length += len(act.events) + len(act.commands)
    tasks = pending_tasks(record.workflow_id, record.run_id, acts, rows, resolved)
    if acts and acts[-1].index > record.activations:
        record = with_history(
            record, activations=acts[-1].index, history_length=length, history_size=size
        )
    return record, tasks


def read_pending(txn: ReadTxn, codec: Codec, record: RunRecord) -> list[ActivityTask]:
    """The pending activity tasks of the open run ``record`` (see ``read_open``)."""
    return read_open(txn, codec, record)[1]
