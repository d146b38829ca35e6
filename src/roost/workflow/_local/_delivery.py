"""What a committed step does to processes: spawn, stop, deliver (never raising for them)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._events import Exit
from roost.actors._node import SpawnRequest
from roost.actors._process import NodeOps
from roost.workflow._history import SendMessage, SpawnProcess, StopProcess

if TYPE_CHECKING:
    from roost.workflow._local._run import Run

__all__ = ["deliver_local", "lost_error", "spawn_child", "stop_process"]

log = logging.getLogger("roost.workflow")


def spawn_child(
    node: NodeOps, process_exited: Callable[[Pid, Exit], None], run: Run, spawn: SpawnProcess
) -> None:
    """Start the plain process a workflow step spawned; a failed start is its EXIT."""
    req = SpawnRequest(context=run.context, pid=spawn.pid, watcher=run.pid)
    try:
        entry = node.app.resolve(spawn.entry)
        node.spawn(None, entry, tuple(spawn.args), req)
    except Error as exc:
        # The workflow learns of a failed start the way it learns of any exit.
        process_exited(run.pid, Exit(spawn.pid, None, exc, node.now()))


def stop_process(node: NodeOps, sender: Pid, stop: StopProcess) -> None:
    # Like a send, a workflow's cancel or terminate never raises for its target.
    try:
        node.stop(stop.dest, stop.reason, hard=stop.hard)
    except Error as exc:
        what = "terminate" if stop.hard else "cancel"
        log.warning("workflow %s: %s of %s not done: %s", sender, what, stop.dest, exc)


def lost_error(pid: Pid) -> Error:
    return Error(
        f"process {pid} was lost when the node stopped",
        kind=ErrorKind.UNAVAILABLE,
        details={"reason": "node restart", "pid": str(pid)},
    )


def deliver_local(node: NodeOps, sender: Pid, send: SendMessage) -> None:
    # Inside a workflow a send never raises for its target: a failed delivery is logged.
    try:
        target = node.live(send.dest)
        target.get_mailbox().deliver(send.topic, send.payload, sender)
    except Error as exc:
        log.warning(
            "workflow %s: message %r to %s not delivered: %s", sender, send.topic, send.dest, exc
        )
