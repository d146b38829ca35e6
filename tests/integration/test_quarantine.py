"""Quarantine on open: an unreadable stored row sets its workflow or message aside, not the node.

Each test runs workflows on a data directory, stops the node, writes bad bytes into rows of
the stopped directory with raw py-lmdb (corrupt CBOR, a record tag nothing registers, a
schema version from a later roost), and opens a node on it again: it starts, the other
workflows and messages complete, the bad ones show as ``quarantined`` in ``describe`` and
``list_workflows`` with their decode error, their raw bytes are kept, and they stay set aside
on every later open.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import cbor2
import lmdb
import pytest
import trio.testing
from raw_store import raw

import roost
from roost import Error, ErrorKind, process
from roost.queues._records import QueueMessage, message_key
from roost.storage import Codec, key, open_lmdb_store, quarantined, unpack_key
from roost.storage._codec import TAG_RECORD
from roost.workflow._local._inspect import list_workflows

app = roost.App("qz")
app.queue("jobs", max_retries=0)
jobs_done: list[Any] = []
CODEC = Codec()

GARBAGE = b"\xff\x00 not cbor \x9f"  # a break code where no indefinite item is open
UNKNOWN_TAG = cbor2.dumps(cbor2.CBORTag(TAG_RECORD, ["wf.from_a_plugin", 1, {"x": 1}]))
FUTURE = cbor2.dumps(  # a MessageArrived as a later roost (schema version 99) stores it
    cbor2.CBORTag(TAG_RECORD, ["wf.message_arrived", 99, {"topic": "go", "priority": 1}])
)


@app.activity
async def job(payload: Any) -> None:
    jobs_done.append(payload)


@app.workflow
async def waiter(opener: str, label: str) -> str:
    await process.send(roost.Pid.parse(opener), "armed", label)
    go = await process.listen("go").receive()
    return f"{label} {go}"


@app.workflow
async def sleeper(opener: str, label: str) -> str:
    await process.send(roost.Pid.parse(opener), "armed", label)
    await roost.sleep("100d")
    return f"{label} woke"


WAITERS = ["good-1", "good-2", "bad-history", "bad-inbox", "bad-task-owner"]
SLEEPERS = ["bad-run", "bad-timer"]


async def _start_all(data: Path) -> None:
    async with roost.open_node(app, data) as node:
        armed = process.listen("armed")
        for label in WAITERS:
            await process.with_options(id=label).spawn(waiter, str(node.pid), label)
        for label in SLEEPERS:
            await process.with_options(id=label).spawn(sleeper, str(node.pid), label)
        got = {await armed.receive() for _ in WAITERS + SLEEPERS}
        assert got == set(WAITERS + SLEEPERS)


def _run_ids(txn: lmdb.Transaction[bytes], dbs: dict[str, Any]) -> dict[str, str]:
    return {k.decode(): CODEC.decode(v).run_id for k, v in txn.cursor(db=dbs["runs"]).iternext()}


def _spoil(data: Path) -> dict[str, bytes]:
    """Write bad rows into the stopped directory; returns what was written where."""
    written: dict[str, bytes] = {}
    with raw(data) as (txn, dbs):
        runs = _run_ids(txn, dbs)
        txn.put(b"bad-run", GARBAGE, db=dbs["runs"])
        written["runs"] = GARBAGE
        history_row = key(runs["bad-history"], 1)
        assert txn.get(history_row, db=dbs["histories"]) is not None
        txn.put(history_row, UNKNOWN_TAG, db=dbs["histories"])
        txn.put(key(runs["bad-inbox"], 1), FUTURE, db=dbs["inbox"])
        txn.put(key(runs["bad-task-owner"], 7), GARBAGE[:3], db=dbs["tasks"])
        txn.put(ORPHAN, GARBAGE, db=dbs["tasks"])  # of no open run: set aside on its own
        timers = {
            unpack_key(k, int, str, int)[1]: k for k, _ in txn.cursor(db=dbs["timers"]).iternext()
        }
        txn.put(timers[runs["bad-timer"]], UNKNOWN_TAG, db=dbs["timers"])
        # A queue message that is fine, and one that is not, both waiting for delivery.
        good = QueueMessage(
            receipt_id="r-good",
            queue="jobs",
            seq=1,
            entry="qz:job",
            payload="ok",
            enqueued_at=dt.datetime.now(dt.UTC),
        )
        txn.put(message_key("jobs", 1), CODEC.encode(good), db=dbs["queue_messages"])
        txn.put(message_key("jobs", 2), GARBAGE, db=dbs["queue_messages"])
        txn.put(message_key("jobs", 3), UNKNOWN_TAG, db=dbs["dlq"])
    return written


ORPHAN = key("no-such-run", 1)
BAD = ["bad-run", "bad-inbox", "bad-task-owner", "bad-timer"]  # found on open


def wf(workflow_id: str) -> roost.Pid:
    return roost.Pid.parse(f"{{qz:workflows|{workflow_id}}}")


def _statuses(node: Any) -> dict[str, str]:
    return {row["workflow_id"]: row["status"] for row in node.list_workflows()}


async def test_unreadable_rows_quarantine_their_workflow_and_the_rest_recovers(
    tmp_path: Path, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    jobs_done.clear()
    data = tmp_path / "data"
    await _start_all(data)
    _spoil(data)
    # An inspector on the stopped directory already shows the unreadable record.
    inspector = open_lmdb_store(data, readonly=True, lock=False)
    try:
        seen = {row["workflow_id"]: row for row in list_workflows(inspector, CODEC)}
        assert seen["bad-run"]["status"] == "quarantined"
        assert "cannot be decoded" in seen["bad-run"]["error"].message
    finally:
        inspector.close()

    with caplog.at_level(logging.ERROR):
        async with roost.open_node(app, data) as node:
            statuses = _statuses(node)
            for workflow_id in BAD:
                assert statuses[workflow_id] == "quarantined", workflow_id
                described = node.describe(workflow_id)
                assert described["status"] == "quarantined"
                assert described["error"].kind is ErrorKind.INTERNAL
                assert "cannot be decoded" in described["error"].message
            assert node.describe("bad-inbox")["workflow_type"] == "qz:waiter"
            assert "schema version 99" in node.describe("bad-inbox")["error"].message
            assert node.describe("bad-run")["quarantine"]["rows"][0]["table"] == "runs"
            assert statuses["bad-history"] == "running"  # read when it is rebuilt
            # The rest recovers: signals reach the good ones (and bad-history, whose history
            # is read when this signal makes it replay).
            for label in ["good-1", "good-2"]:
                process.monitor(wf(label))
            for label in ["good-1", "good-2", "bad-history"]:
                await process.send(wf(label), "go", "go!")
            exits = {}
            for _ in range(2):
                event = await process.events().receive()
                exits[event.pid.id] = event.value
            assert exits == {"good-1": "good-1 go!", "good-2": "good-2 go!"}
            await trio.testing.wait_all_tasks_blocked()
            history = node.describe("bad-history")
            assert history["status"] == "quarantined"
            assert "wf.from_a_plugin" in history["error"].message
            assert history["quarantine"]["rows"][0]["table"] == "histories"
            listed = [r["workflow_id"] for r in node.list_workflows("status = 'quarantined'")]
            assert listed == sorted(["bad-history", *BAD])  # in id order, as every row
            assert jobs_done == ["ok"]  # the readable message was delivered
            with pytest.raises(Error, match="is quarantined") as info:
                await process.with_options(id="bad-run").spawn(waiter, str(node.pid), "again")
            assert info.value.kind is ErrorKind.INVALID_STATE
            with pytest.raises(Error, match="is quarantined") as info:
                node.history("bad-inbox")
            entries = {(e["unit"], e["id"]): e for e in quarantined(node._node.store)}
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)
    for workflow_id in [*BAD, "bad-history"]:
        assert f"workflow {workflow_id} quarantined" in logged
    assert "queue message jobs#2 quarantined" in logged
    assert "dead letter jobs#3 quarantined" in logged
    assert set(entries) == {
        *(("workflow", w) for w in [*BAD, "bad-history"]),
        ("queue_message", "jobs#2"),
        ("dead_letter", "jobs#3"),
        ("row", f"tasks:{ORPHAN.hex()}"),
    }
    await _check_kept(data)
    caplog.clear()
    # Every later open keeps them aside, quietly: nothing is quarantined twice.
    with caplog.at_level(logging.ERROR):
        async with roost.open_node(app, data) as node:
            statuses = _statuses(node)
            assert {w: statuses[w] for w in [*BAD, "bad-history"]} == dict.fromkeys(
                [*BAD, "bad-history"], "quarantined"
            )
            assert statuses["good-1"] == statuses["good-2"] == "completed"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def _check_kept(data: Path) -> None:
    """The raw bytes are in the quarantine table; the quarantined runs' other rows untouched."""
    with raw(data) as (txn, dbs):
        runs = {}
        for _, v in txn.cursor(db=dbs["quarantine"]).iternext():
            entry = CODEC.decode(v)
            rows = {(r.table, r.key): r.data for r in entry.rows}
            if entry.unit == "workflow":
                runs[entry.id] = rows
        assert runs["bad-run"] == {("runs", b"bad-run"): GARBAGE}
        assert UNKNOWN_TAG in runs["bad-history"].values()
        assert FUTURE in runs["bad-inbox"].values()
        assert UNKNOWN_TAG in runs["bad-timer"].values()
        # Their runs records moved along (readable ones as they were), nothing else of them.
        for workflow_id in [*BAD, "bad-history"]:
            assert txn.get(workflow_id.encode(), db=dbs["runs"]) is None
            assert ("runs", workflow_id.encode()) in runs[workflow_id]
        history_run_id = CODEC.decode(runs["bad-history"]["runs", b"bad-history"]).run_id
        inbox = [k for k, _ in txn.cursor(db=dbs["inbox"]).iternext()]
        assert [k for k in inbox if k.startswith(key(history_run_id))]  # the "go" it got
        # bad-run's timer was neither fired nor dropped: it stays for the quarantined run.
        assert len(list(txn.cursor(db=dbs["timers"]).iternext())) == 1
        assert txn.get(message_key("jobs", 1), db=dbs["queue_messages"]) is None  # delivered


