"""Stand-in admin server of the ``console`` branch: just enough to serve and test the console.

The ``admin`` branch owns this module (token file, JSON API, metrics, ``open_node(admin=)``);
its version replaces this one at merge. This one builds the Starlette app with the node in
``app.state.node``, the console mounted at ``/`` behind a bearer token (``?token=`` sets the
``roost_token`` cookie once), and serves it on hypercorn's trio worker the way HTTP triggers
are served (``roost.queues._http_server``).
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount

from roost.admin._console import console_routes
from roost.queues._http_server import _bound_socket

__all__ = ["AdminServer", "build_admin_app", "serve_admin"]

log = logging.getLogger("roost.admin")
_COOKIE = "roost_token"


def build_admin_app(node: Any, token: str) -> Starlette:
    """The admin app: the console at ``/``, every request behind ``token``."""

    async def auth(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        given = request.query_params.get("token")
        if given is not None and hmac.compare_digest(given.encode(), token.encode()):
            # Taken once: the cookie carries it on, and the URL no longer shows it.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            url = (
                request.url.replace_query_params(**dict(rest))
                if rest
                else request.url.replace(query="")
            )
            response = RedirectResponse(str(url), status_code=303)
            response.set_cookie(_COOKIE, token, httponly=True, samesite="strict", path="/")
            return response
        header = request.headers.get("authorization", "")
        offered = (
            header[7:] if header.lower().startswith("bearer ") else request.cookies.get(_COOKIE, "")
        )
        if not hmac.compare_digest(offered.encode(), token.encode()):
            message = "missing or wrong admin token: send 'Authorization: Bearer TOKEN'"
            body = {"error": {"kind": "PermissionDenied", "message": message, "details": {}}}
            return JSONResponse(body, status_code=401)
        return await call_next(request)

    app = Starlette(
        routes=[Mount("/", routes=console_routes())],
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=auth)],
    )
    app.state.node = node
    return app


@attrs.frozen
class AdminServer:
    """A running stand-in admin server: its base URL and token."""

    url: str
    token: str


@asynccontextmanager
async def serve_admin(
    node: Any, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[AdminServer]:
    """Serve the admin app of ``node`` (a NodeHandle) until the block ends."""
    from hypercorn.config import Config  # noqa: PLC0415 - only admin servers need hypercorn
    from hypercorn.trio import serve  # noqa: PLC0415

    token = secrets.token_urlsafe(32)
    config = Config()
    config.accesslog = None
    config.errorlog = log
    config.bind = [f"fd://{_bound_socket(host, port).detach()}"]
    asgi: Any = build_admin_app(node, token)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(partial(serve, asgi, config, mode="asgi"))
        try:
            yield AdminServer(url=binds[0], token=token)
        finally:
            nursery.cancel_scope.cancel()
