"""The workflow side: one dynamic temporalio workflow hosts roost's ``Driver`` for every entry.

The workflow type is the roost entry id, the workflow id the roost id. A run builds the
entry's ``Driver`` with ``TemporalPorts`` and feeds it batches of events: first
``Started`` (its seed from ``workflow.random()``), then whatever resolved since (activity
results, fired timers, signals, child exits), each batch at ``workflow.now()``. Each
command the driver returns is carried out as temporalio calls (``_Run.dispatch``); an
outcome comes back as the roost event of the command's seq. The driver is synchronous and
never awaits anything foreign, so it runs on temporalio's deterministic loop unchanged.

An exception out of ``activate`` (a ``NondeterminismError``, a result that cannot be
recorded) is not a temporalio failure: it fails the *workflow task*, which Temporal
retries, as roost's embedded host does.

Signals: a topic is the signal name, its arguments ``[payload, sender]`` (a signal from
the Temporal CLI with one argument has no sender). Names starting with ``@`` are roost's
own (no roost topic starts with one): ``@roost.cancel`` (``process.cancel`` with its
reason), ``@roost.start`` (the start messages, as one signal-with-start) and
``@roost.messages`` (several messages from one workflow, in the order sent).

What a run sends to one destination goes out in the order sent (DESIGN §2): each
destination has one outbox, drained by one task that sends what gathered meanwhile as one
batch (one signal, or one delivery activity on the owning node's queue) and waits for it
before the next. A message or cancel to a child started by this run waits for that child's
start.
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import logging
import types
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Final

import attrs
import temporalio.common
import temporalio.exceptions
import temporalio.workflow as tw

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost._security import SECURITY_KEY, KeyRing, denied, make_ticket, reseal, ticket_error
from roost.actors._app import App, EntryKind
from roost.actors._current import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.mailbox._mailbox import EVENTS
from roost.storage._codec import Codec
from roost.temporal import _tracing
from roost.temporal._counting import count_close
from roost.temporal._failures import application_error, error_of
from roost.temporal._options import (
    CARRIED_MEMO,
    CONTEXT_MEMO,
    OWNER_MEMO,
    PARENT_MEMO,
    STATUS_MEMO,
    TRACE_MEMO,
    WATCHERS_MEMO,
    activity_kwargs,
    child_kwargs,
    search_updates,
)
from roost.workflow._awaitables import DriverView
from roost.workflow._driver import DEFAULT_VERSION, Driver, Ports
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
)
from roost.workflow._recorded import is_plain
from roost.workflow._trust import Trust

__all__ = [
    "CANCEL_SIGNAL",
    "DELIVER_ACTIVITY",
    "EXIT_ACTIVITY",
    "EXIT_DELIVERY_TIMEOUT",
    "MESSAGES_SIGNAL",
    "NOTICE_WORKFLOW",
    "PING_ACTIVITY",
    "PROBE_WORKFLOW",
    "PROCESS_ACTIVITY",
    "PROCESS_START_TIMEOUT",
    "REPLY_SIGNAL",
    "SPAWNED_SIGNAL",
    "START_SIGNAL",
    "STOP_ACTIVITY",
    "TERMINATE_ACTIVITY",
    "UNWATCH_SIGNAL",
    "WATCH_UPDATE",
    "WORKFLOW_NODE",
    "ExitNotice",
    "NodeProbe",
    "RoostWorkflow",
    "TemporalPorts",
    "apps",
    "node_queue",
    "pack_watchers",
    "push_exits",
    "replies_host",
    "reply_target",
    "reply_ticket",
    "unpack_watchers",
    "watch_change",
]

log = logging.getLogger("roost.temporal")

CANCEL_SIGNAL: Final = "@roost.cancel"
START_SIGNAL: Final = "@roost.start"
SPAWNED_SIGNAL: Final = "@roost.spawned"
"""From a node to a workflow: the plain process ``pid`` it spawned there has started (or
could not start), so what the workflow sends it may go."""
REPLY_SIGNAL: Final = "@roost.reply"
"""A reply to a workflow's own ``process.call``: ``[run_id, seq, topic, payload, sender]``,
and ``ticket`` (``reply_ticket``) when the sender has a key ring. The run takes it only
from the call's destination, and, when its worker has a key ring, only with a ticket."""
MESSAGES_SIGNAL: Final = "@roost.messages"
"""Several messages from one workflow to another, ``[[topic, payload, sender], ...]``."""
DELIVER_ACTIVITY: Final = "@roost.deliver"
"""The activity on a node's own queue that hands a workflow's messages to a plain process,
in order: its arguments are ``dest`` and ``[[topic, payload, sender], ...]``."""
STOP_ACTIVITY: Final = "@roost.stop"
"""The activity on a node's own queue that cancels or terminates a plain process there:
its arguments are ``dest``, ``reason`` and ``hard``."""
TERMINATE_ACTIVITY: Final = "@roost.terminate"
"""The activity on the app's task queue that terminates a workflow (its one argument, the
workflow id) with the node's client: workflow code cannot terminate another itself."""
PROCESS_ACTIVITY: Final = "@roost.process"
"""The activity on a node's own queue that runs a plain process a workflow spawned there,
heartbeating while it lives; its result is the process's EXIT ``[value, error]``. Its
arguments: ``entry``, ``args``, ``pid``, ``watcher`` (the workflow) and ``context``."""
PROCESS_START_TIMEOUT = dt.timedelta(seconds=30)
"""How long a spawn waits for its node to take the process (read at each spawn)."""
_PROCESS_HEARTBEAT: Final = dt.timedelta(seconds=10)
_PROCESS_LIMIT: Final = dt.timedelta(days=3650)  # a plain process may live as long as it likes
WATCH_UPDATE: Final = "@roost.watch"
"""The update by which a node's plain process ``watcher`` monitors or links this workflow,
``[watcher, kind]`` (kind ``"monitor"`` or ``"link"``); the run notifies it at its close.
Refused once the run's close has been pushed: the watcher then reads the outcome."""
UNWATCH_SIGNAL: Final = "@roost.unwatch"
"""From a node: its plain process ``watcher`` dropped its monitor and link, ``[watcher]``."""
EXIT_ACTIVITY: Final = "@roost.exit"
"""The activity on a node's own queue that gives a workflow's close to the plain processes
watching it there: ``pid``, the closing ``run_id``, ``[[watcher, [kind, ...]], ...]``,
``value``, ``error`` and ``final`` (False: the workflow goes on in a retry or cron run; the
node waits for that). The node gives the EXITs once that run's close is recorded."""
EXIT_DELIVERY_TIMEOUT = dt.timedelta(seconds=10)
"""How long a close waits for a watcher's node to take its EXITs (read at each close): a
node that is gone delays the close by this much, once, and its watchers get nothing."""
NOTICE_WORKFLOW: Final = "@roost.exits"
"""The workflow that gives a terminated workflow's close to its watchers (``ExitNotice``):
a terminated run runs no code of its own."""
PING_ACTIVITY: Final = "@roost.ping"
"""The activity on a node's own queue that answers whether that node is alive."""
PROBE_WORKFLOW: Final = "@roost.probe"
"""The workflow that asks a node's queue for a live node (``NodeProbe``)."""
# How long a probe waits for a live node to take its ping.
_PROBE_WAIT: Final = dt.timedelta(seconds=1.5)
WORKFLOW_NODE: Final = "local"
"""The node part of a workflow PID on this host: a workflow belongs to the cluster, so its
PID is ``{<app>:workflows|<id>}`` whichever node runs it."""

