"""The pure activation plan: ``plan_activation(run, events, commands, at, routes) -> Step``.

Tested alone, as ``supervisor/_policy.py`` is: a run built in memory, routes that answer
from plain dicts, and the Step's plain data checked (rows, record, effects, reservations).
Nothing is stored and no trio task runs; hypothesis checks the plan's invariants over
generated command lists.
"""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import roost
from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.storage import Codec, key, u64
from roost.workflow._history import (
    CancelActivity,
    Complete,
    ContinueAsNew,
    Fail,
    MessageArrived,
    ProcessExited,
    ScheduleActivity,
    SendMessage,
    StartChild,
    Started,
    StartTimer,
    StopProcess,
    UpsertAttributes,
)
from roost.workflow._local._plan import (
    DELETE,
    INBOX,
    PURGE,
    PUT,
    AcceptSends,
    ArmTimer,
    Closed,
    DropTimers,
    HandOver,
    RunActivity,
    SendLocal,
    StartChildRun,
    Step,
    StopActivity,
    build_run,
    plan_activation,
)
from roost.workflow._local._records import PROGRESS_TABLE, inbox_key, timer_key
from roost.workflow._local._run import Run
from roost.workflow._status import RunStatus

app = roost.App("plan")
HOST = "plan:workflows"
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CODEC = Codec()


@app.workflow
async def flow(n: int) -> int:
    return n


@app.workflow
async def kid(n: int) -> int:
    return n


def wf_pid(workflow_id: str) -> Pid:
    return Pid.trusted("local", HOST, workflow_id)


def new_open_run(workflow_id: str, *, seed: int = 0, index: int = 1) -> Run:
    """An open run as the host holds it after ``index - 1`` committed activations."""
    run, _ = build_run(
        entry=app.resolve("plan:flow"),
        pid=wf_pid(workflow_id),
        args=[1],
        context={},
        at=AT,
        rand=seed.to_bytes(8, "big") + bytes(8),
        tracing=False,
    )
    if index > 1:  # its record counts them, as recovery reads it
        run.resume_at(attrs.evolve(run.record, activations=index - 1))
    return run


@attrs.define
class FakeRoutes:
    """Routes answering from plain dicts; ``draws`` counts the entropy it handed out."""

    open_runs: dict[str, Run] = attrs.field(factory=dict)
    names: dict[str, Pid] = attrs.field(factory=dict)
    full: set[str] = attrs.field(factory=set)  # runs whose unread limit is reached
    refused_children: dict[str, Error] = attrs.field(factory=dict)
    inputs: dict[str, list[Any]] = attrs.field(factory=dict)
    timer_keys: dict[str, list[bytes]] = attrs.field(factory=dict)
    draws: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1))
    codec: Codec = CODEC
    host: str = HOST
    node_name: str = "local"
    tracing: bool = False

    def route(self, pid: Pid) -> tuple[Run, int | None] | None:
        run = self.open_runs.get(pid.id) if pid.host == HOST else None
        return (run, None) if run is not None else None

    def lookup(self, name: object) -> Pid | None:
        return self.names.get(name) if isinstance(name, str) else None

    def room(self, run: Run, count: int) -> Error | None:
        if run.record.workflow_id in self.full:
            return Error("full", kind=ErrorKind.LIMIT_EXCEEDED)
        return None

    def child_refusal(self, workflow_id: str, *, taken: bool) -> Error | None:
        if taken or workflow_id in self.open_runs:
            return Error(f"{workflow_id} is taken", kind=ErrorKind.ALREADY_EXISTS)
        return self.refused_children.get(workflow_id)

    def resolve(self, entry_id: str) -> Any:
        return app.resolve(entry_id)

    def input_of(self, run: Run) -> list[Any]:
        return self.inputs.get(run.record.workflow_id, [1])

    def timer_rows(self, run: Run) -> list[bytes]:
        return self.timer_keys.get(run.record.workflow_id, [])

    def entropy(self) -> bytes:
        return (1000 + next(self.draws)).to_bytes(8, "big") + bytes(8)


def plan(run: Run, commands: list[Any], routes: FakeRoutes | None = None, **kw: Any) -> Step:
    events = kw.pop("events", [])
    return plan_activation(run, events, commands, AT, routes or FakeRoutes(), batch=[], **kw)


