"""funcs.start: activities in parallel with handles, in workflows (durable) and processes."""

import pytest
import trio.testing

import roost
from roost import funcs, process
from roost.testing import Replayer

app = roost.App("ah")
finished: list = []


@app.activity
async def slow(name, seconds):
    await roost.sleep(seconds)
    finished.append(name)
    return f"{name} after {seconds}s"


@app.workflow
async def fan_out():
    t0 = roost.now()
    handles = [funcs.start(slow, f"a{n}", 10 * n) for n in (1, 2, 3)]
    results = [await h for h in handles]
    return {"results": results, "took": (roost.now() - t0).total_seconds()}


@app.workflow
async def cancels():
    long = funcs.start("ah:slow", "long", 3600)
    quick = funcs.new().with_options(start_to_close_timeout="1m").start(slow, "quick", 1)
    first = await quick
    long.cancel()
    try:
        await long
    except roost.Error as err:
        outcome = (err.kind, long.done)
    quick.cancel()  # already done: a no-op
    await roost.sleep("2h")  # long enough for the cancelled one to have finished
    return {"first": first, "long": outcome, "quick_again": await quick}


attempts: list = []


@app.activity
async def flaky_once(name):
    attempts.append(roost.now())
    if len(attempts) == 1:
        raise roost.Error("first attempt fails", kind=roost.ErrorKind.UNAVAILABLE)
    finished.append(name)
    return name


@app.workflow
async def cancels_during_backoff():
    handle = (
        funcs.new()
        .with_options(retry_policy={"initial_interval": 60, "backoff_coefficient": 1.0})
        .start(flaky_once, "retried")
    )
    await roost.sleep(10)  # the first attempt failed; the retry waits out its backoff
    handle.cancel()
    try:
        await handle
    except roost.Error as err:
        return err.kind


@pytest.fixture(autouse=True)
def _reset():
    attempts.clear()
    finished.clear()


async def test_started_activities_run_in_parallel(autojump_clock):
    async with roost.open_node(app) as node:
        result = await process.with_options(id="fan").exec(fan_out)
        assert result["results"] == ["a1 after 10s", "a2 after 20s", "a3 after 30s"]
        assert result["took"] == 30.0  # not 60: the three ran at once
        assert Replayer(app).replay(node.history("fan")) == result


async def test_a_cancelled_activity_stops_and_raises_canceled(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path) as node:
        result = await process.with_options(id="cx").exec(cancels)
        assert result["first"] == "quick after 1s"
        assert result["long"] == [roost.ErrorKind.CANCELED, True]  # as recorded: a list
        assert result["quick_again"] == "quick after 1s"
        assert finished == ["quick"]  # the long one was stopped, not left running
        kinds = [type(item).__name__ for item in node.history("cx")]
        assert "CancelActivity" in kinds
        assert Replayer(app).replay(node.history("cx")) == result
    async with roost.open_node(app, tmp_path):  # nothing of it is left to run
        await roost.sleep("2h")
        assert finished == ["quick"]


@app.process
async def starts_in_a_process():
    a = funcs.start(slow, "p1", 5)
    b = funcs.start(slow, "p2", 50)
    first = await a
    b.cancel()
    with pytest.raises(roost.Error) as info:
        await b
    return [first, info.value.kind, b.done]


async def test_funcs_start_in_a_plain_process(autojump_clock):
    async with roost.open_node(app):
        assert await process.exec(starts_in_a_process) == [
            "p1 after 5s",
            roost.ErrorKind.CANCELED,
            True,
        ]
        await trio.testing.wait_all_tasks_blocked()
        assert finished == ["p1"]
        with pytest.raises(roost.Error) as info:
            funcs.start(starts_in_a_process)  # not an activity
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_a_cancel_during_the_retry_backoff_stops_the_retry(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        kind = await process.with_options(id="bk").exec(cancels_during_backoff)
        assert kind == roost.ErrorKind.CANCELED
        await roost.sleep("5m")  # well past the backoff
        assert len(attempts) == 1  # the retry never ran
    async with roost.open_node(app, tmp_path):  # and nothing of it is left stored
        await roost.sleep("5m")
        assert len(attempts) == 1
        assert finished == []
