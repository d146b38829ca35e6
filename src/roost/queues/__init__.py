"""Queue-driven pipelines (DESIGN §6): named durable queues, DLQ, cron, HTTP, state, streams."""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.queues._api import enqueue, queue_info
    from roost.queues._cron import CronTick
    from roost.queues._records import DeadLetter, QueueInfo
    from roost.queues._spec import QueueSpec
    from roost.queues._streams import publish

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "CronTick": "roost.queues._cron",
    "DeadLetter": "roost.queues._records",
    "QueueInfo": "roost.queues._records",
    "QueueSpec": "roost.queues._spec",
    "enqueue": "roost.queues._api",
    "publish": "roost.queues._streams",
    "queue_info": "roost.queues._api",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

__all__ = [
    "CronTick",
    "DeadLetter",
    "QueueInfo",
    "QueueSpec",
    "enqueue",
    "publish",
    "queue_info",
]