def puts(step: Step, table: str) -> dict[bytes, bytes]:
    return {k: v for kind, t, k, v in step.writes if kind == PUT and t == table}


def deletes(step: Step, table: str) -> list[bytes]:
    return [k for kind, t, k, _ in step.writes if kind == DELETE and t == table]


def snapshot(run: Run) -> tuple[Any, ...]:
    return (
        run.record,
        run.inbox_seq,
        run.next_index,
        list(run.pending),
        run.progress_row,
        run.phase,
        set(run.exits_reported),
        list(run.pending_start),
    )


# -- one command at a time ------------------------------------------------------------------


def test_a_first_activation_writes_its_history_row_and_the_run_record():
    run = new_open_run("w")
    step = plan(run, [ScheduleActivity(seq=1, entry="plan:job", args=[1])], events=[])
    prefix = key(run.record.run_id)
    assert list(puts(step, "histories")) == [prefix + u64(1)]
    assert CODEC.decode(puts(step, "runs")[b"w"]) == step.record
    assert step.record.activations == 1
    assert [type(e) for e in step.effects] == [RunActivity]
    (effect,) = step.effects
    assert isinstance(effect, RunActivity)
    assert (effect.task.run_id, effect.task.seq, effect.task.entry) == (
        run.record.run_id,
        1,
        "plan:job",
    )
    assert step.numbers == () and step.staged == () and step.successor is None


def test_a_later_step_that_changes_only_counters_writes_no_run_row():
    run = new_open_run("w", index=3)
    step = plan(run, [StartTimer(seq=4, seconds=5)])
    assert "runs" not in {t for _, t, _, _ in step.writes}
    assert PROGRESS_TABLE not in {t for _, t, _, _ in step.writes}
    assert not step.progress_row
    (arm,) = step.effects
    assert isinstance(arm, ArmTimer)
    assert arm.timer.due == AT + dt.timedelta(seconds=5)
    assert list(puts(step, "timers")) == [timer_key(arm.timer.due, run.record.run_id, 4)]


def test_a_counters_only_step_keeps_the_record_and_the_run_its_counters():
    run = new_open_run("w", index=3)
    record = run.record
    step = plan(run, [ScheduleActivity(seq=3, entry="plan:job", args=[1])])
    assert step.record is record  # not copied: only its counters changed
    assert step.progress is not None and step.progress[0] == 3
    run.step_committed(step.record, step.size, progress_row=False, progress=step.progress)
    assert run.record is record and run.next_index == 4
    assert run.progress == step.progress
    # Asked for, the record has them (one copy, kept), as a copy per step would have had.
    current = run.current_record
    assert (current.activations, current.history_length, current.history_size) == (
        step.progress[0],
        step.progress[1],
        step.progress[2],
    )
    assert current == attrs.evolve(
        record,
        activations=3,
        history_length=step.progress[1],
        history_size=step.progress[2],
        unread=step.progress[3],
    )
    assert run.record is current and run.progress == step.progress
    # The next step plans from those counters: they add up.
    later = plan(run, [StartTimer(seq=4, seconds=1)])
    assert later.progress is not None and later.progress[0] == 4
    assert later.progress[2] == step.progress[2] + later.size
    # A task failure keeps them in the record it sets the failure on.
    run.step_committed(later.record, later.size, progress_row=False, progress=later.progress)
    run.task_failed([], Error("boom", kind=ErrorKind.INTERNAL))
    assert run.record.activations == 4 and run.record.task_failure is not None


def test_a_step_that_writes_the_record_carries_its_counters_in_it():
    run = new_open_run("w", index=2)
    step = plan(run, [Complete(seq=9, value=1)])
    assert step.progress is None
    assert step.record.activations == 2 and step.record.history_size == step.size


def test_a_changed_unread_count_goes_into_the_small_progress_row():
    run = new_open_run("w", index=3)
    run.resume_at(attrs.evolve(run.record, unread=2))  # the driver is gone: unread from the record

    @attrs.define
    class Mailbox:
        def unread_messages(self) -> int:
            return 5

    @attrs.define
    class Driver:
        children: frozenset[Pid] = frozenset()
        mailbox: Mailbox = attrs.field(factory=Mailbox)

    run.attach_driver(Driver())  # type: ignore[arg-type]  # what the plan reads of a driver
    step = plan(run, [])
    progress = CODEC.decode(puts(step, PROGRESS_TABLE)[b"w"])
    assert progress.unread == 5 and progress.activations == 3
    assert step.progress_row
    assert "runs" not in {t for _, t, _, _ in step.writes}


