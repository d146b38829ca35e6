"""Streams: roost.publish to listening processes, app.subscribe entries, durable ones."""

import pytest
import trio.testing

import roost
from roost import process

app = roost.App("st")
app.queue("fanout", max_retries=1, backoff="1s", jitter=0)
seen: list = []
fail_first: dict = {}


@app.activity
async def audit(data):
    seen.append(("audit", data))


@app.activity
async def mailer(data):
    info = roost.queue_info()
    if fail_first.pop(data["id"], False):
        raise roost.Error("smtp down", kind="Unavailable")
    seen.append(("mail", data["id"], info.queue, info.attempt))


@app.activity
async def step(data):
    roost.publish("order.fulfilled", {"id": data["id"]})  # joins this step's ack
    if fail_first.pop(("step", data["id"]), False):
        raise roost.Error("step failed after publishing", kind="Unavailable")


app.subscribe("order.fulfilled", audit)
app.subscribe("order.fulfilled", mailer, durable=True, queue="fanout")


@app.process
async def listener(n):
    inbox = process.listen("order.fulfilled", message=True)
    got = []
    while len(got) < n:
        msg = await inbox.receive()
        got.append((msg.payload["id"], msg.sender))
    return got


@pytest.fixture(autouse=True)
def _reset():
    seen.clear()
    fail_first.clear()


async def test_publish_reaches_listeners_and_subscribers(autojump_clock):
    async with roost.open_node(app) as node:
        watcher = await process.spawn_monitored("st:listener", 2)
        await trio.testing.wait_all_tasks_blocked()  # it listens (pub/sub: no replay)
        receipt = roost.publish("order.fulfilled", {"id": "o-1"})
        await receipt  # the durable subscriber's message is committed
        fail_first["o-2"] = True
        await roost.publish("order.fulfilled", {"id": "o-2"})
        await roost.sleep(10)
        exit_event = await process.events().receive()
        assert exit_event.pid == watcher
        assert exit_event.value == [("o-1", node.pid), ("o-2", node.pid)]
        assert ("audit", {"id": "o-1"}) in seen and ("audit", {"id": "o-2"}) in seen
        mails = [s for s in seen if s[0] == "mail"]
        assert mails == [("mail", "o-1", "fanout", 1), ("mail", "o-2", "fanout", 2)]
        roost.publish("nobody.listens", 1)  # no subscribers: fine


async def test_durable_subscribers_survive_a_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        fail_first["o-9"] = True  # fails once: waits a second for its retry
        await roost.publish("order.fulfilled", {"id": "o-9"})
        await trio.testing.wait_all_tasks_blocked()
    async with roost.open_node(app, tmp_path):
        await roost.sleep(10)
    assert ("mail", "o-9", "fanout", 2) in seen


async def test_publish_from_a_step_commits_with_its_acknowledgement(autojump_clock):
    async with roost.open_node(app):
        fail_first[("step", "o-5")] = True
        await roost.enqueue("default", "st:step", {"id": "o-5"})
        await roost.sleep(30)
        assert [s for s in seen if s[0] == "mail"] == [("mail", "o-5", "fanout", 1)]


async def test_bad_subscriptions_and_publishes_are_invalid(autojump_clock):
    with pytest.raises(roost.Error) as info:
        app.subscribe("t", audit, queue="fanout")  # a queue needs durable=True
    assert info.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        app.subscribe("@events", audit)

    @app.workflow
    async def publishes():
        try:
            roost.publish("order.fulfilled", {"id": "w"})
        except roost.Error as err:
            return err.kind
        return None

    async with roost.open_node(app):
        with pytest.raises(roost.Error) as info:
            roost.publish("order.fulfilled", {"id": {1, 2}})  # not encodable
        assert info.value.kind is roost.ErrorKind.INVALID
        assert await process.exec(publishes) == roost.ErrorKind.INVALID
    assert seen == []


async def test_a_subscription_to_an_undeclared_queue_fails_at_open(autojump_clock):
    typo = roost.App("typo")

    @typo.activity
    async def sink(data):
        return data

    typo.subscribe("t", sink, durable=True, queue="no-such-queue")
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(typo):
            pass
    assert info.value.kind is roost.ErrorKind.INVALID
    assert "no-such-queue" in info.value.message
