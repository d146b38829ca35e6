"""``roost queue``, ``roost dlq``, ``roost cron`` and ``roost history``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Final

import click

from roost._files import private_dir
from roost.cli import _temporal
from roost.cli._apps import load_app
from roost.cli._changing import AdminClient, change, quote
from roost.cli._common import (
    data_dir_option,
    echo_json,
    failures,
    json_option,
    reading,
    table,
)
from roost.cli._progress import progress
from roost.queues import _offline
from roost.queues._spec import queue_specs
from roost.storage import Codec, WriteTxn
from roost.testing import save_history
from roost.workflow._local import _inspect

__all__ = ["cron", "dlq", "history", "queue"]

_CODEC: Final = Codec()

_APP_HELP = (
    "The app (module:attribute), to list what it declares even before it stored anything; "
    "without it, what the store holds."
)


def _declared_app(app_ref: str | None) -> Any:
    return None if app_ref is None else load_app(app_ref)


@click.group()
def queue() -> None:
    """Queues: depth, in flight and dead letters."""


@queue.command()
@click.option("--app", "app_ref", default=None, help=_APP_HELP)
@data_dir_option
@json_option
def stats(app_ref: str | None, data_dir: Path, as_json: bool) -> None:
    """Depth, in flight and dead letters of each queue."""
    app = _declared_app(app_ref)
    declared = sorted(queue_specs(app)) if app is not None else []
    with reading(data_dir) as store, store.read() as txn:
        found = _offline.queue_stats(txn, _CODEC, declared)
    if as_json:
        echo_json(found)
        return
    table(
        "queues",
        ["queue", "depth", "in flight", "dead"],
        [[name, s["depth"], s["in_flight"], s["dead"]] for name, s in found.items()],
    )


def _last(errors: list[Any]) -> Any:
    return errors[-1] if errors else None


def dead_letter_json(dead: Any) -> dict[str, Any]:
    """One dead letter as ``roost dlq list --json`` prints it."""
    return {
        "receipt_id": dead.receipt_id,
        "entry": dead.entry,
        "payload": dead.payload,
        "errors": dead.errors,
        "failed_at": dead.failed_at,
    }


@click.group()
def dlq() -> None:
    """Dead letters: list, redrive, discard."""


@dlq.command("list")
@click.argument("queue_name", metavar="QUEUE")
@click.option("--app", "app_ref", default=None, help="The app whose declared queues are known.")
@data_dir_option
@json_option
def dlq_list(queue_name: str, app_ref: str | None, data_dir: Path, as_json: bool) -> None:
    """The dead letters of QUEUE, oldest first.

    A queue with no message or dead letter in the store (and, with --app, not declared by
    the app) is unknown: exit 1, as the admin API answers 404.
    """
    app = _declared_app(app_ref)
    declared = set(queue_specs(app)) if app is not None else None
    with reading(data_dir) as store, store.read() as txn:
        _offline.check_queue_known(txn, queue_name, declared)
        found = [dead_letter_json(d) for d in _offline.dead_letters(txn, _CODEC, queue_name)]
    if as_json:
        echo_json(found)
        return
    table(
        f"dead letters of {queue_name}",
        ["receipt", "entry", "payload", "last error", "failed at"],
        [
            [d["receipt_id"], d["entry"], d["payload"], _last(d["errors"]), d["failed_at"]]
            for d in found
        ],
    )


@dlq.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipt_id", metavar="RECEIPT", required=False)
@click.option("--all", "every", is_flag=True, help="Redrive every dead letter of QUEUE.")
@data_dir_option
def redrive(queue_name: str, receipt_id: str | None, every: bool, data_dir: Path) -> None:
    """Put dead letter RECEIPT (or --all) back into QUEUE with a fresh retry budget."""
    if every == (receipt_id is not None):
        raise click.UsageError("give either RECEIPT or --all (one of them)")
    body: dict[str, Any] = {"all": True} if every else {"receipt_id": receipt_id}

    def admin(client: AdminClient) -> int:
        answer = client.request("POST", f"/api/queues/{quote(queue_name)}/dlq/redrive", body)
        return int(answer["redriven"])

    def offline(txn: WriteTxn, codec: Codec) -> int:
        return _offline.redrive_offline(txn, codec, queue_name, receipt_id)

    with failures():
        count = change(data_dir, admin=admin, offline=offline)
    click.echo(f"redriven: {count}")


@dlq.command()
@click.argument("queue_name", metavar="QUEUE")
@click.argument("receipt_id", metavar="RECEIPT")
@data_dir_option
def discard(queue_name: str, receipt_id: str, data_dir: Path) -> None:
    """Delete dead letter RECEIPT of QUEUE for good."""

    def admin(client: AdminClient) -> None:
        client.request(
            "POST", f"/api/queues/{quote(queue_name)}/dlq/discard", {"receipt_id": receipt_id}
        )

    def offline(txn: WriteTxn, codec: Codec) -> None:
        _offline.discard_offline(txn, codec, queue_name, receipt_id)

    with failures():
        change(data_dir, admin=admin, offline=offline)
    click.echo(f"discarded: {receipt_id}")


@click.group()
def cron() -> None:
    """Cron triggers."""


@cron.command("list")
@click.option("--app", "app_ref", default=None, help=_APP_HELP)
@data_dir_option
@json_option
def cron_list(app_ref: str | None, data_dir: Path, as_json: bool) -> None:
    """The cron triggers and their next fire times (UTC).

    The store knows the triggers that fired at least once; --app adds the others.
    """
    app = _declared_app(app_ref)
    declared: dict[str, tuple[str, str]] = {}
    if app is not None:
        with failures():
            for trigger_id, trigger in app.declared.get("cron", {}).items():
                declared[trigger_id] = (app.resolve(trigger.entry).id, trigger.schedule.expression)
                if trigger.legacy_id is not None:  # its row in a store from an older roost
                    declared[trigger.legacy_id] = declared[trigger_id]
    with reading(data_dir) as store, store.read() as txn:
        found = _offline.cron_triggers(txn, _CODEC, declared, dt.datetime.now(dt.UTC))
    if as_json:
        echo_json(found)
        return
    table(
        "cron triggers",
        ["entry", "expression", "next fire (UTC)"],
        [[c["entry"], c["expression"], c["next_fire_at"]] for c in found],
    )


@click.group()
def history() -> None:
    """Workflow histories."""


@history.command()
@click.argument("workflow_id")
@click.argument("file", type=click.Path(dir_okay=False, writable=True, path_type=Path))
@data_dir_option
@_temporal.temporal_options
def export(
    workflow_id: str, file: Path, data_dir: Path, temporal: str | None, namespace: str
) -> None:
    """Write the history of WORKFLOW_ID to FILE (what `roost replay --history` reads).

    With --temporal, the Temporal history of its latest run on that cluster.
    """
    if temporal is not None:
        count = _temporal.export(temporal, namespace, workflow_id, file)
        click.echo(f"wrote {count} Temporal events of {workflow_id} to {file}")
        return
    with reading(data_dir) as store:
        events = _inspect.history(store, _CODEC, workflow_id)
    with failures():
        save_history(events, file)
    click.echo(f"wrote {len(events)} events of {workflow_id} to {file}")


@history.command("export-all")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--query", "-q", default=None, help="Only workflows matching this query.")
@click.option("--status", "-s", default=None, help="Only workflows with this status.")
@data_dir_option
def export_all(directory: Path, query: str | None, status: str | None, data_dir: Path) -> None:
    """Write the history of every (matching) workflow to DIRECTORY/<workflow id>.cbor."""
    with failures():
        query = _inspect.with_status(query, status)
    with reading(data_dir) as store:
        ids = [
            row["workflow_id"]
            for row in _inspect.list_workflows(store, _CODEC, query)
            if row["status"] != "quarantined"
        ]
        private_dir(directory)
        for workflow_id in progress(ids, "exporting histories"):
            events = _inspect.history(store, _CODEC, workflow_id)
            save_history(events, directory / f"{quote(workflow_id)}.cbor")
    click.echo(f"wrote {len(ids)} histories to {directory}")
