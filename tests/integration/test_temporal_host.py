"""The same roost app code on a real Temporal dev server (roost.temporal; docs/temporal.md).

Most nodes here run with ``max_cached_workflows=0``: Temporal replays every workflow task
from its history, so each scenario also checks that the driver replays on Temporal.
Timers are short and real (the dev server has no time skipping).
"""

import asyncio
import datetime as dt
import itertools
import os
import time
import uuid
from contextlib import asynccontextmanager

import pytest
import trio
from console_fixture import open_console_node
from prometheus_client.parser import text_string_to_metric_families
from temporal_server import DevServer, dev_server  # noqa: F401 - the fixture `temporal_server`
from temporalio.client import Client
from temporalio.service import RPCError

import roost
import roost.temporal
import roost.temporal._host
import roost.temporal._replay
import roost.temporal._workflow
from roost import channel, funcs, process, workflow
from roost.admin._console_format import workflow_url
from roost.admin._metrics import metrics_text, new_registry

pytestmark = pytest.mark.timeout(120)

app = roost.App("tshop")
ATTEMPTS: dict[str, int] = {}
# The code of ``versioned`` as it is deployed: the workflow ids that run the code from before
# the change (no version call at first) and the newest version it knows.
CODE = {"version": 1, "before": set()}


@app.activity
def reserve(item):
    return f"reserved {item}"


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="50ms", maximum_attempts=3))
async def charge(order_id, amount):
    ATTEMPTS[order_id] = ATTEMPTS.get(order_id, 0) + 1
    await trio.sleep(0.01)  # trio code, run on the node's trio loop
    info = roost.activity_info()
    if info.attempt == 1:
        raise roost.Error("card network down", kind=roost.ErrorKind.UNAVAILABLE)
    return {"charged": amount, "attempt": info.attempt, "key": info.idempotency_key}


@app.activity
def ship(item):
    return f"shipped {item}"


@app.workflow
async def order(order_id, item, amount):
    reserved = await funcs.call(reserve, item)
    charged = await funcs.call(charge, order_id, amount)
    shipped = await funcs.call(ship, item)
    return [reserved, charged, shipped]


@app.workflow
async def napper(seconds):
    before = roost.now()
    await roost.sleep(seconds)
    return (roost.now() - before).total_seconds()


@app.workflow
async def waiter():
    message = await process.listen("go", message=True).receive()
    return {"payload": message.payload, "sender": message.sender}


@app.workflow
async def echo_server():
    requests = process.inbox()
    while True:
        request = await requests.receive()
        if request.topic == "stop":
            return "stopped"
        process.send(request.sender, "ok", {"echo": request.payload})


@app.workflow
async def failing(kind):
    raise roost.Error("it went wrong", kind=roost.ErrorKind(kind))


@app.workflow
async def cancellable():
    chosen = await channel.select(
        process.events().case_receive(), roost.after("30s").case_receive()
    )
    event = chosen.value
    return f"stopped: {event.reason}" if isinstance(event, roost.Cancel) else "timed out"


@app.workflow
async def versioned(report_to):
    asks = process.pid().id not in CODE["before"]
    first = workflow.version("step", -1, CODE["version"]) if asks else None
    process.send(report_to, "first task done")  # sent by the completed first task
    await process.listen("go").receive()
    again = workflow.version("step", -1, CODE["version"])
    return [first, again]


@app.activity(
    retry_policy={
        "initial_interval": "50ms",
        "maximum_attempts": 3,
        "non_retryable_error_kinds": ["NotFound"],
    }
)
def lookup(order_id, how):
    ATTEMPTS[order_id] = ATTEMPTS.get(order_id, 0) + 1
    if how == "missing":
        raise roost.Error("no such order", kind=roost.ErrorKind.NOT_FOUND, details={"id": order_id})
    if how == "bug":
        raise ValueError("bad arithmetic")
    return "found"


@app.workflow
async def looking(order_id, how):
    try:
        return await funcs.call(lookup, order_id, how)
    except roost.Error as exc:
        return {"kind": exc.kind.value, "message": exc.message, "details": exc.details}


@app.process
async def helper(name):
    message = await process.inbox().receive()
    return f"{message.payload}, {name}"


@app.workflow
async def spawner():
    pid = await process.spawn(helper, "ann")  # on the node that started this workflow
    process.send(pid, "greeting", "hello")
    event = await process.events().receive()  # its EXIT: the activity's result
    return [pid.node, pid.id, event.value]


@app.workflow
async def caller(dest, topic, payload):
    try:
        return await process.call(dest, topic, payload, timeout="3s")
    except roost.Error as exc:
        return {"kind": exc.kind.value, "details": exc.details}


@app.process
async def answering():
    request = await process.inbox().receive()
    process.send(request.sender, "ack")
    process.send(request.sender, "ok", {"got": request.payload, "from": request.sender.host})


@app.workflow
async def late_spawner():
    await process.listen("go").receive()
    await process.spawn(helper, "bob")
    event = await process.events().receive()
    return {"kind": event.error.kind.value, "message": event.error.message}


_names = itertools.count()


def _node_name():
    return f"t{os.getpid()}-{next(_names)}"


@asynccontextmanager
async def temporal_node(server, *, cache=0, name=None):
    factory = roost.temporal.temporal_host(server, max_cached_workflows=cache)
    async with roost.open_node(app, name=name or _node_name(), workflow_host=factory) as node:
        yield node


STARTED: list[str] = []  # the workflow ids ``_id`` gave out, in order
# Histories that do not replay here: tasks that fail whenever they run, and a run that
# dropped an unticketed reply by its worker's key ring (the Replayer has no ring).
NO_REPLAY = {
    "test_an_exception_out_of_the_driver_fails_the_workflow_task",
    "test_a_reply_without_a_ticket_is_refused_under_a_key_ring",
}


def _id(prefix):
    workflow_id = f"{prefix}-{uuid.uuid4().hex[:10]}"
    STARTED.append(workflow_id)
    return workflow_id


