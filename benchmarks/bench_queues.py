"""Queue pipelines: messages/s through a 3-step pipeline (standard and FIFO), DLQ moves/s.

The reference is raw LMDB doing the same number of fsync'd writes in the same number of
group commits roost needed (measured in the same run): what the storage alone allows for
that commit pattern. Each pipeline message costs roost four commits' worth of writes: the
enqueue, then one acknowledgement per step, carrying the hand-off to the next step.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from typing import Any

import lmdb
import trio

import roost
from benchmarks._harness import Result, now
from roost.storage import key

SUITE = "queues"
APP = roost.App("qbench")
DONE: dict[str, int] = {"n": 0}
FINISHED: list[trio.Event] = []
TARGET: dict[str, int] = {"n": 0}
RECORD = b"v" * 200


def _setup(concurrency: int) -> None:
    for fifo in (False, True):
        suffix = "-fifo" if fifo else ""
        for step in (1, 2, 3):
            settings: dict[str, Any] = {"concurrency": concurrency, "jitter": 0}
            if fifo:
                settings.update(type="fifo", message_group_field="group")
            APP.queue(f"step{step}{suffix}", **settings)
    APP.queue("doomed", max_retries=0, concurrency=concurrency)


@APP.activity
async def step1(msg: dict[str, Any]) -> None:
    await roost.enqueue(f"step2{msg['suffix']}", step2, msg)


@APP.activity
async def step2(msg: dict[str, Any]) -> None:
    await roost.enqueue(f"step3{msg['suffix']}", step3, msg)


@APP.activity
async def step3(msg: dict[str, Any]) -> None:
    _done()


@APP.activity
async def fails(msg: dict[str, Any]) -> None:
    _done()
    raise roost.Error("always", kind="Unavailable")


def _done() -> None:
    DONE["n"] += 1
    if DONE["n"] >= TARGET["n"] and FINISHED:
        FINISHED[-1].set()


def _in_node(body: Any) -> Any:
    with tempfile.TemporaryDirectory(prefix="roost-bench-q-") as tmp:

        async def main() -> Any:
            async with roost.open_node(APP, tmp, shutdown_grace=0) as node:
                return await body(node)

        return trio.run(main)


def pipeline(n: int, fifo: bool, groups: int) -> tuple[float, int]:
    """Messages/s through step1 -> step2 -> step3 and the commits it took."""
    suffix = "-fifo" if fifo else ""

    async def body(node: Any) -> tuple[float, int]:
        DONE["n"], TARGET["n"] = 0, n
        FINISHED.append(trio.Event())
        store = node._node.store
        commits0 = store.stats.commits
        t0 = now()
        async with trio.open_nursery() as nursery:  # enqueue concurrently: group commits
            for i in range(n):
                msg = {"i": i, "group": f"g{i % groups}", "suffix": suffix}
                nursery.start_soon(roost.enqueue, f"step1{suffix}", step1, msg)
        await FINISHED[-1].wait()
        return n / (now() - t0), store.stats.commits - commits0

    result: tuple[float, int] = _in_node(body)
    return result


def dlq_moves(n: int) -> float:
    """Messages/s that fail their only attempt and move to the DLQ."""

    async def body(node: Any) -> float:
        DONE["n"], TARGET["n"] = 0, n
        FINISHED.append(trio.Event())
        t0 = now()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(roost.enqueue, "doomed", fails, {"i": i})
        await FINISHED[-1].wait()
        # The moves commit on the writer thread after the calls: poll the store for them.
        while len(node.dlq.list("doomed", limit=n)) < n:  # noqa: ASYNC110 - see above
            await trio.sleep(0.001)
        return n / (now() - t0)

    # Every move logs a warning (as it should in production): not n lines in the table.
    quiet = logging.getLogger("roost.queues")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        result: float = _in_node(body)
    finally:
        quiet.setLevel(level)
    return result


def raw_group_commits(writes: int, commits: int) -> float:
    """Seconds raw LMDB takes for ``writes`` fsync'd writes spread over ``commits`` txns."""
    commits = max(1, commits)
    per = max(1, writes // commits)
    with tempfile.TemporaryDirectory(prefix="roost-bench-qraw-") as tmp:
        env = lmdb.open(os.path.join(tmp, "raw"), map_size=1 << 30, sync=True, metasync=True)
        try:
            t0 = time.perf_counter()
            written = 0
            while written < writes:
                with env.begin(write=True) as txn:
                    for _ in range(min(per, writes - written)):
                        txn.put(key(written), RECORD)
                        written += 1
            return time.perf_counter() - t0
        finally:
            env.close()


def run(quick: bool = False) -> list[Result]:
    """The queue rows for ``python -m benchmarks``."""
    n = 200 if quick else 5000
    concurrency = 16 if quick else 64
    if "step1" not in APP.declared.get("queues", {}):
        _setup(concurrency)
    results = []
    for fifo in (False, True):
        rate, commits = pipeline(n, fifo, groups=concurrency)
        raw_seconds = raw_group_commits(4 * n, commits)
        kind = f"fifo, {concurrency} groups" if fifo else "standard"
        results.append(
            Result(
                suite=SUITE,
                name=f"3-step pipeline, {kind}, N={n}",
                unit="msgs/s",
                roost=rate,
                raw=n / raw_seconds,
                raw_label=f"raw lmdb, {4 * n} writes in {commits} txns",
                note=f"concurrency {concurrency} per queue; {commits} group commits",
            )
        )
    dead = 100 if quick else 2000
    results.append(
        Result(
            suite=SUITE,
            name=f"DLQ moves, N={dead}",
            unit="moves/s",
            roost=dlq_moves(dead),
            note="one failed attempt each (max_retries=0), then moved to the DLQ",
        )
    )
    return results
