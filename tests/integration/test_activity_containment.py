"""Whatever an activity raises fails that attempt (Internal) and the retry policy decides.

Sync activities run in a worker thread on a real clock (under a MockClock they run inline),
so both paths are exercised: thread-backed tests use a real clock and a retry interval of a
few milliseconds (the retry itself is what is tested, nothing waits for wall time).
"""

import logging
import os
import signal

import pytest
import trio
from hostile_exceptions import BothRaiseError, StrRaisesError

import roost
from roost import funcs, process
from roost.storage._codec import MAX_DEPTH
from roost.testing import open_test_node
from roost.testing.strategies import nested

app = roost.App("contain")
attempts: list = []
FAST_TWICE = roost.RetryPolicy(initial_interval="5ms", maximum_attempts=2)


def hostile(what):
    """The exception for ``what``: each is something user code may raise."""
    return {
        "system_exit": SystemExit(3),
        "generator_exit": GeneratorExit(),
        "keyboard_interrupt": KeyboardInterrupt(),
        "surrogates": ValueError("bad \ud800 text"),
        "str_raises": StrRaisesError(),
        "both_raise": BothRaiseError(),
    }[what]


@app.activity(retry_policy=FAST_TWICE)
def sync_raises(what):
    attempts.append(("sync", what))
    raise hostile(what)


@app.activity(retry_policy=FAST_TWICE)
async def async_raises(what):
    attempts.append(("async", what))
    raise hostile(what)


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="5ms", maximum_attempts=3))
def unstorable_then_fine():
    attempts.append("unstorable")
    return {1, 2} if len(attempts) < 2 else ["fine"]


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def always_unstorable():
    return object()


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def nested_result(depth):
    return nested(depth)


@app.workflow
async def passes_on(depth):
    try:
        return await funcs.call(nested_result, depth)
    except roost.Error as err:
        return {"kind": err.kind}


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def raises_dirty_error():
    raise roost.Error("dirty \udc00", kind=roost.ErrorKind.CONFLICT, details={"s": {1}})


@app.workflow
async def calls(entry, *args):
    try:
        return {"value": await funcs.call(entry, *args)}
    except roost.Error as err:
        return {"kind": err.kind, "type": err.details.get("type"), "message": err.message}


@app.process
async def calls_directly(entry, what):
    try:
        await funcs.call(entry, what)
    except roost.Error as err:
        return {"kind": err.kind, "type": err.details.get("type"), "text": err.details["message"]}
    return None


EXPECTED = {
    "system_exit": ("SystemExit", "SystemExit: 3"),
    "generator_exit": ("GeneratorExit", "GeneratorExit"),
    "keyboard_interrupt": ("KeyboardInterrupt", "KeyboardInterrupt"),
    "surrogates": ("ValueError", "ValueError: bad \\ud800 text"),
    "str_raises": (
        "hostile_exceptions.StrRaisesError",
        "hostile_exceptions.StrRaisesError: <str() raised RuntimeError; repr: StrRaisesError()>",
    ),
    "both_raise": (
        "hostile_exceptions.BothRaiseError",
        (
            "hostile_exceptions.BothRaiseError: "
            "<str() raised RuntimeError, repr() raised RuntimeError>"
        ),
    ),
}


@pytest.fixture(autouse=True)
def _clear():
    attempts.clear()


@pytest.mark.parametrize("what", sorted(EXPECTED))
async def test_a_sync_activity_in_its_worker_thread_fails_the_attempt_whatever_it_raises(what):
    async with roost.open_node(app):
        result = await process.exec("contain:calls", "contain:sync_raises", what)
        kind, message = EXPECTED[what][0], EXPECTED[what][1]
        assert result == {"kind": roost.ErrorKind.INTERNAL, "type": kind, "message": message}
        assert attempts == [("sync", what)] * 2  # retried per its policy
        # The node goes on: another workflow runs to its end.
        assert await process.exec("contain:calls", "contain:unstorable_then_fine") == {
            "value": ["fine"]
        }


