"""Named durable queues through the public API: retries, DLQ, FIFO groups, hand-off."""

import datetime as dt

import pytest
import trio
import trio.testing

import roost
from roost import process, workflow

app = roost.App("qs")
app.queue("work", max_retries=2, backoff="2s", max_backoff="1m", jitter=0, concurrency=2)
app.queue("capped", max_retries=4, backoff="10s", max_backoff="15s", jitter=0)
app.queue(
    "orders", type="fifo", message_group_field="order_id", concurrency=4, backoff="5s", jitter=0
)
app.queue("quick", timeout="3s", max_retries=0)
app.queue("next", jitter=0)

log: list = []
plans: dict = {}  # payload key -> failures left


def _fail_if_planned(key):
    left = plans.get(key, 0)
    if left:
        plans[key] = left - 1
        raise roost.Error(f"{key} failed", kind="Unavailable")


@app.activity
async def handle(payload):
    info = roost.queue_info()
    log.append(("start", payload["key"], info.attempt, info.queue, roost.now()))
    await roost.sleep(payload.get("takes", 0))
    _fail_if_planned(payload["key"])
    log.append(("done", payload["key"], info.attempt, info.receipt_id))
    return payload["key"]


@app.activity
async def step_one(payload):
    await roost.enqueue("next", "qs:step_two", {"key": payload["key"] + "/2"})
    _fail_if_planned(payload["key"])  # fails after its hand-off was queued: dropped
    return "ok"


@app.activity
async def step_two(payload):
    log.append(("two", payload["key"], roost.queue_info().attempt))


@app.process
async def proc_target(payload):
    log.append(("proc", payload, roost.queue_info().queue))
    return payload


@app.workflow
async def wf_target(payload):
    info = roost.queue_info()
    log.append(("wf", payload, info.queue, info.attempt, workflow.info() is not None))
    return payload


def starts(key):
    return [entry for entry in log if entry[0] == "start" and entry[1] == key]


@pytest.fixture(autouse=True)
def _reset():
    log.clear()
    plans.clear()


def test_bad_queue_declarations_are_invalid():
    bad_settings = [
        {"concurrency": 0},
        {"type": "fifo"},
        {"type": "priority"},
        {"retries": 3},
        {"jitter": 2},
        {"backoff": "soon"},
        {"max_retries": -1},
        {"backoff": "10s", "max_backoff": "1s"},
        {"message_group_field": "order_id"},  # only for fifo queues
    ]
    for settings in bad_settings:
        with pytest.raises(roost.Error) as info:
            app.queue("bad", **settings)
        assert info.value.kind is roost.ErrorKind.INVALID, settings
    assert "bad" not in app.declared["queues"]


