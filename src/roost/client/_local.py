"""What a client does on the data directory itself: probe its lock, find its node, use its store.

These are the blocking pieces of a data-directory client, each run as one ``Blocking`` step
(inline by ``Client``, in a worker thread by ``AsyncClient``):

- ``lock_holder``: the OS process holding the directory's lock, if any, found without taking
  it (a shared look at ``roost.lock``: the node's lock is the one fact that says a node runs).
- ``read_admin_file``: the admin server the holder advertises in ``admin.json``.
- ``read_store`` / ``change_store``: the store read-only, or written under the directory's
  lock for one transaction when no node runs (what ``roost workflow start`` and friends do
  offline).

Opens of one store within this process are serialised: LMDB allows one open per process, so
two requests of one client (or of two clients) on a stopped directory take turns.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs

from roost._errors import Error, ErrorKind
from roost.storage import Codec, LmdbStore, WriteTxn, open_lmdb_store
from roost.storage._datadir import LOCK_FILE, _read_pid
from roost.workflow._local import _inspect

__all__ = [
    "ADMIN_FILE",
    "TOKEN_FILE",
    "UNKNOWN_HOLDER",
    "Admin",
    "change_store",
    "describe_of",
    "has_store",
    "held_by",
    "listed",
    "lock_holder",
    "read_admin_file",
    "read_store",
    "same_dir",
]

T = TypeVar("T")

ADMIN_FILE: Final = "admin.json"
TOKEN_FILE: Final = "admin.token"  # noqa: S105 - a file name; a token kept in the data directory by the node, if any
UNKNOWN_HOLDER: Final = 0  # the lock is held, by a process whose pid the file does not name
_STORE_USE = threading.Lock()


@attrs.frozen
class Admin:
    """A node's admin API: its base URL, its bearer token, and the OS process serving it."""

    url: str
    token: str = attrs.field(repr=False)
    pid: int | None = None


def has_store(data_dir: Path) -> bool:
    """Whether ``data_dir`` holds a roost store (a node or a command has opened it)."""
    return (data_dir / "data.mdb").is_file()


def lock_holder(data_dir: Path) -> int | None:
    """The OS pid holding ``data_dir``'s lock, or None when it is free.

    The lock is tried and let go at once, on a read-only descriptor, so nothing is written;
    a holder whose pid the file does not name is ``UNKNOWN_HOLDER``.
    """
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None  # no node has ever opened it: nobody holds it
    except OSError as exc:
        raise _unreadable(data_dir, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise _unreadable(data_dir, exc) from None
            holder = _read_pid(fd)
            return UNKNOWN_HOLDER if holder is None else holder
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _unreadable(data_dir: Path, exc: OSError) -> Error:
    return Error(
        f"cannot look at the data directory {data_dir}: {exc}; check the path and its permissions",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"path": str(data_dir)},
    )


def read_admin_file(data_dir: Path, token: str | None) -> Admin | None:
    """The admin server ``admin.json`` in ``data_dir`` names, or None without a readable one.

    The token is ``token`` when given, else the file's, else the node's kept
    ``admin.token``, else ``ROOST_ADMIN_TOKEN``.
    """
    try:
        info = json.loads((data_dir / ADMIN_FILE).read_text())
        url = str(info["url"]).rstrip("/")
        pid = info.get("pid")
        found = info.get("token")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if token is None and isinstance(found, str) and found:
        token = found
    if token is None:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            token = (data_dir / TOKEN_FILE).read_text().strip() or None
    if token is None:
        token = os.environ.get("ROOST_ADMIN_TOKEN") or None
    if token is None or not isinstance(pid, int):
        return None
    return Admin(url=url, token=token, pid=pid)


def same_dir(reported: object, data_dir: Path) -> bool:
    """Whether the data directory a node reports (``GET /api/node``) is ``data_dir``."""
    if not isinstance(reported, str):
        return False
    try:
        return Path(reported).resolve() == data_dir.resolve()
    except OSError:
        return False


def _no_store(data_dir: Path) -> Error:
    return Error(
        f"there is no roost store in {data_dir}: check the data directory given to "
        "roost.connect (a node, or a start or enqueue, creates it)",
        kind=ErrorKind.NOT_FOUND,
        retryable=False,
        details={"path": str(data_dir)},
    )


def read_store(data_dir: Path, fn: Callable[[LmdbStore, Codec], T]) -> T:
    """``fn(store, codec)`` on ``data_dir``'s store opened read-only (beside a node or not).

    Raises:
        roost.Error: NotFound when there is no store; what ``fn`` raised.
    """
    if not has_store(data_dir):
        raise _no_store(data_dir)
    with _STORE_USE:
        store = open_lmdb_store(data_dir, readonly=True, lock=False)
        try:
            return fn(store, Codec())
        finally:
            store.close()


def change_store(data_dir: Path, fn: Callable[[WriteTxn, Codec], T], *, create: bool = False) -> T:
    """``fn(txn, codec)`` in one write transaction, holding ``data_dir``'s lock meanwhile.

    ``create``: a directory without a store gets one (a start or an enqueue); otherwise
    there must be one. An ``admin.json`` left by a killed node goes (the lock was free).

    Raises:
        roost.Error: NotFound when there is no store (and not ``create``); InvalidState
            (``details["holder_pid"]``) when a process holds the directory; what ``fn``
            raised, with nothing stored.
    """
    if not create and not has_store(data_dir):
        raise _no_store(data_dir)
    with _STORE_USE:
        store = open_lmdb_store(data_dir)
        try:
            (data_dir / ADMIN_FILE).unlink(missing_ok=True)
            codec = Codec()
            return store.transact_sync(lambda txn: fn(txn, codec))
        finally:
            store.close()


def held_by(err: Error) -> int | None:
    """The holder's pid when ``err`` says another process holds the directory, else None."""
    if err.kind is not ErrorKind.INVALID_STATE:
        return None
    holder = err.details.get("holder_pid")
    if isinstance(holder, int):
        return holder
    return UNKNOWN_HOLDER if "holder_pid" in err.details else None


def describe_of(workflow_id: str) -> Callable[[LmdbStore, Codec], dict[str, Any]]:
    """A ``read_store`` function: the stored description of ``workflow_id``."""

    def read(store: LmdbStore, codec: Codec) -> dict[str, Any]:
        return _inspect.describe(store, codec, workflow_id)

    return read


def listed(query: str | None) -> Callable[[LmdbStore, Codec], list[dict[str, Any]]]:
    """A ``read_store`` function: the stored workflows matching ``query``."""

    def read(store: LmdbStore, codec: Codec) -> list[dict[str, Any]]:
        return _inspect.list_workflows(store, codec, query)

    return read
