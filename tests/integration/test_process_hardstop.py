"""terminate as a hard stop, wherever the process is: the lazily attached cancel scope.

A process body runs without a cancel scope of its own until it is killed; the kill then
attaches one under everything the body has open (see roost/actors/_hardstop.py). Every
test runs twice: with that, and with the eager scope used on a trio without the support.
"""

import contextlib

import pytest
import trio
import trio.testing

import roost
from roost import process
from roost.actors import _hardstop

app = roost.App("hs")
seen: list = []


@pytest.fixture(params=["attached", "eager"], autouse=True)
def scope_mode(request, monkeypatch):
    if request.param == "eager":
        monkeypatch.setattr(_hardstop, "ATTACH_SUPPORTED", False)
    else:
        assert _hardstop.ATTACH_SUPPORTED  # the trio in use supports attaching
    seen.clear()
    return request.param


@app.process
async def nursery_parent():
    async def child(tag):
        try:
            await trio.sleep_forever()
        finally:
            seen.append(f"child {tag} cancelled")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(child, 1)
        nursery.start_soon(child, 2)
        await process.inbox().receive()


@app.process
async def inside_move_on_after():
    with trio.move_on_after(100) as scope:
        await process.inbox().receive()
    seen.append(f"move_on_after swallowed it: {scope.cancelled_caught}")


@app.process
async def stays_cancelled():
    try:
        await process.inbox().receive()
    finally:
        try:
            await trio.sleep(10)
            seen.append("slept in finally")
        except trio.Cancelled:
            seen.append("still cancelled in finally")
            raise


@app.process
async def shielded_then_blocked():
    with trio.CancelScope(shield=True):
        await trio.sleep(5)
        seen.append("shielded part done")
    await trio.sleep(5)
    seen.append("unreachable")


@app.process
async def starts_then_blocks():
    seen.append("started")
    await trio.sleep(1)
    seen.append("unreachable")


@app.process
async def terminates_itself():
    process.terminate(process.pid())
    seen.append("runs on until its next checkpoint")
    await trio.sleep(1)
    seen.append("unreachable")


@app.process
async def links_to_the_dead(dead):
    process.link(dead)  # a noproc LINK_DOWN kills it at once
    seen.append("after link")
    await process.inbox().receive()


@app.process
async def coroutine_kills_its_process():
    async def killer():
        await trio.sleep(1)
        process.terminate(process.pid())

    roost.coroutine.spawn(killer)
    try:
        await trio.sleep_forever()
    finally:
        seen.append("body unwound")


@app.process
async def upgrades_once(n):
    if n == 0:
        await process.upgrade("hs:upgrades_once", 1)
    seen.append(f"running version {n}")
    await process.inbox().receive()


@app.process
async def catches_and_returns():
    with contextlib.suppress(trio.Cancelled):
        await trio.sleep_forever()
    return "returned normally"


async def exit_of(pid):
    ev = await process.events().receive()
    assert ev.pid == pid
    return ev


def assert_terminated(ev):
    assert ev.error is not None
    assert ev.error.kind is roost.ErrorKind.CANCELED
    assert ev.error.message == "terminated"


async def test_terminate_cancels_the_nursery_a_process_opened():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:nursery_parent")
        await trio.testing.wait_all_tasks_blocked()
        process.terminate(pid)
        assert_terminated(await exit_of(pid))
        assert sorted(seen) == ["child 1 cancelled", "child 2 cancelled"]


async def test_terminate_inside_a_scope_of_the_body_is_not_swallowed_by_it():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:inside_move_on_after")
        await trio.testing.wait_all_tasks_blocked()
        process.terminate(pid)
        assert_terminated(await exit_of(pid))
        assert seen == []  # the inner scope re-raised: nothing after it ran


