"""Plugs every layer above the actors into ``App`` and the node.

The actors layer keeps registries of ``App.<name>(...)`` declarations and of node services
(``roost.actors._app``); the layers above fill them. ``roost/__init__`` names this module as
the plug-in, and the registries import it the first time an App or a node needs one, so the
runtime (and trio) load on first use rather than on ``import roost``.

Importing the queue, cron, stream and HTTP modules registers their declarations and node
services; the supervisor and workflow registrations are here. The import order is the order
in which a node starts its services: queues, cron, HTTP, workflows.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from roost.actors._app import register_extension, register_node_service
from roost.actors._hosting import EMBEDDED, install_workflow_host
from roost.actors._node import Node
from roost.admin._server import parse_admin_bind, start_admin
from roost.queues import _cron, _http, _http_server, _runtime, _streams
from roost.supervisor import _declare
from roost.workflow._host_protocol import WorkflowHost
from roost.workflow._local._manager import WorkflowManager
from roost.workflow._retry import activity_options

__all__: list[str] = []

# The modules whose import registers their declarations and node services.
_REGISTERED = (_runtime, _cron, _streams, _http, _http_server, _declare)

# The node's workflow host: open_node's workflow_host=, else the embedded LMDB host.
register_node_service(install_workflow_host)
# Typed so that mypy checks the embedded host against the public protocol.
_embedded: Callable[[Node, trio.Nursery], WorkflowHost | None] = WorkflowManager.start_on
register_extension(EMBEDDED, _embedded)
# Last: a request it serves finds every other service of the node started.
register_node_service(start_admin)
register_extension("admin_bind", parse_admin_bind)
register_extension("activity_options", activity_options)
