"""``app.cron`` on a Temporal cluster: a Temporal Schedule per trigger, firing once per cluster."""

import asyncio
import os
import uuid

import pytest
import trio
from temporal_server import dev_server  # noqa: F401 - the fixture `temporal_server`
from temporalio.client import Client

import roost
from roost import funcs
from roost._cron import parse_cron
from roost.temporal._cron import calendars, schedule_id

pytestmark = pytest.mark.timeout(120)

app = roost.App("tcron")
TICKS: list[roost.CronTick] = []  # the activity target's ticks, from every node
WORKFLOW_TICKS: list[roost.CronTick] = []
ENOUGH = trio.Event()


@app.activity
async def tick(t):
    TICKS.append(t)
    if len(TICKS) >= 3 and WORKFLOW_TICKS:
        ENOUGH.set()


@app.activity
async def note(t):
    WORKFLOW_TICKS.append(t)


@app.workflow
async def ticking(t):
    await funcs.call(note, t)


app.cron("* * * * * *", tick)  # every second
app.cron("*/2 * * * * *", ticking)


def _name():
    return f"cron-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def _delete_schedules(server):
    async def delete():
        client = await Client.connect(server)
        for trigger in app.declared["cron"].values():
            await client.get_schedule_handle(schedule_id(app, trigger)).delete()

    await trio.to_thread.run_sync(asyncio.run, delete())


async def test_a_cron_trigger_fires_once_per_cluster_to_the_second(temporal_server):
    try:
        async with (
            roost.open_node(app, name=_name(), temporal=temporal_server),
            roost.open_node(app, name=_name(), temporal=temporal_server),
        ):
            with trio.fail_after(30):
                await ENOUGH.wait()
    finally:
        await _delete_schedules(temporal_server)
    due = [t.scheduled_at for t in TICKS]
    assert len(due) == len(set(due))  # two nodes, and still one run per fire time
    assert all(at.microsecond == 0 for at in due)
    assert all(t.expression == "* * * * * *" and t.fired_at >= t.scheduled_at for t in TICKS)
    steps = {(b - a).total_seconds() for a, b in zip(sorted(due), sorted(due)[1:], strict=False)}
    assert steps <= {1.0, 2.0}  # a second apart (one may be skipped while the last still runs)
    assert all(t.scheduled_at.second % 2 == 0 for t in WORKFLOW_TICKS)


def test_cron_fields_become_temporal_calendars():
    (every,) = calendars(parse_cron("*/15 9-17 * * mon-fri"))
    assert [r.start for r in every.minute] == [0, 15, 30, 45]
    assert [r.start for r in every.day_of_week] == [1, 2, 3, 4, 5]
    assert [(r.start, r.end) for r in every.day_of_month] == [(1, 31)]
    assert [r.start for r in every.second] == [0]
    (seconds,) = calendars(parse_cron("5 10 3 * * * 2030"))
    assert [r.start for r in seconds.second] == [5] and [r.start for r in seconds.year] == [2030]
    # cron fires on the 1st and 15th *or* on Fridays: two calendars, each matching one.
    by_day, by_weekday = calendars(parse_cron("0 12 1,15 * 5"))
    assert [r.start for r in by_day.day_of_month] == [1, 15]
    assert [(r.start, r.end) for r in by_day.day_of_week] == [(0, 6)]
    assert [r.start for r in by_weekday.day_of_week] == [5]
    with pytest.raises(roost.Error) as caught:
        calendars(parse_cron("0 0 L * *"))
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "cannot be a Temporal Schedule" in caught.value.message


@app.process
async def proc_target(t):
    return t


async def test_a_cron_target_that_is_a_plain_process_refuses_the_node(temporal_server):
    other = roost.App("tcronp")
    other.process(proc_target)
    other.cron("0 0 * * *", proc_target)
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(other, name=_name(), temporal=temporal_server):
            pass
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "a cron target is an activity or a workflow" in caught.value.message
