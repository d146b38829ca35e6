"""Traces (OpenTelemetry) and structured log fields: the runtime's hooks call in here.

Spans (see docs/observability.md): one per workflow run, activity attempt, queue delivery
and HTTP trigger request. A run's trace context is chosen when the run begins and stored
in its run record (``RunRecord.trace``, committed with the start), so that activities,
child workflows and a run resumed after a restart all join the same trace. The run span
itself is emitted once, when the close is committed, with the start and end times of the
run record and the span id stored at its start: a replay (after an eviction or a
restart) never emits one, and an activity span comes from a real attempt only.

Hot path: ``tracing`` is False unless a tracer provider is configured (checked at each
node open, ``refresh``); every hook site tests it before calling in, so a node without
one pays a module attribute read.

Log fields: every record the runtime logs about a workflow, activity or queue message
carries ``workflow_id``, ``run_id``, ``entry``, ``attempt``, ``receipt_id`` and
``trace_id`` in ``extra`` (None where they do not apply), see ``fields``.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import os
import threading
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import attrs
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from roost._errors import Error, safe_text, type_name
from roost.actors._contain import must_propagate

# Below the runtime in the module graph: its records are typed here by what is read.
RunRecord = Any  # roost.workflow._local._records.RunRecord
Attempt = Any  # roost.workflow._local.activities._attempt.Attempt
Run = Any  # roost.workflow._local._run.Run

__all__ = [
    "activity_ended",
    "activity_started",
    "attempt_span",
    "child_run",
    "delivery",
    "end_attempt_span",
    "exc_info",
    "fields",
    "hosted_run_closed",
    "http_request",
    "http_route",
    "log_node_opened",
    "log_recovered",
    "parse_traceparent",
    "refresh",
    "run_closed",
    "run_fields",
    "traced_run",
    "traceparent_of",
    "tracing",
]

log = logging.getLogger("roost.telemetry")

tracing: bool = False
"""A tracer provider is configured: the hooks emit spans (set by ``refresh``)."""

_tracer: trace.Tracer | None = None
_T = TypeVar("_T")

_SCOPE: Final = "roost"
_VERSION = "00"
# The run statuses whose span says ERROR (a cancelled or continued run ended as asked).
_FAILED: Final = frozenset({"failed", "timed_out", "terminated"})


def refresh() -> None:
    """Look at the configured tracer provider once (a node opens): sets ``tracing``."""
    global tracing, _tracer
    provider = trace.get_tracer_provider()
    on = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    tracer = provider.get_tracer(_SCOPE) if on else None
    if tracer is not None and hasattr(tracer, "id_generator"):
        # The SDK's tracer: ours alone (each get_tracer call builds one), so pinning the
        # ids of the spans it starts changes no other instrumentation's.
        tracer.id_generator = _PinnedIds(tracer.id_generator)
    _tracer, tracing = tracer, on


class _PinnedIds:
    """The SDK id generator of roost's tracer, which can be told the next ids to give.

    A run span is started at the close of its run with the span id (and, for a root, the
    trace id) stored at the run's start, which its activities and children already use
    as their parent. ``pin`` then ``start_span`` run back to back on one thread; the pins
    are per thread, since a Temporal workflow task closes its run in a worker thread
    while the trio thread starts spans of its own.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._pins = threading.local()

    def pin(self, trace_id: int, span_id: int) -> None:
        self._pins.ids = (trace_id, span_id)

    def _take(self, index: int) -> int:
        ids = list(getattr(self._pins, "ids", (0, 0)))
        value, ids[index] = ids[index], 0
        self._pins.ids = (ids[0], ids[1])
        return int(value)

    def generate_span_id(self) -> int:
        return self._take(1) or int(self.inner.generate_span_id())

    def generate_trace_id(self) -> int:
        return self._take(0) or int(self.inner.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        check = getattr(self.inner, "is_trace_id_random", None)
        return bool(check()) if check is not None else False


def _guarded(fn: Callable[..., _T]) -> Callable[..., _T | None]:
    """``fn``, which never raises: telemetry must not stop or fail what it observes."""

    def guarded(*args: Any, **kwargs: Any) -> _T | None:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:  # an exporter's, a sampler's or a value's failure
            if must_propagate(exc):  # a cancel or a real Ctrl-C is not telemetry's to keep
                raise
            log.debug("roost telemetry: %s failed; ignored", fn.__name__, exc_info=True)
            return None

    guarded.__name__ = fn.__name__
    guarded.__doc__ = fn.__doc__
    return guarded


# -- trace context of a run ----------------------------------------------------------------


def _traceparent(trace_id: int, span_id: int, flags: int) -> str:
    return f"{_VERSION}-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def _parse(traceparent: str | None) -> SpanContext | None:
    if not traceparent:
        return None
    try:
        _, trace_id, span_id, flags = traceparent.split("-")
        context = SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(flags, 16)),
        )
    except ValueError:
        return None
    return context if context.is_valid else None


