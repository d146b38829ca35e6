"""History format v2: what an activation row holds, and that v1 and v2 rows read the same."""

import datetime as dt
import typing

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost.storage import Codec
from roost.testing.strategies import hostile_values, payloads
from roost.workflow import _history as h
from roost.workflow._history_format import (
    _KINDS,
    FORMAT,
    _encode_whole,
    _generate,
    _malformed,
    decode_activation,
    encode_activation,
    read_activation,
)

CODEC = Codec()
PID = roost.Pid("local", "app:workflows", "wf-1")
AT = dt.datetime(2026, 12, 1, 10, 39, 7, 594221, tzinfo=dt.UTC)


def every_record(payload) -> list:
    """One of each event and command, ``payload`` in every field that takes one."""
    err = roost.NondeterminismError("diverged", details={"payload": payload})
    return [
        h.Started(
            workflow_id="wf-1",
            run_id="r-1",
            workflow_type="app:wf",
            args=[payload],
            seed=2**63,
            context={"tenant": payload},
            parent=PID,
            attempt=3,
        ),
        h.ActivityResolved(seq=1, value=payload),
        h.ActivityResolved(seq=2, error=err),
        h.TimerFired(seq=3),
        h.MessageArrived(topic="t", payload=payload, sender=PID, call=4),
        h.CancelRequested(reason="asked"),
        h.ProcessExited(
            pid=PID, value=payload, error=roost.Error("x", kind=roost.ErrorKind.INTERNAL)
        ),
        h.ScheduleActivity(seq=5, entry="app:a", args=[payload], options={"retry": {"n": 1}}),
        h.CancelActivity(seq=6, activity=5),
        h.StartTimer(seq=7, seconds=1.5),
        h.SendMessage(seq=8, dest=PID, topic="t", payload=payload, reply_to=PID),
        h.StopProcess(seq=9, dest=PID, reason="r", hard=True),
        h.SpawnProcess(seq=10, entry="app:p", args=[payload], pid=PID),
        h.StartChild(seq=11, entry="app:c", args=[payload], workflow_id="c-1", options={"a": 1}),
        h.VersionMarker(seq=12, change_id="change", version=2),
        h.UpsertAttributes(seq=13, search={"k": payload}, memo={"m": [payload]}),
        h.ContinueAsNew(seq=14, entry="app:wf", args=[payload]),
        h.Complete(seq=15, value=payload),
        h.Fail(seq=16, error=roost.Error("boom", details={"p": payload})),
    ]


def activation(payload, at=AT) -> h.Activation:
    records = every_record(payload)
    events = [r for r in records if not isinstance(r, h._COMMANDS)]
    commands = [r for r in records if isinstance(r, h._COMMANDS)]
    return h.Activation(index=4, at=at, events=events, commands=commands)


def as_v1_reads_it(act: h.Activation) -> h.Activation:
    """``act`` as format v1 stored and read it: the record through the codec."""
    return CODEC.decode(CODEC.encode(act))


def test_every_event_and_command_class_has_a_kind_and_all_its_fields():
    classes = {*typing.get_args(h.Event), *typing.get_args(h.Command)}
    assert set(_KINDS) == classes
    assert len({kind for kind, _ in _KINDS.values()}) == len(_KINDS)
    for cls, (_, fields) in _KINDS.items():
        assert fields == tuple(f.name for f in attrs.fields(cls)), cls


@given(payloads())
def test_a_v2_row_reads_back_as_a_v1_row_did(payload):
    act = activation(payload)
    v1 = as_v1_reads_it(act)
    v2 = decode_activation(CODEC, encode_activation(CODEC, act))
    # Bytes, not ==: NaN payloads, and the types values come back as (a tuple as a list).
    assert CODEC.encode(v2) == CODEC.encode(v1)
    assert repr(v2.at) == repr(v1.at)
    assert type(v2.events[2].error) is roost.NondeterminismError


def test_a_v1_row_reads_back_as_it_did():
    act = activation({"k": [1, b"\x00", None, 2.5]})
    row = CODEC.encode(act)
    assert row[:3] == b"\xd9\x98\x5b"  # the codec's record tag: a v1 row
    assert decode_activation(CODEC, row) == as_v1_reads_it(act)


def test_a_v2_row_is_an_array_led_by_its_format_version_and_smaller():
    act = activation("payload")
    row = encode_activation(CODEC, act)
    value = CODEC.decode(row)
    assert type(value) is list
    assert value[:3] == [FORMAT, 4, int(AT.timestamp()) * 10**6 + AT.microsecond]
    assert [e[0] for e in value[3]] == [1, 2, 2, 3, 4, 5, 6]
    assert len(row) < len(CODEC.encode(act)) / 2


