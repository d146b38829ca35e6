"""The planner's cancel, delivery, timer, announce and new-run rules (no node, no store)."""

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.workflow._plan_close import AnnouncePlan, plan_announce, plan_timer, records_event
from roost.workflow._plan_start import (
    CHAIN_OPTIONS,
    INHERITED,
    SYSTEM_SEQ,
    plan_new_run,
    start_fields,
)
from roost.workflow._planner import (
    CloseOutcome,
    NextRun,
    RunState,
    plan_close,
    plan_next,
    route_in_step,
    timeout_error,
)
from roost.workflow._retry import RetryPolicy
from roost.workflow._status import RunStatus

NOW = dt.datetime(2026, 1, 1, 12, 0, 30, tzinfo=dt.UTC)
HOST = "app:workflows"
RETRY = {"retry_policy": RetryPolicy(initial_interval=1.0).to_dict()}
CRON = {"cron_schedule": "0 * * * *"}


def boom():
    return Error("boom", kind=ErrorKind.UNAVAILABLE)


def wf(name):
    return Pid.trusted("node", HOST, name)


def proc(n):
    return Pid.trusted("node", "", f"1.{n:05d}")


# -- a cancel ends the chain ----------------------------------------------------------------


@pytest.mark.parametrize("options", [RETRY, CRON, {**RETRY, **CRON}], ids=["retry", "cron", "both"])
@pytest.mark.parametrize(
    "cancel",
    [{"cancel_requested": True}, {"cancel_pending": True}],
    ids=["recorded", "pending"],
)
def test_a_run_that_fails_after_a_cancel_is_failed_and_nothing_follows(options, cancel):
    state = RunState(workflow_id="wf", options=options, **cancel)
    plan = plan_close(state, CloseOutcome.failed(boom()), NOW)
    assert plan.status is RunStatus.FAILED  # it raised: failed, per docs/workflows.md
    assert plan.next is None
    assert plan.final  # watchers get the EXIT now
    assert set(plan.purge) == {"tasks", "inbox"}


def test_without_the_cancel_the_same_failure_is_retried():
    plan = plan_close(RunState(workflow_id="wf", options=RETRY), CloseOutcome.failed(boom()), NOW)
    assert plan.next == NextRun(reason="retry", attempt=2, not_before=NOW + dt.timedelta(seconds=1))


def test_a_run_timed_out_after_a_cancel_is_not_retried():
    state = RunState(workflow_id="wf", options=RETRY, cancel_pending=True)
    outcome = CloseOutcome.outside(RunStatus.TIMED_OUT, timeout_error("wf", "run", 5.0))
    plan = plan_close(state, outcome, NOW)
    assert (plan.status, plan.next) == (RunStatus.TIMED_OUT, None)


def test_a_cancel_not_yet_read_does_not_make_a_return_canceled():
    # Only a cancel the code was handed turns a return into CANCELED; either ends a chain.
    state = RunState(workflow_id="wf", options=CRON, cancel_pending=True)
    plan = plan_close(state, CloseOutcome.completed(3), NOW)
    assert (plan.status, plan.result, plan.next) == (RunStatus.COMPLETED, 3, None)


def test_a_continue_as_new_after_a_cancel_is_the_workflows_choice():
    state = RunState(workflow_id="wf", options=RETRY, cancel_requested=True)
    plan = plan_close(state, CloseOutcome.continued_as_new("app:next", []), NOW)
    assert plan.next is not None
    assert plan.next.reason == "continue_as_new"


@given(
    status=st.sampled_from(list(RunStatus)),
    attempt=st.integers(1, 10),
    options=st.sampled_from([RETRY, CRON, {**RETRY, **CRON}, {}]),
    recorded=st.booleans(),
)
def test_nothing_follows_any_close_after_a_cancel(status, attempt, options, recorded):
    state = RunState(
        workflow_id="wf",
        attempt=attempt,
        options=options,
        cancel_requested=recorded,
        cancel_pending=not recorded,
    )
    assert plan_next(state, status, boom(), NOW) is None
    assert plan_next(state, status, None, NOW) is None


# -- sends and cancels to a child started in the same step ---------------------------------