@pytest.fixture(autouse=True)
async def every_history_replays(request):
    """After each scenario: the history of each workflow it started replays in temporalio's
    ``Replayer`` (no worker cache, no server) against the same code.

    The tests in ``NO_REPLAY`` start workflows whose tasks fail whenever they run.
    """
    first = len(STARTED)
    yield
    if "temporal_server" not in request.fixturenames or request.node.name in NO_REPLAY:
        return
    server = request.getfixturevalue("temporal_server")
    ids = STARTED[first:]

    async def replay_all(client):
        failures = {}
        for workflow_id in ids:
            try:
                history = await client.get_workflow_handle(workflow_id).fetch_history()
            except RPCError:
                continue  # a start the test expected to be refused
            outcome = await roost.temporal._replay._replay(app, history)
            if outcome.failure is not None:
                failures[workflow_id] = outcome.failure
        return failures

    assert await with_client(server, replay_all) == {}


async def with_client(server, fn, *, roost_payloads=True):
    """Run ``fn(client)`` with a hand-written temporalio client (in its own asyncio loop)."""

    async def main():
        converter = roost.temporal.data_converter() if roost_payloads else None
        kwargs = {"data_converter": converter} if converter else {}
        client = await Client.connect(server, **kwargs)
        return await fn(client)

    return await trio.to_thread.run_sync(asyncio.run, main())


async def history_events(server, workflow_id):
    async def fetch(client):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        return list(history.events)

    return await with_client(server, fetch)


async def test_three_activities_run_and_one_is_retried_by_its_roost_policy(temporal_server):
    order_id = _id("order")
    async with temporal_node(temporal_server) as node:
        with trio.fail_after(60):
            result = await process.with_options(id=order_id).exec(order, order_id, "book", 12)
        described = node.describe(order_id)
    run_id = described["run_id"]
    assert result == [
        "reserved book",
        {"charged": 12, "attempt": 2, "key": f"{order_id}/{run_id}/2"},
        "shipped book",
    ]
    assert ATTEMPTS[order_id] == 2
    assert described["status"] == "completed" and described["workflow_type"] == "tshop:order"
    assert described["task_queue"] == "tshop" and described["result"] == result
    events = await history_events(temporal_server, order_id)
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in events
        if e.HasField("activity_task_started_event_attributes")
    ]
    assert attempts == [1, 2, 1]  # Temporal retried the charge, as its roost policy says


async def test_a_durable_timer_is_a_temporal_timer(temporal_server):
    workflow_id = _id("nap")
    async with temporal_node(temporal_server):
        began = time.monotonic()
        with trio.fail_after(30):
            slept = await process.with_options(id=workflow_id).exec(napper, 0.5)
        assert time.monotonic() - began >= 0.5
    assert slept >= 0.5  # roost.now() is workflow.now(), which moved on with the timer
    events = await history_events(temporal_server, workflow_id)
    assert sum(e.HasField("timer_fired_event_attributes") for e in events) == 1


async def test_a_signal_is_received_with_listen_and_its_receipt_is_durable(temporal_server):
    async with temporal_node(temporal_server) as node:
        pid = await process.with_options(id=_id("wait")).spawn(waiter)
        assert str(pid) == f"{{tshop:workflows|{pid.id}}}"
        receipt = process.send(pid, "go", {"n": 1})
        with trio.fail_after(30):
            await receipt
            assert receipt.accepted
            assert await process.exec(_wait_for, pid) == {"payload": {"n": 1}, "sender": node.pid}


@app.process
async def _wait_for(pid):
    process.monitor(pid)
    event = await process.events().receive()
    return event.value


async def test_a_signal_from_a_plain_temporalio_client_decodes_its_json(temporal_server):
    async with temporal_node(temporal_server):
        pid = await process.with_options(id=_id("json")).spawn_monitored(waiter)

        async def signal(client):
            await client.get_workflow_handle(pid.id).signal("go", {"from": "cli"})

        await with_client(temporal_server, signal, roost_payloads=False)  # JSON, as the CLI
        with trio.fail_after(30):
            event = await process.events().receive()
    assert event.value == {"payload": {"from": "cli"}, "sender": None}


async def test_exec_from_a_plain_process_in_an_open_node_temporal_block(temporal_server):
    async with roost.open_node(app, name=_node_name(), temporal=temporal_server) as node:
        with trio.fail_after(30):
            assert await process.exec(napper, 0.05) >= 0.05
            pid = await process.with_options(id=_id("echo")).spawn_monitored(echo_server)
            # A call: the workflow replies to the caller's reply address, a plain process of
            # this node, through the node's own task queue.
            assert await process.call(pid, "ping", 7, timeout="20s") == {"echo": 7}
            await process.send(pid, "stop")
            assert (await process.events().receive()).value == "stopped"
        assert node.describe(pid.id)["status"] == "completed"


async def test_a_monitor_gets_the_exit_with_the_roost_error(temporal_server):
    async with temporal_node(temporal_server):
        pid = await process.with_options(id=_id("fail")).spawn_monitored(failing, "Conflict")
        with trio.fail_after(30):
            event = await process.events().receive()
        assert isinstance(event, roost.Exit) and event.pid == pid
        assert event.error.kind is roost.ErrorKind.CONFLICT
        assert event.error.message == "it went wrong"
        process.monitor(pid)  # closed already: the EXIT comes at once, with its outcome
        with trio.fail_after(10):
            again = await process.events().receive()
        assert again.error.kind is roost.ErrorKind.CONFLICT
        nobody = roost.Pid.parse("{tshop:workflows|nobody-" + uuid.uuid4().hex + "}")
        process.monitor(nobody)
        with trio.fail_after(10):
            noproc = await process.events().receive()
        assert noproc.pid == nobody and noproc.error.kind is roost.ErrorKind.NOT_FOUND


async def test_cancel_carries_its_reason_and_terminate_stops_at_once(temporal_server):
    async with temporal_node(temporal_server) as node:
        polite = await process.with_options(id=_id("polite")).spawn_monitored(cancellable)
        blunt = await process.with_options(id=_id("blunt")).spawn_monitored(cancellable)
        await process.send(polite, "warm-up")  # its first task has run once this is durable
        process.cancel(polite, "not needed")
        process.terminate(blunt)
        with trio.fail_after(30):
            exits = {e.pid: e for e in [await process.events().receive() for _ in range(2)]}
        assert exits[polite].value == "stopped: not needed"
        assert node.describe(polite.id)["status"] == "canceled"
        assert exits[blunt].error.kind is roost.ErrorKind.CANCELED
        assert exits[blunt].error.message == "terminated"
        assert node.describe(blunt.id)["status"] == "terminated"
        with pytest.raises(roost.Error) as caught:
            process.terminate(blunt)
        assert caught.value.kind is roost.ErrorKind.NOT_FOUND