_CODEC = Codec()

# A message to a plain process waits this long for its node to take it; then it is dropped
# (logged), as a send to a process that is gone.
_DELIVERY_TIMEOUT: Final = dt.timedelta(seconds=30)
_DELIVER_ONCE: Final = temporalio.common.RetryPolicy(maximum_attempts=1)


def replies_host(app_name: str) -> str:
    """The PID host of the reply addresses of an app's workflows' calls."""
    return f"{app_name}:replies"


def reply_target(pid: Pid) -> tuple[str, str, int]:
    """The workflow id, run id and call seq of a reply address ``{local@<app>:replies|...}``.

    Raises:
        roost.Error: NotFound for a PID of that host that no call made.
    """
    run_id, _, rest = pid.id.partition(".")
    seq, _, workflow_id = rest.partition(".")
    if not (run_id and seq.isdigit() and workflow_id):
        raise Error(f"{pid} is no workflow call's reply address", kind=ErrorKind.NOT_FOUND)
    return workflow_id, run_id, int(seq)


def node_queue(name: str) -> str:
    """The task queue of node ``name``: what must reach that node (its plain processes)."""
    return f"roost-node-{name}"


class TemporalPorts(Ports):
    """What the driver asks of a run hosted on Temporal."""

    __slots__ = ("entry", "host", "pid", "shim", "values")

    def __init__(self, app: App, host: str, pid: Pid, context: dict[str, Any]) -> None:
        self.host = host
        self.pid = pid
        self.values = context
        self.entry = app.resolve(tw.info().workflow_type)
        # Workflow code resolves entries through its node's app (as in the Replayer).
        self.shim: Any = types.SimpleNamespace(app=app)

    def make_context(self, driver: DriverView) -> contextvars.Context:
        """A context in which workflow code is this run's process, on ``driver``'s backend."""
        ctx = contextvars.copy_context()
        proc = WorkflowProcess(self.pid, self.entry, driver, self.values, self.shim)
        ctx.run(set_current, proc)
        ctx.run(use_backend, driver.backend)
        return ctx

    def trust(self) -> Trust:
        """The worker's key ring and the app's policies: envelopes are checked here too."""
        return apps.trust(self.shim.app)

    def check(self, value: object, what: str) -> None:
        """Encode ``value`` with roost's codec (raises Invalid if it cannot be)."""
        if not is_plain(value):
            _CODEC.check(value, what=what)

    def spawn_pid(self, seq: int) -> Pid:
        """The PID of the plain process command ``seq`` starts on the run's owning node.

        Raises:
            roost.Error: InvalidState for a run no node started (the CLI's): it has no
                node to start plain processes on.
        """
        info = tw.info()
        owner = tw.memo_value(OWNER_MEMO, None)
        if not isinstance(owner, str):
            raise Error(
                f"workflow {info.workflow_id!r} was started outside a node (by the CLI or "
                "a hand-written client), so it has no node to spawn plain processes on: "
                "start it from a process of a node",
                kind=ErrorKind.INVALID_STATE,
                retryable=False,
            )
        name = f"{info.workflow_id}.{info.run_id[:6]}.{seq}"
        return Pid.trusted(owner, self.shim.app.default_host, name)

    def child_pid(self, workflow_id: str) -> Pid:
        """A child workflow's PID: its id on the cluster."""
        return Pid.trusted(WORKFLOW_NODE, self.host, workflow_id)

    def reply_pid(self, seq: int) -> Pid:
        """The reply address of the run's call ``seq``: ``<run id>.<seq>.<workflow id>``.

        A reply to it is a ``@roost.reply`` signal to this workflow, for this run only.
        """
        info = tw.info()
        name = f"{info.run_id}.{seq}.{info.workflow_id}"
        return Pid.trusted(WORKFLOW_NODE, replies_host(self.shim.app.name), name)

    def encoded_size(self, value: object) -> int:
        """Bytes of ``value`` by roost's codec."""
        return len(_CODEC.encode(value))

    def choose_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """The highest ``v`` with ``workflow.patched(f"{change_id}@{v}")``, else -1.

        A new run (or new code past the replayed history) gets ``max_supported``, its
        marker recorded by Temporal; a replay finds the version its run recorded; a run
        whose history predates the change finds none (``DEFAULT_VERSION``).
        """
        for version in range(max_supported, max(min_supported, 0) - 1, -1):
            if tw.patched(f"{change_id}@{version}"):
                return version
        return DEFAULT_VERSION


