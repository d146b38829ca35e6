"""What a driver keeps between activations, and what a step allocates, through workflow code."""

import contextvars
import logging

import pytest
from workflow_sim import T0, Sim, make_driver, replay

import roost
from roost import funcs, process, workflow
from roost.workflow import _driver
from roost.workflow._driver import Status
from roost.workflow._history import ActivityResolved, MessageArrived, Started


def _fail():
    raise roost.Error("declined", kind=roost.ErrorKind.INVALID, retryable=False)


ACTIVITIES = {"t:double": lambda x: x * 2, "t:fail": _fail}

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("test_driver_memory", default="unset")


async def keeps_a_contextvar():
    VAR.set("set in activation 1")
    await funcs.call("t:double", 1)  # activation 2 resumes here
    seen = [VAR.get()]
    await roost.sleep("1s")  # and activation 3 here
    seen.append(VAR.get())
    return seen


def test_a_contextvar_set_in_one_activation_is_seen_in_the_next_and_after_replay():
    sim = Sim(keeps_a_contextvar, activities=ACTIVITIES)
    assert sim.run().result == ["set in activation 1"] * 2
    assert len(sim.history) == 3
    # Rebuilt after the first activation (the code runs again from the start, so the
    # variable is set again before the next activation resumes it).
    rebuilt = Sim(keeps_a_contextvar, activities=ACTIVITIES)
    assert rebuilt.run(crash_at=1).result == ["set in activation 1"] * 2
    assert replay(keeps_a_contextvar, sim.history).result == ["set in activation 1"] * 2
    assert VAR.get() == "unset"  # workflow code never sets the caller's context


async def uses_every_kind_of_wait():
    ticks = roost.ticker("1s")
    await ticks.receive()
    ticks.close()
    await roost.after("1s").receive()
    assert workflow.version("change", -1, 1) == 1
    return await funcs.call("t:double", 21)


def test_drivers_make_their_dicts_on_first_write_and_the_shared_empty_stays_empty():
    idle = make_driver(uses_every_kind_of_wait, roost.Pid("local", "t:workflows", "wf-1"))
    for name in ("_calls", "_child_waits", "_pending", "_timers", "_tickers", "_versions"):
        assert getattr(idle, name) is _driver._NONE
    driver = Sim(uses_every_kind_of_wait, activities=ACTIVITIES).run()
    assert driver.result == 42
    for name in ("_pending", "_timers", "_tickers", "_versions"):
        assert getattr(driver, name) is not _driver._NONE
    assert driver._versions == {"change": 1}
    assert len(_driver._NONE) == 0
    with pytest.raises(TypeError, match="read-only"):
        _driver._NONE[1] = "leak"
    with pytest.raises(TypeError, match="read-only"):
        _driver._NONE.update({1: "leak"})
    with pytest.raises(TypeError, match="read-only"):
        _driver._NONE.setdefault(1, "leak")
    shared = _driver._NONE
    with pytest.raises(TypeError, match="read-only"):
        shared |= {1: "leak"}
    assert len(_driver._NONE) == 0


async def awaits_the_handle_twice():
    handle = funcs.start("t:double", 4)
    first = await handle
    assert handle.done
    second = await handle  # resolved: returns at once, without a step
    failing = funcs.start("t:fail")
    errors = []
    for _ in range(2):
        try:
            await failing
        except roost.Error as exc:
            errors.append(exc)
    return [first, second, errors[0] is not errors[1], [e.message for e in errors]]


def test_an_activity_handle_awaited_twice_gives_its_outcome_both_times():
    sim = Sim(awaits_the_handle_twice, activities=ACTIVITIES)
    assert sim.run().result == [8, 8, True, ["declined", "declined"]]
    assert replay(awaits_the_handle_twice, sim.history).result == sim.driver.result


async def sends_as_it_is_discarded():
    try:
        await funcs.call("t:double", 1)
    finally:
        process.send(roost.Pid("local", "t:workflows", "other"), "bye", 1)


def test_a_command_issued_while_the_driver_discards_a_coroutine_is_dropped(caplog):
    driver = make_driver(sends_as_it_is_discarded, roost.Pid("local", "t:workflows", "wf-1"))
    started = Started(workflow_id="wf-1", run_id="r-1", workflow_type="t:wf", args=[], seed=1)
    commands = driver.activate(T0, [started])
    assert [type(c).__name__ for c in commands] == ["ScheduleActivity"]
    with caplog.at_level(logging.WARNING, logger="roost.workflow"):
        driver.close()  # the ``finally`` sends: no activation takes it, nothing raises
    assert caplog.records == []
    assert len(_driver._BETWEEN_ACTIVATIONS) == 0  # the shared list keeps nothing
    with pytest.raises(TypeError):
        _driver._BETWEEN_ACTIVATIONS.extend([1])
    dropped = _driver._BETWEEN_ACTIVATIONS
    with pytest.raises(TypeError):
        dropped += [1]
    with pytest.raises(TypeError):
        dropped[:0] = [1]
    assert len(_driver._BETWEEN_ACTIVATIONS) == 0
    # The next activation of a (rebuilt) driver starts from an empty command list.
    again = make_driver(sends_as_it_is_discarded, roost.Pid("local", "t:workflows", "wf-1"))
    again.activate(T0, [started])
    last = again.activate(T0, [ActivityResolved(seq=1, value=2)])
    assert [type(c).__name__ for c in last] == ["SendMessage", "Complete"]
    assert again.status == Status.COMPLETED


async def parks_on_a_signal_then_an_activity():
    await process.listen("go").receive()
    return await funcs.call("t:double", 2)


def _await_chain(coro):
    chain = []
    while coro is not None:
        chain.append(type(coro).__name__)
        coro = getattr(coro, "cr_await", None)
    return chain


def test_a_parked_workflow_holds_its_frames_and_one_waiting_object():
    driver = make_driver(parks_on_a_signal_then_an_activity, roost.Pid("local", "t:wf", "w"))
    started = Started(workflow_id="w", run_id="r", workflow_type="t:wf", args=[], seed=1)
    driver.activate(T0, [started])
    (task,) = driver._tasks
    # The workflow's coroutine, the channel's receive, and the waiter itself: no Park
    # object or generator between them.
    assert _await_chain(task.coro) == ["coroutine", "coroutine", "DriverWaiter"]
    commands = driver.activate(T0, [MessageArrived(topic="go", payload=1, sender=None)])
    (schedule,) = commands
    # funcs.call awaits the activity's handle, which is the future its result resolves.
    assert _await_chain(task.coro) == ["coroutine", "coroutine", "WorkflowActivity"]
    assert task.coro.cr_await.cr_await is driver._pending[schedule.seq]
    last = driver.activate(T0, [ActivityResolved(seq=schedule.seq, value=4)])
    assert [type(c).__name__ for c in last] == ["Complete"]
    assert driver.result == 4
