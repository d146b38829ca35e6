"""What the crash-test node programs (crash_app.py, crash_queue_app.py) share: logs, markers.

Both are written so that a SIGKILL at any moment leaves a complete line or none, and a
marker either absent or complete.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["append_line", "touch"]


def append_line(work: Path, name: str, **fields: Any) -> None:
    """Append one JSON line to ``work/name`` in a single write."""
    data = (json.dumps(fields, sort_keys=True) + "\n").encode()
    fd = os.open(work / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def touch(work: Path, name: str) -> None:
    """Create the marker file ``work/name`` (atomically, via rename)."""
    tmp = work / f".{name}.tmp"
    tmp.write_text(str(time.time()))
    tmp.replace(work / name)
