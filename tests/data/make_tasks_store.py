"""Write the activity-task fixture: ``.venv/bin/python tests/data/make_tasks_store.py``.

Runs the workflows of ``tasks_app.py`` on a fresh data dir with the code of the checkout
it runs in, stops the node with three of them open (an activity in flight, one between
retry attempts, two pending beside a cancelled one) and writes next to this script:

- ``tasks_store.tar.gz``: the data dir (``data.mdb`` compacted by LMDB's own copy);
- ``tasks_store.json``: ``describe`` of every workflow as that code read it back, and the
  decoded rows of its ``tasks`` table.

It was run once, by the code that stored a row in ``tasks`` for every scheduled activity
(before the pending activities were read from the histories); keep the committed one.
"""

import importlib.util
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import lmdb
import trio

import roost
from roost import process
from roost.storage import Codec
from roost.testing import history_to_json

HERE = Path(__file__).resolve().parent
ARCHIVE = HERE / "tasks_store.tar.gz"
EXPECTED = HERE / "tasks_store.json"
OPEN = ["mid-1", "retry-1", "parallel-1"]


def load_app() -> Any:
    spec = importlib.util.spec_from_file_location("roost_tasks_fixture_app", HERE / "tasks_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def as_json(value: Any) -> Any:
    return json.loads(history_to_json([value], indent=None))[0]


async def settled(node: Any, module: Any) -> None:
    """Until every open workflow is where the fixture wants it."""
    with trio.fail_after(20):
        while True:
            pending = {wf: node.describe(wf)["pending_activities"] for wf in OPEN}
            ready = (
                "mid" in module.CALLS
                and [p["attempt"] for p in pending["retry-1"]] == [3]
                and {"p-a", "p-b"} <= set(module.CALLS)
                and len(pending["parallel-1"]) == 2
            )
            if ready:
                return
            await trio.sleep(0.01)


async def drive(data_dir: str, module: Any) -> dict[str, Any]:
    async with roost.open_node(module.app, data_dir) as node:
        opts = process.with_options
        assert await opts(id="done-1").exec("tasks:done") == 2
        await opts(id="mid-1").spawn("tasks:mid")
        await opts(id="retry-1").spawn("tasks:retrying")
        await opts(id="parallel-1").spawn("tasks:parallel")
        await settled(node, module)
        return {wf: as_json(node.describe(wf)) for wf in ["done-1", *OPEN]}


def read_tasks(data_dir: str) -> list[Any]:
    codec = Codec()
    env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            db = env.open_db(b"tasks", txn=txn, create=False)
            return [as_json(codec.decode(v)) for _, v in txn.cursor(db)]
    finally:
        env.close()


def archive(data_dir: str) -> bytes:
    with tempfile.TemporaryDirectory() as copy:
        env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
        try:
            env.copy(copy, compact=True)
        finally:
            env.close()
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            info = tar.gettarinfo(Path(copy) / "data.mdb", arcname="data.mdb")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(Path(copy) / "data.mdb", "rb") as f:
                tar.addfile(info, f)
        return buf.getvalue()


def main() -> None:
    module = load_app()
    with tempfile.TemporaryDirectory() as data_dir:
        workflows = trio.run(drive, data_dir, module)
        tasks = read_tasks(data_dir)
        ARCHIVE.write_bytes(archive(data_dir))
    EXPECTED.write_text(
        json.dumps(
            {"open": OPEN, "workflows": workflows, "tasks": tasks, "calls": module.CALLS},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {ARCHIVE.name} ({ARCHIVE.stat().st_size} bytes) and {EXPECTED.name}")


if __name__ == "__main__":
    main()
