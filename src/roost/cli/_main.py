"""The ``roost`` command."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from roost._errors import Error, NondeterminismError
from roost.actors._app import App
from roost.testing import Replayer, load_history

__all__ = ["load_app", "main"]


def load_app(ref: str) -> App:
    """Import ``module:attribute`` and return the ``roost.App`` it names.

    Raises:
        click.BadParameter: the reference does not name an App.
    """
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise click.BadParameter(f"{ref!r} is not 'module:attribute', e.g. 'shop.app:app'")
    # Like uvicorn and pytest, find modules relative to where the command runs.
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise click.BadParameter(f"{ref!r} is not a roost.App (got {type(app).__name__})")
    return app


@click.group()
def main() -> None:
    """roost: processes, supervisors and durable workflows on trio."""


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
def replay(histories: tuple[Path, ...], app_ref: str) -> None:
    """Replay recorded histories against the current code; exit 1 on any divergence."""
    app = load_app(app_ref)
    replayer = Replayer(app)
    diverged = 0
    for path in histories:
        try:
            result = replayer.replay(load_history(path))
        except NondeterminismError as exc:
            diverged += 1
            click.echo(f"DIVERGED {path}", err=True)
            click.echo(f"  {exc.message}", err=True)
            for field in ("activation", "issued", "recorded", "location"):
                click.echo(f"  {field}: {exc.details.get(field)}", err=True)
            continue
        except Error as exc:
            if exc.kind.value == "Invalid":
                raise click.ClickException(f"{path}: {exc.message}") from exc
            click.echo(f"ok {path}: replays to its recorded error {exc}")
            continue
        click.echo(f"ok {path}: replays to {result!r}")
    if diverged:
        click.echo(f"{diverged} of {len(histories)} histories diverged", err=True)
        sys.exit(1)
