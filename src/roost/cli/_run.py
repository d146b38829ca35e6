"""``roost run MODULE:APP``: a node on a data directory until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click
import trio

from roost.actors._app import App
from roost.actors._open import open_node
from roost.cli._apps import load_app
from roost.cli._common import data_dir_option, failures

__all__ = ["run"]

log = logging.getLogger("roost.cli")


def _bind(value: str | None) -> Any:
    # A bare port, as open_node takes it (on 127.0.0.1); "host:port" as given.
    if value is None:
        return None
    return int(value) if value.isdigit() else value


async def serve(app: App, data_dir: Path, http: str | None, admin: str | None) -> None:
    """Run a node for ``app`` until SIGINT or SIGTERM, then shut it down cleanly."""
    options: dict[str, Any] = {}
    if http is not None:
        options["http"] = _bind(http)
    if admin is not None:
        # open_node's admin= takes "host:port" only; a bare port means loopback, as for --http.
        options["admin"] = admin if ":" in admin else f"127.0.0.1:{admin}"
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_node(app, data_dir, **options) as node:
            admin_url = node.admin_url
            log.info(
                "node %r (incarnation %d) runs app %r on %s%s%s; stop it with Ctrl-C or SIGTERM",
                node.name,
                node.incarnation,
                app.name,
                node.data_dir,
                f"; HTTP triggers at {node.http_url}" if node.http_url else "",
                f"; admin API at {admin_url}" if admin_url else "",
            )
            async for signum in signals:
                log.info("%s received: shutting down", signal.Signals(signum).name)
                break
    log.info("node stopped")


@click.command()
@click.argument("app_ref", metavar="MODULE:APP")
@data_dir_option
@click.option("--http", default=None, help="Serve the app's HTTP triggers on PORT or HOST:PORT.")
@click.option("--admin", default=None, help="Serve the admin API on HOST:PORT (e.g. 127.0.0.1:0).")
def run(app_ref: str, data_dir: Path, http: str | None, admin: str | None) -> None:
    """Run a node for MODULE:APP until SIGINT or SIGTERM (logs to stderr)."""
    app = load_app(app_ref)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with failures():
            trio.run(serve, app, data_dir, http, admin)
    finally:
        root.removeHandler(handler)
