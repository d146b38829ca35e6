"""The Store protocol and its transaction interfaces, shared by the LMDB and in-memory stores.

A store holds named tables of sorted ``bytes -> bytes`` pairs. Keys are compared as raw bytes
(build them with ``roost.storage.key`` so that byte order is logical order); values are opaque
bytes (the codec is layered above the store, not inside it).

Semantics every backend keeps:

- ``with store.read() as txn:`` is a consistent, read-only snapshot: writes committed after it
  began are invisible to it. It is synchronous; do not ``await`` while it is open (the LMDB
  store must briefly wait for open snapshots to close when it grows its map).
- ``await store.transact(fn)`` runs ``fn(txn)`` in one write transaction and returns its
  result once the commit is durable. If ``fn`` raises, nothing it wrote is kept and the
  exception propagates to the caller. ``fn`` must only touch ``txn``: it may run on another
  thread and, if the LMDB map has to grow, more than once. Once submitted, a transaction is not
  withdrawn by cancelling the caller: the await returns (or raises) its outcome, and the
  cancellation is delivered at the caller's next checkpoint.
- ``store.transact_sync(fn)`` does the same, blocking, for code outside trio.
- A ``range``/``prefix`` iterator lives only as long as its transaction; do not write to a
  table while iterating it in the same transaction (collect the keys first).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import attrs

from roost._counters import COMMIT_BUCKETS, Histogram
from roost._errors import Error, ErrorKind, invalid
from roost.storage._keys import from_u64, prefix_end, u64

__all__ = [
    "INCARNATION_KEY",
    "MAX_KEY_SIZE",
    "TABLES",
    "ReadTxn",
    "ReadTxnBase",
    "Store",
    "StoreStats",
    "WriteTxn",
    "bump_incarnation",
    "care_hint",
    "check_key",
    "check_range",
    "check_table",
    "check_value",
    "closed_error",
    "damaged_error",
    "finished_error",
    "reentrant_error",
]

T = TypeVar("T")

# Adding a table: append its name here; both backends create every table listed at open.
TABLES: Final[tuple[str, ...]] = (
    "histories",
    "runs",
    "timers",
    "tasks",
    "names",
    "queue_messages",
    "dlq",
    "state",
    "visibility",
    "meta",
    "outbox",
    "inbox",
    "cron",
    "queue_groups",
    "quarantine",
    "attempts",
    "cron_runs",
)
_TABLE_SET: Final = frozenset(TABLES)

# LMDB's compile-time limit (MDB_MAXKEYSIZE); the memory store enforces it too, for parity.
MAX_KEY_SIZE: Final = 511

INCARNATION_KEY: Final = b"node.incarnation"


@attrs.define
class StoreStats:
    """Counters a store keeps about its write path.

    Attributes:
        commits: write transactions committed (one per group commit).
        requests: transact requests processed (committed or failed).
        map_resizes: times the LMDB map was grown.
        largest_batch: the most requests one group commit carried.
        inline_commits: commits made in the trio thread because it had nothing else to run
            (the LMDB store; see ``roost.storage._lmdb``), counted in ``commits`` too.
        commit_seconds: how long each LMDB commit (its write and fsync) took.
    """

    commits: int = 0
    requests: int = 0
    map_resizes: int = 0
    largest_batch: int = 0
    inline_commits: int = 0
    commit_seconds: Histogram = attrs.field(factory=lambda: Histogram(COMMIT_BUCKETS), eq=False)


@runtime_checkable
class ReadTxn(Protocol):
    """A read-only view of every table."""

    def get(self, table: str, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or None."""
        ...

    def range(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for ``start <= key < stop`` in key order.

        Args:
            table: the table name (one of ``TABLES``).
            start: inclusive lower bound; None for the first key.
            stop: exclusive upper bound; None for past the last key.
            reverse: yield from the highest key down.
            limit: yield at most this many pairs.
        """
        ...

    def prefix(
        self, table: str, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield the pairs whose key starts with ``prefix``, in key order."""
        ...

    def count(self, table: str) -> int:
        """Return the number of keys in ``table``."""
        ...


@runtime_checkable
class WriteTxn(ReadTxn, Protocol):
    """A read-write view; its reads see its own writes."""

    def put(self, table: str, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        ...

    def delete(self, table: str, key: bytes) -> bool:
        """Remove ``key``; return True if it was present."""
        ...


@runtime_checkable
class Store(Protocol):
    """A transactional key-value store of named, sorted tables."""

    stats: StoreStats

    @property
    def closed(self) -> bool:
        """True once the store was closed."""
        ...

    def read(self) -> AbstractContextManager[ReadTxn]:
        """Open a read-only snapshot (``with store.read() as txn:``)."""
        ...

    async def transact(self, fn: Callable[[WriteTxn], T]) -> T:
        """Run ``fn`` in one write transaction; return its result once durable."""
        ...

    def transact_sync(self, fn: Callable[[WriteTxn], T]) -> T:
        """Blocking form of `transact`, for code outside trio."""
        ...

    def next_incarnation(self) -> int:
        """Increment and persist the node incarnation counter; return the new value."""
        ...

    def close(self) -> None:
        """Close the store; pending write requests fail with Unavailable."""
        ...

    async def aclose(self) -> None:
        """Close the store without blocking the trio thread."""
        ...


class ReadTxnBase(abc.ABC):
    """Shared read helpers; backends implement ``range`` and inherit ``prefix``."""

    @abc.abstractmethod
    def range(
        self,
        table: str,
        start: bytes | None = None,
        stop: bytes | None = None,
        *,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` for ``start <= key < stop`` (see `ReadTxn.range`)."""

    def prefix(
        self, table: str, prefix: bytes, *, reverse: bool = False, limit: int | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """Yield the pairs whose key starts with ``prefix``, in key order."""
        if not isinstance(prefix, bytes):
            raise invalid(f"a key prefix must be bytes, got {type(prefix).__name__}")
        start = prefix or None
        return self.range(table, start, prefix_end(prefix), reverse=reverse, limit=limit)


def check_table(table: Any) -> str:
    """Return ``table`` if it names a table, else raise Invalid listing the tables."""
    if table not in _TABLE_SET:
        raise invalid(
            f"unknown table {table!r}; the tables are {', '.join(TABLES)}", table=repr(table)
        )
    return str(table)


def check_key(key: Any) -> bytes:
    """Return ``key`` if it is a usable key (1..511 bytes), else raise Invalid."""
    if not isinstance(key, bytes):
        raise invalid(f"keys must be bytes, got {type(key).__name__}")
    if not 0 < len(key) <= MAX_KEY_SIZE:
        raise invalid(f"keys must be 1 to {MAX_KEY_SIZE} bytes long, got {len(key)} bytes")
    return key


def check_value(value: Any) -> bytes:
    """Return ``value`` if it is bytes, else raise Invalid (encode payloads with a Codec)."""
    if not isinstance(value, bytes):
        raise invalid(
            f"values must be bytes, got {type(value).__name__}: encode it with a Codec first"
        )
    return value


def check_range(start: Any, stop: Any, limit: Any) -> None:
    """Validate range bounds and limit, raising Invalid."""
    for name, bound in (("start", start), ("stop", stop)):
        if bound is not None and not isinstance(bound, bytes):
            raise invalid(f"range {name} must be bytes or None, got {type(bound).__name__}")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise invalid(f"range limit must be None or an int >= 0, got {limit!r}")


def closed_error(what: str = "store") -> Error:
    """The error every operation on a closed store raises."""
    return Error(
        f"{what} closed: the store was closed before this request ran; nothing of it was "
        "written (reopen the store to continue)",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
    )


def care_hint(path: str = "DATA_DIR") -> str:
    """What to do about a damaged store in ``path``: the two commands that deal with it."""
    return (
        f"run `roost store check --data-dir {path}` to see the damage, and `roost store "
        f"salvage {path} NEW_DIR` to copy every readable record into a new store "
        '(docs/operating.md, "Store care")'
    )


def damaged_error(
    table: str,
    row_key: bytes | None,
    exc: BaseException,
    *,
    after: bytes | None = None,
    path: str = "DATA_DIR",
) -> Error:
    """The Unavailable error for a read or write LMDB refused because the table is damaged.

    Args:
        table: the table read.
        row_key: the record asked for (None for a scan or a count).
        exc: what LMDB raised.
        after: for a scan, the last key read before the damage (None: at its start).
        path: the data directory, for the commands the message names.
    """
    if row_key is not None:
        where = f"the record {row_key!r:.120}"
    elif after is not None:
        where = f"the records after {after!r:.120}"
    else:
        where = "its records"
    details: dict[str, Any] = {"table": table, "cause": f"{type(exc).__name__}: {exc}"}
    if row_key is not None:
        details["key"] = row_key.hex()
    if after is not None:
        details["after"] = after.hex()
    return Error(
        f"the store's {table} table is damaged: LMDB cannot read {where} "
        f"({type(exc).__name__}: {exc}); {care_hint(path)}",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details=details,
    )


def bump_incarnation(txn: WriteTxn) -> int:
    """Increment the node incarnation counter in the ``meta`` table; return the new value."""
    current = txn.get("meta", INCARNATION_KEY)
    value = (from_u64(current) if current is not None else 0) + 1
    txn.put("meta", INCARNATION_KEY, u64(value))
    return value


def finished_error() -> Error:
    """The error a transaction object raises when used after its block or function ended."""
    return Error(
        "this transaction is finished: use a txn only inside its `with store.read()` block or "
        "its transact function",
        kind=ErrorKind.INVALID_STATE,
        retryable=False,
    )


def reentrant_error() -> Error:
    """The error for calling the store from inside a transact function."""
    return Error(
        "cannot call transact/transact_sync/read/close on the store from inside a transact "
        "function: use the txn it was given",
        kind=ErrorKind.INVALID_STATE,
        retryable=False,
    )
