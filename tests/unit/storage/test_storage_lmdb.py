"""LMDB-specific behaviour: group commit, durability, reopen, map growth and failures."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest
import trio
import trio.testing

from roost import Error, ErrorKind
from roost.storage import LmdbStore, WriteTxn, _writer, key, open_lmdb_store


@pytest.fixture
def db(tmp_path: Path) -> Any:
    store = open_lmdb_store(tmp_path / "db")
    try:
        yield store
    finally:
        store.close()


class WriterBlock:
    """Holds the writer thread inside a transact function until released."""

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def __call__(self, txn: WriteTxn) -> str:
        self.running.set()
        self.release.wait(10)
        txn.put("state", b"blocker", b"1")
        return "blocker"

    async def start(self, store: LmdbStore, nursery: trio.Nursery, results: dict[str, Any]) -> None:
        # From a thread: a trio request into an idle store may commit inline, in the trio
        # thread, which this blocking function would stall.
        async def run() -> None:
            results["blocker"] = await trio.to_thread.run_sync(store.transact_sync, self)

        nursery.start_soon(run)
        await trio.to_thread.run_sync(self.running.wait)


async def test_requests_in_one_group_commit_are_isolated(db: LmdbStore) -> None:
    block = WriterBlock()
    results: dict[str, Any] = {}

    def fails(txn: WriteTxn) -> None:
        txn.put("state", b"fails", b"x")
        raise ValueError("only me")

    def commits(txn: WriteTxn) -> int:
        txn.put("state", b"commits", b"x")
        return 7

    async def run(name: str, fn: Any) -> None:
        try:
            results[name] = await db.transact(fn)
        except ValueError as exc:
            results[name] = exc

    async with trio.open_nursery() as nursery:
        await block.start(db, nursery, results)
        nursery.start_soon(run, "fails", fails)
        nursery.start_soon(run, "commits", commits)
        await trio.testing.wait_all_tasks_blocked()
        block.release.set()
    assert isinstance(results["fails"], ValueError)
    assert results["commits"] == 7
    assert results["blocker"] == "blocker"
    # The blocker's batch, then one batch carrying both queued requests.
    assert (db.stats.commits, db.stats.requests, db.stats.largest_batch) == (2, 3, 2)
    with db.read() as txn:
        assert [k for k, _ in txn.range("state")] == [b"blocker", b"commits"]


async def test_concurrent_transacts_are_group_committed(db: LmdbStore) -> None:
    async def one(i: int) -> None:
        await db.transact(lambda txn: txn.put("histories", key(b"wf", i), b"e" * 200))

    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(one, i)
    with db.read() as txn:
        assert txn.count("histories") == 200
    assert db.stats.requests == 200
    assert db.stats.commits < db.stats.requests


def test_reopen_keeps_data_and_incarnation_increments(tmp_path: Path) -> None:
    for durability, expected in (("sync", 1), ("fast", 2), ("sync", 3)):
        store = open_lmdb_store(tmp_path, durability=durability)
        try:
            assert store.next_incarnation() == expected
            store.transact_sync(lambda txn, n=expected: txn.put("runs", key(n), b"run"))
            with store.read() as txn:
                assert [k for k, _ in txn.range("runs")] == [key(n) for n in range(1, expected + 1)]
        finally:
            store.close()


def test_opening_a_directory_twice_is_invalid_state(db: LmdbStore) -> None:
    with pytest.raises(Error, match="already open in this process") as info:
        open_lmdb_store(db.path)
    assert info.value.kind is ErrorKind.INVALID_STATE


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"durability": "always"}, "durability must be 'sync' or 'fast'"),
        ({"map_size": 0}, "map_size must be a positive int"),
    ],
)
def test_bad_options_are_invalid(tmp_path: Path, options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(Error, match=fragment) as info:
        open_lmdb_store(tmp_path, **options)
    assert info.value.kind is ErrorKind.INVALID
    open_lmdb_store(tmp_path).close()  # a refused open leaves the directory usable


def test_an_unopenable_directory_is_unavailable(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_bytes(b"x")
    with pytest.raises(Error) as info:
        open_lmdb_store(not_a_dir)
    assert info.value.kind is ErrorKind.UNAVAILABLE


def test_the_map_grows_when_full(tmp_path: Path) -> None:
    store = open_lmdb_store(tmp_path, durability="fast", map_size=64 * 1024)
    try:
        store.transact_sync(lambda txn: [txn.put("dlq", key(i), b"p" * 500) for i in range(1000)])
        for i in range(1000, 1200):
            store.transact_sync(lambda txn, i=i: txn.put("dlq", key(i), b"p" * 500))
        assert store.stats.map_resizes >= 3
        with store.read() as txn:
            assert txn.count("dlq") == 1200
    finally:
        store.close()


def test_map_growth_waits_for_snapshots_then_gives_up_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_writer, "QUIESCE_TIMEOUT", 0.05)
    store = open_lmdb_store(tmp_path, durability="fast", map_size=64 * 1024)
    try:
        with store.read(), pytest.raises(Error, match="read snapshots stayed open") as info:
            store.transact_sync(
                lambda txn: [txn.put("dlq", key(i), b"p" * 500) for i in range(500)]
            )
        assert info.value.kind is ErrorKind.UNAVAILABLE
        with store.read() as txn:
            assert txn.count("dlq") == 0
    finally:
        store.close()


def test_a_full_disk_fails_the_batch_clearly_and_writes_nothing(
    db: LmdbStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(parent: Any) -> None:
        raise lmdb.DiskError("mdb_txn_commit", errno.ENOSPC)

    monkeypatch.setattr(db._writer, "_commit", disk_full)
    with pytest.raises(Error, match="is full: nothing of this transaction was written") as info:
        db.transact_sync(lambda txn: txn.put("state", b"k", b"v"))
    assert info.value.kind is ErrorKind.UNAVAILABLE
    monkeypatch.undo()
    with db.read() as txn:
        assert txn.get("state", b"k") is None
    db.transact_sync(lambda txn: txn.put("state", b"k", b"v"))  # the store still works


def test_any_commit_failure_is_unavailable(db: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    def io_error(parent: Any) -> None:
        raise lmdb.Error("mdb_txn_commit", errno.EIO)

    monkeypatch.setattr(db._writer, "_commit", io_error)
    with pytest.raises(Error, match=r"committing to the store .* failed") as info:
        db.transact_sync(lambda txn: txn.put("state", b"k", b"v"))
    assert info.value.kind is ErrorKind.UNAVAILABLE


async def test_closing_fails_queued_requests_and_finishes_the_running_batch(db: LmdbStore) -> None:
    block = WriterBlock()
    results: dict[str, Any] = {}
    queued_failed = trio.Event()

    async def queued() -> None:
        try:
            await db.transact(lambda txn: txn.put("state", b"queued", b"x"))
        except Error as exc:
            results["queued"] = exc
            queued_failed.set()

    async with trio.open_nursery() as nursery:
        await block.start(db, nursery, results)
        nursery.start_soon(queued)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(trio.to_thread.run_sync, db.close)
        # close() fails the queued request at once, while the running batch is still blocked.
        await queued_failed.wait()
        block.release.set()
    assert results["queued"].kind is ErrorKind.UNAVAILABLE
    assert "store closed" in results["queued"].message
    assert results["blocker"] == "blocker"
    reopened = open_lmdb_store(db.path)
    try:
        with reopened.read() as txn:
            assert [k for k, _ in txn.range("state")] == [b"blocker"]
    finally:
        reopened.close()


async def test_transact_after_close_is_unavailable(db: LmdbStore) -> None:
    await db.aclose()
    with pytest.raises(Error, match="store closed") as info:
        await db.transact(lambda txn: None)
    assert info.value.kind is ErrorKind.UNAVAILABLE


# -- inline commits: an idle store commits a trio request in the trio thread ---------------------


async def test_an_idle_store_commits_a_trio_request_in_the_trio_thread(db: LmdbStore) -> None:
    ran_in: list[int] = []

    def put(txn: WriteTxn) -> str:
        ran_in.append(threading.get_ident())
        txn.put("state", b"k", b"v")
        return "ok"

    assert await db.transact(put) == "ok"
    assert ran_in == [threading.get_ident()]
    assert (db.stats.inline_commits, db.stats.commits, db.stats.requests) == (1, 1, 1)
    with db.read() as txn:
        assert txn.get("state", b"k") == b"v"


async def test_an_idle_store_commits_in_the_callers_own_task(
    db: LmdbStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran_in: list[trio.lowlevel.Task] = []
    woken: list[str] = []
    cond = db._writer._cond  # type: ignore[union-attr]
    for name in ("notify", "notify_all"):
        real = getattr(cond, name)
        monkeypatch.setattr(
            cond, name, lambda *a, real=real, name=name: (woken.append(name), real(*a))
        )

    def put(txn: WriteTxn) -> None:
        ran_in.append(trio.lowlevel.current_task())
        txn.put("state", b"k", b"v")

    for _ in range(5):
        await db.transact(put)
    # No flusher task between the caller and its commit, and no wake-up of the idle writer
    # thread (which would cost the trio thread the GIL) for a batch it does not run.
    assert ran_in == [trio.lowlevel.current_task()] * 5
    assert woken == []
    assert (db.stats.inline_commits, db.stats.commits, db.stats.requests) == (5, 5, 5)


async def test_the_requests_of_one_scheduler_tick_commit_together_inline(db: LmdbStore) -> None:
    results: dict[int, int] = {}

    async def one(i: int) -> None:
        def put(txn: WriteTxn) -> int:
            txn.put("histories", key(b"wf", i), b"e")
            return i * 2

        results[i] = await db.transact(put)

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(one, i)
    # The tick's first caller flushes the batch after the others of its tick staged theirs.
    assert results == {i: i * 2 for i in range(20)}
    assert (db.stats.inline_commits, db.stats.commits, db.stats.requests) == (1, 1, 20)


async def test_a_close_before_the_first_caller_flushes_fails_its_tick(db: LmdbStore) -> None:
    writer = db._writer
    assert writer is not None
    token = trio.lowlevel.current_trio_token()
    first = _writer.Request(lambda txn: None, task=trio.lowlevel.current_task(), token=token)
    assert writer.submit_soon(first)  # this task is to flush the tick
    db.close()
    # Its outcome is set by the close and it is not rescheduled (it is not parked).
    assert writer.flush(first) == 1
    assert first.result is not None
    with pytest.raises(Error, match="store closed") as info:
        first.result.unwrap()
    assert info.value.kind is ErrorKind.UNAVAILABLE
    await trio.testing.wait_all_tasks_blocked()


async def test_a_busy_writer_takes_trio_requests_on_its_thread(db: LmdbStore) -> None:
    block = WriterBlock()
    results: dict[str, Any] = {}
    ran_in: list[int] = []

    def put(txn: WriteTxn) -> None:
        ran_in.append(threading.get_ident())
        txn.put("state", b"k", b"v")

    async with trio.open_nursery() as nursery:
        await block.start(db, nursery, results)
        nursery.start_soon(db.transact, put)
        await trio.testing.wait_all_tasks_blocked()
        block.release.set()
    assert ran_in and ran_in[0] != threading.get_ident()
    assert db.stats.inline_commits == 0


async def test_an_inline_request_that_fills_the_map_goes_to_the_writer(tmp_path: Path) -> None:
    store = open_lmdb_store(tmp_path, durability="fast", map_size=64 * 1024)
    ran_in: list[int] = []

    def big(txn: WriteTxn) -> None:
        ran_in.append(threading.get_ident())
        for i in range(1000):
            txn.put("dlq", key(i), b"p" * 500)

    try:
        await store.transact(big)
        # Tried inline first; the map was grown (and the request run) on the writer thread.
        assert ran_in[0] == threading.get_ident()
        assert ran_in[-1] != threading.get_ident()
        assert store.stats.map_resizes >= 1
        assert store.stats.inline_commits == 0
        with store.read() as txn:
            assert txn.count("dlq") == 1000
    finally:
        store.close()


async def test_an_inline_commit_failure_is_unavailable_and_writes_nothing(
    db: LmdbStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def io_error(parent: Any) -> None:
        raise lmdb.Error("mdb_txn_commit", errno.EIO)

    monkeypatch.setattr(db._writer, "_commit", io_error)
    with pytest.raises(Error, match=r"committing to the store .* failed") as info:
        await db.transact(lambda txn: txn.put("state", b"k", b"v"))
    assert info.value.kind is ErrorKind.UNAVAILABLE
    monkeypatch.undo()
    with db.read() as txn:
        assert txn.get("state", b"k") is None
    await db.transact(lambda txn: txn.put("state", b"k", b"v"))  # the store still works
    assert db.stats.inline_commits == 1


@pytest.mark.parametrize("call", ["transact_sync", "read", "close"])
async def test_an_inline_transact_function_cannot_call_the_store(db: LmdbStore, call: str) -> None:
    calls = {
        "transact_sync": lambda: db.transact_sync(lambda inner: None),
        "read": lambda: db.read().__enter__(),
        "close": db.close,
    }
    ran_in: list[int] = []

    def fn(txn: WriteTxn) -> None:
        ran_in.append(threading.get_ident())
        calls[call]()

    with pytest.raises(Error, match="from inside a transact function") as info:
        await db.transact(fn)
    assert info.value.kind is ErrorKind.INVALID_STATE
    assert not db.closed
    assert ran_in == [threading.get_ident()]  # it ran inline, and its error was its own
    # A transaction alone in its batch that raised is aborted: no commit, no fsync.
    assert (db.stats.requests, db.stats.commits, db.stats.inline_commits) == (1, 0, 0)


# -- a full map, read-only stores ---------------------------------------------------------------


def test_a_map_at_max_map_size_fails_the_write_clearly_and_the_store_goes_on(
    tmp_path: Path,
) -> None:
    store = open_lmdb_store(tmp_path, durability="fast", map_size=64 * 1024, max_map_size=64 * 1024)
    try:
        written = 0
        with pytest.raises(Error, match="reached its max_map_size of 65536 bytes") as info:
            while True:
                store.transact_sync(lambda txn, i=written: txn.put("dlq", key(i), b"p" * 500))
                written += 1
        assert info.value.kind is ErrorKind.UNAVAILABLE
        assert info.value.retryable is True
        assert store.stats.map_resizes == 0
        with store.read() as txn:
            assert txn.count("dlq") == written  # nothing of the failed write
        # Room made by deleting: the writer thread is alive and the next commits go through.
        store.transact_sync(lambda txn: [txn.delete("dlq", key(i)) for i in range(written)])
        store.transact_sync(lambda txn: txn.put("dlq", key(0), b"p" * 500))
        with store.read() as txn:
            assert txn.count("dlq") == 1
    finally:
        store.close()


async def test_a_request_too_big_for_the_max_map_fails_alone(tmp_path: Path) -> None:
    store = open_lmdb_store(
        tmp_path, durability="fast", map_size=64 * 1024, max_map_size=128 * 1024
    )
    block = WriterBlock()
    results: dict[str, Any] = {}

    def big(txn: WriteTxn) -> None:
        for i in range(1000):
            txn.put("dlq", key(i), b"p" * 500)

    async def run(name: str, fn: Any) -> None:
        try:
            results[name] = await store.transact(fn)
        except Error as exc:
            results[name] = exc

    try:
        async with trio.open_nursery() as nursery:
            await block.start(store, nursery, results)
            nursery.start_soon(run, "small", lambda txn: txn.put("state", b"small", b"1"))
            nursery.start_soon(run, "big", big)
            await trio.testing.wait_all_tasks_blocked()
            block.release.set()
        assert isinstance(results["big"], Error)
        assert results["big"].kind is ErrorKind.UNAVAILABLE
        assert results["small"] is None  # in the same group as "big", committed all the same
        with store.read() as txn:
            assert txn.get("state", b"small") == b"1"
            assert txn.count("dlq") == 0
    finally:
        store.close()


def test_max_map_size_below_map_size_is_invalid(tmp_path: Path) -> None:
    with pytest.raises(Error, match="max_map_size must be None or an int >= map_size") as info:
        open_lmdb_store(tmp_path, map_size=128 * 1024, max_map_size=64 * 1024)
    assert info.value.kind is ErrorKind.INVALID


def test_a_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    store = open_lmdb_store(tmp_path)
    store.transact_sync(lambda txn: txn.put("state", b"k", b"v"))
    store.close()
    reader = open_lmdb_store(tmp_path, readonly=True, lock=False)
    try:
        assert reader.readonly
        with reader.read() as txn:
            assert txn.get("state", b"k") == b"v"
        for write in (
            lambda: reader.transact_sync(lambda txn: None),
            reader.next_incarnation,
        ):
            with pytest.raises(Error, match="opened read-only") as info:
                write()
            assert info.value.kind is ErrorKind.INVALID_STATE
    finally:
        reader.close()


async def test_a_read_only_transact_is_invalid_state(tmp_path: Path) -> None:
    open_lmdb_store(tmp_path).close()
    reader = open_lmdb_store(tmp_path, readonly=True, lock=False)
    try:
        with pytest.raises(Error, match="opened read-only") as info:
            await reader.transact(lambda txn: None)
        assert info.value.kind is ErrorKind.INVALID_STATE
    finally:
        reader.close()


def test_a_read_only_open_needs_a_store(tmp_path: Path) -> None:
    with pytest.raises(Error, match="there is no roost store in") as info:
        open_lmdb_store(tmp_path / "nothing", readonly=True, lock=False)
    assert info.value.kind is ErrorKind.NOT_FOUND
    assert not (tmp_path / "nothing").exists()  # a read-only open creates nothing


def test_a_read_only_store_reads_a_missing_table_as_empty(tmp_path: Path) -> None:
    open_lmdb_store(tmp_path).close()
    env = lmdb.open(str(tmp_path), max_dbs=128)
    with env.begin(write=True) as txn:  # as a store from before the table existed
        txn.drop(env.open_db(b"cron", txn=txn), delete=True)
    env.close()
    reader = open_lmdb_store(tmp_path, readonly=True, lock=False)
    try:
        with reader.read() as txn:
            assert txn.get("cron", b"k") is None
            assert list(txn.range("cron")) == []
            assert txn.count("cron") == 0
            assert txn.count("state") == 0
    finally:
        reader.close()


def test_the_lock_is_held_while_open_and_released_on_close(tmp_path: Path) -> None:
    store = open_lmdb_store(tmp_path)
    lock_file = tmp_path / "roost.lock"
    try:
        assert lock_file.read_text().strip() == str(os.getpid())
        # Another open file description of the lock conflicts, as another process's would.
        fd = os.open(lock_file, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        store.close()
    assert lock_file.read_text() == ""  # no pid of a process that no longer holds it
    fd = os.open(lock_file, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free
    finally:
        os.close(fd)


def test_a_read_only_store_without_the_lock_opens_beside_a_locked_one(tmp_path: Path) -> None:
    # (In one process LMDB forbids two environments on one directory: across processes
    # this is what an inspector does; see tests/integration/test_data_dir.py.)
    open_lmdb_store(tmp_path).close()
    locked_elsewhere = os.open(tmp_path / "roost.lock", os.O_RDWR)
    try:
        fcntl.flock(locked_elsewhere, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(Error, match="in use by another roost process") as info:
            open_lmdb_store(tmp_path)
        assert info.value.kind is ErrorKind.INVALID_STATE
        reader = open_lmdb_store(tmp_path, readonly=True, lock=False)
        reader.close()
    finally:
        os.close(locked_elsewhere)


async def test_nothing_runnable_reads_the_runners_queue_as_the_statistics_count_it() -> None:
    # The inline commit's check: the same answer as trio's public figure, and on this trio
    # the quick read of the queue is the one in use (a trio that moved it is caught here).
    def public() -> bool:
        return trio.lowlevel.current_statistics().tasks_runnable == 0

    assert _writer.nothing_runnable() is public() is True
    assert _writer._RUNQ_READABLE[0] is True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 0)  # runnable until this task yields
        assert _writer.nothing_runnable() is public() is False
    assert _writer.nothing_runnable() is public() is True
