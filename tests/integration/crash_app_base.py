"""What every crash-test scenario of ``crash_app.py`` shares: the app, its activities, logs.

``WORK`` and ``PHASE`` are set by ``crash_app.main`` before the node opens; the activities and
the scenarios read them here (``crash_app_base.PHASE``). The helpers at the end read the store
as JSON for the report the test checks.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import attrs
import crash_child
import trio

import roost
from roost import process
from roost.storage import Codec, key
from roost.workflow._local._pending import read_pending

app = roost.App("crash")
HOST = "crash:workflows"
WORK = Path()
PHASE = "run"


def square_plus_one(x: int) -> int:
    """What ``step`` / ``sync_step`` compute (the test uses it for expected results)."""
    return x * x + 1


# -- logs ------------------------------------------------------------------------------------


def append_line(name: str, **fields: Any) -> None:
    """Append one JSON line to ``WORK/name`` (see ``crash_child``)."""
    crash_child.append_line(WORK, name, **fields)


def touch(name: str) -> None:
    """Create the marker ``WORK/name`` (see ``crash_child``)."""
    crash_child.touch(WORK, name)


def _activity_line(event: str, label: str) -> None:
    info = roost.activity_info()
    assert info is not None
    append_line(
        "activities.log",
        event=event,
        wf=info.workflow_id,
        seq=info.seq,
        attempt=info.attempt,
        key=info.idempotency_key,
        label=label,
        phase=PHASE,
        os_pid=os.getpid(),
    )


# -- activities ------------------------------------------------------------------------------


def _crash_point(label: str) -> bool:
    """In the first run: kill ourselves at a ``die-`` step; True for a ``hold-`` step."""
    if PHASE != "run":
        return False
    if label.startswith("die-"):
        os.kill(os.getpid(), signal.SIGKILL)
    if label.startswith("hold-"):
        touch(f"held-{label}")
        return True
    return False


@app.activity
async def step(label: str, x: int, delay: float) -> int:
    """An async activity (a trio task): logs, sleeps ``delay``, logs, returns x*x+1."""
    _activity_line("start", label)
    if _crash_point(label):
        await trio.sleep_forever()  # until the test kills the process
    await trio.sleep(delay)
    _activity_line("done", label)
    return square_plus_one(x)


@app.activity
def sync_step(label: str, x: int, delay: float) -> int:
    """The same as ``step``, as a sync activity (runs in a worker thread)."""
    _activity_line("start", label)
    if _crash_point(label):
        while True:  # until the test kills the process
            time.sleep(0.05)
    time.sleep(delay)
    _activity_line("done", label)
    return square_plus_one(x)


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="0.1s", backoff_coefficient=1.0))
async def flaky(label: str, x: int, failures: int) -> int:
    """Fails its first ``failures`` attempts; a ``hold-`` one holds on attempt 2 (first run)."""
    _activity_line("start", label)
    info = roost.activity_info()
    assert info is not None
    if info.attempt == 2 and _crash_point(label):
        await trio.sleep_forever()  # until the test kills the process
    if info.attempt <= failures:
        raise ConnectionError(f"{label} attempt {info.attempt} failed")
    _activity_line("done", label)
    return square_plus_one(x)


# -- starting workflows ---------------------------------------------------------------------


def wf_pid(workflow_id: str) -> roost.Pid:
    """The PID of a workflow of this app on a node named "local"."""
    return roost.Pid("local", HOST, workflow_id)


async def start(workflow_id: str, entry: Any, *args: Any) -> roost.Pid:
    """Start a workflow under an explicit id."""
    return await process.with_options(id=workflow_id).spawn(entry, *args)


# -- reading the store and reporting -------------------------------------------------------


def to_json(value: Any) -> Any:
    """A JSON form of history events, records and results (attrs classes get a "type")."""
    if attrs.has(type(value)):
        out = {"type": type(value).__name__}
        for field in attrs.fields(type(value)):
            out[field.name] = to_json(getattr(value, field.name))
        return out
    if isinstance(value, roost.Error):
        return {"type": "Error", "kind": str(value.kind), "message": value.message}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, roost.Pid):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def decode(codec: Codec, data: bytes) -> Any:
    return codec.decode(data)


def pending_tasks(txn: Any, codec: Codec, record: Any) -> list[Any]:
    """The activity tasks an open run waits for (its history and retry rows); none if closed.

    Scheduled activities have no row of their own (see roost.workflow._local._pending).
    """
    if record.status.value != "running":
        return [codec.decode(v) for _, v in txn.prefix("tasks", key(record.run_id))]
    return read_pending(txn, codec, record)


def read_lines(name: str) -> list[dict[str, Any]]:
    """The complete JSON lines of ``WORK/name`` (none if it does not exist)."""
    path = WORK / name
    if not path.exists():
        return []
    *complete, _partial = path.read_text().split("\n")
    return [json.loads(line) for line in complete]


def write_report(report: dict[str, Any]) -> None:
    """Write ``report`` as ``WORK/resume.json`` (renamed into place: never read half-written)."""
    out = WORK / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, sort_keys=True))
    out.with_suffix(".tmp").replace(out)
