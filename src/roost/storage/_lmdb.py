"""The LMDB store: one environment per data directory and one group-committing writer thread.

Write path. ``transact_sync`` puts a request on the writer's queue; ``transact`` stages it,
and at the end of the current trio scheduler tick every request staged during that tick moves
to the queue at once (one thread wake-up per tick rather than per request, so the two threads
do not trade the GIL back and forth). If at that moment the writer thread is idle and no trio
task is runnable, the tick's batch is committed right there in the trio thread instead, in
the same way: the loop had nothing to do until the commit anyway, and two thread wake-ups
are saved (see docs/design-notes.md). The writer thread takes *every* pending request at once,
runs each request's function in its own child transaction of one parent transaction (so a
function that raises is rolled back alone), and commits the parent once: one fsync covers the
whole batch. It then wakes the batch's waiters: trio tasks with one
``TrioToken.run_sync_soon`` call per batch (per trio run), which reschedules each parked task
with its outcome; threads through a ``threading.Event`` each.

Map growth. LMDB needs a fixed map size. On ``MapFullError`` the writer aborts the batch,
waits until no read snapshot is open (resizing an LMDB map with a live reader in the process
is undefined behaviour), doubles the map and runs the batch again; this is why a transact
function must only touch its txn (it may run more than once).

Failures. A commit that fails (a full disk, an I/O error) aborts the batch's parent
transaction, so nothing of the batch is written, and every request in it gets a
``roost.Error`` of kind Unavailable that says what happened and what to do.

Opening the same data directory twice in one process is an error of kind InvalidState:
LMDB forbids it (a second open breaks the lock file's advisory locks), so close the first
store before reopening.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Literal, TypeVar, cast

import lmdb
import trio

from roost._errors import Error, ErrorKind, invalid
from roost.storage import _writer
from roost.storage._lmdb_txn import LmdbReadTxn, ReaderGate, abort_quietly
from roost.storage._store import (
    TABLES,
    ReadTxn,
    StoreStats,
    WriteTxn,
    bump_incarnation,
    closed_error,
    reentrant_error,
)
from roost.storage._writer import Request, Writer

__all__ = ["DEFAULT_MAP_SIZE", "Durability", "LmdbStore", "open_lmdb_store"]

T = TypeVar("T")
Durability = Literal["sync", "fast"]

DEFAULT_MAP_SIZE: Final = 256 * 1024 * 1024
_MAX_DBS: Final = 128
_MAX_READERS: Final = 1024

_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()


def _abort_fails(_raise_cancel: Any) -> trio.lowlevel.Abort:
    # A submitted request cannot be withdrawn: the caller waits for its outcome, and trio
    # delivers the cancellation at its next checkpoint.
    return trio.lowlevel.Abort.FAILED


class _LmdbReadContext:
    __slots__ = ("_lmdb_txn", "_store", "_txn")

    def __init__(self, store: LmdbStore) -> None:
        self._store = store
        self._txn: LmdbReadTxn | None = None
        self._lmdb_txn: lmdb.Transaction[bytes] | None = None

    def __enter__(self) -> ReadTxn:
        store = self._store
        store._check_usable()
        store._gate.enter()
        try:
            store._check_usable()
            self._lmdb_txn = store._env.begin(write=False)
        except BaseException:
            store._gate.exit()
            raise
        self._txn = LmdbReadTxn(self._lmdb_txn, store._dbs)
        return self._txn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._txn is not None and self._lmdb_txn is not None:
            self._txn.finish()
            abort_quietly(self._lmdb_txn)
            self._store._gate.exit()


class LmdbStore:
    """A `Store` on an LMDB environment; create it with `open_lmdb_store`.

    Attributes:
        path: the data directory.
        durability: "sync" (fsync per group commit) or "fast" (no fsync).
        stats: write-path counters (``commits < requests`` shows group commit at work).
    """

    def __init__(
        self, env: lmdb.Environment, dbs: dict[str, Any], path: str, durability: Durability
    ) -> None:
        self._env = env
        self._dbs = dbs
        self.path = path
        self.durability = durability
        self.stats = StoreStats()
        self._gate = ReaderGate()
        self._closed = False
        self._close_lock = threading.Lock()
        self._writer = Writer(env, dbs, self._gate, self.stats)

    @property
    def closed(self) -> bool:
        """True once the store was closed."""
        return self._closed

    def _check_usable(self) -> None:
        if self._closed:
            raise closed_error()
        if self._writer.running_here():
            raise reentrant_error()

    def read(self) -> _LmdbReadContext:
        """Open a read-only snapshot: ``with store.read() as txn:`` (do not await inside)."""
        return _LmdbReadContext(self)

    async def transact(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in one write transaction; return its result once the commit is durable.

        Raises:
            Exception: whatever ``fn`` raised (nothing of it was written).
            roost.Error: kind Unavailable when the commit failed or the store was closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        req = Request(
            fn, task=trio.lowlevel.current_task(), token=trio.lowlevel.current_trio_token()
        )
        self._writer.submit_soon(req)
        return cast(T, await trio.lowlevel.wait_task_rescheduled(_abort_fails))

    def transact_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        """Blocking form of `transact`, for threads and code outside trio."""
        req = Request(fn)
        self._writer.submit(req)
        assert req.event is not None
        req.event.wait()
        assert req.result is not None
        return cast(T, req.result.unwrap())

    def next_incarnation(self) -> int:
        """Increment and persist the node incarnation counter; the first call returns 1."""
        return self.transact_sync(bump_incarnation)

    def close(self) -> None:
        """Close the store: fail queued requests, finish the current batch, close LMDB."""
        if self._writer.running_here():
            raise reentrant_error()
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._writer.close()
        quiet = self._gate.acquire_exclusive(_writer.QUIESCE_TIMEOUT)
        try:
            if self.durability == "fast":
                self._env.sync(
                    force=True
                )  # a clean shutdown is durable even without per-commit fsync
            self._env.close()
        finally:
            if quiet:
                self._gate.release_exclusive()
            with _open_paths_lock:
                _open_paths.discard(self.path)

    async def aclose(self) -> None:
        """Close the store from trio without blocking the event loop."""
        await trio.to_thread.run_sync(self.close)


def open_lmdb_store(
    path: str | os.PathLike[str],
    *,
    durability: Durability = "sync",
    map_size: int = DEFAULT_MAP_SIZE,
) -> LmdbStore:
    """Open (creating it if needed) the LMDB store in the data directory ``path``.

    Args:
        path: the data directory; created if missing.
        durability: "sync" fsyncs every group commit; "fast" does not (a commit survives a
            process crash, not a power loss).
        map_size: the initial map size in bytes; it doubles automatically when full.

    Returns:
        The open store; close it with ``close()`` or ``await aclose()``.

    Raises:
        roost.Error: kind Invalid for a bad option, InvalidState if this process already has
            the directory open, Unavailable if LMDB cannot open it.
    """
    if durability not in ("sync", "fast"):
        raise invalid(f"durability must be 'sync' or 'fast', got {durability!r}")
    if type(map_size) is not int or map_size <= 0:
        raise invalid(f"map_size must be a positive int (bytes), got {map_size!r}")
    real = os.path.realpath(os.fspath(path))
    _claim(real)
    try:
        env, dbs = _open_env(real, durability, map_size)
        return LmdbStore(env, dbs, real, durability)
    except BaseException:
        with _open_paths_lock:
            _open_paths.discard(real)
        raise


def _claim(path: str) -> None:
    with _open_paths_lock:
        if path in _open_paths:
            raise Error(
                f"the store {path} is already open in this process: close it before opening it "
                "again (LMDB must not open one environment twice in a process)",
                kind=ErrorKind.INVALID_STATE,
                retryable=False,
            )
        _open_paths.add(path)


def _open_env(
    path: str, durability: Durability, map_size: int
) -> tuple[lmdb.Environment, dict[str, Any]]:
    try:
        os.makedirs(path, exist_ok=True)
        env = lmdb.open(
            path,
            map_size=map_size,
            max_dbs=_MAX_DBS,
            max_readers=_MAX_READERS,
            sync=durability == "sync",
            metasync=durability == "sync",
        )
    except (lmdb.Error, OSError) as exc:
        raise Error(
            f"cannot open the store in {path}: {type(exc).__name__}: {exc}",
            kind=ErrorKind.UNAVAILABLE,
            retryable=False,
            details={"path": path},
        ) from exc
    try:
        with env.begin(write=True) as txn:
            dbs = {name: env.open_db(name.encode(), txn=txn, create=True) for name in TABLES}
    except BaseException:
        env.close()
        raise
    return env, dbs
