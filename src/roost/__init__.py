"""roost: an Erlang/Wippy-style process runtime for Python on trio."""

from roost import channel, coroutine, ctx, funcs, http, process, state, supervisor, workflow
from roost._duration import Duration
from roost._errors import ChannelClosed, Error, ErrorKind, NondeterminismError
from roost._pid import Pid
from roost.actors import (
    App,
    Cancel,
    Event,
    EventKind,
    Exit,
    LinkDown,
    NodeHandle,
    Receipt,
    Spawner,
    open_node,
    run,
)
from roost.actors._chance import after, now, random, random_bytes, sleep, ticker, uuid4, uuid7
from roost.mailbox import Channel, Message, Selected
from roost.queues import CronTick, DeadLetter, QueueInfo, enqueue, publish, queue_info
from roost.workflow import ActivityInfo, RetryPolicy, WorkflowInfo, activity_info, heartbeat

__all__ = [
    "ActivityInfo",
    "App",
    "Cancel",
    "Channel",
    "ChannelClosed",
    "CronTick",
    "DeadLetter",
    "Duration",
    "Error",
    "ErrorKind",
    "Event",
    "EventKind",
    "Exit",
    "LinkDown",
    "Message",
    "NodeHandle",
    "NondeterminismError",
    "Pid",
    "QueueInfo",
    "Receipt",
    "RetryPolicy",
    "Selected",
    "Spawner",
    "WorkflowInfo",
    "activity_info",
    "after",
    "channel",
    "coroutine",
    "ctx",
    "enqueue",
    "funcs",
    "heartbeat",
    "http",
    "now",
    "open_node",
    "process",
    "publish",
    "queue_info",
    "random",
    "random_bytes",
    "run",
    "sleep",
    "state",
    "supervisor",
    "ticker",
    "uuid4",
    "uuid7",
    "workflow",
]
