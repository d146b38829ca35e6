"""The activity side: one dynamic temporalio activity runs every roost activity of the app.

The activity type is the roost entry id (``"shop:charge"``), its id the seq of the command
that scheduled it. A sync roost activity runs in a worker thread; an async one is trio code
and runs on the node's trio loop (``Bridge.to_trio``). What it raises crosses as an
``ApplicationError`` whose type is the roost kind (``_failures``), so a retry policy's
``non_retryable_error_kinds`` are Temporal's ``non_retryable_error_types``.
``roost.activity_info()`` and ``roost.heartbeat()`` ask the attempt's ``ActivityPort``,
built over ``activity.info()`` and ``activity.heartbeat()``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import temporalio.activity
import temporalio.common
import temporalio.worker
import temporalio.workflow
from opentelemetry import context as otel_context
from opentelemetry import trace

from roost._counters import RuntimeCounters
from roost._errors import Error, ErrorKind
from roost._security import SECURITY_KEY
from roost.actors._app import EntryKind
from roost.actors._contain import in_worker_thread
from roost.storage._codec import Codec
from roost.temporal._bridge import Bridge
from roost.temporal._failures import application_error
from roost.temporal._options import CONTEXT_MEMO
from roost.temporal._tracing import attempt_ended, attempt_started
from roost.workflow._activity_info import ActivityInfo, ActivityPort, install_port
from roost.workflow._host_protocol import NodeServices
from roost.workflow._recorded import is_plain
from roost.workflow._trust import Trust, activity_context, activity_id

__all__ = ["TemporalActivityPort", "activity_function"]

_CODEC = Codec()


class TemporalActivityPort(ActivityPort):
    """One attempt's info and heartbeat, from temporalio's ``activity.info()``."""

    __slots__ = ("_beat", "_info", "_temporal", "context")

    def __init__(self, info: temporalio.activity.Info, beat: Callable[[Any], None]) -> None:
        self._temporal = info
        self._beat = beat
        self._info: ActivityInfo | None = None
        self.context = _context.get()  # the workflow's ctx values, from the task's header

    def info(self) -> ActivityInfo:
        """The attempt's info; the idempotency key is ``workflow id/run id/seq``."""
        info = self._info
        if info is None:
            t = self._temporal
            seq = int(t.activity_id) if t.activity_id.isdigit() else 0
            scheduled = t.scheduled_time
            if scheduled.tzinfo is None:
                scheduled = scheduled.replace(tzinfo=dt.UTC)
            info = self._info = ActivityInfo(
                workflow_id=t.workflow_id or "",
                run_id=t.workflow_run_id or "",
                seq=seq,
                entry=t.activity_type,
                attempt=t.attempt,
                idempotency_key=f"{t.workflow_id}/{t.workflow_run_id}/{t.activity_id}",
                scheduled_at=scheduled,
            )
        return info

    def heartbeat(self, details: Any) -> None:
        """Record a heartbeat with Temporal (from the trio thread or a worker thread)."""
        self._beat(details)


def activity_function(
    services: NodeServices,
    bridge: Bridge,
    threads: concurrent.futures.Executor,
    counters: RuntimeCounters,
) -> Callable[..., Any]:
    """The dynamic temporalio activity that runs the node's app's activities.

    Each attempt is counted in ``counters`` (``roost_activity_*`` by entry), as the
    embedded host counts its attempts.
    """
    app = services.app

    @temporalio.activity.defn(dynamic=True)
    async def roost_activity(args: Sequence[temporalio.common.RawValue]) -> Any:
        info = temporalio.activity.info()
        try:
            entry = app.resolve(info.activity_type)
        except Error as exc:
            raise application_error(exc) from None
        if entry.kind is not EntryKind.ACTIVITY:
            raise application_error(
                Error(
                    f"{info.activity_type!r} is a {entry.kind.value}, not an activity",
                    kind=ErrorKind.INVALID,
                    retryable=False,
                )
            )
        converter = temporalio.activity.payload_converter()
        values = converter.from_payloads([arg.payload for arg in args])
        port = TemporalActivityPort(info, _beater(asyncio.get_running_loop()))
        if port.context is not None and SECURITY_KEY in port.context:
            # Checked as on the embedded host: the workflow's envelope, then the activity's
            # own, sealed for its derived id, before the activity runs.
            seq = int(info.activity_id) if info.activity_id.isdigit() else 0
            addressee = activity_id(info.workflow_id or "", info.workflow_run_id or "", seq)
            trust = Trust(services.keyring, frozenset(app.policies))
            sealed, refused = activity_context(
                port.context, info.workflow_id or "", addressee, trust
            )
            if refused is not None:
                raise application_error(refused)
            port.context = sealed
        began = counters.attempt(entry.id)
        span = attempt_started(info, int(info.activity_id) if info.activity_id.isdigit() else 0)
        try:
            if entry.is_async:
                value = await bridge.to_trio(_run_async, services, entry.fn, values, port, span)
            else:
                loop = asyncio.get_running_loop()
                value = await loop.run_in_executor(
                    threads, _run_sync, services, entry.fn, values, port, span
                )
            if not is_plain(value):
                _CODEC.check(value, what="result")
        except asyncio.CancelledError:
            attempt_ended(span, None, cancelled=True)
            raise
        except BaseException as exc:  # noqa: BLE001 - the attempt's failure, whatever the activity raised
            counters.attempt_failed(entry.id)
            error = Error.from_exception(exc)
            attempt_ended(span, error, cancelled=False)
            raise application_error(error) from None
        finally:
            counters.attempt_done(entry.id, began)
        attempt_ended(span, None, cancelled=False)
        return value

    return roost_activity


