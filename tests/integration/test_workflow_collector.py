"""The cyclic collector's young threshold is raised while a workflow runtime is open.

The policy is in ``roost.workflow._local._collector``: the first open node's runtime raises the
youngest generation's threshold to at least ``BUSY_THRESHOLD``, the last one to close
restores what it found; a higher threshold the application chose, or one it sets while
the node runs, is left alone.
"""

import gc
from collections.abc import Iterator

import pytest
import trio
import trio.testing

import roost
from roost import funcs, process
from roost.testing import open_test_node
from roost.workflow._local._collector import BUSY_THRESHOLD

app = roost.App("collector")


@app.workflow
async def done(x):
    return x


@pytest.fixture
def thresholds() -> Iterator[tuple[int, int, int]]:
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield gc.get_threshold()
    finally:
        gc.set_threshold(*old)


async def _wait_policy() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_open_runtime_raises_young_threshold_and_close_restores(thresholds):
    async with open_test_node(app):
        await _wait_policy()
        assert gc.get_threshold() == (BUSY_THRESHOLD, 10, 10)
        pid = await process.spawn(done, 1)
        process.monitor(pid)
        assert (await process.events().receive()).value == 1
        assert gc.get_threshold() == (BUSY_THRESHOLD, 10, 10)
    assert gc.get_threshold() == thresholds


async def test_the_busy_threshold_holds_from_the_moment_the_node_is_open(thresholds):
    # The first starts may come before any task of the runtime has run (a workflow's spawn
    # reaches the scheduler only in its commit): the threshold is set as the runtime opens.
    async with open_test_node(app):
        assert gc.get_threshold() == (BUSY_THRESHOLD, 10, 10)
    assert gc.get_threshold() == thresholds


async def test_nested_nodes_restore_after_the_last_closes(thresholds):
    async with open_test_node(app, name="a"):
        async with open_test_node(app, name="b"):
            await _wait_policy()
            assert gc.get_threshold()[0] == BUSY_THRESHOLD
        assert gc.get_threshold()[0] == BUSY_THRESHOLD, "node a's runtime is still open"
    assert gc.get_threshold() == thresholds


async def test_a_higher_application_threshold_is_kept(thresholds):
    gc.set_threshold(BUSY_THRESHOLD * 2, 5, 7)
    async with open_test_node(app):
        await _wait_policy()
        assert gc.get_threshold() == (BUSY_THRESHOLD * 2, 5, 7)
    assert gc.get_threshold() == (BUSY_THRESHOLD * 2, 5, 7)


async def test_a_threshold_set_while_open_is_not_overwritten_on_close(thresholds):
    async with open_test_node(app):
        await _wait_policy()
        gc.set_threshold(1234, 10, 10)
    assert gc.get_threshold() == (1234, 10, 10)


async def test_a_disabled_collector_stays_disabled(thresholds):
    gc.disable()
    try:
        async with open_test_node(app):
            await _wait_policy()
            assert not gc.isenabled()
            assert gc.get_threshold()[0] == BUSY_THRESHOLD
        assert not gc.isenabled()
    finally:
        gc.enable()


@app.activity
async def add_one(x):
    return x + 1


@app.workflow
async def two_steps(x):
    return await funcs.call(add_one, await funcs.call(add_one, x))


async def _cyclic_garbage_of(n: int) -> int:
    """Objects only the cyclic collector would free, left by ``n`` workflows run to the end."""
    gc.collect()
    gc.disable()
    try:
        async with open_test_node(app):
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(_start_one, i)
            values = {(await process.events().receive()).value for _ in range(n)}
            assert values == {i + 2 for i in range(n)}
        return gc.collect()
    finally:
        gc.enable()


async def _start_one(i: int) -> None:
    process.monitor(await process.spawn(two_steps, i))


async def test_the_workflow_path_leaves_no_cyclic_garbage():
    # What a node leaves on close (its nursery, store, tasks) is the same for any N: the
    # difference is what each workflow leaves for the collector, and it must be nothing
    # (the busy threshold relies on it; see roost.workflow._local._collector).
    few, many = await _cyclic_garbage_of(5), await _cyclic_garbage_of(105)
    assert many - few < 10, f"{(many - few) / 100:.2f} cyclic garbage objects per workflow"


async def test_threshold_zero_keeps_automatic_collection_off(thresholds):
    gc.set_threshold(0, 10, 10)  # the documented way to switch automatic collection off
    async with open_test_node(app):
        assert await process.exec(done, 1) == 1
        assert gc.get_threshold() == (0, 10, 10)
    assert gc.get_threshold() == (0, 10, 10)
