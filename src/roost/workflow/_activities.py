"""Running activity tasks: at least once, retried per policy, each attempt timed out."""

from __future__ import annotations

import contextvars
import datetime as dt
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from roost._duration import deadline_after
from roost._errors import Error, ErrorKind
from roost.actors._app import Entry, EntryKind
from roost.actors._contain import in_worker_thread, must_propagate
from roost.actors._process import activity_context, bind_node, set_current
from roost.workflow._activity_log import KEPT_ERRORS, log_failure
from roost.workflow._history import ActivityResolved
from roost.workflow._records import ActivityTask, task_key
from roost.workflow._retry import next_retry

if TYPE_CHECKING:
    from roost.storage import WriteTxn
    from roost.workflow._host import RunHost

__all__ = ["ActivityInfo", "ActivityWorker", "activity_info", "heartbeat"]


class _Unstorable(Exception):  # noqa: N818 - private control flow, never seen by users
    """An activity's result cannot be recorded (raised before anything is written)."""

    def __init__(self, error: Error) -> None:
        super().__init__(error.message)
        self.error = error


def _refuse(exc: Error) -> Any:
    raise _Unstorable(exc)


def _failed_with(seq: int) -> Callable[[Error], ActivityResolved]:
    # An error that cannot be recorded (it is always storable; see Error.from_exception)
    # resolves the activity with the reason instead.
    return lambda exc: ActivityResolved(seq=seq, error=exc)


def _result_error(task: ActivityTask, problem: Error) -> Error:
    """The failure of an attempt whose result the codec refused (retried per policy)."""
    # The codec names the place in the recorded event; the user knows it as the result.
    where = problem.message.replace(_RESULT_PATH, "result", 1)
    details = dict(problem.details)
    if isinstance(details.get("path"), str):
        details["path"] = details["path"].replace(_RESULT_PATH, "result", 1)
    return Error(
        f"activity {task.entry!r} attempt {task.attempt} returned a value that cannot be "
        f"stored: {where}. Return plain data (None, bool, int, float, str, bytes, lists, "
        "dicts, aware datetimes, UUIDs, Pids or registered attrs records)",
        kind=ErrorKind.INVALID,
        details={**details, "attempt": task.attempt, "reason": "unencodable result"},
    )


_RESULT_PATH = "payload.value"  # where the codec finds a result in ActivityResolved


@attrs.frozen(kw_only=True)
class ActivityInfo:
    """What a running activity knows about itself (``roost.activity_info()``).

    ``idempotency_key`` is stable across retries and restarts: the same for every attempt
    of the same scheduled activity, so the activity can make its side effects idempotent.
    """

    workflow_id: str
    run_id: str
    seq: int
    entry: str
    attempt: int
    idempotency_key: str
    scheduled_at: dt.datetime


_info: contextvars.ContextVar[ActivityInfo | None] = contextvars.ContextVar(
    "roost_activity", default=None
)


def activity_info() -> ActivityInfo | None:
    """The running activity's info, or None outside an activity run by a workflow."""
    return _info.get()


_beat: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar(
    "roost_heartbeat", default=None
)


def heartbeat(details: Any = None) -> None:
    """Tell roost the running activity is alive (resets its ``heartbeat_timeout``).

    Works from async activities and from sync ones in their worker thread; a no-op in an
    activity without a heartbeat timeout.

    Raises:
        roost.Error: kind InvalidState outside an activity run by a workflow.
    """
    beat = _beat.get()
    if beat is None:
        if _info.get() is None:
            raise Error(
                "roost.heartbeat() must be called inside an activity run by a workflow",
                kind=ErrorKind.INVALID_STATE,
            )
        return
    beat(details)


def _beater(scope: trio.CancelScope, every: float, limit: float) -> Callable[[Any], None]:
    def extend() -> None:
        # One scope carries both limits: a beat never pushes past the attempt's timeout.
        scope.deadline = min(trio.current_time() + every, limit)

    def beat(_details: Any) -> None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:  # a sync activity's worker thread
            trio.from_thread.run_sync(extend)
        else:
            extend()

    return beat


class _Work:
    """One task being worked on: whether the workflow cancelled it, and what to interrupt.

    A plain flag plus the scope of the current attempt (or backoff sleep), rather than a
    cancel scope around the whole task: scopes are a measurable cost per activity.
    """

    __slots__ = ("cancelled", "scope")

    def __init__(self) -> None:
        self.cancelled = False
        self.scope: trio.CancelScope | None = None

    def enter(self, scope: trio.CancelScope) -> None:
        self.scope = scope
        if self.cancelled:
            scope.cancel()


