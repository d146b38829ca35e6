"""What queues keep in the store.

- ``queue_messages``  (queue, seq) -> ``QueueMessage`` (enqueued, not yet acknowledged)
- ``dlq``             (queue, seq) -> ``DeadLetter`` (out of retries), oldest first
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any, Final

import attrs

from roost._errors import Error
from roost.storage import key
from roost.storage._codec import record

__all__ = [
    "DeadLetter",
    "QueueInfo",
    "QueueMessage",
    "message_key",
    "redriven",
    "workflow_id_for",
]

_READABLE_QUEUE: Final = 64  # longer queue names are hashed in workflow ids (they must fit keys)


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
    redrives: int = 0  # times redriven from the DLQ: each life's attempts count from 1
    # The enqueuer's security context, signed and bound to (queue, receipt id) when the
    # node has a key ring (``roost._security.seal_queued``); None: the delivery runs
    # without one (so does a message stored by an older roost).
    security: dict[str, Any] | None = None


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
    redrives: int = 0
    security: dict[str, Any] | None = None  # the message's, kept for its redrive


@attrs.frozen(kw_only=True)
class QueueInfo:
    """``roost.queue_info()`` inside a queue handler."""

    receipt_id: str
    attempt: int
    queue: str


def redriven(dead: DeadLetter, seq: int) -> QueueMessage:
    """The message a redrive of ``dead`` enqueues as ``seq``: same receipt id, fresh attempts.

    It goes to the back of its queue (the new seq), and its attempts start over.
    """
    return QueueMessage(
        receipt_id=dead.receipt_id,
        queue=dead.queue,
        seq=seq,
        entry=dead.entry,
        payload=dead.payload,
        group=dead.group,
        enqueued_at=dead.enqueued_at,
        redrives=dead.redrives + 1,
        security=dead.security,
    )


def message_key(queue: str, seq: int) -> bytes:
    """Key of a message (or dead letter) of ``queue``."""
    return key(queue, seq)


def workflow_id_for(message: QueueMessage) -> str:
    """The id of the workflow a delivery of ``message`` starts: one per attempt of each life.

    ``<queue>-<receipt id>-<attempt>``, with ``-r<n>`` before the attempt once the message
    was redriven n times (a redriven message counts its attempts from 1 again). A delivery
    again after a crash has the same attempt, so it finds the run its first delivery
    started; a retry after a failure has the next one, so it starts a fresh run.
    """
    queue = message.queue
    if len(queue.encode()) > _READABLE_QUEUE:
        queue = "q" + hashlib.sha256(queue.encode()).hexdigest()[:16]
    life = f"-r{message.redrives}" if message.redrives else ""
    return f"{queue}-{message.receipt_id}{life}-{message.attempt}"
