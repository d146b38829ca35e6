"""Hypothesis strategies for payloads and for the hostile values a sink must survive.

``payloads()`` draws values the codec stores and gives back (JSON-like data, bytes, big
ints, NaN and infinities, aware datetimes, UUIDs, PIDs, tuples, non-str dict keys, subclasses
of the base types). ``hostile_values()`` mixes those with what a careless or malicious caller
passes: lone surrogates, nesting at and around ``MAX_DEPTH`` and far past it, huge ints and
bytes, odd unicode, reference cycles, naive datetimes and objects the codec does not know.
``durations()`` draws what a duration argument may be given, from sane to absurd.

A sink either refuses such a value with ``Invalid`` (storing nothing) or stores it and gives
it back; ``same_value`` compares what came back by its stored form, so NaN equals NaN and
a tuple equals the list it comes back as.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import enum
import math
from typing import Any

import attrs
from hypothesis import strategies as st

from roost._pid import Pid
from roost.storage import Codec
from roost.storage._codec import MAX_DEPTH

__all__ = ["durations", "hostile_values", "nested", "payloads", "same_value"]

_CODEC = Codec()


class _Color(enum.StrEnum):
    RED = "red"


class _Size(enum.IntEnum):
    BIG = 2**40


@attrs.define
class _Unregistered:
    x: int = 1


class _Opaque:
    """An arbitrary object: no codec knows it."""


def nested(depth: int, leaf: Any = 0) -> Any:
    """A value exactly ``depth`` levels deep: dicts and lists, alternating, around ``leaf``."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def same_value(stored: Any, original: Any) -> bool:
    """Whether ``stored`` is what storing ``original`` gives back (compared encoded)."""
    return _CODEC.encode(stored, envelope=True) == _CODEC.encode(original, envelope=True)


_text = st.text(max_size=12)
_odd_text = st.sampled_from(
    [
        "",
        "\x00",
        "nul\x00inside",
        "\u202eright-to-left",
        "e\u0301\u0301\u0301",  # stacked combining marks
        "\ufeffbom",
        "\U0001f600\U0001f469\u200d\U0001f4bb",
        "\uffff\U0010ffff",
        "a" * 10_000,
    ]
)
_keys = st.one_of(
    _text,
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.tuples(st.integers(), _text),
)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN, infinities and -0.0 included
    _text,
    _odd_text,
    st.binary(max_size=16),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.datetimes(
        timezones=st.integers(-23 * 60, 23 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
    ),
    st.uuids(),
    st.builds(Pid, node=st.just("local"), host=st.just("app:processes"), id=st.just("1.0001")),
    st.just(_Color.RED),
    st.just(_Size.BIG),
)


def payloads() -> st.SearchStrategy[Any]:
    """Values the codec stores and gives back (a tuple comes back as a list)."""
    return st.recursive(
        _leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.tuples(inner, inner),
            st.dictionaries(_keys, inner, max_size=4),
            st.dictionaries(_text, inner, max_size=3).map(collections.OrderedDict),
        ),
        max_leaves=16,
    )


def _surrogate_text() -> st.SearchStrategy[str]:
    lone = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
    return st.tuples(_text, lone, _text).map("".join)


def _with_inside(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``values`` at the top, or buried in a list or dict (as a value or a key)."""
    return st.one_of(
        values,
        values.map(lambda v: ["ok", {"deep": [v]}]),
        values.map(lambda v: {"items": [1, 2, v]}),
        values.filter(_hashable).map(lambda v: {v: "key"}),
    )


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _cycle(_: Any) -> Any:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    return loop


def hostile_values() -> st.SearchStrategy[Any]:
    """Payloads, and values a sink must refuse cleanly (or survive storing)."""
    unknown = st.sampled_from(
        [
            {1, 2},
            frozenset({1}),
            decimal.Decimal("1.5"),
            dt.date(2024, 1, 1),
            dt.datetime(2024, 1, 1),  # naive
            dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=30))),
            dt.timedelta(seconds=1),
            1j,
            bytearray(b"x"),
            memoryview(b"x"),
            _Unregistered(),
            _Opaque(),
            object(),
            Ellipsis,
            print,
            math,
        ]
    )
    depth_near_limit = st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3).map(nested)
    return st.one_of(
        payloads(),
        _with_inside(_surrogate_text()),
        _with_inside(unknown),
        depth_near_limit,
        depth_near_limit.map(lambda v: [v]),
        st.sampled_from([10, 1_000, 100_000]).map(lambda n: nested(MAX_DEPTH + n)),
        st.sampled_from([2**64, -(2**64) - 1, 2**1000, -(10**5000)]).map(
            lambda n: nested(MAX_DEPTH - 1, n)
        ),
        st.sampled_from([2**4000, -(10**5000)]),
        st.sampled_from([256 * 1024, 1024 * 1024]).map(lambda n: {"blob": b"\xff" * n}),
        st.just(None).map(_cycle),
        st.dictionaries(st.tuples(_surrogate_text()), st.none(), min_size=1, max_size=1),
    )


def durations() -> st.SearchStrategy[Any]:
    """What a duration argument may be given: sane, absurd, or of the wrong type."""
    return st.one_of(
        st.floats(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.sampled_from([10**400, -(10**400), 0, 1, 9_223_372_036, 9_223_372_037]),
        st.timedeltas(),
        st.from_regex(r"\A[0-9]{1,14}(\.[0-9]{1,3})?(ns|us|ms|s|m|h|d|w)\Z"),
        st.text(max_size=10),
        st.none(),
        st.booleans(),
        st.lists(st.integers(), max_size=2),
    )
