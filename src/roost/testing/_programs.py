"""Workflow programs as plain data, and the app whose workflow interprets them.

A program is a dict ``{"steps": [...], "end": {...}}``; every step is a dict with an ``"op"``:

- ``{"op": "activity", "fail": n, "max_attempts": m, "value": v, "error": None}``: call
  the app's activity, whose attempts 1..n fail with a retryable ``Unavailable`` error; the
  next returns ``v``, or raises ``error`` (``{"kind": ..., "message": ...}``, not retryable)
  when given. Retries wait 1s, 2s, 4s...; ``max_attempts`` 0 means unlimited.
- ``{"op": "sleep", "seconds": s}``: a durable sleep.
- ``{"op": "receive", "topic": t}``: wait (without limit) for a message on topic ``t``.
- ``{"op": "select", "topic": t, "timeout": s}``: a message on ``t``, or ``s`` seconds.
- ``{"op": "child", "program": {...}}``: run a program as a child workflow and wait for it.
- ``{"op": "coroutine", "steps": [...]}``: run steps concurrently in a coroutine; the
  enclosing block waits for it at its end.

``"end"`` is ``{"op": "return"}``, ``{"op": "raise", "kind": k, "message": m}`` (a
``roost.Error``) or ``{"op": "crash", "message": m}`` (a plain ``ValueError``).

The workflow returns ``{"out": [...]}``, one record per step (a list: what happened and the
virtual seconds since the workflow started), then ``["joined", [...]]`` for each coroutine.
Every outcome follows from the program, the activity attempt numbers and the arrival times
of messages, so two runs with the same signals end alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from roost import channel, coroutine, funcs, process, workflow
from roost._errors import Error, ErrorKind
from roost.actors._app import App
from roost.actors._chance import after, now, sleep
from roost.mailbox._channel import Channel
from roost.workflow import RetryPolicy, activity_info

__all__ = ["PROGRAM_ENTRY", "STEP_ENTRY", "program_app"]

PROGRAM_ENTRY = "program"
STEP_ENTRY = "step"


@attrs.frozen
class _Names:
    workflow: str
    activity: str


def program_app(name: str = "prog") -> App:
    """A new ``roost.App`` that runs workflow programs (see ``workflow_programs``).

    It holds the workflow ``"<name>:program"``, which takes a program and interprets it,
    and the activity ``"<name>:step"`` that its activity steps call.

    Example::

        app = program_app()
        program = {"steps": [{"op": "sleep", "seconds": 5}], "end": {"op": "return"}}
        async with roost.open_node(app) as node:
            result = await process.exec("prog:program", program)
        # {"out": [["slept", 5.0]]}
    """
    app = App(name)
    names = _Names(workflow=f"{name}:{PROGRAM_ENTRY}", activity=f"{name}:{STEP_ENTRY}")

    def step(spec: Mapping[str, Any]) -> Any:
        return _activity(spec)

    async def program(spec: Mapping[str, Any]) -> dict[str, Any]:
        return await _interpret(spec, names)

    app.activity(step, name=STEP_ENTRY)
    app.workflow(program, name=PROGRAM_ENTRY)
    return app


def _activity(spec: Mapping[str, Any]) -> Any:
    info = activity_info()
    attempt = info.attempt if info is not None else 1
    if attempt <= int(spec.get("fail", 0)):
        raise Error(
            f"transient failure on attempt {attempt}", kind=ErrorKind.UNAVAILABLE, retryable=True
        )
    error = spec.get("error")
    if error:
        raise Error(str(error["message"]), kind=ErrorKind(error["kind"]), retryable=False)
    return spec.get("value")


def _elapsed(start: dt.datetime) -> float:
    return round((now() - start).total_seconds(), 6)


async def _interpret(spec: Mapping[str, Any], names: _Names) -> dict[str, Any]:
    start = now()
    out = await _block(spec.get("steps", []), start, names)
    end = spec.get("end") or {"op": "return"}
    if end["op"] == "raise":
        raise Error(str(end["message"]), kind=ErrorKind(end["kind"]), retryable=False)
    if end["op"] == "crash":
        raise ValueError(str(end["message"]))
    return {"out": out}


async def _block(
    steps: Sequence[Mapping[str, Any]], start: dt.datetime, names: _Names
) -> list[Any]:
    joins: list[Channel[list[Any]]] = []
    out = [await _step(step, start, names, joins) for step in steps]
    out.extend([["joined", await done.receive()] for done in joins])
    return out


async def _step(  # noqa: PLR0911 - one arm per op
    step: Mapping[str, Any],
    start: dt.datetime,
    names: _Names,
    joins: list[Channel[list[Any]]],
) -> list[Any]:
    op = step["op"]
    if op == "activity":
        policy = RetryPolicy(
            initial_interval=1, backoff_coefficient=2.0, maximum_attempts=step["max_attempts"]
        )
        try:
            value = await funcs.new().with_options(retry_policy=policy).call(names.activity, step)
        except Error as err:
            return ["activity failed", err.kind.value, err.message, _elapsed(start)]
        return ["activity", value, _elapsed(start)]
    if op == "sleep":
        await sleep(step["seconds"])
        return ["slept", _elapsed(start)]
    if op == "receive":
        payload = await process.listen(step["topic"]).receive()
        return ["received", step["topic"], payload, _elapsed(start)]
    if op == "select":
        listener = process.listen(step["topic"])
        got = await channel.select(listener, after(step["timeout"]))
        if got.channel is listener:
            return ["selected", step["topic"], got.value, _elapsed(start)]
        return ["timed out", step["topic"], _elapsed(start)]
    if op == "child":
        try:
            result = await workflow.exec(names.workflow, step["program"])
        except Error as err:
            return ["child failed", err.kind.value, err.message, _elapsed(start)]
        return ["child", result, _elapsed(start)]
    if op == "coroutine":
        done: Channel[list[Any]] = channel.new(1)
        inner = step["steps"]

        async def body() -> None:
            await done.send(await _block(inner, start, names))

        coroutine.spawn(body)
        joins.append(done)
        return ["spawned", len(inner), _elapsed(start)]
    raise Error(f"unknown program op {op!r}", kind=ErrorKind.INVALID, retryable=False)
