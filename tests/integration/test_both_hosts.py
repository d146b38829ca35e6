"""One app, two workflow hosts: each scenario runs on the embedded host and on Temporal.

The same workflow code, started and watched through the same public calls, must give the
same outcome on both hosts (API.md "Workflow hosts": every public behaviour is the same
except where docs/temporal.md names a difference). ``--workflow-host local|temporal|both``
picks the hosts (default: both when the ``roost[temporal]`` extra is installed).

The embedded host keeps one run in memory and Temporal none, so activations replay the
workflows' histories from the start. On the embedded host the clock is trio's autojump
clock; on Temporal it is real (the dev server has no time skipping), so timers here are
short. This module and test_temporal_host.py are the Temporal subset docs/temporal.md
names: the rest of the integration suite drives hour-long timers and the time-skipping
test node.
"""

import itertools
import os
import uuid
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import roost
from roost import channel, funcs, process, workflow

pytestmark = pytest.mark.timeout(120)

app = roost.App("both")
ATTEMPTS: dict[str, int] = {}
SEEN: dict[str, list] = {}


def _hosts(config):
    chosen = config.getoption("workflow_host")
    if chosen == "both":
        try:
            import temporalio  # noqa: F401, PLC0415 - only whether the extra is installed
        except ImportError:
            return ["local"]
        return ["local", "temporal"]
    return [chosen]


def pytest_generate_tests(metafunc):
    if "host" in metafunc.fixturenames:
        metafunc.parametrize("host", _hosts(metafunc.config), indirect=True)


@pytest.fixture
def host(request):
    return request.param


@pytest.fixture
def clock(host):
    """trio's autojump clock on the embedded host; the real clock on Temporal."""
    return trio.testing.MockClock(autojump_threshold=0) if host == "local" else None


_names = itertools.count()


@pytest.fixture
def open_host_node(host, request):
    """``open_host_node(**options)``: a node of ``app`` on this test's host, cache off."""
    if host == "temporal":
        server = request.getfixturevalue("temporal_server")
        from roost.temporal import temporal_host  # noqa: PLC0415 - the extra is installed

        @asynccontextmanager
        async def opened(**options):
            factory = temporal_host(server, max_cached_workflows=0)
            name = f"both{os.getpid()}-{next(_names)}"
            async with roost.open_node(app, name=name, workflow_host=factory, **options) as node:
                yield node

        return opened

    @asynccontextmanager
    async def local(**options):
        async with roost.open_node(app, workflow_cache=1, **options) as node:
            yield node

    return local


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory):
    """A dev server for this module's Temporal runs (the fixture of temporal_server.py)."""
    from temporal_server import DevServer  # noqa: PLC0415 - needs the temporal extra

    server = DevServer(tmp_path_factory.mktemp("temporal-both") / "server.log")
    try:
        server.start()
        yield server.target
    finally:
        server.stop()


def _id(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# -- entries ----------------------------------------------------------------------------------


@app.activity
def reserve(item):
    return f"reserved {item}"


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="50ms", maximum_attempts=3))
async def charge(order_id, amount):
    ATTEMPTS[order_id] = ATTEMPTS.get(order_id, 0) + 1
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


@app.activity
def remember(key, values):
    SEEN.setdefault(key, []).append(values)


@app.workflow
async def chance_and_time():
    key = workflow.info().workflow_id
    values = [str(roost.uuid4()), roost.random().random(), roost.now().isoformat()]
    await funcs.call(remember, key, values)  # what the first activation saw
    await roost.sleep(0.2)  # later activations replay the first one
    return values


@app.workflow
async def napper(seconds):
    before = roost.now()
    await roost.sleep(seconds)
    return (roost.now() - before).total_seconds()


@app.workflow
async def approval(wait_for):
    got = await channel.select(
        process.listen("approve", message=True).case_receive(),
        roost.after(wait_for).case_receive(),
    )
    if got.value is None or not isinstance(got.value, roost.Message):
        return "timed out"
    return {"approved_by": got.value.payload, "sender": got.value.sender}