def _random_id(nbytes: int) -> int:
    while True:
        value = int.from_bytes(os.urandom(nbytes), "big")
        if value:
            return value


def _new_trace(parent: SpanContext | None, trace_id: int | None = None) -> str:
    """The trace of a run beginning now under ``parent`` (None: a root of its own).

    Its own span's traceparent, then (after a space) its parent's.
    """
    span_id = _random_id(8)
    if parent is None:
        return _traceparent(trace_id or _random_id(16), span_id, TraceFlags.SAMPLED)
    own = _traceparent(parent.trace_id, span_id, parent.trace_flags)
    return f"{own} {_traceparent(parent.trace_id, parent.span_id, parent.trace_flags)}"


def parse_traceparent(traceparent: str | None) -> SpanContext | None:
    """The span context a W3C ``traceparent`` names (None if absent or malformed)."""
    return _parse(traceparent)


def traceparent_of(context: SpanContext) -> str:
    """The W3C ``traceparent`` of ``context``."""
    return _traceparent(context.trace_id, context.span_id, context.trace_flags)


def _span_of(traced: str | None) -> SpanContext | None:
    return _parse(traced.partition(" ")[0]) if traced else None


def _parent_of(traced: str | None) -> SpanContext | None:
    return _parse(traced.partition(" ")[2]) if traced else None


@_guarded
def _traced_run(record: RunRecord, inherit: RunRecord | None) -> RunRecord:
    if inherit is not None and inherit.options.get("cron_schedule"):
        return attrs.evolve(record, trace=_new_trace(None))  # each cron run: a trace of its own
    if inherit is not None and inherit.trace:
        # The next run of the same id (continue-as-new, a retry): the same trace, under
        # the same parent, as a sibling of the run before.
        parent = _parent_of(inherit.trace)
        own = _span_of(inherit.trace)
        trace_id = own.trace_id if own is not None else None
        return attrs.evolve(record, trace=_new_trace(parent, trace_id))
    current = trace.get_current_span().get_span_context()
    return attrs.evolve(record, trace=_new_trace(current if current.is_valid else None))


def traced_run(record: RunRecord, inherit: RunRecord | None) -> RunRecord:
    """``record`` with the trace of a run beginning now, stored with its start.

    Its parent is the span current in the starting task (an HTTP request's, a queue
    delivery's, the caller's own); the next run of an id (continue-as-new, a retry) is a
    sibling of the run it follows, in its trace; each run of a cron schedule is a root.
    """
    return _traced_run(record, inherit) or record


def child_run(child: RunRecord, parent: RunRecord) -> RunRecord:
    """``child``'s record with a trace under ``parent``'s run span (stored with its start)."""
    span = _span_of(parent.trace)
    if span is None:
        return child
    return attrs.evolve(child, trace=_new_trace(span))


def _ns(at: dt.datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1e9)


def _run_attributes(record: RunRecord, status: str) -> dict[str, Any]:
    return {
        "roost.workflow.id": record.workflow_id,
        "roost.workflow.run_id": record.run_id,
        "roost.workflow.type": record.workflow_type,
        "roost.workflow.attempt": record.attempt,
        "roost.workflow.status": status,
        "roost.workflow.activations": record.activations,
        "roost.workflow.task_queue": record.task_queue,
    }


