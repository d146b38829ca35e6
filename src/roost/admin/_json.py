"""roost's one JSON rendering of stored values.

The admin API, the console, the CLI and ``roost.testing.history_to_json`` all use it, so a
value reads the same everywhere.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from roost._errors import Error
from roost._pid import Pid

__all__ = ["dumps", "error_json", "to_jsonable"]

_MAX_DEPTH = 200  # deeper than the codec stores; a cycle in a live value stops here


def error_json(err: Error) -> dict[str, Any]:
    """An error as ``{"kind", "message", "details"}`` (details made JSON-safe too)."""
    return {"kind": err.kind.value, "message": err.message, "details": to_jsonable(err.details)}


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``value`` as strict JSON text (``to_jsonable``'s form, keys sorted, never NaN)."""
    return json.dumps(to_jsonable(value), indent=indent, sort_keys=True, allow_nan=False)


def to_jsonable(value: Any) -> Any:
    """``value`` as data ``json.dumps`` takes as it is (strict: no NaN), keeping its shape.

    Datetimes and dates become ISO 8601 text, a timedelta its seconds, PIDs and UUIDs their
    text, bytes ``{"base64": ...}``, enums their value, sets and tuples lists (a set
    sorted by its items' text), an attrs record, a dataclass or a pydantic model a dict of
    its fields with its class name under ``"type"``, a NamedTuple a list, a ``roost.Error``
    ``{"kind", "message", "details", "retryable"}``, non-finite floats their text
    (``"nan"``, ``"inf"``); mapping keys become text. Anything else becomes its ``repr``.
    """
    return _jsonable(value, 0)


def _jsonable(value: Any, depth: int) -> Any:  # noqa: PLR0911, PLR0912 - one arm per kind of value
    if depth > _MAX_DEPTH:
        return "..."
    if value is None or type(value) in (bool, int, str):
        return value
    nested = depth + 1
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, nested)
    if isinstance(value, float):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, int):  # an int subclass (bool is handled above): its number
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Error):
        return {**error_json(value), "retryable": value.retryable}
    if isinstance(value, Mapping):
        return {_key(k): _jsonable(v, nested) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, nested) for v in value]
    if isinstance(value, set | frozenset):
        items = [_jsonable(v, nested) for v in value]
        return sorted(items, key=repr)
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, Pid | uuid.UUID):
        return str(value)
    if attrs.has(type(value)):
        fields = {
            f.name: _jsonable(getattr(value, f.name), nested) for f in attrs.fields(type(value))
        }
        return {"type": type(value).__name__, **fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: _jsonable(getattr(value, f.name), nested) for f in dataclasses.fields(value)
        }
        return {"type": type(value).__name__, **fields}
    dump = getattr(value, "model_dump", None)  # a pydantic model
    if callable(dump) and type(value).__module__ != "builtins":
        with contextlib.suppress(Exception):
            return {"type": type(value).__name__, **_jsonable(dump(mode="json"), nested)}
    return repr(value)


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    shown = _jsonable(key, _MAX_DEPTH)
    return shown if isinstance(shown, str) else repr(key)
