"""``roost workflow ... --temporal HOST:PORT``: the same commands against a Temporal cluster.

Each command connects a temporalio client with roost's data converter (``roost.temporal``,
the ``roost[temporal]`` extra), asks the cluster, prints what the data-dir form prints,
and exits with the same codes. No node is needed: the cluster holds the workflows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from roost._errors import Error, ErrorKind, invalid
from roost.cli._common import Failed, echo_json, failures, table

if TYPE_CHECKING:
    import temporalio.client

__all__ = [
    "cancel",
    "describe",
    "export",
    "list_",
    "result",
    "show",
    "signal",
    "start",
    "temporal_options",
    "terminate",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_SUMMARY = ("workflow_id", "workflow_type", "status", "started_at", "closed_at")


def temporal_options(fn: F) -> F:
    """``--temporal HOST:PORT`` (env ``ROOST_TEMPORAL``) and ``--namespace NS``."""
    fn = click.option(
        "--namespace",
        "namespace",
        envvar="ROOST_TEMPORAL_NAMESPACE",
        default="default",
        show_default=True,
        help="The Temporal namespace, with --temporal (env ROOST_TEMPORAL_NAMESPACE).",
    )(fn)
    return click.option(
        "--temporal",
        "temporal",
        envvar="ROOST_TEMPORAL",
        default=None,
        metavar="HOST:PORT",
        help="Ask this Temporal cluster instead of the data directory (env ROOST_TEMPORAL).",
    )(fn)


def _ops() -> Any:
    """``roost.temporal._client``, or the command's exit when the extra is not installed."""
    with failures():
        try:
            from roost.temporal import _client  # noqa: PLC0415 - an optional extra
        except ImportError as exc:
            raise Error(
                f"--temporal needs the roost[temporal] extra ({exc}): "
                "pip install 'roost[temporal]'",
                kind=ErrorKind.INVALID_STATE,
            ) from None
    return _client


def _on_cluster(
    target: str,
    namespace: str,
    ask: Callable[[temporalio.client.Client], Coroutine[Any, Any, T]],
) -> T:
    """``ask(client)`` on a fresh asyncio loop; a ``roost.Error`` is the command's exit."""
    _client = _ops()
    with failures():

        async def main() -> T:
            client = await _client.connect(target, namespace)
            return await ask(client)

        return asyncio.run(main())


def list_(
    target: str, namespace: str, query: str | None, status: str | None, as_json: bool
) -> None:
    """``roost workflow list --temporal``: Temporal's visibility query syntax."""
    _client = _ops()
    with failures():
        narrowed = _client.status_query(query, status)
    found = _on_cluster(target, namespace, lambda c: _client.list_workflows(c, narrowed))
    if as_json:
        echo_json(found)
        return
    table(
        f"{len(found)} workflow(s)",
        ["id", "type", "status", "started", "closed"],
        [[row[name] for name in _SUMMARY] for row in found],
    )


def describe(target: str, namespace: str, workflow_id: str, as_json: bool) -> None:
    """``roost workflow describe --temporal``."""
    _client = _ops()
    found = _on_cluster(target, namespace, lambda c: _client.describe(c, workflow_id))
    if as_json:
        echo_json(found)
        return
    table(f"workflow {workflow_id}", ["field", "value"], [[k, v] for k, v in found.items()])


def show(target: str, namespace: str, workflow_id: str, as_json: bool) -> None:
    """``roost workflow show --temporal``: the latest run's Temporal events, in order."""
    _client = _ops()
    data = _on_cluster(target, namespace, lambda c: _client.history_file(c, workflow_id))
    events: list[dict[str, Any]] = json.loads(data)["history"].get("events", [])
    if as_json:
        click.echo(json.dumps(events, indent=2, sort_keys=True))
        return
    rows = []
    for event in events:
        attributes: dict[str, Any] = next(
            (v for k, v in event.items() if k.endswith("EventAttributes")), {}
        )
        rows.append(
            [
                event.get("eventId"),
                event.get("eventType", "-").removeprefix("EVENT_TYPE_"),
                event.get("eventTime"),
                _brief(attributes),
            ]
        )
    table(f"history of {workflow_id}", ["#", "type", "time", "fields"], rows)


def _brief(attributes: dict[str, Any]) -> dict[str, Any]:
    """The names in an event's attributes (what ran, which signal), without its payloads."""
    out: dict[str, Any] = {}
    for key in ("activityType", "workflowType", "signalName", "timerId", "activityId"):
        value = attributes.get(key)
        if isinstance(value, dict):
            value = value.get("name")
        if value is not None:
            out[key] = value
    return out


def result(target: str, namespace: str, workflow_id: str, wait: bool, as_json: bool) -> None:
    """``roost workflow result --temporal``; with ``wait``, until it closed for good."""
    _client = _ops()

    async def ask(client: temporalio.client.Client) -> dict[str, Any]:
        if wait:
            await _client.outcome(client, workflow_id)
        described = await _client.describe(client, workflow_id)
        return {k: described[k] for k in ("status", "result", "error")}

    found = _on_cluster(target, namespace, ask)
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


def start(  # noqa: PLR0917 - the command's arguments
    target: str,
    namespace: str,
    entry: str,
    values: list[Any],
    workflow_id: str | None,
    as_json: bool,
) -> None:
    """``roost workflow start --temporal``: an explicit ``--id`` of a running one is refused."""
    _client = _ops()
    app_name, _, name = entry.partition(":")
    if not app_name or not name:
        with failures():
            raise invalid(f"ENTRY must be 'app:name', got {entry!r}")
    options: dict[str, Any] = {}
    if workflow_id is not None:
        options = {"id": workflow_id, "id_conflict_policy": "fail"}

    async def ask(client: temporalio.client.Client) -> str:
        started: str = await _client.start_outside(client, entry, values, options)
        return started

    try:
        started = _on_cluster(target, namespace, ask)
    except Failed as exc:
        if workflow_id is None or "[AlreadyExists]" not in exc.message:
            raise
        raise Failed(
            f"[AlreadyExists] workflow {workflow_id!r} is already running: steer it with "
            f"`roost workflow signal|cancel|terminate {workflow_id} --temporal {target}`, wait "
            f"for it with `roost workflow result {workflow_id} --wait --temporal {target}`, "
            "or start under another --id (none generates one)"
        ) from exc
    if as_json:
        echo_json({"workflow_id": started})
    else:
        click.echo(started)


def signal(target: str, namespace: str, workflow_id: str, topic: str, payload: Any) -> None:
    """``roost workflow signal --temporal``."""
    _client = _ops()
    _on_cluster(target, namespace, lambda c: _client.signal(c, workflow_id, topic, payload))


def cancel(target: str, namespace: str, workflow_id: str, reason: str | None) -> None:
    """``roost workflow cancel --temporal``: a ``Cancel`` event with the reason."""
    _client = _ops()
    _on_cluster(target, namespace, lambda c: _client.cancel(c, workflow_id, reason))


def terminate(target: str, namespace: str, workflow_id: str) -> None:
    """``roost workflow terminate --temporal``."""
    _client = _ops()
    _on_cluster(target, namespace, lambda c: _client.terminate(c, workflow_id))


def export(target: str, namespace: str, workflow_id: str, file: Path) -> int:
    """``roost history export --temporal``: the run's Temporal history; its event count."""
    _client = _ops()
    data = _on_cluster(target, namespace, lambda c: _client.history_file(c, workflow_id))
    with failures():
        try:
            file.write_bytes(data)
        except OSError as exc:
            raise invalid(f"cannot write {file}: {exc.strerror}") from None
    return len(json.loads(data)["history"].get("events", []))
