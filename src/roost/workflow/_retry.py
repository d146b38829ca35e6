"""``roost.RetryPolicy`` and the pure retry decision for activities."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from roost._backoff import capped_backoff
from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid

# The smallest interval unlimited retries may settle at: below it a failing activity is
# retried in a hot loop (thousands of attempts a second) for ever.
MIN_UNLIMITED_INTERVAL: Final = 0.001

__all__ = ["RetryPolicy", "activity_options", "next_retry", "retry_policy"]


def _seconds(value: Duration | None) -> float | None:
    return None if value is None else parse_duration(value, what="retry interval")


def _kinds(values: Iterable[Any]) -> tuple[ErrorKind, ...]:
    if isinstance(values, str):
        raise invalid("non_retryable_error_kinds takes a list of kinds, not a string")
    try:
        return tuple(ErrorKind(v) for v in values)
    except (ValueError, TypeError):
        known = ", ".join(k.value for k in ErrorKind)
        raise invalid(
            f"non_retryable_error_kinds takes a list of error kinds ({known}), got {values!r}"
        ) from None


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
        if not (math.isfinite(coefficient) and coefficient >= 1):
            raise invalid(f"backoff_coefficient must be a finite number >= 1, got {coefficient}")
        attempts = self.maximum_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise invalid(f"maximum_attempts must be an int >= 0 (0 = unlimited), got {attempts!r}")
        if self.maximum_interval is not None and self.maximum_interval < self.initial_interval:
            raise invalid(
                f"maximum_interval ({self.maximum_interval:g}s) must not be less than "
                f"initial_interval ({self.initial_interval:g}s): raise maximum_interval, or "
                "leave it out for 100 x initial_interval",
            )
        if attempts == 0 and self.cap < MIN_UNLIMITED_INTERVAL:
            raise invalid(
                f"a retry interval that never grows past {self.cap:g}s with unlimited attempts "
                "(maximum_attempts=0) retries a failing activity in a hot loop: give "
                f"initial_interval (or maximum_interval) at least {MIN_UNLIMITED_INTERVAL:g}s, "
                "such as '1s', or set maximum_attempts",
                initial_interval=self.initial_interval,
                maximum_interval=self.cap,
            )

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


_POLICY_KEYS: Final = tuple(f.name for f in attrs.fields(RetryPolicy))
# Wippy's spelling of the same list (matched against error kinds there too).
_ALIASES: Final = {"non_retryable_error_types": "non_retryable_error_kinds"}


def retry_policy(value: Any, what: str = "retry_policy") -> RetryPolicy:
    """A ``RetryPolicy`` as given, or built from its keyword mapping.

    Raises:
        roost.Error: kind Invalid for another type, an unknown key (the message lists the
            known ones) or a bad value.
    """
    if isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        raise invalid(f"{what} must be a roost.RetryPolicy or its keyword dict, got {value!r}")
    fields: dict[str, Any] = {}
    for name, field_value in value.items():
        canonical = _ALIASES.get(name, name) if isinstance(name, str) else name
        if canonical not in _POLICY_KEYS:
            raise invalid(
                f"{what} has an unknown key {name!r}; known keys: {', '.join(_POLICY_KEYS)} "
                f"(and {', '.join(_ALIASES)}, Wippy's name for {', '.join(_ALIASES.values())})",
                key=repr(name),
            )
        if canonical in fields:
            raise invalid(f"{what} gives {canonical!r} twice (also as {name!r}): keep one of them")
        fields[canonical] = field_value
    return RetryPolicy(**fields)


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
            out[name] = retry_policy(value).to_dict()
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
