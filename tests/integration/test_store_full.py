"""A full disk or map while the node runs: the caller gets a clear error, the node goes on.

The store's commits are made to fail the way a full disk fails them (``lmdb.DiskError`` with
ENOSPC from the commit; the real thing cannot be had on demand), through the writer's
``_commit`` seam. Everything else is the public API on a real node (real clock, so the
group-committing writer thread and the inline commit path both run).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import lmdb
import pytest
import trio

import roost
from roost import Error, ErrorKind, process

app = roost.App("full")
app.queue("jobs", max_retries=0)
done: list[Any] = []
job_ran: list[trio.Event] = []
INCREMENT = {"type": "increment", "path": ["count"]}


@app.activity
async def job(payload: Any) -> None:
    done.append(payload)
    job_ran[-1].set()


@app.workflow
async def twice(x: int) -> int:
    await roost.sleep("1ms")
    return 2 * x


class DiskFull:
    """Stands in for the writer's commit: fails like a full disk while ``on``."""

    def __init__(self, commit: Any) -> None:
        self.commit = commit
        self.on = False
        self.failed = 0

    def __call__(self, parent: Any) -> None:
        if self.on:
            self.failed += 1
            raise lmdb.DiskError("mdb_txn_commit", errno.ENOSPC)
        self.commit(parent)


async def test_a_full_disk_fails_the_write_and_the_node_keeps_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done.clear()
    job_ran[:] = [trio.Event()]
    async with roost.open_node(app, tmp_path / "data") as node:
        writer = node._node.store._writer
        disk = DiskFull(writer._commit)
        monkeypatch.setattr(writer, "_commit", disk)
        await roost.state.set("s", "before", 1)
        disk.on = True
        calls = [
            ("state.set", lambda: roost.state.set("s", "k", "v")),
            ("state.update", lambda: roost.state.update("s", "n", [INCREMENT])),
            ("enqueue", lambda: roost.enqueue("jobs", "full:job", "lost")),
        ]
        for what, call in calls:
            with pytest.raises(
                Error, match="is full: nothing of this transaction was written"
            ) as info:
                await call()
            assert info.value.kind is ErrorKind.UNAVAILABLE, what
            assert info.value.retryable is True
        assert disk.failed == 3
        disk.on = False
        # Nothing of the failed writes is stored, and every kind of work goes on.
        assert await roost.state.get("s", "k") is None
        assert await roost.state.get("s", "n") is None
        await roost.state.set("s", "k", "v")
        assert await roost.state.update("s", "n", [INCREMENT]) == {"count": 1}
        await roost.enqueue("jobs", "full:job", "kept")
        assert await process.exec(twice, 21) == 42
        with trio.fail_after(10):
            await job_ran[-1].wait()  # the queue's dispatcher delivers it on its own
        assert done == ["kept"]
        assert await roost.state.get("s", "k") == "v"
        assert await roost.state.get("s", "before") == 1
        assert node._node.store.stats.commits > 0


async def test_the_disk_fills_up_between_a_thread_write_and_a_trio_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer thread's path (transact_sync from a worker thread) fails and recovers too.
    async with roost.open_node(app, tmp_path / "data") as node:
        store = node._node.store
        disk = DiskFull(store._writer._commit)
        monkeypatch.setattr(store._writer, "_commit", disk)
        disk.on = True

        def put(txn: Any) -> None:
            txn.put("state", b"thread", b"1")

        with pytest.raises(Error, match="is full") as info:
            await trio.to_thread.run_sync(store.transact_sync, put)
        assert info.value.kind is ErrorKind.UNAVAILABLE
        disk.on = False
        await trio.to_thread.run_sync(store.transact_sync, put)
        with store.read() as txn:
            assert txn.get("state", b"thread") == b"1"
        await roost.state.set("s", "after", True)
        assert await roost.state.get("s", "after") is True
