"""Durable workflows on a real node and LMDB store, through the public API."""

import pytest
import trio
import trio.testing

import roost
from roost import channel, ctx, funcs, process, workflow
from roost.testing import Replayer, load_history, save_history

app = roost.App("wf")
log: list = []


@app.activity
def charge(amount):
    info = roost.activity_info()
    log.append(("charge", amount, info.attempt, info.idempotency_key, ctx.get("tenant")))
    if amount < 0:
        raise roost.Error("negative amount", kind=roost.ErrorKind.INVALID, retryable=False)
    if amount == 13 and info.attempt < 3:
        raise ConnectionError("flaky provider")
    return {"charged": amount}


@app.activity(start_to_close_timeout="2s", retry_policy=roost.RetryPolicy(maximum_attempts=2))
async def slow():
    await trio.sleep(10)


@app.activity
async def ship(order_id):
    log.append(("ship", order_id))
    return f"shipped {order_id}"


@app.workflow
async def order(order_id, amount):
    receipt = await funcs.call("wf:charge", amount)
    await roost.sleep("1h")
    shipped = await funcs.call(ship, order_id)
    return {"receipt": receipt, "shipped": shipped, "id": workflow.info().workflow_id}


@app.activity
async def note(what):
    log.append(("note", what))
    return what


@app.workflow
async def two_steps(name):
    first = await funcs.call("wf:note", f"{name}: before the hour")
    await roost.sleep("1h")
    second = await funcs.call("wf:note", f"{name}: after the hour")
    return [first, second]


@app.workflow
async def refunding(amount):
    try:
        await funcs.call("wf:charge", amount)
    except roost.Error as err:
        return {"refund": True, "kind": err.kind, "message": err.message}
    return {"refund": False}


@app.workflow
async def times_out():
    try:
        await funcs.call("wf:slow")
    except roost.Error as err:
        return (err.kind, err.details.get("timeout_type"))
    return None


@app.workflow
async def approval(wait_for):
    inbox = process.listen("approve", message=True)
    got = await channel.select(inbox, roost.after(wait_for))
    if got.index == 1:
        return "timed out"
    msg = got.value
    process.send(msg.sender, "ack", "approved")
    return f"approved by {msg.payload}"


@app.workflow
async def counter(n):
    total = 0
    for _ in range(n):
        total += await process.listen("add").receive()
    return total


@app.workflow
async def cancellable():
    ev = await process.events().receive()
    return f"stopped: {ev.reason}"


@app.workflow
async def forever():
    await process.inbox().receive()


@app.workflow
async def with_context():
    return {"wf": ctx.get("tenant"), "activity": (await funcs.call("wf:charge", 1))}


@app.workflow
async def bad_input_child(x):
    return x


@pytest.fixture(autouse=True)
def clear_log():
    log.clear()


async def next_event():
    return await process.events().receive()


async def test_activities_timers_and_result(autojump_clock):
    async with roost.open_node(app):
        pid = await process.with_options(id="order-1").spawn_monitored("wf:order", "o-1", 42)
        assert pid == roost.Pid("local", "wf:workflows", "order-1")
        ev = await next_event()
        assert ev.pid == pid and ev.error is None
        assert ev.value == {"receipt": {"charged": 42}, "shipped": "shipped o-1", "id": "order-1"}
        assert log[0][3].startswith("order-1/")  # stable idempotency key


async def test_exec_returns_the_result_or_raises(autojump_clock):
    async with roost.open_node(app):
        assert (await process.exec("wf:refunding", -5))["kind"] == roost.ErrorKind.INVALID
        result = await process.exec("wf:order", "o-2", 13)  # fails twice, then succeeds
        assert result["receipt"] == {"charged": 13}
        attempts = [e[2] for e in log if e[0] == "charge" and e[1] == 13]
        assert attempts == [1, 2, 3]


async def test_non_retryable_error_is_not_retried(autojump_clock):
    async with roost.open_node(app):
        result = await process.exec("wf:refunding", -1)
        assert result == {
            "refund": True,
            "kind": roost.ErrorKind.INVALID,
            "message": "negative amount",
        }
        assert [e for e in log if e[1] == -1] == [log[0]]
        assert len(log) == 1


