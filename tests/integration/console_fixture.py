"""The one place the console tests start a node with its admin server (and so the console).

Yields the node handle, the admin server's base URL and its token. Until the admin server
is merged this uses the console branch's stand-in ``serve_admin``; with it, the body becomes
``open_node(app, admin="127.0.0.1:0", ...)`` reading the token from ``admin.json``.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx

import roost
from roost.admin._server import serve_admin


@attrs.frozen
class ConsoleNode:
    node: Any  # the NodeHandle
    url: str
    token: str

    def client(self, *, auth: bool = True) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.token}"} if auth else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)


@asynccontextmanager
async def open_console_node(app: roost.App, **options: Any) -> AsyncIterator[ConsoleNode]:
    async with roost.open_node(app, **options) as node, serve_admin(node) as server:
        yield ConsoleNode(node=node, url=server.url, token=server.token)