@_guarded
def run_closed(record: RunRecord, successor: RunRecord | None = None) -> None:
    """Emit the span of a run whose close is committed (once: a close commits once).

    ``successor`` is the run that follows it (continue-as-new, a retry, a cron run): a
    run continued as new keeps its record as it was, and ends as its successor begins.
    """
    own = _span_of(record.trace)
    if own is None:
        return  # the run began before a tracer provider was configured
    status = record.status.value
    if status == "running":
        status = "continued_as_new"
    ended = record.closed_at
    if ended is None and successor is not None:
        ended = successor.started_at
    message = record.error.message if record.error is not None else record.status.value
    _emit_run(
        own,
        _parent_of(record.trace),
        record.workflow_type,
        _run_attributes(record, status),
        started=_ns(record.started_at),
        ended=_ns(ended),
        error=message if status in _FAILED else None,
    )


@_guarded
def hosted_run_closed(
    own: SpanContext,
    parent: SpanContext | None,
    attributes: dict[str, Any],
    *,
    started: dt.datetime,
    error: str | None,
) -> None:
    """Emit the span of a run another host closed (Temporal): it ends now.

    ``own`` is the run's span context, which its activities already name as their
    parent; ``attributes`` are the ``roost.workflow.*`` ones that host knows.
    """
    _emit_run(
        own,
        parent,
        str(attributes["roost.workflow.type"]),
        attributes,
        started=_ns(started),
        ended=None,
        error=error if attributes.get("roost.workflow.status") in _FAILED else None,
    )


def _emit_run(
    own: SpanContext,
    parent: SpanContext | None,
    workflow_type: str,
    attributes: dict[str, Any],
    *,
    started: int | None,
    ended: int | None,
    error: str | None,
) -> None:
    tracer = _tracer
    if tracer is None:
        return
    # A root run must not take the closing task's current span as its parent.
    context = (
        trace.set_span_in_context(NonRecordingSpan(parent))
        if parent is not None
        else otel_context.Context()
    )
    pinned = getattr(tracer, "id_generator", None)
    if isinstance(pinned, _PinnedIds):
        pinned.pin(own.trace_id, own.span_id)
    else:
        attributes = {**attributes, "roost.workflow.span_id": f"{own.span_id:016x}"}
    span = tracer.start_span(
        f"workflow {workflow_type}",
        context=context,
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        start_time=started,
    )
    if isinstance(pinned, _PinnedIds):
        pinned.pin(0, 0)  # not consumed (a sampler dropped the span): nothing left pinned
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, safe_text(error, 1000)))
    span.end(end_time=ended)


# -- activity attempts ---------------------------------------------------------------------


@_guarded
def activity_started(work: Attempt, run: Run | None, ctx: contextvars.Context) -> None:
    """Start the span of a real attempt of ``work`` (current in the attempt's ``ctx``)."""
    task = work.task
    span = attempt_span(
        task.entry,
        {
            "roost.workflow.id": task.workflow_id,
            "roost.workflow.run_id": task.run_id,
            "roost.activity.entry": task.entry,
            "roost.activity.attempt": task.attempt,
            "roost.activity.seq": task.seq,
        },
        _span_of(run.record.trace) if run is not None else None,
    )
    if span is None:
        return
    # The attempt's own context (a copy nothing else runs in): its code sees its span as
    # the current one, so spans it starts are children of the attempt's.
    ctx.run(otel_context.attach, trace.set_span_in_context(span))
    work.span = span


@_guarded
def attempt_span(
    entry: str, attributes: dict[str, Any], parent: SpanContext | None
) -> trace.Span | None:
    """Start the span of a real activity attempt under its run's span (None: untraced)."""
    tracer = _tracer
    if tracer is None:
        return None
    context = (
        trace.set_span_in_context(NonRecordingSpan(parent))
        if parent is not None
        else otel_context.Context()
    )
    return tracer.start_span(
        f"activity {entry}", context=context, kind=SpanKind.INTERNAL, attributes=attributes
    )


