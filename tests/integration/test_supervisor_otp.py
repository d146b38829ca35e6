"""Supervisor cases ported in spirit from OTP's supervisor_SUITE, on mock time.

Shutdown of processes that cannot hear a Cancel, dynamic (simple_one_for_one) children
restarted by instance, and the synchronous start of supervisor children.
"""

import logging

import pytest
import trio
import trio.testing

import roost
from roost import channel, process, supervisor

app = roost.App("otp")
trace: list = []
gates: dict[str, trio.Event] = {}


async def serve(name):
    """Listen for the Cancel; crash on a "crash" message."""
    events, inbox = process.events(), process.inbox()
    while True:
        got = await channel.select(events, inbox)
        if got.channel is events:
            if isinstance(got.value, roost.Cancel):
                trace.append(("stop", name))
                return "stopped"
            continue
        if got.value.payload == "crash":
            raise ValueError(f"{name} crashed")


@app.process
async def worker(name):
    """Records its start, then serves."""
    trace.append(("start", name))
    return await serve(name)


@app.process
async def deaf(name):
    """Never opens process.events(), so it cannot hear a Cancel."""
    trace.append(("start", name))
    try:
        await process.inbox().receive()
    finally:
        trace.append(("killed", name))


@app.process
async def tidy(name, cleanup):
    """Listens; on its Cancel it spends ``cleanup`` seconds tidying up, then returns."""
    trace.append(("start", name))
    event = await process.events().receive()
    assert isinstance(event, roost.Cancel)
    await roost.sleep(cleanup)
    trace.append(("tidied", name, trio.current_time()))
    return "tidied"


@app.process
async def opens_gate(name):
    """A worker that first tells the test it has started."""
    gates[name].set()
    trace.append(("start", name))
    return await serve(name)


@app.process
async def probe(name, sup, sibling):
    """Records, as it starts, how many children of its sibling supervisor are up."""
    [info] = [i for i in supervisor.which_children(sup) if i.id == sibling]
    try:
        up = supervisor.count_children(info.pid)["active"] if info.pid is not None else None
    except roost.Error as exc:
        up = exc.kind.value
    trace.append(("probe", name, up))
    return await serve(name)


@app.supervisor
def failing_start():
    raise ValueError("cannot compute my children")


def child(cid, entry, *args, **opts):
    return supervisor.child(cid, f"otp:{entry}", *args, **opts)


app.supervisor(
    "deaf_all",
    children=[child("deaf", "deaf", "deaf"), child("w", "worker", "w")],
    strategy="one_for_all",
    intensity=5,
)
app.supervisor(
    "deaf_rest",
    children=[child("w", "worker", "w"), child("deaf", "deaf", "deaf")],
    strategy="rest_for_one",
    intensity=5,
)
app.supervisor(
    "tidy_all",
    children=[child("tidy", "tidy", "tidy", 2), child("w", "worker", "w")],
    strategy="one_for_all",
    intensity=5,
)
app.supervisor("deaf_forever", children=[child("deaf", "deaf", "deaf", shutdown="infinity")])
app.dynamic_supervisor("pool", template=child("w", "worker", restart="transient"), intensity=10)
app.dynamic_supervisor("tight_pool", template=child("w", "worker"), intensity=2, period="5s")
app.dynamic_supervisor(
    "service_pool",
    template=child("w", "worker", backoff=supervisor.Backoff(initial_delay="1s", jitter=0.0)),
)
app.dynamic_supervisor("sup_pool", template=child("mid", "mid", type="supervisor"))
app.supervisor("mid", children=[child("m1", "worker", "m1"), child("m2", "worker", "m2")])
app.supervisor(
    "top",
    children=[
        child("after", "probe", "after", "top", "mid", requires=["mid"]),
        child("mid", "mid", type="supervisor"),
    ],
)
app.supervisor("frail", children=[child("x", "worker", "x")], intensity=0)
app.supervisor("keeper", children=[child("frail", "frail", type="supervisor")], intensity=5)
app.supervisor(
    "wide",
    children=[
        child("gate", "opens_gate", "gate"),
        *(child(f"w{i}", "worker", f"w{i}") for i in range(40)),
    ],
)
app.supervisor(
    "tall", children=[child("wide", "wide", type="supervisor"), child("z", "worker", "z")]
)
app.supervisor(
    "fails_in_start",
    children=[child("good", "worker", "good"), child("bad", "failing_start", type="supervisor")],
)


