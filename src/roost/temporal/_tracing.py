"""Traces of what a node's Temporal worker runs, under the embedded host's span names.

A run's span (``workflow <type>``) is emitted once, by the worker whose workflow task
closes the run, never from a replayed task; an activity attempt's span
(``activity <entry>``) by the worker that runs the attempt. Both only when a tracer
provider is configured (``_telemetry.tracing``).

A run's span context is a function of what its history holds, so every worker and every
replay computes the same one: its span id is derived from the run id, its trace id from
its parent's (the ``roost.trace`` memo: the span current where it was started, or its
parent run's span) or, for a root, from the workflow id and its first run's id, so runs
that continue as new or retry stay in one trace. The workflow hands its run's span
context to each activity it schedules in a header (``roost-trace``), and the attempt's
span is that span's child, as on the embedded host. Spans Temporal's own SDK or server
would emit are not roost's: these are the app's.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import hashlib
from typing import Any, Final

import temporalio.activity
import temporalio.worker
import temporalio.workflow as tw
from opentelemetry import trace
from opentelemetry.trace import SpanContext, TraceFlags

from roost import _telemetry
from roost._errors import Error
from roost.temporal._options import TRACE_MEMO

__all__ = [
    "TRACE_HEADER",
    "RunTracing",
    "attempt_ended",
    "attempt_started",
    "child_trace",
    "run_closed",
    "run_span",
    "start_trace",
]

TRACE_HEADER: Final = "roost-trace"

_parent: contextvars.ContextVar[SpanContext | None] = contextvars.ContextVar(
    "roost_temporal_trace_parent", default=None
)


def _digest(nbytes: int, *parts: str) -> int:
    value = int.from_bytes(hashlib.sha256("/".join(parts).encode()).digest()[:nbytes], "big")
    return value or 1  # an all-zero id is invalid


def start_trace() -> str | None:
    """The ``roost.trace`` memo of a run started now: the current span's traceparent."""
    if not _telemetry.tracing:
        return None
    context = trace.get_current_span().get_span_context()
    return _telemetry.traceparent_of(context) if context.is_valid else None


def _run_parent() -> SpanContext | None:
    """In a workflow: the span the run's span is a child of (from its memo)."""
    value = tw.memo_value(TRACE_MEMO, None)
    return _telemetry.parse_traceparent(value) if isinstance(value, str) else None


def run_span() -> SpanContext:
    """In a workflow: its run's span context, the same in every task and replay."""
    info = tw.info()
    parent = _run_parent()
    if parent is not None:
        trace_id, flags = parent.trace_id, parent.trace_flags
    else:
        trace_id = _digest(16, "roost-trace", info.workflow_id, info.first_execution_run_id)
        flags = TraceFlags(TraceFlags.SAMPLED)
    return SpanContext(
        trace_id, _digest(8, "roost-run", info.run_id), is_remote=True, trace_flags=flags
    )


def child_trace() -> str | None:
    """In a workflow: the ``roost.trace`` memo of a child it starts (its run's span)."""
    return _telemetry.traceparent_of(run_span()) if _telemetry.tracing else None


def run_closed(status: str, error: Error | None = None) -> None:
    """In a workflow: emit its run's span, closed with ``status`` (never in a replay)."""
    if not _telemetry.tracing or tw.unsafe.is_replaying():
        return
    info = tw.info()
    started = info.workflow_start_time
    if started.tzinfo is None:
        started = started.replace(tzinfo=dt.UTC)
    _telemetry.hosted_run_closed(
        run_span(),
        _run_parent(),
        {
            "roost.workflow.id": info.workflow_id,
            "roost.workflow.run_id": info.run_id,
            "roost.workflow.type": info.workflow_type,
            "roost.workflow.attempt": info.attempt,
            "roost.workflow.status": status,
            "roost.workflow.task_queue": info.task_queue,
        },
        started=started,
        error=(error.message if error is not None else status),
    )


def attempt_started(info: temporalio.activity.Info, seq: int) -> trace.Span | None:
    """The span of the activity attempt this worker begins (None: untraced)."""
    if not _telemetry.tracing:
        return None
    return _telemetry.attempt_span(
        info.activity_type,
        {
            "roost.workflow.id": info.workflow_id or "",
            "roost.workflow.run_id": info.workflow_run_id or "",
            "roost.activity.entry": info.activity_type,
            "roost.activity.attempt": info.attempt,
            "roost.activity.seq": seq,
        },
        _parent.get(),
    )


def attempt_ended(span: trace.Span | None, error: Error | None, *, cancelled: bool) -> None:
    """End an attempt's span with its outcome."""
    if span is not None:
        _telemetry.end_attempt_span(span, error, cancelled=cancelled)


class RunTracing(temporalio.worker.Interceptor):
    """Hands each roost run's span context to the activities it schedules, in a header."""

    def intercept_activity(
        self,
        next: temporalio.worker.ActivityInboundInterceptor,  # noqa: A002 - temporalio's name
    ) -> temporalio.worker.ActivityInboundInterceptor:
        """Reads the header into the attempt's parent span."""
        return _TracedAttempt(next)

    def workflow_interceptor_class(
        self, workflow: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        """Adds the header to each activity a run schedules."""
        return _TracedRun


class _TracedAttempt(temporalio.worker.ActivityInboundInterceptor):
    async def execute_activity(self, attempt: temporalio.worker.ExecuteActivityInput) -> Any:
        payload = attempt.headers.get(TRACE_HEADER)
        if payload is not None:
            converter = temporalio.activity.payload_converter()
            value = converter.from_payloads([payload])[0]
            _parent.set(_telemetry.parse_traceparent(value) if isinstance(value, str) else None)
        return await self.next.execute_activity(attempt)


class _TracedRun(temporalio.worker.WorkflowInboundInterceptor):
    def init(self, outbound: temporalio.worker.WorkflowOutboundInterceptor) -> None:
        super().init(_ScheduleTraced(outbound))


class _ScheduleTraced(temporalio.worker.WorkflowOutboundInterceptor):
    def start_activity(
        self, schedule: temporalio.worker.StartActivityInput
    ) -> tw.ActivityHandle[Any]:
        # Only roost's runs, and only a tracing worker: a header changes no command
        # Temporal compares in a replay, and is the same in every replay of the run.
        if _telemetry.tracing and not tw.info().workflow_type.startswith("@roost."):
            traced = _telemetry.traceparent_of(run_span())
            payload = tw.payload_converter().to_payloads([traced])[0]
            schedule.headers = {**schedule.headers, TRACE_HEADER: payload}
        return self.next.start_activity(schedule)
