"""The unread-message limit: a workflow that does not read what it is sent refuses more.

Every message sent to a workflow is stored in its history, so a workflow that never reads
its inbox would grow without bound (Temporal caps the signals of one execution for the same
reason). A run's unread messages are those delivered to its mailbox and not yet received
by its code, plus those accepted and not yet delivered (waiting for its next activation,
or for their commit). Past the node's ``workflow_unread_limit`` a send is refused with
``LimitExceeded`` at the sender, and nothing of it is stored. Replies to a workflow's own
``process.call`` and events (EXITs, cancels) do not count and are never refused; messages
that move to the next run at continue-as-new are not refused either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from roost._errors import Error, ErrorKind
from roost.workflow._history import MessageArrived

if TYPE_CHECKING:
    from roost.workflow._local._run import Run

__all__ = ["DEFAULT_UNREAD_LIMIT", "check_room", "counts", "unread"]

DEFAULT_UNREAD_LIMIT = 10_000  # open_node's default for workflow_unread_limit


def counts(event: Any) -> bool:
    """Whether ``event`` is a message the limit counts (not a reply, not an event)."""
    return type(event) is MessageArrived and event.call is None


def unread(run: Run) -> int:
    """How many messages ``run`` holds unread (see the module docstring)."""
    driver = run.driver
    held = driver.mailbox.unread_messages() if driver is not None else run.progress[3]
    waiting = sum(1 for _, event in run.pending if counts(event))
    return held + waiting + run.arriving


def check_room(limit: int, run: Run, count: int = 1) -> None:
    """Refuse ``count`` more messages for ``run`` if they would pass the limit.

    Raises:
        roost.Error: kind LimitExceeded (nothing is stored).
    """
    held = unread(run)
    if held + count <= limit:
        return
    workflow_id = run.record.workflow_id
    raise Error(
        f"workflow {workflow_id!r} has {held} unread messages, its limit "
        f"(workflow_unread_limit={limit}): it does not read what it is sent, so this message "
        "was refused and nothing of it stored. Have the workflow read its messages "
        "(process.inbox(), process.listen(topic)), or open the node with a higher "
        "workflow_unread_limit",
        kind=ErrorKind.LIMIT_EXCEEDED,
        retryable=True,
        details={"workflow_id": workflow_id, "unread": held, "limit": limit, "count": count},
        pid=run.pid,
    )
