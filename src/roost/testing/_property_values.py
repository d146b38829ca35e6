"""The values the workflow properties take and report: outcomes, crash points, signals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from roost._duration import Duration, parse_duration
from roost._errors import ErrorKind, invalid
from roost.actors._app import App
from roost.storage import Codec

__all__ = ["CrashPoint", "Outcome"]

_CODEC = Codec()


# -- values -----------------------------------------------------------------------------------


@attrs.frozen
class Outcome:
    """How a workflow ended (or where it stood at the horizon), comparable across runs.

    Attributes:
        status: ``"completed"``, ``"failed"``, ``"canceled"``, ``"terminated"``,
            ``"timed_out"``, or ``"running"`` (still open when the run stopped).
        result: the workflow's result (completed or canceled), as the store recorded it
            (a tuple comes back a list); None otherwise.
        error_kind: the error's kind, for a workflow that ended with an error.
        error_message: the error's message.
    """

    status: str
    result: Any = None
    error_kind: ErrorKind | None = None
    error_message: str | None = None

    def __str__(self) -> str:
        if self.error_kind is not None:
            return f"{self.status}: {self.error_kind.value}: {self.error_message}"
        if self.status in ("completed", "canceled"):
            return f"{self.status}: {_short(repr(self.result), 400)}"
        return self.status


def _seconds_or_none(value: Duration | None) -> float | None:
    return None if value is None else parse_duration(value, what="CrashPoint.at")


@attrs.frozen
class CrashPoint:
    """Where ``assert_crash_equivalent`` crashes the node: give exactly one of the two.

    Attributes:
        at: a virtual time after the start (a duration: ``12.5``, ``"1h"``). The crash
            comes once everything due at that time has happened (timers fired, signals
            scheduled for that time delivered, every workflow blocked).
        activation: crash right after the ``activation``-th workflow activation (a step of
            the workflow or of one of its child workflows, counted from the start of the
            run, crashes included) has committed: the node stops within one scheduling
            round of that commit, often before the activities and child workflows it
            started have run, or before their results are recorded.
    """

    at: float | None = attrs.field(default=None, converter=_seconds_or_none)
    activation: int | None = None

    def __attrs_post_init__(self) -> None:
        if (self.at is None) == (self.activation is None):
            raise invalid(
                "a CrashPoint takes exactly one of at=<virtual time> and activation=<n>, "
                f"got at={self.at!r}, activation={self.activation!r}"
            )
        act = self.activation
        if act is not None and (isinstance(act, bool) or not isinstance(act, int) or act < 1):
            raise invalid(f"CrashPoint.activation must be an int >= 1, got {act!r}")

    def __str__(self) -> str:
        if self.at is not None:
            return f"at {self.at:g}s"
        return f"after activation {self.activation}"


def _crash_point(value: CrashPoint | Duration) -> CrashPoint:
    return value if isinstance(value, CrashPoint) else CrashPoint(at=value)


@attrs.frozen
class _Signal:
    at: float
    topic: str
    payload: Any

    def __str__(self) -> str:
        return f"{self.topic!r}={_short(self.payload, 40)} at {self.at:g}s"


def _signal(value: Any) -> _Signal:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) not in (2, 3):
        raise invalid(f"a signal is a tuple (at, topic) or (at, topic, payload), got {value!r}")
    topic = value[1]
    if not isinstance(topic, str) or not topic:
        raise invalid(f"a signal's topic must be a non-empty string, got {topic!r}")
    payload = value[2] if len(value) == 3 else None
    return _Signal(parse_duration(value[0], what="signal time"), topic, payload)


@attrs.frozen
class _Plan:
    """One workflow run to make, and how to disturb it."""

    app: App
    entry: Any
    args: tuple[Any, ...]
    options: dict[str, Any]
    node_options: dict[str, Any]
    signals: tuple[_Signal, ...]
    horizon: float

    @property
    def workflow_id(self) -> str:
        return str(self.options["id"])


@attrs.define
class _Report:
    """What one run left behind: every workflow's outcome and history, and what happened."""

    workflow_id: str
    outcomes: dict[str, Outcome] = attrs.Factory(dict)
    histories: dict[str, list[Any]] = attrs.Factory(dict)
    crashes: list[str] = attrs.Factory(list)
    deliveries: list[str] = attrs.Factory(list)
    ended: str = "?"

    @property
    def outcome(self) -> Outcome:
        return self.outcomes.get(self.workflow_id, Outcome("never started"))

    def story(self) -> str:
        lines = [f"    run ended: {self.ended}"]
        if self.crashes:
            lines.append(f"    crashes: {'; '.join(self.crashes)}")
        if self.deliveries:
            lines.append(f"    signals: {'; '.join(self.deliveries)}")
        return "\n".join(lines)


def _normal(value: Any) -> Any:
    """``value`` as the store gives it back (tuples become lists, and so on)."""
    return _CODEC.decode(_CODEC.encode(value, what="workflow result"))


def _short(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
