"""The ``roost`` command line."""

from roost.cli._main import load_app, main

__all__ = ["load_app", "main"]
