"""What a running activity sees: ``roost.activity_info()`` and ``roost.heartbeat()``."""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from roost._errors import Error, ErrorKind
from roost.actors._current import activity_context, bind_node, set_current

__all__ = ["ActivityInfo", "Known", "activity_info", "enter", "heartbeat", "prepare_base"]


@attrs.frozen(kw_only=True)
class ActivityInfo:
    """What a running activity knows about itself (``roost.activity_info()``).

    ``idempotency_key`` is stable across retries and restarts: the same for every attempt
    of the same scheduled activity, so the activity can make its side effects idempotent.
    """

    workflow_id: str
    run_id: str
    seq: int
    entry: str
    attempt: int
    idempotency_key: str
    scheduled_at: dt.datetime


class Known:
    """What an attempt's context knows of it; its ``ActivityInfo`` is built when first asked.

    ``task`` is the attempt's ActivityTask (anything with its fields): most activities
    never call ``activity_info()``, so an attempt's start builds no record for it.
    ``context`` is its workflow's context values (``ctx.get``), ``beat`` what
    ``roost.heartbeat()`` calls (None: the task has no heartbeat timeout). One context
    variable holds it all (``activity_context``), so an attempt's start sets one.
    """

    __slots__ = ("beat", "context", "info", "task")

    def __init__(
        self,
        task: Any,
        context: Mapping[str, Any] | None = None,
        beat: Callable[[Any], None] | None = None,
    ) -> None:
        self.task = task
        self.context = context
        self.beat = beat
        self.info: ActivityInfo | None = None

    def get(self) -> ActivityInfo:
        """The attempt's info (the same object on every call)."""
        info = self.info
        if info is None:
            task = self.task
            info = self.info = ActivityInfo(
                workflow_id=task.workflow_id,
                run_id=task.run_id,
                seq=task.seq,
                entry=task.entry,
                attempt=task.attempt,
                idempotency_key=f"{task.workflow_id}/{task.run_id}/{task.seq}",
                scheduled_at=task.scheduled_at,
            )
        return info


_info: contextvars.ContextVar[Known | None] = activity_context

# Sets up the calling context (an attempt's own copy of the base) for an attempt: the
# variable's own setter, so an attempt's start runs no Python function for it.
enter: Callable[[Known], object] = activity_context.set


def activity_info() -> ActivityInfo | None:
    """The running activity's info, or None outside an activity run by a workflow."""
    known = _info.get()
    return known.get() if known is not None else None


def heartbeat(details: Any = None) -> None:
    """Tell roost the running activity is alive (resets its ``heartbeat_timeout``).

    Works from async activities and from sync ones in their worker thread; a no-op in an
    activity without a heartbeat timeout.

    Raises:
        roost.Error: kind InvalidState outside an activity run by a workflow.
    """
    known = _info.get()
    if known is None:
        raise Error(
            "roost.heartbeat() must be called inside an activity run by a workflow",
            kind=ErrorKind.INVALID_STATE,
        )
    if known.beat is not None:
        known.beat(details)


def prepare_base(node: Any) -> None:
    """Set up the calling context (the base every attempt's context copies) for ``node``."""
    set_current(None)
    bind_node(node)  # roost.state works here though no process is current
