"""``node.describe`` / ``node.history`` / ``node.list_workflows``: read-only inspection."""

from __future__ import annotations

import re
from typing import Any

from roost._errors import invalid, not_found
from roost._pid import Pid
from roost.storage import MAX_KEY_SIZE, Codec, Store, key
from roost.workflow._history import flatten
from roost.workflow._records import RunRecord

__all__ = ["describe", "history", "list_workflows", "parse_query", "run_key"]

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
    }


def run_key(workflow_id: object) -> bytes | None:
    """The ``runs`` key of ``workflow_id``, or None when no workflow can have that id.

    Raises:
        roost.Error: kind Invalid when ``workflow_id`` is not a string.
    """
    if not isinstance(workflow_id, str):
        hint = " (pass pid.id, the workflow id of a PID)" if isinstance(workflow_id, Pid) else ""
        raise invalid(
            f"a workflow id is a string, got {type(workflow_id).__name__} {workflow_id!r}{hint}"
        )
    if not workflow_id or (not workflow_id.isascii() and not _has_utf8(workflow_id)):
        return None
    row = workflow_id.encode("utf-8")
    return row if len(row) <= MAX_KEY_SIZE else None


def _has_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _record(store: Store, codec: Codec, workflow_id: str) -> RunRecord:
    row = run_key(workflow_id)
    data = None
    if row is not None:
        with store.read() as txn:
            data = txn.get("runs", row)
    if data is None:
        raise not_found(f"no workflow with id {workflow_id!r}", workflow_id=workflow_id)
    record: RunRecord = codec.decode(data)
    return record


def describe(store: Store, codec: Codec, workflow_id: str) -> dict[str, Any]:
    """Status, result or error, type and timestamps of a workflow's latest run."""
    return _as_dict(_record(store, codec, workflow_id))


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
    if query is not None and not isinstance(query, str):
        raise invalid(
            f"a query is a string like \"status = 'running'\" (or None for all), got "
            f"{type(query).__name__} {query!r}"
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
        rows = [_as_dict(codec.decode(v)) for _, v in txn.range("runs")]
    return [row for row in rows if all(_matches(row, clause) for clause in clauses)]


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
