"""Workflow history records: incoming events, the commands code issues, and activations.

A run's history is a list of ``Activation`` records. Each holds the incoming events fed to
the workflow in one step and the commands the code issued in reply. Keeping activation
boundaries matters: which events arrive *together* decides, for example, which case of a
``select`` wins, so replay must feed exactly the recorded batches.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from roost._errors import Error, invalid
from roost._pid import Pid
from roost.storage._codec import record
from roost.workflow._builders import maker

__all__ = [
    "Activation",
    "ActivityResolved",
    "CancelActivity",
    "CancelRequested",
    "Command",
    "Complete",
    "ContinueAsNew",
    "Event",
    "Fail",
    "HistoryItem",
    "MessageArrived",
    "ProcessExited",
    "ScheduleActivity",
    "SendMessage",
    "SpawnProcess",
    "StartChild",
    "StartTimer",
    "Started",
    "StopProcess",
    "TimerFired",
    "UpsertAttributes",
    "VersionMarker",
    "WorkflowTask",
    "describe",
    "flatten",
    "new_activation",
    "new_schedule",
    "unflatten",
]


# -- incoming events -----------------------------------------------------------------------


@record("wf.started")
@attrs.frozen(kw_only=True)
class Started:
    """The run began: its identity, input, context and the seed of its randomness."""

    workflow_id: str
    run_id: str
    workflow_type: str
    args: list[Any]
    seed: int
    context: dict[str, Any] = attrs.field(factory=dict)
    task_queue: str = "default"
    parent: Pid | None = None
    attempt: int = 1


@record("wf.activity_resolved")
@attrs.frozen(kw_only=True)
class ActivityResolved:
    """An activity finished: ``value``, or ``error`` after its retries ran out."""

    seq: int
    value: Any = None
    error: Error | None = None


@record("wf.timer_fired")
@attrs.frozen(kw_only=True)
class TimerFired:
    """A durable timer fell due."""

    seq: int


@record("wf.message_arrived")
@attrs.frozen(kw_only=True)
class MessageArrived:
    """A message (a signal) was sent to the workflow."""

    topic: str
    payload: Any = None
    sender: Pid | None = None
    call: int | None = None  # a reply to the workflow's ``process.call`` with this seq


@record("wf.cancel_requested")
@attrs.frozen(kw_only=True)
class CancelRequested:
    """Someone asked the workflow to stop; it sees a ``Cancel`` event."""

    reason: str | None = None


@record("wf.process_exited")
@attrs.frozen(kw_only=True)
class ProcessExited:
    """A plain process the workflow spawned ended (it arrives as an ``Exit`` event)."""

    pid: Pid
    value: Any = None
    error: Error | None = None


Event = Started | ActivityResolved | TimerFired | MessageArrived | CancelRequested | ProcessExited
"""An incoming event: what a host feeds a driver's ``activate``."""


# -- commands --------------------------------------------------------------------------------


@record("wf.schedule_activity")
@attrs.frozen(kw_only=True)
class ScheduleActivity:
    """Run activity ``entry`` with ``args`` (retried per ``options``)."""

    seq: int
    entry: str
    args: list[Any]
    options: dict[str, Any] = attrs.field(factory=dict)


@record("wf.cancel_activity")
@attrs.frozen(kw_only=True)
class CancelActivity:
    """Stop waiting for activity ``activity``: drop its task, stop its running attempt."""

    seq: int
    activity: int


@record("wf.start_timer")
@attrs.frozen(kw_only=True)
class StartTimer:
    """Fire ``TimerFired(seq)`` after ``seconds``."""

    seq: int
    seconds: float


@record("wf.send_message")
@attrs.frozen(kw_only=True)
class SendMessage:
    """Deliver a message to ``dest`` (a process or a workflow)."""

    seq: int
    dest: Pid
    topic: str
    payload: Any = None
    reply_to: Pid | None = None  # the sender the receiver sees (a call's reply address)


