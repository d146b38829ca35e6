"""Channels and select, on plain trio tasks (the default backend)."""

import pytest
import trio
import trio.testing

import roost
from roost import channel


async def test_unbuffered_send_waits_for_a_receiver():
    ch = channel.new()
    sent = []

    async def sender():
        await ch.send(1)
        sent.append(1)

    async with trio.open_nursery() as n:
        n.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []  # rendezvous: nobody received yet
        assert await ch.receive() == 1
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [1]


async def test_buffered_channel_holds_values_until_full():
    ch = channel.new(2)
    await ch.send("a")
    await ch.send("b")
    assert len(ch) == 2
    with trio.testing.assert_checkpoints():
        assert await ch.receive() == "a"
    blocked = True

    async def third():
        nonlocal blocked
        await ch.send("c")
        await ch.send("d")  # buffer is full again: blocks
        blocked = False

    async with trio.open_nursery() as n:
        n.start_soon(third)
        await trio.testing.wait_all_tasks_blocked()
        assert blocked
        assert [await ch.receive() for _ in range(3)] == ["b", "c", "d"]


async def test_close_keeps_buffered_values_then_raises():
    ch = channel.new(3)
    await ch.send(1)
    await ch.send(2)
    ch.close()
    ch.close()  # a second close is a no-op
    assert await ch.receive() == 1
    assert await ch.receive() == 2
    with pytest.raises(roost.ChannelClosed):
        await ch.receive()
    with pytest.raises(roost.ChannelClosed):
        await ch.send(3)


async def test_close_wakes_blocked_receivers_and_senders():
    rx, tx = channel.new(), channel.new()
    outcomes = []

    async def receiver():
        try:
            await rx.receive()
        except roost.ChannelClosed:
            outcomes.append("receiver saw close")

    async def sender():
        try:
            await tx.send(1)
        except roost.ChannelClosed:
            outcomes.append("sender saw close")

    async with trio.open_nursery() as n:
        n.start_soon(receiver)
        n.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        rx.close()
        tx.close()
    assert sorted(outcomes) == ["receiver saw close", "sender saw close"]


async def test_async_for_stops_at_close():
    ch = channel.new(5)
    for i in range(3):
        await ch.send(i)
    ch.close()
    assert [v async for v in ch] == [0, 1, 2]


async def test_select_picks_first_ready_case_in_argument_order():
    a, b, c = channel.new(1), channel.new(1), channel.new(1)
    await b.send("b")
    await c.send("c")
    got = await channel.select(a.case_receive(), c.case_receive(), b.case_receive())
    assert (got.channel, got.value, got.ok, got.index) == (c, "c", True, 1)
    got = await channel.select(a, b)  # a bare channel means receive
    assert (got.channel, got.value) == (b, "b")


async def test_select_default_when_nothing_ready():
    a = channel.new()
    got = await channel.select(a.case_receive(), default=True)
    assert got.default and got.ok and got.channel is None


async def test_select_receive_on_closed_channel_is_ready_with_ok_false():
    a, b = channel.new(), channel.new(1)
    await b.send("later")
    a.close()
    got = await channel.select(a.case_receive(), b.case_receive())
    assert got.channel is a
    assert got.ok is False
    assert got.value is None


async def test_select_send_case_hands_off_to_waiting_receiver():
    out = channel.new()
    received = []

    async def reader():
        received.append(await out.receive())

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        got = await channel.select(out.case_send("hello"), channel.new().case_receive())
        assert got.channel is out and got.index == 0
    assert received == ["hello"]


async def test_blocked_select_wakes_on_any_case_and_leaves_no_waiters():
    a, b = channel.new(), channel.new()
    results = []

    async def selector():
        results.append(await channel.select(a, b))

    async with trio.open_nursery() as n:
        n.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        await b.send("from b")
    assert results[0].channel is b and results[0].value == "from b"
    # The losing case's waiter was removed: a later send on `a` must block, not vanish.
    with trio.move_on_after(0.01) as scope:
        await a.send("nobody")
    assert scope.cancelled_caught


async def test_cancelled_receive_loses_no_value():
    ch = channel.new()
    with trio.move_on_after(0.01):
        await ch.receive()
    got = []

    async def reader():
        got.append(await ch.receive())

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        await ch.send(42)
    assert got == [42]


async def test_select_with_no_cases_is_invalid():
    with pytest.raises(roost.Error) as info:
        await channel.select()
    assert info.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        await channel.select("not a case")


def test_bad_sizes_are_invalid():
    for size in (-1, 1.5, "3", True):
        with pytest.raises(roost.Error) as info:
            channel.new(size)
        assert info.value.kind is roost.ErrorKind.INVALID
