"""The floor under a workflow host: roost's own parts of a workflow, with no host around them.

A workflow host (issue 21) runs parts that are roost's, not the host's: the ``Driver`` with
the workflow's code, the history rows ``encode_activation`` writes, and the run record the
codec writes. Whatever a host does besides (starting, planning, committing, running
activities, delivering the EXIT) adds to what those parts cost. So a host that stores what
the floor encodes cannot be faster than the floor:

- ``workflows(n, records)``: N workflows of 3 async activities (``three_steps``) taken in
  passes over all open runs, as the executors take them. Each pass activates every run's
  driver and encodes its history row. Each activity's result is fed back as the
  ``ActivityResolved`` event a host records; nothing runs it. No store, no trio, no commit.
  ``records`` says which run records are encoded:
  - ``"both"``: at the first step and at the close, as the local host writes them;
  - ``"close"``: at the close only, the bound of a host that keeps a smaller row for open
    runs (issue 21's proposal; that row's own cost is not counted);
  - ``"none"``: never, the bound of a host that writes no run record at all.
- ``serial_starts(n)``: starts of ``echo`` one after another. Each is its driver's first
  activation, its history row and run record, committed in one fsync'd LMDB transaction to
  two tables (``runs`` and ``histories``), as a roost start is. They are timed in chunks
  that alternate with raw one-put fsync'd commits (``RawCommits``), as
  ``bench_workflows`` times roost's own serial starts.

The run record is the one a real node stored for the same workflow (read back from its
store), and the ids, ``Started`` event and PIDs take the shapes a node gives them, so the
rows have roost's sizes. The workflow code runs in a context built as the local host
builds it (``_FloorPorts``, after ``RunPorts``). The collector runs with the thresholds a
node's workflow runtime sets (``busy_collector``), as it does for roost's own side.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import functools
import os
import time
import types
from collections.abc import Callable, Iterator
from typing import Any, Literal

import lmdb

from benchmarks._harness import now
from benchmarks._wf_common import APP, echo, in_node, raw_commits, store, three_steps, tmpdir
from benchmarks._wf_common import wait_exits as _wait_exits
from roost import process
from roost._pid import Pid
from roost.actors._app import Entry
from roost.actors._current import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.storage import Codec, key
from roost.workflow import Driver, Ports
from roost.workflow._awaitables import DriverView
from roost.workflow._history import (
    ActivityResolved,
    Event,
    ScheduleActivity,
    Started,
    new_activation,
)
from roost.workflow._history_format import encode_activation
from roost.workflow._local._collector import busy_collector, idle_collector
from roost.workflow._local._records import RunRecord
from roost.workflow._recorded import is_plain

__all__ = ["Records", "serial_starts", "stored_record", "workflows"]

Records = Literal["both", "close", "none"]

_CODEC = Codec()
_WORKFLOW_HOST = f"{APP.name}:workflows"


@functools.cache
def stored_record(workflow: Callable[..., Any], *args: Any, finish: bool = True) -> RunRecord:
    """The run record a node stores for one run of ``workflow``: at its close if ``finish``."""

    async def body(node: Any) -> RunRecord:
        pid = await process.spawn(workflow, *args)
        if finish:
            process.monitor(pid)
            await _wait_exits(1)
        with store(node).read() as txn:
            (row,) = [v for _, v in txn.range("runs")]
        record: RunRecord = _CODEC.decode(row)
        return record

    with tmpdir() as tmp:
        return in_node(body, tmp)  # type: ignore[no-any-return]


class _FloorPorts(Ports):
    """A run's ports as the local host's ``RunPorts`` has them, for what these workflows use."""

    __slots__ = ("base", "context", "entry", "node", "pid")

    def __init__(self, base: contextvars.Context, node: Any, entry: Entry, pid: Pid) -> None:
        self.base, self.node, self.entry, self.pid = base, node, entry, pid

    def make_context(self, driver: DriverView) -> contextvars.Context:
        """A copy of the runtime's context in which the workflow code is the run's process."""
        ctx = self.base.copy()
        proc = WorkflowProcess(self.pid, self.entry, driver, {}, self.node)
        ctx.run(set_current, proc)
        ctx.run(use_backend, driver.backend)
        return ctx

    def check(self, value: object, what: str) -> None:
        """Encode ``value`` with the codec, as the local host checks it."""
        if not is_plain(value):
            _CODEC.encode(value, what=what)

    def encoded_size(self, value: object) -> int:
        """Bytes ``value`` takes in the history."""
        return len(_CODEC.encode(value))


class _Runs:
    """What the floor keeps of the workflow runtime: the base context and the app's entries."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.base = contextvars.copy_context()  # the runtime's own, as Drivers keeps it
        self.node = types.SimpleNamespace(app=APP)  # workflow code resolves entries by it

    def new(self, entry: Entry, args: list[Any]) -> tuple[Driver, list[Event], str, str]:
        """A new run's driver and first events, its workflow id and run id (fresh ones)."""
        record = self.record
        rand = os.urandom(16)  # as a start draws them: the run id's 8 bytes, the seed's 8
        workflow_id = f"{APP.name}-{os.urandom(8).hex()}"
        started = _started(record, workflow_id, rand, entry, args)
        pid = Pid.trusted("local", _WORKFLOW_HOST, workflow_id)
        driver = Driver(entry.fn, _FloorPorts(self.base, self.node, entry, pid))
        return driver, [started], workflow_id, started.run_id


