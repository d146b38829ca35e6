"""What a cached run keeps in memory, seen from workflow code on a real node."""

import contextvars

import roost
from roost import coroutine, funcs, process, workflow
from roost.testing import open_test_node

app = roost.App("drv")
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("drv_state", default="unset")


@app.activity
def double(x):
    return x * 2


async def _reads_var(out):
    out.append(VAR.get())
    await roost.sleep("1s")


@app.workflow
async def keeps_state(tag):
    VAR.set(f"set by {tag}")
    doubled = await funcs.call(double, 1)  # another activation (or a rebuild) resumes here
    seen = [VAR.get()]
    spawned: list[str] = []
    coroutine.spawn(_reads_var, spawned)
    await process.listen("go").receive()
    seen.append(VAR.get())
    info = workflow.info()
    return {
        "seen": seen,
        "spawned_saw": spawned,
        "doubled": doubled,
        "info": [info.workflow_id, info.workflow_type, info.task_queue, info.attempt],
    }


async def _run_two(node, cache_evicts):
    pids = [await process.spawn_monitored(keeps_state, tag) for tag in ("a", "b")]
    for _ in range(3):  # the runs park on their signal
        await roost.sleep("1s")
    for pid in pids:
        process.send(pid, "go", 1)
    results = [await process.events().receive() for _ in pids]
    by_pid = {ev.pid: ev for ev in results}
    stats = node._node.local_workflows.stats
    assert (stats["replays"] > 0) is cache_evicts
    return [by_pid[pid] for pid in pids]


async def test_a_contextvar_lasts_across_activations_and_is_set_again_by_replay():
    for cache, evicts in ((10_000, False), (1, True)):  # kept in memory; rebuilt every step
        async with open_test_node(app, workflow_cache=cache) as node:
            a, b = await _run_two(node, evicts)
        for ev, tag in ((a, "a"), (b, "b")):
            assert ev.error is None, ev.error
            assert ev.value["seen"] == [f"set by {tag}"] * 2
            # A spawned coroutine starts from the run's own context, not its spawner's.
            assert ev.value["spawned_saw"] == ["unset"]
            assert ev.value["doubled"] == 2
            assert ev.value["info"] == [str(ev.pid.id), "drv:keeps_state", "default", 1]


@app.workflow
async def parks():
    await process.listen("go").receive()
    return workflow.info().run_id


async def test_a_cached_run_keeps_its_start_with_the_run_records_own_values():
    async with open_test_node(app) as node:
        pid = await process.spawn_monitored(parks)
        await roost.sleep("1s")
        m = node._node.local_workflows
        run = m.runs[str(pid.id)]
        started = run.driver.started
        # Equal to what was recorded, and the same objects as the record's: a decoded
        # copy of each would stay in memory with every cached run.
        assert started.workflow_id is run.record.workflow_id
        assert started.run_id is run.record.run_id
        assert started.workflow_type is run.record.workflow_type
        assert started.task_queue is run.record.task_queue
        assert started.context is run.context
        assert started.args == []
        process.send(pid, "go", 1)
        ev = await process.events().receive()
        assert ev.value == run.record.run_id
