"""Sync activity threads that outlive their attempt or their node harm neither.

These run on the real clock: under a MockClock sync activities run inline, not in threads.
Threads are coordinated with ``threading.Event``; nothing sleeps to wait.
"""

import threading

import pytest
import trio
import trio.lowlevel

import roost
from roost import funcs, process
from roost.workflow._local.activities._threads import MAX_THREADS, ThreadPool

ONE = roost.RetryPolicy(maximum_attempts=1)
app = roost.App("lifetime")

entered = threading.Event()
release = threading.Event()
# The trio run's token and an event a blocked activity sets through it once it beat.
marks: dict[str, object] = {}


@app.activity(retry_policy=ONE, start_to_close_timeout="30s")
def blocks() -> str:
    entered.set()
    release.wait(30)
    return "late"


@app.activity(retry_policy=ONE, heartbeat_timeout="20s", start_to_close_timeout="30s")
def beats_late() -> int:
    entered.set()
    release.wait(30)
    roost.heartbeat()  # after its node stopped
    # Callbacks run in the order posted: this one runs after the beat's.
    marks["token"].run_sync_soon(marks["beaten"].set)
    return 1


@app.workflow
async def calls(entry: str):
    return await funcs.call(entry)


def _thread_wait(event: threading.Event):
    # A limiter of its own: the test must not depend on the one the runtime uses.
    return trio.to_thread.run_sync(event.wait, 30, limiter=trio.CapacityLimiter(1))


@pytest.fixture(autouse=True)
def _fresh_events():
    entered.clear()
    release.clear()
    yield
    release.set()  # whatever is still blocked ends


async def test_a_result_handed_back_after_the_node_stopped_is_dropped(tmp_path, monkeypatch):
    handed_back = trio.Event()
    original = ThreadPool._hand_back

    def observed(pool):
        try:
            original(pool)
        finally:
            handed_back.set()

    monkeypatch.setattr(ThreadPool, "_hand_back", observed)
    async with roost.open_node(app, tmp_path, shutdown_grace="0.1s"):
        await process.spawn(calls, "lifetime:blocks")
        await _thread_wait(entered)
    release.set()  # the abandoned job returns now, after its node has stopped
    with trio.fail_after(30):
        await handed_back.wait()
    # The host's trio run goes on: a raising callback crashes it with TrioInternalError.
    await trio.lowlevel.checkpoint()


async def test_a_heartbeat_after_the_node_stopped_is_ignored(tmp_path):
    marks["token"] = trio.lowlevel.current_trio_token()
    marks["beaten"] = beaten = trio.Event()
    async with roost.open_node(app, tmp_path, shutdown_grace="0.1s"):
        await process.spawn(calls, "lifetime:beats_late")
        await _thread_wait(entered)
    release.set()
    with trio.fail_after(30):
        await beaten.wait()  # the beat's callback ran before this one
    await trio.lowlevel.checkpoint()


many = roost.App("many")
many_entered = threading.Lock()
counts = {"entered": 0}


@many.activity(retry_policy=ONE, start_to_close_timeout="0.3s")
def stuck() -> None:
    with many_entered:
        counts["entered"] += 1
    release.wait(60)


@many.activity(retry_policy=ONE, start_to_close_timeout="30s")
def quick(x: int) -> int:
    return x + 1


@many.workflow
async def call_stuck() -> str:
    try:
        await funcs.call("many:stuck")
    except roost.Error as err:
        return err.kind.value
    return "returned"


@many.workflow
async def call_quick(x: int) -> int:
    return await funcs.call("many:quick", x)


async def test_more_abandoned_threads_than_trio_allows_by_default_block_nothing(tmp_path):
    counts["entered"] = 0
    with trio.fail_after(60):
        async with roost.open_node(many, tmp_path, shutdown_grace="0.1s"):
            # Waves of attempts that time out blocked: each abandons its thread.
            for _ in range(8):
                if counts["entered"] > MAX_THREADS + 2:
                    break
                async with trio.open_nursery() as nursery:
                    for _ in range(20):
                        nursery.start_soon(process.exec, call_stuck)
            assert counts["entered"] > MAX_THREADS + 2
            # A quick sync activity still gets a thread.
            assert await process.exec(call_quick, 41) == 42
        # ... and the node has shut down (its store closed in a thread of its own).
