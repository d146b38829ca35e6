"""The writes and post-commit actions of one activation."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from roost._duration import deadline_after
from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._events import Exit
from roost.actors._node import SpawnRequest
from roost.actors._process import NodeOps
from roost.storage import WriteTxn, key, u64
from roost.workflow._history import (
    Activation,
    CancelActivity,
    CancelRequested,
    Command,
    Complete,
    ContinueAsNew,
    Event,
    Fail,
    MessageArrived,
    ProcessExited,
    ScheduleActivity,
    SendMessage,
    SpawnProcess,
    StartChild,
    StartTimer,
    StopProcess,
    UpsertAttributes,
)
from roost.workflow._history_format import encode_activation
from roost.workflow._local._forwarding import InboxWrites, Row
from roost.workflow._local._records import (
    PROGRESS_TABLE,
    ActivityTask,
    InboxItem,
    RunProgress,
    TerminateRequest,
    TimerTask,
    new_task,
    timer_key,
    with_close,
    with_counters,
)
from roost.workflow._local._run import NO_ROW, Run, Settled
from roost.workflow._local._successors import follow, hand_over, run_state, start_child
from roost.workflow._local._unread import check_room, counts
from roost.workflow._planner import CloseOutcome, ClosePlan, plan_close, route_in_step

if TYPE_CHECKING:
    from roost.storage import Codec
    from roost.workflow._local._host import RunHost

__all__ = ["Effects", "deliver_local", "lost_error", "spawn_child", "stop_process"]

log = logging.getLogger("roost.workflow")


class Effects:
    """The writes and post-commit actions of one activation."""

    # One per activation: slots keep it small and its attribute reads cheap.
    __slots__ = (
        "at",
        "cancelled",
        "children",
        "continued",
        "final",
        "inbox",
        "local_sends",
        "m",
        "moved",
        "plan",
        "record",
        "run",
        "sent_to",
        "size",
        "spawns",
        "stops",
        "tasks",
        "terminate_rows",
        "timers",
        "workflow_sends",
    )

    def __init__(self, manager: RunHost, run: Run, at: dt.datetime, events: list[Event]) -> None:
        self.m = manager
        self.run = run
        self.at = at
        self.tasks: list[ActivityTask] = []
        self.timers: list[TimerTask] = []
        self.local_sends: list[tuple[Pid, SendMessage]] = []
        self.stops: list[StopProcess] = []
        self.cancelled: list[int] = []  # activity seqs the workflow stopped waiting for
        self.spawns: list[SpawnProcess] = []
        self.terminate_rows: list[Row] = []  # TerminateRequest inbox rows
        # Events for workflows (messages, cancels, a refused child's EXIT), committed in
        # this step.
        self.workflow_sends: list[tuple[Run, bytes, bytes, InboxItem]] = []
        self.sent_to: dict[int, int] = {}  # id(run) -> messages to it in this step
        record = run.record
        for event in events:
            if isinstance(event, CancelRequested):
                record = attrs.evolve(record, cancel_requested=True)
                break
        if record.task_failure is not None:  # cleared if this task commits
            record = attrs.evolve(record, task_failure=None)
        self.record = record
        self.size = 0  # bytes of the encoded activation, once written
        self.final = False
        self.plan: ClosePlan | None = None  # set when this activation closes the run
        self.continued: tuple[Run, list[tuple[bytes, bytes, Event]]] | None = None
        self.children: list[Run] = []
        self.moved: set[bytes | Settled] = set()
        # Its rows for other runs' inboxes and its hand-over's move (see _forwarding): only a
        # step that has any sets one.
        self.inbox: InboxWrites | None = None

    def add(self, command: Command) -> None:
        record = self.run.record
        if type(command) is ScheduleActivity:  # most commands: no match to walk
            # No row: the command in this step's history row is the task's record
            # until an attempt fails (see _pending).
            self.tasks.append(
                new_task(
                    record.workflow_id,
                    record.run_id,
                    command.seq,
                    command.entry,
                    command.args,
                    command.options,
                    self.at,
                )
            )
            return
        match command:  # the other commands (records are final: no subclass to match)
            case StartTimer(seq=seq, seconds=seconds):
                due = deadline_after(self.at, seconds)
                self.timers.append(
                    TimerTask(
                        workflow_id=record.workflow_id, run_id=record.run_id, seq=seq, due=due
                    )
                )
            case SendMessage():
                self._send(command)
            case StopProcess():
                self._stop(command)
            case CancelActivity(activity=activity):
                self.cancelled.append(activity)
            case SpawnProcess():
                self.spawns.append(command)
            case UpsertAttributes(search=search, memo=memo):
                self.record = attrs.evolve(
                    self.record,
                    search={**self.record.search, **search},
                    memo={**self.record.memo, **memo},
                )
            case Complete(value=value):
                self._close(CloseOutcome.completed(value))
            case Fail(error=error):
                self._close(CloseOutcome.failed(error))
            case ContinueAsNew(entry=entry, args=args):
                self._close(CloseOutcome.continued_as_new(entry, args))
            case StartChild():
                self._start_child(command)

    def _start_child(self, command: StartChild) -> None:
        child_id = command.workflow_id
        taken = {c.record.workflow_id for c in self.children}
        child = start_child(self.m, self.run, command, self.at, taken)
        if isinstance(child, Error):
            self._refused_child(child_id, child)
            return
        self.children.append(child)
        self.m.runs.stage_child(child_id)  # until this step commits or is discarded
        record = self.record
        self.record = attrs.evolve(
            record,
            child_policies={**record.child_policies, child_id: command.parent_close_policy},
            child_runs={**record.child_runs, child_id: child.record.run_id},
        )

    def _refused_child(self, child_id: str, error: Error) -> None:
        # The parent learns of it as the child's EXIT, committed in this same step.
        pid = Pid.trusted(self.m.node.name, self.m.host, child_id)
        event = ProcessExited(pid=pid, error=error)
        k, v = self.m.stage(self.run, event)
        self.workflow_sends.append((self.run, k, v, event))
        self.run.exit_reported(pid)

    def _staged_child(self, dest: object) -> Run | None:
        """The child started earlier in this step that ``dest`` names, if any."""
        if not isinstance(dest, Pid) or not self.children:
            return None
        staged = {c.record.workflow_id: c for c in self.children}
        route = route_in_step(dest, workflow_host=self.m.host, staged=staged.keys())
        return staged[dest.id] if route == "staged_child" else None

    def _to_child(self, child: Run, event: MessageArrived | CancelRequested) -> None:
        # Into the child's start rows: committed with its start, after its Started event.
        child.pending_start = [*child.pending_start, (*self.m.stage(child, event), event)]

    def _stop(self, stop: StopProcess) -> None:
        child = self._staged_child(stop.dest)
        if child is not None and not stop.hard:
            self._to_child(child, CancelRequested(reason=stop.reason))
            return
        found = None if stop.hard else self._open_workflow(stop.dest)
        if found is not None:  # a cancel of an open workflow: into its inbox, same commit
            event = CancelRequested(reason=stop.reason)
            k, v = self.m.stage(found, event)
            self.workflow_sends.append((found, k, v, event))
        else:  # a terminate (of a staged child too: once it is registered) runs in dispatch
            self.stops.append(stop)
        target = (child or self._open_workflow(stop.dest)) if stop.hard else None
        if target is not None:  # stored too, for a restart before the terminate's close
            request = TerminateRequest()
            k, v = self.m.stage(target, request)
            del self.m._staged[k]  # never accepted as an event: only recovery reads it
            # A child started in this step is stored with it, as keyed.
            self.terminate_rows.append((None if child else target, k, v, request))

    def _open_workflow(self, dest: object) -> Run | None:
        """The open run ``dest`` names, if it is a workflow's own PID."""
        if not isinstance(dest, Pid) or dest.host != self.m.host:
            return None
        found = self.m.route(dest)
        return found[0] if found is not None else None

    def _send(self, send: SendMessage) -> None:
        dest = send.dest
        sender = send.reply_to or self.run.pid
        child = self._staged_child(dest)
        if child is not None:
            event = MessageArrived(topic=send.topic, payload=send.payload, sender=sender)
            if self._room(child, event, send):
                self._to_child(child, event)
            return
        pid = dest if isinstance(dest, Pid) else self.m.node.registry.lookup(dest)
        found = self.m.route(pid) if pid is not None else None
        if found is not None:  # a workflow (or a workflow's reply address): same commit
            target, call = found
            event = MessageArrived(topic=send.topic, payload=send.payload, sender=sender, call=call)
            if not self._room(target, event, send):
                return
            k, v = self.m.stage(target, event)
            self.workflow_sends.append((target, k, v, event))
        else:
            self.local_sends.append((sender, send))

    def _room(self, target: Run, event: MessageArrived, send: SendMessage) -> bool:
        # Like any send from a workflow, a refused one does not raise: it is logged.
        if not counts(event):
            return True
        sent = self.sent_to.get(id(target), 0)  # messages to it earlier in this step
        try:
            check_room(self.m, target, 1 + sent)
        except Error as exc:
            log.warning(
                "workflow %s: message %r to %s not delivered: %s",
                self.run.pid,
                send.topic,
                send.dest,
                exc,
            )
            return False
        self.sent_to[id(target)] = sent + 1
        return True

    def _close(self, outcome: CloseOutcome) -> None:
        state = run_state(self.record, self.run.pending)  # pending: arrived meanwhile
        self.plan = plan = plan_close(state, outcome, self.at)
        if plan.status is not None:
            self.record = with_close(
                self.record,
                status=plan.status,
                result=plan.result,
                error=plan.error,
                closed_at=plan.closed_at,
            )
        if plan.next is None:
            self.final = True
            return
        self.continued = follow(self.m, self.run, self.at, self.record, plan.next)

    def writer(
        self, act: Activation, consumed: list[bytes | Settled]
    ) -> Callable[[WriteTxn], None]:
        m, run = self.m, self.run
        codec, record, driver, plan = m.codec, self.record, run.driver, self.plan
        act_bytes = encode_activation(codec, act)
        self.size = len(act_bytes)
        if driver is None:
            children: list[Pid] = record.children if not record.children else []
            unread = record.unread
        else:
            found = driver.children
            children = sorted(found, key=str) if found else []
            if children == record.children:
                children = record.children  # unchanged: the record keeps its list
            unread = driver.mailbox.unread_messages()
        # Only the counters change (no close, child, attribute or failure) of a stored
        # record: the history counters are read from the history rows (_pending), so only
        # a changed unread count is written, in the small progress row (see RunProgress).
        # The stored unread count is always the last step's: every step changing it writes.
        progress_only = (
            act.index > 1  # the first one stores the record (with an eager start, at all)
            and record is run.record
            and plan is None
            and not self.children
            and children is record.children
        )
        counters_only = progress_only and unread == record.unread
        self.record = record = with_counters(
            record,
            children=children,
            activations=act.index,
            history_length=record.history_length + len(act.events) + len(act.commands),
            history_size=record.history_size + len(act_bytes),
            unread=unread,
        )
        run_id = record.run_id
        run_key = record.workflow_id.encode()
        # Every row of this run in histories and tasks starts with the run's key part:
        # built once per step, each row's key is that prefix and its number.
        prefix = key(run_id)
        history_row = prefix + u64(act.index)
        record_bytes: bytes | None
        if self.continued is not None:
            record_bytes = codec.encode(self.continued[0].record)  # the id names the new run
        elif counters_only:
            record_bytes = None
        elif progress_only:
            record_bytes = codec.encode_checked(  # counters and an id: nothing to walk
                RunProgress(
                    run_id=run_id,
                    activations=record.activations,
                    history_length=record.history_length,
                    history_size=record.history_size,
                    unread=unread,
                )
            )
        else:
            record_bytes = codec.encode(record)
        row_table = PROGRESS_TABLE if progress_only else "runs"
        if progress_only and not counters_only:
            run.progress_row = True
        dropped_progress = plan is not None and run.progress_row
        closing = plan is not None
        rest = (
            self._rest(codec, prefix, closing)
            if closing
            or self.timers
            or self.cancelled
            or self.workflow_sends
            or self.terminate_rows
            or self.children
            or self.continued is not None
            else None
        )

        def write(txn: WriteTxn) -> None:
            txn.put("histories", history_row, act_bytes)
            for k in consumed:
                if not isinstance(k, Settled):
                    txn.delete("inbox", k)
                elif k.table != NO_ROW:  # an activity never retried has no row
                    txn.delete(k.table, k.row)
            if rest is not None:
                rest(txn)
            if dropped_progress:  # a closing run's record has it all
                txn.delete(PROGRESS_TABLE, run_key)
            if record_bytes is not None:
                txn.put(row_table, run_key, record_bytes)

        return write

    def _rest(self, codec: Codec, prefix: bytes, closing: bool) -> Callable[[WriteTxn], None]:
        """The writes of a step beyond its history row and the run's row."""
        plan = self.plan
        dropped = [prefix + u64(seq) for seq in self.cancelled]
        # A closing run's timers never fire: their rows go with it (this step's are not kept).
        own = () if closing else self.timers
        timers = [(timer_key(t.due, t.run_id, t.seq), codec.encode(t)) for t in own]
        unarmed = self.m.timers.rows(self.run) if plan is not None and plan.drop_timers else []
        purge = plan.purge if plan is not None else ()
        sends: list[Row] = [*self.workflow_sends, *self.terminate_rows]
        child_rows = [
            (c.record.workflow_id.encode(), codec.encode(c.record), c.pending_start)
            for c in self.children
        ]
        timers += [
            (timer_key(t.due, t.run_id, t.seq), codec.encode(t))
            for c in self.children
            for t in c.timers
        ]
        successor: list[tuple[str, bytes, bytes | None]] = []
        if self.continued is not None:
            new_run, staged = self.continued
            successor = [("inbox", k, v) for k, v, _ in staged]
            successor += [
                ("timers", timer_key(t.due, t.run_id, t.seq), codec.encode(t))
                for t in new_run.timers
            ]
            successor += [  # moved over (settled rows: their events end with this run)
                (k.table, k.row, None) if isinstance(k, Settled) else ("inbox", k, None)
                for k, _ in self.run.pending
                if not isinstance(k, Settled) or k.table != NO_ROW
            ]
            self.moved = {k for k, _ in self.run.pending}
        if sends or self.continued is not None:  # keyed by the run the store holds then
            old = self.run if self.continued is not None else None
            self.inbox = InboxWrites(codec, self.m.forwarding, sends, old)
        inbox = self.inbox

        def write(txn: WriteTxn) -> None:
            for k in dropped:
                txn.delete("tasks", k)
            for k in unarmed:
                txn.delete("timers", k)
            for k, v in timers:
                txn.put("timers", k, v)
            for table, k, value in successor:
                if value is None:
                    txn.delete(table, k)
                else:
                    txn.put(table, k, value)
            if inbox is not None:  # after the successor's rows: the old run's follow it
                inbox.write(txn)
            for child_key, child_record, start in child_rows:  # started with this step
                txn.put("runs", child_key, child_record)
                for k, v, _ in start:
                    txn.put("inbox", k, v)
            # Activities still scheduled would only run again after a restart; a run that
            # nothing follows will not read its remaining events either.
            for table in purge:
                for k, _ in list(txn.prefix(table, prefix)):
                    txn.delete(table, k)

        return write

    def discard(self) -> None:
        """The activation was not committed: forget the events staged for its writes."""
        staged = self.m._staged
        for _, k, _, _ in self.workflow_sends:
            staged.pop(k, None)
        for child in self.children:
            self.m.runs.unstage_child(child.record.workflow_id)
            for k, _, _ in child.pending_start:
                staged.pop(k, None)
        if self.continued is not None:
            self.m.forwarding.forget(self.continued[0])
            for k, _, _ in self.continued[1]:
                staged.pop(k, None)

    def dispatch(self) -> None:
        m = self.m
        for task in self.tasks:
            m.activities.submit(task)
        for seq in self.cancelled:
            m.activities.cancel(self.run.record.run_id, seq)
        if self.final or self.continued is not None:
            m.timers.drop(self.run)  # their rows went with this step's commit
        else:
            for timer in self.timers:
                m.timers.add(timer)
        if self.inbox is not None:
            _accept_sends(m, self.inbox, self.workflow_sends)
        for spawn in self.spawns:  # first: messages may go to processes started here
            spawn_child(m, self.run, spawn)
        for sender, send in self.local_sends:
            deliver_local(m.node, sender, send)
        for child in self.children:
            self.run.forget_exit(child.pid)  # an id may be run again
            m.runs.add(child)
            m.runs.unstage_child(child.record.workflow_id)  # open now: the id is taken
            m.arm(child)
            start, child.pending_start = child.pending_start, ()
            m.accept(child, [(k, event) for k, _, event in start])
        for stop in self.stops:  # after the children: a terminate may be for one of them
            stop_process(m.node, self.run.pid, stop)
        if self.continued is not None:
            hand_over(m, self.run, *self.continued, moved=self.moved)
        elif self.final:
            m.closed(self.run)


