"""The benchmarks' reference executor keeps roost's durability contract (benchmarks/_reference.py).

In-process, on a temporary data dir, for each variant (a: a task per workflow, b: batched
passes, c: batched with one thread hop per pass for sync activities):

- every workflow returns the right result and the store holds its completion;
- each activity runs only once the record before it (the start, or the previous result) is
  committed: the activity itself reads the store in a fresh read transaction;
- a workflow's records take exactly 4 commits: start, result 1, result 2, result 3 with the
  completion (the batch each record was written in is seen through ``on_batch``);
- a crash (an exception in the writer, so that batch is never written) followed by a
  reopen and ``recover`` runs again only the activities whose results were not committed.

The SIGKILL version is tests/integration/test_reference_executor_crash.py.
"""

from __future__ import annotations

import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: benchmarks/
from benchmarks import _reference as ref

N = 12
SEQS = 3
VARIANTS = ["a", "b", "c"]


class CrashError(Exception):
    """Raised in the writer thread: the process "dies" before that batch is written."""


class World:
    """The workflows and activities of one test, with what they saw."""

    def __init__(self, path: str, variant: str) -> None:
        self.path = path
        self.variant = variant
        self.ex: ref.Executor | None = None
        self.runs: Counter[tuple[int, int]] = Counter()
        self.undurable: list[tuple[int, int]] = []

    def _check(self, i: int, seq: int) -> None:
        assert self.ex is not None
        self.runs[i, seq] += 1
        wf_id = i + 1  # ids are handed out from 1, in the order the runs were created
        before = b"s" + struct.pack(">Q", wf_id) if seq == 0 else None
        if before is None:
            before = b"r" + struct.pack(">QI", wf_id, seq - 1)
        with self.ex.env.begin() as txn:  # sees only committed transactions
            if txn.get(before) is None:
                self.undurable.append((i, seq))

    async def step_async(self, i: int, seq: int, x: int) -> int:
        self._check(i, seq)
        return x + 1

    def step_sync(self, i: int, seq: int, x: int) -> int:
        self._check(i, seq)
        return x + 1

    def workflows(self) -> dict[str, ref.Workflow]:
        act = self.step_sync if self.variant == "c" else self.step_async

        async def three(i: int) -> list[int]:
            x = 10 * i
            for seq in range(SEQS):
                x = await ref.call(act, i, seq, x)
            return [i, x]

        return {"three": three}

    async def execute(self, ex: ref.Executor, runs: list[tuple[ref.Run, list[ref.Record]]]) -> Any:
        self.ex = ex
        if self.variant == "a":
            return await ref.run_tasks(ex, runs)
        return await ref.run_batched(ex, runs, thread_batch=self.variant == "c")

    def start(self, on_batch: Any = None) -> dict[int, Any]:
        async def main() -> dict[int, Any]:
            async with ref.open_executor(self.path, on_batch) as ex:
                three = self.workflows()["three"]
                return await self.execute(ex, [ex.new_run(three, i) for i in range(N)])  # type: ignore[no-any-return]

        return trio.run(main)

    def recover(self) -> tuple[int, dict[int, Any]]:
        async def main() -> tuple[int, dict[int, Any]]:
            async with ref.open_executor(self.path) as ex:
                runs = ex.recover(self.workflows())
                return len(runs), await self.execute(ex, runs)

        return trio.run(main)


def expected(i: int) -> list[int]:
    return [i, 10 * i + SEQS]


@pytest.mark.parametrize("variant", VARIANTS)
def test_runs_every_workflow_in_four_commits_each(tmp_path: Path, variant: str) -> None:
    world = World(str(tmp_path), variant)
    batches: list[list[bytes]] = []
    results = world.start(lambda batch: batches.append([k for k, _ in batch]))

    assert sorted(results.values()) == [expected(i) for i in range(N)]
    assert world.undurable == [], "an activity ran before the record before it was committed"
    assert world.runs == {(i, seq): 1 for i in range(N) for seq in range(SEQS)}
    batch_of = {k: b for b, keys in enumerate(batches) for k in keys}
    assert len(batch_of) == N * (SEQS + 2), "a record was written twice"
    for wf_id in range(1, N + 1):
        start = batch_of[b"s" + struct.pack(">Q", wf_id)]
        rs = [batch_of[b"r" + struct.pack(">QI", wf_id, seq)] for seq in range(SEQS)]
        done = batch_of[b"d" + struct.pack(">Q", wf_id)]
        assert start < rs[0] < rs[1] < rs[2] == done, "not 4 dependent commits"
    snap = ref.snapshot(str(tmp_path))
    assert snap["done"] == {i + 1: expected(i) for i in range(N)}
    if variant != "a":  # one pass per step for every workflow at once
        assert len(batches) == SEQS + 1


@pytest.mark.parametrize("variant", VARIANTS)
def test_recovery_reruns_only_uncommitted_activities(tmp_path: Path, variant: str) -> None:
    world = World(str(tmp_path), variant)
    written = {"results": 0}

    def crash_after_first_results(batch: list[ref.Record]) -> None:
        if written["results"] >= N:  # this batch (results of the second activities) is lost
            raise CrashError
        written["results"] += sum(1 for k, _ in batch if k[:1] == b"r")

    with pytest.raises(BaseExceptionGroup) as info:
        world.start(crash_after_first_results)
    assert info.group_contains(CrashError)
    at_crash = ref.snapshot(str(tmp_path))
    assert len(at_crash["started"]) == N
    assert at_crash["done"] == {}
    committed = set(at_crash["results"])
    assert committed, "the crash came before any result was committed"
    ran_before = Counter(world.runs)

    recovered, results = world.recover()

    assert recovered == N
    assert sorted(results.values()) == [expected(i) for i in range(N)]
    assert world.undurable == []
    for (wf_id, seq), value in at_crash["results"].items():
        assert world.runs[wf_id - 1, seq] == 1, f"committed step {wf_id}/{seq} ran again"
        assert ref.snapshot(str(tmp_path))["results"][wf_id, seq] == value
    rerun = {k for k, c in world.runs.items() if c > 1}
    assert rerun, "no activity had run uncommitted at the crash: the test proves nothing"
    assert all(world.runs[k] == 2 and ran_before[k] == 1 for k in rerun)
    assert set(world.runs) == {(i, seq) for i in range(N) for seq in range(SEQS)}


def test_ids_continue_after_reopen_and_finished_runs_are_not_recovered(tmp_path: Path) -> None:
    world = World(str(tmp_path), "b")
    world.start()

    async def main() -> tuple[int, int]:
        async with ref.open_executor(str(tmp_path)) as ex:
            run, _ = ex.new_run(world.workflows()["three"], 0)
            return run.id, len(ex.recover(world.workflows()))

    assert trio.run(main) == (N + 1, 0)
