"""The node's side of the workflow host protocol: installing the host, and what it is given.

A node has one workflow host (``Node.workflows``), installed as the node starts by the node
service here: the one ``open_node(workflow_host=...)`` names, entered with the node's
``HostServices``, or the embedded LMDB host, built from the node's own store and nursery.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio

from roost._errors import Error
from roost._pid import Pid
from roost._security import KeyRing
from roost.actors._app import App, extension_or_none
from roost.actors._events import Exit
from roost.actors._node import Node, SpawnRequest
from roost.actors._registry import check_name
from roost.workflow._activity_info import prepare_base

if TYPE_CHECKING:
    import datetime as dt

    from roost.workflow._host_protocol import WorkflowHost, WorkflowHostFactory

__all__ = ["HostServices", "install_workflow_host"]

# The extension (registered by roost._wiring) that builds the embedded host for a node.
EMBEDDED = "embedded_workflow_host"


class HostServices:
    """``roost.workflow.NodeServices`` over a node: all of it a host given by a factory sees."""

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    @property
    def name(self) -> str:
        """The node's name."""
        return self._node.name

    @property
    def app(self) -> App:
        """The node's app."""
        return self._node.app

    def now(self) -> dt.datetime:
        """The node's UTC time."""
        return self._node.now()

    def lookup(self, name: str) -> Pid | None:
        """The PID holding ``name``, or None."""
        return self._node.registry.lookup(check_name(name))

    def send(self, sender: Pid, dest: Pid, topic: str, payload: Any) -> None:
        """Deliver a message to the live plain process ``dest`` (NotFound, LimitExceeded)."""
        self._node.live(dest).get_mailbox().deliver(topic, payload, sender)

    def post_exit(self, watcher: Pid, event: Exit) -> None:
        """Give ``watcher`` the EXIT ``event``, if it is alive."""
        proc = self._node.procs.get(watcher)
        if proc is not None:
            self._node.post_event(proc, event)

    def link_down(self, proc: Pid, dead: Pid, error: Error, at: dt.datetime) -> None:
        """LINK_DOWN to ``proc`` (or kill it, if it does not trap links), if it is alive."""
        linked = self._node.procs.get(proc)
        if linked is not None:
            self._node.link_down(linked, dead, error, at)

    def spawn(
        self,
        entry: str,
        args: tuple[Any, ...],
        *,
        pid: Pid,
        watcher: Pid,
        context: Mapping[str, Any],
    ) -> None:
        """Start a plain process of ``entry`` under ``pid``, watched by the workflow ``watcher``."""
        node = self._node
        request = SpawnRequest(context=context, pid=pid, watcher=watcher)
        node.spawn(None, node.app.resolve(entry), args, request)

    def stop(self, dest: Pid, reason: str | None, *, hard: bool) -> None:
        """Terminate (``hard``) or cancel the plain process ``dest`` (NotFound if not alive)."""
        self._node.stop(dest, reason, hard=hard)

    @property
    def keyring(self) -> KeyRing | None:
        """The node's signing keys, or None."""
        ring: KeyRing | None = self._node.settings.get("keyring")
        return ring

    def bind_activity(self) -> None:
        """No current process, and the node bound: an activity's context on this node."""
        prepare_base(self._node)


async def install_workflow_host(node: Node, nursery: trio.Nursery) -> None:
    """The node service that gives ``node`` its workflow host (see ``open_node``).

    The embedded host is installed before it starts, so that what its start does (recovery,
    the first passes over recovered runs) already reaches it through the node. A factory's
    host is installed once its context manager has entered, and left when ``nursery`` is
    cancelled, after the node's processes have stopped.
    """
    factory: WorkflowHostFactory | None = node.settings.get("workflow_host")
    if factory is not None:
        node.workflows = await nursery.start(_serve, factory, HostServices(node))
        return
    build = extension_or_none(EMBEDDED)
    embedded = build(node, nursery) if build is not None else None
    node.workflows = embedded
    if embedded is not None:
        await embedded.start()


async def _serve(
    factory: WorkflowHostFactory,
    services: HostServices,
    *,
    task_status: trio.TaskStatus[WorkflowHost] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with factory(services) as host:
        task_status.started(host)
        await trio.sleep_forever()
