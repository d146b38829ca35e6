"""The deterministic workflow driver: roost steps workflow coroutines itself, without trio.

trio randomises the order in which ready tasks run, so replay on trio could diverge. The
driver instead keeps a FIFO ready queue: ``activate(at, events)`` applies the events (which
resolve pending commands or deliver messages), runs every ready coroutine until all are
blocked, and returns the commands they issued. Given the same code and the same batches of
events, it issues the same commands in the same order — the basis of replay.

Workflow code awaits only roost awaitables. Parking goes through the channel backend
protocol (``roost.mailbox``), so channels, ``select`` and the mailbox work unchanged inside
workflows; anything else a coroutine yields (a trio trap, an asyncio future) is thrown back
into it as a clear error.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, SupportsIndex

from roost._errors import Error, ErrorKind, NondeterminismError, invalid
from roost._interrupt import is_ctrl_c
from roost._pid import Pid
from roost._security import SECURITY_KEY
from roost.actors._events import Cancel, Exit
from roost.actors._upgrade import Upgrade
from roost.mailbox._backend import Waiter
from roost.mailbox._channel import Channel, select
from roost.mailbox._mailbox import EVENTS, Mailbox, Message
from roost.workflow._awaitables import PARKS, DriverWaiter, Future, Task, WorkflowActivity
from roost.workflow._history import (
    ActivityResolved,
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
    Started,
    StartTimer,
    StopProcess,
    TimerFired,
    UpsertAttributes,
    VersionMarker,
    new_schedule,
    same_command,
)
from roost.workflow._misuse import (
    call_site,
    check_version_range,
    divergence,
    foreign_error,
    recordable_error,
    trio_misuse,
    unrecordable,
    version_dropped,
    workflow_error,
)
from roost.workflow._options import check_child_id, check_child_options
from roost.workflow._ports import Ports
from roost.workflow._retry import activity_options
from roost.workflow._trust import envelope_error

__all__ = ["DEFAULT_VERSION", "Driver", "Ports", "Status", "WorkflowActivity"]

log = logging.getLogger("roost.workflow")

DEFAULT_VERSION = -1
"""What ``workflow.version`` returns replaying a history made before the change existed."""


class Status:
    """Run states."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CONTINUED = "continued"


RUNNING = Status.RUNNING
_NO_PIDS: frozenset[Pid] = frozenset()
_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)
# -- shared empties of the driver -------------------------------------------------------


class _NoEntries(dict[Any, Any]):
    """The one empty dict every driver shares until it needs one of its own.

    Reads (``get``, ``pop`` with a default, ``in``) work as on any empty dict; a write
    raises, so a missed ``_own`` cannot leak entries into every run.
    """

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("the shared empty dict of drivers is read-only")

    def setdefault(self, key: Any, default: Any = None) -> Any:
        raise TypeError("the shared empty dict of drivers is read-only")

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("the shared empty dict of drivers is read-only")

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]  # refuses, returns nothing
        raise TypeError("the shared empty dict of drivers is read-only")


# Most runs never make a call, wait on a child, start a ticker or ask for a version; and
# an idle run has no command pending. Each empty dict is 64 bytes per cached run: they
# start as this shared one (see ``Driver._own``).
_NONE: Any = _NoEntries()


class _Dropped(list[Any]):
    """Where commands go between activations: nowhere.

    Only a discarded coroutine runs then (a ``finally`` as ``close`` ends it), and what it
    issues belongs to no activation. One shared object, not an idle list per cached run.
    """

    __slots__ = ()

    def append(self, command: Command) -> None:
        """Drop ``command``."""

    def extend(self, commands: Iterable[Command]) -> None:
        """Refused: the driver only appends (a guard for the shared object)."""
        raise TypeError("commands between activations are dropped one by one")

    def insert(self, index: SupportsIndex, command: Command) -> None:
        """Refused, as ``extend``."""
        raise TypeError("commands between activations are dropped one by one")

    def __iadd__(self, commands: Any) -> Any:  # type: ignore[misc]  # refuses, returns nothing
        """Refused, as ``extend``."""
        raise TypeError("commands between activations are dropped one by one")

    def __setitem__(self, index: Any, commands: Any) -> None:
        """Refused, as ``extend`` (the shared list stays empty)."""
        raise TypeError("commands between activations are dropped one by one")


_BETWEEN_ACTIVATIONS = _Dropped()