@_guarded
def activity_ended(work: Attempt, *, cancelled: bool = False) -> None:
    """End the span of ``work``'s attempt: its outcome is known (or it was cancelled)."""
    span, work.span = work.span, None
    end_attempt_span(span, work.error, cancelled=cancelled)


@_guarded
def end_attempt_span(
    span: trace.Span | None, error: Error | None, *, cancelled: bool = False
) -> None:
    """End an attempt's span with its outcome: ``error`` (None: it succeeded), or cancelled."""
    if span is None:
        return
    if cancelled:
        span.set_attributes({"roost.activity.cancelled": True})
    elif error is not None:
        span.set_status(Status(StatusCode.ERROR, safe_text(error.message, 1000)))
        span.set_attribute("roost.error.kind", error.kind.value)
    span.end()


# -- queue deliveries and HTTP requests ----------------------------------------------------


async def delivery(message: Any, invoke: Awaitable[Error | None]) -> Error | None:
    """Await a queue delivery's ``invoke`` inside its span (which is current meanwhile)."""
    tracer = _tracer
    span = _start_delivery(tracer, message) if tracing and tracer is not None else None
    if span is None:
        return await invoke
    return await _awaited_in(span, invoke, _end)


@_guarded
def _start_delivery(tracer: trace.Tracer, message: Any) -> trace.Span:
    return tracer.start_span(
        f"queue {message.queue} deliver",
        context=otel_context.Context(),
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "roost",
            "messaging.operation.type": "process",
            "messaging.destination.name": message.queue,
            "messaging.message.id": message.receipt_id,
            "roost.queue.receipt_id": message.receipt_id,
            "roost.queue.entry": message.entry,
            "roost.queue.attempt": message.attempt,
        },
    )


@_guarded
def _end(span: trace.Span, error: Error | None, *, cancelled: bool = False) -> None:
    if cancelled:
        span.set_attributes({"roost.cancelled": True})
    elif error is not None:
        span.set_status(Status(StatusCode.ERROR, safe_text(error.message, 1000)))
        span.set_attribute("roost.error.kind", error.kind.value)
    span.end()


async def _awaited_in(
    span: trace.Span, work: Awaitable[_T], finish: Callable[[trace.Span, _T], object]
) -> _T:
    """Await ``work`` with ``span`` current, then ``finish`` the span with what it gave.

    A cancel or a failure ends the span as cancelled, and propagates.
    """
    try:
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            result = await work
    except BaseException:
        _end(span, None, cancelled=True)
        raise
    finish(span, result)
    return result


async def http_request(scope: dict[str, Any], respond: Awaitable[Any]) -> Any:
    """Await an HTTP request's ``respond`` inside its server span (current meanwhile)."""
    tracer = _tracer
    span = _start_request(tracer, scope) if tracing and tracer is not None else None
    if span is None:
        return await respond
    return await _awaited_in(span, respond, _answered)


@_guarded
def _start_request(tracer: trace.Tracer, scope: dict[str, Any]) -> trace.Span:
    method = str(scope.get("method", ""))
    headers = {
        k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or ()
    }
    client = scope.get("client") or (None, None)
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.path": str(scope.get("path", "")),
        "url.scheme": str(scope.get("scheme", "http")),
    }
    if client[0] is not None:
        attributes["client.address"] = str(client[0])
    # A W3C traceparent header from the caller makes the request a child of its span.
    return tracer.start_span(
        f"HTTP {method}",
        context=propagate.extract(headers, context=otel_context.Context()),
        kind=SpanKind.SERVER,
        attributes=attributes,
    )


@_guarded
def _answered(span: trace.Span, rendered: Any) -> None:
    status = int(getattr(rendered, "status", 0))
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))
    span.end()


@_guarded
def http_route(method: str, route: str) -> None:
    """Name the current HTTP request span by its matched route (low cardinality)."""
    span = trace.get_current_span()
    span.set_attribute("http.route", route)
    span.update_name(f"HTTP {method} {route}")


# -- log fields ----------------------------------------------------------------------------


def _current_trace_id() -> str | None:
    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None


