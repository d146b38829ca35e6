"""One OS process per data directory, read-only inspection beside it, and private modes.

The lock tests run ``datadir_app.py`` in real subprocesses (see ``crash_harness``): one holds
the directory, another (or this test process) tries to open it and must get InvalidState
naming the holder's OS pid at once; after a SIGKILL of the holder the directory opens again,
the stale lock file notwithstanding. The parent polls marker files the children write (a
bounded loop of short sleeps: it waits for another OS process, which no trio clock can do).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import roost
from roost import Error, ErrorKind
from roost.storage import key, open_lmdb_store

APP = Path(__file__).with_name("datadir_app.py")
sys.path.insert(0, str(APP.parent))
import crash_harness  # noqa: E402 - next to this module, on the path set above
import datadir_app  # noqa: E402 - the child's module: its app and constants

pytestmark = pytest.mark.slow

_no_stray_children = crash_harness.no_stray_children  # autouse: no node outlives a test


class Child(crash_harness.Child):
    """A datadir_app program (see ``crash_harness.Child``) on ``tmp_path/data``."""

    app = APP

    def __init__(self, tmp_path: Path, name: str, scenario: str = "lock") -> None:
        (tmp_path / name).mkdir()
        super().__init__(tmp_path / name, scenario)
        self.data = tmp_path / "data"


def _holding(child: Child) -> int:
    os_pid = child.start("hold")
    child.wait_for("the node holds the directory", lambda: child.marker("holding"))
    return os_pid


def _tried(child: Child) -> dict[str, Any]:
    child.start("try")
    assert child.proc is not None
    assert child.proc.wait(timeout=crash_harness.WAIT) == 0, child.output()
    report: dict[str, Any] = json.loads((child.work / "try.json").read_text())
    (child.work / "try.json").unlink()
    return report


def test_a_second_process_gets_invalid_state_naming_the_holder(tmp_path: Path) -> None:
    holder = Child(tmp_path, "a", "lock")
    holder_pid = _holding(holder)
    other = Child(tmp_path, "b", "lock")
    report = _tried(other)
    assert report["kind"] == ErrorKind.INVALID_STATE.value
    assert f"OS pid {holder_pid}" in report["message"]
    assert str(holder.data.resolve()) in report["message"]
    assert "stop that process" in report["message"]
    assert report["details"]["holder_pid"] == holder_pid
    assert (holder.data / "roost.lock").read_text().strip() == str(holder_pid)


async def test_this_process_is_refused_while_another_holds_the_dir(tmp_path: Path) -> None:
    holder = Child(tmp_path, "a", "lock")
    holder_pid = _holding(holder)
    with pytest.raises(Error) as info:
        async with roost.open_node(datadir_app.app, holder.data):
            pytest.fail("opened a data directory another process holds")
    assert info.value.kind is ErrorKind.INVALID_STATE
    assert f"OS pid {holder_pid}" in info.value.message
    # The refused open left the holder's lock and pid alone.
    assert (holder.data / "roost.lock").read_text().strip() == str(holder_pid)


def test_a_sigkilled_holder_does_not_block_the_next_open(tmp_path: Path) -> None:
    holder = Child(tmp_path, "a", "lock")
    holder_pid = _holding(holder)
    holder.kill()
    # The lock file stays behind with the dead holder's pid; the kernel dropped its flock.
    assert (holder.data / "roost.lock").read_text().strip() == str(holder_pid)
    other = Child(tmp_path, "b", "lock")
    report = _tried(other)
    assert report == {"opened": True, "os_pid": report["os_pid"]}

    async def reopen() -> None:
        async with roost.open_node(datadir_app.app, holder.data) as node:
            assert node.describe("held")["result"] == "hello holder"
            assert await roost.state.get("dd", "holder") == holder_pid
            assert node.incarnation == 3  # holder, the other process, this one

    trio.run(reopen)


async def test_a_second_open_in_the_same_process_is_invalid_state(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with roost.open_node(datadir_app.app, data):
        with pytest.raises(Error) as info:
            async with roost.open_node(datadir_app.app, data):
                pytest.fail("opened a data directory twice in one process")
        assert info.value.kind is ErrorKind.INVALID_STATE
        assert f"OS pid {os.getpid()}" in info.value.message
        assert str(data.resolve()) in info.value.message
        assert info.value.details["holder_pid"] == os.getpid()
    async with roost.open_node(datadir_app.app, data) as node:  # free again once closed
        assert node.incarnation == 2


def test_a_read_only_store_reads_beside_the_running_node(tmp_path: Path) -> None:
    holder = Child(tmp_path, "a", "lock")
    holder_pid = _holding(holder)
    inspector = open_lmdb_store(holder.data, readonly=True, lock=False)
    try:
        runs = roost.workflow._local._inspect.list_workflows(inspector, roost.storage.Codec())
        assert [(r["workflow_id"], r["status"], r["result"]) for r in runs] == [
            ("held", "completed", "hello holder")
        ]
        with pytest.raises(Error, match="opened read-only") as info:
            inspector.transact_sync(lambda txn: txn.put("state", b"k", b"v"))
        assert info.value.kind is ErrorKind.INVALID_STATE
    finally:
        inspector.close()
    # The inspector took no lock: the holder still has the directory.
    other = Child(tmp_path, "b", "lock")
    assert f"OS pid {holder_pid}" in _tried(other)["message"]


def test_a_read_only_store_follows_the_map_the_writer_grows(tmp_path: Path) -> None:
    writer = Child(tmp_path, "a", "grow")
    writer.start("grow")
    writer.wait_for("the store is open", lambda: writer.marker("holding"))
    inspector = open_lmdb_store(writer.data, readonly=True, lock=False, map_size=64 * 1024)
    try:
        with inspector.read() as txn:
            assert txn.count("state") == 1
        (writer.work / "grow").write_text("")
        writer.wait_for("the map grew", lambda: writer.marker("grown"))
        with inspector.read() as txn:  # past the map this process had mapped
            assert txn.count("state") == 1 + datadir_app.GROW_ROWS
            assert len(txn.get("state", key(datadir_app.GROW_ROWS - 1)) or b"") == 1024
    finally:
        inspector.close()


# -- private modes ---------------------------------------------------------------------------


@pytest.fixture
def umask() -> Iterator[Any]:
    """Set the process umask for a test, restoring it afterwards."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _modes(data: Path) -> dict[str, int]:
    return {path.name: _mode(path) for path in sorted(data.iterdir())}