def pids(sup):
    return {info.id: info.pid for info in supervisor.which_children(sup)}


async def settle():
    await trio.testing.wait_all_tasks_blocked()


@pytest.fixture(autouse=True)
def clear_trace():
    trace.clear()
    gates.clear()


# -- 1. a shutdown stops at once what cannot hear it ------------------------------------


@pytest.mark.parametrize(
    ("sup_entry", "restarted"),
    [
        ("otp:deaf_all", [("start", "deaf"), ("start", "w")]),
        ("otp:deaf_rest", [("start", "w"), ("start", "deaf")]),
    ],
)
async def test_a_restart_stops_a_deaf_sibling_at_once(autojump_clock, sup_entry, restarted):
    async with roost.open_node(app):
        sup = await process.spawn(sup_entry)
        await settle()
        before = pids(sup)
        process.monitor(before["deaf"])
        trace.clear()
        start = trio.current_time()
        process.send(before["w"], "cmd", "crash")
        event = await process.events().receive()
        await settle()
        assert trio.current_time() - start == 0  # not its 5 s shutdown timeout
        assert event.pid == before["deaf"]
        assert event.error.kind is roost.ErrorKind.CANCELED
        assert event.error.details["reason"] == "shutdown"
        assert trace == [("killed", "deaf"), *restarted]
        after = pids(sup)
        assert None not in after.values() and after["deaf"] != before["deaf"]