async def test_enqueue_runs_the_entry_and_acknowledges(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        receipt = await roost.enqueue("work", "qs:handle", {"key": "a"})
        assert isinstance(receipt, str) and receipt
        await roost.sleep(1)
        assert [e[:4] for e in log] == [("start", "a", 1, "work"), ("done", "a", 1, receipt)]
        default = await roost.enqueue("default", handle, {"key": "d"})
        await roost.sleep(1)
        assert log[-1] == ("done", "d", 1, default)
        assert roost.queue_info() is None  # outside a handler
    async with roost.open_node(app, tmp_path):  # acknowledged messages never come back
        await roost.sleep(60)
        assert len(starts("a")) == 1


async def test_bad_enqueues_store_nothing(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        cases = [
            ("nope", "qs:handle", {"key": "x"}, roost.ErrorKind.INVALID),
            ("orders", "qs:handle", {"key": "x"}, roost.ErrorKind.INVALID),
            ("orders", "qs:handle", {"key": "x", "order_id": None}, roost.ErrorKind.INVALID),
            ("orders", "qs:handle", "not a dict", roost.ErrorKind.INVALID),
            ("work", "qs:missing", {"key": "x"}, roost.ErrorKind.NOT_FOUND),
            ("work", "qs:handle", {"key": {1, 2}}, roost.ErrorKind.INVALID),
        ]
        for queue, entry, payload, kind in cases:
            with pytest.raises(roost.Error) as info:
                await roost.enqueue(queue, entry, payload)
            assert info.value.kind is kind, (queue, payload)
        # The message says where in the payload the problem is, in the caller's terms.
        with pytest.raises(roost.Error, match=r"payload for queue 'work'\[.key.\]: .*set"):
            await roost.enqueue("work", "qs:handle", {"key": {1, 2}})
    async with roost.open_node(app, tmp_path):
        await roost.sleep(60)
        assert log == []


async def test_retries_back_off_then_dead_letter_with_every_error(autojump_clock):
    async with roost.open_node(app) as node:
        plans["r"] = 10
        t0 = roost.now()
        receipt = await roost.enqueue("work", "qs:handle", {"key": "r"})
        await roost.sleep(60)
        times = [(e[4] - t0).total_seconds() for e in starts("r")]
        assert times == [0.0, 2.0, 6.0]  # max_retries=2: 3 attempts; backoff 2 s, 4 s
        (dead,) = node.dlq.list("work")
        assert (dead.receipt_id, dead.queue, dead.payload) == (receipt, "work", {"key": "r"})
        assert [e.details["attempt"] for e in dead.errors] == [1, 2, 3]
        assert all(e.message == "r failed" for e in dead.errors)
        assert [(e.details["at"] - t0).total_seconds() for e in dead.errors] == [0, 2, 6]
        assert dead.failed_at.tzinfo is not None
        # redrive: a fresh retry budget, the same receipt id
        plans["r"] = 1
        await node.dlq.redrive("work", receipt)
        assert node.dlq.list("work") == []
        await roost.sleep(60)
        assert [e[2] for e in starts("r")][-2:] == [1, 2]
        assert log[-1] == ("done", "r", 2, receipt)
        with pytest.raises(roost.Error) as info:
            await node.dlq.redrive("work", receipt)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_dlq_redrive_all_discard_and_paging(autojump_clock):
    async with roost.open_node(app) as node:
        for n in range(5):
            plans[f"k{n}"] = 3
            await roost.enqueue("work", "qs:handle", {"key": f"k{n}"})
        await roost.sleep(60)
        dead = node.dlq.list("work")
        assert [d.payload["key"] for d in dead] == [f"k{n}" for n in range(5)]  # oldest first
        assert [d.payload["key"] for d in node.dlq.list("work", offset=1, limit=2)] == ["k1", "k2"]
        await node.dlq.discard("work", dead[0].receipt_id)
        assert await node.dlq.redrive_all("work") == 4
        await roost.sleep(60)
        assert node.dlq.list("work") == []
        assert sorted(e[1] for e in log if e[0] == "done") == ["k1", "k2", "k3", "k4"]
        with pytest.raises(roost.Error):
            node.dlq.list("undeclared")


async def test_backoff_is_capped_by_max_backoff(autojump_clock):
    async with roost.open_node(app):
        plans["c"] = 4
        t0 = roost.now()
        await roost.enqueue("capped", "qs:handle", {"key": "c"})
        await roost.sleep(120)
        gaps = [(e[4] - t0).total_seconds() for e in starts("c")]
        assert gaps == [0, 10, 25, 40, 55]  # 10, then min(20, 15), 15, 15


async def test_standard_queue_runs_up_to_concurrency(autojump_clock):
    async with roost.open_node(app):
        for n in range(6):
            await roost.enqueue("work", "qs:handle", {"key": f"c{n}", "takes": 10})
        await roost.sleep(100)
        running, peak = 0, 0
        for entry in log:
            running += 1 if entry[0] == "start" else -1
            peak = max(peak, running)
        assert peak == 2
        t0 = starts("c0")[0][4]
        waves = {(e[4] - t0).total_seconds(): set() for e in log if e[0] == "start"}
        for e in log:
            if e[0] == "start":
                waves[(e[4] - t0).total_seconds()].add(e[1])
        # oldest first, two at a time (a standard queue promises no order within a wave)
        assert waves == {0: {"c0", "c1"}, 10: {"c2", "c3"}, 20: {"c4", "c5"}}


async def test_fifo_groups_keep_order_through_failures(autojump_clock):
    async with roost.open_node(app):
        plans["a1"] = 2  # the head of group A fails twice
        for key, order in [("a1", "A"), ("b1", "B"), ("a2", "A"), ("b2", "B"), ("a3", "A")]:
            await roost.enqueue("orders", "qs:handle", {"key": key, "order_id": order})
        await roost.sleep(120)
        done = [e[1] for e in log if e[0] == "done"]
        assert [k for k in done if k[0] == "a"] == ["a1", "a2", "a3"]
        assert [k for k in done if k[0] == "b"] == ["b1", "b2"]
        assert done.index("b2") < done.index("a2")  # group B did not wait for group A
        assert [e[2] for e in starts("a1")] == [1, 2, 3]


async def test_hand_off_commits_with_the_acknowledgement(autojump_clock):
    async with roost.open_node(app):
        plans["h"] = 1  # the first attempt queues step two, then fails: dropped
        await roost.enqueue("work", "qs:step_one", {"key": "h"})
        await roost.sleep(60)
        assert [e for e in log if e[0] == "two"] == [("two", "h/2", 1)]


async def test_an_invocation_over_its_timeout_fails(autojump_clock):
    async with roost.open_node(app) as node:
        await roost.enqueue("quick", "qs:handle", {"key": "slow", "takes": 10})
        await roost.sleep(60)
        (dead,) = node.dlq.list("quick")
        assert dead.errors[0].kind is roost.ErrorKind.TIMEOUT
        assert ("done", "slow") not in [e[:2] for e in log]


async def test_process_and_workflow_targets(autojump_clock):
    async with roost.open_node(app):
        await roost.enqueue("work", "qs:proc_target", "p")
        await roost.enqueue("work", wf_target, "w")
        await roost.sleep(5)
        assert ("proc", "p", "work") in log
        assert ("wf", "w", "work", 1, True) in log


async def test_waiting_and_in_flight_messages_survive_a_restart(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path):
        plans["w1"] = 1
        await roost.enqueue("work", "qs:handle", {"key": "w1"})  # fails once, waits 2 s
        await roost.enqueue("work", "qs:handle", {"key": "w2", "takes": 30})  # in flight
        await roost.sleep(1)
    log.append(("restart",))
    async with roost.open_node(app, tmp_path):
        await roost.sleep(60)
    after = log[log.index(("restart",)) :]
    assert [e[:3] for e in after if e[0] == "done"] == [("done", "w1", 2), ("done", "w2", 1)]


async def test_enqueue_inside_a_workflow_is_invalid(autojump_clock):
    @app.workflow
    async def enqueues():
        try:
            await roost.enqueue("work", "qs:handle", {"key": "x"})
        except roost.Error as err:
            return err.kind
        return None

    async with roost.open_node(app):
        assert await process.exec(enqueues) == roost.ErrorKind.INVALID
        await trio.testing.wait_all_tasks_blocked()


def test_retry_delay_rule():
    from roost.queues._spec import make_spec, retry_delay  # noqa: PLC0415

    spec = make_spec("x", {"backoff": "1s", "max_backoff": "5s", "jitter": 0.5})
    import random  # noqa: PLC0415

    rng = random.Random(7)
    for attempt, base in [(1, 1), (2, 2), (3, 4), (4, 5), (9, 5)]:
        for _ in range(20):
            assert base * 0.5 <= retry_delay(spec, attempt, rng) <= base * 1.5
    assert dt.timedelta(seconds=retry_delay(make_spec("y", {"jitter": 0}), 3)) == dt.timedelta(
        seconds=4
    )


def test_queues_from_a_roost_toml(tmp_path):
    config = tmp_path / "roost.toml"
    config.write_text(
        '[queues.order-payment]\nmax_retries = 5\nbackoff = "2s"\nconcurrency = 2\n'
        'type = "fifo"\nmessage_group_field = "order_id"\n\n[queues.emails]\njitter = 0\n'
    )
    toml_app = roost.App("toml")
    specs = {s.name: s for s in toml_app.load_config(config)}
    assert specs["order-payment"].fifo and specs["order-payment"].backoff == 2.0
    assert specs["emails"].jitter == 0
    assert set(toml_app.declared["queues"]) == {"order-payment", "emails"}
    bad_files = {
        "unknown key": "[queues.a]\nretries = 3\n",
        "bad value": "[queues.a]\nconcurrency = 0\n",
        "fifo without group": '[queues.a]\ntype = "fifo"\n',
        "unknown section": "[queue.a]\nmax_retries = 1\n",
        "not toml": "[queues.a\n",
        "not tables": "queues = 5\n",
    }
    for why, text in bad_files.items():
        config.write_text(text + "\n[queues.b]\nmax_retries = 1\n")
        fresh = roost.App("fresh")
        with pytest.raises(roost.Error) as info:
            fresh.load_config(config)
        assert info.value.kind is roost.ErrorKind.INVALID, why
        assert str(config) in info.value.message, why
        assert "queues" not in fresh.declared, why  # all or nothing
    with pytest.raises(roost.Error):
        roost.App("none").load_config(tmp_path / "missing.toml")


def test_queue_names_too_long_for_a_key_are_invalid():
    with pytest.raises(roost.Error) as info:
        roost.App("long").queue("q" * 600)
    assert info.value.kind is roost.ErrorKind.INVALID


async def test_dlq_list_checks_its_arguments(autojump_clock):
    async with roost.open_node(app) as node:
        for bad in ({"offset": "a"}, {"limit": -1}, {"offset": True}):
            with pytest.raises(roost.Error) as info:
                node.dlq.list("work", **bad)
            assert info.value.kind is roost.ErrorKind.INVALID


app.queue("doomed", max_retries=0, jitter=0)
app.queue("short", timeout="1s", max_retries=0)


@app.workflow
async def slow_flow(payload):
    await roost.sleep(5)
    log.append(("flow done", payload))


async def test_a_workflow_target_over_its_timeout_is_terminated(autojump_clock):
    async with roost.open_node(app) as node:
        await roost.enqueue("short", slow_flow, "w")
        await roost.sleep(30)
        (dead,) = node.dlq.list("short")
        assert dead.errors[0].kind is roost.ErrorKind.TIMEOUT
        assert ("flow done", "w") not in log  # it did not go on running after the timeout
        (run,) = [w for w in node.list_workflows() if w["workflow_type"] == "qs:slow_flow"]
        assert run["status"] == "terminated"


async def test_a_dead_letter_read_twice_is_redriven_once(autojump_clock):
    # Two redrives racing on the writer thread both read the letter before either commits;
    # replayed here deterministically: the second works from the same, stale read.
    plans["dd"] = 1
    async with roost.open_node(app) as node:
        receipt = await roost.enqueue("doomed", "qs:handle", {"key": "dd"})
        await roost.sleep(1)
        stale = node.dlq.list("doomed")
        assert [d.receipt_id for d in stale] == [receipt]
        assert await node.dlq._redrive(stale) == 1
        assert await node.dlq._redrive(stale) == 0  # checked in the transaction: gone
        with pytest.raises(roost.Error) as info:
            await node.dlq.redrive("doomed", receipt)
        assert info.value.kind is roost.ErrorKind.NOT_FOUND
        await roost.sleep(5)
        assert len(starts("dd")) == 2  # the first, failed attempt and one redrive
        assert log[-1] == ("done", "dd", 1, receipt)
        assert node.dlq.list("doomed") == []


app.queue("single", concurrency=1, backoff="2s", jitter=0)


async def test_a_due_message_waiting_for_a_slot_does_not_spin_the_dispatcher(autojump_clock):
    # Both retries fall due together; one runs for 10 s while the other waits for the only
    # slot. A dispatcher that re-armed a timer for the due one would spin, and virtual time
    # (and so the running handler) would never move on.
    async with roost.open_node(app):
        for key in ("s1", "s2"):
            plans[key] = 1
            await roost.enqueue("single", "qs:handle", {"key": key, "takes": 10})
        await roost.sleep(100)
        assert sorted(e[1] for e in log if e[0] == "done") == ["s1", "s2"]