@pytest.mark.parametrize(
    "at",
    [
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(2026, 3, 29, 3, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    ],
)
def test_the_activation_time_is_exact_to_the_microsecond_and_in_utc(at):
    index, got, _, _ = read_activation(CODEC, encode_activation(CODEC, activation(1, at)))
    assert index == 4
    assert got == at
    assert got.tzinfo is dt.UTC
    assert got.utcoffset() == dt.timedelta(0)


@pytest.mark.parametrize(
    "row",
    [
        [FORMAT, 1, "not a time", [], []],
        [FORMAT, 1, 0, [[99, 1]], []],  # no such kind
        [FORMAT, 1, 0, [[3]], []],  # TimerFired without its seq
        [FORMAT, 1, 0, [[3, 1, 2]], []],  # a field too many
        [FORMAT, 1, 0, [], [3]],  # a command that is no array
        [FORMAT, "1", 0, [], []],
        [FORMAT + 1, 1, 0, [], []],  # a later format
        [FORMAT, 1, 0, []],
        {"index": 1},
        h.TimerFired(seq=1),
    ],
)
def test_a_row_of_neither_format_is_an_internal_error(row):
    with pytest.raises(roost.Error) as info:
        read_activation(CODEC, CODEC.encode(row, envelope=True))
    assert info.value.kind is roost.ErrorKind.INTERNAL
    assert "cannot decode stored activation" in info.value.message


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({1, 2}, "cannot encode object of type 'set'"),
        ("lone \udcff surrogate", "no UTF-8 form"),
        (dt.datetime(2026, 1, 1), "naive datetime"),
    ],
)
def test_a_payload_that_cannot_be_stored_is_invalid_and_named_by_its_field(payload, reason):
    act = h.Activation(
        index=1, at=AT, events=[h.MessageArrived(topic="t", payload=[payload])], commands=[]
    )
    with pytest.raises(roost.Error) as info:
        encode_activation(CODEC, act)
    assert info.value.kind is roost.ErrorKind.INVALID
    assert info.value.message.startswith("activation.events[0].payload[0]"), info.value.message
    assert reason in info.value.message


def test_a_value_that_is_no_history_record_is_invalid():
    act = h.Activation(index=1, at=AT, events=[h.WorkflowTask(index=1, at=AT)], commands=[])
    with pytest.raises(roost.Error) as info:
        encode_activation(CODEC, act)
    assert info.value.kind is roost.ErrorKind.INVALID
    assert "WorkflowTask is not a history event or command" in info.value.message


def test_a_payload_of_the_full_depth_is_stored_in_a_row():
    deep: object = 0
    for _ in range(250):
        deep = [deep]
    act = h.Activation(index=1, at=AT, events=[h.ActivityResolved(seq=1, value=deep)], commands=[])
    CODEC.check(deep)  # a payload the call site accepts ...
    back = decode_activation(CODEC, encode_activation(CODEC, act))  # ... is stored
    assert back.events[0].value == deep


@given(st.integers(min_value=0, max_value=2**40))
def test_the_microseconds_round_trip(us):
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=us)
    act = h.Activation(index=1, at=at, events=[], commands=[])
    assert decode_activation(CODEC, encode_activation(CODEC, act)).at == at


@attrs.frozen(kw_only=True)
class Evolved:
    """A command class as a later version has it: ``extra`` added at the end, defaulted."""

    seq: int
    topic: str
    extra: tuple[int, ...] = (1, 2)


def test_a_stored_row_of_a_kind_that_gained_a_field_reads_with_its_default():
    # Rows written before ``extra`` existed hold two fields; they read, ``extra`` defaulted.
    pack, build = _generate({Evolved: (99, ("seq", "topic", "extra"))})
    assert pack[Evolved](Evolved(seq=1, topic="t", extra=(3,))) == [99, 1, "t", (3,)]
    assert build[99]([99, 1, "t"]) == Evolved(seq=1, topic="t", extra=(1, 2))
    assert build[99]([99, 1, "t", [3]]) == Evolved(seq=1, topic="t", extra=[3])


def test_a_stored_row_with_more_fields_than_its_kind_is_refused_clearly():
    _, build = _generate({Evolved: (99, ("seq", "topic", "extra"))})
    with pytest.raises(roost.Error) as info:
        build[99]([99, 1, "t", (3,), "later"])
    assert info.value.kind is roost.ErrorKind.INTERNAL
    assert "Evolved (kind 99) stored with 4 fields, this version knows 3" in info.value.message
    assert "written by a newer roost" in info.value.message
    assert info.value.details == {"kind": 99, "class": "Evolved", "stored": 4, "known": 3}


