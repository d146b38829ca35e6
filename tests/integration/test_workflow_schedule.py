"""Workflow timeouts, retries, cron schedules, start delays and cancellation status."""

import datetime as dt
import itertools
import logging
import time

import pytest
import trio.testing

import roost
from roost import funcs, process, workflow
from roost.testing import Replayer
from roost.workflow._local._phases import RunPhase

app = roost.App("sched")
seen: list = []


@app.activity
def record(what):
    seen.append(what)
    return what


@app.workflow
async def stamps(tag):
    """Returns when it began (workflow time) and which attempt this is."""
    info = workflow.info()
    await funcs.call("sched:record", (tag, info.attempt, roost.now()))
    return {"attempt": info.attempt, "at": roost.now()}


@app.workflow
async def flaky(fail_until, kind="Unavailable"):
    attempt = workflow.info().attempt
    await funcs.call("sched:record", ("flaky", attempt, roost.now()))
    if attempt < fail_until:
        raise roost.Error(f"attempt {attempt} failed", kind=kind)
    return attempt


@app.workflow
async def slow(seconds):
    attempt = workflow.info().attempt
    await roost.sleep(seconds if attempt == 1 else 1)
    return attempt


@app.workflow
async def inbox_reader(n):
    got = []
    inbox = process.listen("item")
    while len(got) < n:
        got.append(await inbox.receive())
    return {"items": got, "at": roost.now()}


def _times(tag):
    return [at for (t, _, at) in seen if t == tag]


async def test_start_delay_holds_the_first_task(autojump_clock, tmp_path):
    seen.clear()
    async with roost.open_node(app, tmp_path) as node:
        t0 = roost.now()
        delayed = process.with_options(id="late", start_delay="1h")
        pid = await delayed.spawn("sched:inbox_reader", 2)
        info = node.describe("late")
        assert info["status"] == "running"
        assert info["start_at"] == t0 + dt.timedelta(hours=1)
        await process.send(pid, "item", "a")  # accepted now, read once it starts
        await roost.sleep("20m")
        assert node.history("late") == []  # no code has run yet
    async with roost.open_node(app, tmp_path) as node:  # the delay survives a restart
        await process.send(pid, "item", "b")
        process.monitor(pid)
        result = (await process.events().receive()).value
        assert result["items"] == ["a", "b"]
        assert result["at"] >= t0 + dt.timedelta(hours=1)
        assert result["at"] < t0 + dt.timedelta(hours=1, seconds=1)


async def test_run_timeout_closes_the_run_as_timed_out(autojump_clock):
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="rt", run_timeout="30s").exec("sched:slow", 3600)
        assert info.value.kind is roost.ErrorKind.TIMEOUT
        assert info.value.details["timeout_type"] == "run"
        described = node.describe("rt")
        assert described["status"] == "timed_out"
        assert described["closed_at"] - described["started_at"] == dt.timedelta(seconds=30)


async def test_a_timed_out_run_is_retried_by_the_retry_policy(autojump_clock):
    async with roost.open_node(app) as node:
        options = {"id": "rt-retry", "run_timeout": "30s", "retry_policy": {"maximum_attempts": 3}}
        assert await process.with_options(options).exec("sched:slow", 3600) == 2
        assert node.describe("rt-retry")["attempt"] == 2


async def test_workflow_retry_policy_backs_off_and_gives_up(autojump_clock):
    seen.clear()
    policy = roost.RetryPolicy(initial_interval="10s", backoff_coefficient=2.0)
    async with roost.open_node(app) as node:
        retried = process.with_options(id="fl-1", retry_policy=policy)
        assert await retried.exec("sched:flaky", 3) == 3
        starts = _times("flaky")
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
        assert gaps == [10.0, 20.0]  # a new run after each backoff, attempt counting up
        assert node.describe("fl-1")["attempt"] == 3
        # maximum_attempts: the last run's error is the workflow's error
        seen.clear()
        capped = process.with_options(
            id="fl-2", retry_policy={"initial_interval": "1s", "maximum_attempts": 2}
        )
        with pytest.raises(roost.Error) as info:
            await capped.exec("sched:flaky", 5)
        assert info.value.message == "attempt 2 failed"
        assert len(_times("flaky")) == 2
        # a non-retryable kind ends it at once
        seen.clear()
        strict = process.with_options(
            id="fl-3", retry_policy={"non_retryable_error_kinds": ["PermissionDenied"]}
        )
        with pytest.raises(roost.Error) as info:
            await strict.exec("sched:flaky", 5, "PermissionDenied")
        assert info.value.kind is roost.ErrorKind.PERMISSION_DENIED
        assert len(_times("flaky")) == 1
        assert node.describe("fl-3")["status"] == "failed"


