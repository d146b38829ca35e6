"""``roost workflow ...``: list, describe, show and wait for workflows; start and steer them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import click

from roost._errors import Error, ErrorKind
from roost.actors._app import check_arguments
from roost.cli import _temporal
from roost.cli._apps import load_app
from roost.cli._changing import AdminClient, change, quote
from roost.cli._common import (
    Failed,
    data_dir_option,
    echo_json,
    failures,
    json_option,
    parse_json,
    reading,
    table,
)
from roost.cli._signing import (
    key_file_option,
    operator_control,
    operator_ring,
    operator_ticket,
)
from roost.storage import Codec, WriteTxn
from roost.testing import history_to_json
from roost.workflow._local import _inspect, _offline

__all__ = ["workflow"]

_CODEC: Final = Codec()
_SUMMARY: Final = ("workflow_id", "workflow_type", "status", "started_at", "closed_at")
_WAIT_START: Final = 0.05
_WAIT_MAX: Final = 1.0


@click.group()
def workflow() -> None:
    """Inspect and steer workflows (reading never runs anything)."""


@workflow.command("list")
@click.option("--query", "-q", default=None, help="e.g. \"workflow_type = 'shop:order'\".")
@click.option("--status", "-s", default=None, help="Only this status (running, completed, ...).")
@data_dir_option
@_temporal.temporal_options
@json_option
def list_(  # noqa: PLR0917 - click passes every option as an argument
    query: str | None,
    status: str | None,
    data_dir: Path,
    temporal: str | None,
    namespace: str,
    as_json: bool,
) -> None:
    """List workflows (the latest run of each id), filtered by a query and a status.

    With --temporal, the cluster's workflows, by Temporal's visibility query syntax.
    """
    if temporal is not None:
        _temporal.list_(temporal, namespace, query, status, as_json)
        return
    with failures():
        query = _inspect.with_status(query, status)
    with reading(data_dir) as store:
        found = _inspect.list_workflows(store, _CODEC, query)
    if as_json:
        echo_json(found)
        return
    table(
        f"{len(found)} workflow(s)",
        ["id", "type", "status", "started", "closed"],
        [
            [_status_cell(row) if name == "status" else row[name] for name in _SUMMARY]
            for row in found
        ],
    )


def _status_cell(row: dict[str, Any]) -> str:
    """A run's status, marked when its workflow task keeps failing (and is retried)."""
    failure = row.get("task_failure")
    if row["status"] != "running" or failure is None:
        return str(row["status"])
    details = getattr(failure, "details", None) or {}
    attempt = details.get("attempt")
    shown = f", attempt {attempt}" if attempt is not None else ""
    return f"running (task failing{shown}: see `roost workflow describe {row['workflow_id']}`)"


@workflow.command()
@click.argument("workflow_id")
@data_dir_option
@_temporal.temporal_options
@json_option
def describe(
    workflow_id: str, data_dir: Path, temporal: str | None, namespace: str, as_json: bool
) -> None:
    """Status, input options, result or error, and pending activities of a workflow."""
    if temporal is not None:
        _temporal.describe(temporal, namespace, workflow_id, as_json)
        return
    with reading(data_dir) as store:
        found = _inspect.describe(store, _CODEC, workflow_id)
    if as_json:
        echo_json(found)
        return
    pending = found.pop("pending_activities", [])
    table(f"workflow {workflow_id}", ["field", "value"], [[k, v] for k, v in found.items()])
    if pending:
        table(
            "pending activities",
            ["seq", "entry", "attempt", "last error", "next attempt at"],
            [
                [p["seq"], p["entry"], p["attempt"], p["last_error"], p["next_attempt_at"]]
                for p in pending
            ],
        )


@workflow.command()
@click.argument("workflow_id")
@data_dir_option
@_temporal.temporal_options
@json_option
def show(
    workflow_id: str, data_dir: Path, temporal: str | None, namespace: str, as_json: bool
) -> None:
    """The history of a workflow's latest run: every event and command, in order.

    With --temporal, the run's Temporal events (JSON: Temporal's own form of each).
    """
    if temporal is not None:
        _temporal.show(temporal, namespace, workflow_id, as_json)
        return
    with reading(data_dir) as store:
        events = _inspect.history(store, _CODEC, workflow_id)
    data = json.loads(history_to_json(events))
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True))
        return
    rows = []
    for i, item in enumerate(data, 1):
        kind = item.pop("type", "-")
        rows.append([i, kind, item])
    table(f"history of {workflow_id}", ["#", "type", "fields"], rows)


def _result_of(described: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": described["status"],
        "result": described["result"],
        "error": described["error"],
    }


