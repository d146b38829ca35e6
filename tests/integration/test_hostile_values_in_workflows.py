"""Hostile values at every sink inside workflow code: refused at the call, or given back.

Each example opens a node on a fresh data dir and runs one workflow per sink, each handing
the drawn value (read from ``HELD``, since a workflow input may not hold it) to its sink:

- ``arg``: ``funcs.call(give_back, value)``, an activity argument (and its returned copy);
- ``result``: ``funcs.call(produce)``, an activity that returns the value;
- ``final``: the workflow returns the value (its result);
- ``signal``: ``process.send`` from one workflow to another;
- ``child``: ``workflow.exec(keep, value)``, a child workflow's input;
- ``exit``: a plain process the workflow started returns the value (its recorded EXIT);
- ``forbidden``: ``roost.state``, ``roost.publish`` and ``roost.enqueue`` in workflow code,
  refused whatever the value (they are not replay-safe there);
- ``effects``: the same calls from an activity the workflow scheduled, where they are allowed.

Then it closes the node, opens it again on the same data dir and checks, sink by sink: the
value was refused with ``Invalid`` where it was handed over (the workflow caught it, and
nothing was stored for it), or it comes back (compared by its stored form). A workflow
result has no call site: refused, it is a workflow task failure (the run stays running,
nothing of that activation committed). Which outcome must happen is decided up front by the
codec alone, so a sink that refuses what it should store, or stores what it should refuse,
fails too. Either way the node stays alive: no other workflow has a task failure, and a
trivial workflow still runs after the reopen.

``HYPOTHESIS_PROFILE=thorough`` runs 1000 examples; the CI profile runs 30.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import hostile_harness as harness
import pytest
from hostile_harness import settle
from hypothesis import given, note
from hypothesis.control import currently_in_test_context

import roost
from roost import funcs, process, workflow
from roost.storage import Codec
from roost.storage._codec import MAX_DEPTH
from roost.testing.strategies import hostile_values, nested, same_value

app = roost.App("hw")
for _queue in ("wq", "wpub", "aq", "apub"):
    app.queue(_queue, max_retries=0)
CODEC = Codec()
TRIED = {
    "examples": 0,
    "calls": 0,
    "refused": 0,
    "stored": 0,
    "task_failures": 0,
    "node_stopped": 0,
}
attempt = functools.partial(harness.attempt, tried=TRIED)
run = functools.partial(harness.run, tried=TRIED)
HELD: list[Any] = [None]  # the drawn value, read by workflow and activity code alike
ONCE = funcs.new().with_options(
    retry_policy=roost.RetryPolicy(maximum_attempts=1, non_retryable_error_kinds=["Invalid"])
)
SINKS = ("arg", "result", "final", "signal", "child", "exit")


def refusal(sink: str, err: roost.Error) -> roost.Error:
    """The error a sink workflow fails with when its call refused the value (Invalid)."""
    if err.kind is not roost.ErrorKind.INVALID:
        raise err
    return roost.Error(
        f"{sink}: the call refused the value",
        kind=roost.ErrorKind.INVALID,
        details={"sink": sink, "reason": err.details.get("reason")},
    )


@app.activity
async def give_back(value: Any) -> Any:
    return value


@app.activity
async def produce() -> Any:
    return HELD[0]


@app.workflow
async def keep(value: Any) -> Any:
    return value


@app.workflow
async def trivial(x: int) -> int:
    return x + 1


@app.workflow
async def arg_sink() -> Any:
    try:
        back = await ONCE.call(give_back, HELD[0])
    except roost.Error as err:
        # The workflow goes on after the refusal: one more step, recorded on its own.
        assert await ONCE.call(give_back, "after") == "after"
        raise refusal("arg", err) from None
    return back


@app.workflow
async def result_sink() -> Any:
    try:
        return await ONCE.call(produce)
    except roost.Error as err:
        raise refusal("result", err) from None


@app.workflow
async def final_sink() -> Any:
    assert await ONCE.call(give_back, 1) == 1  # a committed activation before the result
    return HELD[0]


@app.workflow
async def waiter() -> Any:
    message = await process.inbox().receive()
    return message.payload


@app.workflow
async def signal_sink(target: roost.Pid) -> None:
    try:
        process.send(target, "t", HELD[0])
    except roost.Error as err:
        raise refusal("signal", err) from None


@app.workflow
async def child_sink() -> Any:
    try:
        return await workflow.exec(keep, HELD[0], id="kid")
    except roost.Error as err:
        raise refusal("child", err) from None


@app.process
async def hand_over() -> Any:
    return HELD[0]


@app.workflow
async def exit_sink() -> Any:
    await process.spawn(hand_over)
    exit_event = await process.events().receive()
    if exit_event.error is not None:
        raise refusal("exit", exit_event.error)
    return exit_event.value


async def _kind_of(call: Callable[[], Any]) -> str:
    try:
        result = call()
        if isinstance(result, Awaitable):
            await result
    except roost.Error as err:
        return err.kind.value
    return "stored"


@app.workflow
async def forbidden_sink() -> list[str]:
    value = HELD[0]
    return [
        await _kind_of(lambda: roost.state.set("w", "set", value)),
        await _kind_of(
            lambda: roost.state.update(
                "w", "update", [{"type": "set", "path": ["v"], "value": value}]
            )
        ),
        await _kind_of(lambda: roost.publish("wnews", value)),
        await _kind_of(lambda: roost.enqueue("wq", "hw:reject", value)),
    ]


@app.activity
async def side_effects() -> dict[str, bool]:
    value = HELD[0]
    return {
        "state_set": await attempt(lambda: roost.state.set("a", "set", value)),
        "state_update": await attempt(
            lambda: roost.state.update(
                "a", "update", [{"type": "set", "path": ["v"], "value": value}]
            )
        ),
        "publish": await attempt(lambda: roost.publish("anews", value)),
        "enqueue": await attempt(lambda: roost.enqueue("aq", "hw:reject", value)),
    }


@app.workflow
async def effects_sink() -> dict[str, bool]:
    outcome: dict[str, bool] = await ONCE.call(side_effects)
    return outcome


@app.activity
def reject(payload: Any) -> None:
    raise roost.Error("dead on arrival", kind=roost.ErrorKind.INVALID, retryable=False)


app.subscribe("wnews", "hw:reject", durable=True, queue="wpub")
app.subscribe("anews", "hw:reject", durable=True, queue="apub")


def outcome_of(node: Any, workflow_id: str) -> bool:
    """Whether a sink workflow's value was stored (completed) or refused at its call."""
    info = node.describe(workflow_id)
    if workflow_id == "final":
        if info["task_failure"] is not None:
            assert info["status"] == "running", info
            return False
        assert info["status"] == "completed", info
        return True
    if info["status"] == "completed":
        return True
    assert info["status"] == "failed", info
    assert info["error"].details["sink"] == workflow_id, info["error"]
    return False


