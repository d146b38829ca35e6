"""The LMDB store: one environment per data directory and one group-committing writer thread.

Write path. ``transact_sync`` puts a request on the writer's queue; ``transact`` stages it,
and at the end of the current trio scheduler tick every request staged during that tick moves
to the queue at once (one thread wake-up per tick rather than per request, so the two threads
do not trade the GIL back and forth). The tick's first caller does that itself: it yields
one scheduler step (the tasks runnable then stage theirs) and flushes. If at that moment the
writer thread is idle and no trio task is runnable, the tick's batch is committed right there,
in that caller's task, instead, in the same way: the loop had nothing to do until the commit
anyway, two thread wake-ups are saved, and the caller goes on without waiting to be woken
(see docs/design-notes.md). The writer thread takes *every* pending request at once,
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

A store that reaches ``max_map_size`` (when one is set) fails the batch the same way, with
kind Unavailable too: both are a state of the machine, not of the request, and clear once
there is room (after deletes, or a reopen with a larger limit). LimitExceeded is kept for a
single transaction too large for any LMDB commit, which no retry fixes. Either way the writer
thread goes on, and the next batch commits as soon as it fits.

The data directory (see ``roost.storage._datadir``): created 0700, files 0600, and held by one
OS process at a time through an exclusive lock, so a second open fails at once with
InvalidState naming the holder's pid. ``readonly=True, lock=False`` opens the store for
reading beside the process that holds it (LMDB's own reader table keeps those snapshots
consistent); such a store has no writer thread and refuses every write.

Opening the same data directory twice in one process is an error of kind InvalidState too:
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
from roost.storage._damage import inspect_before_open, refuse_empty
from roost.storage._datadir import FILE_MODE, DirLock, in_use_error, prepare_dir, tighten_file
from roost.storage._lmdb_txn import DAMAGE, MISSING_TABLE, LmdbReadTxn, ReaderGate, abort_quietly
from roost.storage._salvage import salvage_at_open
from roost.storage._store import (
    TABLES,
    ReadTxn,
    StoreStats,
    WriteTxn,
    bump_incarnation,
    care_hint,
    closed_error,
    reentrant_error,
)
from roost.storage._writer import Request, Writer

__all__ = ["DEFAULT_MAP_SIZE", "Durability", "LmdbStore", "OnDamage", "open_lmdb_store"]

T = TypeVar("T")
Durability = Literal["sync", "fast"]
OnDamage = Literal["salvage", "refuse"]

DEFAULT_MAP_SIZE: Final = 256 * 1024 * 1024
_MAX_DBS: Final = 128
_MAX_READERS: Final = 1024

_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()

# A forked child holds a copy of every open store, whose LMDB environment, writer thread
# and directory lock are the parent's: LMDB forbids using an environment across a fork, a
# write would take the lock file's writer mutex the parent needs, and the writer thread
# does not exist in the child. Each store remembers the count it was opened at; the child
# bumps it, so every store of the parent refuses it.
_FORKS = [0]


def _forked() -> None:
    _FORKS[0] += 1


os.register_at_fork(after_in_child=_forked)


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
        while True:
            store._gate.enter()
            try:
                store._check_usable()
                self._lmdb_txn = store._env.begin(write=False)
                break
            except lmdb.MapResizedError:
                # Only beside another process's writer (a read-only store): it grew the map.
                store._gate.exit()
                store._adopt_map_size()
            except BaseException:
                store._gate.exit()
                raise
        self._txn = LmdbReadTxn(self._lmdb_txn, store._dbs, store.path)
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
        readonly: opened with ``readonly=True``: reads only, no writer thread.
        stats: write-path counters (``commits < requests`` shows group commit at work).
    """

    def __init__(
        self,
        env: lmdb.Environment,
        dbs: dict[str, Any],
        path: str,
        durability: Durability,
        *,
        readonly: bool = False,
        lock: DirLock | None = None,
        max_map_size: int | None = None,
    ) -> None:
        self._env = env
        self._dbs = dbs
        self.path = path
        self.durability = durability
        self.readonly = readonly
        self.stats = StoreStats()
        self._gate = ReaderGate()
        self._closed = False
        self._close_lock = threading.Lock()
        self._lock = lock
        self._writer = None if readonly else Writer(env, dbs, self._gate, self.stats, max_map_size)
        self._fork = _FORKS[0]
        self._owner = os.getpid()

    @property
    def closed(self) -> bool:
        """True once the store was closed."""
        return self._closed

    def _check_usable(self) -> None:
        if self._fork != _FORKS[0]:
            raise self._forked_error()
        if self._closed:
            raise closed_error()
        if self._writer is not None and self._writer.running_here():
            raise reentrant_error()

    def _forked_error(self) -> Error:
        return Error(
            f"the store {self.path} belongs to process {self._owner}, which opened it; this "
            f"process ({os.getpid()}) is a fork of it and must not touch it (LMDB forbids "
            "using an environment across a fork, and the store's writer thread does not "
            "exist here). A forked child must exec a program or end with os._exit(); to "
            "run code in another process, start one (subprocess, or multiprocessing with "
            "the 'spawn' start method)",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
            details={"path": self.path, "owner_pid": self._owner, "pid": os.getpid()},
        )

    def _live_writer(self) -> Writer:
        if self._fork != _FORKS[0]:
            raise self._forked_error()
        if self._writer is None:
            raise Error(
                f"the store {self.path} was opened read-only: it cannot write; open it with "
                "readonly=False (in the one process that holds the data directory) to write",
                kind=ErrorKind.INVALID_STATE,
                retryable=False,
                details={"path": self.path},
            )
        return self._writer

    def _adopt_map_size(self) -> None:
        # set_mapsize(0) takes the size the writing process gave the map; LMDB allows it
        # only with no transaction of this process open.
        if not self._gate.acquire_exclusive(_writer.QUIESCE_TIMEOUT):
            raise Error(
                f"the store {self.path} grew in the process that writes it, and this read-only "
                f"store could not follow: read snapshots stayed open for "
                f"{_writer.QUIESCE_TIMEOUT:g} s; keep `with store.read()` blocks short",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
            )
        try:
            self._env.set_mapsize(0)
        finally:
            self._gate.release_exclusive()

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
        writer = self._live_writer()
        req = Request(
            fn, task=trio.lowlevel.current_task(), token=trio.lowlevel.current_trio_token()
        )
        if writer.submit_soon(req):
            # The tick's first request: this task flushes the tick's batch at its next step
            # (no flusher task to wake, and none to wake this one after an inline commit).
            try:
                await trio.lowlevel.cancel_shielded_checkpoint()
            finally:  # even if a Ctrl-C lands here: the others staged behind it must go on
                done = writer.flush(req)
            if done:
                if done > 1:
                    # The others of the batch resume at the next step: so does this one, so
                    # that whatever they all do next lands in one tick (one group commit).
                    await trio.lowlevel.cancel_shielded_checkpoint()
                assert req.result is not None
                return cast(T, req.result.unwrap())
        return cast(T, await trio.lowlevel.wait_task_rescheduled(_abort_fails))

    def transact_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        """Blocking form of `transact`, for threads and code outside trio."""
        req = Request(fn)
        self._live_writer().submit(req)
        assert req.event is not None
        req.event.wait()
        assert req.result is not None
        return cast(T, req.result.unwrap())

    def next_incarnation(self) -> int:
        """Increment and persist the node incarnation counter; the first call returns 1."""
        return self.transact_sync(bump_incarnation)

    def copy_to(self, path: str) -> None:
        """Write a compacted copy of one consistent snapshot into the directory ``path``.

        Raises:
            roost.Error: kind Unavailable if LMDB's copy fails.
        """
        self._check_usable()
        self._gate.enter()
        try:
            self._env.copy(path, compact=True)
        except lmdb.Error as exc:
            raise Error(
                f"copying the store {self.path} to {path} failed ({type(exc).__name__}: "
                f"{exc}); check the destination's disk and the store (roost store check)",
                kind=ErrorKind.UNAVAILABLE,
                retryable=False,
                details={"path": self.path, "dest": path},
            ) from exc
        finally:
            self._gate.exit()

    def close(self) -> None:
        """Close the store: fail queued requests, finish the current batch, close LMDB.

        In a forked child it only marks the copy closed: the environment, the writer and
        the directory lock are the parent's (closing them here would release the lock the
        parent holds).
        """
        if self._fork != _FORKS[0]:
            self._closed = True
            return
        writer = self._writer
        if writer is not None and writer.running_here():
            raise reentrant_error()
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if writer is not None:
            writer.close()
        quiet = self._gate.acquire_exclusive(_writer.QUIESCE_TIMEOUT)
        try:
            if self.durability == "fast" and writer is not None:
                self._env.sync(
                    force=True
                )  # a clean shutdown is durable even without per-commit fsync
            self._env.close()
        finally:
            if quiet:
                self._gate.release_exclusive()
            if self._lock is not None:
                self._lock.release()  # after LMDB's close: its last write is done
            with _open_paths_lock:
                _open_paths.discard(self.path)

    async def aclose(self) -> None:
        """Close the store from trio without blocking the event loop."""
        # A limiter of its own: user threads (abandoned sync activities) may hold every
        # token of trio's default one, and the node's shutdown waits for this close.
        await trio.to_thread.run_sync(self.close, limiter=trio.CapacityLimiter(1))


