"""The generated builders of workflow records equal the attrs ones and stay frozen."""

from __future__ import annotations

import datetime as dt

import attrs
import pytest

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.workflow._builders import maker, replacer
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    ScheduleActivity,
    new_activation,
    new_schedule,
)
from roost.workflow._local._records import (
    ActivityTask,
    RunRecord,
    RunStatus,
    new_task,
    with_close,
    with_counters,
    with_final,
)

_AT = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _full_record() -> RunRecord:
    """A record whose every field differs from its default."""
    return RunRecord(
        workflow_id="w",
        run_id="r",
        workflow_type="app:flow",
        status=RunStatus.RUNNING,
        started_at=_AT,
        closed_at=_AT,
        result={"r": 1},
        error=Error("e", kind=ErrorKind.INTERNAL),
        activations=3,
        history_length=9,
        history_size=300,
        inbox_seq=4,
        task_queue="q",
        parent=Pid.trusted("n", "h", "p"),
        children=[Pid.trusted("n", "h", "c")],
        search={"s": 1},
        memo={"m": 2},
        child_policies={"c": "abandon"},
        child_runs={"c": "cr"},
        name="nm",
        options={"task_timeout": 5.0},
        execution_deadline=_AT,
        summary="sum",
        details="det",
        attempt=2,
        not_before=_AT,
        cancel_requested=True,
        task_failure=Error("t", kind=ErrorKind.INTERNAL),
        unread=7,
        trace="00-abc",
    )


def test_with_counters_equals_evolve_and_leaves_the_original() -> None:
    old = _full_record()
    changes = {
        "children": [],
        "activations": 4,
        "history_length": 12,
        "history_size": 420,
        "unread": 0,
    }
    new = with_counters(old, **changes)
    assert new == attrs.evolve(old, **changes)
    assert type(new) is RunRecord
    assert old.activations == 3 and old.unread == 7  # the copy is a new object
    assert new.search is old.search  # unchanged fields are shared, as evolve shares them
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        new.activations = 5  # type: ignore[misc]


def test_with_close_equals_evolve() -> None:
    old = _full_record()
    changes = {
        "status": RunStatus.COMPLETED,
        "result": [1, 2],
        "error": None,
        "closed_at": _AT + dt.timedelta(seconds=1),
    }
    assert with_close(old, **changes) == attrs.evolve(old, **changes)


def test_with_final_equals_evolve() -> None:
    old = _full_record()
    changes = {
        "status": RunStatus.FAILED,
        "result": None,
        "error": Error("x", kind=ErrorKind.INTERNAL),
        "closed_at": _AT,
        "children": [],
        "activations": 5,
        "history_length": 14,
        "history_size": 512,
        "unread": 1,
    }
    assert with_final(old, **changes) == attrs.evolve(old, **changes)


def test_a_copy_of_a_record_that_runs_code_in_init_is_refused() -> None:
    @attrs.frozen
    class Checked:
        n: int = attrs.field(validator=attrs.validators.instance_of(int))

    with pytest.raises(TypeError, match="runs code in __init__"):
        replacer(Checked, ("n",))


def test_new_task_equals_the_attrs_init_with_a_fresh_errors_list() -> None:
    args, options = [1, "a"], {"retry_policy": {"maximum_attempts": 3}}
    made = new_task("w", "r", 4, "app:step", args, options, _AT)
    built = ActivityTask(
        workflow_id="w",
        run_id="r",
        seq=4,
        entry="app:step",
        args=args,
        options=options,
        scheduled_at=_AT,
    )
    assert made == built
    assert (made.attempt, made.not_before, made.errors) == (1, None, [])
    other = new_task("w", "r", 5, "app:step", [], {}, _AT)
    assert other.errors is not made.errors  # the factory runs per task, as in __init__
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.attempt = 2  # type: ignore[misc]


def test_a_maker_must_be_given_every_field_without_a_default() -> None:
    with pytest.raises(TypeError, match=r"ActivityTask\.entry has no default"):
        maker(ActivityTask, ("workflow_id", "run_id", "seq"))


def test_the_step_records_of_the_history_equal_their_attrs_init() -> None:
    schedule = new_schedule(3, "app:step", [1], {"task_queue": "q"})
    assert schedule == ScheduleActivity(
        seq=3, entry="app:step", args=[1], options={"task_queue": "q"}
    )
    act = new_activation(2, _AT, [ActivityResolved(seq=3, value=1)], [schedule])
    assert act == Activation(
        index=2, at=_AT, events=[ActivityResolved(seq=3, value=1)], commands=[schedule]
    )


@attrs.frozen
class _PreInit:
    x: int = 1

    def __attrs_pre_init__(self) -> None:
        pass  # a hook the builder would skip


@attrs.frozen(cache_hash=True)
class _CachedHash:
    x: int = 1


@attrs.frozen(init=False)
class _OwnInit:
    x: int = 1

    def __init__(self) -> None:
        object.__setattr__(self, "x", 2)


@pytest.mark.parametrize("cls", [_PreInit, _CachedHash, _OwnInit])
def test_a_class_whose_init_does_more_than_set_its_fields_is_refused(cls: type) -> None:
    with pytest.raises(TypeError, match="runs code in __init__"):
        maker(cls, ("x",))
    with pytest.raises(TypeError, match="runs code in __init__"):
        replacer(cls, ("x",))


def test_a_name_that_is_no_field_is_refused() -> None:
    with pytest.raises(TypeError, match="has no field activatons"):
        replacer(RunRecord, ("activatons",))
    with pytest.raises(TypeError, match="has no field y"):
        maker(ActivityTask, ("y",))


@attrs.frozen(slots=False)
class _DictBacked:
    x: int = 1
    y: list[int] = attrs.Factory(list)


def test_a_class_without_slots_is_built_through_setattr_and_stays_frozen() -> None:
    made = maker(_DictBacked, ("x",))(5)
    assert made == _DictBacked(x=5)
    assert made.y == [] and made.y is not maker(_DictBacked, ("x",))(5).y
    copied = replacer(_DictBacked, ("y",))(made, y=[2])
    assert copied == _DictBacked(x=5, y=[2])
    assert made.y == []
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        copied.x = 6  # type: ignore[misc]
