"""Bounded growth: a closed workflow leaves no timer rows; unread messages are capped."""

import pytest

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
        assert len(node._node.local_workflows.timers._heap) < 70 // 2
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


# -- the unread-message limit ----------------------------------------------------------------


@app.workflow
async def deaf():
    """Never reads what it is sent."""
    await roost.sleep("30d")


@app.workflow
async def reads_after_an_hour():
    """Reads nothing for an hour, then everything, as it comes."""
    await roost.sleep("1h")
    got = []
    async for payload in process.listen("m"):
        got.append(payload)
        if payload == "last":
            return got
    return got


@app.workflow
async def forwards(dest, n):
    """Sends ``n`` messages to ``dest`` (a workflow's send never raises for its target)."""
    for i in range(n):
        process.send(dest, "m", i)
    return "sent"


def message_count(node, workflow_id):
    return sum(type(e).__name__ == "MessageArrived" for e in node.history(workflow_id))


def inbox_rows(node):
    with node._node.store.read() as txn:
        return len(list(txn.range("inbox")))


async def test_a_workflow_that_does_not_read_refuses_sends_past_its_limit_and_stores_nothing():
    async with open_test_node(app, workflow_unread_limit=5) as node:
        pid = await process.with_options(id="deaf-1").spawn("bounds:deaf")
        for i in range(5):
            await process.send(pid, "m", i)
        with pytest.raises(roost.Error) as refused:
            process.send(pid, "m", 5)
        err = refused.value
        assert err.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert err.details == {"workflow_id": "deaf-1", "unread": 5, "limit": 5, "count": 1}
        assert "workflow_unread_limit" in err.message
        await node.wait_until_blocked()
        assert message_count(node, "deaf-1") == 5 and inbox_rows(node) == 0
        assert node.describe("deaf-1")["unread_messages"] == 5
        # Out of memory (a restart): the count stored with the run still holds.
        await node.restart()
        with pytest.raises(roost.Error, match="5 unread messages"):
            process.send(pid, "m", 6)
        # A start message to the running id (use_existing) is refused the same way.
        with pytest.raises(roost.Error) as start:
            await process.with_options(id="deaf-1").with_message("m", 7).spawn("bounds:deaf")
        assert start.value.kind is roost.ErrorKind.LIMIT_EXCEEDED
        await node.wait_until_blocked()
        assert message_count(node, "deaf-1") == 5 and inbox_rows(node) == 0


async def test_room_comes_back_as_the_workflow_reads():
    async with open_test_node(app, workflow_unread_limit=3, workflow_cache=1) as node:
        pid = await process.spawn("bounds:reads_after_an_hour")
        other = await process.spawn("bounds:deaf")  # evicts the first from the cache of 1
        for i in range(3):
            await process.send(pid, "m", i)
        with pytest.raises(roost.Error, match="3 unread messages"):
            process.send(pid, "m", 3)
        await roost.sleep("2h")  # it has read all three
        for i in (3, 4):
            await process.send(pid, "m", i)
        await process.send(pid, "m", "last")
        await node.wait_until_blocked()
        assert node.describe(pid.id)["result"] == [0, 1, 2, 3, 4, "last"]
        process.terminate(other)


async def test_a_workflow_sending_to_a_full_workflow_does_not_fail_and_nothing_is_stored(caplog):
    async with open_test_node(app, workflow_unread_limit=2) as node:
        target = await process.with_options(id="deaf-2").spawn("bounds:deaf")
        assert await process.exec("bounds:forwards", target, 4) == "sent"
        await node.wait_until_blocked()
        assert message_count(node, "deaf-2") == 2
        refused = [r for r in caplog.records if "not delivered" in r.getMessage()]
        assert len(refused) == 2 and "LimitExceeded" in refused[0].getMessage()


async def test_the_unread_limit_must_be_a_positive_int():
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(roost.Error) as refused:
            async with roost.open_node(app, workflow_unread_limit=bad):
                pass
        assert refused.value.kind is roost.ErrorKind.INVALID


async def test_sends_not_yet_committed_count_too():
    async with open_test_node(app, workflow_unread_limit=3) as node:
        pid = await process.with_options(id="deaf-3").spawn("bounds:deaf")
        receipts = [process.send(pid, "m", i) for i in range(3)]  # none awaited yet
        assert not any(r.accepted for r in receipts)
        with pytest.raises(roost.Error, match="3 unread messages"):
            process.send(pid, "m", 3)
        for receipt in receipts:
            await receipt
        await node.wait_until_blocked()
        assert message_count(node, "deaf-3") == 3


@app.workflow
async def forwards_on_go(dest):
    """Waits for "go", then sends one message to ``dest``."""
    await process.listen("go").receive()
    process.send(dest, "m", "from a sender")
    return "sent"


async def test_sends_planned_in_one_pass_share_the_room_left(caplog):
    # Three senders activated by one signal each run in the same pass; the limit leaves
    # room for two: each plan sees the messages the plans before it in the pass sent.
    async with open_test_node(app, workflow_unread_limit=2) as node:
        target = await process.with_options(id="deaf-3").spawn("bounds:deaf")
        senders = [await process.spawn_monitored(forwards_on_go, target) for _ in range(3)]
        await node.wait_until_blocked()
        for pid in senders:
            process.send(pid, "go")  # accepted together: their activations share a pass
        for _ in senders:
            assert (await process.events().receive()).value == "sent"
        await node.wait_until_blocked()
        assert message_count(node, "deaf-3") == 2
        assert node.describe("deaf-3")["unread_messages"] == 2
        refused = [r for r in caplog.records if "not delivered" in r.getMessage()]
        assert len(refused) == 1 and "LimitExceeded" in refused[0].getMessage()
        process.terminate(target)
