"""Cron expressions (UTC): 5-field standard cron, or 6/7 fields with seconds first.

Shared by workflow ``cron_schedule`` and queue cron triggers. The matching itself is
croniter's; this module fixes the field layout roost documents and the error a bad
expression gets.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

import attrs
from croniter import croniter

from roost._errors import invalid, shown

__all__ = ["CronSchedule", "parse_cron", "parse_firing_cron"]

# croniter gives up after this many years without a match; its year field ends at 2099, so
# this covers every year it can express (its default, 50, hides a far year's fire times).
_MAX_YEARS: Final = 130

_LAYOUTS = {
    5: "minute hour day-of-month month day-of-week",
    6: "second minute hour day-of-month month day-of-week",
    7: "second minute hour day-of-month month day-of-week year",
}


@attrs.frozen
class CronSchedule:
    """A parsed cron expression; ``next_after`` gives fire times in UTC."""

    expression: str
    seconds_first: bool

    def next_after(self, at: dt.datetime) -> dt.datetime | None:
        """The first fire time strictly after ``at`` (None if the schedule has ended)."""
        start = at.astimezone(dt.UTC)
        try:
            fire: dt.datetime = croniter(
                self.expression,
                start,
                second_at_beginning=self.seconds_first,
                max_years_between_matches=_MAX_YEARS,
            ).get_next(dt.datetime)
        except (StopIteration, ValueError, KeyError):  # croniter's "no more matches"
            return None
        return fire.astimezone(dt.UTC)

    def last_at_or_before(self, at: dt.datetime) -> dt.datetime | None:
        """The latest fire time at or before ``at`` (None if there is none)."""
        probe = at.astimezone(dt.UTC) + dt.timedelta(microseconds=1)
        try:
            fire: dt.datetime = croniter(
                self.expression,
                probe,
                second_at_beginning=self.seconds_first,
                max_years_between_matches=_MAX_YEARS,
            ).get_prev(dt.datetime)
        except (StopIteration, ValueError, KeyError):
            return None
        return fire.astimezone(dt.UTC)


def parse_cron(expression: object) -> CronSchedule:
    """Validate a cron expression.

    Raises:
        roost.Error: kind Invalid, naming the expected fields, for a malformed expression.
    """
    if not isinstance(expression, str) or not expression.strip():
        raise invalid(f"a cron expression must be a non-empty string, got {shown(expression)}")
    text = " ".join(expression.split())
    count = len(text.split(" "))
    layout = _LAYOUTS.get(count)
    seconds_first = count > 5
    if layout is None or not croniter.is_valid(text, second_at_beginning=seconds_first):
        expected = "; or ".join(f"{n} fields: {fields}" for n, fields in _LAYOUTS.items())
        raise invalid(
            f"bad cron expression {expression!r} (UTC); expected {expected}",
            expression=expression,
        )
    return CronSchedule(text, seconds_first)


def parse_firing_cron(expression: object, what: str = "cron expression") -> CronSchedule:
    """Validate a cron expression that still fires (``app.cron``, ``cron_schedule=``).

    Raises:
        roost.Error: kind Invalid for a malformed expression, or one with no fire time
            after now (a day that never comes, such as February 31st, or a past year).
    """
    schedule = parse_cron(expression)
    if schedule.next_after(dt.datetime.now(dt.UTC)) is None:
        raise invalid(
            f"{what} {expression!r} never fires again (its days never occur, or its years "
            "are past), so nothing would ever run: fix the day, month or year fields",
            expression=expression,
        )
    return schedule