@app.workflow
async def echo_server():
    requests = process.inbox()
    while True:
        request = await requests.receive()
        if request.topic == "stop":
            return "stopped"
        process.send(request.sender, "ok", {"echo": request.payload})


@app.workflow
async def cancellable():
    chosen = await channel.select(
        process.events().case_receive(), roost.after("30s").case_receive()
    )
    event = chosen.value
    return f"stopped: {event.reason}" if isinstance(event, roost.Cancel) else "timed out"


@app.workflow
async def failing(kind):
    raise roost.Error("it went wrong", kind=roost.ErrorKind(kind))


@app.workflow
async def doubler(x):
    return 2 * x


@app.workflow
async def parent(x):
    return await workflow.exec(doubler, x)


@app.workflow
async def upgrader(run):
    if run == 0:
        await process.listen("go").receive()  # the "x" messages stay unread in this run
        await process.upgrade(upgrader, 1)
    inbox = process.inbox()
    return [run, [(await inbox.receive()).payload for _ in range(4)]]


@app.workflow
async def greeter():
    message = await process.listen("hello", message=True).receive()
    workflow.attrs(memo={"greeted": message.payload})
    return [message.payload, message.sender]


@app.workflow
async def versioned():
    return workflow.version("step", -1, 2)


@app.workflow
async def second_try():
    attempt = workflow.info().attempt
    if attempt == 1:
        raise roost.Error("first try fails", kind=roost.ErrorKind.UNAVAILABLE)
    return attempt


@app.workflow
async def waiter():
    return (await process.listen("go", message=True).receive()).payload


# -- scenarios --------------------------------------------------------------------------------


async def test_activities_run_in_order_and_one_is_retried_by_its_policy(clock, open_host_node):
    order_id = _id("order")
    async with open_host_node() as node:
        with trio.fail_after(60):
            result = await process.with_options(id=order_id).exec(order, order_id, "book", 12)
        described = node.describe(order_id)
    assert result == [
        "reserved book",
        {"charged": 12, "attempt": 2, "key": f"{order_id}/{described['run_id']}/2"},
        "shipped book",
    ]
    assert ATTEMPTS[order_id] == 2
    assert described["status"] == "completed" and described["result"] == result
    assert described["workflow_type"] == "both:order"


async def test_activity_errors_keep_their_kind_and_non_retryable_kinds_stop(clock, open_host_node):
    missing, bug = _id("missing"), _id("bug")
    async with open_host_node():
        with trio.fail_after(60):
            got = await process.exec(looking, missing, "missing")
            crashed = await process.exec(looking, bug, "bug")
    assert got == {"kind": "NotFound", "message": "no such order", "details": {"id": missing}}
    assert ATTEMPTS[missing] == 1
    assert crashed["kind"] == "Internal" and "bad arithmetic" in crashed["message"]
    assert ATTEMPTS[bug] == 3


async def test_uuid_random_and_now_replay_to_what_the_first_activation_saw(clock, open_host_node):
    workflow_id = _id("chance")
    async with open_host_node():
        with trio.fail_after(30):
            returned = await process.with_options(id=workflow_id).exec(chance_and_time)
    assert SEEN[workflow_id] == [returned]  # replayed twice after it: the same values


async def test_a_durable_timer_moves_workflow_time_on(clock, open_host_node):
    async with open_host_node():
        with trio.fail_after(30):
            slept = await process.exec(napper, 0.3)
    assert slept >= 0.3


async def test_select_takes_a_signal_or_times_out_and_a_call_is_answered(clock, open_host_node):
    async with open_host_node() as node:
        signalled = await process.with_options(id=_id("yes")).spawn_monitored(approval, "20s")
        ignored = await process.with_options(id=_id("no")).spawn_monitored(approval, 0.2)
        await process.send(signalled, "approve", "ann")
        with trio.fail_after(30):
            exits = {e.pid: e.value for e in [await process.events().receive() for _ in range(2)]}
            echo = await process.with_options(id=_id("echo")).spawn_monitored(echo_server)
            assert await process.call(echo, "ping", 7, timeout="20s") == {"echo": 7}
            await process.send(echo, "stop")
            assert (await process.events().receive()).value == "stopped"
    assert exits[signalled] == {"approved_by": "ann", "sender": node.pid}
    assert exits[ignored] == "timed out"


