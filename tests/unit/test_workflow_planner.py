"""The pure close planner against the rules of docs/workflows.md (no node, no store)."""

import ast
import datetime as dt
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.workflow._planner import (
    ChildClose,
    CloseOutcome,
    ExistingRun,
    FirstStart,
    NextRun,
    OpenChild,
    RunState,
    RuntimeTimer,
    StartPlan,
    plan_child_start,
    plan_children,
    plan_close,
    plan_first_start,
    plan_run_timers,
    plan_start,
    start_reads_closed_run,
    timeout_error,
)
from roost.workflow._retry import RetryPolicy
from roost.workflow._status import RunStatus

NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
SRC = Path(__file__).resolve().parents[2] / "src"


def policy(**fields):
    return RetryPolicy(**fields).to_dict()


def boom(kind=ErrorKind.INTERNAL, retryable=None):
    return Error("boom", kind=kind, retryable=retryable)


def run_timeout():
    return timeout_error("wf", "run", 5.0)


def execution_timeout():
    return timeout_error("wf", "execution", 60.0)


# -- examples ------------------------------------------------------------------------------


def test_a_plain_return_closes_completed_and_purges_the_run():
    plan = plan_close(RunState(workflow_id="wf"), CloseOutcome.completed(7), NOW)
    assert plan.status is RunStatus.COMPLETED
    assert (plan.result, plan.error, plan.closed_at) == (7, None, NOW)
    assert plan.final
    assert plan.next is None
    assert set(plan.purge) == {"tasks", "inbox"}
    assert plan.drop_timers


def test_a_return_after_a_cancel_request_is_canceled_and_ends_a_schedule():
    state = RunState(
        workflow_id="wf", cancel_requested=True, options={"cron_schedule": "0 * * * *"}
    )
    plan = plan_close(state, CloseOutcome.completed(None), NOW)
    assert plan.status is RunStatus.CANCELED
    assert plan.next is None


def test_a_failure_with_attempts_left_is_retried_after_the_backoff():
    options = {"retry_policy": policy(initial_interval=2.0, backoff_coefficient=3.0)}
    state = RunState(workflow_id="wf", attempt=3, options=options)
    plan = plan_close(state, CloseOutcome.failed(boom()), NOW)
    assert plan.status is RunStatus.FAILED
    assert plan.next == NextRun(
        reason="retry", attempt=4, not_before=NOW + dt.timedelta(seconds=2.0 * 3.0**2)
    )
    assert plan.purge == ("tasks",)  # the inbox rows move to the next run one by one


def test_the_backoff_is_capped_by_maximum_interval():
    options = {"retry_policy": policy(initial_interval=1.0, maximum_interval=5.0)}
    plan = plan_close(
        RunState(workflow_id="wf", attempt=10, options=options),
        CloseOutcome.failed(boom()),
        NOW,
    )
    assert plan.next is not None
    assert plan.next.not_before == NOW + dt.timedelta(seconds=5.0)


@pytest.mark.parametrize(
    "error",
    [boom(retryable=False), boom(kind=ErrorKind.NOT_FOUND)],
    ids=["retryable-false", "non-retryable-kind"],
)
def test_a_non_retryable_failure_is_not_retried(error):
    options = {"retry_policy": policy(non_retryable_error_kinds=["NotFound"])}
    plan = plan_close(RunState(workflow_id="wf", options=options), CloseOutcome.failed(error), NOW)
    assert plan.status is RunStatus.FAILED
    assert plan.next is None


def test_exhausted_retries_fall_back_to_the_next_cron_run():
    options = {"retry_policy": policy(maximum_attempts=2), "cron_schedule": "0 * * * *"}
    state = RunState(workflow_id="wf", attempt=2, options=options)
    plan = plan_close(state, CloseOutcome.failed(boom()), NOW + dt.timedelta(minutes=5))
    assert plan.next == NextRun(reason="cron", attempt=1, not_before=NOW + dt.timedelta(hours=1))


