"""What the workflow runtime keeps in the store, and the keys it keeps it under.

Tables (all keys built with ``roost.storage.key`` so byte order is logical order):

- ``runs``       workflow id              -> ``RunRecord`` (the latest run of that id)
- ``histories``  (run id, activation)     -> ``Activation``
- ``inbox``      (run id, arrival number) -> an incoming event not yet fed to the workflow
- ``tasks``      (run id, seq)            -> ``ActivityTask`` of a pending activity whose
  attempt failed: the next attempt, its backoff and the latest errors. A scheduled
  activity has no row until then: the command in the history is its record (``_pending``).
- ``attempts``   (run id, seq, attempt)   -> ``AttemptRecord`` of a failed activity attempt,
  written in the commit that stores its retry, kept after the run closes (the latest
  ``KEPT_ATTEMPTS`` of each activity). Never replayed: the console's record of attempts.
- ``timers``     (due ms, run id, seq)    -> ``TimerTask``
- ``visibility`` workflow id              -> ``RunProgress`` (``PROGRESS_TABLE``): the
  counters of an open run as of an activation that changed its unread-message count and
  nothing else of its record: this small row instead of the whole record. An activation
  that changes only the history counters writes neither: readers of an open run count
  them from its history rows (``_pending.read_open``). Readers take the row's counters
  when it is newer than the record (``with_progress``); a record without such a row reads
  as it is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from roost._errors import Error
from roost._pid import Pid
from roost.storage import key
from roost.storage._codec import record
from roost.storage._registry import positional_record
from roost.workflow._builders import maker, replacer
from roost.workflow._history import Event
from roost.workflow._status import RunStatus

if TYPE_CHECKING:
    from roost.storage import Codec, ReadTxn

__all__ = [
    "ATTEMPTS_TABLE",
    "KEPT_ATTEMPTS",
    "PROGRESS_TABLE",
    "ActivityTask",
    "AttemptRecord",
    "InboxItem",
    "RunProgress",
    "RunRecord",
    "RunStatus",
    "TerminateRequest",
    "TimerTask",
    "attempt_key",
    "history_key",
    "inbox_key",
    "new_task",
    "read_progress",
    "row_prefix",
    "task_key",
    "timer_key",
    "with_close",
    "with_counters",
    "with_final",
    "with_history",
    "with_progress",
    "with_step_counters",
]

PROGRESS_TABLE = "visibility"


@positional_record("wf.run", 2)
@attrs.frozen(kw_only=True)
class RunRecord:
    """The latest run of a workflow id, as inspection and recovery see it."""

    workflow_id: str
    run_id: str
    workflow_type: str
    status: RunStatus
    started_at: dt.datetime
    closed_at: dt.datetime | None = None
    result: Any = None
    error: Error | None = None
    activations: int = 0
    history_length: int = 0
    history_size: int = 0
    inbox_seq: int = 0
    task_queue: str = "default"
    parent: Pid | None = None
    children: list[Pid] = attrs.field(factory=list)
    search: dict[str, Any] = attrs.field(factory=dict)
    memo: dict[str, Any] = attrs.field(factory=dict)
    child_policies: dict[str, str] = attrs.field(factory=dict)
    child_runs: dict[str, str] = attrs.field(factory=dict)  # child id -> its run id
    name: str | None = None  # registered while the workflow is open
    # Carried from run to run (retries, cron, continue-as-new): the normalised start
    # options retry_policy, cron_schedule, run_timeout, task_timeout, execution_timeout.
    options: dict[str, Any] = attrs.field(factory=dict)
    execution_deadline: dt.datetime | None = None
    summary: str | None = None
    details: str | None = None
    # This run's own: its attempt (retries count up), when it may start (start_delay, a
    # retry's backoff, the next cron time) and whether a cancel was requested.
    attempt: int = 1
    not_before: dt.datetime | None = None
    cancel_requested: bool = False
    task_failure: Error | None = None  # the last failed workflow task, until one succeeds
    # Messages delivered to the workflow and not read by it, as of its last activation
    # (what the unread-message limit counts while the run is not in memory).
    unread: int = 0
    # The run's trace context, chosen at its start (see roost._telemetry): the W3C
    # traceparent of its own span, then (after a space) its parent's; None when untraced.
    trace: str | None = None


with_counters: Callable[..., RunRecord] = replacer(
    RunRecord, ("children", "activations", "history_length", "history_size", "unread")
)
"""``record`` with the fields an activation advances (keyword arguments, all required)."""

with_close: Callable[..., RunRecord] = replacer(
    RunRecord, ("status", "result", "error", "closed_at")
)
"""``record`` with the fields a close sets (keyword arguments, all required)."""


with_final: Callable[..., RunRecord] = replacer(
    RunRecord,
    (
        "status",
        "result",
        "error",
        "closed_at",
        "children",
        "activations",
        "history_length",
        "history_size",
        "unread",
    ),
)
"""``with_close`` and ``with_counters`` in one copy: a run's last step (all required)."""