@record("wf.stop_process")
@attrs.frozen(kw_only=True)
class StopProcess:
    """Cancel (cooperative) or terminate (``hard``) a process or workflow."""

    seq: int
    dest: Pid
    reason: str | None = None
    hard: bool = False


@record("wf.spawn_process")
@attrs.frozen(kw_only=True)
class SpawnProcess:
    """Start a plain process under a PID chosen deterministically by the workflow."""

    seq: int
    entry: str
    args: list[Any]
    pid: Pid


@record("wf.complete")
@attrs.frozen(kw_only=True)
class Complete:
    """The workflow returned ``value``."""

    seq: int
    value: Any = None


@record("wf.fail")
@attrs.frozen(kw_only=True)
class Fail:
    """The workflow ended with ``error``."""

    seq: int
    error: Error


@record("wf.version")
@attrs.frozen(kw_only=True)
class VersionMarker:
    """``workflow.version(change_id, ...)`` chose ``version`` for this run."""

    seq: int
    change_id: str
    version: int


@record("wf.upsert_attributes")
@attrs.frozen(kw_only=True)
class UpsertAttributes:
    """``workflow.attrs(search=..., memo=...)`` updated the run's attributes."""

    seq: int
    search: dict[str, Any] = attrs.field(factory=dict)
    memo: dict[str, Any] = attrs.field(factory=dict)


@record("wf.start_child")
@attrs.frozen(kw_only=True)
class StartChild:
    """Start a child workflow (committed with this activation); its EXIT comes back."""

    seq: int
    entry: str
    args: list[Any]
    workflow_id: str
    parent_close_policy: str = "terminate"
    options: dict[str, Any] = attrs.field(factory=dict)  # checked child start options


@record("wf.continue_as_new")
@attrs.frozen(kw_only=True)
class ContinueAsNew:
    """The run ends and a new one starts: same id and PID, new input, fresh history."""

    seq: int
    entry: str
    args: list[Any]


Command = (
    ScheduleActivity
    | CancelActivity
    | StartTimer
    | SendMessage
    | StopProcess
    | SpawnProcess
    | StartChild
    | VersionMarker
    | UpsertAttributes
    | ContinueAsNew
    | Complete
    | Fail
)
"""A command: what workflow code issues, and ``activate`` returns for the host to carry out."""


@record("wf.task")
@attrs.frozen(kw_only=True)
class WorkflowTask:
    """Marks where an activation begins in a flattened history (``node.history``).

    ``size`` is the bytes the activation takes in the store (``workflow.history_size``
    counts them); None when not known (a history saved before it was recorded here).
    """

    index: int
    at: dt.datetime
    size: int | None = None


HistoryItem = WorkflowTask | Event | Command
"""An item of a flattened history (``node.history``, ``save_history`` files)."""


def flatten(activations: list[Activation], sizes: list[int] | None = None) -> list[HistoryItem]:
    """Activations as one list: a ``WorkflowTask`` marker, its events, its commands.

    ``sizes``: the stored bytes of each activation, kept in its marker.
    """
    out: list[HistoryItem] = []
    for n, act in enumerate(activations):
        size = sizes[n] if sizes is not None else None
        out.append(WorkflowTask(index=act.index, at=act.at, size=size))
        out.extend(act.events)
        out.extend(act.commands)
    return out


def unflatten(items: Sequence[HistoryItem | Activation]) -> list[Activation]:
    """Rebuild activations from ``flatten``'s output (or a list of Activation records).

    Raises:
        roost.Error: kind Invalid when the list is not a history.
    """
    given = [item for item in items if isinstance(item, Activation)]
    if len(given) == len(items):
        return given
    acts: list[Activation] = []
    for item in items:
        if isinstance(item, WorkflowTask):
            acts.append(Activation(index=item.index, at=item.at, events=[], commands=[]))
        elif not acts:
            raise invalid("a history starts with a WorkflowTask marker (from node.history)")
        elif isinstance(item, Activation):
            raise invalid("a history is either Activation records or flattened items, not both")
        elif isinstance(item, _COMMANDS):
            acts[-1].commands.append(item)
        else:
            acts[-1].events.append(item)
    return acts


