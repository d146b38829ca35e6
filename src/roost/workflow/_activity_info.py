"""What a running activity sees: ``roost.activity_info()`` and ``roost.heartbeat()``."""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Callable
from typing import Any

import attrs

from roost._errors import Error, ErrorKind
from roost.actors._process import activity_context, bind_node, set_current

__all__ = ["ActivityInfo", "activity_info", "enter", "heartbeat"]


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


_info: contextvars.ContextVar[ActivityInfo | None] = contextvars.ContextVar(
    "roost_activity", default=None
)


def activity_info() -> ActivityInfo | None:
    """The running activity's info, or None outside an activity run by a workflow."""
    return _info.get()


_beat: contextvars.ContextVar[Callable[[Any], None] | None] = contextvars.ContextVar(
    "roost_heartbeat", default=None
)


def heartbeat(details: Any = None) -> None:
    """Tell roost the running activity is alive (resets its ``heartbeat_timeout``).

    Works from async activities and from sync ones in their worker thread; a no-op in an
    activity without a heartbeat timeout.

    Raises:
        roost.Error: kind InvalidState outside an activity run by a workflow.
    """
    beat = _beat.get()
    if beat is None:
        if _info.get() is None:
            raise Error(
                "roost.heartbeat() must be called inside an activity run by a workflow",
                kind=ErrorKind.INVALID_STATE,
            )
        return
    beat(details)


def enter(
    node: Any, context: dict[str, Any], info: ActivityInfo, beat: Callable[[Any], None] | None
) -> None:
    """Set up the calling context (an attempt's own copy) for an activity attempt."""
    set_current(None)
    bind_node(node)  # roost.state works here though no process is current
    activity_context.set(context)
    _info.set(info)
    _beat.set(beat)
