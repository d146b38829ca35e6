"""A property over hostile HTTP bodies: refused with Invalid, or stored and read back equal.

``read_json`` is what every request body goes through before any handler runs. Whatever
the bytes (JSON trees up to several hundred levels deep, strings with lone surrogates, huge
numbers, random bytes), it either raises ``roost.Error`` of kind Invalid, or returns a value
the store takes and reads back equal: inside a ``Request`` (a workflow's input) and inside
a few more levels a handler might add (a queue message, a state value). It refuses exactly
what it documents: nesting past ``MAX_JSON_DEPTH``, lone surrogates, numbers out of range,
and what is not UTF-8 JSON.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost import ErrorKind
from roost.http import Request
from roost.queues._http import MAX_JSON_DEPTH, read_json
from roost.storage import Codec

CODEC = Codec()

# Every code point, lone surrogates included (category Cs).
texts = st.text(st.characters(codec=None, categories=None), max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=12,
)


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    """A JSON document, often wrapped in many levels, sometimes with raw hostile text."""
    value = draw(trees)
    for _ in range(draw(st.sampled_from([0, 0, 1, MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH, 450]))):
        value = [value] if draw(st.booleans()) else {"k": value}
    body = json.dumps(value)  # ensure_ascii: lone surrogates become "\\udXXX" escapes
    extra = draw(st.sampled_from(["", "", "", "1e400", "-1e999", "9" * 4400, "NaN", '"\\ud800"']))
    return (f"[{body}, {extra}]" if extra else body).encode()


bodies = json_bodies() | st.binary(max_size=64)


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def refusal_expected(body: bytes) -> bool:
    """What read_json must refuse, found independently (plain json, a recursive walk)."""
    try:
        value = json.loads(body.decode("utf-8-sig"), parse_constant=float)
    except (ValueError, RecursionError):
        return True  # not UTF-8, not JSON, or too many digits for an int
    floats = [v for v in _scalars(value) if isinstance(v, float)]
    return (
        depth(value) > MAX_JSON_DEPTH
        or any(0xD800 <= ord(c) <= 0xDFFF for s in strings(value) for c in s)
        or any(math.isinf(f) or math.isnan(f) for f in floats)
    )


def _scalars(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _scalars(v)]
    if isinstance(value, list):
        return [s for v in value for s in _scalars(v)]
    return [value]


@given(bodies)
def test_a_body_is_refused_or_stored_and_read_back_equal(body: bytes) -> None:
    if not body.strip():
        assert read_json(body) is None
        return
    if refusal_expected(body):
        with pytest.raises(roost.Error) as refused:
            read_json(body)
        assert refused.value.kind is ErrorKind.INVALID, refused.value
        return
    value = read_json(body)  # accepted: must be storable
    request = Request(method="POST", path="/p", json=value, body=body)
    assert CODEC.decode(CODEC.encode(request)).json == value
    # A handler's own wrapping: a queue message payload inside a state value.
    wrapped = {"order": {"payload": {"items": [value]}}}
    assert CODEC.decode(CODEC.encode(wrapped)) == wrapped


def test_scalar_bodies_are_values_too() -> None:
    assert [read_json(b) for b in (b"null", b"42", b'"x"', b"true", b"1.5")] == [
        None,
        42,
        "x",
        True,
        1.5,
    ]
