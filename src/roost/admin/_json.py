"""JSON-safe renderings of stored values, shared by the admin API, the console and the CLI."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from typing import Any

import attrs

from roost._errors import Error
from roost._pid import Pid

__all__ = ["error_json", "to_jsonable"]


def error_json(err: Error) -> dict[str, Any]:
    """``{"kind", "message", "details"}`` of a roost error."""
    return {"kind": err.kind.value, "message": err.message, "details": to_jsonable(err.details)}


def to_jsonable(value: Any) -> Any:  # noqa: PLR0911 - one arm per kind of value
    """``value`` as JSON data: datetimes in ISO 8601, bytes in hex, PIDs as their text."""
    match value:
        case None | bool() | int() | float() | str():
            return value
        case Error():
            return error_json(value)
        case dict():
            return {str(k): to_jsonable(v) for k, v in value.items()}
        case list() | tuple():
            return [to_jsonable(v) for v in value]
        case set() | frozenset():
            return sorted((to_jsonable(v) for v in value), key=repr)
        case bytes():
            return value.hex()
        case dt.datetime() | dt.date() | dt.time():
            return value.isoformat()
        case enum.Enum():
            return to_jsonable(value.value)
        case Pid() | uuid.UUID():
            return str(value)
    if attrs.has(type(value)):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in attrs.fields(type(value))}
    return str(value)
