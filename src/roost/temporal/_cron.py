"""``app.cron`` on a Temporal cluster: one Temporal Schedule per trigger, fired once per cluster.

Every node that opens the app makes sure each of its triggers has its Schedule (created, or
updated to the expression the app declares), so the trigger fires once per fire time on
the whole cluster, not once per node. A Schedule starts ``CronFire`` (workflow type
``@roost.cron``) on the app's task queue, which runs the target with a ``roost.CronTick``:
an activity entry as one attempt of that activity, a workflow entry as a child workflow.

The expression becomes Temporal calendar specs to the second (a 6- or 7-field expression
keeps its seconds and year). Standard cron fires when the day of the month *or* the day of
the week matches if both are restricted; Temporal's calendar matches both, so such an
expression becomes two calendars. ``catch_up`` maps to the Schedule's policy: ``"skip"``
skips a fire while the last one still runs and catches up nothing; ``"one"`` buffers one,
``"all"`` every missed fire (within a year).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Final

import temporalio.client as tc
import temporalio.common
import temporalio.exceptions
import temporalio.workflow as tw
from croniter import croniter

from roost._cron import CronSchedule
from roost._errors import invalid
from roost.actors._app import App, EntryKind
from roost.queues._cron import CronTick, CronTrigger
from roost.temporal._failures import error_of
from roost.temporal._workflow import apps

__all__ = ["CRON_WORKFLOW", "CronFire", "calendars", "ensure_schedules", "schedule_id"]

log = logging.getLogger("roost.temporal")

CRON_WORKFLOW: Final = "@roost.cron"
"""The workflow type a trigger's Schedule starts: it runs the trigger's target once."""

_ONCE: Final = temporalio.common.RetryPolicy(maximum_attempts=1)
# A target runs at most this long; the Schedule skips the fires due meanwhile (or buffers
# them, with catch_up "one" or "all").
_TARGET_LIMIT: Final = dt.timedelta(hours=24)
_CATCH_UP_WINDOW: Final = {"skip": dt.timedelta(seconds=10), "one": dt.timedelta(days=365)}
_OVERLAP: Final = {
    "skip": tc.ScheduleOverlapPolicy.SKIP,
    "one": tc.ScheduleOverlapPolicy.BUFFER_ONE,
    "all": tc.ScheduleOverlapPolicy.BUFFER_ALL,
}
# croniter's order of the expanded fields, with each field's full range.
_FIELDS: Final = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day_of_month", 1, 31),
    ("month", 1, 12),
    ("day_of_week", 0, 6),
    ("second", 0, 59),
    ("year", 1970, 2199),
)


def schedule_id(app: App, trigger: CronTrigger) -> str:
    """The Schedule id of ``trigger``: the app's name and a digest of the trigger's id."""
    digest = hashlib.sha256(trigger.id.encode()).hexdigest()[:16]
    return f"roost-cron-{app.name}-{digest}"


def _ranges(values: Sequence[Any], low: int, high: int, what: str, expression: str) -> list[Any]:
    if values == ["*"]:
        return [tc.ScheduleRange(low, high)]
    out = []
    for value in values:
        if not isinstance(value, int):
            raise invalid(
                f"cron expression {expression!r}: {what} {value!r} (L, W or #) cannot be a "
                "Temporal Schedule; spell it with numbers, ranges and steps"
            )
        out.append(tc.ScheduleRange(0 if what == "day_of_week" and value == 7 else value))
    return out


def calendars(schedule: CronSchedule) -> list[tc.ScheduleCalendarSpec]:
    """The Temporal calendar specs that fire when ``schedule`` does (UTC, to the second).

    Raises:
        roost.Error: Invalid for what a calendar cannot say (``L``, ``W``, ``#``).
    """
    fields, _ = croniter.expand(schedule.expression, second_at_beginning=schedule.seconds_first)
    spec: dict[str, Any] = {"second": [tc.ScheduleRange(0)], "year": []}
    restricted: set[str] = set()
    for (name, low, high), values in zip(_FIELDS, fields, strict=False):
        if values != ["*"]:
            restricted.add(name)
        spec[name] = _ranges(values, low, high, name, schedule.expression)
    if {"day_of_month", "day_of_week"} <= restricted:  # cron's OR of the two day fields
        by_month_day = {**spec, "day_of_week": [tc.ScheduleRange(0, 6)]}
        by_week_day = {**spec, "day_of_month": [tc.ScheduleRange(1, 31)]}
        return [tc.ScheduleCalendarSpec(**by_month_day), tc.ScheduleCalendarSpec(**by_week_day)]
    return [tc.ScheduleCalendarSpec(**spec)]


def _schedule(app: App, trigger: CronTrigger) -> tc.Schedule:
    entry = app.resolve(trigger.entry)
    if entry.kind not in (EntryKind.ACTIVITY, EntryKind.WORKFLOW):
        raise invalid(
            f"cron trigger {trigger.id!r}: its target {entry.id!r} is a {entry.kind.value}; "
            "on the Temporal host a cron target is an activity or a workflow (a plain "
            "process has no node to run on until it fires)"
        )
    return tc.Schedule(
        action=tc.ScheduleActionStartWorkflow(
            CRON_WORKFLOW,
            args=[entry.id, trigger.schedule.expression],
            id=schedule_id(app, trigger),
            task_queue=app.name,
        ),
        spec=tc.ScheduleSpec(calendars=calendars(trigger.schedule)),
        policy=tc.SchedulePolicy(
            overlap=_OVERLAP[trigger.catch_up],
            catchup_window=_CATCH_UP_WINDOW.get(trigger.catch_up, dt.timedelta(days=365)),
        ),
    )


async def ensure_schedules(client: tc.Client, app: App) -> list[str]:
    """Create or update the Schedule of each of ``app``'s cron triggers; their ids.

    Raises:
        roost.Error: Invalid for a trigger a Schedule cannot carry (before any is made).
    """
    triggers: dict[str, CronTrigger] = app.declared.get("cron", {})
    wanted = {schedule_id(app, t): _schedule(app, t) for t in triggers.values()}
    for sid, schedule in wanted.items():
        try:
            await client.create_schedule(sid, schedule)
        except tc.ScheduleAlreadyRunningError:

            def replaced(
                _: tc.ScheduleUpdateInput, new: tc.Schedule = schedule
            ) -> tc.ScheduleUpdate:
                return tc.ScheduleUpdate(schedule=new)

            await client.get_schedule_handle(sid).update(replaced)
    return list(wanted)


@tw.defn(name=CRON_WORKFLOW, sandboxed=False)
class CronFire:
    """One fire of a cron trigger: its target run once with the ``CronTick``."""

    @tw.run
    async def run(self, entry_id: str, expression: str) -> None:
        """Run ``entry_id`` with the tick of this fire; a failed run is logged."""
        info = tw.info()
        key = temporalio.common.SearchAttributeKey.for_datetime("TemporalScheduledStartTime")
        scheduled = info.typed_search_attributes.get(key) or info.start_time
        fired = tw.now()
        tick = CronTick(
            scheduled_at=scheduled.astimezone(dt.UTC),
            fired_at=fired.astimezone(dt.UTC),
            expression=expression,
        )
        # An app this worker does not host fails the task, retried on a worker that does.
        entry = apps.find(entry_id).resolve(entry_id)
        try:
            if entry.kind is EntryKind.WORKFLOW:
                await tw.execute_child_workflow(
                    entry_id,
                    args=[tick],
                    id=f"{info.workflow_id}.1",
                    task_queue=info.task_queue,
                )
            else:
                await tw.execute_activity(
                    entry_id,
                    args=[tick],
                    task_queue=info.task_queue,
                    start_to_close_timeout=_TARGET_LIMIT,
                    retry_policy=_ONCE,
                )
        except (
            temporalio.exceptions.ActivityError,
            temporalio.exceptions.ChildWorkflowError,
        ) as exc:
            log.warning(
                "cron %s @ %s: the run due at %s failed: %s",
                entry_id,
                expression,
                scheduled,
                error_of(exc),
            )
