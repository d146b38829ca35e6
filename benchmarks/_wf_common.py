"""Shared pieces of the durable-workflow benchmarks (workflows, replay, recovery, disk).

One ``roost.App`` ("wfbench") holds every workflow and activity these suites run, so a
child interpreter that imports this module can resume what another one stored. Also
here: running a body inside a node, and the raw py-lmdb references (fsync'd commits one
at a time, group commits, one transaction, open + scan of a data directory).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb
import trio

import roost
from benchmarks._harness import now
from roost import funcs, process
from roost.storage import key

__all__ = [
    "APP",
    "HANG",
    "RAW_VALUE",
    "RawCommits",
    "count_events",
    "in_node",
    "manager",
    "quantile",
    "raw_commit_rate",
    "raw_commits",
    "raw_group_commits",
    "raw_one_txn",
    "raw_scan",
    "store",
    "three_sync_steps",
    "tmpdir",
    "wait_exits",
    "writes_per_workflow",
]

APP = roost.App("wfbench")
RAW_VALUE = b"v" * 200

# ``hang`` blocks for ever while ``HANG["on"]`` (a recovery build child sets it), counting
# the attempts that reached it; in any other interpreter it returns at once.
HANG: dict[str, Any] = {"on": False, "count": 0, "target": 0, "event": None}


# -- roost entries ---------------------------------------------------------------------------


@APP.activity
async def step(x: int) -> int:
    return x + 1


@APP.activity
def sync_step(x: int) -> int:
    """``step`` as a sync activity (run in a worker thread)."""
    return x + 1


@APP.activity
async def hang(x: int) -> int:
    if HANG["on"]:
        HANG["count"] += 1
        if HANG["count"] >= HANG["target"] and HANG["event"] is not None:
            HANG["event"].set()
        await trio.sleep_forever()
    return x + 1


@APP.workflow
async def three_steps(x: int) -> int:
    a = await funcs.call(step, x)
    b = await funcs.call(step, a)
    return await funcs.call(step, b)


@APP.workflow
async def three_sync_steps(x: int) -> int:
    """``three_steps`` with sync activities."""
    a = await funcs.call(sync_step, x)
    b = await funcs.call(sync_step, a)
    return await funcs.call(sync_step, b)


@APP.workflow
async def stuck_steps(x: int) -> int:
    """Three activities; the middle one hangs in a recovery build child."""
    a = await funcs.call(step, x)
    b = await funcs.call(hang, a)
    return await funcs.call(step, b)


@APP.workflow
async def echo() -> int:
    inbox = process.listen("ping", message=True)
    count = 0
    while True:
        msg = await inbox.receive()
        if msg.payload is None:
            return count
        process.send(msg.sender, "pong", msg.payload)
        count += 1


@APP.workflow
async def long_history(k: int, parent: roost.Pid) -> int:
    for i in range(k):
        await funcs.call(step, i)
    process.send(parent, "built", k)
    msg = await process.listen("go", message=True).receive()
    process.send(msg.sender, "done", k)
    return k


@APP.workflow
async def sleeper(seconds: float, parent: roost.Pid) -> float:
    process.send(parent, "armed", seconds)  # committed with the timer, in one activation
    await roost.sleep(seconds)
    return seconds


@APP.workflow
async def waiter(parent: roost.Pid) -> int:
    """Reports in, then blocks on a signal: a cached, idle workflow."""
    process.send(parent, "armed", 1)
    return int(await process.listen("go").receive())


@APP.process
async def idle_inbox() -> None:
    await process.inbox().receive()


# -- plumbing --------------------------------------------------------------------------------


@contextmanager
def tmpdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="roost-bench-wf-") as tmp:
        yield tmp


def in_node(
    body: Callable[[Any], Awaitable[Any]], data_dir: str, durability: str = "sync", **opts: Any
) -> Any:
    """Run ``body(node)`` as the attached process of a node on ``data_dir``."""

    async def main() -> Any:
        async with roost.open_node(
            APP, data_dir, durability=durability, shutdown_grace=0, **opts
        ) as node:
            return await body(node)

    return trio.run(main)


def store(node: Any) -> Any:
    return node._node.store


def manager(node: Any) -> Any:
    return node._node.local_workflows


async def wait_exits(n: int) -> None:
    events = process.events()
    for _ in range(n):
        ev = await events.receive()
        if ev.error is not None:
            raise RuntimeError(f"workflow {ev.pid} failed: {ev.error}")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def count_events(history: list[Any]) -> int:
    """Events and commands in ``node.history(...)``, without its activation markers."""
    return sum(1 for item in history if type(item).__name__ != "WorkflowTask")


# -- raw py-lmdb references ------------------------------------------------------------------


def _open_raw(path: str) -> lmdb.Environment:
    return lmdb.open(path, map_size=1 << 31, sync=True, metasync=True)


class RawCommits:
    """A py-lmdb environment (fsync on) that times runs of dependent one-write commits."""

    def __init__(self, path: str) -> None:
        self.env = _open_raw(path)
        self._next = 0

    def run(self, commits: int) -> float:
        """Seconds for ``commits`` fsync'd commits in a row, one small write each."""
        t0 = now()
        for _ in range(commits):
            with self.env.begin(write=True) as txn:
                txn.put(key(self._next), RAW_VALUE)
            self._next += 1
        return now() - t0

    def close(self) -> None:
        self.env.close()


