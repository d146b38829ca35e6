"""Supervisors (OTP semantics) and services (Wippy's restart backoff)."""

import typing as _typing

from roost import _lazy

if _typing.TYPE_CHECKING:
    from roost.supervisor._api import count_children, start_child, terminate_child, which_children
    from roost.supervisor._spec import (
        Backoff,
        ChildInfo,
        ChildSpec,
        ChildType,
        Restart,
        Strategy,
        SupervisorSpec,
        child,
    )

# Where each public name lives; the first use of a name loads its module (PEP 562).
_NAMES = {
    "Backoff": "roost.supervisor._spec",
    "ChildInfo": "roost.supervisor._spec",
    "ChildSpec": "roost.supervisor._spec",
    "ChildType": "roost.supervisor._spec",
    "Restart": "roost.supervisor._spec",
    "Strategy": "roost.supervisor._spec",
    "SupervisorSpec": "roost.supervisor._spec",
    "child": "roost.supervisor._spec",
    "count_children": "roost.supervisor._api",
    "start_child": "roost.supervisor._api",
    "terminate_child": "roost.supervisor._api",
    "which_children": "roost.supervisor._api",
}
__getattr__, __dir__ = _lazy.attach(__name__, _NAMES)

__all__ = [
    "Backoff",
    "ChildInfo",
    "ChildSpec",
    "ChildType",
    "Restart",
    "Strategy",
    "SupervisorSpec",
    "child",
    "count_children",
    "start_child",
    "terminate_child",
    "which_children",
]
