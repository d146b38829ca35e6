"""Queues read from the store, and dead letters changed in it, with no node running them.

``roost queue stats`` / ``roost dlq list`` read what a node's queues keep in the store
(``queue_messages`` and ``dlq``); ``roost dlq redrive / discard`` on a stopped data directory
write what ``node.dlq`` commits for the same request (the redriven message's row in place of
the dead letter's, or the dead letter's row deleted). The next node's queue runtime recovers
the redriven messages and delivers them. ``enqueue_offline`` stores a new message as
``roost.enqueue`` commits it; the next node whose app declares the queue delivers it.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from roost._cron import parse_firing_cron
from roost._errors import Error, invalid, not_found
from roost.actors._app import _check_name as check_name
from roost.queues._records import DeadLetter, QueueMessage, message_key, redriven, workflow_id_for
from roost.queues._spec import make_spec
from roost.storage import Codec, ReadTxn, WriteTxn, key, unpack_key
from roost.storage._quarantine import read_quarantine
from roost.workflow._local._inspect import run_key
from roost.workflow._local._records import RunStatus

__all__ = [
    "check_queue_known",
    "cron_triggers",
    "dead_letters",
    "discard_offline",
    "enqueue_offline",
    "queue_stats",
    "redrive_offline",
]


def _readable(txn: ReadTxn, codec: Codec, table: str, prefix: bytes = b"") -> list[Any]:
    # A row a node has not quarantined yet (read beside it) is left out, as describe does.
    out = []
    for _, v in txn.prefix(table, prefix) if prefix else txn.range(table):
        try:
            out.append(codec.decode(v))
        except Exception:  # noqa: BLE001, S112 - unreadable, whatever the decoder raised
            continue
    return out


def _in_flight(txn: ReadTxn, codec: Codec, message: QueueMessage) -> bool:
    # A delivery runs as the workflow named for its attempt; open means delivering.
    row = run_key(workflow_id_for(message))
    data = None if row is None else txn.get("runs", row)
    if data is None:
        return False
    try:
        status = codec.decode(data).status
    except Exception:  # noqa: BLE001 - an unreadable run record is no delivery in progress
        return False
    return bool(status is RunStatus.RUNNING)


def queue_stats(txn: ReadTxn, codec: Codec, declared: Any = ()) -> dict[str, dict[str, int]]:
    """``{queue: {"depth", "in_flight", "dead"}}`` of every queue with stored messages.

    ``depth`` counts the stored messages waiting for a delivery, ``in_flight`` those whose
    delivery (a workflow) is open, ``dead`` the dead letters. ``declared`` names queues to
    list even when they hold nothing (an app's declarations).
    """
    stats: dict[str, dict[str, int]] = {
        name: {"depth": 0, "in_flight": 0, "dead": 0} for name in declared
    }
    for message in _readable(txn, codec, "queue_messages"):
        row = stats.setdefault(message.queue, {"depth": 0, "in_flight": 0, "dead": 0})
        row["in_flight" if _in_flight(txn, codec, message) else "depth"] += 1
    for dead in _readable(txn, codec, "dlq"):
        stats.setdefault(dead.queue, {"depth": 0, "in_flight": 0, "dead": 0})["dead"] += 1
    return dict(sorted(stats.items()))


def _check_queue(queue: Any) -> str:
    if not isinstance(queue, str) or not queue:
        raise invalid(f"a queue name is a non-empty string, got {queue!r}")
    return queue


def dead_letters(txn: ReadTxn, codec: Codec, queue: str) -> list[DeadLetter]:
    """The dead letters of ``queue``, oldest first (none for a queue that never had one)."""
    return _readable(txn, codec, "dlq", key(_check_queue(queue)))


def check_queue_known(txn: ReadTxn, queue: str, declared: Any = None) -> None:
    """Refuse a queue the store knows nothing of, as ``node.dlq`` refuses an undeclared one.

    A queue is known when the store holds a message or a dead letter of it, or when
    ``declared`` (an app's queue names, None when no app was given) names it.

    Raises:
        roost.Error: NotFound for an unknown queue; Invalid for a name that is no string.
    """
    prefix = key(_check_queue(queue))
    if declared is not None and queue in declared:
        return
    for table in ("dlq", "queue_messages"):
        for _ in txn.prefix(table, prefix, limit=1):
            return
    where = "in the store nor declared by the app" if declared is not None else "in the store"
    raise not_found(
        f"queue {queue!r} is not declared: no message or dead letter of it {where} "
        "(check the name; `roost queue stats --app MODULE:APP` lists the queues)",
        queue=queue,
    )


def _find(txn: ReadTxn, codec: Codec, queue: str, receipt_id: str) -> DeadLetter:
    if not isinstance(receipt_id, str):
        raise invalid(f"a receipt id is a string, got {type(receipt_id).__name__}")
    for dead in dead_letters(txn, codec, queue):
        if dead.receipt_id == receipt_id:
            return dead
    raise not_found(
        f"no dead letter {receipt_id!r} in queue {queue!r}", queue=queue, receipt_id=receipt_id
    )


def _last_seq(txn: ReadTxn, codec: Codec) -> int:
    # As the queue runtime's recovery: seqs are unique across every queue, the
    # quarantined messages' included.
    last = 0
    for table in ("queue_messages", "dlq"):
        for k, _ in txn.range(table):
            try:
                last = max(last, int(unpack_key(k, str, int)[1]))
            except Exception:  # noqa: BLE001, S112 - a key of no message's shape
                continue
    for unit in ("queue_message", "dead_letter"):
        for entry in read_quarantine(txn, codec, unit):
            seq = entry.info.get("seq")
            if isinstance(seq, int):
                last = max(last, seq)
    return last


def redrive_offline(txn: WriteTxn, codec: Codec, queue: str, receipt_id: str | None) -> int:
    """Move one dead letter (or every one, for None) of ``queue`` back into it; how many.

    Raises:
        roost.Error: NotFound for an unknown receipt id.
    """
    dead = (
        dead_letters(txn, codec, queue)
        if receipt_id is None
        else [_find(txn, codec, queue, receipt_id)]
    )
    seq = _last_seq(txn, codec)
    for letter in dead:
        seq += 1
        message = redriven(letter, seq)
        txn.delete("dlq", message_key(letter.queue, letter.seq))
        txn.put("queue_messages", message_key(message.queue, message.seq), codec.encode(message))
    return len(dead)


def enqueue_offline(txn: WriteTxn, codec: Codec, queue: str, entry: str, payload: Any) -> str:
    """Store a message for ``queue`` calling ``entry`` with ``payload``; its receipt id.

    No app is at hand, so the queue's declaration is not checked here: the next node whose
    app declares ``queue`` delivers the message (a FIFO queue takes its group from the
    payload then), and one that does not keeps it stored.

    Raises:
        roost.Error: Invalid for a bad queue name, an entry that is not ``app:name``, or a
            payload that cannot be encoded. Nothing is stored.
    """
    make_spec(queue, {})  # the queue-name rules of app.queue
    app_name, _, name = entry.partition(":") if isinstance(entry, str) else ("", "", "")
    if not app_name or not name:
        raise invalid(f"a queue target is an entry id 'app:name', got {entry!r}", entry=entry)
    check_name("app name", app_name)
    check_name("entry name", name)
    message = QueueMessage(
        receipt_id=os.urandom(12).hex(),
        queue=queue,
        seq=_last_seq(txn, codec) + 1,
        entry=entry,
        payload=payload,
        enqueued_at=dt.datetime.now(dt.UTC),
    )
    what = f"payload for queue {queue!r}"
    codec.check(payload, what=what)
    try:
        data = codec.encode(message)
    except Error:
        codec.encode(payload, what=what)  # names where in the payload it fails
        raise
    txn.put("queue_messages", message_key(queue, message.seq), data)
    return message.receipt_id


def discard_offline(txn: WriteTxn, codec: Codec, queue: str, receipt_id: str) -> None:
    """Delete one dead letter of ``queue`` for good.

    Raises:
        roost.Error: NotFound for an unknown receipt id.
    """
    dead = _find(txn, codec, queue, receipt_id)
    txn.delete("dlq", message_key(dead.queue, dead.seq))


def cron_triggers(
    txn: ReadTxn, codec: Codec, declared: dict[str, tuple[str, str]], now: dt.datetime
) -> list[dict[str, Any]]:
    """``[{"expression", "entry", "next_fire_at"}]`` of the cron triggers, by entry.

    The store keeps each trigger's last fire time under its id (``"entry @ expression"``),
    so a trigger that never fired is known only from ``declared`` (trigger id ->
    (entry id, expression), from an app).
    """
    triggers = dict(declared)
    for k, _ in txn.range("cron"):
        try:
            trigger_id = str(unpack_key(k, str)[0])
        except Exception:  # noqa: BLE001, S112 - a key of no trigger's shape
            continue
        entry, sep, expression = trigger_id.partition(" @ ")
        if sep and trigger_id not in triggers:
            triggers[trigger_id] = (entry, expression)
    out = []
    for entry, expression in sorted(set(triggers.values())):  # a trigger once, by any id
        try:
            upcoming = parse_firing_cron(expression).next_after(now)
        except Error:
            upcoming = None  # an expression this version no longer reads: no next fire known
        out.append({"expression": expression, "entry": entry, "next_fire_at": upcoming})
    return out
