"""Spawning, messaging and the Spawner, through the public API."""

import pytest
import trio
import trio.testing

import roost
from roost import channel, coroutine, ctx, funcs, process

app = roost.App("t")
log: list = []


@app.process
async def echo():
    async for msg in process.inbox():
        if msg.payload == "stop":
            return "stopped"
        process.send(msg.sender, "reply", msg.payload)
    return None


@app.process
async def adder(a, b):
    return a + b


@app.process
async def failer(message="boom"):
    raise ValueError(message)


@app.process
async def roost_failer():
    raise roost.Error("nope", kind=roost.ErrorKind.CONFLICT, retryable=False, details={"x": 1})


@app.process
async def collector(topic, n):
    ch = process.listen(topic, message=True)
    return [await ch.receive() for _ in range(n)]


@app.process
async def waiter():
    await process.inbox().receive()


@app.process
async def context_reader():
    child = await process.spawn("t:context_child")
    process.monitor(child)
    ev = await process.events().receive()
    return {"mine": ctx.all(), "child": ev.value}


@app.process
async def context_child():
    return ctx.get("tenant", "none")


@app.process
async def entry_id_reader():
    return process.id()


@app.activity
def double(x):
    return x * 2


@app.activity
async def async_double(x):
    await trio.lowlevel.checkpoint()
    return x * 2


@app.activity
def broken_activity():
    raise RuntimeError("activity failed")


async def test_exec_returns_value_and_raises_errors():
    async with roost.open_node(app):
        assert await process.exec("t:adder", 2, 3) == 5
        assert await process.exec(adder, 1, 1) == 2  # the decorated function works too
        with pytest.raises(roost.Error) as info:
            await process.exec("t:failer", "bad input")
        assert info.value.kind is roost.ErrorKind.INTERNAL
        assert info.value.details == {"type": "ValueError", "message": "bad input"}
        with pytest.raises(roost.Error) as info:
            await process.exec("t:roost_failer")
        err = info.value
        assert (err.kind, err.message, err.retryable, err.details) == (
            roost.ErrorKind.CONFLICT,
            "nope",
            False,
            {"x": 1},
        )


def test_run_is_a_sync_entry_point(tmp_path):
    assert roost.run(app, "t:adder", 20, 22, data_dir=tmp_path) == 42
    with pytest.raises(roost.Error):
        roost.run(app, "t:failer", data_dir=tmp_path)


async def test_request_reply_and_sender():
    async with roost.open_node(app) as node:
        pid = await process.spawn("t:echo")
        assert process.pid() == node.pid
        process.send(pid, "anything", "hello")
        msg = await process.listen("reply", message=True).receive()
        assert (msg.topic, msg.payload, msg.sender) == ("reply", "hello", pid)
        process.monitor(pid)
        process.send(str(pid), "x", "stop")  # a PID string is a destination too
        ev = await process.events().receive()
        assert isinstance(ev, roost.Exit) and ev.value == "stopped" and ev.error is None


async def test_per_sender_fifo_and_retention_until_late_listen():
    async with roost.open_node(app):
        pid = await process.spawn("t:collector", "late", 50)
        for i in range(50):
            process.send(pid, "late", i)
        process.monitor(pid)
        ev = await process.events().receive()
        assert [m.payload for m in ev.value] == list(range(50))


async def test_message_sent_before_listen_is_retained():
    got = []

    async def body():
        await trio.testing.wait_all_tasks_blocked()
        got.append(await process.listen("later").receive())

    async with roost.open_node(app):
        me = process.pid()
        process.send(me, "later", "kept")
        # Nothing subscribes yet: the message must wait, not be dropped.
        await trio.testing.wait_all_tasks_blocked()
        await body()
    assert got == ["kept"]


async def test_inbox_takes_unsubscribed_topics_and_listen_wins():
    async with roost.open_node(app):
        me = process.pid()
        topic = process.listen("t1")
        inbox = process.inbox()
        process.send(me, "t1", 1)
        process.send(me, "t2", 2)
        assert await topic.receive() == 1
        msg = await inbox.receive()
        assert (msg.topic, msg.payload) == ("t2", 2)
        assert process.listen("t1") is topic
        assert process.inbox() is inbox
        assert process.events() is process.events()


async def test_unlisten_reroutes_unread_messages_to_inbox():
    async with roost.open_node(app):
        me = process.pid()
        topic = process.listen("x")
        process.send(me, "x", "unread")
        process.unlisten(topic)
        assert topic.closed
        msg = await process.inbox().receive()
        assert (msg.topic, msg.payload) == ("x", "unread")


