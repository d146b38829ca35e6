"""Storage benchmark: roost's group commit against raw py-lmdb, plus codec throughput.

Run: .venv/bin/python benchmarks/bench_storage.py [--quick]

Rows (writes/s of ~200-byte records, all with fsync on commit unless noted):
- raw lmdb, 1 commit/write  the floor: one fsync'd transaction per record
- raw lmdb, 1 txn           the ceiling: every record in a single transaction
- store.transact x N tasks  roost: N concurrent trio tasks, one record each, group-committed
- trio only                 the trio limit: N tasks that each just checkpoint (no storage)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

import lmdb
import trio

from benchmarks._harness import Result
from roost.storage import Codec, key, open_lmdb_store

RECORD = b"r" * 200
EVENT: dict[str, Any] = {
    "type": "ActivityTaskCompleted",
    "seq": 12345,
    "at": 1732892000.123,
    "workflow_id": "wf-000123",
    "run_id": "3f2a8a8e-1c2b-4b8e-9c1e-2f1e1a2b3c4d",
    "activity": "charge_card",
    "result": {"ok": True, "amount": 4200, "currency": "EUR", "items": [1, 2, 3, 4]},
    "attempt": 1,
    "tags": ["payments", "eu"],
}


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_commit_per_write(path: str, n: int) -> float:
    env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
    try:

        def run() -> None:
            for i in range(n):
                with env.begin(write=True) as txn:
                    txn.put(key(i), RECORD)

        return n / timed(run)
    finally:
        env.close()


def raw_one_txn(path: str, n: int) -> float:
    env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
    try:

        def run() -> None:
            with env.begin(write=True) as txn:
                for i in range(n):
                    txn.put(key(i), RECORD)

        return n / timed(run)
    finally:
        env.close()


def group_commit(path: str, tasks: int, durability: str) -> tuple[float, int]:
    store = open_lmdb_store(path, durability=durability)  # type: ignore[arg-type]

    async def main() -> float:
        async def one(i: int) -> None:
            await store.transact(lambda txn: txn.put("histories", key(b"wf", i), RECORD))

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(tasks):
                nursery.start_soon(one, i)
        return time.perf_counter() - start

    try:
        elapsed = trio.run(main)
        return tasks / elapsed, store.stats.commits
    finally:
        store.close()


def trio_only(tasks: int) -> float:
    async def main() -> float:
        async def one() -> None:
            await trio.lowlevel.checkpoint()

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(one)
        return time.perf_counter() - start

    return tasks / trio.run(main)


def codec_round_trips(n: int) -> float:
    codec = Codec()

    def run() -> None:
        for _ in range(n):
            codec.decode(codec.encode(EVENT))

    return n / timed(run)


def run(quick: bool) -> list[Result]:
    """The storage rows for ``python -m benchmarks``: ratios against raw LMDB."""
    per_commit_n = 100 if quick else 1000
    batch_n = 5_000 if quick else 200_000
    tasks = 200 if quick else 2000
    codec_n = 2_000 if quick else 200_000
    with tempfile.TemporaryDirectory(prefix="roost-bench-") as tmp:
        floor = raw_commit_per_write(os.path.join(tmp, "a"), per_commit_n)
        ceiling = raw_one_txn(os.path.join(tmp, "b"), batch_n)
        grouped, commits = group_commit(os.path.join(tmp, "c"), tasks, "sync")
    codec_rate = codec_round_trips(codec_n)
    return [
        Result(
            suite="storage",
            name=f"group commit, {tasks} tasks, fsync",
            unit="writes/s",
            roost=grouped,
            raw=floor,
            raw_label="raw lmdb, 1 fsync/write",
            note=f"{commits} commits",
        ),
        Result(
            suite="storage",
            name=f"group commit, {tasks} tasks, fsync",
            unit="writes/s",
            roost=grouped,
            raw=ceiling,
            raw_label="raw lmdb, 1 txn (ceiling)",
        ),
        Result(suite="storage", name="codec encode+decode", unit="events/s", roost=codec_rate),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    args = parser.parse_args()
    per_commit_n = 200 if args.quick else 1000
    batch_n = 20_000 if args.quick else 200_000
    tasks = 2000
    codec_n = 20_000 if args.quick else 200_000

    with tempfile.TemporaryDirectory(prefix="roost-bench-") as tmp:
        floor = raw_commit_per_write(os.path.join(tmp, "a"), per_commit_n)
        ceiling = raw_one_txn(os.path.join(tmp, "b"), batch_n)
        grouped, commits = group_commit(os.path.join(tmp, "c"), tasks, "sync")
        fast, fast_commits = group_commit(os.path.join(tmp, "d"), tasks, "fast")
    bare = trio_only(tasks)
    codec_rate = codec_round_trips(codec_n)

    rows = [
        ("raw lmdb, 1 fsync'd commit/write", floor, f"{per_commit_n} writes"),
        ("raw lmdb, all writes in 1 txn", ceiling, f"{batch_n} writes"),
        (f"store.transact x {tasks} tasks, sync", grouped, f"{commits} commits"),
        (f"store.transact x {tasks} tasks, fast", fast, f"{fast_commits} commits"),
    ]
    print(f"{'write path':40} {'writes/s':>12} {'vs floor':>9} {'vs ceiling':>11}  notes")
    for name, rate, note in rows:
        print(f"{name:40} {rate:12,.0f} {rate / floor:8.1f}x {rate / ceiling:10.1%}  {note}")
    print(
        f"{'trio only: ' + str(tasks) + ' tasks x checkpoint':40} {bare:12,.0f} tasks/s"
        f"  (sync group commit reaches {grouped / bare:.0%} of it)"
    )
    print(f"{'codec encode+decode, event dict':40} {codec_rate:12,.0f} round trips/s")


if __name__ == "__main__":
    main()