@workflow.command()
@click.argument("workflow_id")
@click.option("--wait", is_flag=True, help="Wait until the workflow has closed.")
@data_dir_option
@_temporal.temporal_options
@json_option
def result(  # noqa: PLR0917 - click passes every option as an argument
    workflow_id: str,
    wait: bool,
    data_dir: Path,
    temporal: str | None,
    namespace: str,
    as_json: bool,
) -> None:
    """The status and result (or error) of a workflow; exit 1 if it closed unsuccessfully.

    With --wait, polls the store until the latest run has closed (a stopped data directory
    waits until a node runs it); with --temporal, waits on the cluster.
    """
    if temporal is not None:
        _temporal.result(temporal, namespace, workflow_id, wait, as_json)
        return
    delay = _WAIT_START
    with reading(data_dir) as store:
        found = _result_of(_inspect.describe(store, _CODEC, workflow_id))
        while wait and found["status"] == "running":
            time.sleep(delay)  # a CLI polling a store it does not own: no event to wait on
            delay = min(delay * 2, _WAIT_MAX)
            found = _result_of(_inspect.describe(store, _CODEC, workflow_id))
    if as_json:
        echo_json(found)
    else:
        table(
            f"workflow {workflow_id}",
            ["status", "result", "error"],
            [[found["status"], found["result"], found["error"]]],
        )
    if found["status"] not in ("running", "completed"):
        raise SystemExit(1)


@workflow.command()
@click.argument("entry")
@click.argument("args", required=False)
@click.option("--id", "workflow_id", default=None, help="The workflow id (default: generated).")
@click.option(
    "--app", "app_ref", default=None, help="Check ENTRY against this app (module:attribute)."
)
@data_dir_option
@_temporal.temporal_options
@json_option
def start(  # noqa: PLR0917 - click passes every option as an argument
    entry: str,
    args: str | None,
    workflow_id: str | None,
    app_ref: str | None,
    data_dir: Path,
    temporal: str | None,
    namespace: str,
    as_json: bool,
) -> None:
    """Start workflow ENTRY ('app:name') with ARGS, a JSON list of its arguments.

    Beside a node with an admin server, the node starts it; with no node, the start is
    stored and the next node runs it (one whose app lacks ENTRY, or declares it as no
    workflow, keeps it stored; --app checks ENTRY first). An explicit --id of a running
    workflow is refused (exit 1) with or without a node; without --id, a fresh id.
    With --temporal, the cluster starts it (on the app's task queue).
    """
    values = parse_json(args, "ARGS", default=[])
    if not isinstance(values, list):
        raise click.BadParameter("ARGS must be a JSON list of arguments, e.g. '[1, \"a\"]'")
    with failures(), _refused_start():  # bad input stores nothing, not even an empty store
        _offline.check_start(_CODEC, entry, values, workflow_id)
        if app_ref is not None:
            declared = load_app(app_ref).resolve(entry)
            if declared.kind != "workflow":
                raise click.BadParameter(f"{entry!r} is not a workflow of {app_ref}")
            check_arguments(declared, tuple(values))
    if temporal is not None:
        _temporal.start(temporal, namespace, entry, values, workflow_id, as_json)
        return

    stored = False

    def admin(client: AdminClient) -> str:
        body = {"entry": entry, "args": values, "id": workflow_id}
        return str(client.request("POST", "/api/workflows", body)["workflow_id"])

    def offline(txn: WriteTxn, codec: Codec) -> str:
        nonlocal stored
        stored = True
        return _offline.start_offline(txn, codec, entry, values, workflow_id=workflow_id)

    with failures(), _refused_start():
        try:
            started = change(data_dir, admin=admin, offline=offline, create=True)
        except Error as exc:
            if exc.kind is not ErrorKind.ALREADY_EXISTS or workflow_id is None:
                raise
            raise Failed(
                f"[{exc.kind.value}] workflow {workflow_id!r} is already running: steer it "
                f"with `roost workflow signal|cancel|terminate {workflow_id}`, wait for it "
                f"with `roost workflow result {workflow_id} --wait`, or start under another "
                "--id (none generates one)"
            ) from exc
    if stored and app_ref is None:
        click.echo(
            f"warning: {entry!r} is unchecked (no node runs here, and no --app was given): "
            "the next node runs it only if its app declares it as a workflow; pass --app "
            "MODULE:APP to check it now",
            err=True,
        )
    if as_json:
        echo_json({"workflow_id": started})
    else:
        click.echo(started)