def _decode(args: Sequence[temporalio.common.RawValue]) -> list[Any]:
    return tw.payload_converter().from_payloads([arg.payload for arg in args])


def signal_events(name: str, values: list[Any]) -> list[Event]:
    """The roost events one signal stands for."""
    if name == CANCEL_SIGNAL:
        return [CancelRequested(reason=values[0] if values else None)]
    if name == START_SIGNAL:
        messages, sender = values[0], values[1] if len(values) > 1 else None
        return [MessageArrived(topic=t, payload=p, sender=sender) for t, p in messages]
    if name == REPLY_SIGNAL:
        run_id, seq, topic, payload, sender = values[:5]
        if run_id != tw.info().run_id:
            return []  # a reply to a call of a run before this one: dropped, as a late one
        return [MessageArrived(topic=topic, payload=payload, sender=sender, call=seq)]
    if name == MESSAGES_SIGNAL:
        return [MessageArrived(topic=t, payload=p, sender=s) for t, p, s in values[0]]
    sender = values[1] if len(values) > 1 and isinstance(values[1], Pid) else None
    return [MessageArrived(topic=name, payload=values[0] if values else None, sender=sender)]


class _Apps:
    """The apps whose workflows this process hosts, by name (one per open Temporal host).

    temporalio builds a workflow's instance itself, from a module-level class: the run finds
    its app by the app part of its workflow type (``"shop:order"`` -> ``"shop"``).
    """

    def __init__(self) -> None:
        self._apps: dict[str, list[App]] = {}
        self._rings: dict[str, KeyRing | None] = {}

    def add(self, app: App, ring: KeyRing | None = None) -> None:
        """``app``'s workflows are hosted here (until ``remove``), checked with ``ring``.

        The nodes of one process that host the same app share one ring: the last one
        added is the one their runs' envelopes and tickets are checked with.
        """
        self._apps.setdefault(app.name, []).append(app)
        self._rings[app.name] = ring

    def remove(self, app: App) -> None:
        """Undo one ``add``."""
        held = self._apps.get(app.name, [])
        if app in held:
            held.remove(app)
        if not held:
            self._apps.pop(app.name, None)
            self._rings.pop(app.name, None)

    def trust(self, app: App) -> Trust:
        """What ``app``'s secured runs are checked against on this worker."""
        return Trust(self._rings.get(app.name), frozenset(app.policies))

    def find(self, workflow_type: str) -> App:
        """The app of ``workflow_type``.

        Raises:
            roost.Error: NotFound when no node of this process hosts that app (the
                workflow task fails, and Temporal retries it on a worker that does).
        """
        name = workflow_type.partition(":")[0]
        held = self._apps.get(name)
        if not held:
            raise Error(
                f"workflow type {workflow_type!r} belongs to no app this worker hosts",
                kind=ErrorKind.NOT_FOUND,
            )
        return held[-1]


apps = _Apps()


