"""``roost admin token [--rotate]``: the admin token kept in a data directory."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import click

from roost.admin._audit import record_change
from roost.admin._server import ADMIN_FILE, write_admin_file
from roost.admin._token import load_token, rotate_token
from roost.cli._common import data_dir_option, failures
from roost.cli._signing import operator_actor

__all__ = ["admin"]


@click.group()
def admin() -> None:
    """The admin server's token."""


@admin.command()
@click.option("--rotate", is_flag=True, help="Replace the token; the old one stops working.")
@data_dir_option
def token(rotate: bool, data_dir: Path) -> None:
    """Print the admin token of the data directory (made on first use).

    Every node opened on the directory with an admin server uses it (ROOST_ADMIN_TOKEN,
    when set, instead). With --rotate a new one replaces it, also in a running node: the old
    token, and browser logins made with it, are refused from then on.
    """
    with failures():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not rotate:
            click.echo(load_token(data_dir))
            return
        new = rotate_token(data_dir)
        _follow_in_admin_file(data_dir, new)
        record_change(
            data_dir,
            actor=operator_actor(),
            via="cli",
            action="roost admin token --rotate",
            outcome="ok",
        )
        click.echo(new)


def _follow_in_admin_file(data_dir: Path, new: str) -> None:
    # A running node's admin.json names its token for the CLI's changing commands.
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        info = json.loads((data_dir / ADMIN_FILE).read_text())
        write_admin_file(data_dir, str(info["url"]), new, pid=int(info["pid"]))
