"""The data directory around the LMDB files: private modes, and one owning OS process.

Privacy. Everything roost keeps is in the data directory: payloads, state, histories. It is
created ``0700`` and every file roost puts in it is ``0600``, whatever the umask (the mode is
set explicitly after creation, so a umask can neither widen nor narrow it). A directory that
already exists with a wider mode is tightened to ``0700`` when it holds nothing but roost's
own files (a fresh empty directory, or a data directory of an earlier roost version); a
directory that also holds other files is left as it is (a warning says so), since it is not
roost's to change, and only roost's own files in it are tightened to ``0600``.

Ownership. A node holds an exclusive ``flock`` on ``roost.lock`` in the data directory for as
long as its store is open, with the holder's OS pid written in the file. A second open, from
another process or from this one, fails at once with InvalidState naming that pid. The kernel
drops the lock when the holder exits in any way (SIGKILL included), so a lock file left
behind never blocks the next open: the lock, not the file, says whether the directory is
taken. Read-only inspectors open the store without the lock (LMDB itself keeps their reads
consistent beside the writing process).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from typing import Final

from roost._errors import Error, ErrorKind

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "LOCK_FILE",
    "ROOST_FILES",
    "DirLock",
    "in_use_error",
    "prepare_dir",
    "tighten_file",
]

log = logging.getLogger("roost.storage")

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
LOCK_FILE: Final = "roost.lock"
# What roost itself writes into a data directory (LMDB's two files, the lock, the admin
# server's address file).
ROOST_FILES: Final = frozenset({"data.mdb", "lock.mdb", LOCK_FILE, "admin.json"})


def prepare_dir(path: str) -> None:
    """Create ``path`` as a private directory, or make an existing one private if it is ours.

    Raises:
        OSError: the directory cannot be created or its mode cannot be set.
    """
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        _tighten_existing(path)
        return
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)  # parents: the umask's default
        with contextlib.suppress(FileExistsError):  # created meanwhile: made private below
            os.mkdir(path, DIR_MODE)
    os.chmod(path, DIR_MODE)  # the umask may have narrowed the mode given to mkdir


def _tighten_existing(path: str) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode == DIR_MODE:
        return
    if not os.path.isdir(path):
        return  # not a directory: LMDB's open reports it
    foreign = sorted(set(os.listdir(path)) - ROOST_FILES)
    if not foreign:
        os.chmod(path, DIR_MODE)
        return
    if mode & 0o077:
        log.warning(
            "the data directory %s has mode %s, so other local users may list it; roost "
            "leaves its mode alone because it holds files roost did not write (%s) and makes "
            "only its own files private (0600): use a directory of its own for roost's data",
            path,
            oct(mode),
            ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else ""),
        )


def tighten_file(path: str) -> None:
    """Give a file roost owns in the data directory the mode 0600 (if it exists)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_IMODE(os.stat(path).st_mode) != FILE_MODE:
            os.chmod(path, FILE_MODE)


def in_use_error(path: str, holder: int | None, *, here: bool) -> Error:
    """The InvalidState error for a data directory some (named) process already holds."""
    who = f"OS pid {holder}" if holder is not None else "another process (its pid is unknown)"
    if here:
        message = (
            f"the data directory {path} is already open in this process (OS pid {os.getpid()}):"
            " one data directory serves one node at a time; close the first node (or store) "
            "before opening it again, or give this one another data_dir"
        )
    else:
        message = (
            f"the data directory {path} is in use by another roost process ({who}: a node, "
            "or a `roost` command that holds it while it writes a change): one data "
            "directory serves one OS process at a time; stop that process (a command lets go "
            "within moments: try again), or give this node another data_dir (read-only "
            "tools may open the store with open_lmdb_store(path, readonly=True, lock=False) "
            "beside it)"
        )
    return Error(
        message,
        kind=ErrorKind.INVALID_STATE,
        retryable=False,
        details={"path": path, "holder_pid": os.getpid() if here else holder},
    )


class DirLock:
    """The exclusive lock on a data directory, held from ``acquire`` until ``release``."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, path: str) -> DirLock:
        """Take the directory's lock and write this process's pid into the lock file.

        Raises:
            roost.Error: InvalidState when another process (or open file) holds it.
            OSError: the lock file cannot be created.
        """
        lock_path = os.path.join(path, LOCK_FILE)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                holder = _read_pid(fd)
                raise in_use_error(path, holder, here=holder == os.getpid()) from None
            # Fixed width, written over whatever a killed holder left: no moment at which
            # a process that finds the directory taken reads an empty file.
            record = f"{os.getpid():<20}\n".encode()
            os.pwrite(fd, record, 0)
            os.ftruncate(fd, len(record))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd)

    def release(self) -> None:
        """Empty the lock file and drop the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no pid of a process that no longer holds the directory
        finally:
            os.close(fd)  # closing the only descriptor of the open file drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
