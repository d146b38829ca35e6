"""HTTP triggers, the I/O part: a small ASGI app served by hypercorn on trio.

A node opened with ``open_node(app, http=...)`` starts ``HttpServer`` as a node service:
hypercorn's trio worker listens (127.0.0.1 unless told otherwise), and ``open_node``
returns only once the socket is listening, so ``node.http_url`` is usable at once.

Each request runs as its own short-lived process: an attached (mailbox-only) process is
created for it, the handler runs with it as the current process (so ``process.spawn``,
``process.call``, ``funcs.call`` ... work in an activity handler too), and it exits
normally once the response is ready (also when the handler failed: the failure is the
response, not a crash of the request's links). Per-request processes keep concurrent requests
apart: each has its own PID, mailbox, links and monitors, and ``process.terminate`` of
it (or a linked process failing) stops just that request. The target is called as queue
and cron targets are (``_runtime.invoke``): an activity directly, a process or workflow
like ``process.exec`` (spawned, waited for, its value or error taken), so a workflow
handler gets the ``Request`` as its durable input.

The ASGI app is written by hand rather than with a framework: the routing, the request
value and the error mapping are roost's own (``_http``, pure and tested alone), so all a
framework would add is a second router and a dependency; the ASGI surface needed is
small (``http`` and ``lifespan`` scopes).
"""

from __future__ import annotations

import logging
import socket
import urllib.parse
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import trio

from roost import _telemetry as telemetry
from roost._errors import Error, ErrorKind, invalid
from roost._security import SECURITY_KEY, Actor, Scope, claim
from roost.actors._app import EntryKind, register_extension, register_node_service
from roost.actors._current import reset_current, set_current
from roost.queues._contain import contain, describe
from roost.queues._http import (
    MAX_BODY,
    Rendered,
    Request,
    Route,
    Router,
    error_response,
    read_json,
    render,
    routes_of,
    unsupported_type,
)
from roost.queues._http_guard import HostGuard, Refusal, is_json_type, parse_allowed_hosts
from roost.queues._runtime import invoke

if TYPE_CHECKING:
    from roost.actors._node import Node

__all__ = [
    "DEFAULT_HOST",
    "HttpServer",
    "bound_fd",
    "parse_bind",
    "parse_query",
    "split_raw_path",
    "start_http",
]

log = logging.getLogger("roost.http")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

DEFAULT_HOST: Final = "127.0.0.1"
_MAX_QUERY_FIELDS: Final = 1000


