from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roost import Error, ErrorKind
from roost.storage import U64_MAX, from_u64, key, prefix_end, u64, unpack_key

u64s = st.integers(min_value=0, max_value=U64_MAX)
# Bytes rich in 0x00 / 0xFF, the two bytes the escaping rule has to get right.
raw = st.binary(max_size=6) | st.lists(st.sampled_from([0, 1, 0xFF]), max_size=5).map(bytes)
rows = st.tuples(raw, u64s, st.text(max_size=5))


@given(u64s, u64s)
def test_u64_order_matches_int_order(a: int, b: int) -> None:
    assert (u64(a) < u64(b)) == (a < b)
    assert from_u64(u64(a)) == a


@given(rows, rows)
def test_composite_key_order_matches_tuple_order(a: tuple, b: tuple) -> None:
    ka, kb = key(*a), key(*b)
    # str parts compare by UTF-8 bytes, which is code point order, as Python compares str.
    assert (ka < kb) == (a < b)
    assert (ka == kb) == (a == b)


@given(rows)
def test_unpack_inverts_key(row: tuple) -> None:
    assert unpack_key(key(*row), bytes, int, str) == row


@given(raw, raw, u64s)
def test_part_is_a_prefix_only_of_its_own_keys(a: bytes, b: bytes, n: int) -> None:
    assert key(a, n).startswith(key(a))
    assert key(b, n).startswith(key(a)) == (a == b)


def test_prefix_does_not_collide_with_longer_part() -> None:
    assert key(b"wf-1", 5).startswith(key(b"wf-1"))
    assert not key(b"wf-10", 5).startswith(key(b"wf-1"))
    assert key(b"a") < key(b"a", 0) < key(b"ab")


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, True, None])
def test_u64_rejects_out_of_range_and_non_ints(bad: object) -> None:
    with pytest.raises(Error) as info:
        u64(bad)  # type: ignore[arg-type]
    assert info.value.kind is ErrorKind.INVALID
    assert "u64" in info.value.message


def test_key_rejects_other_part_types() -> None:
    with pytest.raises(Error, match="key parts must be int, bytes or str, got 'float'"):
        key(b"x", 1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "kinds"),
    [(b"abc", (bytes,)), (b"\x00\x01", (int,)), (key(b"a", 1) + b"!", (bytes, int))],
)
def test_unpack_rejects_keys_that_do_not_match(data: bytes, kinds: tuple[type, ...]) -> None:
    with pytest.raises(Error) as info:
        unpack_key(data, *kinds)
    assert info.value.kind is ErrorKind.INVALID


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"ab", b"ac"), (b"a\xff", b"b"), (b"\xff\xff", None), (b"", None), (b"\x00", b"\x01")],
)
def test_prefix_end(prefix: bytes, end: bytes | None) -> None:
    assert prefix_end(prefix) == end


@given(raw.filter(bool), raw)
def test_prefix_end_bounds_exactly_the_prefixed_keys(prefix: bytes, other: bytes) -> None:
    end = prefix_end(prefix)
    inside = other.startswith(prefix)
    below_end = end is None or other < end
    assert inside == (prefix <= other and below_end)
