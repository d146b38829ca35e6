"""The plan of one activation: its commands become rows, a run record and effects (pure).

``plan_activation(run, events, commands, at, routes)`` turns what one activation of ``run``
recorded into a ``Step``, frozen data: the rows its commit writes (``writes``, with the
rows for other runs' inboxes in ``inbox``), the run's record after it, the effects to
carry out once it is committed (one union, ``Effect``), and what it takes from the host
before its commit (``numbers``: inbox numbers drawn for each run it sends to;
``arriving``: the messages among them the unread-message limit counts, so that the next
plan of the same pass sees them; ``children`` and ``successor``: the runs it begins). It
reads the run and, through ``routes``, the host's open runs and names; it changes neither,
and does no I/O: it neither commits, reads the store nor waits. The shell (``_task``) takes a step's
reservations, commits its rows in a group transaction, then applies its effects with one
``match``, or gives the reservations back if the commit fails.

The rules it follows are the planner's (``plan_close`` for a close, ``plan_child_start``
for a child, ``plan_new_run`` for any run that begins), so what this module adds is the
routing of each command and the rows that record it.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol

import attrs

from roost import _telemetry as telemetry
from roost._duration import deadline_after
from roost._errors import Error
from roost._pid import Pid
from roost._security import SECURITY_KEY, reseal
from roost.mailbox._mailbox import EVENTS
from roost.storage import u64
from roost.workflow._history import (
    CancelActivity,
    CancelRequested,
    Complete,
    ContinueAsNew,
    Fail,
    MessageArrived,
    ProcessExited,
    ScheduleActivity,
    SendMessage,
    SpawnProcess,
    StartChild,
    Started,
    StartTimer,
    StopProcess,
    UpsertAttributes,
    new_activation,
)
from roost.workflow._history_format import encode_activation
from roost.workflow._local._forwarding import Row
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._records import (
    PROGRESS_TABLE,
    ActivityTask,
    RunProgress,
    RunRecord,
    TerminateRequest,
    TimerTask,
    inbox_key,
    new_task,
    row_prefix,
    timer_key,
    with_close,
    with_counters,
    with_final,
)
from roost.workflow._local._run import NO_ROW, Pending, Run, Settled
from roost.workflow._local._unread import counts
from roost.workflow._plan_start import plan_new_run, start_fields
from roost.workflow._planner import (
    CloseOutcome,
    ClosePlan,
    NextRun,
    RunState,
    plan_close,
    route_in_step,
)

if TYPE_CHECKING:
    from roost._security import KeyRing
    from roost.actors._app import Entry
    from roost.storage import Codec

__all__ = [
    "DELETE",
    "INBOX",
    "PURGE",
    "PUT",
    "AcceptSends",
    "ArmTimer",
    "Closed",
    "DropTimers",
    "Effect",
    "HandOver",
    "InboxRows",
    "Routes",
    "RunActivity",
    "SendLocal",
    "StartChildRun",
    "Step",
    "StopActivity",
    "Write",
    "build_run",
    "plan_activation",
    "plan_successor",
    "run_state",
]

log = logging.getLogger("roost.workflow")

# The kinds of a step's writes: (kind, table, key, value), applied in order.
PUT: Final = 0
DELETE: Final = 1
PURGE: Final = 2  # every row of ``table`` whose key starts with ``key``
INBOX: Final = 3  # the step's ``inbox`` rows, here in the order (value: the InboxRows)
Write = tuple[int, str, bytes, Any]


class Routes(Protocol):
    """What a plan reads of the host beyond its own run; nothing here changes anything."""

    @property
    def codec(self) -> Codec:
        """Encodes every row."""
        ...

    @property
    def host(self) -> str:
        """The host of workflow PIDs (``<app>:workflows``)."""
        ...

    @property
    def node_name(self) -> str:
        """The node's name, in the PIDs of the workflows it starts."""
        ...

    @property
    def tracing(self) -> bool:
        """Whether new runs get a trace (see roost._telemetry)."""
        ...

    def route(self, pid: Pid) -> tuple[Run, int | None] | None:
        """The open run a message to ``pid`` goes to, with the call seq of a reply address."""
        ...

    def lookup(self, name: object) -> Pid | None:
        """The PID registered under ``name``, if any."""
        ...

    def room(self, run: Run, count: int) -> Error | None:
        """The error that refuses ``count`` more messages for ``run``, or None."""
        ...

    @property
    def keyring(self) -> KeyRing | None:
        """The node's signing keys: a child's security context is sealed for its id."""
        ...

    def child_refusal(self, workflow_id: str, *, taken: bool) -> Error | None:
        """Why a child cannot start under ``workflow_id`` now, or None.

        ``taken``: a child of the same step has that id already.
        """
        ...

    def resolve(self, entry_id: str) -> Entry:
        """The app's entry ``entry_id`` (raises ``roost.Error`` if it has none)."""
        ...

    def input_of(self, run: Run) -> list[Any]:
        """The input ``run`` started with (for a retry or the next cron run)."""
        ...

    def timer_rows(self, run: Run) -> list[bytes]:
        """The stored rows of ``run``'s timers (they go when it closes)."""
        ...

    def entropy(self) -> bytes:
        """16 fresh random bytes: a new run's id and seed."""
        ...