def test_a_completion_closes_the_run_in_the_same_step():
    run = new_open_run("w", index=2)
    run.found_progress_row(True)
    routes = FakeRoutes(timer_keys={"w": [b"t1"]})
    step = plan(run, [StartTimer(seq=1, seconds=9), Complete(seq=2, value="done")], routes)
    assert step.record.status is RunStatus.COMPLETED and step.record.result == "done"
    assert CODEC.decode(puts(step, "runs")[b"w"]).status is RunStatus.COMPLETED
    assert deletes(step, PROGRESS_TABLE) == [b"w"]  # the closing record has the counters
    assert deletes(step, "timers") == [b"t1"]  # armed timers go with the close
    assert puts(step, "timers") == {}  # and the step's own are never stored
    purged = {t for kind, t, k, _ in step.writes if kind == PURGE}
    assert purged and all(
        k == key(run.record.run_id) for kind, _, k, _ in step.writes if kind == PURGE
    )
    assert [type(e) for e in step.effects] == [DropTimers, Closed]


def test_a_failure_closes_with_the_error():
    run = new_open_run("w")
    error = Error("boom", kind=ErrorKind.INTERNAL)
    step = plan(run, [Fail(seq=1, error=error)])
    assert step.record.status is RunStatus.FAILED
    assert step.record.error is not None and step.record.error.message == "boom"
    assert isinstance(step.effects[-1], Closed)


def test_a_send_to_an_open_workflow_draws_its_inbox_number_without_taking_it():
    run, target = new_open_run("w"), new_open_run("t", seed=1)
    target.draw_inbox_numbers(7)
    routes = FakeRoutes(open_runs={"t": target})
    before = snapshot(target)
    sends = [SendMessage(seq=i, dest=wf_pid("t"), topic="go", payload=i) for i in (1, 2)]
    step = plan(run, sends, routes)
    assert snapshot(target) == before  # the shell takes the numbers, not the plan
    assert step.numbers == ((target, 2),)
    keys = [inbox_key(target.record.run_id, n) for n in (8, 9)]
    assert [k for k, _ in step.staged] == keys
    (inbox,) = [v for kind, _, _, v in step.writes if kind == INBOX]
    assert [(row[0], row[1]) for row in inbox.rows] == [(target, k) for k in keys]
    assert [CODEC.decode(row[2]).payload for row in inbox.rows] == [1, 2]
    (accept,) = [e for e in step.effects if isinstance(e, AcceptSends)]
    assert [(t, k) for t, k, _ in accept.sends] == [(target, k) for k in keys]
    assert all(e.sender == run.pid for _, _, e in accept.sends)


def test_a_send_to_a_plain_process_or_an_unknown_name_is_delivered_after_the_commit():
    run = new_open_run("w")
    plain = Pid.trusted("local", "plan:default", "1.00001")
    routes = FakeRoutes(names={"svc": plain})
    step = plan(
        run,
        [SendMessage(seq=1, dest=plain, topic="x"), SendMessage(seq=2, dest="svc", topic="y")],
        routes,
    )  # type: ignore[arg-type]  # a name, as workflow code may send to
    assert [(e.sender, e.send.topic) for e in step.effects if isinstance(e, SendLocal)] == [
        (run.pid, "x"),
        (run.pid, "y"),
    ]
    assert step.numbers == () and step.inbox is None


def test_a_send_to_a_full_workflow_is_dropped_and_logged(caplog: pytest.LogCaptureFixture):
    run, target = new_open_run("w"), new_open_run("t", seed=1)
    routes = FakeRoutes(open_runs={"t": target}, full={"t"})
    step = plan(run, [SendMessage(seq=1, dest=wf_pid("t"), topic="go")], routes)
    assert step.numbers == () and step.inbox is None
    assert "not delivered" in caplog.text


