"""The deterministic driver, through workflow code that uses roost's public calls."""

import datetime as dt
import gc
import inspect

import pytest
import trio
from workflow_sim import T0, Sim, replay

import roost
from roost import channel, coroutine, funcs, process, workflow
from roost.workflow._driver import Status
from roost.workflow._history import (
    CancelRequested,
    Complete,
    Fail,
    MessageArrived,
    ScheduleActivity,
    StartTimer,
)
from roost.workflow._local._replay import paused_gc

ACTIVITIES = {
    "t:charge": lambda amount: {"charged": amount},
    "t:ship": lambda order: f"shipped {order}",
    "t:double": lambda x: x * 2,
}


async def order_flow(order, amount):
    receipt = await funcs.call("t:charge", amount)
    await roost.sleep("1h")
    shipped = await funcs.call("t:ship", order)
    return {"receipt": receipt, "shipped": shipped, "at": roost.now()}


def test_activities_and_timers_run_in_activations():
    sim = Sim(order_flow, "o-1", 42, activities=ACTIVITIES)
    driver = sim.run()
    assert driver.status == Status.COMPLETED
    assert driver.result == {
        "receipt": {"charged": 42},
        "shipped": "shipped o-1",
        "at": T0 + dt.timedelta(hours=1),  # workflow time is the activation's time
    }
    kinds = [[type(c).__name__ for c in act.commands] for act in sim.history]
    assert kinds == [["ScheduleActivity"], ["StartTimer"], ["ScheduleActivity"], ["Complete"]]
    assert sim.history[1].commands == [StartTimer(seq=2, seconds=3600)]


def test_replay_reproduces_commands_and_result():
    sim = Sim(order_flow, "o-1", 42, activities=ACTIVITIES)
    live = sim.run()
    again = replay(order_flow, sim.history)
    assert again.status == Status.COMPLETED
    assert again.result == live.result


async def order_flow_changed(order, amount):
    await funcs.call("t:ship", order)  # a code change: ship before charging
    await funcs.call("t:charge", amount)
    return


def test_replay_of_changed_code_is_nondeterminism_with_location():
    sim = Sim(order_flow, "o-1", 42, activities=ACTIVITIES)
    sim.run()
    with pytest.raises(roost.NondeterminismError) as info:
        replay(order_flow_changed, sim.history)
    err = info.value
    assert err.details["issued"] == "#1 schedule activity 't:ship'"
    assert err.details["recorded"] == "#1 schedule activity 't:charge'"
    lines, first = inspect.getsourcelines(order_flow_changed)
    line = first + next(i for i, text in enumerate(lines) if '"t:ship"' in text)
    assert err.details["location"] == f"{__file__}:{line}"
    assert err.details["activation"] == 1


async def stops_early(order, amount):
    await funcs.call("t:charge", amount)
    return "done"


def test_replay_detects_missing_commands():
    sim = Sim(order_flow, "o-1", 42, activities=ACTIVITIES)
    sim.run()
    with pytest.raises(roost.NondeterminismError) as info:
        replay(stops_early, sim.history)
    assert "complete the workflow" in info.value.details["issued"]
    assert "start timer" in info.value.details["recorded"]


async def failing_activity_flow():
    try:
        await funcs.call("t:boom")
    except roost.Error as err:
        return (err.kind, err.message, err.retryable, err.details)
    return None


def test_activity_errors_arrive_with_kind_and_details():
    def boom():
        raise roost.Error(
            "card declined", kind=roost.ErrorKind.INVALID, retryable=False, details={"code": 51}
        )

    driver = Sim(failing_activity_flow, activities={"t:boom": boom}).run()
    assert driver.result == (roost.ErrorKind.INVALID, "card declined", False, {"code": 51})


async def signal_or_timeout():
    got = await channel.select(process.listen("approve").case_receive(), roost.after("10m"))
    return ("approved", got.value) if got.index == 0 else ("timed out", got.value)


def test_select_between_signal_and_durable_timer():
    approved = Sim(signal_or_timeout, signals=[(60, "approve", "bob")]).run()
    assert approved.result == ("approved", "bob")
    timed_out = Sim(signal_or_timeout, signals=[(3600, "approve", "late")]).run()
    assert timed_out.result == ("timed out", T0 + dt.timedelta(minutes=10))