async def test_activity_timeout_is_a_timeout_error(autojump_clock):
    async with roost.open_node(app):
        assert await process.exec("wf:times_out") == [roost.ErrorKind.TIMEOUT, "start_to_close"]


async def test_signals_select_and_replies(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("wf:approval", "1h")
        receipt = process.send(pid, "approve", "alice")
        await receipt  # durable in the workflow's history
        assert receipt.accepted
        assert await process.listen("ack").receive() == "approved"
        assert (await next_event()).value == "approved by alice"
        late = await process.spawn_monitored("wf:approval", "10m")
        assert (await next_event()).value == "timed out"
        with pytest.raises(roost.Error) as info:
            process.send(late, "approve", "too late")  # closed: not a running workflow
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_signals_keep_per_sender_order(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("wf:counter", 50)
        for i in range(50):
            process.send(pid, "add", i)
        assert (await next_event()).value == sum(range(50))


async def test_bad_payloads_and_inputs_are_invalid_and_store_nothing(autojump_clock):
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as info:
            await process.spawn("wf:bad_input_child", {1, 2})
        assert info.value.kind is roost.ErrorKind.INVALID
        pid = await process.spawn("wf:counter", 1)
        with pytest.raises(roost.Error) as info:
            process.send(pid, "add", object())
        assert info.value.kind is roost.ErrorKind.INVALID
        assert node.describe(pid.id)["status"] == "running"
        assert [w["workflow_id"] for w in node.list_workflows()] == [pid.id]


async def test_monitor_finished_workflow_gets_recorded_result(autojump_clock):
    async with roost.open_node(app):
        pid = await process.with_options(id="done-1").spawn("wf:counter", 0)
        await roost.sleep(1)
        process.monitor(pid)
        ev = await next_event()
        assert (ev.pid, ev.value, ev.error) == (pid, 0, None)
        ghost = roost.Pid("local", "wf:workflows", "never-existed")
        process.monitor(ghost)
        assert (await next_event()).error.details["reason"] == "noproc"


async def test_cancel_and_terminate(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("wf:cancellable")
        process.cancel(pid, "user asked")
        assert (await next_event()).value == "stopped: user asked"
        stuck = await process.spawn_monitored("wf:forever")
        process.terminate(stuck)
        ev = await next_event()
        assert ev.error.kind is roost.ErrorKind.CANCELED
        assert ev.error.message == "terminated"


async def test_link_to_failing_workflow(autojump_clock):
    async with roost.open_node(app):
        process.set_options(trap_links=True)
        pid = await process.spawn_linked("wf:forever")
        process.terminate(pid)
        ev = await next_event()
        assert isinstance(ev, roost.LinkDown) and ev.pid == pid


async def test_explicit_id_is_a_singleton_generated_ids_are_unique(autojump_clock):
    async with roost.open_node(app):
        spawner = process.with_options(id="count").with_message("add", 5)
        first = await spawner.spawn("wf:counter", 2)
        second = await spawner.spawn("wf:counter", 99)  # use_existing: input ignored
        assert first == second
        process.monitor(first)
        assert (await next_event()).value == 10
        a = await process.spawn("wf:forever")
        b = await process.spawn("wf:forever")
        assert a != b
        with pytest.raises(roost.Error) as info:
            await process.with_options(id=a.id, id_conflict_policy="fail").spawn("wf:forever")
        assert info.value.kind is roost.ErrorKind.ALREADY_EXISTS


async def test_context_reaches_workflow_and_activities(autojump_clock):
    async with roost.open_node(app):
        result = await process.with_context({"tenant": "acme"}).exec("wf:with_context")
        assert result == {"wf": "acme", "activity": {"charged": 1}}
        assert log[-1][4] == "acme"


async def test_workflow_survives_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        pid = await process.with_options(id="restart-1").spawn("wf:two_steps", "w")
        await roost.sleep("10m")  # the first step ran; the 1 h timer is pending
    assert log == [("note", "w: before the hour")]
    start = trio.current_time()
    async with roost.open_node(app, tmp_path) as node:
        process.monitor(pid)
        ev = await next_event()
        assert ev.value == ["w: before the hour", "w: after the hour"]
        # The timer kept its stored due time, and the first step did not run again.
        assert trio.current_time() - start == pytest.approx(50 * 60, abs=1)
        assert log == [("note", "w: before the hour"), ("note", "w: after the hour")]
        kinds = [type(e).__name__ for e in node.history("restart-1")]
        assert kinds[:4] == ["WorkflowTask", "Started", "ScheduleActivity", "WorkflowTask"]
        kinds = [k for k in kinds if k != "WorkflowTask"]
        assert kinds[:3] == ["Started", "ScheduleActivity", "ActivityResolved"]
        assert kinds[-1] == "Complete"


async def test_signals_and_inbox_survive_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        pid = await process.with_options(id="sum").spawn("wf:counter", 3)
        await process.send(pid, "add", 1)
        await process.send(pid, "add", 2)
    async with roost.open_node(app, tmp_path):
        await process.send(pid, "add", 3)
        process.monitor(pid)
        assert (await next_event()).value == 6


async def test_describe_and_list(autojump_clock):
    async with roost.open_node(app) as node:
        done = await process.with_options(id="d-1").spawn_monitored("wf:counter", 0)
        await next_event()
        await process.with_options(id="r-1").spawn("wf:forever")
        await roost.sleep(1)
        info = node.describe("d-1")
        assert info["status"] == "completed" and info["result"] == 0
        assert info["workflow_type"] == "wf:counter"
        running = node.list_workflows("status = 'running'")
        assert [w["workflow_id"] for w in running] == ["r-1"]
        assert {w["workflow_id"] for w in node.list_workflows()} == {"d-1", "r-1"}
        with pytest.raises(roost.Error) as info:
            node.describe("nope")
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        assert done.id == "d-1"


async def test_calls_refused_inside_workflows(autojump_clock):
    @app.workflow
    async def refuses():
        kinds = []
        for call in (lambda: process.monitor(process.pid()), lambda: process.link("x")):
            try:
                call()
            except roost.Error as err:
                kinds.append(err.kind)
        return kinds

    async with roost.open_node(app):
        assert await process.exec(refuses) == [roost.ErrorKind.INVALID] * 2


async def test_evicted_workflows_are_rebuilt_by_replay(autojump_clock):
    async with roost.open_node(app, workflow_cache=1) as node:
        pids = [await process.spawn_monitored("wf:counter", 3) for _ in range(3)]
        for round_ in range(3):
            for pid in pids:  # interleave: every activation evicts another run's state
                await process.send(pid, "add", round_ + 1)
        results = sorted([(await next_event()).value for _ in pids])
        assert results == [6, 6, 6]
        stats = node._node.local_workflows.stats
        assert stats["evictions"] > 0
        assert stats["replays"] >= stats["evictions"]
        with pytest.raises(roost.Error):
            async with roost.open_node(app, workflow_cache=0):
                pass


ONE_TRY = roost.RetryPolicy(maximum_attempts=1)


@app.activity(heartbeat_timeout="2s", retry_policy=ONE_TRY)
async def beating(beats):
    for _ in range(beats):
        await trio.sleep(1)
        roost.heartbeat({"progress": "ok"})
    await trio.sleep(5)  # then goes silent
    return "done"


@app.activity(heartbeat_timeout="2s", retry_policy=ONE_TRY)
def beating_in_a_thread():
    for _ in range(3):
        roost.heartbeat()
    return "thread beat"


@app.activity(
    schedule_to_close_timeout="5s",
    retry_policy=roost.RetryPolicy(initial_interval="2s", backoff_coefficient=1.0),
)
def always_failing():
    log.append(("failing", roost.activity_info().attempt))
    raise ConnectionError("down")


@app.workflow
async def runs_activity(name, *args):
    try:
        return await funcs.call(name, *args)
    except roost.Error as err:
        return (err.kind, err.details.get("timeout_type"), err.details.get("attempt"))


async def test_heartbeats_keep_an_activity_alive_and_silence_times_it_out(autojump_clock):
    async with roost.open_node(app):
        start = trio.current_time()
        result = await process.exec("wf:runs_activity", "wf:beating", 4)
        assert result == [roost.ErrorKind.TIMEOUT, "heartbeat", 1]
        assert trio.current_time() - start == pytest.approx(6)  # 4 beats, then 2 s silence
        assert await process.exec("wf:runs_activity", "wf:beating_in_a_thread") == "thread beat"
        with pytest.raises(roost.Error) as info:
            roost.heartbeat()
        assert info.value.kind is roost.ErrorKind.INVALID_STATE


async def test_schedule_to_close_bounds_all_attempts(autojump_clock):
    async with roost.open_node(app):
        result = await process.exec("wf:runs_activity", "wf:always_failing")
        assert result[:2] == [roost.ErrorKind.TIMEOUT, "schedule_to_close"]
        assert [a for _, a in log] == [1, 2, 3]  # at 0 s, 2 s, 4 s; the next would pass 5 s


async def test_bad_activity_options_are_invalid():
    with pytest.raises(roost.Error) as info:
        app.activity(name="bad1", retry_policy="often")(lambda: None)
    assert info.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        app.activity(name="bad2", start_to_close_timeout="soon")(lambda: None)
    with pytest.raises(roost.Error):
        funcs.new().with_options(colour="red")
    with pytest.raises(roost.Error):
        roost.RetryPolicy(backoff_coefficient=0.5)
    with pytest.raises(roost.Error):
        roost.RetryPolicy(non_retryable_error_kinds=["Nope"])


@app.process
async def helper_proc(n):
    await roost.sleep(1)
    if n < 0:
        raise ValueError("negative")
    return n * 10


@app.workflow
async def spawns_helpers():
    a = await process.spawn("wf:helper_proc", 1)
    b = await process.spawn_monitored("wf:helper_proc", -1)
    results = {}
    events = process.events()
    while len(results) < 2:
        ev = await events.receive()
        results[ev.pid] = ev.value if ev.error is None else ev.error.message
    return [results[a], results[b]]


async def test_workflows_spawn_monitored_plain_processes(autojump_clock):
    async with roost.open_node(app) as node:
        assert await process.exec("wf:spawns_helpers") == [10, "ValueError: negative"]
        history = [type(e).__name__ for e in node.history(node.list_workflows()[0]["workflow_id"])]
        assert history.count("SpawnProcess") == 2
        assert history.count("ProcessExited") == 2


async def test_id_policies(autojump_clock):
    async with roost.open_node(app) as node:
        first = await process.with_options(id="p-1").spawn("wf:forever")
        # terminate_existing: the running one closes as terminated, a new run starts
        again = await process.with_options(id="p-1", id_conflict_policy="terminate_existing").spawn(
            "wf:counter", 0
        )
        assert again == first
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="p-2", execution_error_when_already_started=True).spawn(
                "wf:forever"
            )
            await process.with_options(id="p-2", execution_error_when_already_started=True).spawn(
                "wf:forever"
            )
        assert info.value.kind is roost.ErrorKind.ALREADY_EXISTS
        await roost.sleep(1)
        assert node.describe("p-1")["status"] == "completed"
        # closed: reuse policies decide
        with pytest.raises(roost.Error) as info:
            await process.with_options(id="p-1", id_reuse_policy="reject_duplicate").spawn(
                "wf:counter", 0
            )
        assert info.value.kind is roost.ErrorKind.ALREADY_EXISTS
        with pytest.raises(roost.Error):
            await process.with_options(
                id="p-1", id_reuse_policy="allow_duplicate_failed_only"
            ).spawn("wf:counter", 0)
        await process.with_options(id="p-1").spawn("wf:counter", 0)  # allow_duplicate
        for bad in (
            {"id_conflict_policy": "sometimes"},
            {"cron_schedule": "* * * *"},
            {"run_timeout": "soon"},
            {"retry_policy": {"backoff_coefficient": 0.5}},
            {"parent_close_policy": "never"},
            {"id": ""},
            {"task_queue": 3},
        ):
            with pytest.raises(roost.Error) as info:
                await process.with_options(bad).spawn("wf:forever")
            assert info.value.kind is roost.ErrorKind.INVALID


async def test_terminated_status(autojump_clock):
    async with roost.open_node(app) as node:
        pid = await process.spawn_monitored("wf:forever")
        process.terminate(pid)
        await next_event()
        assert node.describe(pid.id)["status"] == "terminated"
        assert node.list_workflows("status = 'terminated'")[0]["workflow_id"] == pid.id


@app.workflow
async def waits_for_child():
    await process.spawn("wf:helper_proc", 5)
    ev = await process.events().receive()
    return ev.error.details["reason"] if ev.error else ev.value


async def test_children_lost_in_a_restart_are_reported(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path, shutdown_grace=0):
        pid = await process.with_options(id="parent-1").spawn("wf:waits_for_child")
        await trio.testing.wait_all_tasks_blocked()
    async with roost.open_node(app, tmp_path):
        process.monitor(pid)
        assert (await next_event()).value == "node restart"


async def test_unknown_workflow_type_does_not_stop_recovery(autojump_clock, tmp_path):
    other = roost.App("wf")
    other.workflow(forever)
    async with roost.open_node(other, tmp_path):
        await process.with_options(id="orphan").spawn("wf:forever")
    bare = roost.App("wf")  # no such workflow entry any more
    async with roost.open_node(bare, tmp_path) as node:
        assert node.describe("orphan")["status"] == "running"


async def ship_first(order_id, amount):  # a "code change" that reorders the steps
    await funcs.call(ship, order_id)
    await funcs.call("wf:charge", amount)


async def test_replayer_checks_recorded_histories_against_code(autojump_clock, tmp_path):
    async with roost.open_node(app) as node:
        await process.with_options(id="replay-1").exec("wf:order", "o-5", 5)
        await process.with_options(id="replay-2").exec("wf:spawns_helpers")
        history = node.history("replay-1")
        helpers_history = node.history("replay-2")
    replayer = Replayer(app)
    expected = {"receipt": {"charged": 5}, "shipped": "shipped o-5", "id": "replay-1"}
    assert replayer.replay(history) == expected
    assert replayer.replay(helpers_history) == [10, "ValueError: negative"]
    path = save_history(history, tmp_path / "replay-1.cbor")
    assert replayer.replay(load_history(path)) == expected
    assert replayer.replay_many([history, helpers_history]) == [
        expected,
        [10, "ValueError: negative"],
    ]
    changed = roost.App("wf")
    changed.workflow(name="order")(ship_first)
    changed.activity(ship)
    with pytest.raises(roost.NondeterminismError) as info:
        Replayer(changed).replay(history)
    assert info.value.details["issued"] == "#1 schedule activity 'wf:ship'"
    assert info.value.details["recorded"] == "#1 schedule activity 'wf:charge'"
    assert "test_workflows.py" in info.value.details["location"]
    (tmp_path / "junk.cbor").write_bytes(b"\xff\x00")
    with pytest.raises(roost.Error) as info:
        load_history(tmp_path / "junk.cbor")
    assert info.value.kind is roost.ErrorKind.INVALID


@app.workflow
async def explodes():
    await funcs.call("wf:note", "about to fail")
    raise KeyError("boom")


async def test_replay_of_a_failed_workflow_raises_its_error(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="fails").spawn_monitored("wf:explodes")
        await next_event()
        await process.with_options(id="unknown").exec("wf:runs_activity", "wf:nope")
        pid = await process.with_options(id="stuck").spawn_monitored("wf:forever")
        await roost.sleep(1)  # let it start before terminating it
        process.terminate(pid)
        await next_event()
        histories = [node.history(i) for i in ("fails", "unknown", "stuck")]
    replayer = Replayer(app)
    with pytest.raises(roost.Error) as info:
        replayer.replay(histories[0])
    assert info.value.kind is roost.ErrorKind.INTERNAL
    assert "KeyError" in info.value.message
    kind, _, _ = replayer.replay(histories[1])  # the unknown entry failed at the call site
    assert kind == roost.ErrorKind.NOT_FOUND  # as recorded: the kind's value
    assert replayer.replay(histories[2]) is None  # terminated: its code never finished


@app.workflow
async def tagged(customer):
    workflow.attrs(search={"customer_id": customer, "tags": ["vip", "eu"]}, memo={"note": "hi"})
    await process.inbox().receive()


async def test_search_attributes_and_memo(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="t-1").spawn("wf:tagged", "c-1")
        await process.with_options(id="t-2", search_attributes={"region": "us"}).spawn(
            "wf:tagged", "c-2"
        )
        await roost.sleep(1)
        hits = node.list_workflows("status = 'running' and customer_id = 'c-1'")
        assert [w["workflow_id"] for w in hits] == ["t-1"]
        assert [w["workflow_id"] for w in node.list_workflows("tags = 'vip'")] == ["t-1", "t-2"]
        assert [w["workflow_id"] for w in node.list_workflows("region = 'us'")] == ["t-2"]
        assert node.describe("t-1")["memo"] == {"note": "hi"}
        with pytest.raises(roost.Error) as info:
            await process.with_options(search_attributes={"bad": {"nested": 1}}).spawn(
                "wf:tagged", "x"
            )
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error):
            node.list_workflows("customer_id == c-1")
        with pytest.raises(roost.Error):
            workflow.attrs(search={"a": 1})  # outside a workflow


@app.workflow
async def rolling(total, rounds):
    added = await process.listen("add").receive()
    if rounds > 1:
        assert workflow.info().history_length < 20  # a fresh history each run
        await process.upgrade(None, total + added, rounds - 1)
    return {"total": total + added, "run_id": workflow.info().run_id}


async def test_continue_as_new_keeps_id_pid_and_monitors(autojump_clock):
    async with roost.open_node(app) as node:
        pid = await process.with_options(id="roll").spawn_monitored("wf:rolling", 0, 3)
        first_run = node.describe("roll")["run_id"]
        for n in (1, 2, 3):
            await process.send(pid, "add", n)  # each reaches whichever run is current
        ev = await next_event()  # one EXIT, at the final close
        assert ev.pid == pid and ev.value["total"] == 6
        assert ev.value["run_id"] != first_run
        assert node.describe("roll")["status"] == "completed"
        got = await channel.select(process.events(), default=True)
        assert got.default


async def test_exec_follows_continue_as_new(autojump_clock):
    pid = roost.Pid("local", "wf:workflows", "roll3")

    async def feed():
        await trio.testing.wait_all_tasks_blocked()
        for n in (5, 6):
            await process.send(pid, "add", n)

    async with roost.open_node(app), trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        result = await process.with_options(id="roll3").exec("wf:rolling", 0, 2)
        assert result["total"] == 11


@app.workflow
async def collect(n):
    ch = process.listen("add")
    return [await ch.receive() for _ in range(n)]


async def test_signals_keep_per_sender_order_exactly(autojump_clock):
    async with roost.open_node(app):
        pid = await process.spawn_monitored("wf:collect", 30)
        for i in range(30):
            process.send(pid, "add", i)  # no await between sends
        assert (await next_event()).value == list(range(30))


@app.activity
async def returns_tuple():
    return (1, 2)


@app.workflow
async def tuple_check():
    got = await funcs.call("wf:returns_tuple")
    if got == [1, 2]:  # the recorded form, live and on replay alike
        await roost.sleep(1)
    return got


async def test_live_values_equal_recorded_values(autojump_clock):
    async with roost.open_node(app) as node:
        assert await process.with_options(id="tuples").exec("wf:tuple_check") == [1, 2]
        history = node.history("tuples")
    assert Replayer(app).replay(history) == [1, 2]


@app.workflow
async def upgrades_with_unread(n):
    ch = process.listen("m")
    first = await ch.receive()
    if n:
        workflow.attrs(search={"phase": "second"})
        await process.upgrade(None, 0)
    rest = [await ch.receive() for _ in range(2)]
    return [first, *rest]


async def test_continue_as_new_keeps_unread_messages_and_attributes(autojump_clock):
    async with roost.open_node(app) as node:
        spawner = process.with_options(id="unread")
        for i in range(3):
            spawner = spawner.with_message("m", i)
        pid = await spawner.spawn_monitored("wf:upgrades_with_unread", 1)
        await process.send(pid, "m", 3)
        assert (await next_event()).value == [1, 2, 3]
        assert node.list_workflows("phase = 'second'")[0]["workflow_id"] == "unread"


@app.workflow
async def child_double(x):
    if x < 0:
        raise roost.Error("negative input", kind=roost.ErrorKind.INVALID, retryable=False)
    await roost.sleep("1m")
    return x * 2


@app.workflow
async def parent_flow(x):
    synchronous = await workflow.exec("wf:child_double", x)
    try:
        await process.exec("wf:child_double", -1)
    except roost.Error as err:
        failure = (err.kind, err.message, err.retryable)
    child = await process.spawn("wf:child_double", x + 1)  # async child, monitored
    ev = await process.events().receive()
    return {"sync": synchronous, "failure": failure, "async": (ev.pid == child, ev.value)}


@app.workflow
async def parent_that_leaves(policy):
    await process.with_options(id=f"left-{policy}", parent_close_policy=policy).spawn("wf:forever")
    return "parent done"


async def test_child_workflows(autojump_clock):
    async with roost.open_node(app) as node:
        result = await process.with_options(id="parent-a").exec("wf:parent_flow", 5)
        assert result == {
            "sync": 10,
            "failure": [roost.ErrorKind.INVALID, "negative input", False],
            "async": [True, 12],
        }
        assert node.describe("parent-a.1")["status"] == "completed"  # derived child id
        assert node.describe("parent-a.1")["parent"] == roost.Pid(
            "local", "wf:workflows", "parent-a"
        )
        history = node.history("parent-a")
        assert Replayer(app).replay(history) == result


async def test_parent_close_policies(autojump_clock):
    async with roost.open_node(app) as node:
        for policy in ("terminate", "abandon"):
            await process.exec("wf:parent_that_leaves", policy)
        await roost.sleep(1)
        assert node.describe("left-terminate")["status"] == "terminated"
        assert node.describe("left-abandon")["status"] == "running"
        with pytest.raises(roost.Error) as info:
            await workflow.exec("wf:child_double", 1)  # outside a workflow
        assert info.value.kind is roost.ErrorKind.INVALID


async def test_child_workflows_survive_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        pid = await process.with_options(id="parent-r").spawn("wf:parent_flow", 1)
        await roost.sleep(30)  # the first child is half-way through its 1 m sleep
    async with roost.open_node(app, tmp_path):
        process.monitor(pid)
        assert (await next_event()).value["sync"] == 2


def test_history_json_form_is_readable():
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from roost.testing import history_to_json  # noqa: PLC0415

    golden = Path(__file__).parents[1] / "replay/histories/order_workflow--order-1001.cbor"
    history = load_history(golden)
    rows = json.loads(history_to_json(history))
    assert [r["type"] for r in rows[:3]] == ["WorkflowTask", "Started", "ScheduleActivity"]
    assert rows[2]["entry"] == "shop:charge_payment"
    assert rows[-1]["type"] == "Complete"


@app.workflow
async def counter_service():
    """The seed's counter: ack, then ok; nak for what it cannot do."""
    count = 0
    inbox = process.inbox()
    while True:
        msg = await inbox.receive()
        match msg.topic, msg.payload:
            case "add", int(n):
                process.send(msg.sender, "ack")
                count += n
                process.send(msg.sender, "ok", count)
            case "add", _:
                process.send(msg.sender, "nak", "add takes an int")
            case "fail", _:
                process.send(msg.sender, "error", roost.Error("broken", kind="Unavailable"))
            case "stop", _:
                process.send(msg.sender, "ok", count)
                return count


@app.process
async def echo_server():
    async for msg in process.inbox():
        process.send(msg.sender, "reply", msg.payload)


async def test_process_call_request_response(autojump_clock):
    async with roost.open_node(app):
        counter = await process.with_options(id="counter").spawn("wf:counter_service")

        results = []

        async def add(n):
            results.append(await process.call(counter, "add", n))

        async with trio.open_nursery() as nursery:  # concurrent calls never mix replies
            for n in (1, 2, 3):
                nursery.start_soon(add, n)
        assert len(set(results)) == 3
        assert max(results) == 6
        with pytest.raises(roost.Error) as info:
            await process.call(counter, "add", "x")
        assert info.value.kind is roost.ErrorKind.CONFLICT
        assert info.value.details["reason"] == "add takes an int"
        with pytest.raises(roost.Error) as info:
            await process.call(counter, "fail")
        assert (info.value.kind, info.value.message) == (roost.ErrorKind.UNAVAILABLE, "broken")
        assert await process.call(counter, "stop") == 6
        echo = await process.spawn("wf:echo_server")
        assert await process.call(echo, "anything", {"a": 1}) == {"a": 1}
        silent = await process.spawn("wf:helper_proc", 100)
        with pytest.raises(roost.Error) as info:
            await process.call(silent, "hello", timeout="2s")
        assert info.value.kind is roost.ErrorKind.TIMEOUT


async def test_bad_input_does_not_terminate_the_existing_run(autojump_clock):
    async with roost.open_node(app) as node:
        await process.with_options(id="keep").spawn("wf:forever")
        replace = process.with_options(id="keep", id_conflict_policy="terminate_existing")
        with pytest.raises(roost.Error) as info:
            await replace.spawn("wf:counter", {1, 2})  # a set cannot be recorded
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error):
            await replace.with_message("m", object()).spawn("wf:counter", 1)
        await roost.sleep(1)
        assert node.describe("keep")["status"] == "running"
        assert node.describe("keep")["workflow_type"] == "wf:forever"