def _beater(loop: asyncio.AbstractEventLoop) -> Callable[[Any], None]:
    """``roost.heartbeat`` for the running attempt: temporalio's, on its loop, in its context."""
    here = contextvars.copy_context()

    def beat(details: Any) -> None:
        args = () if details is None else (details,)
        loop.call_soon_threadsafe(here.run, temporalio.activity.heartbeat, *args)

    return beat


async def _run_async(
    services: NodeServices,
    fn: Callable[..., Any],
    values: list[Any],
    port: ActivityPort,
    span: trace.Span | None,
) -> Any:
    """In a task of the node's trio nursery: no current process, the node bound."""
    services.bind_activity()
    install_port(port)
    if span is not None:  # spans the activity's code starts are children of the attempt's
        otel_context.attach(trace.set_span_in_context(span))
    return await fn(*values)


def _run_sync(
    services: NodeServices,
    fn: Callable[..., Any],
    values: list[Any],
    port: ActivityPort,
    span: trace.Span | None,
) -> Any:
    """In a worker thread, in a fresh context holding the attempt's port and the node."""
    ctx = contextvars.Context()
    ctx.run(services.bind_activity)
    ctx.run(install_port, port)
    if span is not None:
        ctx.run(otel_context.attach, trace.set_span_in_context(span))
    return ctx.run(in_worker_thread, fn, *values)


# -- the workflow's ctx values, carried to its activities in a header --------------------------

CONTEXT_HEADER = "roost-context"
_context: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "roost_temporal_context", default=None
)


class ContextCarrier(temporalio.worker.Interceptor):
    """Carries a workflow's ctx values to its activities, as on the embedded host.

    The workflow side adds them (from the run's memo) as a header to each activity it
    schedules; the activity side reads the header into the attempt's ``ctx.get``.
    """

    def intercept_activity(
        self, inner: temporalio.worker.ActivityInboundInterceptor
    ) -> temporalio.worker.ActivityInboundInterceptor:
        return _ActivityContext(inner)

    def workflow_interceptor_class(
        self, workflow: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        return _WorkflowContext


class _ActivityContext(temporalio.worker.ActivityInboundInterceptor):
    async def execute_activity(self, attempt: temporalio.worker.ExecuteActivityInput) -> Any:
        payload = attempt.headers.get(CONTEXT_HEADER)
        if payload is not None:
            converter = temporalio.activity.payload_converter()
            _context.set(converter.from_payloads([payload])[0])
        return await self.next.execute_activity(attempt)


class _WorkflowContext(temporalio.worker.WorkflowInboundInterceptor):
    def init(self, outbound: temporalio.worker.WorkflowOutboundInterceptor) -> None:
        super().init(_ScheduleWithContext(outbound))


class _ScheduleWithContext(temporalio.worker.WorkflowOutboundInterceptor):
    def start_activity(
        self, schedule: temporalio.worker.StartActivityInput
    ) -> temporalio.workflow.ActivityHandle[Any]:
        context = temporalio.workflow.memo_value(CONTEXT_MEMO, None)
        if context:
            payload = temporalio.workflow.payload_converter().to_payloads([context])[0]
            schedule.headers = {**schedule.headers, CONTEXT_HEADER: payload}
        return self.next.start_activity(schedule)