@tw.defn(dynamic=True, sandboxed=False)
class RoostWorkflow:
    """One roost workflow run, whatever its entry (its type is the entry id)."""

    def __init__(self) -> None:
        # Signals and updates may arrive before ``run`` starts (signal-with-start).
        self.incoming: list[Event] = []
        self.calls: dict[Pid, asyncio.Future[list[Any]]] = {}
        self.spawned: dict[Pid, asyncio.Future[None]] = {}
        # The destination of each call this run made, by seq: only it may reply.
        self.call_dests: dict[int, Pid | str] = {}
        # The plain processes watching this workflow, kept across continue-as-new.
        self.watching = _Watching(unpack_watchers(tw.memo_value(WATCHERS_MEMO, [])))

    @tw.signal(dynamic=True)
    def on_signal(self, name: str, args: Sequence[temporalio.common.RawValue]) -> None:
        """A signal: the events it stands for, for the next activation."""
        values = _decode(args)
        if name == SPAWNED_SIGNAL:  # not an event: it lets the sends to that process go
            started = self.spawned.get(values[0]) if values else None
            if started is not None and not started.done():
                started.set_result(None)
            return
        if name == UNWATCH_SIGNAL:  # not an event: who to notify at the close
            watch_change(self.watching.watchers, name, values)
            return
        if name == REPLY_SIGNAL:
            refused = self._reply_refusal(values)
            if refused is not None:
                if not tw.unsafe.is_replaying():
                    log.warning("workflow %s: a reply dropped: %s", tw.info().workflow_id, refused)
                return
        elif not name.startswith("@roost."):
            refused = self._refusal(name, values)
            if refused is not None:
                if not tw.unsafe.is_replaying():
                    log.warning(
                        "workflow %s: message %r dropped: %s", tw.info().workflow_id, name, refused
                    )
                return
        self.incoming.extend(signal_events(name, values))

    def _refusal(self, topic: str, values: list[Any]) -> Error | None:
        """Why a message from outside may not reach this run (a secured one needs a ticket).

        The check reads only the run's memo and the worker's key ring, so a replay decides
        the same. A refused signal stays in Temporal's history but never reaches the
        workflow's code; a refused update is rejected by its validator and leaves none (the
        embedded host refuses both at the sender).
        """
        context = tw.memo_value(CONTEXT_MEMO, {})
        if SECURITY_KEY not in context:
            return None
        ticket = values[2] if len(values) > 2 else None
        return ticket_error(ticket, tw.info().workflow_id, topic, apps.trust(self._app()).ring)

    def _reply_refusal(self, values: list[Any]) -> Error | None:
        """Why a ``@roost.reply`` may not answer this run's call (None: it may).

        As on the embedded host, only the call's destination replies: the reply's sender
        must be it. The sender is what the signal says, so a worker with a key ring also
        asks for a ticket that binds the sender to this call (``reply_ticket``).
        """
        if len(values) < 5 or not isinstance(values[1], int) or not isinstance(values[2], str):
            return Error("a malformed reply", kind=ErrorKind.INVALID)
        run_id, seq, topic, _payload, sender = values[:5]
        if run_id != tw.info().run_id:
            return None  # a reply to an earlier run's call: dropped as a late one
        dest = self.call_dests.get(seq)
        if dest is None:
            return Error(f"no call {seq} of this run", kind=ErrorKind.NOT_FOUND)
        if not _is_callee(sender, dest, replies_host(self._app().name)):
            return denied(f"only {dest} may reply to call {seq}; {sender} is not it")
        ring = apps.trust(self._app()).ring
        if ring is None:
            return None
        ticket = values[5] if len(values) > 5 else None
        workflow_id = tw.info().workflow_id
        refused = ticket_error(ticket, workflow_id, _reply_topic(run_id, seq, topic), ring)
        if refused is None and (
            not isinstance(ticket, Mapping) or ticket.get("actor") != str(sender)
        ):
            refused = denied(f"the reply's ticket is not {sender}'s")
        return refused

    @staticmethod
    def _app() -> App:
        return apps.find(tw.info().workflow_type)

    @tw.update(dynamic=True)
    async def on_update(self, name: str, args: Sequence[temporalio.common.RawValue]) -> Any:
        """A ``process.call``: the request as a message from the caller's reply address.

        The update's result is ``[topic, payload]`` of the workflow's first reply to that
        address that is not ``"ack"`` (the caller's node reads ``nak`` and ``error`` as the
        embedded host does).
        """
        values = _decode(args)
        payload = values[0] if values else None
        caller = values[1] if len(values) > 1 and isinstance(values[1], Pid) else None
        if caller is None or caller in self.calls:
            raise application_error(
                Error(
                    f"a call to {tw.info().workflow_id!r} needs a reply address of its own "
                    "(process.call gives one; a hand-written update passes [payload, pid])",
                    kind=ErrorKind.INVALID,
                )
            )
        reply = self.calls[caller] = asyncio.get_running_loop().create_future()
        self.incoming.append(MessageArrived(topic=name, payload=payload, sender=caller))
        try:
            return await reply
        except Error as exc:
            raise application_error(exc) from None
        finally:
            del self.calls[caller]

    @on_update.validator
    def admit_update(self, name: str, args: Sequence[temporalio.common.RawValue]) -> None:
        """A secured run takes a call only with a relay ticket (refused: nothing recorded)."""
        refused = self._refusal(name, _decode(args))
        if refused is not None:
            raise application_error(refused)

    @tw.update(name=WATCH_UPDATE)
    def watch(self, watcher: Any, kind: Any) -> None:
        """A plain process watches this workflow: it gets the EXIT pushed at the close."""
        if self.watching.pushed:  # the validator refused it; a replay never gets here
            raise application_error(_closing_error(tw.info().workflow_id))
        watch_change(self.watching.watchers, WATCH_UPDATE, [watcher, kind])

    @watch.validator
    def admit_watch(self, watcher: Any, kind: Any) -> None:
        """Refuse a malformed watch, and one that comes after the close was pushed."""
        if not isinstance(watcher, Pid) or kind not in ("monitor", "link"):
            raise application_error(
                Error(
                    f"a watch of {tw.info().workflow_id!r} takes [pid, 'monitor'|'link']",
                    kind=ErrorKind.INVALID,
                )
            )
        if self.watching.pushed:
            raise application_error(_closing_error(tw.info().workflow_id))

    @tw.run
    async def run(self, args: Sequence[temporalio.common.RawValue]) -> Any:
        """Run the roost workflow of this type to its end."""
        app = apps.find(tw.info().workflow_type)
        run = _Run(
            app,
            f"{app.name}:workflows",
            self.incoming,
            self.calls,
            self.spawned,
            watching=self.watching,
            call_dests=self.call_dests,
        )
        return await run.run(_decode(args))


@tw.defn(name=PROBE_WORKFLOW, sandboxed=False)
class NodeProbe:
    """Whether a live node serves the queue of node ``name`` (its ping is taken in time)."""

    @tw.run
    async def run(self, name: str) -> bool:
        """True when a node of that name answered."""
        try:
            await tw.execute_activity(
                PING_ACTIVITY,
                task_queue=node_queue(name),
                schedule_to_start_timeout=_PROBE_WAIT,
                start_to_close_timeout=_PROBE_WAIT,
                retry_policy=_DELIVER_ONCE,
            )
        except temporalio.exceptions.ActivityError:
            return False
        return True


@attrs.frozen
class _Message:
    """A message waiting in an outbox."""

    topic: str
    payload: Any
    sender: Pid


@attrs.frozen
class _Cancel:
    """A ``process.cancel`` of a workflow, waiting in its outbox."""

    reason: str | None


@attrs.frozen
class _Reply:
    """A reply to another workflow's call, waiting in that workflow's outbox."""

    run_id: str
    seq: int
    topic: str
    payload: Any
    sender: Pid


@attrs.frozen
class _Stop:
    """A ``process.terminate`` of a workflow, or a cancel or terminate of a plain process."""

    reason: str | None
    hard: bool


_Outgoing = _Message | _Cancel | _Reply | _Stop
_Batch = list[_Message] | _Cancel | _Reply | _Stop