def test_a_cancel_of_an_open_workflow_is_an_inbox_row_and_a_terminate_runs_after_the_commit():
    run, target = new_open_run("w"), new_open_run("t", seed=1)
    routes = FakeRoutes(open_runs={"t": target})
    step = plan(run, [StopProcess(seq=1, dest=wf_pid("t"), reason="r")], routes)
    (accept,) = [e for e in step.effects if isinstance(e, AcceptSends)]
    assert [type(e).__name__ for _, _, e in accept.sends] == ["CancelRequested"]
    step = plan(run, [StopProcess(seq=1, dest=wf_pid("t"), hard=True)], routes)
    assert [e for e in step.effects if isinstance(e, StopProcess)] == [
        StopProcess(seq=1, dest=wf_pid("t"), hard=True)
    ]
    (inbox,) = [v for kind, _, _, v in step.writes if kind == INBOX]
    assert [type(row[3]).__name__ for row in inbox.rows] == ["TerminateRequest"]
    assert step.staged == ()  # a terminate request is never accepted as an event


def test_a_cancelled_activity_loses_its_row_and_its_attempt():
    run = new_open_run("w", index=2)
    step = plan(run, [CancelActivity(seq=3, activity=1)])
    assert deletes(step, "tasks") == [key(run.record.run_id) + u64(1)]
    assert step.effects == (StopActivity(run.record.run_id, 1),)


def test_attributes_change_the_record_and_so_write_it():
    run = new_open_run("w", index=2)
    step = plan(run, [UpsertAttributes(seq=1, search={"k": 1}, memo={"m": 2})])
    assert step.record.search == {"k": 1} and step.record.memo == {"m": 2}
    assert CODEC.decode(puts(step, "runs")[b"w"]).search == {"k": 1}


def test_a_child_is_stored_with_the_step_and_runs_after_it():
    run = new_open_run("w")
    command = StartChild(seq=1, entry="plan:kid", args=[2], workflow_id="c")
    message = SendMessage(seq=2, dest=wf_pid("c"), topic="hi", payload=3)
    step = plan(run, [command, message])
    (child,) = step.children
    assert child.record.parent == run.pid and child.pid == wf_pid("c")
    assert CODEC.decode(puts(step, "runs")[b"c"]).run_id == child.record.run_id
    assert [type(e).__name__ for _, _, e in child.pending_start] == ["Started", "MessageArrived"]
    assert {k for k, _, _ in child.pending_start} <= set(puts(step, "inbox"))
    assert {k for k, _, _ in child.pending_start} == {k for k, _ in step.staged}
    assert step.record.child_policies == {"c": "terminate"}
    assert step.record.child_runs == {"c": child.record.run_id}
    assert any(isinstance(e, StartChildRun) and e.child is child for e in step.effects)
    assert step.numbers == ()  # a new run's numbering is its own


def test_a_refused_child_is_its_exit_in_the_parents_own_inbox():
    run = new_open_run("w")
    other = new_open_run("c", seed=1)
    step = plan(
        run,
        [StartChild(seq=1, entry="plan:kid", args=[], workflow_id="c")],
        FakeRoutes(open_runs={"c": other}),
    )
    assert step.children == ()
    assert step.exits_reported == (wf_pid("c"),)
    assert step.numbers == ((run, 1),)
    (accept,) = [e for e in step.effects if isinstance(e, AcceptSends)]
    ((target, _, event),) = accept.sends
    assert target is run and isinstance(event, ProcessExited)
    assert event.error is not None and event.error.kind is ErrorKind.ALREADY_EXISTS


def test_continue_as_new_hands_the_id_to_a_successor_in_the_same_commit():
    run = new_open_run("w", index=2)
    pending_message = MessageArrived(topic="late", payload=1)
    run.queue_one((inbox_key(run.record.run_id, 1), pending_message))
    step = plan(run, [ContinueAsNew(seq=1, entry="plan:flow", args=[5])])
    new = step.successor
    assert new is not None and new.record.run_id != run.record.run_id
    assert CODEC.decode(puts(step, "runs")[b"w"]).run_id == new.record.run_id  # the id moves
    started, carried = (
        e for _, _, e in next(e for e in step.effects if isinstance(e, HandOver)).staged
    )
    assert isinstance(started, Started) and started.args == [5]
    assert carried == pending_message  # an unread message follows the workflow
    assert deletes(step, "inbox") == [inbox_key(run.record.run_id, 1)]  # moved, not kept twice
    (inbox,) = [v for kind, _, _, v in step.writes if kind == INBOX]
    assert inbox.handing_over == run.record.run_id
    assert isinstance(step.effects[-1], HandOver) and step.effects[-1].new is new