def open_lmdb_store(
    path: str | os.PathLike[str],
    *,
    durability: Durability = "sync",
    map_size: int = DEFAULT_MAP_SIZE,
    max_map_size: int | None = None,
    readonly: bool = False,
    lock: bool = True,
    on_damage: OnDamage = "refuse",
) -> LmdbStore:
    """Open (creating it if needed) the LMDB store in the data directory ``path``.

    Args:
        path: the data directory; created (mode 0700) if missing.
        durability: "sync" fsyncs every group commit; "fast" does not (a commit survives a
            process crash, not a power loss).
        map_size: the initial map size in bytes; it doubles automatically when full.
        max_map_size: the map never grows past this many bytes (None: as far as the disk
            and address space allow); a write that does not fit then fails with
            Unavailable, and the store goes on.
        readonly: open for reading only (no writer thread; every write raises
            InvalidState). The directory and the store must exist.
        lock: hold the data directory's exclusive lock while open. Every process that
            writes must; a read-only inspector beside a running node passes False.
        on_damage: "refuse" a damaged file (below); "salvage" (a writing open that holds
            the lock) replaces it by a new file of every readable record, keeping the
            damaged one in ``damaged/`` (``roost.storage._care.salvage_at_open``), and
            refuses only what no salvage can open (a file cut short, both meta pages
            damaged, a core table with nothing readable).

    Returns:
        The open store; close it with ``close()`` or ``await aclose()``.

    Raises:
        roost.Error: kind Invalid for a bad option; InvalidState if this process already
            has the directory open, or another process holds its lock (the message names
            that process's pid); NotFound for a read-only open of a directory without a
            store; Unavailable if LMDB cannot open it, or if its file is damaged (see
            ``roost.storage._damage``: an empty ``data.mdb`` where a store was, a file shorter
            than its meta pages say, a page that cannot be read), naming
            ``roost store check`` and ``roost store salvage``.
    """
    if durability not in ("sync", "fast"):
        raise invalid(f"durability must be 'sync' or 'fast', got {durability!r}")
    if type(map_size) is not int or map_size <= 0:
        raise invalid(f"map_size must be a positive int (bytes), got {map_size!r}")
    if max_map_size is not None and (type(max_map_size) is not int or max_map_size < map_size):
        raise invalid(
            f"max_map_size must be None or an int >= map_size ({map_size}), got {max_map_size!r}"
        )
    for name, flag in (("readonly", readonly), ("lock", lock)):
        if type(flag) is not bool:
            raise invalid(f"{name} must be True or False, got {flag!r}")
    if on_damage not in ("refuse", "salvage"):
        raise invalid(f"on_damage must be 'salvage' or 'refuse', got {on_damage!r}")
    real = os.path.realpath(os.fspath(path))
    _claim(real)
    held: DirLock | None = None
    try:
        refuse_empty(real)  # before the lock: taking it writes the lock file
        if readonly:
            _require_store(real)
        else:
            _prepare(real)
        if lock:
            held = _lock(real)
        # Before LMDB maps the file: a damaged or short one could kill this process.
        salvage = on_damage == "salvage" and held is not None and not readonly
        found = inspect_before_open(real, locked=held is not None, salvage=salvage)
        if found is not None:
            salvage_at_open(real, found, open_store=_salvage_store)
        env, dbs = _open_env(real, durability, map_size, readonly)
        return LmdbStore(
            env, dbs, real, durability, readonly=readonly, lock=held, max_map_size=max_map_size
        )
    except BaseException:
        if held is not None:
            held.release()
        with _open_paths_lock:
            _open_paths.discard(real)
        raise


