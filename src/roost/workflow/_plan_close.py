"""What a firing runtime timer does, and who hears of a closed run: pure functions of data.

``plan_timer`` decides what a stored timer that fell due does, by its kind: a workflow
timer becomes a ``TimerFired`` event of its run; a start timer releases a run held for
its start time (``start_delay``, a retry's backoff, a cron fire time); a run or execution
timeout closes the run as ``TIMED_OUT``. ``plan_announce`` decides who hears of a run
that closed for good: every watcher gets its EXIT (a plain process as an event, a
workflow, such as the parent of a child, in its history), and linked processes get a
LINK_DOWN only when the run closed with an error, as Erlang links fire only on an
abnormal exit. ``_timers.py`` and ``_closing.py`` apply the plans.

No trio, no store, no clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Literal

import attrs

from roost._errors import Error
from roost._pid import Pid
from roost.workflow._planner import TimeoutKind, timeout_error

__all__ = [
    "AnnouncePlan",
    "TimerPlan",
    "plan_announce",
    "plan_timer",
    "records_event",
]

TimerAction = Literal["record", "release", "close", "none"]

# Runtime timer kinds that close the run, and the kind of timeout each one is.
_TIMEOUTS: dict[str, TimeoutKind] = {"run_timeout": "run", "execution_timeout": "execution"}


@attrs.frozen(kw_only=True)
class TimerPlan:
    """What a timer that fell due does.

    Attributes:
        action: ``record``: its run records a ``TimerFired`` event (the row goes with
            that step's commit); ``release``: the held run may start; ``close``: the run
            closes as ``TIMED_OUT`` with ``error``; ``none``: nothing (the run closed or
            moved on since, or the kind is unknown), beyond deleting the row.
        error: the timeout error, for ``close``.
    """

    action: TimerAction
    error: Error | None = None


def records_event(kind: str) -> bool:
    """Whether a timer of ``kind`` is workflow code's own (its event goes in the history).

    Its row is deleted by the step that records the event; every other kind's row is
    deleted on its own before the timer acts, so it fires once.
    """
    return kind == "timer"


def plan_timer(
    kind: str, *, workflow_id: str, current: bool, options: Mapping[str, Any]
) -> TimerPlan:
    """What a timer of ``kind`` that fell due does to its run.

    Args:
        kind: the timer's kind (``timer``, ``start``, ``run_timeout``,
            ``execution_timeout``).
        workflow_id: its run's workflow id.
        current: the run it was armed for is still the open run of that id.
        options: the run's chain options (the timeout values).
    """
    if records_event(kind):
        return TimerPlan(action="record")
    if not current:
        return TimerPlan(action="none")
    if kind == "start":
        return TimerPlan(action="release")
    timeout = _TIMEOUTS.get(kind)
    if timeout is None:
        return TimerPlan(action="none")  # a kind this code does not arm
    seconds = float(options.get(kind, 0.0))
    return TimerPlan(action="close", error=timeout_error(workflow_id, timeout, seconds))


@attrs.frozen(kw_only=True)
class AnnouncePlan:
    """Who hears of a run that closed for good.

    Attributes:
        exit_processes: watching processes that get the EXIT as an event.
        exit_workflows: watching workflows of this node (a parent) that record the EXIT in
            their history.
        link_downs: linked processes that get a LINK_DOWN (only when the run has an error).
    """

    exit_processes: tuple[Pid, ...] = ()
    exit_workflows: tuple[Pid, ...] = ()
    link_downs: tuple[Pid, ...] = ()


def plan_announce(
    *,
    watchers: Iterable[Pid],
    links: Iterable[Pid],
    error: Error | None,
    live: Collection[Pid],
    workflow_host: str,
) -> AnnouncePlan:
    """The EXITs and LINK_DOWNs of a run that closed (its final record is committed).

    A watcher that is a live process gets an EXIT event; a watcher on this node's workflow
    host (a parent workflow) gets it in its history; any other watcher is gone and gets
    nothing. A link fires only on an error (failed, terminated, timed out), never on a
    result (completed, or returned after a cancel), and only to a live process. The order
    is the PIDs' text order, so a replayed announcement is the same.

    Args:
        watchers: the run's monitors (its parent among them, for a child).
        links: the processes linked to it.
        error: the run's final error, or None for a result.
        live: the live processes of the node among ``watchers`` and ``links``.
        workflow_host: the host of this node's workflows.
    """
    processes, workflows = [], []
    for pid in sorted(watchers, key=str):
        if pid in live:
            processes.append(pid)
        elif pid.host == workflow_host:
            workflows.append(pid)
    downs = () if error is None else tuple(p for p in sorted(links, key=str) if p in live)
    return AnnouncePlan(
        exit_processes=tuple(processes), exit_workflows=tuple(workflows), link_downs=downs
    )