async def first_run(data_dir: str) -> dict[str, Any]:
    async with roost.open_node(app, data_dir) as node:
        target = await process.with_options(id="waiter").spawn("hw:waiter")
        starts = {
            "arg": ("hw:arg_sink",),
            "result": ("hw:result_sink",),
            "final": ("hw:final_sink",),
            "signal": ("hw:signal_sink", target),
            "child": ("hw:child_sink",),
            "exit": ("hw:exit_sink",),
            "forbidden": ("hw:forbidden_sink",),
            "effects": ("hw:effects_sink",),
        }
        for workflow_id, (entry, *args) in starts.items():
            await process.with_options(id=workflow_id).spawn(entry, *args)
        await settle()
        outcome: dict[str, Any] = {sink: outcome_of(node, sink) for sink in SINKS}
        outcome["forbidden"] = node.describe("forbidden")["result"]
        outcome["effects"] = node.describe("effects")["result"]
        assert await process.exec("hw:trivial", 1) == 2
    for sink in SINKS:
        TRIED["calls"] += 1
        TRIED["stored" if outcome[sink] else "refused"] += 1
    TRIED["calls"] += len(outcome["forbidden"])
    TRIED["refused"] += outcome["forbidden"].count("Invalid")
    TRIED["task_failures"] += not outcome["final"]
    return outcome


def _scheduled(node: Any, workflow_id: str) -> list[list[Any]]:
    """The arguments of every activity the run's history scheduled, in order."""
    history = node.history(workflow_id)
    return [item.args for item in history if type(item).__name__ == "ScheduleActivity"]