@app.workflow
async def renews(period):
    await roost.sleep(period)
    await process.upgrade(None, period)


async def test_execution_timeout_spans_continue_as_new(autojump_clock):
    async with roost.open_node(app) as node:
        t0 = roost.now()
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="ex", execution_timeout="25s").exec("sched:renews", 10)
        assert info.value.details["timeout_type"] == "execution"
        described = node.describe("ex")
        assert described["status"] == "timed_out"
        assert described["closed_at"] - t0 == dt.timedelta(seconds=25)
        assert described["started_at"] - t0 == dt.timedelta(seconds=20)  # the third run


async def test_retries_stop_at_the_execution_deadline(autojump_clock):
    seen.clear()
    async with roost.open_node(app):
        options = {
            "id": "ex-retry",
            "execution_timeout": "1m",
            "retry_policy": {"initial_interval": "25s", "backoff_coefficient": 1.0},
        }
        with pytest.raises(roost.Error) as info:
            await process.with_options(options).exec("sched:flaky", 100)
        assert info.value.message == "attempt 3 failed"  # 0 s, 25 s, 50 s; 75 s is too late
        assert len(_times("flaky")) == 3


async def test_cron_schedule_runs_on_schedule_until_terminated(autojump_clock):
    seen.clear()
    async with roost.open_node(app) as node:
        pid = await process.with_options(
            id="every-10s", cron_schedule="*/10 * * * * *"
        ).spawn_monitored("sched:stamps", "cron")
        assert node.describe("every-10s")["start_at"].second % 10 == 0
        await roost.sleep(45)
        starts = _times("cron")
        assert len(starts) in (4, 5)
        assert all(at.second % 10 == 0 and at.microsecond == 0 for at in starts)
        gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(starts)}
        assert gaps == {10.0}
        assert {attempt for (t, attempt, _) in seen if t == "cron"} == {1}
        process.terminate(pid)
        event = await process.events().receive()  # the schedule ends only now
        assert event.error.kind is roost.ErrorKind.CANCELED
        count = len(_times("cron"))
        await roost.sleep(60)
        assert len(_times("cron")) == count


async def test_a_failed_cron_run_does_not_stop_the_schedule(autojump_clock):
    seen.clear()
    async with roost.open_node(app) as node:
        await process.with_options(id="hourly", cron_schedule="0 * * * *").spawn("sched:flaky", 2)
        await roost.sleep("3h")
        starts = _times("flaky")
        assert len(starts) == 3
        assert all(at.minute == 0 and at.second == 0 for at in starts)
        assert node.describe("hourly")["status"] == "running"


@pytest.mark.parametrize(
    "bad", ["* * * *", "61 * * * *", "* * * * * * * *", "0 0 0 30 2 * 2030", 5]
)
async def test_bad_cron_expressions_are_invalid(autojump_clock, bad):
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="bad-cron", cron_schedule=bad).spawn("sched:stamps", "x")
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error):
            node.describe("bad-cron")  # nothing was stored


ATTEMPTS: list = []


@app.workflow
async def hogs_the_thread():
    ATTEMPTS.append(1)
    if len(ATTEMPTS) == 1:  # the first task computes for too long without yielding
        end = time.monotonic() + 20
        while time.monotonic() < end:
            pass
    return len(ATTEMPTS)


