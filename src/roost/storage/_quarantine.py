"""Quarantine: stored rows that cannot be decoded, kept aside with their raw bytes.

A row that cannot be decoded (corrupt CBOR, a record tag no registered class has, a schema
version from a later roost) must not stop a node from opening, nor be lost. The runtime that
finds one moves it, and the rows of the unit it belongs to (a workflow, a queue message), out
of their tables into the ``quarantine`` table, byte for byte:

- ``quarantine``  (unit, id) -> ``Quarantine``: what was moved (table, key and raw value of
  each row), the decode error, and when.

Moved out, the rows are invisible to every part of the runtime (nothing replays, runs or
overwrites them), while inspection (``node.describe``, ``node.list_workflows``,
``roost.storage.quarantined``) shows them. Nothing is deleted: a unit can be restored by
putting its rows back where they came from (``Quarantine.rows``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Sequence
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind, escaped
from roost.storage._codec import Codec, record
from roost.storage._keys import key
from roost.storage._store import MAX_KEY_SIZE, ReadTxn, Store, WriteTxn

__all__ = [
    "QUARANTINE_TABLE",
    "Quarantine",
    "QuarantinedRow",
    "decode_error",
    "quarantine_key",
    "quarantined",
    "read_quarantine",
    "set_aside",
    "write_quarantine",
]

log = logging.getLogger("roost.storage")

QUARANTINE_TABLE: Final = "quarantine"


@record("store.quarantined_row")
@attrs.frozen(kw_only=True)
class QuarantinedRow:
    """One row moved into quarantine: where it was, its raw value, why (None: it decodes)."""

    table: str
    key: bytes
    data: bytes
    error: Error | None = None


@record("store.quarantine")
@attrs.frozen(kw_only=True)
class Quarantine:
    """A unit (a workflow, a queue message, a lone row) kept out of the runtime.

    Attributes:
        unit: "workflow", "queue_message", "dead_letter" or "row".
        id: the unit's id: a workflow id, ``queue#seq``, or ``table:key-hex``.
        error: the first decode error that put the unit here.
        at: when it was quarantined.
        rows: every row moved, with its table, key and raw bytes.
        info: what is known of the unit (e.g. its workflow type and run id).
    """

    unit: str
    id: str
    error: Error
    at: dt.datetime
    rows: list[QuarantinedRow] = attrs.field(factory=list)
    info: dict[str, Any] = attrs.field(factory=dict)


def quarantine_key(unit: str, ident: str) -> bytes:
    """The key of a unit's entry in the ``quarantine`` table (it always fits LMDB)."""
    full = key(unit, ident)
    if len(full) <= MAX_KEY_SIZE:
        return full
    return key(unit, "sha256:" + hashlib.sha256(ident.encode("utf-8", "replace")).hexdigest())


def decode_error(exc: BaseException, table: str, row_key: bytes) -> Error:
    """The error stored with a row that could not be decoded (always encodable)."""
    cause = exc.message if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
    return Error(
        escaped(f"the {table} row {row_key!r:.120} cannot be decoded: {cause}"),
        kind=ErrorKind.INTERNAL,
        retryable=False,
        details={"table": table, "key": row_key.hex(), "cause": type(exc).__name__},
    )


def write_quarantine(
    txn: WriteTxn,
    codec: Codec,
    entry: Quarantine,
    keep: Sequence[tuple[str, bytes]] = (),
) -> Quarantine:
    """Move ``entry``'s rows (and the rows named in ``keep``) into quarantine.

    ``keep`` names rows of the unit that decode but go with it, read here (in the same
    transaction) so their latest value is kept. An entry already stored for the unit is
    extended, not replaced.

    Returns:
        The entry as stored.
    """
    k = quarantine_key(entry.unit, entry.id)
    rows = {(row.table, row.key): row for row in entry.rows}
    for table, row_key in keep:
        if (table, row_key) not in rows:
            data = txn.get(table, row_key)
            if data is not None:
                rows[table, row_key] = QuarantinedRow(table=table, key=row_key, data=data)
    old = txn.get(QUARANTINE_TABLE, k)
    if old is not None:
        try:
            previous: Quarantine = codec.decode(old)
        except Error as exc:
            # Kept as one more row of the new entry (not moved: it is this very key).
            broken = QuarantinedRow(
                table=QUARANTINE_TABLE, key=k, data=old, error=decode_error(exc, "quarantine", k)
            )
            previous = attrs.evolve(entry, rows=[broken])
        merged = {(row.table, row.key): row for row in previous.rows}
        merged.update(rows)
        rows = merged
        entry = attrs.evolve(entry, error=previous.error, at=previous.at)
    for table, row_key in rows:
        if table != QUARANTINE_TABLE:
            txn.delete(table, row_key)
    stored = attrs.evolve(entry, rows=list(rows.values()))
    txn.put(QUARANTINE_TABLE, k, codec.encode(stored, what="quarantine entry"))
    return stored


def set_aside(
    store: Store,
    codec: Codec,
    row: tuple[str, bytes, bytes],
    exc: BaseException,
    at: dt.datetime,
) -> Quarantine:
    """Quarantine one unreadable ``(table, key, data)`` row on its own (unit "row"), now.

    For a row no workflow or message owns (a cron trigger's last fire time, say). It is
    logged at ERROR; a failed commit is logged too, and the row then stays where it is.
    """
    table, row_key, data = row
    error = decode_error(exc, table, row_key)
    kept = QuarantinedRow(table=table, key=row_key, data=data, error=error)
    entry = Quarantine(unit="row", id=f"{table}:{row_key.hex()}", error=error, at=at, rows=[kept])
    log.error(
        "row %s quarantined: %s; it is kept, raw, in the quarantine table "
        "(roost.storage.quarantined lists it) and the node goes on without it",
        entry.id,
        error.message,
    )
    try:
        store.transact_sync(lambda txn: write_quarantine(txn, codec, entry))
    except Error:
        log.exception("storing the quarantine of row %s failed", entry.id)
    return entry


def read_quarantine(txn: ReadTxn, codec: Codec, unit: str | None = None) -> list[Quarantine]:
    """Every quarantined unit (of kind ``unit``, if given), in key order."""
    out: list[Quarantine] = []
    rows = txn.range(QUARANTINE_TABLE) if unit is None else txn.prefix(QUARANTINE_TABLE, key(unit))
    for k, v in rows:
        try:
            out.append(codec.decode(v))
        except Error as exc:
            log.exception("the quarantine entry %r cannot be decoded either: %s", k, exc.message)
    return out


def quarantined(store: Store, codec: Codec | None = None) -> list[dict[str, Any]]:
    """What the ``quarantine`` table holds, for people and tools: one dict per unit.

    Each dict has ``unit``, ``id``, ``error``, ``at``, ``info`` and ``rows`` (a list of
    ``{"table", "key" (hex), "size", "error"}``). Works on a read-only store too.
    """
    with store.read() as txn:
        entries = read_quarantine(txn, codec or Codec())
    return [
        {
            "unit": entry.unit,
            "id": entry.id,
            "error": entry.error,
            "at": entry.at,
            "info": dict(entry.info),
            "rows": [
                {"table": r.table, "key": r.key.hex(), "size": len(r.data), "error": r.error}
                for r in entry.rows
            ],
        }
        for entry in entries
    ]
