"""A worker pool inside one durable workflow: coroutines, channels and select.

The workflow starts N workers with ``coroutine.spawn``. They share a job channel: each
takes the next job, runs an activity for it, and sends the outcome to a results channel.
The workflow feeds the jobs in, closes the job channel (so every worker's loop ends once
it is drained), and collects the results with a ``select`` over the results channel, a
"done" channel the workers report to as they finish, and a durable ``roost.after``
deadline. All of it is replay-safe: the activities run in parallel, and the order in
which their results arrived is recorded, so a replay of the history takes exactly the
same path and returns the same result.

1. batch-1: 9 jobs on 3 workers; the activities overlap, every job is done once, and
   ``roost.testing.Replayer`` replays the recorded history to the same result.
2. batch-2: the node stops while the batch is half done and is reopened on the same data
   directory; the recorded results are kept, and only jobs still running ran again.
3. batch-3: a deadline shorter than the work; the ``roost.after`` case of the ``select``
   wins and the workflow returns what it has.

Run it with ``.venv/bin/python examples/worker_pool.py``.
"""

import logging
import tempfile
from collections import Counter
from typing import Any

import trio

import roost
from roost import channel, coroutine, funcs, process
from roost.testing import Replayer

app = roost.App("pool")

# How many times each job's activity body started, and the (start, end) time of every
# run that finished: the side effects the demo (and the tests) look at.
RUNS: Counter[int] = Counter()
SPANS: list[tuple[int, float, float]] = []


# -- the activity: one job's work ----------------------------------------------------------


@app.activity(
    retry_policy=roost.RetryPolicy(initial_interval="50ms", maximum_attempts=3),
    start_to_close_timeout="10s",
)
async def crunch(job: int) -> int:
    """The work for one job: takes 50-150 ms and returns the job's square."""
    RUNS[job] += 1
    start = trio.current_time()
    await trio.sleep(0.05 * (1 + job % 3))
    SPANS.append((job, start, trio.current_time()))
    return job * job


# -- the workflow ---------------------------------------------------------------------------


@app.workflow
async def batch_workflow(batch: dict[str, Any]) -> dict[str, Any]:
    """Run ``crunch`` for every job on ``batch["workers"]`` workers; aggregate the results."""
    jobs: list[int] = batch["jobs"]
    size: int = batch["workers"]
    todo = channel.new(len(jobs))  # the job queue
    results = channel.new(len(jobs))  # {"job", "worker", "value"} per finished job
    done = channel.new(size)  # each worker's name, once it has run out of jobs

    async def worker(name: str) -> None:
        async for job in todo:  # ends once todo is closed and drained
            value = await funcs.call(crunch, job)
            await results.send({"job": job, "worker": name, "value": value})
        await done.send(name)

    for n in range(1, size + 1):
        coroutine.spawn(worker, f"w{n}")
    for job in jobs:
        await todo.send(job)
    todo.close()  # no more jobs

    deadline = roost.after(batch["deadline"])  # a durable timer
    collected: list[dict[str, Any]] = []
    running = size
    while running:
        sel = await channel.select(results, done, deadline)
        if sel.channel is results:
            collected.append(sel.value)
            if batch.get("notify") and len(collected) == len(jobs) // 2:
                process.send(batch["notify"], "progress", f"{len(collected)} of {len(jobs)}")
        elif sel.channel is done:
            running -= 1
        else:  # the deadline won: give up on the jobs still running
            return {"status": "timed out", "finished": sorted(r["job"] for r in collected)}
    results.close()
    done.close()

    by_worker: dict[str, list[int]] = {}
    for r in collected:
        by_worker.setdefault(r["worker"], []).append(r["job"])
    return {
        "status": "completed",
        "jobs": sorted(r["job"] for r in collected),
        "total": sum(r["value"] for r in collected),
        "by_worker": dict(sorted(by_worker.items())),
    }


# -- the driver -----------------------------------------------------------------------------


def batch(jobs: int, workers: int, deadline: str = "1m", notify: bool = False) -> dict[str, Any]:
    return {
        "jobs": list(range(1, jobs + 1)),
        "workers": workers,
        "deadline": deadline,
        "notify": process.pid() if notify else None,
    }


def peak_overlap(spans: list[tuple[int, float, float]]) -> int:
    """The largest number of job activities that were running at the same moment."""
    edges = sorted([(start, 1) for _, start, _ in spans] + [(end, -1) for _, _, end in spans])
    peak = running = 0
    for _, step in edges:  # at equal times, ends (-1) sort before starts (+1)
        running += step
        peak = max(peak, running)
    return peak


def check_replay(node: roost.NodeHandle, workflow_id: str, live: dict[str, Any]) -> None:
    """Replay the recorded history without a node, against this module's code."""
    replayed = Replayer(app).replay(node.history(workflow_id))
    print(f"  replaying {workflow_id}'s history gives the same result: {replayed == live}")


async def main(data_dir: str) -> None:
    print("1. batch-1: 9 jobs on 3 workers")
    async with roost.open_node(app, data_dir) as node:
        spawner = process.with_options(id="batch-1")
        result: dict[str, Any] = await spawner.exec(batch_workflow, batch(9, 3))
        print(f"  status {result['status']}, jobs {result['jobs']}, total {result['total']}")
        for worker, jobs in result["by_worker"].items():
            print(f"  {worker} ran jobs {jobs}")
        print(f"  every job's activity ran exactly once: {Counter(range(1, 10)) == RUNS}")
        print(f"  up to {peak_overlap(SPANS)} jobs ran at the same time")
        check_replay(node, "batch-1", result)

    print("\n2. batch-2: the node stops in the middle of the batch")
    RUNS.clear()
    async with roost.open_node(app, data_dir):
        pid = await process.with_options(id="batch-2").spawn(
            batch_workflow, batch(9, 3, notify=True)
        )
        print(f"  {await process.listen('progress').receive()} jobs done; stopping the node")
    before = Counter(RUNS)
    async with roost.open_node(app, data_dir) as node:
        print(f"  node restarted (incarnation {node.incarnation}); the batch carries on")
        process.monitor(pid)
        exit_ = await process.events().receive()
        assert isinstance(exit_, roost.Exit)
        result = exit_.value
        print(f"  status {result['status']}, jobs {result['jobs']}, total {result['total']}")
        kept = sorted(job for job in before if RUNS[job] == before[job])
        rerun = sorted(job for job in before if RUNS[job] > before[job])
        print(f"  jobs recorded before the stop, not run again: {kept}")
        print(f"  jobs running when the node stopped, run again: {rerun}")
        print(f"  jobs started after the restart: {sorted(set(RUNS) - set(before))}")
        print(f"  every job is in the result exactly once: {result['jobs'] == [*range(1, 10)]}")
        check_replay(node, "batch-2", result)

        print("\n3. batch-3: 9 jobs, 2 workers, a 120ms deadline")
        spawner = process.with_options(id="batch-3")
        result = await spawner.exec(batch_workflow, batch(9, 2, deadline="120ms"))
        print(f"  status {result['status']}, finished jobs {result['finished']}")
        check_replay(node, "batch-3", result)


if __name__ == "__main__":
    logging.getLogger("roost").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="roost-pool-") as data_dir:
        trio.run(main, data_dir)
    print("\nworker pool demo finished")
