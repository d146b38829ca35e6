"""Divergence reports cannot be hidden by workflow code."""

import pytest

import roost
from roost import funcs, process, workflow
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


# replay_many tells a divergence from a recorded error by its type, not its wording.
kept, dropped = roost.App("v"), roost.App("v")


async def versioned() -> int:
    return workflow.version("pricing", 1, 1)  # records version 1


async def dropped_version_1() -> int:  # the code no longer supports runs of version 1
    return workflow.version("pricing", 2, 2)


async def totals() -> None:
    raise ValueError("the totals diverged")  # a workflow error that says "diverged"


kept.workflow(name="pricing")(versioned)
dropped.workflow(name="pricing")(dropped_version_1)
for _app in (kept, dropped):
    _app.workflow(name="totals")(totals)


async def test_replay_many_raises_divergences_and_returns_recorded_errors(autojump_clock):
    async with roost.open_node(kept) as node:
        assert await process.with_options(id="p").exec("v:pricing") == 1
        with pytest.raises(roost.Error):
            await process.with_options(id="t").exec("v:totals")
        histories = [node.history("t"), node.history("p")]
    results = Replayer(kept).replay_many(histories)
    assert results[1] == 1
    assert (results[0].kind, results[0].message) == (
        roost.ErrorKind.INTERNAL,
        "ValueError: the totals diverged",
    )
    with pytest.raises(roost.NondeterminismError) as info:
        Replayer(dropped).replay_many(histories)
    assert info.value.details["history_index"] == 1  # the recorded error is not one
    assert "outside the supported range 2..2" in info.value.message