def _accept_sends(
    m: RunHost, inbox: InboxWrites, sends: list[tuple[Run, bytes, bytes, InboxItem]]
) -> None:
    m.forwarding.record(inbox.moved)  # before any accept: the commit moved these rows
    for target, k, _, event in sends:
        m.accept(target, [(k, event)])


def spawn_child(m: RunHost, run: Run, spawn: SpawnProcess) -> None:
    node = m.node
    req = SpawnRequest(context=run.context, pid=spawn.pid, watcher=run.pid)
    try:
        entry = node.app.resolve(spawn.entry)
        node.spawn(None, entry, tuple(spawn.args), req)
    except Error as exc:
        # The workflow learns of a failed start the way it learns of any exit.
        m.process_exited(run.pid, Exit(spawn.pid, None, exc, node.now()))


def stop_process(node: NodeOps, sender: Pid, stop: StopProcess) -> None:
    # Like a send, a workflow's cancel or terminate never raises for its target.
    try:
        node.stop(stop.dest, stop.reason, hard=stop.hard)
    except Error as exc:
        what = "terminate" if stop.hard else "cancel"
        log.warning("workflow %s: %s of %s not done: %s", sender, what, stop.dest, exc)


def lost_error(pid: Pid) -> Error:
    return Error(
        f"process {pid} was lost when the node stopped",
        kind=ErrorKind.UNAVAILABLE,
        details={"reason": "node restart", "pid": str(pid)},
    )


def deliver_local(node: NodeOps, sender: Pid, send: SendMessage) -> None:
    # Inside a workflow a send never raises for its target: a failed delivery is logged.
    try:
        target = node.live(send.dest)
        target.get_mailbox().deliver(send.topic, send.payload, sender)
    except Error as exc:
        log.warning(
            "workflow %s: message %r to %s not delivered: %s", sender, send.topic, send.dest, exc
        )
