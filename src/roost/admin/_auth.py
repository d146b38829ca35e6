"""The admin server's one door: the node's token on every request, the console's included.

The JSON API (``/api/...``) and ``/metrics`` take the token only as ``Authorization: Bearer
TOKEN``, which no page of another origin can add to a request. The console's pages also take
the ``roost_token`` cookie. A browser gets it by opening any console page once with
``?token=TOKEN``: the answer is a redirect to the same path without the token (so it does
not linger in the address bar or the history) that sets the cookie ``HttpOnly`` (no script
reads it), ``SameSite=Strict`` and ``Path=/``.

SameSite does not tell ports apart: a page served from any other port of 127.0.0.1 is
"same-site" and its requests carry the cookie. So a console POST authenticated by the cookie
must also come from the admin server's own origin (``Origin`` and ``Sec-Fetch-Site``, when
the browser sends them, name it; anything else is 403) and carry the per-node form token
(``form_token``: an HMAC of the token, in a hidden field of each console form; checked by
the console). Anything unauthenticated is answered 401 before any route runs, so nothing
changes: a browser (``Accept: text/html``) asking for a console page gets an HTML login page
whose form POSTs the token to ``/login`` (answered like ``?token=``: the cookie and a redirect
back), everything else a JSON error. Tokens are compared with ``secrets.compare_digest``.
The token comes from a ``TokenSource`` (``_token``): the one kept in the data directory, read
again when ``roost admin token --rotate`` replaces it.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from roost._errors import Error, ErrorKind
from roost.admin._json import error_json
from roost.admin._token import TokenSource, new_token

__all__ = ["AUTH_SCOPE_KEY", "COOKIE", "LOGIN_PATH", "TokenAuth", "form_token", "new_token"]

COOKIE: Final = "roost_token"
AUTH_SCOPE_KEY: Final = "roost.auth"  # how a request got in: "bearer" or "cookie"
_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_PATH: Final = "/login"
_MAX_LOGIN_BODY: Final = 4096

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def form_token(token: str) -> str:
    """The console forms' hidden ``form_token`` for the node's ``token`` (an HMAC of it)."""
    return hmac.new(token.encode(), b"roost console form", hashlib.sha256).hexdigest()


def _bearer_only(path: str) -> bool:
    return path == "/api" or path.startswith("/api/") or path == "/metrics"


def _same(given: str, token: str) -> bool:
    return secrets.compare_digest(given.encode("utf-8", "replace"), token.encode("utf-8"))


class TokenAuth:
    """ASGI middleware: pass requests carrying ``token``; answer the others 401."""

    def __init__(self, app: ASGIApp, tokens: TokenSource) -> None:
        self.app = app
        self.tokens = tokens

    @property
    def token(self) -> str:
        """The token in force now."""
        return self.tokens.current()

    async def __call__(  # noqa: PLR0911 - one answer per way in, in order
        self, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """The ASGI entry point."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self._bearer(headers.get("authorization", "")):
            scope[AUTH_SCOPE_KEY] = "bearer"
            await self.app(scope, receive, send)
            return
        api = _bearer_only(scope["path"])
        if scope["type"] == "http" and scope["path"] == LOGIN_PATH and scope["method"] == "POST":
            await self._login(receive, send)
            return
        if not api and self._cookie(headers):
            if scope["type"] == "http" and scope["method"] not in _SAFE_METHODS:
                foreign = _foreign(scope, headers)
                if foreign is not None:
                    await _forbid(send, foreign)
                    return
            scope[AUTH_SCOPE_KEY] = "cookie"
            await self.app(scope, receive, send)
            return
        query = urllib.parse.parse_qsl(
            scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
        )
        given = [v for k, v in query if k == "token"]
        if not api and scope["type"] == "http" and len(given) == 1 and _same(given[0], self.token):
            await self._set_cookie(scope, query, send)
            return
        wrong = (
            bool(given)
            or "authorization" in headers
            or (api and COOKIE in headers.get("cookie", ""))
        )
        if not api and scope["type"] == "http" and "text/html" in headers.get("accept", ""):
            await _login_page(send, _back_to(scope), wrong=bool(given))
            return
        await _refuse(scope, send, wrong, api=api)

    async def _login(self, receive: Receive, send: Send) -> None:
        """``POST /login`` from the login page: the cookie and a redirect, or the page again."""
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            if len(body) > _MAX_LOGIN_BODY or not message.get("more_body", False):
                break
        form = urllib.parse.parse_qs(body[:_MAX_LOGIN_BODY].decode("latin-1"))
        given = form.get("token", [""])[0].strip()
        back = _safe_path(form.get("next", ["/"])[0])
        if given and _same(given, self.token):
            await self._redirect_with_cookie(back, send)
        else:
            await _login_page(send, back, wrong=bool(given))

    async def _redirect_with_cookie(self, location: str, send: Send) -> None:
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
        # One leading slash: "//evil.example/" would send the browser to another host.
        path = "/" + urllib.parse.quote(scope.get("root_path", "") + scope["path"]).lstrip("/")
        location = f"{path}?{rest}" if rest else path
        await self._redirect_with_cookie(location, send)


