"""Cron triggers: schedules, no overlap, catch-up, one fire per schedule across restarts."""

import datetime as dt
import itertools
import logging

import pytest
import trio

import roost


def _boundaries(t0, seconds, period):
    """How many multiples of ``period`` seconds (epoch-aligned) fall in (t0, t0 + seconds]."""
    start = t0.timestamp()
    return int((start + seconds) // period) - int(start // period)


def _app(expression, catch_up="skip", takes=0.0, fail=False):
    app = roost.App("cr")
    ticks: list = []

    @app.activity
    async def tick(t: roost.CronTick):
        ticks.append((t.scheduled_at, t.fired_at, t.expression))
        await roost.sleep(takes)
        if fail:
            raise roost.Error("cron run failed", kind="Unavailable")

    app.cron(expression, tick, catch_up=catch_up)
    return app, ticks


async def test_fires_on_schedule_with_a_cron_tick(autojump_clock):
    app, ticks = _app("*/10 * * * * *")
    async with roost.open_node(app):
        t0 = roost.now()
        await roost.sleep(35)
    assert len(ticks) == _boundaries(t0, 35, 10) >= 3
    assert all(s.second % 10 == 0 and s.microsecond == 0 for s, _, _ in ticks)
    assert all(f - s < dt.timedelta(seconds=1) for s, f, _ in ticks)
    assert {e for _, _, e in ticks} == {"*/10 * * * * *"}
    gaps = {(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(ticks)}
    assert gaps == {10.0}


async def test_runs_of_one_trigger_never_overlap(autojump_clock):
    app, ticks = _app("*/10 * * * * *", takes=25)
    async with roost.open_node(app):
        await roost.sleep(75)
    starts = [f for _, f, _ in ticks]
    assert all((b - a).total_seconds() >= 25 for a, b in itertools.pairwise(starts))
    assert 2 <= len(ticks) <= 3


@pytest.mark.parametrize(("catch_up", "expected"), [("skip", 0), ("one", 1), ("all", 6)])
async def test_catch_up_of_fires_missed_while_down(autojump_clock, tmp_path, catch_up, expected):
    app, ticks = _app("0 * * * * *", catch_up=catch_up)  # every minute, on the minute
    async with roost.open_node(app, tmp_path):
        await roost.sleep(61)
        # Stop 10 s past a minute: the node reopens 50 s before its next fire time.
        now = roost.now()
        await roost.sleep((70 - now.second - now.microsecond / 1e6) % 60)
    before = len(ticks)
    last = ticks[-1][0]
    await trio.sleep(6 * 60)  # the node is down for six minutes
    async with roost.open_node(app, tmp_path):
        await roost.sleep(0.5)  # catch-up runs at once, before the next fire time
        caught = ticks[before:]
    assert len(caught) == expected
    assert [s for s, _, _ in caught] == sorted(s for s, _, _ in caught)
    if expected:
        assert caught[0][0] > last
        assert caught[-1][0] == last + dt.timedelta(minutes=6)


async def test_one_fire_per_schedule_across_restarts(autojump_clock, tmp_path):
    app, ticks = _app("*/5 * * * * *", catch_up="all")
    for _ in range(4):  # restart right after fires, again and again
        async with roost.open_node(app, tmp_path):
            await roost.sleep(6)
    scheduled = [s for s, _, _ in ticks]
    assert len(scheduled) == len(set(scheduled))  # never twice for one fire time
    assert scheduled == sorted(scheduled)


async def test_a_failed_run_is_logged_and_the_schedule_goes_on(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="roost.queues")
    app, ticks = _app("*/10 * * * * *", fail=True)
    async with roost.open_node(app):
        t0 = roost.now()
        await roost.sleep(25)
    assert len(ticks) == _boundaries(t0, 25, 10) >= 2
    assert sum("cron run failed" in r.getMessage() for r in caplog.records) == len(ticks)


async def test_five_and_seven_field_expressions(autojump_clock):
    hourly, hourly_ticks = _app("0 * * * *")
    async with roost.open_node(hourly):
        await roost.sleep("3h")
    assert len(hourly_ticks) == 3
    assert all(s.minute == 0 and s.second == 0 for s, _, _ in hourly_ticks)
    far, _ = _app("0 0 0 1 1 * 2099")  # more than croniter's default 50 years away
    assert far.declared["cron"]  # accepted: it does fire, once


def test_bad_cron_declarations_are_invalid():
    app = roost.App("bad")

    @app.activity
    async def target(t):
        return t

    for expression, catch_up in [
        ("* * *", "skip"),
        ("61 * * * *", "skip"),
        ("* * * * *", "some"),
        ("0 0 31 2 *", "skip"),  # February 31st never comes
        ("0 0 0 1 1 * 2020", "skip"),  # a past year
    ]:
        with pytest.raises(roost.Error) as info:
            app.cron(expression, target, catch_up=catch_up)
        assert info.value.kind is roost.ErrorKind.INVALID
    assert app.declared.get("cron", {}) == {}


async def test_catch_up_one_runs_the_latest_missed_fire_however_many(autojump_clock, tmp_path):
    app, ticks = _app("* * * * * *", catch_up="one")
    async with roost.open_node(app, tmp_path):
        await roost.sleep(2)
    last = ticks[-1][0]
    await trio.sleep(5000)  # 5000 fire times missed while down
    async with roost.open_node(app, tmp_path):
        reopened = roost.now()
        await roost.sleep(0.5)
    caught = [s for s, _, _ in ticks if s > last]
    assert caught[0] == reopened.replace(microsecond=0)  # the latest, not the 1000th
    assert caught[0] - last >= dt.timedelta(seconds=5000)


def test_a_cron_trigger_whose_runs_could_not_be_stored_is_invalid():
    from roost.storage import MAX_KEY_SIZE, key  # noqa: PLC0415

    app = roost.App("long")

    async def target(t):
        return t

    # The trigger's own key fits; its runs' keys (the trigger's, then a run number) do not.
    fits = None
    for size in range(480, 520):
        target.__name__ = target.__qualname__ = "t" * size
        trigger_id = f"long:{target.__name__} @ * * * * *"
        if len(key(trigger_id)) <= MAX_KEY_SIZE < len(key(trigger_id, 0)):
            fits = size
            break
    assert fits is not None
    entry = app.activity(target)
    with pytest.raises(roost.Error) as info:
        app.cron("* * * * *", entry)
    assert info.value.kind is roost.ErrorKind.INVALID
    assert "too long to store" in info.value.message
    assert app.declared.get("cron", {}) == {}
