"""A scheduled activity is stored only in its history; a failed attempt stores its retry state.

Through the public API: ``describe`` shows the same pending activities either way, a
restart runs each again, and a retry's attempt count and last error survive it.
"""

import trio

import roost
from roost import funcs, process
from roost.testing import open_test_node

app = roost.App("pend")
attempts: list[int] = []
gate: dict[str, trio.Event] = {}


@app.activity
async def held(tag):
    attempts.append(roost.activity_info().attempt)
    await gate[tag].wait()
    return f"{tag} done"


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="1h", maximum_attempts=5))
async def shaky():
    attempts.append(roost.activity_info().attempt)
    return "fine"


@app.workflow
async def two_held():
    a = funcs.start(held, "a")
    b = funcs.start(held, "b")
    return [await a, await b]


@app.workflow
async def retried():
    return await funcs.call(shaky)


def task_rows(node):
    with node._node.store.read() as txn:
        return [bytes(k) for k, _ in txn.range("tasks")]


async def test_scheduled_activities_have_no_row_and_run_again_after_a_restart():
    attempts.clear()
    gate.clear()
    async with open_test_node(app) as node:
        gate["a"], gate["b"] = trio.Event(), trio.Event()
        await process.with_options(id="w").spawn(two_held)
        await node.wait_until_blocked()
        pending = node.describe("w")["pending_activities"]
        assert [(p["seq"], p["entry"], p["attempt"]) for p in pending] == [
            (1, "pend:held", 1),
            (2, "pend:held", 1),
        ]
        assert pending[0]["scheduled_at"] == node.describe("w")["started_at"]
        assert task_rows(node) == []  # the history's commands are their record
        gate["a"].set()
        await node.wait_until_blocked()
        assert [p["seq"] for p in node.describe("w")["pending_activities"]] == [2]
        gate["a"], gate["b"] = trio.Event(), trio.Event()
        await node.restart()
        await node.wait_until_blocked()
        assert attempts == [1, 1, 1]  # only b, which had no result recorded, runs again
        assert [p["seq"] for p in node.list_workflows()[0]["pending_activities"]] == [2]
        gate["b"].set()
        await node.wait_until_blocked()
        assert node.describe("w")["result"] == ["a done", "b done"]
        assert node.describe("w")["pending_activities"] == []


async def test_a_failed_attempt_stores_its_retry_state_which_survives_a_restart():
    attempts.clear()
    async with open_test_node(app) as node:
        node.fail_activity(shaky, times=1)
        await process.with_options(id="r").spawn(retried)
        await node.wait_until_blocked()  # attempt 1 failed; attempt 2 is due in 1 h
        assert len(task_rows(node)) == 1  # written by the failure, not by the schedule
        (pending,) = node.describe("r")["pending_activities"]
        assert pending["attempt"] == 2
        assert "injected failure" in pending["last_error"].message
        assert pending["next_attempt_at"] is not None
        await node.restart()
        await node.wait_until_blocked()
        (after,) = node.describe("r")["pending_activities"]
        assert after == pending
        await roost.sleep("2h")
        assert node.describe("r")["result"] == "fine"
        assert attempts == [2]  # the injected failure never reached the activity
        assert task_rows(node) == []  # its row went with the result's commit
