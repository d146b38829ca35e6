"""Queue-driven pipelines (DESIGN §6): named durable queues, DLQ, cron, HTTP, state, streams."""

from roost.queues._api import enqueue, queue_info
from roost.queues._cron import CronTick
from roost.queues._records import DeadLetter, QueueInfo
from roost.queues._spec import QueueSpec
from roost.queues._streams import publish

__all__ = [
    "CronTick",
    "DeadLetter",
    "QueueInfo",
    "QueueSpec",
    "enqueue",
    "publish",
    "queue_info",
]
