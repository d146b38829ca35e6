"""Durable workflows: the deterministic driver, the LMDB-backed runtime, and its API."""

from roost.actors._app import register_extension as _register_extension
from roost.actors._app import register_node_service as _register_node_service
from roost.workflow._activities import ActivityInfo, activity_info, heartbeat
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
from roost.workflow._manager import WorkflowManager as _WorkflowManager
from roost.workflow._retry import RetryPolicy
from roost.workflow._retry import activity_options as _activity_options

# Every node runs the workflow runtime; App.activity validates its options through it.
_register_node_service(_WorkflowManager.start_on)
_register_extension("activity_options", _activity_options)

__all__ = [
    "ActivityInfo",
    "RetryPolicy",
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
