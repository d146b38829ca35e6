"""The batched executors: every ready run's activation of a pass commits in one transaction.

A step whose writes the store refuses fails only its own workflow task; the other steps of
its pass commit and go on (see docs/design-notes.md, "Where a run lives").
"""

import attrs
import trio

import roost
from roost import funcs, process
from roost.storage import Codec, _lmdb_txn, open_lmdb_store
from roost.workflow._history import WorkflowTask
from roost.workflow._local._records import PROGRESS_TABLE, history_key, with_progress

app = roost.App("executor")
RUNS = 20
CODEC = Codec()


@app.workflow
async def waits_for_go(i):
    """Blocks on one message, then closes."""
    await process.listen("go").receive()
    return i


def _store(node):
    return node._node.store


def refuse_step(monkeypatch, run_id, index):
    """Make every write of activation ``index`` of ``run_id`` raise, as a bad key would."""
    refused = history_key(run_id, index)
    real = _lmdb_txn.LmdbWriteTxn.put

    def put(self, table, key, value):
        if table == "histories" and key == refused:
            raise ValueError(f"refused: the key of activation {index}")
        real(self, table, key, value)

    monkeypatch.setattr(_lmdb_txn.LmdbWriteTxn, "put", put)


def _steps(node, workflow_id):
    """How many activations of the workflow's run are stored."""
    return sum(1 for item in node.history(workflow_id) if type(item).__name__ == "WorkflowTask")


async def _all_waiting(node, ids):
    await trio.testing.wait_all_tasks_blocked()
    assert all(_steps(node, i) == 1 for i in ids)  # each started (eagerly) and waits


async def test_a_pass_of_ready_runs_commits_in_one_transaction(autojump_clock):
    async with roost.open_node(app) as node:
        ids = [f"w{i}" for i in range(RUNS)]
        pids = [
            await process.with_options(id=i).spawn_monitored(waits_for_go, n)
            for n, i in enumerate(ids)
        ]
        await _all_waiting(node, ids)
        stats = _store(node).stats
        before = stats.requests
        for pid in pids:
            process.send(pid, "go", "ok")
        exits = [await process.events().receive() for _ in ids]
        assert sorted(e.value for e in exits) == list(range(RUNS))
        # One transaction for the 20 messages, one for the 20 closing activations.
        assert stats.requests - before == 2


async def test_a_step_the_store_refuses_fails_only_its_own_task(autojump_clock, monkeypatch):
    async with roost.open_node(app) as node:
        ids = [f"w{i}" for i in range(RUNS)]
        pids = [
            await process.with_options(id=i).spawn_monitored(waits_for_go, n)
            for n, i in enumerate(ids)
        ]
        await _all_waiting(node, ids)
        refuse_step(monkeypatch, node.describe("w7")["run_id"], 2)
        for pid in pids:
            process.send(pid, "go", "ok")
        exits = [await process.events().receive() for _ in range(RUNS - 1)]
        assert sorted(e.value for e in exits) == [n for n in range(RUNS) if n != 7]
        failure = node.describe("w7")["task_failure"]
        assert failure is not None and failure.details["stage"] == "commit"
        assert "refused: the key of activation 2" in failure.message
        assert node.describe("w7")["status"] == "running"
        for n in range(RUNS):
            if n != 7:  # each committed once: the start step and the closing one
                assert _steps(node, f"w{n}") == 2
        assert _steps(node, "w7") == 1  # nothing of the refused step


# -- the run record and its progress row ----------------------------------------------------


@app.activity
async def plus_one(x):
    return x + 1


@app.workflow
async def steps_then_waits(x):
    for _ in range(3):
        x = await funcs.call(plus_one, x)
    await process.listen("go").receive()
    return x


def _rows(data_dir, workflow_id):
    store = open_lmdb_store(str(data_dir))
    try:
        with store.read() as txn:
            record = CODEC.decode(txn.get("runs", workflow_id.encode()))
            raw = txn.get(PROGRESS_TABLE, workflow_id.encode())
    finally:
        store.close()
    return record, None if raw is None else CODEC.decode(raw)