def test_a_retry_past_the_execution_deadline_is_not_scheduled():
    state = RunState(
        workflow_id="wf",
        options={"retry_policy": policy(initial_interval=10.0)},
        execution_deadline=NOW + dt.timedelta(seconds=10),
    )
    assert plan_close(state, CloseOutcome.failed(boom()), NOW).next is None


def test_continue_as_new_hands_the_id_to_a_first_attempt_with_the_new_input():
    state = RunState(workflow_id="wf", attempt=3, options={"retry_policy": policy()})
    plan = plan_close(state, CloseOutcome.continued_as_new("app:next", [1, 2]), NOW)
    assert plan.status is None  # the next run's record replaces this one's
    assert plan.next == NextRun(reason="continue_as_new", entry="app:next", args=[1, 2])
    assert plan.purge == ("tasks",)


def test_terminate_ends_retries_and_schedules():
    options = {"retry_policy": policy(), "cron_schedule": "0 * * * *"}
    error = Error("terminated", kind=ErrorKind.CANCELED)
    plan = plan_close(
        RunState(workflow_id="wf", options=options),
        CloseOutcome.outside(RunStatus.TERMINATED, error),
        NOW,
    )
    assert (plan.status, plan.error, plan.next) == (RunStatus.TERMINATED, error, None)
    assert set(plan.purge) == {"inbox", "tasks"}


def test_a_run_timeout_is_retried_and_an_execution_timeout_ends_the_chain():
    state = RunState(workflow_id="wf", options={"retry_policy": policy()})
    by_run = plan_close(state, CloseOutcome.outside(RunStatus.TIMED_OUT, run_timeout()), NOW)
    assert by_run.next is not None
    assert by_run.next.reason == "retry"
    by_execution = plan_close(
        state, CloseOutcome.outside(RunStatus.TIMED_OUT, execution_timeout()), NOW
    )
    assert by_execution.status is RunStatus.TIMED_OUT
    assert by_execution.next is None


def test_timeout_errors_name_their_kind():
    error = timeout_error("wf", "run", 1.5)
    assert error.kind is ErrorKind.TIMEOUT
    assert error.details == {"timeout_type": "run", "timeout": 1.5, "workflow_id": "wf"}
    assert "run_timeout of 1.5s" in error.message


def test_runtime_timers_of_a_delayed_run():
    later = NOW + dt.timedelta(seconds=30)
    deadline = NOW + dt.timedelta(hours=1)
    timers = plan_run_timers(
        not_before=later, options={"run_timeout": 5.0}, execution_deadline=deadline, now=NOW
    )
    assert timers == (
        RuntimeTimer(kind="start", due=later),
        RuntimeTimer(kind="run_timeout", due=later + dt.timedelta(seconds=5)),
        RuntimeTimer(kind="execution_timeout", due=deadline),
    )
    assert plan_run_timers(not_before=NOW, options={}, execution_deadline=None, now=NOW) == ()


def test_the_first_start_of_a_delayed_cron_workflow_waits_for_the_fire_after_the_delay():
    first = plan_first_start(
        {"start_delay": 90.0, "cron_schedule": "*/10 * * * * *", "execution_timeout": 3600.0},
        NOW,
    )
    assert first == FirstStart(
        not_before=NOW + dt.timedelta(seconds=100),
        execution_deadline=NOW + dt.timedelta(hours=1),
    )
    assert plan_first_start({}, NOW) == FirstStart(not_before=None, execution_deadline=None)


PARENT = Pid.trusted("n", "h", "parent")
OTHER = Pid.trusted("n", "h", "someone-else")


def test_parent_close_policies():
    policies = {"a": "terminate", "b": "request_cancel", "c": "abandon", "d": "terminate"}
    first = {"a": "ra", "b": "rb", "c": "rc", "d": "rd"}
    open_runs = {
        "a": OpenChild(run_id="ra", parent=PARENT),
        "b": OpenChild(run_id="rb2", parent=PARENT),  # a later run of the child's chain
        "c": OpenChild(run_id="rc", parent=PARENT),
        "d": OpenChild(run_id="other", parent=OTHER),  # the id names another workflow now
    }
    assert plan_children(PARENT, policies, first, open_runs) == (
        ChildClose(child_id="a", action="terminate"),
        ChildClose(child_id="b", action="cancel"),
    )


