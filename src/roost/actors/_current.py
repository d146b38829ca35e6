"""Which process runs the calling code, and the workflow process record (no trio).

Workflow code, the workflow driver's hosts and activities reach the current process
through this module alone, so none of them needs the trio-backed process record
(``actors/_process.py``), which this module names for types only.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from roost._errors import Error, ErrorKind

if TYPE_CHECKING:
    from roost._pid import Pid
    from roost.actors._app import Entry
    from roost.actors._process import NodeOps, Process
    from roost.actors._workflow_ops import WorkflowOps
    from roost.mailbox._mailbox import Mailbox

__all__ = [
    "WorkflowProcess",
    "activity_context",
    "bind_node",
    "bound_node",
    "current_any",
    "current_process",
    "maybe_current_process",
    "reset_current",
    "set_current",
]

_EMPTY: Mapping[str, Any] = {}


class WorkflowProcess:
    """The current process as workflow code sees it: every call goes to its driver."""

    __slots__ = ("context", "entry", "node", "pid", "workflow")

    def __init__(
        self,
        pid: Pid,
        entry: Entry | None,
        workflow: WorkflowOps,
        context: Mapping[str, Any] = _EMPTY,
        node: NodeOps | None = None,
    ) -> None:
        self.pid = pid
        self.entry = entry
        self.workflow = workflow
        self.context = context
        self.node = node

    def get_mailbox(self) -> Mailbox:
        """The workflow's mailbox (fed from its history)."""
        return self.workflow.mailbox


_current: ContextVar[Process | WorkflowProcess | None] = ContextVar("roost_process", default=None)

# The process (or workflow) running the calling code, or None outside any process: the
# variable's own getter, so the lookup (on the path of most roost calls) runs no frame.
maybe_current_process = _current.get

# Inside an activity run by a workflow: the attempt's ``ActivityPort`` (its info and
# heartbeat, from the host that runs it; see workflow/_activity_info), whose ``context`` is
# that workflow's context values (ctx.get). One variable for all of it: an attempt's start
# sets one.
activity_context: ContextVar[Any] = ContextVar("roost_activity_context", default=None)


def current_any(what: str = "this call") -> Process | WorkflowProcess:
    """The process (or workflow) running the calling code.

    Raises:
        roost.Error: kind InvalidState outside a process.
    """
    proc = _current.get()
    if proc is None:
        raise Error(
            f"{what} must run inside a roost process: spawn one, or call it inside "
            "'async with roost.open_node(app):'",
            kind=ErrorKind.INVALID_STATE,
        )
    return proc


def current_process(what: str = "this call") -> Process:
    """The plain process running the calling code.

    Raises:
        roost.Error: InvalidState outside a process; Invalid inside a workflow, where
            this call is not replay-safe.
    """
    proc = current_any(what)
    if isinstance(proc, WorkflowProcess):  # a plain process's ``workflow`` is always None
        raise Error(
            f"{what} is not available inside a workflow: it is not replay-safe there "
            "(see docs/workflows.md for what workflows may call)",
            kind=ErrorKind.INVALID,
            retryable=False,
        )
    return proc


def set_current(proc: Process | WorkflowProcess | None) -> object:
    """Make ``proc`` the current process of this task; returns a reset token."""
    return _current.set(proc)


def reset_current(token: Any) -> None:
    """Undo ``set_current``."""
    _current.reset(token)


# The node code reaches when no process is current: set in activity tasks run by a
# workflow (whose current process is deliberately None) and in queue deliveries, so that
# roost.now, roost.state, roost.enqueue and roost.publish work there. A process, when
# there is one, always wins.
_bound_node: ContextVar[NodeOps | None] = ContextVar("roost_bound_node", default=None)


def bind_node(node: NodeOps) -> Any:
    """Let roost calls in this task (and the tasks and threads it starts) reach ``node``."""
    return _bound_node.set(node)


def bound_node() -> NodeOps | None:
    """The node bound by ``bind_node`` in this context, if any."""
    return _bound_node.get()
