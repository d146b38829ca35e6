"""Monitors, links, terminate, cancel, names, hosts and node shutdown."""

import pytest
import trio
import trio.testing

import roost
from roost import channel, process

app = roost.App("lm")
app.host("small", max_processes=2)
seen: list = []


@app.process
async def sleeper(seconds=3600):
    await roost.sleep(seconds)
    return "slept"


@app.process
async def crash_after(seconds):
    await roost.sleep(seconds)
    raise RuntimeError("crashed")


@app.process
async def returns_after(seconds):
    await roost.sleep(seconds)
    return "ok"


@app.process
async def linked_to(target):
    process.link(target)
    await process.inbox().receive()
    return "unreachable"


@app.process
async def trapper(target):
    process.set_options(trap_links=True)
    process.link(target)
    ev = await process.events().receive()
    seen.append(ev)
    return "survived"


@app.process
async def cancel_honouring():
    ev = await process.events().receive()
    assert isinstance(ev, roost.Cancel)
    return f"cancelled: {ev.reason}"


@app.process
async def cancel_ignoring():
    process.events()  # listening, so a shutdown gives it the grace period; it ignores it
    try:
        await trio.sleep_forever()
    finally:
        seen.append("terminated while blocked in a foreign trio wait")


@app.process
async def blocked_receiver():
    await process.inbox().receive()


@app.process
async def named(name):
    process.registry.register(name)
    await process.inbox().receive()


async def next_event():
    return await process.events().receive()


async def test_monitor_gets_exit_with_value_and_error(autojump_clock):
    async with roost.open_node(app):
        ok = await process.spawn_monitored("lm:returns_after", 1)
        bad = await process.spawn_monitored("lm:crash_after", 2)
        first, second = await next_event(), await next_event()
        assert (first.pid, first.value, first.error) == (ok, "ok", None)
        assert first.kind is roost.EventKind.EXIT
        assert second.pid == bad and second.value is None
        assert second.error.kind is roost.ErrorKind.INTERNAL
        assert "crashed" in second.error.message


