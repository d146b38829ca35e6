"""What a running activity sees: ``roost.activity_info()`` and ``roost.heartbeat()``.

Both ask the ``ActivityPort`` the host that runs the attempt installed (no trio here).
"""

from __future__ import annotations

import abc
import contextvars
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from roost._errors import Error, ErrorKind
from roost.actors._current import activity_context, bind_node, set_current

__all__ = [
    "ActivityInfo",
    "ActivityPort",
    "activity_info",
    "heartbeat",
    "install_port",
    "prepare_base",
]


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


class ActivityPort(abc.ABC):
    """What a running activity asks of the host that runs its attempt (one per attempt).

    The host installs it in the attempt's context (``install_port``, the context
    variable's own setter: one set per attempt, no Python frame) before the activity runs;
    ``roost.activity_info()``, ``roost.heartbeat()`` and ``ctx.get`` read it there.
    ``context`` is the workflow's context values the activity sees through ``ctx.get``
    (None: none).
    """

    __slots__ = ()
    context: Mapping[str, Any] | None

    @abc.abstractmethod
    def info(self) -> ActivityInfo:
        """The attempt's info (the same object on every call)."""

    @abc.abstractmethod
    def heartbeat(self, details: Any) -> None:
        """The activity is alive: reset its heartbeat timeout (a no-op without one)."""


_port: contextvars.ContextVar[ActivityPort | None] = activity_context

# Installs ``port`` in the calling context (an attempt's own context): the variable's own
# setter, so an attempt's start runs no Python function for it.
install_port: Callable[[ActivityPort], object] = activity_context.set


def activity_info() -> ActivityInfo | None:
    """The running activity's info, or None outside an activity run by a workflow."""
    port = _port.get()
    return port.info() if port is not None else None


def heartbeat(details: Any = None) -> None:
    """Tell roost the running activity is alive (resets its ``heartbeat_timeout``).

    Works from async activities and from sync ones in their worker thread; a no-op in an
    activity without a heartbeat timeout.

    Raises:
        roost.Error: kind InvalidState outside an activity run by a workflow.
    """
    port = _port.get()
    if port is None:
        raise Error(
            "roost.heartbeat() must be called inside an activity run by a workflow",
            kind=ErrorKind.INVALID_STATE,
        )
    port.heartbeat(details)


def prepare_base(node: Any) -> None:
    """Set up the calling context (the base every attempt's context copies) for ``node``."""
    set_current(None)
    bind_node(node)  # roost.state works here though no process is current
