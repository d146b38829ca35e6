"""Queue messages and dead letters that cannot be decoded: quarantined on open, not lost.

A ``queue_messages`` or ``dlq`` row that cannot be decoded (see ``roost.storage._quarantine``)
moves, raw, to the ``quarantine`` table as a unit of its own (``queue_message`` or
``dead_letter``, id ``queue#seq`` from its key), is logged at ERROR, and every other message
is delivered as usual. ``roost.storage.quarantined`` lists what was set aside.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from roost._errors import Error
from roost.queues._records import DeadLetter, QueueMessage
from roost.storage import Codec, ReadTxn, Store, WriteTxn, unpack_key
from roost.storage._quarantine import (
    Quarantine,
    QuarantinedRow,
    decode_error,
    write_quarantine,
)

__all__ = ["quarantine_messages", "readable_messages"]

log = logging.getLogger("roost.queues")

_UNITS = {"queue_messages": "queue_message", "dlq": "dead_letter"}


def _entry(table: str, k: bytes, v: bytes, exc: BaseException, at: dt.datetime) -> Quarantine:
    error = decode_error(exc, table, k)
    info: dict[str, Any] = {}
    try:
        queue, seq = unpack_key(k, str, int)
    except Error:
        ident = f"{table}:{k.hex()}"
    else:
        ident = f"{queue!s}#{seq!s}"
        info = {"queue": queue, "seq": seq}
    row = QuarantinedRow(table=table, key=k, data=v, error=error)
    return Quarantine(unit=_UNITS[table], id=ident, error=error, at=at, rows=[row], info=info)


def readable_messages(
    txn: ReadTxn, codec: Codec, at: dt.datetime
) -> tuple[list[QueueMessage], list[DeadLetter], list[Quarantine]]:
    """The stored messages and dead letters that decode, and entries for those that do not."""
    found: dict[str, list[Any]] = {"queue_messages": [], "dlq": []}
    bad: list[Quarantine] = []
    for table, out in found.items():
        for k, v in txn.range(table):
            try:
                out.append(codec.decode(v))
            except Exception as exc:  # noqa: BLE001 - whatever the decoder raises: unreadable
                bad.append(_entry(table, k, v, exc, at))
    return found["queue_messages"], found["dlq"], bad


def quarantine_messages(store: Store, codec: Codec, entries: list[Quarantine]) -> None:
    """Move ``entries`` to the quarantine table now (on open), logging each at ERROR."""
    if not entries:
        return
    for entry in entries:
        log.error(
            "%s %s quarantined: %s; it is kept, raw, in the quarantine table "
            "(roost.storage.quarantined lists it) and the queue goes on without it",
            entry.unit.replace("_", " "),
            entry.id,
            entry.error.message,
        )

    def write(txn: WriteTxn) -> None:
        for entry in entries:
            write_quarantine(txn, codec, entry)

    try:
        store.transact_sync(write)
    except Error:  # kept out of the queues all the same; the next open tries again
        log.exception("storing the quarantine of %d queue rows failed", len(entries))