def fields(
    *,
    workflow_id: str | None = None,
    run_id: str | None = None,
    entry: str | None = None,
    attempt: int | None = None,
    receipt_id: str | None = None,
    trace_id: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The structured ``extra`` of a runtime log record: all six fields, None if unknown.

    ``trace_id`` defaults to the trace of the span current in the logging task. ``more``
    adds fields of the record's own (``error_kind``, ``retry_in``, ``pid``, ...).
    """
    return {
        "workflow_id": workflow_id,
        "run_id": run_id,
        "entry": entry,
        "attempt": attempt,
        "receipt_id": receipt_id,
        "trace_id": trace_id if trace_id is not None else _current_trace_id(),
        **more,
    }


def trace_id_of(record: RunRecord | None) -> str | None:
    """The trace id stored with a run (None if it began untraced)."""
    span = _span_of(record.trace) if record is not None else None
    return f"{span.trace_id:032x}" if span is not None else None


def run_fields(record: RunRecord, **more: Any) -> dict[str, Any]:
    """``fields`` of a workflow run (its entry is the workflow type)."""
    return fields(
        workflow_id=record.workflow_id,
        run_id=record.run_id,
        entry=record.workflow_type,
        attempt=record.attempt,
        trace_id=trace_id_of(record),
        **more,
    )


@_guarded
def exc_info(error: BaseException | None) -> tuple[type[BaseException], BaseException, Any] | None:
    """The ``exc_info`` of a failure: the exception behind a contained ``roost.Error``.

    ``Error.from_exception`` keeps what was raised as the error's cause; an Error raised
    as it is carries its own traceback. None when there is no traceback to show.
    """
    if error is None:
        return None
    cause = error.__cause__ if error.__cause__ is not None else error
    tb = cause.__traceback__
    if tb is None:
        return None
    try:
        # What a handler's formatter does first: an exception's own attributes (notes,
        # its chain) may raise there, and the record would be lost with the traceback.
        traceback.TracebackException(type(cause), cause, tb, lookup_lines=False)
    except BaseException as exc:  # whatever the hostile exception raises
        if must_propagate(exc):
            raise
        shown = UnrenderableError(
            f"{type_name(cause)} (its traceback cannot be rendered: {type_name(exc)} "
            f"raised while reading it; the frames below are where it was raised)"
        )
        return UnrenderableError, shown, tb
    return type(cause), cause, tb


class UnrenderableError(Exception):
    """Stands in, in a log record, for an exception whose traceback cannot be rendered."""


def log_recovered(workflows: int, tasks: int, timers: int, quarantined: int) -> None:
    """Log at INFO what the workflow runtime found to resume at a node's open."""
    log_workflow.info(
        "recovery: %d workflows resumed, %d activity tasks, %d timers, %d quarantined",
        workflows,
        tasks,
        timers,
        quarantined,
        extra=fields(
            workflows_resumed=workflows,
            activity_tasks=tasks,
            timers=timers,
            quarantined=quarantined,
        ),
    )


def log_queues_recovered(messages: int, dead: int, quarantined: int) -> None:
    """Log at INFO the queue messages found at a node's open."""
    log_queues.info(
        "recovery: %d queue messages to deliver, %d dead letters, %d quarantined",
        messages,
        dead,
        quarantined,
        extra=fields(queue_messages=messages, dead_letters=dead, quarantined=quarantined),
    )


def log_node_opened(node: Any, data_dir: Any) -> None:
    """Log at INFO that a node is open (its recovery logged its own counts before)."""
    embedded = node.local_workflows  # another host's open workflows are not counted here
    workflows = len(embedded.runs) if embedded is not None else 0
    log_node.info(
        "node %s open on %s (incarnation %d, %s): %d workflows open",
        node.name,
        data_dir,
        node.incarnation,
        "tracing on" if tracing else "no tracer provider",
        workflows,
        extra=fields(
            node=node.name,
            incarnation=node.incarnation,
            data_dir=str(data_dir),
            workflows_open=workflows,
            tracing=tracing,
        ),
    )


log_node = logging.getLogger("roost.node")
log_workflow = logging.getLogger("roost.workflow")
log_queues = logging.getLogger("roost.queues")