@contextmanager
def _refused_start() -> Iterator[None]:
    """Arguments that do not fit the entry's signature: the start failed (exit 1).

    Unlike other Invalid input (exit 2, a usage error), the command line was well formed:
    the workflow refused it, as it would refuse a call from code.
    """
    try:
        yield
    except Error as exc:
        if exc.kind is ErrorKind.INVALID and "signature" in exc.details:
            raise Failed(f"[{exc.kind.value}] {exc.message}") from exc
        raise


def _post(path: str, body: dict[str, Any]) -> Any:
    def admin(client: AdminClient) -> Any:
        return client.request("POST", path, body)

    return admin


@workflow.command()
@click.argument("workflow_id")
@click.argument("topic")
@click.argument("payload", required=False)
@data_dir_option
@key_file_option
@_temporal.temporal_options
def signal(  # noqa: PLR0917 - click passes every option as an argument
    workflow_id: str,
    topic: str,
    payload: str | None,
    data_dir: Path,
    key_file: Path | None,
    temporal: str | None,
    namespace: str,
) -> None:
    """Send a message with TOPIC and PAYLOAD (JSON; default null) to a running workflow.

    A workflow running under a security context takes only signed messages: give the
    node's key ring (--key-file or ROOST_SIGNING_KEYS); the message is signed as the
    actor operator:<your user name>. With --temporal, a signal on the cluster.
    """
    value = parse_json(payload, "PAYLOAD")
    if temporal is not None:
        _temporal.signal(temporal, namespace, workflow_id, topic, value)
        click.echo(f"signalled {workflow_id} with {topic!r}")
        return
    with failures():
        ring = operator_ring(key_file)
        ticket = operator_ticket(ring, workflow_id, topic)
        body: dict[str, Any] = {"topic": topic, "payload": value}
        if ticket is not None:
            body["ticket"] = ticket
        change(
            data_dir,
            admin=_post(f"/api/workflows/{quote(workflow_id)}/signal", body),
            offline=lambda txn, codec: _offline.signal_offline(
                txn, codec, workflow_id, topic, value, ticket=ticket, ring=ring
            ),
        )
    click.echo(f"signalled {workflow_id} with {topic!r}")


@workflow.command()
@click.argument("workflow_id")
@click.option("--reason", default=None, help="Why (the workflow sees it).")
@data_dir_option
@key_file_option
@_temporal.temporal_options
def cancel(  # noqa: PLR0917 - click passes every option as an argument
    workflow_id: str,
    reason: str | None,
    data_dir: Path,
    key_file: Path | None,
    temporal: str | None,
    namespace: str,
) -> None:
    """Ask a running workflow to cancel (it decides what to do).

    A workflow running under a security context is canceled only by a holder of the
    node's key ring (--key-file or ROOST_SIGNING_KEYS), as operator:<your user name>.
    """
    if temporal is not None:
        _temporal.cancel(temporal, namespace, workflow_id, reason)
        click.echo(f"cancel requested for {workflow_id}")
        return
    with failures():
        ring = operator_ring(key_file)
        ticket = operator_control(ring, workflow_id, "cancel")
        body: dict[str, Any] = {"reason": reason}
        if ticket is not None:
            body["ticket"] = ticket
        change(
            data_dir,
            admin=_post(f"/api/workflows/{quote(workflow_id)}/cancel", body),
            offline=lambda txn, codec: _offline.cancel_offline(
                txn, codec, workflow_id, reason, ticket=ticket, ring=ring
            ),
        )
    click.echo(f"cancel requested for {workflow_id}")


@workflow.command()
@click.argument("workflow_id")
@data_dir_option
@key_file_option
@_temporal.temporal_options
def terminate(
    workflow_id: str, data_dir: Path, key_file: Path | None, temporal: str | None, namespace: str
) -> None:
    """Stop a running workflow at once: none of its code runs again.

    A workflow running under a security context is terminated only by a holder of the
    node's key ring (--key-file or ROOST_SIGNING_KEYS), as operator:<your user name>.
    """
    if temporal is not None:
        _temporal.terminate(temporal, namespace, workflow_id)
        click.echo(f"terminate requested for {workflow_id}")
        return
    with failures():
        ring = operator_ring(key_file)
        ticket = operator_control(ring, workflow_id, "terminate")
        body: dict[str, Any] = {} if ticket is None else {"ticket": ticket}
        change(
            data_dir,
            admin=_post(f"/api/workflows/{quote(workflow_id)}/terminate", body),
            offline=lambda txn, codec: _offline.terminate_offline(
                txn, codec, workflow_id, ticket=ticket, ring=ring
            ),
        )
    click.echo(f"terminate requested for {workflow_id}")
