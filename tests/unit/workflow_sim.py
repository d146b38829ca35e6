"""A sans-IO harness for the workflow driver: run, record, and replay activations.

It stands in for the runtime: it answers commands (activities by a table of functions,
timers by a virtual clock, messages by a queue the test fills) and keeps the history as
the runtime would, so tests can replay it against the same or changed code.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import heapq
from collections.abc import Callable
from typing import Any

from roost import Error, Pid
from roost.actors._current import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.storage import Codec
from roost.workflow._driver import Driver, Ports, Status
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    MessageArrived,
    ScheduleActivity,
    SendMessage,
    Started,
    StartTimer,
    TimerFired,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CODEC = Codec()


def check(value: Any, what: str) -> None:
    CODEC.encode(value, what=what)


class SimPorts(Ports):
    """Workflow code runs as ``pid``; values are checked; no PIDs are handed out."""

    def __init__(self, pid: Pid) -> None:
        self.pid = pid

    def make_context(self, driver: Driver) -> contextvars.Context:
        ctx = contextvars.copy_context()
        ctx.run(set_current, WorkflowProcess(self.pid, None, driver))
        ctx.run(use_backend, driver.backend)
        return ctx

    def check(self, value: object, what: str) -> None:
        check(value, what)


def make_driver(fn: Callable[..., Any], pid: Pid) -> Driver:
    return Driver(fn, SimPorts(pid))


class Sim:
    """Runs a workflow to completion against scripted activities, timers and signals."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        activities: dict[str, Callable[..., Any]] | None = None,
        signals: list[tuple[float, str, Any]] | None = None,
        seed: int = 7,
    ) -> None:
        self.pid = Pid("local", "t:workflows", "wf-1")
        self.fn = fn
        self.driver = make_driver(fn, self.pid)
        self.activities = activities or {}
        self.clock = 0.0
        self.due: list[tuple[float, int, Any]] = []  # (time, order, event)
        self.order = 0
        self.history: list[Activation] = []
        self.sent: list[SendMessage] = []
        self.started = Started(
            workflow_id="wf-1", run_id="r-1", workflow_type="t:wf", args=list(args), seed=seed
        )
        for at, topic, payload in signals or []:
            self._schedule(at, MessageArrived(topic=topic, payload=payload, sender=None))

    def _schedule(self, at: float, event: Any) -> None:
        self.order += 1
        heapq.heappush(self.due, (at, self.order, event))

    def _react(self, commands: list[Any]) -> None:
        for cmd in commands:
            match cmd:
                case ScheduleActivity(seq=seq, entry=entry, args=args):
                    try:
                        value, error = self.activities[entry](*args), None
                    except Error as exc:
                        value, error = None, exc
                    # Activities finish "now" but arrive in a later activation.
                    self._schedule(self.clock, ActivityResolved(seq=seq, value=value, error=error))
                case StartTimer(seq=seq, seconds=seconds):
                    self._schedule(self.clock + seconds, TimerFired(seq=seq))
                case SendMessage():
                    self.sent.append(cmd)

    def run(self, max_steps: int = 10_000, crash_at: int | None = None) -> Driver:
        """Activate until the run ends (or nothing is left to deliver).

        With ``crash_at=k``, the driver is thrown away after ``k`` activations and rebuilt
        by replaying the history so far, as a node restarting on its data dir would.
        """
        self._activate([self.started])
        while self.driver.status == Status.RUNNING and self.due and max_steps:
            if len(self.history) == crash_at:
                self.driver.close()
                self.driver = replay(self.fn, self.history)
            max_steps -= 1
            at = self.due[0][0]
            self.clock = max(self.clock, at)
            batch = []
            while self.due and self.due[0][0] <= self.clock:
                batch.append(heapq.heappop(self.due)[2])
            self._activate(batch)
        return self.driver

    def _activate(self, events: list[Any]) -> None:
        at = T0 + dt.timedelta(seconds=self.clock)
        commands = self.driver.activate(at, events)
        self.history.append(
            Activation(index=len(self.history) + 1, at=at, events=events, commands=commands)
        )
        self._react(commands)


def replay(fn: Callable[..., Any], history: list[Activation]) -> Driver:
    """Replay a recorded history against ``fn``; raises NondeterminismError on divergence."""
    driver = make_driver(fn, Pid("local", "t:workflows", "wf-1"))
    for act in history:
        driver.activate(act.at, act.events, expected=act.commands)
    return driver