async def test_workflow_version_is_decided_by_patched_markers_on_replay(temporal_server):
    old, older = _id("v-old"), _id("v-older")
    async with temporal_node(temporal_server) as node:  # no cache: every task replays
        inbox = process.inbox()
        # Each waits for its first task, told by a message that task sends. The task after
        # it (the delivery's completion) may replay under either code: the code of each id
        # changes only once, below.
        CODE.update(version=1, before={older})
        first = await process.with_options(id=old).spawn_monitored(versioned, node.pid)
        second = await process.with_options(id=older).spawn_monitored(versioned, node.pid)
        with trio.fail_after(20):
            assert {(await inbox.receive()).sender for _ in range(2)} == {first, second}
        CODE.update(version=2, before=set())  # the code changes under running workflows
        for pid in (first, second):
            await process.send(pid, "go")
        with trio.fail_after(30):
            exits = {e.pid: e.value for e in [await process.events().receive() for _ in range(2)]}
        new = await process.with_options(id=_id("v-new")).spawn_monitored(versioned, node.pid)
        await process.send(new, "go")
        with trio.fail_after(30):
            fresh = (await process.events().receive()).value
    assert exits[first] == [1, 1]  # replayed: the version its history recorded (step@1)
    assert exits[second] == [-1, -1]  # its history predates the change: DEFAULT_VERSION
    assert fresh == [2, 2]


async def test_an_activity_error_keeps_its_kind_and_non_retryable_kinds_are_not_retried(
    temporal_server,
):
    missing, bug = _id("missing"), _id("bug")
    async with temporal_node(temporal_server):
        with trio.fail_after(30):
            got = await process.exec(looking, missing, "missing")
            crashed = await process.exec(looking, bug, "bug")
            found = await process.exec(looking, _id("ok"), "ok")
    assert got == {"kind": "NotFound", "message": "no such order", "details": {"id": missing}}
    assert ATTEMPTS[missing] == 1  # NotFound is in non_retryable_error_kinds
    assert crashed["kind"] == "Internal" and "bad arithmetic" in crashed["message"]
    assert ATTEMPTS[bug] == 3  # a plain exception is retried, up to maximum_attempts
    assert found == "found"


async def test_a_second_live_node_with_a_taken_name_is_refused(temporal_server):
    name = _node_name()
    async with temporal_node(temporal_server, name=name):
        with pytest.raises(roost.Error) as caught:
            async with temporal_node(temporal_server, name=name):
                pass
    assert caught.value.kind is roost.ErrorKind.INVALID_STATE
    assert f"a live node named {name!r}" in caught.value.message
    async with temporal_node(temporal_server, name=name):
        pass  # free again once the first has closed


async def test_what_the_host_does_not_carry_out_yet_is_a_roost_error(temporal_server):
    async with temporal_node(temporal_server, cache=100) as node:
        with pytest.raises(roost.Error) as history:
            node.history("anything")
        assert history.value.kind is roost.ErrorKind.INVALID_STATE
        assert "is not supported on the Temporal host yet" in history.value.message
        export = f"`roost history export anything FILE --temporal {temporal_server} --namespace"
        assert export in history.value.message


DUE = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@app.workflow
async def tagged():
    workflow.attrs(search={"Score": 1.5, "Rush": True, "Due": DUE, "Tags": ["a", "b"]})
    workflow.attrs(search={"Priority": 4})  # an upsert replaces that one attribute
    return "tagged"


async def test_search_attributes_at_start_and_from_workflow_code_are_queryable(temporal_server):
    workflow_id = _id("tagged")
    start = process.with_options(id=workflow_id, search_attributes={"Shop": "acme", "Priority": 3})
    async with temporal_node(temporal_server) as node:
        with trio.fail_after(30):
            assert await start.exec(tagged) == "tagged"
        assert node.describe(workflow_id)["search_attributes"] == {
            "Shop": "acme",
            "Priority": 4,
            "Score": 1.5,
            "Rush": True,
            "Due": DUE,
            "Tags": ["a", "b"],
        }
        query = (
            f"Shop = 'acme' AND Priority = 4 AND Rush = true AND Tags = 'b' AND Score > 1 "
            f"AND WorkflowId = '{workflow_id}'"
        )
        # Temporal's visibility store is eventually consistent and tells nobody when it has
        # caught up: asking again (bounded) is the only way to see the run listed.
        with trio.fail_after(20):
            while not (listed := node.list_workflows(query)):  # noqa: ASYNC110 - no event
                await trio.sleep(0.05)
        assert [w["workflow_id"] for w in listed] == [workflow_id]
        with pytest.raises(roost.Error) as caught:
            await process.with_options(search_attributes={"Unregistered": "x"}).spawn(napper, 0)
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "Unregistered" in caught.value.message
    assert "temporal operator search-attribute create" in caught.value.message


@app.workflow
async def doubler(x):
    return 2 * x


@app.workflow
async def parent(x):
    return await workflow.exec(doubler, x)


@app.workflow
async def counter(n):
    if n < 2:
        await process.upgrade(counter, n + 1)
    return n


@app.workflow
async def greeter():
    message = await process.listen("hello", message=True).receive()
    workflow.attrs(memo={"greeted": message.payload})
    return [message.payload, message.sender]


@app.activity
async def beating():
    roost.heartbeat("half way")
    return roost.activity_info().entry


@app.workflow
async def beats():
    return await funcs.new().with_options(heartbeat_timeout="10s").call(beating)


async def test_children_continue_as_new_start_messages_memo_and_heartbeats(temporal_server):
    parent_id, greeter_id = _id("parent"), _id("greet")
    async with temporal_node(temporal_server) as node:
        with trio.fail_after(60):
            assert await process.with_options(id=parent_id).exec(parent, 21) == 42
            child = node.describe(f"{parent_id}.1")
            assert child["workflow_type"] == "tshop:doubler" and child["result"] == 42
            assert child["parent"] == roost.Pid.parse(f"{{tshop:workflows|{parent_id}}}")
            assert await process.exec(counter, 0) == 2  # exec follows continue-as-new runs
            greeted = process.with_options(id=greeter_id).with_message("hello", "hi")
            assert await greeted.exec(greeter) == ["hi", node.pid]
            assert await process.exec(beats) == "tshop:beating"
        assert node.describe(greeter_id)["memo"] == {"greeted": "hi"}
        # Temporal's visibility store is eventually consistent and tells nobody when it has
        # caught up: asking again (bounded) is the only way to see the closed run listed.
        with trio.fail_after(10):
            while True:
                listed = node.list_workflows(f"WorkflowId = '{greeter_id}'")
                if listed:
                    break
                await trio.sleep(0.05)
        assert [(d["workflow_id"], d["status"]) for d in listed] == [(greeter_id, "completed")]