async def test_second_monitor_is_a_noop_and_unmonitor_stops_it(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn("lm:returns_after", 1)
        process.monitor(pid)
        process.monitor(pid)
        other = await process.spawn("lm:returns_after", 1)
        process.monitor(other)
        process.unmonitor(other)
        process.unmonitor(other)  # a no-op when not monitoring
        ev = await next_event()
        assert ev.pid == pid
        await roost.sleep(5)
        got = await channel.select(process.events(), default=True)
        assert got.default  # exactly one EXIT, none for the unmonitored one


async def test_monitor_of_dead_or_unknown_pid_is_immediate_noproc():
    async with roost.open_node(app):
        pid = await process.spawn("lm:returns_after", 0)
        await trio.testing.wait_all_tasks_blocked()
        process.monitor(pid)
        ev = await next_event()
        assert ev.pid == pid and ev.error.kind is roost.ErrorKind.NOT_FOUND
        assert ev.error.details["reason"] == "noproc"
        ghost = roost.Pid("local", "lm:processes", "ff.fffff")
        process.monitor(ghost)
        assert (await next_event()).pid == ghost


async def test_link_down_kills_non_trapping_process(autojump_clock):
    async with roost.open_node(app):
        target = await process.spawn("lm:crash_after", 1)
        victim = await process.spawn_monitored("lm:linked_to", target)
        ev = await next_event()
        assert ev.pid == victim
        assert ev.error.kind is roost.ErrorKind.INTERNAL  # the kind of the original error
        assert ev.error.details["reason"] == "link"
        assert ev.error.details["linked_pid"] == str(target)


async def test_trap_links_turns_link_down_into_an_event(autojump_clock):
    seen.clear()
    async with roost.open_node(app):
        target = await process.spawn("lm:crash_after", 1)
        assert await process.exec("lm:trapper", target) == "survived"
        (ev,) = seen
        assert isinstance(ev, roost.LinkDown) and ev.pid == target
        assert ev.kind is roost.EventKind.LINK_DOWN


async def test_normal_exit_sends_no_link_down(autojump_clock):
    async with roost.open_node(app):
        target = await process.spawn("lm:returns_after", 1)
        victim = await process.spawn_monitored("lm:linked_to", target)
        await roost.sleep(10)
        process.send(victim, "go", None)
        ev = await next_event()
        assert ev.value == "unreachable"  # still alive after its link partner returned


async def test_terminate_sends_link_down_and_canceled_exit(autojump_clock):
    seen.clear()
    async with roost.open_node(app):
        target = await process.spawn_monitored("lm:blocked_receiver")
        trapper_pid = await process.spawn("lm:trapper", target)
        await trio.testing.wait_all_tasks_blocked()
        process.terminate(target)  # terminate during a blocked receive
        ev = await next_event()
        assert ev.pid == target
        assert ev.error.kind is roost.ErrorKind.CANCELED
        assert ev.error.message == "terminated"
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(seen[0], roost.LinkDown) and seen[0].error.kind == "Canceled"
        del trapper_pid


async def test_terminate_interrupts_foreign_trio_waits():
    seen.clear()
    async with roost.open_node(app):
        pid = await process.spawn_monitored("lm:cancel_ignoring")
        await trio.testing.wait_all_tasks_blocked()
        process.terminate(pid)
        ev = await next_event()
        assert ev.error.kind is roost.ErrorKind.CANCELED
        assert seen == ["terminated while blocked in a foreign trio wait"]


async def test_cancel_is_cooperative():
    async with roost.open_node(app):
        honour = await process.spawn_monitored("lm:cancel_honouring")
        ignore = await process.spawn("lm:blocked_receiver")
        process.cancel(honour, "please stop")
        process.cancel(ignore)
        ev = await next_event()
        assert ev.value == "cancelled: please stop" and ev.error is None
        await trio.testing.wait_all_tasks_blocked()
        process.send(ignore, "still", "alive")  # ignored the cancel: still running
        with pytest.raises(roost.Error):
            process.cancel(ignore, reason=5)


async def test_honoured_cancel_sends_no_link_down():
    async with roost.open_node(app):
        target = await process.spawn("lm:cancel_honouring")
        victim = await process.spawn_monitored("lm:linked_to", target)
        await trio.testing.wait_all_tasks_blocked()
        process.cancel(target, "done")
        await trio.testing.wait_all_tasks_blocked()
        process.send(victim, "go", None)
        assert (await next_event()).value == "unreachable"


async def test_link_to_dead_process_is_noproc_link_down():
    async with roost.open_node(app):
        dead = await process.spawn("lm:returns_after", 0)
        await trio.testing.wait_all_tasks_blocked()
        victim = await process.spawn_monitored("lm:linked_to", dead)
        ev = await next_event()
        assert ev.pid == victim
        assert ev.error.kind is roost.ErrorKind.NOT_FOUND
        assert "noproc" in ev.error.message


async def test_link_to_a_dying_process(autojump_clock):
    async with roost.open_node(app):
        target = await process.spawn("lm:crash_after", 0)
        # Linked before it runs; it dies on its first step: the link still fires.
        victim = await process.spawn_monitored("lm:linked_to", target)
        ev = await next_event()
        assert ev.pid == victim and ev.error.details["linked_pid"] == str(target)


async def test_unlink_stops_propagation(autojump_clock):
    async with roost.open_node(app):
        process.set_options(trap_links=True)
        assert process.get_options() == {"trap_links": True}
        target = await process.spawn_linked("lm:crash_after", 1)
        process.unlink(target)
        process.unlink(target)
        await roost.sleep(5)
        got = await channel.select(process.events(), default=True)
        assert got.default


async def test_link_down_kills_the_open_node_block(autojump_clock):
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(app):
            await process.spawn_linked("lm:crash_after", 1)
            await roost.sleep(10)
            pytest.fail("the attached process should have been killed")
    assert info.value.details["reason"] == "link"


async def test_set_options_rejects_unknown_keys():
    async with roost.open_node(app):
        with pytest.raises(roost.Error) as info:
            process.set_options(upgradable=True)
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error):
            process.set_options(trap_links="yes")


