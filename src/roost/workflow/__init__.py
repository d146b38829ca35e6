"""Durable workflows: what their code calls, the driver and its ports, and their hosts' protocol.

A second workflow host builds on ``Driver`` (with its own ``Ports``), the ``Event`` and
``Command`` unions, ``ActivityPort`` for activities, the ``Replayer``, and implements
``WorkflowHost`` (docs/design-notes.md, "The workflow host protocol").
"""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.workflow._activity_info import ActivityInfo, ActivityPort, activity_info, heartbeat
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
    from roost.workflow._driver import Driver
    from roost.workflow._history import Command, Event
    from roost.workflow._host_protocol import (
        Durable,
        NodeServices,
        WorkflowHost,
        WorkflowHostFactory,
    )
    from roost.workflow._ports import Ports
    from roost.workflow._replayer import Replayer
    from roost.workflow._retry import RetryPolicy

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "ActivityInfo": "roost.workflow._activity_info",
    "ActivityPort": "roost.workflow._activity_info",
    "Command": "roost.workflow._history",
    "Driver": "roost.workflow._driver",
    "Durable": "roost.workflow._host_protocol",
    "Event": "roost.workflow._history",
    "NodeServices": "roost.workflow._host_protocol",
    "Ports": "roost.workflow._ports",
    "Replayer": "roost.workflow._replayer",
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
    "ActivityPort",
    "Command",
    "Driver",
    "Durable",
    "Event",
    "NodeServices",
    "Ports",
    "Replayer",
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