# -- effects: what a committed step leaves to do --------------------------------------------
# Every record of a step is a named tuple: immutable, and built and read on each step's hot
# path for the cost of a tuple.


class RunActivity(NamedTuple):
    """Start working on an activity task the step scheduled."""

    task: ActivityTask


class StopActivity(NamedTuple):
    """Stop working on an activity the workflow no longer waits for (its row is gone)."""

    run_id: str
    seq: int


class ArmTimer(NamedTuple):
    """Arm a timer the step stored."""

    timer: TimerTask


class DropTimers(NamedTuple):
    """The run's armed timers never fire: their rows went with the step."""


class AcceptSends(NamedTuple):
    """Events the step committed to other runs' inboxes: hand them to those runs."""

    sends: tuple[tuple[Run, bytes, Any], ...]


class SendLocal(NamedTuple):
    """Deliver a message to a plain process (or a name no workflow holds)."""

    sender: Pid
    send: SendMessage


class StartChildRun(NamedTuple):
    """A child the step started is committed: it runs, with its first events."""

    child: Run


class HandOver(NamedTuple):
    """The run is followed by ``new`` (continue-as-new, retry, cron): the id moves over."""

    new: Run
    staged: tuple[tuple[bytes, bytes, Any], ...]  # the new run's first inbox rows
    moved: frozenset[bytes | Settled]  # the old run's pending events the commit moved


class Closed(NamedTuple):
    """The run's final status is committed: tell whoever waits for it."""


_DROP_TIMERS, _CLOSED = DropTimers(), Closed()

# SpawnProcess and StopProcess are their own commands, carried out as recorded.
Effect = (
    RunActivity
    | StopActivity
    | ArmTimer
    | DropTimers
    | AcceptSends
    | SpawnProcess
    | SendLocal
    | StartChildRun
    | StopProcess
    | HandOver
    | Closed
)


class InboxRows(NamedTuple):
    """A step's rows for other runs' inboxes, and whether it hands its own id over.

    Written inside the commit by ``_forwarding``'s rules: each row is keyed by the run the
    store holds as it is written, and a hand-over moves the old run's stored rows.
    """

    rows: tuple[Row, ...]
    handing_over: str | None  # the run id whose rows follow into its successor


