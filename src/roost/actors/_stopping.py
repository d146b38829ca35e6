"""How a supervisor or the node asks a process to stop: a Cancel, if it can hear one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import trio

from roost.actors._app import EntryKind
from roost.actors._node_types import shutdown_error
from roost.mailbox._mailbox import EVENTS

if TYPE_CHECKING:
    from roost.actors._process import NodeOps, Process

__all__ = ["hears_cancel", "shut_down", "until_running"]


def hears_cancel(proc: Process) -> bool:
    """Whether ``proc`` can see a Cancel: it listens on ``process.events()``.

    This is the runtime's ``trap_exit``. Supervisors always count as listening: they open
    their events before they start any child.
    """
    entry = proc.entry
    if entry is not None and entry.kind is EntryKind.SUPERVISOR:
        return True
    box = proc.mailbox
    events = box.subscription(EVENTS) if box is not None else None
    return events is not None and not events.closed


async def until_running(procs: Iterable[Process]) -> None:
    """Wait until each of ``procs`` has begun its body (or ended).

    Whether a process listens is known only once it has run: one spawned a moment ago
    has not opened ``process.events()`` *yet*. Spawned tasks are runnable, so this takes
    a scheduling round or two, and no time.
    """
    waiting = [p for p in procs if not p.has_run]
    while waiting:
        await trio.lowlevel.checkpoint()
        waiting = [p for p in waiting if p.alive and not p.has_run]


def shut_down(node: NodeOps, proc: Process, reason: str, *, by: str) -> bool:
    """A supervisor's (``by="supervisor"``) or the node's stop request for ``proc``.

    Call it once ``proc`` has run (``until_running``). A process that listens on its
    events gets a Cancel with ``reason`` and its grace period. One that does not could
    never see the Cancel and would only sit out that period, so it is stopped at once
    with exit reason ``shutdown``, as OTP kills a process that does not trap exits when
    its supervisor shuts it down.

    Returns:
        True when ``proc`` was stopped at once, False when it got the Cancel.
    """
    if hears_cancel(proc):
        node.cancel(proc, reason)
        return False
    node.kill(proc, shutdown_error(proc.pid, by))
    return True