def test_a_stored_row_missing_a_field_without_default_is_refused_clearly():
    _, build = _generate({Evolved: (99, ("seq", "topic", "extra"))})
    with pytest.raises(roost.Error) as info:
        build[99]([99, 1])
    assert info.value.kind is roost.ErrorKind.INTERNAL
    assert "stored without field(s) topic, which have no default" in info.value.message


def test_shorter_stored_events_and_commands_read_through_read_activation():
    # A message and a stop stored without their trailing defaulted fields (as a version
    # before those fields existed wrote them), and a timer's int seconds (v1: a float).
    row = [FORMAT, 2, 0, [[4, "t"], [4, "t", 7, PID]], [[20, 1, PID], [18, 2, 5]]]
    index, _, events, commands = read_activation(CODEC, CODEC.encode(row, envelope=True))
    assert index == 2
    assert events == [
        h.MessageArrived(topic="t"),
        h.MessageArrived(topic="t", payload=7, sender=PID),
    ]
    assert commands == [h.StopProcess(seq=1, dest=PID), h.StartTimer(seq=2, seconds=5.0)]
    assert type(commands[1].seconds) is float


def test_a_longer_stored_event_is_an_internal_error_naming_its_kind():
    row = [FORMAT, 1, 0, [[3, 1, 2]], []]  # TimerFired with a field it does not know
    with pytest.raises(roost.Error) as info:
        read_activation(CODEC, CODEC.encode(row, envelope=True))
    assert info.value.kind is roost.ErrorKind.INTERNAL
    assert "TimerFired (kind 3) stored with 2 fields, this version knows 1" in info.value.message


def test_a_malformed_row_is_shown_briefly_without_its_whole_repr():
    class Loud:
        calls = 0

        def __repr__(self) -> str:
            Loud.calls += 1
            return "x" * 10_000

    huge = ["y" * 1_000_000, list(range(100_000)), {i: i for i in range(10_000)}]
    error = _malformed(huge)
    assert error.kind is roost.ErrorKind.INTERNAL
    assert len(error.message) < 250
    assert "yyy" in error.message
    error = _malformed([[Loud()] * 1000])  # reprs only the few it shows
    assert Loud.calls <= 4


def _as_one_row(act: h.Activation) -> bytes:
    """``act`` encoded as one value through the codec's full walk (the reference bytes)."""
    return _encode_whole(CODEC, act)


@given(hostile_values())
def test_a_row_written_piece_by_piece_is_the_row_one_encoding_writes(value):
    act = activation(value)
    expected: bytes | roost.Error
    try:
        expected = _as_one_row(act)
    except roost.Error as exc:
        expected = exc
    if isinstance(expected, bytes):
        assert encode_activation(CODEC, act) == expected
        return
    with pytest.raises(roost.Error) as got:
        encode_activation(CODEC, act)
    assert (got.value.kind, got.value.message) == (expected.kind, expected.message)


_EDGES = [
    *(n for base in (24, 256, 2**16, 2**32, 2**64) for n in (base - 1, base)),
    *(-n for base in (24, 256, 2**16, 2**32, 2**64) for n in (base, base + 1)),
    True,
    False,
    0.0,
    -0.0,
    float("nan"),
    1e300,
    *("é" * n for n in (11, 12, 127, 128, 2**15)),
    *(b"\x00" * n for n in (23, 24, 255, 256)),
    PID,
    [PID, 1, "a", None, b"b", 2.5, True],
    list(range(23)),
    list(range(24)),
    [[1], [2]],
    (1, "t"),
    [],
    {},
    {"k": PID},
    roost.Error("e", kind=roost.ErrorKind.INTERNAL),
    AT,
]


@pytest.mark.parametrize("value", _EDGES, ids=repr)
def test_the_header_and_scalar_edges_are_written_as_cbor2_writes_them(value):
    act = activation(value)
    assert encode_activation(CODEC, act) == _as_one_row(act)
    seqs = [h.ScheduleActivity(seq=s, entry="e" * s, args=[s], options={}) for s in (23, 24, 300)]
    long = h.Activation(index=2**33, at=AT, events=[], commands=seqs * 9)  # 27 commands
    assert encode_activation(CODEC, long) == _as_one_row(long)


def test_a_leaf_of_another_type_takes_the_whole_row_path_and_encodes_the_same():
    odd = h.ScheduleActivity(seq=True, entry="e", args=[], options={})  # a bool seq
    act = h.Activation(index=1, at=AT, events=[], commands=[odd])
    assert encode_activation(CODEC, act) == _as_one_row(act)
