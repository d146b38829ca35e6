"""Running activity tasks: at least once, retried per policy, each attempt timed out.

One runner task starts every attempt that is ready, in passes. An async activity's
first step runs inline in the runner (``coro.send(None)`` in the attempt's own context);
one that finishes without suspending, the common case, costs no trio task and no cancel
scope of its own. One that suspends keeps the runner's task, which becomes the attempt's
task (its trio waits were registered on it), under the runner's cancel scope, which
then takes the attempt's deadline; a new runner carries on with the rest of the pass.
Sync attempts ready in one pass go to the worker threads as one batch
(``_activity_threads``), their deadlines kept in one heap by one timer task. Results
that need no commit (a success for an open run) are handed to the workflow by the
runner; failures, retries with their backoff, and rows of closed runs each get a task.
When no executor is in a pass, the runner then runs the activations its results resumed
itself (``Passes.take_pass``): one scheduler round trip less between a result and the
activation it resumes.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import heapq
import itertools
import types
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from roost import _telemetry as telemetry
from roost._errors import Error, ErrorKind
from roost._security import SECURITY_KEY
from roost.actors._app import Entry, EntryKind
from roost.workflow._activity_info import install_port, prepare_base
from roost.workflow._history import ActivityResolved
from roost.workflow._local._records import ActivityTask
from roost.workflow._local._replay import paused_gc
from roost.workflow._local._run import NO_ROW
from roost.workflow._local.activities._attempt import (
    SCALARS,
    Attempt,
    AttemptPort,
    Unstorable,
    check_result,
    failed,
    failed_with,
    refuse,
    result_error,
    resume,
    task_row,
    unreadable,
)
from roost.workflow._local.activities._limits import (
    began_at,
    expired,
    schedule_to_close_error,
    schedule_to_close_left,
    set_limits,
)
from roost.workflow._local.activities._log import log_failure
from roost.workflow._local.activities._rows import forget_if_orphan, reschedule
from roost.workflow._local.activities._threads import SyncJob, ThreadPool, never_raising
from roost.workflow._retry import next_retry
from roost.workflow._trust import Trust, activity_context, activity_id

if TYPE_CHECKING:
    from roost._counters import RuntimeCounters
    from roost.actors._process import NodeOps
    from roost.storage import Codec
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._incoming import Incoming
    from roost.workflow._local._runs import RunTable

__all__ = ["ActivityWorker", "Passes"]


class Passes(Protocol):
    """What the worker asks of the executors (``Executors``): hold the runs its results ready.

    Named by role, not by class: the executors run the activation shell, which hands the
    worker its tasks, so the worker cannot import them.
    """

    def hold(self) -> None:
        """Runs queued from now on wait for ``release`` (no executor is woken for them)."""

    def release(self, *, take: bool) -> bool:
        """End ``hold``; True if the caller is to run the held runs' pass (``take_pass``)."""

    async def take_pass(self) -> None:
        """Take the queued runs and run their pass (activations, commit, effects) here."""


