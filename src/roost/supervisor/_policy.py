"""The restart decision as a pure function: (history, now, flags, child, exit) -> decision.

No trio and no clock: the supervisor process feeds in the time and a random number (for
jitter), so the rules can be property-tested against OTP's.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from roost._backoff import capped_backoff
from roost._errors import ErrorKind
from roost.supervisor._spec import Backoff, ChildSpec, Restart, Strategy

__all__ = [
    "Decision",
    "Escalate",
    "ExitInfo",
    "Flags",
    "GiveUp",
    "RestartChildren",
    "Stay",
    "backoff_delay",
    "decide",
    "prune",
    "wants_restart",
]


@attrs.frozen(kw_only=True)
class Flags:
    """A supervisor's restart flags."""

    strategy: Strategy = Strategy.ONE_FOR_ONE
    intensity: int = 1
    period: float = 5.0


@attrs.frozen(kw_only=True)
class ExitInfo:
    """How a child ended, as far as restart rules care.

    Attributes:
        normal: it returned without an error.
        error_kind: the error's kind, if it failed.
        retryable: the error's retryable flag, if it failed.
        ran_for: seconds it was up.
    """

    normal: bool
    error_kind: ErrorKind | None = None
    retryable: bool | None = None
    ran_for: float = 0.0


@attrs.frozen(kw_only=True)
class Stay:
    """Do not restart: the child stays down (``delete`` drops a temporary child's spec)."""

    child_id: str
    delete: bool


@attrs.frozen(kw_only=True)
class RestartChildren:
    """Stop ``stop`` (reverse start order), drop ``delete``, then start ``start`` in order.

    ``delay`` seconds pass before the start (service backoff; 0 otherwise); ``attempt`` is
    the failed child's consecutive restart count.
    """

    stop: tuple[str, ...]
    delete: tuple[str, ...]
    start: tuple[str, ...]
    delay: float = 0.0
    attempt: int = 1


@attrs.frozen(kw_only=True)
class GiveUp:
    """A service will not be restarted: its error is terminal or its attempts ran out."""

    child_id: str
    reason: str


@attrs.frozen(kw_only=True)
class Escalate:
    """Restart intensity exceeded: stop every child and fail the supervisor."""

    reason: str
    restarts: int


Decision = Stay | RestartChildren | GiveUp | Escalate


def wants_restart(restart: Restart, exit_info: ExitInfo) -> bool:
    """OTP: permanent always; transient unless normal or shut down; temporary never."""
    match restart:
        case Restart.PERMANENT:
            return True
        case Restart.TRANSIENT:
            return not exit_info.normal and exit_info.error_kind is not ErrorKind.CANCELED
        case Restart.TEMPORARY:
            return False


def prune(history: Sequence[float], now: float, period: float) -> tuple[float, ...]:
    """Drop restarts older than ``period`` (OTP keeps those with now - then <= period)."""
    return tuple(t for t in history if now - t <= period)


def backoff_delay(backoff: Backoff, attempt: int, rand: float) -> float:
    """``min(initial * factor^(attempt-1), max) * (1 ± jitter)``, rand in [0, 1)."""
    base = capped_backoff(backoff.initial_delay, backoff.factor, attempt - 1, backoff.max_delay)
    return max(0.0, base * (1 + backoff.jitter * (2 * rand - 1)))


def _affected(strategy: Strategy, order: Sequence[str], failed: str) -> tuple[str, ...]:
    match strategy:
        case Strategy.ONE_FOR_ONE:
            return (failed,)
        case Strategy.ONE_FOR_ALL:
            return tuple(order)
        case Strategy.REST_FOR_ONE:
            return tuple(order[order.index(failed) :]) if failed in order else (failed,)


def _plan(
    *,
    flags: Flags,
    order: Sequence[str],
    specs: dict[str, ChildSpec],
    failed: str,
    delay: float,
    attempt: int,
) -> RestartChildren:
    affected = _affected(flags.strategy, order, failed)
    others = [cid for cid in affected if cid != failed]
    # Temporary siblings stopped by the strategy are never restarted (OTP).
    delete = tuple(cid for cid in others if specs[cid].restart is Restart.TEMPORARY)
    start = tuple(cid for cid in affected if cid == failed or cid not in delete)
    return RestartChildren(
        stop=tuple(reversed(others)), delete=delete, start=start, delay=delay, attempt=attempt
    )


def decide(
    *,
    flags: Flags,
    order: Sequence[str],
    specs: dict[str, ChildSpec],
    child_id: str,
    exit_info: ExitInfo,
    history: Sequence[float],
    attempts: int,
    now: float,
    rand: float = 0.5,
) -> tuple[Decision, tuple[float, ...], int]:
    """Decide what a supervisor does when ``child_id`` exits on its own.

    Args:
        flags: strategy, intensity, period.
        order: the current children's ids in start order. An id is whatever names one
            child uniquely (the supervisor passes each dynamic child's instance id, as
            they all share the template's spec id); decisions name children the same way.
        specs: child specs by id.
        child_id: the child that exited.
        exit_info: how it exited.
        history: times of restarts that counted toward intensity.
        attempts: the child's consecutive restart count so far (services).
        now: the current time in seconds (any monotonic origin).
        rand: a uniform number in [0, 1) for jitter.

    Returns:
        The decision, the new restart history, and the child's new attempt count.
    """
    spec = specs[child_id]
    if not wants_restart(spec.restart, exit_info):
        return Stay(child_id=child_id, delete=spec.restart is Restart.TEMPORARY), tuple(history), 0
    if spec.backoff is not None:
        return _decide_service(
            flags=flags,
            order=order,
            specs=specs,
            child_id=child_id,
            exit_info=exit_info,
            history=history,
            attempts=attempts,
            rand=rand,
        )
    kept = (*prune(history, now, flags.period), now)
    if len(kept) > flags.intensity:
        reason = (
            f"reached max restart intensity: {len(kept)} restarts in {flags.period:g}s "
            f"(intensity {flags.intensity}); last failing child {child_id!r}"
        )
        return Escalate(reason=reason, restarts=len(kept)), kept, attempts + 1
    plan = _plan(
        flags=flags, order=order, specs=specs, failed=child_id, delay=0.0, attempt=attempts + 1
    )
    return plan, kept, attempts + 1


def _decide_service(
    *,
    flags: Flags,
    order: Sequence[str],
    specs: dict[str, ChildSpec],
    child_id: str,
    exit_info: ExitInfo,
    history: Sequence[float],
    attempts: int,
    rand: float,
) -> tuple[Decision, tuple[float, ...], int]:
    spec = specs[child_id]
    backoff = spec.backoff
    assert backoff is not None
    if exit_info.retryable is False:
        why = f"exited with a non-retryable {exit_info.error_kind} error"
        return GiveUp(child_id=child_id, reason=why), tuple(history), attempts
    attempt = 1 if exit_info.ran_for >= spec.stable_threshold else attempts + 1
    if backoff.max_attempts and attempt > backoff.max_attempts:
        why = f"gave up after {backoff.max_attempts} restart attempts"
        return GiveUp(child_id=child_id, reason=why), tuple(history), attempts
    delay = backoff_delay(backoff, attempt, rand)
    plan = _plan(
        flags=flags, order=order, specs=specs, failed=child_id, delay=delay, attempt=attempt
    )
    return plan, tuple(history), attempt
