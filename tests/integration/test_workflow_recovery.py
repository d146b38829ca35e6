"""Opening a node on a data directory with open runs: what its first moments do.

Each test runs workflows until they are asleep on a durable timer, stops the node, changes
the stopped directory with raw py-lmdb the way a crash or time would (a timer falls due, a
message is committed just before the stop, a history row is damaged), and opens a node on
it again. Open runs are loaded as records; each is rebuilt by replay on its first
activation.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import attrs
import cbor2
import lmdb
import pytest
import trio.testing
from raw_store import raw

import roost
from roost import process
from roost.storage import Codec, key, unpack_key
from roost.storage._codec import TAG_RECORD
from roost.workflow._history import MessageArrived, TimerFired, WorkflowTask
from roost.workflow._local import _replay
from roost.workflow._local._records import TimerTask, timer_key

app = roost.App("rcv")
CODEC = Codec()
LONG = 3600.0  # seconds a napper sleeps: never due on its own within a test
UNKNOWN_TAG = cbor2.dumps(cbor2.CBORTag(TAG_RECORD, ["wf.from_a_plugin", 1, {"x": 1}]))


@app.workflow
async def napper(opener: str, label: str, seconds: float) -> str:
    """Report "armed", sleep, then take one "go" message."""
    await process.send(roost.Pid.parse(opener), "armed", label)
    await roost.sleep(seconds)
    go = await process.listen("go").receive()
    return f"{label} {go}"


def wf(workflow_id: str) -> roost.Pid:
    return roost.Pid.parse(f"{{rcv:workflows|{workflow_id}}}")


async def _start(data: Path, labels: list[str]) -> None:
    async with roost.open_node(app, data) as node:
        armed = process.listen("armed")
        for label in labels:
            await process.with_options(id=label).spawn(napper, str(node.pid), label, LONG)
        assert {await armed.receive() for _ in labels} == set(labels)


def _run_ids(txn: lmdb.Transaction[bytes], dbs: dict[str, Any]) -> dict[str, str]:
    return {k.decode(): CODEC.decode(v).run_id for k, v in txn.cursor(db=dbs["runs"]).iternext()}


def _fall_due(data: Path, labels: list[str]) -> None:
    """The timers of ``labels`` fall due while the node is down (an hour ago)."""
    past = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    with raw(data) as (txn, dbs):
        runs = {run_id: wf_id for wf_id, run_id in _run_ids(txn, dbs).items()}
        for k, v in list(txn.cursor(db=dbs["timers"]).iternext()):
            if runs.get(str(unpack_key(k, int, str, int)[1])) in labels:
                timer = attrs.evolve(CODEC.decode(v), due=past)
                txn.delete(k, db=dbs["timers"])
                row = timer_key(past, timer.run_id, timer.seq)
                txn.put(row, CODEC.encode(timer), db=dbs["timers"])


def _message_before_the_stop(data: Path, messages: dict[str, str]) -> None:
    """A "go" message to each workflow, committed to its inbox just before the node stopped."""
    with raw(data) as (txn, dbs):
        runs = _run_ids(txn, dbs)
        for label, payload in messages.items():
            event = MessageArrived(topic="go", payload=payload)
            txn.put(key(runs[label], 100), CODEC.encode(event), db=dbs["inbox"])


def _activations(history: list[Any]) -> list[list[Any]]:
    """``node.history`` cut at its activation markers: the items of each activation."""
    out: list[list[Any]] = []
    for item in history:
        if isinstance(item, WorkflowTask):
            out.append([])
        else:
            out[-1].append(item)
    return out


def _count(txn: lmdb.Transaction[bytes], db: Any) -> int:
    return sum(1 for _ in txn.cursor(db=db).iternext())


async def test_what_fell_due_while_down_is_one_first_activation(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A run's first activation after the restart has every event that came due while the
    node was down: the message committed before the stop and its timer that fell due; it
    is rebuilt by replay in that activation. A timer not yet due stays armed."""
    data = tmp_path / "data"
    await _start(data, ["due-1", "due-2", "later"])
    _fall_due(data, ["due-1", "due-2"])
    _message_before_the_stop(data, {"due-1": "one", "due-2": "two", "later": "three"})
    async with roost.open_node(app, data) as node:
        manager = node._node.local_workflows
        for label in ["due-1", "due-2"]:
            process.monitor(wf(label))
        exits = {}
        for _ in range(2):
            event = await process.events().receive()
            exits[event.pid.id] = (event.value, event.error)
        assert exits == {"due-1": ("due-1 one", None), "due-2": ("due-2 two", None)}
        assert manager.stats["replays"] == 3  # each once ("later" for its message)
        for label in ["due-1", "due-2"]:
            _first, after = _activations(node.history(label))
            assert [type(e) for e in after[:2]] == [MessageArrived, TimerFired], after
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("later")["status"] == "running"  # its hour is not over
        process.monitor(wf("later"))
        event = await process.events().receive()  # the clock jumps to its timer
        assert (event.pid.id, event.value) == ("later", "later three")
    with raw(data) as (txn, dbs):
        assert _count(txn, dbs["timers"]) == 0  # each fired once, its row deleted with it
        assert _count(txn, dbs["inbox"]) == 0


