"""Supervisor and child specifications: attrs records, validated before anything starts."""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from roost._duration import Duration, parse_duration
from roost._errors import invalid
from roost._pid import Pid

__all__ = [
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "ChildType",
    "Restart",
    "Strategy",
    "SupervisorSpec",
    "child",
    "order_by_requires",
]

INFINITY = float("inf")
BRUTAL_KILL = 0.0


class Strategy(enum.StrEnum):
    """Which children restart when one fails (OTP's strategies)."""

    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


class Restart(enum.StrEnum):
    """When a child is restarted (OTP's meanings)."""

    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class ChildType(enum.StrEnum):
    """Workers do the work; supervisors supervise (default shutdown differs)."""

    WORKER = "worker"
    SUPERVISOR = "supervisor"


def _enum(cls: type[enum.StrEnum], value: Any, what: str) -> Any:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in cls)
        raise invalid(f"{what} must be one of {allowed}, got {value!r}") from None


def _initial_delay(value: Duration) -> float:
    return parse_duration(value, what="initial_delay")


def _max_delay(value: Duration) -> float:
    return parse_duration(value, what="max_delay")


@attrs.frozen(kw_only=True)
class Backoff:
    """Restart backoff for a service child.

    The n-th consecutive restart waits ``min(initial * factor^(n-1), max) * (1 ± jitter)``;
    the count resets once the child stayed up ``stable_threshold``. ``max_attempts=0``
    means never give up.
    """

    initial_delay: float = attrs.field(default=1.0, converter=_initial_delay)
    max_delay: float = attrs.field(default=90.0, converter=_max_delay)
    factor: float = 2.0
    jitter: float = 0.1
    max_attempts: int = 0

    def __attrs_post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int | float):
            raise invalid(f"backoff factor must be a number >= 1, got {self.factor!r}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise invalid(f"backoff factor must be a finite number >= 1, got {self.factor}")
        if isinstance(self.jitter, bool) or not 0 <= self.jitter < 1:
            raise invalid(f"backoff jitter must be in [0, 1), got {self.jitter!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise invalid(f"max_attempts must be an int >= 0, got {self.max_attempts!r}")
        if self.max_attempts < 0:
            raise invalid(f"max_attempts must be >= 0 (0 = unlimited), got {self.max_attempts}")
        if self.max_delay < self.initial_delay:
            raise invalid(
                f"max_delay ({self.max_delay}s) must be >= initial_delay ({self.initial_delay}s)"
            )


def _shutdown(value: object) -> float | None:
    if value is None:
        return None
    if value == "brutal_kill":
        return BRUTAL_KILL
    if value == "infinity":
        return INFINITY
    if isinstance(value, str | int | float) or hasattr(value, "total_seconds"):
        return parse_duration(value, what="shutdown")  # type: ignore[arg-type]
    raise invalid(f"shutdown must be 'brutal_kill', a duration or 'infinity', got {value!r}")


@attrs.frozen(kw_only=True)
class ChildSpec:
    """One supervised child.

    Attributes:
        id: unique among its siblings.
        entry: the entry to start (a process or another supervisor).
        args: its arguments.
        restart: permanent | transient | temporary.
        shutdown: seconds to wait after the CANCEL before terminating; 0 is
            "brutal_kill" (terminate at once), inf is "infinity". None picks the default:
            5 s for workers, infinity for supervisors.
        type: worker | supervisor.
        backoff: makes the child a *service*: restarts wait per the backoff, a
            non-retryable error is terminal, and it does not count toward intensity.
        stable_threshold: uptime after which a service's attempt count resets.
        requires: ids of siblings that must start before this one (and stop after it).
    """

    id: str
    entry: Any
    args: tuple[Any, ...] = ()
    restart: Restart = Restart.PERMANENT
    shutdown: float | None = None
    type: ChildType = ChildType.WORKER
    backoff: Backoff | None = None
    stable_threshold: float = 5.0
    requires: tuple[str, ...] = ()

    @property
    def shutdown_timeout(self) -> float:
        """The effective shutdown timeout in seconds (inf for infinity)."""
        if self.shutdown is not None:
            return self.shutdown
        return INFINITY if self.type is ChildType.SUPERVISOR else 5.0


def child(
    id: str,  # noqa: A002 - the API's name for a child id
    entry: Any,
    *args: Any,
    restart: str = "permanent",
    shutdown: Duration | None = None,
    type: str = "worker",  # noqa: A002 - the API's name
    backoff: Backoff | None = None,
    stable_threshold: Duration = "5s",
    requires: Iterable[str] = (),
) -> ChildSpec:
    """Build a child spec (see ``ChildSpec``).

    Raises:
        roost.Error: kind Invalid for a bad id, restart, shutdown, type or backoff.
    """
    if not isinstance(id, str) or not id:
        raise invalid(f"a child id must be a non-empty string, got {id!r}")
    if backoff is not None and not isinstance(backoff, Backoff):
        raise invalid(f"backoff must be a supervisor.Backoff, got {backoff!r}")
    if isinstance(requires, str):
        raise invalid("requires takes a list of child ids, not a string")
    return ChildSpec(
        id=id,
        entry=entry,
        args=args,
        restart=_enum(Restart, restart, "restart"),
        shutdown=_shutdown(shutdown),
        type=_enum(ChildType, type, "type"),
        backoff=backoff,
        stable_threshold=parse_duration(stable_threshold, what="stable_threshold"),
        requires=tuple(requires),
    )


@attrs.frozen(kw_only=True)
class SupervisorSpec:
    """A supervisor: its children (in start order) and restart flags."""

    name: str
    children: tuple[ChildSpec, ...] = ()
    strategy: Strategy = Strategy.ONE_FOR_ONE
    intensity: int = 1
    period: float = 5.0
    template: ChildSpec | None = None

    @property
    def dynamic(self) -> bool:
        """Whether children come from a template at run time."""
        return self.template is not None


def order_by_requires(children: Sequence[ChildSpec]) -> tuple[ChildSpec, ...]:
    """Order children so each starts after the siblings it requires; stable otherwise.

    Raises:
        roost.Error: kind Invalid for a duplicate id, an unknown requirement or a cycle.
    """
    by_id: dict[str, ChildSpec] = {}
    for spec in children:
        if spec.id in by_id:
            raise invalid(f"duplicate child id {spec.id!r}; child ids must be unique")
        by_id[spec.id] = spec
    ordered: list[ChildSpec] = []
    state: dict[str, int] = {}  # 1 = visiting, 2 = done

    def visit(spec: ChildSpec, path: tuple[str, ...]) -> None:
        if state.get(spec.id) == 2:
            return
        if state.get(spec.id) == 1:
            raise invalid(f"children require each other in a cycle: {' -> '.join(path)}")
        state[spec.id] = 1
        for dep in spec.requires:
            if dep not in by_id:
                raise invalid(f"child {spec.id!r} requires unknown sibling {dep!r}")
            visit(by_id[dep], (*path, dep))
        state[spec.id] = 2
        ordered.append(spec)

    for spec in children:
        visit(spec, (spec.id,))
    return tuple(ordered)


@attrs.frozen(kw_only=True)
class ChildInfo:
    """What ``which_children`` reports for one child."""

    id: str
    pid: Pid | None
    type: ChildType
    restart: Restart
