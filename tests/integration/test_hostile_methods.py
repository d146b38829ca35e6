"""Values whose own methods raise: refused with Invalid where handed over, the node unharmed.

A list or dict subclass whose ``__len__``, ``__iter__`` or ``items`` raises, or an int
subclass whose comparisons raise, cannot be read, so cannot be stored: the codec refuses
it like any unencodable value, at every sink (an activity's result and argument, a
workflow's input and result, a signal, a queue message).
"""

from __future__ import annotations

from typing import Any

import pytest

import roost
from roost import funcs, process
from roost.storage import Codec
from roost.testing import open_test_node

app = roost.App("hm")
app.queue("hq", max_retries=0)
ONE = roost.RetryPolicy(maximum_attempts=1)
HELD: list[Any] = [None]  # the value in hand (a workflow input may not hold it)


class LenRaises(list):
    def __len__(self):
        raise ValueError("boom in __len__")


class IterRaises(list):
    def __iter__(self):
        raise ValueError("boom in __iter__")


class ItemsRaise(dict):
    def items(self):
        raise ValueError("boom in items")

    def keys(self):
        raise ValueError("boom in keys")


class CompareRaises(int):
    def __le__(self, other):
        raise ValueError("boom in __le__")

    def __ge__(self, other):
        raise ValueError("boom in __ge__")


class ExitsInLen(list):
    def __len__(self):
        raise SystemExit(4)


def _values():
    return {
        "len": (lambda: LenRaises([1, 2]), "ValueError: boom in __len__"),
        "iter": (lambda: IterRaises([1, 2]), "ValueError: boom in __iter__"),
        "items": (lambda: ItemsRaise(a=1), "ValueError: boom in items"),
        "compare": (lambda: CompareRaises(7), "ValueError: boom in __"),
        "nested": (lambda: {"a": [1, LenRaises([3])]}, "ValueError: boom in __len__"),
        "exit": (lambda: ExitsInLen([1]), "SystemExit: 4"),
    }


VALUES = _values()


@pytest.fixture(params=sorted(VALUES))
def hostile(request):
    make, raised = VALUES[request.param]
    HELD[0] = make()
    yield raised
    HELD[0] = None


def _refused(err: roost.Error, raised: str) -> str:
    assert err.kind is roost.ErrorKind.INVALID, err
    assert "reading the value raised" in err.message, err.message
    assert raised in err.message, err.message
    return "refused"


@app.activity(retry_policy=ONE)
async def produce() -> Any:
    return HELD[0]


@app.activity(retry_policy=ONE)
def produce_sync() -> Any:
    return HELD[0]


@app.activity(retry_policy=ONE)
async def give_back(value: Any) -> Any:
    return value


@app.workflow
async def calls(entry: str) -> list[Any]:
    try:
        await funcs.call(entry)
    except roost.Error as err:
        return [err.kind.value, err.message]
    return ["stored"]


@app.workflow
async def hands_over() -> list[Any]:
    try:
        await funcs.call("hm:give_back", HELD[0])
    except roost.Error as err:
        return [err.kind.value, err.message]
    return ["stored"]


@app.workflow
async def keep(value: Any) -> Any:
    return value


@app.workflow
async def returns_it() -> Any:
    assert await funcs.call("hm:give_back", 1) == 1
    return HELD[0]


@app.workflow
async def waiter() -> Any:
    return (await process.inbox().receive()).payload


@app.workflow
async def signals(target: roost.Pid) -> list[Any]:
    try:
        process.send(target, "t", HELD[0])
    except roost.Error as err:
        return [err.kind.value, err.message]
    return ["stored"]


CONSUMED: list[Any] = []


@app.activity
async def consume(payload: Any) -> None:
    CONSUMED.append(payload)


async def _still_runs() -> None:
    assert await process.exec(keep, 41) == 41


@pytest.mark.parametrize("entry", ["hm:produce", "hm:produce_sync"])
async def test_an_activity_result_that_cannot_be_read_fails_the_attempt(hostile, entry):
    async with open_test_node(app):
        kind, message = await process.exec(calls, entry)
        assert kind == "Invalid"
        assert "returned a value that cannot be stored" in message
        assert "reading the value raised" in message
        assert hostile in message
        await _still_runs()


async def test_an_activity_argument_that_cannot_be_read_is_refused_at_the_call(hostile):
    async with open_test_node(app):
        kind, message = await process.exec(hands_over)
        assert kind == "Invalid"
        assert "reading the value raised" in message
        assert hostile in message
        await _still_runs()


async def test_a_workflow_input_that_cannot_be_read_is_refused_at_the_call(hostile):
    async with open_test_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await process.spawn(keep, HELD[0])
        _refused(info.value, hostile)
        assert node.list_workflows() == []  # nothing stored
        await _still_runs()


async def test_a_signal_that_cannot_be_read_is_refused_at_the_call(hostile):
    async with open_test_node(app) as node:
        target = await process.spawn(waiter)
        await node.wait_until_blocked()
        with pytest.raises(roost.Error) as info:
            process.send(target, "t", HELD[0])
        _refused(info.value, hostile)
        # ... from workflow code too; then the waiter still takes a good signal.
        kind, message = await process.exec(signals, target)
        assert kind == "Invalid"
        assert hostile in message
        process.send(target, "t", "fine")
        await node.wait_until_blocked()
        assert node.describe(target.id)["status"] == "completed"


async def test_a_workflow_result_that_cannot_be_read_fails_its_task_only(hostile):
    async with open_test_node(app) as node:
        pid = await process.spawn(returns_it)
        await node.wait_until_blocked()
        described = node.describe(pid.id)
        assert described["status"] == "running"
        failure = described["task_failure"]
        assert failure is not None
        assert "reading the value raised" in failure.message
        await _still_runs()


async def test_a_queue_message_that_cannot_be_read_is_refused_at_the_call(hostile):
    CONSUMED.clear()
    async with open_test_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await roost.enqueue("hq", "hm:consume", HELD[0])
        _refused(info.value, hostile)
        await roost.enqueue("hq", "hm:consume", "fine")
        await node.wait_until_blocked()
        assert CONSUMED == ["fine"]  # the refused message was never stored
        await _still_runs()


@pytest.mark.parametrize("name", sorted(VALUES))
@pytest.mark.parametrize("method", ["check", "encode"])
def test_the_codec_refuses_a_value_whose_methods_raise(name, method):
    make, raised = VALUES[name]
    with pytest.raises(roost.Error) as info:
        getattr(Codec(), method)(make(), what="args[0]")
    err = info.value
    assert err.kind is roost.ErrorKind.INVALID
    assert err.message.startswith(f"args[0]: reading the value raised {raised}")
    assert err.details["path"] == "args[0]"
