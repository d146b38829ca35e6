"""The codec and plain Python classes: dataclasses, enums, NamedTuples and converters."""

from __future__ import annotations

import dataclasses
import decimal
import enum
import types
from typing import NamedTuple

import cbor2
import pytest

import roost
from roost import ErrorKind
from roost.storage import Codec
from roost.storage._codec import TAG_RECORD
from roost.storage._values import register_annotation, structure
from roost.workflow._history import MessageArrived

CODEC = Codec()


class Point(NamedTuple):
    x: int
    y: int


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Shade(enum.StrEnum):
    DARK = "dark"


class Mode(enum.Enum):
    ON = "on"


@dataclasses.dataclass
class Shape:
    name: str
    corners: list[Point]
    pair: tuple[int, int] = (0, 0)
    labels: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class Node:
    """Refers to itself through its annotations."""

    value: int
    children: list[Node] = dataclasses.field(default_factory=list)


def test_a_dataclass_comes_back_as_itself_with_typed_fields() -> None:
    shape = Shape("tri", [Point(0, 0), Point(1, 0)], (2, 3), {"a", "b"})
    back = CODEC.decode(CODEC.encode(shape))
    assert back == shape
    assert type(back.corners[1]) is Point and type(back.pair) is tuple
    assert back.labels == {"a", "b"}


def test_a_namedtuple_survives_as_dict_key_and_value_and_tuple_keys_stay() -> None:
    value = {(1, 2): Point(3, 4), "p": [Point(5, 6)], "m": Mode.ON}
    back = CODEC.decode(CODEC.encode(value))
    assert back == value
    assert type(back[(1, 2)]) is Point and type(back["p"][0]) is Point
    assert back["m"] is Mode.ON


def test_a_namedtuple_inside_one_of_roosts_records() -> None:
    event = MessageArrived(topic="t", payload={"at": Point(1, 2)})
    back = CODEC.decode(CODEC.encode(event))
    assert type(back.payload["at"]) is Point
    assert CODEC.decode(CODEC.encode_checked(event)).payload == {"at": Point(1, 2)}


def test_str_and_int_enums_are_plain_values_until_an_annotation_names_them() -> None:
    assert type(CODEC.decode(CODEC.encode(Shade.DARK))) is str
    register_annotation(list[Shade] | None)
    assert CODEC.decode(CODEC.encode([Shade.DARK])) == [Shade.DARK]
    assert type(CODEC.decode(CODEC.encode([Shade.DARK]))[0]) is Shade
    register_annotation(dict[str, Level])
    assert CODEC.decode(CODEC.encode({"l": Level.HIGH}))["l"] is Level.HIGH


def test_a_class_that_refers_to_itself() -> None:
    tree = Node(1, [Node(2), Node(3, [Node(4)])])
    assert CODEC.decode(CODEC.encode(tree)) == tree


def test_plain_data_is_structured_into_an_annotation() -> None:
    data = {"name": "sq", "corners": [[0, 0], {"x": 1, "y": 1}], "pair": [1, 2]}
    assert structure(data, Shape) == Shape("sq", [Point(0, 0), Point(1, 1)], (1, 2))
    assert structure([{"value": 1}], list[Node]) == [Node(1)]
    assert structure("on", Mode | None) is Mode.ON
    with pytest.raises(Exception, match="name"):
        structure({"corners": []}, Shape)


def test_a_converter_stores_any_other_class() -> None:
    app = roost.App("conv")
    app.converter(decimal.Decimal, str, decimal.Decimal)
    value = {"price": decimal.Decimal("1.10")}
    data = CODEC.encode(value)
    assert b"1.10" in data
    assert CODEC.decode(data) == value
    with pytest.raises(roost.Error) as caught:
        app.converter(Shape, str, str)  # already stored as a dataclass
    assert caught.value.kind is ErrorKind.INVALID
    with pytest.raises(roost.Error) as caught:
        app.converter(decimal.Decimal, "str", decimal.Decimal)  # type: ignore[arg-type]
    assert caught.value.kind is ErrorKind.INVALID


def test_a_tag_whose_module_is_not_imported_is_an_internal_error() -> None:
    data = cbor2.dumps(cbor2.CBORTag(TAG_RECORD, ["not.imported.mod:Thing", 1, {"a": 1}]))
    with pytest.raises(roost.Error) as caught:
        CODEC.decode(data)
    assert caught.value.kind is ErrorKind.INTERNAL
    assert "not.imported.mod:Thing" in caught.value.message


def test_stored_fields_the_class_cannot_take_are_an_internal_error() -> None:
    tag = f"{__name__}:Point"
    data = cbor2.dumps(cbor2.CBORTag(TAG_RECORD, [tag, 1, {"x": 1}]))  # "y" is missing
    with pytest.raises(roost.Error) as caught:
        CODEC.decode(data)
    assert caught.value.kind is ErrorKind.INTERNAL
    assert tag in caught.value.message and "y" in caught.value.message


def test_other_objects_are_still_refused() -> None:
    with pytest.raises(roost.Error) as caught:
        CODEC.encode({"x": types.SimpleNamespace(a=1)})
    assert caught.value.kind is ErrorKind.INVALID
    assert "SimpleNamespace" in caught.value.message
