"""How activity attempts run: async ones inline until they suspend, sync ones in batches.

Sync activities use worker threads on a real clock (under a MockClock they run inline);
the thread tests wait for threading events, never for wall time, except where an
activity's own duration is what a timeout measures.
"""

import contextvars
import datetime as dt
import threading

import pytest
import trio

import roost
from roost import ctx, funcs, process
from roost.testing import open_test_node

app = roost.App("runner")
ONE_TRY = roost.RetryPolicy(maximum_attempts=1)
threads: list[int] = []
release = threading.Event()
entered = threading.Event()  # set when ``blocks`` is running in its thread


@pytest.fixture(autouse=True)
def _clear():
    threads.clear()
    release.clear()
    entered.clear()
    yield
    release.set()  # never leave a worker thread blocked


def worker(node):
    return node._node.local_workflows.activities


@app.activity
def quick(i):
    threads.append(threading.get_ident())
    return i * 2


@app.activity(retry_policy=ONE_TRY, start_to_close_timeout="30s")
def blocks():
    entered.set()
    release.wait(30)
    return "released"


@app.activity(retry_policy=ONE_TRY, start_to_close_timeout="0.3s")
def blocks_briefly():
    release.wait(30)  # past its timeout: its thread is abandoned
    return "late"


@app.activity(heartbeat_timeout="0.5s", start_to_close_timeout="30s", retry_policy=ONE_TRY)
def beats_in_its_thread(beats):
    for _ in range(beats):
        release.wait(0.2)  # the activity's own work: 0.2 s a beat, longer than 0.5 s in all
        roost.heartbeat()
    return beats


@app.activity(retry_policy=ONE_TRY)
def fails_alone(i):
    if i == 3:
        raise ValueError(f"number {i}")
    return i


def _no_process():
    try:
        process.pid()
    except roost.Error as err:
        return err.kind
    return "a current process"


@app.activity
async def never_suspends(x):
    info = roost.activity_info()
    return {
        "x": x,
        "entry": info.entry,
        "attempt": info.attempt,
        "key": info.idempotency_key,
        "tenant": ctx.get("tenant"),
        "process": _no_process(),
        "now": roost.now() is not None,
    }


# Set by the activities below: an attempt that sets it must not leak it into the next one.
leak: contextvars.ContextVar[int | None] = contextvars.ContextVar("runner_leak", default=None)


def _own_info(x):
    seen = leak.get()
    leak.set(x)
    info = roost.activity_info()
    return {
        "seen": seen,
        "same": info is roost.activity_info(),  # one record for the attempt, however asked
        "workflow_id": info.workflow_id,
        "run_id": info.run_id,
        "seq": info.seq,
        "attempt": info.attempt,
        "key": info.idempotency_key,
        "aware": isinstance(info.scheduled_at, dt.datetime)
        and info.scheduled_at.tzinfo is not None,
        "tenant": ctx.get("tenant"),
        "values": ctx.all(),
    }


@app.activity
async def own_info(x):
    return _own_info(x)


@app.activity
def own_info_in_a_thread(x):
    return _own_info(x)


@app.activity(start_to_close_timeout="5s", retry_policy=ONE_TRY)
async def suspends_then_hangs(x):
    await trio.sleep(1)
    assert roost.activity_info().seq == x
    await trio.sleep_forever()


@app.activity
async def suspends(x):
    await trio.sleep(1)
    return (x, roost.activity_info().entry, ctx.get("tenant"))


@app.workflow
async def fan_out(entry, n):
    handles = [funcs.start(entry, i) for i in range(n)]
    out = []
    for handle in handles:
        try:
            out.append(await handle)
        except roost.Error as err:
            out.append(err.message)
    return out


@app.workflow
async def cancels_a_blocked_one():
    blocked = funcs.start("runner:blocks")
    first = await funcs.call("runner:quick", 1)  # the blocked one is in its thread by now
    blocked.cancel()
    try:
        await blocked
    except roost.Error as err:
        return first, err.kind


@app.workflow
async def calls(entry, *args):
    try:
        return await funcs.call(entry, *args)
    except roost.Error as err:
        return {"kind": err.kind, "timeout": err.details.get("timeout_type")}


async def test_sync_activities_ready_together_share_one_thread_hop():
    async with roost.open_node(app) as node:
        before = worker(node).thread_hops
        assert await process.exec(fan_out, "runner:quick", 50) == [i * 2 for i in range(50)]
        # Fifty attempts scheduled in one activation: one batch, not a hop each.
        assert worker(node).thread_hops - before <= 2
        assert len(set(threads)) <= 2
        assert threading.get_ident() not in threads  # never in trio's thread


