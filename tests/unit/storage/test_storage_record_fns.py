"""The generated record functions agree with cattrs, byte for byte, on every roost record."""

from __future__ import annotations

import datetime as dt
import enum
import sys
import types
import typing
from typing import Any

import attrs
import cbor2
import pytest
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn
from hypothesis import given
from hypothesis import strategies as st
from test_storage_codec import Item, Typed, aware, errors, payloads, pids

import roost
import roost.workflow._local._records
from roost.storage import Codec
from roost.storage._record_fns import fast_structure, fast_unstructure
from roost.storage._registry import (
    _CONVERTER,
    _DEFAULT_REGISTRY,
    TAG_ERROR,
    TAG_PID,
    TAG_RECORD,
    load_record_modules,
)

load_record_modules()  # every roost record type (workflow and queue records) registered

CODEC = Codec()
# The HTTP records validate their fields (status codes, ...), so generic values do not fit.
ROOST_RECORDS = sorted(
    (
        r.cls
        for r in _DEFAULT_REGISTRY.by_tag.values()
        if r.cls.__module__.startswith("roost.") and "_http" not in r.cls.__module__
    ),
    key=lambda cls: cls.__qualname__,
)
HOT = {"Activation", "RunRecord", "ActivityTask", "ScheduleActivity", "ActivityResolved"}


