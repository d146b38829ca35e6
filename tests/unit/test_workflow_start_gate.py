"""The start gate: a cancelled wait holds no slot, and only a live wait is ever woken."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import roost
from roost.workflow._local._admission import StartGate


async def test_twice_cancelled_waiter_is_not_rescheduled_later(autojump_clock: Any) -> None:
    gate = StartGate(limit=1)
    await gate.enter()  # the one slot, held by "a start in flight"
    woke_early: list[bool] = []

    async def caller() -> None:
        for _ in range(2):  # a caller that gives up waiting, twice (a timeout, say)
            with trio.move_on_after(1):
                await gate.enter()
                raise AssertionError("no slot was free")
        # Then it waits on something else entirely.
        before = trio.current_time()
        await trio.sleep(100)
        woke_early.append(trio.current_time() - before < 100)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        await trio.sleep(5)  # both waits timed out
        gate.leave()  # the start in flight commits: hands its slot on
        await trio.sleep(200)
    assert woke_early == [False], "the cancelled waiter was rescheduled out of its sleep"
    assert gate.in_flight == 0, f"a slot leaked: {gate.in_flight} in flight, none running"


async def test_many_cancelled_waits_leak_no_slot(autojump_clock: Any) -> None:
    gate = StartGate(limit=2)
    await gate.enter()
    await gate.enter()
    for _ in range(5):  # the same task gives up five times before any slot comes back
        with trio.move_on_after(1):
            await gate.enter()
    assert gate.waiting == 0
    gate.leave()
    gate.leave()
    assert gate.in_flight == 0
    with trio.fail_after(1):  # both slots are free again: no wait
        await gate.enter()
        await gate.enter()
    assert gate.in_flight == 2


async def test_a_live_wait_behind_cancelled_ones_gets_the_slot(autojump_clock: Any) -> None:
    gate = StartGate(limit=1)
    await gate.enter()
    admitted: list[str] = []
    with trio.move_on_after(1):
        await gate.enter()  # a cancelled wait, first in line

    async def waits() -> None:
        await gate.enter()
        admitted.append("live")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waits)
        await trio.testing.wait_all_tasks_blocked()
        gate.leave()
    assert admitted == ["live"]
    assert gate.in_flight == 1


async def test_close_ends_waiting_starts_with_unavailable(autojump_clock: Any) -> None:
    gate = StartGate(limit=1)
    await gate.enter()
    errors: list[roost.Error] = []

    async def waits() -> None:
        with pytest.raises(roost.Error) as info:
            await gate.enter()
        errors.append(info.value)

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(waits)
        await trio.testing.wait_all_tasks_blocked()
        gate.close()
    assert [e.kind for e in errors] == [roost.ErrorKind.UNAVAILABLE] * 2
    with pytest.raises(roost.Error, match="stopping"):
        await gate.enter()  # a start after the close is refused at once