async def test_cancel_carries_its_reason_and_terminate_stops_at_once(clock, open_host_node):
    async with open_host_node() as node:
        polite = await process.with_options(id=_id("polite")).spawn_monitored(cancellable)
        blunt = await process.with_options(id=_id("blunt")).spawn_monitored(cancellable)
        await process.send(polite, "warm-up")  # its first activation has run once durable
        await process.send(blunt, "warm-up")
        process.cancel(polite, "not needed")
        process.terminate(blunt)
        with trio.fail_after(30):
            exits = {e.pid: e for e in [await process.events().receive() for _ in range(2)]}
        assert exits[polite].value == "stopped: not needed"
        assert node.describe(polite.id)["status"] == "canceled"
        assert exits[blunt].error.kind is roost.ErrorKind.CANCELED
        assert node.describe(blunt.id)["status"] == "terminated"
        with pytest.raises(roost.Error) as caught:
            process.cancel(blunt, "too late")
        assert caught.value.kind is roost.ErrorKind.NOT_FOUND


async def test_a_monitor_gets_the_exit_with_the_roost_error(clock, open_host_node):
    async with open_host_node() as node:
        pid = await process.with_options(id=_id("fail")).spawn_monitored(failing, "Conflict")
        with trio.fail_after(30):
            event = await process.events().receive()
        assert isinstance(event, roost.Exit) and event.pid == pid
        assert event.error.kind is roost.ErrorKind.CONFLICT
        assert event.error.message == "it went wrong"
        assert node.describe(pid.id)["status"] == "failed"


async def test_a_child_workflow_result_and_its_parent(clock, open_host_node):
    parent_id = _id("parent")
    async with open_host_node() as node:
        with trio.fail_after(60):
            assert await process.with_options(id=parent_id).exec(parent, 21) == 42
        child = node.describe(f"{parent_id}.1")
    assert child["workflow_type"] == "both:doubler" and child["result"] == 42
    assert child["parent"] == roost.Pid.parse(f"{{both:workflows|{parent_id}}}")


async def test_continue_as_new_carries_unread_messages_to_the_next_run(clock, open_host_node):
    async with open_host_node():
        start = process.with_options(id=_id("upgrade")).with_message("x", 1).with_message("x", 2)
        pid = await start.spawn_monitored(upgrader, 0)
        await process.send(pid, "x", 3)
        await process.send(pid, "go")
        await process.send(pid, "x", 4)
        with trio.fail_after(30):
            assert (await process.events().receive()).value == [1, [1, 2, 3, 4]]


async def test_start_messages_memo_and_version(clock, open_host_node):
    greeter_id = _id("greet")
    async with open_host_node() as node:
        with trio.fail_after(30):
            greeted = process.with_options(id=greeter_id).with_message("hello", "hi")
            assert await greeted.exec(greeter) == ["hi", node.pid]
            assert await process.exec(versioned) == 2  # a new run takes the newest version
        assert node.describe(greeter_id)["memo"] == {"greeted": "hi"}


async def test_a_workflow_retry_policy_runs_a_second_attempt(clock, open_host_node):
    retried = process.with_options(
        id=_id("retry"),
        retry_policy=roost.RetryPolicy(initial_interval="100ms", maximum_attempts=2),
    )
    async with open_host_node():
        with trio.fail_after(30):
            assert await retried.exec(second_try) == 2


async def test_an_explicit_id_of_a_running_workflow_is_the_same_workflow(clock, open_host_node):
    workflow_id = _id("single")
    async with open_host_node():
        first = await process.with_options(id=workflow_id).spawn_monitored(waiter)
        again = await process.with_options(id=workflow_id).spawn(waiter)
        assert again == first
        await process.send(first, "go", "once")
        with trio.fail_after(30):
            assert (await process.events().receive()).value == "once"


