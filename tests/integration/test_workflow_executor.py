"""The batched executors: every ready run's activation of a pass commits in one transaction.

A step whose writes the store refuses fails only its own workflow task; the other steps of
its pass commit and go on (see docs/design-notes.md, "Where a run lives").
"""

import trio

import roost
from roost import process
from roost.storage import _lmdb_txn
from roost.workflow._records import history_key

app = roost.App("executor")
RUNS = 20


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
