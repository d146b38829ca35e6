"""``roost.connect(temporal=...)`` / ``connect_async(temporal=...)`` against a real dev server.

A node of the app serves the cluster's task queue (its workers run the workflows); the
clients talk to the cluster only, as a web app beside the nodes would.
"""

import itertools
import os
import uuid

import pytest
import trio
from temporal_server import dev_server  # noqa: F401 - the fixture `temporal_server`

import roost
from roost import funcs, process

pytestmark = pytest.mark.timeout(120)

app = roost.App("tclient")
_names = itertools.count()


@app.activity
def shout(name):
    return name.upper()


@app.workflow
async def greet(name):
    return f"hello {await funcs.call(shout, name)}"


@app.workflow
async def waiter():
    return (await process.listen("go", message=True).receive()).payload


@app.workflow
async def echo_server():
    requests = process.inbox()
    while True:
        request = await requests.receive()
        if request.topic == "stop":
            return "stopped"
        if request.topic == "refuse":
            process.send(request.sender, "nak", "not today")
        else:
            process.send(request.sender, "ok", {"echo": request.payload})


def _id(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def test_the_sync_client_steers_workflows_on_the_cluster(temporal_server):
    name = f"tc{os.getpid()}-{next(_names)}"
    async with roost.open_node(app, name=name, temporal=temporal_server):

        def use_client():
            with roost.connect(temporal=temporal_server) as client:
                wid = client.start(greet, "ann", id=_id("greet"))
                assert client.result(wid, timeout="30s") == "hello ANN"
                assert client.describe(wid)["status"] == "completed"
                waiting = client.start("tclient:waiter", id=_id("wait"))
                client.signal(waiting, "go", {"n": 1})
                assert client.result(waiting, timeout="30s") == {"n": 1}
                echo = client.start(echo_server, id=_id("echo"))
                assert client.call(echo, "ping", 7, timeout="20s") == {"echo": 7}
                with pytest.raises(roost.Error) as refused:
                    client.call(echo, "refuse", None, timeout="20s")
                assert refused.value.kind is roost.ErrorKind.CONFLICT
                client.terminate(echo)
                assert client.describe(echo)["status"] == "terminated"
                stuck = client.start(waiter, id=_id("stuck"))
                with pytest.raises(roost.Error) as late:
                    client.result(stuck, timeout="0.2s")
                assert late.value.kind is roost.ErrorKind.TIMEOUT
                client.cancel(stuck, "no longer needed")
                with pytest.raises(roost.Error) as nowhere:
                    client.enqueue("jobs", greet, "x")
                assert nowhere.value.kind is roost.ErrorKind.INVALID
                with pytest.raises(roost.Error) as missing:
                    client.describe(_id("nobody"))
                assert missing.value.kind is roost.ErrorKind.NOT_FOUND

        with trio.fail_after(90):
            await trio.to_thread.run_sync(use_client)


async def test_the_async_client_under_trio(temporal_server):
    name = f"tc{os.getpid()}-{next(_names)}"
    async with (
        roost.open_node(app, name=name, temporal=temporal_server),
        roost.connect_async(temporal=temporal_server) as client,
    ):
        with trio.fail_after(60):
            wid = await client.start(greet, "bo", id=_id("greet"))
            assert await client.result(wid, timeout="30s") == "hello BO"
            listed = await client.list(f"WorkflowId = '{wid}'")
            assert [row["workflow_id"] for row in listed] in ([], [wid])  # eventually


def test_a_bad_temporal_target_is_invalid():
    for bad in ("nowhere", 7):
        with pytest.raises(roost.Error) as caught:
            roost.connect(temporal=bad)
        assert caught.value.kind is roost.ErrorKind.INVALID
