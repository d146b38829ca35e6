"""A workflow task that fails for a reason other than a workflow error fails only that task.

Nothing of the activation is committed, ``describe(id)["task_failure"]`` says what failed and
where, the failure is logged at ERROR with its traceback, the task is retried with the task
backoff, and every other workflow goes on. See docs/workflows.md, "When a workflow task
fails". (Killing the node and restarting it: test_workflow_task_failure_crash.py.)
"""

import errno
import itertools
import logging
import math
import time
from pathlib import Path

import pytest
import trio

import roost
from roost import coroutine, funcs, process, workflow
from roost.workflow._local._records import history_key
from roost.workflow._local._task_failure import MAX_TASK_BACKOFF, task_backoff

app = roost.App("tf")
HERE = Path(__file__).name

CALLS: list = []  # what the activities were called with, in order
ATTEMPTS: list = []  # (workflow time, kind) of each try of a failing workflow's first step
FAILING = [0]  # how many tries of ``exits_then_returns`` raise


@app.activity
async def count(x):
    CALLS.append(x)
    return x * 10


@app.workflow
async def steady(x):
    return await funcs.call(count, x)


@app.workflow
async def exits_then_returns(kind):
    ATTEMPTS.append((roost.now(), kind))
    if len(ATTEMPTS) <= FAILING[0]:
        raise {
            "SystemExit": SystemExit(3),
            "GeneratorExit": GeneratorExit(),
            "KeyboardInterrupt": KeyboardInterrupt(),  # raised by the code: no Ctrl-C
        }[kind]
    return await funcs.call(count, 1)


def line_of(snippet):
    """``file:line`` of the line of this module that holds ``snippet``."""
    lines = Path(__file__).read_text().splitlines()
    return f"{HERE}:{next(i for i, line in enumerate(lines, 1) if snippet in line)}"


def _tasks(history):
    return [item.index for item in history if type(item).__name__ == "WorkflowTask"]


async def _until_failed(node, workflow_id, attempt=1):
    """Wait (virtual time) until the workflow's task failure shows ``attempt``."""
    while True:
        failure = node.describe(workflow_id)["task_failure"]
        if failure is not None and failure.details["attempt"] >= attempt:
            return failure
        await trio.sleep(0.05)


@pytest.mark.parametrize("kind", ["SystemExit", "GeneratorExit", "KeyboardInterrupt"])
async def test_a_base_exception_in_workflow_code_fails_the_task_not_the_node(
    autojump_clock, tmp_path, caplog, kind
):
    CALLS.clear()
    ATTEMPTS.clear()
    FAILING[0] = 3
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    async with roost.open_node(app, tmp_path) as node:
        pid = await process.with_options(id="x").spawn_monitored(exits_then_returns, kind)
        failure = await _until_failed(node, "x")
        described = node.describe("x")
        assert described["status"] == "running"
        assert node.history("x") == []  # nothing of the failed activation was committed
        assert failure.kind is roost.ErrorKind.INTERNAL
        assert kind in failure.message and "workflow task failure" in failure.message
        assert failure.details["activation"] == 1
        assert failure.details["stage"] == "activation"
        assert failure.details["type"] == kind
        assert failure.details["location"].endswith(line_of("raise {"))
        # Every other workflow goes on meanwhile.
        assert await process.exec(steady, 7) == 70
        exit_event = await process.events().receive()
        assert exit_event.pid == pid and exit_event.value == 10
        assert node.describe("x")["task_failure"] is None  # cleared by the task that committed
        assert _tasks(node.history("x")) == [1, 2]  # the successful try's steps only
    # Retried with the task backoff: 1 s, 2 s, 4 s after the failed tries.
    times = [at for at, _ in ATTEMPTS]
    gaps = [round((b - a).total_seconds(), 1) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 4.0]
    assert CALLS == [7, 1]
    logged = [r for r in caplog.records if "workflow task failure" in r.getMessage()]
    assert len(logged) == 3 and all(r.levelno == logging.ERROR for r in logged)
    assert logged[0].exc_info[0].__name__ == kind  # with the traceback