async def test_each_sync_attempt_in_a_batch_keeps_its_own_outcome():
    async with roost.open_node(app):
        got = await process.exec(fan_out, "runner:fails_alone", 6)
        assert got == [0, 1, 2, "ValueError: number 3", 4, 5]


async def test_a_blocked_sync_activity_does_not_hold_up_the_others():
    async with roost.open_node(app) as node:
        pid = await process.spawn_monitored(calls, "runner:blocks")
        await trio.to_thread.run_sync(entered.wait, 30)  # the attempt is in its thread
        assert worker(node).stats["threaded"] >= 1
        # More threads join while one job blocks: the quick ones finish meanwhile.
        assert await process.exec(fan_out, "runner:quick", 10) == [i * 2 for i in range(10)]
        release.set()
        exit_event = await process.events().receive()
        assert exit_event.pid == pid
        assert exit_event.value == "released"


async def test_a_sync_attempt_past_its_timeout_is_abandoned_and_times_out():
    async with roost.open_node(app):
        result = await process.exec(calls, "runner:blocks_briefly")
        assert result == {"kind": roost.ErrorKind.TIMEOUT, "timeout": "start_to_close"}
        # The pool goes on without the abandoned thread.
        assert await process.exec(fan_out, "runner:quick", 3) == [0, 2, 4]


async def test_a_heartbeat_from_a_worker_thread_extends_the_attempt():
    async with roost.open_node(app):
        assert await process.exec(calls, "runner:beats_in_its_thread", 4) == 4


async def test_an_async_activity_that_never_suspends_runs_inline_in_its_own_context(
    autojump_clock,
):
    async with open_test_node(app) as node:
        before = dict(worker(node).stats)
        pid = (
            await process.with_options(id="inline")
            .with_context({"tenant": "acme"})
            .spawn(fan_out, "runner:never_suspends", 3)
        )
        process.monitor(pid)
        exit_event = await process.events().receive()
        run_id = node.describe("inline")["run_id"]
        assert exit_event.value == [
            {
                "x": i,
                "entry": "runner:never_suspends",
                "attempt": 1,
                "key": f"inline/{run_id}/{i + 1}",
                "tenant": "acme",
                "process": roost.ErrorKind.INVALID_STATE,
                "now": True,
            }
            for i in range(3)
        ]
        stats = worker(node).stats
        assert stats["inline"] - before["inline"] == 3  # no trio task each
        assert stats["suspended"] == before["suspended"]


def _expected_info(run_id, n):
    return [
        {
            "seen": None,
            "same": True,
            "workflow_id": "info",
            "run_id": run_id,
            "seq": i + 1,
            "attempt": 1,
            "key": f"info/{run_id}/{i + 1}",
            "aware": True,
            "tenant": "acme",
            "values": {"tenant": "acme"},
        }
        for i in range(n)
    ]


async def _own_info_of(node, entry):
    pid = (
        await process.with_options(id="info")
        .with_context({"tenant": "acme"})
        .spawn(fan_out, entry, 3)
    )
    process.monitor(pid)
    exit_event = await process.events().receive()
    return exit_event.value, node.describe("info")["run_id"]


async def test_each_attempt_has_its_own_info_and_context_inline(autojump_clock):
    async with open_test_node(app) as node:
        got, run_id = await _own_info_of(node, "runner:own_info")
        assert got == _expected_info(run_id, 3)
        assert leak.get() is None  # nor into the runtime's


async def test_each_sync_attempt_in_a_thread_has_its_own_info_and_context():
    async with roost.open_node(app) as node:
        got, run_id = await _own_info_of(node, "runner:own_info_in_a_thread")
        assert got == _expected_info(run_id, 3)


async def test_an_async_activity_that_suspends_keeps_its_context_and_timeout(autojump_clock):
    async with open_test_node(app):
        got = await process.with_context({"tenant": "acme"}).exec(fan_out, "runner:suspends", 3)
        assert got == [[i, "runner:suspends", "acme"] for i in range(3)]
        start = trio.current_time()
        result = await process.exec(calls, "runner:suspends_then_hangs", 1)
        assert result == {"kind": roost.ErrorKind.TIMEOUT, "timeout": "start_to_close"}
        assert trio.current_time() - start == pytest.approx(5)


async def test_a_cancelled_sync_activity_in_its_thread_is_abandoned():
    async with roost.open_node(app) as node:
        assert await process.exec(cancels_a_blocked_one) == [2, roost.ErrorKind.CANCELED]
        assert worker(node).running == {}  # nothing is left to work on
        release.set()  # the abandoned thread ends; its result is discarded
        assert await process.exec(fan_out, "runner:quick", 2) == [0, 2]