# -- over generated activations -------------------------------------------------------------

TARGETS = ("t1", "t2")


@st.composite
def commands(draw: st.DrawFn) -> list[Any]:
    seqs = itertools.count(1)
    body = draw(
        st.lists(
            st.one_of(
                st.builds(lambda: ("activity",)),
                st.builds(lambda s: ("timer", s), st.integers(0, 3600)),
                st.builds(lambda t: ("send", t), st.sampled_from([*TARGETS, "plain"])),
                st.builds(lambda t: ("cancel", t), st.sampled_from(TARGETS)),
                st.builds(lambda: ("child",)),
                st.builds(lambda: ("attrs",)),
            ),
            max_size=8,
        )
    )
    end = draw(st.sampled_from([None, "complete", "fail", "continue"]))
    out: list[Any] = []
    for item in body:
        seq = next(seqs)
        match item:
            case ("activity",):
                out.append(ScheduleActivity(seq=seq, entry="plan:job", args=[seq]))
            case ("timer", seconds):
                out.append(StartTimer(seq=seq, seconds=seconds))
            case ("send", "plain"):
                out.append(
                    SendMessage(
                        seq=seq, dest=Pid.trusted("local", "plan:default", "1.0"), topic="x"
                    )
                )
            case ("send", target):
                out.append(SendMessage(seq=seq, dest=wf_pid(target), topic="x", payload=seq))
            case ("cancel", target):
                out.append(StopProcess(seq=seq, dest=wf_pid(target), reason="r"))
            case ("child",):
                out.append(StartChild(seq=seq, entry="plan:kid", args=[], workflow_id=f"c{seq}"))
            case ("attrs",):
                out.append(UpsertAttributes(seq=seq, search={"n": seq}))
    seq = next(seqs)
    if end == "complete":
        out.append(Complete(seq=seq, value=seq))
    elif end == "fail":
        out.append(Fail(seq=seq, error=Error("x", kind=ErrorKind.INTERNAL)))
    elif end == "continue":
        out.append(ContinueAsNew(seq=seq, entry="plan:flow", args=[seq]))
    return out


@settings(max_examples=150, deadline=None)
@given(commands(), st.integers(1, 4), st.integers(0, 5))
def test_a_plan_changes_nothing_and_its_step_is_consistent(cmds, index, seq0):
    run = new_open_run("w", index=index)
    targets = {t: new_open_run(t, seed=i + 1) for i, t in enumerate(TARGETS)}
    for target in targets.values():
        target.draw_inbox_numbers(seq0)
    routes = FakeRoutes(open_runs=dict(targets))
    before = {name: snapshot(r) for name, r in {"w": run, **targets}.items()}
    step = plan(run, cmds, routes)
    assert {name: snapshot(r) for name, r in {"w": run, **targets}.items()} == before

    # One history row, under the run's key and the step's index.
    assert list(puts(step, "histories")) == [key(run.record.run_id) + u64(index)]
    # Inbox numbers: each target's drawn numbers follow its last one, with no gap.
    drawn = {t.record.workflow_id: n for t, n in step.numbers}
    for name, target in targets.items():
        keys = [k for k, _ in step.staged if k.startswith(key(target.record.run_id))]
        n = drawn.get(name, 0)
        assert keys == [inbox_key(target.record.run_id, seq0 + i) for i in range(1, n + 1)]
    # Every activity command is run after the commit, in command order.
    scheduled = [c.seq for c in cmds if isinstance(c, ScheduleActivity)]
    assert [e.task.seq for e in step.effects if isinstance(e, RunActivity)] == scheduled
    # A close: final status, no timer armed, the close announced (or the id handed over).
    end = cmds[-1] if cmds else None
    kinds = [type(e) for e in step.effects]
    if isinstance(end, Complete | Fail):
        assert step.record.status in (RunStatus.COMPLETED, RunStatus.FAILED)
        assert kinds[-1] is Closed and ArmTimer not in kinds and DropTimers in kinds
    elif isinstance(end, ContinueAsNew):
        assert step.successor is not None and kinds[-1] is HandOver
    else:
        assert step.record.status is RunStatus.RUNNING and Closed not in kinds
        timers = [c.seq for c in cmds if isinstance(c, StartTimer)]
        assert [e.timer.seq for e in step.effects if isinstance(e, ArmTimer)] == timers
    # Children: one StartChildRun each, their rows in the step, none drawn from the host.
    assert [e.child for e in step.effects if isinstance(e, StartChildRun)] == list(step.children)
    for child in step.children:
        assert child.record.workflow_id.encode() in puts(step, "runs")
    # Planning again gives the same rows (given the same entropy): no hidden state.
    again = plan(run, cmds, attrs.evolve(routes, draws=itertools.count(1)))
    first = plan(run, cmds, attrs.evolve(routes, draws=itertools.count(1)))
    assert again.writes == first.writes and again.record == first.record


