"""The LMDB store's single writer thread: queueing, group commit, map growth, wake-ups.

See the ``roost.storage._lmdb`` module docstring for the protocol as a whole.
"""

from __future__ import annotations

import contextlib
import errno
import threading
import time
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


_RUN_CONTEXT: Any  # private: where trio keeps the running run's queue (see below)
try:
    from trio._core._run import GLOBAL_RUN_CONTEXT as _RUN_CONTEXT
except ImportError:  # pragma: no cover - another trio: the public call
    _RUN_CONTEXT = None

# Whether ``_RUN_CONTEXT.runner.runq`` is that queue: decided by the first call, which
# compares it with the public figure.
_RUNQ_READABLE: list[bool] = []


def nothing_runnable() -> bool:
    """Whether no trio task is queued to run next (called in the trio thread, in a run).

    ``trio.lowlevel.current_statistics().tasks_runnable`` is the length of the runner's
    queue, but it builds the run's statistics, its I/O part too: ~2.5 µs, a twelfth of an
    inline commit's own Python. trio has no public call for the length alone, so after one
    check that the two agree this reads the queue itself (trio is pinned below 0.40).
    """
    if _RUNQ_READABLE:
        if _RUNQ_READABLE[0]:
            return not _RUN_CONTEXT.runner.runq
        return trio.lowlevel.current_statistics().tasks_runnable == 0
    runnable = trio.lowlevel.current_statistics().tasks_runnable
    runq = getattr(getattr(_RUN_CONTEXT, "runner", None), "runq", None)
    _RUNQ_READABLE.append(runq is not None and len(runq) == runnable)
    return runnable == 0