# -- the property: outcomes x options against the documented rules ---------------------------

KINDS = [ErrorKind.INTERNAL, ErrorKind.NOT_FOUND, ErrorKind.INVALID, ErrorKind.TIMEOUT]
# Cron schedules whose next fire time the model computes by arithmetic.
CRONS = {"*/10 * * * * *": 10, "0 * * * *": 3600}

retry_specs = st.builds(
    dict,
    initial_interval=st.sampled_from([0.5, 1.0, 30.0]),
    backoff_coefficient=st.sampled_from([1.0, 2.0, 3.0]),
    maximum_interval=st.sampled_from([None, 60.0]),
    maximum_attempts=st.integers(0, 4),
    non_retryable_error_kinds=st.sampled_from([(), ("NotFound",), ("NotFound", "Timeout")]),
)
policies = st.one_of(retry_specs, st.none())
errors = st.builds(
    lambda kind, retryable: Error("boom", kind=kind, retryable=retryable),
    st.sampled_from(KINDS),
    st.sampled_from([None, True, False]),
)
# Failures and run timeouts weigh more: they are where retries and schedules meet.
failures = st.one_of(
    st.builds(CloseOutcome.failed, errors),
    st.builds(lambda: CloseOutcome.outside(RunStatus.TIMED_OUT, run_timeout())),
)
outcomes = st.one_of(
    failures,
    failures,
    st.builds(CloseOutcome.completed, st.integers()),
    st.builds(lambda: CloseOutcome.continued_as_new("app:next", ["x"])),
    st.builds(lambda: CloseOutcome.outside(RunStatus.TIMED_OUT, execution_timeout())),
    st.builds(
        lambda: CloseOutcome.outside(
            RunStatus.TERMINATED, Error("terminated", kind=ErrorKind.CANCELED)
        )
    ),
)


def model_delay(spec, attempt):
    cap = spec["maximum_interval"] or 100 * spec["initial_interval"]
    return min(spec["initial_interval"] * spec["backoff_coefficient"] ** (attempt - 1), cap)


def model_fire(cron, now):
    period = CRONS[cron]
    epoch = int(now.timestamp())
    return dt.datetime.fromtimestamp((epoch // period + 1) * period, dt.UTC)


def model(state, spec, cron, outcome, now):
    """docs/workflows.md, "Start options", "Cancel vs terminate" and "Continue-as-new"."""
    if outcome.continued is not None:
        return None, "continue_as_new", None
    status = outcome.status
    if status is RunStatus.COMPLETED and state.cancel_requested:
        status = RunStatus.CANCELED
    error = outcome.error
    if status in (RunStatus.CANCELED, RunStatus.TERMINATED):
        return status, None, None  # a cancel or terminate ends retries and schedules
    if state.cancel_requested or state.cancel_pending:
        return status, None, None  # failed or timed out after a cancel: the chain ends too
    if error is not None and error.details.get("timeout_type") == "execution":
        return status, None, None  # nothing follows the execution timeout
    deadline = state.execution_deadline
    if status is not RunStatus.COMPLETED and spec is not None:
        kinds = {ErrorKind(k) for k in spec["non_retryable_error_kinds"]}
        limit = spec["maximum_attempts"]
        if (
            error.retryable is not False
            and error.kind not in kinds
            and (limit == 0 or state.attempt < limit)
        ):
            when = now + dt.timedelta(seconds=model_delay(spec, state.attempt))
            if deadline is None or when < deadline:
                return status, "retry", (state.attempt + 1, when)
    if cron is not None:
        fire = model_fire(cron, now)
        if deadline is None or fire < deadline:
            return status, "cron", (1, fire)
    return status, None, None


@given(
    spec=policies,
    cron=st.sampled_from([None, *CRONS]),
    attempt=st.integers(1, 6),
    cancel=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]),
    deadline_in=st.one_of(st.none(), st.integers(1, 4000)),
    outcome=outcomes,
    offset=st.integers(0, 86_400 * 3),
)
def test_plans_follow_the_documented_rules(
    spec, cron, attempt, cancel, deadline_in, outcome, offset
):
    check_plan(spec, cron, attempt, cancel, deadline_in, outcome, offset)


