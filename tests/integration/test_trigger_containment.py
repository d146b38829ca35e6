"""Nothing a queue, cron or subscription handler does stops the node (issue 14, item 4).

Each hostile handler fails its own delivery: a queue attempt fails (retries, then the DLQ
with the real error, stored so that it reads back after a restart), a cron run is logged
and the schedule goes on, a subscription delivery is logged and later ones go on. Every
test then shows the node still at work (a good message after the bad one is handled).
HTTP handlers and bodies: test_http_containment.py.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import pytest
import trio
from hostile_exceptions import Custom, StrRaisesError

import roost
from roost import ErrorKind
from roost.testing import open_test_node

app = roost.App("contain")
app.queue("q", max_retries=1, backoff="1s", jitter=0, timeout="10s")
app.queue("once", max_retries=0, jitter=0)
app.queue("x" * 100, max_retries=0, jitter=0)  # a long name: workflow ids hash it

calls: list[Any] = []
plans: dict[str, int] = {}  # key -> failures left (the "flaky" workflow)


def _group() -> BaseException:
    return ExceptionGroup("inside a nursery", [ValueError("one of them failed")])


# name -> (what the handler raises, fragments one of which the stored error's message holds)
HOSTILE: dict[str, tuple[Callable[[], BaseException], tuple[str, ...]]] = {
    "system_exit": (lambda: SystemExit(3), ("SystemExit",)),
    "generator_exit": (lambda: GeneratorExit("closing"), ("GeneratorExit",)),
    "base_exception": (lambda: Custom("mine"), ("Custom",)),
    # Raised by the handler itself, not by trio's SIGINT handler: no Ctrl-C (roost._interrupt).
    "keyboard_interrupt": (KeyboardInterrupt, ("KeyboardInterrupt",)),
    "str_raises": (StrRaisesError, ("StrRaisesError", "RuntimeError")),  # or what str() raised
    "surrogate_message": (lambda: ValueError("bad \ud800 text"), ("ud800",)),
    "surrogate_error": (lambda: roost.Error("no \udfff here", kind="Unavailable"), ("udfff",)),
    "group": (_group, ("one of them failed", "ExceptionGroup")),
}


def _raise(payload: dict[str, Any]) -> None:
    calls.append(payload.get("key"))
    make, _ = HOSTILE[payload["how"]]
    raise make()


@app.activity
async def act(payload: dict[str, Any]) -> None:
    _raise(payload)


@app.activity
def sync_act(payload: dict[str, Any]) -> None:
    _raise(payload)


@app.process
async def proc(payload: dict[str, Any]) -> None:
    _raise(payload)


@app.activity
async def good(payload: dict[str, Any]) -> str:
    calls.append(("good", payload))
    return "ok"


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


@app.activity
async def unstorable_details(payload: dict[str, Any]) -> None:
    raise roost.Error(
        "the details do not fit the store",
        kind="Conflict",
        details={
            "tags": {"a", "b"},
            "fine": [1, 2],
            3: "a non-str key",
            "s": "\ud800",
            "deep": _nested(450),  # more than the store reads back
        },
    )


@app.activity
async def takes_nothing() -> None:  # called with a payload: a TypeError
    calls.append("never")


@app.activity
async def marker(payload: Any) -> None:
    calls.append(("marker", payload))


@app.workflow
async def flaky(payload: dict[str, Any]) -> str:
    await roost.funcs.call(marker, payload["key"])
    left = plans.get(payload["key"], 0)
    if left:
        plans[payload["key"]] = left - 1
        raise roost.Error("not this time", kind="Unavailable")
    return "ran"


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    plans.clear()


def _no_lone_surrogates(text: str) -> bool:
    return all(not 0xD800 <= ord(ch) <= 0xDFFF for ch in text)


async def _node_still_works(queue: str = "q") -> None:
    await roost.enqueue(queue, good, {"after": True})
    await roost.sleep(5)
    assert ("good", {"after": True}) in calls


# -- queues ---------------------------------------------------------------------------------


@pytest.mark.parametrize("how", sorted(HOSTILE))
@pytest.mark.parametrize("target", [act, sync_act, proc], ids=["activity", "sync", "process"])
async def test_a_hostile_queue_handler_fails_its_attempts_only(tmp_path, target, how):
    """Whatever the handler raises (SystemExit, GeneratorExit, a BaseException subclass,
    an exception whose __str__ raises, lone surrogates in the message, an exception group),
    each attempt fails with that error as Internal (a roost.Error keeps its kind), the
    message goes through its retry to the DLQ, the node goes on, and the dead letter's
    errors read back unchanged after a restart: they were stored safely."""
    _, fragments = HOSTILE[how]
    async with open_test_node(app, data_dir=tmp_path) as node:
        receipt = await roost.enqueue("q", target, {"key": how, "how": how})
        await roost.sleep(30)
        assert calls.count(how) == 2  # max_retries=1: two attempts
        (dead,) = node.dlq.list("q")
        assert dead.receipt_id == receipt
        assert [e.details["attempt"] for e in dead.errors] == [1, 2]
        for error in dead.errors:
            want = ErrorKind.UNAVAILABLE if how == "surrogate_error" else ErrorKind.INTERNAL
            assert error.kind is want, error
            assert any(f in error.message for f in fragments), error
            assert _no_lone_surrogates(error.message), error
        await _node_still_works()
    async with open_test_node(app, data_dir=tmp_path) as node:
        assert [e.message for e in node.dlq.list("q")[0].errors] == [e.message for e in dead.errors]


async def test_error_details_the_store_cannot_hold_are_kept_as_text(tmp_path):
    """A roost.Error whose details hold a set, a non-str key, a lone surrogate and a list
    nested 450 deep: the dead letter keeps its kind, message and storable details as they
    are and the others as their repr, and reads back after a restart."""
    async with open_test_node(app, data_dir=tmp_path) as node:
        await roost.enqueue("once", unstorable_details, {})
        await roost.sleep(5)
        (dead,) = node.dlq.list("once")
        await _node_still_works("once")
    async with open_test_node(app, data_dir=tmp_path) as node:
        (again,) = node.dlq.list("once")
    for error in (dead.errors[0], again.errors[0]):
        assert error.kind is ErrorKind.CONFLICT
        assert error.message == "the details do not fit the store"
        assert error.details["fine"] == [1, 2]
        assert error.details["tags"] in ("{'a', 'b'}", "{'b', 'a'}")
        assert error.details["3"] == "a non-str key"
        assert error.details["s"] == "\\ud800"  # the text, its lone surrogate escaped
        deep, levels = error.details["deep"], 0
        while isinstance(deep, list):  # kept as far as details may nest, the rest as its repr
            deep, levels = deep[0], levels + 1
        assert levels <= 32
        assert isinstance(deep, str)
        assert deep.startswith("[[")
        assert error.details["attempt"] == 1


@app.process
async def hangs(payload: Any) -> None:
    calls.append(("hangs", roost.process.pid()))
    await trio.sleep_forever()  # never returns, never checks its events


async def test_a_handler_hanging_past_the_timeout_fails_its_attempts(tmp_path):
    """A process handler that never returns: each attempt fails with Timeout at the
    queue's timeout and its process is stopped; the retry runs, then the DLQ; the node
    goes on."""
    async with open_test_node(app, data_dir=tmp_path) as node:
        await roost.enqueue("q", hangs, {})
        await roost.sleep(60)
        (dead,) = node.dlq.list("q")
        assert [e.kind for e in dead.errors] == [ErrorKind.TIMEOUT] * 2
        pids = [pid for name, pid in calls if name == "hangs"]
        assert len(pids) == 2
        for pid in pids:
            with pytest.raises(roost.Error) as info:
                roost.process.send(pid, "still there?")
            assert info.value.kind is ErrorKind.NOT_FOUND  # stopped, not left running
        await _node_still_works()


async def test_a_bad_payload_for_the_handler_fails_the_attempt(tmp_path):
    """A payload the handler cannot take (it accepts no argument): refused at the call,
    Invalid, naming the handler's signature."""
    async with open_test_node(app, data_dir=tmp_path) as node:
        await roost.enqueue("once", takes_nothing, {"unexpected": True})
        await roost.sleep(5)
        (dead,) = node.dlq.list("once")
        assert dead.errors[0].kind is ErrorKind.INVALID
        assert "do not fit" in dead.errors[0].message
        assert "it takes 0 positional arguments, got 1" in dead.errors[0].message
        assert "never" not in calls
        await _node_still_works("once")


