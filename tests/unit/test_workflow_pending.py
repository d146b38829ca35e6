"""The pending activities of a run, read from its history (roost.workflow._local._pending)."""

import datetime as dt

from roost._errors import Error
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    CancelActivity,
    ScheduleActivity,
    Started,
    StartTimer,
)
from roost.workflow._local._pending import pending_tasks
from roost.workflow._local._records import ActivityTask

T1 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
T2 = T1 + dt.timedelta(minutes=1)


def schedule(seq: int) -> ScheduleActivity:
    return ScheduleActivity(seq=seq, entry="app:act", args=[seq], options={"o": seq})


HISTORY = [
    Activation(
        index=1,
        at=T1,
        events=[Started(workflow_id="w", workflow_type="app:wf", args=[], run_id="r", seed=1)],
        commands=[schedule(1), schedule(2), StartTimer(seq=3, seconds=1.0)],
    ),
    Activation(
        index=2,
        at=T2,
        events=[ActivityResolved(seq=1, value=1)],
        commands=[schedule(4), schedule(5), CancelActivity(seq=6, activity=5)],
    ),
]


def test_scheduled_and_neither_resolved_nor_cancelled_in_schedule_order():
    tasks = pending_tasks("w", "r", HISTORY, {})
    assert tasks == [
        ActivityTask(
            workflow_id="w",
            run_id="r",
            seq=2,
            entry="app:act",
            args=[2],
            options={"o": 2},
            scheduled_at=T1,
        ),
        ActivityTask(
            workflow_id="w",
            run_id="r",
            seq=4,
            entry="app:act",
            args=[4],
            options={"o": 4},
            scheduled_at=T2,
        ),
    ]


def test_a_stored_row_stands_for_its_task_and_other_rows_are_not_read():
    error = Error("down")
    retry = ActivityTask(
        workflow_id="w",
        run_id="r",
        seq=4,
        entry="app:act",
        args=[4],
        options={"o": 4},
        scheduled_at=T2,
        attempt=3,
        not_before=T2 + dt.timedelta(hours=1),
        errors=[error, error],
    )
    cancelled = ActivityTask(
        workflow_id="w", run_id="r", seq=5, entry="app:act", args=[], options={}, scheduled_at=T2
    )
    tasks = pending_tasks("w", "r", HISTORY, {4: retry, 5: cancelled})
    assert [(t.seq, t.attempt) for t in tasks] == [(2, 1), (4, 3)]
    assert tasks[1] is retry


def test_a_result_in_the_inbox_settles_its_activity():
    tasks = pending_tasks("w", "r", HISTORY, {}, [ActivityResolved(seq=2, value=None)])
    assert [t.seq for t in tasks] == [4]
