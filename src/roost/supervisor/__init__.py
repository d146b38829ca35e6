"""Supervisors (OTP semantics) and services (Wippy's restart backoff)."""

from roost.supervisor import _declare as _declare  # registers app.supervisor()
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
