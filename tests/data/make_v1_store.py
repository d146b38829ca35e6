"""Write the history-format fixture: ``.venv/bin/python tests/data/make_v1_store.py``.

Runs the workflows of ``v1_app.py`` on a fresh data dir with the code of the checkout it
runs in, leaves some of them open, and writes next to this script:

- ``v1_store.tar.gz``: the data dir (``data.mdb`` compacted by LMDB's own copy);
- ``v1_store.json``: what the store holds, as read back by the same code: for every
  workflow id its ``describe`` and ``node.history`` (``history_to_json`` form, plus the
  ``repr`` of each activation time), and the decoded rows of every run in ``histories``.

It was run once, by the code that wrote history format v1 (activation rows as field maps);
re-running it with later code writes a fixture of that code's format instead, which is not
the point of the file: keep the committed one.
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
from roost.storage._keys import unpack_key
from roost.testing import history_to_json, open_test_node
from roost.workflow._history import WorkflowTask, flatten

HERE = Path(__file__).resolve().parent
ARCHIVE = HERE / "v1_store.tar.gz"
EXPECTED = HERE / "v1_store.json"
CLOSED = [
    "order-1",
    "refund-1",
    "failing-1",
    "approval-1",
    "parent-1",
    "child-of-3",
    "looping-1",
    "cancel-1",
    "cron-1",
]
OPEN = ["waiter-1", "sleeper-1", "open-parent", "open-child"]


def load_app() -> Any:
    """The fixture's app module (``v1_app.py``), loaded by path."""
    spec = importlib.util.spec_from_file_location("roost_v1_fixture_app", HERE / "v1_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def as_json(value: Any) -> Any:
    """``value`` in ``history_to_json``'s form (records, PIDs, datetimes, errors)."""
    return json.loads(history_to_json([value], indent=None))[0]


def history_entry(history: list[Any]) -> dict[str, Any]:
    """A history as the fixture keeps it: its JSON form and its activation times' reprs."""
    return {
        "items": json.loads(history_to_json(history, indent=None)),
        "task_at": [repr(item.at) for item in history if isinstance(item, WorkflowTask)],
    }


async def drive(data_dir: str, module: Any) -> dict[str, Any]:
    """Run the fixture's workflows; return what the node reads back."""
    async with open_test_node(module.app, data_dir=data_dir) as node:
        opts = process.with_options
        await opts(id="order-1").exec("v1:order", "o-1", 42)
        await opts(id="refund-1").exec("v1:refunding", -5)
        failing = await opts(id="failing-1").spawn_monitored("v1:failing")
        assert (await process.events().receive()).pid == failing
        approval = await opts(id="approval-1").spawn_monitored("v1:approval")
        await process.send(approval, "approve", "alice")
        assert await process.listen("ack").receive() == "approved"
        assert (await process.events().receive()).pid == approval
        await opts(id="parent-1").exec("v1:parent", 3)
        assert await opts(id="looping-1").exec("v1:looping", 3) == "looped"
        cancel = await opts(id="cancel-1").spawn_monitored("v1:cancellable")
        await node.wait_until_blocked()
        process.cancel(cancel, "user asked")
        assert (await process.events().receive()).pid == cancel
        cron = await opts(id="cron-1", cron_schedule="0 * * * *").spawn_monitored(
            "v1:ticking", "tick"
        )
        await roost.sleep("3h")
        process.terminate(cron)
        assert (await process.events().receive()).pid == cron
        await opts(id="waiter-1").spawn("v1:waiter", "w-1")
        await opts(id="sleeper-1").spawn("v1:sleeper")
        await opts(id="open-parent").spawn("v1:open_parent")
        await node.wait_until_blocked()
        for wf in OPEN:
            assert node.describe(wf)["status"] == "running", wf
        return {
            wf: {"describe": as_json(node.describe(wf)), "history": history_entry(node.history(wf))}
            for wf in CLOSED + OPEN
        }


def read_rows(data_dir: str) -> dict[str, Any]:
    """Every run's history rows, decoded by this checkout's codec, by run id."""
    codec = Codec()
    runs: dict[str, list[Any]] = {}
    env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            db = env.open_db(b"histories", txn=txn, create=False)
            for k, value in txn.cursor(db):
                run_id, index = unpack_key(k, str, int)
                act = codec.decode(value)
                assert act.index == index
                runs.setdefault(str(run_id), []).append(act)
    finally:
        env.close()
    return {run_id: history_entry(flatten(acts)) for run_id, acts in runs.items()}


def archive(data_dir: str) -> bytes:
    """The data dir as a .tar.gz, ``data.mdb`` compacted."""
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
        rows = read_rows(data_dir)
        ARCHIVE.write_bytes(archive(data_dir))
    EXPECTED.write_text(
        json.dumps(
            {"closed": CLOSED, "open": OPEN, "workflows": workflows, "runs": rows},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    print(f"wrote {ARCHIVE.name} ({ARCHIVE.stat().st_size} bytes) and {EXPECTED.name}")


if __name__ == "__main__":
    main()
