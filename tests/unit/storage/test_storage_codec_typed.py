"""roost's own records: only their payload fields are walked, with the full walk's results."""

from __future__ import annotations

import datetime as dt
from typing import Any, NamedTuple

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_storage_record_fns import ROOST_RECORDS, strategy_for

import roost
from roost.storage import Codec
from roost.storage._codec import MAX_DEPTH, STORED_DEPTH
from roost.storage._schema import leaf_types, schema
from roost.storage._values import NATIVE_COUNT, register_annotation
from roost.storage._walk import Walk
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    MessageArrived,
    ScheduleActivity,
    SendMessage,
    Started,
)
from roost.workflow._history_format import _KINDS, _encode_whole, encode_activation
from roost.workflow._local._records import RunRecord, with_counters
from roost.workflow._status import RunStatus

CODEC = Codec()
AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
PID = roost.Pid("local", "h", "p1")
HISTORY = sorted(_KINDS, key=lambda cls: cls.__qualname__)


def full_walk(value: Any, what: str = "payload") -> bytes:
    """The codec's encoding with every field walked (what ``encode`` falls back to)."""
    return CODEC._encode_walked(value, what, STORED_DEPTH)


def refusal(fn: Any, *args: Any) -> roost.Error:
    with pytest.raises(roost.Error) as info:
        fn(*args)
    assert info.value.kind == roost.ErrorKind.INVALID
    return info.value


def nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def record(**fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "workflow_id": "w",
        "run_id": "r",
        "workflow_type": "app:flow",
        "status": RunStatus.RUNNING,
        "started_at": AT,
    }
    return RunRecord(**{**base, **fields})


@pytest.mark.parametrize("cls", ROOST_RECORDS, ids=lambda cls: cls.__qualname__)
@given(data=st.data())
def test_a_record_encodes_to_the_bytes_of_the_full_walk(cls: type, data: st.DataObject) -> None:
    obj = data.draw(strategy_for(cls))
    assert CODEC.encode(obj) == full_walk(obj)


@given(
    events=st.lists(st.one_of(*(strategy_for(c) for c in HISTORY)), max_size=3),
    commands=st.lists(st.one_of(*(strategy_for(c) for c in HISTORY)), max_size=3),
)
def test_a_history_row_encodes_to_the_bytes_of_the_full_walk(
    events: list[Any], commands: list[Any]
) -> None:
    act = Activation(index=3, at=AT, events=events, commands=commands)
    row_bytes = encode_activation(CODEC, act)  # written piece by piece
    calls: list[int] = []
    # The whole row with the typed path switched off: the codec's full walk of it.
    original = CODEC.encode_typed
    CODEC.encode_typed = lambda *a, **k: calls.append(1)  # type: ignore[method-assign]
    try:
        assert _encode_whole(CODEC, act) == row_bytes
    finally:
        CODEC.encode_typed = original  # type: ignore[method-assign]
    assert calls == [1]


def test_only_the_payload_fields_of_a_record_are_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    walked: list[Any] = []
    depth = Walk.depth

    def counting(self: Walk, value: Any, left: int) -> int:
        walked.append(value)
        return depth(self, value, left)

    monkeypatch.setattr(Walk, "depth", counting)
    result, memo = {"total": [1, 2]}, {"note": ["x"]}
    parent = roost.Pid("local", "h", "parent")
    rec = record(result=result, memo=memo, children=[PID], parent=parent, closed_at=AT)
    CODEC.encode(rec)
    # Each walked field once, in order (what a walk meets inside it is not counted here);
    # the record itself, its ids, counters, status and parent PID are not walked.
    # A run record is positional: its datetimes are stored as microseconds and its status
    # as its value, so neither is walked either.
    names = [f.name for f in attrs.fields(RunRecord)]
    positional = CODEC._record_type(RunRecord).positional()
    assert positional is not None
    payloads = [names[i] for i in positional.walked]
    assert "started_at" not in payloads and "status" not in payloads and "result" in payloads
    top = [v for v in walked if any(v is getattr(rec, f) for f in payloads)]
    fields = [getattr(rec, f) for f in payloads]
    assert [id(v) for v in top] == [id(v) for v in fields if v is not None and v != {}]
    assert not any(v is rec or v is parent or isinstance(v, RunStatus) for v in walked)
    walked.clear()
    full_walk(rec)  # the full walk starts at the record and goes into every field
    assert walked[0] is rec
    assert any(v is result for v in walked) and any(v is memo for v in walked)


def test_the_leaf_fields_are_those_of_fixed_shallow_types() -> None:
    assert schema(RunRecord).walked == (
        "started_at",
        "closed_at",
        "result",
        "error",
        "children",
        "search",
        "memo",
        "child_policies",
        "child_runs",
        "options",
        "execution_deadline",
        "not_before",
        "task_failure",
    )
    assert schema(MessageArrived).walked == ("payload",)
    assert leaf_types(roost.Pid | None) == frozenset({roost.Pid, type(None)})
    assert leaf_types(list[roost.Pid]) is None  # a container is walked
    assert leaf_types(Any) is None


def test_an_unencodable_payload_in_a_record_is_named_as_by_the_full_walk() -> None:
    bad = record(result={"items": [1, {2}]})
    error = refusal(CODEC.encode, bad)
    assert error.message == (
        "payload.result[\"items\"][1]: cannot encode object of type 'set' (use a list)"
    )
    assert error.details["path"] == 'payload.result["items"][1]'


