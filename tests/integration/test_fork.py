"""A forked child's copy of a node refuses its store; the parent goes on (issue 24)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio

import roost

app = roost.App("fork")


@app.workflow
async def adds(x: int) -> int:
    return x + 1


def _in_child(store: object) -> dict[str, object]:
    """What the child's store calls did: each one's error kind and message, or 'done'."""
    outcomes: dict[str, object] = {}
    calls = {
        "write": lambda: store.transact_sync(  # type: ignore[attr-defined]
            lambda txn: txn.put("state", b"from-the-child", b"x")
        ),
        "read": lambda: store.read().__enter__(),  # type: ignore[attr-defined]
    }
    for name, call in calls.items():
        try:
            call()
        except roost.Error as err:
            outcomes[name] = [err.kind.value, err.message]
        else:
            outcomes[name] = "done"
    return outcomes


def _report_of(child: int, reader: int) -> tuple[dict[str, list[str]], int]:
    with os.fdopen(reader, "rb") as pipe:
        outcomes = json.loads(pipe.read())
    _, status = os.waitpid(child, 0)
    return outcomes, os.waitstatus_to_exitcode(status)


async def test_a_forked_child_cannot_commit_and_the_parent_goes_on(tmp_path: Path) -> None:
    async with roost.open_node(app, tmp_path / "data") as node:
        store = node._node.store
        assert await roost.process.exec(adds, 1) == 2
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:  # the child: report, and end without running anything of the parent's
            try:
                os.write(writer, json.dumps(_in_child(store)).encode())
            finally:
                os._exit(0)
        os.close(writer)
        outcomes, code = await trio.to_thread.run_sync(_report_of, child, reader)
        assert code == 0
        for name in ("write", "read"):
            kind, message = outcomes[name]
            assert kind == "InvalidState", outcomes
            assert f"belongs to process {os.getpid()}" in message
            assert "is a fork of it" in message and "os._exit()" in message
        # The parent's node goes on: it commits and reads, and nothing of the child's is there.
        assert await roost.process.exec(adds, 2) == 3
        await roost.state.set("s", "k", 1)
        assert await roost.state.get("s", "k") == 1
        with store.read() as txn:
            assert txn.get("state", b"from-the-child") is None
