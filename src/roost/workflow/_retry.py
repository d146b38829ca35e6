"""``roost.RetryPolicy`` and the pure retry decision for activities."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from roost._backoff import capped_backoff
from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid

__all__ = ["RetryPolicy", "activity_options", "next_retry"]


def _seconds(value: Duration | None) -> float | None:
    return None if value is None else parse_duration(value, what="retry interval")


def _kinds(values: Iterable[Any]) -> tuple[ErrorKind, ...]:
    if isinstance(values, str):
        raise invalid("non_retryable_error_kinds takes a list of kinds, not a string")
    try:
        return tuple(ErrorKind(v) for v in values)
    except ValueError as exc:
        raise invalid(f"unknown error kind in non_retryable_error_kinds: {exc}") from None


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How an activity is retried (Temporal's policy).

    Attempt n (n >= 2) waits ``min(initial_interval * backoff_coefficient^(n-2),
    maximum_interval)``; ``maximum_interval`` defaults to 100 x ``initial_interval``;
    ``maximum_attempts=0`` means unlimited. Errors with ``retryable=False`` or a kind in
    ``non_retryable_error_kinds`` are never retried.
    """

    initial_interval: float = attrs.field(default=1.0, converter=parse_duration)
    backoff_coefficient: float = 2.0
    maximum_interval: float | None = attrs.field(default=None, converter=_seconds)
    maximum_attempts: int = 0
    non_retryable_error_kinds: tuple[ErrorKind, ...] = attrs.field(default=(), converter=_kinds)

    def __attrs_post_init__(self) -> None:
        coefficient = self.backoff_coefficient
        if isinstance(coefficient, bool) or not isinstance(coefficient, int | float):
            raise invalid(f"backoff_coefficient must be a number >= 1, got {coefficient!r}")
        if coefficient < 1:
            raise invalid(f"backoff_coefficient must be >= 1, got {coefficient}")
        attempts = self.maximum_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise invalid(f"maximum_attempts must be an int >= 0 (0 = unlimited), got {attempts!r}")

    @property
    def cap(self) -> float:
        """The effective maximum interval."""
        if self.maximum_interval is not None:
            return self.maximum_interval
        return 100 * self.initial_interval

    def to_dict(self) -> dict[str, Any]:
        """A plain form, as stored with an activity task."""
        return {
            "initial_interval": self.initial_interval,
            "backoff_coefficient": self.backoff_coefficient,
            "maximum_interval": self.maximum_interval,
            "maximum_attempts": self.maximum_attempts,
            "non_retryable_error_kinds": [k.value for k in self.non_retryable_error_kinds],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        """Rebuild from ``to_dict``."""
        return cls(**data)


_OPTION_KEYS = frozenset(
    {"retry_policy", "start_to_close_timeout", "schedule_to_close_timeout", "heartbeat_timeout"}
)


def activity_options(*sources: Mapping[str, Any]) -> dict[str, Any]:
    """Merge activity options (later sources win) into the plain form stored with a task.

    Raises:
        roost.Error: kind Invalid for an unknown key or a bad value.
    """
    merged: dict[str, Any] = {}
    for source in sources:
        for name, value in source.items():
            if name not in _OPTION_KEYS:
                known = ", ".join(sorted(_OPTION_KEYS))
                raise invalid(f"unknown activity option {name!r}; known: {known}")
            merged[name] = value
    out: dict[str, Any] = {"start_to_close_timeout": 600.0}
    for name, value in merged.items():
        if name == "retry_policy":
            policy = RetryPolicy(**value) if isinstance(value, Mapping) else value
            if not isinstance(policy, RetryPolicy):
                raise invalid(f"retry_policy must be a roost.RetryPolicy, got {value!r}")
            out[name] = policy.to_dict()
        elif value is not None:
            out[name] = parse_duration(value, what=name, allow_zero=False)
    return out


def next_retry(options: Mapping[str, Any], attempt: int, error: Error) -> float | None:
    """Seconds to wait before attempt ``attempt + 1``, or None to give up."""
    policy = RetryPolicy.from_dict(options.get("retry_policy") or {})
    if error.retryable is False or error.kind in policy.non_retryable_error_kinds:
        return None
    if policy.maximum_attempts and attempt >= policy.maximum_attempts:
        return None
    return capped_backoff(
        policy.initial_interval, policy.backoff_coefficient, attempt - 1, policy.cap
    )