async def test_recovered_runs_replay_on_first_activation_and_a_bad_history_quarantines(
    tmp_path: Path, autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs due at open are rebuilt in one pass, their histories read in one transaction;
    a run whose history row cannot be decoded is quarantined at that rebuild (history rows
    are read when a run is rebuilt, not at open), and the others complete."""
    labels = ["ok-1", "ok-2", "ok-3", "bad-history"]
    data = tmp_path / "data"
    await _start(data, labels)
    _fall_due(data, labels)
    _message_before_the_stop(data, dict.fromkeys(labels, "go"))
    with raw(data) as (txn, dbs):
        row = key(_run_ids(txn, dbs)["bad-history"], 1)
        assert txn.get(row, db=dbs["histories"]) is not None
        txn.put(row, UNKNOWN_TAG, db=dbs["histories"])
    read_ahead: list[set[str]] = []

    def spy(drivers: Any, runs: list[Any]) -> Any:
        found = real(drivers, runs)
        read_ahead.append({run.record.workflow_id for run in runs if run.record.run_id in found})
        return found

    real = _replay.Drivers.read_histories
    monkeypatch.setattr(_replay.Drivers, "read_histories", spy)
    async with roost.open_node(app, data) as node:
        for label in labels[:3]:
            process.monitor(wf(label))
        got = {}
        for _ in range(3):
            event = await process.events().receive()
            got[event.pid.id] = event.value
        assert got == {label: f"{label} go" for label in labels[:3]}
        await trio.testing.wait_all_tasks_blocked()
        described = node.describe("bad-history")
        assert described["status"] == "quarantined"
        assert "wf.from_a_plugin" in described["error"].message
        assert described["quarantine"]["rows"][0]["table"] == "histories"
    assert set(labels) in read_ahead  # all four histories were read in one transaction


async def test_a_due_timer_row_of_a_closed_run_is_deleted_at_open(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A timer row left by a run that has closed (it fell due while the node was down)
    fires into nothing after the restart: its row is deleted, nothing else changes."""
    data = tmp_path / "data"
    await _start(data, ["done"])
    _fall_due(data, ["done"])
    _message_before_the_stop(data, {"done": "go"})
    async with roost.open_node(app, data) as node:
        process.monitor(wf("done"))
        assert (await process.events().receive()).value == "done go"
    with raw(data) as (txn, dbs):
        run_id = _run_ids(txn, dbs)["done"]
        past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        stale = TimerTask(workflow_id="done", run_id=run_id, seq=99, due=past)
        txn.put(timer_key(past, run_id, 99), CODEC.encode(stale), db=dbs["timers"])
    async with roost.open_node(app, data) as node:
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("done")["status"] == "completed"
    with raw(data) as (txn, dbs):
        assert _count(txn, dbs["timers"]) == 0
