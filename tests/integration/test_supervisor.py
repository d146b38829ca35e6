"""Supervisors and services through the public API, on mock time."""

import itertools
import logging

import pytest
import trio
import trio.testing

import roost
from roost import channel, process, supervisor

app = roost.App("sv")
trace: list = []


@app.process
async def worker(name):
    """Records start/stop; obeys commands sent to its inbox."""
    trace.append(("start", name))
    events, inbox = process.events(), process.inbox()
    while True:
        got = await channel.select(events, inbox)
        if got.channel is events:
            if isinstance(got.value, roost.Cancel):
                trace.append(("stop", name))
                return "stopped"
            continue
        match got.value.payload:
            case "crash":
                raise ValueError(f"{name} crashed")
            case "exit":
                return "done"
            case "fatal":
                raise roost.Error("fatal", kind=roost.ErrorKind.INVALID, retryable=False)
            case "canceled":
                raise roost.Error("gave up", kind=roost.ErrorKind.CANCELED)


@app.process
async def stubborn(name):
    trace.append(("start", name))
    process.events()  # listens, so a shutdown gives it the grace period...
    try:
        await trio.sleep_forever()  # ... but it ignores the CANCEL
    finally:
        trace.append(("killed", name))


@app.process
async def crash_loop(name, after):
    trace.append(("start", name, trio.current_time()))
    await roost.sleep(after)
    raise ValueError("again")


@app.process
async def instantly_fails(name):
    raise ValueError(name)


def workers(*names, **opts):
    return [supervisor.child(n, "sv:worker", n, **opts) for n in names]


app.supervisor("one", children=workers("a", "b", "c"), strategy="one_for_one", intensity=3)
app.supervisor("all", children=workers("a", "b", "c"), strategy="one_for_all", intensity=3)
app.supervisor("rest", children=workers("a", "b", "c"), strategy="rest_for_one", intensity=3)
app.supervisor("fragile", children=workers("a", "b"), intensity=1, period="5s")
app.supervisor(
    "mixed",
    children=[
        supervisor.child("t", "sv:worker", "t", restart="transient"),
        supervisor.child("tmp", "sv:worker", "tmp", restart="temporary"),
        supervisor.child("p", "sv:worker", "p"),
    ],
    strategy="one_for_all",
    intensity=10,
)
app.supervisor("inner", children=[supervisor.child("w", "sv:instantly_fails", "w")], intensity=0)
app.supervisor(
    "outer",
    children=[supervisor.child("inner", "sv:inner", type="supervisor")],
    intensity=2,
    period="10s",
)
app.supervisor(
    "shutdowns",
    children=[
        supervisor.child("polite", "sv:worker", "polite"),
        supervisor.child("stub", "sv:stubborn", "stub", shutdown="3s"),
        supervisor.child("brutal", "sv:stubborn", "brutal", shutdown="brutal_kill"),
    ],
)
app.supervisor(
    "ordered",
    children=[
        supervisor.child("web", "sv:worker", "web", requires=["db", "cache"]),
        supervisor.child("cache", "sv:worker", "cache", requires=["db"]),
        supervisor.child("db", "sv:worker", "db"),
    ],
)
no_jitter = supervisor.Backoff(initial_delay="1s", max_delay="5s", factor=2.0, jitter=0.0)
app.supervisor(
    "services",
    children=[
        supervisor.child(
            "svc", "sv:crash_loop", "svc", 0, backoff=no_jitter, stable_threshold="10s"
        )
    ],
    intensity=0,  # services are governed by their backoff, not by intensity
)
app.supervisor(
    "flaky_then_stable",
    children=[
        supervisor.child(
            "svc", "sv:crash_loop", "svc", 12, backoff=no_jitter, stable_threshold="10s"
        )
    ],
)
app.supervisor(
    "limited",
    children=[
        supervisor.child(
            "svc",
            "sv:crash_loop",
            "svc",
            0,
            backoff=supervisor.Backoff(initial_delay="1s", jitter=0.0, max_attempts=2),
        )
    ],
)
app.supervisor(
    "terminal",
    children=[supervisor.child("svc", "sv:worker", "svc", backoff=no_jitter)],
)
app.dynamic_supervisor(
    "pool", template=supervisor.child("w", "sv:worker", restart="transient"), intensity=5
)


@app.supervisor(strategy="one_for_one")
def computed(n):
    return [supervisor.child(f"w{i}", "sv:worker", f"w{i}") for i in range(n)]


def pids(sup):
    return {info.id: info.pid for info in supervisor.which_children(sup)}


async def settle():
    await trio.testing.wait_all_tasks_blocked()


@pytest.fixture(autouse=True)
def clear_trace():
    trace.clear()