def test_a_child_of_the_same_step_is_reached_through_its_start_rows():
    assert route_in_step(wf("kid"), workflow_host=HOST, staged={"kid"}) == "staged_child"


@pytest.mark.parametrize(
    "dest",
    [wf("other"), Pid.trusted("node", "app:replies", "kid"), Pid.trusted("node", "", "kid")],
    ids=["another-workflow", "a-reply-address", "a-process"],
)
def test_anything_else_is_routed_as_usual(dest):
    assert route_in_step(dest, workflow_host=HOST, staged={"kid"}) == "elsewhere"


@given(
    dest=st.sampled_from("abcd"),
    staged=st.frozensets(st.sampled_from("abcd")),
    host=st.sampled_from([HOST, "app:replies", ""]),
)
def test_the_staged_route_is_exactly_a_workflow_pid_among_the_staged_ids(dest, staged, host):
    route = route_in_step(Pid.trusted("node", host, dest), workflow_host=HOST, staged=staged)
    assert (route == "staged_child") == (host == HOST and dest in staged)


# -- timers ----------------------------------------------------------------------------------


def test_a_workflow_timer_is_recorded_as_an_event_whatever_its_run():
    for current in (True, False):  # the settle step itself drops it for a closed run
        plan = plan_timer("timer", workflow_id="wf", current=current, options={})
        assert (plan.action, plan.error) == ("record", None)
    assert records_event("timer")
    assert not any(records_event(k) for k in ("start", "run_timeout", "execution_timeout"))


def test_a_start_timer_releases_the_held_run():
    assert plan_timer("start", workflow_id="wf", current=True, options={}).action == "release"


@pytest.mark.parametrize("kind", ["run_timeout", "execution_timeout"])
def test_a_timeout_timer_closes_the_run_timed_out(kind):
    plan = plan_timer(kind, workflow_id="wf", current=True, options={kind: 30.0})
    assert plan.action == "close"
    assert plan.error == timeout_error("wf", kind.removesuffix("_timeout"), 30.0)
    assert plan.error.details["timeout_type"] == kind.removesuffix("_timeout")


@given(
    kind=st.sampled_from(["start", "run_timeout", "execution_timeout", "unknown"]),
    current=st.booleans(),
)
def test_a_runtime_timer_acts_only_on_the_run_it_was_armed_for(kind, current):
    plan = plan_timer(kind, workflow_id="wf", current=current, options={kind: 1.0})
    if not current or kind == "unknown":
        assert (plan.action, plan.error) == ("none", None)
    else:
        assert plan.action == ("release" if kind == "start" else "close")
        assert (plan.error is not None) == (plan.action == "close")


# -- announcing a close ----------------------------------------------------------------------


def test_watchers_get_exits_and_links_fire_only_on_an_error():
    parent, watcher, gone, linked = wf("parent"), proc(1), proc(2), proc(3)
    live = {watcher, linked}
    ok = plan_announce(
        watchers={parent, watcher, gone},
        links={linked},
        error=None,
        live=live,
        workflow_host=HOST,
    )
    assert ok == AnnouncePlan(exit_processes=(watcher,), exit_workflows=(parent,))
    failed = plan_announce(
        watchers={parent, watcher, gone},
        links={linked, gone},
        error=boom(),
        live=live,
        workflow_host=HOST,
    )
    assert failed.link_downs == (linked,)  # a dead linked process gets nothing
    assert (failed.exit_processes, failed.exit_workflows) == ((watcher,), (parent,))


pids = st.one_of(
    st.integers(1, 6).map(proc), st.sampled_from("pqr").map(wf), st.just(Pid.trusted("n", "x", "y"))
)


@given(
    watchers=st.frozensets(pids),
    links=st.frozensets(pids),
    live=st.frozensets(pids),
    failed=st.booleans(),
)
def test_every_live_or_workflow_watcher_gets_exactly_one_exit(watchers, links, live, failed):
    plan = plan_announce(
        watchers=watchers,
        links=links,
        error=boom() if failed else None,
        live=live,
        workflow_host=HOST,
    )
    told = plan.exit_processes + plan.exit_workflows
    assert len(told) == len(set(told))
    assert set(plan.exit_processes) == watchers & live
    assert set(plan.exit_workflows) == {p for p in watchers - live if p.host == HOST}
    assert set(plan.link_downs) == (links & live if failed else set())
    assert list(plan.exit_processes) == sorted(plan.exit_processes, key=str)