@given(
    spec=retry_specs,
    cron=st.sampled_from([None, *CRONS]),
    attempt=st.integers(1, 6),
    deadline_in=st.one_of(st.none(), st.integers(1, 400)),
    outcome=failures,
    offset=st.integers(0, 86_400),
)
def test_retries_follow_the_documented_backoff(spec, cron, attempt, deadline_in, outcome, offset):
    check_plan(spec, cron, attempt, (False, False), deadline_in, outcome, offset)


def check_plan(spec, cron, attempt, cancel, deadline_in, outcome, offset):
    now = NOW + dt.timedelta(seconds=offset, microseconds=offset % 997)
    options = {}
    if spec is not None:
        options["retry_policy"] = policy(**spec)
    if cron is not None:
        options["cron_schedule"] = cron
    state = RunState(
        workflow_id="wf",
        attempt=attempt,
        options=options,
        execution_deadline=None if deadline_in is None else now + dt.timedelta(seconds=deadline_in),
        cancel_requested=cancel[0],
        cancel_pending=cancel[1],
    )
    plan = plan_close(state, outcome, now)
    status, reason, timing = model(state, spec, cron, outcome, now)
    event(f"next: {reason}")

    assert plan.status is status
    assert plan.drop_timers  # a closing run's timers never fire
    if status is None:
        assert plan.next is not None
        assert plan.next.reason == "continue_as_new"
        assert (plan.next.entry, plan.next.args, plan.next.attempt) == ("app:next", ["x"], 1)
        assert plan.next.not_before is None
        assert plan.closed_at is None
    else:
        assert plan.closed_at == now
        assert plan.error is outcome.error
        assert plan.result == outcome.result
        if reason is None:
            assert plan.next is None
        else:
            assert plan.next is not None
            assert plan.next.reason == reason
            # The same entry and input as the closing run.
            assert (plan.next.entry, plan.next.args) == (None, None)
            assert plan.next.attempt == timing[0]
            assert plan.next.not_before is not None
            assert abs((plan.next.not_before - timing[1]).total_seconds()) < 1e-3
    # What goes with the commit: everything of a run nothing follows; only its tasks when
    # its own activation hands the inbox on; every row when closed from outside (the
    # inbox is staged anew under the next run).
    if outcome.from_outside or plan.final:
        assert set(plan.purge) == {"inbox", "tasks"}
    else:
        assert plan.purge == ("tasks",)


@given(
    children=st.dictionaries(
        st.sampled_from("abcdef"),
        st.tuples(
            st.sampled_from(["terminate", "request_cancel", "abandon"]),
            st.sampled_from(["open", "closed", "later-run", "someone-else"]),
        ),
    )
)
def test_parent_close_follows_each_childs_policy(children):
    policies = {cid: pol for cid, (pol, _) in children.items()}
    first = {cid: f"r-{cid}" for cid in children}
    open_runs = {}
    for cid, (_, now) in children.items():
        if now == "open":
            open_runs[cid] = OpenChild(run_id=f"r-{cid}", parent=PARENT)
        elif now == "later-run":
            open_runs[cid] = OpenChild(run_id=f"r2-{cid}", parent=PARENT)
        elif now == "someone-else":
            open_runs[cid] = OpenChild(run_id=f"x-{cid}", parent=OTHER)
    expected = tuple(
        ChildClose(child_id=cid, action="terminate" if pol == "terminate" else "cancel")
        for cid, (pol, now) in children.items()
        if pol != "abandon" and now in ("open", "later-run")
    )
    assert plan_children(PARENT, policies, first, open_runs) == expected


