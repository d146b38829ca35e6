"""Clients for programs outside a node: ``roost.connect`` (blocking) and ``connect_async``.

Both talk to a node through its admin API, found from its data directory or given as a URL
with its token, and work offline on a stopped data directory as the command line does
(docs/clients.md).
"""

from roost.client._async import AsyncClient, connect_async
from roost.client._core import WorkflowId
from roost.client._sync import Client, connect

__all__ = ["AsyncClient", "Client", "WorkflowId", "connect", "connect_async"]