@app.process
async def linked_to(target, report_to):
    process.set_options(trap_links=True)
    process.link(target)
    process.send(report_to, "linked")
    process.send(report_to, "event", await process.events().receive())


async def test_a_linked_process_gets_link_down_when_the_workflow_fails(temporal_server):
    async with temporal_node(temporal_server) as node:
        pid = await process.with_options(id=_id("gate")).spawn(waiter)
        inbox = process.inbox()
        await process.spawn(linked_to, pid, node.pid)
        with trio.fail_after(30):
            assert (await inbox.receive()).topic == "linked"
            process.terminate(pid)
            event = (await inbox.receive()).payload
    assert isinstance(event, roost.LinkDown) and event.pid == pid
    assert event.error.kind is roost.ErrorKind.CANCELED


@app.workflow
async def unrecordable():
    return {1, 2}  # a set cannot be recorded: activate raises, the workflow task fails


async def test_an_exception_out_of_the_driver_fails_the_workflow_task(temporal_server):
    workflow_id = _id("task-failure")
    async with temporal_node(temporal_server) as node:
        pid = await process.with_options(id=workflow_id).spawn(unrecordable)
        # The task fails inside temporalio's worker, which tells roost nothing; the server's
        # history is where it shows: asked again until it does (bounded).
        with trio.fail_after(20):
            while True:
                events = await history_events(temporal_server, workflow_id)
                failed = [
                    e.workflow_task_failed_event_attributes.failure.message
                    for e in events
                    if e.HasField("workflow_task_failed_event_attributes")
                ]
                if failed:
                    break
                await trio.sleep(0.05)
        assert "cannot encode" in failed[0] and "set" in failed[0]
        assert node.describe(workflow_id)["status"] == "running"  # Temporal retries the task
        process.terminate(pid)


@app.process
async def collector(n, report_to):
    inbox = process.inbox()
    process.send(report_to, "done", [(await inbox.receive()).payload for _ in range(n)])


@app.workflow
async def wf_collector(n):
    inbox = process.inbox()
    return [(await inbox.receive()).payload for _ in range(n)]


@app.workflow
async def sender(dest, n):
    for i in range(n):
        process.send(dest, "m", i)
        if i == n // 2:
            await roost.sleep(0.01)  # the rest in a later activation, behind these
    return "sent"


async def test_messages_from_one_workflow_reach_one_receiver_in_order(temporal_server):
    n = 30
    async with temporal_node(temporal_server, cache=100) as node:
        plain = await process.spawn(collector, n, node.pid)
        wf = await process.with_options(id=_id("collect")).spawn_monitored(wf_collector, n)
        with trio.fail_after(30):
            assert await process.exec(sender, plain, n) == "sent"
            assert await process.exec(sender, wf, n) == "sent"
            assert (await process.inbox().receive()).payload == list(range(n))
            assert (await process.events().receive()).value == list(range(n))


@app.workflow
async def kid():
    return (await process.inbox().receive()).payload


@app.workflow
async def mom(how):
    if how == "send":
        pid = await process.spawn(kid)
        process.send(pid, "hi", "hello kid")
    else:
        pid = await process.spawn(cancellable)
        process.cancel(pid, "not now")
    return (await process.events().receive()).value  # a child is monitored by its parent


async def test_a_message_or_cancel_to_a_child_started_in_the_same_activation_arrives(
    temporal_server,
):
    async with temporal_node(temporal_server):
        with trio.fail_after(10):  # lost, it would wait forever
            assert await process.exec(mom, "send") == "hello kid"
            assert await process.exec(mom, "cancel") == "stopped: not now"


@pytest.fixture
def restartable_server(tmp_path):
    """A dev server of this test's own, keeping its state in a file across a restart."""
    server = DevServer(tmp_path / "server.log", db=tmp_path / "temporal.db")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@app.process
async def exec_and_report(pid, report_to):
    process.send(report_to, "exec", await process.exec(_wait_for, pid))


async def test_a_short_server_outage_gives_watchers_no_false_exit(restartable_server):
    server = restartable_server
    async with temporal_node(server.target, cache=100) as node:
        pid = await process.with_options(id=_id("outage")).spawn_monitored(waiter)
        inbox = process.inbox()
        await process.spawn(exec_and_report, pid, node.pid)
        await trio.sleep(0.2)  # the watchers' waits are under way on the server
        server.kill()
        # temporalio's own retries of the wait give up after about 6 s: past that, an
        # outage is the host's to ride out.
        with trio.move_on_after(7):
            event = await process.events().receive()
            pytest.fail(f"an EXIT during the outage: {event!r}")
        await trio.to_thread.run_sync(server.start)
        with trio.fail_after(30):
            await process.send(pid, "go", "after")
            event = await process.events().receive()
            assert event.error is None and event.value["payload"] == "after"
            assert (await inbox.receive()).payload["payload"] == "after"


@app.workflow
async def upgrader(run):
    if run == 0:
        await process.listen("go").receive()  # the "x" messages stay unread in this run
        await process.upgrade(upgrader, 1)
    inbox = process.inbox()
    return [run, [(await inbox.receive()).payload for _ in range(4)]]


async def test_continue_as_new_carries_unread_messages_to_the_next_run(temporal_server):
    async with temporal_node(temporal_server):
        start = process.with_options(id=_id("upgrade")).with_message("x", 1).with_message("x", 2)
        pid = await start.spawn_monitored(upgrader, 0)
        await process.send(pid, "x", 3)
        await process.send(pid, "go")
        await process.send(pid, "x", 4)  # to the old run after its last step, or to the new
        with trio.fail_after(10):  # a lost message would leave it waiting
            assert (await process.events().receive()).value == [1, [1, 2, 3, 4]]


