"""A data dir written by history format v1 opens, reads back, resumes and replays.

The store in ``tests/data/v1_store.tar.gz`` was written by the code before history format
v2 (``tests/data/make_v1_store.py``, with the workflows of ``tests/data/v1_app.py``), and
``v1_store.json`` holds what that code read back from it. Today's code must read every
history exactly so, resume the runs left open, write their new activations in v2 and replay
the mixed histories, in the runtime and in the Replayer.
"""

import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import lmdb
import pytest
from click.testing import CliRunner

import roost
from roost.cli import main
from roost.storage import Codec, key, open_lmdb_store, unpack_key
from roost.testing import Replayer, history_to_json, open_test_node, save_history
from roost.workflow._history import Complete, Fail, WorkflowTask
from roost.workflow._history_format import FORMAT, read_activation

DATA = Path(__file__).resolve().parents[1] / "data"
EXPECTED = json.loads((DATA / "v1_store.json").read_text())
V1_HEAD = b"\xd9\x98\x5b"  # the codec's record tag (39003): every v1 row starts with it
V2_HEAD = bytes([0x85, FORMAT])  # an array of 5 whose first item is the format version


APP_MODULE = "roost_v1_fixture_app"


def _load_app():
    spec = importlib.util.spec_from_file_location(APP_MODULE, DATA / "v1_app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.app


app = _load_app()


@pytest.fixture
def v1_dir(tmp_path: Path) -> Path:
    with tarfile.open(DATA / "v1_store.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (tmp_path).chmod(0o700)
    return tmp_path


def as_json(value):
    return json.loads(history_to_json([value], indent=None))[0]


def history_json(history) -> dict:
    """A history as the fixture keeps it; the markers' sizes (not kept by v1) apart."""
    items = json.loads(history_to_json(history, indent=None))
    for item in items:
        if item["type"] == "WorkflowTask":
            assert isinstance(item.pop("size"), int)
    at = [repr(item.at) for item in history if isinstance(item, WorkflowTask)]
    return {"items": items, "task_at": at}


def stored_rows(data_dir: Path) -> dict[str, list[bytes]]:
    """Every run's raw history rows, by run id."""
    store = open_lmdb_store(str(data_dir), readonly=True, lock=False)
    try:
        with store.read() as txn:
            rows: dict[str, list[bytes]] = {}
            for k, v in txn.range("histories"):
                run_id, _ = unpack_key(k, str, int)
                rows.setdefault(run_id, []).append(bytes(v))
    finally:
        store.close()
    return rows


def test_every_v1_row_decodes_as_v1_code_read_it(v1_dir: Path):
    codec, rows = Codec(), stored_rows(v1_dir)
    assert set(rows) == set(EXPECTED["runs"])
    for run_id, run_rows in rows.items():
        assert all(row.startswith(V1_HEAD) for row in run_rows)
        history = []
        for row in run_rows:
            index, at, events, commands = read_activation(codec, row)
            history += [WorkflowTask(index=index, at=at, size=len(row)), *events, *commands]
        assert history_json(history) == EXPECTED["runs"][run_id], run_id


async def test_a_v1_store_opens_and_reads_back_as_recorded(v1_dir: Path):
    async with open_test_node(app, data_dir=v1_dir) as node:
        for wf, expected in EXPECTED["workflows"].items():
            history = node.history(wf)
            assert history_json(history) == expected["history"], wf
            described = as_json(node.describe(wf))
            for field in ("status", "result", "error", "workflow_type", "run_id"):
                assert described.get(field) == expected["describe"].get(field), (wf, field)
            if not history:  # the cron run terminated before its first step
                assert expected["describe"]["status"] == "terminated"
                continue
            # The Replayer replays the v1 history to its recorded outcome.
            if isinstance(history[-1], Complete):
                outcome = Replayer(app).replay(history)
                assert as_json(outcome) == expected["describe"]["result"], wf
            elif isinstance(history[-1], Fail):
                with pytest.raises(roost.Error) as info:
                    Replayer(app).replay(history)
                assert info.value.message == expected["describe"]["error"]["message"]
            else:
                assert Replayer(app).replay(history) is None, wf


async def test_open_v1_runs_resume_write_v2_and_replay_mixed(v1_dir: Path):
    results = {}
    # A cache of one: every activation rebuilds its run by replaying the mixed history.
    async with open_test_node(app, data_dir=v1_dir, workflow_cache=1) as node:
        for wf in EXPECTED["open"]:
            assert node.describe(wf)["status"] == "running"
        node.fail_activity("v1:ship", times=2)  # the waiter stays open over retries
        await node.signal(roost.Pid("local", "v1:workflows", "waiter-1"), "go", "now")
        await node.wait_until_blocked()
        await node.restart()  # and is rebuilt from v1 and v2 rows after a restart
        await node.signal(roost.Pid("local", "v1:workflows", "open-child"), "finish", "bye")
        await roost.sleep("3651d")
        await node.wait_until_blocked()
        for wf in EXPECTED["open"]:
            described = node.describe(wf)
            assert described["status"] == "completed", (wf, described)
            results[wf] = described["result"]
            history = node.history(wf)
            # The v1 part of the history reads back as it did; the rest follows it.
            before = EXPECTED["workflows"][wf]["history"]
            now = history_json(history)
            assert now["items"][: len(before["items"])] == before["items"]
            assert now["task_at"][: len(before["task_at"])] == before["task_at"]
            assert Replayer(app).replay(history) == results[wf]
    assert results == {
        "waiter-1": {"first": 7, "go": "now", "second": "shipped w-1"},
        "sleeper-1": "woke",
        "open-child": "bye",
        "open-parent": {"child said": "bye"},
    }
    rows = stored_rows(v1_dir)
    for wf in EXPECTED["open"]:
        run_id = EXPECTED["workflows"][wf]["describe"]["run_id"]
        old = len(EXPECTED["runs"][run_id]["task_at"])
        assert all(row.startswith(V1_HEAD) for row in rows[run_id][:old]), wf
        assert rows[run_id][old:], wf
        assert all(row.startswith(V2_HEAD) for row in rows[run_id][old:]), wf


def test_the_fixture_is_a_v1_store_of_closed_and_open_runs():
    statuses = {wf: w["describe"]["status"] for wf, w in EXPECTED["workflows"].items()}
    assert {statuses[wf] for wf in EXPECTED["open"]} == {"running"}
    assert {"completed", "failed", "canceled", "terminated"} <= set(statuses.values())
    kinds = {item["type"] for run in EXPECTED["runs"].values() for item in run["items"]}
    assert {
        "Started",
        "ActivityResolved",
        "TimerFired",
        "MessageArrived",
        "CancelRequested",
        "ProcessExited",
        "ScheduleActivity",
        "StartTimer",
        "SendMessage",
        "SpawnProcess",
        "StartChild",
        "VersionMarker",
        "UpsertAttributes",
        "ContinueAsNew",
        "Complete",
        "Fail",
    } <= kinds


async def test_roost_replay_replays_histories_read_from_a_v1_store(v1_dir: Path, tmp_path: Path):
    files = []
    async with open_test_node(app, data_dir=v1_dir) as node:
        for wf in EXPECTED["closed"]:
            history = node.history(wf)
            if history:
                files += ["--history", str(save_history(history, tmp_path / f"{wf}.cbor"))]
    result = CliRunner().invoke(
        main, ["replay", *files, "--app", f"{APP_MODULE}:app"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(files) // 2
    assert "ok " in lines[0]
    assert any("replays to its recorded error" in line for line in lines)  # failing-1
    assert any("order-1.cbor: replays to {'receipt': {'charged': 42" in line for line in lines)


@pytest.mark.parametrize(
    "row",
    [
        [FORMAT, 2, 0, [[99, 1]], []],  # a kind no version wrote
        [FORMAT, 2, 0, [[2]], []],  # an ActivityResolved without its seq (no default)
        [FORMAT, 2, 0, [[2, 1, None, None, 0]], []],  # a field more than its kind has
        [FORMAT, 2, "noon", [], []],
    ],
)
async def test_a_malformed_v2_row_quarantines_its_workflow(v1_dir: Path, row):
    """A v2 row of the wrong shape is unreadable like any other row: the run is set aside."""
    run_id = EXPECTED["workflows"]["waiter-1"]["describe"]["run_id"]
    env = lmdb.open(str(v1_dir), max_dbs=128)
    try:
        with env.begin(write=True) as txn:
            db = env.open_db(b"histories", txn=txn)
            assert txn.get(key(run_id, 2), db=db) is not None
            txn.put(key(run_id, 2), Codec().encode(row, envelope=True), db=db)
    finally:
        env.close()
    async with open_test_node(app, data_dir=v1_dir) as node:
        await node.signal(roost.Pid("local", "v1:workflows", "waiter-1"), "go", "now")
        await node.wait_until_blocked()
        described = node.describe("waiter-1")
        assert described["status"] == "quarantined"
        assert "cannot decode stored activation" in described["error"].message
        assert described["quarantine"]["rows"][0]["table"] == "histories"
        assert node.describe("sleeper-1")["status"] == "running"  # the others go on
