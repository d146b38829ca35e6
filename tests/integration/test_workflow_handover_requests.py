"""A cancel, send or terminate from a workflow whose target hands its id over meanwhile.

The request is an inbox row of the target, stored with the issuing step. When the
target's own step in the same group commit (or an earlier one whose effects have not run
yet) continues as new, retries or starts its next cron run, the row must end up in the
new run's inbox, under one key, in that same commit: recovery reads the inbox of open
runs only, and the run that reads the event deletes the row it is stored as.

"Lost dispatch" below stands for a crash right after the commit: nothing of the issuing
step is carried out after it (``_task.after_commit`` leaves its effects undone), then the node
restarts on the same data dir. tests/integration/test_workflow_handover_crash.py does the
same with a real SIGKILL.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

import roost
from roost import channel, process, workflow
from roost.testing import open_test_node
from roost.workflow._local import _task

app = roost.App("handover")
HOST = "handover:workflows"


def pid(workflow_id: str) -> roost.Pid:
    return roost.Pid("local", HOST, workflow_id)


async def receive(kind: str) -> Any:
    """Wait for what ``kind`` sends; a "send" target counts the pings before "done"."""
    if kind == "cancel":
        event = await process.events().receive()
        return f"cancelled: {event.reason}"
    if kind == "terminate":
        await roost.sleep("1h")
        return "slept"
    pings = process.listen("ping")
    got = [await pings.receive()]
    await process.listen("done").receive()  # sent after every ping: count what arrived
    while True:
        more = await channel.select(pings.case_receive(), default=True)
        if more.default:
            return got
        got.append(more.value)


@app.workflow
async def target(kind: str, n: int) -> Any:
    """On "go", continue as new (``n`` times); then wait for what ``kind`` sends."""
    if n:
        await process.listen("go").receive()
        await process.upgrade(None, kind, n - 1)
    return await receive(kind)


@app.workflow
async def retried(kind: str) -> Any:
    """Attempt 1 fails on "go" (its retry policy starts attempt 2), attempt 2 waits."""
    info = workflow.info()
    assert info is not None
    if info.attempt == 1:
        await process.listen("go").receive()
        raise roost.Error("attempt 1 fails", kind=roost.ErrorKind.INTERNAL)
    return await receive(kind)


@app.workflow
async def issuer(kind: str, dest: str) -> str:
    await process.listen("go").receive()
    if kind == "cancel":
        process.cancel(pid(dest), "from a workflow")
    elif kind == "terminate":
        process.terminate(pid(dest))
    else:
        process.send(pid(dest), "ping", "hello")
    return "sent"


def inbox_rows(node: Any) -> list[Any]:
    with node._node.store.read() as txn:
        return list(txn.range("inbox"))


def lose_dispatch_of(monkeypatch: pytest.MonkeyPatch, lost: roost.Pid) -> None:
    """Nothing of ``lost``'s steps is carried out after their commit."""

    def lost_after_its_commit(step: _task.Step) -> bool:
        return step.run.pid != lost

    monkeypatch.setattr(_task, "after_commit", lost_after_its_commit)


async def go(node: Any, first: roost.Pid, second: roost.Pid, *, same_pass: bool) -> None:
    """Send "go" to both; in the same pass, both steps commit in one group transaction."""
    process.send(first, "go", 1)
    if not same_pass:
        await node.wait_until_blocked()
    process.send(second, "go", 1)
    await node.wait_until_blocked()


async def check_outcome(node: Any, kind: str) -> None:
    """The continued run got the request exactly once, and no inbox row is left."""
    info = node.describe("target")
    if kind == "cancel":
        assert (info["status"], info["result"]) == ("canceled", "cancelled: from a workflow")
    elif kind == "terminate":
        assert info["status"] == "terminated"
        assert info["error"].kind is roost.ErrorKind.CANCELED
    else:
        assert info["status"] == "running"
        process.send(pid("target"), "done", 1)
        await node.wait_until_blocked()
        info = node.describe("target")
        assert (info["status"], info["result"]) == ("completed", ["hello"])  # once
    assert inbox_rows(node) == []


KINDS = ["cancel", "send", "terminate"]
ORDERS = ["issuer-first", "target-first"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_committed_with_the_targets_hand_over_survives_a_crash(
    kind: str, order: str, autojump_clock: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_test_node(app, data_dir=tmp_path) as node:
        tgt = await process.with_options(id="target").spawn(target, kind, 1)
        iss = await process.with_options(id="issuer").spawn(issuer, kind, "target")
        await node.wait_until_blocked()
        run0 = node.describe("target")["run_id"]
        lose_dispatch_of(monkeypatch, iss)
        first, second = (iss, tgt) if order == "issuer-first" else (tgt, iss)
        await go(node, first, second, same_pass=True)
        assert node.describe("issuer")["status"] == "completed"  # its step is committed
        assert node.describe("target")["run_id"] != run0  # continued in the same commit
        assert node.describe("target")["status"] == "running"  # nothing applied in memory
        monkeypatch.undo()
        await node.restart()
        await node.wait_until_blocked()
        await check_outcome(node, kind)


@pytest.mark.parametrize("order", [*ORDERS, "target-a-pass-earlier"])
@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_racing_a_hand_over_is_delivered_once_and_leaves_no_row(
    kind: str, order: str, autojump_clock: Any, tmp_path: Any
) -> None:
    # Live, then after a restart: a row consumed by the new run is gone, so nothing is
    # delivered again; a terminate's close deletes its request row.
    async with open_test_node(app, data_dir=tmp_path) as node:
        tgt = await process.with_options(id="target").spawn(target, kind, 1)
        iss = await process.with_options(id="issuer").spawn(issuer, kind, "target")
        await node.wait_until_blocked()
        first, second = (iss, tgt) if order == "issuer-first" else (tgt, iss)
        await go(node, first, second, same_pass=order != "target-a-pass-earlier")
        if kind != "send":
            await check_outcome(node, kind)
            await node.restart()
            await node.wait_until_blocked()
        await check_outcome(node, kind)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_request_committed_with_a_retry_reaches_the_next_attempt(
    kind: str, autojump_clock: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_test_node(app, data_dir=tmp_path) as node:
        policy = {"initial_interval": "1s", "maximum_attempts": 2}
        tgt = await process.with_options(id="target", retry_policy=policy).spawn(retried, kind)
        iss = await process.with_options(id="issuer").spawn(issuer, kind, "target")
        await node.wait_until_blocked()
        lose_dispatch_of(monkeypatch, iss)
        await go(node, iss, tgt, same_pass=True)
        assert node.describe("target")["attempt"] == 2
        monkeypatch.undo()
        await node.restart()
        await trio.sleep(2)  # the mock clock: attempt 2 begins after its retry interval
        await node.wait_until_blocked()
        await check_outcome(node, kind)


@app.workflow
async def finishes(n: int) -> str:
    await process.listen("go").receive()
    return "done"


async def test_a_terminate_of_a_run_closing_in_the_same_commit_stores_no_row(
    autojump_clock: Any, tmp_path: Any
) -> None:
    # The target's own last step is written first in the group: the request, written
    # after it, is for a closed run, which nobody reads again.
    async with open_test_node(app, data_dir=tmp_path) as node:
        tgt = await process.with_options(id="target").spawn(finishes, 0)
        iss = await process.with_options(id="issuer").spawn(issuer, "terminate", "target")
        await node.wait_until_blocked()
        await go(node, tgt, iss, same_pass=True)
        assert node.describe("target")["status"] == "completed"
        assert node.describe("issuer")["status"] == "completed"
        assert inbox_rows(node) == []