async def test_listen_message_flag_conflict_is_invalid():
    async with roost.open_node(app):
        process.listen("a")
        with pytest.raises(roost.Error) as info:
            process.listen("a", message=True)
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_bad_topics_destinations_and_entries():
    async with roost.open_node(app):
        me = process.pid()
        for topic in ("@inbox", "", None):
            with pytest.raises(roost.Error) as info:
                process.send(me, topic, 1)
            assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error) as info:
            process.send("nobody-has-this-name", "t", 1)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        with pytest.raises(roost.Error) as info:
            process.send("{broken", "t", 1)
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error) as info:
            await process.spawn("t:does_not_exist")
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        with pytest.raises(roost.Error) as info:
            await process.spawn("no-colon")
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error) as info:
            await process.spawn("t:double")  # an activity is not a process
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error) as info:
            process.listen("@events")
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_send_to_dead_pid_is_not_found():
    async with roost.open_node(app):
        pid = await process.spawn("t:adder", 1, 2)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(roost.Error) as info:
            process.send(pid, "t", 1)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_calls_outside_a_process_are_invalid_state():
    with pytest.raises(roost.Error) as info:
        process.pid()
    assert info.value.kind is roost.ErrorKind.INVALID_STATE


async def test_start_messages_come_first_with_spawner_as_sender():
    async with roost.open_node(app) as node:
        spawner = process.with_options().with_message("m", "first").with_message("m", "second")
        pid = await spawner.spawn("t:collector", "m", 3)
        process.send(pid, "m", "third")
        process.monitor(pid)
        ev = await process.events().receive()
        assert [m.payload for m in ev.value] == ["first", "second", "third"]
        assert {m.sender for m in ev.value} == {node.pid}


async def test_spawner_is_immutable():
    base = process.with_options(mailbox_limit=5)
    named = base.with_name("a")
    assert base.name is None and named.name == "a"
    assert base.with_message("t").messages == (("t", None),)
    assert base.messages == ()


async def test_with_name_is_spawn_or_signal():
    async with roost.open_node(app):
        spawner = process.with_options().with_name("collector-1").with_message("m", "hello")
        first = await spawner.spawn("t:collector", "m", 2)
        second = await spawner.spawn("t:collector", "m", 2)  # input ignored, message delivered
        assert first == second
        assert process.registry.lookup("collector-1") == first
        process.monitor(first)
        ev = await process.events().receive()
        assert [m.payload for m in ev.value] == ["hello", "hello"]


async def test_spawn_or_signal_race_spawns_one(autojump_clock):
    pids = []

    async def racer():
        pids.append(await process.with_options().with_name("solo").spawn("t:waiter"))

    async with roost.open_node(app):
        async with trio.open_nursery() as n:
            for _ in range(5):
                n.start_soon(racer)
        # Plain trio tasks inherit the attached process, as code in the open_node block.
        assert len(set(pids)) == 1


async def test_with_context_is_inherited_by_children():
    async with roost.open_node(app):
        result = await process.with_context({"tenant": "acme"}).exec("t:context_reader")
        assert result == {"mine": {"tenant": "acme"}, "child": "acme"}
        assert await process.exec("t:context_child") == "none"
        assert ctx.get("tenant", "dflt") == "dflt"


async def test_unknown_spawn_options_are_invalid():
    with pytest.raises(roost.Error) as info:
        process.with_options(colour="blue")
    assert info.value.kind is roost.ErrorKind.INVALID
    spawner = process.with_options({"workflow.id": "abc"})
    assert spawner.options == {"id": "abc"}
    async with roost.open_node(app):
        with pytest.raises(roost.Error) as info:
            await spawner.spawn("t:waiter")  # a workflow option on a plain process
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error):
            await process.with_options(mailbox_limit=0).spawn("t:waiter")


async def test_mailbox_limit_refuses_instead_of_dropping(autojump_clock):
    async with roost.open_node(app):
        pid = await process.with_options(mailbox_limit=2).spawn("t:collector", "never", 1)
        process.send(pid, "a", 1)
        process.send(pid, "a", 2)
        with pytest.raises(roost.Error) as info:
            process.send(pid, "a", 3)
        assert info.value.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert info.value.pid == pid


