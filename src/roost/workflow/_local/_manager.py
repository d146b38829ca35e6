"""The workflow runtime of a node: start, activate, commit, dispatch, recover.

One activation = one transaction: the activation record, the removal of the inbox events
it consumed, its activity tasks, timers, messages to other workflows and the run's new
status commit together; effects (running activities, arming timers, messages to plain
processes, EXIT events) are dispatched only after that commit. A crash therefore loses
nothing recorded and duplicates nothing; an activity that was running may run again.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio

from roost._counters import RuntimeCounters
from roost._errors import Error, ErrorKind, not_found
from roost._pid import Pid
from roost._security import SECURITY_KEY, ticket_error
from roost.actors._app import Entry
from roost.actors._events import Exit
from roost.actors._node import ExitResult, Node, noproc_error, terminated_error
from roost.mailbox._channel import Channel
from roost.storage import Codec, Store
from roost.workflow._history import (
    CancelRequested,
    MessageArrived,
)
from roost.workflow._local import _inspect
from roost.workflow._local._admission import StartGate
from roost.workflow._local._closing import Closing
from roost.workflow._local._collector import busy_collector, idle_collector
from roost.workflow._local._commits import Commits
from roost.workflow._local._eager import EagerStarts
from roost.workflow._local._executors import Executors, freeze_startup_heap
from roost.workflow._local._forwarding import Forwarding
from roost.workflow._local._incoming import Incoming
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._quarantine import Quarantines
from roost.workflow._local._records import (
    RunRecord,
    RunStatus,
)
from roost.workflow._local._recovery import Recovery
from roost.workflow._local._replay import Drivers
from roost.workflow._local._replies import ReplyHost
from roost.workflow._local._retention import Retention
from roost.workflow._local._routes import HostRoutes
from roost.workflow._local._run import Run
from roost.workflow._local._runs import RunTable
from roost.workflow._local._starting import (
    Starts,
)
from roost.workflow._local._task import Tasks
from roost.workflow._local._task_failure import TaskFailures
from roost.workflow._local._timers import DurableTimers
from roost.workflow._local._unread import DEFAULT_UNREAD_LIMIT, check_room
from roost.workflow._local.activities._worker import ActivityWorker
from roost.workflow._planner import unloadable_error

__all__ = ["WorkflowManager"]


log = logging.getLogger("roost.workflow")
# A run in these phases has no activation in flight that might complete before a close.
_UNSTARTED_CANCELABLE = frozenset({RunPhase.IDLE, RunPhase.QUEUED, RunPhase.HELD, RunPhase.BACKOFF})


class WorkflowManager:
    """All workflows of one node: the embedded host (``roost.workflow.WorkflowHost``)."""

    def __init__(self, node: Node, store: Store, nursery: trio.Nursery) -> None:
        """Build the host's parts, each from the few collaborators it uses.

        The order is that of their needs: the run table and the ready queue first (every
        part queues runs), then the store's commits and the incoming events, the timers
        and the activities, the close path, the activation shell, the drivers.
        """
        self.node = node
        self.store = store
        self._nursery = nursery
        codec = self.codec = Codec()
        host = self.host = f"{node.app.name}:workflows"
        self.cache_size = int(node.settings.get("workflow_cache", 10_000))
        self.unread_limit = int(node.settings.get("workflow_unread_limit", DEFAULT_UNREAD_LIMIT))
        # What workflow code starts from (the runtime's own tasks' context): never the
        # context of whoever caused an activation, such as a starter running one eagerly.
        self.base_context = contextvars.copy_context()
        self.stats = {"activations": 0, "replays": 0, "evictions": 0, "task_failures": 0}
        self.counters = RuntimeCounters()  # for /metrics (roost.admin._metrics)
        # Workflow ids whose stored rows could not be decoded (see _quarantine): no run of
        # theirs is loaded, started, or has its task and timer rows touched.
        self.quarantined: set[str] = set()
        # Stored running runs this node's app cannot run (their entry is unknown here, or
        # not a workflow): kept, untouched, for a node that can; their id stays taken.
        self.unloadable: dict[str, Error] = {}
        stopping = self._stopping
        runs = self.runs = RunTable(self.cache_size)  # the one owner of runs (see _runs)
        executors = self.executors = Executors(runs)  # the ready queue; started by start()
        ready = executors.ready
        self.start_gate = StartGate()  # bounds the starts in flight (see _admission)
        self.forwarding = Forwarding()  # inbox rows following an id into its next run
        commits = self.commits = Commits(
            store=store,
            codec=codec,
            # Looked up at each commit: a test may hold the node's commits (test_workflow_races).
            transact=lambda fn: node.transact(fn),  # noqa: PLW0108 - late-bound, see above
            stopping=stopping,
        )
        # The events runs did not cause (see _incoming).
        incoming = self.incoming = Incoming(
            runs=runs,
            codec=codec,
            forwarding=self.forwarding,
            commits=commits,
            ready=ready,
            spawn=self.spawn_task,
            stopping=stopping,
            unread_limit=self.unread_limit,
            quarantined=self.quarantined,
        )
        self.replies = ReplyHost(
            node_name=node.name,
            app_name=node.app.name,
            runs=runs,
            codec=codec,
            from_outside=incoming.from_outside,
            holder=node.registry.lookup,
        )
        self.pid_hosts = frozenset({host, self.replies.host})
        self.timers = DurableTimers(now=node.now, runs=runs, spawn=self.spawn_task)
        self.activities = ActivityWorker(
            node=node,
            runs=runs,
            codec=codec,
            commits=commits,
            counters=self.counters,
            incoming=incoming,
            passes=executors,
            nursery=nursery,
        )
        # What activation plans read of this host, and the shell that commits them.
        self.routes = HostRoutes(
            codec=codec,
            host=host,
            node_name=node.name,
            app=node.app,
            registry=node.registry,
            runs=runs,
            route=self.route,
            unread_limit=self.unread_limit,
            quarantined=self.quarantined,
            unloadable=self.unloadable,
            input_of=commits.input_of,
            timer_rows=self.timers.rows,
            keyring=node.settings.get("keyring"),
        )
        self.closing = Closing(
            runs=runs,
            codec=codec,
            host=host,
            node=node,
            commits=commits,
            incoming=incoming,
            timers=self.timers,
            forwarding=self.forwarding,
            routes=self.routes,
            ready=ready,
            spawn=self.spawn_task,
            counters=self.counters,
        )
        self.quarantines = Quarantines(
            codec=codec,
            commits=commits,
            runs=runs,
            registry=node.registry,
            quarantined=self.quarantined,
            now=node.now,
        )
        self.failures = TaskFailures(
            runs=runs,
            codec=codec,
            transact=commits.transact,
            spawn=self.spawn_task,
            ready=ready,
            stats=self.stats,
            counters=self.counters,
            cancel_unstarted=self._cancel_unstarted,
        )
        self.tasks = Tasks(
            routes=self.routes,
            runs=runs,
            forwarding=self.forwarding,
            hold_staged=incoming.hold_staged,
            drop_staged=incoming.drop_staged,
            transact=commits.transact,
            activities=self.activities,
            timers=self.timers,
            node=node,
            accept=incoming.accept,
            arm=self.timers.arm,
            closed=self.closing.announce,
            hand_over=self.closing.hand_over,
            process_exited=incoming.process_exited,
            fail=self.failures.fail,
            counters=self.counters,
            stats=self.stats,
        )
        self.drivers = Drivers(
            node=node,
            store=store,
            codec=codec,
            runs=runs,
            stats=self.stats,
            host=host,
            replies=self.replies,
            base_context=self.base_context,
        )
        self.eager = EagerStarts(
            codec=codec,
            runs=runs,
            tasks=self.tasks,
            drivers=self.drivers,
            failures=self.failures,
            now=node.now,
            stopping=stopping,
            ready=ready,
            # Late-bound: Starts, built next, drives EagerStarts and stores a failed one's start.
            commit_start=lambda run, events: self.starts.commit_start(run, events),  # noqa: PLW0108
            arm=self.timers.arm,
        )

        self.starts = Starts(
            codec=codec,
            host=host,
            node=node,
            runs=runs,
            gate=self.start_gate,
            commits=commits,
            incoming=incoming,
            eager=self.eager,
            timers=self.timers,
            terminate=lambda run: self.closing.terminate(run, terminated_error(run.pid)),
            quarantined=self.quarantined,
            unloadable=self.unloadable,
            counters=self.counters,
        )
        retention = node.settings.get("retention")
        # Closed workflows older than the retention are deleted (None: kept forever).
        self.retention = (
            None
            if retention is None
            else Retention(commits=commits, codec=codec, retention=retention, now=node.now)
        )

    def _stopping(self) -> bool:
        return self.node.stopping

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def start_on(cls, node: Node, nursery: trio.Nursery) -> WorkflowManager | None:
        """The embedded host of ``node`` (None without a store); the node installs, then starts it.

        Registered as the node's default workflow host (``roost._wiring``).
        """
        if node.store is None:
            return None
        # Before any run is loaded: a recovered run is garbage once it closes.
        freeze_startup_heap()
        return cls(node, node.store, nursery)

    async def start(self) -> None:
        """Recover open runs, pending tasks and timers, then start the executors."""
        self.executors.start(
            self._nursery,
            tasks=self.tasks,
            drivers=self.drivers,
            failures=self.failures,
            now=self.node.now,
            quarantine=self.quarantines.quarantine_run,
        )
        self._nursery.start_soon(
            self.timers.run, self.closing.fire_timer, name="roost.workflow.timers"
        )
        self._nursery.start_soon(self.incoming.commit_outside, name="roost.workflow.inbox")
        # At once, not in the task: starts may come before the task's first step.
        busy_collector()
        self._nursery.start_soon(_busy_collector, name="roost.workflow.collector")
        self._nursery.start_soon(self._close_gate_at_exit, name="roost.workflow.gate")
        Recovery(
            codec=self.codec,
            commits=self.commits,
            runs=self.runs,
            app=self.node.app,
            registry=self.node.registry,
            node_name=self.node.name,
            host=self.host,
            now=self.node.now,
            quarantined=self.quarantined,
            unloadable=self.unloadable,
            quarantines=self.quarantines,
            timers=self.timers,
            submit=self.activities.submit,
            settle_now=self.incoming.settle_now,
            process_exited=self.incoming.process_exited,
            ready=self.executors.ready,
            terminate=lambda run: self.closing.terminate(run, terminated_error(run.pid)),
        ).recover()
        if self.retention is not None:
            self._nursery.start_soon(self.retention.run, name="roost.workflow.retention")

    async def _close_gate_at_exit(self) -> None:
        """When the runtime stops, starts waiting at the gate end (Unavailable), not hang."""
        try:
            await trio.sleep_forever()
        finally:
            self.start_gate.close()

    # -- starting ------------------------------------------------------------------------

    async def spawn(
        self,
        parent: Pid,
        *,
        entry: Entry,
        args: tuple[Any, ...],
        options: dict[str, Any],
        messages: tuple[tuple[str, Any], ...],
        context: dict[str, Any],
    ) -> Pid:
        """See ``Starts.spawn``."""
        return await self.starts.spawn(
            parent, entry=entry, args=args, options=options, messages=messages, context=context
        )

    def spawn_task(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the runtime's nursery."""
        self._nursery.start_soon(fn, *args)

    # -- messages and cancels from outside -------------------------------------------------

    def signal(
        self,
        sender: Pid | None,
        pid: Pid,
        topic: str,
        payload: Any,
        ticket: Mapping[str, Any] | None = None,
    ) -> trio.Event:
        """Append a message to a running workflow's history; the event is set once durable.

        A message to a reply address is the reply to that workflow's call (see ``ReplyHost``).

        Raises:
            roost.Error: NotFound if no run with that id is open; Invalid for a payload
                that cannot be encoded; LimitExceeded when the workflow holds its limit of
                unread messages (nothing is stored).
        """
        if pid.host != self.host:
            return self.replies.signal(sender, pid, topic, payload)
        run = self.runs.get(pid.id)
        if run is None:
            raise not_found(f"workflow {pid.id!r} is not running", pid=str(pid))
        if SECURITY_KEY in run.context:
            refused = ticket_error(ticket, pid.id, topic, self.node.settings.get("keyring"))
            if refused is not None:
                raise refused
        self.codec.encode(payload, what=f"payload of message {topic!r}")
        check_room(self.unread_limit, run)
        return self.incoming.from_outside(
            run, MessageArrived(topic=topic, payload=payload, sender=sender)
        )

    def secured(self, pid: Pid) -> bool:
        """Whether ``pid`` is an open workflow running under a security context."""
        run = self.runs.get(pid.id) if pid.host == self.host else None
        return run is not None and SECURITY_KEY in run.context

    def cancel(self, pid: Pid, reason: str | None) -> trio.Event:
        """Deliver a CANCEL request to a running workflow (it decides what to do)."""
        run = self.runs.get(pid.id) if pid.host == self.host else None
        if run is None:
            raise self._not_open(pid)
        # Its first activation keeps failing, and no attempt of it is in flight.
        failing = run.progress[0] == 0 and run.record.task_failure is not None
        if failing and run.phase in _UNSTARTED_CANCELABLE:
            return self._cancel_unstarted(run, reason)
        return self.incoming.from_outside(run, CancelRequested(reason=reason))

    def _cancel_unstarted(self, run: Run, reason: str | None) -> trio.Event:
        """Close as canceled a run whose first activation keeps failing, on a cancel request.

        No activation of it ever completed, so no code of it can hear the request: without
        this only a terminate would end it.
        """
        why = f"canceled before its first activation completed: {reason or 'no reason given'}"
        error = Error(why, kind=ErrorKind.CANCELED, retryable=False, details={"reason": reason})
        return self.closing.cancel_unstarted(run, error)

    def _not_open(self, pid: Pid) -> Error:
        """The error for steering a workflow id that has no open run on this node."""
        if pid.host != self.host:
            return not_found(f"{pid} is a reply address, not a process", pid=str(pid))
        cause = self.unloadable.get(pid.id)
        if cause is None:
            return not_found(f"workflow {pid.id!r} is not running", pid=str(pid))
        return unloadable_error(pid.id, cause)

    # -- completion ----------------------------------------------------------------------

    def describe(self, workflow_id: str) -> dict[str, Any]:
        """See ``NodeHandle.describe``."""
        described = _inspect.describe(self.store, self.codec, workflow_id)
        run = self.runs.get(workflow_id)
        if run is not None and run.record.run_id == described["run_id"]:
            # A task failure is in memory at once, and stays there if the store cannot
            # take it (a full disk, say).
            described["task_failure"] = run.record.task_failure
        elif workflow_id in self.unloadable and described["status"] == RunStatus.RUNNING.value:
            described["task_failure"] = self.unloadable[workflow_id]
        return described

    def gauges(self) -> dict[str, Any]:
        """What ``/metrics`` shows as gauges, read now.

        ``open``: open runs by workflow type; ``activities``: activity tasks not resolved
        yet (running, or waiting for a retry); ``timers``: durable timers armed.
        """
        open_by_type: dict[str, int] = {}
        timers = 0
        for run in self.runs.values():
            kind = run.record.workflow_type
            open_by_type[kind] = open_by_type.get(kind, 0) + 1
            timers += len(run.armed_timers)
        return {"open": open_by_type, "activities": len(self.activities.running), "timers": timers}

    def history(self, workflow_id: str) -> list[Any]:
        """See ``NodeHandle.history``."""
        return _inspect.history(self.store, self.codec, workflow_id)

    def activity_attempts(self, workflow_id: str) -> list[dict[str, Any]]:
        """The latest run's failed activity attempts (see ``_inspect.activity_attempts``)."""
        return _inspect.activity_attempts(self.store, self.codec, workflow_id)

    def list_workflows(self, query: str | None) -> list[dict[str, Any]]:
        """See ``NodeHandle.list_workflows``."""
        return _inspect.list_workflows(self.store, self.codec, query)

    def process_exited(self, watcher: Pid, event: Exit) -> None:
        """See ``Incoming.process_exited``."""
        self.incoming.process_exited(watcher, event)

    def _open_or_closing(self, pid: Pid) -> Run | None:
        # A terminated run is out of ``runs`` at once but stored as closed only after its
        # commit: until then watchers attach to it, so they get its real EXIT.
        return self.runs.open_or_closing(pid.id) if pid.host == self.host else None

    def _closed_record(self, pid: Pid) -> RunRecord | None:
        # A reply address is never a workflow: "noproc", as for an id that never existed.
        return self.commits.stored_record(pid.id) if pid.host == self.host else None

    @property
    def cached(self) -> Mapping[str, Run]:
        """The runs whose driver is in memory (read only: the run table owns the cache)."""
        return self.runs.cache()

    def running(self, pid: Pid) -> bool:
        """Whether a run of workflow ``pid`` is open."""
        return pid.host == self.host and pid.id in self.runs

    def route(self, pid: Pid) -> tuple[Run, int | None] | None:
        """The open run a message to ``pid`` goes to, with the call seq for reply addresses."""
        if pid.host == self.host:
            run = self.runs.get(pid.id)
            return (run, None) if run is not None else None
        if pid.host == self.replies.host:
            return self.replies.route(pid)
        return None

    def terminate(self, pid: Pid) -> None:
        """Stop a running workflow at once: no more of its code runs; it closes as Canceled.

        Raises:
            roost.Error: NotFound if no run with that id is open.
        """
        run = self.runs.get(pid.id) if pid.host == self.host else None
        if run is None:
            raise self._not_open(pid)
        self.closing.terminate(run, terminated_error(pid))

    def monitor(self, watcher: Pid, pid: Pid) -> None:
        """EXIT to ``watcher`` when the workflow closes (at once if it already has)."""
        run = self._open_or_closing(pid)
        if run is not None:
            run.watch(watcher)
            return
        proc = self.node.procs.get(watcher)
        if proc is None:
            return
        record = self._closed_record(pid)
        at = self.node.now()
        if record is None:
            self.node.post_event(proc, Exit(pid, None, noproc_error(pid), at))
        else:
            self.node.post_event(proc, Exit(pid, record.result, record.error, at))

    def link(self, proc: Pid, pid: Pid) -> None:
        """LINK_DOWN to ``proc`` if the workflow fails (at once if it is not running)."""
        run = self._open_or_closing(pid)
        if run is not None:
            run.link(proc)
            return
        linked = self.node.procs.get(proc)
        if linked is None:
            return
        record = self._closed_record(pid)
        error = noproc_error(pid) if record is None else record.error
        if error is not None:
            self.node.link_down(linked, pid, error, self.node.now())

    def unwatch(self, proc: Pid, pid: Pid) -> None:
        """Drop monitors and links from ``proc``."""
        run = self._open_or_closing(pid)
        if run is not None:
            run.unwatch(proc)

    async def wait_exit(self, pid: Pid) -> ExitResult:
        """The workflow's result once it closes (at once if it has)."""
        chan: Channel[ExitResult] = Channel(1)
        run = self._open_or_closing(pid)
        if run is not None:
            run.send_exit_to(chan)
        else:
            record = self._closed_record(pid)
            if record is None:
                chan._try_send(ExitResult(None, noproc_error(pid)))
            else:
                chan._try_send(ExitResult(record.result, record.error))
        return await chan.receive()


async def _busy_collector() -> None:
    """Hold the collector's busy thresholds (set by ``start``) while the runtime is open.

    A task always runs to its first checkpoint, even if cancelled before it began: the
    thresholds are given back whenever the runtime's nursery ends.
    """
    try:
        await trio.sleep_forever()
    finally:
        idle_collector()
