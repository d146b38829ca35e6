"""An in-memory Store with the LMDB store's exact semantics: fast unit tests, and the oracle.

Each table is a dict plus a sorted key list. Committed tables are never mutated in place: a
write transaction copies a table on its first write to it and a commit swaps the copies in, so
a read snapshot is just a reference to the tables as they were when it began.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TypeVar

import outcome
import trio

from roost.storage._store import (
    TABLES,
    ReadTxn,
    ReadTxnBase,
    StoreStats,
    WriteTxn,
    bump_incarnation,
    check_key,
    check_range,
    check_table,
    check_value,
    closed_error,
    finished_error,
    reentrant_error,
)

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Table:
    __slots__ = ("data", "keys")

    def __init__(self, data: dict[bytes, bytes], keys: list[bytes]) -> None:
        self.data = data
        self.keys = keys

    def copy(self) -> _Table:
        return _Table(dict(self.data), list(self.keys))

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self.data:
            bisect.insort(self.keys, key)
        self.data[key] = value

    def delete(self, key: bytes) -> bool:
        if self.data.pop(key, None) is None:
            return False
        del self.keys[bisect.bisect_left(self.keys, key)]
        return True

    def select(
        self, start: bytes | None, stop: bytes | None, reverse: bool, limit: int | None
    ) -> list[tuple[bytes, bytes]]:
        keys = self.keys
        lo = 0 if start is None else bisect.bisect_left(keys, start)
        hi = len(keys) if stop is None else bisect.bisect_left(keys, stop)
        if hi <= lo or limit == 0:
            return []
        if reverse:
            first = lo if limit is None else max(lo, hi - limit)
            chosen = keys[first:hi][::-1]
        else:
            chosen = keys[lo:hi] if limit is None else keys[lo : min(hi, lo + limit)]
        # Materialised, so a transaction may write while it iterates the result.
        return [(k, self.data[k]) for k in chosen]


class _MemRead(ReadTxnBase):
    def __init__(self, tables: dict[str, _Table]) -> None:
        self._tables: dict[str, _Table] | None = tables

    def _table(self, table: str) -> _Table:
        tables = self._tables
        if tables is None:
            raise finished_error()
        return tables[check_table(table)]

    def finish(self) -> None:
        self._tables = None

    def get(self, table: str, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or None."""
        return self._table(table).data.get(check_key(key))

    def range(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for ``start <= key < stop`` in key order."""
        check_range(start, stop, limit)
        return self._guarded(self._table(table).select(start, stop, reverse, limit))

    def _guarded(self, pairs: list[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        # Like an LMDB cursor, the iterator dies with its transaction.
        for pair in pairs:
            if self._tables is None:
                raise finished_error()
            yield pair

    def count(self, table: str) -> int:
        """Return the number of keys in ``table``."""
        return len(self._table(table).keys)


class _MemWrite(_MemRead):
    def __init__(self, tables: dict[str, _Table]) -> None:
        super().__init__(tables)
        self.own: dict[str, _Table] = {}

    def _table(self, table: str) -> _Table:
        own = self.own.get(table)
        return own if own is not None else super()._table(table)

    def _writable(self, table: str) -> _Table:
        own = self.own.get(table)
        if own is None:
            own = self.own[table] = super()._table(table).copy()
        return own

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        if self._tables is None:
            raise finished_error()
        self._writable(check_table(table)).put(check_key(key), check_value(value))

    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; return True if it was present."""
        if self._tables is None:
            raise finished_error()
        return self._writable(check_table(table)).delete(check_key(key))


class _MemReadContext:
    __slots__ = ("_store", "_txn")

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._txn: _MemRead | None = None

    def __enter__(self) -> ReadTxn:
        self._txn = _MemRead(self._store._snapshot())
        return self._txn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._txn is not None:
            self._txn.finish()


class MemoryStore:
    """A `Store` kept in memory, with the same semantics as the LMDB store.

    Writers are serialised by a lock, so it is safe to use from several threads. Nothing
    survives the process; ``stats.commits`` counts one commit per successful transaction.
    """

    def __init__(self) -> None:
        self._tables = {name: _Table({}, []) for name in TABLES}
        self._lock = threading.Lock()
        self._writer: int | None = None
        self._closed = False
        self.stats = StoreStats()

    @property
    def closed(self) -> bool:
        """True once the store was closed."""
        return self._closed

    def _snapshot(self) -> dict[str, _Table]:
        if self._closed:
            raise closed_error()
        if self._writer == threading.get_ident():
            raise reentrant_error()
        return self._tables

    def read(self) -> _MemReadContext:
        """Open a read-only snapshot: ``with store.read() as txn:``."""
        return _MemReadContext(self)

    def transact_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in one write transaction; all of it is kept, or (if it raises) none."""
        self._snapshot()
        with self._lock:
            if self._closed:
                raise closed_error()
            txn = _MemWrite(self._tables)
            self._writer = threading.get_ident()
            try:
                result = fn(txn)
            finally:
                self._writer = None
                txn.finish()
                self.stats.requests += 1
            if txn.own:
                tables = dict(self._tables)
                tables.update(txn.own)
                self._tables = tables
            self.stats.commits += 1
            self.stats.largest_batch = 1
        return result

    async def transact(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in one write transaction and return its result (see `transact_sync`)."""
        await trio.lowlevel.checkpoint_if_cancelled()
        result = outcome.capture(self.transact_sync, fn)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return result.unwrap()

    def next_incarnation(self) -> int:
        """Increment and persist the node incarnation counter; the first call returns 1."""
        return self.transact_sync(bump_incarnation)

    def close(self) -> None:
        """Close the store; later operations raise Unavailable."""
        if self._writer == threading.get_ident():
            raise reentrant_error()
        with self._lock:
            self._closed = True

    async def aclose(self) -> None:
        """Close the store (see `close`)."""
        self.close()
        await trio.lowlevel.checkpoint()