# -- starting under a taken id ------------------------------------------------------------

OPEN_PID = Pid.trusted("local", "wf-host", "wf")
CLOSED_STATUSES = [s for s in RunStatus if s is not RunStatus.RUNNING]


def start(existing, explicit=True, **options):
    return plan_start(existing, workflow_id="wf", options=options, explicit=explicit)


def test_a_free_id_starts():
    assert start(None) == StartPlan(action="start")
    assert start(None, explicit=False, id_reuse_policy="reject_duplicate").action == "start"


def test_an_open_run_is_used_by_an_explicit_id_and_refused_for_a_generated_one():
    running = ExistingRun.running(OPEN_PID)
    plan = start(running)
    assert plan == StartPlan(action="use_existing", pid=OPEN_PID)
    assert plan.deliver_messages
    refused = start(running, explicit=False)
    assert refused.action == "refuse"
    assert refused.error is not None
    assert refused.error.kind is ErrorKind.ALREADY_EXISTS
    assert refused.error.message == (
        "workflow 'wf' is already running; pick another id or change the id policy"
    )
    assert refused.error.details == {"workflow_id": "wf", "existing_pid": str(OPEN_PID)}


def test_execution_error_when_already_started_turns_use_existing_into_fail():
    running = ExistingRun.running(OPEN_PID)
    assert start(running, execution_error_when_already_started=True).action == "refuse"
    plan = start(
        running, id_conflict_policy="terminate_existing", execution_error_when_already_started=True
    )
    assert plan == StartPlan(action="terminate_existing", pid=OPEN_PID)
    assert not plan.deliver_messages


def test_a_closed_run_is_judged_by_the_reuse_policy():
    completed, failed = (
        ExistingRun.closed(RunStatus.COMPLETED),
        ExistingRun.closed(RunStatus.FAILED),
    )
    assert start(completed).action == "start"
    assert start(failed, id_reuse_policy="allow_duplicate_failed_only").action == "start"
    refused = start(completed, id_reuse_policy="allow_duplicate_failed_only")
    assert refused.error is not None
    assert refused.error.message == (
        "workflow 'wf' completed and id_reuse_policy is allow_duplicate_failed_only; "
        "pick another id or change the id policy"
    )
    assert refused.error.details == {"workflow_id": "wf", "existing_pid": None}
    rejected = start(failed, id_reuse_policy="reject_duplicate")
    assert rejected.error is not None
    assert rejected.error.kind is ErrorKind.ALREADY_EXISTS
    assert "ran before and id_reuse_policy is reject_duplicate" in rejected.error.message


def test_the_run_a_start_terminated_is_replaced_whatever_the_reuse_policy():
    terminated = ExistingRun.closed(RunStatus.TERMINATED)
    plan = plan_start(
        terminated,
        workflow_id="wf",
        options={"id_reuse_policy": "reject_duplicate"},
        explicit=True,
        replaced=True,
    )
    assert plan.action == "start"


def test_a_quarantined_id_is_refused_before_anything_else():
    plan = plan_start(None, workflow_id="wf", options={}, explicit=True, quarantined=True)
    assert plan.action == "refuse"
    assert plan.error is not None
    assert plan.error.kind is ErrorKind.INVALID_STATE
    assert plan.error.retryable is False
    assert plan.error.details == {"workflow_id": "wf"}


def test_only_the_stricter_reuse_policies_read_the_closed_run():
    assert not start_reads_closed_run({})
    assert not start_reads_closed_run({"id_reuse_policy": "allow_duplicate"})
    assert start_reads_closed_run({"id_reuse_policy": "reject_duplicate"})
    assert start_reads_closed_run({"id_reuse_policy": "allow_duplicate_failed_only"})


