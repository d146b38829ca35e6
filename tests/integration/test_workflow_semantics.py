"""Two rules of the close and delivery path, through the public API.

- A send, cancel or terminate from a workflow to a child it started in the same
  activation reaches the child (the child starts in that activation's commit).
- A workflow cancelled and then failing is not retried by its retry policy and does not
  continue its cron schedule: a cancel ends the chain (docs/workflows.md).
"""

import logging

import pytest
import trio.testing

import roost
from roost import process, workflow
from roost.workflow._local._phases import RunPhase

app = roost.App("sem")
attempts: list = []


@app.workflow
async def echo():
    """Returns the first message it gets."""
    msg = await process.inbox().receive()
    return [msg.topic, msg.payload]


@app.workflow
async def waits_for_cancel():
    """Returns the reason of the cancel request it gets."""
    event = await process.events().receive()
    return f"cancelled: {event.reason}"


@app.workflow
async def sleeper():
    await roost.sleep("1d")
    return "woke"


@app.workflow
async def tells_child(kind, later):
    """Starts a child, then (in the same activation unless ``later``) sends, cancels or
    terminates it; returns what the child's EXIT says."""
    entry = {"send": "sem:echo", "cancel": "sem:waits_for_cancel", "terminate": "sem:sleeper"}
    child = await process.with_options(parent_close_policy="abandon").spawn(entry[kind])
    if later:
        await roost.sleep(1)  # a later activation: the child runs already
    if kind == "send":
        process.send(child, "ping", 7)
    elif kind == "cancel":
        process.cancel(child, "parent says stop")
    else:
        process.terminate(child)
    event = await process.events().receive()
    if event.error is not None:
        return ["error", event.error.kind.value, event.error.message]
    return ["value", event.value]


EXPECTED = {
    "send": ["value", ["ping", 7]],
    "cancel": ["value", "cancelled: parent says stop"],
    "terminate": ["error", roost.ErrorKind.CANCELED.value, "terminated"],
}


@pytest.mark.parametrize("later", [False, True], ids=["same-activation", "next-activation"])
@pytest.mark.parametrize("kind", ["send", "cancel", "terminate"])
async def test_a_child_started_in_the_same_activation_gets_send_cancel_terminate(
    autojump_clock, caplog, kind, later
):
    caplog.set_level(logging.WARNING, logger="roost.workflow")
    async with roost.open_node(app) as node:
        with trio.fail_after(3600):  # virtual time: a dropped delivery fails, not hangs
            result = await process.with_options(id=f"p-{kind}").exec("sem:tells_child", kind, later)
        assert result == EXPECTED[kind]
        children = node.list_workflows("workflow_type = 'sem:" + EXPECTED_TYPE[kind] + "'")
        assert len(children) == 1
        status = {"send": "completed", "cancel": "canceled", "terminate": "terminated"}
        assert children[0]["status"] == status[kind]
        assert not [r for r in caplog.records if "not delivered" in r.getMessage()]
        assert not [r for r in caplog.records if "not done" in r.getMessage()]


EXPECTED_TYPE = {"send": "echo", "cancel": "waits_for_cancel", "terminate": "sleeper"}


@app.workflow
async def sends_twice():
    """Two messages and a cancel to one child, all in the activation that starts it."""
    child = await process.with_options(parent_close_policy="abandon").spawn("sem:collects", 2)
    process.send(child, "item", "a")
    process.send(child, "item", "b")
    event = await process.events().receive()
    return event.value


@app.workflow
async def collects(n):
    inbox = process.listen("item")
    return [await inbox.receive() for _ in range(n)]


async def test_messages_to_a_child_of_the_same_activation_keep_their_order(autojump_clock):
    async with roost.open_node(app):
        with trio.fail_after(3600):
            assert await process.with_options(id="order").exec("sem:sends_twice") == ["a", "b"]


@app.workflow
async def fails_when_cancelled():
    attempts.append(workflow.info().attempt)
    await process.events().receive()
    raise roost.Error("gave up after the cancel", kind=roost.ErrorKind.UNAVAILABLE)