def _salvage_store(path: str) -> LmdbStore:
    # The new store a salvage at open writes: "fast", since its close syncs the file once.
    return open_lmdb_store(path, durability="fast")


def _claim(path: str) -> None:
    with _open_paths_lock:
        if path in _open_paths:
            raise in_use_error(path, os.getpid(), here=True)
        _open_paths.add(path)


def _unavailable(path: str, exc: BaseException) -> Error:
    hint = f"; {care_hint(path)}" if isinstance(exc, DAMAGE) else ""
    return Error(
        f"cannot open the store in {path}: {type(exc).__name__}: {exc}{hint}",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"path": path},
    )


def _prepare(path: str) -> None:
    try:
        prepare_dir(path)
    except OSError as exc:
        raise _unavailable(path, exc) from exc


def _lock(path: str) -> DirLock:
    try:
        return DirLock.acquire(path)
    except OSError as exc:
        raise _unavailable(path, exc) from exc


def _require_store(path: str) -> None:
    data = os.path.join(path, "data.mdb")
    if not os.path.isfile(data) or os.path.getsize(data) == 0:
        raise Error(
            f"there is no roost store in {path}: a read-only open needs a data directory a "
            "node has already opened; check the path",
            kind=ErrorKind.NOT_FOUND,
            retryable=False,
            details={"path": path},
        )