class _ClientGone(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """The client disconnected before its request body arrived."""


class _Denied(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """The route's auth entry refused the request (401 or 403)."""

    def __init__(self, error: Error, status: int) -> None:
        super().__init__(error.message)
        self.error = error
        self.status = status


class _TooLarge(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """The request body is over ``MAX_BODY``."""


def split_raw_path(raw: bytes) -> list[str]:
    """The percent-decoded segments of a raw request path (``%2F`` stays in its segment)."""
    if raw in (b"", b"/"):
        return []
    parts = raw.rstrip(b"/").split(b"/")[1:]
    return [urllib.parse.unquote_to_bytes(part).decode("utf-8", "replace") for part in parts]


def parse_query(raw: bytes) -> list[tuple[str, str]]:
    """The (name, value) pairs of a raw query string, percent-decoded as UTF-8.

    Raises:
        roost.Error: kind Invalid (400) for more than 1000 parameters.
    """
    text = raw.decode("utf-8", "replace")
    try:
        return urllib.parse.parse_qsl(
            text, keep_blank_values=True, max_num_fields=_MAX_QUERY_FIELDS, errors="replace"
        )
    except ValueError as exc:
        raise invalid(f"the query string is not acceptable: {exc}") from None


class HttpServer:
    """One node's HTTP trigger server: the ASGI app plus its hypercorn worker."""

    def __init__(self, node: Node) -> None:
        self.node = node
        self._router = routes_of(node.app)
        self.url: str | None = None
        self.guard = HostGuard(DEFAULT_HOST)

    @property
    def router(self) -> Router:
        """The app's routes (rebuilt when routes were declared after the node opened)."""
        if len(self._router.routes) != len(self.node.app.declared.get("http", ())):
            self._router = routes_of(self.node.app)
        return self._router

    async def start(self, nursery: trio.Nursery, host: str, port: int) -> None:
        """Listen on ``host:port`` and serve in ``nursery``; returns once listening.

        Raises:
            roost.Error: kind Unavailable when the address cannot be bound.
        """
        # hypercorn is imported only by nodes that serve HTTP: `import roost` stays light.
        from hypercorn.config import Config  # noqa: PLC0415
        from hypercorn.trio import serve  # noqa: PLC0415

        self.guard = HostGuard(host, self.node.settings.get("allowed_hosts"))
        config = Config()
        config.bind = [bound_fd(host, port, "HTTP")]
        config.accesslog = None
        config.errorlog = log
        asgi_app: Any = self  # hypercorn's ASGI types are TypedDicts; ours are plain dicts
        binds: list[str] = await nursery.start(partial(serve, asgi_app, config, mode="asgi"))
        self.url = binds[0]
        log.info("serving %d HTTP routes on %s", len(self.router.routes), self.url)

    # -- ASGI ----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets: refused before the handshake (403)
            await send({"type": "websocket.close", "code": 1000})
            return
        try:
            rendered = await telemetry.http_request(scope, self._respond(scope, receive))
        except _ClientGone:
            return
        await send(
            {
                "type": "http.response.start",
                "status": rendered.status,
                "headers": rendered.headers,
            }
        )
        body = b"" if scope["method"] == "HEAD" else rendered.body
        await send({"type": "http.response.body", "body": body})

    async def _respond(  # noqa: PLR0911 - one answer per way a request ends
        self, scope: dict[str, Any], receive: Receive
    ) -> Rendered:
        method: str = scope["method"]
        path: str = scope["path"]
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        refusal = self.guard.check(
            method, {k.lower(): v for k, v in reversed(headers)}, scope.get("scheme", "http")
        )
        if refusal is not None:  # before routing: a refused request learns nothing of the routes
            return _refused(refusal)
        raw = scope.get("raw_path") or path.encode()
        match = self.router.match(method, split_raw_path(raw))
        if match.route is None:
            return _no_route(method, path, match.allowed)
        if self.node.stopping:
            return error_response(Error("the node is shutting down", kind=ErrorKind.UNAVAILABLE))
        try:
            request = await self._request(scope, receive, match.route, match.params, headers)
            context = None
            if match.route.auth is not None:
                context = await self._authenticate(match.route, request)
            return render(await self._run(match.route, request, context))
        except _ClientGone:
            raise  # nobody to answer (``__call__`` drops the request)
        except _Denied as denied:
            extra = {"www-authenticate": 'Bearer realm="roost"'} if denied.status == 401 else {}
            return error_response(denied.error, status=denied.status, headers=extra)
        except _TooLarge:
            err = Error(
                f"the request body is larger than {MAX_BODY} bytes",
                kind=ErrorKind.LIMIT_EXCEEDED,
            )
            return error_response(err, status=413)
        except BaseException as exc:  # noqa: BLE001 - any handler failure is the answer
            return self._failed(method, path, contain(exc))  # (cancellation goes on up)

    async def _request(
        self,
        scope: dict[str, Any],
        receive: Receive,
        route: Route,
        params: dict[str, str],
        headers: list[tuple[str, str]],
    ) -> Request:
        """The ``Request`` value: the body read, and parsed only when declared JSON."""
        body = await _read_body(scope, receive)
        content_type = next((v for k, v in headers if k.lower() == "content-type"), None)
        refused_type = None
        if body and not is_json_type(content_type):
            if self._takes_workflow(route):
                # A workflow's request is its durable input: refused before it starts.
                raise unsupported_type(content_type)
            refused_type = content_type or ""  # reading .json raises; .body stays readable
        return Request(
            method=scope["method"],
            path=scope["path"],
            path_params=params,
            query=parse_query(scope.get("query_string", b"")),
            headers=headers,
            json=None if refused_type is not None else read_json(body),
            body=body,
            route=route.path,
            refused_type=refused_type,
        )

    def _takes_workflow(self, route: Route) -> bool:
        entry = self.node.app.entries.get(route.entry)
        return entry is not None and entry.kind is EntryKind.WORKFLOW

    async def _authenticate(self, route: Route, request: Request) -> dict[str, Any]:
        """Run the route's auth entry: the security context the handler runs under.

        The entry returns a ``security.Actor`` or an ``(Actor, Scope)`` pair; it refuses
        with PermissionDenied (401, or 403 when its details say so).
        """
        assert route.auth is not None
        try:
            value = await self._call(route.auth, request, None)
        except BaseException as exc:
            err = contain(exc)
            if err.kind is ErrorKind.PERMISSION_DENIED:
                status = 403 if err.details.get("status") == 403 else 401
                raise _Denied(err, status) from None
            raise
        if value is None:
            raise _Denied(
                Error(
                    f"the auth entry {route.auth!r} returned None: return the request's "
                    "actor (a security.Actor), or raise PermissionDenied to refuse",
                    kind=ErrorKind.PERMISSION_DENIED,
                ),
                401,
            )
        actor, scope = value if isinstance(value, tuple) and len(value) == 2 else (value, None)
        if not isinstance(actor, Actor) or not (scope is None or isinstance(scope, Scope)):
            raise Error(
                f"the auth entry {route.auth!r} returned {type(value).__name__}: it returns a "
                "roost.security.Actor, or an (Actor, Scope) pair",
                kind=ErrorKind.INTERNAL,
            )
        return {SECURITY_KEY: claim(actor, scope)}

    def _failed(self, method: str, path: str, err: Error) -> Rendered:
        status = err.details.get("http_status")
        if err.kind is ErrorKind.INVALID and status == 415:
            return error_response(err, status=415)
        answer = error_response(err)
        text = describe(err)
        if answer.status >= 500:
            cause = err.__cause__
            log.error(
                "HTTP %s %s failed with %d: %s",
                method,
                path,
                answer.status,
                text,
                exc_info=(type(cause), cause, cause.__traceback__) if cause is not None else None,
                extra=telemetry.fields(method=method, path=path, status=answer.status),
            )
        else:
            log.debug("HTTP %s %s answered %d: %s", method, path, answer.status, text)
        return answer

    async def _run(
        self, route: Route, request: Request, context: dict[str, Any] | None = None
    ) -> Any:
        """Run the route's entry with ``request`` as a process of its own."""
        if telemetry.tracing:
            telemetry.http_route(request.method, route.path)
        return await self._call(route.entry, request, context)

    async def _call(self, entry_id: str, request: Request, context: dict[str, Any] | None) -> Any:
        """Run ``entry_id`` with ``request`` as a process of its own (under ``context``)."""
        node = self.node
        if entry_id not in node.app.entries:  # a route added after open_node, by id
            raise Error(
                f"HTTP route {request.method} {request.route} runs unknown entry {entry_id!r}",
                kind=ErrorKind.INTERNAL,
            )
        # The auth entry's security context is the request process's: the handler runs as
        # its actor, and what it starts inherits it.
        proc = node.attach(context)
        token = set_current(proc)
        try:
            with proc.scope:
                return await invoke(node, entry_id, request, None)
            # The scope was cancelled: the request's process was terminated or killed.
            failure = proc.kill_error
            raise failure.clone() if failure is not None else _stopped()
        finally:
            reset_current(token)
            node.exit(proc, None, None)


def parse_bind(value: object) -> tuple[str, int] | None:
    """Read ``open_node``'s ``http`` option into (host, port), or None for no server.

    None / False: no server; True: 127.0.0.1 on a free port; a port number, or
    ``"host:port"`` (``"[::1]:8080"``; ``":8080"`` and ``"8080"`` mean 127.0.0.1). Port 0
    picks a free port.

    Raises:
        roost.Error: kind Invalid for anything else.
    """
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_HOST, 0
    if isinstance(value, int):
        return DEFAULT_HOST, _port(value, value)
    if not isinstance(value, str):
        raise invalid(_BIND_HELP.format(value=value))
    text = value.strip()
    if text.isdigit():
        return DEFAULT_HOST, _port(int(text), value)
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # an IPv6 address
    elif any(ch in host for ch in ":[]"):
        raise invalid(_BIND_HELP.format(value=value) + " (IPv6 addresses go in brackets)")
    if not sep or not port.isdigit() or any(ch.isspace() or ch == "/" for ch in host):
        raise invalid(_BIND_HELP.format(value=value))
    return host or DEFAULT_HOST, _port(int(port), value)


_BIND_HELP: Final = (
    "http= takes True, a port, or 'host:port' (e.g. '127.0.0.1:8080', ':0' for a free "
    "port on 127.0.0.1); got {value!r}"
)


def _port(port: int, value: object) -> int:
    if not 0 <= port <= 65535:
        raise invalid(f"an HTTP port is 0-65535 (0 picks a free one), got {value!r}")
    return port


def bound_fd(host: str, port: int, what: str) -> str:
    """Bind ``host:port`` and return hypercorn's ``fd://N`` bind for the socket.

    Bound here, so that a taken port is a plain OSError (inside hypercorn it would come
    wrapped in its nurseries' exception groups); hypercorn then serves the bound socket by
    its file descriptor.

    Raises:
        roost.Error: kind Unavailable when the address cannot be bound.
    """
    try:
        sock = _bound_socket(host, port)
    except OSError as exc:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise Error(
            f"cannot serve {what} on {where}: {exc}; pick another port (0 picks a free one)",
            kind=ErrorKind.UNAVAILABLE,
            details={"host": host, "port": port},
        ) from exc
    return f"fd://{sock.detach()}"


def _bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _no_route(method: str, path: str, allowed: tuple[str, ...]) -> Rendered:
    if not allowed:
        return error_response(Error(f"no HTTP route for {method} {path}", kind=ErrorKind.NOT_FOUND))
    methods = ", ".join(allowed)
    err = Error(f"{method} is not allowed on {path}; allowed: {methods}", kind=ErrorKind.INVALID)
    return error_response(err, status=405, headers={"allow": methods})


def _refused(refusal: Refusal) -> Rendered:
    kind = ErrorKind.PERMISSION_DENIED if refusal.status == 403 else ErrorKind.INVALID
    return error_response(Error(refusal.message, kind=kind), status=refusal.status)


def _stopped() -> Error:
    return Error("the request's process was stopped", kind=ErrorKind.CANCELED)


async def _read_body(scope: dict[str, Any], receive: Receive) -> bytes:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > MAX_BODY:
            raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def start_http(node: Node, nursery: trio.Nursery) -> None:
    """The node service: serve the app's HTTP routes when ``open_node(http=...)`` asked."""
    bind = node.settings.get("http")
    if bind is None:
        return
    host, port = bind
    server = HttpServer(node)
    await server.start(nursery, host, port)
    node.ext["http"] = server


register_extension("http_bind", parse_bind)  # open_node checks http= before it starts
register_extension("allowed_hosts", parse_allowed_hosts)
register_node_service(start_http)