async def test_cancel_of_a_closed_or_unknown_workflow_raises_not_found(temporal_server):
    async with temporal_node(temporal_server, cache=100):
        with trio.fail_after(10):
            pid = await process.with_options(id=_id("done")).spawn_monitored(doubler, 1)
            assert (await process.events().receive()).value == 2
        nobody = roost.Pid.parse("{tshop:workflows|nobody-" + uuid.uuid4().hex + "}")
        for closed in (pid, nobody):
            with pytest.raises(roost.Error) as caught:
                process.cancel(closed, "too late")
            assert caught.value.kind is roost.ErrorKind.NOT_FOUND
            assert closed.id in caught.value.message


async def test_a_namespace_the_server_does_not_have_is_a_roost_error(temporal_server):
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(
            app, name=_node_name(), temporal=temporal_server, temporal_namespace="no-such-ns"
        ):
            pass
    assert caught.value.kind is roost.ErrorKind.NOT_FOUND
    assert "no namespace 'no-such-ns'" in caught.value.message
    assert "temporal operator namespace create" in caught.value.message


async def test_a_worker_that_stops_on_its_own_makes_the_node_refuse_new_workflows(
    temporal_server, caplog
):
    async with temporal_node(temporal_server, cache=100) as node:
        host = node._node.require_workflows()
        # The app queue's worker, ended from outside: as a fatal worker error would end it.
        worker = next(w for w in host._workers if w.config()["task_queue"] == "tshop")

        async def stop_it():
            await worker.shutdown()
            await asyncio.sleep(0)  # its task's done-callbacks run

        await host._bridge.run(stop_it())
        with pytest.raises(roost.Error) as caught:
            await process.spawn(napper, 0)
    assert caught.value.kind is roost.ErrorKind.UNAVAILABLE
    assert "worker of task queue 'tshop' stopped" in caught.value.message
    assert "worker of task queue 'tshop' stopped" in caplog.text


class _FailingExits:
    """The node's services, but giving a process its EXIT fails."""

    def __init__(self, inner):
        self.inner = inner
        self.tried = trio.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def post_exit(self, watcher, event):
        self.tried.set()
        raise RuntimeError("the EXIT could not be posted")


async def test_a_failure_in_a_host_background_task_does_not_stop_the_node(temporal_server, caplog):
    async with temporal_node(temporal_server, cache=100) as node:
        watches = node._node.require_workflows()._watches
        services = watches._services
        watches._services = failing = _FailingExits(services)
        pid = await process.with_options(id=_id("unannounced")).spawn_monitored(doubler, 1)
        with trio.fail_after(10):
            await failing.tried.wait()  # the host task raised (or logged) right after
            watches._services = services
            assert await process.exec(doubler, 3) == 6  # the node runs on
    assert f"the EXIT of {pid} to" in caplog.text
    assert "the EXIT could not be posted" in caplog.text


@app.workflow
async def tally():
    inbox = process.inbox()
    total = 0
    while True:
        request = await inbox.receive()
        match request.topic:
            case "bump":  # a plain message: no reply
                total += request.payload
            case "add":
                process.send(request.sender, "ack")
                total += request.payload
                process.send(request.sender, "ok", total)
            case "sub":
                process.send(request.sender, "nak", "tally only adds")
            case "div":
                error = roost.Error("no division here", kind=roost.ErrorKind.INVALID_STATE)
                process.send(request.sender, "error", error)
            case "stop":
                return total
            # anything else is never answered


@app.process
async def call_and_report(pid, topic, report_to):
    try:
        value = await process.call(pid, topic, None, timeout="30s")
    except roost.Error as exc:
        value = exc
    process.send(report_to, "called", value)


async def test_process_call_to_a_workflow_is_an_update_with_ack_ok_nak_and_error(temporal_server):
    workflow_id = _id("tally")
    async with temporal_node(temporal_server) as node:
        pid = await process.with_options(id=workflow_id).spawn_monitored(tally)
        with trio.fail_after(30):
            assert await process.call(pid, "add", 5, timeout="20s") == 5
            process.send(pid, "bump", 100)  # sent before the call: the call sees it
            assert await process.call(pid, "add", 2, timeout="20s") == 107
            with pytest.raises(roost.Error) as nak:
                await process.call(pid, "sub", 1, timeout="20s")
            assert nak.value.kind is roost.ErrorKind.CONFLICT
            assert nak.value.details["reason"] == "tally only adds"
            with pytest.raises(roost.Error) as failed:
                await process.call(pid, "div", 1, timeout="20s")
            assert failed.value.kind is roost.ErrorKind.INVALID_STATE
            assert failed.value.message == "no division here"
        with pytest.raises(roost.Error) as late:
            await process.call(pid, "ignored", None, timeout="0.3s")
        assert late.value.kind is roost.ErrorKind.TIMEOUT
        # A call still open when the workflow closes fails with NotFound, as a call to a
        # workflow that is not running does.
        inbox = process.inbox()
        await process.spawn(call_and_report, pid, "unanswered", node.pid)
        with trio.fail_after(30):
            # Accepted by the workflow: its history is where it shows (asked, bounded).
            events = await history_events(temporal_server, workflow_id)
            while not _updates_accepted(events, 6):
                await trio.sleep(0.05)
                events = await history_events(temporal_server, workflow_id)
            await process.send(pid, "stop")
            assert (await process.events().receive()).value == 107
            closed = (await inbox.receive()).payload
        assert closed.kind is roost.ErrorKind.NOT_FOUND
        assert "closed before it replied" in closed.message
        with pytest.raises(roost.Error) as gone:
            await process.call(pid, "add", 1, timeout="5s")
        assert gone.value.kind is roost.ErrorKind.NOT_FOUND
    events = await history_events(temporal_server, workflow_id)
    assert _updates_accepted(events, 6)  # each call was an update the workflow accepted


def _updates_accepted(events, n):
    return (
        sum(e.HasField("workflow_execution_update_accepted_event_attributes") for e in events) >= n
    )


@app.process
async def idle():
    await trio.sleep_forever()


@app.process
async def polite_process():
    event = await process.events().receive()
    return f"asked to stop: {event.reason}"


@app.workflow
async def stopper(victim, hard_target, soft_target):
    process.terminate(victim)  # a workflow: an activity terminates it with the client
    process.terminate(hard_target)  # plain processes: stopped on their node
    process.cancel(soft_target, "enough")
    return "stopped them"