@contextmanager
def raw_commits() -> Iterator[RawCommits]:
    with tmpdir() as tmp:
        raw = RawCommits(tmp)
        try:
            yield raw
        finally:
            raw.close()


def raw_commit_rate(commits: int) -> float:
    """Fsync'd commits per second, one write each, from one thread."""
    with raw_commits() as raw:
        return commits / raw.run(commits)


def raw_group_commits(writes: int, commits: int, value: bytes) -> float:
    """Seconds for ``writes`` puts of ``value`` spread evenly over ``commits`` fsync'd txns:
    the storage alone, with roost's own commit pattern."""
    commits = max(1, min(commits, writes))
    with tmpdir() as tmp:
        env = _open_raw(tmp)
        try:
            t0 = now()
            written = 0
            for c in range(commits):
                upto = writes * (c + 1) // commits
                with env.begin(write=True) as txn:
                    while written < upto:
                        txn.put(key(written), value)
                        written += 1
            return now() - t0
        finally:
            env.close()


def raw_one_txn(writes: int, value: bytes) -> float:
    """Seconds to do ``writes`` puts in one fsync'd transaction (the ceiling)."""
    return raw_group_commits(writes, 1, value)


def raw_scan(data_dir: str) -> float:
    """Seconds to open ``data_dir`` with py-lmdb and read every table (recovery's I/O floor)."""
    t0 = now()
    env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                for _ in txn.cursor(db=db):
                    pass
    finally:
        env.close()
    return now() - t0


# -- calibration -----------------------------------------------------------------------------


class _CountingTxn:
    def __init__(self, txn: Any, tally: dict[str, int]) -> None:
        self._txn = txn
        self._tally = tally

    def put(self, table: str, k: bytes, v: bytes) -> None:
        self._tally["writes"] += 1
        self._tally["bytes"] += len(k) + len(v)
        self._txn.put(table, k, v)

    def delete(self, table: str, k: bytes) -> bool:
        self._tally["writes"] += 1
        return bool(self._txn.delete(table, k))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


def writes_per_workflow(n: int = 20) -> tuple[float, float]:
    """Calibration (not timed): puts+deletes and bytes put per workflow of 3 activities."""
    tally = {"writes": 0, "bytes": 0}

    async def body(node: Any) -> None:
        st = store(node)
        transact = st.transact

        async def counting(fn: Callable[[Any], Any]) -> Any:
            return await transact(lambda txn: fn(_CountingTxn(txn, tally)))

        st.transact = counting  # shadow the method on this instance only

        async def start(i: int) -> None:
            process.monitor(await process.spawn(three_steps, i))

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(start, i)
        await wait_exits(n)

    with tmpdir() as tmp:
        in_node(body, os.path.join(tmp, "data"))
    return tally["writes"] / n, tally["bytes"] / max(1, tally["writes"])
