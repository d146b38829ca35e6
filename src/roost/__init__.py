"""roost: an Erlang/Wippy-style process runtime for Python on trio."""

from roost import channel, coroutine, ctx, funcs, process, supervisor
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

__all__ = [
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
    "Selected",
    "Spawner",
    "after",
    "channel",
    "coroutine",
    "ctx",
    "funcs",
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
]
