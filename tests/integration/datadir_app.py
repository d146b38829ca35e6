"""The node program ``test_data_dir.py`` runs in real subprocesses on one data directory.

Usage: ``python datadir_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

- ``PHASE=hold`` opens a node on ``DATA_DIR``, runs a workflow to completion, stores a state
  value, writes the marker ``holding`` (its OS pid inside) and waits to be killed.
- ``PHASE=try`` tries to open a node on ``DATA_DIR`` and writes what happened to
  ``WORK_DIR/try.json``: ``{"opened": true}`` or the error's kind, message and details.
- ``PHASE=grow`` opens the bare store with a 64 KiB map, writes one row, writes ``holding``,
  waits for the marker ``grow``, then writes 2 MiB (the map grows many times), writes
  ``grown`` and waits to be killed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import crash_child
import trio

import roost
from roost import process
from roost.storage import key, open_lmdb_store

app = roost.App("dd")
GROW_ROWS = 2048  # of 1 KiB each


@app.workflow
async def hello(name: str) -> str:
    await roost.sleep("1ms")
    return f"hello {name}"


async def hold(data: Path, work: Path) -> None:
    async with roost.open_node(app, data) as node:
        assert await process.with_options(id="held").exec(hello, "holder") == "hello holder"
        await roost.state.set("dd", "holder", os.getpid())
        crash_child.touch(work, "holding")
        assert node.incarnation >= 1
        await trio.sleep_forever()


async def attempt(data: Path, work: Path) -> None:
    try:
        async with roost.open_node(app, data):
            report: dict[str, object] = {"opened": True, "os_pid": os.getpid()}
    except roost.Error as exc:
        report = {"kind": exc.kind.value, "message": exc.message, "details": dict(exc.details)}
    (work / "try.json").write_text(json.dumps(report))


def grow(data: Path, work: Path) -> None:
    store = open_lmdb_store(data, map_size=64 * 1024, durability="fast")
    store.transact_sync(lambda txn: txn.put("state", b"first", b"1"))
    crash_child.touch(work, "holding")
    while not (work / "grow").exists():  # another OS process decides when: no trio clock
        time.sleep(0.005)
    for start in range(0, GROW_ROWS, 256):
        store.transact_sync(
            lambda txn, start=start: [
                txn.put("state", key(i), os.urandom(1024)) for i in range(start, start + 256)
            ]
        )
    crash_child.touch(work, "grown")
    while True:
        time.sleep(60)


def main() -> None:
    data, work, _scenario, phase = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
    if phase == "hold":
        trio.run(hold, data, work)
    elif phase == "try":
        trio.run(attempt, data, work)
    elif phase == "grow":
        grow(data, work)
    else:
        raise SystemExit(f"unknown phase {phase!r}")


if __name__ == "__main__":
    main()
