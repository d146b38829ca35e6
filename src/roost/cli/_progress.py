"""A progress bar for commands that work through many items, on a terminal only."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import TypeVar

from rich.console import Console
from rich.progress import Progress

__all__ = ["progress"]

T = TypeVar("T")


def progress(items: Sequence[T], description: str) -> Iterator[T]:
    """Yield ``items``, showing a progress bar on stderr when it is a terminal.

    Piped or captured output stays plain text (no bar, no control characters).
    """
    if len(items) < 2 or not sys.stderr.isatty():
        yield from items
        return
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=len(items))
        for item in items:
            yield item
            bar.advance(task)