async def test_workflow_code_terminates_a_workflow_and_stops_plain_processes(temporal_server):
    async with temporal_node(temporal_server) as node:
        victim = await process.with_options(id=_id("victim")).spawn_monitored(cancellable)
        hard = await process.spawn_monitored(idle)
        soft = await process.spawn_monitored(polite_process)
        with trio.fail_after(30):
            assert (
                await process.with_options(id=_id("stopper")).exec(stopper, victim, hard, soft)
                == "stopped them"
            )
            exits = {e.pid: e for e in [await process.events().receive() for _ in range(3)]}
        assert exits[victim].error.kind is roost.ErrorKind.CANCELED
        assert exits[victim].error.message == "terminated"
        assert node.describe(victim.id)["status"] == "terminated"
        assert exits[hard].error.kind is roost.ErrorKind.CANCELED
        assert exits[hard].error.message == "terminated"
        assert exits[soft].value == "asked to stop: enough"  # a Cancel event it acted on


async def test_a_workflow_spawns_a_plain_process_on_the_node_that_started_it(temporal_server):
    workflow_id = _id("spawner")
    async with temporal_node(temporal_server) as node:
        with trio.fail_after(30):
            node_name, pid_id, value = await process.with_options(id=workflow_id).exec(spawner)
    assert node_name == node.name and pid_id.startswith(f"{workflow_id}.")
    assert value == "hello, ann"
    events = await history_events(temporal_server, workflow_id)
    types = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "@roost.process" in types


async def test_a_spawn_on_a_node_that_is_gone_is_an_unavailable_exit(temporal_server, monkeypatch):
    monkeypatch.setattr(roost.temporal._workflow, "PROCESS_START_TIMEOUT", dt.timedelta(seconds=1))
    workflow_id = _id("late")
    async with temporal_node(temporal_server) as first:
        gone = first.name
        pid = await process.with_options(id=workflow_id).spawn(late_spawner)
        await process.send(pid, "warm-up")  # durable: its first task runs on this node
    async with temporal_node(temporal_server):  # another node of the cluster
        process.monitor(pid)
        await process.send(pid, "go")
        with trio.fail_after(30):
            exited = await process.events().receive()
    assert exited.value["kind"] == "Unavailable"
    assert f"the node {gone!r} did not run or stopped answering" in exited.value["message"]


async def test_process_call_from_a_workflow_gets_its_replies_as_signals(temporal_server):
    async with temporal_node(temporal_server) as node:
        tally_pid = await process.with_options(id=_id("tally")).spawn_monitored(tally)
        plain = await process.spawn(answering)
        with trio.fail_after(30):
            assert (
                await process.with_options(id=_id("caller")).exec(caller, tally_pid, "add", 3) == 3
            )  # workflow to workflow: the reply is a @roost.reply signal to this run
            naked = await process.with_options(id=_id("caller")).exec(caller, tally_pid, "sub", 1)
            assert naked["kind"] == "Conflict" and naked["details"]["reason"] == "tally only adds"
            # to a plain process, which replies through the node to the host
            assert await process.with_options(id=_id("caller")).exec(caller, plain, "q", 7) == {
                "got": 7,
                "from": "tshop:replies",
            }
            silent = await process.with_options(id=_id("caller")).exec(
                caller, tally_pid, "ignored", None
            )
            assert silent["kind"] == "Timeout"  # the call's durable timer
            await process.send(tally_pid, "stop")
            assert (await process.events().receive()).value == 3
        assert node.describe(tally_pid.id)["status"] == "completed"


RING = {"k1": b"0123456789abcdef0123456789abcdef"}


@app.policy("orders.write")
def orders_write(actor, action, resource):
    return True


@asynccontextmanager
async def keyed_node(server):
    factory = roost.temporal.temporal_host(server, max_cached_workflows=0)
    async with roost.open_node(
        app, name=_node_name(), workflow_host=factory, signing_keys=RING, signing_key="k1"
    ) as node:
        yield node


async def test_a_forged_envelope_fails_the_run_before_its_body(temporal_server):
    # A hand-written client starts a run whose memo claims an actor it has no key for.
    workflow_id = _id("forged")
    forged = {
        "actor": {"id": "user:root", "meta": {}},
        "policies": ["orders.write"],
        "addressee": workflow_id,
        "key_id": "k1",
        "sig": "00" * 32,
    }

    async def start(client):
        await client.start_workflow(
            "tshop:waiter",
            id=workflow_id,
            task_queue="tshop",
            memo={"roost.context": {"roost.security": forged}},
        )

    async with keyed_node(temporal_server) as node:
        await with_client(temporal_server, start)
        pid = roost.Pid.parse(f"{{tshop:workflows|{workflow_id}}}")
        process.monitor(pid)
        with trio.fail_after(30):
            event = await process.events().receive()
        assert event.error.kind is roost.ErrorKind.PERMISSION_DENIED
        assert "bad signature" in event.error.message
        assert node.describe(workflow_id)["status"] == "failed"


async def test_a_secured_run_drops_an_unsigned_signal_and_takes_a_signed_one(temporal_server):
    spawner = (
        process.with_options(id=_id("guarded"))
        .with_actor(roost.security.Actor("user:1"))
        .with_scope(roost.security.Scope("orders.write"))
    )
    async with keyed_node(temporal_server):
        pid = await spawner.spawn_monitored(waiter)

        async def unsigned(client):
            await client.get_workflow_handle(pid.id).signal("go", {"from": "outside"})

        await with_client(temporal_server, unsigned, roost_payloads=False)
        await process.send(pid, "go", {"from": "inside"})  # ticketed by the node's ring
        with trio.fail_after(30):
            event = await process.events().receive()
    assert event.value["payload"] == {"from": "inside"}  # the unsigned one never reached it


async def test_a_secured_run_rejects_an_update_without_a_ticket(temporal_server):
    spawner = (
        process.with_options(id=_id("guarded-echo"))
        .with_actor(roost.security.Actor("user:1"))
        .with_scope(roost.security.Scope("orders.write"))
    )
    async with keyed_node(temporal_server) as node:
        pid = await spawner.spawn_monitored(echo_server)

        async def update(client):
            handle = client.get_workflow_handle(pid.id)
            try:
                await handle.execute_update("ping", args=[1, node.pid])
            except Exception as exc:
                return exc
            return None

        rejected = await with_client(temporal_server, update)
        assert rejected is not None and "does not verify" not in str(rejected)
        assert "takes only signed messages" in str(rejected.cause)
        events = await history_events(temporal_server, pid.id)
        assert updates_named(events, "ping") == 0  # its monitor's @roost.watch is the only one
        assert updates_named(events, "@roost.watch") == 1
        await process.send(pid, "stop")
        with trio.fail_after(30):
            assert (await process.events().receive()).value == "stopped"


