"""A workflow task (one activation) that failed: discard it, record why, retry it later.

What fails the *workflow* and what fails only its *task* (docs/workflows.md, "When a
workflow task fails"):

- An exception that workflow code raises, or that a roost call raises into it (an
  activity's or child's error, ``Invalid`` for a value handed to a call that cannot be
  recorded), is the workflow's: code may catch it; uncaught, it fails the run.
- Anything else that keeps an activation from being recorded fails the task: a
  ``NondeterminismError`` (the code diverged from the history on replay), a
  ``BaseException`` that is not an ``Exception`` raised in workflow code (``SystemExit``,
  ``GeneratorExit``; a ``KeyboardInterrupt`` still stops the node), a workflow result or
  continue-as-new input that cannot be encoded, a value that no longer encodes when the
  activation commits (mutated after the call that checked it), a key that does not fit
  the store, a store error during the commit, a failure while replaying the history, the
  task timeout.

A failed task is discarded whole: nothing of it is committed, its events go back to the
front of the run's queue, its driver (whose state went past what is stored) is dropped, so
the retry rebuilds the run by replay. The failure is logged at ERROR with its traceback,
kept in the run record (``describe(id)["task_failure"]``) until a task succeeds, and the
task is retried after ``task_backoff`` (1 s, 2 s, 4 s ... 60 s). Other runs are not touched.

A task that timed out held the node's one loop thread for all that time (every process,
activity and workflow of the node waited), so its retry waits at least
``TIMEOUT_BACKOFF_FACTOR`` times as long as the activation held the loop, past the 60 s
cap if need be: workflows whose activations keep timing out hold the loop for at most
1/11 of the time each, and five of them less than half of it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from roost import _telemetry as telemetry
from roost._backoff import capped_backoff
from roost._errors import Error, ErrorKind, NondeterminismError, type_name
from roost.workflow._history import CancelRequested
from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._run import Pending, Run
from roost.workflow._local._watchdog import Guard
from roost.workflow._misuse import exception_text

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from roost._counters import RuntimeCounters
    from roost.storage import Codec, WriteTxn
    from roost.workflow._local._runs import RunTable

__all__ = [
    "DEFAULT_TASK_TIMEOUT",
    "MAX_TASK_BACKOFF",
    "TIMEOUT_BACKOFF_FACTOR",
    "TaskFailures",
    "code_location",
    "task_backoff",
    "task_failure_error",
    "timeout_failure_error",
]

log = logging.getLogger("roost.workflow")
_ROOST_DIR = str(Path(__file__).resolve().parents[1])

DEFAULT_TASK_TIMEOUT = 10.0  # Temporal's default workflow task timeout
MAX_TASK_BACKOFF = 60.0
TIMEOUT_BACKOFF_FACTOR = 10.0


def _advice(stage: str, cause: BaseException) -> str:
    """What cures a failure of this kind: the retry alone, or a fix first."""
    if stage == "replay":
        return "fix the workflow code (or the store); the retry replays the history again"
    if stage == "commit" and isinstance(cause, Error) and cause.kind in _STORE_KINDS:
        return "the retry commits it once the store takes writes again (free disk space, say)"
    if stage == "commit":
        return (
            "a value or key of the activation cannot be stored (a value changed after the "
            "call that checked it, an id too long for a key): fix the workflow code; the "
            "retry runs the activation again"
        )
    return "fix the workflow code; the retry runs the activation again"


_STORE_KINDS = frozenset({ErrorKind.UNAVAILABLE, ErrorKind.LIMIT_EXCEEDED})


def task_backoff(failures: int, held: float = 0.0) -> float:
    """Seconds before retrying a task that failed ``failures`` times in a row.

    ``held``: how long the failed activation held the loop, for a task timeout (its retry
    waits at least ``TIMEOUT_BACKOFF_FACTOR`` times that).
    """
    return max(
        capped_backoff(1.0, 2.0, failures - 1, MAX_TASK_BACKOFF), TIMEOUT_BACKOFF_FACTOR * held
    )


def code_location(exc: BaseException) -> str | None:
    """file:line of the innermost frame of workflow code in ``exc``'s traceback, if any."""
    if isinstance(exc, Error) and isinstance(exc.details.get("location"), str):
        return str(exc.details["location"])
    found = None
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith(_ROOST_DIR) and not filename.startswith("<"):
            found = f"{filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def task_failure_error(run: Run, activation: int, cause: BaseException, *, stage: str) -> Error:
    """The error a failed task leaves in its run record: what failed, where, and the cause.

    A ``NondeterminismError`` stays one (its message names the diverging command and both
    of its usual causes); any other cause becomes an ``Error`` of the cause's kind
    (``Internal`` for a plain exception) whose message names the workflow, the activation,
    the stage (``replay``, ``activation`` or ``commit``), the cause and, when known, the
    file:line of the workflow code. Call it before ``fail_task`` (it counts the attempt).
    """
    attempt = run.task_failures + 1
    location = code_location(cause)
    details: dict[str, Any] = {
        "workflow_id": run.pid.id,
        "activation": activation,
        "stage": stage,
        "type": type_name(cause),
        "attempt": attempt,
        "retry_in": task_backoff(attempt),
    }
    if location is not None:
        details["location"] = location
    if isinstance(cause, NondeterminismError):
        error = cause.clone()
        error.details = {**details, **cause.details}
        return error
    text = exception_text(cause)
    kind = cause.kind if isinstance(cause, Error) else ErrorKind.INTERNAL
    where = f" at {location}" if location else ""
    what = {
        "replay": f"replaying its history failed in activation {activation}{where}",
        "activation": f"activation {activation} failed{where}",
        "commit": f"activation {activation} could not be committed",
    }[stage]
    details["message"] = text
    if isinstance(cause, Error):
        shown = f"[{cause.kind.value}] {text}"
    else:
        shown = f"{type_name(cause)}: {text}" if text else type_name(cause)
    return Error(
        f"workflow {run.pid.id!r}: {what}: {shown}. This is a workflow "
        f"task failure: nothing of the activation was committed and the task is retried "
        f"after a backoff; {_advice(stage, cause)}",
        kind=kind,
        details=details,
    )


