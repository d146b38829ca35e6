from __future__ import annotations

import datetime as dt
import enum
import math
import zoneinfo
from typing import Any

import attrs
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from roost import ChannelClosed, Error, ErrorKind, NondeterminismError, Pid
from roost.storage import Codec, record

CODEC = Codec()


@record("test.storage.item", version=1)
@attrs.frozen
class Item:
    name: str
    qty: int
    tags: tuple[str, ...] = ()
    owner: Pid | None = None
    extra: Any = None


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@record("test.storage.typed")
@attrs.define
class Typed:
    labels: set[str]
    color: Color
    when: dt.datetime
    child: Item | None = None


@attrs.define
class Unregistered:
    x: int


# --- strategies ---------------------------------------------------------------------------

names = st.text(st.characters(exclude_characters="{}|@", exclude_categories=("Cs",)), min_size=1)
pids = st.builds(Pid, node=names, host=names, id=names) | st.builds(
    Pid, node=st.just("local"), host=names, id=names
)
offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))
)
aware = st.datetimes(timezones=st.just(dt.UTC) | offsets)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**200)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary()
)
errors = st.builds(
    lambda kind, message, retryable, details: Error(
        message, kind=kind, retryable=retryable, details=details
    ),
    st.sampled_from(ErrorKind),
    st.text(),
    st.sampled_from([True, False, None]),
    st.dictionaries(st.text(), scalars, max_size=3),
)
items = st.builds(
    Item,
    name=st.text(),
    qty=st.integers(),
    tags=st.lists(st.text(), max_size=3).map(tuple),
    owner=st.none() | pids,
    extra=st.none() | st.dictionaries(st.text(), scalars, max_size=3),
)
leaves = scalars | aware | st.uuids() | pids | errors | items
dict_keys = st.text() | st.integers() | st.binary() | st.uuids() | pids
payloads = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(dict_keys, children, max_size=4)
    ),
    max_leaves=25,
)


def as_stored(value: Any) -> Any:
    """The value the codec promises to return: tuples become lists (except in dict keys)."""
    if isinstance(value, list | tuple):
        return [as_stored(v) for v in value]
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items()}
    return value


def assert_same(actual: Any, expected: Any) -> None:
    """Equality that also insists on identical types (1 is not 1.0, True is not 1)."""
    assert type(actual) is type(expected), (actual, expected)
    if isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_same(a, e)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for k in expected:
            assert_same(actual[k], expected[k])
    else:
        assert actual == expected


# --- round trips --------------------------------------------------------------------------


@given(payloads)
def test_payloads_round_trip_exactly(value: Any) -> None:
    assert_same(CODEC.decode(CODEC.encode(value)), as_stored(value))


@given(aware)
def test_aware_datetimes_keep_their_instant_and_offset(value: dt.datetime) -> None:
    back = CODEC.decode(CODEC.encode(value))
    assert back == value
    assert back.utcoffset() == value.utcoffset()


