"""roost.state on a real node and LMDB store, through the public API."""

import datetime as dt

import pytest
import trio

import roost
from roost import funcs, process

app = roost.App("st")

INVALID = roost.ErrorKind.INVALID


@app.process
async def bump(times):
    for _ in range(times):
        await roost.state.update("counters", "hits", [{"type": "increment", "path": "total"}])
        await roost.state.update(
            "counters", "hits", [{"type": "increment", "path": ["by_pid", str(process.pid())]}]
        )


@app.activity
async def track(order_id, step, status, at):
    """The iii pipeline's trackStep: per-step status and timestamps, nested."""
    return await roost.state.update(
        "orders",
        order_id,
        [
            {"type": "set", "path": "current_step", "value": step},
            {"type": "set", "path": "status", "value": status},
            {"type": "set", "path": ["steps", step], "value": {"status": status, "at": at}},
            {"type": "increment", "path": ["attempts", step]},
        ],
    )


@app.activity
async def read_order(order_id):
    return await roost.state.get("orders", order_id)


@app.workflow
async def pipeline(order_id):
    await funcs.call("st:track", order_id, "validate", "complete", roost.now())
    await roost.sleep("1m")
    await funcs.call("st:track", order_id, "payment", "running", roost.now())
    return await funcs.call("st:read_order", order_id)


@app.workflow
async def touches_state_directly():
    outcome = []
    for call in (
        lambda: roost.state.get("s", "k"),
        lambda: roost.state.set("s", "k", 1),
        lambda: roost.state.update("s", "k", []),
        lambda: roost.state.delete("s", "k"),
        lambda: roost.state.list("s"),
    ):
        try:
            await call()
        except roost.Error as err:
            outcome.append((err.kind, err.message))
    return outcome


async def test_set_get_list_delete(autojump_clock):
    async with roost.open_node(app):
        assert await roost.state.get("orders", "o-1") is None
        assert await roost.state.list("orders") == {}
        await roost.state.set("orders", "o-2", {"total": 5, "items": ["a"]})
        await roost.state.set("orders", "o-1", {"total": 3})
        await roost.state.set("order", "o-9", "another scope")  # a prefix of "orders"
        await roost.state.set("orders2", "o-9", "and another")
        assert await roost.state.get("orders", "o-2") == {"total": 5, "items": ["a"]}
        listed = await roost.state.list("orders")
        assert listed == {"o-1": {"total": 3}, "o-2": {"total": 5, "items": ["a"]}}
        assert list(listed) == ["o-1", "o-2"]  # key order
        assert await roost.state.list("order") == {"o-9": "another scope"}
        await roost.state.set("orders", "o-1", 42)  # replaces, any encodable value
        assert await roost.state.get("orders", "o-1") == 42
        assert await roost.state.delete("orders", "o-1") is True
        assert await roost.state.delete("orders", "o-1") is False
        assert await roost.state.get("orders", "o-1") is None
        assert list(await roost.state.list("orders")) == ["o-2"]


async def test_update_returns_the_new_value_and_starts_from_empty(autojump_clock):
    async with roost.open_node(app):
        got = await roost.state.update("c", "k", [{"type": "increment", "path": "n"}])
        assert got == {"n": 1}
        got = await roost.state.update(
            "c",
            "k",
            [
                {"type": "increment", "path": "n", "by": 4},
                {"type": "merge", "value": {"m": {"x": 1}}},
                {"type": "merge", "path": "m", "value": {"y": 2}},
                {"type": "append", "path": "log", "value": "first"},
                {"type": "append", "path": "log", "value": "second"},
                {"type": "decrement", "path": "n"},
                {"type": "set", "path": "attempts.payment", "value": 1},  # one dotted key
                {"type": "remove", "path": "missing/entirely"},
            ],
        )
        expected = {"n": 4, "m": {"x": 1, "y": 2}, "log": ["first", "second"]}
        expected["attempts.payment"] = 1
        assert got == expected
        assert await roost.state.get("c", "k") == expected
        await roost.state.update("c", "k", [{"type": "remove", "path": ["m", "x"]}])
        assert (await roost.state.get("c", "k"))["m"] == {"y": 2}


async def test_nested_pipeline_state_reads_back(autojump_clock):
    at = dt.datetime(2026, 5, 1, 12, 30, tzinfo=dt.UTC)
    async with roost.open_node(app):
        await roost.state.set(
            "orders",
            "o-7",
            {"order_id": "o-7", "status": "created", "current_step": "created", "steps": {}},
        )
        await roost.state.update(
            "orders",
            "o-7",
            [
                {"type": "set", "path": "current_step", "value": "payment"},
                {"type": "set", "path": "status", "value": "running"},
                {
                    "type": "set",
                    "path": ["steps", "payment"],
                    "value": {"status": "running", "at": at},
                },
            ],
        )
        await roost.state.update(
            "orders", "o-7", [{"type": "set", "path": "steps/payment/status", "value": "done"}]
        )
        order = await roost.state.get("orders", "o-7")
        assert order["current_step"] == "payment" and order["status"] == "running"
        assert order["steps"] == {"payment": {"status": "done", "at": at}}
        assert order["steps"]["payment"]["at"].utcoffset() == dt.timedelta(0)