class ActivityWorker:
    """Runs each submitted task until it resolves: attempts in passes of one runner task."""

    def __init__(
        self,
        *,
        node: NodeOps,
        runs: RunTable,
        codec: Codec,
        commits: Commits,
        counters: RuntimeCounters,
        incoming: Incoming,
        passes: Passes,
        nursery: trio.Nursery,
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            node: the node activities run on (its app, clock, test faults, ``roost.ctx``).
            runs: the run table (whether a task's run still waits for it).
            codec: encodes results and rows.
            commits: stores a retried task's row, deletes an orphan's.
            counters: attempts and their failures, for the metrics.
            incoming: hands a finished task's event to its run (``settle``).
            passes: the executors, held while a pass of results is handed on.
            nursery: where attempts and the runner run.
        """
        self._node, self._runs, self._commits, self._counters = node, runs, commits, counters
        self._incoming, self._passes = incoming, passes
        self._nursery = nursery
        self.running: dict[tuple[str, int], Attempt] = {}
        # The tasks with a row in ``tasks``: an attempt failed (or it was recovered from a
        # row). The others' only record is the command that scheduled them.
        self._rows: set[tuple[str, int]] = set()
        # What every attempt's context starts from: the runtime's own, never a caller's,
        # with no current process and the node bound (see prepare_base).
        self._base = contextvars.copy_context()
        self._base.run(prepare_base, node)
        self._settle_now = incoming.settle_now  # once per finished attempt
        self._codec = codec
        # Each activity's entry, resolved on its first attempt: an app's entries never
        # change once registered (a taken id is refused), and the node's app is fixed.
        self._entries: dict[str, Entry] = {}
        self._ready: deque[Attempt] = deque()  # attempts to start, and outcomes to hand on
        self._runner = False  # a runner task exists (draining _ready, or parked)
        self._parked: trio.lowlevel.Task | None = None  # the runner, waiting for work
        self._pool = ThreadPool(nursery, self._delivered)
        # Deadlines of sync attempts in the threads: (deadline, tie, work), stale entries
        # skipped (a beat pushes a new one; a finished job leaves its entry behind).
        self._deadlines: list[tuple[float, int, Attempt]] = []
        self._tie = itertools.count()
        self._timer: trio.CancelScope | None = None
        self._timing = False
        self._timed = 0  # sync attempts in the threads with a live deadline
        self.stats = {"inline": 0, "suspended": 0, "threaded": 0}
        # Set once the nursery is ending: a sync activity's thread may outlive the node,
        # and what it hands back then (a result, a beat) must start nothing in it.
        self.closed = False
        nursery.start_soon(self._until_closed, name="roost.activities closed")

    async def _until_closed(self) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.closed = self._pool.closed = True

    @property
    def thread_hops(self) -> int:
        """How many worker-thread hops sync attempts took so far."""
        return self._pool.hops

    def submit(self, task: ActivityTask, *, stored: bool = False) -> None:
        """Start working on ``task`` (a task already being worked on is ignored).

        ``stored``: the task has a row in ``tasks`` (recovered from one), which its
        outcome's commit deletes; a task only in the history it was scheduled in has none.
        """
        ident = (task.run_id, task.seq)
        if ident in self.running:
            return
        if stored:
            self._rows.add(ident)
        work = self.running[ident] = Attempt(task, self._counters)
        when = task.not_before
        if when is not None and when > self._node.now():
            self._nursery.start_soon(self._work_on, work, name=f"roost.activity {task.entry}")
        else:
            self._queue(work)

    def cancel(self, run_id: str, seq: int) -> None:
        """Stop working on a task the workflow cancelled (its row is already deleted)."""
        work = self.running.get((run_id, seq))
        if work is None:
            return
        work.cancelled = True
        if work.span is not None:
            telemetry.activity_ended(work, cancelled=True)
        if work.scope is not None:
            work.scope.cancel()
        job = work.job
        if job is not None:  # in the threads: never started, or its thread abandoned
            self._pool.drop(job)
            work.job = None
            self._timed -= 1
            self._forget((run_id, seq))

    def _forget(self, ident: tuple[str, int]) -> None:
        """The task is done here: resolved, cancelled, or of a run no longer open."""
        self.running.pop(ident, None)
        self._rows.discard(ident)

    # -- the runner ----------------------------------------------------------------------

    def _queue(self, work: Attempt) -> None:
        self._ready.append(work)
        parked = self._parked
        if parked is not None:
            self._parked = None
            trio.lowlevel.reschedule(parked)
        elif not self._runner:
            self._runner = True
            self._nursery.start_soon(self._run, name="roost.activities")

    async def _park(self) -> None:
        """Wait (the runner, its queue empty) until ``_queue`` wakes it."""
        self._parked = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _run(self) -> None:
        """Drain the ready queue in passes; if an attempt suspends, become its task."""
        handed: tuple[Attempt, Coroutine[Any, Any, Any], Any] | None = None
        executors = self._passes
        try:
            with trio.CancelScope() as scope:
                while True:
                    if not self._ready:
                        await self._park()
                    executors.hold()  # the runs this pass resumes wait for its end
                    try:
                        # As in an executor's pass: what a pass allocates mostly lives on
                        # (attempts, the results handed on), so young collections inside it
                        # would find little to free and hasten the full ones.
                        with paused_gc():
                            handed = self._pass()
                    finally:
                        here = executors.release(take=handed is None)
                    if handed is not None:
                        await self._rest_of(scope, *handed)
                        break
                    if here:
                        # No executor is in a pass: this task runs the activations its
                        # results resumed (their commit is this pass's scheduler step).
                        await executors.take_pass()
                    else:
                        await trio.lowlevel.checkpoint()  # once per pass, however many
        finally:
            if handed is None:
                self._runner = False
                self._parked = None
        assert handed is not None  # the loop ends only when an attempt was handed over
        work = handed[0]
        if scope.cancelled_caught and not work.cancelled:
            work.finish(None, expired(work))
        await self._work_on(work)

    def _pass(self) -> tuple[Attempt, Coroutine[Any, Any, Any], Any] | None:
        """Start every ready attempt and hand on the outcomes.

        Returns the attempt that suspended in its first step, if one did: this task goes on
        with it and the rest of the pass goes to a new runner.
        """
        ready = self._ready
        outcomes: list[Attempt] = []
        jobs: list[SyncJob] = []
        faults = self._node.ext.get("activity_faults")  # roost.testing's fail_activity
        while ready:
            work = ready.popleft()
            if work.done:
                outcomes.append(work)
                continue
            suspended = self._start(work, jobs, outcomes, faults)
            if suspended is not None:
                if jobs:
                    self._pool.submit(jobs)
                ready.extendleft(reversed(outcomes))
                self._runner = bool(ready)
                if ready:  # a new runner for the rest
                    self._nursery.start_soon(self._run, name="roost.activities")
                return work, *suspended
        if jobs:
            self._pool.submit(jobs)
        for work in outcomes:
            self._hand_on(work)
        return None

    def _start(
        self, work: Attempt, jobs: list[SyncJob], outcomes: list[Attempt], faults: Any
    ) -> tuple[Coroutine[Any, Any, Any], Any] | None:
        """Start ``work``'s attempt: inline, or queued for the threads.

        Returns the coroutine and what it yielded if it suspended in its first step.
        """
        task = work.task
        if work.cancelled:
            self._forget((task.run_id, task.seq))
            return None
        run = self._runs.get(task.workflow_id)  # ``_wanted``, keeping the run at hand
        if run is None or run.record.run_id != task.run_id:
            # No attempt: a task decides about the row.
            self._nursery.start_soon(self._work_on, work, name=f"roost.activity {task.entry}")
            return None
        work.began = self._counters.attempt(task.entry)
        entry = self._entries.get(task.entry)
        if entry is None:
            found = self._entry(task)
            if isinstance(found, Error):
                work.finish(None, found)
                outcomes.append(work)  # refused before it ran
                return None
            entry = self._entries[task.entry] = found
        options = task.options
        wall = self._node.now() if "schedule_to_close_timeout" in options else None
        set_limits(work, trio.current_time(), wall)
        failure = faults.take(task.entry) if faults is not None else None
        refused = failed(failure) if failure is not None else None
        context: Mapping[str, Any] = run.context
        if refused is None and SECURITY_KEY in context:  # its own envelope, checked first
            context, refused = activity_context(
                context,
                task.workflow_id,
                activity_id(task.workflow_id, task.run_id, task.seq),
                self._trust(),
            )
        if refused is not None:
            work.finish(None, refused)
            outcomes.append(work)
            return None
        # An activity is a function, not a process: it sees its workflow's context values
        # (ctx.get) and its own info (roost.activity_info()), and no current process.
        # The run's context values are shared, never copied: nothing changes them in place
        # (the workflow's own process reads the same mapping).
        ctx = work.ctx = self._base.copy()
        ctx.run(
            install_port, AttemptPort(task, context, self._beater(work) if work.every else None)
        )
        if telemetry.tracing:
            telemetry.activity_started(work, run, ctx)
        if not entry.is_async and not self._node.mock_time:
            job = work.job = SyncJob(work, ctx, entry.fn, task.args)
            jobs.append(job)
            self.stats["threaded"] += 1
            self._timed += 1
            self._arm(work)
            return None
        suspended = self._inline(work, entry, ctx)
        if suspended is None:
            outcomes.append(work)
        return suspended

    def _inline(
        self, work: Attempt, entry: Entry, ctx: contextvars.Context
    ) -> tuple[Coroutine[Any, Any, Any], Any] | None:
        """Run an attempt in this task: a sync one (MockClock), or an async one's first step.

        Returns the coroutine and what it yielded if it suspended.
        """
        args = work.task.args
        if not entry.is_async:
            # Under a MockClock a thread would let virtual time (and timeouts) race ahead.
            try:
                work.finish(ctx.run(entry.fn, *args), None)
            except BaseException as exc:  # noqa: BLE001 - see failed
                work.finish(None, failed(exc))
            return None
        try:
            coro = ctx.run(entry.fn, *args)
            if not isinstance(coro, types.CoroutineType):
                coro = coro.__await__()  # any awaitable: step its iterator
            yielded = ctx.run(coro.send, None)
        except StopIteration as stop:
            self.stats["inline"] += 1
            work.finish(stop.value, None)
        except BaseException as exc:  # noqa: BLE001 - see failed
            work.finish(None, failed(exc))
        else:
            self.stats["suspended"] += 1
            return coro, yielded
        return None

    async def _rest_of(
        self, scope: trio.CancelScope, work: Attempt, coro: Coroutine[Any, Any, Any], yielded: Any
    ) -> None:
        """Run an attempt that suspended to its end in this task, under ``scope``."""
        scope.deadline = work.deadline
        work.enter(scope)
        ctx = work.ctx
        assert ctx is not None
        try:
            work.finish(await resume(ctx, coro, yielded), None)
        except BaseException as exc:  # noqa: BLE001 - see failed
            work.finish(None, failed(exc))  # a Cancelled (a timeout, a cancel) goes on up
        finally:
            work.scope = None

    def _hand_on(self, work: Attempt) -> None:
        """Hand a finished attempt's outcome on: a success at once, anything else by a task.

        ``settle_now`` is the check that the task's run still takes it: a run that closed
        meanwhile leaves the outcome to a task, as a failure does.
        """
        task = work.task
        ident = (task.run_id, task.seq)
        if work.cancelled:
            self._forget(ident)
            return
        if work.error is None:
            value = work.value
            try:
                if type(value) not in SCALARS:  # a scalar is always storable
                    check_result(self._codec, value)
                settled = self._settle_now(
                    "tasks" if ident in self._rows else NO_ROW,  # a row only after a failure
                    task_row(task),
                    (task.workflow_id, task.run_id),
                    ActivityResolved(seq=task.seq, value=value, error=None),
                    refuse,
                )
            except Unstorable as exc:  # nothing was written: the attempt failed
                work.finish(None, result_error(task, exc.error))
            except Exception as exc:  # noqa: BLE001 - the value's methods: the attempt's failure
                work.finish(None, result_error(task, unreadable(exc)))
            else:
                if settled:
                    self._forget(ident)
                    return
        self._nursery.start_soon(self._work_on, work, name=f"roost.activity {task.entry}")

    # -- heartbeats ----------------------------------------------------------------------

    def _beater(self, work: Attempt) -> Callable[[Any], None]:
        attempt = work.task.attempt
        every = float(work.every or 0)
        token = trio.lowlevel.current_trio_token()

        @never_raising
        def extend() -> None:
            if self.closed or work.done or work.task.attempt != attempt:
                return  # a beat from an attempt that has ended, or after the node stopped
            work.deadline = min(trio.current_time() + every, work.limit)
            if work.scope is not None:
                work.scope.deadline = work.deadline
            elif work.job is not None:
                self._arm(work)

        def beat(_details: Any) -> None:
            try:
                trio.lowlevel.current_task()
            except RuntimeError:  # a sync activity's worker thread
                with contextlib.suppress(trio.RunFinishedError):  # the node has stopped
                    token.run_sync_soon(extend)
            else:
                extend()

        return beat

    # -- sync attempts in the threads ----------------------------------------------------

    def _delivered(self, jobs: list[SyncJob]) -> None:
        """On the trio thread: sync jobs the threads finished (a late one is ignored)."""
        for job in jobs:
            work = job.owner
            if work.job is not job:
                continue  # timed out or cancelled meanwhile
            work.job = None
            self._timed -= 1
            error = job.error
            # in_worker_thread left only Exceptions: the attempt's own failure.
            work.finish(job.value, None if error is None else Error.from_exception(error))
            self._queue(work)

    def _arm(self, work: Attempt) -> None:
        heap = self._deadlines
        if len(heap) > 2 * self._timed + 64:  # mostly finished jobs: rebuild
            heap[:] = [e for e in heap if e[2].job is not None and e[0] == e[2].deadline]
            heapq.heapify(heap)
        heapq.heappush(heap, (work.deadline, next(self._tie), work))
        if not self._timing:
            self._timing = True
            self._nursery.start_soon(self._expire, name="roost.activity deadlines")
        elif self._timer is not None and work.deadline < self._timer.deadline:
            self._timer.deadline = work.deadline

    async def _expire(self) -> None:
        """Time out sync attempts past their deadline (their threads are abandoned)."""
        heap = self._deadlines
        try:
            while heap:
                deadline, _, work = heap[0]
                if work.job is None or deadline != work.deadline:
                    heapq.heappop(heap)  # finished, or a beat moved it
                    continue
                if deadline > trio.current_time():
                    with trio.CancelScope(deadline=deadline) as self._timer:
                        await trio.sleep_forever()
                    self._timer = None
                    continue
                heapq.heappop(heap)
                self._pool.drop(work.job)
                work.job = None
                self._timed -= 1
                work.finish(None, expired(work))
                self._queue(work)
        finally:
            self._timing = False
            self._timer = None

    # -- failures, retries, closed runs: a task each -------------------------------------

    async def _work_on(self, work: Attempt) -> None:
        """Handle what the runner does not: failures, backoffs, rows of closed runs.

        Hands on a failed attempt's outcome, waits out a backoff, or settles a closed run's
        row; an attempt to make goes back to the runner.
        """
        task = work.task
        ident = (task.run_id, task.seq)
        requeued = False
        try:
            if work.done:
                if not await self._outcome(work):
                    return
                task = work.task
            if not await self._wait_until(task.not_before, work):
                return  # cancelled while waiting for its next attempt
            if not self._wanted(task):
                await forget_if_orphan(self._commits, task)
                return  # its run closed (its row went with it): no more attempts
            work.done = False
            requeued = True
            self._queue(work)
        finally:
            if not requeued:
                self._forget(ident)

    async def _outcome(self, work: Attempt) -> bool:
        """Resolve or reschedule after an attempt; True if another attempt follows."""
        task = work.task
        if work.cancelled:
            return False  # the workflow cancelled it: its row is gone, write nothing
        error = work.error
        if error is None:
            try:
                await self._resolve(task, work.value, None)
            except Unstorable as exc:  # nothing was written: the attempt failed
                error = result_error(task, exc.error)
            else:
                return False
        if not self._wanted(task):
            return False  # its run closed meanwhile (its row is gone): no more attempts
        delay = next_retry(task.options, task.attempt, error)
        if delay is not None and schedule_to_close_left(task, self._node.now()) <= delay:
            error = schedule_to_close_error(task, error)
            delay = None
        log_failure(task, error, delay, telemetry.trace_id_of(self._record(task)))
        self._counters.attempt_failed(task.entry)
        if delay is None:
            await self._resolve(task, None, error)
            return False
        now = self._node.now()
        work.task = await reschedule(
            self._commits,
            self._codec,
            task,
            error,
            now=now,
            delay=delay,
            started_at=began_at(work, now, trio.current_time()),
        )
        self._rows.add((task.run_id, task.seq))
        return True

    # -- shared --------------------------------------------------------------------------

    def _record(self, task: ActivityTask) -> Any:
        run = self._runs.get(task.workflow_id)
        return run.record if run is not None else None

    def _wanted(self, task: ActivityTask) -> bool:
        run = self._runs.get(task.workflow_id)
        return run is not None and run.record.run_id == task.run_id

    async def _wait_until(self, when: dt.datetime | None, work: Attempt) -> bool:
        """Sleep until ``when``; False if the workflow cancelled the task meanwhile."""
        if when is not None:
            delay = (when - self._node.now()).total_seconds()
            if delay > 0:
                with trio.move_on_after(delay) as scope:
                    work.enter(scope)
                    await trio.sleep_forever()
                work.scope = None
        return not work.cancelled

    def _trust(self) -> Trust:
        """The node's key ring and the app's policy names (secured activities only)."""
        node = self._node
        return Trust(node.settings.get("keyring"), frozenset(node.app.policies))

    def _entry(self, task: ActivityTask) -> Entry | Error:
        try:
            entry = self._node.app.resolve(task.entry)
        except Error as exc:
            return Error(exc.message, kind=exc.kind, retryable=False, details=exc.details)
        if entry.kind is not EntryKind.ACTIVITY:
            return Error(
                f"{task.entry!r} is not an activity", kind=ErrorKind.INVALID, retryable=False
            )
        return entry

    async def _resolve(self, task: ActivityTask, value: Any, error: Error | None) -> None:
        """Hand the outcome to the workflow.

        Raises:
            Unstorable: ``value`` cannot be recorded (nothing was written).
        """
        if error is None:
            check_result(self._codec, value)
        await self._incoming.settle(*self._settling(task, value, error))

    def _settling(
        self, task: ActivityTask, value: Any, error: Error | None
    ) -> tuple[str, bytes, tuple[str, str], ActivityResolved, Callable[[Error], Any]]:
        """The arguments of ``settle`` for this outcome."""
        ident = (task.run_id, task.seq)
        table = "tasks" if ident in self._rows else NO_ROW
        return (
            table,
            task_row(task),
            (task.workflow_id, task.run_id),
            ActivityResolved(seq=task.seq, value=value, error=error),
            refuse if error is None else failed_with(task.seq),
        )