async def test_task_timeout_fails_the_task_and_retries_it(autojump_clock, caplog):
    ATTEMPTS.clear()
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    async with roost.open_node(app) as node:
        started = time.monotonic()
        result = await process.with_options(id="hog", task_timeout="0.3s").exec(
            "sched:hogs_the_thread"
        )
        assert time.monotonic() - started < 20  # stopped, not run for its full 20 s
        assert result == 2  # the retried task ran the code again, from the start
        messages = [r.getMessage() for r in caplog.records]
        assert any(
            "'hog'" in m and "task_timeout of 0.3s" in m and "test_workflow_schedule.py:" in m
            for m in messages
        ), messages
        assert node.describe("hog")["task_failure"] is None  # cleared by the success
        # Nothing of the failed task was kept: one activation, from the successful try.
        history = node.history("hog")
        assert [item.index for item in history if type(item).__name__ == "WorkflowTask"] == [1]


STARTS: list[float] = []


@app.workflow
async def hogs_twice():
    STARTS.append(trio.current_time())
    if len(STARTS) <= 2:  # two tasks in a row compute for too long without yielding
        end = time.monotonic() + 20
        while time.monotonic() < end:
            pass
    return len(STARTS)


async def test_a_timed_out_task_waits_ten_times_as_long_as_it_held_the_loop(autojump_clock, caplog):
    STARTS.clear()
    caplog.set_level(logging.ERROR, logger="roost.workflow")
    async with roost.open_node(app):
        result = await process.with_options(id="hog2", task_timeout="0.3s").exec("sched:hogs_twice")
    assert result == 3
    # Virtual time: the backoffs alone, never shorter than 10x the 0.3 s each task held
    # the loop (more than the 1 s and 2 s of the plain task backoff).
    assert STARTS[1] - STARTS[0] >= 3.0
    assert STARTS[2] - STARTS[1] >= 3.0
    failures = [r for r in caplog.records if "task_timeout of 0.3s" in r.getMessage()]
    assert len(failures) == 2
    assert "held the event loop for" in failures[0].getMessage()


@app.workflow
async def cancellable():
    event = await process.events().receive()
    return f"stopped: {event.reason}"


async def test_returning_after_a_cancel_is_recorded_as_canceled(autojump_clock):
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="cx").spawn_monitored("sched:cancellable")
        process.cancel(pid, "user asked")
        event = await process.events().receive()
        assert event.value == "stopped: user asked"
        described = node.describe("cx")
        assert (described["status"], described["result"]) == ("canceled", "stopped: user asked")
        assert [w["workflow_id"] for w in node.list_workflows("status = 'canceled'")] == ["cx"]


@app.workflow
async def parent_with_options():
    first = await workflow.exec(
        "sched:flaky", 2, id="child-retry", retry_policy={"initial_interval": "5s"}
    )
    try:
        await workflow.exec("sched:slow", 3600, id="child-timeout", run_timeout="1m")
    except roost.Error as err:
        timed_out = err.details["timeout_type"]
    try:
        await workflow.exec("sched:slow", 1, mailbox_limit=3)
    except roost.Error as err:
        bad = err.kind
    return [first, timed_out, bad]


async def test_child_workflows_take_start_options(autojump_clock):
    async with roost.open_node(app) as node:
        result = await process.with_options(id="opt-parent").exec("sched:parent_with_options")
        assert result == [2, "run", roost.ErrorKind.INVALID]
        assert node.describe("child-retry")["attempt"] == 2
        assert node.describe("child-timeout")["status"] == "timed_out"
        assert Replayer(app).replay(node.history("opt-parent")) == result


async def test_summary_and_details_are_described(autojump_clock):
    async with roost.open_node(app) as node:
        spawner = process.with_options(id="sd", summary="nightly report", details="for ops")
        await spawner.exec("sched:stamps", "sd")
        described = node.describe("sd")
        assert (described["summary"], described["details"]) == ("nightly report", "for ops")
        await trio.testing.wait_all_tasks_blocked()


@app.workflow
async def grows(round_):
    before = workflow.is_continue_as_new_suggested()
    for i in range(10_000):  # cheap recorded commands, to grow the history
        workflow.version(f"change-{i}", 1, 1)
    await roost.sleep(1)
    after = workflow.is_continue_as_new_suggested()
    if round_ == 0 and after:
        await process.upgrade(None, 1)
    return {"round": round_, "before": before, "after": after}