async def test_a_failing_update_stores_nothing(autojump_clock):
    async with roost.open_node(app):
        await roost.state.set("c", "k", {"n": 1, "s": "text"})
        bad_updates = [
            # A good op, then one that does not fit the value.
            [{"type": "increment", "path": "n"}, {"type": "increment", "path": "s"}],
            [{"type": "set", "path": "x", "value": 1}, {"type": "set", "path": "s/deeper"}],
            [{"type": "increment", "path": "n"}, {"type": "set", "path": "s/deeper", "value": 1}],
            [{"type": "increment", "path": "n"}, {"type": "explode"}],
            # A result the codec cannot store.
            [{"type": "increment", "path": "n"}, {"type": "set", "path": "x", "value": {1, 2}}],
            {"type": "increment", "path": "n"},  # not a list
        ]
        for ops in bad_updates:
            with pytest.raises(roost.Error) as info:
                await roost.state.update("c", "k", ops)
            assert info.value.kind is INVALID, ops
            assert await roost.state.get("c", "k") == {"n": 1, "s": "text"}
        with pytest.raises(roost.Error, match=r"cannot encode object of type 'set'"):
            await roost.state.update("c", "new", [{"type": "set", "path": "x", "value": {1}}])
        assert await roost.state.list("c") == {"k": {"n": 1, "s": "text"}}


async def test_bad_input_is_invalid_and_changes_nothing(autojump_clock):
    async with roost.open_node(app):
        with pytest.raises(roost.Error, match=r"\(use a list\)") as info:
            await roost.state.set("c", "k", {"tags": {"a"}})
        assert info.value.kind is INVALID
        for scope, key in [("", "k"), ("c", ""), (None, "k"), ("c", 1), (b"c", "k")]:
            with pytest.raises(roost.Error, match="must be a non-empty str") as info:
                await roost.state.set(scope, key, 1)
            assert info.value.kind is INVALID
            with pytest.raises(roost.Error) as info:
                await roost.state.get(scope, key)
            assert info.value.kind is INVALID
        with pytest.raises(roost.Error, match="too long together") as info:
            await roost.state.set("c", "k" * 600, 1)
        assert info.value.kind is INVALID
        with pytest.raises(roost.Error) as info:
            await roost.state.list("")
        assert info.value.kind is INVALID
        assert await roost.state.list("c") == {}


async def test_state_survives_a_restart(autojump_clock, tmp_path):
    at = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    async with roost.open_node(app, tmp_path):
        await roost.state.set("orders", "o-1", {"steps": {"validate": {"at": at}}})
        await roost.state.update("orders", "o-2", [{"type": "increment", "path": "n"}])
        await roost.state.update("orders", "o-2", [{"type": "increment", "path": "n"}])
    async with roost.open_node(app, tmp_path):
        assert await roost.state.list("orders") == {
            "o-1": {"steps": {"validate": {"at": at}}},
            "o-2": {"n": 2},
        }
        assert await roost.state.update("orders", "o-2", [{"type": "increment", "path": "n"}]) == {
            "n": 3
        }


async def test_activities_called_by_a_workflow_use_state(autojump_clock):
    async with roost.open_node(app):
        order = await process.exec("st:pipeline", "o-3")
        assert order["current_step"] == "payment" and order["status"] == "running"
        assert order["attempts"] == {"validate": 1, "payment": 1}
        validate, payment = order["steps"]["validate"], order["steps"]["payment"]
        assert validate["status"] == "complete" and payment["status"] == "running"
        # The workflow slept a minute between the steps, on the node's clock.
        assert payment["at"] - validate["at"] >= dt.timedelta(minutes=1)
        assert await roost.state.get("orders", "o-3") == order


async def test_activity_called_by_a_plain_process_uses_state(autojump_clock):
    async with roost.open_node(app):
        got = await funcs.call("st:track", "o-4", "ship", "done", roost.now())
        assert got["steps"]["ship"]["status"] == "done"
        assert await funcs.call("st:read_order", "o-4") == got


async def test_state_inside_a_workflow_is_invalid(autojump_clock):
    async with roost.open_node(app):
        outcome = await process.exec("st:touches_state_directly")
        assert len(outcome) == 5
        for kind, message in outcome:
            assert kind == INVALID  # a StrEnum comes back its value, as recorded
            assert "not available inside a workflow" in message
            assert "activity" in message
        assert await roost.state.get("s", "k") is None


async def test_state_outside_a_node_is_invalid_state():
    for call in (
        roost.state.get("s", "k"),
        roost.state.set("s", "k", 1),
        roost.state.list("s"),
        roost.state.delete("s", "k"),
        roost.state.update("s", "k", []),
    ):
        with pytest.raises(roost.Error, match="must run inside a roost process") as info:
            await call
        assert info.value.kind is roost.ErrorKind.INVALID_STATE


async def _concurrent_increments(procs, times):
    pids = [await process.spawn_monitored("st:bump", times) for _ in range(procs)]
    for _ in pids:
        ev = await process.events().receive()
        assert ev.error is None
    hits = await roost.state.get("counters", "hits")
    assert hits["total"] == procs * times
    assert hits["by_pid"] == {str(pid): times for pid in pids}


async def test_concurrent_increments_sum_exactly(autojump_clock):
    async with roost.open_node(app, durability="fast"):
        await _concurrent_increments(20, 10)


async def test_concurrent_increments_sum_exactly_on_the_group_committing_writer():
    # A real clock: updates go through the writer thread, batched into shared commits.
    async with roost.open_node(app, durability="fast"):
        with trio.fail_after(60):
            await _concurrent_increments(25, 8)
