"""The admin server: the JSON API, the web console and ``/metrics``, served inside the node.

``open_node(app, admin="127.0.0.1:0")`` starts it as the node's last service: a Starlette
app on hypercorn's trio worker (as the HTTP triggers are served), listening before
``open_node`` returns, so ``node.admin_url`` is usable at once. The node writes
``admin.json`` (``{"url", "token"}``, mode 0600, replaced atomically) into its data
directory and removes it on close; a file left by a killed node names a URL that no longer
answers (the CLI checks), and the next node with ``admin=`` replaces it.

Every route is behind the token (``_auth``), the one kept in the data directory's
``admin.token`` (``_token``: the same for every node on the directory, so logins and scrapes
survive restarts; ``ROOST_ADMIN_TOKEN`` overrides it). In front of the token check, the Host
and Origin checks the HTTP triggers make (``queues._http_guard``: 421 for a Host outside the
allow-list, 403 for a state-changing request from another origin); behind it, every change
is recorded with its actor (``_audit``). The address is loopback unless a host is given
explicitly: any other host is served as asked, and logged as a warning, since whoever
reaches it with the token controls the node.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio

from roost._errors import Error, ErrorKind, invalid
from roost.admin._audit import AuditChanges
from roost.admin._auth import AUTH_SCOPE_KEY, TokenAuth
from roost.admin._json import error_json
from roost.admin._token import TokenSource
from roost.queues._http_guard import HostGuard

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

    from roost.actors._node import Node
    from roost.actors._open import NodeHandle

__all__ = [
    "ADMIN_FILE",
    "AdminServer",
    "build_admin_app",
    "parse_admin_bind",
    "start_admin",
    "write_admin_file",
]

log = logging.getLogger("roost.admin")

ADMIN_FILE: Final = "admin.json"
_GRACE: Final = 1.0  # seconds the answers under way get once the node has stopped
_HELP: Final = (
    "admin= takes 'host:port' (e.g. '127.0.0.1:8081'; port 0 picks a free one; ':0' means "
    "127.0.0.1), or None for no admin server; got {value!r}"
)


def parse_admin_bind(value: object) -> tuple[str, int]:
    """Read ``open_node``'s ``admin`` option into (host, port).

    Raises:
        roost.Error: kind Invalid for anything but a ``"host:port"`` string.
    """
    from roost.queues._http_server import parse_bind  # noqa: PLC0415 - the same address rules

    if not isinstance(value, str):
        raise invalid(_HELP.format(value=value))
    try:
        bind = parse_bind(value)
    except Error:
        raise invalid(_HELP.format(value=value)) from None
    assert bind is not None  # a string always binds
    return bind


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_admin_app(
    node: NodeHandle,
    *,
    token: str | None = None,
    tokens: TokenSource | None = None,
    guard: HostGuard | None = None,
) -> Starlette:
    """The admin ASGI app for ``node``: the API, ``/metrics`` and the console, behind the token.

    ``app.state.node`` is the ``NodeHandle``, ``app.state.tokens`` the ``TokenSource``
    (``tokens``, else one fixed on ``token``, else the data directory's kept token);
    ``guard``: the Host/Origin checks (default: loopback names).
    """
    from starlette.applications import Starlette  # noqa: PLC0415 - loaded with the server
    from starlette.middleware import Middleware  # noqa: PLC0415
    from starlette.routing import Route  # noqa: PLC0415

    from roost.admin._api import Closing, api_routes  # noqa: PLC0415
    from roost.admin._console import console_routes  # noqa: PLC0415
    from roost.admin._metrics import CONTENT_TYPE, metrics_text, new_registry  # noqa: PLC0415

    if tokens is None:
        tokens = TokenSource(None if token is not None else node.data_dir, token)
    registry = new_registry(node)

    async def metrics(request: Request) -> Response:
        from starlette.responses import Response  # noqa: PLC0415

        return Response(metrics_text(registry), media_type=CONTENT_TYPE)

    routes = [*api_routes(), Route("/metrics", metrics, methods=["GET"])]
    routes += console_routes()
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(_Guarded, guard=guard or HostGuard("127.0.0.1")),
            Middleware(TokenAuth, tokens=tokens),
            Middleware(AuditChanges, data_dir=node.data_dir, auth_key=AUTH_SCOPE_KEY),
        ],
    )
    app.state.node = node
    app.state.tokens = tokens
    app.state.metrics = registry
    app.state.closing = Closing()
    return app


def write_admin_file(data_dir: Path, url: str, token: str, *, pid: int | None = None) -> Path:
    """Write ``admin.json`` into ``data_dir``: mode 0600, replacing any old one atomically.

    ``pid``: the OS process serving ``url`` (default: this one).
    """
    target = data_dir / ADMIN_FILE
    temp = data_dir / f".{ADMIN_FILE}.{os.getpid()}.tmp"
    data = json.dumps({"url": url, "token": token, "pid": pid or os.getpid()}).encode()
    with contextlib.suppress(FileNotFoundError):
        temp.unlink()
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, target)
    return target


def _remove_admin_file(path: Path, url: str | None) -> None:
    # Only our own: whatever else is there now was written by someone else.
    try:
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid() and info.get("url") == url:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


class _Guarded:
    """ASGI middleware: the Host and Origin checks, before the token is looked at."""

    def __init__(self, app: Any, guard: HostGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = {
                k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]
            }
            method = scope.get("method", "GET") if scope["type"] == "http" else "GET"
            refusal = self.guard.check(method, headers, scope.get("scheme", "http"))
            if refusal is not None:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                err = Error(
                    refusal.message,
                    kind=ErrorKind.PERMISSION_DENIED
                    if refusal.status == 403
                    else ErrorKind.INVALID,
                    details={"status": refusal.status},
                )
                body = json.dumps({"error": error_json(err)}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": refusal.status,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"cache-control", b"no-store"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class AdminServer:
    """One node's admin server: the app (built once the node's handle exists) and its worker."""

    def __init__(self, node: Node, data_dir: Path) -> None:
        self.node = node
        self.data_dir = data_dir
        self.tokens = TokenSource(data_dir)
        self.guard = HostGuard("127.0.0.1")
        self.url: str | None = None
        self._app: Starlette | None = None

    @property
    def token(self) -> str:
        """The token in force now."""
        return self.tokens.current()

    def app(self) -> Starlette | None:
        """The Starlette app, or None while the node is still starting (no handle yet)."""
        if self._app is None:
            handle = self.node.ext.get("handle")
            if handle is not None:
                self._app = build_admin_app(handle, tokens=self.tokens, guard=self.guard)
        return self._app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The ASGI entry point."""
        app = self.app()
        if app is not None:
            await app(scope, receive, send)
        elif scope["type"] == "lifespan":
            from roost.queues._http_server import _lifespan  # noqa: PLC0415

            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await _not_yet(send)

    async def start(self, nursery: trio.Nursery, host: str, port: int) -> None:
        """Listen on ``host:port``, write ``admin.json`` and serve; returns once listening.

        Raises:
            roost.Error: kind Unavailable when the address cannot be bound.
        """
        from hypercorn.config import Config  # noqa: PLC0415
        from hypercorn.trio import serve  # noqa: PLC0415

        from roost.queues._http_server import bound_fd  # noqa: PLC0415

        self.guard = HostGuard(host, self.node.settings.get("allowed_hosts"))
        config = Config()
        config.bind = [bound_fd(host, port, "the admin API")]
        config.accesslog = None
        config.errorlog = log
        config.graceful_timeout = _GRACE
        asgi_app: Any = self
        stopped = trio.Event()
        # The node cancels its services once its processes have exited. The server is
        # shielded from that cancel so that it can stop gracefully instead: no new
        # connections, the waits under way answered (503), then gone within _GRACE.
        shield = trio.CancelScope(shield=True)

        async def run(task_status: trio.TaskStatus[list[str]]) -> None:
            with shield:
                await serve(
                    asgi_app,
                    config,
                    mode="asgi",
                    shutdown_trigger=stopped.wait,
                    task_status=task_status,
                )

        binds: list[str] = await nursery.start(run, name="roost.admin server")
        self.url = binds[0]
        path = write_admin_file(self.data_dir, self.url, self.token)
        nursery.start_soon(
            self._close_with_node, path, stopped, shield, name="roost.admin admin.json"
        )
        if not _is_loopback(host):
            log.warning(
                "the admin server listens on %s, beyond this machine: whoever reaches it with "
                "the token in %s controls the node",
                self.url,
                path,
            )
        log.info("admin server on %s (token in %s)", self.url, path)

    async def _close_with_node(
        self, path: Path, stopped: trio.Event, shield: trio.CancelScope
    ) -> None:
        try:
            await trio.sleep_forever()
        finally:
            _remove_admin_file(path, self.url)
            app = self.app()
            if app is not None:
                app.state.closing.close()
            shield.deadline = trio.current_time() + 2 * _GRACE  # a bound, whatever happens
            stopped.set()


async def _not_yet(send: Any) -> None:
    body = json.dumps(
        {
            "error": {
                "kind": "Unavailable",
                "message": "the node is still starting; try again",
                "details": {},
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def start_admin(node: Node, nursery: trio.Nursery) -> None:
    """The node service: serve the admin API when ``open_node(admin=...)`` asked."""
    bind = node.settings.get("admin")
    data_dir = node.settings.get("data_dir")
    if bind is None or data_dir is None:
        return
    server = AdminServer(node, Path(data_dir))
    await server.start(nursery, *bind)
    node.ext["admin"] = server