# -- triggers: queues and HTTP start workflows on the host -------------------------------------

app.queue("jobs", max_retries=2, backoff="100ms")


@app.workflow
async def job(payload):
    info = roost.queue_info()
    result = await funcs.call(noted, payload)
    process.send(payload["report_to"], "done", [result, info.queue, info.attempt])


@app.activity
async def noted(payload):
    await roost.state.set("jobs", payload["name"], "seen")  # an activity writes node state
    return payload["name"]


async def test_a_queue_delivery_runs_its_workflow_target_on_the_host(clock, open_host_node):
    async with open_host_node() as node:
        inbox = process.listen("done")
        await roost.enqueue("jobs", job, {"name": "j1", "report_to": node.pid})
        with trio.fail_after(30):
            assert (await inbox.receive()) == ["j1", "jobs", 1]
        assert await roost.state.get("jobs", "j1") == "seen"


@app.workflow
async def quote(request):
    return {"quoted": await funcs.call(reserve, request.path_params["item"])}


app.http("POST", "/quote/{item}", quote)


async def test_an_http_trigger_runs_its_workflow_and_answers_its_value(open_host_node):
    # The real clock on both hosts: the HTTP server times out idle connections, and the
    # autojump clock would jump while the request is in a thread it cannot see.
    import httpx  # noqa: PLC0415 - only this test speaks HTTP

    async with open_host_node(http="127.0.0.1:0") as node:
        url = f"{node.http_url}/quote/lamp"

        def post():
            return httpx.post(url, json={}, timeout=30)

        with trio.fail_after(60):
            answer = await trio.to_thread.run_sync(post)
    assert answer.status_code == 200
    assert answer.json() == {"quoted": "reserved lamp"}


@app.activity
def tenant_of(what):
    return [what, roost.ctx.get("tenant")]


@app.workflow
async def tenant_workflow():
    return [roost.ctx.get("tenant"), await funcs.call(tenant_of, "activity")]


async def test_context_values_reach_the_workflow_and_its_activities(clock, open_host_node):
    async with open_host_node():
        with trio.fail_after(30):
            got = await process.with_context({"tenant": "acme"}).exec(tenant_workflow)
    assert got == ["acme", ["activity", "acme"]]


# -- the security context (docs/security.md) ---------------------------------------------------

RING = {"k1": b"0123456789abcdef0123456789abcdef"}


@app.policy("orders.write")
def orders_write(actor, action, resource):
    return actor.id.startswith("user:")


@app.activity
def acting_as():
    return [roost.security.actor().id, list(roost.security.scope().policies)]


@app.workflow
async def secured():
    message = await process.listen("approve", message=True).receive()
    return [roost.security.actor().id, await funcs.call(acting_as), message.payload]


async def test_a_secured_workflow_and_its_activities_see_the_signed_context(clock, open_host_node):
    spawner = (
        process.with_options(id=_id("secured"))
        .with_actor(roost.security.Actor("user:42"))
        .with_scope(roost.security.Scope("orders.write"))
    )
    async with open_host_node(signing_keys=RING, signing_key="k1"):
        pid = await spawner.spawn_monitored(secured)
        await process.send(pid, "approve", "ann")  # a roost process's send carries a ticket
        with trio.fail_after(30):
            event = await process.events().receive()
    assert event.error is None
    assert event.value == ["user:42", ["user:42", ["orders.write"]], "ann"]


async def test_a_call_to_a_secured_workflow_is_answered(clock, open_host_node):
    spawner = (
        process.with_options(id=_id("secured-echo"))
        .with_actor(roost.security.Actor("user:7"))
        .with_scope(roost.security.Scope("orders.write"))
    )
    async with open_host_node(signing_keys=RING, signing_key="k1"):
        pid = await spawner.spawn_monitored(echo_server)
        with trio.fail_after(30):
            assert await process.call(pid, "ping", 1, timeout="20s") == {"echo": 1}
            await process.send(pid, "stop")
            assert (await process.events().receive()).value == "stopped"