class ActivityWorker:
    """Runs each submitted task in its own trio task until it resolves."""

    def __init__(self, manager: RunHost, nursery: trio.Nursery) -> None:
        self.m = manager
        self._nursery = nursery
        self.running: dict[tuple[str, int], _Work] = {}

    def submit(self, task: ActivityTask) -> None:
        """Start working on ``task`` (a task already being worked on is ignored)."""
        ident = (task.run_id, task.seq)
        if ident in self.running:
            return
        work = self.running[ident] = _Work()
        self._nursery.start_soon(self._work_on, task, work, name=f"roost.activity {task.entry}")

    def cancel(self, run_id: str, seq: int) -> None:
        """Stop working on a task the workflow cancelled (its row is already deleted)."""
        work = self.running.get((run_id, seq))
        if work is not None:
            work.cancelled = True
            if work.scope is not None:
                work.scope.cancel()

    async def _work_on(self, task: ActivityTask, work: _Work) -> None:
        try:
            while True:
                if not await self._wait_until(task.not_before, work):
                    return  # cancelled while waiting for its next attempt
                if not self._wanted(task):
                    await self._forget_if_orphan(task)
                    return  # its run closed (its row went with it): no more attempts
                value, error = await self._attempt(task, work)
                if work.cancelled:
                    return  # the workflow cancelled it: its row is gone, write nothing
                if error is None:
                    try:
                        await self._resolve(task, value, None)
                    except _Unstorable as exc:  # nothing was written: the attempt failed
                        error = _result_error(task, exc.error)
                    else:
                        return
                if not self._wanted(task):
                    return  # its run closed meanwhile (its row is gone): no more attempts
                delay = next_retry(task.options, task.attempt, error)
                if delay is not None and self._past_schedule_to_close(task, delay):
                    error = self._schedule_to_close_error(task, error)
                    delay = None
                log_failure(task, error, delay)
                if delay is None:
                    await self._resolve(task, None, error)
                    return
                task = await self._reschedule(task, error, delay)
        finally:
            self.running.pop((task.run_id, task.seq), None)

    def _wanted(self, task: ActivityTask) -> bool:
        run = self.m.runs.get(task.workflow_id)
        return run is not None and run.record.run_id == task.run_id

    async def _forget_if_orphan(self, task: ActivityTask) -> None:
        # A row whose run has closed (left by a version that did not delete it at the
        # close) is deleted; one of a run that is open but cannot resume here stays.
        record = self.m.stored_record(task.workflow_id)
        if record is None or record.run_id != task.run_id or record.status.value != "running":
            key = task_key(task.run_id, task.seq)
            await self.m.transact(lambda txn: txn.delete("tasks", key))

    def _schedule_to_close_left(self, task: ActivityTask) -> float:
        limit = task.options.get("schedule_to_close_timeout")
        if limit is None:
            return math.inf
        elapsed = (self.m.node.now() - task.scheduled_at).total_seconds()
        return float(limit) - elapsed

    def _past_schedule_to_close(self, task: ActivityTask, delay: float) -> bool:
        return self._schedule_to_close_left(task) <= delay

    def _schedule_to_close_error(self, task: ActivityTask, last: Error) -> Error:
        limit = task.options.get("schedule_to_close_timeout")
        return Error(
            f"activity {task.entry!r} did not complete within its schedule_to_close_timeout "
            f"of {limit:g}s (attempt {task.attempt}; last error: {last})",
            kind=ErrorKind.TIMEOUT,
            retryable=False,
            details={"timeout_type": "schedule_to_close", "attempt": task.attempt},
        )

    async def _wait_until(self, when: dt.datetime | None, work: _Work) -> bool:
        """Sleep until ``when``; False if the workflow cancelled the task meanwhile."""
        if when is not None:
            delay = (when - self.m.node.now()).total_seconds()
            if delay > 0:
                with trio.move_on_after(delay) as scope:
                    work.enter(scope)
                    await trio.sleep_forever()
                work.scope = None
        return not work.cancelled

    def _entry(self, task: ActivityTask) -> Entry | Error:
        try:
            entry = self.m.node.app.resolve(task.entry)
        except Error as exc:
            return Error(exc.message, kind=exc.kind, retryable=False, details=exc.details)
        if entry.kind is not EntryKind.ACTIVITY:
            return Error(
                f"{task.entry!r} is not an activity", kind=ErrorKind.INVALID, retryable=False
            )
        return entry

    async def _attempt(self, task: ActivityTask, work: _Work) -> tuple[Any, Error | None]:
        entry = self._entry(task)
        if isinstance(entry, Error):
            return None, entry
        info = ActivityInfo(
            workflow_id=task.workflow_id,
            run_id=task.run_id,
            seq=task.seq,
            entry=task.entry,
            attempt=task.attempt,
            idempotency_key=f"{task.workflow_id}/{task.run_id}/{task.seq}",
            scheduled_at=task.scheduled_at,
        )
        try:
            return await self._timed(entry, task, info, work)
        except BaseException as exc:
            if must_propagate(exc):  # the node is stopping, or a real Ctrl-C (see _contain)
                raise
            # Anything else the activity raised (SystemExit and GeneratorExit included)
            # fails this attempt, as an error the codec can always store.
            return None, Error.from_exception(exc)
        finally:
            _beat.set(None)

    async def _timed(
        self, entry: Entry, task: ActivityTask, info: ActivityInfo, work: _Work
    ) -> tuple[Any, Error | None]:
        """One attempt under its start_to_close, schedule_to_close and heartbeat limits."""
        start_to_close = float(task.options.get("start_to_close_timeout", 600.0))
        left = self._schedule_to_close_left(task)
        timeout = min(start_to_close, max(left, 0.0))
        every = task.options.get("heartbeat_timeout")
        # One cancel scope for both limits (scopes are a measurable part of each attempt).
        limit = trio.current_time() + timeout
        with trio.CancelScope(deadline=limit) as scope:
            work.enter(scope)
            if every:
                scope.deadline = min(trio.current_time() + float(every), limit)
                _beat.set(_beater(scope, float(every), limit))
            try:
                return await self._call(entry.fn, entry.is_async, task, info), None
            finally:
                work.scope = None
        if scope.deadline < limit:
            return None, self._timeout(task, "heartbeat", float(every or 0))
        expired = self._timeout(task, "start_to_close", timeout)
        if left < start_to_close:
            return None, self._schedule_to_close_error(task, expired)
        return None, expired

    def _timeout(self, task: ActivityTask, kind: str, seconds: float) -> Error:
        return Error(
            f"activity {task.entry!r} attempt {task.attempt} exceeded its {kind}_timeout "
            f"of {seconds:g}s",
            kind=ErrorKind.TIMEOUT,
            details={"timeout_type": kind, "attempt": task.attempt},
        )

    async def _call(self, fn: Any, is_async: bool, task: ActivityTask, info: ActivityInfo) -> Any:
        # An activity is a function, not a process: it sees its workflow's context values
        # (ctx.get) and its own info (roost.activity_info()), and no current process.
        faults = self.m.node.ext.get("activity_faults")  # roost.testing's fail_activity
        failure = faults.take(task.entry) if faults is not None else None
        if failure is not None:
            raise failure
        run = self.m.runs.get(task.workflow_id)
        set_current(None)
        bind_node(self.m.node)  # roost.state works here though no process is current
        activity_context.set(dict(run.context) if run is not None else {})
        _info.set(info)
        if is_async:
            return await fn(*task.args)
        ctx = contextvars.copy_context()
        if self.m.node.mock_time:
            # Under a MockClock a thread would let virtual time (and timeouts) race ahead.
            return ctx.run(fn, *task.args)
        return await trio.to_thread.run_sync(
            ctx.run, in_worker_thread, fn, *task.args, abandon_on_cancel=True
        )

    async def _resolve(self, task: ActivityTask, value: Any, error: Error | None) -> None:
        """Hand the outcome to the workflow.

        Raises:
            _Unstorable: ``value`` cannot be recorded (nothing was written).
        """
        if error is None:
            # A result is a payload: it gets MAX_DEPTH on its own, not the envelope's allowance
            # around it, or the workflow would get a value it can never hand on.
            try:
                self.m.codec.check(value, what=_RESULT_PATH)
            except Error as exc:
                raise _Unstorable(exc) from None
        await self.m.settle(
            "tasks",
            task_key(task.run_id, task.seq),
            (task.workflow_id, task.run_id),
            ActivityResolved(seq=task.seq, value=value, error=error),
            on_unencodable=_refuse if error is None else _failed_with(task.seq),
        )

    async def _reschedule(self, task: ActivityTask, error: Error, delay: float) -> ActivityTask:
        # The latest errors only: under an unlimited policy the row must not grow for ever.
        errors = [*task.errors[-(KEPT_ERRORS - 1) :], error]
        task = attrs.evolve(
            task,
            attempt=task.attempt + 1,
            not_before=deadline_after(self.m.node.now(), delay),
            errors=errors,
        )
        data = self.m.codec.encode(task)
        key = task_key(task.run_id, task.seq)

        def write(txn: WriteTxn) -> None:
            # Not if the workflow cancelled the activity meanwhile (it deleted the row).
            if txn.get("tasks", key) is not None:
                txn.put("tasks", key, data)

        await self.m.transact(write)
        return task
