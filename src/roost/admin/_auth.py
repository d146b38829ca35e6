"""The admin server's one door: a bearer token on every request, the console's included.

A request is let in when it carries the node's token as ``Authorization: Bearer TOKEN``
or in the ``roost_token`` cookie. A browser gets that cookie by opening any page once with
``?token=TOKEN``: the answer is a redirect to the same URL without the token (so it does
not linger in the address bar or the history) that sets the cookie ``HttpOnly`` (no script
reads it), ``SameSite=Strict`` (no other site's page sends it along) and ``Path=/``.
Anything else is answered 401 with a JSON error before any route runs, so nothing changes.
Tokens are compared with ``secrets.compare_digest`` (no timing hints).
"""

from __future__ import annotations

import json
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from roost._errors import Error, ErrorKind
from roost.admin._json import error_json

__all__ = ["COOKIE", "TokenAuth", "new_token"]

COOKIE: Final = "roost_token"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe text."""
    return secrets.token_urlsafe(32)


def _same(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


class TokenAuth:
    """ASGI middleware: pass requests carrying ``token``; answer the others 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self._bearer(headers.get("authorization", "")) or self._cookie(headers):
            await self.app(scope, receive, send)
            return
        query = urllib.parse.parse_qsl(
            scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
        )
        given = [v for k, v in query if k == "token"]
        if scope["type"] == "http" and len(given) == 1 and _same(given[0], self.token):
            await self._set_cookie(scope, query, send)
            return
        await _refuse(scope, send, bool(given) or "authorization" in headers)

    def _bearer(self, value: str) -> bool:
        scheme, _, given = value.partition(" ")
        return scheme.lower() == "bearer" and _same(given.strip(), self.token)

    def _cookie(self, headers: dict[str, str]) -> bool:
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and _same(value, self.token):
                return True
        return False

    async def _set_cookie(self, scope: Scope, query: list[tuple[str, str]], send: Send) -> None:
        rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "token"])
        path = urllib.parse.quote(scope.get("root_path", "") + scope["path"])
        location = f"{path}?{rest}" if rest else path
        cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1")),
                    (b"set-cookie", cookie.encode("latin-1")),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


async def _refuse(scope: Scope, send: Send, wrong: bool) -> None:
    what = "a wrong token" if wrong else "no token"
    err = Error(
        f"the admin API needs the node's token and this request has {what}: send "
        "'Authorization: Bearer TOKEN' with the token from admin.json in the node's data "
        "directory (a browser: open the console once with ?token=TOKEN)",
        kind=ErrorKind.PERMISSION_DENIED,
        details={"status": 401},
    )
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"error": error_json(err)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="roost"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
