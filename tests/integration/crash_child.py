"""What the crash-test node programs (crash_app.py, crash_queue_app.py) share: logs, markers.

A SIGKILL can cut a line short (Linux may stop a write to a file between pages when a fatal
signal is pending), so a node that starts on a work directory first ends any cut line with
a newline (``seal_logs``), and readers skip lines that are not JSON. A marker is either
absent or complete (written aside, then renamed).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["append_line", "seal_logs", "touch"]


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


def seal_logs(work: Path) -> None:
    """End a line a killed node left cut short, so the next line starts on its own."""
    for path in work.glob("*.log"):
        with path.open("rb+") as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                continue
            fh.seek(-1, os.SEEK_END)
            if fh.read(1) != b"\n":
                fh.write(b"\n")
