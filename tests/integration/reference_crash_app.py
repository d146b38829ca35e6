"""The reference executor (benchmarks/_reference.py) in a subprocess, for
``test_reference_executor_crash.py``.

Usage: ``python reference_crash_app.py DATA_DIR WORK_DIR VARIANT PHASE``

- ``PHASE=run`` starts ``N`` workflows of 3 activities with variant ``a``, ``b`` or ``c``
  (``c`` with sync activities). Once ``BLOCK_AFTER`` results are committed, the writer
  thread prints ``blocked`` on stdout and blocks just before writing its next batch (whose
  activities have run), so the parent's SIGKILL lands at a known point.
- ``PHASE=resume`` reopens ``DATA_DIR``, recovers every unfinished workflow, runs them to
  completion with the same variant and writes ``WORK_DIR/resume.json``.

Each activity appends ``i seq phase`` to ``WORK_DIR/runs.log`` and fsyncs it before it
returns (one ``os.write`` on an ``O_APPEND`` descriptor: a SIGKILL cannot tear it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: benchmarks/
from benchmarks import _reference as ref

N = 30
SEQS = 3
BLOCK_AFTER = N  # committed results before the writer blocks

# Set from the command line by ``__main__`` (the test imports this module for N and SEQS).
ARGS: dict[str, Any] = {}


def _log_run(i: int, seq: int) -> None:
    os.write(ARGS["log"], f"{i} {seq} {ARGS['phase']}\n".encode())
    os.fsync(ARGS["log"])


async def step_async(i: int, seq: int, x: int) -> int:
    _log_run(i, seq)
    return x + 1


def step_sync(i: int, seq: int, x: int) -> int:
    _log_run(i, seq)
    return x + 1


async def three(i: int) -> list[int]:
    act: Any = step_sync if ARGS["variant"] == "c" else step_async
    x = 10 * i
    for seq in range(SEQS):
        x = await ref.call(act, i, seq, x)
    return [i, x]


def block_after_results(committed: dict[str, int]) -> Any:
    def on_batch(batch: list[ref.Record]) -> None:
        if committed["results"] >= BLOCK_AFTER:
            sys.stdout.write("blocked\n")
            sys.stdout.flush()
            threading.Event().wait()  # until the SIGKILL
        committed["results"] += sum(1 for k, _ in batch if k[:1] == b"r")

    return on_batch


async def execute(ex: ref.Executor, runs: list[tuple[ref.Run, list[ref.Record]]]) -> Any:
    if ARGS["variant"] == "a":
        return await ref.run_tasks(ex, runs)
    return await ref.run_batched(ex, runs, thread_batch=ARGS["variant"] == "c")


async def main(data: str, work: str) -> None:
    if ARGS["phase"] == "run":
        async with ref.open_executor(data, block_after_results({"results": 0})) as ex:
            await execute(ex, [ex.new_run(three, i) for i in range(N)])
        raise AssertionError("the run phase finished: it should have blocked")
    async with ref.open_executor(data) as ex:
        runs = ex.recover({"three": three})
        results = await execute(ex, runs)
    report = {"recovered": len(runs), "results": sorted(results.values())}
    (Path(work) / "resume.json").write_text(json.dumps(report))


if __name__ == "__main__":
    DATA, WORK, VARIANT, PHASE = sys.argv[1:5]
    log = os.open(Path(WORK) / "runs.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    ARGS.update(variant=VARIANT, phase=PHASE, log=log)
    trio.run(main, DATA, WORK)