async def test_a_terminated_process_stays_cancelled_while_it_unwinds(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:stays_cancelled")
        await trio.testing.wait_all_tasks_blocked()
        start = trio.current_time()
        process.terminate(pid)
        assert_terminated(await exit_of(pid))
        assert seen == ["still cancelled in finally"]
        assert trio.current_time() == start


async def test_a_shield_inside_the_body_delays_the_stop(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:shielded_then_blocked")
        await roost.sleep(1)
        process.terminate(pid)
        ev = await exit_of(pid)
        assert_terminated(ev)
        assert seen == ["shielded part done"]
        assert trio.current_time() == pytest.approx(5)


async def test_terminated_before_it_ran_stops_at_its_first_checkpoint():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:starts_then_blocks")
        process.terminate(pid)  # no checkpoint since the spawn: it has not run yet
        assert_terminated(await exit_of(pid))
        assert seen == ["started"]


async def test_a_process_can_terminate_itself():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:terminates_itself")
        assert_terminated(await exit_of(pid))
        assert seen == ["runs on until its next checkpoint"]


async def test_a_link_kill_while_running_stops_at_the_next_checkpoint():
    async with roost.open_node(app):
        dead = await process.spawn("hs:catches_and_returns")
        process.terminate(dead)
        await trio.testing.wait_all_tasks_blocked()
        pid = await process.spawn_monitored("hs:links_to_the_dead", dead)
        ev = await exit_of(pid)
        assert ev.error.details["reason"] == "link"
        assert seen == ["after link"]


async def test_a_coroutine_can_terminate_its_own_process(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:coroutine_kills_its_process")
        assert_terminated(await exit_of(pid))
        assert seen == ["body unwound"]


async def test_terminate_after_upgrade():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:upgrades_once", 0)
        await trio.testing.wait_all_tasks_blocked()
        assert seen == ["running version 1"]
        process.terminate(pid)
        assert_terminated(await exit_of(pid))


async def test_a_body_that_swallows_the_cancel_still_exits_terminated():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("hs:catches_and_returns")
        await trio.testing.wait_all_tasks_blocked()
        process.terminate(pid)
        ev = await exit_of(pid)
        assert_terminated(ev)  # the kill's error wins over the value it returned
        assert ev.value == "returned normally"


async def test_node_shutdown_still_stops_processes_in_nurseries():
    async with roost.open_node(app, shutdown_grace=0) as node:
        await process.spawn("hs:nursery_parent")
        await trio.testing.wait_all_tasks_blocked()
        assert node.process_count() == 2
    assert sorted(seen) == ["child 1 cancelled", "child 2 cancelled"]


async def test_many_terminated_at_once_leave_the_node_clean(autojump_clock):
    async with roost.open_node(app) as node:
        pids = [await process.spawn("hs:stays_cancelled") for _ in range(50)]
        await trio.testing.wait_all_tasks_blocked()
        for pid in pids[::2]:
            process.terminate(pid)
        await trio.testing.wait_all_tasks_blocked()
        assert node.process_count() == 1 + 25
        assert seen.count("still cancelled in finally") == 25
        for pid in pids[1::2]:
            process.send(pid, "wake", None)
        await roost.sleep(20)
        assert node.process_count() == 1
        assert seen.count("slept in finally") == 25


async def test_an_idle_process_carries_no_cancel_scope_until_killed(scope_mode):
    async with roost.open_node(app) as handle:
        pid = await process.spawn_monitored("hs:stays_cancelled")
        await trio.testing.wait_all_tasks_blocked()
        proc = handle._node.procs[pid]
        if scope_mode == "attached":
            assert isinstance(proc._stop, trio.lowlevel.Task)  # just its task, no scope
        else:
            assert isinstance(proc._stop, trio.CancelScope)
        scope = proc.scope
        assert isinstance(scope, trio.CancelScope) and proc.scope is scope
        assert not scope.cancel_called
        process.terminate(pid)
        assert_terminated(await exit_of(pid))
        assert scope.cancel_called
        assert seen == ["still cancelled in finally"]