class Step(NamedTuple):
    """One activation of ``run``, planned: what its commit writes, and what follows it."""

    run: Run
    activation: int  # its index in the history
    batch: list[Pending]  # the events it consumed (back to the run if it fails)
    record: RunRecord  # the run's record once the step commits (see ``progress``)
    size: int  # bytes of its history row
    writes: tuple[Write, ...]
    inbox: InboxRows | None
    effects: tuple[Effect, ...]
    # Taken from the host before the commit, given back if it fails (see _task):
    numbers: tuple[tuple[Run, int], ...]  # inbox numbers drawn, per run sent to
    arriving: tuple[tuple[Run, int], ...]  # counted messages in flight, per open run sent to
    staged: tuple[tuple[bytes, bytes], ...]  # encoded events, by inbox key
    children: tuple[Run, ...]
    successor: Run | None
    exits_reported: tuple[Pid, ...]
    progress_row: bool  # the run has a progress row once it commits
    # (activations, history_length, history_size, unread) when ``record`` is the run's own,
    # unchanged but for them (``Run.step_committed``); None when ``record`` has them.
    progress: tuple[int, int, int, int] | None


def run_state(record: RunRecord, pending: Sequence[Pending] = ()) -> RunState:
    """What the planner's close rules read of a run, as of ``record``.

    ``pending`` are the run's stored events not yet recorded: a cancel among them was
    accepted (its sender was told so) and counts as requested for the chain.
    """
    return RunState(
        workflow_id=record.workflow_id,
        attempt=record.attempt,
        options=record.options,
        execution_deadline=record.execution_deadline,
        cancel_requested=record.cancel_requested,
        cancel_pending=any(type(event) is CancelRequested for _, event in pending),
    )


def build_run(
    *,
    entry: Entry,
    pid: Pid,
    args: Sequence[Any],
    context: dict[str, Any],
    at: dt.datetime,
    rand: bytes,
    tracing: bool,
    inherit: RunRecord | None = None,
    trace_parent: RunRecord | None = None,
    **fields: Any,
) -> tuple[Run, Started]:
    """A run about to begin (not yet stored) and the ``Started`` event that begins it.

    Every way a run begins goes through here: a start, continue-as-new, a retry, a cron
    run, a child workflow. ``plan_new_run`` decides its rows; this builds them. ``rand``:
    16 random bytes (the run id's 8, then the seed's). ``inherit`` is the previous run of
    the same id, whose lasting settings carry over; ``trace_parent``, a child's parent run
    (its trace is under the parent's); ``fields`` set ``RunRecord`` fields.
    """
    plan = plan_new_run(
        workflow_id=pid.id,
        workflow_type=entry.id,
        run_id=rand[:8].hex(),
        seed=int.from_bytes(rand[8:16], "big"),
        args=args,
        context=context,
        at=at,
        inherit=inherit,
        fields=fields,
    )
    record = RunRecord(**plan.record)
    if tracing:
        record = telemetry.traced_run(record, inherit)
        if trace_parent is not None:
            record = telemetry.child_run(record, trace_parent)
    timers = [
        TimerTask(
            workflow_id=record.workflow_id,
            run_id=record.run_id,
            seq=t.seq,
            due=t.due,
            kind=t.kind,
        )
        for t in plan.timers
    ]
    # The run and its Started event share one copy of the context values (nothing
    # changes them in place; the driver keeps the run's, see RunPorts.kept_start).
    started = plan.started
    run = Run(
        record=record,
        entry=entry,
        pid=pid,
        context=started["context"],
        timers=timers or (),
        phase=RunPhase.HELD if plan.held else RunPhase.IDLE,
    )
    if run.context is started["context"]:
        return run, Started(**started)
    # The event holds the run's mapping (the shared empty one if none).
    return run, Started(**{**started, "context": run.context})