@app.workflow
async def reports_info():
    await funcs.call("wf:note", "x")
    info = workflow.info()
    return {
        "ids": (info.workflow_id, info.workflow_type, info.task_queue, info.namespace),
        "attempt": info.attempt,
        "length": (info.history_length, workflow.history_length()),
        "size_grew": workflow.history_size() > 0,
        "run_id": info.run_id,
    }


async def test_workflow_info_and_fast_durability(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path, durability="fast") as node:
        result = await process.with_options(id="info-1", task_queue="q1").exec("wf:reports_info")
        assert result["ids"] == ["info-1", "wf:reports_info", "q1", "default"]
        assert result["attempt"] == 1
        assert result["length"][0] == result["length"][1] > 0
        assert result["size_grew"]
        assert result["run_id"] == node.describe("info-1")["run_id"]
    assert workflow.info() is None
    assert (workflow.history_length(), workflow.history_size()) == (0, 0)
    async with roost.open_node(app, tmp_path) as node:  # the fast commits were kept
        assert node.describe("info-1")["status"] == "completed"


async def _every_spawn_path_yields(data_dir):
    # process.spawn adds only a cancel point: the host's start is the schedule point, on
    # each of its paths (an eager start, a delayed one stored the normal way, the running
    # workflow returned without messages, or with them).
    async with roost.open_node(app, data_dir) as node:
        with trio.testing.assert_checkpoints():
            pid = await process.with_options(id="cp").spawn("wf:forever")
        with trio.testing.assert_checkpoints():
            assert await process.with_options(id="cp").spawn("wf:forever") == pid
        with trio.testing.assert_checkpoints():
            spawner = process.with_options(id="cp").with_message("hi", 1)
            assert await spawner.spawn("wf:forever") == pid
        with trio.testing.assert_checkpoints():
            await process.with_options(start_delay="1h").spawn("wf:forever")
        with trio.CancelScope() as scope:  # a cancelled caller starts nothing
            scope.cancel()
            await process.with_options(id="never").spawn("wf:forever")
        assert scope.cancelled_caught
        with pytest.raises(roost.Error) as info:
            node.describe("never")
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_every_workflow_spawn_is_one_checkpoint(autojump_clock):
    await _every_spawn_path_yields(None)


async def test_every_workflow_spawn_is_one_checkpoint_on_disk(tmp_path):
    await _every_spawn_path_yields(tmp_path)


@app.workflow
async def collects(n):
    return [await process.listen("add").receive() for _ in range(n)]


async def _sends_then_starts_the_same_id(data_dir):
    # One sender's messages are recorded in the order sent, whichever call sent them: a
    # send, then a start of the same id (use_existing) with a start message, then a send.
    async with roost.open_node(app, data_dir):
        for i in range(5):
            spawner = process.with_options(id=f"order-{i}")
            pid = await spawner.spawn("wf:collects", 3)
            process.send(pid, "add", "first")
            await spawner.with_message("add", "second").spawn("wf:collects", 3)
            process.send(pid, "add", "third")
            process.monitor(pid)
            assert (await next_event()).value == ["first", "second", "third"]


async def test_start_messages_follow_what_their_sender_sent_first(autojump_clock):
    await _sends_then_starts_the_same_id(None)


async def test_start_messages_follow_what_their_sender_sent_first_on_disk(tmp_path):
    await _sends_then_starts_the_same_id(tmp_path)
