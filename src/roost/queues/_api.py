"""``roost.enqueue`` and ``roost.queue_info``."""

from __future__ import annotations

from typing import Any

from roost._errors import Error, ErrorKind, invalid
from roost.actors._app import EntryKind
from roost.actors._authorize import authorize_caller, caller_security
from roost.actors._current import bound_node, maybe_current_process
from roost.queues._records import QueueInfo
from roost.queues._runtime import DELIVERY, QueueRuntime

__all__ = ["enqueue", "queue_info"]

_TARGETS = (EntryKind.ACTIVITY, EntryKind.PROCESS, EntryKind.WORKFLOW)


def _runtime() -> QueueRuntime:
    delivery = DELIVERY.get()
    if delivery is not None:
        return delivery.runtime
    proc = maybe_current_process()
    if proc is None and bound_node() is not None:  # an activity run by a workflow
        return _node_runtime(bound_node())
    if proc is None:
        raise Error(
            "roost.enqueue needs a node: call it from a process, an open_node block or a "
            "queue handler",
            kind=ErrorKind.INVALID_STATE,
        )
    if proc.workflow is not None:
        raise invalid(
            "roost.enqueue is not replay-safe inside a workflow; call it from an activity "
            "(funcs.call) or a queue step"
        )
    return _node_runtime(proc.node)


def _node_runtime(node: Any) -> QueueRuntime:
    runtime = node.ext.get("queues") if node is not None else None
    if runtime is None:
        raise Error("this node runs no queues (it has no store)", kind=ErrorKind.INVALID_STATE)
    return runtime  # type: ignore[no-any-return]


async def enqueue(queue: str, entry: Any, payload: Any = None) -> str:
    """Durably enqueue a call of ``entry`` with ``payload``; returns its receipt id.

    The message keeps the caller's security context (signed by the node's key ring and
    bound to the message): its delivery runs as the caller's actor under its scope.

    Returns once the message is committed. Inside a queue handler the message commits
    with that handler's acknowledgement instead (and is dropped if the handler fails):
    the exactly-once hand-off between pipeline steps.

    Raises:
        roost.Error: Invalid for an undeclared queue, an entry that is not an activity,
            process or workflow, a FIFO payload without its group field, or a payload
            that cannot be encoded; NotFound for an unknown entry; PermissionDenied when
            the caller's policies allow neither ``queue.enqueue`` on the queue nor
            ``process.spawn`` of the entry; InvalidState for a workflow entry enqueued
            under a security context on a node without a key ring. Nothing is stored.
    """
    runtime = _runtime()
    authorize_caller("queue.enqueue", queue)
    resolved = runtime.node.app.resolve(entry)
    if resolved.kind not in _TARGETS:
        raise invalid(
            f"a queue target is an activity, a process or a workflow; {resolved.id!r} is a "
            f"{resolved.kind.value}"
        )
    # The queue runs the entry without the caller's context: enqueuing it is starting it.
    authorize_caller("process.spawn", resolved.id)
    message, data = runtime.new_message(queue, resolved.id, payload, caller_security())
    delivery = DELIVERY.get()
    if delivery is not None and delivery.open and delivery.runtime is runtime:
        delivery.handoff.append((message, data))
        return message.receipt_id
    await runtime.enqueue(message, data)
    return message.receipt_id


def queue_info() -> QueueInfo | None:
    """Inside a queue handler: its receipt id, attempt (1-based) and queue; else None."""
    delivery = DELIVERY.get()
    if delivery is not None:
        return delivery.info
    proc = maybe_current_process()
    if proc is not None and proc.workflow is not None:
        data = proc.context.get("roost.queue_info")
        if isinstance(data, dict):
            return QueueInfo(**data)
    return None
