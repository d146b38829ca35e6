"""The ``roost`` command."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path
from typing import Any, Final

import click

from roost._errors import Error, NondeterminismError
from roost.actors._app import App
from roost.cli._admin import admin
from roost.cli._apps import load_app
from roost.cli._common import echo_json, failures, json_option
from roost.cli._progress import progress
from roost.cli._queue import cron, dlq, history, queue
from roost.cli._run import run
from roost.cli._store import store
from roost.cli._workflow import workflow
from roost.testing import Replayer, load_history

__all__ = ["load_app", "main"]

_DIVERGENCE_FIELDS: Final = ("activation", "issued", "recorded", "location")


def _temporal_replay(app: App, path: Path) -> Any:
    """The ``TemporalReplay`` of a Temporal history file; None for any other file."""
    data = path.read_bytes()
    if not data.lstrip().startswith(b"{"):  # a roost history is CBOR, never a JSON object
        return None
    try:
        from roost.temporal import _client, _replay  # noqa: PLC0415 - an optional extra
    except ImportError as exc:
        raise click.ClickException(
            f"{path} is a Temporal history: replaying it needs the roost[temporal] extra ({exc})"
        ) from None
    with failures():
        history = _client.read_history_file(data, path)
    if history is None:
        return None
    return _replay.replay_temporal_history(app, history)


@click.group()
@click.version_option(importlib.metadata.version("roost"), prog_name="roost")
def main() -> None:
    """roost: processes, supervisors and durable workflows on trio."""


for _command in (run, workflow, queue, dlq, cron, history, store, admin):
    main.add_command(_command)


@main.command()
@click.option(
    "--history",
    "histories",
    multiple=True,
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A history file (from roost.testing.save_history); repeat for several.",
)
@click.option("--app", "app_ref", required=True, help="The app, as module:attribute.")
@json_option
def replay(histories: tuple[Path, ...], app_ref: str, as_json: bool) -> None:
    """Replay recorded histories against the current code; exit 1 on any divergence.

    A file from `roost history export --temporal` is replayed by temporalio's Replayer.
    With --json: a list with one ``{"history", "outcome", ...}`` per file, where outcome is
    ``result`` (with ``result``), ``error`` (the recorded error it replays to),
    ``replayed`` (a Temporal history, with ``workflow_id``) or ``diverged`` (with
    ``message``, and for a roost history ``activation``, ``issued``, ``recorded``,
    ``location``).
    """
    app = load_app(app_ref)
    replayer = Replayer(app)
    diverged = 0
    report: list[dict[str, Any]] = []
    for path in progress(histories, "replaying"):
        temporal = _temporal_replay(app, path)
        if temporal is not None:
            outcome = _temporal_outcome(path, temporal, as_json=as_json)
            diverged += outcome["outcome"] == "diverged"
            report.append(outcome)
            continue
        try:
            result = replayer.replay(load_history(path))
        except NondeterminismError as exc:
            diverged += 1
            fields = {f: exc.details.get(f) for f in _DIVERGENCE_FIELDS}
            report.append(
                {"history": str(path), "outcome": "diverged", "message": exc.message, **fields}
            )
            if not as_json:
                click.echo(f"DIVERGED {path}", err=True)
                click.echo(f"  {exc.message}", err=True)
                for field, value in fields.items():
                    click.echo(f"  {field}: {value}", err=True)
            continue
        except Error as exc:
            if exc.kind.value == "Invalid":
                raise click.ClickException(f"{path}: {exc.message}") from exc
            report.append({"history": str(path), "outcome": "error", "error": exc})
            if not as_json:
                click.echo(f"ok {path}: replays to its recorded error {exc}")
            continue
        report.append({"history": str(path), "outcome": "result", "result": result})
        if not as_json:
            click.echo(f"ok {path}: replays to {result!r}")
    if as_json:
        echo_json(report)
    elif diverged:
        click.echo(f"{diverged} of {len(histories)} histories diverged", err=True)
    if diverged:
        sys.exit(1)


def _temporal_outcome(path: Path, replayed: Any, *, as_json: bool) -> dict[str, Any]:
    """The report of one Temporal history's replay, printed unless ``as_json``."""
    if replayed.failure is None:
        if not as_json:
            click.echo(f"ok {path}: replays (Temporal history of {replayed.workflow_id})")
        return {"history": str(path), "outcome": "replayed", "workflow_id": replayed.workflow_id}
    if not as_json:
        click.echo(f"DIVERGED {path}", err=True)
        click.echo(f"  {replayed.failure}", err=True)
    return {"history": str(path), "outcome": "diverged", "message": str(replayed.failure)}
