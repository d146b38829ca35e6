"""The reference executor: the bare durable workflow executor every workflow figure is a ratio of.

It keeps roost's durability contract and nothing else (issue 15):

- A workflow's start record, each activity result and its completion are written in an
  fsync'd LMDB transaction (the environment is opened with ``sync=True``) *before* the
  workflow's next side effect: its first activity runs only once its start is durable, the
  next activity only once the previous result is, and the result is announced only once the
  completion is. A result and the workflow's reaction to it (the next call, or the
  completion) share one commit, as in roost, so a 3-activity workflow has 4 commits on its
  critical path: start, result 1, result 2, result 3 + completion.
- Writes are group-committed: everything queued since the last commit goes into one
  transaction (``Executor.commit``; in the batched variants a pass is one such request).
- After a ``kill -9`` (``Executor.recover``) a workflow's coroutine is replayed from its
  recorded results; only the activity whose result was not committed runs again.

A workflow is a plain coroutine function whose only awaits are ``await call(activity,
*args)`` (it must be deterministic, as in roost); activities are async or sync functions.
Three ways to run workflows, measured side by side by ``benchmarks.bench_reference``:

a. ``run_tasks``: one trio task per workflow; each awaits its own commits (group-committed
   by the writer task) and its activities (a sync one in its own thread hop).
b. ``run_batched``: one task steps every ready workflow coroutine per pass, runs the pass's
   activities and commits the pass in one transaction (a sync activity: one hop each).
c. ``run_batched(..., thread_batch=True)``: b, with the pass's sync activities run in one
   ``trio.to_thread`` hop.

No features beyond that: no failures, retries, timers, messages or cancellation; an
activity or a workflow that raises stops the executor. In b and c an async activity that
blocks holds up its whole pass: the yardstick is for quick activities.

Records (one LMDB database, cbor2 values): ``s`` + id -> [workflow name, args];
``r`` + id + seq -> the result of the workflow's ``seq``-th activity; ``d`` + id -> its
result once it completed.
"""

from __future__ import annotations

import inspect
import struct
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from contextlib import asynccontextmanager
from typing import Any

import cbor2
import lmdb
import trio

__all__ = [
    "Call",
    "Executor",
    "Run",
    "call",
    "open_executor",
    "run_batched",
    "run_tasks",
    "snapshot",
]

Record = tuple[bytes, bytes]
Workflow = Callable[..., Coroutine[Any, Any, Any]]
_ID = struct.Struct(">Q")
_SEQ = struct.Struct(">QI")  # after b"r": (workflow id, seq)


class Call:
    """The one command a workflow can give: run ``fn(*args)`` and send back its result."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn = fn
        self.args = args

    def __await__(self) -> Generator[Call, Any, Any]:
        return (yield self)  # the executor resumes the coroutine with the result


def call(fn: Callable[..., Any], *args: Any) -> Call:
    """``await call(activity, *args)`` inside a workflow: the activity's result."""
    return Call(fn, args)