def _safe_path(value: str) -> str:
    # Only a path of this server: "//evil.example/" or "https://..." would leave it, and
    # a control character would break the Location header.
    if (
        not value.startswith("/")
        or value.startswith("//")
        or "\\" in value
        or any(not " " < ch <= "~" for ch in value)
    ):
        return "/"
    return "/" + value.lstrip("/")


def _back_to(scope: Scope) -> str:
    path = "/" + urllib.parse.quote(scope.get("root_path", "") + scope["path"]).lstrip("/")
    query = urllib.parse.parse_qsl(
        scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True
    )
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != "token"])
    return f"{path}?{rest}" if rest else path


_LOGIN_HTML: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>roost console: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}}
input[type=password]{{width:100%;padding:.4rem;font-family:monospace}}
.wrong{{color:#a00}}</style></head>
<body><h1>roost console</h1>
{wrong}<p>Paste the node's admin token: it is in <code>admin.token</code> in the node's data
directory (or <code>ROOST_ADMIN_TOKEN</code>; <code>roost admin token</code> prints it).</p>
<form method="post" action="/login">
<input type="hidden" name="next" value="{back}">
<p><label for="token">Admin token</label><br>
<input type="password" id="token" name="token" autocomplete="current-password" autofocus
required></p>
<p><button type="submit">Log in</button></p>
</form></body></html>
"""


async def _login_page(send: Send, back: str, *, wrong: bool) -> None:
    note = '<p class="wrong" id="wrong">That token is not this node\'s.</p>\n' if wrong else ""
    body = _LOGIN_HTML.format(wrong=note, back=html.escape(back, quote=True)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                (b"x-frame-options", b"DENY"),
                (
                    b"content-security-policy",
                    (
                        b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                        b"frame-ancestors 'none'"
                    ),
                ),
                (b"www-authenticate", b'Bearer realm="roost"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _foreign(scope: Scope, headers: dict[str, str]) -> str | None:
    """Why a cookie-carrying POST is not the console's own (None when it is)."""
    own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}"
    site = headers.get("sec-fetch-site")
    if site is not None:  # set by the browser alone; no page can forge it
        if site == "same-origin":
            return None
        return f"the browser says it comes from a {site[:40]!r} page, not the console's own"
    origin = headers.get("origin")
    if origin is not None and origin != own:
        return f"it comes from the page of another origin ({origin[:100]!r}, not {own!r})"
    return None


async def _forbid(send: Send, why: str) -> None:
    err = Error(
        f"the console refuses this request: {why}; use the console's own pages, or the "
        "JSON API with 'Authorization: Bearer TOKEN'",
        kind=ErrorKind.PERMISSION_DENIED,
        details={"status": 403},
    )
    await _answer(send, 403, err, [])


async def _refuse(scope: Scope, send: Send, wrong: bool, *, api: bool) -> None:
    what = "a wrong token" if wrong else "no token"
    how = (
        "the JSON API and /metrics take only 'Authorization: Bearer TOKEN' (never the "
        "console's cookie)"
        if api
        else "send 'Authorization: Bearer TOKEN' (a browser: open the console once with "
        "?token=TOKEN)"
    )
    err = Error(
        f"the admin server needs the node's token and this request has {what}: {how}, with "
        "the token from admin.json in the node's data directory",
        kind=ErrorKind.PERMISSION_DENIED,
        details={"status": 401},
    )
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await _answer(send, 401, err, [(b"www-authenticate", b'Bearer realm="roost"')])


async def _answer(send: Send, status: int, err: Error, extra: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps({"error": error_json(err)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
