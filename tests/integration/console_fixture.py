"""The one place the console tests start a node with its admin server (and so the console).

Yields the node handle, the admin server's base URL and its token (read from the
``admin.json`` the node writes into its data directory).
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import httpx

import roost


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
    async with roost.open_node(app, admin="127.0.0.1:0", **options) as node:
        admin = json.loads((node.data_dir / "admin.json").read_text(encoding="utf-8"))
        assert admin["url"] == node.admin_url
        yield ConsoleNode(node=node, url=admin["url"], token=admin["token"])
