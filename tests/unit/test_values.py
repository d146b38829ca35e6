"""Pid, Error and duration parsing."""

import datetime as dt
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost._duration import parse_duration

part = st.text(
    alphabet=st.characters(blacklist_characters="{}|@", blacklist_categories=["Cs"]),
    min_size=1,
    max_size=12,
)


@given(node=part, host=part, ident=st.text(alphabet="abcdef0123456789.:-", min_size=1))
def test_pid_string_round_trip(node, host, ident):
    pid = roost.Pid(node, host, ident)
    assert roost.Pid.parse(str(pid)) == pid
    assert hash(roost.Pid.parse(str(pid))) == hash(pid)
    assert pickle.loads(pickle.dumps(pid)) == pid


def test_pid_format_and_fields():
    local = roost.Pid("local", "app:processes", "1.00001")
    assert str(local) == "{app:processes|1.00001}"
    named = roost.Pid.parse("{n1@app:processes|order-7}")
    assert (named.node, named.host, named.id) == ("n1", "app:processes", "order-7")
    assert str(named) == "{n1@app:processes|order-7}"
    # Wippy's rule: with a second '|', the id is what follows it.
    assert roost.Pid.parse("{n@h|ns:name|p1}").id == "p1"
    assert roost.Pid.trusted("local", "h", "1") == roost.Pid("local", "h", "1")
    with pytest.raises(AttributeError):
        local.id = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    "text", ["", "app|1", "{app:processes}", "{|1}", "{h|}", "{@h|1}", "{n@|1}", 42]
)
def test_malformed_pid_is_invalid(text):
    with pytest.raises(roost.Error) as info:
        roost.Pid.parse(text)
    assert info.value.kind is roost.ErrorKind.INVALID


def test_error_fields_and_conversion():
    err = roost.Error("boom", kind=roost.ErrorKind.TIMEOUT, retryable=True, details={"a": 1})
    assert (err.message, err.kind, err.retryable, err.details) == (
        "boom",
        "Timeout",
        True,
        {"a": 1},
    )
    assert str(err) == "[Timeout] boom"
    converted = roost.Error.from_exception(KeyError("k"))
    assert converted.kind is roost.ErrorKind.INTERNAL
    assert converted.details == {"type": "KeyError", "message": "'k'"}
    assert roost.Error.from_exception(err) is err
    clone = err.clone()
    assert clone == err and clone is not err
    assert issubclass(roost.NondeterminismError, roost.Error)
    assert roost.ErrorKind("NotFound") is roost.ErrorKind.NOT_FOUND


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("250ms", 0.25),
        ("5s", 5),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1.5s", 1.5),
        (3, 3),
        (0.5, 0.5),
        (dt.timedelta(minutes=2), 120),
    ],
)
def test_durations(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "5", "5x", "s5", "-1s", -1, float("nan"), True, None, [1]])
def test_bad_durations_are_invalid(value):
    with pytest.raises(roost.Error) as info:
        parse_duration(value)
    assert info.value.kind is roost.ErrorKind.INVALID


def test_zero_duration_can_be_refused():
    with pytest.raises(roost.Error):
        parse_duration("0s", allow_zero=False)
