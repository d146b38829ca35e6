"""One workflow on an idle node: each step one commit, made inline, and no hop between steps.

The durability contract puts four dependent commits on the critical path of a workflow of
three activities (its start, each result, the last one with its completion). On an idle
node each of them is committed in the trio thread by the task that asked for it, and the
activity runner runs the activation a result resumes itself (no executor wake-up between
them); each activity still starts only after the commit that scheduled it. Real clock: a
MockClock makes the node commit through the writer thread (see ``Node.transact``).
"""

import gc
from pathlib import Path
from typing import Any

import trio

import roost
from roost import funcs, process
from roost.workflow._local import _executors

app = roost.App("critical")
seen: dict[str, Any] = {"tasks": [], "committed": [], "node": None}


@app.activity
async def step(x: int) -> int:
    node = seen["node"]
    if node is not None:  # how many activations of this run were committed before it ran
        history = node.history(f"w{x // 10}")
        seen["committed"].append(sum(1 for i in history if type(i).__name__ == "WorkflowTask"))
    return x + 1


@app.workflow
async def three_steps(x: int) -> int:
    seen["tasks"].append(trio.lowlevel.current_task().name)
    a = await funcs.call(step, x)
    seen["tasks"].append(trio.lowlevel.current_task().name)
    b = await funcs.call(step, a)
    seen["tasks"].append(trio.lowlevel.current_task().name)
    c = await funcs.call(step, b)
    seen["tasks"].append(trio.lowlevel.current_task().name)
    return c


def _reset() -> None:
    seen["tasks"].clear()
    seen["committed"].clear()
    seen["node"] = None


async def _one(node: Any, n: int) -> Any:
    pid = await process.with_options(id=f"w{n}").spawn_monitored(three_steps, n * 10)
    exit_event = await process.events().receive()
    assert exit_event.pid == pid
    return exit_event


async def test_each_step_of_a_workflow_is_one_inline_commit(tmp_path: Path) -> None:
    _reset()
    async with roost.open_node(app, tmp_path, durability="sync") as node:
        await _one(node, 0)  # warm-up: the first run of the node's tasks
        stats = node._node.store.stats
        before = (stats.requests, stats.commits, stats.inline_commits)
        exit_event = await _one(node, 1)
        assert exit_event.value == 13
        after = (stats.requests, stats.commits, stats.inline_commits)
    # Start, result 1, result 2, result 3 + completion: four requests, four commits (none
    # merged with the next: each is durable before the side effect that follows it), and
    # every one committed in the trio thread, with no writer-thread hop.
    assert tuple(a - b for a, b in zip(after, before, strict=True)) == (4, 4, 4)


async def test_an_activity_result_resumes_its_workflow_in_the_runner_on_an_idle_node(
    tmp_path: Path,
) -> None:
    _reset()
    async with roost.open_node(app, tmp_path, durability="fast") as node:
        await _one(node, 0)
        seen["tasks"].clear()
        starter = trio.lowlevel.current_task().name
        await _one(node, 1)
    # The first activation runs in the starter (eager start); each one an activity's result
    # resumes runs in the activity runner that settled it, no executor woken between them.
    assert seen["tasks"] == [starter] + ["roost.activities"] * 3


async def test_each_activity_starts_after_the_commit_that_scheduled_it(tmp_path: Path) -> None:
    _reset()
    async with roost.open_node(app, tmp_path, durability="sync") as node:
        seen["node"] = node
        exit_event = await _one(node, 2)
    assert exit_event.value == 23
    # Activity k runs once activation k (which scheduled it) is committed, never before.
    assert seen["committed"] == [1, 2, 3]


@app.workflow
async def one_step(x: int) -> int:
    return await funcs.call(step, x)


async def test_runs_resumed_together_commit_in_one_group_across_executors(
    tmp_path: Path, monkeypatch: Any
) -> None:
    _reset()
    monkeypatch.setattr(_executors, "PASS_LIMIT", 5)
    async with roost.open_node(app, tmp_path, durability="fast") as node:
        stats = node._node.store.stats
        async with trio.open_nursery() as nursery:
            for n in range(20):
                nursery.start_soon(process.spawn_monitored, one_step, n)
        # The 20 starts committed together; their activities' results come back in one
        # runner pass and make 20 runs ready at once: 4 passes of 5.
        before = (stats.requests, stats.commits)
        exits = [await process.events().receive() for _ in range(20)]
        after = (stats.requests, stats.commits)
    assert sorted(e.value for e in exits) == list(range(1, 21))
    # Every executor the 4 passes need is woken in one tick, so the 4 passes' requests
    # share one group commit (an executor woken by another would commit on its own).
    assert (after[0] - before[0], after[1] - before[1]) == (4, 1)


@app.activity
async def collector_enabled() -> bool:
    return gc.isenabled()


@app.workflow
async def asks_for_the_collector() -> list[bool]:
    return [await funcs.call(collector_enabled), gc.isenabled()]


async def test_no_collection_inside_a_runner_pass(tmp_path: Path) -> None:
    async with roost.open_node(app, tmp_path, durability="fast"):
        pid = await process.spawn_monitored(asks_for_the_collector)
        exit_event = await process.events().receive()
        assert exit_event.pid == pid
        assert gc.isenabled()  # restored after the passes
    # As in an executor's pass (where the workflow code ran), the collector is paused while
    # the runner starts attempts and hands their results on.
    assert exit_event.value == [False, False]


class _Rounds(trio.abc.Instrument):
    """Counts the scheduler's rounds (each begins with an I/O poll) and the task steps."""

    def __init__(self) -> None:
        self.rounds = 0
        self.steps: list[str] = []

    def before_io_wait(self, timeout: float) -> None:
        self.rounds += 1

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps.append(task.name)


async def test_one_workflow_takes_one_scheduler_round_per_commit_on_an_idle_node(
    tmp_path: Path,
) -> None:
    _reset()
    async with roost.open_node(app, tmp_path, durability="sync") as node:
        await _one(node, 0)
        counts = []
        for n in (1, 2, 3):  # the fewest of three: a stray timer of the node may tick once
            rounds = _Rounds()
            trio.lowlevel.add_instrument(rounds)
            try:
                await _one(node, n)
            finally:
                trio.lowlevel.remove_instrument(rounds)
            counts.append((rounds.rounds, rounds.steps))
    fewest, steps = min(counts, key=lambda c: c[0])
    # From spawn to EXIT: per commit the one round that lets a tick's requests join its
    # group commit (4; the first is spawn's schedule point too: spawn adds no round of its
    # own); the runner woken for the first activity; the starter woken by the EXIT.
    # Nothing else: the commit is inline, and the task that committed a step dispatches
    # its effects, runs the next activity, hands its result on and commits the next step.
    assert fewest == 6
    starter = trio.lowlevel.current_task().name
    assert steps.count("roost.activities") == 4
    assert [s for s in steps if s != "roost.activities"] == [starter] * 2
