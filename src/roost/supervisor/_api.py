"""``supervisor.which_children`` / ``count_children`` / ``start_child`` / ``terminate_child``."""

from __future__ import annotations

from typing import Any

import trio

from roost._errors import invalid, not_found
from roost._pid import Pid
from roost.actors._current import current_process
from roost.supervisor._runtime import SupervisorState, state_of
from roost.supervisor._spec import ChildInfo, ChildType

__all__ = ["count_children", "start_child", "terminate_child", "which_children"]


def _state(sup: Pid | str, what: str) -> SupervisorState:
    proc = current_process(f"supervisor.{what}")
    pid = proc.node.resolve(sup)
    state = state_of(proc.node, pid)
    if state is None:
        raise not_found(f"{pid} is not a running supervisor", pid=str(pid))
    return state


def which_children(sup: Pid | str) -> list[ChildInfo]:
    """The children of ``sup`` in start order; ``pid`` is None while a child is down.

    A child that is still starting (a supervisor child whose subtree is not up yet)
    counts as down.
    """
    state = _state(sup, "which_children")
    return [
        ChildInfo(
            id=c.spec.id, pid=c.pid if c.up else None, type=c.spec.type, restart=c.spec.restart
        )
        for c in state.children
    ]


def count_children(sup: Pid | str) -> dict[str, int]:
    """``{"specs", "active", "supervisors", "workers"}`` for ``sup``, as OTP counts them."""
    state = _state(sup, "count_children")
    children = state.children
    return {
        "specs": len(children),
        "active": sum(1 for c in children if c.up),
        "supervisors": sum(1 for c in children if c.spec.type is ChildType.SUPERVISOR),
        "workers": sum(1 for c in children if c.spec.type is ChildType.WORKER),
    }


async def start_child(sup: Pid | str, *args: Any) -> Pid:
    """Start a child of a dynamic supervisor from its template, with ``args`` appended.

    Returns once the child is up (for a supervisor template: its whole subtree).

    Raises:
        roost.Error: NotFound if ``sup`` is not a running supervisor; Invalid if it is not
            dynamic; the child's own error if it failed to start; Unavailable if the
            supervisor stopped before it started the child.
    """
    await trio.lowlevel.checkpoint()
    return await _state(sup, "start_child").request_start(args)


def terminate_child(sup: Pid | str, pid: Pid | str) -> None:
    """Stop a dynamic supervisor's child (per its shutdown spec) and forget it.

    Raises:
        roost.Error: NotFound if ``pid`` is not one of its children.
    """
    state = _state(sup, "terminate_child")
    if not state.spec.dynamic:
        raise invalid("terminate_child is for dynamic supervisors; stop the supervisor instead")
    target = state.node.resolve(pid)
    if target not in state.by_pid:
        raise not_found(f"{target} is not a child of {state.proc.pid}", pid=str(target))
    state.control._try_send(("terminate", target))