# -- the rows a new run begins with ------------------------------------------------------------


def test_a_first_run_with_a_start_delay_is_held_and_times_out_after_it():
    options = {"start_delay": 60.0, "run_timeout": 10.0, "execution_timeout": 600.0, "id": "x"}
    fields = start_fields(options, parent=None, at=NOW)
    assert fields["options"] == {"run_timeout": 10.0, "execution_timeout": 600.0}
    plan = plan_new_run(
        workflow_id="wf",
        workflow_type="app:flow",
        run_id="r1",
        seed=7,
        args=(1, 2),
        context={"k": "v"},
        at=NOW,
        fields=fields,
    )
    begins = NOW + dt.timedelta(seconds=60)
    assert plan.held
    assert [(t.kind, t.seq, t.due) for t in plan.timers] == [
        ("start", SYSTEM_SEQ["start"], begins),
        ("run_timeout", SYSTEM_SEQ["run_timeout"], begins + dt.timedelta(seconds=10)),
        ("execution_timeout", SYSTEM_SEQ["execution_timeout"], NOW + dt.timedelta(minutes=10)),
    ]
    assert plan.record["status"] is RunStatus.RUNNING
    assert (plan.record["run_id"], plan.record["started_at"], plan.record["not_before"]) == (
        "r1",
        NOW,
        begins,
    )
    assert plan.started == {
        "workflow_id": "wf",
        "run_id": "r1",
        "workflow_type": "app:flow",
        "args": [1, 2],
        "seed": 7,
        "context": {"k": "v"},
        "task_queue": "default",
        "parent": None,
        "attempt": 1,
    }


class Previous:
    """A stand-in for the previous run's record (anything with the inherited fields)."""

    def __init__(self, **fields):
        self.__dict__.update(dict.fromkeys(INHERITED), **fields)


def test_a_retry_inherits_the_lasting_settings_and_sets_its_own():
    parent = wf("parent")
    old = Previous(
        parent=parent,
        task_queue="q",
        options={"run_timeout": 5.0},
        memo={"m": 1},
        execution_deadline=NOW + dt.timedelta(hours=1),
    )
    plan = plan_new_run(
        workflow_id="wf",
        workflow_type="app:flow",
        run_id="r2",
        seed=1,
        args=[],
        context={},
        at=NOW,
        inherit=old,
        fields={"attempt": 3, "not_before": NOW},  # a backoff already over: not held
    )
    assert not plan.held
    assert (plan.record["parent"], plan.record["task_queue"], plan.record["memo"]) == (
        parent,
        "q",
        {"m": 1},
    )
    assert (plan.started["attempt"], plan.started["parent"], plan.started["task_queue"]) == (
        3,
        parent,
        "q",
    )
    assert [t.kind for t in plan.timers] == ["run_timeout", "execution_timeout"]


@given(
    delay=st.one_of(st.none(), st.integers(-100, 100)),
    run_timeout=st.one_of(st.none(), st.integers(1, 100)),
    options=st.dictionaries(st.sampled_from(sorted(CHAIN_OPTIONS | {"id", "memo"})), st.none()),
)
def test_a_new_run_is_held_exactly_when_its_start_time_is_ahead(delay, run_timeout, options):
    not_before = None if delay is None else NOW + dt.timedelta(seconds=delay)
    chain = {"run_timeout": run_timeout} if run_timeout else {}
    plan = plan_new_run(
        workflow_id="wf",
        workflow_type="app:flow",
        run_id="r",
        seed=0,
        args=[],
        context={},
        at=NOW,
        fields={"not_before": not_before, "options": chain},
    )
    assert plan.held == (delay is not None and delay > 0)
    kinds = [t.kind for t in plan.timers]
    assert ("start" in kinds) == plan.held
    assert ("run_timeout" in kinds) == bool(run_timeout)
    assert set(start_fields(options, parent=None, at=NOW)["options"]) <= CHAIN_OPTIONS