def plan_activation(
    run: Run,
    events: list[Any],
    commands: list[Any],
    at: dt.datetime,
    routes: Routes,
    *,
    batch: list[Pending],
) -> Step:
    """The ``Step`` that records one activation of ``run``: ``events`` in, ``commands`` out.

    ``batch``: the pending events the activation consumed (their rows go with its commit).
    Reads ``run`` (its record, pending events, driver's children and mailbox) and
    ``routes``; changes neither.

    Raises:
        roost.Error: a command cannot be recorded (an unknown entry, a value that does
            not encode): the activation is a task failure.
    """
    return _Planner(run, at, routes).step(events, commands, batch)


class _Planner:
    """The state of one ``plan_activation`` call (nothing outlives it but the Step)."""

    __slots__ = (
        "at",
        "cancelled",
        "children",
        "close_plan",
        "continued",
        "exits",
        "final",
        "local_sends",
        "numbers",
        "record",
        "routes",
        "run",
        "sent_to",
        "spawns",
        "staged",
        "stops",
        "tasks",
        "terminate_rows",
        "timers",
        "workflow_sends",
    )

    def __init__(self, run: Run, at: dt.datetime, routes: Routes) -> None:
        self.run, self.at, self.routes = run, at, routes
        self.tasks: list[ActivityTask] = []
        self.timers: list[TimerTask] = []
        self.local_sends: list[SendLocal] = []
        self.stops: list[StopProcess] = []
        self.cancelled: list[int] = []  # activity seqs the workflow stopped waiting for
        self.spawns: list[SpawnProcess] = []
        self.terminate_rows: list[Row] = []  # TerminateRequest inbox rows
        # Events for workflows (messages, cancels, a refused child's EXIT), committed in
        # this step.
        self.workflow_sends: list[tuple[Run, bytes, bytes, Any]] = []
        # id(run) -> [run, messages to it in this step the unread-message limit counts]
        self.sent_to: dict[int, list[Any]] = {}
        self.numbers: dict[int, list[Any]] = {}  # id(run) -> [run, inbox numbers drawn]
        self.staged: list[tuple[bytes, bytes]] = []
        self.exits: list[Pid] = []
        self.record = run.record
        self.final = False
        self.close_plan: ClosePlan | None = None  # set when this activation closes the run
        self.continued: tuple[Run, list[tuple[bytes, bytes, Any]]] | None = None
        self.children: list[Run] = []

    # -- commands ------------------------------------------------------------------------

    def step(self, events: list[Any], commands: list[Any], batch: list[Pending]) -> Step:
        record = self.record
        for event in events:
            if isinstance(event, CancelRequested):
                record = attrs.evolve(record, cancel_requested=True)
                break
        if record.task_failure is not None:  # cleared if this task commits
            record = attrs.evolve(record, task_failure=None)
        self.record = record
        tasks, add, at = self.tasks, self._add, self.at
        workflow_id, run_id = self.run.record.workflow_id, self.run.record.run_id
        for command in commands:
            if type(command) is ScheduleActivity:  # most commands: no match to walk
                # No row: the command in this step's history row is the task's record
                # until an attempt fails (see _pending).
                tasks.append(
                    new_task(
                        workflow_id,
                        run_id,
                        command.seq,
                        command.entry,
                        command.args,
                        command.options,
                        at,
                    )
                )
            else:
                add(command)
        return self._step(events, commands, batch)

    def _add(self, command: Any) -> None:
        """Plan one command other than ``ScheduleActivity`` (see ``step``)."""
        record = self.run.record
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

    def _stage(self, target: Run, event: Any) -> tuple[bytes, bytes]:
        """An inbox key of ``target`` for ``event`` (drawn for this step), and its bytes."""
        drawn = self.numbers.get(id(target))
        if drawn is None:
            drawn = self.numbers[id(target)] = [target, 0]
        drawn[1] += 1
        k = inbox_key(target.record.run_id, target.inbox_seq + drawn[1])
        return k, self.routes.codec.encode(event)

    def _stage_new(self, run: Run, event: Any) -> tuple[bytes, bytes, Any]:
        """An inbox row of a run this step begins (its numbering is its own)."""
        # The run is this plan's own, not yet anyone else's: its numbers are drawn at once.
        k = inbox_key(run.record.run_id, run.draw_inbox_numbers(1))
        v = self.routes.codec.encode(event)
        self.staged.append((k, v))
        return k, v, event

    def _start_child(self, command: StartChild) -> None:
        child_id = command.workflow_id
        taken = any(c.record.workflow_id == child_id for c in self.children)
        child = self._child_run(command, taken=taken)
        if isinstance(child, Error):
            self._refused_child(child_id, child)
            return
        self.children.append(child)
        record = self.record
        self.record = attrs.evolve(
            record,
            child_policies={**record.child_policies, child_id: command.parent_close_policy},
            child_runs={**record.child_runs, child_id: child.record.run_id},
        )

    def _child_run(self, command: StartChild, *, taken: bool) -> Run | Error:
        routes, parent = self.routes, self.run
        refused = routes.child_refusal(command.workflow_id, taken=taken)
        if refused is not None:
            return refused
        fields = start_fields(
            {"task_queue": parent.record.task_queue, **command.options},
            parent=parent.pid,
            at=self.at,
        )
        fields["name"] = None  # a child's name option is its id, not a registered name
        context = parent.context
        if SECURITY_KEY in context:  # bound to the child: its id is the addressee
            try:
                context = dict(reseal(context, command.workflow_id, routes.keyring))
            except Error as exc:
                return exc
        child, started = build_run(
            entry=routes.resolve(command.entry),
            pid=Pid.trusted(routes.node_name, routes.host, command.workflow_id),
            args=command.args,
            context=context,
            at=self.at,
            rand=routes.entropy(),
            tracing=routes.tracing,
            trace_parent=parent.record,
            **fields,
        )
        child.watch(parent.pid)
        child.add_start_row(self._stage_new(child, started))
        return child

    def _refused_child(self, child_id: str, error: Error) -> None:
        # The parent learns of it as the child's EXIT, committed in this same step.
        pid = Pid.trusted(self.routes.node_name, self.routes.host, child_id)
        event = ProcessExited(pid=pid, error=error)
        k, v = self._stage(self.run, event)
        self.staged.append((k, v))
        self.workflow_sends.append((self.run, k, v, event))
        self.exits.append(pid)

    def _staged_child(self, dest: object) -> Run | None:
        """The child started earlier in this step that ``dest`` names, if any."""
        if not isinstance(dest, Pid) or not self.children:
            return None
        staged = {c.record.workflow_id: c for c in self.children}
        route = route_in_step(dest, workflow_host=self.routes.host, staged=staged.keys())
        return staged[dest.id] if route == "staged_child" else None

    def _to_child(self, child: Run, event: MessageArrived | CancelRequested) -> None:
        # Into the child's start rows: committed with its start, after its Started event.
        child.add_start_row(self._stage_new(child, event))

    def _stop(self, stop: StopProcess) -> None:
        child = self._staged_child(stop.dest)
        if child is not None and not stop.hard:
            self._to_child(child, CancelRequested(reason=stop.reason))
            return
        found = None if stop.hard else self._open_workflow(stop.dest)
        if found is not None:  # a cancel of an open workflow: into its inbox, same commit
            event = CancelRequested(reason=stop.reason)
            k, v = self._stage(found, event)
            self.staged.append((k, v))
            self.workflow_sends.append((found, k, v, event))
        else:  # a terminate (of a staged child too: once it is registered) runs after it
            self.stops.append(stop)
        target = (child or self._open_workflow(stop.dest)) if stop.hard else None
        if target is not None:  # stored too, for a restart before the terminate's close
            request = TerminateRequest()
            if child is not None:  # stored with the child's start, as keyed
                k, v, _ = self._stage_new(child, request)
                self.staged.pop()  # never accepted as an event: only recovery reads it
                self.terminate_rows.append((None, k, v, request))
            else:
                k, v = self._stage(target, request)
                self.terminate_rows.append((target, k, v, request))

    def _open_workflow(self, dest: object) -> Run | None:
        """The open run ``dest`` names, if it is a workflow's own PID."""
        if not isinstance(dest, Pid) or dest.host != self.routes.host:
            return None
        found = self.routes.route(dest)
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
        pid = dest if isinstance(dest, Pid) else self.routes.lookup(dest)
        found = self.routes.route(pid) if pid is not None else None
        if found is not None:  # a workflow (or a workflow's reply address): same commit
            target, call = found
            event = MessageArrived(topic=send.topic, payload=send.payload, sender=sender, call=call)
            if not self._room(target, event, send):
                return
            k, v = self._stage(target, event)
            self.staged.append((k, v))
            self.workflow_sends.append((target, k, v, event))
        else:
            self.local_sends.append(SendLocal(sender, send))

    def _room(self, target: Run, event: MessageArrived, send: SendMessage) -> bool:
        # Like any send from a workflow, a refused one does not raise: it is logged.
        if not counts(event):
            return True
        counted = self.sent_to.get(id(target))  # messages to it earlier in this step
        sent = counted[1] if counted is not None else 0
        refused = self.routes.room(target, 1 + sent)
        if refused is not None:
            log.warning(
                "workflow %s: message %r to %s not delivered: %s",
                self.run.pid,
                send.topic,
                send.dest,
                refused,
            )
            return False
        if counted is None:
            self.sent_to[id(target)] = [target, 1]
        else:
            counted[1] += 1
        return True

    def _close(self, outcome: CloseOutcome) -> None:
        state = run_state(self.record, self.run.pending)  # pending: arrived meanwhile
        self.close_plan = plan = plan_close(state, outcome, self.at)
        if plan.next is None:
            # The closing record is built with the step's counters (``_step``): one copy.
            self.final = True
            return
        if plan.status is not None:
            self.record = with_close(
                self.record,
                status=plan.status,
                result=plan.result,
                error=plan.error,
                closed_at=plan.closed_at,
            )
        self.continued = self._successor(self.record, plan.next)

    def _successor(
        self, old: RunRecord, nxt: NextRun
    ) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
        new, rows = plan_successor(self.run, old, nxt, self.at, self.routes)
        self.staged += [(k, v) for k, v, _ in rows]
        return new, rows

    # -- the step's rows -----------------------------------------------------------------

    def _step(self, events: list[Any], commands: list[Any], batch: list[Pending]) -> Step:
        run, routes, plan = self.run, self.routes, self.close_plan
        codec, record, driver = routes.codec, self.record, run.driver
        index = run.next_index
        act = new_activation(index, self.at, events, commands)
        act_bytes = encode_activation(codec, act)
        _, length, size, last_unread = run.progress  # as of its last committed step
        if driver is None:
            children: list[Pid] = record.children if not record.children else []
            unread = last_unread
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
        # In memory the record is not copied either: the run keeps the counters beside it.
        progress_only = (
            index > 1  # the first one stores the record (with an eager start, at all)
            and record is run.record
            and plan is None
            and not self.children
            and children is record.children
        )
        counters_only = progress_only and unread == last_unread
        progress = (index, length + len(events) + len(commands), size + len(act_bytes), unread)
        if self.final and plan is not None and plan.status is not None:
            record = with_final(
                record,
                status=plan.status,
                result=plan.result,
                error=plan.error,
                closed_at=plan.closed_at,
                children=children,
                activations=progress[0],
                history_length=progress[1],
                history_size=progress[2],
                unread=unread,
            )
        elif not progress_only:
            record = with_counters(
                record,
                children=children,
                activations=progress[0],
                history_length=progress[1],
                history_size=progress[2],
                unread=unread,
            )
        run_id = record.run_id
        run_key = record.workflow_id.encode()
        # Every row of this run in histories and tasks starts with the run's key part:
        # each row's key is that prefix and its number.
        prefix = row_prefix(run_id)
        writes: list[Write] = [(PUT, "histories", prefix + u64(index), act_bytes)]
        for k, _ in batch:
            if not isinstance(k, Settled):
                writes.append((DELETE, "inbox", k, None))
            elif k.table != NO_ROW:  # an activity never retried has no row
                writes.append((DELETE, k.table, k.row, None))
        inbox = (
            self._rest(writes, prefix)
            if plan is not None
            or self.timers
            or self.cancelled
            or self.workflow_sends
            or self.terminate_rows
            or self.children
            else None
        )
        if plan is not None and run.progress_row:  # a closing run's record has it all
            writes.append((DELETE, PROGRESS_TABLE, run_key, None))
        if self.continued is not None:  # the id names the new run
            writes.append((PUT, "runs", run_key, codec.encode(self.continued[0].record)))
        elif progress_only and not counters_only:
            row = RunProgress(
                run_id=run_id,
                activations=progress[0],
                history_length=progress[1],
                history_size=progress[2],
                unread=unread,
            )
            # Counters and an id: nothing to walk.
            writes.append((PUT, PROGRESS_TABLE, run_key, codec.encode_checked(row)))
        elif not progress_only:
            writes.append((PUT, "runs", run_key, codec.encode(record)))
        return Step(
            run,
            index,
            batch,
            record,
            len(act_bytes),
            tuple(writes),
            inbox,
            self._effects(),
            tuple([(r, n) for r, n in self.numbers.values()]) if self.numbers else (),
            self._arriving() if self.sent_to else (),
            tuple(self.staged) if self.staged else (),
            tuple(self.children) if self.children else (),
            self.continued[0] if self.continued is not None else None,
            tuple(self.exits) if self.exits else (),
            run.progress_row or (progress_only and not counters_only),
            progress if progress_only else None,
        )

    def _arriving(self) -> tuple[tuple[Run, int], ...]:
        """The counted messages this step sends to open runs (its own children are new)."""
        children = {id(c) for c in self.children}
        return tuple([(r, n) for r, n in self.sent_to.values() if id(r) not in children])

    def _rest(self, writes: list[Write], prefix: bytes) -> InboxRows | None:
        """The writes of a step beyond its history row and the run's row."""
        plan, codec = self.close_plan, self.routes.codec
        closing = plan is not None
        writes.extend((DELETE, "tasks", prefix + u64(seq), None) for seq in self.cancelled)
        if plan is not None and plan.drop_timers:
            writes.extend((DELETE, "timers", k, None) for k in self.routes.timer_rows(self.run))
        # A closing run's timers never fire: their rows go with it (this step's are not kept).
        timers = [*(() if closing else self.timers), *(t for c in self.children for t in c.timers)]
        if self.continued is not None:
            new, staged = self.continued
            writes.extend((PUT, "inbox", k, v) for k, v, _ in staged)
            timers += new.timers
        writes.extend(
            (PUT, "timers", timer_key(t.due, t.run_id, t.seq), codec.encode(t)) for t in timers
        )
        if self.continued is not None:
            for k, _ in self.run.pending:  # moved over: settled rows' events end with this run
                if not isinstance(k, Settled):
                    writes.append((DELETE, "inbox", k, None))
                elif k.table != NO_ROW:
                    writes.append((DELETE, k.table, k.row, None))
        sends: list[Row] = [*self.workflow_sends, *self.terminate_rows]
        inbox = None
        if sends or self.continued is not None:  # keyed by the run the store holds then
            handing_over = self.run.record.run_id if self.continued is not None else None
            inbox = InboxRows(tuple(sends), handing_over)
            # After the successor's rows: the old run's rows follow it.
            writes.append((INBOX, "inbox", b"", inbox))
        for c in self.children:  # started with this step
            writes.append((PUT, "runs", c.record.workflow_id.encode(), codec.encode(c.record)))
            writes.extend((PUT, "inbox", k, v) for k, v, _ in c.pending_start)
        # Activities still scheduled would only run again after a restart; a run that
        # nothing follows will not read its remaining events either.
        writes.extend((PURGE, table, prefix, None) for table in (plan.purge if plan else ()))
        return inbox

    def _effects(self) -> tuple[Effect, ...]:
        """What the committed step leaves to do, in the order it is done."""
        run = self.run
        tasks = self.tasks
        if (  # most steps: activities, and nothing else to do
            len(tasks) == 1
            and not self.cancelled
            and not self.timers
            and self.close_plan is None
            and not self.workflow_sends
            and not self.terminate_rows
            and not self.spawns
            and not self.local_sends
            and not self.children
            and not self.stops
        ):
            return (RunActivity(tasks[0]),)
        out: list[Effect] = [RunActivity(task) for task in tasks] if tasks else []
        if self.cancelled:
            out += [StopActivity(run.record.run_id, seq) for seq in self.cancelled]
        if self.final or self.continued is not None:
            out.append(_DROP_TIMERS)  # their rows went with this step's commit
        elif self.timers:
            out += [ArmTimer(timer) for timer in self.timers]
        if self.workflow_sends or self.terminate_rows or self.continued is not None:
            out.append(AcceptSends(tuple([(t, k, e) for t, k, _, e in self.workflow_sends])))
        out += self.spawns  # first: messages may go to processes started here
        out += self.local_sends
        if self.children:
            out += [StartChildRun(child) for child in self.children]
        out += self.stops  # after the children: a terminate may be for one of them
        if self.continued is not None:
            new, staged = self.continued
            moved = frozenset([k for k, _ in run.pending])
            out.append(HandOver(new, tuple(staged), moved))
        elif self.final:
            out.append(_CLOSED)
        return tuple(out)


