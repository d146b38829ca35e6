"""Workflows talking to each other: process.call, names, cancel/terminate, close policies."""

import pytest
import trio.testing

import roost
from roost import channel, process
from roost.testing import Replayer

app = roost.App("msg")


@app.workflow
async def counter():
    """The seed's counter: ack, then ok with the new total; nak for bad input."""
    count = 0
    inbox = process.inbox()
    while True:
        msg = await inbox.receive()
        match msg.topic, msg.payload:
            case "add", int(n):
                process.send(msg.sender, "ack")
                count += n
                process.send(msg.sender, "ok", count)
            case "add", _:
                process.send(msg.sender, "nak", "add takes an int")
            case "stop", _:
                process.send(msg.sender, "ok", count)
                return count


@app.process
async def doubler():
    async for msg in process.inbox():
        process.send(msg.sender, "ok", msg.payload * 2)


@app.process
async def mute():
    await process.inbox().receive()
    await roost.sleep("1d")


@app.workflow
async def caller(target, helper):
    """Calls a workflow (concurrently), a plain process, and something that never answers."""
    results = channel.new(3)

    async def add(n):
        await results.send(await process.call(target, "add", n))

    for n in (1, 2, 3):
        roost.coroutine.spawn(add, n)
    totals = sorted([await results.receive() for _ in range(3)])
    try:
        await process.call(target, "add", "x")
    except roost.Error as err:
        nak = (err.kind, err.details["reason"])
    doubled = await process.call(helper, "double", 21)
    silent = await process.spawn("msg:mute")
    before = roost.now()
    try:
        await process.call(silent, "hello", timeout="30s")
    except roost.Error as err:
        timeout = (err.kind, (roost.now() - before).total_seconds())
    final = await process.call(target, "stop", None)
    return {
        "totals": totals,
        "nak": nak,
        "doubled": doubled,
        "timeout": timeout,
        "final": final,
    }


async def test_process_call_from_a_workflow(autojump_clock):
    async with roost.open_node(app) as node:
        target = await process.with_options(id="counter-1").spawn("msg:counter")
        helper = await process.spawn("msg:doubler")
        result = await process.with_options(id="caller-1").exec("msg:caller", target, helper)
        assert result["totals"][-1] == 6 and len(set(result["totals"])) == 3
        assert result["nak"] == [roost.ErrorKind.CONFLICT, "add takes an int"]
        assert result["doubled"] == 42
        assert result["timeout"] == [roost.ErrorKind.TIMEOUT, 30.0]
        assert result["final"] == 6
        # The calls are recorded: replay gives the same result, replies included.
        assert Replayer(app).replay(node.history("caller-1")) == result
        assert Replayer(app).replay(node.history("counter-1")) == 6


async def test_process_call_from_a_workflow_survives_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        target = await process.with_options(id="counter-r").spawn("msg:counter")
        helper = await process.spawn("msg:doubler")
        await process.with_options(id="caller-r").spawn("msg:caller", target, helper)
        await roost.sleep(10)  # in the middle of the 30 s timeout wait
    async with roost.open_node(app, tmp_path) as node:
        process.monitor("{msg:workflows|caller-r}")
        # doubler was a plain process: it is gone, but its reply is in the history
        exit_event = await process.events().receive()
        assert exit_event.error is None, exit_event.error
        assert exit_event.value["doubled"] == 42
        assert exit_event.value["final"] == 6
        assert node.describe("caller-r")["status"] == "completed"


@app.workflow
async def named_listener(n):
    got = []
    inbox = process.listen("note")
    while len(got) < n:
        got.append(await inbox.receive())
    return got


@app.workflow
async def name_sender(name):
    process.send(name, "note", "from a workflow")
    return "sent"


