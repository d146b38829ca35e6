"""``roost.funcs``: call activities (durable inside workflows, direct elsewhere)."""

from roost.actors._funcs import ActivityHandle, Executor
from roost.actors._funcs import funcs_call as call
from roost.actors._funcs import funcs_new as new
from roost.actors._funcs import funcs_start as start

__all__ = ["ActivityHandle", "Executor", "call", "new", "start"]
