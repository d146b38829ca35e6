"""Hostile values at every sink outside workflow code: refused cleanly, or stored and given back.

Each example opens a node on a fresh data dir, hands one drawn value to every sink (a
workflow's start input, a signal to a workflow, an enqueue, ``state.set``, ``state.update``,
a durable ``publish``, a send to a plain process), closes the node, opens it again on the
same data dir and checks, sink by sink: the call raised ``Invalid`` and nothing was stored,
or the value comes back (compared by its stored form). Which of the two must happen is
decided up front by the codec alone (an ``update`` stores ``{"v": value}``), so a sink that
refuses what it should store, or stores what it should refuse, fails too. Either way the
node stays alive: no task failure, and a trivial workflow still runs after the reopen.

``HYPOTHESIS_PROFILE=thorough`` runs 1000 examples; the CI profile runs 30.
"""

from __future__ import annotations

import datetime as dt
import functools
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import hostile_harness as harness
import pytest
from hostile_harness import settle
from hypothesis import event, given, note
from hypothesis.control import currently_in_test_context

import roost
from roost import process
from roost.storage import Codec
from roost.storage._codec import MAX_DEPTH
from roost.testing.strategies import durations, hostile_values, nested, same_value

app = roost.App("hv")
app.queue("dead", max_retries=0)
app.queue("pubq", max_retries=0)
CODEC = Codec()
TRIED = {"examples": 0, "calls": 0, "refused": 0, "stored": 0, "node_stopped": 0}
attempt = functools.partial(harness.attempt, tried=TRIED)
run = functools.partial(harness.run, tried=TRIED)


@app.workflow
async def keep(value: Any) -> Any:
    return value


@app.workflow
async def waiter() -> Any:
    message = await process.inbox().receive()
    return message.payload


@app.workflow
async def trivial(x: int) -> int:
    return x + 1


@app.activity
def reject(payload: Any) -> None:
    raise roost.Error("dead on arrival", kind=roost.ErrorKind.INVALID, retryable=False)


@app.process
async def echo_process() -> None:
    message = await process.inbox().receive()
    process.send(message.sender, "echo", message.payload)


app.subscribe("news", "hv:reject", durable=True, queue="pubq")


async def first_run(data_dir: str, value: Any) -> dict[str, bool]:
    async with roost.open_node(app, data_dir):
        signalled = await process.with_options(id="waiter").spawn("hv:waiter")
        outcome = {
            "start": await attempt(
                lambda: process.with_options(id="started").spawn("hv:keep", value)
            ),
            "signal": await attempt(lambda: process.send(signalled, "t", value)),
            "enqueue": await attempt(lambda: roost.enqueue("dead", "hv:reject", value)),
            "state_set": await attempt(lambda: roost.state.set("s", "set", value)),
            "state_update": await attempt(
                lambda: roost.state.update(
                    "s", "update", [{"type": "set", "path": ["v"], "value": value}]
                )
            ),
            "publish": await attempt(lambda: roost.publish("news", value)),
        }
        # A plain process's mailbox is memory: the very object arrives, nothing is encoded.
        echo = await process.spawn("hv:echo_process")
        replies = process.listen("echo")
        outcome["send"] = await attempt(lambda: process.send(echo, "t", value))
        assert outcome["send"]
        assert await replies.receive() is value
        await settle()
        assert await process.exec("hv:trivial", 1) == 2
    return outcome


async def second_run(data_dir: str, value: Any, outcome: dict[str, bool]) -> None:
    async with roost.open_node(app, data_dir) as node:
        if not outcome["signal"]:
            waiter_pid = roost.Pid("local", "hv:workflows", "waiter")
            await process.send(waiter_pid, "t", "nothing else came")
        await settle()
        waited = node.describe("waiter")
        assert waited["status"] == "completed", waited
        if outcome["signal"]:
            assert same_value(waited["result"], value)
        else:
            assert waited["result"] == "nothing else came"
        if outcome["start"]:
            started = node.describe("started")
            assert started["status"] == "completed", started
            assert same_value(started["result"], value)
        else:
            assert "started" not in {w["workflow_id"] for w in node.list_workflows()}
        for sink, queue in (("enqueue", "dead"), ("publish", "pubq")):
            letters = node.dlq.list(queue)
            assert len(letters) == outcome[sink], (sink, letters)
            if outcome[sink]:
                assert same_value(letters[0].payload, value)
        stored = await roost.state.get("s", "set")
        assert same_value(stored, value) if outcome["state_set"] else stored is None
        updated = await roost.state.get("s", "update")
        assert same_value(updated, {"v": value}) if outcome["state_update"] else updated is None
        assert all(w["task_failure"] is None for w in node.list_workflows())
        assert await process.exec("hv:trivial", 41) == 42  # alive after the reopen


def check_sinks(value: Any) -> dict[str, bool]:
    """Hand ``value`` to every sink, reopen, check each; returns which sinks stored it."""
    stores, updates = harness.expect(value, TRIED)
    data_dir = tempfile.mkdtemp(prefix="roost-hostile-")
    try:
        outcome = run(lambda: first_run(data_dir, value))
        if currently_in_test_context():
            note(f"outcome: {outcome}")
        for sink in ("start", "signal", "enqueue", "state_set", "publish"):
            assert outcome[sink] is stores, (sink, outcome)
        assert outcome["state_update"] is updates
        run(lambda: second_run(data_dir, value, outcome))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return outcome


@given(hostile_values())
def test_hostile_values_are_refused_or_come_back_and_the_node_lives(value: Any) -> None:
    check_sinks(value)


@pytest.mark.parametrize("leaf", [0, 2**70, dt.datetime(2024, 1, 1, tzinfo=dt.UTC)])
def test_the_depth_limit_holds_exactly_at_every_sink_through_a_reopen(leaf: Any) -> None:
    levels = MAX_DEPTH - (0 if leaf == 0 else 1)  # a big int or a datetime is a level too
    at_limit = check_sinks(nested(levels, leaf))
    assert all(stored for sink, stored in at_limit.items() if sink != "state_update")
    assert not at_limit["state_update"]  # it stores {"v": value}: one level more
    assert check_sinks(nested(levels - 1, leaf))["state_update"]
    past = check_sinks(nested(levels + 1, leaf))
    assert not any(stored for sink, stored in past.items() if sink != "send")


@given(durations())
def test_hostile_durations_at_start_options_are_refused_or_honoured(value: Any) -> None:
    async def main() -> None:
        async with roost.open_node(app) as node:
            spawner = process.with_options(id="delayed", start_delay=value, run_timeout=value)
            try:
                await spawner.spawn("hv:trivial", 1)
            except roost.Error as err:
                if err.kind is not roost.ErrorKind.INVALID:
                    raise
                assert node.list_workflows() == []
                event("refused")
            else:
                info = node.describe("delayed")
                assert info["task_failure"] is None
                assert info["start_at"] is None or info["start_at"] >= info["started_at"]
                event("accepted")
            assert await process.exec("hv:trivial", 1) == 2

    run(main)


@pytest.fixture(autouse=True, scope="module")
def _report_counts() -> Iterator[None]:
    yield
    print(f"\nhostile values tried: {TRIED}")