def _started(
    record: RunRecord, workflow_id: str, rand: bytes, entry: Entry, args: list[Any]
) -> Started:
    """The ``Started`` event of a run of ``entry``, with ``record``'s queue, parent, attempt."""
    return Started(
        workflow_id=workflow_id,
        run_id=rand[:8].hex(),
        workflow_type=entry.id,
        args=args,
        seed=int.from_bytes(rand[8:16], "big"),
        context={},
        task_queue=record.task_queue,
        parent=record.parent,
        attempt=record.attempt,
    )


class _Open:
    """One open run of ``workflows``: its driver, its next events and activation number."""

    __slots__ = ("driver", "events", "index")

    def __init__(self, driver: Driver, events: list[Event]) -> None:
        self.driver, self.events, self.index = driver, events, 1


@contextlib.contextmanager
def _busy_collector() -> Iterator[None]:
    """The collector's thresholds as a node's workflow runtime sets them, meanwhile."""
    busy_collector()
    try:
        yield
    finally:
        idle_collector()


def workflows(n: int, records: Records = "both") -> dict[str, Any]:
    """N ``three_steps`` workflows through the driver, rows and ``records`` alone (see above)."""
    record = stored_record(three_steps, 1)
    with _busy_collector():
        return _workflows(n, record, records)


def _workflows(n: int, record: RunRecord, records: Records) -> dict[str, Any]:
    """``workflows``' timed part, with the collector set."""
    codec, encode = _CODEC, _CODEC.encode
    at = dt.datetime.now(dt.UTC)
    entry = APP.resolve(three_steps)
    t0, cpu0 = now(), time.process_time()
    runtime = _Runs(record)
    runs: list[_Open] = []
    for i in range(n):
        driver, events, _, _ = runtime.new(entry, [i])
        runs.append(_Open(driver, events))
    finished = 0
    while runs:
        still: list[_Open] = []
        for run in runs:
            driver, events, index = run.driver, run.events, run.index
            commands = driver.activate(at, events)
            row = encode_activation(codec, new_activation(index, at, events, commands))
            driver.recorded(len(row))
            scheduled = [c for c in commands if type(c) is ScheduleActivity]
            if records == "both" and index == 1:
                encode(record)
            if not scheduled:  # the close
                if records != "none":
                    encode(record)
                driver.close()
                finished += 1
                continue
            run.events = [
                ActivityResolved(seq=c.seq, value=c.args[0] + 1, error=None) for c in scheduled
            ]
            run.index = index + 1
            still.append(run)
        runs = still
    assert finished == n, f"{finished} of {n} workflows finished"
    return {"seconds": now() - t0, "cpu_seconds": time.process_time() - cpu0}


def serial_starts(n: int, chunk: int = 50) -> tuple[float, float]:
    """Seconds of ``n`` floor starts of ``echo`` and of ``n`` raw one-put commits (see above)."""
    record = stored_record(echo, finish=False)
    with _busy_collector():
        return _serial_starts(n, chunk, record)


def _serial_starts(n: int, chunk: int, record: RunRecord) -> tuple[float, float]:
    """``serial_starts``' timed part, with the collector set."""
    codec = _CODEC
    entry = APP.resolve(echo)
    runtime = _Runs(record)
    drivers: list[Driver] = []  # an open run keeps its driver
    with tmpdir() as tmp:
        env = lmdb.open(tmp, map_size=1 << 31, max_dbs=4, sync=True, metasync=True)
        try:
            runs_db, histories_db = env.open_db(b"runs"), env.open_db(b"histories")

            def start() -> None:
                at = dt.datetime.now(dt.UTC)
                driver, events, workflow_id, run_id = runtime.new(entry, [])
                commands = driver.activate(at, events)
                row = encode_activation(codec, new_activation(1, at, events, commands))
                driver.recorded(len(row))
                with env.begin(write=True) as txn:
                    txn.put(workflow_id.encode(), codec.encode(record), db=runs_db)
                    txn.put(key(run_id, 1), row, db=histories_db)
                drivers.append(driver)

            for _ in range(chunk):  # warm up, as bench_workflows does
                start()
            floor_s = raw_s = 0.0
            done = 0
            with raw_commits() as raw:
                while done < n:
                    size = min(chunk, n - done)
                    t0 = now()
                    for _ in range(size):
                        start()
                    floor_s += now() - t0
                    raw_s += raw.run(size)
                    done += size
        finally:
            env.close()
    return floor_s, raw_s
