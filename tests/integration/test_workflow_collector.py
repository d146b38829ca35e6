"""The cyclic collector's young threshold is raised while a workflow runtime is open.

The policy is in ``roost.workflow._collector``: the first open node's runtime raises the
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
from roost import process
from roost.testing import open_test_node
from roost.workflow._collector import BUSY_THRESHOLD

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