async def scheduled(server, workflow_id, activity_type):
    """The decoded arguments and task queue of each ``activity_type`` the run scheduled."""

    async def fetch(client):
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        converter = client.data_converter.payload_converter
        found = []
        for e in history.events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                attrs = e.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == activity_type:
                    args = converter.from_payloads(list(attrs.input.payloads))
                    found.append((attrs.task_queue.name, args))
        return found

    return await with_client(server, fetch)


def signal_names(events):
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in events
        if e.HasField("workflow_execution_signaled_event_attributes")
    ]


@app.workflow
async def fail_on_go():
    await process.listen("go").receive()
    raise roost.Error("gave up", kind=roost.ErrorKind.CONFLICT)


@app.process
async def watch_and_forget(target, report_to):
    process.monitor(target)
    process.unmonitor(target)
    process.send(report_to, "unwatched")
    await process.inbox().receive()  # alive until the test ends


@pytest.fixture
def outcome_waits(monkeypatch):
    """The workflow PIDs the node's host waited on for an outcome (a wait per workflow)."""
    waited = []
    original = roost.temporal._host.TemporalHost._outcome

    async def recorded(self, pid, *, give_up_after):
        waited.append(pid)
        return await original(self, pid, give_up_after=give_up_after)

    monkeypatch.setattr(roost.temporal._host.TemporalHost, "_outcome", recorded)
    return waited


async def test_monitors_and_links_get_the_close_pushed_by_the_workflow(
    temporal_server, outcome_waits
):
    async with temporal_node(temporal_server, cache=100) as node:
        inbox = process.inbox()
        gate = await process.with_options(id=_id("push")).spawn_monitored(fail_on_go)
        linked = await process.spawn(linked_to, gate, node.pid)
        await process.spawn(watch_and_forget, gate, node.pid)
        ended = await process.with_options(id=_id("push-term")).spawn_monitored(cancellable)
        await process.spawn(linked_to, ended, node.pid)
        upgraded = await process.with_options(id=_id("push-can")).spawn_monitored(upgrader, 0)
        with trio.fail_after(30):
            reported = sorted([(await inbox.receive()).topic for _ in range(3)])
            assert reported == ["linked", "linked", "unwatched"]
            await process.send(gate, "go")
            process.terminate(ended)  # no code of its own runs: the terminate pushes
            for n in range(4):
                await process.send(upgraded, "x", n)
            await process.send(upgraded, "go")  # continue-as-new hands the watch on
            exits = {}
            for _ in range(3):
                event = await process.events().receive()
                exits[event.pid] = event
            downs = {}
            for _ in range(2):
                event = (await inbox.receive()).payload
                downs[event.pid] = event
        assert exits[gate].error.kind is roost.ErrorKind.CONFLICT
        assert exits[ended].error.kind is roost.ErrorKind.CANCELED
        assert exits[upgraded].value == [1, [0, 1, 2, 3]]
        assert downs[gate].error.kind is roost.ErrorKind.CONFLICT
        assert downs[ended].error.kind is roost.ErrorKind.CANCELED
        assert outcome_waits == []  # no wait on any watched workflow's result
        assert node._node.require_workflows()._watches.count() == 0
    events = await history_events(temporal_server, gate.id)
    names = signal_names(events)
    assert names.count("@roost.unwatch") == 1
    assert updates_named(events, "@roost.watch") == 3
    [(queue, args)] = await scheduled(temporal_server, gate.id, "@roost.exit")
    assert queue == f"roost-node-{node.name}"
    assert args[0] == gate and args[3:] == [None, exits[gate].error, True]
    watchers = {str(pid): kinds for pid, kinds in args[2]}
    assert watchers == {str(linked): ["link"], str(node.pid): ["monitor"]}  # not the unwatched


async def test_a_dead_watcher_node_delays_the_close_only_by_the_delivery_bound(
    temporal_server, monkeypatch
):
    monkeypatch.setattr(roost.temporal._workflow, "EXIT_DELIVERY_TIMEOUT", dt.timedelta(seconds=1))
    async with temporal_node(temporal_server):
        pid = await process.with_options(id=_id("orphaned")).spawn_monitored(waiter)
        await process.send(pid, "warm-up")  # after the watch: the watch is recorded
    async with temporal_node(temporal_server):  # the first node is gone
        process.monitor(pid)
        await process.send(pid, "go", "late")
        with trio.fail_after(30):
            event = await process.events().receive()
            assert event.value["payload"] == "late"

            async def result(client):
                return await client.get_workflow_handle(pid.id).result()

            assert (await with_client(temporal_server, result))["payload"] == "late"
    events = await history_events(temporal_server, pid.id)
    assert sum(e.HasField("activity_task_timed_out_event_attributes") for e in events) == 1


def updates_named(events, name):
    return sum(
        e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == name
        for e in events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    )


def _samples(text):
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_the_node_metrics_count_what_its_worker_ran_under_roost_names(temporal_server):
    async with temporal_node(temporal_server) as node:
        order_id = _id("metered")
        with trio.fail_after(30):
            await process.with_options(id=order_id).exec(order, order_id, "pen", 5)
            with pytest.raises(roost.Error):
                await process.with_options(id=_id("metered-fail")).exec(failing, "Conflict")
        samples = _samples(metrics_text(new_registry(node)))

    def value(name, **labels):
        return samples.get((name, tuple(sorted(labels.items()))), 0)

    assert value("roost_workflows_started_total", type="tshop:order") >= 1
    assert value("roost_workflows_completed_total", type="tshop:order") >= 1
    assert value("roost_workflows_closed_total", type="tshop:failing", status="failed") >= 1
    assert value("roost_workflows_failed_total", type="tshop:failing") >= 1
    assert value("roost_activity_attempts_total", entry="tshop:charge") >= 2  # one was retried
    assert value("roost_activity_failures_total", entry="tshop:charge") >= 1
    assert value("roost_activity_duration_seconds_count", entry="tshop:charge") >= 2
    assert value("roost_activity_attempts_total", entry="tshop:ship") >= 1