def strategy_for(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of a declared field type, with payloads wherever the type says Any."""
    simple: dict[Any, st.SearchStrategy[Any]] = {
        Any: payloads,
        str: st.text(max_size=8),
        int: st.integers(),
        float: st.floats(allow_nan=False) | st.integers(-5, 5),
        bool: st.booleans(),
        bytes: st.binary(max_size=8),
        dt.datetime: aware,
        roost.Pid: pids,
        roost.Error: errors,
    }
    if tp in simple:
        return simple[tp]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and attrs.has(tp):
        if depth > 1:
            return st.nothing()
        hints = typing.get_type_hints(tp)
        fields = {f.name: strategy_for(hints[f.name], depth + 1) for f in attrs.fields(tp)}
        return st.builds(tp, **fields)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(strategy_for(a, depth) for a in args))
    if tp is type(None):
        return st.none()
    if origin is list:
        return st.lists(strategy_for(args[0], depth), max_size=3)
    if origin is dict:
        return st.dictionaries(
            strategy_for(args[0], depth), strategy_for(args[1], depth), max_size=3
        )
    raise AssertionError(f"no strategy for {tp!r}: extend strategy_for")


def cbor(fields: dict[str, Any]) -> bytes:
    return CODEC.encode(fields, envelope=True)


def tagged(encoder: cbor2.CBOREncoder, value: Any) -> None:
    """The storage format spelled out with CBORTag objects (what the codec writes by hand)."""
    if isinstance(value, roost.Pid):
        encoder.encode(cbor2.CBORTag(TAG_PID, [value.node, value.host, value.id]))
    elif isinstance(value, roost.Error):
        known = type(value).__name__ if type(value) is not roost.Error else None
        fields = [value.kind.value, value.message, value.retryable, value.details, known]
        encoder.encode(cbor2.CBORTag(TAG_ERROR, fields))
    else:
        rtype = _DEFAULT_REGISTRY.by_class[type(value)]
        positional = rtype.positional()
        if positional is not None:  # the values in field order (datetimes, enums packed)
            hints = typing.get_type_hints(type(value))
            fields: Any = [
                _packed_value(getattr(value, f.name), hints[f.name])
                for f in attrs.fields(type(value))
            ]
        else:
            fields = make_dict_unstructure_fn(type(value), _CONVERTER)(value)
        encoder.encode(cbor2.CBORTag(TAG_RECORD, [rtype.tag, rtype.version, fields]))


def _packed_value(value: Any, declared: Any) -> Any:
    """How a positional record stores a field's value: datetimes in µs, enums as values.

    Only a field declared so is packed: a datetime in an ``Any`` field (a result) is a
    payload, written as the codec writes any datetime.
    """
    if declared is Any:
        return value
    if isinstance(value, dt.datetime):
        return (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(value, enum.Enum):
        return value.value
    return value


def test_the_records_written_on_every_workflow_step_take_the_fast_path() -> None:
    names = {cls.__name__ for cls in ROOST_RECORDS}
    assert names >= HOT
    for cls in ROOST_RECORDS:
        if cls.__name__ in HOT:
            assert fast_unstructure(cls) is not None, cls
            assert fast_structure(cls) is not None, cls


def test_classes_with_fields_that_need_conversion_stay_on_cattrs() -> None:
    assert fast_unstructure(Typed) is None  # a declared set is stored as a list
    assert fast_structure(Typed) is None
    assert fast_structure(Item) is None  # a tuple field is rebuilt from a list


@pytest.mark.parametrize("cls", ROOST_RECORDS, ids=lambda cls: cls.__qualname__)
@given(data=st.data())
def test_generated_functions_match_cattrs(cls: type, data: st.DataObject) -> None:
    obj = data.draw(strategy_for(cls))
    reference = make_dict_unstructure_fn(cls, _CONVERTER)(obj)
    fast_out = fast_unstructure(cls)
    if fast_out is not None:
        assert cbor(fast_out(obj)) == cbor(reference)
    stored = CODEC.decode(cbor(reference))
    fast_in = fast_structure(cls)
    if fast_in is not None:
        built = fast_in(stored)
        expected = make_dict_structure_fn(cls, _CONVERTER)(stored, cls)
        assert built == expected
        for field in attrs.fields(cls):
            assert type(getattr(built, field.name)) is type(getattr(expected, field.name))
    assert CODEC.encode(obj) == cbor2.dumps(obj, default=tagged)


def test_a_record_stored_before_a_field_was_added_gets_the_default() -> None:
    task = roost.workflow._local._records.TimerTask(  # type: ignore[attr-defined]
        workflow_id="w", run_id="r", seq=1, due=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    )
    data = CODEC.encode(task)
    fields = dict(cbor2.loads(data).value[2])
    del fields["kind"]  # as written before TimerTask had a kind
    old = cbor2.dumps(cbor2.CBORTag(39003, ["wf.timer", 1, fields]))
    assert CODEC.decode(old) == task


def _run_record(**fields: Any) -> Any:
    from roost.workflow._local._records import RunRecord  # noqa: PLC0415
    from roost.workflow._status import RunStatus  # noqa: PLC0415

    at = dt.datetime(2026, 1, 1, 12, 30, 1, 250, tzinfo=dt.UTC)
    base = {"workflow_id": "w", "run_id": "r", "workflow_type": "app:flow"}
    return RunRecord(**{**base, "status": RunStatus.RUNNING, "started_at": at, **fields})


def test_a_run_record_is_stored_as_its_values_and_reads_back() -> None:
    from roost.workflow._status import RunStatus  # noqa: PLC0415

    rec = _run_record(
        status=RunStatus.COMPLETED,
        closed_at=dt.datetime(2026, 1, 1, 13, tzinfo=dt.UTC),
        result={"total": [1, 2]},
        options={"task_timeout": 10.0},
    )
    data = CODEC.encode(rec)
    body = cbor2.loads(data).value
    assert list(body[:2]) == ["wf.run", 2]
    assert type(body[2]) in (list, tuple)  # positional: no field names stored
    assert body[2][3] == "completed"  # the status as its value
    assert type(body[2][4]) is int  # started_at in microseconds
    back = CODEC.decode(data)
    assert back == rec
    assert back.started_at.tzinfo is dt.UTC and type(back.status) is RunStatus
    assert len(data) < len(
        cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 1, attrs.asdict(rec, recurse=False)]))
    )


def test_a_run_record_stored_as_a_field_map_still_reads() -> None:
    rec = _run_record(memo={"k": "v"})
    fields = make_dict_unstructure_fn(type(rec), _CONVERTER)(rec)
    old = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 1, fields]), default=tagged)
    assert CODEC.decode(old) == rec
    del fields["trace"], fields["unread"]  # as written before those fields existed
    older = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 1, fields]), default=tagged)
    assert CODEC.decode(older) == rec


def test_a_shorter_positional_row_gets_the_defaults_and_a_longer_one_is_refused() -> None:
    rec = _run_record()
    values = cbor2.loads(CODEC.encode(rec)).value[2]
    short = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 2, values[:-2]]))
    assert CODEC.decode(short) == rec  # trace and unread added later: their defaults
    long = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 2, [*values, "x"]]))
    with pytest.raises(roost.Error) as info:
        CODEC.decode(long)
    assert "newer version" in info.value.message


def test_a_naive_datetime_in_a_run_record_is_refused_naming_the_field() -> None:
    rec = _run_record(started_at=dt.datetime(2026, 1, 1))
    with pytest.raises(roost.Error) as info:
        CODEC.encode(rec)
    assert info.value.kind == roost.ErrorKind.INVALID
    assert "started_at" in info.value.message


def test_a_wrongly_typed_field_is_refused_whatever_its_annotation():
    # cbor2 would write the frozenset natively (tag 258), which nothing reads back.
    from roost.workflow._history import SendMessage  # noqa: PLC0415

    bad = SendMessage(seq=1, dest=roost.Pid("local", "h", "1"), topic=frozenset({1}))
    with pytest.raises(roost.Error) as info:
        CODEC.encode(bad)
    assert info.value.kind == roost.ErrorKind.INVALID
    assert "topic" in info.value.message


class _Color(enum.StrEnum):
    RED = "red"
    BLUE = "blue"


class _Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen(kw_only=True)
class _Packed:
    color: _Color
    level: _Level | None = None
    at: dt.datetime | None = None
    items: list[int] = attrs.field(factory=list)


def test_positional_functions_pack_and_rebuild_optional_enums_and_datetimes() -> None:
    from roost.storage._record_fns import positional_fns  # noqa: PLC0415

    fns = positional_fns(_Packed)
    assert fns is not None
    at = dt.datetime(2026, 5, 1, 8, 0, 0, 17, tzinfo=dt.UTC)
    full = _Packed(color=_Color.BLUE, level=_Level.HIGH, at=at, items=[1])
    values = fns.values(full)
    assert values == [
        "blue",
        2,
        (at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1),
        [1],
    ]
    assert fns.check(values) and fns.walked == (3,)
    assert fns.build(values) == full
    empty = _Packed(color=_Color.RED)
    assert fns.build(fns.values(empty)) == empty
    assert fns.build(["red"]) == empty  # the trailing fields' defaults, a fresh list each
    assert fns.build(["red"]).items is not fns.build(["red"]).items
    assert not fns.check([_Color.RED, None, None, []])  # an unpacked enum is not a stored form


def test_only_roosts_own_records_may_be_positional() -> None:
    from roost.storage._registry import positional_record  # noqa: PLC0415

    @attrs.frozen
    class Mine:
        x: int

    with pytest.raises(roost.Error) as info:
        positional_record("test.mine-positional", 1)(Mine)
    assert info.value.kind == roost.ErrorKind.INVALID
    assert "positional" in info.value.message


def test_a_positional_row_whose_value_does_not_fit_is_refused() -> None:
    values = list(cbor2.loads(CODEC.encode(_run_record())).value[2])
    values[4] = "not microseconds"  # started_at
    bad = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 2, values]))
    with pytest.raises(roost.Error) as info:
        CODEC.decode(bad)
    assert info.value.kind == roost.ErrorKind.INTERNAL
    assert "does not fit its field" in info.value.message


def test_after_a_field_map_row_a_positional_row_takes_no_detour() -> None:
    rec = _run_record()
    fields = make_dict_unstructure_fn(type(rec), _CONVERTER)(rec)
    old = cbor2.dumps(cbor2.CBORTag(39003, ["wf.run", 2, fields]), default=tagged)
    codec = Codec()
    assert codec.decode(old) == rec  # caches the field map's constructor for the tag
    positional = codec.encode(rec)
    tag_hit = codec._fast_tags.get("wf.run")
    assert tag_hit is not None
    calls: list[Any] = []
    codec._fast_tags["wf.run"] = (tag_hit[0], lambda d: calls.append(d) or tag_hit[1](d))
    assert codec.decode(positional) == rec
    assert calls == []  # a list body goes straight to the positional constructor


def test_random_bytes_are_handed_out_once_across_threads() -> None:
    import threading  # noqa: PLC0415

    from roost._entropy import random_bytes  # noqa: PLC0415

    assert random_bytes(0) == b""
    seen: list[bytes] = []

    def draw() -> None:
        seen.extend(random_bytes(16) for _ in range(2000))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=draw) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert len(seen) == 8000 and len(set(seen)) == 8000
