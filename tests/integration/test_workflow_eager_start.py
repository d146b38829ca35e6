"""A new workflow's first activation commits with its start, in one transaction.

Observable through the public API: ``spawn`` returns once the run and its first step are
stored, so the history already holds activation 1 and the commands it issued; a delayed
start still waits; workflow code never sees the starter's context.
"""

import errno

import lmdb
import pytest
import trio

import roost
from roost import funcs, process
from roost.workflow._local import _eager

app = roost.App("eager")
app.queue("jobs", jitter=0, max_retries=0)


@app.activity
async def step(x):
    return x + 1


@app.workflow
async def two_steps(x):
    a = await funcs.call(step, x)
    return await funcs.call(step, a)


@app.workflow
async def reports_queue_info():
    info = roost.queue_info()
    return None if info is None else info.queue


@app.process
async def handler(payload):
    """A queue handler (a process) that runs a workflow to its end."""
    RESULTS.append(await process.exec(reports_queue_info))


RESULTS: list = []


def _kinds(history):
    return [type(item).__name__ for item in history]


async def test_spawn_returns_with_the_first_step_stored(autojump_clock):
    async with roost.open_node(app) as node:
        stats = node._node.store.stats
        before = stats.requests
        pid = await process.with_options(id="e-1").spawn(two_steps, 1)
        # No other task ran since spawn returned: the first step came with the start.
        assert _kinds(node.history("e-1")) == ["WorkflowTask", "Started", "ScheduleActivity"]
        assert stats.requests - before == 1  # one transaction: run record, step 1
        events = process.events()
        process.monitor(pid)
        exit_event = await events.receive()
        assert exit_event.value == 3
        # Started in one transaction, then one per activity result: 3 in all, not 4.
        assert stats.requests - before == 3
        steps = [x.index for x in node.history("e-1") if type(x).__name__ == "WorkflowTask"]
        assert steps == [1, 2, 3]


async def test_a_delayed_start_waits_for_its_time(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="e-2", start_delay="1h").spawn(two_steps, 1)
        assert node.history("e-2") == []
        await roost.sleep(3601)
        assert _kinds(node.history("e-2"))[:3] == ["WorkflowTask", "Started", "ScheduleActivity"]


async def test_workflow_code_never_sees_the_starters_context(autojump_clock):
    RESULTS.clear()
    async with roost.open_node(app):
        await roost.enqueue("jobs", handler, {})
        while not RESULTS:
            await roost.sleep(1)
    # The handler sees its delivery; the workflow it started, run eagerly in the handler's
    # task, does not (a replay would not either).
    assert RESULTS == [None]


async def test_eager_starts_in_flight_are_bounded(autojump_clock, monkeypatch):
    # A burst of starts must not hold every first step's state at once: past the limit,
    # starts take the normal path (the executors run their first steps).
    monkeypatch.setattr(_eager, "EAGER_LIMIT", 2)
    in_flight_at_start = []
    real = _eager.EagerStarts.start

    async def spy(eager, run, events):
        in_flight_at_start.append(eager.in_flight)
        await real(eager, run, events)

    monkeypatch.setattr(_eager.EagerStarts, "start", spy)
    async with roost.open_node(app):
        events = process.events()
        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(process.spawn_monitored, two_steps, i)
        results = sorted([(await events.receive()).value for _ in range(6)])
    assert results == [2, 3, 4, 5, 6, 7]
    assert in_flight_at_start == [0, 1]  # the other four started the normal way


async def test_a_failed_eager_commit_stores_nothing_and_the_id_stays_free(
    autojump_clock, tmp_path, monkeypatch
):
    async with roost.open_node(app, tmp_path) as node:
        writer = node._node.store._writer

        def io_error(parent):
            raise lmdb.Error("mdb_txn_commit", errno.EIO)

        monkeypatch.setattr(writer, "_commit", io_error)
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="e-3").spawn(two_steps, 1)
        assert info.value.kind is roost.ErrorKind.UNAVAILABLE
        monkeypatch.undo()
        with pytest.raises(roost.Error) as missing:
            node.describe("e-3")
        assert missing.value.kind is roost.ErrorKind.NOT_FOUND
        events = process.events()
        pid = await process.with_options(id="e-3").spawn_monitored(two_steps, 1)
        assert (await events.receive()).value == 3
        assert node.describe("e-3")["status"] == "completed"
        assert str(pid) == "{eager:workflows|e-3}"


TRIES: list = []


@app.workflow
async def exits_on_its_first_try(x):
    TRIES.append(x)
    if len(TRIES) == 1:
        raise SystemExit("workflow code called sys.exit()")
    return await funcs.call(step, x)


async def test_a_first_step_whose_task_fails_stores_the_start_and_is_retried(autojump_clock):
    TRIES.clear()
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="e-4").spawn_monitored(exits_on_its_first_try, 1)
        # The start is stored (the normal way), its first step is not.
        described = node.describe("e-4")
        assert described["status"] == "running"
        assert "SystemExit" in described["task_failure"].message
        assert node.history("e-4") == []
        exit_event = await process.events().receive()
        assert (exit_event.pid, exit_event.value) == (pid, 2)
        assert TRIES == [1, 1]
        steps = [x.index for x in node.history("e-4") if type(x).__name__ == "WorkflowTask"]
        assert steps == [1, 2]
        assert node.describe("e-4")["task_failure"] is None


async def test_an_eager_commit_refused_once_stores_the_start_and_is_retried(
    autojump_clock, tmp_path, monkeypatch
):
    async with roost.open_node(app, tmp_path) as node:
        writer = node._node.store._writer
        real, failed = writer._commit, []

        def fails_once(parent):
            if not failed:  # the eager commit: the run with its first step
                failed.append(1)
                raise lmdb.Error("mdb_txn_commit", errno.EIO)
            real(parent)

        monkeypatch.setattr(writer, "_commit", fails_once)
        pid = await process.with_options(id="e-5").spawn_monitored(two_steps, 1)
        assert failed == [1]
        described = node.describe("e-5")  # stored by the second try: the start alone
        assert described["status"] == "running"
        failure = described["task_failure"]
        assert failure.kind is roost.ErrorKind.UNAVAILABLE
        assert failure.details["stage"] == "commit"
        assert node.history("e-5") == []
        exit_event = await process.events().receive()
        assert (exit_event.pid, exit_event.value) == (pid, 3)
        steps = [x.index for x in node.history("e-5") if type(x).__name__ == "WorkflowTask"]
        assert steps == [1, 2, 3]
