"""The start and close rules of a workflow run as pure functions: (state, ...) -> plan.

What happens when a run closes — its final status, whether a retry, a cron run or a
continue-as-new run follows it (with which attempt and start time), which of its rows go
with the closing commit, what its children's ``parent_close_policy`` asks for, and which
runtime timers (start delay, run and execution timeouts) a new run arms — is decided here
from plain data, the way ``supervisor/_policy.py`` decides restarts. The shell
(``_effects.py``, ``_closing.py``, ``_family.py``) hands the planner what it needs and
turns the plan into rows and actions. What a start under a taken id does is decided here
too (``plan_start``, ``plan_child_start``: the id conflict and reuse policies, from the run
open or last closed under that id); ``_starting.py`` and ``_family.py`` act on it.

No trio, no store and no clock: the caller passes the time, so the rules can be unit- and
property-tested against docs/workflows.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from typing import Any, Final, Literal

import attrs

from roost._cron import parse_cron
from roost._duration import deadline_after
from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.workflow._retry import next_retry
from roost.workflow._status import RunStatus

__all__ = [
    "ChildClose",
    "CloseOutcome",
    "ClosePlan",
    "ContinueAs",
    "ExistingRun",
    "FirstStart",
    "NextRun",
    "OpenChild",
    "RunState",
    "RuntimeTimer",
    "StartPlan",
    "StepRoute",
    "already_error",
    "conflict_policy",
    "plan_child_start",
    "plan_children",
    "plan_close",
    "plan_first_start",
    "plan_next",
    "plan_run_timers",
    "plan_start",
    "quarantined_error",
    "route_in_step",
    "start_reads_closed_run",
    "timeout_error",
]

# The statuses a retry policy or a cron schedule may follow; a cancel or a terminate
# ends the chain (docs/workflows.md, "Cancel vs terminate").
_CHAINING: Final = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.TIMED_OUT})

# Rows under the run's id that go with a close. A run nothing follows reads no more of
# its events; a run that continues hands its unread inbox rows to the next run, which
# the shell moves row by row, so only its activity tasks go by prefix.
_PURGE_FINAL: Final = ("tasks", "inbox")
_PURGE_CONTINUED: Final = ("tasks",)
# Closed from outside, no activation is in flight: every inbox row is either carried
# into the next run (staged under its id) or dropped with the run.
_PURGE_OUTSIDE: Final = ("inbox", "tasks")

TimeoutKind = Literal["run", "execution"]
NextReason = Literal["retry", "cron", "continue_as_new"]


@attrs.frozen(kw_only=True)
class RunState:
    """What the close rules read of a run (taken from its record by the shell).

    Attributes:
        workflow_id: the run's workflow id.
        attempt: the run's attempt (1 for a first run; retries count up).
        options: the chain options carried from run to run (``retry_policy``,
            ``cron_schedule``, ``run_timeout``, ``execution_timeout``, ...).
        execution_deadline: when the whole chain must have closed, if it has a limit.
        cancel_requested: a cancel request is recorded in the run's history (its code
            was handed it).
        cancel_pending: a cancel request is stored in the run's inbox, not yet recorded
            (it arrived after the run's last activation began).
    """

    workflow_id: str
    attempt: int = 1
    options: Mapping[str, Any] = attrs.field(factory=dict)
    execution_deadline: dt.datetime | None = None
    cancel_requested: bool = False
    cancel_pending: bool = False

    @property
    def cancelled(self) -> bool:
        """A cancel request was accepted for the run, read or not: it ends the chain."""
        return self.cancel_requested or self.cancel_pending


@attrs.frozen(kw_only=True)
class ContinueAs:
    """The input of a continue-as-new: the entry and arguments of the next run."""

    entry: str
    args: list[Any]


@attrs.frozen(kw_only=True)
class CloseOutcome:
    """How a run ended, before the rules apply.

    Attributes:
        status: the status asked for (``COMPLETED`` for a return, ``FAILED`` for a raise,
            ``TIMED_OUT``, ``TERMINATED``); None when the run continued as new.
        result: the returned value.
        error: the error it closed with.
        continued: the next run's input, for a continue-as-new.
        from_outside: closed without running its code (terminate, a timeout) rather than
            by its own activation.
    """

    status: RunStatus | None
    result: Any = None
    error: Error | None = None
    continued: ContinueAs | None = None
    from_outside: bool = False

    @classmethod
    def completed(cls, value: Any) -> CloseOutcome:
        """The workflow returned ``value``."""
        return cls(status=RunStatus.COMPLETED, result=value)

    @classmethod
    def failed(cls, error: Error) -> CloseOutcome:
        """The workflow raised ``error``."""
        return cls(status=RunStatus.FAILED, error=error)

    @classmethod
    def continued_as_new(cls, entry: str, args: list[Any]) -> CloseOutcome:
        """The workflow continued as new with ``entry(*args)``."""
        return cls(status=None, continued=ContinueAs(entry=entry, args=args))

    @classmethod
    def outside(cls, status: RunStatus, error: Error) -> CloseOutcome:
        """Closed from outside (terminate, a run or execution timeout)."""
        return cls(status=status, error=error, from_outside=True)


@attrs.frozen(kw_only=True)
class NextRun:
    """The run that follows a closing one under the same workflow id.

    Attributes:
        reason: why it follows: a retry, the next cron run, or a continue-as-new.
        entry: its entry, or None for the closing run's own.
        args: its input, or None for the closing run's own input.
        attempt: its attempt number.
        not_before: when it may start (a retry's backoff, the next fire time).
    """

    reason: NextReason
    entry: str | None = None
    args: list[Any] | None = None
    attempt: int = 1
    not_before: dt.datetime | None = None


@attrs.frozen(kw_only=True)
class ClosePlan:
    """What a close commits and what follows it.

    Attributes:
        status: the closing run's final status; None when its record is replaced by the
            next run's (a continue-as-new keeps no closing record of its own).
        result: the closing record's result.
        error: the closing record's error.
        closed_at: the closing record's close time (None with ``status``).
        next: the run that follows, if any.
        purge: tables whose rows under the run's id go with the closing commit.
        drop_timers: the run's armed timers (workflow and runtime) go with the commit;
            a closing run's timers never fire.
    """

    status: RunStatus | None
    result: Any = None
    error: Error | None = None
    closed_at: dt.datetime | None = None
    next: NextRun | None = None
    purge: tuple[str, ...] = ()
    drop_timers: bool = True

    @property
    def final(self) -> bool:
        """Nothing follows: watchers get their EXIT now, and links fire on an error."""
        return self.next is None


def plan_close(state: RunState, outcome: CloseOutcome, now: dt.datetime) -> ClosePlan:
    """Apply the close rules of docs/workflows.md to a run that ended as ``outcome``.

    A return after a cancel request closes as ``CANCELED``. A failed or timed-out run is
    retried per its retry policy; otherwise a cron workflow schedules its next run (a
    failure does not stop a schedule). Nothing follows a cancel (a run that fails or
    times out after a cancel request keeps its status, but is not retried and ends its
    schedule), a terminate, the execution timeout, or a next start at or past the
    execution deadline. A continue-as-new is the workflow's own choice and is kept.
    """
    if outcome.continued is not None:
        nxt = NextRun(
            reason="continue_as_new", entry=outcome.continued.entry, args=outcome.continued.args
        )
        purge = _PURGE_OUTSIDE if outcome.from_outside else _PURGE_CONTINUED
        return ClosePlan(status=None, next=nxt, purge=purge)
    status = outcome.status
    if status is None:
        raise ValueError("a close outcome needs a status unless it continues as new")
    if status is RunStatus.COMPLETED and state.cancel_requested:
        status = RunStatus.CANCELED  # it returned after a cancel request
    following = plan_next(state, status, outcome.error, now)
    if outcome.from_outside:
        purge = _PURGE_OUTSIDE
    else:
        purge = _PURGE_FINAL if following is None else _PURGE_CONTINUED
    return ClosePlan(
        status=status,
        result=outcome.result,
        error=outcome.error,
        closed_at=now,
        next=following,
        purge=purge,
    )


def plan_next(
    state: RunState, status: RunStatus, error: Error | None, now: dt.datetime
) -> NextRun | None:
    """The retry or cron run that follows a run closed as ``status`` at ``now``, if any."""
    if status not in _CHAINING or state.cancelled:
        return None
    if error is not None and error.details.get("timeout_type") == "execution":
        return None
    deadline = state.execution_deadline
    policy = state.options.get("retry_policy")
    if status is not RunStatus.COMPLETED and policy is not None and error is not None:
        delay = next_retry({"retry_policy": policy}, state.attempt, error)
        if delay is not None:
            when = deadline_after(now, delay)
            if deadline is None or when < deadline:
                return NextRun(reason="retry", attempt=state.attempt + 1, not_before=when)
    cron = state.options.get("cron_schedule")
    if cron is not None:
        fire = parse_cron(cron).next_after(now)
        if fire is not None and (deadline is None or fire < deadline):
            return NextRun(reason="cron", attempt=1, not_before=fire)
    return None


def timeout_error(workflow_id: str, kind: TimeoutKind, seconds: float) -> Error:
    """The error of a run closed by its run or execution timeout."""
    return Error(
        f"workflow {workflow_id!r} exceeded its {kind}_timeout of {seconds:g}s",
        kind=ErrorKind.TIMEOUT,
        details={"timeout_type": kind, "timeout": seconds, "workflow_id": workflow_id},
    )


@attrs.frozen(kw_only=True)
class FirstStart:
    """When the first run of a new workflow may start, and when its whole chain must end."""

    not_before: dt.datetime | None
    execution_deadline: dt.datetime | None


def plan_first_start(options: Mapping[str, Any], now: dt.datetime) -> FirstStart:
    """The start time and execution deadline of a workflow started ``now`` with ``options``.

    ``start_delay`` delays the first run; a cron workflow's first run waits for the first
    fire time after that, as Temporal's does; ``execution_timeout`` counts from ``now``.
    """
    delay = options.get("start_delay", 0.0)
    cron = options.get("cron_schedule")
    not_before = deadline_after(now, delay) if delay else None
    if cron is not None:
        not_before = parse_cron(cron).next_after(not_before or now)
    timeout = options.get("execution_timeout")
    return FirstStart(
        not_before=not_before,
        execution_deadline=deadline_after(now, timeout) if timeout else None,
    )


@attrs.frozen(kw_only=True)
class RuntimeTimer:
    """One of the runtime's own timers for a new run: its kind and when it falls due."""

    kind: Literal["start", "run_timeout", "execution_timeout"]
    due: dt.datetime


def plan_run_timers(
    *,
    not_before: dt.datetime | None,
    options: Mapping[str, Any],
    execution_deadline: dt.datetime | None,
    now: dt.datetime,
) -> tuple[RuntimeTimer, ...]:
    """The runtime timers a run beginning at ``now`` arms.

    A delayed start (``start_delay``, a retry's backoff, a cron fire time) waits on a
    ``start`` timer; ``run_timeout`` counts from the run's start, after any delay; the
    execution deadline is one per run, closing whichever run of the chain is open then.
    """
    timers = []
    begins = not_before if not_before is not None and not_before > now else now
    if begins > now:
        timers.append(RuntimeTimer(kind="start", due=begins))
    run_timeout = options.get("run_timeout")
    if run_timeout:
        timers.append(RuntimeTimer(kind="run_timeout", due=deadline_after(begins, run_timeout)))
    if execution_deadline is not None:
        timers.append(RuntimeTimer(kind="execution_timeout", due=execution_deadline))
    return tuple(timers)


@attrs.frozen(kw_only=True)
class OpenChild:
    """A run open under a child's workflow id, as the parent-close rules see it."""

    run_id: str
    parent: Pid | None


@attrs.frozen(kw_only=True)
class ChildClose:
    """What a parent's close does to one open child."""

    child_id: str
    action: Literal["terminate", "cancel"]


def plan_children(
    parent: Pid,
    policies: Mapping[str, str],
    first_runs: Mapping[str, str],
    open_runs: Mapping[str, OpenChild],
) -> tuple[ChildClose, ...]:
    """The ``parent_close_policy`` of each child that is still open, in start order.

    The shell calls this when the close is announced, with the runs open at that moment:
    a child that closed meanwhile needs nothing, and an id that now names someone else's
    workflow (not the run this parent started, nor a later run of its chain) is left alone.

    Args:
        parent: the closing run's PID.
        policies: child id -> ``"terminate"``, ``"request_cancel"`` or ``"abandon"``.
        first_runs: child id -> the run id the parent started under it.
        open_runs: child id -> the run open under that id now (absent if none).
    """
    actions = []
    for child_id, policy in policies.items():
        child = open_runs.get(child_id)
        if child is None or policy == "abandon":
            continue
        first = first_runs.get(child_id)
        if first is not None and child.run_id != first and child.parent != parent:
            continue
        action: Literal["terminate", "cancel"] = "terminate" if policy == "terminate" else "cancel"
        actions.append(ChildClose(child_id=child_id, action=action))
    return tuple(actions)


# -- starting under a taken id ----------------------------------------------------------

StartAction = Literal["start", "use_existing", "terminate_existing", "refuse"]


@attrs.frozen(kw_only=True)
class ExistingRun:
    """The run under the id a start asks for: the open one, or else the last closed one.

    Attributes:
        open: the run is open (in the runtime), not only a closed record in the store.
        status: its status (``RUNNING`` while open).
        pid: its PID, for an open run.
    """

    open: bool
    status: RunStatus
    pid: Pid | None = None

    @classmethod
    def running(cls, pid: Pid) -> ExistingRun:
        """The run open under the id, as ``pid``."""
        return cls(open=True, status=RunStatus.RUNNING, pid=pid)

    @classmethod
    def closed(cls, status: RunStatus) -> ExistingRun:
        """The last run under the id closed as ``status``."""
        return cls(open=False, status=status)


@attrs.frozen(kw_only=True)
class StartPlan:
    """What a start under an id does.

    Attributes:
        action: ``start`` a new run; ``use_existing``: return ``pid`` and deliver the start
            messages to it; ``terminate_existing``: terminate ``pid``, wait for its close,
            then plan again (with ``replaced``); ``refuse`` with ``error``.
        pid: the open run's PID, for ``use_existing`` and ``terminate_existing``.
        error: why a start is refused.
    """

    action: StartAction
    pid: Pid | None = None
    error: Error | None = None

    @property
    def deliver_messages(self) -> bool:
        """The start messages go to the open run instead of a new one."""
        return self.action == "use_existing"


def already_error(workflow_id: str, pid: Pid | None, why: str) -> Error:
    """The AlreadyExists error of a start the id policies refuse."""
    return Error(
        f"workflow {workflow_id!r} {why}; pick another id or change the id policy",
        kind=ErrorKind.ALREADY_EXISTS,
        details={"workflow_id": workflow_id, "existing_pid": str(pid) if pid else None},
    )


def unloadable_error(workflow_id: str, cause: Error) -> Error:
    """The error for starting or steering a stored run that this node's app cannot run."""
    return Error(
        f"workflow {workflow_id!r} is stored as running, but this node cannot run it: "
        f"{cause.message}; it is kept for a node whose app declares it as a workflow, and "
        "its id stays taken until then (start the work under another id)",
        kind=ErrorKind.INVALID_STATE,
        retryable=False,
        details={"workflow_id": workflow_id, "cause": cause.message},
    )


def quarantined_error(workflow_id: str) -> Error:
    """The error for starting a workflow id that is quarantined."""
    return Error(
        f"workflow {workflow_id!r} is quarantined (a row of it stored in this data directory "
        "cannot be decoded; node.describe(id) shows which and why): its id stays taken so "
        "nothing overwrites its rows; start the work under another id, or restore or discard "
        "the quarantined rows (roost.storage.quarantined lists them)",
        kind=ErrorKind.INVALID_STATE,
        retryable=False,
        details={"workflow_id": workflow_id},
    )


def start_reads_closed_run(options: Mapping[str, Any]) -> bool:
    """Whether ``plan_start`` needs the closed run under the id (to skip the store read).

    The default ``allow_duplicate`` starts whatever ran before, so only the other reuse
    policies look at it.
    """
    reuse: str = options.get("id_reuse_policy", "allow_duplicate")
    return reuse != "allow_duplicate"


def plan_start(
    existing: ExistingRun | None,
    *,
    workflow_id: str,
    options: Mapping[str, Any],
    explicit: bool,
    quarantined: bool = False,
    replaced: bool = False,
) -> StartPlan:
    """Apply the id policies of docs/workflows.md to a start of ``workflow_id``.

    A quarantined id is refused. While a run is open, ``id_conflict_policy`` decides; it
    defaults to ``use_existing`` for an explicit id or name and to ``fail`` for a generated
    one, and ``execution_error_when_already_started`` turns anything but
    ``terminate_existing`` into ``fail``. Once it has closed, ``id_reuse_policy`` decides,
    except right after this start terminated it: the replacement was asked for.

    Args:
        existing: the open run under the id, else the last closed one (the shell may leave
            a closed one out when ``start_reads_closed_run`` is false), else None.
        workflow_id: the id started.
        options: the checked start options.
        explicit: the id (or name) was given, not generated.
        quarantined: the id is quarantined.
        replaced: this start already terminated the run that was open under the id.
    """
    if quarantined:
        return StartPlan(action="refuse", error=quarantined_error(workflow_id))
    if existing is None:
        return StartPlan(action="start")
    if existing.open:
        return _plan_conflict(existing, workflow_id, options, explicit=explicit)
    if replaced:
        return StartPlan(action="start")
    return _plan_reuse(existing, workflow_id, options)


def conflict_policy(options: Mapping[str, Any], *, explicit: bool) -> str:
    """The ``id_conflict_policy`` a start applies while a run is open under its id.

    ``use_existing`` for an explicit id or name and ``fail`` for a generated one, unless
    the option says otherwise; ``execution_error_when_already_started`` turns anything but
    ``terminate_existing`` into ``fail``. Both hosts decide by this one rule.
    """
    policy: str = options.get("id_conflict_policy") or ("use_existing" if explicit else "fail")
    if options.get("execution_error_when_already_started") and policy != "terminate_existing":
        policy = "fail"
    return policy


def _plan_conflict(
    existing: ExistingRun, workflow_id: str, options: Mapping[str, Any], *, explicit: bool
) -> StartPlan:
    policy = conflict_policy(options, explicit=explicit)
    if policy == "use_existing":
        return StartPlan(action="use_existing", pid=existing.pid)
    if policy == "terminate_existing":
        return StartPlan(action="terminate_existing", pid=existing.pid)
    return StartPlan(
        action="refuse", error=already_error(workflow_id, existing.pid, "is already running")
    )


def _plan_reuse(existing: ExistingRun, workflow_id: str, options: Mapping[str, Any]) -> StartPlan:
    reuse = options.get("id_reuse_policy", "allow_duplicate")
    if reuse == "reject_duplicate":
        why = "ran before and id_reuse_policy is reject_duplicate"
    elif reuse == "allow_duplicate_failed_only" and existing.status is RunStatus.COMPLETED:
        why = "completed and id_reuse_policy is allow_duplicate_failed_only"
    else:
        return StartPlan(action="start")
    return StartPlan(action="refuse", error=already_error(workflow_id, None, why))


def plan_child_start(
    workflow_id: str, *, taken: bool, quarantined: bool, staged: bool = False
) -> Error | None:
    """Why a child cannot start under ``workflow_id``, or None if it can.

    A child takes no id policies: an id open already (or given to a sibling started in the
    same step, ``taken``) is refused, and so is a quarantined one. So is an id that a child
    of another step not yet committed takes (``staged``: a step of the same executor pass,
    or an eager first activation in flight): both would otherwise store a run under it.
    """
    if quarantined:
        return quarantined_error(workflow_id)
    if taken or staged:
        return Error(
            f"child workflow id {workflow_id!r} is already running",
            kind=ErrorKind.ALREADY_EXISTS,
            details={"workflow_id": workflow_id},
        )
    return None


# -- commands to children of the same step ----------------------------------------------

StepRoute = Literal["staged_child", "elsewhere"]


def route_in_step(dest: Pid, *, workflow_host: str, staged: Collection[str]) -> StepRoute:
    """Where a send or a cancel from a workflow step to ``dest`` is recorded.

    A child started earlier in the same step (``staged``: the ids of those children) is
    not running yet, but it starts in the step's commit: the message or cancel request
    goes into its inbox rows in that same commit, after its ``Started`` event (as Temporal
    delivers a signal to a child started in the same workflow task after the start). A
    terminate of such a child runs after the commit, once the child is registered. Any
    other destination is routed as usual (``elsewhere``).
    """
    if dest.host == workflow_host and dest.id in staged:
        return "staged_child"
    return "elsewhere"
