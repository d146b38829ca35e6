"""A data dir with a row per scheduled activity opens, reads back and finishes exactly once.

``tests/data/tasks_store.tar.gz`` was written by the code that stored every scheduled
activity in ``tasks`` (``tests/data/make_tasks_store.py`` with ``tests/data/tasks_app.py``)
and stopped with an activity in flight (``mid-1``), one between retry attempts with two
failures behind it (``retry-1``) and two pending beside a cancelled one (``parallel-1``);
``tasks_store.json`` holds what that code described. Today's code reads the pending
activities from the histories, a retry's attempt and errors from its row: it must describe
the same, run each pending activity once more (the retried one at its third attempt, the
cancelled one never) and leave nothing behind.
"""

import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

from roost.storage import Codec, open_lmdb_store
from roost.testing import history_to_json, open_test_node
from roost.workflow._history import ActivityResolved
from roost.workflow._local._inspect import describe, list_workflows

DATA = Path(__file__).resolve().parents[1] / "data"
EXPECTED = json.loads((DATA / "tasks_store.json").read_text())


def _load_app():
    spec = importlib.util.spec_from_file_location("roost_tasks_fixture_app", DATA / "tasks_app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fixture_app = _load_app()


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    with tarfile.open(DATA / "tasks_store.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    tmp_path.chmod(0o700)
    fixture_app.CALLS.clear()
    fixture_app.RELEASED["now"] = False
    return tmp_path


def as_json(value):
    return json.loads(history_to_json([value], indent=None))[0]


def test_the_pending_activities_read_as_the_code_that_wrote_the_rows_described_them(
    tasks_dir: Path,
):
    store = open_lmdb_store(str(tasks_dir), readonly=True, lock=False)
    try:
        codec = Codec()
        listed = {row["workflow_id"]: row for row in list_workflows(store, codec)}
        for wf, expected in EXPECTED["workflows"].items():
            described = describe(store, codec, wf)
            assert as_json(described) == expected, wf
            assert as_json(listed[wf]) == expected, wf
    finally:
        store.close()
    retry = EXPECTED["workflows"]["retry-1"]["pending_activities"]
    assert [(p["attempt"], p["last_error"]["message"]) for p in retry] == [
        (3, "ConnectionError: retry: provider down")
    ]
    assert [p["seq"] for p in EXPECTED["workflows"]["parallel-1"]["pending_activities"]] == [2, 3]


async def test_the_open_workflows_finish_running_each_pending_activity_once(tasks_dir: Path):
    fixture_app.RELEASED["now"] = True
    async with open_test_node(fixture_app.app, data_dir=tasks_dir) as node:
        await node.wait_until_blocked()
        results = {wf: node.describe(wf) for wf in EXPECTED["open"]}
        assert {wf: d["status"] for wf, d in results.items()} == dict.fromkeys(
            EXPECTED["open"], "completed"
        )
        assert results["mid-1"]["result"] == "mid done"
        assert results["retry-1"]["result"] == "retry done at attempt 3"  # its row's attempt
        assert results["parallel-1"]["result"] == [11, "p-a done", "p-b done"]
        # Once each: nothing already recorded (quick), nothing cancelled (p-c).
        assert sorted(fixture_app.CALLS) == ["mid", "p-a", "p-b", "retry 3"]
        for wf in EXPECTED["open"]:
            seqs = [e.seq for e in node.history(wf) if isinstance(e, ActivityResolved)]
            assert len(seqs) == len(set(seqs)), (wf, seqs)
            assert node.describe(wf)["pending_activities"] == []
        with node._node.store.read() as txn:
            assert list(txn.range("tasks")) == []  # the old rows went with their results
        fixture_app.CALLS.clear()
        await node.restart()
        await node.wait_until_blocked()
        assert fixture_app.CALLS == []
        assert node.describe("done-1")["result"] == 2