async def test_a_stored_message_for_an_entry_the_app_lost_is_dead_lettered(tmp_path):
    """A message stored for an entry the restarted app no longer registers: NotFound, to
    the DLQ; the node starts and goes on."""
    old = roost.App("moved")
    old.queue("jobs", max_retries=0, timeout="1h")

    @old.activity
    async def gone(payload: Any) -> None:
        await trio.sleep_forever()  # in flight when the node closes: stays stored

    new = roost.App("moved")
    new.queue("jobs", max_retries=0)

    @new.activity
    async def still_here(payload: Any) -> None:
        calls.append(("here", payload))

    async with open_test_node(old, data_dir=tmp_path):
        await roost.enqueue("jobs", gone, 1)
        await roost.sleep(1)
    async with open_test_node(new, data_dir=tmp_path) as node:
        await roost.sleep(1)
        (dead,) = node.dlq.list("jobs")
        assert dead.entry == "moved:gone"
        assert dead.errors[0].kind is ErrorKind.NOT_FOUND
        await roost.enqueue("jobs", still_here, 2)
        await roost.sleep(1)
        assert ("here", 2) in calls


async def test_a_store_refusing_the_outcome_delivers_it_again(tmp_path, monkeypatch, caplog):
    """The store fails (say the disk is full) when a delivery's acknowledgement commits:
    logged at ERROR, the message stays stored as it was and is delivered again after a
    backoff, under the same attempt; the node goes on."""
    from roost.actors._node import Node  # noqa: PLC0415 - fault injection at the store seam

    real = Node.transact
    failures = [OSError(28, "No space left on device")]

    async def flaky_transact(self: Node, fn: Any) -> Any:
        if failures and any(c == ("good", {"n": 1}) for c in calls):
            raise failures.pop()
        return await real(self, fn)

    caplog.set_level(logging.ERROR, logger="roost.queues")
    async with open_test_node(app, data_dir=tmp_path):
        monkeypatch.setattr(Node, "transact", flaky_transact)
        await roost.enqueue("q", good, {"n": 1})
        await roost.sleep(10)
        assert calls == [("good", {"n": 1})] * 2  # delivered again after the failed ack
        assert any("could not be stored" in r.getMessage() for r in caplog.records)
        await _node_still_works()