def test_a_child_start_takes_no_id_policy():
    assert plan_child_start("c", taken=False, quarantined=False) is None
    taken = plan_child_start("c", taken=True, quarantined=False)
    assert taken is not None
    assert taken.kind is ErrorKind.ALREADY_EXISTS
    assert taken.message == "child workflow id 'c' is already running"
    quarantined = plan_child_start("c", taken=True, quarantined=True)
    assert quarantined is not None
    assert quarantined.kind is ErrorKind.INVALID_STATE


def test_a_child_id_another_uncommitted_step_starts_is_refused():
    # Another step of the same pass (or an eager start in flight) stages a child of that id.
    staged = plan_child_start("c", taken=False, quarantined=False, staged=True)
    assert staged is not None
    assert staged.kind is ErrorKind.ALREADY_EXISTS
    assert staged.details == {"workflow_id": "c"}
    quarantined = plan_child_start("c", taken=False, quarantined=True, staged=True)
    assert quarantined is not None
    assert quarantined.kind is ErrorKind.INVALID_STATE


EXISTING = st.one_of(
    st.none(),
    st.just(ExistingRun.running(OPEN_PID)),
    st.sampled_from(CLOSED_STATUSES).map(ExistingRun.closed),
)


@given(
    existing=EXISTING,
    explicit=st.booleans(),
    conflict=st.sampled_from([None, "fail", "use_existing", "terminate_existing"]),
    reuse=st.sampled_from(
        [None, "allow_duplicate", "allow_duplicate_failed_only", "reject_duplicate"]
    ),
    error_when_started=st.sampled_from([None, False, True]),
    quarantined=st.booleans(),
    replaced=st.booleans(),
)
def test_start_plans_follow_the_id_policy_rules(
    existing, explicit, conflict, reuse, error_when_started, quarantined, replaced
):
    options = {
        k: v
        for k, v in {
            "id_conflict_policy": conflict,
            "id_reuse_policy": reuse,
            "execution_error_when_already_started": error_when_started,
        }.items()
        if v is not None
    }
    plan = plan_start(
        existing,
        workflow_id="wf",
        options=options,
        explicit=explicit,
        quarantined=quarantined,
        replaced=replaced,
    )
    # The model, from docs/workflows.md ("Workflow ids") and API.md.
    if quarantined:
        expected = "quarantined"
    elif existing is None:
        expected = "start"
    elif existing.open:
        policy = conflict or ("use_existing" if explicit else "fail")
        if error_when_started and policy == "use_existing":
            policy = "fail"
        expected = {"fail": "refuse", "use_existing": "use_existing"}.get(policy, policy)
    elif replaced:
        expected = "start"
    elif reuse == "reject_duplicate":
        expected = "refuse"
    else:
        failed_only = reuse == "allow_duplicate_failed_only"
        expected = "refuse" if failed_only and existing.status is RunStatus.COMPLETED else "start"
    event(f"{'none' if existing is None else existing.status.name}: {expected}")
    if expected == "quarantined":
        assert plan.action == "refuse"
        assert plan.error is not None
        assert plan.error.kind is ErrorKind.INVALID_STATE
        return
    assert plan.action == expected
    if expected == "refuse":
        assert plan.error is not None
        assert plan.error.kind is ErrorKind.ALREADY_EXISTS
        assert plan.error.details["workflow_id"] == "wf"
        assert plan.error.details["existing_pid"] == (str(OPEN_PID) if existing.open else None)
    else:
        assert plan.error is None
    assert plan.pid == (OPEN_PID if expected in ("use_existing", "terminate_existing") else None)
    assert plan.deliver_messages == (expected == "use_existing")
    if existing is not None and not existing.open and not start_reads_closed_run(options):
        # The shell leaves the closed run out then: the plan must be the same without it.
        assert plan == plan_start(
            None,
            workflow_id="wf",
            options=options,
            explicit=explicit,
            quarantined=quarantined,
            replaced=replaced,
        )


# -- no trio -------------------------------------------------------------------------------