async def test_continue_as_new_is_suggested_for_long_histories(autojump_clock):
    assert workflow.is_continue_as_new_suggested() is False  # outside a workflow
    async with roost.open_node(app) as node:
        result = await process.with_options(id="grows").exec("sched:grows", 0)
        assert result == {"round": 1, "before": False, "after": True}
        assert Replayer(app).replay(node.history("grows")) == result


async def _settle_a_fake_timer(node, workflow_id, waiting=2):
    """Store a timer row for the run and settle it: its event waits for the held run."""
    from roost.workflow._history import TimerFired  # noqa: PLC0415 - internals under test
    from roost.workflow._local._records import TimerTask, timer_key  # noqa: PLC0415

    manager = node._node.local_workflows
    run = manager.runs[workflow_id]
    timer = TimerTask(workflow_id=workflow_id, run_id=run.record.run_id, seq=7, due=roost.now())
    row = timer_key(timer.due, timer.run_id, timer.seq)
    await node._node.transact(lambda txn: txn.put("timers", row, manager.codec.encode(timer)))
    await manager.incoming.settle(
        "timers", row, (workflow_id, run.record.run_id), TimerFired(seq=7)
    )
    assert len(run.pending) == waiting  # the timer's event (and the start): the run is held
    return row


def _stored_timer(node, row):
    with node._node.store.read() as txn:
        return txn.get("timers", row)


async def test_a_row_settled_for_a_run_that_closes_before_recording_it_is_deleted(
    autojump_clock, tmp_path
):
    """A fired timer's event waits for the run's next step; if the run closes first (here:
    terminated while its start is delayed), the timer's row must not stay behind."""
    async with roost.open_node(app, tmp_path) as node:
        pid = await process.with_options(id="held", start_delay="1h").spawn("sched:inbox_reader", 1)
        row = await _settle_a_fake_timer(node, "held")
        process.monitor(pid)
        process.terminate(pid)
        await process.events().receive()
        await trio.testing.wait_all_tasks_blocked()
        assert _stored_timer(node, row) is None


async def test_a_row_settled_for_a_run_that_is_retried_before_recording_it_is_deleted(
    autojump_clock, tmp_path
):
    """The same when the run times out and its retry takes over the workflow id."""
    async with roost.open_node(app, tmp_path) as node:
        retried = process.with_options(
            id="retried", run_timeout="30m", retry_policy={"maximum_attempts": 2}
        )
        await retried.spawn("sched:inbox_reader", 1)
        await trio.testing.wait_all_tasks_blocked()  # started, waiting for its message
        first = node._node.local_workflows.runs["retried"]
        # Pinned held (no transition leads there), so the settled event is still waiting
        # at the timeout.
        first.enter_phase(RunPhase.HELD)
        row = await _settle_a_fake_timer(node, "retried", waiting=1)
        await roost.sleep("31m")
        await trio.testing.wait_all_tasks_blocked()
        assert node._node.local_workflows.runs["retried"] is not first  # the retry took over
        assert _stored_timer(node, row) is None


@app.workflow
async def two_times():
    before = roost.now()
    await roost.sleep("1s")
    return [before.isoformat(), roost.now().isoformat()]


async def test_now_never_goes_back_within_a_run_when_the_clock_jumps_back(autojump_clock):
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="jumps").spawn_monitored("sched:two_times")
        await trio.testing.wait_all_tasks_blocked()  # the first activation is committed
        node._node._wall0 -= dt.timedelta(hours=1)  # the wall clock jumps back an hour
        event = await process.events().receive()
        assert event.pid == pid and event.error is None
        before, after = (dt.datetime.fromisoformat(t) for t in event.value)
        assert after >= before
        # Recorded so: the history's activation times do not go back either.
        times = [item.at for item in node.history("jumps") if type(item).__name__ == "WorkflowTask"]
        assert times == sorted(times) and len(times) == 2