def test_zoneinfo_datetime_comes_back_as_same_instant_with_fixed_offset() -> None:
    paris = dt.datetime(2024, 7, 1, 12, 30, 1, 5, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    back = CODEC.decode(CODEC.encode(paris))
    assert back == paris
    assert back.tzinfo == dt.timezone(dt.timedelta(hours=2))


def test_nan_and_negative_zero_round_trip() -> None:
    nan, neg_zero = CODEC.decode(CODEC.encode([math.nan, -0.0]))
    assert math.isnan(nan)
    assert math.copysign(1.0, neg_zero) == -1.0


def test_tuples_come_back_as_lists_but_stay_tuples_as_dict_keys() -> None:
    assert CODEC.decode(CODEC.encode({(1, "a"): (2, 3)})) == {(1, "a"): [2, 3]}


def test_builtin_subclasses_come_back_as_the_builtin() -> None:
    back = CODEC.decode(CODEC.encode([ErrorKind.NOT_FOUND]))
    assert back == ["NotFound"]
    assert type(back[0]) is str


def test_roosts_error_subclasses_come_back_as_themselves() -> None:
    nondet = NondeterminismError("command 3 does not match", details={"seq": 3})
    closed = ChannelClosed()
    back = CODEC.decode(CODEC.encode([nondet, closed]))
    assert back == [nondet, closed]
    assert type(back[0]) is NondeterminismError


def test_other_error_subclasses_come_back_as_plain_errors() -> None:
    class AppError(Error):
        pass

    back = CODEC.decode(CODEC.encode(AppError("x", kind=ErrorKind.CONFLICT, retryable=True)))
    assert type(back) is Error
    assert (back.kind, back.message, back.retryable) == (ErrorKind.CONFLICT, "x", True)


def test_typed_record_fields_are_rebuilt_from_annotations() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    value = Typed({"a", "b"}, Color.BLUE, when, child=Item("n", 1, ("t",)))
    back = CODEC.decode(CODEC.encode(value))
    assert back == value
    assert isinstance(back.labels, set)
    assert back.color is Color.BLUE
    assert isinstance(back.child.tags, tuple)


def test_records_nest_in_payloads_and_in_untyped_fields() -> None:
    inner = Item("inner", 2)
    value = {"items": [Item("outer", 1, extra={"nested": inner})]}
    assert CODEC.decode(CODEC.encode(value)) == value


# --- refusals -----------------------------------------------------------------------------


def invalid_message(value: Any, what: str = "payload") -> str:
    with pytest.raises(Error) as info:
        CODEC.encode(value, what=what)
    assert info.value.kind is ErrorKind.INVALID
    return info.value.message


def test_a_set_is_refused_with_its_path() -> None:
    message = invalid_message({"items": [1, 2, {3}]})
    assert message == "payload[\"items\"][2]: cannot encode object of type 'set' (use a list)"


def test_a_naive_datetime_is_refused() -> None:
    message = invalid_message([{"at": dt.datetime(2024, 1, 1)}], what="args")
    assert message.startswith('args[0]["at"]: cannot encode a naive datetime')
    assert "use an aware UTC datetime" in message


def test_an_arbitrary_object_is_refused_with_its_type() -> None:
    assert (
        invalid_message({"x": object()}) == "payload[\"x\"]: cannot encode object of type 'object'"
    )


def test_an_unregistered_attrs_class_is_refused_with_a_hint() -> None:
    message = invalid_message([Unregistered(1)])
    assert message.startswith("payload[0]: cannot encode object of type 'Unregistered'")
    assert "@roost.storage.record" in message


def test_a_bad_value_inside_a_record_or_error_names_the_field() -> None:
    assert invalid_message(Item("a", 1, extra={"s": {1}})).startswith(
        "payload.extra[\"s\"]: cannot encode object of type 'set'"
    )
    assert invalid_message(Error("e", details={"d": dt.date(2024, 1, 1)})).startswith(
        "payload.details[\"d\"]: cannot encode object of type 'date'"
    )


def test_an_error_message_must_be_encodable_too() -> None:
    assert invalid_message(Error({1})).startswith(  # type: ignore[arg-type]
        "payload.message: cannot encode object of type 'set'"
    )


def test_a_bad_dict_key_is_named_as_the_key() -> None:
    assert "(the key): cannot encode object of type 'frozenset'" in invalid_message(
        {frozenset({1}): 1}
    )


def test_a_cycle_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert "reference cycle" in invalid_message({"a": loop})


@pytest.mark.parametrize(
    "offset", [dt.timedelta(seconds=1), dt.timedelta(seconds=-561), dt.timedelta(microseconds=5)]
)
def test_a_utc_offset_that_is_not_whole_minutes_is_refused(offset: dt.timedelta) -> None:
    odd = dt.datetime(2024, 1, 1, tzinfo=dt.timezone(offset))
    assert "not a whole number of minutes" in invalid_message(odd)


@pytest.mark.parametrize("value", [{1, 2}, frozenset(), 1j, bytearray(b"x"), range(3)])
def test_types_cbor2_would_encode_natively_are_still_refused(value: Any) -> None:
    assert f"cannot encode object of type {type(value).__name__!r}" in invalid_message(value)


# --- decoding -----------------------------------------------------------------------------


def test_unknown_record_tag_is_an_internal_error_naming_the_tag() -> None:
    @attrs.define
    class Local:
        x: int

    writer = Codec()
    writer.register(Local, "test.storage.local-only")
    data = writer.encode(Local(1))
    with pytest.raises(Error) as info:
        Codec().decode(data)
    assert info.value.kind is ErrorKind.INTERNAL
    assert "'test.storage.local-only'" in info.value.message
    assert info.value.details["tag"] == "test.storage.local-only"


@attrs.define
class PointV1:
    x: int
    y: int


@attrs.define
class PointV2:
    coords: list[int]
    label: str = ""


def test_older_schema_versions_go_through_the_migrate_hook() -> None:
    old = Codec()
    old.register(PointV1, "test.storage.point", version=1)
    data = old.encode(PointV1(3, 4))
    calls: list[tuple[int, dict[str, Any]]] = []

    def migrate(version: int, fields: dict[str, Any]) -> dict[str, Any]:
        calls.append((version, dict(fields)))
        return {"coords": [fields["x"], fields["y"]], "label": "migrated"}

    new = Codec()
    new.register(PointV2, "test.storage.point", version=2, migrate=migrate)
    assert new.decode(data) == PointV2([3, 4], "migrated")
    assert calls == [(1, {"x": 3, "y": 4})]


def test_an_older_version_without_migrate_that_no_longer_fits_is_internal() -> None:
    old = Codec()
    old.register(PointV1, "test.storage.point", version=1)
    new = Codec()
    new.register(PointV2, "test.storage.point", version=2)
    with pytest.raises(Error) as info:
        new.decode(old.encode(PointV1(1, 2)))
    assert info.value.kind is ErrorKind.INTERNAL
    assert "migrate" in info.value.message


def test_a_newer_stored_version_is_internal() -> None:
    newer = Codec()
    newer.register(PointV1, "test.storage.point", version=5)
    older = Codec()
    older.register(PointV1, "test.storage.point", version=1)
    with pytest.raises(Error, match="schema version 5") as info:
        older.decode(newer.encode(PointV1(1, 2)))
    assert info.value.kind is ErrorKind.INTERNAL


def test_a_failing_migrate_hook_is_internal() -> None:
    old = Codec()
    old.register(PointV1, "test.storage.point", version=1)
    new = Codec()
    new.register(PointV2, "test.storage.point", version=2, migrate=lambda v, f: f["nope"])
    with pytest.raises(Error, match=r"migrating record 'test\.storage\.point'") as info:
        new.decode(old.encode(PointV1(1, 2)))
    assert info.value.kind is ErrorKind.INTERNAL


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff", cbor2.dumps(cbor2.CBORTag(40000, 1)), cbor2.dumps(cbor2.CBORTag(39001, 1))],
)
def test_corrupt_data_is_internal(data: bytes) -> None:
    with pytest.raises(Error) as info:
        CODEC.decode(data)
    assert info.value.kind is ErrorKind.INTERNAL


def test_decode_refuses_non_bytes() -> None:
    with pytest.raises(Error) as info:
        CODEC.decode("text")  # type: ignore[arg-type]
    assert info.value.kind is ErrorKind.INVALID


# --- registration -------------------------------------------------------------------------


def test_a_tag_cannot_be_taken_by_a_second_class() -> None:
    with pytest.raises(Error, match="already used by") as info:
        record("test.storage.item")(Unregistered)
    assert info.value.kind is ErrorKind.INVALID
    with pytest.raises(Error, match="already used by"):
        Codec().register(Unregistered, "test.storage.item")


def test_a_class_has_one_tag_and_re_registering_it_is_harmless() -> None:
    record("test.storage.item")(Item)
    with pytest.raises(Error, match="already registered as record"):
        record("test.storage.item-2")(Item)


@pytest.mark.parametrize(
    ("cls", "tag", "version"),
    [(dict, "t.dict", 1), (Unregistered, "", 1), (Unregistered, "t.v", 0)],
)
def test_bad_registrations_are_invalid(cls: type, tag: str, version: int) -> None:
    with pytest.raises(Error) as info:
        Codec().register(cls, tag, version)
    assert info.value.kind is ErrorKind.INVALID