@pytest.mark.parametrize(
    "options",
    [
        {"retry_policy": {"initial_interval": "1s", "maximum_attempts": 5}},
        {"cron_schedule": "*/10 * * * * *"},
        {"cron_schedule": "*/10 * * * * *", "retry_policy": {"initial_interval": "1s"}},
    ],
    ids=["retry", "cron", "cron+retry"],
)
async def test_a_cancelled_workflow_that_fails_ends_its_retries_and_schedule(
    autojump_clock, options
):
    attempts.clear()
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="cf", **options).spawn_monitored(
            "sem:fails_when_cancelled"
        )
        await roost.sleep(15)  # a cron run waits for its fire time
        await trio.testing.wait_all_tasks_blocked()
        assert attempts == [1]
        process.cancel(pid, "stop")
        with trio.fail_after(3600):
            event = await process.events().receive()  # the EXIT: the chain ended
        assert event.pid == pid
        assert event.error.message == "gave up after the cancel"
        await roost.sleep(60)
        await trio.testing.wait_all_tasks_blocked()
        assert attempts == [1]  # no attempt 2, no next cron run
        described = node.describe("cf")
        assert (described["status"], described["attempt"]) == ("failed", 1)
        with pytest.raises(roost.Error) as info:
            process.send(pid, "late", 1)  # it is closed, not waiting for a retry
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


@app.workflow
async def returns_when_cancelled():
    attempts.append(workflow.info().attempt)
    event = await process.events().receive()
    return f"stopped: {event.reason}"


async def test_a_cancelled_cron_workflow_that_returns_ends_its_schedule(autojump_clock):
    attempts.clear()
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="cc", cron_schedule="*/10 * * * * *").spawn_monitored(
            "sem:returns_when_cancelled"
        )
        await roost.sleep(15)
        process.cancel(pid, "enough")
        event = await process.events().receive()
        assert event.value == "stopped: enough"
        await roost.sleep(60)
        assert attempts == [1]
        assert node.describe("cc")["status"] == "canceled"


@app.workflow
async def ignores_cancel_and_times_out():
    attempts.append(workflow.info().attempt)
    await roost.sleep("1h")


async def test_a_cancel_not_yet_read_ends_the_retries_of_a_run_that_times_out(autojump_clock):
    """The cancel was accepted (stored) but the workflow never ran again to read it: the
    run timeout closes it, and the retry policy does not start attempt 2."""
    attempts.clear()
    async with roost.open_node(app) as node:
        policy = {"initial_interval": "1s", "maximum_attempts": 3}
        options = {"id": "to", "run_timeout": "1m", "retry_policy": policy}
        pid = await process.with_options(options).spawn_monitored(
            "sem:ignores_cancel_and_times_out"
        )
        await trio.testing.wait_all_tasks_blocked()
        manager = node._node.local_workflows
        # No activation reads the cancel before the timeout.
        manager.runs["to"].enter_phase(RunPhase.HELD)  # pinned: no transition leads there
        process.cancel(pid, "stop")
        with trio.fail_after(3600):
            event = await process.events().receive()
        assert event.error.details["timeout_type"] == "run"
        await roost.sleep(60)
        assert attempts == [1]
        assert node.describe("to")["status"] == "timed_out"


@app.workflow
async def renews_then_waits(round_):
    if round_ == 0:
        await process.inbox().receive()
        await process.upgrade(None, 1)
    event = await process.events().receive()
    return f"round {round_}: {event.reason}"


async def test_a_cancel_committed_for_a_run_that_continued_as_new_reaches_the_new_run(
    autojump_clock,
):
    """A cancel request stored for the old run while it hands the id over (its commit
    and the hand-over race) is for the workflow: it moves to the new run like a message."""
    from roost.workflow._history import CancelRequested  # noqa: PLC0415 - internals under test

    async with roost.open_node(app) as node:
        pid = await process.with_options(id="can").spawn_monitored("sem:renews_then_waits", 0)
        await trio.testing.wait_all_tasks_blocked()
        manager = node._node.local_workflows
        old = manager.runs["can"]
        await process.send(pid, "go", None)
        await trio.testing.wait_all_tasks_blocked()
        assert manager.runs["can"] is not old  # continued as new
        event = CancelRequested(reason="late")
        k, _ = manager.incoming.stage(old, event)
        manager.incoming.accept(old, [(k, event)])  # as the commit of a cancel for the old run does
        with trio.fail_after(3600):
            exit_event = await process.events().receive()
        assert exit_event.value == "round 1: late"
        assert node.describe("can")["status"] == "canceled"
