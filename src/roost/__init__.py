"""roost: an Erlang/Wippy-style process runtime for Python on trio."""

from roost import channel, coroutine, ctx, funcs, process, supervisor, workflow
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
from roost.workflow import ActivityInfo, RetryPolicy, WorkflowInfo, activity_info, heartbeat

__all__ = [
    "ActivityInfo",
    "App",
    "Cancel",
    "Channel",
    "ChannelClosed",
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
    "funcs",
    "heartbeat",
    "now",
    "open_node",
    "process",
    "random",
    "random_bytes",
    "run",
    "sleep",
    "supervisor",
    "ticker",
    "uuid4",
    "uuid7",
    "workflow",
]
