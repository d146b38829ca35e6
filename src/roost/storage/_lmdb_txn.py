"""LMDB transaction wrappers for the Store protocol, and the gate that lets the map grow."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import lmdb

from roost.storage._store import (
    MAX_KEY_SIZE,
    ReadTxnBase,
    check_key,
    check_range,
    check_table,
    check_value,
    damaged_error,
    finished_error,
)

__all__ = ["DAMAGE", "MISSING_TABLE", "LmdbReadTxn", "LmdbWriteTxn", "ReaderGate", "abort_quietly"]

# What LMDB raises for a page it finds damaged: a roost.Error naming the table instead.
DAMAGE = (
    lmdb.CorruptedError,
    lmdb.PageNotFoundError,
    lmdb.BadValsizeError,
    lmdb.InvalidError,
    lmdb.PanicError,
    lmdb.BadTxnError,
)

# Stands for a table a read-only store did not find (a store written by an earlier version):
# it reads as empty.
MISSING_TABLE: Any = object()


class ReaderGate:
    """Counts open read snapshots so the writer can get the map to itself to resize it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False

    def enter(self) -> None:
        """Register a snapshot; waits while the map is being resized."""
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._readers += 1

    def exit(self) -> None:
        """Unregister a snapshot."""
        with self._cond:
            self._readers -= 1
            if self._readers == 0:
                self._cond.notify_all()

    def acquire_exclusive(self, timeout: float) -> bool:
        """Hold off new snapshots and wait for open ones to close; False on timeout."""
        with self._cond:
            self._exclusive = True
            if self._cond.wait_for(lambda: self._readers == 0, timeout):
                return True
            self._exclusive = False
            self._cond.notify_all()
            return False

    def release_exclusive(self) -> None:
        """Let snapshots open again."""
        with self._cond:
            self._exclusive = False
            self._cond.notify_all()


class LmdbReadTxn(ReadTxnBase):
    """`ReadTxn` over an LMDB transaction; dead once ``finish()`` was called."""

    def __init__(
        self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any], path: str = "DATA_DIR"
    ) -> None:
        self._txn: lmdb.Transaction[bytes] | None = txn
        self._dbs = dbs
        self._path = path  # the data directory, for the message of a damaged page

    def _live(self) -> lmdb.Transaction[bytes]:
        txn = self._txn
        if txn is None:
            raise finished_error()
        return txn

    def _db(self, table: str) -> Any:
        db = self._dbs.get(table)
        return db if db is not None else self._dbs[check_table(table)]

    def finish(self) -> None:
        self._txn = None

    def get(self, table: str, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or None."""
        txn = self._txn
        if txn is None:
            raise finished_error()
        db = self._dbs.get(table)
        if db is None:
            db = self._dbs[check_table(table)]
        # check_key's test inline (every row of a step passes here): only a key that
        # fails it takes the call, for its error.
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_SIZE:
            check_key(key)
        if db is MISSING_TABLE:
            return None
        try:
            return txn.get(key, db=db)
        except DAMAGE as exc:
            raise damaged_error(table, key, exc, path=self._path) from None

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
        txn, db = self._live(), self._db(table)
        if db is MISSING_TABLE:
            return iter(())
        cursor = txn.cursor(db=db)
        return self._scan(table, cursor, start, stop, reverse, limit)

    def _scan(  # noqa: PLR0917 - range's own arguments, passed on
        self,
        table: str,
        cursor: lmdb.Cursor[bytes],
        start: bytes | None,
        stop: bytes | None,
        reverse: bool,
        limit: int | None,
    ) -> Iterator[tuple[bytes, bytes]]:
        if limit == 0 or (start is not None and stop is not None and start >= stop):
            return
        last: bytes | None = None
        try:
            for item in _walk(cursor, start, stop, reverse, limit):
                last = item[0]
                yield item
        except lmdb.Error as exc:
            if self._txn is None:
                raise finished_error() from None
            if isinstance(exc, DAMAGE):
                raise damaged_error(table, None, exc, after=last, path=self._path) from None
            raise

    def count(self, table: str) -> int:
        """Return the number of keys in ``table``."""
        txn, db = self._live(), self._db(table)
        try:
            return 0 if db is MISSING_TABLE else txn.stat(db)["entries"]
        except DAMAGE as exc:
            raise damaged_error(table, None, exc, path=self._path) from None


def _walk(
    cursor: lmdb.Cursor[bytes],
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
    limit: int | None,
) -> Iterator[tuple[bytes, bytes]]:
    if reverse:
        if stop is None:
            positioned = cursor.last()
        else:
            # On the first key >= stop, step back one; with no such key, start at the last.
            positioned = cursor.prev() if cursor.set_range(stop) else cursor.last()
        items = cursor.iterprev() if positioned else iter(())
    else:
        positioned = cursor.first() if start is None else cursor.set_range(start)
        items = cursor.iternext() if positioned else iter(())
    left = limit
    for k, v in items:
        if (start is not None and k < start) if reverse else (stop is not None and k >= stop):
            return
        yield k, v
        if left is not None:
            left -= 1
            if left == 0:
                return


class LmdbWriteTxn(LmdbReadTxn):
    """`WriteTxn` over an LMDB (child) write transaction."""

    def __init__(
        self, txn: lmdb.Transaction[bytes], dbs: dict[str, Any], path: str = "DATA_DIR"
    ) -> None:
        super().__init__(txn, dbs, path)
        # Set when LMDB ran out of map or dirty-page room: the whole batch must be redone,
        # even if the transact function swallowed the exception.
        self.fatal: lmdb.Error | None = None

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        txn = self._txn
        if txn is None:
            raise finished_error()
        # The checks inline, in check_key's and check_value's order (see ``get``).
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_SIZE:
            check_key(key)
        if type(value) is not bytes:
            check_value(value)
        db = self._dbs.get(table)
        if db is None:
            db = self._dbs[check_table(table)]
        try:
            txn.put(key, value, db=db)
        except (lmdb.MapFullError, lmdb.TxnFullError) as exc:
            self.fatal = exc
            raise
        except DAMAGE as exc:
            raise damaged_error(table, key, exc, path=self._path) from None

    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; return True if it was present."""
        txn = self._txn
        if txn is None:
            raise finished_error()
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_SIZE:
            check_key(key)
        db = self._dbs.get(table)
        if db is None:
            db = self._dbs[check_table(table)]
        try:
            return txn.delete(key, db=db)
        except (lmdb.MapFullError, lmdb.TxnFullError) as exc:
            self.fatal = exc
            raise
        except DAMAGE as exc:
            raise damaged_error(table, key, exc, path=self._path) from None


def abort_quietly(txn: lmdb.Transaction[bytes]) -> None:
    # A failed commit has already finished the transaction.
    with contextlib.suppress(lmdb.Error):
        txn.abort()
