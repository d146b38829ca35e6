"""Reusable properties of workflows: replay is deterministic, and crashes change nothing.

Both run the workflow for real: a node on a fresh temporary LMDB store, in the caller's trio
run. Tests run them under trio's ``MockClock(autojump_threshold=0)`` (pytest-trio's
``autojump_clock`` fixture, or ``trio.run(..., clock=MockClock(autojump_threshold=0))``), so
that virtual time skips ahead whenever everything waits: a workflow that sleeps for days,
scheduled signals and the ``horizon`` all take no real time. Under the default clock the
same code works in real time (signals and crash points wait real seconds, and a workflow
that never finishes holds the caller until the horizon).

A "crash" closes the node: everything in memory stops at once (no shutdown grace: plain
processes are killed, running activities abandoned, cached workflow state dropped), then a
new node opens on the same data directory and recovers every open workflow by replaying its
history, as after a real crash.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from roost import process
from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.actors._app import App, EntryKind
from roost.actors._events import Exit
from roost.actors._open import NodeHandle, open_node
from roost.testing._property_checks import _check_replays, _compare
from roost.testing._property_values import (
    CrashPoint,
    Outcome,
    _crash_point,
    _normal,
    _Plan,
    _Report,
    _Signal,
    _signal,
)

__all__ = ["CrashPoint", "Outcome", "assert_crash_equivalent", "assert_replay_deterministic"]

log = logging.getLogger("roost.testing")

_DEFAULT_ID = "roost-property"


# -- the properties ---------------------------------------------------------------------------


async def assert_replay_deterministic(
    app: App,
    entry: Any,
    *args: Any,
    signals: Iterable[Any] = (),
    horizon: Duration = "30d",
    node_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Outcome:
    """Run a workflow to its end on a fresh node, then check that its history replays.

    The workflow starts with ``args`` and the start ``options`` (``id`` defaults to
    ``"roost-property"``) on a node with a temporary store, gets the scheduled ``signals``,
    and runs until it closes or ``horizon`` (virtual time) has passed. Then the history of
    the workflow and of every child workflow it started is replayed with
    ``roost.testing.Replayer`` against the current code: each replay must issue the
    recorded commands (no ``NondeterminismError``) and end with the recorded outcome (the
    same result, or an error of the same kind and message).

    Call it from a trio test under a ``MockClock`` with autojump (see the module notes).

    Args:
        app: the app holding the workflow and everything it calls.
        entry: the workflow entry (its id, ``"app:order"``, or the decorated function).
        *args: the workflow's input.
        signals: ``(at, topic)`` or ``(at, topic, payload)`` tuples: a message sent to the
            workflow ``at`` virtual seconds (or a duration such as ``"2h"``) after the
            start, once everything due at that time has happened. A signal for a workflow
            that has closed is dropped.
        horizon: how long (virtual time) to let the workflow run; one still open then has
            the outcome ``Outcome("running")``, and its history so far is replayed.
        node_options: keyword arguments for ``roost.open_node`` (``workflow_cache=1`` makes
            the live run itself rebuild the workflow by replay at every step).
        **options: workflow start options, as for ``process.with_options``.

    Returns:
        The workflow's ``Outcome``.

    Raises:
        AssertionError: a replay diverged or ended differently; the message shows both
            outcomes and the history around the divergence.
        roost.Error: the workflow could not be started (unknown entry, bad input, ...).

    Example::

        async def test_order_replays(autojump_clock):
            outcome = await assert_replay_deterministic(
                app, "shop:order", {"id": "o-1"}, signals=[("1h", "paid", 42)]
            )
            assert outcome.status == "completed"
    """
    plan = _plan(
        app, entry, args, options, signals=signals, horizon=horizon, node_options=node_options
    )
    report = await _execute(plan, [])
    _check_replays(app, report, "the run")
    return report.outcome


async def assert_crash_equivalent(
    app: App,
    entry: Any,
    *args: Any,
    crash_points: Iterable[CrashPoint | Duration],
    signals: Iterable[Any] = (),
    horizon: Duration = "30d",
    node_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> Outcome:
    """Crashing the node at the given points must not change how the workflow ends.

    Two runs of the workflow go side by side on one virtual timeline, each on its own
    fresh node: one undisturbed, one crashed at every point of ``crash_points`` (the node
    is closed, losing everything in memory, and reopened on the same data directory, where
    it recovers the workflow by replay). Both get the same ``signals`` at the same times.
    They must end with equal outcomes, for the workflow and for every child workflow (by
    id), and the history of every workflow of both runs must replay cleanly (see
    ``assert_replay_deterministic``).

    What is compared is the outcome (status, result, error kind and message), so the
    workflow's result must not carry values that differ from one run to another anyway:
    ``roost.uuid4()``/``roost.random()`` values, run ids, idempotency keys. Times
    (``roost.now()``) are fine: both runs share one timeline.

    Call it from a trio test under a ``MockClock`` with autojump (see the module notes).

    Args:
        app: the app holding the workflow and everything it calls.
        entry: the workflow entry (its id, ``"app:order"``, or the decorated function).
        *args: the workflow's input.
        crash_points: where to crash: ``CrashPoint(at=...)``, ``CrashPoint(activation=n)``,
            or a plain duration meaning ``CrashPoint(at=duration)``. Points past the end
            of the run are not reached; several points of one instant crash repeatedly.
        signals: as for ``assert_replay_deterministic``; at the same time, signals come
            before a crash.
        horizon: how long (virtual time) to let each run go on.
        node_options: keyword arguments for ``roost.open_node``.
        **options: workflow start options, as for ``process.with_options``.

    Returns:
        The workflow's ``Outcome`` (of the undisturbed run).

    Raises:
        AssertionError: the outcomes differ, or a history does not replay; the message
            shows both outcomes, the crashes that happened and the first command where the
            two histories part.
        roost.Error: the workflow could not be started.

    Example::

        async def test_order_survives_crashes(autojump_clock):
            await assert_crash_equivalent(
                app, "shop:order", {"id": "o-1"},
                crash_points=[CrashPoint(activation=2), "30m"],
                signals=[("1h", "paid", 42)],
            )
    """
    points = [_crash_point(p) for p in crash_points]
    plan = _plan(
        app, entry, args, options, signals=signals, horizon=horizon, node_options=node_options
    )
    reports: list[_Report | None] = [None, None]
    errors: list[BaseException] = []

    async def one(index: int, crashes: list[CrashPoint]) -> None:
        try:
            reports[index] = await _execute(plan, crashes)
        except Exception as exc:  # noqa: BLE001 - re-raised as is below
            errors.append(exc)
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(one, 0, [])
        nursery.start_soon(one, 1, points)
    if errors:
        raise errors[0]
    calm, crashed = reports
    assert calm is not None
    assert crashed is not None
    _check_replays(app, calm, "the run without crashes")
    _check_replays(app, crashed, "the run with crashes")
    _compare(calm, crashed, points)
    return calm.outcome


# -- running ----------------------------------------------------------------------------------


def _plan(
    app: App,
    entry: Any,
    args: tuple[Any, ...],
    options: Mapping[str, Any],
    *,
    signals: Iterable[Any],
    horizon: Duration,
    node_options: Mapping[str, Any] | None,
) -> _Plan:
    if not isinstance(app, App):
        raise invalid(f"the first argument must be a roost.App, got {type(app).__name__}")
    resolved = app.resolve(entry)
    if resolved.kind is not EntryKind.WORKFLOW:
        raise invalid(f"{resolved.id!r} is not a workflow entry")
    return _Plan(
        app=app,
        entry=resolved.id,
        args=args,
        options={"id": _DEFAULT_ID, **options},
        # A crash has no grace period: nothing gets time to stop cleanly.
        node_options={"durability": "fast", "shutdown_grace": 0, **(node_options or {})},
        signals=tuple(_signal(s) for s in signals),
        horizon=parse_duration(horizon, what="horizon"),
    )


class _Threshold(trio.abc.Instrument):
    """Sets ``reached`` after the first task step at which ``count() >= target``."""

    def __init__(self, count: Callable[[], int], target: int, reached: trio.Event) -> None:
        self.count = count
        self.target = target
        self.reached = reached

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if not self.reached.is_set() and self.count() >= self.target:
            self.reached.set()


async def _until(count: Callable[[], int], target: int) -> None:
    """Return after the first task step at which ``count() >= target``."""
    if count() >= target:
        return
    reached = trio.Event()
    watch = _Threshold(count, target, reached)
    trio.lowlevel.add_instrument(watch)
    try:
        await reached.wait()
    finally:
        trio.lowlevel.remove_instrument(watch)


def _activations(node: NodeHandle) -> Callable[[], int]:
    """The number of activations this node has committed (replays not counted)."""
    manager = node._node.local_workflows  # the stats are the embedded host's own
    if manager is None:
        return lambda: 0
    stats: dict[str, int] = manager.stats
    return lambda: stats["activations"]


def _task_failures(node: NodeHandle) -> Callable[[], int]:
    """The number of workflow tasks that failed on this node."""
    manager = node._node.local_workflows  # the stats are the embedded host's own
    if manager is None:
        return lambda: 0
    stats: dict[str, int] = manager.stats
    return lambda: stats["task_failures"]


async def _settle() -> None:
    from trio.testing import wait_all_tasks_blocked  # noqa: PLC0415 - keeps pytest out

    await wait_all_tasks_blocked()


async def _execute(plan: _Plan, crash_points: Sequence[CrashPoint]) -> _Report:
    """Run ``plan`` on a fresh store, crashing at ``crash_points``; report what it left."""
    return await _Run(plan, crash_points).execute()


class _Run:
    """One run of a plan: node incarnations on one data directory, until the workflow ends."""

    def __init__(self, plan: _Plan, crash_points: Sequence[CrashPoint]) -> None:
        self.plan = plan
        self.t0 = trio.current_time()
        # Timed actions in order; at one time, signals first (in the given order), then
        # crashes.
        timed: list[tuple[float, int, int, _Signal | CrashPoint]] = [
            (s.at, 0, i, s) for i, s in enumerate(plan.signals)
        ]
        timed += [(p.at, 1, i, p) for i, p in enumerate(crash_points) if p.at is not None]
        timed.sort(key=lambda item: item[:3])
        self.actions: list[_Signal | CrashPoint] = [item[3] for item in timed]
        self.marks = sorted(p.activation for p in crash_points if p.activation is not None)
        self.report = _Report(plan.workflow_id)
        self.before = 0  # activations committed by earlier incarnations
        self.here: Callable[[], int] = lambda: 0  # those of the current one
        self.pid: Pid | None = None

    def elapsed(self) -> float:
        return trio.current_time() - self.t0

    def activations(self) -> int:
        return self.before + self.here()

    async def execute(self) -> _Report:
        plan = self.plan
        with tempfile.TemporaryDirectory(prefix="roost-property-") as data_dir:
            while True:
                async with _plain_errors(), trio.open_nursery() as holder:
                    async with open_node(plan.app, data_dir, **plan.node_options) as node:
                        self.here = _activations(node)
                        if self.pid is None:
                            spawner = process.with_options(plan.options)
                            self.pid = await spawner.spawn(plan.entry, *plan.args)
                        process.monitor(self.pid)
                        crash = await self.drive(self.pid, _task_failures(node))
                        if crash is None:
                            await _settle()
                            _collect(node, self.report)
                            return self.report
                        # The node closes its store in a worker thread; an autojumping clock
                        # would let virtual time pass meanwhile (if anything else in this
                        # trio run waits for a deadline). A restart takes no virtual time:
                        # keep one task runnable until the node has closed.
                        holder.start_soon(_hold_time)
                    holder.cancel_scope.cancel()
                # Read after the close: whatever committed on the way down counts.
                self.before += self.here()
                self.report.crashes.append(crash)
                log.info("crashed the node of workflow %r %s", plan.workflow_id, crash)

    async def drive(self, pid: Pid, task_failures: Callable[[], int]) -> str | None:
        """Deliver signals until the workflow closes (None) or a crash point comes (its text).

        A failed workflow task (a divergence on replay, say) ends the run too: its retries
        would only fail the same way until the horizon.
        """
        stop: list[str | None] = []
        async with _plain_errors(), trio.open_nursery() as nursery:

            def finish(why: str | None) -> None:
                if not stop:
                    stop.append(why)
                    nursery.cancel_scope.cancel()

            async def exited() -> None:
                events = process.events()
                while True:
                    event = await events.receive()
                    if isinstance(event, Exit) and event.pid == pid:
                        self.report.ended = f"the workflow closed at {self.elapsed():g}s"
                        finish(None)
                        return

            async def crash_after_activation() -> None:
                target = self.marks[0]
                await _until(self.activations, target)
                self.marks.pop(0)
                finish(f"after activation {target} (at {self.elapsed():g}s)")

            async def task_failed() -> None:
                await _until(task_failures, 1)
                self.report.ended = f"a workflow task failed at {self.elapsed():g}s"
                finish(None)

            nursery.start_soon(exited)
            nursery.start_soon(task_failed)
            if self.marks:
                nursery.start_soon(crash_after_activation)
            horizon = self.plan.horizon
            while self.actions and (self.actions[0].at or 0.0) <= horizon:
                action = self.actions[0]
                await trio.sleep_until(self.t0 + (action.at or 0.0))
                await _settle()
                self.actions.pop(0)
                if isinstance(action, CrashPoint):
                    finish(f"at {action.at:g}s")
                    break
                await _deliver(pid, action, self.report)
            else:
                await trio.sleep_until(self.t0 + horizon)
                await _settle()
                self.report.ended = f"still open at the horizon ({horizon:g}s)"
                finish(None)
        return stop[0] if stop else None


@asynccontextmanager
async def _plain_errors() -> AsyncIterator[None]:
    """Let a nursery's one error out as itself, not wrapped in an exception group."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _hold_time() -> None:
    """Stay runnable (until cancelled), so that an autojumping clock cannot move."""
    while True:
        await trio.lowlevel.checkpoint()


async def _deliver(pid: Pid, signal: _Signal, report: _Report) -> None:
    try:
        receipt = process.send(pid, signal.topic, signal.payload)
        with trio.CancelScope(shield=True):  # a crash waits until it is in the history
            await receipt
    except Error as err:
        if err.kind is not ErrorKind.NOT_FOUND:
            raise
        report.deliveries.append(f"{signal}: dropped (the workflow had closed)")
    else:
        report.deliveries.append(f"{signal}: delivered")


def _collect(node: NodeHandle, report: _Report) -> None:
    for row in node.list_workflows():
        workflow_id = row["workflow_id"]
        report.outcomes[workflow_id] = _outcome(row)
        report.histories[workflow_id] = node.history(workflow_id)


def _outcome(row: Mapping[str, Any]) -> Outcome:
    status = str(row["status"])
    error: Error | None = row["error"]
    result = _normal(row["result"]) if status in ("completed", "canceled") else None
    if error is None:
        return Outcome(status, result)
    return Outcome(status, result, error.kind, error.message)
