"""Checking what the properties ran: replays, outcome comparison and readable reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from roost._errors import Error, NondeterminismError
from roost._pid import Pid
from roost.actors._app import App
from roost.testing._property_values import CrashPoint, Outcome, _normal, _Report, _short
from roost.workflow._history import (
    ActivityResolved,
    CancelRequested,
    MessageArrived,
    ProcessExited,
    Started,
    TimerFired,
    describe,
    unflatten,
)
from roost.workflow._replayer import Replayer

__all__: list[str] = []

_SHOWN_ACTIVATIONS = 8  # how much history an assertion message shows
_LINE = 110  # longest line of history an assertion message shows


def _check_replays(app: App, report: _Report, label: str) -> None:
    replayer = Replayer(app)
    for workflow_id, history in report.histories.items():
        if not history:
            continue  # started and stopped before its first step: nothing to replay
        recorded = report.outcomes[workflow_id]
        expected: tuple[Any, ...]
        if recorded.status == "failed":
            expected = ("error", recorded.error_kind, recorded.error_message)
        else:
            expected = ("result", recorded.result)
        try:
            got: tuple[Any, ...] = ("result", _normal(replayer.replay(history)))
        except NondeterminismError as exc:
            message = _diverged_message(workflow_id, history, exc, report, label)
            raise AssertionError(message) from exc
        except Error as err:
            got = ("error", err.kind, err.message)
        if got != expected:
            shown = Outcome("failed", None, *got[1:]) if got[0] == "error" else got[1]
            raise AssertionError(
                f"replaying workflow {workflow_id!r} ({label}) ended differently from the "
                f"run that recorded it:\n"
                f"    recorded: {recorded}\n"
                f"    replayed: {_short(shown, 400)}\n"
                f"{report.story()}\n"
                "The workflow's code depends on something replay does not reproduce "
                "(a global, the clock, randomness): read those through roost.now(), "
                "roost.random() or an activity.\n"
                f"  history:\n{_history_text(history)}"
            )


def _diverged_message(
    workflow_id: str,
    history: list[Any],
    exc: NondeterminismError,
    report: _Report,
    label: str,
) -> str:
    activation = exc.details.get("activation")
    upto = activation if isinstance(activation, int) else None
    return (
        f"replaying workflow {workflow_id!r} ({label}) diverged from its history:\n"
        f"    {exc.message}\n"
        f"    position: activation {activation} of {len(unflatten(history))}; code line "
        f"{exc.details.get('location')}\n"
        f"    outcome of the run: {report.outcomes[workflow_id]}\n"
        f"{report.story()}\n"
        f"  history up to the divergence:\n{_history_text(history, upto)}"
    )


def _compare(calm: _Report, crashed: _Report, points: Sequence[CrashPoint]) -> None:
    ids = [calm.workflow_id, *sorted(set(calm.outcomes) | set(crashed.outcomes))]
    for workflow_id in dict.fromkeys(ids):
        a = calm.outcomes.get(workflow_id)
        b = crashed.outcomes.get(workflow_id)
        if a == b:
            continue
        which = "the workflow" if workflow_id == calm.workflow_id else "child workflow"
        raise AssertionError(
            f"crashes changed the outcome of {which} {workflow_id!r}:\n"
            f"    without crashes: {a if a is not None else 'never started'}\n"
            f"    with crashes:    {b if b is not None else 'never started'}\n"
            f"  crash points: {', '.join(map(str, points)) or 'none'}\n"
            f"  the run without crashes:\n{calm.story()}\n"
            f"  the run with crashes:\n{crashed.story()}\n"
            f"{_first_difference(workflow_id, calm, crashed)}"
        )


def _first_difference(workflow_id: str, calm: _Report, crashed: _Report) -> str:
    """Where the two runs' histories of ``workflow_id`` part: commands, then events."""
    a_hist = calm.histories.get(workflow_id, [])
    b_hist = crashed.histories.get(workflow_id, [])
    for what, a_items, b_items in (
        ("command", _commands(a_hist), _commands(b_hist)),
        ("event", _events(a_hist), _events(b_hist)),
    ):
        for n in range(max(len(a_items), len(b_items))):
            a = a_items[n] if n < len(a_items) else None
            b = b_items[n] if n < len(b_items) else None
            if a is None or b is None or a[1] != b[1]:
                return (
                    f"  the histories of {workflow_id!r} part at {what} #{n + 1}:\n"
                    f"    without crashes: {_at_activation(a)}\n"
                    f"    with crashes:    {_at_activation(b)}\n"
                    f"  history without crashes:\n{_history_text(a_hist)}\n"
                    f"  history with crashes:\n{_history_text(b_hist)}"
                )
    return "  (their histories hold the same commands and events)"


def _commands(history: list[Any]) -> list[tuple[int, str]]:
    return [(act.index, describe(c)) for act in unflatten(history) for c in act.commands]


def _events(history: list[Any]) -> list[tuple[int, str]]:
    return [(act.index, _describe_event(e)) for act in unflatten(history) for e in act.events]


def _at_activation(item: tuple[int, str] | None) -> str:
    return "(history ends)" if item is None else f"{item[1]} (activation {item[0]})"


def _describe_event(event: Any) -> str:  # noqa: PLR0911 - one arm per event kind
    match event:
        case Started(workflow_type=workflow_type):
            return f"started {workflow_type!r}"
        case ActivityResolved(seq=seq, error=None, value=value):
            return f"#{seq} activity returned {_short(value, 60)}"
        case ActivityResolved(seq=seq, error=error):
            return f"#{seq} activity failed: {error}"
        case TimerFired(seq=seq):
            return f"#{seq} timer fired"
        case MessageArrived(topic=topic, payload=payload):
            return f"message {topic!r}: {_short(payload, 60)}"
        case CancelRequested(reason=reason):
            return f"cancel requested ({reason})"
        case ProcessExited(pid=pid, error=None, value=value):
            return f"{_child(pid)} exited: {_short(value, 60)}"
        case ProcessExited(pid=pid, error=error):
            return f"{_child(pid)} exited: {error}"
    return _short(event, 80)


def _child(pid: Pid) -> str:
    """A child workflow by its id; a process by its seq (its PID holds the random run id)."""
    if pid.host.endswith(":workflows"):
        return f"child workflow {pid.id!r}"
    return f"process #{pid.id.rsplit('.', 1)[-1]}"


def _history_text(history: list[Any], upto: int | None = None) -> str:
    """The last few activations (up to ``upto``) as one line each."""
    acts = unflatten(history)
    if upto is not None:
        acts = acts[:upto]
    lines = [] if len(acts) <= _SHOWN_ACTIVATIONS else ["    ..."]
    for act in acts[-_SHOWN_ACTIVATIONS:]:
        events = ", ".join(_describe_event(e) for e in act.events) or "-"
        commands = ", ".join(describe(c) for c in act.commands) or "-"
        lines.append(_short(f"    {act.index}: {events} => {commands}", _LINE))
    return "\n".join(lines) or "    (empty)"