async def test_the_console_links_a_hosted_run_to_temporals_ui(temporal_server):
    workflow_id = _id("linked/ui run")
    async with open_console_node(
        app, name=_node_name(), temporal=temporal_server, temporal_ui="http://127.0.0.1:8233/"
    ) as c:
        with trio.fail_after(30):
            assert await process.with_options(id=workflow_id).exec(doubler, 4) == 8
        run_id = c.node.describe(workflow_id)["run_id"]
        async with c.client() as http:
            page = await http.get(workflow_url(workflow_id))
    assert page.status_code == 200
    quoted = workflow_id.replace("/", "%2F").replace(" ", "%20")
    expected = f"http://127.0.0.1:8233/namespaces/default/workflows/{quoted}/{run_id}/history"
    assert f'id="wf-temporal" href="{expected}"' in page.text


async def test_a_temporal_ui_that_is_no_http_address_is_refused():
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(app, temporal="127.0.0.1:1", temporal_ui="8233"):
            pass
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "temporal_ui must be the http(s) address" in caught.value.message
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(app, temporal_ui="http://127.0.0.1:8233"):
            pass
    assert "give temporal=" in caught.value.message


@app.workflow
async def patient_caller(dest):
    return await process.call(dest, "q", 1, timeout="60s")


@app.process
async def slow_callee(report_to):
    request = await process.inbox().receive()
    process.send(report_to, "request", request.sender)
    await process.listen("answer now").receive()
    process.send(request.sender, "ok", "genuine")


async def _forge_then_answer(server, node, forged_senders):
    """Start a call to a callee that waits; forge replies to it; then let it answer."""
    inbox = process.inbox()
    callee = await process.spawn(slow_callee, node.pid)
    workflow_id = _id("forged-reply")
    await process.with_options(id=workflow_id).spawn_monitored(patient_caller, callee)
    with trio.fail_after(30):
        reply_to = (await inbox.receive()).payload
        run_id, seq, _ = reply_to.id.split(".", 2)

        async def forge(client):
            handle = client.get_workflow_handle(workflow_id)
            for sender in forged_senders(callee):
                await handle.signal("@roost.reply", args=[run_id, int(seq), "ok", "forged", sender])

        await with_client(server, forge)  # recorded before the genuine reply
        await process.send(callee, "answer now")
        return (await process.events().receive()).value, workflow_id


async def test_a_forged_reply_signal_is_not_taken_as_the_answer(temporal_server):
    async with temporal_node(temporal_server) as node:
        value, workflow_id = await _forge_then_answer(
            temporal_server,
            node,
            lambda callee: [node.pid, None],  # not the callee
        )
    assert value == "genuine"
    names = signal_names(await history_events(temporal_server, workflow_id))
    assert names.count("@roost.reply") == 3  # the forged ones are recorded, never taken


async def test_a_reply_without_a_ticket_is_refused_under_a_key_ring(temporal_server):
    async with keyed_node(temporal_server) as node:
        value, _ = await _forge_then_answer(
            temporal_server,
            node,
            lambda callee: [callee],  # the right sender, no ticket
        )
    assert value == "genuine"


async def test_the_admin_api_asks_the_temporal_host_without_blocking_the_nodes_loop(
    temporal_server, monkeypatch
):
    token = trio.lowlevel.current_trio_token()
    asked = trio.Event()
    held = {}
    original = roost.temporal._client.describe

    async def held_describe(client, workflow_id):  # on the host's asyncio thread
        held["go"] = (asyncio.get_running_loop(), go := asyncio.Event())
        token.run_sync_soon(asked.set)
        await go.wait()  # until a trio task of the node's loop lets it go
        return await original(client, workflow_id)

    async def release():
        await asked.wait()  # runs only while the node's loop is not blocked
        loop, go = held["go"]
        loop.call_soon_threadsafe(go.set)

    workflow_id = _id("off-loop")
    async with open_console_node(app, name=_node_name(), temporal=temporal_server) as c:
        with trio.fail_after(30):
            assert await process.with_options(id=workflow_id).exec(doubler, 2) == 4
        monkeypatch.setattr(roost.temporal._client, "describe", held_describe)
        async with c.client() as http, trio.open_nursery() as nursery:
            nursery.start_soon(release)
            with trio.fail_after(20):
                response = await http.get(f"/api/workflows/{workflow_id}")
    assert response.status_code == 200
    assert response.json()["status"] == "completed"


async def test_a_close_that_runs_no_workflow_code_is_found_by_the_nodes_sweep(
    temporal_server, monkeypatch
):
    monkeypatch.setattr(roost.temporal._host, "SWEEP_INTERVAL", 0.2)
    async with temporal_node(temporal_server, cache=100):
        pid = await process.with_options(id=_id("ui-terminated")).spawn_monitored(waiter)
        await process.send(pid, "warm-up")  # after the watch: the watch is recorded

        async def terminate_as_temporals_ui(client):
            await client.get_workflow_handle(pid.id).terminate(reason="from the UI")

        await with_client(temporal_server, terminate_as_temporals_ui)
        with trio.fail_after(30):
            event = await process.events().receive()
    assert event.pid == pid and event.error.kind is roost.ErrorKind.CANCELED


@app.process
async def linked_quietly(target, report_to):
    process.link(target)  # no trap_links: a failure of the workflow kills this process
    process.send(report_to, "linked")
    await process.inbox().receive()


async def test_a_linked_process_that_does_not_trap_is_killed_by_the_pushed_failure(
    temporal_server, outcome_waits
):
    async with temporal_node(temporal_server, cache=100):
        gate = await process.with_options(id=_id("kill-link")).spawn(fail_on_go)
        inbox = process.inbox()
        linked = await process.spawn_monitored(linked_quietly, gate, process.pid())
        with trio.fail_after(30):
            assert (await inbox.receive()).topic == "linked"
            await process.send(gate, "go")
            event = await process.events().receive()
    assert event.pid == linked and event.error.kind is roost.ErrorKind.CONFLICT
    assert event.error.details["reason"] == "link"
    assert event.error.details["linked_pid"] == str(gate)
    assert outcome_waits == []
