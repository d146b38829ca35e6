"""A process that raises anything ends with an error exit of that process only.

As in Erlang, ``exit(Reason)`` (here ``SystemExit``) or a crash whose reason cannot even be
printed ends that one process: its monitors get an EXIT with kind Internal, its links a
LINK_DOWN, and the node goes on answering. Only a real Ctrl-C (or an outside cancel)
stops the node.
"""

import pytest
import trio
from hostile_exceptions import BothRaiseError, StrRaisesError

import roost
from roost import coroutine, process

app = roost.App("pc")


def hostile(what):
    return {
        "str_raises": StrRaisesError(),
        "both_raise": BothRaiseError(),
        "surrogates": ValueError("bad \ud800 text"),
        "system_exit": SystemExit(2),
        "generator_exit": GeneratorExit(),
    }[what]


EXPECTED = {
    "str_raises": (
        "hostile_exceptions.StrRaisesError",
        "<str() raised RuntimeError; repr: StrRaisesError()>",
    ),
    "both_raise": (
        "hostile_exceptions.BothRaiseError",
        "<str() raised RuntimeError, repr() raised RuntimeError>",
    ),
    "surrogates": ("ValueError", "bad \\ud800 text"),
    "system_exit": ("SystemExit", "2"),
    "generator_exit": ("GeneratorExit", ""),
}


@app.process
async def raises(what):
    await trio.lowlevel.checkpoint()
    raise hostile(what)


@app.process
async def coroutine_raises(what):
    async def body():
        raise hostile(what)

    coroutine.spawn(body)
    await process.inbox().receive()


@app.process
async def adder(a, b):
    return a + b


@app.process
async def linked_to(entry, what):
    process.set_options(trap_links=True)
    await process.spawn_linked(entry, what)
    return await process.events().receive()


@pytest.mark.parametrize("entry", ["pc:raises", "pc:coroutine_raises"])
@pytest.mark.parametrize("what", sorted(EXPECTED))
async def test_the_failing_process_exits_with_an_internal_error_and_the_node_answers(
    what, entry, autojump_clock
):
    async with roost.open_node(app):
        with trio.move_on_after(5) as timer:
            pid = await process.spawn_monitored(entry, what)
            exit_event = await process.events().receive()
            assert exit_event.pid == pid
            err = exit_event.error
            assert err.kind is roost.ErrorKind.INTERNAL
            assert (err.details["type"], err.details["message"]) == EXPECTED[what]
            # The node goes on answering.
            assert await process.exec("pc:adder", 2, 3) == 5
            link_down = await process.exec("pc:linked_to", entry, what)
            assert link_down.kind is roost.EventKind.LINK_DOWN
            assert link_down.error.details["type"] == EXPECTED[what][0]
        assert not timer.cancelled_caught


async def test_move_on_after_still_fires_after_such_a_failure(autojump_clock):
    async with roost.open_node(app):
        await process.spawn("pc:raises", "str_raises")
        with trio.move_on_after(1) as timer:
            await trio.sleep_forever()
        assert timer.cancelled_caught
