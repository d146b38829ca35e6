"""Writing a stopped data directory behind roost's back, for tests of what a node reads."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lmdb

from roost.storage import TABLES


@contextmanager
def raw(data: Path) -> Iterator[tuple[lmdb.Transaction[bytes], dict[str, Any]]]:
    """A write transaction on the stopped data directory, bypassing roost."""
    env = lmdb.open(str(data), max_dbs=128)
    try:
        dbs = {name: env.open_db(name.encode()) for name in TABLES}
        with env.begin(write=True) as txn:
            yield txn, dbs
    finally:
        env.close()