# -- queue -> workflow: one run per attempt ------------------------------------------------


async def test_a_retry_or_a_redrive_starts_a_fresh_workflow_run(tmp_path):
    """A workflow handler that fails: the retry (the next attempt) starts a new run under a
    new id; a redriven dead letter (its attempts count from 1 again) starts a new run too,
    under ``-r1-``, rather than taking the failure of its first life's run."""
    async with open_test_node(app, data_dir=tmp_path) as node:
        plans["f"] = 1
        receipt = await roost.enqueue("once", flaky, {"key": "f"})
        await roost.sleep(5)
        (dead,) = node.dlq.list("once")
        assert dead.errors[0].message == "not this time"
        await node.dlq.redrive("once", receipt)
        await roost.sleep(5)
        assert node.dlq.list("once") == []
        assert calls == [("marker", "f"), ("marker", "f")]
        runs = {w["workflow_id"]: w["status"] for w in node.list_workflows()}
        assert runs == {f"once-{receipt}-1": "failed", f"once-{receipt}-r1-1": "completed"}


async def test_a_long_queue_name_is_hashed_in_workflow_ids(tmp_path):
    async with open_test_node(app, data_dir=tmp_path) as node:
        receipt = await roost.enqueue("x" * 100, flaky, {"key": "long"})
        await roost.sleep(5)
        ((workflow_id, status),) = [(w["workflow_id"], w["status"]) for w in node.list_workflows()]
        assert status == "completed"
        prefix, rest = workflow_id.split("-", 1)
        assert len(prefix) == 17 and prefix.startswith("q") and rest == f"{receipt}-1"


