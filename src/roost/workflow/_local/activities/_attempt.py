"""One activity attempt: its state, driving its coroutine, and what its failures become."""

from __future__ import annotations

import contextvars
import math
import struct
import types
from collections.abc import Callable, Coroutine, Generator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from roost import _telemetry as telemetry
from roost._counters import RuntimeCounters
from roost._errors import Error, ErrorKind, invalid, safe_text, type_name
from roost.actors._contain import must_propagate
from roost.workflow._activity_info import ActivityInfo, ActivityPort
from roost.workflow._history import ActivityResolved
from roost.workflow._local._records import ActivityTask, row_prefix
from roost.workflow._local.activities._threads import SyncJob

if TYPE_CHECKING:
    from roost.storage import Codec

__all__ = [
    "RESULT_PATH",
    "SCALARS",
    "Attempt",
    "AttemptPort",
    "Unstorable",
    "check_result",
    "failed",
    "failed_with",
    "refuse",
    "result_error",
    "resume",
    "task_row",
]

# Results that always encode, at any depth (ints of any size too: a bignum is one tag).
SCALARS = frozenset({int, str, bytes, float, bool, type(None)})
_U64 = struct.Struct(">Q")


class AttemptPort(ActivityPort):
    """What an attempt's context knows of it; its ``ActivityInfo`` is built when first asked.

    ``task`` is the attempt's ActivityTask (anything with its fields): most activities
    never call ``activity_info()``, so an attempt's start builds no record for it.
    ``context`` is its workflow's context values (``ctx.get``), ``beat`` what
    ``roost.heartbeat()`` calls (None: the task has no heartbeat timeout).
    """

    __slots__ = ("_info", "beat", "context", "task")

    def __init__(
        self,
        task: Any,
        context: Mapping[str, Any] | None = None,
        beat: Callable[[Any], None] | None = None,
    ) -> None:
        self.task = task
        self.context = context
        self.beat = beat
        self._info: ActivityInfo | None = None

    def info(self) -> ActivityInfo:
        """The attempt's info (the same object on every call)."""
        info = self._info
        if info is None:
            task = self.task
            info = self._info = ActivityInfo(
                workflow_id=task.workflow_id,
                run_id=task.run_id,
                seq=task.seq,
                entry=task.entry,
                attempt=task.attempt,
                idempotency_key=f"{task.workflow_id}/{task.run_id}/{task.seq}",
                scheduled_at=task.scheduled_at,
            )
        return info

    def heartbeat(self, details: Any) -> None:
        """Extend the attempt's deadline (a no-op without a heartbeat timeout)."""
        beat = self.beat
        if beat is not None:
            beat(details)


class Unstorable(Exception):  # noqa: N818 - private control flow, never seen by users
    """An activity's result cannot be recorded (raised before anything is written)."""

    def __init__(self, error: Error) -> None:
        super().__init__(error.message)
        self.error = error


def refuse(exc: Error) -> Any:
    raise Unstorable(exc)


def failed_with(seq: int) -> Callable[[Error], ActivityResolved]:
    # An error that cannot be recorded (it is always storable; see Error.from_exception)
    # resolves the activity with the reason instead.
    return lambda exc: ActivityResolved(seq=seq, error=exc)


def result_error(task: ActivityTask, problem: Error) -> Error:
    """The failure of an attempt whose result the codec refused (retried per policy)."""
    # The codec names the place in the recorded event; the user knows it as the result.
    where = problem.message.replace(RESULT_PATH, "result", 1)
    details = dict(problem.details)
    if isinstance(details.get("path"), str):
        details["path"] = details["path"].replace(RESULT_PATH, "result", 1)
    return Error(
        f"activity {task.entry!r} attempt {task.attempt} returned a value that cannot be "
        f"stored: {where}. Return plain data (None, bool, int, float, str, bytes, lists, "
        "dicts, aware datetimes, UUIDs, Pids or registered attrs records)",
        kind=ErrorKind.INVALID,
        details={**details, "attempt": task.attempt, "reason": "unencodable result"},
    )


RESULT_PATH = "payload.value"  # where the codec finds a result in ActivityResolved


