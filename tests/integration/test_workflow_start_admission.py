"""A burst of concurrent starts holds at most ``START_LIMIT`` of them in flight at once.

Past the limit a start waits before it builds anything (no run, no encoded start), and
goes on, in arrival order, as an earlier one commits; every start still returns its run.
"""

import pytest
import trio

import roost
from roost import funcs, process, workflow
from roost.workflow._local import _admission, _starting
from roost.workflow._local._admission import StartGate

app = roost.App("admission")


@app.activity
async def step(x):
    return x + 1


@app.workflow
async def one_step(x):
    return await funcs.call(step, x)


async def test_a_burst_of_starts_is_admitted_a_few_at_a_time(autojump_clock, monkeypatch):
    building: list[int] = []  # the input of each run built
    open_starts = [0, 0]  # starts built and not yet returned to their caller; the most seen
    real_new_run = _starting.new_run

    def counting_new_run(**kwargs):
        building.append(kwargs["args"][0])
        open_starts[0] += 1
        open_starts[1] = max(open_starts[1], open_starts[0])
        return real_new_run(**kwargs)

    monkeypatch.setattr(_starting, "new_run", counting_new_run)
    monkeypatch.setattr(_admission, "START_LIMIT", 3)  # the node's gate admits 3 at a time
    async with roost.open_node(app):
        events = process.events()

        async def start(i: int) -> None:
            await process.spawn_monitored(one_step, i)
            open_starts[0] -= 1

        async with trio.open_nursery() as nursery:
            for i in range(10):
                nursery.start_soon(start, i)
        results = sorted([(await events.receive()).value for _ in range(10)])
    assert results == list(range(1, 11))
    assert open_starts[1] == 3  # without the gate: all 10 at once
    assert sorted(building) == list(range(10))


async def test_a_start_cancelled_while_waiting_takes_no_slot(autojump_clock):
    gate = StartGate(1)
    await gate.enter()
    with trio.move_on_after(1):
        await gate.enter()  # waits: the one slot is taken
        pytest.fail("a second start was admitted past the limit")
    gate.leave()
    assert gate.in_flight == 0  # the cancelled waiter did not keep a slot
    await gate.enter()
    assert gate.in_flight == 1


async def test_a_slot_given_back_goes_to_the_longest_waiting_start(autojump_clock):
    gate = StartGate(1)
    await gate.enter()
    admitted: list[int] = []

    async def wait_for_slot(i: int) -> None:
        await gate.enter()
        admitted.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(wait_for_slot, i)
            await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            gate.leave()
            await trio.testing.wait_all_tasks_blocked()
    assert admitted == [0, 1, 2]
    assert gate.in_flight == 1  # the last one holds its slot


@app.workflow
async def parent_of_one(x):
    await process.listen("go").receive()
    return await workflow.exec(one_step, x)


async def test_a_start_waiting_at_the_gate_ends_when_the_node_stops(autojump_clock, monkeypatch):
    monkeypatch.setattr(_admission, "START_LIMIT", 1)
    outcomes: list[object] = []

    async def starter() -> None:
        try:
            await process.spawn(one_step, 1)
        except roost.Error as err:
            outcomes.append(err.kind)
        else:
            outcomes.append("started")

    with trio.fail_after(60):  # without the close this waits forever
        async with trio.open_nursery() as nursery, roost.open_node(app) as node:
            gate = node._node.local_workflows.start_gate
            await gate.enter()  # every slot taken: the next start waits
            nursery.start_soon(starter)
            await trio.testing.wait_all_tasks_blocked()
            assert gate.waiting == 1
    assert outcomes == [roost.ErrorKind.UNAVAILABLE]


async def test_the_runtimes_own_starts_do_not_pass_the_gate(autojump_clock, monkeypatch):
    monkeypatch.setattr(_admission, "START_LIMIT", 1)
    async with roost.open_node(app) as node:
        pid = await process.spawn_monitored(parent_of_one, 5)
        events = process.events()
        gate = node._node.local_workflows.start_gate
        await gate.enter()  # every slot taken by a caller's start in flight
        await process.send(pid, "go", None)
        with trio.fail_after(60):
            exit_event = await events.receive()  # its child started and ran all the same
    assert exit_event.value == 6
    assert gate.in_flight == 1
