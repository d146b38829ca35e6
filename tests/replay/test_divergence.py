"""Divergence reports cannot be hidden by workflow code."""

import pytest

import roost
from roost import funcs, process
from roost.testing import Replayer

old, new = roost.App("r"), roost.App("r")


async def b() -> str:
    return "b"


async def c() -> str:
    return "c"


for _app in (old, new):
    _app.activity(b)
    _app.activity(c)


async def flow_old() -> str:
    roost.after("1h")  # command 1: a timer
    return await funcs.call("r:b")  # command 2


async def flow_new() -> str:  # changed code: command 1 is now an activity
    try:  # noqa: SIM105 - the shape under test: an ordinary handler around a step
        await funcs.call("r:c")
    except roost.Error:  # an ordinary handler must not swallow the divergence
        pass
    return await funcs.call("r:b")  # command 2 matches the history again


old.workflow(name="flow")(flow_old)
new.workflow(name="flow")(flow_new)


async def test_a_caught_divergence_still_fails_the_replay(autojump_clock):
    async with roost.open_node(old) as node:
        assert await process.with_options(id="f").exec("r:flow") == "b"
        history = node.history("f")
    assert Replayer(old).replay(history) == "b"
    with pytest.raises(roost.NondeterminismError) as info:
        Replayer(new).replay(history)
    assert info.value.details["issued"] == "#1 schedule activity 'r:c'"
    assert info.value.details["location"].endswith("test_divergence.py:32")