def _module_file(name):
    path = SRC.joinpath(*name.split("."))
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None  # a package: its __init__ is not what the planner's code needs


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            yield node.module


PLANNER_MODULES = (
    "roost.workflow._planner",
    "roost.workflow._plan_close",
    "roost.workflow._plan_start",
)


def test_the_planner_and_the_roost_modules_it_reaches_import_no_trio():
    # The package __init__s (roost, roost.workflow) pull in trio through the node and the
    # manager, so this scans the module files themselves, transitively.
    seen, todo = set(), list(PLANNER_MODULES)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        if path is None:
            continue
        for imported in _imports(path):
            assert imported.split(".")[0] != "trio", f"{name} imports {imported}"
            if imported.split(".")[0] == "roost":
                todo.append(imported)
    assert "roost.workflow._retry" in seen
    assert "roost.storage" not in seen


# The pure cores, imported through the normal package path (their package __init__s run).
PURE_CORES = (
    "roost",
    "roost.workflow._driver",
    "roost.workflow._awaitables",
    "roost.workflow._ports",
    "roost.workflow._misuse",
    "roost.workflow._planner",
    "roost.workflow._status",
    "roost.workflow._local._phases",
    "roost.workflow._history",
    "roost.mailbox",
    "roost.mailbox._mailbox",
    "roost.supervisor._policy",
    "roost.storage._codec",
)


@pytest.mark.slow
def test_the_planner_runs_with_trio_blocked():
    # Nothing is stubbed: trio is unimportable, the packages load as they always do, and the
    # planner plans, the driver runs a workflow to completion and the codec round-trips.
    script = textwrap.dedent(
        f"""
        import contextvars, datetime as dt, importlib, importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "trio" or name.startswith("trio."):
                    raise ImportError("trio is blocked")
                return None

        sys.meta_path.insert(0, Block())
        for name in {PURE_CORES!r}:
            importlib.import_module(name)
        from roost.storage import Codec
        from roost.supervisor import Backoff
        from roost.supervisor._policy import backoff_delay
        from roost.workflow import _planner
        from roost.workflow._driver import Driver, Ports, Status
        from roost.workflow._history import Complete, Started, StartTimer, TimerFired

        state = _planner.RunState(workflow_id="wf", options={{"cron_schedule": "0 * * * *"}})
        now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
        plan = _planner.plan_close(state, _planner.CloseOutcome.completed(1), now)
        assert plan.next.reason == "cron", plan
        start = _planner.plan_start(None, workflow_id="wf", options={{}}, explicit=True)
        assert start.action == "start", start

        class Plain(Ports):
            def make_context(self, driver):
                return contextvars.copy_context()

        async def doubled(x):
            await driver.sleep(5)
            return x * 2

        driver = Driver(doubled, Plain())
        started = Started(workflow_id="wf", run_id="r", workflow_type="t:wf", args=[21], seed=1)
        assert driver.activate(now, [started]) == [StartTimer(seq=1, seconds=5)]
        done = driver.activate(now + dt.timedelta(seconds=5), [TimerFired(seq=1)])
        assert driver.status == Status.COMPLETED and driver.result == 42, done
        assert [type(c) for c in done] == [Complete], done

        codec = Codec()
        assert codec.decode(codec.encode({{"at": now, "n": [1, 2]}})) == {{"at": now, "n": [1, 2]}}
        assert backoff_delay(Backoff(initial_delay=1.0, jitter=0.0), 3, 0.5) == 4.0
        from roost.workflow import _plan_close, _plan_start
        timer = _plan_close.plan_timer("start", workflow_id="wf", current=True, options={{}})
        assert timer.action == "release", timer
        new = _plan_start.plan_new_run(
            workflow_id="wf", workflow_type="a:b", run_id="r", seed=1, args=[], context={{}},
            at=now,
        )
        assert new.started["attempt"] == 1, new
        assert "trio" not in sys.modules, sorted(m for m in sys.modules if "trio" in m)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
