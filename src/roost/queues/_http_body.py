"""HTTP request bodies, the sans-IO part: what ``read_json`` accepts before any handler runs.

A body is parsed as UTF-8 JSON and refused (``roost.Error`` of kind Invalid, a 400) unless
roost can store the value as it is: at most ``MAX_JSON_DEPTH`` levels deep, no lone
surrogate escapes, numbers a float or an int can hold. So a handler only ever sees values
it can store, and a body nested hundreds of levels deep never reaches the store.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any, Final

from roost._errors import Error, invalid
from roost.storage._codec import MAX_DEPTH

__all__ = ["MAX_JSON_DEPTH", "read_json"]

MAX_JSON_DEPTH: Final = MAX_DEPTH // 2
"""How deep a request body's JSON may nest (objects and arrays, one level each).

Half of what the codec stores and reads back (``MAX_DEPTH``), so a handler can wrap the
body in levels of its own (a workflow input, a queue message, a state value) and still
store it.
"""
_MAX_INT_DIGITS: Final = 4300  # Python's own limit for int(str)
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class _RefusedNumberError(ValueError):
    """A JSON number the body may not hold (raised from inside ``json.loads``)."""


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _RefusedNumberError(f"the number {text[:40]} is too large for a float")
    return value


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        raise _RefusedNumberError(
            f"an integer has {len(text)} digits; at most {_MAX_INT_DIGITS} are accepted"
        )
    return int(text)


def read_json(body: bytes) -> Any:
    r"""Parse a request body: None when empty, else the JSON value.

    Raises:
        roost.Error: kind Invalid (400) for a body that is not UTF-8 JSON, that nests
            deeper than ``MAX_JSON_DEPTH``, that has a lone surrogate escape ("\ud800"), or
            a number too large for a float or an int.
    """
    if not body.strip():
        return None
    try:
        text = body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise invalid(
            f"the request body is not valid UTF-8 (byte {body[exc.start]:#04x} at offset "
            f"{exc.start}); send JSON encoded as UTF-8",
            offset=exc.start,
        ) from None
    try:
        value = json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=_parse_float,
            parse_int=_parse_int,
        )
    except _RefusedNumberError as exc:
        raise invalid(f"the request body is refused: {exc}") from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:  # JSONDecodeError
        raise invalid(f"the request body is not valid JSON: {exc}") from None
    _check_json(value)
    return value


def _too_deep() -> Error:
    return invalid(
        f"the request body nests JSON more than {MAX_JSON_DEPTH} levels deep (each object "
        "and array is one level); send a flatter document",
        max_depth=MAX_JSON_DEPTH,
    )


def _check_json(value: Any) -> None:
    """Refuse nesting past ``MAX_JSON_DEPTH`` and strings with lone surrogates."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, dict | list) else []
    bad_text = isinstance(value, str) and _SURROGATE.search(value) is not None
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise _too_deep()
        children: Iterable[Any]
        if isinstance(item, dict):
            bad_text = bad_text or any(_SURROGATE.search(k) for k in item)
            children = item.values()
        else:
            children = item
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif isinstance(child, str) and not bad_text:
                bad_text = _SURROGATE.search(child) is not None
    if bad_text:
        raise invalid(
            f'the request body has a lone surrogate escape (such as "\\ud800") at '
            f"{_surrogate_at(value)}; JSON strings must be valid Unicode (a surrogate escape "
            "needs its pair)"
        )


def _surrogate_at(value: Any, path: str = "$") -> str:
    # Only called once a surrogate was found, on a value already checked for depth.
    if isinstance(value, str):
        return path if _SURROGATE.search(value) else ""
    if isinstance(value, list):
        items: Iterable[tuple[Any, str]] = ((v, f"{path}[{i}]") for i, v in enumerate(value))
    elif isinstance(value, dict):
        for key in value:
            if _SURROGATE.search(key):
                return f"{path} (a key)"
        items = ((v, f"{path}[{json.dumps(k)}]") for k, v in value.items())
    else:
        return ""
    for child, where in items:
        found = _surrogate_at(child, where)
        if found:
            return found
    return ""