with_step_counters: Callable[..., RunRecord] = replacer(
    RunRecord, ("activations", "history_length", "history_size", "unread")
)
"""``record`` with the counters of steps that left the rest as it was (all required)."""

with_history: Callable[..., RunRecord] = replacer(
    RunRecord, ("activations", "history_length", "history_size")
)
"""``record`` with the counters its history gives (keyword arguments, all required)."""


@record("wf.progress")
@attrs.frozen(kw_only=True)
class RunProgress:
    """The per-activation counters of an open run, stored apart from its record."""

    run_id: str
    activations: int
    history_length: int
    history_size: int
    unread: int


def with_progress(record: RunRecord, progress: object) -> RunRecord:
    """``record`` with the counters of ``progress`` (a decoded progress row) if newer."""
    if (
        not isinstance(progress, RunProgress)
        or progress.run_id != record.run_id
        or progress.activations <= record.activations
        or record.status is not RunStatus.RUNNING
    ):
        return record
    return with_counters(
        record,
        children=record.children,
        activations=progress.activations,
        history_length=progress.history_length,
        history_size=progress.history_size,
        unread=progress.unread,
    )


def read_progress(txn: ReadTxn, codec: Codec, record: RunRecord) -> RunRecord:
    """``record`` as of its latest activation: with its progress row, if that is newer."""
    if record.status is not RunStatus.RUNNING:
        return record
    data = txn.get(PROGRESS_TABLE, record.workflow_id.encode())
    if data is None:
        return record
    try:
        progress = codec.decode(data)
    except Exception:  # noqa: BLE001 - derived data: the record's own counters stand
        return record
    return with_progress(record, progress)


@record("wf.activity_task")
@attrs.frozen(kw_only=True)
class ActivityTask:
    """An activity a workflow is waiting for; it survives restarts until resolved."""

    workflow_id: str
    run_id: str
    seq: int
    entry: str
    args: list[Any]
    options: dict[str, Any]
    attempt: int = 1
    scheduled_at: dt.datetime
    not_before: dt.datetime | None = None
    errors: list[Error] = attrs.field(factory=list)


new_task: Callable[[str, str, int, str, list[Any], dict[str, Any], dt.datetime], ActivityTask] = (
    maker(
        ActivityTask,
        ("workflow_id", "run_id", "seq", "entry", "args", "options", "scheduled_at"),
    )
)
"""A first attempt's ``ActivityTask`` (positional: workflow_id ... scheduled_at)."""


ATTEMPTS_TABLE = "attempts"
# How many failed attempts of one activity ``attempts`` keeps (the latest): under an
# unlimited retry policy an activity can fail for ever, and its rows must not grow with it.
KEPT_ATTEMPTS = 20


@record("wf.attempt")
@attrs.frozen(kw_only=True)
class AttemptRecord:
    """A failed attempt of an activity, kept for inspection only (never replayed).

    ``next_attempt_at`` is when the retry that followed it may start.
    """

    seq: int
    attempt: int
    started_at: dt.datetime
    ended_at: dt.datetime
    error: Error
    next_attempt_at: dt.datetime | None = None


@record("wf.timer")
@attrs.frozen(kw_only=True)
class TimerTask:
    """A durable timer: fires ``TimerFired(seq)`` into its run at ``due``.

    The runtime's own timers have another ``kind``: ``start`` (a delayed run may begin),
    ``run_timeout`` and ``execution_timeout`` (the run is closed as timed out).
    """

    workflow_id: str
    run_id: str
    seq: int
    due: dt.datetime
    kind: str = "timer"


@record("wf.terminate_request")
@attrs.frozen(kw_only=True)
class TerminateRequest:
    """A committed step of another workflow terminated this run: an inbox row of the run.

    Never recorded in a history: the terminate runs right after that step's commit, and
    its close deletes the row with the run's inbox; a run recovered with one is
    terminated at open (the node stopped before that close committed).
    """


InboxItem = Event | TerminateRequest
"""What an inbox row of a run holds: an event for its next activation, or a terminate."""


def row_prefix(run_id: str) -> bytes:
    """``key(run_id)``: how every key of the run's rows in histories, inbox, tasks begins.

    Built directly, without the generic builder's checks of each part: a run id is text
    that passed them when its run was first stored, and this is built once per step.
    """
    return run_id.encode().replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def history_key(run_id: str, index: int) -> bytes:
    """Key of one activation in ``histories``."""
    return key(run_id, index)


def inbox_key(run_id: str, number: int) -> bytes:
    """Key of one pending incoming event in ``inbox``."""
    return key(run_id, number)


def task_key(run_id: str, seq: int) -> bytes:
    """Key of one activity task in ``tasks``."""
    return key(run_id, seq)


def attempt_key(run_id: str, seq: int, attempt: int) -> bytes:
    """Key of one failed activity attempt in ``attempts``."""
    return key(run_id, seq, attempt)


def timer_key(due: dt.datetime, run_id: str, seq: int) -> bytes:
    """Key of one timer in ``timers``, ordered by due time."""
    return key(int(due.timestamp() * 1000), run_id, seq)