def timeout_failure_error(run: Run, guard: Guard) -> Error:
    """The error of an activation that ran past its task_timeout (before ``fail_task``).

    Its ``held`` detail is how long the activation held the loop (a C call that returns
    late holds it past the timeout); the retry waits at least ten times that.
    """
    index, attempt = run.next_index, run.task_failures + 1
    held = max(guard.seconds, time.monotonic() - (guard.deadline - guard.seconds))
    retry_in = task_backoff(attempt, held)
    return Error(
        f"workflow {run.pid.id!r}: activation {index} ran longer than its task_timeout of "
        f"{guard.seconds:g}s without yielding (it held the event loop for {held:.1f}s, so "
        f"its retry waits {retry_in:.0f}s); it was at {guard.location}. Workflow code "
        "must not block or compute for long: move that work into an activity",
        kind=ErrorKind.TIMEOUT,
        details={
            "timeout_type": "task",
            "workflow_id": run.pid.id,
            "activation": index,
            "location": guard.location,
            "stage": "activation",
            "attempt": attempt,
            "held": held,
            "retry_in": retry_in,
        },
    )


def _held(error: Error) -> float:
    """How long a timed-out activation held the loop (0.0 for any other failure)."""
    held = error.details.get("held") if error.details.get("timeout_type") == "task" else None
    return float(held) if isinstance(held, (int, float)) else 0.0


class TaskFailures:
    """Fails workflow tasks: discards each at once, stores why, retries it after a backoff."""

    __slots__ = (
        "_cancel_unstarted",
        "_codec",
        "_counters",
        "_ready",
        "_runs",
        "_spawn",
        "_stats",
        "_transact",
    )

    def __init__(
        self,
        *,
        runs: RunTable,
        codec: Codec,
        transact: Callable[[Callable[[WriteTxn], Any]], Awaitable[Any]],
        spawn: Callable[..., None],
        ready: Callable[[Run], None],
        stats: dict[str, int],
        counters: RuntimeCounters,
        cancel_unstarted: Callable[[Run, str | None], object],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            runs: the run table (the failed run's phase and driver).
            codec: encodes the run record that stores the failure.
            transact: commits that record.
            spawn: starts the background task that stores it and waits out the backoff.
            ready: queues the run for its retry.
            stats: counts task failures.
            counters: counts them by workflow type (for /metrics).
            cancel_unstarted: closes as canceled a run whose first activation failed with
                a cancel request among its events (no code of it can ever hear it).
        """
        self._runs, self._codec, self._transact = runs, codec, transact
        self._spawn, self._ready, self._stats = spawn, ready, stats
        self._counters, self._cancel_unstarted = counters, cancel_unstarted

    def fail(
        self, run: Run, batch: list[Pending], error: Error, cause: BaseException | None
    ) -> None:
        """A task of ``run`` failed with ``error``: discard it now, log it, retry after a backoff.

        In memory, at once (before anything can queue the run again): the activation's
        events go back to the front of the run's queue and its driver is dropped, so the
        retry rebuilds the run by replay; the run is held (``backoff``) until the retry.
        The error is logged (with ``cause``'s traceback) and set on the run record at
        once, so ``describe`` shows it even if the store cannot take it; a task then
        stores it.
        """
        self._runs.forget_driver(run)
        run.task_failed(batch, error)
        self._runs.move(run, PhaseEvent.FAIL)
        self._stats["task_failures"] += 1
        self._counters.task_failed(run.record.workflow_type)
        log.error("%s", error.message, exc_info=cause, extra=telemetry.run_fields(run.record))
        if run.progress[0] == 0:
            for _, event in run.pending:
                if type(event) is CancelRequested:  # never heard: it closes the run
                    self._cancel_unstarted(run, event.reason)
                    return
        self._spawn(self._record_and_retry, run, task_backoff(run.task_failures, _held(error)))

    async def _record_and_retry(self, run: Run, backoff: float) -> None:
        if run.phase is RunPhase.BACKOFF and self._runs.is_current(run):
            record = run.current_record
            try:
                data = self._codec.encode(record)
                await self._transact(lambda txn: txn.put("runs", record.workflow_id.encode(), data))
            except Exception:  # a full store, say: the retry goes on anyway
                log.exception(
                    "workflow %r: its task failure could not be stored; the task is retried anyway",
                    run.pid.id,
                )
        await trio.sleep(backoff)
        if run.phase is RunPhase.BACKOFF:  # not closed from outside meanwhile
            self._runs.move(run, PhaseEvent.RETRY)
            self._ready(run)