async def second_run(data_dir: str, value: Any, outcome: dict[str, Any]) -> None:
    async with roost.open_node(app, data_dir) as node:
        if not outcome["signal"]:
            waiter_pid = roost.Pid("local", "hw:workflows", "waiter")
            await process.send(waiter_pid, "t", "nothing else came")
        await settle()
        for sink in SINKS:
            assert outcome_of(node, sink) is outcome[sink], sink  # the same after the reopen
        if outcome["arg"]:
            assert same_value(node.describe("arg")["result"], value)
            assert same_value(_scheduled(node, "arg"), [[value]])
        else:  # nothing stored for the refused call, the step after it was
            assert _scheduled(node, "arg") == [["after"]]
        if outcome["result"]:
            assert same_value(node.describe("result")["result"], value)
        else:
            error = node.describe("result")["error"]
            assert error.details["reason"] == "unencodable result", error
        final = node.describe("final")
        if outcome["final"]:
            assert same_value(final["result"], value)
        else:
            failure = final["task_failure"]
            assert failure.kind is roost.ErrorKind.INVALID, failure
            assert "result cannot be recorded" in failure.message, failure
            assert _scheduled(node, "final") == [[1]]  # only the activation before it
        if outcome["exit"]:
            assert same_value(node.describe("exit")["result"], value)
        waited = node.describe("waiter")
        assert waited["status"] == "completed", waited
        if outcome["signal"]:
            assert same_value(waited["result"], value)
        else:
            assert waited["result"] == "nothing else came"
        ids = {w["workflow_id"] for w in node.list_workflows()}
        if outcome["child"]:
            assert same_value(node.describe("kid")["result"], value)
        else:
            assert "kid" not in ids
        assert outcome["forbidden"] == ["Invalid"] * 4
        assert await roost.state.get("w", "set") is None
        assert await roost.state.get("w", "update") is None
        effects = outcome["effects"]
        stored = await roost.state.get("a", "set")
        assert same_value(stored, value) if effects["state_set"] else stored is None
        updated = await roost.state.get("a", "update")
        assert same_value(updated, {"v": value}) if effects["state_update"] else updated is None
        for queue, stored_there in (
            ("wq", False),
            ("wpub", False),
            ("aq", effects["enqueue"]),
            ("apub", effects["publish"]),
        ):
            letters = node.dlq.list(queue)
            assert len(letters) == stored_there, (queue, letters)
            if stored_there:
                assert same_value(letters[0].payload, value)
        failing = {w["workflow_id"] for w in node.list_workflows() if w["task_failure"]}
        assert failing == (set() if outcome["final"] else {"final"})  # no other workflow
        assert await process.exec("hw:trivial", 41) == 42  # alive after the reopen


def check_sinks(value: Any) -> dict[str, Any]:
    """Hand ``value`` to every sink in workflow code, reopen, check each; returns outcomes."""
    stores, updates = harness.expect(value, TRIED)
    HELD[0] = value
    data_dir = tempfile.mkdtemp(prefix="roost-hostile-wf-")
    try:
        outcome = run(lambda: first_run(data_dir))
        if currently_in_test_context():
            note(f"outcome: {outcome}")
        for sink in SINKS:
            assert outcome[sink] is stores, (sink, outcome)
        effects = outcome["effects"]
        for sink in ("state_set", "publish", "enqueue"):
            assert effects[sink] is stores, (sink, effects)
        assert effects["state_update"] is updates, effects
        run(lambda: second_run(data_dir, value, outcome))
    finally:
        HELD[0] = None
        shutil.rmtree(data_dir, ignore_errors=True)
    return outcome


@given(hostile_values())
def test_hostile_values_in_workflow_code_are_refused_or_come_back(value: Any) -> None:
    check_sinks(value)


def test_the_depth_limit_holds_exactly_at_every_sink_in_workflow_code() -> None:
    at_limit = check_sinks(nested(MAX_DEPTH))
    assert all(at_limit[sink] for sink in SINKS)
    assert not at_limit["effects"]["state_update"]  # it stores {"v": value}: one level more
    past = check_sinks(nested(MAX_DEPTH + 1))
    assert not any(past[sink] for sink in SINKS)
    assert not any(past["effects"].values())


@pytest.fixture(autouse=True, scope="module")
def _report_counts() -> Iterator[None]:
    yield
    print(f"\nhostile values tried in workflow code: {TRIED}")