def test_the_task_backoff_doubles_up_to_its_cap_and_never_overflows():
    assert [task_backoff(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert task_backoff(5000) == MAX_TASK_BACKOFF  # 2.0 ** 4999 would overflow a float


def test_a_timed_out_task_backs_off_ten_times_as_long_as_it_held_the_loop():
    assert task_backoff(1, held=0.3) == 3.0  # more than the 1 s of a first failure
    assert task_backoff(3, held=0.1) == 4.0  # less: the plain backoff
    assert task_backoff(9, held=10.0) == 100.0  # past the 60 s cap


@app.workflow
async def returns_a_set():
    await funcs.call(count, 2)
    return {1, 2}


async def test_a_result_that_cannot_be_recorded_is_a_task_failure(autojump_clock, caplog):
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    async with roost.open_node(app) as node:
        await process.with_options(id="set").spawn(returns_a_set)
        failure = await _until_failed(node, "set", attempt=2)  # and it was retried
        assert failure.kind is roost.ErrorKind.INVALID
        assert "the workflow's result cannot be recorded" in failure.message
        assert "use a list" in failure.message
        assert failure.details["activation"] == 2
        def_line = int(line_of("def returns_a_set").rsplit(":", 1)[1])
        assert failure.details["location"].endswith(f"{HERE}:{def_line - 1}")  # its decorator
        assert node.describe("set")["status"] == "running"
        assert _tasks(node.history("set")) == [1]  # the step that called the activity
        assert await process.exec(steady, 3) == 30


@app.workflow
async def changes_an_argument_after_the_call():
    items = [1]
    handle = funcs.start(count, items)  # checked here: it encodes
    items.append({1, 2})  # but not any more when the activation commits
    return await handle


async def test_a_value_that_no_longer_encodes_at_the_commit_fails_the_task(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="mut").spawn(changes_an_argument_after_the_call)
        failure = await _until_failed(node, "mut")
        assert failure.kind is roost.ErrorKind.INVALID
        assert failure.details["stage"] == "commit"
        assert "could not be committed" in failure.message
        assert "cannot encode object of type 'set'" in failure.message
        assert node.history("mut") == []
        assert await process.exec(steady, 4) == 40


@app.workflow
async def starts_a_child_with_a_long_id():
    return await workflow.exec(steady, 1, id="c" * 600)


async def test_a_key_that_does_not_fit_the_store_never_stops_the_node(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="long").spawn(starts_a_child_with_a_long_id)
        while True:
            described = node.describe("long")
            if described["task_failure"] is not None or described["status"] != "running":
                break
            await trio.sleep(0.05)
        if described["task_failure"] is not None:  # the child's row could not be written
            failure = described["task_failure"]
            assert failure.details["stage"] == "commit"
            assert "511 bytes" in failure.message
            assert node.history("long") == []
        else:  # refused where the id was given: the workflow's own error (Invalid)
            assert described["status"] == "failed"
            assert described["error"].kind is roost.ErrorKind.INVALID
        assert [w["workflow_id"] for w in node.list_workflows()] == ["long"]  # no child
        assert await process.exec(steady, 5) == 50


# -- the store fails a commit --------------------------------------------------------------


def fail_commit_once(monkeypatch, node, run_id, index, exc):
    """Make the group commit that holds activation ``index`` of ``run_id`` fail once."""
    writer = node._node.store._writer
    real = writer._commit
    failed = []

    def commit(parent):
        row = parent.get(history_key(run_id, index), db=writer._dbs["histories"])
        if row is not None and not failed:
            failed.append(index)
            raise exc
        real(parent)

    monkeypatch.setattr(writer, "_commit", commit)
    return failed


@app.workflow
async def two_steps_and_a_timer():
    a = await funcs.call(count, 1)
    await roost.sleep(5)
    b = await funcs.call(count, 2)
    return [a, b]


async def test_a_commit_the_store_refuses_once_is_retried_and_nothing_is_lost_or_twice(
    autojump_clock, tmp_path, monkeypatch, caplog
):
    CALLS.clear()
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    async with roost.open_node(app, tmp_path) as node:
        pid = await process.with_options(id="disk").spawn_monitored(two_steps_and_a_timer)
        run_id = node.describe("disk")["run_id"]
        full = OSError(errno.ENOSPC, "No space left on device")
        failed = fail_commit_once(monkeypatch, node, run_id, 2, full)
        failure = await _until_failed(node, "disk")
        assert failed == [2]
        assert failure.kind is roost.ErrorKind.UNAVAILABLE
        assert failure.details["stage"] == "commit" and failure.details["activation"] == 2
        assert "is full" in failure.message and "free disk space" in failure.message
        assert _tasks(node.history("disk")) == [1]  # activation 2 was not stored
        assert await process.exec(steady, 9) == 90  # the node and the others go on
        exit_event = await process.events().receive()
        assert exit_event.pid == pid and exit_event.value == [10, 20]
        history = node.history("disk")
        assert node.describe("disk")["task_failure"] is None
    assert CALLS == [1, 9, 2]  # each activity once: the retry recorded the kept result
    assert _tasks(history) == [1, 2, 3, 4]
    kinds = [type(item).__name__ for item in history]
    assert kinds.count("ActivityResolved") == 2 and kinds.count("TimerFired") == 1
    assert any(r.exc_info and "is full" in r.getMessage() for r in caplog.records)


@app.workflow
async def waits_for_two():
    inbox = process.listen("n")
    return [await inbox.receive(), await inbox.receive()]


async def test_signals_the_store_refuses_once_are_stored_by_a_retry(
    autojump_clock, tmp_path, monkeypatch
):
    async with roost.open_node(app, tmp_path) as node:
        pid = await process.with_options(id="sig").spawn_monitored(waits_for_two)
        writer = node._node.store._writer
        real, failed = writer._commit, []

        def commit(parent):
            with parent.cursor(db=writer._dbs["inbox"]) as rows:
                holds_a_signal = rows.first()  # the run's inbox is empty until the signal
            if holds_a_signal and not failed:
                failed.append(1)
                raise OSError(errno.EIO, "Input/output error")
            real(parent)

        monkeypatch.setattr(writer, "_commit", commit)
        receipt = process.send(pid, "n", 1)
        await receipt  # acknowledged once stored: after the retry
        assert failed == [1]
        await process.send(pid, "n", 2)
        assert (await process.events().receive()).value == [1, 2]  # each once, in order


# -- divergence after a restart -------------------------------------------------------------

CUTOFF = [math.inf]


@app.workflow
async def reads_the_clock():
    if time.time() < CUTOFF[0]:  # not replay-safe: the answer differs after a restart
        await roost.sleep(60)
    else:
        await funcs.call(count, 3)
    return "done"


async def test_a_workflow_that_diverges_after_a_restart_shows_why_and_is_retried(
    autojump_clock, tmp_path, caplog
):
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    CUTOFF[0] = math.inf
    async with roost.open_node(app, tmp_path) as node:
        await process.with_options(id="clock").spawn(reads_the_clock)
        assert _tasks(node.history("clock")) == [1]  # it sleeps
    CUTOFF[0] = -math.inf  # after the restart, time.time() takes the other branch
    async with roost.open_node(app, tmp_path) as node:
        pid = await process.with_options(id="clock").spawn_monitored(reads_the_clock)
        failure = await _until_failed(node, "clock")
        assert isinstance(failure, roost.NondeterminismError)
        message = failure.message
        assert "diverged from its history in activation 1" in message
        assert "the code changed while the workflow was running" in message
        assert "workflow.version()" in message
        for advice in ("time.time()", "roost.now()", "random", "roost.random()", "activity"):
            assert advice in message
        assert failure.details["stage"] == "replay"
        assert failure.details["location"].endswith(line_of("funcs.call(count, 3)"))
        assert failure.details["recorded"] == "#1 start timer 60s"
        assert node.describe("clock")["status"] == "running"
        assert await process.exec(steady, 6) == 60  # the others go on
        again = await _until_failed(node, "clock", attempt=2)  # retried after the backoff
        assert again.details["retry_in"] == 2.0
        assert _tasks(node.history("clock")) == [1]  # its history is kept as it was
        CUTOFF[0] = math.inf  # the code replays again (as after a fix): the retry succeeds
        exit_event = await process.events().receive()
        assert exit_event.pid == pid and exit_event.value == "done"
        assert node.describe("clock")["task_failure"] is None
    diverged = [r for r in caplog.records if "diverged" in r.getMessage()]
    assert len(diverged) >= 2 and all(r.levelno == logging.ERROR for r in diverged)


@app.workflow
async def leaves_a_coroutine_that_fails_to_close():
    async def helper():
        try:
            await roost.sleep(3600)
        finally:
            raise RuntimeError("cleanup failed")

    coroutine.spawn(helper)
    await roost.sleep(1)
    return "returned"  # the helper, still blocked, is discarded with the run


async def test_a_coroutine_that_fails_as_it_is_discarded_is_logged(autojump_clock, caplog):
    caplog.set_level(logging.WARNING, logger="roost.workflow")
    async with roost.open_node(app, workflow_cache=1) as node:
        assert (
            await process.with_options(id="cl").exec(leaves_a_coroutine_that_fails_to_close)
            == "returned"
        )
        assert node.describe("cl")["task_failure"] is None
        assert await process.exec(steady, 8) == 80
    (record,) = [r for r in caplog.records if "raised while it was discarded" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.exc_info[0] is RuntimeError
