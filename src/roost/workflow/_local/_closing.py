"""A run's end: closes from outside its code, hand-overs to the next run, the announcement.

Workflow code closes its run through an activation (``_plan``); terminate and the run and
execution timeouts close it from outside, without running any more of its code. Either way
the closing record, the next run of the chain (a retry or a cron run, when the close allows
one) and the removal of the old run's pending work commit in one transaction; after it,
``hand_over`` gives the id to the next run, or ``announce`` tells the run's watchers,
links and waiters, and the close policies of its children are applied.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio

from roost import _telemetry as telemetry
from roost._errors import Error
from roost.actors._events import Exit, ExitResult
from roost.storage import WriteTxn, key
from roost.workflow._history import CancelRequested, TimerFired
from roost.workflow._local._forwarding import Moved, move_inbox
from roost.workflow._local._phases import PhaseEvent, RunPhase
from roost.workflow._local._plan import Routes, plan_successor, run_state
from roost.workflow._local._records import (
    PROGRESS_TABLE,
    RunRecord,
    RunStatus,
    TimerTask,
    timer_key,
)
from roost.workflow._local._run import Run, Settled
from roost.workflow._plan_close import plan_announce, plan_timer, records_event
from roost.workflow._planner import (
    CloseOutcome,
    ClosePlan,
    NextRun,
    OpenChild,
    plan_children,
    plan_close,
)

if TYPE_CHECKING:
    from roost._counters import RuntimeCounters
    from roost.actors._process import NodeOps
    from roost.storage import Codec
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._forwarding import Forwarding
    from roost.workflow._local._incoming import Incoming
    from roost.workflow._local._runs import RunTable
    from roost.workflow._local._timers import DurableTimers

__all__ = ["Closing"]

# Results that decode as themselves: no need to round-trip them through the codec.
_AS_RECORDED: frozenset[type] = frozenset({type(None), bool, int, float, str, bytes})

Staged = list[tuple[bytes, bytes, Any]]  # a new run's first inbox rows: key, bytes, event


class Closing:
    """Ends runs: from outside, by hand-over to the next run, and announces each close."""

    __slots__ = (
        "_codec",
        "_commits",
        "_counters",
        "_forwarding",
        "_host",
        "_incoming",
        "_node",
        "_ready",
        "_routes",
        "_runs",
        "_spawn",
        "_timers",
    )

    def __init__(
        self,
        *,
        runs: RunTable,
        codec: Codec,
        host: str,
        node: NodeOps,
        commits: Commits,
        incoming: Incoming,
        timers: DurableTimers,
        forwarding: Forwarding,
        routes: Routes,
        ready: Callable[[Run], None],
        spawn: Callable[..., None],
        counters: RuntimeCounters,
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            runs: the run table (phases, closing runs, the current run of an id).
            codec: encodes the closing rows.
            host: the host of workflow PIDs (a watcher there is a parent workflow).
            node: the plain processes watching or linked to a run.
            commits: commits a close, retrying until it does.
            incoming: events into runs (late ones re-homed, settled rows deleted).
            timers: a run's armed timers (their rows go with its close).
            forwarding: hand-overs in progress.
            routes: what a successor's plan reads of the host.
            ready: queues a released run.
            spawn: starts the background task of a terminate.
            counters: runs closed, for the metrics.
        """
        self._runs, self._codec, self._host, self._node = runs, codec, host, node
        self._commits, self._incoming, self._timers = commits, incoming, timers
        self._forwarding, self._routes, self._ready, self._spawn = forwarding, routes, ready, spawn
        self._counters = counters

    # -- from outside --------------------------------------------------------------------

    def terminate(self, run: Run, error: Error) -> None:
        """Stop ``run`` at once: no more of its code runs; it closes as terminated."""
        self._runs.start_closing(run)  # no further activations, signals or results
        self._runs.move(run, PhaseEvent.CLOSE)
        self._spawn(self.close_from_outside, run, RunStatus.TERMINATED, error)

    def cancel_unstarted(self, run: Run, error: Error) -> trio.Event:
        """Close ``run``, none of whose activations has completed, as canceled.

        No code of it has run to hear a cancel request (its first task may keep failing,
        as when its input does not fit its signature), so the request closes it; the
        event is set once the close is committed (or the node stops first).
        """
        closed = trio.Event()
        self._runs.start_closing(run)
        self._runs.move(run, PhaseEvent.CLOSE)

        async def close() -> None:
            try:
                await self.close_from_outside(run, RunStatus.CANCELED, error)
            finally:
                closed.set()

        self._spawn(close)
        return closed

    async def fire_timer(self, timer: TimerTask) -> None:
        """A stored timer fell due: act on ``plan_timer`` for its kind."""
        row = timer_key(timer.due, timer.run_id, timer.seq)
        if records_event(timer.kind):  # the step recording its event deletes the row
            task = (timer.workflow_id, timer.run_id)
            await self._incoming.settle("timers", row, task, TimerFired(seq=timer.seq))
            return
        deleted = await self._commits.retrying(
            lambda txn: txn.delete("timers", row), "deleting a timer"
        )
        if not deleted:
            return
        run = self._runs.get(timer.workflow_id)
        current = run is not None and run.record.run_id == timer.run_id
        options = run.record.options if run is not None else {}
        plan = plan_timer(
            timer.kind, workflow_id=timer.workflow_id, current=current, options=options
        )
        if run is None or plan.action == "none":
            return  # the run has closed or moved on since
        if plan.action == "release":
            if run.phase is RunPhase.HELD:
                self._runs.move(run, PhaseEvent.RELEASE)
                self._ready(run)
        elif plan.action == "close" and plan.error is not None:
            await self.close_from_outside(run, RunStatus.TIMED_OUT, plan.error)

    async def close_from_outside(self, run: Run, status: RunStatus, error: Error) -> None:
        """Close ``run`` (after an activation in flight finishes) without running its code."""
        try:
            await self._close(run, status, error)
        finally:
            self._runs.done_closing(run)
            run.mark_closed()

    async def _close(self, run: Run, status: RunStatus, error: Error) -> None:
        runs = self._runs
        runs.move(run, PhaseEvent.CLOSE)  # no activation after the one in flight
        while True:
            await run.wait_drained()
            current = runs.get(run.record.workflow_id)
            if current is None or current is run or status is not RunStatus.TERMINATED:
                break
            # It continued as new meanwhile: terminate stops the new run, once the
            # activation an executor may have begun on it is over (its timers and tasks
            # are stored then, and this close deletes them); that one may have continued
            # as new again.
            run = current
            runs.move(run, PhaseEvent.CLOSE)
        if run.record.status is not RunStatus.RUNNING:
            return  # its own last activation closed it meanwhile
        at = self._node.now()
        outcome = CloseOutcome.outside(status, error)
        plan = plan_close(run_state(run.record, run.pending), outcome, at)
        assert plan.status is not None  # only a continue-as-new plans no closing record
        closing = attrs.evolve(
            run.current_record, status=plan.status, error=plan.error, closed_at=plan.closed_at
        )
        nxt = None if plan.next is None else self._follow(run, at, closing, plan.next)
        what = f"closing workflow {run.pid.id!r} ({status.value})"
        forwarded: list[Moved] = []
        # The rows ``_follow`` carried over (restaged): those arriving during the commit are
        # handed on after it (hand_over), moved by the commit or not.
        carried = {k for k, _ in run.pending if isinstance(k, bytes)}
        writer = self._close_writer(run, plan, closing, nxt, carried=carried, out=forwarded)
        if not await self._commits.retrying(writer, what):
            return  # the node stops: the run is still open in the store, as recovery finds it
        self._timers.drop(run)  # their rows went with the close
        run.close_committed(closing)
        if nxt is None:
            runs.remove(run)
            self.announce(run)
        else:
            # Inbox rows moved to the next run; settled task and timer rows are late events
            # of this run, which hand_over drops (deleting their rows).
            self._forwarding.record(forwarded)
            self.hand_over(run, *nxt, moved=set(carried))

    def _follow(
        self, run: Run, at: dt.datetime, old: RunRecord, nxt: NextRun
    ) -> tuple[Run, Staged]:
        """The run the planner says follows ``run`` (closing as ``old``), its inbox reserved."""
        new, rows = plan_successor(run, old, nxt, at, self._routes)
        self._incoming.hold_staged((k, v) for k, v, _ in rows)
        self._forwarding.reserve(run, new)  # rows still stored for ``run`` move to ``new``
        return new, rows

    def _close_writer(
        self,
        run: Run,
        plan: ClosePlan,
        closing: RunRecord,
        nxt: tuple[Run, Staged] | None,
        *,
        carried: set[bytes],
        out: list[Moved],
    ) -> Callable[[WriteTxn], None]:
        codec = self._codec
        record = nxt[0].record if nxt is not None else closing
        rows = [("runs", record.workflow_id.encode(), codec.encode(record))]
        if nxt is not None:
            new, staged = nxt
            rows += [("inbox", k, v) for k, v, _ in staged]
            rows += [
                ("timers", timer_key(t.due, t.run_id, t.seq), codec.encode(t)) for t in new.timers
            ]
        run_id, run_key = closing.run_id, closing.workflow_id.encode()
        timers = self._timers.rows(run) if plan.drop_timers else []  # none of them fires now
        purge = plan.purge
        inbox_of = self._forwarding.after(run_id) if nxt is not None else None

        def write(txn: WriteTxn) -> None:
            if inbox_of is not None:  # before the purge: rows still stored move with the id
                out.clear()
                move_inbox(txn, codec, run_id, inbox_of, keep=carried, out=out)
            for table in purge:
                for k, _ in list(txn.prefix(table, key(run_id))):
                    txn.delete(table, k)
            for k in timers:
                txn.delete("timers", k)
            txn.delete(PROGRESS_TABLE, run_key)  # the closing record holds the final counters
            for table, k, v in rows:
                txn.put(table, k, v)

        return write

    # -- after a close's commit ----------------------------------------------------------

    def hand_over(self, old: Run, new: Run, staged: Staged, *, moved: set[bytes | Settled]) -> None:
        """After the commit: the new run takes the id, PID, watchers, links and waiters.

        Rows the commit moved from the old run's inbox (``Forwarding.record``, before this)
        reach the new run under their new keys as their committers hand them on.
        """
        if telemetry.tracing:
            telemetry.run_closed(old.current_record, new.record)
        new.take_over_waiters(old)
        self._forwarding.forget(old)  # handed over: rows for it follow into ``new`` now
        runs, accept = self._runs, self._incoming.accept
        runs.add(new)
        runs.forget_driver(old)
        runs.move(old, PhaseEvent.CLOSED)
        late = [(k, e) for k, e in old.take_pending() if k not in moved]
        self._timers.arm(new)
        accept(new, [(k, event) for k, _, event in staged])
        accept(old, late)  # arrived during the hand-over's commit: re-homed
        self._apply_close_policies(old)  # the old run's children, as at any close

    def announce(self, run: Run) -> None:
        """A run ended (its final status is committed): tell whoever is waiting."""
        self._forwarding.forget(run)  # rows for it are not written any more (_forwarding)
        if telemetry.tracing:
            telemetry.run_closed(run.current_record)
        runs, node = self._runs, self._node
        runs.remove(run)
        runs.move(run, PhaseEvent.CLOSED)
        self._incoming.drop_settled(run.pending)  # finished after the run's last step began
        record = run.record
        self._counters.run_closed(record.workflow_type, record.status.value)
        error = record.error
        # As recorded (a tuple comes back a list, an enum its value), the same as a watcher
        # that arrives after the close, or after a restart, reads from the store.
        value = record.result
        if type(value) not in _AS_RECORDED:
            value = self._codec.decode(self._codec.encode(value))
        result = ExitResult(value, error)
        at = node.now()
        procs = node.procs
        plan = plan_announce(
            watchers=run.watchers,
            links=run.links,
            error=error,
            live={pid for pid in (*run.watchers, *run.links) if pid in procs},
            workflow_host=self._host,
        )
        for watcher in plan.exit_processes:
            node.post_event(procs[watcher], Exit(run.pid, value, error, at))
        for watcher in plan.exit_workflows:  # a parent workflow: into its history
            self._incoming.process_exited(watcher, Exit(run.pid, value, error, at))
        self._apply_close_policies(run)
        node.registry.release(run.pid)
        for linked in plan.link_downs:  # only with an error
            proc = procs.get(linked)
            if proc is not None and error is not None:  # the close policies may have ended it
                node.link_down(proc, run.pid, error, at)
        for chan in run.exit_chans:
            chan._try_send(result)
        runs.forget_driver(run)

    def _apply_close_policies(self, run: Run) -> None:
        """Terminate or cancel ``run``'s children still open, as their policies say."""
        record, runs = run.record, self._runs
        open_runs = {
            child_id: OpenChild(run_id=child.record.run_id, parent=child.record.parent)
            for child_id in record.child_policies
            if (child := runs.get(child_id)) is not None
        }
        for action in plan_children(run.pid, record.child_policies, record.child_runs, open_runs):
            child = runs[action.child_id]
            if action.action == "terminate":
                self.terminate(child, _terminated(child))
            else:
                reason = f"parent {run.pid} closed"
                self._incoming.from_outside(child, CancelRequested(reason=reason))


def _terminated(run: Run) -> Error:
    from roost.actors._node import terminated_error  # noqa: PLC0415 - the node's own error

    return terminated_error(run.pid)