@record("wf.activation")
@attrs.frozen(kw_only=True)
class Activation:
    """One step of a run: events fed in at ``at``, and the commands issued in reply."""

    index: int
    at: dt.datetime
    # ``Event`` and ``Command`` items; the codec reads these annotations, and a union of
    # records has no structure hook (each item is rebuilt by its own record tag).
    events: list[Any]
    commands: list[Any]


# Built on every step (see _builders): positional, without keyword parsing.
new_activation: Callable[[int, dt.datetime, list[Event], list[Command]], Activation] = maker(
    Activation, ("index", "at", "events", "commands")
)
new_schedule: Callable[[int, str, list[Any], dict[str, Any]], ScheduleActivity] = maker(
    ScheduleActivity, ("seq", "entry", "args", "options")
)

_COMMANDS = (
    ScheduleActivity,
    CancelActivity,
    StartTimer,
    SendMessage,
    StopProcess,
    SpawnProcess,
    StartChild,
    VersionMarker,
    UpsertAttributes,
    ContinueAsNew,
    Complete,
    Fail,
)


def describe(command: HistoryItem | None) -> str:  # noqa: PLR0911, PLR0912 - one arm per command kind
    """A short human form of a command, for nondeterminism reports (another item: its repr)."""
    match command:
        case ScheduleActivity(seq=seq, entry=entry):
            return f"#{seq} schedule activity {entry!r}"
        case StartTimer(seq=seq, seconds=seconds):
            return f"#{seq} start timer {seconds:g}s"
        case CancelActivity(seq=seq, activity=activity):
            return f"#{seq} cancel activity #{activity}"
        case SendMessage(seq=seq, dest=dest, topic=topic):
            return f"#{seq} send {topic!r} to {dest}"
        case SpawnProcess(seq=seq, entry=entry):
            return f"#{seq} spawn process {entry!r}"
        case StopProcess(seq=seq, dest=dest, hard=hard):
            return f"#{seq} {'terminate' if hard else 'cancel'} {dest}"
        case StartChild(seq=seq, entry=entry, workflow_id=child):
            return f"#{seq} start child workflow {entry!r} as {child!r}"
        case VersionMarker(seq=seq, change_id=change_id):
            return f"#{seq} version check {change_id!r}"
        case UpsertAttributes(seq=seq):
            return f"#{seq} upsert search attributes / memo"
        case Complete(seq=seq):
            return f"#{seq} complete the workflow"
        case ContinueAsNew(seq=seq, entry=entry):
            return f"#{seq} continue as new {entry!r}"
        case Fail(seq=seq, error=error):
            return f"#{seq} fail the workflow with {error}"
        case None:
            return "nothing"
        case _:
            return repr(command)


def same_command(issued: Command, recorded: Command) -> bool:
    """Whether replayed code issued what the history recorded (identity, not arguments)."""
    if type(issued) is not type(recorded):
        return False
    fields = _IDENTITY.get(type(issued), ("seq",))
    return all(getattr(issued, name) == getattr(recorded, name) for name in fields)


# What makes a replayed command "the same" as the recorded one; arguments may change.
_IDENTITY: dict[type, tuple[str, ...]] = {
    ScheduleActivity: ("seq", "entry"),
    CancelActivity: ("seq", "activity"),
    SendMessage: ("seq", "dest", "topic"),
    SpawnProcess: ("seq", "entry"),
    StartChild: ("seq", "entry"),
    VersionMarker: ("seq", "change_id"),
    StopProcess: ("seq", "dest", "hard"),
}