async def _use(data: Path) -> None:
    async with roost.open_node(datadir_app.app, data):
        await roost.state.set("dd", "k", "secret")
        assert _modes(data) == {"data.mdb": 0o600, "lock.mdb": 0o600, "roost.lock": 0o600}


@pytest.mark.parametrize("mask", [0o022, 0o000])
async def test_a_new_data_dir_is_private_whatever_the_umask(
    tmp_path: Path, umask: Any, mask: int
) -> None:
    umask(mask)
    data = tmp_path / "new" / "data"
    await _use(data)
    assert _mode(data) == 0o700
    assert _modes(data) == {"data.mdb": 0o600, "lock.mdb": 0o600, "roost.lock": 0o600}


async def test_an_empty_or_old_roost_dir_is_tightened(tmp_path: Path, umask: Any) -> None:
    umask(0o000)
    empty = tmp_path / "empty"
    empty.mkdir(0o777)
    await _use(empty)
    assert _mode(empty) == 0o700
    # A data directory as an earlier roost left it: everything readable by all.
    old = tmp_path / "old"
    old.mkdir(0o755)
    store = open_lmdb_store(old)
    store.close()
    for path in [old, *old.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    await _use(old)
    assert _mode(old) == 0o700


async def test_a_shared_dir_keeps_its_mode_and_roost_files_are_private(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    (shared / "notes.txt").write_text("not roost's")
    with caplog.at_level(logging.WARNING, logger="roost.storage"):
        async with roost.open_node(datadir_app.app, shared):
            await roost.state.set("dd", "k", "secret")
    assert _mode(shared) == 0o755
    modes = _modes(shared)
    assert modes.pop("notes.txt") == _mode(shared / "notes.txt")
    assert modes == {"data.mdb": 0o600, "lock.mdb": 0o600, "roost.lock": 0o600}
    assert any(
        "has mode 0o755" in r.getMessage() and "notes.txt" in r.getMessage() for r in caplog.records
    )
