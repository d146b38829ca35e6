"""``roost.admin._json``: any stored value as strict JSON, errors as {kind, message, details}."""

import dataclasses
import datetime as dt
import enum
import json
import uuid

import attrs
import pytest

import roost
from roost.admin._json import error_json, to_jsonable


class Color(enum.Enum):
    RED = "red"


@attrs.frozen
class Point:
    x: int
    y: tuple


def test_every_kind_of_stored_value_becomes_strict_json():
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ident = uuid.UUID(int=1)
    pid = roost.Pid.parse("{host|1.2}")
    value = {
        "when": at,
        "day": at.date(),
        "took": dt.timedelta(seconds=90),
        "id": ident,
        "pid": pid,
        "raw": b"\x00\xff",
        "set": {3, 1, 2},
        "tuple": (1, "a"),
        "enum": Color.RED,
        "point": Point(1, (2, 3)),
        "nan": float("nan"),
        "inf": float("-inf"),
        7: "int key",
        "error": roost.Error("nope", kind=roost.ErrorKind.NOT_FOUND, details={"at": at}),
        "other": object,
    }
    out = to_jsonable(value)
    json.dumps(out, allow_nan=False)  # strict JSON: it would raise on anything left over
    assert out["when"] == "2026-01-02T03:04:05+00:00" and out["day"] == "2026-01-02"
    assert out["took"] == 90.0 and out["id"] == str(ident) and out["pid"] == "{host|1.2}"
    assert out["raw"] == {"base64": "AP8="}
    assert out["set"] == [1, 2, 3] and out["tuple"] == [1, "a"] and out["enum"] == "red"
    assert out["point"] == {"type": "Point", "x": 1, "y": [2, 3]}
    assert (out["nan"], out["inf"]) == ("nan", "-inf")
    assert out["7"] == "int key"
    assert out["error"] == {
        "kind": "NotFound",
        "message": "nope",
        "details": {"at": "2026-01-02T03:04:05+00:00"},
        "retryable": None,  # the kind's default applies
    }
    assert out["other"] == repr(object)


def test_error_json_is_kind_message_details():
    err = roost.Error("bad input", kind=roost.ErrorKind.INVALID, details={"field": "x"})
    assert error_json(err) == {"kind": "Invalid", "message": "bad input", "details": {"field": "x"}}


def test_a_cyclic_live_value_stops_instead_of_recursing_for_ever():
    loop: list = []
    loop.append(loop)
    out = to_jsonable(loop)
    json.dumps(out)


def _strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_history_to_json_is_the_same_renderer_strict_and_never_nan():
    from roost.testing import history_to_json  # noqa: PLC0415 - the public entry point
    from roost.workflow._history import ActivityResolved  # noqa: PLC0415

    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    values = [
        {"nan": float("nan"), "inf": float("inf"), "neg": float("-inf")},
        {"when": at, "raw": b"\x00\xff", "pid": roost.Pid.parse("{host|1.2}")},
        roost.Error("nope", kind=roost.ErrorKind.NOT_FOUND, details={"at": at}),
    ]
    history = [ActivityResolved(seq=i, value=v, error=None) for i, v in enumerate(values)]
    text = history_to_json(history)
    rows = _strict(text)
    assert rows == to_jsonable(history)  # one renderer, one set of rules
    assert rows[0]["value"] == {"nan": "nan", "inf": "inf", "neg": "-inf"}
    assert rows[1]["value"]["when"] == "2026-01-02T03:04:05+00:00"
    assert rows[1]["value"]["raw"] == {"base64": "AP8="}
    assert rows[2]["value"]["kind"] == "NotFound"
    assert rows[0]["type"] == "ActivityResolved"
    assert history_to_json(history, indent=None) == json.dumps(rows, sort_keys=True)
    assert "\n" in text and "NaN" not in text and "Infinity" not in text


def test_dataclasses_and_pydantic_models_render_as_their_fields() -> None:
    @dataclasses.dataclass
    class Line:
        sku: str
        qty: int

    assert to_jsonable({"l": Line("a", 2)}) == {"l": {"type": "Line", "sku": "a", "qty": 2}}
    pydantic = pytest.importorskip("pydantic")

    class Cart(pydantic.BaseModel):
        owner: str

    assert to_jsonable(Cart(owner="ann")) == {"type": "Cart", "owner": "ann"}
