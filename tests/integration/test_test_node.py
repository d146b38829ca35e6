"""roost.testing.open_test_node: time skipping under a plain trio.run, restarts, faults."""

import datetime as dt
import time

import pytest
import trio

import roost
from roost import funcs, process, workflow
from roost.testing import open_test_node

app = roost.App("tn")
calls: list = []


@app.activity
def remember(what):
    calls.append(what)
    return what


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="1m", maximum_attempts=5))
def flaky_email(to):
    calls.append(("email", to, roost.activity_info().attempt))
    return f"sent to {to}"


@app.workflow
async def monthly(customer):
    first = await funcs.call("tn:remember", f"{customer}: day 0")
    await roost.sleep("30d")
    second = await funcs.call("tn:remember", f"{customer}: day 30")
    return [first, second, roost.now()]


@app.workflow
async def waits_for_approval():
    approvals = process.listen("approve")
    got = await roost.channel.select(approvals, roost.after("7d"))
    return "approved" if got.channel is approvals else "expired"


@app.workflow
async def mails(to):
    return await funcs.call("tn:flaky_email", to)


def test_a_thirty_day_sleep_is_instant_under_plain_trio_run():
    calls.clear()

    async def main():
        async with open_test_node(app) as node:
            start = roost.now()
            result = await process.with_options(id="m-1").exec("tn:monthly", "c-1")
            assert result[:2] == ["c-1: day 0", "c-1: day 30"]
            assert result[2] - start >= dt.timedelta(days=30)
            assert result[2] - start < dt.timedelta(days=30, seconds=5)
            assert node.describe("m-1")["status"] == "completed"
        return start

    wall = time.monotonic()
    trio.run(main)  # no clock argument
    assert time.monotonic() - wall < 10


def test_restart_recovers_by_replay_and_nothing_runs_twice():
    calls.clear()

    async def main():
        async with open_test_node(app) as node:
            pid = await process.with_options(id="m-2").spawn("tn:monthly", "c-2")
            await roost.sleep("10d")  # the workflow is asleep, 20 days to go
            assert calls == ["c-2: day 0"]
            first_incarnation = node.incarnation
            await node.restart()
            assert node.incarnation == first_incarnation + 1
            process.monitor(pid)  # the block is a process of the new node
            event = await process.events().receive()
            assert event.value[:2] == ["c-2: day 0", "c-2: day 30"]
            assert calls == ["c-2: day 0", "c-2: day 30"]  # day 0 did not run again

    trio.run(main)


def test_wait_until_blocked_then_signal():
    async def main():
        async with open_test_node(app) as node:
            pid = await process.with_options(id="ap-1").spawn("tn:waits_for_approval")
            await node.wait_until_blocked()
            assert node.describe("ap-1")["status"] == "running"
            assert node.describe("ap-1")["history_length"] > 0  # it ran up to its select
            await node.signal(pid, "approve", True)
            process.monitor(pid)
            assert (await process.events().receive()).value == "approved"
            # and without a signal the durable 7 day timeout wins, at once
            assert await process.exec("tn:waits_for_approval") == "expired"

    trio.run(main)


def test_fail_activity_injects_failures_that_retries_absorb():
    calls.clear()

    async def main():
        async with open_test_node(app) as node:
            node.fail_activity("tn:flaky_email", times=2)
            start = roost.now()
            assert await process.exec("tn:mails", "ann@example.com") == "sent to ann@example.com"
            # two injected failures, then the real call on attempt 3, after 1 m + 2 m
            assert calls == [("email", "ann@example.com", 3)]
            assert roost.now() - start >= dt.timedelta(minutes=3)
            node.fail_activity(flaky_email, times=5, error=roost.Error("bounced", kind="Invalid"))
            with pytest.raises(roost.Error) as info:
                await process.exec("tn:mails", "bob@example.com")
            assert info.value.message == "bounced"
            with pytest.raises(roost.Error):
                node.fail_activity("tn:flaky_email", times=-1)

    trio.run(main)


def test_time_runs_normally_after_the_block():
    async def main():
        async with open_test_node(app):
            before = trio.current_time()
            await trio.sleep(3600)  # skipped
            # (before + 3600) - before can round to a hair under 3600 at a large clock value.
            assert trio.current_time() - before >= 3600 - 1e-6
        after = trio.current_time()
        wall = time.monotonic()
        await trio.sleep(0.05)  # real time again: not skipped, and never backwards
        assert time.monotonic() - wall >= 0.04
        assert trio.current_time() >= after

    trio.run(main)


async def test_it_works_under_pytest_trio_too(autojump_clock):
    async with open_test_node(app) as node:
        info = await process.with_options(id="w-1").exec("tn:monthly", "c-3")
        assert info[1] == "c-3: day 30"
        assert node.list_workflows("status = 'completed'")[0]["workflow_id"] == "w-1"
    assert workflow.info() is None


async def test_closing_a_node_takes_no_virtual_time(autojump_clock):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 100)  # the next deadline anywhere in the run
        before = trio.current_time()
        async with roost.open_node(app):
            pass
        assert trio.current_time() == before  # no jump while the store closed
        nursery.cancel_scope.cancel()


@app.workflow
async def reads_context():
    first = roost.ctx.get("tenant")
    await roost.sleep("1h")
    return [first, roost.ctx.get("tenant")]


def test_context_is_there_from_the_first_step_after_a_restart():
    async def main():
        async with open_test_node(app) as node:
            spawner = process.with_options(id="ctx-1").with_context({"tenant": "t-1"})
            pid = await spawner.spawn("tn:reads_context")
            await roost.sleep(60)
            await node.restart()  # the run is rebuilt by replaying its first step
            process.monitor(pid)
            assert (await process.events().receive()).value == ["t-1", "t-1"]

    trio.run(main)


def test_the_test_node_has_the_dead_letter_queue():
    dl = roost.App("dl")
    dl.queue("once", max_retries=0)

    @dl.activity
    async def boom(payload):
        raise roost.Error("no", kind="Unavailable")

    async def main():
        async with open_test_node(dl) as node:
            receipt = await roost.enqueue("once", boom, 1)
            await roost.sleep(1)
            assert [d.receipt_id for d in node.dlq.list("once")] == [receipt]

    trio.run(main)
