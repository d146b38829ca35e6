"""Durations as roost accepts them: "250ms", "5s", "1h30m", timedelta, or seconds."""

from __future__ import annotations

import datetime as dt
import math
import re

from roost._errors import invalid

__all__ = ["Duration", "parse_duration"]

Duration = str | int | float | dt.timedelta

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d|w)")


def parse_duration(value: Duration, *, what: str = "duration", allow_zero: bool = True) -> float:
    """Return a duration in seconds.

    Args:
        value: "250ms", "5s", "1h30m", "2d", a timedelta, or a number of seconds.
        what: the name of the argument, used in the error message.
        allow_zero: whether 0 is acceptable.

    Raises:
        roost.Error: kind Invalid, for a malformed, negative or non-finite duration.
    """
    if isinstance(value, bool):
        raise invalid(f"{what} must be a duration such as '5s', not a bool", value=value)
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _parse_text(value, what)
    else:
        raise invalid(
            f"{what} must be a string like '5s' or '1h30m', a timedelta or a number of "
            f"seconds; got {type(value).__name__}",
        )
    if math.isnan(seconds) or seconds < 0 or math.isinf(seconds):
        raise invalid(f"{what} must be a finite, non-negative duration; got {value!r}")
    if seconds == 0 and not allow_zero:
        raise invalid(f"{what} must be greater than zero; got {value!r}")
    return seconds


def _parse_text(text: str, what: str) -> float:
    compact = text.strip().replace(" ", "")
    if not compact:
        raise invalid(f"{what} is empty; write it like '250ms', '5s' or '1h30m'")
    pos = 0
    total = 0.0
    for match in _PART.finditer(compact):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(compact):
        raise invalid(
            f"{what} {text!r} is not a duration; write it like '250ms', '5s', '1h30m' "
            "(units: ms, s, m, h, d, w)",
            value=text,
        )
    return total
