"""roost: an Erlang/Wippy-style process runtime for Python on trio."""

import typing as _typing

from roost import _lazy
from roost.actors import _app
from roost.storage import _registry

if _typing.TYPE_CHECKING:
    from roost import (
        channel,
        client,
        coroutine,
        ctx,
        funcs,
        http,
        process,
        security,
        state,
        supervisor,
        workflow,
    )
    from roost._duration import Duration
    from roost._errors import ChannelClosed, Error, ErrorKind, NondeterminismError
    from roost._pid import Pid
    from roost._version import __version__ as __version__
    from roost.actors._api import Receipt
    from roost.actors._app import App
    from roost.actors._chance import after, now, random, random_bytes, sleep, ticker, uuid4, uuid7
    from roost.actors._events import Cancel, Event, EventKind, Exit, LinkDown
    from roost.actors._open import NodeHandle, open_node, run
    from roost.actors._spawn import Spawner
    from roost.client._async import AsyncClient, connect_async
    from roost.client._sync import Client, connect
    from roost.mailbox._channel import Channel, Selected
    from roost.mailbox._mailbox import Message
    from roost.queues._api import enqueue, queue_info
    from roost.queues._cron import CronTick
    from roost.queues._records import DeadLetter, QueueInfo
    from roost.queues._streams import publish
    from roost.workflow._activity_info import ActivityInfo, activity_info, heartbeat
    from roost.workflow._api import WorkflowInfo
    from roost.workflow._retry import RetryPolicy

# Where each public name lives: importing roost runs none of it, the first use of a name
# loads its module (PEP 562).
_NAMES = {
    "__version__": "roost._version",
    "ActivityInfo": "roost.workflow._activity_info",
    "App": "roost.actors._app",
    "AsyncClient": "roost.client._async",
    "Cancel": "roost.actors._events",
    "Channel": "roost.mailbox._channel",
    "ChannelClosed": "roost._errors",
    "Client": "roost.client._sync",
    "CronTick": "roost.queues._cron",
    "DeadLetter": "roost.queues._records",
    "Duration": "roost._duration",
    "Error": "roost._errors",
    "ErrorKind": "roost._errors",
    "Event": "roost.actors._events",
    "EventKind": "roost.actors._events",
    "Exit": "roost.actors._events",
    "LinkDown": "roost.actors._events",
    "Message": "roost.mailbox._mailbox",
    "NodeHandle": "roost.actors._open",
    "NondeterminismError": "roost._errors",
    "Pid": "roost._pid",
    "QueueInfo": "roost.queues._records",
    "Receipt": "roost.actors._api",
    "RetryPolicy": "roost.workflow._retry",
    "Selected": "roost.mailbox._channel",
    "Spawner": "roost.actors._spawn",
    "WorkflowInfo": "roost.workflow._api",
    "activity_info": "roost.workflow._activity_info",
    "after": "roost.actors._chance",
    "channel": "roost.channel",
    "client": "roost.client",
    "connect": "roost.client._sync",
    "connect_async": "roost.client._async",
    "coroutine": "roost.coroutine",
    "ctx": "roost.ctx",
    "enqueue": "roost.queues._api",
    "funcs": "roost.funcs",
    "heartbeat": "roost.workflow._activity_info",
    "http": "roost.http",
    "now": "roost.actors._chance",
    "open_node": "roost.actors._open",
    "process": "roost.process",
    "publish": "roost.queues._streams",
    "queue_info": "roost.queues._api",
    "random": "roost.actors._chance",
    "random_bytes": "roost.actors._chance",
    "run": "roost.actors._open",
    "security": "roost.security",
    "sleep": "roost.actors._chance",
    "state": "roost.state",
    "supervisor": "roost.supervisor",
    "ticker": "roost.actors._chance",
    "uuid4": "roost.actors._chance",
    "uuid7": "roost.actors._chance",
    "workflow": "roost.workflow",
    # Subpackages and modules reachable as attributes after ``import roost`` (loaded lazily).
    "_backoff": "roost._backoff",
    "_cron": "roost._cron",
    "_duration": "roost._duration",
    "_errors": "roost._errors",
    "_interrupt": "roost._interrupt",
    "_pid": "roost._pid",
    "_text": "roost._text",
    "actors": "roost.actors",
    "mailbox": "roost.mailbox",
    "queues": "roost.queues",
    "storage": "roost.storage",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

# The layers above the actors (workflows, queues, cron, HTTP, supervisors) register with App
# and the node when one first needs them.
_app.plug_in("roost._wiring")
# roost's record types register when their modules load; a decode that meets a tag nobody
# registered loads these first.
_registry.record_modules(
    "roost.storage._quarantine",
    "roost.workflow._local._records",
    "roost.workflow._history",
    "roost.queues._records",
    "roost.queues._cron",
    "roost.queues._http",
)

__all__ = [
    "ActivityInfo",
    "App",
    "AsyncClient",
    "Cancel",
    "Channel",
    "ChannelClosed",
    "Client",
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
    "client",
    "connect",
    "connect_async",
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
    "security",
    "sleep",
    "state",
    "supervisor",
    "ticker",
    "uuid4",
    "uuid7",
    "workflow",
]