def _as_written_without_progress_rows(data_dir, workflow_id, described):
    """Rewrite the run's rows the way a store without progress rows holds them: every
    step's counters in the run record."""
    store = open_lmdb_store(str(data_dir))
    try:
        record, progress = _rows_in(store, workflow_id)
        record = with_progress(record, progress)
        record = attrs.evolve(
            record,
            activations=described["activations"],
            history_length=described["history_length"],
            history_size=described["history_size"],
        )

        def write(txn):
            txn.put("runs", workflow_id.encode(), CODEC.encode(record))
            txn.delete(PROGRESS_TABLE, workflow_id.encode())

        store.transact_sync(write)
    finally:
        store.close()


def _rows_in(store, workflow_id):
    with store.read() as txn:
        record = CODEC.decode(txn.get("runs", workflow_id.encode()))
        raw = txn.get(PROGRESS_TABLE, workflow_id.encode())
        return record, None if raw is None else CODEC.decode(raw)


async def test_a_step_that_changes_only_counters_writes_no_run_row(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path) as node:
        await process.with_options(id="p").spawn(steps_then_waits, 0)
        await trio.testing.wait_all_tasks_blocked()
        described = node.describe("p")
        history = node.history("p")
        pid = roost.Pid(node.name, "executor:workflows", "p")
        await process.send(pid, "unheard", 1)  # unread by the workflow: its count changes
        await trio.testing.wait_all_tasks_blocked()
        unread = node.describe("p")
    record, progress = _rows(tmp_path, "p")
    assert record.activations == 1  # stored with the first step, not rewritten after
    # The counters of the three steps after it are read from the history's rows.
    markers = [x for x in history if isinstance(x, WorkflowTask)]
    assert len(markers) == 4  # the start step and one per activity result
    assert described["history_length"] == len(history) - len(markers) > record.history_length
    assert described["history_size"] == sum(m.size for m in markers)
    # The step that changed the unread count wrote it, in the progress row.
    assert progress is not None
    assert (progress.activations, progress.unread) == (5, 1)
    assert unread["unread_messages"] == 1
    assert unread["history_length"] > described["history_length"]
    async with roost.open_node(app, tmp_path) as node:  # recovery counts them the same
        again = node.describe("p")
        assert (again["history_length"], again["history_size"]) == (
            unread["history_length"],
            unread["history_size"],
        )
        assert node._node.local_workflows.runs.get("p").next_index == 6
        pid = roost.Pid(node.name, "executor:workflows", "p")
        process.monitor(pid)
        await process.send(pid, "go", 1)
        assert (await process.events().receive()).value == 3
    record, progress = _rows(tmp_path, "p")
    assert progress is None and record.activations == 6  # its close deleted the row


async def test_a_store_without_progress_rows_resumes_and_closes_with_its_counters(
    autojump_clock, tmp_path
):
    async with roost.open_node(app, tmp_path) as node:
        await process.with_options(id="old").spawn(steps_then_waits, 0)
        await trio.testing.wait_all_tasks_blocked()
        before = node.describe("old")
        activations = sum(isinstance(x, WorkflowTask) for x in node.history("old"))
    _as_written_without_progress_rows(tmp_path, "old", {**before, "activations": activations})
    assert _rows(tmp_path, "old")[1] is None
    async with roost.open_node(app, tmp_path) as node:
        assert node.describe("old")["history_length"] == before["history_length"]
        pid = roost.Pid(node.name, "executor:workflows", "old")
        process.monitor(pid)
        await process.send(pid, "go", 1)
        exit_event = await process.events().receive()
        assert exit_event.value == 3
        closed = node.describe("old")
        assert closed["status"] == "completed"
        assert closed["history_length"] > before["history_length"]
    record, progress = _rows(tmp_path, "old")
    assert progress is None and record.activations == 5  # the closing record has it all