async def test_registry_rules():
    async with roost.open_node(app) as node:
        assert process.registry.register("me") is True
        assert process.registry.register("me") is True  # idempotent for the owner
        assert process.registry.lookup("me") == node.pid
        other = await process.spawn("lm:named", "other")
        await trio.testing.wait_all_tasks_blocked()
        assert process.registry.lookup("other") == other
        with pytest.raises(roost.Error) as info:
            process.registry.register("other")
        assert info.value.kind is roost.ErrorKind.ALREADY_EXISTS
        assert info.value.details["existing_pid"] == str(other)
        process.send("other", "hello", 1)  # a name is a destination
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(roost.Error) as info:
            process.registry.lookup("other")  # released when it exited
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        assert process.registry.unregister("me") is True
        assert process.registry.unregister("me") is False
        for bad in ("", "{x", "@x", 3):
            with pytest.raises(roost.Error) as info:
                process.registry.register(bad)
            assert info.value.kind is roost.ErrorKind.INVALID


async def test_name_released_on_crash(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("lm:named", "fragile")
        await trio.testing.wait_all_tasks_blocked()
        process.terminate("fragile")
        ev = await next_event()
        assert ev.pid == pid
        with pytest.raises(roost.Error):
            process.registry.lookup("fragile")
        again = await process.spawn("lm:named", "fragile")
        await trio.testing.wait_all_tasks_blocked()
        assert process.registry.lookup("fragile") == again


async def test_register_for_dead_pid_is_not_found():
    async with roost.open_node(app):
        pid = await process.spawn("lm:returns_after", 0)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(roost.Error) as info:
            process.registry.register("late", pid)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_host_limit(autojump_clock):
    async with roost.open_node(app):
        a = await process.spawn("lm:blocked_receiver", host="lm:small")
        await process.spawn("lm:blocked_receiver", host="small")
        assert a.host == "lm:small"
        with pytest.raises(roost.Error) as info:
            await process.spawn("lm:blocked_receiver", host="lm:small")
        assert info.value.kind is roost.ErrorKind.LIMIT_EXCEEDED
        process.terminate(a)
        await trio.testing.wait_all_tasks_blocked()
        await process.spawn("lm:blocked_receiver", host="lm:small")  # room again
        with pytest.raises(roost.Error) as info:
            await process.spawn("lm:blocked_receiver", host="lm:nope")
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
    with pytest.raises(roost.Error):
        app.host("bad", max_processes=0)


async def test_exec_caller_cancelled_terminates_the_child(autojump_clock):
    async with roost.open_node(app) as node:
        with trio.move_on_after(1) as scope:
            await process.exec("lm:sleeper")
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert node.process_count() == 1  # only the attached block is left


async def test_shutdown_cancels_then_terminates_after_grace(autojump_clock):
    seen.clear()
    start = trio.current_time()
    async with roost.open_node(app, shutdown_grace="3s"):
        await process.spawn("lm:cancel_honouring")
        await process.spawn("lm:cancel_ignoring")
        await trio.testing.wait_all_tasks_blocked()
    assert trio.current_time() - start == pytest.approx(3)
    assert seen == ["terminated while blocked in a foreign trio wait"]


async def test_shutdown_without_stragglers_does_not_wait(autojump_clock):
    start = trio.current_time()
    async with roost.open_node(app, shutdown_grace="10s"):
        await process.spawn("lm:cancel_honouring")
    assert trio.current_time() - start == 0


async def test_node_arguments_are_checked():
    for kwargs in ({"durability": "maybe"}, {"name": "a|b"}, {"shutdown_grace": "soon"}):
        with pytest.raises(roost.Error) as info:
            async with roost.open_node(app, **kwargs):
                pass
        assert info.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        async with roost.open_node("not an app"):
            pass


async def test_pids_are_not_reused_after_restart(tmp_path):
    async with roost.open_node(app, tmp_path) as first:
        a = await process.spawn("lm:returns_after", 0)
    async with roost.open_node(app, tmp_path) as second:
        b = await process.spawn("lm:returns_after", 0)
    assert second.incarnation == first.incarnation + 1
    assert a != b and a.host == b.host
    async with roost.open_node(app, tmp_path, name="n1") as third:
        assert str(third.pid).startswith("{n1@node|")