# -- cron -------------------------------------------------------------------------------------

cron_app = roost.App("cronjail")
cron_runs: list[tuple[str, Any]] = []


def _cron_entry(how: str) -> Any:
    async def run(tick: roost.CronTick) -> None:
        cron_runs.append((how, tick.scheduled_at))
        make, _ = HOSTILE[how]
        raise make()

    run.__name__ = run.__qualname__ = f"cron_{how}"
    return cron_app.activity(run)


for _how in HOSTILE:
    cron_app.cron("* * * * * *", _cron_entry(_how))


async def test_a_hostile_cron_run_is_logged_and_the_schedule_goes_on(caplog):
    """Every second, each trigger's run raises something hostile: each run is logged at
    WARNING (the message safe to print) and every trigger keeps firing."""
    cron_runs.clear()
    caplog.set_level(logging.WARNING, logger="roost.queues")
    async with open_test_node(cron_app):
        start = roost.now()
        await roost.sleep(3.5)
        end = roost.now()
    due = math.floor(end.timestamp()) - math.floor(start.timestamp())  # whole seconds passed
    assert due >= 3
    for how in HOSTILE:
        fired = [at for name, at in cron_runs if name == how]
        assert len(fired) == len(set(fired)) == due, (how, fired)
    failed = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(failed) == due * len(HOSTILE)
    assert all(_no_lone_surrogates(text) for text in failed)


# -- subscriptions ---------------------------------------------------------------------------

sub_app = roost.App("subjail")
sub_app.queue("durable", max_retries=0, jitter=0)
heard: list[Any] = []


@sub_app.activity
async def sub_hostile(data: dict[str, Any]) -> None:
    heard.append(("hostile", data["n"]))
    make, _ = HOSTILE[data["how"]]
    raise make()


@sub_app.process
async def sub_hostile_process(data: dict[str, Any]) -> None:
    heard.append(("process", data["n"]))
    make, _ = HOSTILE[data["how"]]
    raise make()


@sub_app.activity
async def sub_good(data: dict[str, Any]) -> None:
    heard.append(("good", data["n"]))


sub_app.subscribe("events", sub_hostile)
sub_app.subscribe("events", sub_hostile_process)
sub_app.subscribe("events", sub_good)
sub_app.subscribe("events", sub_hostile, durable=True, queue="durable")


async def test_a_hostile_subscriber_fails_its_delivery_only(caplog):
    """Publications whose subscribers raise every hostile thing: each failed delivery is
    logged, later publications are still delivered to every subscriber, the durable copy
    of each goes to the DLQ with its error."""
    heard.clear()
    caplog.set_level(logging.WARNING, logger="roost.queues")
    async with open_test_node(sub_app) as node:
        hows = sorted(HOSTILE)
        for n, how in enumerate(hows):
            await roost.publish("events", {"n": n, "how": how})
            await roost.sleep(1)
        # The activity subscribes twice: in memory, and durably through the queue.
        for who, times in {"hostile": 2, "process": 1, "good": 1}.items():
            got = sorted(n for name, n in heard if name == who)
            assert got == sorted(list(range(len(hows))) * times), who
        dead = node.dlq.list("durable")
        assert len(dead) == len(hows)
        assert all(_no_lone_surrogates(d.errors[0].message) for d in dead)
    failed = [r.getMessage() for r in caplog.records if "subscription events" in r.getMessage()]
    assert len(failed) == 2 * len(hows)  # the in-memory activity and process subscribers