async def test_start_messages_are_all_or_nothing(autojump_clock):
    async with roost.open_node(app) as node:
        spawner = process.with_options(mailbox_limit=1, name="tiny")
        spawner = spawner.with_message("m", 1).with_message("m", 2)
        # A new process takes all its start messages, even past its limit.
        pid = await spawner.spawn("t:collector", "m", 2)
        before = node.process_count()
        # The name is taken: spawn-or-signal would overflow the mailbox, so nothing is
        # delivered and nothing else changes.
        with pytest.raises(roost.Error) as info:
            await spawner.spawn("t:collector", "m", 2)
        assert info.value.kind is roost.ErrorKind.LIMIT_EXCEEDED
        assert node.process_count() == before
        process.monitor(pid)
        ev = await process.events().receive()
        assert [m.payload for m in ev.value] == [1, 2]


async def test_process_id_is_the_entry():
    async with roost.open_node(app):
        assert await process.exec("t:entry_id_reader") == "t:entry_id_reader"
        assert process.id() is None


async def test_funcs_call_runs_activities_directly():
    async with roost.open_node(app):
        assert await funcs.call("t:double", 21) == 42
        assert await funcs.call(async_double, 4) == 8
        with pytest.raises(roost.Error) as info:
            await funcs.call("t:broken_activity")
        assert info.value.kind is roost.ErrorKind.INTERNAL
        assert "activity failed" in info.value.message
        with pytest.raises(roost.Error) as info:
            await funcs.call("t:adder", 1, 2)
        assert info.value.kind is roost.ErrorKind.INVALID


@app.process
async def coro_user(n):
    results = channel.new(n)

    async def work(i):
        await roost.sleep(0.01 * (n - i))
        await results.send(i)

    for i in range(n):
        coroutine.spawn(work, i)
    return sorted([await results.receive() for _ in range(n)])


@app.process
async def coro_failer():
    async def bad():
        raise KeyError("in coroutine")

    coroutine.spawn(bad)
    await process.inbox().receive()


@app.process
async def coro_leaver():
    async def forever():
        log.append(process.pid())
        try:
            await trio.sleep_forever()
        finally:
            log.append("coroutine cancelled")

    coroutine.spawn(forever)
    await trio.lowlevel.checkpoint()
    return "main done"


async def test_coroutines_share_the_process(autojump_clock):
    async with roost.open_node(app):
        assert await process.exec("t:coro_user", 4) == [0, 1, 2, 3]
        with pytest.raises(roost.Error) as info:
            await process.exec("t:coro_failer")
        assert "in coroutine" in info.value.message
        log.clear()
        assert await process.exec("t:coro_leaver") == "main done"
        await trio.testing.wait_all_tasks_blocked()
        assert log[1:] == ["coroutine cancelled"]
        assert isinstance(log[0], roost.Pid)


@app.process
async def upgrader(generation):
    if generation < 3:
        process.registry.register(f"gen{generation}")
        await process.upgrade(None, generation + 1)
    return (generation, process.pid())


@app.process
async def upgrade_to_other():
    await process.upgrade("t:adder", 1, 2)


async def test_upgrade_keeps_the_pid_and_swaps_code():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("t:upgrader", 0)
        ev = await process.events().receive()
        assert ev.value == (3, pid)
        assert await process.exec("t:upgrade_to_other") == 3
        with pytest.raises(roost.Error):
            await process.upgrade("t:double")


async def test_now_follows_the_node_clock(autojump_clock):
    async with roost.open_node(app):
        before = roost.now()
        assert before.tzinfo is not None
        await roost.sleep("1h")
        assert (roost.now() - before).total_seconds() == pytest.approx(3600)
        assert roost.uuid4() != roost.uuid4()
        assert roost.uuid7().version == 7
        assert len(roost.random_bytes(8)) == 8
        assert 0 <= roost.random().random() < 1


async def test_uuid7_is_time_ordered(autojump_clock):
    ids = []
    for _ in range(5):
        ids.append(roost.uuid7())
        await trio.sleep(0.002)
    # Different milliseconds on the real clock are not guaranteed under MockClock, so
    # check the layout: version 7, RFC 9562 variant, and the timestamp prefix ordering.
    assert all(u.version == 7 and u.variant == "specified in RFC 4122" for u in ids)
    assert [u.int >> 80 for u in ids] == sorted(u.int >> 80 for u in ids)


async def test_after_and_ticker(autojump_clock):
    async with roost.open_node(app):
        start = trio.current_time()
        got = await channel.select(process.inbox().case_receive(), roost.after("2s"))
        assert got.index == 1
        assert trio.current_time() - start == pytest.approx(2)
        tick = roost.ticker("1s")
        times = []
        for _ in range(3):
            await tick.receive()
            times.append(trio.current_time() - start)
        assert times == pytest.approx([3, 4, 5])
        with pytest.raises(roost.Error):
            roost.ticker(0)