@pytest.mark.parametrize("what", sorted(EXPECTED))
async def test_an_async_activity_fails_the_attempt_whatever_it_raises(what, autojump_clock):
    async with open_test_node(app) as node:
        pid = await process.with_options(id=f"a-{what}").spawn_monitored(
            "contain:calls", "contain:async_raises", what
        )
        exit_event = await process.events().receive()
        assert exit_event.pid == pid
        kind, message = EXPECTED[what]
        assert exit_event.value == {"kind": "Internal", "type": kind, "message": message}
        assert attempts == [("async", what)] * 2
        # What was recorded replays: the stored errors decode.
        await node.restart()
        assert node.describe(f"a-{what}")["result"]["message"] == message


@pytest.mark.parametrize("what", sorted(EXPECTED))
async def test_a_direct_call_outside_workflows_raises_an_internal_error(what):
    async with roost.open_node(app):
        for entry in ("contain:sync_raises", "contain:async_raises"):
            if entry == "contain:async_raises" and what == "keyboard_interrupt":
                continue  # in trio's thread: may be a real Ctrl-C (see the test below)
            result = await process.exec("contain:calls_directly", entry, what)
            kind, message = EXPECTED[what]
            assert result["kind"] == roost.ErrorKind.INTERNAL and result["type"] == kind
            assert message.endswith(result["text"])


async def test_an_activity_result_has_the_payload_depth_limit(autojump_clock, tmp_path):
    # One limit for every payload: a result the workflow could not pass on as its own
    # result (one level deeper than MAX_DEPTH) fails the attempt, never the workflow's task.
    async with open_test_node(app, data_dir=tmp_path) as node:
        assert await process.exec(passes_on, MAX_DEPTH) == nested(MAX_DEPTH)
        refused = await process.with_options(id="too-deep").exec(passes_on, MAX_DEPTH + 1)
        assert refused == {"kind": roost.ErrorKind.INVALID}
        assert node.describe("too-deep")["task_failure"] is None
    async with open_test_node(app, data_dir=tmp_path) as node:
        assert node.describe("too-deep")["result"] == refused


async def test_an_unstorable_result_fails_the_attempt_and_is_retried_per_policy(autojump_clock):
    async with open_test_node(app):
        result = await process.exec("contain:calls", "contain:unstorable_then_fine")
        assert result == {"value": ["fine"]}
        assert attempts == ["unstorable", "unstorable"]
        failed = await process.exec("contain:calls", "contain:always_unstorable")
        assert failed["kind"] == roost.ErrorKind.INVALID
        assert (
            "attempt 1 returned a value that cannot be stored: result: cannot encode object "
            "of type 'object'" in failed["message"]
        )


async def test_a_roost_error_the_codec_refuses_reaches_the_workflow_cleaned(autojump_clock):
    async with open_test_node(app) as node:
        result = await process.with_options(id="dirty").exec(
            "contain:calls", "contain:raises_dirty_error"
        )
        assert result == {
            "kind": roost.ErrorKind.CONFLICT,
            "type": None,
            "message": "dirty \\udc00",
        }
        await node.restart()
        assert node.describe("dirty")["status"] == "completed"


# -- Ctrl-C -----------------------------------------------------------------------------------


@app.activity
async def presses_ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, delivered by trio's handler
    await trio.sleep(30)


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def raises_keyboard_interrupt():
    raise KeyboardInterrupt


def _stops_the_node(entry):
    async def main():
        async with roost.open_node(app):
            await process.exec("contain:calls", entry)

    with pytest.raises(BaseException) as stopped:
        trio.run(main)
    matched, _rest = (
        stopped.value.split(KeyboardInterrupt)
        if isinstance(stopped.value, BaseExceptionGroup)
        else (stopped.value, None)
    )
    assert matched is not None and stopped.errisinstance((KeyboardInterrupt, BaseExceptionGroup))


def test_a_real_ctrl_c_during_an_activity_stops_the_node():
    _stops_the_node("contain:presses_ctrl_c")


async def test_an_activity_raising_keyboard_interrupt_itself_fails_its_attempt(tmp_path):
    # Raised by the activity, not by trio's SIGINT handler: the attempt's failure, so the
    # node goes on, and a restart on the same data dir starts (roost._interrupt).
    for _ in range(2):
        async with roost.open_node(app, data_dir=tmp_path):
            result = await process.with_options(id="ki").exec(
                "contain:calls", "contain:raises_keyboard_interrupt"
            )
            assert result["kind"] == roost.ErrorKind.INTERNAL
            assert result["type"] == "KeyboardInterrupt"