async def waiting_select():
    a, b = process.listen("a"), process.listen("b")
    got = await channel.select(b, a)
    return got.value


async def late_select():
    a, b = process.listen("a"), process.listen("b")
    await roost.sleep(10)
    got = await channel.select(b, a)
    return got.value


def test_select_outcomes_follow_event_order_and_argument_order():
    both = [(5, "a", "A"), (5, "b", "B")]
    # Already waiting: the event applied first wins (Go semantics); recorded, so replay
    # feeds the same batch in the same order.
    sim = Sim(waiting_select, signals=both)
    assert sim.run().result == "A"
    assert replay(waiting_select, sim.history).result == "A"
    # Both ready when select polls: argument order decides.
    sim = Sim(late_select, signals=both)
    assert sim.run().result == "B"
    assert replay(late_select, sim.history).result == "B"


async def worker_pool(jobs, workers):
    todo, done = channel.new(), channel.new(len(jobs))

    async def worker(n):
        async for job in todo:
            await done.send((n, await funcs.call("t:double", job)))

    for n in range(workers):
        coroutine.spawn(worker, n)
    for job in jobs:
        await todo.send(job)
    todo.close()
    return sorted([await done.receive() for _ in jobs])


def test_coroutines_and_channels_replay_identically():
    sim = Sim(worker_pool, [1, 2, 3, 4, 5], 2, activities=ACTIVITIES)
    live = sim.run()
    assert sorted(v for _, v in live.result) == [2, 4, 6, 8, 10]
    assert {n for n, _ in live.result} == {0, 1}
    assert replay(worker_pool, sim.history).result == live.result


async def chance():
    return (roost.uuid4(), roost.uuid7(), roost.random_bytes(4), roost.random().random())


def test_randomness_is_seeded_from_the_history():
    first = Sim(chance, seed=1).run().result
    assert Sim(chance, seed=1).run().result == first
    assert Sim(chance, seed=2).run().result != first
    assert first[0].version == 4 and first[1].version == 7


async def uses_trio():
    await trio.sleep(1)


def test_awaiting_trio_inside_a_workflow_is_a_clear_error():
    driver = Sim(uses_trio).run()
    assert driver.status == Status.FAILED
    assert driver.error.kind is roost.ErrorKind.INVALID
    assert "roost.sleep instead of trio.sleep" in driver.error.message


async def sends_unencodable():
    await funcs.call("t:double", {1, 2})


def test_unencodable_arguments_fail_at_the_call_site():
    driver = Sim(sends_unencodable, activities=ACTIVITIES).run()
    assert driver.status == Status.FAILED
    assert driver.error.kind is roost.ErrorKind.INVALID
    assert "cannot encode object of type 'set'" in driver.error.message


async def waits_for_cancel():
    ev = await process.events().receive()
    return f"cancelled: {ev.reason}"


def test_cancel_request_arrives_as_an_event():
    sim = Sim(waits_for_cancel)
    sim._schedule(30, CancelRequested(reason="user asked"))
    assert sim.run().result == "cancelled: user asked"


async def replies(n):
    msg = await process.inbox().receive()
    await process.send(msg.sender, "reply", msg.payload * n)  # returns at once
    with pytest.raises(roost.Error) as info:
        process.monitor(msg.sender)
    return info.value.kind


def test_messages_in_and_out_and_forbidden_calls():
    sim = Sim(replies, 3)
    caller = roost.Pid("local", "t:processes", "1.00001")
    sim._schedule(1, MessageArrived(topic="ask", payload=14, sender=caller))
    driver = sim.run()
    assert driver.result is roost.ErrorKind.INVALID  # monitor is refused inside workflows
    (sent,) = sim.sent
    assert (sent.dest, sent.topic, sent.payload) == (caller, "reply", 42)


async def raises():
    raise KeyError("oops")


def test_workflow_errors_become_fail_commands():
    sim = Sim(raises)
    driver = sim.run()
    assert driver.status == Status.FAILED
    (cmd,) = sim.history[0].commands
    assert isinstance(cmd, Fail) and cmd.error.kind is roost.ErrorKind.INTERNAL


