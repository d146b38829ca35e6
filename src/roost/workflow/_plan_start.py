"""The rows a new run begins with, as a pure plan: its record, its Started event, its timers.

Every way a run begins (a start, continue-as-new, a retry, a cron run, a child workflow)
is planned here from plain data: the run record's fields (what it takes over from the run
before it, what its start options set), the fields of the ``Started`` event that begins
its history, the runtime timers its start arms (start delay, run and execution timeout)
with their seqs, and whether it waits for its start time. Randomness (the run id, the
seed) is handed in, so the plan is a function of its arguments. ``_family.py`` turns the
plan into a ``RunRecord``, a ``Started`` and ``TimerTask`` rows, and writes nothing the
plan does not name.

No trio, no store, no clock, and none of the storage records (the plan is field data).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from roost._pid import Pid
from roost.workflow._planner import plan_first_start, plan_run_timers
from roost.workflow._status import RunStatus

__all__ = [
    "CHAIN_OPTIONS",
    "INHERITED",
    "SYSTEM_SEQ",
    "NewRunPlan",
    "TimerRow",
    "plan_new_run",
    "start_fields",
]

# The start options every run of a workflow id carries over to the next.
CHAIN_OPTIONS: Final = frozenset(
    {"retry_policy", "cron_schedule", "run_timeout", "task_timeout", "execution_timeout"}
)

# Seqs of the runtime's own timers, far above any seq workflow code reaches.
SYSTEM_SEQ: Final = {
    "start": 1 << 62,
    "run_timeout": (1 << 62) + 1,
    "execution_timeout": (1 << 62) + 2,
}

# What every run of a workflow id takes over from the run before it.
INHERITED: Final = (
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

# RunRecord defaults the Started event repeats when neither the old run nor the fields
# set them.
_DEFAULT_TASK_QUEUE: Final = "default"


@attrs.frozen(kw_only=True)
class TimerRow:
    """A runtime timer row of the new run: its kind, seq and due time."""

    kind: str
    seq: int
    due: dt.datetime


@attrs.frozen(kw_only=True)
class NewRunPlan:
    """What a run begins with.

    Attributes:
        record: the run record's fields (``RunRecord(**record)``), status ``RUNNING``.
        started: the ``Started`` event's fields (``Started(**started)``), its history's
            first event.
        timers: the runtime timer rows stored with the start.
        held: the run waits for its start time before its first activation.
    """

    record: Mapping[str, Any]
    started: Mapping[str, Any]
    timers: tuple[TimerRow, ...]
    held: bool


def start_fields(
    options: Mapping[str, Any], *, parent: Pid | None, at: dt.datetime
) -> dict[str, Any]:
    """Run record fields of a workflow started at ``at`` with these (checked) start options.

    ``start_delay`` and a cron schedule set the first run's start time, and
    ``execution_timeout`` the chain's deadline (see ``plan_first_start``); only the chain
    options go into the record.
    """
    first = plan_first_start(options, at)
    return {
        "parent": parent,
        "task_queue": options.get("task_queue", _DEFAULT_TASK_QUEUE),
        "search": dict(options.get("search_attributes") or {}),
        "memo": dict(options.get("memo") or {}),
        "name": options.get("name"),
        "options": {k: v for k, v in options.items() if k in CHAIN_OPTIONS},
        "execution_deadline": first.execution_deadline,
        "summary": options.get("summary"),
        "details": options.get("details"),
        "not_before": first.not_before,
    }


def plan_new_run(
    *,
    workflow_id: str,
    workflow_type: str,
    run_id: str,
    seed: int,
    args: Sequence[Any],
    context: Mapping[str, Any],
    at: dt.datetime,
    inherit: Any = None,
    fields: Mapping[str, Any] | None = None,
) -> NewRunPlan:
    """The rows of a run of ``workflow_id`` beginning at ``at``.

    Args:
        workflow_id: the id (the run takes over the id's PID).
        workflow_type: the entry it runs.
        run_id: its run id (random, from the caller).
        seed: its deterministic random seed (random, from the caller).
        args: its input.
        context: the context values its code starts with.
        at: now.
        inherit: the previous run of the same id (anything with the ``INHERITED``
            attributes), whose lasting settings carry over; None for a first run.
        fields: run record fields to set (``start_fields``, ``attempt``, ``not_before``).
    """
    record: dict[str, Any] = (
        {name: getattr(inherit, name) for name in INHERITED} if inherit is not None else {}
    )
    if fields:
        record.update(fields)
    record["workflow_id"] = workflow_id
    record["run_id"] = run_id
    record["workflow_type"] = workflow_type
    record["status"] = RunStatus.RUNNING
    record["started_at"] = at
    started = {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "workflow_type": workflow_type,
        "args": list(args),
        "seed": seed,
        "context": dict(context),
        "task_queue": record.get("task_queue", _DEFAULT_TASK_QUEUE),
        "parent": record.get("parent"),
        "attempt": record.get("attempt", 1),
    }
    not_before: dt.datetime | None = record.get("not_before")
    options = record.get("options")
    execution_deadline = record.get("execution_deadline")
    timers: tuple[TimerRow, ...] = ()
    # Most runs arm no runtime timer: no delay, no run timeout, no execution deadline.
    if not_before is not None or execution_deadline is not None or options:
        planned = plan_run_timers(
            not_before=not_before,
            options=options or {},
            execution_deadline=execution_deadline,
            now=at,
        )
        timers = tuple(TimerRow(kind=t.kind, seq=SYSTEM_SEQ[t.kind], due=t.due) for t in planned)
    return NewRunPlan(
        record=record,
        started=started,
        timers=timers,
        held=not_before is not None and not_before > at,
    )
