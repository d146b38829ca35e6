"""The LMDB store's single writer thread: queueing, group commit, map growth, wake-ups.

See the ``roost.storage._lmdb`` module docstring for the protocol as a whole.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from collections.abc import Callable
from typing import Any, Final

import lmdb
import outcome
import trio

from roost._errors import Error, ErrorKind
from roost.storage._lmdb_txn import LmdbWriteTxn, ReaderGate, abort_quietly
from roost.storage._store import StoreStats, WriteTxn, closed_error, reentrant_error

__all__ = ["QUIESCE_TIMEOUT", "Request", "Writer", "deliver"]

# How long growing the map (or closing) waits for open read snapshots before giving up.
QUIESCE_TIMEOUT: Final = 10.0


class Request:
    """One transact call: its function, how to wake its caller, and its outcome."""

    __slots__ = ("event", "fn", "result", "task", "token")

    def __init__(
        self,
        fn: Callable[[WriteTxn], Any],
        *,
        task: trio.lowlevel.Task | None = None,
        token: trio.lowlevel.TrioToken | None = None,
    ) -> None:
        self.fn = fn
        self.task = task
        self.token = token
        self.event = threading.Event() if token is None else None
        self.result: outcome.Outcome[Any] | None = None


def _reschedule_all(requests: list[Request]) -> None:
    # Runs in the trio thread: one callback wakes a whole batch.
    for req in requests:
        assert req.task is not None
        assert req.result is not None
        trio.lowlevel.reschedule(req.task, req.result)


def deliver(batch: list[Request]) -> None:
    """Wake the callers of a finished batch: threads one by one, trio tasks per trio run."""
    by_token: dict[trio.lowlevel.TrioToken, list[Request]] = {}
    for req in batch:
        if req.token is None:
            assert req.event is not None
            req.event.set()
        else:
            by_token.setdefault(req.token, []).append(req)
    for token, requests in by_token.items():
        # A finished trio run has nobody left to wake.
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(_reschedule_all, requests)


def _is_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, lmdb.DiskError):
        return True
    return isinstance(exc, OSError) and exc.errno == errno.ENOSPC


def _commit_failed(exc: BaseException, path: str) -> Error:
    if _is_disk_full(exc):
        message = (
            f"the disk holding the store {path} is full: nothing of this transaction was "
            "written; free space on that volume, then retry"
        )
    else:
        message = (
            f"committing to the store {path} failed ({type(exc).__name__}: {exc}): nothing of "
            "this transaction was written; check the disk and the data directory, then retry"
        )
    return Error(
        message,
        kind=ErrorKind.UNAVAILABLE,
        retryable=True,
        details={"path": path, "cause": repr(exc)},
    )


class Writer:
    """The single writer thread and its queue."""

    def __init__(
        self, env: lmdb.Environment, dbs: dict[str, Any], gate: ReaderGate, stats: StoreStats
    ) -> None:
        self._env = env
        self._dbs = dbs
        self._gate = gate
        self._stats = stats
        self._path = env.path()
        self._cond = threading.Condition()
        self._pending: list[Request] = []
        # Trio requests wait here until the end of the current scheduler tick, then move to
        # _pending together: one hand-off (and one thread wake-up) per tick, not per request.
        self._staged: list[Request] = []
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"roost-writer:{self._path}")
        # A daemon, so a store the program forgot to close cannot hang interpreter exit;
        # LMDB's commit protocol keeps the data consistent even then.
        self._thread.daemon = True
        self._thread.start()

    @property
    def ident(self) -> int | None:
        """The writer thread's id (transact functions run on it)."""
        return self._thread.ident

    def submit(self, req: Request) -> None:
        """Queue a request now (the blocking ``transact_sync`` path)."""
        if threading.get_ident() == self._thread.ident:
            raise reentrant_error()
        with self._cond:
            if self._closing:
                raise closed_error()
            self._pending.append(req)
            # The thread only sleeps when the queue is empty, so one notify per wake-up.
            if len(self._pending) == 1:
                self._cond.notify()

    def submit_soon(self, req: Request) -> None:
        """Queue a trio request at the end of the current trio tick (see ``_staged``)."""
        assert req.token is not None
        if threading.get_ident() == self._thread.ident:
            raise reentrant_error()
        with self._cond:
            if self._closing:
                raise closed_error()
            self._staged.append(req)
            first = len(self._staged) == 1
        if first:
            req.token.run_sync_soon(self._flush_staged)

    def _flush_staged(self) -> None:
        with self._cond:
            if not self._staged:
                return
            wake = not self._pending
            self._pending += self._staged
            self._staged.clear()
            if wake:
                self._cond.notify()

    def close(self) -> None:
        """Stop taking requests, fail the queued ones, and wait for the current batch."""
        with self._cond:
            self._closing = True
            left, self._pending = self._pending + self._staged, []
            self._staged.clear()
            self._cond.notify()
        for req in left:
            req.result = outcome.Error(closed_error())
        deliver(left)
        if threading.get_ident() != self._thread.ident:
            self._thread.join()

    def _take(self) -> list[Request] | None:
        with self._cond:
            while not self._pending and not self._closing:
                self._cond.wait()
            if not self._pending:
                return None
            batch, self._pending = self._pending, []
            return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            try:
                results = self._run_batch(batch)
            except BaseException as exc:  # noqa: BLE001 - the thread must outlive any bug
                bug = Error.from_exception(exc)
                results = [outcome.Error(bug.clone()) for _ in batch]
            for req, result in zip(batch, results, strict=True):
                req.result = result
            self._stats.requests += len(batch)
            self._stats.largest_batch = max(self._stats.largest_batch, len(batch))
            deliver(batch)

    def _run_batch(self, batch: list[Request]) -> list[outcome.Outcome[Any]]:
        while True:
            try:
                return self._attempt(batch)
            except lmdb.MapFullError:
                problem = self._grow()
                if problem is not None:
                    return [outcome.Error(problem.clone()) for _ in batch]
            except lmdb.TxnFullError:
                if len(batch) == 1:
                    return [outcome.Error(_txn_too_large())]
                # Too many dirty pages for one commit: split the group, keeping its order.
                half = len(batch) // 2
                return self._run_batch(batch[:half]) + self._run_batch(batch[half:])
            except (lmdb.Error, OSError) as exc:
                failure = _commit_failed(exc, self._path)
                return [outcome.Error(failure.clone()) for _ in batch]

    def _attempt(self, batch: list[Request]) -> list[outcome.Outcome[Any]]:
        parent = self._env.begin(write=True)
        try:
            results = [self._run_one(parent, req.fn) for req in batch]
            self._commit(parent)
        except BaseException:
            abort_quietly(parent)
            raise
        self._stats.commits += 1
        return results

    def _run_one(
        self, parent: lmdb.Transaction[bytes], fn: Callable[[WriteTxn], Any]
    ) -> outcome.Outcome[Any]:
        child = self._env.begin(write=True, parent=parent)
        txn = LmdbWriteTxn(child, self._dbs)
        result: outcome.Outcome[Any] = outcome.capture(fn, txn)
        txn.finish()
        if txn.fatal is not None:
            abort_quietly(child)
            raise txn.fatal
        if isinstance(result, outcome.Error):
            child.abort()
        else:
            child.commit()
        return result

    def _commit(self, parent: lmdb.Transaction[bytes]) -> None:
        # One method, so fault-injection tests can make the commit fail like a full disk.
        parent.commit()

    def _grow(self) -> Error | None:
        size = self._env.info()["map_size"] * 2
        if not self._gate.acquire_exclusive(QUIESCE_TIMEOUT):
            return Error(
                f"the store {self._path} is full and could not grow: read snapshots stayed "
                f"open for {QUIESCE_TIMEOUT:g} s; keep `with store.read()` blocks short and "
                "never await inside one",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
            )
        try:
            self._env.set_mapsize(size)
        except lmdb.Error as exc:
            return Error(
                f"the store {self._path} is full and growing its map to {size} bytes failed "
                f"({exc}); free memory or address space, then retry",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
            )
        finally:
            self._gate.release_exclusive()
        self._stats.map_resizes += 1
        return None


def _txn_too_large() -> Error:
    return Error(
        "this transaction writes too much for one LMDB commit (too many dirty pages): "
        "split it into several transactions",
        kind=ErrorKind.LIMIT_EXCEEDED,
        retryable=False,
    )
