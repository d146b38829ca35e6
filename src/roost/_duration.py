"""Durations as roost accepts them: "250ms", "5s", "1h30m", timedelta, or seconds.

Every duration is at most ``MAX_DURATION`` seconds (about 292 years: the longest Go
``time.Duration``, the duration type of Wippy and of Temporal's Go SDK), so a deadline
computed from one always fits in a ``datetime``; ``deadline_after`` adds one to a time and
stops at ``LATEST`` instead of overflowing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Final

from roost._errors import invalid

__all__ = ["LATEST", "MAX_DURATION", "Duration", "deadline_after", "parse_duration"]

Duration = str | int | float | dt.timedelta

MAX_DURATION: Final = 9_223_372_036.0
"""The longest duration roost accepts, in seconds: Go's ``time.Duration`` range, 2**63 ns."""
LATEST: Final = dt.datetime(9000, 1, 1, tzinfo=dt.UTC)
"""The latest deadline: a time past it (only a clock run far ahead can get there) is it."""

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
        roost.Error: kind Invalid, for a malformed, negative or non-finite duration, or one
            longer than ``MAX_DURATION``.
    """
    if isinstance(value, bool):
        raise invalid(f"{what} must be a duration such as '5s', not a bool", value=value)
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int):
        # Compared as an int first: float() of a huge int raises OverflowError.
        if -MAX_DURATION <= value <= MAX_DURATION:
            seconds = float(value)
        else:
            seconds = math.inf if value > 0 else -math.inf
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str):
        seconds = _parse_text(value, what)
    else:
        raise invalid(
            f"{what} must be a string like '5s' or '1h30m', a timedelta or a number of "
            f"seconds; got {type(value).__name__}",
        )
    if math.isnan(seconds) or seconds < 0:
        raise invalid(f"{what} must be a finite, non-negative duration; got {_show(value)}")
    if seconds > MAX_DURATION:
        raise invalid(
            f"{what} must be at most {MAX_DURATION:.0f} seconds (about 292 years); got "
            f"{_show(value)}",
            max_seconds=MAX_DURATION,
        )
    if seconds == 0 and not allow_zero:
        raise invalid(f"{what} must be greater than zero; got {value!r}")
    return seconds


def deadline_after(at: dt.datetime, seconds: float) -> dt.datetime:
    """``at`` plus ``seconds`` (a parsed duration), or ``LATEST`` if that is later."""
    if at >= LATEST or seconds >= (LATEST - at).total_seconds():
        return LATEST
    return at + dt.timedelta(seconds=seconds)


def _show(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 128:
        # (repr of an int past 4300 digits raises ValueError)
        return f"an int of {len(str(value)) if value.bit_length() < 14000 else 'many'} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:40] + f"... ({len(text)} characters)"


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