def check_result(codec: Codec, value: Any) -> None:
    """Check that an attempt's result can be recorded.

    A result is a payload: it gets MAX_DEPTH on its own, not the envelope's allowance
    around it, or the workflow would get a value it can never hand on. A scalar is
    storable at any depth (the codec's walk would say so, one Walk later).

    Raises:
        Unstorable: it cannot (nothing was written).
    """
    if type(value) in SCALARS:
        return
    try:
        codec.check(value, what=RESULT_PATH)
    except Error as exc:
        raise Unstorable(exc) from None
    except Exception as exc:  # the value's own methods raised
        raise Unstorable(unreadable(exc)) from exc


def unreadable(exc: Exception) -> Error:
    """The refusal of a result whose own methods raised while it was read."""
    return invalid(
        f"{RESULT_PATH}: reading the value raised {type_name(exc)}: {safe_text(exc, 1000)}",
        path=RESULT_PATH,
        exception=type_name(exc),
    )


def task_row(task: ActivityTask) -> bytes:
    """The task's key in ``tasks``: ``task_key(task.run_id, task.seq)``, built directly.

    The generic key builder checks each part's type and range; a task's parts passed
    those checks when its row was written (a run id's text, a sequence number), and
    this is built once per attempt's outcome.
    """
    return row_prefix(task.run_id) + _U64.pack(task.seq)


def failed(exc: BaseException) -> Error:
    """The attempt's error for what its activity raised.

    Raises:
        BaseException: ``exc`` itself if it is not the activity's to fail with: the node
            is stopping, a real Ctrl-C, or this attempt's own timeout (see _contain).
    """
    if must_propagate(exc):
        raise exc
    # Anything else the activity raised (SystemExit and GeneratorExit included) fails this
    # attempt, as an error the codec can always store.
    return Error.from_exception(exc)


@types.coroutine
def resume(
    ctx: contextvars.Context, coro: Coroutine[Any, Any, Any], yielded: Any
) -> Generator[Any, Any, Any]:
    """Drive a coroutine that suspended in its first step on to its end, in ``ctx``.

    Trio sees this task waiting on what the coroutine yielded (it yielded it while this
    task was the current one), and each step runs in the attempt's context.
    """
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            ctx.run(coro.close)
            raise
        except BaseException as exc:  # noqa: BLE001 - trio's outcome for the coroutine
            try:
                yielded = ctx.run(coro.throw, exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = ctx.run(coro.send, sent)
            except StopIteration as stop:
                return stop.value


class Attempt:
    """One task being worked on: its attempt's limits and outcome, and what to interrupt.

    ``scope`` is the cancel scope of an attempt that suspended (or of a backoff sleep),
    ``job`` the thread job of a sync attempt; a workflow's cancel interrupts either.
    """

    __slots__ = (
        "began",
        "cancelled",
        "ctx",
        "deadline",
        "done",
        "error",
        "every",
        "job",
        "left",
        "limit",
        "meter",
        "scope",
        "span",
        "task",
        "timeout",
        "value",
    )

    def __init__(self, task: ActivityTask, meter: RuntimeCounters) -> None:
        self.task = task
        self.meter = meter
        self.began = 0.0  # the running attempt's start (perf_counter), for its latency
        self.cancelled = False
        self.scope: trio.CancelScope | None = None
        self.job: SyncJob | None = None
        self.ctx: contextvars.Context | None = None
        self.done = False  # the attempt has an outcome: value, or error
        self.value: Any = None
        self.error: Error | None = None
        self.limit = self.deadline = self.left = math.inf
        self.timeout = 0.0
        self.every: float | None = None
        self.span: Any = None  # the attempt's trace span while it runs (roost._telemetry)

    def enter(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        if self.cancelled:
            scope.cancel()

    def finish(self, value: Any, error: Error | None) -> None:
        if self.began:
            self.began = self.meter.attempt_done(self.task.entry, self.began)
        self.done = True
        self.value = value
        self.error = error
        self.ctx = None
        if self.span is not None:
            telemetry.activity_ended(self)
