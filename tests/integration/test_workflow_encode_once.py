"""A workflow step encodes each value once: roost's records are not walked, plain events
are not round-tripped, and a bad payload is still refused where it enters.

Observable through the public API with the codec instrumented: what the walk is handed
and how often values are decoded while a workflow runs.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

import roost
from roost import funcs, process
from roost.storage import Codec
from roost.storage._walk import Walk

app = roost.App("encode-once")


@app.activity
async def step(x):
    return x + 1


@app.activity
async def echo(x):
    return x


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def returns_a_set():
    return {1, 2}


@app.workflow
async def three_steps(x):
    a = await funcs.call(step, x)
    b = await funcs.call(step, a)
    return await funcs.call(step, b)


@app.workflow
async def echoes(value):
    return await funcs.call(echo, value)


@app.workflow
async def calls_returns_a_set():
    try:
        await funcs.call(returns_a_set)
    except roost.Error as exc:
        return {"kind": exc.kind.value, "message": exc.message}
    return None


@app.workflow
async def echoes_each():
    out = []
    for value in (1, "ok", "a\udfffb"):  # the last one has no UTF-8 form
        try:
            out.append(await funcs.call(echo, value))
        except roost.Error as exc:
            out.append({"kind": exc.kind.value, "message": exc.message})
    return out


@app.workflow
async def sees(value):
    return type(value).__name__


class Seen:
    """What the codec's walk was handed, and how many values were decoded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.walked: list[Any] = []
        self.decodes = 0
        depth, decode = Walk.depth, Codec.decode

        def counting_depth(walk: Walk, value: Any, left: int) -> int:
            self.walked.append(value)
            return depth(walk, value, left)

        def counting_decode(codec: Codec, data: Any) -> Any:
            self.decodes += 1
            return decode(codec, data)

        monkeypatch.setattr(Walk, "depth", counting_depth)
        monkeypatch.setattr(Codec, "decode", counting_decode)

    def records(self) -> list[str]:
        return [type(v).__name__ for v in self.walked if attrs.has(type(v))]


async def run(workflow: Any, *args: Any, workflow_id: str) -> Any:
    pid = await process.with_options(id=workflow_id).spawn(workflow, *args)
    events = process.events()
    process.monitor(pid)
    exit_event = await events.receive()
    assert exit_event.error is None, exit_event.error
    return exit_event.value


async def test_no_record_of_a_workflow_step_is_walked(autojump_clock, monkeypatch):
    async with roost.open_node(app):
        seen = Seen(monkeypatch)
        assert await run(three_steps, 1, workflow_id="once-1") == 4
        # Run records, progress rows, activity tasks and history rows were all written,
        # but none went through the walk: only the payloads in them did.
        assert seen.records() == []
        # Plain values throughout: nothing was encoded only to be decoded again.
        assert seen.decodes == 0


async def test_a_payload_inside_a_record_is_walked_by_its_own(autojump_clock, monkeypatch):
    payload = {"items": [1, 2, {"deep": ["x"]}]}
    async with roost.open_node(app):
        seen = Seen(monkeypatch)
        assert await run(echoes, payload, workflow_id="once-2") == payload
        assert seen.records() == []
        assert any(v == payload for v in seen.walked)


async def test_a_bad_activity_result_still_fails_the_attempt_as_invalid(autojump_clock):
    async with roost.open_node(app):
        outcome = await run(calls_returns_a_set, workflow_id="once-3")
    assert outcome["kind"] == roost.ErrorKind.INVALID.value
    assert "result: cannot encode object of type 'set' (use a list)" in outcome["message"]


async def test_a_bad_start_argument_is_invalid_at_the_call_and_nothing_is_stored(autojump_clock):
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="once-4").spawn(three_steps, {"s": {1}})
        assert info.value.kind == roost.ErrorKind.INVALID
        assert info.value.message.startswith(
            "workflow 'encode-once:three_steps' input args[0][\"s\"]: cannot encode object of "
            "type 'set'"
        ), info.value.message
        with pytest.raises(roost.Error) as missing:
            node.history("once-4")
        assert missing.value.kind == roost.ErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    ("spawner", "args", "named"),
    [
        (
            process.with_options(id="once-8"),
            ("\ud800",),
            "workflow 'encode-once:three_steps' input args[0]",
        ),
        (process.with_options(id="once-8"), ([1, b"x", "ok", "\udfff"],), "input args[0][3]"),
        (
            process.with_options(id="once-8").with_message("go", "\ud800"),
            (1,),
            "start message 'go'",
        ),
        (process.with_options(id="once-8", memo={"m": "\ud800"}), (1,), "memo"),
    ],
)
async def test_a_lone_surrogate_in_a_start_is_invalid_at_the_call_and_nothing_is_stored(
    autojump_clock, spawner, args, named
):
    # A plain value needs no check at the start; a str is plain only with a UTF-8 form.
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await spawner.spawn(three_steps, *args)
        assert info.value.kind == roost.ErrorKind.INVALID
        assert named in info.value.message, info.value.message
        with pytest.raises(roost.Error) as missing:
            node.history("once-8")
        assert missing.value.kind == roost.ErrorKind.NOT_FOUND
        assert node.list_workflows() == []


async def test_an_activity_argument_without_a_utf8_form_is_invalid_at_the_call(autojump_clock):
    # Plain arguments need no check when an activity is scheduled; a str is plain only
    # with a UTF-8 form, so a lone surrogate still fails the call (and nothing runs).
    async with roost.open_node(app):
        with trio.fail_after(60):  # an unchecked one would fail the task, retried forever
            got = await run(echoes_each, workflow_id="once-9")
    assert got[:2] == [1, "ok"]
    assert got[2]["kind"] == roost.ErrorKind.INVALID.value
    assert got[2]["message"].startswith("activity 'encode-once:echo' args[0]"), got[2]


async def test_a_workflow_gets_its_input_as_recorded(autojump_clock):
    async with roost.open_node(app):
        assert await run(sees, (1, 2), workflow_id="once-5") == "list"  # round-tripped
        assert await run(sees, 7, workflow_id="once-6") == "int"
        assert await run(sees, "text", workflow_id="once-7") == "str"