async def test_one_for_one_restarts_only_the_failed_child(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:one")
        await settle()
        before = pids(sup)
        process.send(before["b"], "cmd", "crash")
        await settle()
        after = pids(sup)
        assert after["a"] == before["a"] and after["c"] == before["c"]
        assert after["b"] != before["b"] and after["b"] is not None
        assert trace[-1] == ("start", "b")


async def test_one_for_all_stops_in_reverse_and_restarts_in_order(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:all")
        await settle()
        trace.clear()
        process.send(pids(sup)["a"], "cmd", "crash")
        await settle()
        assert trace == [
            ("stop", "c"),
            ("stop", "b"),
            ("start", "a"),
            ("start", "b"),
            ("start", "c"),
        ]


async def test_rest_for_one_restarts_the_failed_and_later_children(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:rest")
        await settle()
        before = pids(sup)
        trace.clear()
        process.send(before["b"], "cmd", "crash")
        await settle()
        assert trace == [("stop", "c"), ("start", "b"), ("start", "c")]
        assert pids(sup)["a"] == before["a"]


async def test_intensity_exceeded_stops_children_in_reverse_and_fails(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn_monitored("sv:fragile")
        await settle()
        process.send(pids(sup)["b"], "cmd", "crash")  # first restart: within intensity 1
        await settle()
        trace.clear()
        process.send(pids(sup)["b"], "cmd", "crash")  # second within 5 s: exceeded
        ev = await process.events().receive()
        assert ev.pid == sup
        assert ev.error.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert "max restart intensity" in ev.error.message
        assert trace == [("stop", "a")]  # b is already dead; a stopped


async def test_restarts_outside_the_period_do_not_accumulate(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn_monitored("sv:fragile")
        await settle()
        for _ in range(4):
            process.send(pids(sup)["a"], "cmd", "crash")
            await settle()
            await roost.sleep(6)  # older restarts fall out of the 5 s window
        assert supervisor.count_children(sup)["active"] == 2


async def test_nested_supervisors_escalate(autojump_clock):
    async with roost.open_node(app):
        outer = await process.spawn_monitored("sv:outer")
        ev = await process.events().receive()
        # inner (intensity 0) fails on its child's first crash; outer restarts inner twice
        # (intensity 2), then gives up itself, and we see its error.
        assert ev.pid == outer
        assert ev.error.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert "'sv:outer'" in ev.error.message


async def test_transient_and_temporary(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:mixed")
        await settle()
        first = pids(sup)
        process.send(first["t"], "cmd", "exit")  # transient, normal exit: stays down
        await settle()
        assert pids(sup)["t"] is None
        assert supervisor.count_children(sup) == {
            "specs": 3,
            "active": 2,
            "supervisors": 0,
            "workers": 3,
        }
        trace.clear()
        process.send(first["p"], "cmd", "crash")  # one_for_all: temporary is dropped
        await settle()
        after = pids(sup)
        assert "tmp" not in after
        assert after["t"] is not None  # restarted by the strategy, not by its own exit
        assert ("stop", "tmp") in trace
        process.send(after["t"], "cmd", "canceled")  # transient, Canceled kind: stays down
        await settle()
        assert pids(sup)["t"] is None


async def test_temporary_child_is_never_restarted(autojump_clock):
    app2 = roost.App("tmp")
    app2.process(worker)
    app2.supervisor("s", children=[supervisor.child("x", "tmp:worker", "x", restart="temporary")])
    async with roost.open_node(app2):
        sup = await process.spawn("tmp:s")
        await settle()
        process.send(pids(sup)["x"], "cmd", "crash")
        await settle()
        assert pids(sup) == {}


async def test_shutdown_specs_are_honoured(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn_monitored("sv:shutdowns")
        await settle()
        start = trio.current_time()
        trace.clear()
        process.cancel(sup, "bye")
        ev = await process.events().receive()
        assert ev.pid == sup and ev.error is None and ev.value == "shutdown"
        # reverse order: brutal (at once), stub (3 s then terminated), polite (cancel)
        assert trace == [("killed", "brutal"), ("killed", "stub"), ("stop", "polite")]
        assert trio.current_time() - start == pytest.approx(3)


async def test_requires_orders_start_and_stop(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:ordered")
        await settle()
        assert [i.id for i in supervisor.which_children(sup)] == ["db", "cache", "web"]
        process.cancel(sup)
        await settle()
        assert trace == [
            ("start", "db"),
            ("start", "cache"),
            ("start", "web"),
            ("stop", "web"),
            ("stop", "cache"),
            ("stop", "db"),
        ]


async def test_service_backoff_grows_and_caps(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn("sv:services")
        await roost.sleep(30)
        starts = [t for (_, _, t) in trace]
        gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
        assert gaps[:6] == [1, 2, 4, 5, 5, 5]  # 1 * 2^(n-1), capped at max_delay 5
        process.terminate(sup)


async def test_service_attempts_reset_after_stable_threshold(autojump_clock):
    async with roost.open_node(app):
        await process.spawn("sv:flaky_then_stable")
        await roost.sleep(60)
        starts = [t for (_, _, t) in trace]
        gaps = [round(b - a, 6) for a, b in itertools.pairwise(starts)]
        # Each run lasts 12 s > stable_threshold 10 s, so every delay is the initial 1 s.
        assert set(gaps) == {13}


async def test_service_max_attempts_and_terminal_errors(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="roost.supervisor")
    async with roost.open_node(app):
        sup = await process.spawn("sv:limited")
        await roost.sleep(30)
        assert len(trace) == 3  # first run + 2 attempts
        assert pids(sup) == {"svc": None}
        gave_up = [r for r in caplog.records if "giving up" in r.getMessage()]
        assert gave_up[0].child_id == "svc" and gave_up[0].supervisor == "sv:limited"
        term = await process.spawn("sv:terminal")
        await settle()
        process.send(pids(term)["svc"], "cmd", "fatal")  # retryable=False: terminal
        await roost.sleep(10)
        assert pids(term) == {"svc": None}
        restarts = [r for r in caplog.records if "restarting" in r.getMessage()]
        assert all(hasattr(r, "attempt") and hasattr(r, "reason") for r in restarts)


async def test_dynamic_supervisor(autojump_clock):
    async with roost.open_node(app):
        pool = await process.spawn_monitored("sv:pool")
        one = await supervisor.start_child(pool, "one")
        two = await supervisor.start_child(pool, "two")
        await settle()
        assert supervisor.count_children(pool)["active"] == 2
        assert {i.pid for i in supervisor.which_children(pool)} == {one, two}
        process.send(one, "cmd", "crash")  # transient: restarted with the same args
        await settle()
        assert trace.count(("start", "one")) == 2
        supervisor.terminate_child(pool, two)
        await settle()
        assert ("stop", "two") in trace
        assert len(supervisor.which_children(pool)) == 1
        with pytest.raises(roost.Error) as info:
            supervisor.terminate_child(pool, two)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        trace.clear()
        await supervisor.start_child(pool, "x")
        await supervisor.start_child(pool, "y")
        await settle()
        process.cancel(pool)
        ev = await process.events().receive()
        assert ev.pid == pool and ev.value == "shutdown"
        assert {t for t in trace if t[0] == "stop"} == {
            ("stop", "one"),
            ("stop", "x"),
            ("stop", "y"),
        }
        with pytest.raises(roost.Error) as info:
            await supervisor.start_child(await process.spawn("sv:one"), "z")
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_decorated_supervisor_computes_children(autojump_clock):
    async with roost.open_node(app):
        sup = await process.spawn(computed, 3)
        await settle()
        assert [i.id for i in supervisor.which_children(sup)] == ["w0", "w1", "w2"]


async def test_root_supervisor_failure_stops_the_node(autojump_clock):
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(app, root="sv:outer"):
            await roost.sleep(60)
    assert info.value.kind is roost.ErrorKind.LIMIT_EXCEEDED


async def test_root_supervisor_runs_with_the_node(autojump_clock):
    async with roost.open_node(app, root="sv:ordered"):
        await settle()
        assert trace[:3] == [("start", "db"), ("start", "cache"), ("start", "web")]
    assert trace[-3:] == [("stop", "web"), ("stop", "cache"), ("stop", "db")]


def test_bad_specs_are_invalid_before_anything_starts():
    bad = roost.App("bad")
    cases = [
        lambda: bad.supervisor("s", children=workers("a", "a")),
        lambda: bad.supervisor("s", children=workers("a"), intensity=-1),
        lambda: bad.supervisor("s", children=workers("a"), strategy="one_for_some"),
        lambda: bad.supervisor("s", children=workers("a"), period=0),
        lambda: bad.supervisor("s"),
        lambda: bad.supervisor(
            "s",
            children=[
                supervisor.child("a", "bad:w", requires=["b"]),
                supervisor.child("b", "bad:w", requires=["a"]),
            ],
        ),
        lambda: supervisor.child("a", "bad:w", restart="sometimes"),
        lambda: supervisor.child("a", "bad:w", shutdown="later"),
        lambda: supervisor.child("a", "bad:w", type="manager"),
        lambda: supervisor.child("", "bad:w"),
        lambda: supervisor.Backoff(factor=0.5),
        lambda: supervisor.Backoff(jitter=1.5),
        lambda: supervisor.Backoff(initial_delay="10s", max_delay="1s"),
    ]
    for case in cases:
        with pytest.raises(roost.Error) as info:
            case()
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_unknown_child_entry_fails_at_node_start():
    bad = roost.App("bad2")
    bad.supervisor("s", children=[supervisor.child("a", "bad2:missing")])
    started = False
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(bad):
            started = True
    assert info.value.kind is roost.ErrorKind.INVALID
    assert "bad2:missing" in info.value.message
    assert not started


async def test_inspection_of_non_supervisor_is_not_found():
    async with roost.open_node(app):
        pid = await process.spawn("sv:worker", "x")
        with pytest.raises(roost.Error) as info:
            supervisor.which_children(pid)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_supervisor_dies_with_its_failing_parent(autojump_clock):
    async with roost.open_node(app):
        process.set_options(trap_links=True)
        sup = await process.spawn_linked_monitored("sv:one")
        await settle()
        process.terminate(sup)  # killed: its children must not outlive it
        await settle()
        assert trace.count(("start", "a")) == 1
        assert roost.NodeHandle  # the node keeps only the attached block alive
