"""Bounded growth: a closed workflow leaves no timer rows; unread messages are capped."""

import roost
from roost import channel, process
from roost.testing import open_test_node

app = roost.App("bounds")


@app.workflow
async def first_of(wait):
    """Waits for a message or a long timer, whichever comes first (the timer loses)."""
    got = await channel.select(
        process.listen("go").case_receive(), roost.after(wait).case_receive()
    )
    return "message" if got.channel is not None and got.value == "now" else "timer"


@app.workflow
async def waits_long():
    await roost.sleep("30d")


@app.workflow
async def arms_then_continues(n):
    """Each run arms a day-long timer it never waits for, then continues as new."""
    roost.after("1d")
    if n:
        await process.upgrade(None, n - 1)
    return "done"


def timer_rows(node):
    with node._node.store.read() as txn:
        return list(txn.range("timers"))


async def test_the_losing_timers_of_a_select_go_with_the_close_and_stay_gone_after_a_restart():
    async with open_test_node(app) as node:
        pids = [await process.spawn("bounds:first_of", "1d") for _ in range(70)]
        await node.wait_until_blocked()
        assert len(timer_rows(node)) == 70  # each run waits on its day-long timer
        for pid in pids:
            await process.send(pid, "go", "now")
        await node.wait_until_blocked()
        assert {node.describe(p.id)["result"] for p in pids} == {"message"}
        assert timer_rows(node) == []
        # Their heap entries are dropped too, not held in memory for a day.
        assert len(node._node.ext["workflows"].timers._heap) < 70 // 2
        await node.restart()
        assert timer_rows(node) == []
        # Nothing of them fires a day later either (the heap entries were dropped too).
        await roost.sleep("2d")
        assert {node.describe(p.id)["status"] for p in pids} == {"completed"}


async def test_terminate_and_run_timeout_delete_the_runs_timer_rows():
    async with open_test_node(app) as node:
        stopped = await process.spawn("bounds:waits_long")
        timed = await process.with_options(run_timeout="1h").spawn("bounds:waits_long")
        await node.wait_until_blocked()
        # The two 30-day sleeps and the run timeout's own timer.
        assert len(timer_rows(node)) == 3
        process.terminate(stopped)
        await roost.sleep("2h")
        await node.wait_until_blocked()
        assert node.describe(stopped.id)["status"] == "terminated"
        assert node.describe(timed.id)["status"] == "timed_out"
        assert timer_rows(node) == []


async def test_continue_as_new_leaves_no_timer_rows_of_the_runs_before():
    async with open_test_node(app) as node:
        assert await process.exec("bounds:arms_then_continues", 5) == "done"
        assert timer_rows(node) == []