class _Run:
    """The state of one run: its driver, the events resolved since its last activation."""

    def __init__(
        self,
        app: App,
        host: str,
        incoming: list[Event],
        calls: dict[Pid, asyncio.Future[list[Any]]],
        spawned: dict[Pid, asyncio.Future[None]],
        *,
        watching: _Watching,
        call_dests: dict[int, Pid | str],
    ) -> None:
        self.app = app
        self.host = host
        self.incoming = incoming
        # The open ``process.call`` updates, by the caller's reply address (the workflow's
        # instance owns it: an update may come before the run starts).
        self.calls = calls
        # What each call of this run was sent to (the instance owns it: replies check it).
        self.call_dests = call_dests
        # The start of each plain process this run spawned, set by the node's
        # ``@roost.spawned`` signal: sends to it wait for it, as those to a child do.
        self.spawned = spawned
        # The plain processes to notify at the close (the workflow's instance owns it: a
        # watch may come before the run starts), changed only by the watch update and the
        # unwatch signal.
        self.watching = watching
        self.activities: dict[int, asyncio.Task[None]] = {}
        # Per destination (a workflow id, or a plain process's PID): what waits to be sent,
        # and the one task sending it (awaited before the run closes).
        self.outboxes: dict[str | Pid, list[_Outgoing]] = {}
        self.senders: dict[str | Pid, asyncio.Task[None]] = {}
        # The start of each child of this run, by workflow id: sends to it wait for it.
        self.children: dict[str, asyncio.Future[None]] = {}
        self.cancel_requested = False
        info = tw.info()
        self.pid = Pid.trusted(WORKFLOW_NODE, host, info.workflow_id)

    async def run(self, args: list[Any]) -> Any:
        info = tw.info()
        entry = self.app.resolve(info.workflow_type)  # unknown: a task failure, retried
        if entry.kind is not EntryKind.WORKFLOW:
            raise Error(f"{entry.id!r} is not a workflow entry", kind=ErrorKind.INVALID)
        context = tw.memo_value(CONTEXT_MEMO, {})
        started = Started(
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            workflow_type=info.workflow_type,
            args=args,
            seed=tw.random().getrandbits(64),
            context=context,
            task_queue=info.task_queue,
            parent=tw.memo_value(PARENT_MEMO, None),
            attempt=info.attempt,
        )
        driver = Driver(entry.fn, TemporalPorts(self.app, self.host, self.pid, context))
        # What the run before this one (continued as new) had not read comes first.
        carried = _uncarry(tw.memo_value(CARRIED_MEMO, []))
        batch: list[Event] = [started, *carried, *self._take()]
        try:
            while True:
                for command in driver.activate(tw.now(), batch):
                    closing = self.dispatch(command)
                    if closing is not None:
                        return await self.close(closing, driver)
                try:
                    await tw.wait_condition(lambda: bool(self.incoming))
                except asyncio.CancelledError:
                    # Temporal's own cancel (the CLI, the UI): a Cancel event, no reason.
                    self.incoming.append(CancelRequested(reason=None))
                batch = self._take()
        finally:
            driver.close()

    def _take(self) -> list[Event]:
        batch = list(self.incoming)
        self.incoming.clear()
        if any(type(event) is CancelRequested for event in batch):
            self.cancel_requested = True
        return batch

    # -- commands ------------------------------------------------------------------------

    def dispatch(self, command: Command) -> Complete | Fail | ContinueAsNew | None:  # noqa: PLR0912 - one arm per command kind
        """Carry out one command; the closing one is returned for ``close``."""
        match command:
            case ScheduleActivity():
                self.activities[command.seq] = self._task(self._activity(command))
            case StartTimer(seq=seq, seconds=seconds):
                self._task(self._timer(seq, seconds))
            case CancelActivity(activity=seq):
                task = self.activities.pop(seq, None)
                if task is not None:
                    task.cancel()
            case SendMessage():
                self._send(command)
            case StopProcess():
                self._stop(command)
            case StartChild():
                self.children[command.workflow_id] = asyncio.get_running_loop().create_future()
                self._task(self._child(command))
            case UpsertAttributes(search=search, memo=memo):
                if search:
                    tw.upsert_search_attributes(search_updates(search))
                if memo:
                    tw.upsert_memo(memo)
            case VersionMarker():
                pass  # recorded by Temporal as the marker of ``workflow.patched``
            case SpawnProcess():
                self.spawned[command.pid] = asyncio.get_running_loop().create_future()
                self._task(self._process(command))
            case Complete() | Fail() | ContinueAsNew():
                return command
        return None

    def _task(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(coro)

    async def _activity(self, command: ScheduleActivity) -> None:
        try:
            value = await tw.execute_activity(
                command.entry,
                args=command.args,
                activity_id=str(command.seq),
                **activity_kwargs(command.options),
            )
        except temporalio.exceptions.ActivityError as exc:
            event = ActivityResolved(seq=command.seq, error=error_of(exc))
        else:
            event = ActivityResolved(seq=command.seq, value=value)
        self.activities.pop(command.seq, None)
        self.incoming.append(event)

    async def _timer(self, seq: int, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.incoming.append(TimerFired(seq=seq))

    def _workflow_id(self, dest: Pid | str) -> str | None:
        """The workflow id a send or stop goes to (a name is a workflow id here)."""
        if isinstance(dest, str):
            return dest
        return dest.id if dest.host == self.host else None

    def _send(self, command: SendMessage) -> None:
        if command.reply_to is not None:  # a call of this run: only ``dest`` may reply
            self.call_dests[command.seq] = command.dest
        reply = self.calls.get(command.dest) if isinstance(command.dest, Pid) else None
        if reply is not None:  # a reply to an open call: its update's result, unless an ack
            if command.topic != "ack" and not reply.done():
                reply.set_result([command.topic, command.payload])
            return
        sender = command.reply_to or self.pid
        if isinstance(command.dest, Pid) and command.dest.host == replies_host(self.app.name):
            try:  # a reply to a workflow's call: a signal to that workflow
                workflow_id, run_id, seq = reply_target(command.dest)
            except Error as exc:
                log.warning("workflow %s: a send to %s is dropped: %s", self.pid, command.dest, exc)
                return
            self._post(workflow_id, _Reply(run_id, seq, command.topic, command.payload, sender))
            return
        target = self._workflow_id(command.dest)
        self._post(
            command.dest if target is None else target,
            _Message(command.topic, command.payload, sender),
        )

    def _stop(self, command: StopProcess) -> None:
        """A cancel (a signal) or a terminate of a workflow; a stop of a plain process.

        A workflow cannot terminate another itself: an activity on its task queue does it
        with the node's client. A plain process is stopped on its node, by an activity on
        that node's queue. Either is sent in order with the run's messages to the target.
        """
        target = self._workflow_id(command.dest)
        if target is not None and not command.hard:
            self._post(target, _Cancel(command.reason))
        else:
            self._post(target or command.dest, _Stop(command.reason, command.hard))

    def _post(self, dest: str | Pid, item: _Outgoing) -> None:
        """Queue ``item`` for ``dest``; start the destination's sender if it has none."""
        self.outboxes.setdefault(dest, []).append(item)
        if dest not in self.senders:
            self.senders[dest] = self._task(self._drain(dest))

    async def _drain(self, dest: str | Pid) -> None:
        """Send ``dest``'s outbox, batch after batch, each once the one before is done."""
        try:
            while batch := self.outboxes.pop(dest, None):
                if isinstance(dest, Pid):
                    await self._deliver(dest, batch)
                else:
                    await self._signal(dest, batch)
        finally:
            del self.senders[dest]

    async def _signal(self, target: str, batch: list[_Outgoing]) -> None:
        """Signal the workflow ``target``: runs of messages as one signal, each cancel as one."""
        started = self.children.get(target)
        if started is not None:
            await started
        handle = tw.get_external_workflow_handle(target)
        for run in _runs(batch):
            args: list[Any]
            if isinstance(run, _Stop):
                await self._outside(
                    TERMINATE_ACTIVITY, [target], tw.info().task_queue, f"terminate {target}"
                )
                continue
            if isinstance(run, _Cancel):
                name, args = CANCEL_SIGNAL, [run.reason]
            elif isinstance(run, _Reply):
                name, args = REPLY_SIGNAL, [run.run_id, run.seq, run.topic, run.payload, run.sender]
                ring = apps.trust(self.app).ring
                if ring is not None:
                    args.append(
                        reply_ticket(ring, target, run.run_id, run.seq, run.topic, run.sender)
                    )
            elif len(run) == 1:
                name, args = run[0].topic, [run[0].payload, run[0].sender]
            else:
                name, args = MESSAGES_SIGNAL, [[[m.topic, m.payload, m.sender] for m in run]]
            try:
                await handle.signal(name, args=args)
            except Exception as exc:  # noqa: BLE001 - a target that is gone is logged; a send never raises
                log.warning(
                    "workflow %s: the signal %r to %s failed: %s", self.pid, name, target, exc
                )

    async def _deliver(self, dest: Pid, batch: list[_Outgoing]) -> None:
        """Hand ``batch`` to the plain process ``dest`` through its node's own queue."""
        started = self.spawned.get(dest)
        if started is not None:
            await started
        queue = node_queue(dest.node)
        for run in _runs(batch):
            if isinstance(run, list):
                messages = [[m.topic, m.payload, m.sender] for m in run]
                what = f"the delivery of {len(messages)} message(s) to {dest}"
                await self._outside(DELIVER_ACTIVITY, [dest, messages], queue, what)
            elif isinstance(run, _Stop):
                verb = "terminate" if run.hard else "cancel"
                await self._outside(
                    STOP_ACTIVITY, [dest, run.reason, run.hard], queue, f"{verb} {dest}"
                )

    async def _outside(self, name: str, args: list[Any], queue: str, what: str) -> None:
        """Run one of roost's own activities once on ``queue``; a failure is logged."""
        try:
            await tw.execute_activity(
                name,
                args=args,
                task_queue=queue,
                schedule_to_close_timeout=_DELIVERY_TIMEOUT,
                retry_policy=_DELIVER_ONCE,
            )
        except Exception as exc:  # noqa: BLE001 - a failed send or stop is logged; it never raises
            log.warning("workflow %s: %s failed: %s", self.pid, what, error_of(exc))

    async def _process(self, command: SpawnProcess) -> None:
        """Run the plain process on its node, through a heartbeating activity there.

        The activity's result is the process's EXIT; a node that does not take it in
        time, or stops heartbeating (it died), is an ``Unavailable`` EXIT.
        """
        pid = command.pid
        value: Any = None
        error: Error | None = None
        try:
            value, error = await tw.execute_activity(
                PROCESS_ACTIVITY,
                args=[command.entry, command.args, pid, self.pid, tw.memo_value(CONTEXT_MEMO, {})],
                task_queue=node_queue(pid.node),
                schedule_to_start_timeout=PROCESS_START_TIMEOUT,
                start_to_close_timeout=_PROCESS_LIMIT,
                heartbeat_timeout=_PROCESS_HEARTBEAT,
                retry_policy=_DELIVER_ONCE,
            )
        except temporalio.exceptions.ActivityError as exc:
            if isinstance(exc.cause, temporalio.exceptions.TimeoutError):
                error = Error(
                    f"the node {pid.node!r} did not run or stopped answering for the process "
                    f"{pid} ({error_of(exc).message}): it has stopped or cannot be reached",
                    kind=ErrorKind.UNAVAILABLE,
                    details={"node": pid.node},
                )
            else:
                error = error_of(exc)
        started = self.spawned[pid]
        if not started.done():  # ended unstarted (or unannounced): what waits for it may go
            started.set_result(None)
        self.incoming.append(ProcessExited(pid=pid, value=value, error=error))

    def _child_context(self, workflow_id: str) -> Mapping[str, Any]:
        """The run's context for a child: a security context sealed for the child's id.

        The seal is an HMAC of the same inputs, so a replay computes the same memo.
        """
        context: Mapping[str, Any] = tw.memo_value(CONTEXT_MEMO, {})
        if SECURITY_KEY not in context:
            return context
        return reseal(context, workflow_id, apps.trust(self.app).ring)

    def _child_memo(self, workflow_id: str) -> dict[str, Any]:
        """The roost memo of a child this run starts (its span under the run's span)."""
        memo = {
            CONTEXT_MEMO: self._child_context(workflow_id),
            PARENT_MEMO: self.pid,
            OWNER_MEMO: tw.memo_value(OWNER_MEMO, None),
        }
        traced = _tracing.child_trace()
        if traced is not None:
            memo[TRACE_MEMO] = traced
        return memo

    async def _child(self, command: StartChild) -> None:
        pid = Pid.trusted(WORKFLOW_NODE, self.host, command.workflow_id)
        started = self.children[command.workflow_id]
        try:
            try:
                handle = await tw.start_child_workflow(
                    command.entry,
                    args=command.args,
                    id=command.workflow_id,
                    **child_kwargs(
                        command.options,
                        parent_close_policy=command.parent_close_policy,
                        task_queue=tw.info().task_queue,
                        memo=self._child_memo(command.workflow_id),
                    ),
                )
            finally:  # started or refused: what waits to signal it may go
                if not started.done():
                    started.set_result(None)
            value = await handle
        except temporalio.exceptions.ChildWorkflowError as exc:
            self.incoming.append(ProcessExited(pid=pid, error=error_of(exc)))
        except temporalio.exceptions.WorkflowAlreadyStartedError:
            error = Error(
                f"child workflow id {command.workflow_id!r} is already running",
                kind=ErrorKind.ALREADY_EXISTS,
                details={"workflow_id": command.workflow_id},
            )
            self.incoming.append(ProcessExited(pid=pid, error=error))
        except Error as exc:  # an option this host does not carry out
            self.incoming.append(ProcessExited(pid=pid, error=exc))
        else:
            self.incoming.append(ProcessExited(pid=pid, value=value))

    # -- the close -----------------------------------------------------------------------

    async def _end_calls(self) -> None:
        """Fail the calls this run never answered, and let their updates finish first."""
        for reply in self.calls.values():
            if not reply.done():
                reply.set_exception(_closed_error(self.pid.id))
        await tw.wait_condition(tw.all_handlers_finished)

    async def close(self, command: Complete | Fail | ContinueAsNew, driver: Driver) -> Any:  # noqa: RET503 - continue_as_new raises
        """Finish the sends of the last activation, then close the run as ``command`` says.

        A run that continues as new hands its next run what it has not read (API.md:
        nothing is lost): the messages in its mailbox, then the messages and a cancel that
        arrived after its last activation, in that order (as the embedded host does).
        """
        while self.senders:
            await asyncio.gather(*self.senders.values())
        await self._end_calls()
        match command:
            case Complete(value=value):
                if self.cancel_requested:
                    tw.upsert_memo({STATUS_MEMO: "canceled"})
                await self._notify(value, None)
                status = "canceled" if self.cancel_requested else "completed"
                if _final(None):
                    count_close(tw.info().workflow_type, status)
                _tracing.run_closed(status)
                return value
            case Fail(error=error):
                await self._notify(None, error)
                if _final(error):
                    count_close(tw.info().workflow_type, "failed")
                _tracing.run_closed("failed", error)
                raise application_error(error)
        # ContinueAsNew: raises temporalio's ContinueAsNewError, which ends this run.
        unread: list[Event] = [
            MessageArrived(topic=m.topic, payload=m.payload, sender=m.sender)
            for m in driver.mailbox.peek_unread()
            if m.topic != EVENTS
        ]
        unread += self.incoming
        memo = {k: v for k, v in tw.memo().items() if k not in (CARRIED_MEMO, STATUS_MEMO)}
        carried = _carry(unread)
        if carried:
            memo[CARRIED_MEMO] = carried
        self.watching.pushed = True  # its next run takes the watches from here on
        if self.watching.watchers:
            memo[WATCHERS_MEMO] = pack_watchers(self.watching.watchers)
        _tracing.run_closed("continued_as_new")
        tw.continue_as_new(args=command.args, workflow=command.entry, memo=memo)

    async def _notify(self, value: Any, error: Error | None) -> None:
        """Push the close to every plain process watching the run, through its node.

        A watch that arrives while the EXITs are on their way is notified next; one that
        comes after the last of them is refused (``admit_watch``), so none is missed.
        """
        final = _final(error)
        notified: set[Pid] = set()
        watchers = self.watching.watchers
        while pending := {w: k for w, k in watchers.items() if w not in notified}:
            notified.update(pending)
            await push_exits(self.pid, tw.info().run_id, pending, value, error, final=final)
        self.watching.pushed = True


@attrs.define
class _Watching:
    """The plain processes watching a workflow, and whether its close was pushed to them."""

    watchers: dict[Pid, set[str]]
    pushed: bool = False


def _closing_error(workflow_id: str) -> Error:
    return Error(
        f"workflow {workflow_id!r} has closed; its outcome is the EXIT",
        kind=ErrorKind.NOT_FOUND,
        details={"workflow_id": workflow_id},
    )


def _final(error: Error | None) -> bool:
    """Whether the run's close ends the workflow (False: a cron or retry run may follow).

    A close judged not final when no run follows is harmless: the watchers' nodes then
    wait for the workflow's outcome, which comes at once.
    """
    info = tw.info()
    if info.cron_schedule:
        return False
    policy = info.retry_policy
    if error is None or policy is None or error.retryable is False:
        return True
    if error.kind.value in (policy.non_retryable_error_types or ()):
        return True
    return bool(policy.maximum_attempts) and info.attempt >= policy.maximum_attempts


def watch_change(watchers: dict[Pid, set[str]], name: str, values: list[Any]) -> None:
    """Apply one ``@roost.watch`` update or ``@roost.unwatch`` signal (ignored if malformed)."""
    watcher = values[0] if values else None
    if not isinstance(watcher, Pid):
        return
    if name == UNWATCH_SIGNAL:
        watchers.pop(watcher, None)
    elif len(values) > 1 and values[1] in ("monitor", "link"):
        watchers.setdefault(watcher, set()).add(values[1])


def pack_watchers(watchers: Mapping[Pid, set[str]]) -> list[list[Any]]:
    """``watchers`` as a memo or an activity argument holds them: ``[[pid, [kind, ...]], ...]``."""
    return [[watcher, sorted(kinds)] for watcher, kinds in watchers.items()]


def unpack_watchers(packed: Any) -> dict[Pid, set[str]]:
    """What ``pack_watchers`` wrote (anything else: no watchers)."""
    watchers: dict[Pid, set[str]] = {}
    for item in packed if isinstance(packed, list) else ():
        if isinstance(item, list) and len(item) == 2 and isinstance(item[0], Pid):
            watchers.setdefault(item[0], set()).update(k for k in item[1] if isinstance(k, str))
    return watchers


async def push_exits(
    pid: Pid,
    run_id: str,
    watchers: Mapping[Pid, set[str]],
    value: Any,
    error: Error | None,
    *,
    final: bool,
) -> None:
    """Give ``pid``'s close to ``watchers``: one ``@roost.exit`` activity per watcher node.

    Each is bounded by ``EXIT_DELIVERY_TIMEOUT`` and tried once: a node that is gone, or
    stopped, loses its watchers' EXITs (as its processes are gone) and the close goes on.
    """
    by_node: dict[str, dict[Pid, set[str]]] = {}
    for watcher, kinds in watchers.items():
        by_node.setdefault(watcher.node, {})[watcher] = kinds

    async def push(node: str, here: dict[Pid, set[str]]) -> None:
        try:
            await tw.execute_activity(
                EXIT_ACTIVITY,
                args=[pid, run_id, pack_watchers(here), value, error, final],
                task_queue=node_queue(node),
                schedule_to_close_timeout=EXIT_DELIVERY_TIMEOUT,
                retry_policy=_DELIVER_ONCE,
            )
        except Exception as exc:  # noqa: BLE001 - a node that is gone must not fail the close
            log.warning("workflow %s: its EXIT to node %r was not taken: %s", pid, node, exc)

    await asyncio.gather(*(push(node, here) for node, here in sorted(by_node.items())))


@tw.defn(name=NOTICE_WORKFLOW, sandboxed=False)
class ExitNotice:
    """Gives a terminated workflow's close to the watchers its history recorded."""

    @tw.run
    async def run(self, pid: Any, run_id: Any, watchers: Any, error: Any) -> None:
        """Push the EXITs of the terminated run ``run_id`` (``push_exits``) and end."""
        await push_exits(pid, run_id, unpack_watchers(watchers), None, error, final=True)


def _reply_topic(run_id: str, seq: int, topic: str) -> str:
    return f"{REPLY_SIGNAL} {run_id}.{seq} {topic}"


def reply_ticket(  # noqa: PLR0917 - what the ticket binds
    ring: KeyRing, workflow_id: str, run_id: str, seq: int, topic: str, sender: Pid
) -> dict[str, Any]:
    """The ticket of a reply from ``sender`` to call ``seq`` of run ``run_id``."""
    return make_ticket(ring, workflow_id, _reply_topic(run_id, seq, topic), str(sender))


def _is_callee(sender: object, dest: Pid | str, replies: str) -> bool:
    """Whether ``sender`` is what a call to ``dest`` was sent to (a name: that workflow)."""
    if not isinstance(sender, Pid):
        return False
    if isinstance(dest, str):
        return sender.id == dest and sender.host.endswith(":workflows")
    if dest.host == replies:  # a call to a call's reply address: never answered
        return False
    return sender.host == dest.host and sender.id == dest.id and sender.node == dest.node


def _closed_error(workflow_id: str) -> Error:
    return Error(
        f"workflow {workflow_id!r} closed before it replied to the call",
        kind=ErrorKind.NOT_FOUND,
        details={"workflow_id": workflow_id},
    )


def _runs(batch: list[_Outgoing]) -> list[_Batch]:
    """``batch`` as its runs of consecutive messages, and each cancel or stop, in order."""
    runs: list[_Batch] = []
    for item in batch:
        if not isinstance(item, _Message):
            runs.append(item)
        elif runs and isinstance(runs[-1], list):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


_CANCEL_MARK: Final = "@cancel"  # no roost topic starts with "@"


def _carry(events: list[Event]) -> list[list[Any]]:
    """The messages and cancels among ``events``, as ``CARRIED_MEMO`` holds them."""
    out: list[list[Any]] = []
    for event in events:
        if type(event) is MessageArrived and event.call is None:
            out.append([event.topic, event.payload, event.sender])
        elif type(event) is CancelRequested:
            out.append([_CANCEL_MARK, event.reason])
    return out


def _uncarry(carried: list[list[Any]]) -> list[Event]:
    """The events ``_carry`` wrote."""
    events: list[Event] = []
    for item in carried:
        if item[0] == _CANCEL_MARK:
            events.append(CancelRequested(reason=item[1]))
        else:
            events.append(MessageArrived(topic=item[0], payload=item[1], sender=item[2]))
    return events