cron_app = roost.App("qzc")
ticks: list[Any] = []


@cron_app.activity
async def tick(info: Any) -> None:
    ticks.append(info)


TRIGGER = cron_app.cron("*/10 * * * * *", tick, catch_up="all")  # every 10 seconds


async def test_an_unreadable_cron_row_is_set_aside_and_the_trigger_goes_on(
    tmp_path: Path, autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ticks.clear()
    data = tmp_path / "data"
    open_lmdb_store(data).close()
    row = key(TRIGGER.id)
    with raw(data) as (txn, dbs):
        txn.put(row, GARBAGE, db=dbs["cron"])  # its last fire time, unreadable
    with caplog.at_level(logging.ERROR):
        async with roost.open_node(cron_app, data) as node:
            await trio.sleep(25)
            assert len(ticks) >= 2  # it fires on, as a trigger that never fired before
            entries = quarantined(node._node.store)
    assert [(e["unit"], e["id"], e["rows"][0]["size"]) for e in entries] == [
        ("row", f"cron:{row.hex()}", len(GARBAGE))
    ]
    assert any("quarantined" in r.getMessage() for r in caplog.records)
    with raw(data) as (txn, dbs):
        stored = CODEC.decode(txn.get(key("row", f"cron:{row.hex()}"), db=dbs["quarantine"]))
        assert stored.rows[0].data == GARBAGE
        assert CODEC.decode(txn.get(row, db=dbs["cron"])) > dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
