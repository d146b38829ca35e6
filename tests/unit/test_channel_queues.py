"""Receive queues: one waiting receiver is kept bare, more become a list; order is FIFO.

These pin down the queue shapes the channel code switches between (None, one entry, a
list) and that waiters which stop waiting (cancelled, or a select won elsewhere) are
skipped or removed, whatever the shape.
"""

import pytest
import trio
import trio.testing

import roost
from roost import channel, process


async def _receivers(ch, n, got, nursery):
    async def receive(tag):
        got.append((tag, await ch.receive()))

    for tag in range(n):
        nursery.start_soon(receive, tag)
        await trio.testing.wait_all_tasks_blocked()


async def test_one_receiver_is_queued_bare_and_leaves_no_queue_behind():
    ch = channel.new()
    got = []
    async with trio.open_nursery() as nursery:
        await _receivers(ch, 1, got, nursery)
        assert ch._recvq is not None and not isinstance(ch._recvq, list)
        await ch.send("a")
    assert got == [(0, "a")]
    assert ch._recvq is None


async def test_several_receivers_are_served_in_arrival_order():
    ch = channel.new()
    got = []
    async with trio.open_nursery() as nursery:
        await _receivers(ch, 3, got, nursery)
        assert isinstance(ch._recvq, list) and len(ch._recvq) == 3
        for value in "abc":
            await ch.send(value)
    assert got == [(0, "a"), (1, "b"), (2, "c")]
    assert ch._recvq is None


@pytest.mark.parametrize("cancelled", [0, 1, 2])
async def test_a_cancelled_receiver_is_removed_from_any_position(cancelled):
    ch = channel.new(5)
    got = []
    scopes = []

    async def receive(tag):
        with trio.CancelScope() as scope:
            scopes.append(scope)
            got.append((tag, await ch.receive()))

    async with trio.open_nursery() as nursery:
        for tag in range(3):
            nursery.start_soon(receive, tag)
            await trio.testing.wait_all_tasks_blocked()
        scopes[cancelled].cancel()
        await trio.testing.wait_all_tasks_blocked()
        queue = ch._recvq
        assert isinstance(queue, list) and len(queue) == 2
        await ch.send("x")
        await ch.send("y")
    assert [tag for tag, _ in got] == [t for t in range(3) if t != cancelled]
    assert [value for _, value in got] == ["x", "y"]
    assert ch._recvq is None and len(ch) == 0  # no value went to the cancelled one


async def test_close_wakes_every_queued_receiver():
    ch = channel.new()
    closed = []

    async def receive():
        with pytest.raises(roost.ChannelClosed):
            await ch.receive()
        closed.append(True)

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        ch.close()
    assert closed == [True, True, True]
    assert ch._recvq is None


async def test_select_and_plain_receivers_share_a_queue():
    a, b = channel.new(), channel.new()
    results = []

    async def selector():
        got = await channel.select(a, b)
        results.append(("select", got.channel is b, got.value))

    async def plain():
        results.append(("plain", await a.receive()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(plain)
        await trio.testing.wait_all_tasks_blocked()
        assert isinstance(a._recvq, list) and len(a._recvq) == 2
        await b.send(1)  # the select wins on b: its entry on a is withdrawn
        await trio.testing.wait_all_tasks_blocked()
        queue = a._recvq
        assert (len(queue) if isinstance(queue, list) else 1) == 1
        await a.send(2)  # so the plain receiver gets the next value on a
    assert results == [("select", True, 1), ("plain", 2)]
    assert a._recvq is None and b._recvq is None


async def test_a_select_that_already_won_is_skipped_by_the_next_sender():
    a, b = channel.new(), channel.new(1)
    results = []

    async def selector():
        got = await channel.select(a, b)
        results.append(got.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(selector)
        await trio.testing.wait_all_tasks_blocked()
        # Complete the select through b, then send on a before the selector has run again
        # to withdraw its entry there: the sender must skip it, not hand it the value.
        assert b._try_send("from b")
        assert not a._try_send("from a")
    assert results == ["from b"]


async def test_receiving_from_a_ready_channel_is_still_a_checkpoint():
    ch = channel.new(1)
    await ch.send(1)
    with trio.testing.assert_checkpoints():
        assert await ch.receive() == 1


async def test_a_parked_receive_is_a_checkpoint_and_honours_cancellation():
    ch = channel.new()
    with trio.CancelScope() as scope:
        scope.cancel()
        with trio.testing.assert_checkpoints():
            await ch.receive()
    assert scope.cancelled_caught
    assert ch._recvq is None


app = roost.App("cq")


@app.process
async def two_readers():
    inbox = process.inbox()
    got = []
    coroutine_done = trio.Event()

    async def reader():
        got.append((await inbox.receive()).payload)
        coroutine_done.set()

    roost.coroutine.spawn(reader)
    got.append((await inbox.receive()).payload)
    await coroutine_done.wait()
    return sorted(got)


async def test_a_mailbox_with_two_waiting_readers_feeds_both():
    async with roost.open_node(app):
        pid = await process.spawn_monitored("cq:two_readers")
        await trio.testing.wait_all_tasks_blocked()
        process.send(pid, "m", 1)
        process.send(pid, "m", 2)
        ev = await process.events().receive()
        assert ev.value == [1, 2]