class Run:
    """One workflow run: its id, its coroutine and the results recorded so far."""

    __slots__ = ("args", "coro", "fn", "id", "recorded", "result", "seq")

    def __init__(
        self, wf_id: int, fn: Workflow, args: tuple[Any, ...], recorded: list[Any]
    ) -> None:
        self.id = wf_id
        self.fn = fn
        self.args = args
        self.coro: Coroutine[Any, Any, Any] | None = None  # created by replay()
        self.recorded = recorded  # results to replay (a recovered run), else []
        self.seq = 0  # the seq of the next activity result
        self.result: Any = None  # the workflow's return value, once it returned

    def replay(self) -> Call | None:
        """Step to the first command not yet answered by a recorded result (None: done)."""
        self.coro = self.fn(*self.args)
        cmd = self._send(None)
        for value in self.recorded:
            assert cmd is not None, f"workflow {self.id} finished before its recorded results"
            self.seq += 1
            cmd = self._send(value)
        return cmd

    def answer(self, value: Any) -> tuple[list[Record], Call | None]:
        """The records for an activity's result and the workflow's next command (None: done).

        The records must be durable before that command (or the completion) takes effect.
        """
        records = [(b"r" + _SEQ.pack(self.id, self.seq), cbor2.dumps(value))]
        self.seq += 1
        cmd = self._send(value)
        if cmd is None:
            records.append(self.done_record())
        return records, cmd

    def start_record(self) -> Record:
        return b"s" + _ID.pack(self.id), cbor2.dumps([self.fn.__name__, list(self.args)])

    def done_record(self) -> Record:
        return b"d" + _ID.pack(self.id), cbor2.dumps(self.result)

    def _send(self, value: Any) -> Call | None:
        assert self.coro is not None
        try:
            cmd = self.coro.send(value)
        except StopIteration as stop:
            self.result = stop.value
            return None
        assert isinstance(cmd, Call), f"a workflow may only await call(...), got {cmd!r}"
        return cmd


class Executor:
    """An LMDB environment (fsync on every commit) with a group-committing writer task.

    ``on_batch(records)`` (tests only) is called in the writer's thread with each batch just
    before it is written, to crash the process at a chosen point.
    """

    def __init__(self, path: str, on_batch: Callable[[list[Record]], None] | None = None) -> None:
        self.env = lmdb.open(path, map_size=1 << 32, sync=True, metasync=True)
        self.on_batch = on_batch
        self.commits = 0
        self._queue: list[Record] = []
        self._durable = trio.Event()  # set once everything now in _queue is committed
        self._wake = trio.Event()
        with self.env.begin() as txn:  # "s" keys sort last, by id: the last key is the newest
            cur = txn.cursor()
            last = cur.key() if cur.last() else b""
            self._next_id = _ID.unpack(last[1:])[0] + 1 if last[:1] == b"s" else 1

    def new_run(self, fn: Workflow, *args: Any) -> tuple[Run, list[Record]]:
        """A fresh run and the start record to commit before its first side effect."""
        run = Run(self._next_id, fn, args, [])
        self._next_id += 1
        return run, [run.start_record()]

    def recover(self, workflows: dict[str, Workflow]) -> list[tuple[Run, list[Record]]]:
        """Every started, unfinished run, with its recorded results to replay (no records)."""
        runs: list[tuple[Run, list[Record]]] = []
        with self.env.begin() as txn:
            cur = txn.cursor()
            starts = list(cur.iternext()) if cur.set_range(b"s") else []  # "s" keys sort last
            for k, v in starts:
                if txn.get(b"d" + k[1:]) is not None:
                    continue
                prefix = b"r" + k[1:]
                recorded = []
                if cur.set_range(prefix):
                    for rk, rv in cur.iternext():
                        if not rk.startswith(prefix):
                            break
                        recorded.append(cbor2.loads(rv))
                name, args = cbor2.loads(v)
                runs.append((Run(_ID.unpack(k[1:])[0], workflows[name], tuple(args), recorded), []))
        return runs

    async def commit(self, records: list[Record]) -> None:
        """Return once ``records`` are in a committed, fsync'd transaction."""
        self._queue += records
        durable = self._durable
        self._wake.set()
        await durable.wait()

    async def writer(self) -> None:
        """Commit everything queued since the last commit in one transaction, for ever."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            batch, durable = self._queue, self._durable
            self._queue, self._durable = [], trio.Event()
            await trio.to_thread.run_sync(self._write, batch)
            durable.set()

    def _write(self, batch: list[Record]) -> None:
        if self.on_batch is not None:
            self.on_batch(batch)
        with self.env.begin(write=True) as txn:  # the commit fsyncs (sync=True)
            for k, v in batch:
                txn.put(k, v)
        self.commits += 1


@asynccontextmanager
async def open_executor(
    path: str, on_batch: Callable[[list[Record]], None] | None = None
) -> AsyncIterator[Executor]:
    """An executor on the data directory ``path``, its writer running meanwhile."""
    ex = Executor(path, on_batch)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ex.writer)
            yield ex
            nursery.cancel_scope.cancel()
    finally:
        ex.env.close()


async def _perform(cmd: Call) -> Any:
    if inspect.iscoroutinefunction(cmd.fn):
        return await cmd.fn(*cmd.args)
    return await trio.to_thread.run_sync(cmd.fn, *cmd.args)


# -- a. one trio task per workflow -----------------------------------------------------------


async def run_tasks(ex: Executor, runs: list[tuple[Run, list[Record]]]) -> dict[int, Any]:
    """Variant a: each run in its own trio task. Returns each run's result by id."""
    results: dict[int, Any] = {}

    async def one(run: Run, records: list[Record]) -> None:
        cmd = run.replay()
        if cmd is None:  # finished without an activity
            records = [*records, run.done_record()]
        while True:
            if records:
                await ex.commit(records)
            if cmd is None:
                results[run.id] = run.result
                return
            records, cmd = run.answer(await _perform(cmd))

    async with trio.open_nursery() as nursery:
        for run, records in runs:
            nursery.start_soon(one, run, records)
    return results