# The options of an activity called without any (the common case), merged once; each
# command gets its own copy.
_DEFAULT_OPTIONS = activity_options()
# Arguments that always encode (a str may hold a lone surrogate: it is checked).
_SCALARS = frozenset({type(None), bool, int, float, bytes})


class Driver:
    """Runs one workflow run deterministically, one activation at a time.

    Args:
        fn: the workflow's ``async def``.
        ports: what the driver asks of its host: a fresh context per coroutine (workflow
            code sees itself as the current process, with this driver's backend), the
            check of values to record, and the PIDs of what the run starts.
    """

    # Slots: every cached workflow keeps one driver (no per-instance dict to carry).
    __slots__ = (
        "_call_dests",
        "_calls",
        "_child_waits",
        "_commands",
        "_divergence",
        "_events",
        "_events_size",
        "_expected",
        "_expected_at",
        "_fn",
        "_length_base",
        "_pending",
        "_ports",
        "_ready",
        "_rng",
        "_seq",
        "_size_base",
        "_tasks",
        "_tickers",
        "_timers",
        "_versions",
        "activations",
        "children",
        "error",
        "history_length",
        "mailbox",
        "now",
        "result",
        "started",
        "status",
    )

    def __init__(self, fn: Callable[..., Coroutine[Any, Any, Any]], ports: Ports) -> None:
        self._fn = fn
        self._ports = ports
        # The dicts start as the shared ``_NONE`` and are made on first write (``_own``).
        self._calls: dict[int, Channel[Message]] = _NONE
        self._call_dests: dict[int, Any] = _NONE  # an open call's destination, by seq
        # Created on first use: most runs start none (a set is 216 bytes per cached run).
        self.children: set[Pid] | frozenset[Pid] = _NO_PIDS
        self._child_waits: dict[Pid, Future] = _NONE
        # A list read from the front by index (see activate), not a deque: a deque is 760
        # bytes, and every cached run keeps its queue. A coroutine to resume with an error
        # carries it (``Task.throw``): no tuple per step.
        self._ready: list[Task] = []
        self._tasks: list[Task] = []
        self._pending: dict[int, Future] = _NONE
        self._timers: dict[int, Channel[Any]] = _NONE
        self._tickers: dict[int, float] = _NONE
        self._versions: dict[str, int] = _NONE
        self._commands: list[Command] = _BETWEEN_ACTIVATIONS
        # On replay: the commands the history recorded for this activation (the caller's
        # list, read in place), and the index of the next one the code must issue.
        self._expected: Sequence[Command] | None = None
        self._expected_at = 0
        self._seq = 0
        # Seeded on first use: most workflows never draw, and a generator is 2.5 KB.
        self._rng: random.Random | None = None
        self._divergence: NondeterminismError | None = None
        self.mailbox = Mailbox(warn_at=0)  # the host bounds it (workflow_unread_limit)
        self.started: Started | None = None
        self.now = _EPOCH
        self.status = RUNNING
        self.result: Any = None
        self.error: Error | None = None
        self.activations = 0
        # The history so far, as workflow code sees it during an activation: the
        # activations recorded before it (their events and commands, their stored bytes)
        # and this activation's incoming events. See ``history_size``.
        self.history_length = 0
        self._length_base = 0
        self._size_base = 0
        self._events: Sequence[Event] = ()
        self._events_size = 0

    def _own(self, name: str) -> dict[Any, Any]:
        """This driver's own dict ``name``, made on first write (see ``_NONE``)."""
        mine: dict[Any, Any] = getattr(self, name)
        if mine is _NONE:
            mine = {}
            setattr(self, name, mine)
        return mine

    def _own_children(self) -> set[Pid]:
        """The PIDs of what this run started and has not seen end, made on first write."""
        children = self.children
        if not isinstance(children, set):
            children = self.children = set()
        return children

    # -- the activation ------------------------------------------------------------------

    def activate(
        self, at: dt.datetime, events: Sequence[Event], expected: Sequence[Command] | None = None
    ) -> list[Command]:
        """Feed one batch of events, run until every coroutine is blocked, return commands.

        Args:
            at: the activation time (what ``roost.now()`` returns in workflow code).
            events: the incoming events of this activation.
            expected: on replay, the commands the history recorded for this activation.

        Raises:
            roost.NondeterminismError: replayed code issued other commands than recorded.
            roost.Error: the workflow's result (or continue-as-new input) cannot be
                recorded; any ``BaseException`` that is not an ``Exception`` raised in
                workflow code (``SystemExit``, ...). The host treats everything raised
                here as a failed workflow task and drops this driver.
        """
        self.now = at
        self.activations += 1
        self.history_length = self._length_base + len(events)
        self._events, self._events_size = events, -1
        self._expected, self._expected_at = expected, 0
        self._commands = []
        for event in events:
            if type(event) is ActivityResolved:  # the most frequent event, without a call
                waiting = self._pending.pop(event.seq, None)
                if waiting is not None:  # None: cancelled by the workflow meanwhile
                    waiting.resolve(event.value, event.error)
            else:
                self._apply(event)
        started = self.started
        if started is not None and SECURITY_KEY in started.context and self.status == RUNNING:
            trust = self._ports.trust()
            refused = envelope_error(started, trust) if trust is not None else None
            if refused is not None:
                return self._refuse(refused, expected)
        ready, taken, step = self._ready, 0, self._step
        try:
            while taken < len(ready) and self.status == RUNNING:
                task = ready[taken]
                taken += 1
                step(task)
                if self._divergence is not None:  # raised even if workflow code caught it
                    raise self._divergence
        finally:
            del ready[:taken]
        if expected is not None and self._expected_at < len(expected):
            self._diverged(None, expected[self._expected_at], "<the workflow blocked instead>")
        commands, self._commands = self._commands, _BETWEEN_ACTIVATIONS
        self._length_base = self.history_length = self.history_length + len(commands)
        return commands

    def _refuse(self, error: Error, expected: Sequence[Command] | None) -> list[Command]:
        """The envelope failed its check: none of the body runs, the execution fails.

        Replaying, the recorded commands came from a body that ran when the envelope
        still verified: they are passed over (the seq counter follows them), and the live
        activation that follows records the failure.
        """
        if expected is not None:
            for command in expected:
                self._seq = max(self._seq, command.seq)
        else:
            self._issue(Fail(seq=self._next_seq(), error=error))
            self.status, self.error = Status.FAILED, error
            self.close()
        commands, self._commands = self._commands, _BETWEEN_ACTIVATIONS
        self._length_base = self.history_length = self.history_length + len(commands)
        return commands

    @property
    def history_size(self) -> int:
        """Bytes of the history so far: the recorded activations, and this one's events.

        The events' share is their encoded size, measured on first use (most workflows
        never ask), identical live and on replay.
        """
        if self._events_size < 0:
            self._events_size = self._ports.encoded_size(list(self._events))
        return self._size_base + self._events_size

    def recorded(self, size: int) -> None:
        """The activation just run is stored, ``size`` bytes (its encoded ``Activation``)."""
        self._size_base += size
        self._events, self._events_size = (), 0

    def _apply(self, event: Event) -> None:
        if type(event) is ActivityResolved:  # the most frequent event, without a match
            waiting = self._pending.pop(event.seq, None)
            if waiting is not None:  # None: cancelled by the workflow meanwhile
                waiting.resolve(event.value, event.error)
            return
        match event:
            case Started():
                self._start(event)
            case TimerFired(seq=seq):
                self._timer_fired(seq)
            case MessageArrived(call=int() as seq, topic=topic, payload=payload, sender=sender):
                replies = self._calls.get(seq)
                if replies is not None:  # a late reply (after a timeout) is dropped
                    replies._try_send(Message(topic, payload, sender))
            case MessageArrived(topic=topic, payload=payload, sender=sender):
                self.mailbox.deliver(topic, payload, sender, force=True)
            case CancelRequested(reason=reason):
                self.mailbox.deliver(EVENTS, Cancel(reason, self.now), None, force=True)
            case ProcessExited(pid=pid, value=value, error=error):
                self._child_exited(pid, value, error)
            case _:
                raise Error(f"unknown workflow event {event!r}", kind=ErrorKind.INTERNAL)

    def _timer_fired(self, seq: int) -> None:
        future = self._pending.pop(seq, None)
        if future is not None:
            future.resolve(None, None)
        chan = self._timers.pop(seq, None)
        if chan is not None and not chan.closed:
            if not len(chan):  # a ticker skips a tick nobody read, as Go's does
                chan._try_send(self.now)
            period = self._tickers.pop(seq, None)
            if period is not None:
                self._rearm(chan, period)

    def _start(self, started: Started) -> None:
        self.started = self._ports.kept_start(started)
        task = self._spawn(self._fn, tuple(started.args), "main")
        task.main = True

    def _spawn(self, fn: Callable[..., Any], args: tuple[Any, ...], name: str) -> Task:
        ctx = self._ports.make_context(self)
        coro = ctx.run(fn, *args)
        if not isinstance(coro, Coroutine):
            raise invalid(f"{name} must be an async function, got {fn!r}")
        task = Task(coro, ctx, name)
        self._tasks.append(task)
        self._ready.append(task)
        return task

    def _step(self, task: Task) -> None:
        exc = task.throw
        try:
            if exc is None:
                yielded = task.ctx.run(task.coro.send, None)
            else:
                task.throw = None
                yielded = task.ctx.run(task.coro.throw, exc)
        except StopIteration as stop:
            self._tasks.remove(task)
            if task.main:
                self._finish(Complete(seq=self._next_seq(), value=stop.value), task)
        except Upgrade as up:
            self._tasks.remove(task)
            if task.main:
                cmd = ContinueAsNew(seq=self._next_seq(), entry=up.entry.id, args=list(up.args))
                self._finish(cmd, task)
            else:
                error = invalid("process.upgrade must be called from the workflow body")
                self._finish(Fail(seq=self._next_seq(), error=error), task)
        except NondeterminismError:
            raise
        except Exception as error:  # noqa: BLE001 - a workflow error is its result
            self._tasks.remove(task)
            failure = trio_misuse(error) or workflow_error(error)
            self._finish(Fail(seq=self._next_seq(), error=failure), task)
        else:
            if type(yielded) in PARKS:
                yielded.task = task
            else:
                task.throw = foreign_error(task, yielded)
                self._ready.append(task)

    def _finish(self, command: Complete | Fail | ContinueAsNew, task: Task) -> None:
        if isinstance(command, Complete):
            self._check_final(command.value, "result", task)
        elif isinstance(command, ContinueAsNew):
            self._check_final(command.args, "continue-as-new input", task, each=True)
        else:
            try:
                self._validate(command.error, "workflow error")
            except Exception as exc:  # noqa: BLE001 - recorded in a form that encodes
                command = Fail(seq=command.seq, error=recordable_error(command.error, exc))
        self._issue(command)
        match command:
            case Complete(value=value):
                self.status, self.result = Status.COMPLETED, value
            case ContinueAsNew():
                self.status, self.result = Status.CONTINUED, command
            case Fail(error=error):
                self.status, self.error = Status.FAILED, error
        self.close()

    def _check_final(self, value: Any, what: str, task: Task, *, each: bool = False) -> None:
        """Raise (a task failure: no call site to raise it at) if ``value`` cannot be recorded.

        ``each``: ``value`` is a list of arguments, each one a payload of its own.
        """
        try:
            (self._validate_args if each else self._validate)(value, f"workflow {what}")
        except Exception as exc:
            raise unrecordable(what, exc, task) from exc

    def close(self) -> None:
        """Discard the coroutines still blocked (a finished run, or an evicted one).

        What a discarded coroutine raises while it closes (a ``finally`` that fails) is
        logged, never raised: the run it belonged to is over or rebuilt elsewhere.
        """
        tasks, self._tasks = self._tasks, []
        started = self.started
        workflow_id = started.workflow_id if started else "?"
        for task in tasks:
            try:
                task.ctx.run(task.coro.close)
            except BaseException as exc:
                if is_ctrl_c(exc):
                    raise
                log.warning(
                    "workflow %r: coroutine %s raised while it was discarded",
                    workflow_id,
                    task.name,
                    exc_info=True,
                )
        self._ready.clear()

    # -- the channel backend of its workflow code: the driver itself -------------------

    @property
    def backend(self) -> Driver:
        """The channel backend of this driver's workflow code: the driver itself.

        Parking yields to the driver, checkpoints are free; no object of its own per run.
        """
        return self

    def checkpoint_if_cancelled(self) -> Coroutine[Any, Any, None]:
        """Workflows are never trio-cancelled: a no-op."""
        return _no_yield()

    def cancel_shielded_checkpoint(self) -> Coroutine[Any, Any, None]:
        """Scheduling is the driver's FIFO queue: a no-op."""
        return _no_yield()

    def new_waiter(self) -> Waiter:
        """A waiter that requeues the parked coroutine on the driver."""
        return DriverWaiter(self)

    def park(self, waiter: Waiter) -> DriverWaiter:
        """Yield to the driver until the waiter is woken (the waiter is the awaitable)."""
        assert type(waiter) is DriverWaiter
        return waiter

    # -- commands ------------------------------------------------------------------------

    def _validate(self, value: Any, what: str) -> None:
        # A replayed command was validated when it was recorded: skip the re-encode.
        if self._expected is None:
            self._ports.check(value, what)

    def _validate_args(self, args: Sequence[Any], what: str) -> None:
        # One by one: each argument is a payload of its own and gets the payload depth.
        if self._expected is None:
            for i, arg in enumerate(args):
                self._ports.check(arg, f"{what} args[{i}]")

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _next_recorded(self) -> Command | None:
        """On replay, the recorded command the code must issue next (None: none is left)."""
        expected, at = self._expected, self._expected_at
        return expected[at] if expected is not None and at < len(expected) else None

    def _issue(self, command: Command) -> None:
        if self._expected is not None:
            recorded = self._next_recorded()
            self._expected_at += 1
            if recorded is None or not same_command(command, recorded):
                self._diverged(command, recorded, call_site())
        self._commands.append(command)

    def _diverged(self, issued: Command | None, recorded: Command | None, where: str) -> None:
        started = self.started
        workflow = started.workflow_id if started else "?"
        self._stop_replay(divergence(workflow, self.activations, issued, recorded, where))

    def _stop_replay(self, error: NondeterminismError) -> None:
        """Raise ``error``, and remember the first one for ``activate``.

        ``activate`` raises it again after the step, so workflow code that catches
        ``roost.Error`` cannot swallow a divergence.
        """
        if self._divergence is None:
            self._divergence = error
        raise error

    def call_activity(
        self, entry: str, args: tuple[Any, ...], options: Sequence[Mapping[str, Any]] = ()
    ) -> WorkflowActivity:
        """Schedule an activity; await the result for its value (or its error raised).

        ``options`` are option sources (entry defaults, then per-call), merged in order.
        The handle itself is the awaitable: no coroutine frame of the driver's is kept
        while the workflow waits.
        """
        return self.start_activity(entry, args, options)

    def start_activity(
        self, entry: str, args: tuple[Any, ...], options: Sequence[Mapping[str, Any]] = ()
    ) -> WorkflowActivity:
        """Schedule an activity; the handle is awaited for its result, or cancelled."""
        expected, at = self._expected, self._expected_at
        recorded = expected[at] if expected is not None and at < len(expected) else None
        seq = self._seq + 1
        if type(recorded) is ScheduleActivity and recorded.seq == seq and recorded.entry == entry:
            # Replaying a step the history has: the recorded command is the command (the
            # arguments may differ, as everywhere in replay), nothing to build or check.
            self._expected_at = at + 1
            self._commands.append(recorded)
            self._seq = seq
        else:
            if self._expected is None:
                for arg in args:
                    if type(arg) not in _SCALARS:  # the message is built only if needed
                        self._validate_args(args, f"activity {entry!r}")
                        break
            merged = activity_options(*options) if any(options) else dict(_DEFAULT_OPTIONS)
            self._seq = seq
            self._issue(new_schedule(seq, entry, list(args), merged))
        # The handle is the future the result resolves: one object per activity.
        handle = WorkflowActivity(self, seq, entry)
        pending = self._pending
        if pending is _NONE:  # the hot path of ``_own``, inlined
            pending = self._pending = {}
        pending[seq] = handle
        return handle

    def cancel_activity(self, seq: int, entry: str) -> None:
        """Record the cancel of activity ``seq``; its waiters get a Canceled error now."""
        future = self._pending.pop(seq, None)
        if future is None or future.resolved:
            return
        self._issue(CancelActivity(seq=self._next_seq(), activity=seq))
        error = Error(
            f"activity {entry!r} was cancelled by its workflow",
            kind=ErrorKind.CANCELED,
            retryable=False,
            details={"seq": seq},
        )
        future.resolve(None, error)

    async def sleep(self, seconds: float) -> None:
        """A durable timer; returns when it fires."""
        seq = self._next_seq()
        future = Future(self)
        self._own("_pending")[seq] = future
        self._issue(StartTimer(seq=seq, seconds=seconds))
        await future

    def after(self, seconds: float) -> Channel[dt.datetime]:
        """A durable timer as a channel (receives the workflow time when it fires)."""
        seq = self._next_seq()
        chan: Channel[dt.datetime] = Channel(1)
        self._own("_timers")[seq] = chan
        self._issue(StartTimer(seq=seq, seconds=seconds))
        return chan

    def ticker(self, seconds: float) -> Channel[dt.datetime]:
        """A durable ticker: each tick is a durable timer that re-arms the next one."""
        chan: Channel[dt.datetime] = Channel(1)
        self._rearm(chan, seconds)
        return chan

    def _rearm(self, chan: Channel[dt.datetime], seconds: float) -> None:
        seq = self._next_seq()
        self._own("_timers")[seq] = chan
        self._own("_tickers")[seq] = seconds
        self._issue(StartTimer(seq=seq, seconds=seconds))

    def upsert_attributes(self, search: dict[str, Any], memo: dict[str, Any]) -> None:
        """Record new search attributes / memo for this run."""
        self._validate(search, "search attributes")
        self._validate(memo, "memo")
        # The run's record takes them from the command (see the planner): the driver
        # keeps no copy.
        self._issue(UpsertAttributes(seq=self._next_seq(), search=search, memo=memo))

    def send(self, dest: Any, topic: str, payload: Any) -> None:
        """Record an outgoing message (delivered by the runtime after the commit)."""
        self._validate(payload, f"payload of message {topic!r}")
        self._issue(SendMessage(seq=self._next_seq(), dest=dest, topic=topic, payload=payload))

    async def call(self, dest: Any, topic: str, payload: Any, seconds: float) -> Message | None:
        """Send a request from a private reply address; the final reply, None on timeout.

        Replies to that address come back as recorded events for this call only, so
        concurrent calls never mix; ``ack`` replies are skipped.
        """
        self._validate(payload, f"payload of call {topic!r}")
        reply_to = self._ports.reply_pid(self._seq + 1)  # raises if this driver cannot
        seq = self._next_seq()
        replies: Channel[Message] = Channel(64)
        self._own("_calls")[seq] = replies
        self._own("_call_dests")[seq] = dest
        self._issue(
            SendMessage(seq=seq, dest=dest, topic=topic, payload=payload, reply_to=reply_to)
        )
        deadline = self.after(seconds)
        try:
            while True:
                chosen = await select(replies.case_receive(), deadline.case_receive())
                if chosen.index == 1:
                    return None
                if chosen.value.topic != "ack":
                    reply: Message = chosen.value
                    return reply
        finally:
            del self._calls[seq]
            del self._call_dests[seq]

    def open_calls(self) -> dict[int, Any]:
        """The destinations (a Pid or a registered name) of its open calls, by call seq."""
        return dict(self._call_dests)

    def spawn_coroutine(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Run ``fn(*args)`` as another coroutine of this workflow (FIFO after the caller)."""
        self._spawn(fn, args, getattr(fn, "__qualname__", "coroutine"))

    # -- deterministic randomness --------------------------------------------------------

    def rng(self) -> random.Random:
        """The run's random generator, seeded from its history."""
        if self._rng is None:
            if self.started is None:
                raise Error("the workflow has not started", kind=ErrorKind.INVALID_STATE)
            self._rng = random.Random(self.started.seed)  # noqa: S311 - replayable, not crypto
        return self._rng

    def uuid4(self) -> uuid.UUID:
        """A UUID drawn from the run's seeded generator."""
        return uuid.UUID(int=self.rng().getrandbits(128), version=4)

    def uuid7(self) -> uuid.UUID:
        """A version-7 UUID from the workflow time and the seeded generator."""
        ms = int(self.now.timestamp() * 1000) & ((1 << 48) - 1)
        rand = self.rng().getrandbits(74)
        value = ms << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
        return uuid.UUID(int=value)

    def random_bytes(self, n: int) -> bytes:
        """``n`` bytes from the run's seeded generator."""
        return self.rng().randbytes(n)

    def random(self) -> random.Random:
        """A ``random.Random`` seeded from the run's generator (so itself replayable)."""
        return random.Random(self.rng().getrandbits(64))  # noqa: S311 - not crypto

    # -- child workflows and processes ---------------------------------------------------

    def _child_exited(self, pid: Pid, value: Any, error: Error | None) -> None:
        """A child's EXIT: to its ``workflow.exec`` caller, else to the run's events."""
        if pid in self.children:
            self._own_children().discard(pid)
        waiting = self._child_waits.pop(pid, None)
        if waiting is not None:  # a workflow.exec: the result goes to its caller
            waiting.resolve(value, error)
        else:
            exit_event = Exit(pid, value, error, self.now)
            self.mailbox.deliver(EVENTS, exit_event, None, force=True)

    def stop(self, dest: Any, reason: str | None, *, hard: bool) -> None:
        """Record a cancel (or, ``hard``, a terminate) of ``dest``, done after the commit."""
        self._issue(StopProcess(seq=self._next_seq(), dest=dest, reason=reason, hard=hard))

    def spawn_process(self, entry: str, args: tuple[Any, ...]) -> Pid:
        """Record the start of a plain process; its PID is derived from the run and seq.

        The process is monitored: its EXIT comes back as an event in the history.
        """
        self._validate_args(args, f"process {entry!r}")
        pid = self._ports.spawn_pid(self._seq + 1)  # raises if this driver cannot
        seq = self._next_seq()
        self._issue(SpawnProcess(seq=seq, entry=entry, args=list(args), pid=pid))
        self._own_children().add(pid)
        return pid

    def start_child(self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]) -> Pid:
        """Start a child workflow; its EXIT arrives on ``events()`` (it is monitored).

        ``options`` are child start options (``id``, ``parent_close_policy``, timeouts,
        ``retry_policy``, ``cron_schedule``, ...), checked here.
        """
        if self.started is None:
            raise Error("the workflow has not started", kind=ErrorKind.INVALID_STATE)
        workflow_id, policy, child_options = check_child_options(options)
        self._validate_args(args, f"child workflow {entry!r}")
        child_id = workflow_id or check_child_id(f"{self.started.workflow_id}.{self._seq + 1}")
        pid = self._ports.child_pid(child_id)  # raises if this driver cannot
        seq = self._next_seq()
        self._issue(
            StartChild(
                seq=seq,
                entry=entry,
                args=list(args),
                workflow_id=child_id,
                parent_close_policy=policy,
                options=child_options,
            )
        )
        self._own_children().add(pid)
        return pid

    async def exec_child(
        self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]
    ) -> Any:
        """Run a child workflow to its end: its result, or its error raised here."""
        pid = self.start_child(entry, args, options)
        future = Future(self)
        self._own("_child_waits")[pid] = future
        return await future

    # -- workflow.version ----------------------------------------------------------------

    def version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """Deterministic versioning (Temporal's GetVersion).

        A new run records and returns ``max_supported``; a replay returns the recorded
        version, or ``DEFAULT_VERSION`` (-1) for a history made before the change existed.
        A host that replays by itself answers instead (``Ports.choose_version``).
        """
        check_version_range(change_id, min_supported, max_supported)
        chosen = self._versions.get(change_id)
        if chosen is None:
            chosen = self._ports.choose_version(change_id, min_supported, max_supported)
            if chosen is None:
                chosen = self._recorded_version(change_id, max_supported)
            elif chosen != DEFAULT_VERSION:
                # A history made before the change has no marker, whoever decides.
                self._issue(
                    VersionMarker(seq=self._next_seq(), change_id=change_id, version=chosen)
                )
            self._own("_versions")[change_id] = chosen
        if not min_supported <= chosen <= max_supported:
            # Only a replay can hit this: the code dropped support for this run. Like a
            # divergence, it stops the replay (the run stays open until the code is fixed)
            # instead of recording a failure into the run's history.
            self._stop_replay(version_dropped(change_id, chosen, min_supported, max_supported))
        return chosen

    def _recorded_version(self, change_id: str, max_supported: int) -> int:
        """The version from the replayed commands (``max_supported`` when not replaying)."""
        if self._expected is None:
            self._issue(
                VersionMarker(seq=self._next_seq(), change_id=change_id, version=max_supported)
            )
            return max_supported
        nxt = self._next_recorded()
        if isinstance(nxt, VersionMarker) and nxt.change_id == change_id:
            self._issue(
                VersionMarker(seq=self._next_seq(), change_id=change_id, version=nxt.version)
            )
            return int(nxt.version)
        return DEFAULT_VERSION  # replaying a history made before this change


async def _no_yield() -> None:
    return None