def plan_successor(
    run: Run, old: RunRecord, nxt: NextRun, at: dt.datetime, routes: Routes
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
    """The next run of ``run``'s workflow id (continue-as-new, retry, cron) and its inbox.

    ``old`` is the closing run's record (attributes set in the closing step included).
    The inbox rows are the new run's first events: its ``Started``, the messages the old
    run had not read, and a cancel stored for it but not yet recorded. Reads ``run``,
    changes nothing but the new run (which is the caller's alone until it reserves it).
    """
    new, started = build_run(
        entry=routes.resolve(nxt.entry if nxt.entry is not None else run.entry.id),
        pid=run.pid,
        args=nxt.args if nxt.args is not None else routes.input_of(run),
        context=run.context,
        at=at,
        rand=routes.entropy(),
        tracing=routes.tracing,
        inherit=old,
        attempt=nxt.attempt,
        not_before=nxt.not_before,
    )
    # Unread messages follow the workflow into its new run: those delivered to the old
    # run's mailbox but not read yet, then those not even delivered. Nothing is lost.
    unread = run.driver.mailbox.peek_unread() if run.driver is not None else []
    carried: list[Any] = [started]
    carried += [
        MessageArrived(topic=msg.topic, payload=msg.payload, sender=msg.sender)
        for msg in unread
        if msg.topic != EVENTS
    ]
    # A cancel stored but not yet read goes along too: it is addressed to the workflow,
    # not to one run (a retry or cron run never follows one, see plan_next).
    carried += [e for _, e in run.pending if _carried(e)]
    codec, run_id = routes.codec, new.record.run_id
    first = new.draw_inbox_numbers(len(carried))  # the new run is the caller's alone so far
    rows = [
        (inbox_key(run_id, first + i), codec.encode(event), event)
        for i, event in enumerate(carried)
    ]
    return new, rows


def _carried(event: Any) -> bool:
    if type(event) is CancelRequested:
        return True
    return isinstance(event, MessageArrived) and event.call is None
