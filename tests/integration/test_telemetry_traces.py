"""OpenTelemetry traces: a span per run, activity attempt, queue delivery and HTTP request.

Each test installs an SDK tracer provider with an in-memory exporter (the ``spans``
fixture); roost looks at the provider when a node opens.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tracing import tracer_provider

import roost
from roost import _telemetry, funcs, process, workflow
from roost.http import Request
from roost.testing import open_test_node

app = roost.App("tr")
RAN: Counter[str] = Counter()


@app.activity
async def fetch(key: str) -> str:
    RAN[key] += 1
    # Spans the activity's own code starts are children of the attempt's span.
    with trace.get_tracer("user").start_as_current_span("user work"):
        pass
    return key.upper()


@app.activity
async def flaky(key: str) -> str:
    RAN[key] += 1
    if RAN[key] < 2:
        raise ConnectionError("try again")
    return key


@app.workflow
async def child(key: str) -> str:
    return await funcs.call(fetch, f"{key}/child")


@app.workflow
async def parent(key: str) -> list[str]:
    first = await funcs.call(fetch, key)
    second = await workflow.exec(child, key)
    await roost.sleep("1m")
    third = await funcs.call(flaky, f"{key}/flaky")
    return [first, second, third]


@app.workflow
async def waits(key: str) -> str:
    got = await funcs.call(fetch, key)
    msg = await process.listen("go", message=True).receive()
    after = await funcs.call(fetch, f"{key}/after")
    return f"{got} {msg.payload} {after}"


@app.activity
async def handle(payload: dict) -> None:
    RAN[payload["key"]] += 1


@app.activity
async def hello(req: Request) -> dict:
    return {"hello": req.path_params["name"]}


@app.activity
async def boom(req: Request) -> None:
    raise RuntimeError("down")


@app.workflow
async def continues(n: int) -> int:
    if n > 0:
        await process.upgrade(None, n - 1)  # continue-as-new
    return n


@app.workflow
async def ticks() -> None:
    await funcs.call(fetch, "tick")


app.queue("work", jitter=0)
app.http("GET", "/hello/{name}", hello)
app.http("GET", "/boom", boom)
app.http("POST", "/orders/{name}", "tr:by_http")


@app.workflow
async def by_http(req: Request) -> str:
    return await funcs.call(fetch, req.path_params["name"])


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    RAN.clear()
    with tracer_provider(monkeypatch, SimpleSpanProcessor(exporter)):
        yield exporter


def named(found: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [s for s in found if s.name.startswith(prefix)]


def one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    match = [s for s in found if s.name == name]
    assert len(match) == 1, [s.name for s in found]
    return match[0]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_spans_of_a_workflow_its_activities_and_its_child(spans, autojump_clock):
    async with open_test_node(app) as node:
        result = await process.with_options(id="wf-1").exec(parent, "k")
        assert result == ["K", "K/CHILD", "k/flaky"]
        kid_id = next(w["workflow_id"] for w in node.list_workflows() if w["workflow_id"] != "wf-1")
    found = list(spans.get_finished_spans())
    run = one(found, "workflow tr:parent")
    kid = one(found, "workflow tr:child")
    activities = named(found, "activity ")
    assert sorted(s.name for s in activities) == [
        "activity tr:fetch",
        "activity tr:fetch",
        "activity tr:flaky",
        "activity tr:flaky",
    ]
    trace_id = run.context.trace_id
    assert {s.context.trace_id for s in found} == {trace_id}  # one trace
    assert run.parent is None  # started from the test body, outside any span
    assert run.attributes["roost.workflow.id"] == "wf-1"
    assert run.attributes["roost.workflow.status"] == "completed"
    assert run.status.status_code is StatusCode.UNSET
    # The child run's span is a child of its parent run's span.
    assert parent_id(kid) == run.context.span_id
    assert kid.attributes["roost.workflow.id"] == kid_id
    by_workflow = {
        (s.attributes["roost.workflow.id"], s.attributes["roost.activity.attempt"]): s
        for s in activities
        if s.name == "activity tr:flaky"
    }
    # Each attempt has its span, a child of the run's span; the failed one says so.
    failed, retried = by_workflow[("wf-1", 1)], by_workflow[("wf-1", 2)]
    assert failed.status.status_code is StatusCode.ERROR
    assert "try again" in (failed.status.description or "")
    assert retried.status.status_code is StatusCode.UNSET
    fetches = named(found, "activity tr:fetch")
    owners = {s.attributes["roost.workflow.id"]: s for s in fetches}
    assert parent_id(owners["wf-1"]) == run.context.span_id
    assert parent_id(owners[kid_id]) == kid.context.span_id
    assert all(parent_id(s) == run.context.span_id for s in (failed, retried))
    # A span the activity's code starts is the attempt span's child.
    users = named(found, "user work")
    assert {parent_id(s) for s in users} == {s.context.span_id for s in fetches}
    # The run span covers the run: from its start to its close, as recorded.
    assert run.start_time <= min(s.start_time for s in activities)
    assert run.end_time >= kid.end_time


async def test_no_duplicate_spans_when_runs_replay_after_eviction(spans, autojump_clock):
    # workflow_cache=1: every step of every workflow rebuilds its run by replay.
    async with open_test_node(app, workflow_cache=1), trio.open_nursery() as nursery:
        for i in range(4):
            nursery.start_soon(process.exec, parent, f"w{i}")
    found = list(spans.get_finished_spans())
    runs = Counter(s.attributes["roost.workflow.id"] for s in named(found, "workflow "))
    assert len(runs) == 8 and set(runs.values()) == {1}  # 4 parents, 4 children, once each
    attempts = Counter(
        (s.attributes["roost.workflow.id"], s.name, s.attributes["roost.activity.attempt"])
        for s in named(found, "activity ")
    )
    assert set(attempts.values()) == {1}
    # As many activity spans as activity attempts really ran.
    assert len(attempts) == sum(RAN.values()) == 4 * 4
    # Every span of a workflow tree is in the tree's trace, under the right parent.
    spans_by_id = {s.context.span_id: s for s in found}
    for span in named(found, "activity "):
        owner = spans_by_id[parent_id(span)]
        assert owner.attributes["roost.workflow.id"] == span.attributes["roost.workflow.id"]
        assert owner.context.trace_id == span.context.trace_id


async def test_a_run_resumed_after_a_restart_continues_its_trace(
    spans, autojump_clock, tmp_path: Path
):
    data = tmp_path / "data"
    async with roost.open_node(app, data) as node:
        pid = await process.with_options(id="wf-r").spawn(waits, "r")
        await trio.testing.wait_all_tasks_blocked()  # the fetch is recorded; it waits for "go"
        assert node.describe("wf-r")["history_length"] >= 3
    before = list(spans.get_finished_spans())
    assert [s.name for s in before] == ["user work", "activity tr:fetch"]
    assert not named(before, "workflow ")  # emitted at the close, not at a stop
    spans.clear()
    async with roost.open_node(app, data):
        process.monitor(pid)
        await process.send(pid, "go", "now")
        exit_event = await process.events().receive()
        assert exit_event.value == "R now R/AFTER"
    after = list(spans.get_finished_spans())
    run = one(after, "workflow tr:waits")
    later = named(after, "activity ")
    assert len(later) == 1 and later[0].attributes["roost.activity.attempt"] == 1
    assert later[0].attributes["roost.workflow.id"] == "wf-r"
    assert RAN == {"r": 1, "r/after": 1}
    # The same trace, and the same run span, before and after the restart.
    first = one(before, "activity tr:fetch")
    assert run.context.trace_id == first.context.trace_id == later[0].context.trace_id
    assert parent_id(first) == parent_id(later[0]) == run.context.span_id
    assert run.start_time <= first.start_time


async def test_continue_as_new_stays_in_the_trace_and_cron_runs_get_their_own(
    spans, autojump_clock
):
    async with open_test_node(app):
        with trace.get_tracer("test").start_as_current_span("caller") as caller:
            assert await process.with_options(id="wf-c").exec(continues, 2) == 0
        pid = await process.with_options(id="cron", cron_schedule="*/10 * * * * *").spawn(ticks)
        await roost.sleep(35)
        process.terminate(pid)
        await roost.sleep(1)
    found = list(spans.get_finished_spans())
    chain = named(found, "workflow tr:continues")
    assert [s.attributes["roost.workflow.status"] for s in chain] == [
        "continued_as_new",
        "continued_as_new",
        "completed",
    ]
    # Each run is a child of the span that started the first one, in its trace.
    context = caller.get_span_context()
    assert {s.context.trace_id for s in chain} == {context.trace_id}
    assert {parent_id(s) for s in chain} == {context.span_id}
    assert len({s.context.span_id for s in chain}) == 3
    cron_runs = named(found, "workflow tr:ticks")
    assert len(cron_runs) >= 3
    assert len({s.context.trace_id for s in cron_runs}) == len(cron_runs)
    assert all(s.parent is None for s in cron_runs)
    # A cron run's activity is in that run's trace.
    run_traces = {s.context.trace_id for s in cron_runs}
    assert {s.context.trace_id for s in named(found, "activity tr:fetch")} <= run_traces


async def test_a_queue_delivery_has_a_span_and_a_workflow_it_starts_is_its_child(
    spans, autojump_clock
):
    async with open_test_node(app):
        await roost.enqueue("work", handle, {"key": "q1"})
        await roost.enqueue("work", parent, "q2")
        await trio.sleep(600)  # virtual time: both delivered, the workflow closed
    assert RAN["q1"] == 1 and RAN["q2/flaky"] == 2
    found = list(spans.get_finished_spans())
    deliveries = named(found, "queue work deliver")
    assert len(deliveries) == 2
    assert all(s.kind is SpanKind.CONSUMER for s in deliveries)
    by_entry = {s.attributes["roost.queue.entry"]: s for s in deliveries}
    assert set(by_entry) == {"tr:handle", "tr:parent"}
    plain = by_entry["tr:handle"]
    assert plain.attributes["messaging.destination.name"] == "work"
    assert plain.attributes["roost.queue.attempt"] == 1
    assert plain.attributes["roost.queue.receipt_id"]
    run = one(found, "workflow tr:parent")
    assert parent_id(run) == by_entry["tr:parent"].context.span_id
    assert run.context.trace_id == by_entry["tr:parent"].context.trace_id


async def test_an_http_request_has_a_server_span_under_the_callers_trace(spans):
    caller_trace = 0x0AF7651916CD43DD8448EB211C80319C
    caller_span = 0xB7AD6B7169203331
    header = f"00-{caller_trace:032x}-{caller_span:016x}-01"
    async with (
        roost.open_node(app, http="127.0.0.1:0") as node,
        httpx.AsyncClient(base_url=node.http_url) as client,
    ):
        ok = await client.get("/hello/ann", headers={"traceparent": header})
        assert ok.json() == {"hello": "ann"}
        failed = await client.get("/boom")
        assert failed.status_code == 500
        started = await client.post("/orders/o-7")
        assert started.json() == "O-7"
    found = list(spans.get_finished_spans())
    hello_span = one(found, "HTTP GET /hello/{name}")
    assert hello_span.kind is SpanKind.SERVER
    assert hello_span.context.trace_id == caller_trace
    assert parent_id(hello_span) == caller_span
    assert hello_span.attributes["http.route"] == "/hello/{name}"
    assert hello_span.attributes["http.request.method"] == "GET"
    assert hello_span.attributes["http.response.status_code"] == 200
    boom_span = one(found, "HTTP GET /boom")
    assert boom_span.parent is None
    assert boom_span.attributes["http.response.status_code"] == 500
    assert boom_span.status.status_code is StatusCode.ERROR
    # A workflow a trigger runs is a child of the request's span, its activity of the run.
    order_span = one(found, "HTTP POST /orders/{name}")
    run = one(found, "workflow tr:by_http")
    assert parent_id(run) == order_span.context.span_id
    assert parent_id(one(found, "activity tr:fetch")) == run.context.span_id


async def test_without_a_tracer_provider_nothing_is_traced_or_stored(autojump_clock):
    RAN.clear()
    async with open_test_node(app) as node:
        assert not _telemetry.tracing  # no provider: every hook site skips its call
        await process.with_options(id="wf-n").exec(parent, "n")
        assert node.describe("wf-n")["status"] == "completed"
        stored = node._node.local_workflows.commits.stored_record("wf-n")
    assert stored.trace is None
