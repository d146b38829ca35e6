"""``roost run MODULE:APP``: a node on a data directory until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import Any

import click
import trio

from roost._errors import Error
from roost.actors._app import App
from roost.actors._open import only_ctrl_c, open_node
from roost.cli._apps import load_app
from roost.cli._common import Failed, data_dir_option, failures

__all__ = ["run"]

log = logging.getLogger("roost.cli")


def _bind(value: str | None) -> Any:
    # A bare port, as open_node takes it (on 127.0.0.1); "host:port" as given.
    if value is None:
        return None
    return int(value) if value.isdigit() else value


async def serve(
    app: App,
    data_dir: Path,
    http: str | None,
    admin: str | None,
    cluster: dict[str, Any] | None = None,
) -> None:
    """Run a node for ``app`` until SIGINT or SIGTERM, then shut it down cleanly.

    ``cluster``: ``open_node``'s ``name``, ``temporal``, ``temporal_namespace`` and
    ``retention``.
    """
    options: dict[str, Any] = dict(cluster or {})
    if http is not None:
        options["http"] = _bind(http)
    if admin is not None:
        # open_node's admin= takes "host:port" only; a bare port means loopback, as for --http.
        options["admin"] = admin if ":" in admin else f"127.0.0.1:{admin}"
    main_pid = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with open_node(app, data_dir, **options) as node:
                admin_url = node.admin_url
                main_pid = node.main_pid
                log.info(
                    "node %r (incarnation %d) runs app %r on %s%s%s%s%s; stop it with Ctrl-C "
                    "or SIGTERM",
                    node.name,
                    node.incarnation,
                    app.name,
                    node.data_dir,
                    f"; main {main_pid}" if main_pid is not None else "",
                    f"; workflows on the Temporal cluster {options['temporal']}"
                    if "temporal" in options
                    else "",
                    f"; HTTP triggers at {node.http_url}" if node.http_url else "",
                    f"; admin API at {admin_url}" if admin_url else "",
                )
                if admin_url:
                    # Once, on stdout (the log is stderr): the link to open. The token stays
                    # out of it (stdout may be a shared log); the login page asks for it.
                    click.echo(
                        f"console: {admin_url}/  (log in with the token of "
                        f"`roost admin token --data-dir {node.data_dir}`)"
                    )
                async for signum in signals:
                    log.info("%s received: shutting down", signal.Signals(signum).name)
                    break
        except Error as exc:
            if main_pid is None or exc.details.get("linked_pid") != str(main_pid):
                raise
            log.error("main %s failed: the node shut down", main_pid)  # noqa: TRY400 - logged with its traceback by the node
            raise Failed(f"[{exc.kind.value}] the app's main failed: {exc.message}") from exc
    log.info("node stopped")


@click.command()
@click.argument("app_ref", metavar="MODULE:APP")
@data_dir_option
@click.option("--http", default=None, help="Serve the app's HTTP triggers on PORT or HOST:PORT.")
@click.option("--admin", default=None, help="Serve the admin API on HOST:PORT (e.g. 127.0.0.1:0).")
@click.option(
    "--temporal",
    default=None,
    metavar="HOST:PORT",
    help="Host the app's workflows on this Temporal cluster (roost[temporal]).",
)
@click.option(
    "--namespace",
    default="default",
    show_default=True,
    help="The Temporal namespace, with --temporal.",
)
@click.option(
    "--temporal-ui",
    default=None,
    metavar="URL",
    envvar="ROOST_TEMPORAL_UI",
    help="The cluster's Temporal UI, with --temporal: the admin console links to it "
    "(env ROOST_TEMPORAL_UI).",
)
@click.option(
    "--name",
    default=None,
    help="The node's name (with --temporal: unique among the cluster's live nodes).",
)
@click.option(
    "--retention",
    default=None,
    metavar="DURATION",
    help="Delete a closed workflow this long after it closed (e.g. 7d; default: keep forever).",
)
def run(  # noqa: PLR0917 - click passes every option as an argument
    app_ref: str,
    data_dir: Path,
    http: str | None,
    admin: str | None,
    temporal: str | None,
    namespace: str,
    temporal_ui: str | None,
    name: str | None,
    retention: str | None,
) -> None:
    """Run a node for MODULE:APP until SIGINT or SIGTERM (logs to stderr).

    With --temporal, its workflows run on that Temporal cluster, and the node is one of
    the cluster's workers for them (give each node its own --name).
    """
    if temporal is not None and name is None:
        raise click.UsageError(
            "--temporal needs --name NODE: each node of a cluster has a name of its own"
        )
    cluster: dict[str, Any] = {}
    if name is not None:
        cluster["name"] = name
    if temporal is not None:
        cluster.update(temporal=temporal, temporal_namespace=namespace)
        if temporal_ui is not None:
            cluster["temporal_ui"] = temporal_ui
    if retention is not None:
        cluster["retention"] = retention
    app = load_app(app_ref)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        with failures():
            # A Ctrl-C before the node listens for it lands at a checkpoint of the main
            # task, as in roost.run (docs/design-notes.md).
            trio.run(
                serve,
                app,
                data_dir,
                http,
                admin,
                cluster,
                restrict_keyboard_interrupt_to_checkpoints=True,
            )
    except BaseException as exc:
        if not only_ctrl_c(exc):
            raise
        # A Ctrl-C before the node listens for it (loading, recovery) or during shutdown.
        click.echo("roost: interrupted (Ctrl-C): the node shut down", err=True)
        sys.exit(130)
    finally:
        root.removeHandler(handler)