async def test_workflows_are_reachable_by_registered_name(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        pid = await process.with_options().with_name("inventory").spawn("msg:named_listener", 3)
        assert pid.id == "inventory"
        assert process.registry.lookup("inventory") == pid
        await process.send("inventory", "note", "from a process")
        assert await process.exec("msg:name_sender", "inventory") == "sent"
        # A plain process cannot take a name a workflow holds.
        with pytest.raises(roost.Error) as info:
            await process.with_options().with_name("inventory").spawn("msg:mute")
        assert info.value.kind is roost.ErrorKind.ALREADY_EXISTS
    async with roost.open_node(app, tmp_path):  # the name comes back with the run
        assert process.registry.lookup("inventory") == pid
        process.monitor("inventory")
        await process.send("inventory", "note", "after the restart")
        event = await process.events().receive()
        assert event.value == ["from a process", "from a workflow", "after the restart"]
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(roost.Error) as info:  # released when the workflow closed
            process.registry.lookup("inventory")
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_registry_register_names_a_running_workflow(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn("msg:named_listener", 1)
        assert process.registry.register("listener", pid)
        await process.send("listener", "note", "hi")
        process.monitor(pid)
        assert (await process.events().receive()).value == ["hi"]
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(roost.Error):
            process.registry.lookup("listener")
        with pytest.raises(roost.Error) as info:  # a closed workflow cannot take a name
            process.registry.register("listener", pid)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


@app.workflow
async def waits_for_cancel():
    event = await process.events().receive()
    return f"cancelled: {event.reason}"


@app.process
async def obeys():
    event = await process.events().receive()
    return f"cancelled: {event.reason}"


@app.workflow
async def stopper(mode):
    victim_wf = await process.spawn("msg:waits_for_cancel")
    victim_proc = await process.spawn("msg:obeys")
    await roost.sleep(1)
    if mode == "cancel":
        process.cancel(victim_wf, "enough")
        process.cancel(victim_proc, "enough")
    else:
        process.terminate(victim_wf)
        process.terminate(victim_proc)
    exits = {}
    events = process.events()
    while len(exits) < 2:
        event = await events.receive()
        exits[str(event.pid)] = (event.value, event.error.kind if event.error else None)
    process.cancel("{msg:workflows|no-such-workflow}")  # logged, never raised
    return [exits[str(victim_wf)], exits[str(victim_proc)]]


async def test_cancel_and_terminate_from_inside_a_workflow(autojump_clock):
    async with roost.open_node(app) as node:
        cancelled = await process.with_options(id="stop-c").exec("msg:stopper", "cancel")
        assert cancelled == [["cancelled: enough", None]] * 2
        terminated = await process.with_options(id="stop-t").exec("msg:stopper", "terminate")
        assert terminated == [[None, roost.ErrorKind.CANCELED], [None, roost.ErrorKind.CANCELED]]
        assert Replayer(app).replay(node.history("stop-t")) == terminated


@app.workflow
async def sleeper_child():
    await roost.sleep("1d")
    return "woke"


@app.workflow
async def continuing_parent(round_):
    if round_ == 0:
        await process.with_options(id="kid-term").spawn("msg:sleeper_child")
        await process.with_options(id="kid-keep", parent_close_policy="abandon").spawn(
            "msg:sleeper_child"
        )
        await process.with_options(id="kid-cancel", parent_close_policy="request_cancel").spawn(
            "msg:waits_for_cancel"
        )
        await roost.sleep(1)
        await process.upgrade(None, 1)
    await roost.sleep("2d")  # longer than the abandoned child lives
    events = []
    while True:  # nothing from the old run's children reaches the new run
        got = await channel.select(process.events().case_receive(), default=True)
        if got.default:
            return events
        events.append(str(got.value.pid))


async def test_continue_as_new_applies_parent_close_policies(autojump_clock):
    async with roost.open_node(app) as node:
        result = await process.with_options(id="can-parent").exec("msg:continuing_parent", 0)
        assert result == []
        assert node.describe("kid-term")["status"] == "terminated"
        assert (
            node.describe("kid-cancel")["result"]
            == "cancelled: parent {msg:workflows|can-parent} closed"
        )
        assert node.describe("kid-keep")["status"] == "completed"
        assert node.describe("kid-keep")["result"] == "woke"


@app.workflow
async def twins():
    await process.with_options(id="twin").spawn("msg:sleeper_child")
    await process.with_options(id="twin").spawn("msg:sleeper_child")  # same id, same step
    event = await process.events().receive()
    return [str(event.pid), event.error.kind if event.error else None]


async def test_a_second_child_with_one_id_in_one_step_is_refused(autojump_clock):
    async with roost.open_node(app) as node:
        result = await process.with_options(id="twins").exec("msg:twins")
        assert result == ["{msg:workflows|twin}", roost.ErrorKind.ALREADY_EXISTS]
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("twin")["status"] == "terminated"  # the first, by its policy
        assert Replayer(app).replay(node.history("twins")) == result