def _open_env(
    path: str, durability: Durability, map_size: int, readonly: bool
) -> tuple[lmdb.Environment, dict[str, Any]]:
    try:
        env = lmdb.open(
            path,
            map_size=map_size,
            max_dbs=_MAX_DBS,
            max_readers=_MAX_READERS,
            sync=durability == "sync",
            metasync=durability == "sync",
            readonly=readonly,
            mode=FILE_MODE,
        )
    except (lmdb.Error, OSError) as exc:
        raise _unavailable(path, exc) from exc
    try:
        if readonly:
            return env, _existing_tables(env)
        # The mode LMDB was given applies to files it creates; files an earlier version
        # created wider are tightened here.
        for name in ("data.mdb", "lock.mdb"):
            tighten_file(os.path.join(path, name))
        env.reader_check()  # reader slots of killed processes (inspectors) are freed
        with env.begin(write=True) as txn:
            dbs = {name: env.open_db(name.encode(), txn=txn, create=True) for name in TABLES}
    except lmdb.Error as exc:
        env.close()
        raise _unavailable(path, exc) from exc
    except BaseException:
        env.close()
        raise
    return env, dbs


def _existing_tables(env: lmdb.Environment) -> dict[str, Any]:
    # A table missing from a store an earlier version wrote (and no writer has opened
    # since) reads as empty.
    dbs: dict[str, Any] = {}
    for name in TABLES:
        # Each in a transaction py-lmdb makes for it: handles opened in a read transaction
        # of ours would not outlive it.
        try:
            dbs[name] = env.open_db(name.encode(), create=False)
        except lmdb.NotFoundError:
            dbs[name] = MISSING_TABLE
    return dbs
