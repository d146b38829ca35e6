"""A value whose methods raise ``SystemExit`` (or ``GeneratorExit``) only on a later read.

The first reads (the input check at the call site) pass; a later one, on the encoder's
quick path or while an activation's commands are turned into writes, raises. Whichever
read it is, the call fails (Invalid at the call site, or a workflow task failure) and the
node goes on: it never stops for what a value's methods raise.
"""

from __future__ import annotations

from typing import Any

import pytest

import roost
from roost import funcs, process
from roost.testing import open_test_node

app = roost.App("lateexit")
ONE = roost.RetryPolicy(maximum_attempts=1)
HELD: list[Any] = [None]


class LaterExit(list):  # type: ignore[type-arg]
    """A list whose ``__len__`` and ``__iter__`` raise once ``limit`` reads have passed."""

    calls = 0
    limit = 0
    raises: type[BaseException] = SystemExit

    def _tick(self) -> None:
        type(self).calls += 1
        if type(self).calls > type(self).limit:
            raise type(self).raises(4)

    def __len__(self) -> int:
        self._tick()
        return super().__len__()

    def __iter__(self) -> Any:
        self._tick()
        return super().__iter__()


@app.activity(retry_policy=ONE)
async def give_back(value: Any) -> Any:
    return "ok"


@app.workflow
async def hands_over() -> Any:
    try:
        return await funcs.call("lateexit:give_back", HELD[0])
    except roost.Error as err:
        return [err.kind.value, err.message]


@app.workflow
async def keep(value: Any) -> Any:
    return value


@pytest.mark.parametrize("raises", [SystemExit, GeneratorExit])
@pytest.mark.parametrize("limit", range(12))
async def test_the_node_survives_a_value_raising_late(
    limit: int, raises: type[BaseException], autojump_clock: Any
) -> None:
    LaterExit.calls, LaterExit.limit, LaterExit.raises = 0, limit, raises
    HELD[0] = LaterExit([1])
    async with open_test_node(app) as node:
        pid = await process.spawn(hands_over)
        await node.wait_until_blocked()
        described = node.describe(pid.id)
        LaterExit.limit = 10**9  # the node must run other workflows, and this one's retry
        assert await process.exec(keep, 41) == 41, described
        # Either the value was read in full (the call ran) or a read raised: then that
        # activation was a task failure, named in describe, never a stop of the node.
        assert described["status"] in ("running", "completed"), described
        if described["status"] == "running":
            failure = described["task_failure"]
            assert failure is not None, described
            assert raises.__name__ in repr(failure), failure


@app.activity(retry_policy=ONE)
async def hands_back() -> Any:
    return HELD[0]


@app.workflow
async def takes_back() -> Any:
    try:
        return await funcs.call("lateexit:hands_back")
    except roost.Error as err:
        return [err.kind.value, err.message]


@pytest.mark.parametrize("raises", [SystemExit, GeneratorExit])
@pytest.mark.parametrize("limit", range(12))
async def test_the_node_survives_an_activity_result_raising_late(
    limit: int, raises: type[BaseException], autojump_clock: Any
) -> None:
    LaterExit.calls, LaterExit.limit, LaterExit.raises = 0, limit, raises
    HELD[0] = LaterExit([1])
    async with open_test_node(app) as node:
        pid = await process.spawn(takes_back)
        await node.wait_until_blocked()
        described = node.describe(pid.id)
        LaterExit.limit = 10**9
        assert await process.exec(keep, 41) == 41, described
        assert described["status"] in ("running", "completed"), described