async def test_a_listening_child_gets_its_cancel_and_the_grace_period(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("otp:tidy_all")
        await settle()
        before = pids(sup)
        trace.clear()
        start = trio.current_time()
        process.send(before["w"], "cmd", "crash")
        await roost.sleep(10)
        assert trace == [("tidied", "tidy", start + 2), ("start", "tidy"), ("start", "w")]
        assert None not in pids(sup).values()


async def test_infinite_shutdown_of_a_deaf_child_does_not_hang(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn_monitored("otp:deaf_forever")
        await settle()
        with trio.fail_after(60):
            process.cancel(sup)
            event = await process.events().receive()
        assert event.pid == sup and event.value == "shutdown"
        assert trace == [("start", "deaf"), ("killed", "deaf")]


async def test_node_shutdown_stops_deaf_processes_at_once(autojump_clock):
    async with roost.open_node(app, shutdown_grace="10s"):
        await process.spawn("otp:deaf", "d")
        await process.spawn("otp:tidy", "t", 2)
        await process.spawn("otp:deaf_all")
        await settle()
        trace.clear()
        start = trio.current_time()
    # Only the listener's 2 s of tidying: neither the 10 s grace nor a 5 s timeout.
    assert trio.current_time() - start == 2
    assert set(trace) == {
        ("killed", "d"),
        ("tidied", "t", start + 2),
        ("stop", "w"),
        ("killed", "deaf"),
    }
    assert trace.index(("stop", "w")) < trace.index(("killed", "deaf"))  # reverse order


async def test_a_shutdown_right_after_a_spawn_waits_to_see_if_it_listens(autojump_clock):
    async with roost.open_node(app, shutdown_grace="10s"):
        await process.spawn("otp:tidy", "t", 2)  # not run yet: it has not opened events
        await process.spawn("otp:deaf", "d")
        start = trio.current_time()
    assert trio.current_time() - start == 2
    assert trace == [("start", "t"), ("start", "d"), ("killed", "d"), ("tidied", "t", start + 2)]


# -- 2. dynamic children are restarted by instance --------------------------------------


async def test_dynamic_children_restart_each_with_its_own_args(autojump_clock):
    async with roost.open_node(app):
        pool = await process.spawn("otp:pool")
        live = {name: await supervisor.start_child(pool, name) for name in "abc"}
        await settle()
        for name in ["b", "c", "a", "c", "b"]:
            process.send(live[name], "cmd", "crash")
            await settle()
            now = {info.pid for info in supervisor.which_children(pool)}
            assert None not in now and len(now) == 3
            [new] = now - set(live.values())
            live[name] = new
            assert trace[-1] == ("start", name)  # restarted with its own argument
        assert supervisor.count_children(pool) == {
            "specs": 3,
            "active": 3,
            "supervisors": 0,
            "workers": 3,
        }
        supervisor.terminate_child(pool, live["c"])  # by the restarted child's pid
        await settle()
        assert trace[-1] == ("stop", "c")
        assert {i.pid for i in supervisor.which_children(pool)} == {live["a"], live["b"]}


async def test_dynamic_restarts_count_toward_intensity_per_restart(autojump_clock):
    async with roost.open_node(app):
        pool = await process.spawn_monitored("otp:tight_pool")
        live = [await supervisor.start_child(pool, name) for name in "abc"]
        await settle()
        process.send(live[1], "cmd", "crash")
        process.send(live[2], "cmd", "crash")
        await settle()
        assert trace.count(("start", "b")) == trace.count(("start", "c")) == 2
        assert supervisor.count_children(pool)["active"] == 3
        trace.clear()
        process.send(live[0], "cmd", "crash")  # the third restart within 5 s
        event = await process.events().receive()
        assert event.pid == pool and event.error.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert sorted(trace) == [("stop", "b"), ("stop", "c")]


async def test_dynamic_service_children_restart_after_their_backoff(autojump_clock):
    async with roost.open_node(app):
        pool = await process.spawn("otp:service_pool")
        first = await supervisor.start_child(pool, "a")
        second = await supervisor.start_child(pool, "b")
        await settle()
        process.send(second, "cmd", "crash")
        await roost.sleep(0.5)
        assert {i.pid for i in supervisor.which_children(pool)} == {first, None}
        await roost.sleep(1)
        assert trace == [("start", "a"), ("start", "b"), ("start", "b")]
        assert None not in {i.pid for i in supervisor.which_children(pool)}


async def test_start_child_of_a_supervisor_template_returns_with_its_subtree(autojump_clock):
    async with roost.open_node(app):
        pool = await process.spawn("otp:sup_pool")
        mid = await supervisor.start_child(pool)
        assert supervisor.count_children(mid)["active"] == 2
        assert [i.pid for i in supervisor.which_children(pool)] == [mid]


# -- 3. a supervisor child counts as started once its whole subtree is -------------------


async def test_spawn_returns_with_the_whole_tree_started_depth_first(autojump_clock):
    async with roost.open_node(app):
        top = await process.with_options().with_name("top").spawn("otp:top")
        kids = pids(top)  # no settling: spawn returned, so everything is up
        assert list(kids) == ["mid", "after"] and None not in kids.values()
        assert supervisor.count_children(kids["mid"])["active"] == 2
        await settle()
        # "after" requires "mid": when it started, both of mid's children were up.
        assert ("probe", "after", 2) in trace


async def test_a_restarted_child_supervisor_is_listed_once_it_is_up(autojump_clock):
    async with roost.open_node(app):
        keeper = await process.spawn("otp:keeper")
        old = pids(keeper)["frail"]
        process.send(pids(old)["x"], "cmd", "crash")  # frail gives up; keeper restarts it
        for _ in range(100):
            new = pids(keeper)["frail"]
            if new not in (None, old):
                break
            await trio.lowlevel.checkpoint()
        else:
            pytest.fail("the child supervisor was not restarted")
        # The moment its parent lists it, it answers, with its children up.
        assert supervisor.count_children(new)["active"] == 1


async def test_a_child_supervisor_failing_in_its_start_fails_the_parent_start(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn_monitored("otp:fails_in_start")
        event = await process.events().receive()
        assert event.pid == sup
        assert "cannot compute my children" in event.error.message
        assert trace == [("start", "good"), ("stop", "good")]


async def test_node_shutdown_during_a_tree_start_stops_it_in_order(autojump_clock, caplog):
    caplog.set_level(logging.WARNING)
    gates["gate"] = trio.Event()
    async with roost.open_node(app), trio.open_nursery() as nursery:
        nursery.start_soon(process.spawn, "otp:tall")
        await gates["gate"].wait()
        nursery.cancel_scope.cancel()
        # Leaving the block shuts the node down while "wide" is still starting.
    starts = [t[1] for t in trace if t[0] == "start"]
    stops = [t[1] for t in trace if t[0] == "stop"]
    assert "w39" not in starts and "z" not in starts  # the start was cut short
    assert stops == starts[::-1]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
