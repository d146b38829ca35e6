"""The node that ``test_workflow_task_failure_crash.py`` runs in a real subprocess.

Usage: ``python crash_task_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

``task_failures``: workflows whose tasks fail beside workflows that work.

- ``PHASE=run`` starts "exits" (its code raises ``SystemExit`` in every try), "clock" (it
  branches on ``time.time()``: asleep on a timer in this phase, the other branch after a
  restart), "result" (returns a value that cannot be recorded, after a signal) and
  "ok-0".."ok-2" (an activity, then wait for "go"). Once "exits" has failed its task twice
  and every "ok-k" is waiting, it touches ``ready`` and waits to be killed.
- ``PHASE=resume`` opens the same data dir, sends "go" to the "ok-k", "result" and
  "clock" (which replays, and diverges, on it), waits
  for the "ok-k" to complete and for "exits", "clock" and "result" to have failed their
  tasks twice, and writes ``resume.json``: their exits, ``describe`` and the ERROR records
  logged on ``roost.workflow``.

``ctrl_c``: a workflow computes in a loop (its task_timeout an hour); it touches
``computing`` first, and the test sends SIGINT: the node must stop.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import crash_child
import trio

import roost
from roost import funcs, process

app = roost.App("ctf")
HOST = "ctf:workflows"
WORK = Path()
PHASE = "run"
OKS = ["ok-0", "ok-1", "ok-2"]
FAILING = ["exits", "clock", "result"]


@app.activity
async def double(x: int) -> int:
    return 2 * x


@app.workflow
async def works(x: int) -> int:
    first = await funcs.call(double, x)
    await process.listen("go").receive()
    return first + await funcs.call(double, first)


@app.workflow
async def exits() -> None:
    sys.exit("workflow code called sys.exit()")


@app.workflow
async def reads_the_clock() -> str:
    cutoff = math.inf if PHASE == "run" else 0.0  # after the restart: a time long past
    if time.time() < cutoff:  # not replay-safe
        await roost.sleep(3600)
    else:
        await funcs.call(double, 1)
    return "done"


@app.workflow
async def returns_a_set() -> Any:
    await process.listen("go").receive()
    return {1, 2}


@app.workflow
async def computes() -> None:
    await funcs.call(double, 1)  # the loop runs in a later activation (an executor's)
    crash_child.touch(WORK, "computing")
    while True:  # a workflow that never yields; Ctrl-C must still stop the node
        pass


def pid(workflow_id: str) -> roost.Pid:
    return roost.Pid("local", HOST, workflow_id)


def failed_twice(node: Any, workflow_id: str) -> bool:
    failure = node.describe(workflow_id)["task_failure"]
    return failure is not None and failure.details["attempt"] >= 2


def waiting(node: Any, workflow_id: str) -> bool:
    return any(type(x).__name__ == "ActivityResolved" for x in node.history(workflow_id))


class Records(logging.Handler):
    """The ERROR records of ``roost.workflow``, as plain data."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else None
        self.seen.append({"message": record.getMessage(), "exc_type": exc})


async def run_phase(data_dir: str, scenario: str) -> None:
    async with roost.open_node(app, data_dir, durability="sync") as node:
        if scenario == "ctrl_c":
            await process.with_options(id="loop", task_timeout="1h").spawn(computes)
            await trio.sleep_forever()
        for i, workflow_id in enumerate(OKS):
            await process.with_options(id=workflow_id).spawn(works, i + 1)
        await process.with_options(id="exits").spawn(exits)
        await process.with_options(id="clock").spawn(reads_the_clock)
        await process.with_options(id="result").spawn(returns_a_set)
        with trio.fail_after(20):
            while True:  # the node's state, read from outside its workflows
                if failed_twice(node, "exits") and all(waiting(node, w) for w in OKS):
                    break
                await trio.sleep(0.01)
        crash_child.touch(WORK, "ready")
        await trio.sleep_forever()


def as_data(failure: Any) -> Any:
    if failure is None:
        return None
    return {
        "type": type(failure).__name__,
        "kind": failure.kind.value,
        "message": failure.message,
        "details": failure.details,
    }


async def resume_phase(data_dir: str) -> None:
    records = Records()
    logging.getLogger("roost.workflow").addHandler(records)
    async with roost.open_node(app, data_dir, durability="sync") as node:
        events = process.events()
        for workflow_id in OKS:
            process.monitor(pid(workflow_id))
        # "clock" does not listen for "go": the message only gives it something to do, so
        # that it is rebuilt by replay.
        for workflow_id in [*OKS, "result", "clock"]:
            await process.send(pid(workflow_id), "go")
        exits = {}
        with trio.fail_after(30):
            while len(exits) < len(OKS):
                event = await events.receive()
                if isinstance(event, roost.Exit):
                    exits[event.pid.id] = event.value
            while True:
                if all(failed_twice(node, w) for w in FAILING):
                    break
                await trio.sleep(0.01)
        described = {
            w: {
                "status": node.describe(w)["status"],
                "task_failure": as_data(node.describe(w)["task_failure"]),
                "tasks": [x.index for x in node.history(w) if type(x).__name__ == "WorkflowTask"],
            }
            for w in [*OKS, *FAILING]
        }
    report = {"exits": exits, "described": described, "errors": records.seen}
    out = WORK / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, sort_keys=True, default=str))
    out.with_suffix(".tmp").replace(out)


def main() -> None:
    """``crash_task_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    global WORK, PHASE  # the workflows read them
    data_dir, work_dir, scenario, phase = sys.argv[1:]
    WORK, PHASE = Path(work_dir), phase
    crash_child.seal_logs(WORK)
    if phase == "run":
        trio.run(run_phase, data_dir, scenario)
    else:
        trio.run(resume_phase, data_dir)


if __name__ == "__main__":
    main()