# -- b and c. one task stepping every workflow per pass --------------------------------------


async def run_batched(
    ex: Executor, runs: list[tuple[Run, list[Record]]], *, thread_batch: bool = False
) -> dict[int, Any]:
    """Variants b and c: passes of (perform every ready command, step, commit the pass).

    ``thread_batch``: the pass's sync activities run in one thread hop (c), else one each.
    """
    results: dict[int, Any] = {}
    batch: list[Record] = []
    ready: list[tuple[Run, Call]] = []
    finished: list[Run] = []
    for run, records in runs:
        batch += records
        cmd = run.replay()
        if cmd is None:
            batch.append(run.done_record())
            finished.append(run)
        else:
            ready.append((run, cmd))
    while True:
        if batch:
            await ex.commit(batch)  # the pass: its effects below happen only after this
        for run in finished:
            results[run.id] = run.result
        if not ready:
            return results
        values = await _perform_all([cmd for _, cmd in ready], thread_batch)
        batch, finished, still = [], [], []
        for (run, _), value in zip(ready, values, strict=True):
            records, cmd = run.answer(value)
            batch += records
            if cmd is None:
                finished.append(run)
            else:
                still.append((run, cmd))
        ready = still


async def _perform_all(cmds: list[Call], thread_batch: bool) -> list[Any]:
    if not thread_batch:
        return [await _perform(cmd) for cmd in cmds]
    values: list[Any] = [None] * len(cmds)
    sync = [i for i, cmd in enumerate(cmds) if not inspect.iscoroutinefunction(cmd.fn)]
    for i, cmd in enumerate(cmds):
        if inspect.iscoroutinefunction(cmd.fn):
            values[i] = await cmd.fn(*cmd.args)

    def hop() -> None:
        for i in sync:
            values[i] = cmds[i].fn(*cmds[i].args)

    if sync:
        await trio.to_thread.run_sync(hop)
    return values


# -- inspection ------------------------------------------------------------------------------


def snapshot(path: str) -> dict[str, Any]:
    """What a data directory holds: started ids, results by (id, seq), results by done id."""
    env = lmdb.open(path, readonly=True, lock=False)
    out: dict[str, Any] = {"started": set(), "results": {}, "done": {}}
    try:
        with env.begin() as txn:
            for k, v in txn.cursor():
                if k[:1] == b"s":
                    out["started"].add(_ID.unpack(k[1:])[0])
                elif k[:1] == b"d":
                    out["done"][_ID.unpack(k[1:])[0]] = cbor2.loads(v)
                else:
                    out["results"][_SEQ.unpack(k[1:])] = cbor2.loads(v)
    finally:
        env.close()
    return out
