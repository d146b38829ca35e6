"""``node.describe`` / ``node.history`` / ``node.list_workflows``: read-only inspection."""

from __future__ import annotations

import re
from typing import Any

from roost._errors import invalid, not_found
from roost.storage import Codec, Store, key
from roost.workflow._history import flatten
from roost.workflow._records import ActivityTask, RunRecord

__all__ = ["describe", "history", "list_workflows", "parse_query"]

_CLAUSE = re.compile(r"^\s*(\w+)\s*(=|!=)\s*'([^']*)'\s*$")


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
        "unread_messages": record.unread,  # as of its last activation (see _unread)
    }


def _record(store: Store, codec: Codec, workflow_id: str) -> RunRecord:
    with store.read() as txn:
        data = txn.get("runs", workflow_id.encode())
    if data is None:
        raise not_found(f"no workflow with id {workflow_id!r}", workflow_id=workflow_id)
    record: RunRecord = codec.decode(data)
    return record


def describe(store: Store, codec: Codec, workflow_id: str) -> dict[str, Any]:
    """Status, result or error, type and timestamps of a workflow's latest run.

    ``pending_activities`` lists the activities the run waits for, in the order it
    scheduled them (see ``_pending``).
    """
    record = _record(store, codec, workflow_id)
    with store.read() as txn:
        tasks = [codec.decode(v) for _, v in txn.prefix("tasks", key(record.run_id))]
    return {**_as_dict(record), "pending_activities": [_pending(t) for t in tasks]}


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


def history(store: Store, codec: Codec, workflow_id: str) -> list[Any]:
    """Every event and command of the latest run, in order.

    Each activation starts with a ``WorkflowTask`` marker, so replay can feed exactly the
    recorded batches.
    """
    record = _record(store, codec, workflow_id)
    with store.read() as txn:
        acts = [codec.decode(v) for _, v in txn.prefix("histories", key(record.run_id))]
    return flatten(acts)


def parse_query(query: str | None) -> list[tuple[str, str, str]]:
    """Parse ``"status = 'running' and workflow_type = 'app:order'"`` into clauses.

    The grammar: clauses ``name = 'value'`` or ``name != 'value'`` joined by ``and``.
    A name is one of workflow_id, run_id, workflow_type, status, task_queue, or a search
    attribute. A list attribute matches if it contains the value; booleans compare as
    'true' / 'false'; numbers and datetimes by their text form.
    """
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
        rows = [_as_dict(codec.decode(v)) for _, v in txn.range("runs")]
        rows = [row for row in rows if all(_matches(row, clause) for clause in clauses)]
        pending: dict[str, list[dict[str, Any]]] = {}
        if rows:  # one pass over every pending activity, as describe lists them per run
            for _, v in txn.range("tasks"):
                task: ActivityTask = codec.decode(v)
                pending.setdefault(task.run_id, []).append(_pending(task))
    return [{**row, "pending_activities": pending.get(row["run_id"], [])} for row in rows]


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
