"""Traces of Temporal-hosted runs: the embedded host's span names and attributes.

The same workflow (one activity, started under a caller's span) runs on the embedded host
and on a real Temporal dev server, each with an SDK tracer provider and an in-memory
exporter; the spans must have the same names, parents and key attributes. The Temporal
node runs with no worker cache, so every workflow task replays: a replay emits nothing.
"""

from __future__ import annotations

import os
import uuid

import pytest
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from temporal_server import dev_server  # noqa: F401 - the fixture `temporal_server`
from tracing import tracer_provider

import roost
import roost.temporal
from roost import funcs, process, workflow
from roost.testing import open_test_node

pytestmark = pytest.mark.timeout(120)

app = roost.App("ttrace")


@app.activity
async def fetch(key: str) -> str:
    with trace.get_tracer("user").start_as_current_span("user work"):
        pass
    return key.upper()


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
def refuse(key: str) -> str:
    raise roost.Error(f"no {key}", kind=roost.ErrorKind.CONFLICT, retryable=False)


@app.workflow
async def order(key: str) -> str:
    return await funcs.call(fetch, key)


@app.workflow
async def doomed(key: str) -> str:
    return await funcs.call(refuse, key)


@app.workflow
async def chain(n: int) -> str:
    if n > 0:
        await process.upgrade(None, n - 1)  # continue-as-new
    return await workflow.exec(order, "kid")


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    with tracer_provider(monkeypatch, SimpleSpanProcessor(exporter)):
        yield exporter


def one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    match = [s for s in found if s.name == name]
    assert len(match) == 1, [s.name for s in found]
    return match[0]


async def _run_traced(workflow_id: str) -> None:
    with trace.get_tracer("caller").start_as_current_span("caller"):
        assert await process.with_options(id=workflow_id).exec(order, "k") == "K"


def _shape(found: list[ReadableSpan], workflow_id: str) -> dict:
    """What must match between the hosts: names, parents, trace and key attributes."""
    caller = one(found, "caller")
    run = one(found, "workflow ttrace:order")
    attempt = one(found, "activity ttrace:fetch")
    user = one(found, "user work")
    assert {s.context.trace_id for s in found} == {caller.context.trace_id}  # one trace
    assert run.parent is not None and run.parent.span_id == caller.context.span_id
    assert attempt.parent is not None and attempt.parent.span_id == run.context.span_id
    assert user.parent is not None and user.parent.span_id == attempt.context.span_id
    assert run.attributes["roost.workflow.id"] == workflow_id
    assert attempt.attributes["roost.workflow.id"] == workflow_id
    assert attempt.attributes["roost.workflow.run_id"] == run.attributes["roost.workflow.run_id"]
    keep = ("roost.workflow.type", "roost.workflow.status", "roost.workflow.attempt")
    return {
        "names": sorted(s.name for s in found),
        "run": {k: run.attributes[k] for k in keep},
        "run_keys": set(run.attributes) - {"roost.workflow.activations"},
        "attempt": {
            k: v
            for k, v in attempt.attributes.items()
            if k not in ("roost.workflow.id", "roost.workflow.run_id")
        },
        "statuses": {s.name: s.status.status_code for s in found},
    }


async def test_a_temporal_run_has_the_spans_the_embedded_host_emits(spans, temporal_server):
    async with open_test_node(app):
        await _run_traced("embedded-1")
    embedded = _shape(list(spans.get_finished_spans()), "embedded-1")
    spans.clear()

    workflow_id = f"traced-{uuid.uuid4().hex[:10]}"
    factory = roost.temporal.temporal_host(temporal_server, max_cached_workflows=0)
    async with roost.open_node(app, name=f"tr{os.getpid()}", workflow_host=factory):
        with trio.fail_after(30):
            await _run_traced(workflow_id)
    found = list(spans.get_finished_spans())
    hosted = _shape(found, workflow_id)
    assert hosted == embedded
    assert hosted["run"] == {
        "roost.workflow.type": "ttrace:order",
        "roost.workflow.status": "completed",
        "roost.workflow.attempt": 1,
    }
    assert hosted["attempt"]["roost.activity.attempt"] == 1
    # The run span covers the run on the server's clock: its start to its close.
    run, attempt = one(found, "workflow ttrace:order"), one(found, "activity ttrace:fetch")
    assert run.start_time <= attempt.start_time and attempt.end_time <= run.end_time


async def test_a_failed_temporal_run_and_attempt_say_so(spans, temporal_server):
    workflow_id = f"traced-fail-{uuid.uuid4().hex[:10]}"
    factory = roost.temporal.temporal_host(temporal_server, max_cached_workflows=0)
    async with roost.open_node(app, name=f"trf{os.getpid()}", workflow_host=factory):
        with trio.fail_after(30), pytest.raises(roost.Error):
            await process.with_options(id=workflow_id).exec(doomed, "stock")
    found = list(spans.get_finished_spans())
    run = one(found, "workflow ttrace:doomed")
    attempt = one(found, "activity ttrace:refuse")
    assert run.parent is None  # started outside any span: a root
    assert attempt.parent is not None and attempt.parent.span_id == run.context.span_id
    assert attempt.context.trace_id == run.context.trace_id
    assert run.attributes["roost.workflow.status"] == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert attempt.status.status_code is StatusCode.ERROR
    assert "no stock" in (attempt.status.description or "")
    assert attempt.attributes["roost.error.kind"] == roost.ErrorKind.CONFLICT.value


async def test_continued_runs_and_children_nest_as_on_the_embedded_host(spans, temporal_server):
    workflow_id = f"traced-chain-{uuid.uuid4().hex[:10]}"
    factory = roost.temporal.temporal_host(temporal_server, max_cached_workflows=0)
    async with roost.open_node(app, name=f"trc{os.getpid()}", workflow_host=factory):
        with trio.fail_after(30), trace.get_tracer("caller").start_as_current_span("caller"):
            assert await process.with_options(id=workflow_id).exec(chain, 1) == "KID"
    found = list(spans.get_finished_spans())
    caller = one(found, "caller")
    runs = [s for s in found if s.name == "workflow ttrace:chain"]
    statuses = sorted(s.attributes["roost.workflow.status"] for s in runs)
    assert statuses == ["completed", "continued_as_new"]
    assert {s.context.trace_id for s in found} == {caller.context.trace_id}  # one trace
    # The next run is a sibling of the one it continues, under the caller's span.
    assert {s.parent.span_id for s in runs} == {caller.context.span_id}
    last = next(s for s in runs if s.attributes["roost.workflow.status"] == "completed")
    kid = one(found, "workflow ttrace:order")
    assert kid.parent is not None and kid.parent.span_id == last.context.span_id
    attempt = one(found, "activity ttrace:fetch")
    assert attempt.parent is not None and attempt.parent.span_id == kid.context.span_id
