"""What queues keep in the store.

- ``queue_messages``  (queue, seq) -> ``QueueMessage`` (enqueued, not yet acknowledged)
- ``dlq``             (queue, seq) -> ``DeadLetter`` (out of retries), oldest first
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

from roost._errors import Error
from roost.storage import key
from roost.storage._codec import record

__all__ = ["DeadLetter", "QueueInfo", "QueueMessage", "message_key"]


@record("q.message")
@attrs.frozen(kw_only=True)
class QueueMessage:
    """One enqueued call of ``entry`` with ``payload``."""

    receipt_id: str
    queue: str
    seq: int
    entry: str
    payload: Any = None
    group: str | None = None
    attempt: int = 1  # of the next delivery
    not_before: dt.datetime | None = None
    enqueued_at: dt.datetime
    errors: list[Error] = attrs.field(factory=list)


@record("q.dead_letter")
@attrs.frozen(kw_only=True)
class DeadLetter:
    """A message that failed every attempt: its payload and each attempt's error."""

    receipt_id: str
    queue: str
    seq: int
    entry: str
    payload: Any = None
    group: str | None = None
    errors: list[Error] = attrs.field(factory=list)
    enqueued_at: dt.datetime
    failed_at: dt.datetime


@attrs.frozen(kw_only=True)
class QueueInfo:
    """``roost.queue_info()`` inside a queue handler."""

    receipt_id: str
    attempt: int
    queue: str


def message_key(queue: str, seq: int) -> bytes:
    """Key of a message (or dead letter) of ``queue``."""
    return key(queue, seq)
