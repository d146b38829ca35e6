"""Fixtures shared by the storage tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from roost.storage import MemoryStore, Store, open_lmdb_store


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each backend in turn; the LMDB one uses "fast" durability to keep tests quick."""
    opened: Store
    if request.param == "memory":
        opened = MemoryStore()
    else:
        opened = open_lmdb_store(tmp_path / "db", durability="fast")
    try:
        yield opened
    finally:
        opened.close()
