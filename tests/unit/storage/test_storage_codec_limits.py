"""The codec refuses what it could not read back: lone surrogates, and nesting past the limit."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roost import Error, ErrorKind, Pid
from roost.storage import Codec, record
from roost.storage._codec import MAX_DEPTH, STORED_DEPTH
from roost.storage._walk import Walk
from roost.workflow._history import Activation, MessageArrived

CODEC = Codec()


@record("test.limits.box")
@attrs.frozen
class Box:
    inner: Any = None


def nested(depth: int, leaf: Any = 0) -> Any:
    """A value of exactly ``depth`` levels: lists and dicts, alternating."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def decoder_depth(data: bytes) -> int:
    """The smallest ``max_depth`` at which roost's decoder reads ``data``."""
    low, high = 0, STORED_DEPTH + 50
    while low < high:
        mid = (low + high) // 2
        try:
            cbor2.loads(data, semantic_decoders=CODEC._decoders, max_depth=mid)
        except cbor2.CBORDecodeError as exc:
            if "depth" not in str(exc):
                raise
            low = mid + 1
        else:
            high = mid
    return low


def refusal(value: Any, what: str = "payload", **kw: Any) -> Error:
    with pytest.raises(Error) as info:
        CODEC.encode(value, what=what, **kw)
    assert info.value.kind is ErrorKind.INVALID
    return info.value


# --- depth --------------------------------------------------------------------------------

leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64 - 2, max_value=2**64 + 2)
    | st.integers(min_value=-(2**64) - 2, max_value=-(2**64) + 2)
    | st.floats(allow_nan=False)
    | st.text(max_size=3)
    | st.binary(max_size=3)
    | st.datetimes(timezones=st.just(dt.UTC))
    | st.uuids()
    | st.builds(Pid, node=st.just("local"), host=st.just("h"), id=st.text("ab", min_size=1))
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=2) | st.integers(), inner, max_size=3)
        | st.builds(Box, inner)
        | st.builds(lambda d: Error("e", details={"d": d}), inner)
    ),
    max_leaves=12,
)


@given(values)
def test_the_walk_counts_depth_exactly_as_the_decoder_does(value: Any) -> None:
    data = CODEC.encode(value, envelope=True)
    assert Walk(CODEC._record_type, strict=True).depth(value, 10_000) == decoder_depth(data)


@pytest.mark.parametrize("leaf", [0, "x", 2**70, dt.datetime(2024, 1, 1, tzinfo=dt.UTC)])
def test_a_payload_at_the_limit_round_trips_and_one_level_more_is_refused(leaf: Any) -> None:
    # The leaf is part of the count: a big int or a datetime is a tag, one level itself.
    extra = 0 if leaf in (0, "x") else 1
    at_limit = nested(MAX_DEPTH - extra, leaf)
    assert CODEC.decode(CODEC.encode(at_limit)) == at_limit
    error = refusal(nested(MAX_DEPTH - extra + 1, leaf))
    assert f"nests deeper than {MAX_DEPTH} levels" in error.message
    assert error.details["max_depth"] == MAX_DEPTH
    # Where it gets too deep, shortened: the first steps, how many are left out, the last.
    assert error.message.startswith("payload[")
    assert "more)..." in error.details["path"]


def test_a_payload_at_the_limit_still_fits_once_wrapped_in_roost_records() -> None:
    payload = nested(MAX_DEPTH)
    pid = Pid("local", "h", "x")
    act = Activation(
        index=1,
        at=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        events=[MessageArrived(topic="t", payload=payload, sender=pid)],
        commands=[],
    )
    data = CODEC.encode(act)  # one of roost's own records: allowed the stored depth
    assert decoder_depth(data) <= STORED_DEPTH
    assert CODEC.decode(data) == act
    # The same wrapping, done by hand in a payload, counts against the payload's limit.
    assert "nests deeper" in refusal([act]).message


def test_records_count_their_levels() -> None:
    inner = nested(MAX_DEPTH - 3)  # a record is three levels around its fields
    assert CODEC.decode(CODEC.encode(Box(inner))) == Box(inner)
    assert "payload.inner" in refusal(Box([inner])).message


def test_errors_count_their_levels() -> None:
    err = Error("x", details={"d": nested(MAX_DEPTH - 3)})  # two levels, and details
    assert CODEC.decode(CODEC.encode(err)) == err
    assert refusal(Error("x", details={"d": [nested(MAX_DEPTH - 3)]})).message.startswith(
        'payload.details["d"][0]'
    )


def test_a_hostile_depth_is_refused_at_once_without_recursion_errors() -> None:
    deep: Any = 0
    for _ in range(200_000):
        deep = [deep]
    started = time.perf_counter()
    error = refusal({"items": deep})
    assert time.perf_counter() - started < 1.0  # the walk stops at the limit
    assert "nests deeper" in error.message
    assert len(error.message) < 400  # the path is shortened


def test_a_cycle_is_reported_as_a_cycle() -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    assert "contains itself" in refusal(loop).message


def test_the_decoder_reads_what_the_encoder_may_write_and_no_deeper() -> None:
    deepest = CODEC.encode(nested(STORED_DEPTH), envelope=True)
    assert CODEC.decode(deepest) == nested(STORED_DEPTH)
    too_deep = cbor2.dumps(nested(STORED_DEPTH + 1))
    with pytest.raises(Error) as info:
        CODEC.decode(too_deep)
    assert info.value.kind is ErrorKind.INTERNAL


# --- lone surrogates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ("\ud800", "payload"),
        ({"items": ["ok", "bad \udfff"]}, 'payload["items"][1]'),
        ({"\ud800": 1}, 'payload["\\ud800"] (the key)'),
        (Box({"x": "\ud83d"}), 'payload.inner["x"]'),
        (Error("boom \ud800"), "payload.message"),
        (Error("fine", details={"why": "\udc80"}), 'payload.details["why"]'),
        ([uuid.uuid4(), ("a", "\ud800")], "payload[1][1]"),
    ],
)
def test_a_lone_surrogate_is_invalid_and_named_by_its_path(value: Any, path: str) -> None:
    error = refusal(value)
    assert error.message.startswith(f"{path} holds a lone surrogate"), error.message
    assert "UTF-8" in error.message
    # The error itself is storable: the bad character is shown escaped.
    assert CODEC.decode(CODEC.encode(error)) == error


def test_valid_astral_text_still_round_trips() -> None:
    text = "emoji \U0001f600 and \u00e9"
    assert CODEC.decode(CODEC.encode({text: [text]})) == {text: [text]}
