"""The node that ``test_workflow_handover_crash.py`` runs in a real subprocess.

Usage: ``python crash_handover_app.py DATA_DIR WORK_DIR SCENARIO PHASE`` (one scenario,
``handover``).

Three targets ("t-cancel", "t-send", "t-terminate") wait for "go" to continue as new,
then for what their issuer sends; three issuers ("i-...") wait for "go" to cancel, send
to or terminate their target. All six get "go" in one batch, so that their steps commit
in one group transaction, an issuer's step before its target's for the cancel and the
terminate, after it for the send.

- ``PHASE=run``: once every workflow waits for "go", the node sends the six; right after
  their commit, as the first issuer's effects are about to be carried out (none of the
  issuers' is, and no target has handed over in memory yet), it notes the stored state
  as one line of ``kill.log`` and SIGKILLs itself.
- ``PHASE=resume``: reopens the data dir, sends "done" to "t-send" (after which it
  returns the pings it got), waits for the three targets to close and writes
  ``resume.json``: their ``describe`` and the inbox rows left in the store.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import crash_child
import trio

import roost
from roost import channel, process
from roost.workflow._local import _task

app = roost.App("handover")
HOST = "handover:workflows"
KINDS = ("cancel", "send", "terminate")
# The "go" batch: issuer first for the cancel and the terminate, target first for the send.
ORDER = ("i-cancel", "t-cancel", "t-send", "i-send", "i-terminate", "t-terminate")


def pid(workflow_id: str) -> roost.Pid:
    return roost.Pid("local", HOST, workflow_id)


@app.workflow
async def target(kind: str, n: int) -> Any:
    if n:
        await process.listen("go").receive()
        await process.upgrade(None, kind, n - 1)
    if kind == "cancel":
        event = await process.events().receive()
        return f"cancelled: {event.reason}"
    if kind == "terminate":
        await roost.sleep("1h")
        return "slept"
    pings = process.listen("ping")
    got = [await pings.receive()]
    await process.listen("done").receive()  # sent after the restart: count what arrived
    while True:
        more = await channel.select(pings.case_receive(), default=True)
        if more.default:
            return got
        got.append(more.value)


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


def inbox_rows(node: Any) -> list[str]:
    with node._node.store.read() as txn:
        return [k.hex() for k, _ in txn.range("inbox")]


def kill_at_the_first_issuer_dispatch(node: Any, work: Path, first_runs: dict[str, str]) -> None:
    """Right after the group commit, before any issuer's effects: note the state, die."""

    def die_at_an_issuer(step: _task.Step) -> bool:
        if step.run.pid.id.startswith("i-"):
            described = {w: node.describe(w) for w in (*first_runs, *ORDER)}
            crash_child.append_line(
                work,
                "kill.log",
                issuers={w: described[w]["status"] for w in ORDER if w.startswith("i-")},
                continued={w: described[w]["run_id"] != run for w, run in first_runs.items()},
                targets={w: described[w]["status"] for w in first_runs},
            )
            os.kill(os.getpid(), signal.SIGKILL)
        return True

    _task.after_commit = die_at_an_issuer


async def run_phase(data_dir: str, work: Path) -> None:
    async with roost.open_node(app, data_dir, durability="sync") as node:
        for kind in KINDS:
            await process.with_options(id=f"t-{kind}").spawn(target, kind, 1)
            await process.with_options(id=f"i-{kind}").spawn(issuer, kind, f"t-{kind}")
        with trio.fail_after(20):
            while True:  # the node's state, read from outside its workflows
                if all(node.history(w) for w in ORDER):  # each waits for "go"
                    break
                await trio.sleep(0.01)
        first_runs = {f"t-{kind}": node.describe(f"t-{kind}")["run_id"] for kind in KINDS}
        kill_at_the_first_issuer_dispatch(node, work, first_runs)
        receipts = [process.send(pid(w), "go", 1) for w in ORDER]  # one batch
        for receipt in receipts:
            await receipt
        await trio.sleep_forever()  # the first issuer's dispatch kills the node


async def resume_phase(data_dir: str, work: Path) -> None:
    async with roost.open_node(app, data_dir, durability="sync") as node:
        targets = [f"t-{kind}" for kind in KINDS]
        for w in targets:
            process.monitor(pid(w))
        await process.send(pid("t-send"), "done")
        exits: dict[str, Any] = {}
        events = process.events()
        with trio.fail_after(30):
            while len(exits) < len(targets):
                event = await events.receive()
                if isinstance(event, roost.Exit):
                    exits[event.pid.id] = event.value
        described = {}
        for w in targets:
            info = node.describe(w)
            error = info["error"]
            described[w] = {
                "status": info["status"],
                "result": info["result"],
                "error_kind": error.kind.value if error is not None else None,
            }
        report = {"exits": exits, "described": described, "inbox": inbox_rows(node)}
    out = work / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, sort_keys=True, default=str))
    out.with_suffix(".tmp").replace(out)


def main() -> None:
    """``crash_handover_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    data_dir, work_dir, scenario, phase = sys.argv[1:]
    if scenario != "handover" or phase not in ("run", "resume"):
        raise SystemExit(f"unknown scenario {scenario!r} or phase {phase!r}")
    work = Path(work_dir)
    crash_child.seal_logs(work)
    trio.run(run_phase if phase == "run" else resume_phase, data_dir, work)


if __name__ == "__main__":
    main()
