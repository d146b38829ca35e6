"""``node.describe`` / ``node.history`` / ``node.list_workflows``: read-only inspection."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import re
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind, invalid, not_found, shown
from roost._pid import Pid
from roost._text import has_utf8
from roost.storage import MAX_KEY_SIZE, Codec, ReadTxn, Store, key
from roost.storage._quarantine import (
    QUARANTINE_TABLE,
    Quarantine,
    QuarantinedRow,
    decode_error,
    quarantine_key,
    read_quarantine,
)
from roost.workflow._history import HistoryItem, flatten
from roost.workflow._history_format import decode_activation
from roost.workflow._local._pending import read_open
from roost.workflow._local._records import (
    ATTEMPTS_TABLE,
    ActivityTask,
    AttemptRecord,
    RunRecord,
    RunStatus,
    read_progress,
)
from roost.workflow._local._unread import counts

__all__ = [
    "LISTED_STATUSES",
    "activity_attempts",
    "describe",
    "history",
    "list_workflows",
    "parse_query",
    "run_key",
    "with_status",
]

_CLAUSE = re.compile(r"^\s*(\w+)\s*(=|!=)\s*'([^']*)'\s*$")
# The "when" of a row found unreadable by inspection, not quarantined (yet).
_NEVER: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _as_dict(record: RunRecord) -> dict[str, Any]:
    return {
        "workflow_id": record.workflow_id,
        "run_id": record.run_id,
        "workflow_type": record.workflow_type,
        "status": record.status.value,
        "result": record.result,
        "error": record.error,
        "started_at": record.started_at,
        "closed_at": record.closed_at,
        "history_length": record.history_length,
        "history_size": record.history_size,
        "task_queue": record.task_queue,
        "parent": record.parent,
        "search_attributes": dict(record.search),
        "memo": dict(record.memo),
        "attempt": record.attempt,
        "start_at": record.not_before,
        "execution_deadline": record.execution_deadline,
        "options": dict(record.options),
        "summary": record.summary,
        "details": record.details,
        "name": record.name,
        "task_failure": record.task_failure,
        "unread_messages": record.unread,  # as of its last activation; describe adds the rest
    }


def run_key(workflow_id: object) -> bytes | None:
    """The ``runs`` key of ``workflow_id``, or None when no workflow can have that id.

    Raises:
        roost.Error: kind Invalid when ``workflow_id`` is not a string.
    """
    if not isinstance(workflow_id, str):
        hint = " (pass pid.id, the workflow id of a PID)" if isinstance(workflow_id, Pid) else ""
        raise invalid(
            f"a workflow id is a string, got {type(workflow_id).__name__} "
            f"{shown(workflow_id)}{hint}"
        )
    if not workflow_id or not has_utf8(workflow_id):
        return None
    row = workflow_id.encode("utf-8")
    return row if len(row) <= MAX_KEY_SIZE else None


def _lookup(store: Store, codec: Codec, workflow_id: str) -> RunRecord | dict[str, Any]:
    """The latest run record, or the description of a quarantined (or unreadable) one."""
    with store.read() as txn:
        return _lookup_in(txn, codec, workflow_id)


def _lookup_in(txn: ReadTxn, codec: Codec, workflow_id: str) -> RunRecord | dict[str, Any]:
    row = run_key(workflow_id)
    entry = None
    if row is not None:
        data = txn.get("runs", row)
        if data is not None:
            return _decode_row(codec, row, data, txn)
        raw = txn.get(QUARANTINE_TABLE, quarantine_key("workflow", workflow_id))
        entry = None if raw is None else _decoded_entry(codec, raw)
    if entry is None:
        raise not_found(f"no workflow with id {workflow_id!r}", workflow_id=workflow_id)
    return _quarantined(codec, entry)


def describe(store: Store, codec: Codec, workflow_id: str) -> dict[str, Any]:
    """Status, result or error, type and timestamps of a workflow's latest run.

    A quarantined workflow has status ``"quarantined"``, its decode error under ``error``
    and, under ``quarantine``, when and which rows (``{"table", "key", "error"}``).
    ``pending_activities`` lists the activities the run waits for, in the order it
    scheduled them (see ``_pending``).
    """
    with store.read() as txn:  # one snapshot: the record's count and the rows not in it
        found = _lookup_in(txn, codec, workflow_id)
        if isinstance(found, dict):
            return {**found, "pending_activities": []}
        return _view(txn, codec, found)


def _arrived(codec: Codec, txn: ReadTxn, record: RunRecord) -> int:
    """The messages stored for ``record``'s run and not yet delivered (its pending inbox rows).

    They count as ``_unread.unread`` counts them (messages, not replies or events): the
    activation that delivers them deletes the rows in the commit that writes the record's
    new count, so none is counted twice.
    """
    count = 0
    for _, data in txn.prefix("inbox", key(record.run_id)):
        with contextlib.suppress(Exception):  # unread by nobody yet: a bad row is not counted
            count += counts(codec.decode(data))
    return count


def _view(txn: ReadTxn, codec: Codec, record: RunRecord) -> dict[str, Any]:
    """A run as described: an open one's counters and pending activities from its history."""
    if record.status is not RunStatus.RUNNING:
        return {**_as_dict(record), "pending_activities": []}  # a closed run waits for none
    record, tasks = read_open(txn, codec, record)
    described = {**_as_dict(record), "pending_activities": [_pending(t) for t in tasks]}
    described["unread_messages"] += _arrived(codec, txn, record)
    return described


