"""Finding the app a command names: ``module:attribute``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from roost.actors._app import App

__all__ = ["load_app"]


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