# -- the shell's reservations (Tasks) ----------------------------------------------------------


def _tasks(runs: Any, staged: dict[bytes, bytes], routes: FakeRoutes) -> Any:
    from roost._counters import RuntimeCounters  # noqa: PLC0415 - only the shell needs them
    from roost.workflow._local._forwarding import Forwarding  # noqa: PLC0415
    from roost.workflow._local._task import Tasks  # noqa: PLC0415

    def unused(*_: Any, **__: Any) -> Any:
        raise AssertionError("not called by reserve or release")

    return Tasks(
        routes=routes,
        runs=runs,
        forwarding=Forwarding(),
        hold_staged=staged.update,
        drop_staged=lambda keys: [staged.pop(k, None) for k in keys],
        transact=unused,
        activities=unused,  # type: ignore[arg-type]  # never reached here
        timers=unused,  # type: ignore[arg-type]
        node=unused,  # type: ignore[arg-type]
        accept=unused,
        arm=unused,
        closed=unused,
        hand_over=unused,
        process_exited=unused,
        fail=unused,
        counters=RuntimeCounters(),
        stats={},
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(["t1", "t2", "child", "refused"]), max_size=5),
        min_size=1,
        max_size=5,
    )
)
def test_plans_reserved_one_after_another_never_share_a_key_and_release_gives_all_back(plans):
    from roost.workflow._local._runs import RunTable  # noqa: PLC0415

    targets = {t: new_open_run(t, seed=i + 1) for i, t in enumerate(TARGETS)}
    taken = new_open_run("refused-id", seed=9)
    routes = FakeRoutes(open_runs={**targets, "refused-id": taken})
    runs, staged = RunTable(100), {}
    tasks = _tasks(runs, staged, routes)
    steps, keys = [], []
    for n, sends in enumerate(plans):
        run = new_open_run(f"w{n}", seed=100 + n)
        seqs = itertools.count(1)
        cmds: list[Any] = []
        for what in sends:
            seq = next(seqs)
            if what == "child":
                cmds.append(
                    StartChild(seq=seq, entry="plan:kid", args=[], workflow_id=f"c{n}.{seq}")
                )
            elif what == "refused":
                cmds.append(
                    StartChild(seq=seq, entry="plan:kid", args=[], workflow_id="refused-id")
                )
            else:
                cmds.append(SendMessage(seq=seq, dest=wf_pid(what), topic="x", payload=seq))
        step = plan(run, cmds, routes)
        tasks._reserve(step)
        steps.append(step)
        keys += [k for k, _ in step.staged]
    assert len(keys) == len(set(keys))  # no two plans drew the same inbox key
    assert set(staged) == set(keys)
    for name, target in targets.items():  # in flight, seen by the unread-message limit
        assert target.arriving == sum(p.count(name) for p in plans)
    for step in steps:
        for child in step.children:
            assert runs.child_staged(child.record.workflow_id)
        assert set(step.exits_reported) <= set(step.run.exits_reported)
    for step in steps:
        tasks.release(step)
    assert staged == {}
    assert all(target.arriving == 0 for target in targets.values())
    for step in steps:
        for child in step.children:
            assert not runs.child_staged(child.record.workflow_id)
        assert not set(step.exits_reported) & set(step.run.exits_reported)