def _pending(task: ActivityTask) -> dict[str, Any]:
    """One pending activity, as Temporal's PendingActivityInfo shows it.

    ``attempt`` is the attempt running now or waiting to run; ``last_error`` the error of
    the attempt before it (None on the first); ``next_attempt_at`` when that attempt may
    start (None for the first, which starts when scheduled).
    """
    return {
        "entry": task.entry,
        "attempt": task.attempt,
        "last_error": task.errors[-1] if task.errors else None,
        "next_attempt_at": task.not_before,
        "seq": task.seq,
        "scheduled_at": task.scheduled_at,
    }


def history(store: Store, codec: Codec, workflow_id: str) -> list[HistoryItem]:
    """Every event and command of the latest run, in order.

    Each activation starts with a ``WorkflowTask`` marker, so replay can feed exactly the
    recorded batches.

    Raises:
        roost.Error: NotFound for an unknown id; InvalidState for a quarantined workflow.
    """
    record = _lookup(store, codec, workflow_id)
    if isinstance(record, dict):
        raise Error(
            f"workflow {workflow_id!r} is quarantined, so its history is not read: "
            f"{record['error'].message}; roost.storage.quarantined lists its rows",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
            details={"workflow_id": workflow_id},
        )
    with store.read() as txn:
        rows = [v for _, v in txn.prefix("histories", key(record.run_id))]
    return flatten([decode_activation(codec, v) for v in rows], [len(v) for v in rows])


def activity_attempts(store: Store, codec: Codec, workflow_id: str) -> list[dict[str, Any]]:
    """The recorded failed attempts of the latest run's activities, by seq and attempt.

    Each: ``seq``, ``attempt``, ``started_at``, ``ended_at``, ``error`` and
    ``next_attempt_at`` (when the retry after it may start). An activity keeps its latest
    ``KEPT_ATTEMPTS`` failures; an unreadable row is left out. A quarantined workflow has
    none shown.

    Raises:
        roost.Error: NotFound for an unknown id.
    """
    with store.read() as txn:
        record = _lookup_in(txn, codec, workflow_id)
        if isinstance(record, dict):
            return []
        rows = [v for _, v in txn.prefix(ATTEMPTS_TABLE, key(record.run_id))]
    found = []
    for data in rows:
        item: Any = None
        with contextlib.suppress(Exception):  # a record for people only: a bad one is skipped
            item = codec.decode(data)
        if isinstance(item, AttemptRecord):
            found.append(
                {
                    "seq": item.seq,
                    "attempt": item.attempt,
                    "started_at": item.started_at,
                    "ended_at": item.ended_at,
                    "error": item.error,
                    "next_attempt_at": item.next_attempt_at,
                }
            )
    return found


# Every status a listed workflow can have: a run's, or "quarantined" for an unreadable one.
LISTED_STATUSES: tuple[str, ...] = (*(s.value for s in RunStatus), "quarantined")


def with_status(query: str | None, status: str | None) -> str | None:
    """``query`` narrowed to the workflows of ``status`` (the CLI's, API's and console's filter).

    Raises:
        roost.Error: Invalid when ``status`` is not one of ``LISTED_STATUSES``.
    """
    if status is None:
        return query
    if status not in LISTED_STATUSES:
        raise invalid(
            f"status must be one of {', '.join(LISTED_STATUSES)}, got {shown(status)}",
            status=shown(status),
        )
    clause = f"status = '{status}'"
    return clause if query is None or not query.strip() else f"{query} and {clause}"