def _all_of_this_run(requests: list[Request]) -> bool:
    token = trio.lowlevel.current_trio_token()
    return all(req.token is token for req in requests)


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
        self,
        env: lmdb.Environment,
        dbs: dict[str, Any],
        gate: ReaderGate,
        stats: StoreStats,
        max_map_size: int | None = None,
    ) -> None:
        self._env = env
        self._dbs = dbs
        self._gate = gate
        self._stats = stats
        self._max_map_size = max_map_size
        self._path = env.path()
        # The trio thread's paths take the condition's lock as such (``with self._lock``):
        # the same lock, without Condition's Python-level __enter__/__exit__ per request.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._pending: list[Request] = []
        # Trio requests wait here until the end of the current scheduler tick, then move to
        # _pending together: one hand-off (and one thread wake-up) per tick, not per request.
        self._staged: list[Request] = []
        self._closing = False
        # The writer thread is waiting for work (not running a batch).
        self._idle = False
        # The thread running a batch inline (see _flush_staged), else None.
        self._inline: int | None = None
        # The request of the task that flushes _staged (the tick's first submitter, see
        # ``submit_soon``) while that task waits for its next step; None otherwise.
        self._flusher: Request | None = None
        self._thread = threading.Thread(target=self._run, name=f"roost-writer:{self._path}")
        # A daemon, so a store the program forgot to close cannot hang interpreter exit;
        # LMDB's commit protocol keeps the data consistent even then.
        self._thread.daemon = True
        self._thread.start()
        self._thread_id = self._thread.ident  # read on every submit: not the property

    def running_here(self) -> bool:
        """Whether the calling thread is running a batch (inside a transact function)."""
        me = threading.get_ident()
        return me in (self._thread_id, self._inline)

    def submit(self, req: Request) -> None:
        """Queue a request now (the blocking ``transact_sync`` path)."""
        if self.running_here():
            raise reentrant_error()
        with self._cond:
            if self._closing:
                raise closed_error()
            self._pending.append(req)
            # The thread only sleeps when the queue is empty, so one notify per wake-up.
            if len(self._pending) == 1:
                self._cond.notify()

    def submit_soon(self, req: Request) -> bool:
        """Stage a trio request for the end of the current scheduler tick (see ``_staged``).

        Returns True if ``req`` is the tick's first: then its caller flushes the tick's
        requests (``flush``) at its next step, after the tasks runnable now have run.
        """
        assert req.token is not None
        if self.running_here():
            raise reentrant_error()
        with self._lock:
            if self._closing:
                raise closed_error()
            self._staged.append(req)
            if len(self._staged) > 1:
                return False
            self._flusher = req
            return True

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C waits: an inline commit runs to its end
    def flush(self, req: Request) -> int:
        """The tick's staged requests, ``req`` first among them: commit or hand on.

        Called by ``req``'s task (the tick's first submitter) one scheduler step after it
        staged ``req``: every task runnable then has run and staged its request too. If the
        writer thread is idle and no trio task is runnable, the batch commits right here
        (see ``_run_inline``); otherwise it goes to the writer thread, one wake-up for the
        whole tick. Returns how many requests' outcomes were set here, ``req``'s among them
        (its caller takes it without waiting): the batch committed here, or ``req`` failed
        by a close meanwhile; 0 when its caller is to wait for its outcome.
        """
        with self._lock:
            if self._flusher is req:
                self._flusher = None
            if not self._staged or self._staged[0] is not req:
                return int(req.result is not None)  # a close took the batch meanwhile
            inline = (
                self._idle
                and not self._pending
                and not self._closing
                and self._inline is None
                and nothing_runnable()
                and _all_of_this_run(self._staged)  # their tasks are rescheduled from here
            )
            batch = list(self._staged)
            self._staged.clear()
            if not inline:
                wake = not self._pending
                self._pending += batch
                if wake:
                    self._cond.notify()
                return 0
            self._inline = threading.get_ident()
        return len(batch) if self._run_inline(batch) else 0

    def _run_inline(self, batch: list[Request]) -> bool:
        """Commit ``batch`` here, in the trio thread, because nothing else would run now.

        When the writer thread is idle and no trio task is runnable, handing the batch to
        the thread only adds two thread wake-ups (about 0.3 ms on a small VM) to the
        commit's latency: the loop would sit idle until the commit is durable either way.
        A batch that needs the map grown or split goes to the thread after all (growing
        waits for read snapshots, which must not block the loop): then False. Otherwise
        every request's outcome is set, the first (the caller's own) returned as is and the
        others' tasks rescheduled, and True.
        """
        results: list[outcome.Outcome[Any]] | None = None
        commits = self._stats.commits
        try:
            results = self._attempt(batch)
        except (lmdb.MapFullError, lmdb.TxnFullError):
            results = None
        except (lmdb.Error, OSError) as exc:
            failure = _commit_failed(exc, self._path)
            results = [outcome.Error(failure.clone()) for _ in batch]
        except BaseException as exc:  # noqa: BLE001 - as on the thread: fail the batch
            # (No task_timeout guard is armed here, so this is a bug in a transact
            # function or in roost, never a Ctrl-C.)
            bug = Error.from_exception(exc)
            results = [outcome.Error(bug.clone()) for _ in batch]
        finally:
            with self._lock:
                self._inline = None
                if results is None:
                    self._pending[:0] = batch  # first: they were staged before the rest
                if self._pending or self._closing:
                    # The thread, if work waits; a close, if one does. Not otherwise: a
                    # wake-up for nothing costs the trio thread the GIL.
                    self._cond.notify_all()
        if results is None:
            return False
        for req, result in zip(batch, results, strict=True):
            req.result = result
        self._stats.requests += len(batch)
        self._stats.inline_commits += self._stats.commits - commits
        self._stats.largest_batch = max(self._stats.largest_batch, len(batch))
        if len(batch) > 1:
            _reschedule_all(batch[1:])
        return True

    def close(self) -> None:
        """Stop taking requests, fail the queued ones, and wait for the current batch."""
        with self._cond:
            self._closing = True
            while self._inline is not None:  # a batch committing in another thread
                self._cond.wait()
            left, self._pending = self._pending + self._staged, []
            self._staged.clear()
            # The flushing task is not parked: it finds its outcome when it flushes, so
            # the outcomes are set before the lock is released (a flush after this sees
            # its own).
            flusher, self._flusher = self._flusher, None
            for req in left:
                req.result = outcome.Error(closed_error())
            self._cond.notify()
        deliver([req for req in left if req is not flusher])
        if threading.get_ident() != self._thread.ident:
            self._thread.join()

    def _take(self) -> list[Request] | None:
        with self._cond:
            self._idle = True
            while (not self._pending or self._inline is not None) and not self._closing:
                self._cond.wait()
            self._idle = False
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
                if problem is None:
                    continue
                if len(batch) > 1 and self._at_max():
                    # The requests that fit on their own still commit.
                    half = len(batch) // 2
                    return self._run_batch(batch[:half]) + self._run_batch(batch[half:])
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
        if len(batch) == 1:
            return [self._attempt_alone(batch[0].fn)]
        parent = self._env.begin(write=True)
        try:
            results = [self._run_one(parent, req.fn) for req in batch]
            self._commit(parent)
        except BaseException:
            abort_quietly(parent)
            raise
        self._stats.commits += 1
        return results

    def _attempt_alone(self, fn: Callable[[WriteTxn], Any]) -> outcome.Outcome[Any]:
        """A batch of one request: no child transaction, and no commit if ``fn`` raises.

        Its own transaction isolates it as a child would; one that raises is aborted, so
        nothing of it is written and no fsync is spent on an empty commit.
        """
        lmdb_txn = self._env.begin(write=True)
        try:
            txn = LmdbWriteTxn(lmdb_txn, self._dbs, self._path)
            result: outcome.Outcome[Any] = outcome.capture(fn, txn)
            txn.finish()
        except BaseException:
            abort_quietly(lmdb_txn)
            raise
        if txn.fatal is not None or isinstance(result, outcome.Error):
            abort_quietly(lmdb_txn)
            if txn.fatal is not None:  # out of map or page room: the caller grows or splits
                raise txn.fatal
            return result
        try:
            self._commit(lmdb_txn)
        except BaseException:
            abort_quietly(lmdb_txn)
            raise
        self._stats.commits += 1
        return result

    def _run_one(
        self, parent: lmdb.Transaction[bytes], fn: Callable[[WriteTxn], Any]
    ) -> outcome.Outcome[Any]:
        child = self._env.begin(write=True, parent=parent)
        txn = LmdbWriteTxn(child, self._dbs, self._path)
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
        began = time.perf_counter()
        parent.commit()
        self._stats.commit_seconds.observe(time.perf_counter() - began)

    def _at_max(self) -> bool:
        limit = self._max_map_size
        return limit is not None and self._env.info()["map_size"] >= limit

    def _grow(self) -> Error | None:
        current = self._env.info()["map_size"]
        size = current * 2
        if self._max_map_size is not None:
            if current >= self._max_map_size:
                return _at_max_size(self._path, self._max_map_size)
            size = min(size, self._max_map_size)
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


def _at_max_size(path: str, limit: int) -> Error:
    return Error(
        f"the store {path} is full: it reached its max_map_size of {limit} bytes, so nothing "
        "of this transaction was written; delete data the store no longer needs, or reopen "
        "it with a larger max_map_size, then retry",
        kind=ErrorKind.UNAVAILABLE,
        retryable=True,
        details={"path": path, "max_map_size": limit},
    )


def _txn_too_large() -> Error:
    return Error(
        "this transaction writes too much for one LMDB commit (too many dirty pages): "
        "split it into several transactions",
        kind=ErrorKind.LIMIT_EXCEEDED,
        retryable=False,
    )
