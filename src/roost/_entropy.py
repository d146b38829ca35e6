"""Random bytes for ids and seeds, drawn from the OS in blocks rather than one call each.

Every workflow start takes 16 random bytes (its run id and seed) and, without an explicit
id, 8 more for its workflow id. One ``os.urandom`` call per draw is a system call per
start; a block of them costs one call per ``_BLOCK // 16`` starts. The bytes are the
kernel's CSPRNG output all the same, each handed out once: a lock guards the block (nodes
on other threads of the process draw from it too), and a forked child drops the parent's
block (``os.register_at_fork``): otherwise both would hand out the same bytes.
"""

from __future__ import annotations

import os
import threading
from typing import Final

__all__ = ["random_bytes"]

_BLOCK: Final = 4096
_pool = bytearray()
_lock = threading.Lock()


def random_bytes(n: int) -> bytes:
    """``n`` fresh random bytes (``n`` at most a few hundred)."""
    global _pool  # noqa: PLW0603 - the one block of this process
    with _lock:
        if len(_pool) < n:
            _pool = bytearray(os.urandom(max(_BLOCK, n)))
        start = len(_pool) - n
        out = bytes(_pool[start:])
        del _pool[start:]
    return out


def _drop_pool() -> None:
    global _lock  # noqa: PLW0603 - a fork may copy it held: the child takes a new one
    _lock = threading.Lock()
    _pool.clear()


os.register_at_fork(after_in_child=_drop_pool)
