"""What the admin server shows of a node: queue stats, dead letters, cron, processes.

Plain data (JSON-safe after ``to_jsonable``) read from a running node's ``NodeHandle``;
the JSON API returns these as they are, and the console renders them.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.storage import key
from roost.supervisor._runtime import state_of

if TYPE_CHECKING:
    from roost.actors._node import Node
    from roost.actors._open import NodeHandle
    from roost.queues._records import DeadLetter

T = TypeVar("T")

__all__ = [
    "asked",
    "cron_list",
    "dead_letter",
    "node_info",
    "node_of",
    "process_list",
    "queue_stats",
    "version",
    "workflow_pid",
]


def node_of(handle: NodeHandle) -> Node:
    """The node behind a ``NodeHandle``."""
    return handle._node


async def asked(handle: NodeHandle, call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, a synchronous workflow call of the node, without blocking its loop.

    The embedded host answers from memory and its store, on the node's thread; another
    host (Temporal's) asks a server, so the call is made from a worker thread and the
    node's loop runs on meanwhile (such a host takes its calls from any thread).
    """
    if node_of(handle).local_workflows is not None:
        return call(*args)
    return await trio.to_thread.run_sync(call, *args)


def version() -> str:
    """The installed roost version."""
    try:
        return importlib.metadata.version("roost")
    except importlib.metadata.PackageNotFoundError:  # a source tree not installed
        return "unknown"


def node_info(handle: NodeHandle) -> dict[str, Any]:
    """``{"name", "incarnation", "data_dir", "pid", "version"}``; pid is the OS process id."""
    return {
        "name": handle.name,
        "incarnation": handle.incarnation,
        "data_dir": str(handle.data_dir),
        "pid": os.getpid(),
        "version": version(),
    }


def workflow_pid(handle: NodeHandle, workflow_id: str) -> Pid:
    """The PID of the workflow ``workflow_id`` on this node."""
    host = node_of(handle).workflows
    if host is None:
        raise Error("this node has no workflow runtime", kind=ErrorKind.INVALID_STATE)
    return Pid.trusted(handle.name, host.host, workflow_id)


def queue_stats(handle: NodeHandle) -> dict[str, dict[str, int]]:
    """``{queue: {"depth", "in_flight", "dead"}}`` for every declared queue.

    ``depth`` counts messages waiting (ready, or in a retry's backoff), ``in_flight`` the
    ones being handled now, ``dead`` the DLQ's entries.
    """
    runtime = node_of(handle).ext.get("queues")
    if runtime is None:
        return {}
    out = {}
    with runtime.store.read() as txn:
        for name, state in runtime.states.items():
            dead = sum(1 for _ in txn.prefix("dlq", key(name)))
            out[name] = {"depth": len(state.pending), "in_flight": len(state.running), "dead": dead}
    return out


def dead_letter(dead: DeadLetter) -> dict[str, Any]:
    """One DLQ entry as the API lists it (``to_jsonable`` makes it JSON)."""
    return {
        "receipt_id": dead.receipt_id,
        "entry": dead.entry,
        "payload": dead.payload,
        "errors": list(dead.errors),
        "failed_at": dead.failed_at,
    }


def cron_list(handle: NodeHandle) -> list[dict[str, Any]]:
    """``[{"expression", "entry", "next_fire_at"}]`` of the app's cron triggers (UTC)."""
    node = node_of(handle)
    now = node.now()
    out = []
    for trigger in node.app.declared.get("cron", {}).values():
        entry = (
            trigger.entry if isinstance(trigger.entry, str) else node.app.resolve(trigger.entry).id
        )
        out.append(
            {
                "expression": trigger.schedule.expression,
                "entry": entry,
                "next_fire_at": trigger.schedule.next_after(now),
            }
        )
    return out


def process_list(handle: NodeHandle) -> list[dict[str, Any]]:
    """Live processes and the supervision tree, one dict per process.

    Keys: ``pid``, ``entry``, ``name``, ``parent``, ``children``, ``status``. ``entry`` is
    None for attached processes (the ``open_node`` block, a request being served);
    ``parent`` is the supervisor that started it (None for others); ``children`` a
    supervisor's children that are up; ``status`` is ``"supervisor"`` or ``"running"``.
    """
    node = node_of(handle)
    children: dict[Pid, list[Pid]] = {}
    parents: dict[Pid, Pid] = {}
    for pid in list(node.procs):
        state = state_of(node, pid)
        if state is None:
            continue
        kids = [child.pid for child in state.children if child.pid is not None]
        children[pid] = kids
        for kid in kids:
            parents[kid] = pid
    out = []
    for pid, proc in list(node.procs.items()):
        names = sorted(node.registry.names_of(pid))
        out.append(
            {
                "pid": str(pid),
                "entry": None if proc.entry is None else proc.entry.id,
                "name": names[0] if names else None,
                "parent": str(parents[pid]) if pid in parents else None,
                "children": [str(kid) for kid in children.get(pid, [])],
                "status": "supervisor" if pid in children else "running",
            }
        )
    return out
