"""What a node does with what ``roost`` stored while no node ran.

A stored start of an entry that is no workflow of the app (an activity, a process) is left
stored and logged at open, never run, and the node opens; messages stored for a workflow
count as unread in ``describe`` until a node delivers them, and once it has they are
counted once.
"""

import logging

import pytest
from test_cli_ops import cli_json, roost_cli, until

import roost
from roost import process

pytestmark = pytest.mark.slow

app = roost.App("deafs")


@app.workflow
async def deaf():
    """Never reads what it is sent."""
    await roost.sleep("30d")


async def test_a_stored_start_of_a_non_workflow_entry_is_never_run(
    tmp_path, autojump_clock, caplog, monkeypatch
):
    import cli_ops_app  # noqa: PLC0415 - the app module lives beside the tests

    data, log = tmp_path / "data", tmp_path / "activities.log"
    for entry, workflow_id in (("ops:shout", "a1"), ("ops:tick", "p1"), ("ops:greet", "g1")):
        stored = roost_cli(data, "workflow", "start", entry, '["x"]', "--id", workflow_id, check=0)
        assert stored.stdout.strip() == workflow_id
        assert f"{entry!r} is unchecked" in stored.stderr and "--app" in stored.stderr
    monkeypatch.setenv("ACTIVITY_LOG", str(log))
    with caplog.at_level(logging.ERROR, logger="roost.workflow"):
        async with roost.open_node(cli_ops_app.app, data) as node:
            await until(lambda: node.describe("g1")["status"] == "completed")
            assert node.describe("g1")["result"] == "hello x"
            # Left as stored, for a node whose app declares them as workflows.
            assert node.describe("a1")["status"] == "running"
            assert node.describe("a1")["history_length"] == 0
            assert node.describe("p1")["status"] == "running"
            # Why is in describe, and the ids stay taken: no start under them, and
            # cancel / terminate say what is wrong instead of "not running".
            assert "declared as 'activity'" in node.describe("a1")["task_failure"].message
            with pytest.raises(roost.Error, match="this node cannot run it") as refused:
                await process.with_options(id="a1").spawn("ops:greet", "y")
            assert refused.value.kind is roost.ErrorKind.INVALID_STATE
            pid = roost.Pid("local", "ops:workflows", "p1")
            for steer in (process.cancel, process.terminate):
                with pytest.raises(roost.Error, match="declared as 'process'"):
                    steer(pid)
            assert node.describe("p1")["status"] == "running"
    assert log.read_text().splitlines() == ["shout x"]  # greet's activity; not a1, not p1
    refused = [r.getMessage() for r in caplog.records if "cannot resume" in r.getMessage()]
    assert len(refused) == 2
    assert any("'ops:shout' is declared as 'activity'" in m for m in refused)
    assert any("'ops:tick' is declared as 'process'" in m for m in refused)


def unread(node, workflow_id):
    return node.describe(workflow_id)["unread_messages"]


def messages(node, workflow_id):
    return sum(type(e).__name__ == "MessageArrived" for e in node.history(workflow_id))


async def test_describe_counts_stored_undelivered_messages_as_unread(tmp_path, autojump_clock):
    data = tmp_path / "data"
    async with roost.open_node(app, data) as node:
        pid = await process.with_options(id="d1").spawn("deafs:deaf")
        for i in range(2):
            await process.send(pid, "m", i)
        await until(lambda: messages(node, "d1") == 2)
        assert unread(node, "d1") == 2
    for i in (2, 3):
        roost_cli(data, "workflow", "signal", "d1", "m", str(i), check=0)
    # Stored, not delivered: the history has two messages, the inbox two more.
    assert cli_json(data, "workflow", "describe", "d1")["unread_messages"] == 4
    async with roost.open_node(app, data) as node:
        assert unread(node, "d1") == 4
        await until(lambda: messages(node, "d1") == 4)
        assert unread(node, "d1") == 4  # delivered: counted once