def test_history_length_counts_events_and_commands():
    sim = Sim(order_flow, "o-1", 1, activities=ACTIVITIES)
    driver = sim.run()
    assert driver.history_length == sum(len(a.events) + len(a.commands) for a in sim.history)
    assert isinstance(sim.history[-1].commands[-1], Complete)
    assert isinstance(sim.history[0].commands[0], ScheduleActivity)


class _ForeignFuture:
    def __await__(self):
        yield "a foreign event loop's future"


async def awaits_foreign():
    try:
        await _ForeignFuture()
    except roost.Error as err:
        return err.kind, "foreign awaitable" in err.message, err.details["awaited"]
    return None


def test_a_foreign_awaitable_is_thrown_back_as_invalid():
    kind, explained, awaited = Sim(awaits_foreign).run().result
    assert kind is roost.ErrorKind.INVALID
    assert explained
    assert awaited == "str"


async def ticks(n):
    tick = roost.ticker("10m")
    return [(await tick.receive()).isoformat() for _ in range(n)]


def test_durable_ticker_replays():
    sim = Sim(ticks, 3)
    driver = sim.run()
    minutes = [10, 20, 30]
    assert driver.result == [(T0 + dt.timedelta(minutes=m)).isoformat() for m in minutes]
    assert replay(ticks, sim.history).result == driver.result


async def versioned_v1():
    return await funcs.call("t:charge", 1)


async def versioned_v2():
    if workflow.version("add-fraud-check", -1, 1) == 1:
        await funcs.call("t:double", 2)
    return await funcs.call("t:charge", 1)


async def versioned_v3():  # support for runs that predate the change dropped
    workflow.version("add-fraud-check", 1, 1)
    await funcs.call("t:double", 2)
    return await funcs.call("t:charge", 1)


def test_versioning_keeps_old_runs_on_the_old_path():
    old = Sim(versioned_v1, activities=ACTIVITIES)
    old.run()
    # Replaying an old history with the new code: version() returns -1, the old path.
    assert replay(versioned_v2, old.history).result == {"charged": 1}
    new = Sim(versioned_v2, activities=ACTIVITIES)
    new.run()
    assert [type(c).__name__ for c in new.history[0].commands] == [
        "VersionMarker",
        "ScheduleActivity",
    ]
    assert replay(versioned_v2, new.history).result == {"charged": 1}
    assert replay(versioned_v3, new.history).result == {"charged": 1}
    with pytest.raises(roost.NondeterminismError) as info:
        replay(versioned_v3, old.history)  # an old run under code that dropped it
    assert "outside the supported range 1..1" in info.value.message
    assert workflow.version("x", 1, 3) == 3  # outside a workflow: max_supported
    with pytest.raises(roost.Error):
        workflow.version("x", 3, 1)


async def uses_asyncio():
    import asyncio  # noqa: PLC0415 - the point of the test

    await asyncio.sleep(1)


def test_asyncio_inside_a_workflow_gets_the_same_advice():
    driver = Sim(uses_asyncio).run()
    assert driver.status == Status.FAILED
    assert driver.error.kind is roost.ErrorKind.INVALID
    assert "asyncio" in driver.error.message
    assert "roost.sleep instead of trio.sleep" in driver.error.message


def test_replay_pauses_the_collector_and_restores_what_the_application_set():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), paused_gc():  # a replay that fails (divergence, ...)
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # the application turned it off: it stays off
    finally:
        gc.enable()


async def calls_with_and_without_options(x):
    a = await funcs.call("t:double", x)
    b = await funcs.new().with_options(start_to_close_timeout="5s").call("t:double", a)
    return await funcs.call("t:double", b)


def test_an_activity_called_without_options_records_the_defaults_in_its_own_dict():
    sim = Sim(calls_with_and_without_options, 1, activities=ACTIVITIES)
    driver = sim.run()
    assert driver.status == Status.COMPLETED
    assert driver.result == 8
    first, second, third = (act.commands[0] for act in sim.history[:3])
    assert first.options == third.options == {"start_to_close_timeout": 600.0}
    assert second.options == {"start_to_close_timeout": 5.0}
    # Each command owns its options: what one step's planning does with them stays its own.
    assert first.options is not third.options
    first.options["start_to_close_timeout"] = 1.0
    assert third.options == {"start_to_close_timeout": 600.0}
