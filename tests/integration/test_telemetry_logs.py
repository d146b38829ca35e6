"""Structured logs: the runtime's records carry ids in ``extra`` and failures their traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracing import tracer_provider

import roost
from roost import _telemetry, funcs, process
from roost.testing import open_test_node

app = roost.App("lg")
FIELDS = ("workflow_id", "run_id", "entry", "attempt", "receipt_id", "trace_id")
GATE: dict[str, trio.Event] = {}
COUNT: dict[str, int] = {}


class HostileError(Exception):
    """An exception whose __str__ and __repr__ raise."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class NotesError(HostileError):
    """Its notes raise too: formatting its traceback fails (and a record would be lost)."""

    @property
    def __notes__(self) -> list[str]:
        raise RuntimeError("no notes")


class HugeError(Exception):
    def __str__(self) -> str:
        return "x" * 1_000_000


def failing_here() -> None:
    raise ConnectionError("the provider is down")


@app.activity
async def flaky() -> str:
    COUNT["flaky"] = COUNT.get("flaky", 0) + 1
    if COUNT["flaky"] == 1:
        failing_here()
    if COUNT["flaky"] == 2:
        raise HostileError
    if COUNT["flaky"] == 3:
        raise HugeError
    return "fine"


@app.workflow
async def uses_flaky() -> str:
    return await funcs.call(flaky)


@app.process
async def crashes(how: str) -> None:
    if how == "hostile":
        raise HostileError
    if how == "notes":
        raise NotesError
    failing_here()


@app.workflow
async def waits() -> str:
    await roost.sleep("1h")
    return await process.listen("go", message=True).receive()


@app.activity
async def blocked(payload: dict) -> None:
    await GATE["gate"].wait()


@app.activity
async def refuses(payload: dict) -> None:
    raise ValueError(f"bad payload {payload['n']}")


app.queue("slow", jitter=0)
app.queue("failing", jitter=0, max_retries=1, backoff="1s")


@pytest.fixture(autouse=True)
def _clean():
    COUNT.clear()
    GATE.clear()


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch):
    with tracer_provider(monkeypatch, SimpleSpanProcessor(InMemorySpanExporter())):
        yield


def of(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


async def test_a_failed_activity_attempt_is_logged_once_with_its_fields_and_traceback(
    caplog, traced, autojump_clock
):
    caplog.set_level(logging.INFO, logger="roost")
    async with open_test_node(app) as node:
        assert await process.with_options(id="wf-a").exec(uses_flaky) == "fine"
        record = node._node.local_workflows.commits.stored_record("wf-a")
    failures = of(caplog, "roost.activity")
    assert [r.attempt for r in failures] == [1, 2, 3]  # once per failed attempt
    first = failures[0]
    assert first.levelno == logging.WARNING  # a retry follows
    assert {f: getattr(first, f) for f in FIELDS} == {
        "workflow_id": "wf-a",
        "run_id": record.run_id,
        "entry": "lg:flaky",
        "attempt": 1,
        "receipt_id": None,
        "trace_id": record.trace.split("-")[1],  # the run's trace
    }
    assert first.exc_info is not None and first.exc_info[0] is ConnectionError
    # The traceback goes down to the activity's own code.
    assert "failing_here" in caplog.text and "the provider is down" in caplog.text
    # HostileError and huge exception texts are logged (formatted by caplog's handler, which
    # raises on any formatting error) and the activity still retried to success.
    hostile, huge = failures[1], failures[2]
    assert hostile.exc_info[0] is HostileError and huge.exc_info[0] is HugeError
    assert "HostileError" in hostile.getMessage()
    assert len(huge.getMessage()) < 20_000  # the error text is cut; the node goes on


async def test_a_process_crash_is_logged_once_at_error_with_its_traceback(caplog, autojump_clock):
    caplog.set_level(logging.INFO, logger="roost")
    async with open_test_node(app):
        for how in ("plain", "hostile", "notes"):
            process.monitor(await process.spawn(crashes, how))
            event = await process.events().receive()
            assert event.error is not None
        # The node goes on after logging both.
        assert await process.with_options(id="after").exec(uses_flaky) == "fine"
    crashes_logged = [r for r in of(caplog, "roost.process") if "lg:crashes" in r.getMessage()]
    assert len(crashes_logged) == 3
    plain, hostile, notes = crashes_logged
    assert plain.levelno == hostile.levelno == notes.levelno == logging.ERROR
    assert plain.exc_info[0] is ConnectionError and hostile.exc_info[0] is HostileError
    # The record of an exception whose traceback cannot be rendered keeps its frames.
    assert notes.exc_info[0] is _telemetry.UnrenderableError
    assert "NotesError (its traceback cannot be rendered" in caplog.text
    assert caplog.text.count("in crashes") == 3
    assert plain.entry == "lg:crashes" and plain.kind == "Internal" and plain.pid
    assert all(hasattr(plain, f) for f in FIELDS)
    assert plain.trace_id is None  # no tracer provider: no trace
    assert "failing_here" in caplog.text


async def test_open_and_recovery_are_logged_at_info_with_counts(
    caplog, autojump_clock, tmp_path: Path
):
    data = tmp_path / "data"
    GATE["gate"] = trio.Event()
    async with roost.open_node(app, data, shutdown_grace=0):
        for i in range(3):
            await process.with_options(id=f"w{i}").spawn(waits)
        await roost.enqueue("slow", blocked, {"n": 1})
        await roost.enqueue("slow", blocked, {"n": 2})
        await trio.testing.wait_all_tasks_blocked()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="roost")
    async with roost.open_node(app, data, shutdown_grace=0):
        pass
    recovered = [r for r in of(caplog, "roost.workflow") if r.getMessage().startswith("recovery")]
    assert len(recovered) == 1 and recovered[0].levelno == logging.INFO
    assert (recovered[0].workflows_resumed, recovered[0].timers) == (3, 3)
    assert "3 workflows resumed" in recovered[0].getMessage()
    queued = [r for r in of(caplog, "roost.queues") if r.getMessage().startswith("recovery")]
    assert len(queued) == 1 and queued[0].queue_messages == 2
    opened = of(caplog, "roost.node")
    assert len(opened) == 1 and opened[0].levelno == logging.INFO
    assert opened[0].workflows_open == 3 and opened[0].incarnation == 2
    assert str(data) in opened[0].getMessage()


async def test_a_failed_queue_delivery_is_logged_with_its_receipt(caplog, autojump_clock):
    caplog.set_level(logging.INFO, logger="roost.queues")
    async with open_test_node(app):
        receipt = await roost.enqueue("failing", refuses, {"n": 7})
        await trio.sleep(60)
    logged = [r for r in of(caplog, "roost.queues") if getattr(r, "receipt_id", None)]
    assert [r.attempt for r in logged] == [1, 2]  # a retry, then the DLQ
    assert {r.receipt_id for r in logged} == {receipt}
    assert logged[-1].levelno == logging.WARNING and "DLQ" in logged[-1].getMessage()
    assert all(r.entry == "lg:refuses" and hasattr(r, "trace_id") for r in logged)
