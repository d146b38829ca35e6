"""What every ``roost`` command shares: the data directory, errors and exit codes, output.

Exit codes: 0 on success, 1 when the operation failed (the message on stderr), 2 for bad
arguments (click's usage errors, and a ``roost.Error`` of kind Invalid).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from roost._errors import Error, ErrorKind
from roost.admin._console_format import short
from roost.admin._json import to_jsonable
from roost.storage import LmdbStore, open_lmdb_store

__all__ = [
    "BadArgument",
    "Failed",
    "console",
    "data_dir_option",
    "echo_json",
    "failures",
    "json_option",
    "parse_json",
    "reading",
    "table",
]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DATA_DIR = "./roost-data"
# The most characters a table cell shows of one value (the console's previews are as short).
CELL_CHARS = 200


class Failed(click.ClickException):
    """A failed operation: its message on stderr, exit code 1."""

    exit_code = 1


class BadArgument(click.ClickException):
    """An argument the operation refused (a ``roost.Error`` of kind Invalid): exit code 2."""

    exit_code = 2


def data_dir_option(fn: F) -> F:
    """``--data-dir DIR`` (or ``ROOST_DATA_DIR``; default ``./roost-data``)."""
    return click.option(
        "--data-dir",
        "data_dir",
        envvar="ROOST_DATA_DIR",
        default=DEFAULT_DATA_DIR,
        show_default=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="The node's data directory (env ROOST_DATA_DIR).",
    )(fn)


def json_option(fn: F) -> F:
    """``--json``: print JSON instead of a table."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")(
        fn
    )


@contextmanager
def failures() -> Iterator[None]:
    """Turn a ``roost.Error`` into the command's exit: 2 for Invalid, 1 for anything else."""
    try:
        yield
    except Error as exc:
        if exc.kind is ErrorKind.INVALID:
            raise BadArgument(exc.message) from exc
        raise Failed(f"[{exc.kind.value}] {exc.message}") from exc


@contextmanager
def reading(data_dir: Path) -> Iterator[LmdbStore]:
    """The data directory's store, opened read-only beside whatever node holds it.

    No lock is taken and nothing is written (no writer thread, no incarnation bump); LMDB's
    reader table keeps the snapshots consistent with the writing process.
    """
    with failures():
        store = open_lmdb_store(data_dir, readonly=True, lock=False)
    try:
        with failures():
            yield store
    finally:
        store.close()


def parse_json(text: str | None, what: str, *, default: Any = None) -> Any:
    """Parse a JSON command-line argument; a usage error (exit 2) names what is wrong."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{what} must be JSON (e.g. '[1, \"a\"]' or '{{\"k\": 1}}'): {exc}"
        ) from None
    except RecursionError:
        raise click.BadParameter(
            f"{what} is nested too deeply to parse ({len(text)} characters): "
            "flatten it (stored values nest at most 256 levels deep)"
        ) from None


def console() -> Console:
    """The console tables print to: the terminal's width, or wide when piped."""
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def echo_json(value: Any) -> None:
    """Print ``value`` as indented JSON (stored values made JSON-safe)."""
    click.echo(json.dumps(to_jsonable(value), indent=2, sort_keys=True))


def cell(value: Any) -> str:
    """One table cell: None as '-', anything else a bounded preview, as the console shows it.

    Text is shown as is, other values as compact JSON; past ``CELL_CHARS`` characters the
    cell ends with an ellipsis (``--json`` prints every value in full).
    """
    if value is None:
        return "-"
    return short(value, chars=CELL_CHARS)


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    """Print a rich table of ``rows``."""
    out = Table(title=title)
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        out.add_row(*(Text(cell(v)) for v in row))  # never read as rich markup
    console().print(out)
