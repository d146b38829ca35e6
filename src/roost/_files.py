"""Files roost writes outside its data directory that hold user data: private, always.

A history export holds a workflow's inputs, results and signal payloads: it is written
0600 and an export directory roost creates is 0700, whatever the umask (docs/security.md).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "private_dir", "write_private"]

PRIVATE_FILE: Final = 0o600
PRIVATE_DIR: Final = 0o700


def write_private(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` as a 0600 file (an existing file is narrowed first).

    The mode is set on the open descriptor before a byte is written: the data is never
    readable by others, not even for a moment.
    """
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # the umask may narrow, an existing file keeps its mode
        with os.fdopen(fd, "wb", closefd=False) as out:
            out.write(data)
    finally:
        os.close(fd)
    return target


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) for exported files; a directory made here is 0700.

    An existing directory keeps its mode: it is the caller's (``/tmp``, a home directory).
    """
    target = Path(path)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        target.mkdir(PRIVATE_DIR)
        os.chmod(target, PRIVATE_DIR)  # the umask may have narrowed the mode given to mkdir
    return target
