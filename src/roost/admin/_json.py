"""JSON-safe rendering of stored values (stand-in with the ``admin`` branch's signatures).

The ``admin`` branch owns this module; this minimal version lets the console render values
before the merge. It never raises for a value: what it cannot walk becomes a string.
"""

from __future__ import annotations

import base64
import datetime as dt
import enum
import math
import uuid
from collections.abc import Mapping
from typing import Any

import attrs

from roost._errors import Error
from roost._pid import Pid

__all__ = ["error_json", "to_jsonable"]

# Deeper structures are cut here: a page or a response never walks an unbounded value.
_MAX_DEPTH = 64


def to_jsonable(value: Any, _depth: int = 0) -> Any:  # noqa: PLR0911, PLR0912 - a case per kind
    """``value`` as JSON-safe data (dicts with string keys, lists, str, numbers, None)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if _depth >= _MAX_DEPTH:
        return "…"
    deeper = _depth + 1
    if isinstance(value, Error):
        return error_json(value)
    if isinstance(value, Pid):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value, deeper)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v, deeper) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [to_jsonable(v, deeper) for v in items]
    if attrs.has(type(value)):
        fields = {
            f.name: to_jsonable(getattr(value, f.name), deeper) for f in attrs.fields(type(value))
        }
        return {"$type": type(value).__name__, **fields}
    return repr(value)


def error_json(err: Error) -> dict[str, Any]:
    """``{"kind", "message", "details"}`` of a roost error."""
    return {
        "kind": err.kind.value,
        "message": err.message,
        "details": to_jsonable(dict(err.details or {})),
    }
