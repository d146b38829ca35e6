"""The floor under any workflow host: roost's own parts of a workflow, with no host around them.

A workflow host (issue 21) runs three parts that are roost's, not the host's: the
``Driver`` with the workflow's code, the history rows ``encode_activation`` writes, and
the run record the codec writes. Whatever a host does besides (starting, planning,
committing, running activities, delivering the EXIT) adds to what those parts cost, so
these figures bound every host's from above:

- ``workflows(n)``: N workflows of 3 async activities (``three_steps``) taken in passes
  over all open runs, as the executors take them: each pass activates every run's driver,
  encodes its history row, and at its first and last step encodes its run record. Each
  activity's result is fed back as the ``ActivityResolved`` event a host records; nothing
  runs it. No store, no trio, no commit.
  ``records=False`` leaves the run record out too: what no host can go below
  whatever it stores about a run.
- ``serial_starts(n)``: starts of ``echo`` one after another, each its driver's first
  activation, its history row and run record, committed in one fsync'd LMDB transaction
  to two tables (``runs`` and ``histories``) as a roost start is; timed in chunks that
  alternate with raw one-put fsync'd commits (``RawCommits``), as ``bench_workflows``
  times roost's own serial starts.

The run record encoded is the one a real node stored for the workflow (read back from its
store), so its size and shape are roost's.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from typing import Any

import lmdb

from benchmarks._harness import now
from benchmarks._wf_common import APP, echo, in_node, raw_commits, store, three_steps, tmpdir
from benchmarks._wf_common import wait_exits as _wait_exits
from roost import process
from roost._pid import Pid
from roost.storage import Codec
from roost.workflow._driver import Driver
from roost.workflow._history import Activation, ActivityResolved, ScheduleActivity, Started
from roost.workflow._history_format import encode_activation
from roost.workflow._replayer import _ReplayPorts

__all__ = ["serial_starts", "stored_record", "workflows"]

_CODEC = Codec()
_PARENT = Pid("node", "1", "00001")


@functools.cache
def stored_record(workflow: Any, *args: Any, finish: bool = True) -> Any:
    """The run record a node stores for one run of ``workflow``: at its close if ``finish``."""

    async def body(node: Any) -> Any:
        pid = await process.spawn(workflow, *args)
        if finish:
            process.monitor(pid)
            await _wait_exits(1)
        with store(node).read() as txn:
            (row,) = [v for _, v in txn.range("runs")]
        return _CODEC.decode(row)

    with tmpdir() as tmp:
        return in_node(body, tmp)


def _driver(workflow: Any, i: int, args: list[Any]) -> tuple[Driver, Started]:
    entry = APP.resolve(workflow)
    started = Started(
        workflow_id=f"floor-{i:016x}",
        run_id=f"{i:016x}",
        workflow_type=entry.id,
        args=args,
        seed=i * 7919,
        context={},
        task_queue="default",
        parent=_PARENT,
        attempt=1,
    )
    pid = Pid("local", f"{APP.name}:workflows", started.workflow_id)
    return Driver(entry.fn, _ReplayPorts(APP, pid, started, {}, {})), started


def workflows(n: int, record: Any = None, *, records: bool = True) -> dict[str, Any]:
    """N ``three_steps`` workflows through the driver, rows and records alone (see above).

    ``records=False``: no run record is encoded at all (a host that kept none).
    """
    if record is None and records:
        record = stored_record(three_steps, 1)
    codec, encode = _CODEC, _CODEC.encode
    at = dt.datetime.now(dt.UTC)
    t0, cpu0 = now(), time.process_time()
    runs: list[list[Any]] = []
    for i in range(n):
        driver, started = _driver(three_steps, i, [i])
        runs.append([driver, [started], 1])
    finished = 0
    while runs:
        still: list[list[Any]] = []
        for run in runs:
            driver, events, index = run
            commands = driver.activate(at, events)
            row = encode_activation(
                codec, Activation(index=index, at=at, events=events, commands=commands)
            )
            driver.recorded(len(row))
            scheduled = [c for c in commands if type(c) is ScheduleActivity]
            if records and (index == 1 or not scheduled):  # at the start and at the close
                encode(record)
            if not scheduled:
                driver.close()
                finished += 1
                continue
            run[1] = [
                ActivityResolved(seq=c.seq, value=c.args[0] + 1, error=None) for c in scheduled
            ]
            run[2] = index + 1
            still.append(run)
        runs = still
    assert finished == n, f"{finished} of {n} workflows finished"
    return {"seconds": now() - t0, "cpu_seconds": time.process_time() - cpu0}


def serial_starts(n: int, chunk: int = 50) -> tuple[float, float]:
    """Seconds of ``n`` floor starts of ``echo`` and of ``n`` raw one-put commits (see above)."""
    record = stored_record(echo, finish=False)
    codec = _CODEC
    drivers: list[Driver] = []
    with tmpdir() as tmp:
        env = lmdb.open(tmp, map_size=1 << 31, max_dbs=4, sync=True, metasync=True)
        try:
            runs_db, histories_db = env.open_db(b"runs"), env.open_db(b"histories")

            def start(i: int) -> None:
                at = dt.datetime.now(dt.UTC)
                driver, started = _driver(echo, i, [])
                commands = driver.activate(at, [started])
                row = encode_activation(
                    codec, Activation(index=1, at=at, events=[started], commands=commands)
                )
                driver.recorded(len(row))
                with env.begin(write=True) as txn:
                    txn.put(started.workflow_id.encode(), codec.encode(record), db=runs_db)
                    txn.put(started.run_id.encode() + b"\0" * 7 + b"\1", row, db=histories_db)
                drivers.append(driver)  # an open run keeps its driver

            for i in range(chunk):  # warm up, as bench_workflows does
                start(i)
            floor_s = raw_s = 0.0
            done = 0
            with raw_commits() as raw:
                while done < n:
                    size = min(chunk, n - done)
                    t0 = now()
                    for i in range(size):
                        start(chunk + done + i)
                    floor_s += now() - t0
                    raw_s += raw.run(size)
                    done += size
        finally:
            env.close()
    return floor_s, raw_s