def parse_query(query: str | None) -> list[tuple[str, str, str]]:
    """Parse ``"status = 'running' and workflow_type = 'app:order'"`` into clauses.

    The grammar: clauses ``name = 'value'`` or ``name != 'value'`` joined by ``and``.
    A name is one of workflow_id, run_id, workflow_type, status, task_queue, or a search
    attribute. A list attribute matches if it contains the value; booleans compare as
    'true' / 'false'; numbers and datetimes by their text form.
    """
    if query is not None and not isinstance(query, str):
        raise invalid(
            f"a query is a string like \"status = 'running'\" (or None for all), got "
            f"{type(query).__name__} {shown(query)}"
        )
    if query is None or not query.strip():
        return []
    clauses = []
    for part in re.split(r"\s+and\s+", query.strip(), flags=re.IGNORECASE):
        match = _CLAUSE.match(part)
        if match is None:
            raise invalid(
                f"cannot read {part!r} in query {query!r}; write clauses like "
                "\"status = 'running'\" joined by 'and'",
            )
        clauses.append((match.group(1), match.group(2), match.group(3)))
    return clauses


def list_workflows(store: Store, codec: Codec, query: str | None = None) -> list[dict[str, Any]]:
    """Latest runs of every workflow id that match ``query`` (see ``parse_query``)."""
    clauses = parse_query(query)
    with store.read() as txn:
        found = [_decode_row(codec, k, v, txn) for k, v in txn.range("runs")]
        rows = [
            {**r, "pending_activities": []} if isinstance(r, dict) else _view(txn, codec, r)
            for r in found
        ]
        entries = read_quarantine(txn, codec, "workflow")
        if entries:
            listed = {row["workflow_id"] for row in rows}
            rows += [_quarantined(codec, e) for e in entries if e.id not in listed]
            rows.sort(key=lambda row: row["workflow_id"].encode("utf-8", "surrogateescape"))
        rows = [row for row in rows if all(_matches(row, clause) for clause in clauses)]
    return [
        row if row["status"] != "quarantined" else {**row, "pending_activities": []} for row in rows
    ]


# -- quarantined workflows (see roost.workflow._local._quarantine) -----------------------------


def _decoded_entry(codec: Codec, raw: bytes) -> Quarantine | None:
    try:
        entry: Quarantine = codec.decode(raw)
    except Error:
        return None
    return entry


def _decode_row(codec: Codec, k: bytes, data: bytes, txn: ReadTxn) -> RunRecord | dict[str, Any]:
    try:
        record: RunRecord = read_progress(txn, codec, codec.decode(data))
    except Exception as exc:  # noqa: BLE001 - unreadable, whatever the decoder raised
        # Not quarantined yet (the node that opens the directory next does it): shown so.
        row = QuarantinedRow(table="runs", key=k, data=data, error=decode_error(exc, "runs", k))
        assert row.error is not None
        workflow_id = k.decode("utf-8", "replace")
        entry = Quarantine(unit="workflow", id=workflow_id, error=row.error, at=_NEVER)
        return _quarantined(codec, attrs.evolve(entry, rows=[row]))
    return record


@functools.cache
def _as_dict_keys() -> tuple[str, ...]:
    # Whatever _as_dict shows, a quarantined workflow without a readable record shows too.
    blank = RunRecord(
        workflow_id="", run_id="", workflow_type="", status=RunStatus.RUNNING, started_at=_NEVER
    )
    return tuple(_as_dict(blank))


def _quarantined(codec: Codec, entry: Quarantine) -> dict[str, Any]:
    record = None
    for row in entry.rows:
        if row.table == "runs" and row.error is None:
            with contextlib.suppress(Error):
                record = codec.decode(row.data)
    if isinstance(record, RunRecord):
        out = _as_dict(record)
    else:
        out = dict.fromkeys(_as_dict_keys())
        out.update(
            workflow_id=entry.id,
            run_id=entry.info.get("run_id"),
            workflow_type=entry.info.get("workflow_type"),
            search_attributes={},
            memo={},
            options={},
        )
    out["status"] = "quarantined"
    out["error"] = entry.error
    out["quarantine"] = {
        "at": None if entry.at is _NEVER else entry.at,
        "rows": [
            {"table": row.table, "key": row.key.hex(), "error": row.error} for row in entry.rows
        ],
    }
    return out


_FIELDS = ("workflow_id", "run_id", "workflow_type", "status", "task_queue")


def _matches(row: dict[str, Any], clause: tuple[str, str, str]) -> bool:
    name, op, value = clause
    if name in _FIELDS:
        actual: Any = row[name]
    elif name in row["search_attributes"]:
        actual = row["search_attributes"][name]
    else:
        # An unknown name never matches '=': a run without that attribute is not a hit.
        return op == "!="
    if isinstance(actual, list):
        equal = value in actual  # a list of keywords matches any of its members
    elif isinstance(actual, bool):
        equal = str(actual).lower() == value.lower()
    else:
        equal = str(actual) == value
    return equal if op == "=" else not equal