# -- visible failures --------------------------------------------------------------------------


@app.activity
async def keeps_failing():
    info = roost.activity_info()
    if info.attempt < 18:
        raise ConnectionError(f"down (attempt {info.attempt})")
    return info.attempt


@app.activity
async def never_works():
    attempts.append("never")
    raise ConnectionError("still down")


async def test_failures_log_at_warning_first_then_at_growing_intervals(caplog, autojump_clock):
    caplog.set_level(logging.DEBUG, logger="roost.activity")
    async with open_test_node(app):
        wf = await process.with_options(id="flaky").exec("contain:calls", "contain:keeps_failing")
        assert wf == {"value": 18}
    records = [r for r in caplog.records if r.name == "roost.activity"]
    assert [r.attempt for r in records] == list(range(1, 18))
    loud = [r.attempt for r in records if r.levelno == logging.WARNING]
    assert loud == [1, 2, 4, 8, 16]
    assert {r.levelno for r in records if r.attempt not in loud} == {logging.INFO}
    first = records[0]
    assert (first.workflow_id, first.entry, first.error_kind) == (
        "flaky",
        "contain:keeps_failing",
        "Internal",
    )
    assert first.run_id and first.retry_in == 1.0
    assert "attempt 1" in first.getMessage() and "down (attempt 1)" in first.getMessage()
    assert "next warning comes at attempt 2" in first.getMessage()


async def test_describe_lists_pending_activities_with_their_last_error(autojump_clock):
    async with open_test_node(app) as node:
        pid = await process.with_options(id="stuck").spawn("contain:calls", "contain:never_works")
        await roost.sleep("10s")  # attempts at 0 s, 1 s, 3 s and 7 s failed; 15 s is next
        (pending,) = node.describe("stuck")["pending_activities"]
        assert pending["entry"] == "contain:never_works"
        assert pending["attempt"] == 5
        err = pending["last_error"]
        assert err.kind is roost.ErrorKind.INTERNAL
        assert err.details == {"type": "ConnectionError", "message": "still down"}
        start = pending["scheduled_at"]
        assert (pending["next_attempt_at"] - start).total_seconds() == pytest.approx(15)
        await node.restart()  # read from the store: the same after a restart
        assert node.describe("stuck")["pending_activities"][0]["attempt"] == 5
        process.terminate(pid)
        await node.wait_until_blocked()
        assert node.describe("stuck")["pending_activities"] == []
        # Its run closed while attempt 5 waited out its backoff: it never starts.
        tried = len(attempts)
        await roost.sleep("1h")
        assert len(attempts) == tried


async def test_list_workflows_shows_the_same_pending_activities(autojump_clock):
    async with open_test_node(app) as node:
        await process.with_options(id="stuck-a").spawn("contain:calls", "contain:never_works")
        await process.with_options(id="idle").spawn("contain:calls", "contain:unstorable_then_fine")
        await roost.sleep("10s")
        listed = {row["workflow_id"]: row for row in node.list_workflows()}
        assert (
            listed["stuck-a"]["pending_activities"]
            == node.describe("stuck-a")["pending_activities"]
        )
        assert listed["stuck-a"]["pending_activities"][0]["attempt"] == 5
        assert listed["idle"]["pending_activities"] == []


async def test_a_task_row_left_by_a_closed_run_is_deleted_without_running(autojump_clock):
    from roost.workflow._local._records import ActivityTask, task_key  # noqa: PLC0415 - raw rows

    async with open_test_node(app) as node:
        await process.with_options(id="done").exec("contain:calls", "contain:unstorable_then_fine")
        record = node.describe("done")
        stray = ActivityTask(
            workflow_id="done",
            run_id=record["run_id"],
            seq=99,
            entry="contain:never_works",
            args=[],
            options={},
            scheduled_at=record["closed_at"],
        )
        manager = node._node.local_workflows
        row = task_key(stray.run_id, stray.seq)
        await node._node.transact(lambda txn: txn.put("tasks", row, manager.codec.encode(stray)))
        attempts.clear()
        await node.restart()
        await roost.sleep("1h")
        with node._node.store.read() as txn:
            assert list(txn.range("tasks")) == []
        assert attempts == []