def test_a_lone_surrogate_in_a_leaf_field_is_named_by_its_field() -> None:
    error = refusal(CODEC.encode, record(workflow_type="bad\udc80"))
    assert error.message.startswith("payload.workflow_type holds a lone surrogate"), error.message


def test_a_wrongly_typed_leaf_field_goes_through_the_full_walk() -> None:
    # A deep list where a str belongs: the type test sends it to the full walk, which
    # refuses it at the limit (cbor2 itself would crash on a value this deep).
    bad = SendMessage(seq=1, dest=PID, topic=nested(200_000))
    error = refusal(CODEC.encode, bad)
    assert "nests deeper than" in error.message
    assert error.details["path"].startswith("payload.topic")


def test_a_record_nests_up_to_the_stored_depth_and_no_deeper() -> None:
    fits = record(result=nested(STORED_DEPTH - 3))  # the record itself is 3 levels
    assert CODEC.decode(CODEC.encode(fits)) == fits
    error = refusal(CODEC.encode, record(result=nested(STORED_DEPTH - 2)))
    assert error.details["max_depth"] == STORED_DEPTH


def test_a_bad_payload_in_a_history_row_is_named_by_its_field() -> None:
    act = Activation(
        index=2,
        at=AT,
        events=[ActivityResolved(seq=1, value=2)],
        commands=[ScheduleActivity(seq=2, entry="app:step", args=[1, {"k": {3}}])],
    )
    error = refusal(encode_activation, CODEC, act)
    assert error.message.startswith('activation.commands[0].args[1]["k"]: cannot encode'), (
        error.message
    )


class _TruthRaises(dict[str, int]):
    def __bool__(self) -> bool:
        raise ValueError("no truth")


class _LengthRaises(list[int]):
    def __len__(self) -> int:
        raise ValueError("no length")


@pytest.mark.parametrize("value", [_TruthRaises(a=1), _LengthRaises([1])], ids=["bool", "len"])
def test_a_payload_whose_own_methods_raise_in_a_history_row_is_invalid(value: Any) -> None:
    act = Activation(index=2, at=AT, events=[ActivityResolved(seq=1, value=value)], commands=[])
    error = refusal(encode_activation, CODEC, act)
    assert error.kind == roost.ErrorKind.INVALID
    assert "reading the value raised ValueError: no " in error.message, error.message


def test_a_history_row_holds_payloads_of_the_full_payload_depth() -> None:
    started = Started(
        workflow_id="w", run_id="r", workflow_type="app:flow", args=[nested(MAX_DEPTH)], seed=1
    )
    act = Activation(index=1, at=AT, events=[started], commands=[])
    assert CODEC.decode(encode_activation(CODEC, act))[3][0][4] == [nested(MAX_DEPTH)]


@given(
    rec=strategy_for(RunRecord),
    children=st.lists(strategy_for(roost.Pid), max_size=2),
    counters=st.tuples(*(st.integers(min_value=0) for _ in range(4))),
)
def test_the_run_records_generated_copy_is_evolve(
    rec: RunRecord, children: list[roost.Pid], counters: tuple[int, int, int, int]
) -> None:
    activations, length, size, unread = counters
    changes = {
        "children": children,
        "activations": activations,
        "history_length": length,
        "history_size": size,
        "unread": unread,
    }
    copied = with_counters(rec, **changes)
    assert copied == attrs.evolve(rec, **changes)
    assert copied is not rec


@pytest.mark.parametrize("cls", ROOST_RECORDS, ids=lambda cls: cls.__qualname__)
@given(data=st.data())
def test_a_record_whose_payloads_were_checked_encodes_to_the_same_bytes(
    cls: type, data: st.DataObject
) -> None:
    obj = data.draw(strategy_for(cls))
    assert CODEC.encode_checked(obj) == CODEC.encode(obj)


def test_a_checked_record_does_not_walk_its_payloads_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    walked: list[Any] = []
    depth = Walk.depth

    def counting(self: Walk, value: Any, left: int) -> int:
        walked.append(value)
        return depth(self, value, left)

    monkeypatch.setattr(Walk, "depth", counting)
    # As in a process with no class cbor2 writes natively registered (a NamedTuple, an
    # IntEnum, a converter's): with one, a payload may hold it, and only a walk finds it.
    saved, NATIVE_COUNT[0] = NATIVE_COUNT[0], 0
    rec = record(result={"total": [1, 2]}, memo={"note": ["x"]}, closed_at=AT)
    try:
        CODEC.encode_checked(rec)
    finally:
        NATIVE_COUNT[0] = saved
    assert walked == []
    CODEC.encode(rec)
    assert walked  # the ordinary encode walks them


def test_a_checked_record_walks_payloads_once_a_boxed_class_is_registered() -> None:
    class Pair(NamedTuple):
        a: int
        b: int

    register_annotation(Pair)
    rec = record(result={"pair": Pair(1, 2)}, closed_at=AT)
    assert type(CODEC.decode(CODEC.encode_checked(rec)).result["pair"]) is Pair


def test_a_checked_record_with_a_bad_leaf_field_is_refused_as_by_encode() -> None:
    error = refusal(CODEC.encode_checked, record(workflow_type="bad\udc80"))
    assert error.message.startswith("payload.workflow_type holds a lone surrogate"), error.message
    # A leaf field of the wrong type takes the ordinary encode, which names it.
    error = refusal(CODEC.encode_checked, SendMessage(seq=1, dest=PID, topic=nested(200_000)))
    assert error.details["path"].startswith("payload.topic")
