"""Durable workflows: the deterministic driver, the API, and the protocol of their hosts."""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.workflow._activity_info import ActivityInfo, activity_info, heartbeat
    from roost.workflow._api import (
        WorkflowInfo,
        attrs,
        exec,  # noqa: A004 - the API's name (workflow.exec)
        history_length,
        history_size,
        info,
        is_continue_as_new_suggested,
        version,
    )
    from roost.workflow._host_protocol import (
        Durable,
        NodeServices,
        WorkflowHost,
        WorkflowHostFactory,
    )
    from roost.workflow._retry import RetryPolicy

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "ActivityInfo": "roost.workflow._activity_info",
    "Durable": "roost.workflow._host_protocol",
    "NodeServices": "roost.workflow._host_protocol",
    "RetryPolicy": "roost.workflow._retry",
    "WorkflowHost": "roost.workflow._host_protocol",
    "WorkflowHostFactory": "roost.workflow._host_protocol",
    "WorkflowInfo": "roost.workflow._api",
    "activity_info": "roost.workflow._activity_info",
    "attrs": "roost.workflow._api",
    "exec": "roost.workflow._api",
    "heartbeat": "roost.workflow._activity_info",
    "history_length": "roost.workflow._api",
    "history_size": "roost.workflow._api",
    "info": "roost.workflow._api",
    "is_continue_as_new_suggested": "roost.workflow._api",
    "version": "roost.workflow._api",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

__all__ = [
    "ActivityInfo",
    "Durable",
    "NodeServices",
    "RetryPolicy",
    "WorkflowHost",
    "WorkflowHostFactory",
    "WorkflowInfo",
    "activity_info",
    "attrs",
    "exec",
    "heartbeat",
    "history_length",
    "history_size",
    "info",
    "is_continue_as_new_suggested",
    "version",
]
