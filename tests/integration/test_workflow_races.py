"""Races between the steps of one executor pass, and between a close and a continue-as-new."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import roost
from roost import process
from roost.testing import open_test_node
from roost.workflow._local import _task

app = roost.App("races")


@app.workflow
async def child(who: str) -> str:
    await roost.sleep("1h")
    return who


@app.workflow
async def parent(who: str) -> tuple[Any, ...]:
    await process.listen("go").receive()
    await process.with_options(id="shared").spawn("races:child", who)
    event = await process.events().receive()  # a refused start: an EXIT with the error
    return (event.value, event.error and event.error.kind.value)


async def _exits(n: int) -> dict[str, tuple[Any, Any]]:
    exits: dict[str, tuple[Any, Any]] = {}
    with trio.move_on_after(7200):
        while len(exits) < n:
            e = await process.events().receive()
            exits[e.pid.id] = (e.value, e.error and e.error.kind.value)
    return exits


async def test_two_parents_in_one_pass_start_a_child_with_the_same_id(autojump_clock: Any) -> None:
    # Both parents' steps are prepared in the same executor pass: one child starts, the
    # other parent is refused (an EXIT with AlreadyExists), and the child's EXIT reaches
    # its own parent.
    async with open_test_node(app) as node:
        a = await process.with_options(id="pa").spawn_monitored(parent, "a")
        b = await process.with_options(id="pb").spawn_monitored(parent, "b")
        await node.wait_until_blocked()
        process.send(a, "go", 1)
        process.send(b, "go", 1)
        exits = await _exits(2)
        assert set(exits) == {"pa", "pb"}
        winner = "pa" if exits["pa"][0] != [None, "AlreadyExists"] else "pb"
        loser = {"pa": "pb", "pb": "pa"}[winner]
        assert exits[winner] == ([winner[1], None], None)  # its child's result
        assert exits[loser] == ([None, "AlreadyExists"], None)
        info = node.describe("shared")
        assert info["status"] == "completed"
        assert info["parent"] == (a if winner == "pa" else b)


@app.workflow
async def starts_child_at_once() -> Any:
    await process.with_options(id="shared").spawn("races:child", "inner")
    event = await process.events().receive()
    return (event.value, event.error and event.error.kind.value)


async def test_a_start_waits_for_a_child_its_step_has_not_committed(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The parent's first activation (run by its starter) starts child "shared"; a start of
    # "shared" from outside while that step commits must see the child, not a free id.
    async with open_test_node(app) as node:
        manager = node._node.local_workflows
        gate, commit = trio.Event(), node._node.transact

        async def held_commit(fn: Any) -> Any:  # the parent's step waits here, uncommitted
            if manager.runs.child_staged("shared"):
                await gate.wait()
            return await commit(fn)

        monkeypatch.setattr(node._node, "transact", held_commit)
        outcome: list[Any] = []

        async def start_outer() -> None:
            try:
                opts = process.with_options(id="shared", id_conflict_policy="fail")
                outcome.append(await opts.spawn(child, "outer"))
            except roost.Error as exc:
                outcome.append(exc.kind)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(process.with_options(id="p").spawn_monitored, starts_child_at_once)
            await trio.testing.wait_all_tasks_blocked()
            assert manager.runs.child_staged("shared")  # its step is not committed yet
            nursery.start_soon(start_outer)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # waits for the parent's step
            gate.set()
        assert outcome == [roost.ErrorKind.ALREADY_EXISTS]
        assert not manager.runs.child_staged("shared")
        [exit_event] = (await _exits(1)).values()
        assert exit_event == (["inner", None], None)  # the parent's own child ran
        assert node.describe("shared")["parent"].id == "p"


@app.workflow
async def hop(n: int) -> str:
    if n:
        async for _ in process.listen("go"):
            break
        await process.upgrade(None, n - 1)
    await roost.sleep("1h")
    return "slept"


def _timer_rows(node: Any) -> list[Any]:
    with node._node.store.read() as txn:
        return list(txn.range("timers"))


@pytest.mark.parametrize("checkpoints", range(10))
async def test_a_terminate_racing_a_continue_as_new_closes_the_new_run(
    checkpoints: int, autojump_clock: Any, tmp_path: Any
) -> None:
    # The terminate lands at a different point of the continue-as-new each time: before
    # its commit, during it, or while an executor runs the new run's first activation. The
    # close waits for that activation, so its timer row goes with the close.
    async with open_test_node(app, data_dir=tmp_path) as node:
        pid = await process.with_options(id=f"w{checkpoints}").spawn_monitored(hop, 1)
        await node.wait_until_blocked()
        process.send(pid, "go", 1)
        for _ in range(checkpoints):
            await trio.lowlevel.checkpoint()
        process.terminate(pid)
        await node.wait_until_blocked()
        exits = []
        with trio.move_on_after(5):
            while True:
                exits.append(await process.events().receive())
        assert [(e.value, e.error and e.error.kind) for e in exits] == [
            (None, roost.ErrorKind.CANCELED)
        ]
        assert node.describe(pid.id)["status"] == "terminated"
        assert _timer_rows(node) == []
        await node.restart()
        await node.wait_until_blocked()
        assert node.describe(pid.id)["status"] == "terminated"


@app.workflow
async def waits_for_cancel() -> str:
    event = await process.events().receive()
    return f"cancelled: {event.reason}"


@app.workflow
async def cancels(target: str) -> str:
    await process.listen("go").receive()
    process.cancel(roost.Pid("local", "races:workflows", target), "from a workflow")
    return "sent"


async def test_a_cancel_from_a_workflow_is_stored_with_its_step(
    autojump_clock: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing of the canceller's step is carried out after its commit (as if the node died
    # right then): the cancel request is in the target's inbox already, and after a
    # restart the target gets it.
    async with open_test_node(app, data_dir=tmp_path) as node:
        target = await process.with_options(id="target").spawn(waits_for_cancel)
        canceller = await process.with_options(id="canceller").spawn(cancels, "target")
        await node.wait_until_blocked()

        def lost_for_the_canceller(step: _task.Step) -> bool:
            return step.run.pid != canceller

        monkeypatch.setattr(_task, "after_commit", lost_for_the_canceller)
        process.send(canceller, "go", 1)
        await node.wait_until_blocked()
        assert node.describe("target")["status"] == "running"  # nothing delivered in memory
        monkeypatch.setattr(_task, "after_commit", None)
        await node.restart()
        await node.wait_until_blocked()
        assert node.describe("target")["status"] == "canceled"
        assert node.describe("target")["result"] == "cancelled: from a workflow"
        assert target.id == "target"


@app.workflow
async def terminates(target: str | None) -> str:
    await process.listen("go").receive()
    if target is None:  # a child started in this same step
        pid = await process.with_options(id="kid", parent_close_policy="abandon").spawn(
            "races:child", "kid"
        )
    else:
        pid = roost.Pid("local", "races:workflows", target)
    process.terminate(pid)
    return "sent"


@pytest.mark.parametrize("target", ["target", None], ids=["open-workflow", "same-step-child"])
async def test_a_terminate_from_a_workflow_is_stored_with_its_step(
    target: str | None, autojump_clock: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As for a cancel: nothing of the terminator's step is carried out after its commit
    # (as if the node died right then); after a restart the target is terminated.
    async with open_test_node(app, data_dir=tmp_path) as node:
        if target is not None:
            await process.with_options(id=target).spawn(child, "target")
        terminator = await process.with_options(id="terminator").spawn(terminates, target)
        await node.wait_until_blocked()

        def lost_for_the_terminator(step: _task.Step) -> bool:
            return step.run.pid != terminator

        monkeypatch.setattr(_task, "after_commit", lost_for_the_terminator)
        process.send(terminator, "go", 1)
        await node.wait_until_blocked()
        stopped = target or "kid"
        assert node.describe(stopped)["status"] == "running"  # stored, not yet applied
        monkeypatch.setattr(_task, "after_commit", None)
        await node.restart()
        await node.wait_until_blocked()
        info = node.describe(stopped)
        assert info["status"] == "terminated"
        assert info["error"].kind is roost.ErrorKind.CANCELED
        with node._node.store.read() as txn:
            assert list(txn.range("inbox")) == []  # the request went with the close
        assert node.describe("terminator")["status"] == "completed"


async def test_a_terminate_from_a_workflow_leaves_no_request_row(autojump_clock: Any) -> None:
    async with open_test_node(app) as node:
        await process.with_options(id="target").spawn(child, "target")
        terminator = await process.with_options(id="terminator").spawn(terminates, "target")
        await node.wait_until_blocked()
        process.send(terminator, "go", 1)
        await node.wait_until_blocked()
        assert node.describe("target")["status"] == "terminated"
        with node._node.store.read() as txn:
            assert list(txn.range("inbox")) == []
