"""``roost.__version__``: the installed package's version, read from its metadata."""

from __future__ import annotations

import importlib.metadata

__all__ = ["__version__"]

try:
    __version__: str = importlib.metadata.version("roost")
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
